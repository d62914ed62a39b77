#!/bin/sh
# Runs the unit test binaries given as arguments, then every
# tests/integration/test_*.sh (SCRIPTS=DIR: DIR/test_*.sh instead), and
# ends with one line "N passed, N failed"; each test's time follows it.
#
# The unit binaries run JOBS at a time (default: the processors, nproc),
# each one's output kept in a file and printed whole when it ends, in the
# order they end. The integration tests run one after another: several
# assert on times (uptime, round gaps, rates) that a shared processor
# would stretch.
#
# ONLY=pattern restricts both to names containing the pattern; SKIP="a b"
# leaves out the tests of those names (and says so); INTEGRATION="a b"
# runs only those integration tests (make check's list; unset or "all":
# every one).
BUILD=${BUILD:-build}
export BUILD
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 1)}
pass=0
fail=0
failed=""
out=$(mktemp -d /tmp/ddiloco-tests-XXXXXX)
# timeout(1) runs each test in a process group of its own, out of reach
# of a Ctrl-C: an interrupted run ends the unit tests still running
# through their timeout (which passes the TERM on)
trap 'rm -rf "$out"' EXIT
trap 'for f in "$out"/*.pid; do [ -e "$f" ] && kill "$(cat "$f")" 2>/dev/null; done; exit 130' INT TERM

# wanted NAME [integration]: ONLY, SKIP and, for an integration test,
# INTEGRATION; 1 (false) when it is not to run
wanted() {
	case "$1" in *"${ONLY:-}"*) ;; *) return 1 ;; esac
	case " ${SKIP:-} " in *" $1 "*)
		echo "--- $1: skipped (SKIP)"
		return 1 ;;
	esac
	if [ -n "${2:-}" ] && [ -n "${INTEGRATION+set}" ] &&
	   [ "$INTEGRATION" != all ]; then
		case " $INTEGRATION " in *" $1 "*) ;; *)
			echo "--- $1: skipped (not in INTEGRATION)"
			return 1 ;;
		esac
	fi
	return 0
}

# counted NAME RC SECONDS: the test's verdict line, and the counts
counted() {
	if [ "$2" -eq 0 ]; then
		pass=$((pass + 1))
		echo "--- $1: $3 s"
	else
		fail=$((fail + 1))
		failed="$failed $1"
		echo "--- FAILED: $1 ($3 s)"
	fi
}

# the unit binaries: each writes NAME.log and NAME.rc ("RC SECONDS"),
# then its name on the fifo; the loop prints a test whole once it is there
mkfifo "$out/ended"
exec 3<>"$out/ended"
running=0
# (sh has no local variables: these names are report's own)
report() {
	read -r r_name <&3
	echo "=== $r_name"
	cat "$out/$r_name.log"
	read -r r_rc r_t < "$out/$r_name.rc"
	counted "$r_name" "$r_rc" "$r_t"
	running=$((running - 1))
}
t_units=$(date +%s)
for t in "$@"; do
	name=$(basename "$t")
	wanted "$name" || continue
	[ "$running" -lt "$JOBS" ] || report
	(
		t0=$(date +%s)
		rc=0
		timeout "${TEST_TIMEOUT:-900}" "$t" > "$out/$name.log" 2>&1 < /dev/null &
		echo $! > "$out/$name.pid"
		wait $! || rc=$?
		# (quiet: after an interrupt the folder is gone)
		{
			rm -f "$out/$name.pid"
			echo "$rc $(($(date +%s) - t0))" > "$out/$name.rc"
			echo "$name" >&3
		} 2>/dev/null
	) &
	running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
	report
done
wait
[ $# -gt 0 ] && echo "--- unit tests: $(($(date +%s) - t_units)) s, $JOBS at a time"

for t in "${SCRIPTS:-tests/integration}"/test_*.sh; do
	[ -e "$t" ] || continue
	name=$(basename "$t" .sh)
	wanted "$name" integration || continue
	echo "=== $name"
	t0=$(date +%s)
	rc=0
	timeout "${TEST_TIMEOUT:-900}" sh "$t" || rc=$?
	counted "$name" "$rc" "$(($(date +%s) - t0))"
done
[ -n "$failed" ] && echo "failed:$failed"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
