#!/usr/bin/env bash
# The chaos controller against the real control plane (operator as a local
# process):
#  - a job with chaos every 3 s (interval schedule, seeded): the kills
#    happen at the planned times, one at a time (maxDown 1, never two
#    learner pods missing at once), each as a ChaosKill Event, counted in
#    status.chaos; killed learners come back; learners never killed keep
#    their pod (same uid);
#  - a job without chaos in the same namespace is never touched;
#  - disabling chaos stops the kills; a job that ends (its deadline) stops
#    them too, and stays Failed.
# Needs the variables of /tmp/ddiloco-k8s/env (tests/k8s/run.sh sets them).
set -euo pipefail

: "${KUBECTL:?run through make test-k8s}" "${KUBE_SERVER:?}" "${KUBE_CA:?}" "${KUBECONFIG:?}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) BIN=$BUILD/ddiloco ;; *) BIN=$ROOT/$BUILD/ddiloco ;; esac
NS=chaos-$$-$RANDOM
WORK=$(mktemp -d /tmp/test_chaos.XXXXXX)
OP_PID=

fail() {
	echo "test_chaos: FAIL: $*" >&2
	KN get ddjobs,pods -o wide >&2 2>/dev/null || true
	KN get events --sort-by=.lastTimestamp 2>/dev/null | tail -20 >&2 || true
	[ -e "$WORK/op.log" ] && tail -30 "$WORK/op.log" >&2
	exit 1
}
cleanup() {
	local rc=$?
	set +e
	[ -n "$OP_PID" ] && kill "$OP_PID" 2>/dev/null && wait "$OP_PID" 2>/dev/null
	"$KUBECTL" delete namespace "$NS" --wait=false >/dev/null 2>&1
	rm -rf "$WORK"
	exit "$rc"
}
. "$ROOT/tests/k8s/lib.sh"
trap cleanup EXIT
phase_is() { [ "$(jp "ddjob/$1" '{.status.phase}')" = "$2" ]; }
uids() { KN get pods -l ddiloco.io/job="$1",ddiloco.io/role=learner \
	-o jsonpath='{range .items[*]}{.metadata.name}={.metadata.uid}{"\n"}{end}' | sort; }
kills() { KN get events --field-selector "involvedObject.name=$1,reason=ChaosKill" \
	-o jsonpath='{range .items[*]}{.message}{"\n"}{end}' 2>/dev/null | sort -t' ' -k3,3n; }
nkills() { kills "$1" | grep -c . || true; }

[ -x "$BIN" ] || fail "no $BIN (make first)"
apply_crd
"$KUBECTL" create namespace "$NS" >/dev/null

job() {   # job NAME REPLICAS EXTRA-SPEC-LINES
	cat <<EOF
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: $1}
spec:
  learners: {replicas: $2}
  syncer: {storage: ""}
  data: {path: /data/tiny.txt}
$3
EOF
}
job calm 3 "" | KN apply -f - >/dev/null
job wild 4 "  chaos: {enabled: true, schedule: interval, intervalSeconds: 4, startAfterSeconds: 2, maxDown: 1, seed: 7, targets: [learners]}" \
	| KN apply -f - >/dev/null

"$BIN" operator --kubeconfig "$KUBECONFIG" --namespace "$NS" --http 127.0.0.1:0 \
	>"$WORK/op.log" 2>&1 &
OP_PID=$!
until_ok 90 "calm Running" phase_is calm Running
until_ok 90 "wild Running" phase_is wild Running
CALM=$(uids calm)
W0=$(uids wild)

# watch the wild job: never two of its learners missing or unready at once
: >"$WORK/down.txt"
end=$(($(date +%s) + 20))
while [ "$(date +%s)" -lt "$end" ]; do
	ready=$(KN get pods -l ddiloco.io/job=wild,ddiloco.io/role=learner \
		-o jsonpath='{range .items[*]}{.metadata.deletionTimestamp}{"|"}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' \
		| grep -c '^|True$' || true)
	echo "$((4 - ready))" >>"$WORK/down.txt"
	sleep 0.3
done
max_down=$(sort -n "$WORK/down.txt" | tail -1)
[ "$max_down" -le 1 ] || fail "$max_down learners down at once (maxDown 1)"
# read once: a kill may land between two reads
kills wild >"$WORK/kills.txt"
n=$(grep -c . "$WORK/kills.txt" || true)
[ "$n" -ge 3 ] || fail "only $n kills in 20 s with a 4 s interval"
# the planned times of an interval schedule: start + 2 + 4k, k = 1, 2, ...
# (a time is skipped, never moved, when a learner is still down)
sed -n 's/^chaos kill \([0-9]*\): pod wild-learner-[0-3] deleted (planned at \([0-9.]*\)s after start.*/\1 \2/p' \
	"$WORK/kills.txt" >"$WORK/planned.txt"
[ "$(wc -l <"$WORK/planned.txt")" = "$n" ] || { cat "$WORK/kills.txt" >&2; fail "kill events not understood"; }
awk 'BEGIN { prev = 0 }
     { k = ($2 - 2) / 4; if ($1 != NR || k < 1 || k != int(k) || $2 <= prev) exit 1; prev = $2 }' \
	"$WORK/planned.txt" || { cat "$WORK/kills.txt" >&2; fail "kills off the planned schedule"; }
until_ok 30 "status.chaos counts the kills" "test \"\$(jp ddjob/wild '{.status.chaos.kills}')\" -ge 3"
[ "$(jp ddjob/wild '{.status.chaos.active}')" = true ] || fail "status.chaos.active"
[ -n "$(jp ddjob/wild '{.status.chaos.nextKill}')" ] || fail "status.chaos.nextKill"
# killed learners come back; learners never killed keep their pod
until_ok 60 "killed learners back" "test \"\$(KN get pods -l ddiloco.io/job=wild,ddiloco.io/role=learner -o name | wc -l)\" = 4"
W1=$(uids wild)
# kills go on meanwhile: a pod replaced before the uids were read has its
# kill event already, so the events read after them name every victim
kills wild >"$WORK/kills-after.txt"
victims=$(grep -o 'wild-learner-[0-9]*' "$WORK/kills.txt" | sort -u)
victims_after=$(grep -o 'wild-learner-[0-9]*' "$WORK/kills-after.txt" | sort -u)
for line in $W0; do
	pod=${line%%=*}
	if echo "$victims" | grep -qx "$pod"; then
		echo "$W1" | grep -qx "$line" && fail "$pod was killed but has its old uid"
	else
		echo "$victims_after" | grep -qx "$pod" ||
			echo "$W1" | grep -qx "$line" || fail "$pod was never killed but was replaced"
	fi
done
# the job without chaos was never touched
[ "$(uids calm)" = "$CALM" ] || fail "the job without chaos lost a pod"
[ "$(KN get events --field-selector involvedObject.name=calm,reason=ChaosKill -o name | wc -l)" = 0 ] \
	|| fail "chaos event on the calm job"

# disabling chaos stops it
KN patch ddjob wild --type merge -p '{"spec":{"chaos":{"enabled":false}}}' >/dev/null
# counted from when the operator says it took the change, not from a
# moment after the patch; then a bounded negative check: no kill in 7 s,
# more than the 4 s interval at which the next would have come
until_ok 30 "status.chaos inactive" "test \"\$(jp ddjob/wild '{.status.chaos.active}')\" = false"
n0=$(nkills wild)
sleep 7
[ "$(nkills wild)" = "$n0" ] || fail "kills went on after chaos was disabled"

# a job that ends stops its chaos: a kill every 2 s, and backoffLimit 1
# that the kills never pass (a chaos kill is a disruption, not a failure:
# docs/operator.md, Failure policy) until activeDeadlineSeconds ends it
job brief 2 "  backoffLimit: 1
  activeDeadlineSeconds: 12
  chaos: {enabled: true, schedule: interval, intervalSeconds: 2, startAfterSeconds: 1, maxDown: 1, seed: 3}" \
	| KN apply -f - >/dev/null
until_ok 90 "brief Failed" phase_is brief Failed
[ "$(jp ddjob/brief '{.status.conditions[?(@.type=="Failed")].reason}')" = DeadlineExceeded ] \
	|| fail "brief failed for another reason: $(jp ddjob/brief '{.status.conditions[?(@.type=="Failed")].message}')"
[ "$(nkills brief)" -ge 2 ] || fail "brief had $(nkills brief) kills before its deadline"
n0=$(nkills brief)
sleep 6
[ "$(nkills brief)" = "$n0" ] || fail "kills went on after the job ended"
phase_is brief Failed || fail "a Failed job left Failed"
[ "$(KN get pods -l ddiloco.io/job=brief,ddiloco.io/role=learner -o name | wc -l)" = 0 ] \
	|| fail "a Failed job kept or got learner pods"
echo "test_chaos: ok"
