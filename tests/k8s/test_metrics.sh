#!/usr/bin/env bash
# The operator's /metrics (docs/operator.md, "Metrics and health") read
# by tests/k8s/promcheck.py, a strict exposition-format reader, after the
# operator (a local process) has reconciled a job on the real API server:
# every family has HELP and TYPE, the histograms are well formed, and
# these are there with samples: the reconcile duration and work-queue
# wait histograms (with as many observations as reconciles), the queue
# depth, rest_client_requests_total by code and method (GET and PATCH
# answered 200 or 201, watches), and the process_* gauges.
# Needs the variables of /tmp/ddiloco-k8s/env (tests/k8s/run.sh sets them).
set -euo pipefail

: "${KUBECTL:?run through make test-k8s}" "${KUBE_SERVER:?}" "${KUBE_CA:?}" "${KUBECONFIG:?}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

. "$ROOT/tests/k8s/lib.sh"
op_test metrics

apply_crd
"$KUBECTL" create namespace "$NS" >/dev/null
PORT=$(free_port)
start_operator "$PORT"
KN apply -f - >/dev/null <<EOF2 || fail "apply the job"
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: m}
spec:
  learners: {replicas: 2}
  syncer: {storage: ""}
  data: {path: /data/tiny.txt}
EOF2
until_ok 90 "job m Running" '[ "$(jp ddjob/m "{.status.phase}")" = Running ]'
curl -sf "http://127.0.0.1:$PORT/metrics" >"$WORK/metrics.txt" || fail "GET /metrics"
python3 "$ROOT/tests/k8s/promcheck.py" "$WORK/metrics.txt" \
	ddiloco_operator_reconciles_total ddiloco_operator_reconcile_duration_seconds \
	ddiloco_operator_queue_wait_seconds ddiloco_operator_queue_depth \
	ddiloco_operator_actions_total ddiloco_operator_cached_objects \
	rest_client_requests_total process_cpu_seconds_total \
	process_resident_memory_bytes process_start_time_seconds process_open_fds \
	process_max_fds || fail "the exposition format"
M=$WORK/metrics.txt
val() { awk -v s="$1" '$1 == s { print $2 }' "$M"; }
n=$(val ddiloco_operator_reconciles_total)
[ "${n:-0}" -gt 0 ] || fail "no reconcile counted"
[ "$(val ddiloco_operator_reconcile_duration_seconds_count)" = "$n" ] ||
	fail "reconcile_duration_seconds_count $(val ddiloco_operator_reconcile_duration_seconds_count), reconciles $n"
[ "$(val ddiloco_operator_queue_wait_seconds_count)" = "$n" ] ||
	fail "queue_wait_seconds_count $(val ddiloco_operator_queue_wait_seconds_count), reconciles $n"
grep -q '^rest_client_requests_total{code="200",method="GET"} [1-9]' "$M" || fail "no GET 200 counted"
grep -Eq '^rest_client_requests_total\{code="20[01]",method="PATCH"\} [1-9]' "$M" ||
	fail "no server-side apply (PATCH 200/201) counted"
grep -q '^rest_client_requests_total{code="200",method="WATCH"}' "$M" ||
	grep -q '^rest_client_requests_total{code="[0-9]*",method="WATCH"}' "$M" ||
	echo "note: no watch ended yet"
rss=$(val process_resident_memory_bytes)
awk -v r="$rss" 'BEGIN { exit !(r > 1e6) }' || fail "process_resident_memory_bytes $rss"
echo "test_metrics: ok ($n reconciles, p50 bucket lines: $(grep -c '^ddiloco_operator_reconcile_duration_seconds_bucket' "$M"), rss $rss)"
