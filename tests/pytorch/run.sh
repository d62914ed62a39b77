#!/bin/sh
# make test-pytorch: every tests/pytorch/test_*.py with Debian's torch
# (each starts with #!/usr/bin/python3, not a python3 that comes first on
# PATH), through scripts/run-tests.sh: ends with one line
# "N passed, N failed"; ONLY=pattern restricts them. One at a time (JOBS
# 1): they are whole jobs, with chaos kills at set times and schedule
# bounds that count wall time.
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
export BUILD
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export DDILOCO_LIB="$PWD/$BUILD/libddiloco.so"
JOBS=1 SCRIPTS=tests/pytorch exec sh scripts/run-tests.sh tests/pytorch/test_*.py
