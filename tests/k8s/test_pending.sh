#!/usr/bin/env bash
# A pod that cannot start is named in the job's conditions, not left a
# silent Pending (operator as a local process, kwok nodes):
#  - learners with a nodeSelector no node has (the syncer does not take it):
#    the scheduler marks them Unschedulable; the job's PodsReady condition
#    is False with reason
#    Unschedulable and the scheduler's message, and a Warning Event with
#    that reason is on the job;
#  - the syncer of that job does not take the learners' selector: its pod
#    is Running, Burstable (its own requests);
#  - the selector removed (a new job without it): PodsReady turns True;
#  - job pull (failurePolicy.pendingTimeoutSeconds 15): its learner is
#    bound to a node no kubelet (and no kwok) answers for, and its status
#    written as a kubelet would: ContainerCreating stays PodsStarting for
#    15 s after the pod's creation, then PodsReady names ContainerCreating
#    ("pending since <creation>") and a Warning Event, and stays the same
#    (no status write for 12 s); a failed pull
#    (ImagePullBackOff and the kubelet's message) is named at once.
# Needs the variables of /tmp/ddiloco-k8s/env (tests/k8s/run.sh sets them).
set -euo pipefail

: "${KUBECTL:?run through make test-k8s}" "${KUBE_SERVER:?}" "${KUBE_CA:?}" "${KUBECONFIG:?}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) BIN=$BUILD/ddiloco ;; *) BIN=$ROOT/$BUILD/ddiloco ;; esac
NS=pending-$$-$RANDOM
QUIET=quiet-$NS          # a node nothing plays the kubelet of
WORK=$(mktemp -d /tmp/test_pending.XXXXXX)
OP_PID=

fail() {
	echo "test_pending: FAIL: $*" >&2
	KN get ddjobs,pods -o wide >&2 2>/dev/null || true
	KN get ddjob stuck -o jsonpath='{.status.conditions}' >&2 2>/dev/null || true
	[ -e "$WORK/op.log" ] && tail -30 "$WORK/op.log" >&2
	exit 1
}
cleanup() {
	local rc=$?
	set +e
	[ -n "$OP_PID" ] && kill "$OP_PID" 2>/dev/null && wait "$OP_PID" 2>/dev/null
	"$KUBECTL" delete namespace "$NS" --wait=false >/dev/null 2>&1
	"$KUBECTL" delete node "$QUIET" --wait=false >/dev/null 2>&1
	rm -rf "$WORK"
	exit "$rc"
}
. "$ROOT/tests/k8s/lib.sh"
trap cleanup EXIT
cond() { jp "ddjob/$1" "{.status.conditions[?(@.type==\"PodsReady\")].$2}"; }

[ -x "$BIN" ] || fail "no $BIN (make first)"
apply_crd
"$KUBECTL" create namespace "$NS" >/dev/null

job() {   # job NAME EXTRA-LEARNER-FIELDS
	cat <<EOF
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: $1}
spec:
  learners: {replicas: 2$2}
  syncer: {storage: ""}
  data: {path: /data/tiny.txt}
EOF
}
job stuck ", nodeSelector: {ddiloco.io/nowhere: \"true\"}" | KN apply -f - >/dev/null
job fine "" | KN apply -f - >/dev/null

"$BIN" operator --kubeconfig "$KUBECONFIG" --namespace "$NS" --http 127.0.0.1:0 \
	>"$WORK/op.log" 2>&1 &
OP_PID=$!

until_ok 90 "PodsReady names Unschedulable" "test \"\$(cond stuck reason)\" = Unschedulable"
[ "$(cond stuck status)" = False ] || fail "PodsReady of stuck is not False"
msg=$(cond stuck message)
case $msg in   # the syncer has its own placement: it is scheduled
learner\ [01]*node*) ;;
*) fail "PodsReady message '$msg' does not carry the scheduler's words" ;;
esac
echo "stuck: PodsReady False Unschedulable: $msg"
until_ok 30 "Warning Event Unschedulable on the job" \
	"KN get events --field-selector involvedObject.name=stuck,reason=Unschedulable,type=Warning -o name | grep -q ."
[ "$(jp ddjob/stuck '{.status.phase}')" = Pending ] || fail "stuck is not Pending"
# the syncer is not sent to the learners' pool: it runs, and is Burstable
until_ok 60 "stuck-syncer-0 Running" "test \"\$(jp pod/stuck-syncer-0 '{.status.phase}')\" = Running"
[ -z "$(jp pod/stuck-syncer-0 '{.spec.nodeSelector}')" ] || fail "stuck-syncer-0 has a nodeSelector"
qos=$(jp pod/stuck-syncer-0 '{.status.qosClass}')
[ "$qos" = Burstable ] || fail "stuck-syncer-0 is $qos, not Burstable"
echo "stuck-syncer-0: Running, $qos, requests $(jp pod/stuck-syncer-0 '{.spec.containers[0].resources.requests}')"

until_ok 90 "fine Running" "test \"\$(jp ddjob/fine '{.status.phase}')\" = Running"
until_ok 30 "PodsReady True on fine" "test \"\$(cond fine status)\" = True"
[ "$(cond fine reason)" = AllPodsReady ] || fail "fine: PodsReady reason $(cond fine reason)"
echo "fine: PodsReady True AllPodsReady"

# --- job pull: a start that lasts, then a failed pull ---------------------
node_without_kubelet "$QUIET" || fail "create node $QUIET"
KN apply -f - >/dev/null <<EOF || fail "apply job pull"
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: pull}
spec:
  failurePolicy: {pendingTimeoutSeconds: 15}
  learners:
    replicas: 1
    template:
      spec:
        nodeSelector: {kubernetes.io/hostname: $QUIET}
        tolerations: [{operator: Exists}]
  syncer: {storage: ""}
  data: {path: /data/tiny.txt}
EOF
waiting() {   # waiting REASON [MESSAGE]: pull-learner-0's learner waits, as a kubelet writes it
	local m=
	[ -n "${2:-}" ] && m=", \"message\": \"$2\""
	KN patch pod pull-learner-0 --subresource=status --type=merge -p "{\"status\": {\"phase\": \"Pending\",
	  \"containerStatuses\": [{\"name\": \"learner\", \"image\": \"ddiloco:latest\", \"imageID\": \"\",
	    \"ready\": false, \"restartCount\": 0, \"state\": {\"waiting\": {\"reason\": \"$1\"$m}}}]}}" >/dev/null
}
age() {   # seconds since pull-learner-0 was created
	echo $(($(date +%s) - $(date -d "$(jp pod/pull-learner-0 '{.metadata.creationTimestamp}')" +%s)))
}
until_ok 60 "pull-learner-0 bound to $QUIET" '[ "$(jp pod/pull-learner-0 "{.spec.nodeName}")" = "$QUIET" ]'
waiting ContainerCreating || fail "ContainerCreating on pull-learner-0"
until_ok 30 "pull: PodsReady set" '[ -n "$(cond pull reason)" ]'
a=$(age) r=$(cond pull reason)
# before the timeout (a slow pass may be just past it: then not checked)
if [ "$a" -lt 13 ]; then
	[ "$r" = PodsStarting ] || fail "pull: PodsReady '$r' $a s after creation, before pendingTimeoutSeconds 15"
	echo "pull: $a s after creation: PodsReady PodsStarting"
else
	echo "pull: NOT CHECKED that PodsReady says PodsStarting before the timeout: the first look came $a s after creation"
fi
until_ok 60 "pull: PodsReady ContainerCreating" '[ "$(cond pull reason)" = ContainerCreating ]'
a=$(age)
[ "$a" -ge 15 ] || fail "pull: ContainerCreating named $a s after creation, before 15 s"
[ "$(cond pull status)" = False ] || fail "pull: PodsReady not False"
msg=$(cond pull message)
created=$(jp pod/pull-learner-0 '{.metadata.creationTimestamp}')
[ "$msg" = "learner 0: pending since $created, more than pendingTimeoutSeconds 15: container learner: ContainerCreating" ] ||
	fail "pull: PodsReady message '$msg'"
echo "pull: $a s after creation: PodsReady False ContainerCreating: $msg"
# the condition stands still while nothing changes: no status write per pass
t=$(cond pull lastTransitionTime) rv=$(jp ddjob/pull '{.metadata.resourceVersion}')
sleep 12
[ "$(cond pull message)" = "$msg" ] && [ "$(cond pull lastTransitionTime)" = "$t" ] ||
	fail "pull: PodsReady moved without a change: $(cond pull message)"
[ "$(jp ddjob/pull '{.metadata.resourceVersion}')" = "$rv" ] ||
	fail "pull: the job's status was written again in 12 s with nothing changed"
echo "pull: 12 s later the same condition, resourceVersion $rv unchanged"
until_ok 30 "Warning Event ContainerCreating on pull" \
	"KN get events --field-selector involvedObject.name=pull,reason=ContainerCreating,type=Warning -o name | grep -q ."

waiting ImagePullBackOff 'Back-off pulling image registry.invalid/ddiloco:none' ||
	fail "ImagePullBackOff on pull-learner-0"
until_ok 30 "pull: PodsReady ImagePullBackOff" '[ "$(cond pull reason)" = ImagePullBackOff ]'
msg=$(cond pull message)
[ "$msg" = "learner 0: container learner: Back-off pulling image registry.invalid/ddiloco:none" ] ||
	fail "pull: PodsReady message '$msg'"
until_ok 30 "Warning Event ImagePullBackOff on pull" \
	"KN get events --field-selector involvedObject.name=pull,reason=ImagePullBackOff,type=Warning -o name | grep -q ."
[ "$(jp ddjob/pull '{.status.phase}')" = Pending ] || fail "pull is $(jp ddjob/pull '{.status.phase}'), not Pending"
echo "pull: PodsReady False ImagePullBackOff: $msg; a Warning Event; still Pending"
echo "test_pending: ok"
