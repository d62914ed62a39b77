#!/usr/bin/python3
"""examples/pytorch/mixed.yaml with `ddiloco run --baseline`: two C
learners and two PyTorch learners train one model; chaos kills learner
pairs during the run (the seed is one that kills a C learner and a
PyTorch learner). From report.json: done, uptime >= 0.99, the final loss
within 5 % of the data-parallel baseline, and the kills and restarts
landed on both kinds."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

from ends import schedule_ends

JOB = "examples/pytorch/mixed.yaml"


class MixedJob(unittest.TestCase):
    def test_mixed_job_under_chaos(self):
        build = os.environ.get("BUILD", "build")
        run = tempfile.mkdtemp(prefix="ddmixed-")
        try:
            self.check(build, os.path.join(run, "run"))
        finally:
            shutil.rmtree(run)

    def check(self, build, run):
        # the Debian torch for the PyTorch learners, whatever python3 is
        # first on PATH
        env = dict(os.environ)
        env.pop("DDILOCO_LIB", None)       # the runner sets it per learner
        r = subprocess.run([os.path.join(build, "ddiloco"), "run", JOB,
                            "--baseline", "--run-dir", run,
                            "--timeout", "900"], env=env,
                           capture_output=True, text=True)
        print(r.stdout[-3000:])
        if r.returncode != 0:
            for name in ("events.log", "learner-2.log", "learner-0.log"):
                p = os.path.join(run, name)
                if os.path.exists(p):
                    with open(p) as f:
                        print("---", name, "\n", f.read()[-3000:])
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        with open(os.path.join(run, "report.json")) as f:
            rep = json.load(f)
        self.assertTrue(rep["success"])
        self.assertEqual(rep["outcome"], "done")
        print("uptime %.4f, final eval loss %.4f, baseline %.4f, loss ratio "
              "%.4f, goodput %.4f" % (rep["uptime"], rep["final_eval_loss"],
                                      rep["baseline"]["final_eval_loss"],
                                      rep["baseline"]["loss_ratio"],
                                      rep["goodput"]))
        self.assertGreaterEqual(rep["uptime"], 0.99)
        self.assertLessEqual(rep["baseline"]["loss_ratio"], 1.05)
        # which learners chaos killed: one C (0, 1) and one PyTorch (2, 3)
        killed = [int(re.search(r"(\d+)$", k["target"]).group(1))
                  for k in rep["kills"]["log"]
                  if k["target"].startswith("learner")]
        print("learners killed:", killed)
        self.assertTrue(any(i < 2 for i in killed), killed)
        self.assertTrue(any(i >= 2 for i in killed), killed)
        restarts = {p["learner"]: p["restarts"] for p in rep["per_learner"]}
        for i in set(killed):
            self.assertGreaterEqual(restarts[i], 1, restarts)
        # the PyTorch learners trained through the exchange, twice for
        # the killed one, and finished with the job
        for i in (2, 3):
            with open(os.path.join(run, "learner-%d.log" % i)) as f:
                log = f.read()
            starts = log.count("learner-%d: PyTorch" % i)
            self.assertGreaterEqual(starts, 2 if i in killed else 1, log)
            m = re.findall(r"job done at step (\d+), loss ([0-9.]+); poll "
                           r"took ([0-9.]+) of step time", log)
            self.assertTrue(m, log[-2000:])
            print("learner-%d (PyTorch): %s steps at the end, last loss %s, "
                  "poll share %s" % (i, *m[-1]))
        with open(os.path.join(run, "learner-0.log")) as f:
            self.assertIn("got the global model", f.read())
        # both kinds' lr schedules followed the job's tokens (docs/abi.md,
        # The job's schedule): each learner that logged its end was near
        # the job's step (the tokens it trained over those of one step of
        # every learner: the horizon times the tokens over the budget),
        # though a PyTorch learner makes a third to a sixth of a C
        # learner's steps
        with open(JOB) as f:
            budget = int(re.search(r"^  budget:\n    tokens: (\d+)", f.read(),
                                   re.M).group(1))
        ends = schedule_ends(run, 4)
        for i, own, sched, decay in ends:
            job_step = decay * rep["tokens"] / budget
            print("learner-%d: %s steps of its own, schedule step %d of %d, "
                  "the job's %.0f" % (i, own, sched, decay, job_step))
            self.assertGreaterEqual(sched, 0.8 * job_step)
            self.assertLessEqual(sched, 1.5 * job_step)
        self.assertGreaterEqual(len(ends), 3)


if __name__ == "__main__":
    unittest.main(verbosity=2)
