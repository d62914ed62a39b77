#!/bin/sh
# Runs every benchmark binary given as argument, then bench/*.sh; each
# prints key=value lines.
BUILD=${BUILD:-build}
export BUILD
export MAKE_BENCH=1
for b in "$@"; do
	echo "=== $(basename "$b")"
	"$b" || echo "bench_failed=$(basename "$b")"
done
for b in bench/*.sh; do
	[ -e "$b" ] || continue
	echo "=== $(basename "$b" .sh)"
	sh "$b" || echo "bench_failed=$(basename "$b" .sh)"
done
