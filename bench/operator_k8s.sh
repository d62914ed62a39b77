#!/bin/sh
# The operator at scale on the test control plane (make cluster-up first;
# skipped without it). Prints key=value lines:
#   apply_to_children_s   apply of a 16-learner job -> its 16 pods,
#                         StatefulSet, Service and ConfigMap all exist
#   jobs, learners        the scale run: JOBS jobs x 16 learners
#   all_children_s        apply of all of them -> every learner pod exists
#   all_running_s         ... -> every job reports phase Running
#   operator_rss_mib      the operator's resident memory then
# JOBS (default 100) and LEARNERS (16) can be set in the environment.
ENV=/tmp/ddiloco-k8s/env
if [ ! -r "$ENV" ]; then
	echo "operator_k8s: skipped (no test control plane: make cluster-up)"
	exit 0
fi
. "$ENV"
BUILD=${BUILD:-build}
JOBS=${JOBS:-100}
LEARNERS=${LEARNERS:-16}
NS=bench-op-$$
WORK=$(mktemp -d /tmp/bench_operator.XXXXXX)
NODES_EXTRA=$(( (JOBS * (LEARNERS + 1)) / 100 + 1 ))
K() { "$KUBECTL" "$@"; }
now() { date +%s.%N; }
since() { echo "$(now) $1" | awk '{ printf "%.2f", $1 - $2 }'; }

cleanup() {
	[ -n "${OP:-}" ] && kill "$OP" 2>/dev/null
	K delete namespace "$NS" --wait=false >/dev/null 2>&1
	K delete nodes -l ddiloco.io/bench=operator --wait=false >/dev/null 2>&1
	rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

# fake nodes enough for every pod (kwok manages every node)
i=0
while [ "$i" -lt "$NODES_EXTRA" ]; do
	cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: bench-node-$i
  annotations: {kwok.x-k8s.io/node: fake}
  labels: {type: kwok, ddiloco.io/bench: operator, kubernetes.io/hostname: bench-node-$i}
status:
  allocatable: {cpu: "1000", memory: 4Ti, pods: "110"}
  capacity: {cpu: "1000", memory: 4Ti, pods: "110"}
EOF
	i=$((i + 1))
done >"$WORK/nodes.yaml"
K apply -f "$WORK/nodes.yaml" >/dev/null
K apply --server-side -f crds/decoupledtrainingjobs.yaml >/dev/null
K wait --for=condition=Established --timeout=30s crd/decoupledtrainingjobs.ddiloco.io >/dev/null
K create namespace "$NS" >/dev/null
"$BUILD/ddiloco" operator --kubeconfig "$KUBECONFIG" --namespace "$NS" --http off \
	--no-chaos >"$WORK/op.log" 2>&1 &
OP=$!
sleep 2

job() {
	cat <<EOF
---
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: $1, namespace: $NS}
spec:
  learners: {replicas: $LEARNERS}
  syncer: {storage: ""}
  data: {path: /data/tiny.txt}
EOF
}
count() { K -n "$NS" get "$1" -l "$2" -o name 2>/dev/null | wc -l; }

# one job: apply -> all children
job one >"$WORK/one.yaml"
t0=$(now)
K apply -f "$WORK/one.yaml" >/dev/null
while [ "$(count pods ddiloco.io/job=one,ddiloco.io/role=learner)" -lt "$LEARNERS" ] ||
      [ "$(count statefulsets,services,configmaps ddiloco.io/job=one)" -lt 3 ]; do
	sleep 0.1
done
echo "apply_to_children_s=$(since "$t0")"
K -n "$NS" delete ddjob one --wait=false >/dev/null
while [ "$(count pods ddiloco.io/job=one)" -gt 0 ]; do sleep 0.5; done

# JOBS jobs
i=0
while [ "$i" -lt "$JOBS" ]; do job "j$i"; i=$((i + 1)); done >"$WORK/many.yaml"
t0=$(now)
K apply -f "$WORK/many.yaml" >/dev/null
want=$((JOBS * LEARNERS))
while [ "$(count pods ddiloco.io/role=learner)" -lt "$want" ]; do sleep 1; done
echo "jobs=$JOBS"
echo "learners=$want"
echo "all_children_s=$(since "$t0")"
deadline=$(($(date +%s) + 600))
while [ "$(K -n "$NS" get ddjobs -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -c '^Running$')" -lt "$JOBS" ]; do
	[ "$(date +%s)" -lt "$deadline" ] || { echo "all_running_s=timeout"; break; }
	sleep 2
done
[ "$(date +%s)" -lt "$deadline" ] && echo "all_running_s=$(since "$t0")"
echo "operator_rss_mib=$(awk '/^VmRSS/ { printf "%.1f", $2 / 1024 }' "/proc/$OP/status")"
