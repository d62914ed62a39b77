#!/bin/sh
# Runs the fuzz harnesses given as names (build/fuzz/fuzz_NAME),
# FUZZ_JOBS at a time (default: the machine's cores): first over
# tests/fuzz/regress/NAME (each input once: a crash there is a
# regression), then libFuzzer for FUZZ_SECONDS seconds (or FUZZ_RUNS
# runs, when set, whichever comes first) from tests/fuzz/corpus/NAME
# (copied, so new inputs stay in the build folder). Prints per harness,
# in the order given, the total runs, runs per second and edges covered
# libFuzzer reported, and ends with "N passed, N failed" (passed:
# no crash found). A crashing input is left in $BUILD/crashes/NAME/
# (docs/fuzzing.md).
BUILD=${BUILD:-build/fuzz}
SECONDS_EACH=${FUZZ_SECONDS:-30}
JOBS=${FUZZ_JOBS:-$(nproc)}
pass=0
fail=0
failed=""

# One harness; its lines into $BUILD/fuzz_NAME.out, "ok" or "fail" into
# $BUILD/fuzz_NAME.result.
one() {
	name=$1
	bin=$BUILD/fuzz_$name
	work=$BUILD/corpus/$name
	crashes=$BUILD/crashes/$name
	log=$BUILD/fuzz_$name.log
	mkdir -p "$work" "$crashes"
	cp -n tests/fuzz/corpus/"$name"/* "$work"/ 2>/dev/null
	echo "=== fuzz_$name"
	ok=1
	if [ -d tests/fuzz/regress/"$name" ] &&
	   [ -n "$(ls tests/fuzz/regress/"$name")" ]; then
		if ! "$bin" tests/fuzz/regress/"$name"/* >"$log.regress" 2>&1; then
			tail -n 30 "$log.regress"
			echo "--- fuzz_$name: a regression input crashes"
			ok=0
		fi
	fi
	if [ $ok = 1 ]; then
		# -rss_limit_mb: the shared machine; -timeout: a hang is a find
		"$bin" -max_total_time="$SECONDS_EACH" -runs="${FUZZ_RUNS:--1}" \
			-print_final_stats=1 \
			-rss_limit_mb=1024 -timeout=20 -max_len=65536 \
			-artifact_prefix="$crashes/" "$work" >"$log" 2>&1
		rc=$?
		# libFuzzer's own figures (-print_final_stats=1)
		runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
		rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
		secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -n 1)
		cov=$(sed -n 's/^#[0-9]*.*DONE *cov: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)
		echo "fuzz_$name: ${runs:-0} runs in ${secs:-?} s, ${rate:-0} runs/s, ${cov:-?} edges"
		if [ $rc -ne 0 ]; then
			grep -m 3 -E "ERROR|SUMMARY|deadly signal|Test unit written" "$log"
			echo "--- fuzz_$name: crash (log $log)"
			ok=0
		fi
	fi
	[ $ok = 1 ] && echo ok > "$BUILD/fuzz_$name.result" ||
		echo fail > "$BUILD/fuzz_$name.result"
}

mkdir -p "$BUILD"
n=0
for name in "$@"; do
	rm -f "$BUILD/fuzz_$name.result"
	one "$name" > "$BUILD/fuzz_$name.out" 2>&1 &
	n=$((n + 1))
	[ $((n % JOBS)) -eq 0 ] && wait
done
wait
for name in "$@"; do
	cat "$BUILD/fuzz_$name.out"
	if [ "$(cat "$BUILD/fuzz_$name.result" 2>/dev/null)" = ok ]; then
		pass=$((pass + 1))
	else
		fail=$((fail + 1))
		failed="$failed fuzz_$name"
	fi
done
[ -n "$failed" ] && echo "failed:$failed"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
