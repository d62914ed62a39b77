#!/usr/bin/python3
"""A PyTorch learner for `ddiloco run`: the reference GPT (ddiloco.gpt)
trained by an ordinary loop, with the three lines marked "ddiloco" added.

`ddiloco run` starts it for the learners whose command it is
(spec.learners.command or a group's, mixed.yaml) with DDILOCO_JOB_FILE,
DDILOCO_EXCHANGE, DDILOCO_LEARNER_ID and DDILOCO_LIB set (docs/abi.md).
"""
import os
import sys

try:
    import ddiloco
except ImportError:          # run from a checkout: the package is in python/
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                    "python"))
    import ddiloco
from ddiloco import gpt

index = ddiloco.env_learner()
learner = ddiloco.Learner()                                    # ddiloco: open
job = learner.job
trainer = gpt.Trainer(job, index, job["learners"]["replicas"],
                      flat=learner.new_buffer())
if not learner.start(trainer.flat):                            # ddiloco: start
    sys.exit(0)                                  # the job was already done
print("learner-%d: PyTorch, %d parameters in one buffer, %d fragments"
      % (index, learner.num_params, learner.num_fragments), flush=True)

steps = 0
while True:
    # optional: a learner restarted mid-job takes the job's step (schedule
    # and data) from its sidecar, as `ddiloco learner` does
    step = learner.resume_step()
    if step is not None and trainer.resume_at(step):
        print("learner-%d: resuming at step %d" % (index, step), flush=True)
    # optional: the lr schedule follows the job's tokens, not this
    # learner's steps, as `ddiloco learner` does (docs/abi.md)
    trainer.sched = learner.schedule_step(trainer.step_count,
                                          trainer.B * trainer.T)
    loss = trainer.step()
    steps += 1
    if learner.poll(trainer.flat, trainer.step_count,          # ddiloco: poll
                    trainer.B * trainer.T, loss):
        break

poll, train = learner.times()
print("learner-%d: job done at step %d, loss %.4f; poll took %.4f of step "
      "time (%d steps, step %.1f ms, poll %.3f ms); schedule step %d of %d"
      % (index, trainer.step_count, loss, poll / train, steps,
         train / steps * 1e3, poll / steps * 1e3, trainer.sched,
         trainer.decay), flush=True)
