"""The learners' last lines in a run folder, for the tests that check
that their lr schedule followed the job's tokens (docs/abi.md, The job's
schedule)."""
import os
import re


def schedule_ends(run, learners):
    """(learner, own steps or None, schedule step, horizon) of each
    learner whose log says where its schedule ended (its last process's
    `schedule step S of D`); a learner restarted as the job ended has
    none."""
    out = []
    for i in range(learners):
        with open(os.path.join(run, "learner-%d.log" % i)) as f:
            log = f.read()
        own = re.findall(r"job done at step (\d+)", log)
        m = re.findall(r"schedule step (\d+) of (\d+)", log)
        if m:
            out.append((i, int(own[-1]) if own else None, int(m[-1][0]),
                        int(m[-1][1])))
    return out
