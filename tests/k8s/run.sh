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

# Two lanes side by side (LANES=1: one after another). The tests are
# mostly waits on the API server, so two at a time take about half the
# time. test_crd runs alone first: it puts an older CRD in place for a
# while, and a job another test made then would lose its newer fields.
# The tests that change what every namespace sees (cluster-wide RBAC,
# the ddiloco-system namespace, a kwok node's labels and resources, Kueue's
# kinds) run one after another in lane 1; the tests that keep to a
# namespace of their own are a queue both lanes take from, lane 1 once
# its own are done.
CLUSTER_WIDE=" test_operator test_rbac test_security test_watchns test_template test_kueue test_suspend "
ALONE=" test_crd "
LANES=${LANES:-2}
res=$RUN/results
rm -rf "$res"
mkdir -p "$res"
: >"$res/print.lock"

# one TEST's run: its log shown whole when it ends (one at a time, under
# a lock), and "RC SECONDS" in $res/NAME
run_one() {
	local t=$1 name t0 rc
	name=$(basename "$t" .sh)
	t0=$(date +%s)
	# into a file, then shown: a process a test left behind cannot hold a pipe open
	timeout 600 bash "$t" 9>&- >"$RUN/logs/$name.out" 2>&1
	rc=$?
	echo "$rc $(($(date +%s) - t0))" >"$res/$name"
	{
		flock 8
		cat "$RUN/logs/$name.out"
		if [ "$rc" = 0 ]; then
			echo "PASS $name ($(($(date +%s) - t0)) s)"
		else
			echo "FAIL $name ($(($(date +%s) - t0)) s)"
		fi
	} 8>>"$res/print.lock"
}
# the tests ONLY picks, in KIND: 0 those that run alone, 1 the
# cluster-wide ones, 2 the rest (the longest first, so the lanes end
# together)
LONGEST="test_failure test_progress test_chaos test_pending test_shards"
picked() {
	local t name kind
	{
		for t in $LONGEST; do [ -e "$HERE/$t.sh" ] && echo "$HERE/$t.sh"; done
		for t in "$HERE"/test_*.sh; do
			case " $LONGEST " in *" $(basename "$t" .sh) "*) continue ;; esac
			echo "$t"
		done
	} | while read -r t; do
		name=$(basename "$t" .sh)
		case $name in *"${ONLY:-}"*) ;; *) continue ;; esac
		case "$ALONE" in *" $name "*) kind=0 ;; *)
			case "$CLUSTER_WIDE" in *" $name "*) kind=1 ;; *) kind=2 ;; esac ;;
		esac
		[ "$kind" = "$1" ] && echo "$t"
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
	{ picked 0; picked 1; picked 2; } >"$res/queue"
	drain
else
	picked 2 >"$res/queue"
	for t in $(picked 0); do run_one "$t"; done
	# lane 1: the cluster-wide tests one after another, then the queue
	{ for t in $(picked 1); do run_one "$t"; done; drain; } &
	lane1=$!
	drain
	wait "$lane1"
fi
pass=0 fail=0 failed=""
for f in "$res"/test_*; do
	[ -e "$f" ] || continue
	read -r rc _ <"$f"
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
