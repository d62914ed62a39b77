#!/usr/bin/python3
"""make wheel (scripts/wheel.py): the wheel pip installs carries
libddiloco.so and the libraries it needs, and the package installed from
it loads that copy with no DDILOCO_LIB, no checkout and no ddiloco on
PATH (docs/abi.md, The library in your image)."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, os.environ.get("BUILD", "build"))


class Wheel(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ddwheel-")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def test_installed_wheel_loads_its_own_library(self):
        out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "wheel.py"),
                              BUILD, self.dir], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        whl = [f for f in os.listdir(self.dir) if f.endswith(".whl")]
        self.assertEqual(len(whl), 1)
        names = zipfile.ZipFile(os.path.join(self.dir, whl[0])).namelist()
        for want in ("ddiloco/__init__.py", "ddiloco/gpt.py",
                     "ddiloco/_lib/libddiloco.so", "ddiloco/_lib/libopenblas.so.0"):
            self.assertIn(want, names)
        self.assertNotIn("ddiloco/_lib/libc.so.6", names)
        target = os.path.join(self.dir, "site")
        pip = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps",
                              "--no-index", "--target", target,
                              os.path.join(self.dir, whl[0])],
                             capture_output=True, text=True)
        self.assertEqual(pip.returncode, 0, pip.stdout + pip.stderr)
        env = {k: v for k, v in os.environ.items()
               if k not in ("DDILOCO_LIB", "PYTHONPATH", "LD_LIBRARY_PATH")}
        env["PYTHONPATH"] = target
        env["PATH"] = "/usr/bin:/bin"          # no ddiloco beside a binary
        run = subprocess.run([sys.executable, "-c",
                              "import ddiloco; lib = ddiloco.load_library(); "
                              "print(ddiloco.library_path()); print(lib.ddiloco_abi_version())"],
                             capture_output=True, text=True, env=env, cwd=self.dir)
        self.assertEqual(run.returncode, 0, run.stderr)
        path, abi = run.stdout.split()
        self.assertEqual(os.path.realpath(path),
                         os.path.realpath(os.path.join(target, "ddiloco", "_lib",
                                                       "libddiloco.so")))
        self.assertEqual(int(abi), 1)


if __name__ == "__main__":
    unittest.main()
