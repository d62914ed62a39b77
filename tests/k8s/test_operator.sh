#!/usr/bin/env bash
# The operator against the real control plane, run as a local process
# behind tests/k8s/faultproxy.py (which forwards to the API server and
# misbehaves on command):
#  - deploy/ and the Helm chart pass a server-side dry run; the CRD refuses
#    invalid jobs with its own messages and immutable changes;
#  - a job gets every child with a controller owner reference, pods on the
#    fake nodes, `kubectl get ddjobs` columns, status and conditions;
#  - a deleted learner pod is recreated alone (others keep their uid),
#    with growing backoff when it keeps going away;
#  - a watch cut, an in-stream 410, an HTTP 410, 409s on status and 500s
#    on apply: recovery without duplicate or lost children;
#  - suspend/resume, Succeeded stays terminal, ttlSecondsAfterFinished,
#    deletion collects the children, leader election with two operators;
#  - all of it as the deploy/ service account (its RBAC suffices).
# Needs the variables of /tmp/ddiloco-k8s/env (tests/k8s/run.sh sets them).
set -euo pipefail

: "${KUBECTL:?run through make test-k8s}" "${KUBE_SERVER:?}" "${KUBE_CA:?}" "${KUBE_TOKEN:?}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) BIN=$BUILD/ddiloco ;; *) BIN=$ROOT/$BUILD/ddiloco ;; esac
NS=op-$$-$RANDOM
WORK=$(mktemp -d /tmp/test_operator.XXXXXX)
PIDS=()
K() { "$KUBECTL" "$@"; }

fail() {
	echo "test_operator: FAIL: $*" >&2
	KN get ddjobs,pods,statefulsets,services,configmaps,pvc -o wide >&2 2>/dev/null || true
	KN get events --sort-by=.lastTimestamp 2>/dev/null | tail -20 >&2 || true
	cp "$WORK"/op1.log "$WORK"/proxy.log /tmp/ 2>/dev/null || true
	for f in "$WORK"/op*.log; do
		[ -e "$f" ] && { echo "--- $f" >&2; tail -30 "$f" >&2; }
	done
	exit 1
}

cleanup() {
	local rc=$?
	set +e
	stop_pids
	K delete namespace "$NS" --wait=false >/dev/null 2>&1 || true
	K -n ddiloco-system delete lease "$NS" >/dev/null 2>&1 || true
	rm -rf "$WORK"
	exit "$rc"
}
# until_ok SECONDS DESCRIPTION CMD...: poll until CMD succeeds; CMD is
# evaluated again on every try (quote what must be expanded then)
. "$ROOT/tests/k8s/lib.sh"
KV=$(kube_version)
trap cleanup EXIT


learner_pods() { KN get pods -l ddiloco.io/job="$1",ddiloco.io/role=learner -o name 2>/dev/null | wc -l; }
uid_of() { jp "pod/$1" '{.metadata.uid}'; }
replaced() { local now; now=$(uid_of "$1"); [ -n "$now" ] && [ "$now" != "$2" ]; }
phase_is() { [ "$(jp "ddjob/$1" '{.status.phase}')" = "$2" ]; }
cond_is() { [ "$(jp "ddjob/$1" "{.status.conditions[?(@.type==\"$2\")].status}")" = "$3" ]; }
pod_running() { [ "$(jp "pod/$1" '{.status.phase}')" = Running ]; }
gone() { ! KN get "$1" >/dev/null 2>&1; }
metric() { curl -sf "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m { print $2 }'; }
fault() { curl -sf -X POST "http://127.0.0.1:$PROXY_PORT/__fault/$1" >/dev/null; }

[ -x "$BIN" ] || fail "no $BIN (make first)"

# --- install: CRD, deploy/ dry run, chart dry run ----------------------
apply_crd
cmp -s "$ROOT/crds/decoupledtrainingjobs.yaml" "$ROOT/deploy/01-crd.yaml" \
	|| fail "deploy/01-crd.yaml differs from crds/"
cmp -s "$ROOT/crds/decoupledtrainingjobs.yaml" "$ROOT/charts/ddiloco/crds/decoupledtrainingjobs.yaml" \
	|| fail "charts/ddiloco/crds differs from crds/"
K get namespace ddiloco-system >/dev/null 2>&1 || K create namespace ddiloco-system >/dev/null
K apply --dry-run=server -f "$ROOT/deploy/" >"$WORK/dry.txt" 2>&1 \
	|| { cat "$WORK/dry.txt" >&2; fail "kubectl apply --dry-run=server -f deploy/ refused"; }
grep -q "deployment.apps/ddiloco-operator created (server dry run)" "$WORK/dry.txt" \
	|| fail "deploy/ dry run did not reach the Deployment"
# helm (tests/k8s/cluster/build.sh builds it with the control plane): the chart is
# checked on every run, never skipped
[ -n "${HELM:-}" ] && [ -x "$HELM" ] || fail "no helm at '${HELM:-}' (tests/k8s/cluster/build.sh; HELM in /tmp/ddiloco-k8s/env)"
"$HELM" lint "$ROOT/charts/ddiloco" >"$WORK/lint.txt" 2>&1 \
	|| { cat "$WORK/lint.txt" >&2; fail "helm lint"; }
"$HELM" template --kube-version "$KV" ddiloco "$ROOT/charts/ddiloco" --namespace ddiloco-system >"$WORK/chart.yaml" \
	|| fail "helm template failed"
K apply --dry-run=server -o json -f "$WORK/chart.yaml" >"$WORK/chart.json" 2>"$WORK/chart.err" \
	|| { cat "$WORK/chart.err" >&2; fail "the chart's manifests were refused"; }
# the operator container's resources, as the API server would store them
chart_resources() {
	jq -r 'if .kind == "List" then .items[] else . end | select(.kind == "Deployment")
	  | .spec.template.spec.containers[] | select(.name == "operator") | .resources
	  | "\(.requests.cpu) \(.requests.memory) \(.limits.cpu) \(.limits.memory)"' "$1"
}
r=$(chart_resources "$WORK/chart.json")
[ "$r" = "100m 64Mi null 512Mi" ] || fail "the chart's default resources: '$r' (values.yaml: requests 100m/64Mi, limit 512Mi memory)"
echo "ok: helm lint; the chart's resources by default: $r"
# the operator's NetworkPolicy (docs/security.md, Listeners): its pods,
# ingress only, to the metrics port only, from the release's namespace;
# from the namespace given in networkPolicy.metrics when one is
np_rule() {
	jq -r 'if .kind == "List" then .items[] else . end | select(.kind == "NetworkPolicy")
	  | "\(.spec.podSelector.matchLabels["app.kubernetes.io/component"]) \(.spec.policyTypes | join(",")) \(.spec.ingress | length) \(.spec.ingress[0].ports | length) \(.spec.ingress[0].ports[0].port) \(.spec.ingress[0].from | length) \(.spec.ingress[0].from[0].namespaceSelector.matchLabels["kubernetes.io/metadata.name"])"' "$1"
}
r=$(np_rule "$WORK/chart.json")
[ "$r" = "operator Ingress 1 1 8080 1 ddiloco-system" ] || fail "the chart's NetworkPolicy: '$r'"
"$HELM" template --kube-version "$KV" ddiloco "$ROOT/charts/ddiloco" --namespace ddiloco-system \
	--set 'networkPolicy.metrics.namespaceSelector.matchLabels.kubernetes\.io/metadata\.name=monitoring' \
	>"$WORK/chart-np.yaml" || fail "helm template with networkPolicy.metrics"
K apply --dry-run=server -o json -f "$WORK/chart-np.yaml" >"$WORK/chart-np.json" 2>"$WORK/chart.err" \
	|| { cat "$WORK/chart.err" >&2; fail "the chart's manifests with networkPolicy.metrics were refused"; }
r=$(np_rule "$WORK/chart-np.json")
[ "$r" = "operator Ingress 1 1 8080 1 monitoring" ] || fail "the chart's NetworkPolicy for monitoring: '$r'"
echo "ok: the chart's NetworkPolicy admits the metrics port from the release's namespace, or the one set"
# the values a platform team sets, and values.schema.json refusing a bad one
"$HELM" template --kube-version "$KV" ddiloco "$ROOT/charts/ddiloco" --namespace ddiloco-system \
	--set 'imagePullSecrets[0].name=regcred' --set podAnnotations.team=ml \
	--set priorityClassName=system-cluster-critical \
	--set-string 'extraArgs={--workers,4}' >"$WORK/chart2.yaml" || fail "helm template with values"
for w in "name: regcred" "team: ml" "priorityClassName: system-cluster-critical" '- "--workers"'; do
	grep -qF -- "$w" "$WORK/chart2.yaml" || fail "the chart did not render '$w'"
done
K apply --dry-run=server -o json -f "$WORK/chart2.yaml" >"$WORK/chart2.json" 2>"$WORK/chart.err" \
	|| { cat "$WORK/chart.err" >&2; fail "the chart's manifests with values were refused"; }
"$HELM" template --kube-version "$KV" ddiloco "$ROOT/charts/ddiloco" --namespace ddiloco-system \
	--set resources.requests.cpu=250m --set resources.requests.memory=128Mi \
	--set resources.limits.cpu=2 --set resources.limits.memory=1Gi >"$WORK/chart3.yaml" ||
	fail "helm template with resources"
K apply --dry-run=server -o json -f "$WORK/chart3.yaml" >"$WORK/chart3.json" 2>"$WORK/chart.err" \
	|| { cat "$WORK/chart.err" >&2; fail "the chart's manifests with resources were refused"; }
r=$(chart_resources "$WORK/chart3.json")
[ "$r" = "250m 128Mi 2 1Gi" ] || fail "the chart's resources set to 250m/128Mi, 2/1Gi rendered '$r'"
echo "ok: the chart's resources set: $r"
# a PodMonitor where the monitoring API exists, and the jobs' dashboard
"$HELM" template --kube-version "$KV" ddiloco "$ROOT/charts/ddiloco" --namespace ddiloco-system \
	--api-versions monitoring.coreos.com/v1 --set metrics.podMonitor.enabled=true \
	--set dashboard.enabled=true --set externalCheckpointStorage=50Gi >"$WORK/chart4.yaml" ||
	fail "helm template with podMonitor and dashboard"
/usr/bin/python3 - "$WORK/chart4.yaml" "$ROOT/charts/ddiloco/dashboards/ddiloco-jobs.json" <<'PY' ||
import json, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
pm = [d for d in docs if d["kind"] == "PodMonitor"]
cm = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-dashboard")]
dep = [d for d in docs if d["kind"] == "Deployment"][0]
assert len(pm) == 1 and pm[0]["spec"]["podMetricsEndpoints"][0]["port"] == "http", pm
assert len(cm) == 1 and cm[0]["metadata"]["labels"]["grafana_dashboard"] == "1", cm
assert json.loads(cm[0]["data"]["ddiloco-jobs.json"]) == json.load(open(sys.argv[2]))
args = dep["spec"]["template"]["spec"]["containers"][0]["command"]
assert args[args.index("--external-checkpoint-storage") + 1] == "50Gi", args
PY
	fail "the chart's PodMonitor, dashboard or externalCheckpointStorage"
echo "ok: the chart's PodMonitor, the dashboard's ConfigMap (the JSON whole), --external-checkpoint-storage"
# the chart's kubeVersion: native sidecars need 1.29
if "$HELM" template ddiloco "$ROOT/charts/ddiloco" --kube-version 1.28.9 >/dev/null 2>"$WORK/kv.err"; then
	fail "the chart rendered for Kubernetes 1.28"
fi
grep -q "incompatible with Kubernetes" "$WORK/kv.err" || fail "kubeVersion 1.28 refused with: $(cat "$WORK/kv.err")"
"$HELM" template ddiloco "$ROOT/charts/ddiloco" --kube-version 1.29.3-gke.1 >/dev/null ||
	fail "the chart refused Kubernetes 1.29.3-gke.1"
echo "ok: the chart declares kubeVersion >=1.29: 1.28 refused, 1.29.3-gke.1 taken"
if "$HELM" template --kube-version "$KV" ddiloco "$ROOT/charts/ddiloco" --set image.pullPolicy=Sometimes \
	>/dev/null 2>"$WORK/schema.err"; then
	fail "values.schema.json let image.pullPolicy=Sometimes through"
fi
grep -q "pullPolicy" "$WORK/schema.err" || { cat "$WORK/schema.err" >&2; fail "no schema message"; }
K create namespace "$NS" >/dev/null
# the operator runs as the deploy/ service account: its RBAC is enough
K apply -f "$ROOT/deploy/02-rbac.yaml" -f "$ROOT/deploy/03-chaos-rbac.yaml" >/dev/null \
	|| fail "deploy/ RBAC refused"
SA_TOKEN=$(K -n ddiloco-system create token ddiloco-operator --duration=1h) \
	|| fail "no token for the ddiloco-operator service account"

# --- invalid jobs are refused by the CRD -------------------------------
refused() {   # refused MESSAGE YAML
	if printf '%s\n' "$2" | KN apply -f - >"$WORK/out" 2>&1; then
		fail "accepted an invalid job (expected: $1)"
	fi
	grep -q "$1" "$WORK/out" || { cat "$WORK/out" >&2; fail "refusal without '$1'"; }
}
HEAD="apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: bad}"
D="data: {path: /x}"
refused "spec.syncer.minQuorum is more than spec.learners.replicas" \
	"$HEAD
spec: {$D, learners: {replicas: 2}, syncer: {minQuorum: 5}}"
refused "spec.model.channels is not a multiple of spec.model.heads" \
	"$HEAD
spec: {$D, model: {channels: 100, heads: 3}}"
refused "spec.chaos.maxDown is more than spec.learners.replicas" \
	"$HEAD
spec: {$D, learners: {replicas: 2}, chaos: {enabled: true, maxDown: 3}}"
refused "spec.learners.replicas: Invalid value: 0" \
	"$HEAD
spec: {$D, learners: {replicas: 0}}"
refused "spec.data: Required value" \
	"$HEAD
spec: {learners: {replicas: 2}}"

# --- the operator, behind the fault proxy -------------------------------
python3 "$ROOT/tests/k8s/faultproxy.py" 0 "$KUBE_SERVER" "$KUBE_CA" "$WORK/proxy.port" \
	>"$WORK/proxy.log" 2>&1 &
PIDS+=($!)
until_ok 10 "fault proxy up" test -s "$WORK/proxy.port"
PROXY_PORT=$(cat "$WORK/proxy.port")
cat >"$WORK/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: proxy
  cluster: {server: "http://127.0.0.1:$PROXY_PORT"}
users:
- name: ddiloco-operator
  user: {token: "$SA_TOKEN"}
contexts:
- name: proxy
  context: {cluster: proxy, user: ddiloco-operator, namespace: $NS}
current-context: proxy
EOF
OP1=$(free_port)
DDILOCO_LOG=debug "$BIN" operator --kubeconfig "$WORK/kubeconfig" --namespace "$NS" \
	--http "127.0.0.1:$OP1" --leader-elect --lease-namespace ddiloco-system --lease-name "$NS" --identity op-a \
	--no-chaos --resync 5 >"$WORK/op1.log" 2>&1 &
PIDS+=($!)
OP1_PID=$!
until_ok 30 "operator ready" curl -sf "http://127.0.0.1:$OP1/readyz"
until_ok 30 "operator leads" "test \"\$(metric \"\$OP1\" ddiloco_operator_leader)\" = 1"

# --- a job: children, owner references, fake nodes, columns -------------
cat >"$WORK/job.yaml" <<EOF
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: demo}
spec:
  learners:
    replicas: 4
    image: ddiloco:0.1.0
    resources: {cpu: "1", memory: 512Mi}
    nodeSelector: {type: kwok}
  syncer: {minQuorum: 2, storage: ""}
  data: {path: /data/tiny.txt}
EOF
KN apply -f "$WORK/job.yaml" >/dev/null || fail "job refused"
JOB_UID=$(jp ddjob/demo '{.metadata.uid}')
until_ok 60 "4 learner pods" "test \"\$(learner_pods demo)\" = 4"
until_ok 30 "syncer StatefulSet" KN get statefulset demo-syncer
for obj in pod/demo-learner-0 pod/demo-learner-3 statefulset/demo-syncer service/demo-syncer configmap/demo-spec networkpolicy/demo-syncer; do
	ref=$(jp "$obj" '{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].uid}/{.metadata.ownerReferences[0].controller}/{.metadata.ownerReferences[0].blockOwnerDeletion}')
	[ "$ref" = "DecoupledTrainingJob/$JOB_UID/true/true" ] || fail "$obj owner reference: $ref"
done
[ "$(jp service/demo-syncer '{.spec.clusterIP}')" = None ] || fail "syncer Service is not headless"
[ "$(jp pod/demo-learner-1 '{.spec.initContainers[0].restartPolicy}')" = Always ] \
	|| fail "sidecar is not a native sidecar"
[ "$(jp pod/demo-learner-1 '{.spec.volumes[0].emptyDir.medium}')" = Memory ] \
	|| fail "exchange volume is not in memory"
[ "$(jp pod/demo-learner-1 '{.spec.containers[0].resources.requests.memory}')" = 512Mi ] \
	|| fail "resources not passed through"
KN get configmap demo-spec -o 'jsonpath={.data.job\.json}' | grep -q '"replicas":4' \
	|| fail "the spec ConfigMap does not hold the job"
for i in 0 1 2 3; do
	until_ok 60 "learner $i Running" pod_running "demo-learner-$i"
	case $(jp "pod/demo-learner-$i" '{.spec.nodeName}') in
	kwok-node-*) ;;
	*) fail "demo-learner-$i is not on a fake node" ;;
	esac
done
until_ok 60 "syncer pod Running" pod_running demo-syncer-0
until_ok 60 "job Running" phase_is demo Running
cond_is demo Created True || fail "Created is not True"
cond_is demo Running True || fail "Running is not True"
[ "$(jp ddjob/demo '{.status.observedGeneration}')" = "$(jp ddjob/demo '{.metadata.generation}')" ] \
	|| fail "observedGeneration is not the generation"
until_ok 30 "4/4 learners ready" "test \"\$(jp ddjob/demo '{.status.learnersReady}')\" = 4/4"
KN get ddjobs >"$WORK/get.txt"
head -1 "$WORK/get.txt" | grep -Eq '^NAME +PHASE +LEARNERS +SHARDS +ROUND +TOKENS +LOSS +GOODPUT +AGE' \
	|| { cat "$WORK/get.txt" >&2; fail "kubectl get ddjobs columns"; }
# SHARDS 0/1: the syncer's pod is ready (kwok) but no syncer answers its
# /status here (docs/operator.md, Shards)
grep -Eq '^demo +Running +4/4 +0/1 ' "$WORK/get.txt" || { cat "$WORK/get.txt" >&2; fail "kubectl get ddjobs row"; }
KN get events --field-selector involvedObject.name=demo -o jsonpath='{.items[*].reason}' \
	| grep -q Created || fail "no Created event"

# --- a deleted learner: only it comes back; backoff grows ---------------
declare -A UID0
for i in 0 1 2 3; do UID0[$i]=$(uid_of "demo-learner-$i"); done
KN delete pod demo-learner-2 --wait=false >/dev/null
until_ok 60 "learner 2 recreated" replaced demo-learner-2 "${UID0[2]}"
for i in 0 1 3; do
	[ "$(uid_of "demo-learner-$i")" = "${UID0[$i]}" ] || fail "learner $i was restarted too"
done
until_ok 30 "restart counted" "test \"\$(jp ddjob/demo '{.status.learners.restarts[2]}')\" = 1"
for n in 2 3; do
	u=$(uid_of demo-learner-2)
	KN delete pod demo-learner-2 --wait=false >/dev/null
	until_ok 60 "learner 2 recreated ($n)" replaced demo-learner-2 "$u"
done
KN get events --field-selector involvedObject.name=demo,reason=LearnerRecreated \
	-o jsonpath='{range .items[*]}{.message}{"\n"}{end}' >"$WORK/recreated.txt"
grep -q "learner 2 recreated (restart 1, backoff 0s)" "$WORK/recreated.txt" || fail "restart 1 event"
grep -q "learner 2 recreated (restart 2, backoff 1s)" "$WORK/recreated.txt" || fail "restart 2 event"
grep -q "learner 2 recreated (restart 3, backoff 2s)" "$WORK/recreated.txt" || fail "restart 3 event"
until_ok 30 "3 restarts in status" "test \"\$(jp ddjob/demo '{.status.learners.restarts}')\" = \"[0,0,3,0]\""

# --- the API server misbehaving -----------------------------------------
same_children() {
	[ "$(learner_pods demo)" = 4 ] || return 1
	[ "$(KN get statefulsets -l ddiloco.io/job=demo -o name | wc -l)" = 1 ] || return 1
	[ "$(KN get services -l ddiloco.io/job=demo -o name | wc -l)" = 1 ] || return 1
	for i in 0 1 2 3; do pod_running "demo-learner-$i" || return 1; done
}
recreated_after() {   # recreated_after INDEX: delete it, wait for a new one
	local u
	u=$(uid_of "demo-learner-$1")
	KN delete pod "demo-learner-$1" --wait=false >/dev/null
	until_ok 90 "learner $1 recreated after $2" replaced "demo-learner-$1" "$u"
}
# a watch cut mid-stream
fault "cut?match=/pods"
recreated_after 1 "a cut watch"
[ "$(curl -sf "http://127.0.0.1:$PROXY_PORT/__fault/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["cut"])')" -ge 1 ] \
	|| fail "no watch was cut"
# 410 as an in-stream ERROR event, then as the watch's HTTP status
g0=$(metric "$OP1" 'ddiloco_operator_relists_gone_total{resource="pods"}')
fault "expire?match=/pods"
until_ok 30 "relist after in-stream 410" "test \"\$(metric \"\$OP1\" 'ddiloco_operator_relists_gone_total{resource=\"pods\"}')\" -gt \"\$g0\""
recreated_after 0 "an in-stream 410"
g1=$(metric "$OP1" 'ddiloco_operator_relists_gone_total{resource="pods"}')
fault "answer?code=410&method=GET&match=/pods%5C?watch&n=1"
fault "cut?match=/pods"
until_ok 30 "relist after HTTP 410" "test \"\$(metric \"\$OP1\" 'ddiloco_operator_relists_gone_total{resource=\"pods\"}')\" -gt \"\$g1\""
# 409 on status writes
c0=$(metric "$OP1" ddiloco_operator_status_conflicts_total)
fault "answer?code=409&method=PUT&match=/status&n=2"
recreated_after 3 "409s on status"
until_ok 30 "conflicts counted" "test \"\$(metric \"\$OP1\" ddiloco_operator_status_conflicts_total)\" -gt \"\$c0\""
until_ok 30 "status after 409s" "test \"\$(jp ddjob/demo '{.status.learners.restarts[3]}')\" = 1"
# 500 on apply
fault "answer?code=500&method=PATCH&match=/pods/demo-learner-1&n=3"
recreated_after 1 "500s on apply"
KN get events --field-selector involvedObject.name=demo,reason=CreateFailed \
	-o jsonpath='{.items[*].message}' | grep -q "500" || fail "no CreateFailed event for a 500"
until_ok 30 "Created back to True" cond_is demo Created True
# after all that: exactly the children there should be
until_ok 60 "children intact" same_children
sleep 3
same_children || fail "children changed after recovery"
[ "$(jp ddjob/demo '{.status.learners.restarts}')" = "[1,2,3,1]" ] \
	|| fail "restarts after faults: $(jp ddjob/demo '{.status.learners.restarts}')"

# --- immutable spec, suspend and resume ---------------------------------
if KN patch ddjob demo --type merge -p '{"spec":{"model":{"layers":3}}}' >"$WORK/out" 2>&1; then
	fail "model change accepted on a running job"
fi
grep -q "spec.model is immutable" "$WORK/out" || { cat "$WORK/out" >&2; fail "immutable message"; }
KN patch ddjob demo --type merge -p '{"spec":{"suspend":true}}' >/dev/null
until_ok 60 "suspended" phase_is demo Suspended
until_ok 60 "learners gone" "test \"\$(learner_pods demo)\" = 0"
until_ok 60 "syncer gone" gone statefulset/demo-syncer
cond_is demo Suspended True || fail "Suspended condition"
KN get configmap demo-spec >/dev/null || fail "suspend deleted the spec ConfigMap"
KN patch ddjob demo --type merge -p '{"spec":{"suspend":false}}' >/dev/null
until_ok 60 "learners back" "test \"\$(learner_pods demo)\" = 4"
until_ok 90 "running again" phase_is demo Running
cond_is demo Suspended False || fail "Suspended condition after resume"

# --- Succeeded stays terminal; ttlSecondsAfterFinished ------------------
cat >"$WORK/one.yaml" <<EOF
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: one}
spec:
  ttlSecondsAfterFinished: 4
  learners: {replicas: 1}
  syncer: {storage: ""}
  data: {path: /data/tiny.txt}
EOF
KN apply -f "$WORK/one.yaml" >/dev/null
until_ok 60 "one: learner Running" pod_running one-learner-0
KN patch pod one-learner-0 --subresource=status --type merge \
	-p '{"status":{"phase":"Succeeded"}}' >/dev/null || fail "cannot mark the learner Succeeded"
until_ok 60 "one: Succeeded" phase_is one Succeeded
# the condition a batch/v1 Job has at its end: Complete (phase Succeeded)
cond_is one Complete True || fail "Complete condition"
[ "$(jp ddjob/one '{.status.conditions[?(@.type=="Complete")].reason}')" = LearnersCompleted ] \
	|| fail "Complete reason"
KN wait --for=condition=Complete --timeout=10s ddjob/one >/dev/null \
	|| fail "kubectl wait --for=condition=Complete"
[ -z "$(jp ddjob/one '{.status.conditions[?(@.type=="Succeeded")].type}')" ] \
	|| fail "a Succeeded condition beside Complete"
KN delete pod one-learner-0 --wait=false >/dev/null 2>&1 || true
sleep 2
[ "$(learner_pods one)" = 0 ] || fail "a finished job got its learner back"
until_ok 60 "ttl deleted the job" gone ddjob/one

# --- leader election: a second operator waits, then takes over ----------
OP2=$(free_port)
"$BIN" operator --kubeconfig "$WORK/kubeconfig" --namespace "$NS" \
	--http "127.0.0.1:$OP2" --leader-elect --lease-namespace ddiloco-system --lease-name "$NS" --identity op-b \
	--no-chaos >"$WORK/op2.log" 2>&1 &
PIDS+=($!)
until_ok 30 "second operator ready" curl -sf "http://127.0.0.1:$OP2/readyz"
sleep 3
[ "$(metric "$OP2" ddiloco_operator_leader)" = 0 ] || fail "two leaders"
[ "$(metric "$OP2" ddiloco_operator_reconciles_total)" = 0 ] || fail "the standby reconciled"
[ "$(K -n ddiloco-system get lease "$NS" -o jsonpath='{.spec.holderIdentity}')" = op-a ] || fail "lease holder"
kill "$OP1_PID"
wait "$OP1_PID" 2>/dev/null || true
until_ok 30 "standby leads" "test \"\$(metric \"\$OP2\" ddiloco_operator_leader)\" = 1"
[ "$(K -n ddiloco-system get lease "$NS" -o jsonpath='{.spec.holderIdentity}')" = op-b ] || fail "lease not taken over"
recreated_after 2 "a leader change"

# --- deleting the job collects its children -----------------------------
KN delete ddjob demo --wait=false >/dev/null
until_ok 90 "children collected" "test \"\$(KN get pods,statefulsets,services,configmaps -l ddiloco.io/job=demo -o name | wc -l)\" = 0"
echo "test_operator: ok"
