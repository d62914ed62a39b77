#!/usr/bin/python3
"""make wheel: the Python package as a wheel that carries its library.

    python3 scripts/wheel.py BUILD OUTDIR

writes OUTDIR/ddiloco-VERSION-py3-none-linux_<arch>.whl: python/ddiloco,
and under ddiloco/_lib libddiloco.so with every library it needs but
glibc's (ldd lists them; its DT_RPATH $ORIGIN finds them beside it). The
package loads that copy when DDILOCO_LIB is unset (docs/abi.md, The
library in your image). VERSION is python/pyproject.toml's. Standard
library only: a wheel is a zip with METADATA, WHEEL and RECORD.
"""
import base64
import hashlib
import os
import platform
import re
import subprocess
import sys
import zipfile

GLIBC = re.compile(r"/(libc|libm|libpthread|libdl|librt|libresolv)\.so")


def needed(so):
    """The libraries ldd resolves for so, glibc's own left out."""
    out = subprocess.run(["ldd", so], capture_output=True, text=True,
                         check=True).stdout
    if "not found" in out:
        sys.exit("wheel: ldd %s: a library is not found" % so)
    libs = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "=>" and parts[2].startswith("/"):
            if not GLIBC.search(parts[2]):
                libs.append(parts[2])
    return libs


def digest(data):
    d = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + d.decode()


def main(build, outdir):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    toml = open(os.path.join(root, "python", "pyproject.toml")).read()
    version = re.search(r'^version = "([^"]+)"', toml, re.M).group(1)
    so = os.path.join(build, "libddiloco.so")
    if not os.path.exists(so):
        sys.exit("wheel: '%s' is missing: run make first" % so)
    files = []   # (name in the wheel, bytes)
    pkg = os.path.join(root, "python", "ddiloco")
    for f in sorted(os.listdir(pkg)):
        if f.endswith(".py"):
            files.append(("ddiloco/" + f, open(os.path.join(pkg, f), "rb").read()))
    files.append(("ddiloco/_lib/libddiloco.so", open(so, "rb").read()))
    for lib in needed(so):
        files.append(("ddiloco/_lib/" + os.path.basename(lib),
                      open(os.path.realpath(lib), "rb").read()))
    tag = "py3-none-linux_" + platform.machine()
    info = "ddiloco-%s.dist-info" % version
    files.append((info + "/METADATA", (
        "Metadata-Version: 2.1\nName: ddiloco\nVersion: %s\n"
        "Summary: Decoupled DiLoCo learners in Python: the exchange over "
        "libddiloco.so, and the reference GPT in PyTorch\n"
        "Requires-Python: >=3.9\nRequires-Dist: numpy\n" % version).encode()))
    files.append((info + "/WHEEL", (
        "Wheel-Version: 1.0\nGenerator: ddiloco scripts/wheel.py\n"
        "Root-Is-Purelib: false\nTag: %s\n" % tag).encode()))
    record = "".join("%s,%s,%d\n" % (n, digest(d), len(d)) for n, d in files)
    record += info + "/RECORD,,\n"
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, "ddiloco-%s-%s.whl" % (version, tag))
    with zipfile.ZipFile(path + ".part", "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in files:
            zi = zipfile.ZipInfo(n, date_time=(1980, 1, 1, 0, 0, 0))
            zi.external_attr = (0o755 if "/_lib/" in n else 0o644) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, d)
        z.writestr(zipfile.ZipInfo(info + "/RECORD", date_time=(1980, 1, 1, 0, 0, 0)),
                   record)
    os.replace(path + ".part", path)
    print("wheel: %s, %d files, %.1f MiB" % (path, len(files) + 1,
                                              os.path.getsize(path) / 1048576))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python3 scripts/wheel.py BUILD OUTDIR")
    main(sys.argv[1], sys.argv[2])
