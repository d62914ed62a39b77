#!/bin/sh
# The quality study (docs/quality.md): every cell of the grid that has no
# result yet in bench/quality/runs/, then docs/quality.md and its plots.
# Hours on 2 cores: resumable, cell by cell (bench/quality.py says how).
# Not part of `make bench` (BENCH_STUDY=1 runs it there).
#   sh bench/quality.sh [run|report] [CELL ...]
set -eu
cd "$(dirname "$0")/.."
if [ "${MAKE_BENCH:-}" = 1 ] && [ "${BENCH_STUDY:-}" != 1 ]; then
	echo "quality_study=skipped (BENCH_STUDY=1 runs it: hours)"
	exit 0
fi
# the default job reads the kernel's documentation
[ -n "${JOB:-}" ] || sh scripts/deps.sh study
PYTHONPATH=bench exec /usr/bin/python3 bench/quality.py "$@"
