#!/usr/bin/env bash
# A checkpoint claim too small for an external model, resized on the real
# API server (docs/operator.md, Model lifecycle): the operator runs here
# with --external-checkpoint-storage 1Gi, and each job's syncer, sidecar
# and synthetic learner (24M parameters) run here from the job's
# ConfigMap, the syncer's checkpoint folder on a tmpfs of 64 MiB, so the
# syncer says its 5 checkpoints (about 960 MB) do not fit (checkpoint.fits
# false) and lets no learner in.
#  - grow: its claim's StorageClass allows expansion: the operator's merge
#    patch is taken by the API server (the claim asks for 2Gi, Event
#    CheckpointClaimResized), once; the condition says it waits for the
#    volume;
#    the tmpfs grown in place (as a node grows a volume), the syncer asks
#    again, lets the learner in and rounds merge; CheckpointStorage True.
#  - fixed: its StorageClass does not: the API server refuses the patch,
#    the claim keeps 1Gi, the condition and a Warning Event
#    CheckpointClaimResizeRefused give the API's reason.
# Needs root (mount) and the variables of /tmp/ddiloco-k8s/env
# (tests/k8s/run.sh sets them).
set -euo pipefail

: "${KUBECTL:?run through make test-k8s}" "${KUBE_SERVER:?}" "${KUBE_CA:?}" "${KUBECONFIG:?}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

. "$ROOT/tests/k8s/lib.sh"
op_test resize

[ "$(id -u)" = 0 ] || fail "needs root: the syncers' volumes are tmpfs mounts"
[ -r /usr/share/games/fortunes ] || fail "no /usr/share/games/fortunes (make deps)"
apply_crd
"$KUBECTL" create namespace "$NS" >/dev/null

PIDS=()
MOUNTS=()
extra_cleanup() {
	stop_pids
	for m in "${MOUNTS[@]:-}"; do
		[ -n "$m" ] && umount "$m" 2>/dev/null
	done
	for j in grow fixed; do
		"$KUBECTL" delete pv "$j-$NS" --wait=false >/dev/null 2>&1
		"$KUBECTL" delete storageclass "$j-$NS" --wait=false >/dev/null 2>&1
	done
}

# each job's /status on its own port: spec.syncer.httpPort, {port}
start_operator 0 --no-chaos --external-checkpoint-storage 1Gi \
	--status-url "http://127.0.0.1:{port}/status"

# the test cluster has no provisioner: a StorageClass of each kind, a 1Gi
# volume of it bound ahead to each job's claim
for j in grow fixed; do
	expand=false
	[ $j = grow ] && expand=true
	"$KUBECTL" apply -f - >/dev/null <<EOF || fail "create storageclass and pv $j-$NS"
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: $j-$NS}
provisioner: kubernetes.io/no-provisioner
allowVolumeExpansion: $expand
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: $j-$NS}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: $j-$NS
  hostPath: {path: /tmp/$j-$NS}
  claimRef: {namespace: $NS, name: $j-checkpoints}
EOF
done
declare -A HTTP GRPC
for j in grow fixed; do
	HTTP[$j]=$(free_port)
	GRPC[$j]=$(free_port)
	KN apply -f - >/dev/null <<EOF || fail "apply $j"
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: $j}
spec:
  learners: {replicas: 1, synthetic: {stepTime: 0.05, tensors: [12000000, 12000000]}}
  model: {kind: external}
  data: {path: /usr/share/games/fortunes}
  syncer: {fragments: 2, insecure: true, checkpointEvery: 1000, httpPort: ${HTTP[$j]},
           storageClassName: $j-$NS}
  budget: {tokens: 500000000}
EOF
done

cond() {   # JOB FIELD: CheckpointStorage's reason or message
	jp "ddjob/$1" "{.status.conditions[?(@.type==\"CheckpointStorage\")].$2}"
}
events() {   # JOB REASON: the messages of the job's Events of that reason
	KN get events --field-selector "involvedObject.name=$1,reason=$2" \
		-o 'jsonpath={.items[*].message}'
}
for j in grow fixed; do
	until_ok 60 "claim $j-checkpoints Bound" \
		'[ "$(jp pvc/'$j'-checkpoints "{.status.phase}")" = Bound ]'
	size=$(jp "pvc/$j-checkpoints" '{.spec.resources.requests.storage}')
	[ "$size" = 1Gi ] || fail "$j-checkpoints asks for '$size', not the operator's 1Gi"
	KN get configmap "$j-spec" -o 'jsonpath={.data.job\.json}' >"$WORK/$j.json"
	mkdir -p "$WORK/vol-$j" "$WORK/ex-$j"
	mount -t tmpfs -o size=64m tmpfs "$WORK/vol-$j" || fail "cannot mount a tmpfs on $WORK/vol-$j"
	MOUNTS+=("$WORK/vol-$j")
	"$BIN" syncer --job "$WORK/$j.json" --listen "127.0.0.1:${GRPC[$j]}" \
		--http "127.0.0.1:${HTTP[$j]}" --checkpoint-dir "$WORK/vol-$j/ck" \
		>"$WORK/syncer-$j.log" 2>&1 &
	PIDS+=($!)
	"$BIN" sidecar --job "$WORK/$j.json" --learner 0 --exchange "$WORK/ex-$j" \
		--syncer "127.0.0.1:${GRPC[$j]}" >"$WORK/sidecar-$j.log" 2>&1 &
	PIDS+=($!)
	"$BIN" learner --job "$WORK/$j.json" --learner 0 --exchange "$WORK/ex-$j" \
		>"$WORK/learner-$j.log" 2>&1 &
	PIDS+=($!)
done
echo "ok: claims grow-checkpoints and fixed-checkpoints Bound at the operator's 1Gi; each job's syncer on a 64 MiB tmpfs"

# --- grow: the patch taken, the volume grown, the learner let in -----------
until_ok 120 "grow-checkpoints resized to 2Gi" \
	'[ "$(jp pvc/grow-checkpoints "{.spec.resources.requests.storage}")" = 2Gi ]'
until_ok 30 "grow's condition waits for the volume" \
	'cond grow message | grep -q "asks for 2Gi: waiting for its volume to grow"'
[ "$(cond grow reason)" = CheckpointStorageTooSmall ] || fail "grow: CheckpointStorage reason $(cond grow reason)"
msg=$(cond grow message)
case $msg in "syncer shard 0 (grow-syncer-0): a checkpoint needs "*" bytes, its volume has "*" free: claim grow-checkpoints asks for 2Gi: waiting for its volume to grow") ;;
	*) fail "grow: CheckpointStorage says: $msg" ;; esac
case $(events grow CheckpointClaimResized) in *"claim grow-checkpoints: 2Gi asked for a checkpoint of "*) ;;
	*) fail "grow: no Event CheckpointClaimResized: $(events grow CheckpointClaimResized)" ;; esac
r=$(curl -s --max-time 2 "http://127.0.0.1:${HTTP[grow]}/status" | jq -r '.round // 0')
[ "$r" = 0 ] || fail "grow: $r rounds merged on a volume too small"
echo "ok: grow: claim resized to 2Gi by the API server; CheckpointStorage: $msg"
mount -o remount,size=2g "$WORK/vol-grow" || fail "cannot grow the tmpfs"
until_ok 60 "grow's syncer lets the learner in and merges" \
	'[ "$(curl -s --max-time 2 http://127.0.0.1:'"${HTTP[grow]}"'/status | jq -r ".round // 0")" -gt 0 ]'
grep -q "has room now" "$WORK/syncer-grow.log" || fail "grow: the syncer did not log the room found"
until_ok 60 "grow's CheckpointStorage True" '[ "$(cond grow reason)" = CheckpointStorageFits ]'
# the claim asked once: the operator sees the size it asked for (a
# child's requested storage is kept in its cache)
n=$(grep -c "grow: claim grow-checkpoints resized to 2Gi$" "$WORK/op.log" || true)
[ "$n" = 1 ] || fail "grow: the operator patched the claim $n times, not once"
echo "ok: grow: the volume grown in place, the syncer let the learner in (round $(curl -s "http://127.0.0.1:${HTTP[grow]}/status" | jq -r .round)), CheckpointStorage True"

# --- fixed: the patch refused by the API server ----------------------------
until_ok 120 "fixed's resize refused" \
	'cond fixed message | grep -q "resizing claim fixed-checkpoints to 2Gi was refused"'
msg=$(cond fixed message)
refused=$(events fixed CheckpointClaimResizeRefused)
case $refused in *"403 Forbidden: "*"the storageclass that provisions the pvc must support resize"*) ;;
	*) fail "fixed: no Event CheckpointClaimResizeRefused with the API's reason: $refused" ;; esac
case $msg in *"was refused (403 Forbidden: persistentvolumeclaims \"fixed-checkpoints\" is forbidden: only dynamically provisioned"*) ;;
	*) fail "fixed: the condition does not give the API's answer: $msg" ;; esac
[ -z "$(events fixed CheckpointClaimResized)" ] ||
	fail "fixed: an Event CheckpointClaimResized for a resize the API refused"
size=$(jp pvc/fixed-checkpoints '{.spec.resources.requests.storage}')
[ "$size" = 1Gi ] || fail "fixed-checkpoints asks for '$size' after a refused resize"
echo "ok: fixed: the resize refused by the API server, the claim keeps 1Gi; CheckpointStorage: $msg"
echo "test_resize: ok"
