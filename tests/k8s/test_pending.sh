#!/usr/bin/env bash
# A pod that cannot start is named in the job's conditions, not left a
# silent Pending (operator as a local process, kwok nodes):
#  - learners with a nodeSelector no node has (the syncer gets it too):
#    the scheduler marks them Unschedulable; the job's PodsReady condition
#    is False with reason
#    Unschedulable and the scheduler's message, and a Warning Event with
#    that reason is on the job;
#  - the selector removed (a new job without it): PodsReady turns True.
# Needs the variables of /tmp/ddiloco-k8s/env (tests/k8s/run.sh sets them).
set -euo pipefail

: "${KUBECTL:?run through make test-k8s}" "${KUBE_SERVER:?}" "${KUBE_CA:?}" "${KUBECONFIG:?}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) BIN=$BUILD/ddiloco ;; *) BIN=$ROOT/$BUILD/ddiloco ;; esac
NS=pending-$$-$RANDOM
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
case $msg in   # the syncer takes the learners' placement too: it may come first
learner\ [01]*node* | syncer:*node*) ;;
*) fail "PodsReady message '$msg' does not carry the scheduler's words" ;;
esac
echo "stuck: PodsReady False Unschedulable: $msg"
until_ok 30 "Warning Event Unschedulable on the job" \
	"KN get events --field-selector involvedObject.name=stuck,reason=Unschedulable,type=Warning -o name | grep -q ."
[ "$(jp ddjob/stuck '{.status.phase}')" = Pending ] || fail "stuck is not Pending"

until_ok 90 "fine Running" "test \"\$(jp ddjob/fine '{.status.phase}')\" = Running"
until_ok 30 "PodsReady True on fine" "test \"\$(cond fine status)\" = True"
[ "$(cond fine reason)" = AllPodsReady ] || fail "fine: PodsReady reason $(cond fine reason)"
echo "test_pending: ok"
