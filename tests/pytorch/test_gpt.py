#!/usr/bin/python3
"""The reference GPT in PyTorch against the C learner: same initial
weights (the job's, what `ddiloco train` starts from), same batches, same
optimizer; the two loss curves are printed and must agree within 1e-3
relative at every one of the first 30 steps."""
import os
import re
import shutil
import subprocess
import tempfile
import unittest

import ddiloco
import ddiloco.gpt as gpt

STEPS = 30
RTOL = 1e-3
JOB = """apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: gptcmp}
spec:
  learners: {replicas: 1}
  model: {vocabSize: 256, context: 32, layers: 2, heads: 4, channels: 32,
          tied: %s, seed: 42}
  data: {path: /usr/share/games/fortunes}
  optimizer: {lr: 0.003, warmupSteps: 5, batchSize: 4, weightDecay: 0.1,
              gradClip: %s}
  budget: {tokens: 12800}
"""


def c_losses(job):
    exe = os.path.join(os.environ.get("BUILD", "build"), "ddiloco")
    out = subprocess.run([exe, "train", job, "--steps", str(STEPS),
                          "--log-every", "1"], check=True,
                         capture_output=True, text=True).stdout
    return [float(x) for x in re.findall(r"^step \d+/\d+ loss=([0-9.]+)",
                                         out, re.M)]


def torch_losses(job):
    with ddiloco.Learner(job, exchange="") as l:
        t = gpt.Trainer(l.job, 0, 1)
        l.init_params(t.flat)
        return [t.step() for _ in range(STEPS)]


class SameAsC(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ddgpt-")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def compare(self, tied, clip):
        job = os.path.join(self.dir, "job.yaml")
        with open(job, "w") as f:
            f.write(JOB % (tied, clip))
        c, p = c_losses(job), torch_losses(job)
        self.assertEqual(len(c), STEPS)
        print("\ntied %s, gradClip %s: step, C loss, PyTorch loss, "
              "relative difference" % (tied, clip))
        worst = 0.0
        for i, (a, b) in enumerate(zip(c, p)):
            d = abs(a - b) / a
            worst = max(worst, d)
            print("%4d %8.4f %10.6f %9.2e" % (i + 1, a, b, d))
        print("worst relative difference %.2e (tolerance %.0e)"
              % (worst, RTOL))
        self.assertLess(worst, RTOL)
        # it trained: the loss went down from ln(256) = 5.55
        self.assertLess(c[-1], c[0] - 1.0)

    def test_tied_clipped(self):
        self.compare("true", "1.0")

    def test_untied_unclipped(self):
        self.compare("false", "0")


if __name__ == "__main__":
    unittest.main(verbosity=2)
