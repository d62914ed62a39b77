#!/usr/bin/env bash
# The model's lifecycle (docs/operator.md, "Model lifecycle") on the real
# API server and garbage collector, the operator as a local process:
#  - job keep (checkpoints.retain true): its claim keep-checkpoints has
#    no owner reference; the job deleted, the claim stays;
#  - job drop (retain false): its claim is owned by the job and goes
#    with it;
#  - job auto (retain unset, nothing trained): owned, sized from the
#    model (1Gi for this one) and its syncer has the /healthz liveness and
#    /readyz startup probes;
#  - job next (checkpoints.claimName keep-checkpoints): starts from the
#    retained claim: its syncer mounts keep-checkpoints and no claim of
#    its own is made; deleted, the claim still stays;
#  - job trained (retain unset): its claim is owned by the job until it
#    trains; with a real syncer, learner and sidecar running here from
#    the job's ConfigMap (the operator reads its /status), the claim
#    loses its owner once a round is done (CheckpointsRetained); the job
#    deleted, its ConfigMap is collected and the claim stays.
# Needs the variables of /tmp/ddiloco-k8s/env (tests/k8s/run.sh sets them).
set -euo pipefail

: "${KUBECTL:?run through make test-k8s}" "${KUBE_SERVER:?}" "${KUBE_CA:?}" "${KUBECONFIG:?}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

. "$ROOT/tests/k8s/lib.sh"
op_test lifecycle

job() {   # job NAME SYNCER-FIELDS
	cat <<EOF
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: $1}
spec:
  learners: {replicas: 1}
  data: {path: /data/tiny.txt}
  syncer: {$2}
EOF
}
owner() { jp "pvc/$1" '{.metadata.ownerReferences[0].name}'; }
gone() { ! KN get "$1" >/dev/null 2>&1; }

apply_crd
"$KUBECTL" create namespace "$NS" >/dev/null
start_operator

job keep "checkpoints: {retain: true}" | KN apply -f - >/dev/null || fail "apply keep"
job drop "checkpoints: {retain: false}" | KN apply -f - >/dev/null || fail "apply drop"
job auto "" | KN apply -f - >/dev/null || fail "apply auto"
for j in keep drop auto; do
	until_ok 60 "claim $j-checkpoints" "KN get pvc $j-checkpoints"
	until_ok 60 "StatefulSet $j-syncer" "KN get statefulset $j-syncer"
done
[ -z "$(owner keep-checkpoints)" ] || fail "keep-checkpoints is owned by $(owner keep-checkpoints)"
[ "$(owner drop-checkpoints)" = drop ] || fail "drop-checkpoints is owned by '$(owner drop-checkpoints)'"
[ "$(owner auto-checkpoints)" = auto ] || fail "auto-checkpoints is owned by '$(owner auto-checkpoints)'"
size=$(jp pvc/auto-checkpoints '{.spec.resources.requests.storage}')
[ "$size" = 1Gi ] || fail "auto-checkpoints asks for '$size', not 1Gi from its model"
probes=$(jp statefulset/auto-syncer '{.spec.template.spec.containers[0].livenessProbe.httpGet.path} {.spec.template.spec.containers[0].livenessProbe.failureThreshold} {.spec.template.spec.containers[0].startupProbe.httpGet.path}')
[ "$probes" = "/healthz 3 /readyz" ] || fail "the syncer's probes: '$probes'"
echo "ok: keep unowned, drop and auto owned, auto 1Gi from its model, probes $probes"

KN delete ddjob keep drop auto --wait=true --timeout=60s >/dev/null || fail "delete the jobs"
until_ok 60 "drop-checkpoints collected" gone pvc/drop-checkpoints
until_ok 60 "auto-checkpoints collected" gone pvc/auto-checkpoints
sleep 2
KN get pvc keep-checkpoints >/dev/null 2>&1 || fail "keep-checkpoints went with its job"
echo "ok: the jobs deleted: keep-checkpoints stays, the others collected"

job next "checkpoints: {claimName: keep-checkpoints}" | KN apply -f - >/dev/null || fail "apply next"
until_ok 60 "StatefulSet next-syncer" "KN get statefulset next-syncer"
claim=$(jp statefulset/next-syncer '{.spec.template.spec.volumes[?(@.name=="checkpoints")].persistentVolumeClaim.claimName}')
[ "$claim" = keep-checkpoints ] || fail "next's syncer mounts '$claim'"
sleep 2
gone pvc/next-checkpoints || fail "next made a claim of its own"
KN delete ddjob next --wait=true --timeout=60s >/dev/null || fail "delete next"
sleep 2
KN get pvc keep-checkpoints >/dev/null 2>&1 || fail "keep-checkpoints went with job next"
echo "ok: job next started from keep-checkpoints and left it"

# --- job trained: retain unset, and it trains --------------------------------
# The operator again, reading the /status of a real syncer that runs here
# (with a learner and its sidecar) from the job's own ConfigMap, as
# test_progress does.
[ -r /usr/share/games/fortunes ] || fail "no /usr/share/games/fortunes (make deps)"
kill "$OP_PID" && wait "$OP_PID" 2>/dev/null
OP_PID=
GRPC=$(free_port)
HTTP=$(free_port)
"$BIN" operator --kubeconfig "$KUBECONFIG" --namespace "$NS" --http off --no-chaos \
	--status-url "http://127.0.0.1:$HTTP/status" >"$WORK/op.log" 2>&1 &
OP_PID=$!
# the test cluster has no provisioner: a volume bound to the claim ahead,
# so the syncer's pod is scheduled and its readiness lets the operator read
PV=trained-$NS
PIDS=()
extra_cleanup() { stop_pids; "$KUBECTL" delete pv "$PV" --wait=false >/dev/null 2>&1; }
"$KUBECTL" apply -f - >/dev/null <<EOF || fail "create pv $PV"
apiVersion: v1
kind: PersistentVolume
metadata: {name: $PV}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  hostPath: {path: /tmp/$PV}
  claimRef: {namespace: $NS, name: trained-checkpoints}
EOF
KN apply -f - >/dev/null <<EOF || fail "apply trained"
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: trained}
spec:
  learners: {replicas: 1}
  model: {channels: 64}
  data: {path: /usr/share/games/fortunes}
  optimizer: {warmupSteps: 5}
  syncer: {fragments: 2, evalEvery: 5, evalTokens: 2048, insecure: true}
  budget: {tokens: 50000000}
EOF
until_ok 90 "job trained Running" '[ "$(jp ddjob/trained "{.status.phase}")" = Running ]'
[ "$(owner trained-checkpoints)" = trained ] ||
	fail "trained-checkpoints is owned by '$(owner trained-checkpoints)' before any training"
[ -z "$(jp ddjob/trained '{.status.progress.round}')" ] || fail "progress before any syncer ran"
echo "ok: trained-checkpoints owned by its job before it trained"
KN get configmap trained-spec -o 'jsonpath={.data.job\.json}' >"$WORK/job.json"
"$BIN" syncer --job "$WORK/job.json" --listen "127.0.0.1:$GRPC" --http "127.0.0.1:$HTTP" \
	--checkpoint-dir "$WORK/ckpt" >"$WORK/syncer.log" 2>&1 &
PIDS+=($!)
mkdir -p "$WORK/ex"
"$BIN" sidecar --job "$WORK/job.json" --learner 0 --exchange "$WORK/ex" \
	--syncer "127.0.0.1:$GRPC" >"$WORK/sidecar.log" 2>&1 &
PIDS+=($!)
"$BIN" learner --job "$WORK/job.json" --learner 0 --exchange "$WORK/ex" >"$WORK/learner.log" 2>&1 &
PIDS+=($!)
until_ok 90 "trained-checkpoints without an owner" '[ -z "$(owner trained-checkpoints)" ]'
round=$(jp ddjob/trained '{.status.progress.round}')
[ "${round:-0}" -gt 0 ] || fail "the claim lost its owner at round '$round'"
KN get events --field-selector involvedObject.name=trained,reason=CheckpointsRetained -o name | grep -q . ||
	fail "no CheckpointsRetained Event on trained"
echo "ok: trained at round $round: trained-checkpoints lost its owner (CheckpointsRetained)"
stop_pids
PIDS=()
KN delete ddjob trained --wait=true --timeout=60s >/dev/null || fail "delete trained"
until_ok 60 "trained's ConfigMap collected" gone configmap/trained-spec
KN get pvc trained-checkpoints >/dev/null 2>&1 || fail "trained-checkpoints went with its job"
[ "$(jp pvc/trained-checkpoints '{.metadata.labels.ddiloco\.io/job}')" = trained ] ||
	fail "trained-checkpoints lost its label ddiloco.io/job"
echo "ok: job trained deleted: its ConfigMap collected, trained-checkpoints stays (label ddiloco.io/job=trained)"
echo "test_lifecycle: ok"
