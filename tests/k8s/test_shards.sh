#!/usr/bin/env bash
# A job of two syncer shards (docs/operator.md, Shards) on the real API
# server, StatefulSet controller and garbage collector, the operator as a
# local process:
#  - the syncer's StatefulSet has 2 replicas, each `--shard auto`, with a
#    claim template; the operator made the two claims
#    checkpoints-sh2-syncer-0/1 (owned by the job, each sized for half the
#    model) and each shard's pod mounts its own;
#    with checkpoints.retain true both claims have no owner;
#  - the CRD refuses checkpoints.claimName with 2 shards and a
#    chaos.syncerShard that is not a shard;
#  - the learner's sidecar dials both shards' pods in shard order, and the
#    syncer's certificate names both pods;
#  - with two real syncer shards, a sidecar and a learner running here
#    from the job's ConfigMap (the operator reads each shard's /status:
#    --status-url with {shard}), status.shardsReady is 2/2 and kubectl's
#    SHARDS column says so, CheckpointStorage is True from the shards'
#    checkpoint.fits; shard 1's process killed and its pod deleted,
#    the status says 1/2 and the condition SyncerShards names shard 1
#    (ShardDown), while shard 0's rounds go on (its own /status); the
#    StatefulSet makes shard 1's pod again on the same claim; shard 1
#    restarted from its own checkpoints, 2/2 and SyncerShards True again;
#    the job deleted (retain false), both claims go with it.
# Needs the variables of /tmp/ddiloco-k8s/env (tests/k8s/run.sh sets them).
set -euo pipefail

: "${KUBECTL:?run through make test-k8s}" "${KUBE_SERVER:?}" "${KUBE_CA:?}" "${KUBECONFIG:?}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

. "$ROOT/tests/k8s/lib.sh"
op_test shards

[ -r /usr/share/games/fortunes ] || fail "no /usr/share/games/fortunes (make deps)"
apply_crd
"$KUBECTL" create namespace "$NS" >/dev/null

# Shard i's HTTP server listens on 127.0.i.1 (loopback is all of
# 127.0.0.0/8), so one --status-url template reaches each.
HTTP=$(free_port)
G0=$(free_port)
G1=$(free_port)
"$BIN" operator --kubeconfig "$KUBECONFIG" --namespace "$NS" --http off --no-chaos \
	--status-url "http://127.0.{shard}.1:$HTTP/status" >"$WORK/op.log" 2>&1 &
OP_PID=$!

# the test cluster has no provisioner: a volume bound ahead to each
# shard's claim, so the shards' pods are scheduled
PIDS=()
PVS=()
extra_cleanup() {
	stop_pids
	for pv in "${PVS[@]:-}"; do
		[ -n "$pv" ] && "$KUBECTL" delete pv "$pv" --wait=false >/dev/null 2>&1
	done
}
for i in 0 1; do
	PVS+=("sh2-$i-$NS")
	"$KUBECTL" apply -f - >/dev/null <<EOF || fail "create pv sh2-$i-$NS"
apiVersion: v1
kind: PersistentVolume
metadata: {name: sh2-$i-$NS}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  hostPath: {path: /tmp/sh2-$i-$NS}
  claimRef: {namespace: $NS, name: checkpoints-sh2-syncer-$i}
EOF
done
job() {   # job NAME SYNCER-FIELDS
	cat <<EOF
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: $1}
spec:
  learners: {replicas: 1}
  model: {channels: 64}
  data: {path: /usr/share/games/fortunes}
  optimizer: {warmupSteps: 5}
  syncer: {shards: 2, fragments: 4, checkpointEvery: 2, checkpoints: {retain: false}$2}
  budget: {tokens: 50000000}
EOF
}
# the CRD refuses one claim for two shards, and a chaos shard it lacks
out=$(job bad ", checkpoints: {claimName: some-claim}" | KN apply -f - 2>&1) &&
	fail "a claimName with 2 shards was accepted"
case $out in *"a job of more than one syncer shard has a claim per shard"*) ;;
	*) fail "claimName with 2 shards refused with: $out" ;; esac
out=$( (job bad ""; echo "  chaos: {enabled: true, targets: [syncer], syncerShard: 2}") |
	KN apply -f - 2>&1) && fail "chaos.syncerShard 2 of 2 shards was accepted"
case $out in *"spec.chaos.syncerShard is not one of the job's shards"*) ;;
	*) fail "syncerShard 2 refused with: $out" ;; esac
echo "ok: the CRD refuses checkpoints.claimName with 2 shards and chaos.syncerShard 2"
# certs: with TLS, for its Secret (the processes here dial 127.0.0.1,
# which no certificate names); sh2: plaintext, run for real below
job certs "" | KN apply -f - >/dev/null || fail "apply certs"
job sh2 ", insecure: true" | KN apply -f - >/dev/null || fail "apply sh2"

# --- the children -------------------------------------------------------
until_ok 60 "StatefulSet sh2-syncer" "KN get statefulset sh2-syncer"
[ "$(jp statefulset/sh2-syncer '{.spec.replicas}')" = 2 ] ||
	fail "sh2-syncer has $(jp statefulset/sh2-syncer '{.spec.replicas}') replicas, not 2"
args=$(jp statefulset/sh2-syncer '{.spec.template.spec.containers[0].command}')
case $args in *'"--shard","auto"'*) ;; *) fail "the syncer's command has no --shard auto: $args" ;; esac
[ "$(jp statefulset/sh2-syncer '{.spec.volumeClaimTemplates[0].metadata.name}')" = checkpoints ] ||
	fail "sh2-syncer has no claim template named checkpoints"
for i in 0 1; do
	until_ok 60 "claim checkpoints-sh2-syncer-$i" "KN get pvc checkpoints-sh2-syncer-$i"
	[ "$(jp "pvc/checkpoints-sh2-syncer-$i" '{.metadata.ownerReferences[0].name}')" = sh2 ] ||
		fail "checkpoints-sh2-syncer-$i is not owned by the job"
	size=$(jp "pvc/checkpoints-sh2-syncer-$i" '{.spec.resources.requests.storage}')
	[ "$size" = 1Gi ] || fail "checkpoints-sh2-syncer-$i asks for '$size', not 1Gi"
	until_ok 90 "pod sh2-syncer-$i Running" \
		'[ "$(jp pod/sh2-syncer-'$i' "{.status.phase}")" = Running ]'
	claim=$(jp "pod/sh2-syncer-$i" '{.spec.volumes[?(@.name=="checkpoints")].persistentVolumeClaim.claimName}')
	[ "$claim" = "checkpoints-sh2-syncer-$i" ] || fail "sh2-syncer-$i mounts '$claim'"
done
gone() { ! KN get "$1" >/dev/null 2>&1; }
gone pvc/sh2-checkpoints || fail "an unsharded claim sh2-checkpoints was made too"
# retain true: both shards' claims without an owner from the start
job keep "" | sed 's/retain: false/retain: true/' | KN apply -f - >/dev/null || fail "apply keep"
for i in 0 1; do
	until_ok 60 "claim checkpoints-keep-syncer-$i" "KN get pvc checkpoints-keep-syncer-$i"
	[ -z "$(jp "pvc/checkpoints-keep-syncer-$i" '{.metadata.ownerReferences}')" ] ||
		fail "checkpoints-keep-syncer-$i has an owner with retain true"
done
KN delete ddjob keep --wait=false >/dev/null
echo "ok: StatefulSet of 2 replicas with --shard auto; claims checkpoints-sh2-syncer-0/1 (1Gi, owned by sh2), each shard's pod on its own; job keep's claims unowned (retain true)"

until_ok 60 "pod certs-learner-0" "KN get pod certs-learner-0"
want="certs-syncer-0.certs-syncer.$NS.svc:7070,certs-syncer-1.certs-syncer.$NS.svc:7070"
sidecar=$(jp pod/certs-learner-0 '{.spec.initContainers[0].command}')
case $sidecar in *"\"--syncer\",\"$want\""*) ;; *) fail "the sidecar's --syncer is not '$want': $sidecar" ;; esac
until_ok 30 "Secret certs-tls" "KN get secret certs-tls"
sans=$(KN get secret certs-tls -o 'jsonpath={.data.syncer\.crt}' | base64 -d |
	openssl x509 -noout -ext subjectAltName)
for i in 0 1; do
	case $sans in *"DNS:certs-syncer-$i.certs-syncer.$NS.svc,"*) ;;
		*) fail "the syncer's certificate does not name certs-syncer-$i: $sans" ;; esac
done
KN delete ddjob certs --wait=false >/dev/null
echo "ok: the sidecar dials $want; the syncer's certificate names both pods"

# --- real shards --------------------------------------------------------
KN get configmap sh2-spec -o 'jsonpath={.data.job\.json}' >"$WORK/job.json"
shard() {   # shard I GRPC-PORT: a syncer shard here, its log syncer-I.log
	"$BIN" syncer --job "$WORK/job.json" --shard "$1" \
		--listen "127.0.0.1:$2" --http "127.0.$1.1:$HTTP" \
		--checkpoint-dir "$WORK/ckpt-$1" >>"$WORK/syncer-$1.log" 2>&1 &
	echo $!
}
S0=$(shard 0 "$G0")
S1=$(shard 1 "$G1")
PIDS+=("$S0" "$S1")
mkdir -p "$WORK/ex"
"$BIN" sidecar --job "$WORK/job.json" --learner 0 --exchange "$WORK/ex" \
	--syncer "127.0.0.1:$G0,127.0.0.1:$G1" >"$WORK/sidecar.log" 2>&1 &
PIDS+=($!)
"$BIN" learner --job "$WORK/job.json" --learner 0 --exchange "$WORK/ex" >"$WORK/learner.log" 2>&1 &
PIDS+=($!)
round_of() { curl -s --max-time 2 "http://127.0.$1.1:$HTTP/status" | jq -r '.round // 0'; }
until_ok 120 "status.shardsReady 2/2 and a round merged" \
	'[ "$(jp ddjob/sh2 "{.status.shardsReady}")" = 2/2 ] && [ "$(jp ddjob/sh2 "{.status.progress.round}")" -gt 0 ]'
until_ok 30 "both shards merged a round" '[ "$(round_of 0)" -gt 0 ] && [ "$(round_of 1)" -gt 0 ]'
# each shard says its checkpoints fit on its volume (checkpoint.fits)
until_ok 30 "CheckpointStorage True" \
	'[ "$(jp ddjob/sh2 "{.status.conditions[?(@.type==\"CheckpointStorage\")].reason}")" = CheckpointStorageFits ]'
KN get ddjobs >"$WORK/get.txt"
head -1 "$WORK/get.txt" | grep -q SHARDS || fail "kubectl get ddjobs has no SHARDS column: $(cat "$WORK/get.txt")"
grep -Eq '^sh2 +[A-Za-z]+ +1/1 +2/2 ' "$WORK/get.txt" || fail "kubectl get ddjobs: $(cat "$WORK/get.txt")"
echo "ok: both shards merge (rounds $(round_of 0) and $(round_of 1)); kubectl get ddjobs:"
cat "$WORK/get.txt"

# --- shard 1 down: its process killed, its pod deleted ---------------------
uid=$(jp pod/sh2-syncer-1 '{.metadata.uid}')
kill "$S1" && wait "$S1" 2>/dev/null || true
left=()
for p in "${PIDS[@]}"; do [ "$p" = "$S1" ] || left+=("$p"); done
PIDS=("${left[@]}")
KN delete pod sh2-syncer-1 --wait=false >/dev/null
until_ok 60 "status.shardsReady 1/2" '[ "$(jp ddjob/sh2 "{.status.shardsReady}")" = 1/2 ]'
[ "$(jp ddjob/sh2 '{.status.shards.down}')" = 1 ] || fail "status.shards.down is not 1: $(jp ddjob/sh2 '{.status.shards}')"
cond=$(jp ddjob/sh2 '{.status.conditions[?(@.type=="SyncerShards")].status} {.status.conditions[?(@.type=="SyncerShards")].reason}')
[ "$cond" = "False ShardDown" ] || fail "SyncerShards is '$cond'"
msg=$(jp ddjob/sh2 '{.status.conditions[?(@.type=="SyncerShards")].message}')
case $msg in *"shard 1 (sh2-syncer-1) does not"*) ;; *) fail "SyncerShards says: $msg" ;; esac
r0=$(round_of 0)
until_ok 60 "shard 0 merges on while shard 1 is down" '[ "$(round_of 0)" -gt '"$r0"' ]'
echo "ok: shard 1 down: 1/2, SyncerShards False: $msg; shard 0 went on from round $r0 to $(round_of 0)"
until_ok 60 "pod sh2-syncer-1 made again" \
	'[ -n "$(jp pod/sh2-syncer-1 "{.metadata.uid}")" ] && [ "$(jp pod/sh2-syncer-1 "{.metadata.uid}")" != '"$uid"' ]'
claim=$(jp pod/sh2-syncer-1 '{.spec.volumes[?(@.name=="checkpoints")].persistentVolumeClaim.claimName}')
[ "$claim" = checkpoints-sh2-syncer-1 ] || fail "the new sh2-syncer-1 mounts '$claim'"
echo "ok: the StatefulSet made sh2-syncer-1 again on checkpoints-sh2-syncer-1"

# --- shard 1 back, from its own checkpoints -----------------------------------
S1=$(shard 1 "$G1")
PIDS+=("$S1")
until_ok 60 "status.shardsReady 2/2 again" '[ "$(jp ddjob/sh2 "{.status.shardsReady}")" = 2/2 ]'
until_ok 30 "SyncerShards True" \
	'[ "$(jp ddjob/sh2 "{.status.conditions[?(@.type==\"SyncerShards\")].status}")" = True ]'
grep -q "resumed from" "$WORK/syncer-1.log" || echo "note: shard 1 did not resume from a checkpoint (none written before its kill)"
# (read whole: grep -q quitting early would fail kubectl's write, pipefail)
events=$(KN get events --field-selector involvedObject.name=sh2,reason=ShardDown \
	-o 'jsonpath={.items[*].message}')
case $events in *"shard 1 (sh2-syncer-1) does not"*) ;; *) fail "no ShardDown Event naming shard 1 on sh2: $events" ;; esac
echo "ok: shard 1 back: 2/2, SyncerShards True"

# (wait gives a process's status: one ended by the TERM is not a failure)
stop_pids || true
PIDS=()
KN delete ddjob sh2 --wait=true --timeout=60s >/dev/null || fail "delete sh2"
for i in 0 1; do
	until_ok 60 "checkpoints-sh2-syncer-$i collected with its job (retain false)" \
		gone "pvc/checkpoints-sh2-syncer-$i"
done
echo "ok: the job deleted: both shards' claims collected with it"
echo "test_shards: ok"
