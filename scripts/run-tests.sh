#!/bin/sh
# Runs the unit test binaries given as arguments, then every
# tests/integration/test_*.sh (SCRIPTS=DIR: DIR/test_*.sh instead), and
# ends with one line "N passed, N failed"; each test's time follows it.
# ONLY=pattern restricts both to names containing the pattern; SKIP="a b"
# leaves out the tests of those names (and says so).
BUILD=${BUILD:-build}
export BUILD
pass=0
fail=0
failed=""
run_one() {
	name=$1
	shift
	case "$name" in *"${ONLY:-}"*) ;; *) return ;; esac
	case " ${SKIP:-} " in *" $name "*) echo "--- $name: skipped (SKIP)"; return ;; esac
	echo "=== $name"
	t0=$(date +%s)
	if timeout "${TEST_TIMEOUT:-900}" "$@"; then
		pass=$((pass + 1))
		echo "--- $name: $(($(date +%s) - t0)) s"
	else
		fail=$((fail + 1))
		failed="$failed $name"
		echo "--- FAILED: $name ($(($(date +%s) - t0)) s)"
	fi
}
for t in "$@"; do
	run_one "$(basename "$t")" "$t"
done
for t in "${SCRIPTS:-tests/integration}"/test_*.sh; do
	[ -e "$t" ] || continue
	run_one "$(basename "$t" .sh)" sh "$t"
done
[ -n "$failed" ] && echo "failed:$failed"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
