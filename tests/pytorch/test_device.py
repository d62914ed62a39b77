#!/usr/bin/python3
"""A model on another device (docs/abi.md, GPUs): the job of
examples/pytorch/external.yaml with its learners on `--device copy`, the
path a CUDA learner takes (Learner.poll_device: a host copy meets the
exchange, each poll copies to it only the fragments it reads and back
only those it wrote), a second CPU buffer standing for the GPU this
machine does not have. The job ends done with no step merged twice, the
learners' loss falls below 0.05 as on the CPU path, and the values
copied per poll are a small part of the model's (the whole model each
way per step before: 2 x 1217)."""
import json
import os
import re
import shutil
import tempfile
import unittest

import yaml

from test_external import read, run_job

JOB = "examples/pytorch/external.yaml"


class DevicePath(unittest.TestCase):
    def setUp(self):
        self.build = os.environ.get("BUILD", "build")
        self.tmp = tempfile.mkdtemp(prefix="dddev-")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def test_fragments_copied_only(self):
        with open(JOB) as f:
            job = yaml.safe_load(f)
        job["spec"]["learners"]["args"] = ["--device", "copy"]
        path = os.path.join(self.tmp, "job.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(job, f)
        run = os.path.join(self.tmp, "run")
        r = run_job(self.build, path, run)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        rep = json.loads(read(run, "report.json"))
        self.assertEqual(rep["outcome"], "done")
        self.assertEqual(rep["invariants"]["double_merged_steps"], 0)
        self.assertGreater(rep["rounds"], 50)
        for i in range(3):
            log = read(run, "learner-%d.log" % i)
            m = re.findall(r"job done at step (\d+), loss ([0-9.e-]+)", log)
            self.assertTrue(m, log[-2000:])
            self.assertLess(float(m[-1][1]), 0.05, log[-1000:])
            c = re.search(r"device copy: (\d+) polls copied (\d+) values to "
                          r"the host and (\d+) back, ([0-9.]+) per poll, "
                          r"the model (\d+)", log)
            self.assertTrue(c, log[-1000:])
            polls, out, back, per, model = (int(c.group(1)), int(c.group(2)),
                                            int(c.group(3)), float(c.group(4)),
                                            int(c.group(5)))
            print("learner-%d: %d polls, %d values out, %d back, %.1f a poll "
                  "(the model %d), loss %s" % (i, polls, out, back, per, model,
                                               m[-1][1]))
            self.assertGreater(polls, 100)
            # pulls and updates did move values, each way
            self.assertGreater(out, 0)
            self.assertGreater(back, 0)
            # a poll moved a tenth of the model or less on average
            self.assertLess(per, 0.1 * 2 * model)


if __name__ == "__main__":
    unittest.main()
