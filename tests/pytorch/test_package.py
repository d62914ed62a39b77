#!/usr/bin/python3
"""python/ddiloco over libddiloco.so: the table, the job, errors, and
parameters that are views of one flat buffer (no exchange needed)."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

import ddiloco
import ddiloco.gpt as gpt

JOB = """apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: pkg}
spec:
  learners: {replicas: 3}
  model: {vocabSize: 256, context: 16, layers: 2, heads: 2, channels: 16,
          tied: %s, seed: 5}
  data: {path: %s, valFraction: 0.25}
  optimizer: {batchSize: 2, warmupSteps: 4}
  syncer: {fragments: 3}
  budget: {tokens: 4000}
"""


class Package(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="ddpkg-")
        cls.data = os.path.join(cls.dir, "data.txt")
        with open(cls.data, "wb") as f:
            f.write(bytes(range(256)) * 8)
        cls.jobs = {}
        for tied in ("true", "false"):
            p = os.path.join(cls.dir, "job-%s.yaml" % tied)
            with open(p, "w") as f:
                f.write(JOB % (tied, cls.data))
            cls.jobs[tied] = p

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir)

    def test_table_is_the_c_learners(self):
        for tied, path in self.jobs.items():
            with ddiloco.Learner(path, exchange="") as l:
                cfg = gpt.Config.from_job(l.job)
                want = gpt.tensor_table(cfg)
                self.assertEqual([(t.name, t.shape, t.decayed, t.embedding)
                                  for t in l.tensors], want)
                self.assertEqual(l.num_params,
                                 sum(t.numel for t in l.tensors))
                self.assertEqual(l.tensors[-1].name,
                                 "lnfb" if tied == "true" else "lm_head")
                self.assertEqual(l.num_fragments, 3)
                # the GPT's parameters are laid out as the table says
                m = gpt.GPT(cfg)
                for t in l.tensors:
                    p = m.p[t.name]
                    self.assertEqual(p.data_ptr() - m.flat.data_ptr(),
                                     4 * t.offset, t.name)

    def test_job_and_schedule(self):
        with ddiloco.Learner(self.jobs["true"], exchange="") as l:
            o = l.job["optimizer"]
            self.assertEqual(o["seqLen"], 16)
            self.assertEqual(o["batchSize"], 2)
            self.assertAlmostEqual(o["lr"], 4e-4)
            self.assertEqual(l.job["learners"]["replicas"], 3)
            for m in (1, 2, 3):
                self.assertEqual(gpt.decay_steps(l.job, m), l.decay_steps(m))
            self.assertEqual(l.decay_steps(3), 4000 // (3 * 2 * 16))
            # no exchange, no update: the schedule is the learner's own
            # step (tests/unit/test_abi.c has the job's count arriving)
            self.assertEqual(l.job_tokens(), 0)
            self.assertEqual(l.schedule_step(17, 2 * 16), 17)

    def test_errors(self):
        with self.assertRaisesRegex(ddiloco.Error, "nothere.yaml"):
            ddiloco.Learner(os.path.join(self.dir, "nothere.yaml"))
        with self.assertRaisesRegex(ddiloco.Error, "not a multiple"):
            ddiloco.Learner(model={"vocabSize": 16, "context": 8,
                                   "layers": 1, "heads": 3, "channels": 8})
        with ddiloco.Learner(self.jobs["true"], exchange="") as l:
            with self.assertRaisesRegex(ddiloco.Error, "without an exchange"):
                l.start(l.new_buffer(), timeout=0)
            with self.assertRaisesRegex(ddiloco.Error, "values, the model"):
                l.poll(torch.zeros(3), 1, 1, 1.0)
            with self.assertRaisesRegex(ddiloco.Error, "float32"):
                l.init_params(torch.zeros(l.num_params, dtype=torch.float64))
            with self.assertRaisesRegex(ddiloco.Error, "contiguous"):
                l.init_params(torch.zeros(2 * l.num_params)[::2])
        env = dict(os.environ, DDILOCO_LIB="/nonexistent/libddiloco.so")
        r = subprocess.run([sys.executable, "-c", "import ddiloco; "
                            "ddiloco.Learner('x.yaml')"], env=env,
                           capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("cannot find libddiloco.so", r.stderr)

    def test_views_share_the_buffer(self):
        with ddiloco.Learner(self.jobs["false"], exchange="") as l:
            flat = l.new_buffer()
            l.init_params(flat)
            ref = np.zeros(l.num_params, dtype=np.float32)
            l.init_params(ref)                    # numpy buffers work too
            self.assertTrue(np.array_equal(flat.numpy(), ref))
            v = l.views(flat)
            flat.add_(1.0)                        # what a poll does
            self.assertTrue(torch.equal(v["h1.fcw"].reshape(-1),
                                        flat[l.tensors[2 + 12 + 8].offset:]
                                        [:v["h1.fcw"].numel()]))
            # bind: a module's own parameters become views, values kept
            cfg = gpt.Config.from_job(l.job)
            params = {t.name: torch.nn.Parameter(torch.randn(*t.shape))
                      for t in l.tensors}
            before = {k: p.detach().clone() for k, p in params.items()}
            flat2 = l.bind(params)
            for k, p in params.items():
                self.assertTrue(torch.equal(p.detach(), before[k]), k)
            flat2.zero_()
            self.assertEqual(float(params["wte"].abs().sum()), 0.0)
            with self.assertRaisesRegex(ddiloco.Error, "missing"):
                l.bind({"wte": params["wte"]})
            bad = dict(params, wpe=torch.nn.Parameter(torch.zeros(3, 3)))
            with self.assertRaisesRegex(ddiloco.Error, "'wpe' is"):
                l.bind(bad)
            del cfg

    def test_data_windows(self):
        """Learner m of M trains at step s on window (s*M + m) mod W."""
        with ddiloco.Learner(self.jobs["true"], exchange="") as l:
            raw = np.fromfile(self.data, dtype=np.uint8).astype(np.int64)
            ntrain = len(raw) - int(len(raw) * 0.25)
            B, T = 2, 16
            W = (ntrain - 1) // (B * T)
            d = gpt.Data(l.job["data"], 256, 1, 3)
            self.assertEqual(d.windows(B, T), W)
            for s in (0, 1, 7, 40):
                w = (s * 3 + 1) % W
                x, y = d.batch(s, B, T)
                want = raw[w * B * T:(w + 1) * B * T + 1]
                self.assertTrue(np.array_equal(x.reshape(-1).numpy(),
                                               want[:-1]))
                self.assertTrue(np.array_equal(y.reshape(-1).numpy(),
                                               want[1:]))

    def test_pip_install(self):
        """pip install ./python, then import it from elsewhere with the
        library found next to `ddiloco` on PATH."""
        here = os.getcwd()
        target = os.path.join(self.dir, "site")
        src = os.path.join(self.dir, "src")     # pip writes build/ into it
        shutil.copytree(os.path.join(here, "python"), src,
                        ignore=shutil.ignore_patterns("__pycache__"))
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                            "--no-deps", "--no-build-isolation", "--no-index",
                            "--target", target, src],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        build = os.path.join(here, os.environ.get("BUILD", "build"))
        env = {"PATH": build + ":/usr/bin:/bin", "PYTHONPATH": target,
               "HOME": self.dir}
        r = subprocess.run([sys.executable, "-c",
                            "import ddiloco, sys; "
                            "l = ddiloco.Learner(sys.argv[1], exchange=''); "
                            "print(ddiloco.__file__, l.num_params)",
                            self.jobs["true"]], env=env, cwd=self.dir,
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith(target), r.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
