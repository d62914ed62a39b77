#!/usr/bin/env bash
# make test-k8s: build what is missing, bring the test control plane up,
# run every tests/k8s/test_*.sh against it, two at a time (below), bring
# it down even when a test fails (a cluster that was already up stays
# up), and end with "N passed, N failed". Runs from two checkouts queue
# on a lock.
#
# Each test runs with the variables of /tmp/ddiloco-k8s/env exported
# (KUBECONFIG KUBE_SERVER KUBE_TOKEN KUBE_CA KUBECTL HELM) and BUILD.
# ONLY=name runs only the tests whose file name contains it; LANES=1 runs
# them one after another.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
CL=$HERE/cluster

. "$CL/common.sh"
"$CL/build.sh" || { echo "0 passed, 1 failed"; exit 1; }
# Hold the cluster lock for the whole run. A cluster that was already up
# (make cluster-up) is used and left running; one started here is stopped.
take_lock
if all_running && api_ready; then
	echo "test-k8s: using the cluster that is already up"
else
	trap '"$CL/down.sh"' EXIT
fi
if ! "$CL/up.sh"; then
	echo "test-k8s: the control plane did not start"
	echo "0 passed, 1 failed"
	exit 1
fi
set -a
. "$RUN/env"
set +a
export BUILD=${BUILD:-build}

# Two lanes (docs/k8s-testing.md, Tests): test_crd alone first, then the
# cluster-wide tests one after another in lane 1, and the namespaced ones
# a queue, the longest first, that both lanes take from.
ALONE=" test_crd "
CLUSTER_WIDE=" test_operator test_rbac test_security test_watchns test_template test_kueue test_suspend "
LONGEST=" test_failure test_progress test_chaos test_pending test_shards "
LANES=${LANES:-2}
res=$RUN/results
rm -rf "$res"
mkdir -p "$res"

# one test's run: its log shown whole when it ends (one at a time, under
# a lock), its exit code in $res/NAME
run_one() {
	local t=$1 name t0 rc verdict=PASS
	name=$(basename "$t" .sh)
	t0=$(date +%s)
	# into a file, then shown: a process a test left behind cannot hold a pipe open
	timeout 600 bash "$t" 9>&- >"$RUN/logs/$name.out" 2>&1
	rc=$?
	echo "$rc" >"$res/$name"
	[ "$rc" = 0 ] || verdict=FAIL
	{
		flock 8
		cat "$RUN/logs/$name.out"
		echo "$verdict $name ($(($(date +%s) - t0)) s)"
	} 8>>"$res/print.lock"
}
# the tests ONLY picks of one CLASS (alone, wide: CLUSTER_WIDE, or rest),
# LONGEST first
picked() {
	local t name class
	{
		for t in $LONGEST; do echo "$HERE/$t.sh"; done
		for t in "$HERE"/test_*.sh; do
			case "$LONGEST" in *" $(basename "$t" .sh) "*) ;; *) echo "$t" ;; esac
		done
	} | while read -r t; do
		name=$(basename "$t" .sh)
		[ -e "$t" ] || continue
		case $name in *"${ONLY:-}"*) ;; *) continue ;; esac
		class=rest
		case "$CLUSTER_WIDE" in *" $name "*) class=wide ;; esac
		case "$ALONE" in *" $name "*) class=alone ;; esac
		[ "$class" = "$1" ] && echo "$t"
	done
}
# a lane: takes the next test of $res/queue until none is left
drain() {
	local t
	while :; do
		t=$(flock "$res/queue" sh -c 'head -n 1 "$1" && sed -i 1d "$1"' _ "$res/queue")
		[ -n "$t" ] || return 0
		run_one "$t"
	done
}
t_tests=$(date +%s)
if [ "$LANES" -lt 2 ]; then
	{ picked alone; picked wide; picked rest; } >"$res/queue"
	drain
else
	picked rest >"$res/queue"
	for t in $(picked alone); do run_one "$t"; done
	# lane 1: the cluster-wide tests one after another, then the queue
	{ for t in $(picked wide); do run_one "$t"; done; drain; } &
	lane1=$!
	drain
	wait "$lane1"
fi
pass=0 fail=0 failed=""
for f in "$res"/test_*; do
	[ -e "$f" ] || continue
	read -r rc <"$f"
	if [ "$rc" = 0 ]; then
		pass=$((pass + 1))
	else
		fail=$((fail + 1))
		failed="$failed $(basename "$f")"
	fi
done
echo "test-k8s: the tests took $(($(date +%s) - t_tests)) s, $LANES lanes"
if [ "$fail" -gt 0 ]; then
	echo "failed:$failed"
	for name in $failed; do   # each failed test's own words, where a log's tail shows them
		grep -h ": FAIL" "$RUN/logs/$name.out" 2>/dev/null | tail -1
	done
	for c in kube-apiserver kube-controller-manager kube-scheduler kwok; do
		echo "--- last lines of $c.log"
		tail -5 "$RUN/logs/$c.log" 2>/dev/null
	done
fi
# bring a cluster started here down before the summary, so it is the last line
if trap -p EXIT | grep -q down.sh; then
	trap - EXIT
	"$CL/down.sh"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
