#!/usr/bin/env bash
# make test-k8s: build what is missing, bring the test control plane up,
# run every tests/k8s/test_*.sh against it, bring it down even when a test
# fails (a cluster that was already up stays up), and end with
# "N passed, N failed". Runs from two checkouts queue on a lock.
#
# Each test runs with the variables of /tmp/ddiloco-k8s/env exported
# (KUBECONFIG KUBE_SERVER KUBE_TOKEN KUBE_CA KUBECTL HELM) and BUILD.
# ONLY=name runs only the tests whose file name contains it.
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

pass=0 fail=0 failed=""
for t in "$HERE"/test_*.sh; do
	[ -e "$t" ] || continue
	name=$(basename "$t" .sh)
	case $name in *"${ONLY:-}"*) ;; *) continue ;; esac
	t0=$(date +%s)
	# into a file, then shown: a process a test left behind cannot hold a pipe open
	timeout 600 bash "$t" 9>&- >"$RUN/logs/$name.out" 2>&1
	rc=$?
	cat "$RUN/logs/$name.out"
	if [ "$rc" = 0 ]; then
		echo "PASS $name ($(($(date +%s) - t0)) s)"
		pass=$((pass + 1))
	else
		echo "FAIL $name ($(($(date +%s) - t0)) s)"
		fail=$((fail + 1))
		failed="$failed $name"
	fi
done
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
