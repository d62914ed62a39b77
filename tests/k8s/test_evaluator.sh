#!/usr/bin/env bash
# The evaluator's pod (docs/operator.md, "What the operator creates") on
# the real API server, the operator as a local process, pods on the kwok
# nodes (no process runs in them: the pods, not the training):
#  - an external job with spec.evaluator gets <job>-evaluator-0: role
#    label evaluator, the sidecar with --evaluator --learner 0 and
#    --tls-dir, the container evaluator with the job's command and args
#    and DDILOCO_EVALUATOR_ID 0, its own items of <job>-tls; Running;
#  - the Secret has evaluator-0.crt, issued by the job's CA for
#    ddiloco://<job>/evaluator/0 (openssl); the NetworkPolicy admits the
#    role evaluator to the gRPC port;
#  - deleted with kubectl, the pod comes back with a new uid (Event
#    EvaluatorRecreated); ended Failed (its status written as a kubelet
#    would) under backoffLimit 0, it is recreated and the job neither
#    fails nor counts it (failures [0,0]);
#  - suspended, the job's evaluator pod goes; resumed, it comes back;
#  - the operator restarted with another --runtime-image, the pod is
#    replaced (Event EvaluatorRolled), not counted as a recreation;
#  - a job without spec.evaluator has none;
#  - deleted, the job takes its evaluator's pod with it.
# Needs the variables of /tmp/ddiloco-k8s/env (tests/k8s/run.sh sets them).
set -euo pipefail

: "${KUBECTL:?run through make test-k8s}" "${KUBE_SERVER:?}" "${KUBE_CA:?}" "${KUBECONFIG:?}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

. "$ROOT/tests/k8s/lib.sh"
op_test evaluator

job() {   # job NAME [SPEC-LINES]
	cat <<EOF
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: $1}
spec:
  backoffLimit: 0
  learners: {replicas: 2, command: [/usr/bin/python3, train.py]}
  model: {kind: external}
  syncer: {storage: ""}
  data: {path: /data/tiny.txt}
${2:-}
EOF
}
EVAL="  evaluator: {command: [/usr/bin/python3, external.py], args: [--evaluate, --every, '5']}"
eq() {   # eq WHAT GOT WANT
	[ "$2" = "$3" ] || fail "$1: got '$2', want '$3'"
}
running() { [ "$(jp "pod/$1" '{.status.phase}')" = Running ]; }
uid_of() { jp "pod/$1" '{.metadata.uid}'; }
new_uid() {   # new_uid POD OLD-UID: the pod is back with another uid, Running
	local u
	u=$(uid_of "$1")
	[ -n "$u" ] && [ "$u" != "$2" ] && running "$1"
}
crash() {   # crash POD: it ends Failed, its evaluator exited 1
	KN patch pod "$1" --subresource=status --type=merge -p '{"status": {"phase": "Failed",
	  "conditions": [{"type": "Ready", "status": "False"}],
	  "containerStatuses": [{"name": "evaluator", "image": "ddiloco:latest", "imageID": "", "ready": false,
	    "restartCount": 0, "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}}' >/dev/null
}
event_seen() { KN get events -o json | jq -e --arg r "$1" '[.items[] | select(.reason == $r)] | length > 0' >/dev/null; }
ev_count() { KN get events -o json | jq --arg r "$1" '[.items[] | select(.reason == $r) | (.count // 1)] | add // 0'; }

apply_crd
"$KUBECTL" create namespace "$NS" >/dev/null
start_operator

# --- the pod ----------------------------------------------------------------
job ev "$EVAL" | KN apply -f - >/dev/null || fail "apply job ev"
job plain | KN apply -f - >/dev/null || fail "apply job plain"
until_ok 90 "pod ev-evaluator-0 Running" running ev-evaluator-0
P=$(KN get pod ev-evaluator-0 -o json)
eq "labels" "$(jq -c '.metadata.labels | {job: .["ddiloco.io/job"], role: .["ddiloco.io/role"]}' <<<"$P")" \
	'{"job":"ev","role":"evaluator"}'
eq "owner" "$(jq -c '.metadata.ownerReferences | map({kind, name, controller})' <<<"$P")" \
	'[{"kind":"DecoupledTrainingJob","name":"ev","controller":true}]'
eq "restartPolicy" "$(jq -r .spec.restartPolicy <<<"$P")" Never
# the sidecar, the learner library's copy (docs/operator.md, Images), the
# evaluator
eq "containers" "$(jq -c '[.spec.initContainers[].name, .spec.containers[].name]' <<<"$P")" \
	'["sidecar","runtime","evaluator"]'
eq "sidecar" "$(jq -c '.spec.initContainers[0] | {restartPolicy, command}' <<<"$P")" \
	"{\"restartPolicy\":\"Always\",\"command\":[\"ddiloco\",\"sidecar\",\"--job\",\"/etc/ddiloco/job.json\",\"--evaluator\",\"--learner\",\"0\",\"--exchange\",\"/run/ddiloco\",\"--syncer\",\"ev-syncer-0.ev-syncer.$NS.svc:7070\",\"--http\",\"0.0.0.0:9090\",\"--tls-dir\",\"/etc/ddiloco-tls\"]}"
eq "evaluator" "$(jq -c '.spec.containers[0] | {command, args}' <<<"$P")" \
	'{"command":["/usr/bin/python3","external.py"],"args":["--evaluate","--every","5"]}'
eq "env" "$(jq -c '.spec.containers[0].env | map({(.name): .value}) | add' <<<"$P")" \
	'{"DDILOCO_EVALUATOR_ID":"0","DDILOCO_JOB_FILE":"/etc/ddiloco/job.json","DDILOCO_EXCHANGE":"/run/ddiloco","DDILOCO_LIB":"/opt/ddiloco-runtime/lib/libddiloco.so","PYTHONPATH":"/opt/ddiloco-runtime/python","DDILOCO_LOG_FORMAT":"json"}'
eq "tls items" "$(jq -c '.spec.volumes[] | select(.name == "tls") | .secret | [.secretName, (.items | map(.key + ">" + .path))]' <<<"$P")" \
	'["ev-tls",["ca.crt>ca.crt","evaluator-0.crt>tls.crt","evaluator-0.key>tls.key"]]'
eq "image" "$(jq -r '.spec.containers[0].image' <<<"$P")" \
	"$(jp pod/ev-learner-0 '{.spec.containers[0].image}')"
echo "ok: ev-evaluator-0 Running: sidecar --evaluator --learner 0, the job's command and args, its own TLS items"

# --- its certificate and the policy -----------------------------------------
S=$(KN get secret ev-tls -o json)
for k in ca.crt evaluator-0.crt; do
	jq -r --arg k "$k" '.data[$k]' <<<"$S" | base64 -d >"$WORK/$k" || fail "no Secret key $k"
done
openssl verify -CAfile "$WORK/ca.crt" "$WORK/evaluator-0.crt" >"$WORK/verify.out" 2>&1 ||
	{ cat "$WORK/verify.out" >&2; fail "evaluator-0.crt does not chain to the job's CA"; }
openssl x509 -in "$WORK/evaluator-0.crt" -noout -ext subjectAltName |
	grep -q "URI:ddiloco://ev/evaluator/0" || fail "evaluator-0.crt: no URI ddiloco://ev/evaluator/0"
until_ok 30 "NetworkPolicy ev-syncer" KN get networkpolicy ev-syncer
eq "gRPC peers" "$(KN get networkpolicy ev-syncer -o json | jq -c '[.spec.ingress[0].from[].podSelector.matchLabels["ddiloco.io/role"]]')" \
	'["learner","evaluator"]'
echo "ok: Secret ev-tls has evaluator-0.crt for ddiloco://ev/evaluator/0; the policy admits role evaluator"

# --- recreated: deleted, then failed; never counted -------------------------
u=$(uid_of ev-evaluator-0)
KN delete pod ev-evaluator-0 --wait=false >/dev/null || fail "delete ev-evaluator-0"
until_ok 60 "ev-evaluator-0 back after its deletion" new_uid ev-evaluator-0 "$u"
until_ok 30 "Event EvaluatorRecreated" event_seen EvaluatorRecreated
u=$(uid_of ev-evaluator-0)
crash ev-evaluator-0 || fail "end ev-evaluator-0 Failed"
until_ok 60 "ev-evaluator-0 back after it failed" new_uid ev-evaluator-0 "$u"
until_ok 30 "Event EvaluatorEnded" event_seen EvaluatorEnded
eq "failures" "$(jp ddjob/ev '{.status.learners.failures}')" "[0,0]"
phase=$(jp ddjob/ev '{.status.phase}')
case $phase in Failed|Succeeded) fail "the evaluator's end ended the job: $phase" ;; esac
echo "ok: deleted and failed, ev-evaluator-0 came back; failures [0,0], phase $phase"

# --- none without spec.evaluator --------------------------------------------
until_ok 60 "pod plain-learner-1 Running" running plain-learner-1
! KN get pod plain-evaluator-0 >/dev/null 2>&1 || fail "job plain has an evaluator pod"
KN get secret plain-tls -o json | jq -e '.data | has("evaluator-0.crt")' >/dev/null ||
	fail "job plain (external) has no evaluator certificate for a later spec.evaluator"
echo "ok: job plain has no evaluator pod"

# --- suspend, resume ---------------------------------------------------------
KN patch ddjob ev --type=merge -p '{"spec":{"suspend":true}}' >/dev/null || fail "suspend ev"
until_ok 60 "ev-evaluator-0 gone on suspend" '! KN get pod ev-evaluator-0'
KN patch ddjob ev --type=merge -p '{"spec":{"suspend":false}}' >/dev/null || fail "resume ev"
until_ok 90 "ev-evaluator-0 back on resume" running ev-evaluator-0
echo "ok: suspended, ev-evaluator-0 went; resumed, it came back"

# --- rolled: the operator restarted with another runtime image ---------------
until_ok 60 "job ev Running" '[ "$(jp ddjob/ev "{.status.phase}")" = Running ]'
u=$(uid_of ev-evaluator-0)
nrec=$(ev_count EvaluatorRecreated)
kill "$OP_PID" && wait "$OP_PID" || true
start_operator 0 --runtime-image ddiloco:ev-b
on_b() {
	new_uid ev-evaluator-0 "$u" &&
	[ "$(jp pod/ev-evaluator-0 '{.spec.initContainers[0].image}')" = ddiloco:ev-b ]
}
until_ok 120 "ev-evaluator-0 made again with the sidecar ddiloco:ev-b" on_b
until_ok 30 "Event EvaluatorRolled" event_seen EvaluatorRolled
eq "EvaluatorRecreated Events after the roll" "$(ev_count EvaluatorRecreated)" "$nrec"
echo "ok: the runtime image changed, ev-evaluator-0 rolled (EvaluatorRolled), no recreation counted"

# --- the job deleted ---------------------------------------------------------
KN delete ddjob ev --wait=false >/dev/null || fail "delete job ev"
until_ok 90 "ev-evaluator-0 garbage-collected" '! KN get pod ev-evaluator-0'
echo "ok: the job deleted, its evaluator's pod went"
echo "test_evaluator: ok"
