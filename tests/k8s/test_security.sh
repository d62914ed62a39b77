#!/usr/bin/env bash
# A job in a namespace that enforces the Pod Security Standard
# "restricted" (the API server's PodSecurity admission), with the operator
# as a local process holding the deploy/ service account's token:
#  - the namespace really enforces: a plain pod is refused there;
#  - the job's pods are admitted: the learner pods and the syncer's pod
#    (made by the StatefulSet controller) exist and go Running on the
#    fake nodes, and the job Running; a second job with a checkpoint claim
#    and a data claim gets its pods admitted too;
#  - learner and syncer pods mount no service-account token, run as the
#    image's user with every capability dropped and a read-only root;
#  - the operator's own pod, from deploy/04-operator.yaml and from the
#    Helm chart, is admitted there (server dry run);
#  - the job's NetworkPolicy <job>-syncer: owned by the job, selects the
#    syncer's pod only; gRPC from the job's learners and evaluator, HTTP from the
#    operator's pods in its namespace, whose labels are the ones deploy/
#    and the chart give the operator; deleted, it comes back;
#  - the job's Secret <job>-tls: owned by the job, immutable, the CA
#    certificate and the syncer's and each learner's pair (openssl checks
#    the chain, the syncer's DNS names and the identity URIs), no CA key;
#    the syncer and each learner's sidecar mount their own pair only; the
#    operator's account may create and get Secrets, nothing more;
#  - deleted, <job>-tls is made again with a new CA and the job's pods are
#    made again; a Secret planted under a new job's name is refused
#    (SecretNotOwned, no pod) until it is gone; a privileged template is
#    refused (TemplateRefused, no child).
# Needs the variables of /tmp/ddiloco-k8s/env (tests/k8s/run.sh sets them).
set -euo pipefail

: "${KUBECTL:?run through make test-k8s}" "${KUBE_SERVER:?}" "${KUBE_CA:?}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) BIN=$BUILD/ddiloco ;; *) BIN=$ROOT/$BUILD/ddiloco ;; esac
NS=sec-$$-$RANDOM
OPNS=ddiloco-system
WORK=$(mktemp -d /tmp/test_security.XXXXXX)
PIDS=()
K() { "$KUBECTL" "$@"; }

fail() {
	echo "test_security: FAIL: $*" >&2
	KN get ddjobs,pods,statefulsets,networkpolicies -o wide >&2 2>/dev/null || true
	KN get events 2>/dev/null | tail -15 >&2 || true
	[ -e "$WORK/op.log" ] && { echo "--- operator" >&2; tail -30 "$WORK/op.log" >&2; }
	exit 1
}
cleanup() {
	local rc=$?
	set +e
	stop_pids
	K delete namespace "$NS" --wait=false >/dev/null 2>&1
	rm -rf "$WORK"
	exit "$rc"
}
. "$ROOT/tests/k8s/lib.sh"
KV=$(kube_version)
trap cleanup EXIT
# eq WHAT GOT WANT: two JSON values, compared after jq -S
eq() {
	[ "$(jq -cS . <<<"$2")" = "$(jq -cS . <<<"$3")" ] ||
		fail "$1: got $(jq -cS . <<<"$2"), want $(jq -cS . <<<"$3")"
}

[ -x "$BIN" ] || fail "no $BIN (make first)"
command -v jq >/dev/null || fail "no jq (make deps)"
apply_crd
K get namespace "$OPNS" >/dev/null 2>&1 || K create namespace "$OPNS" >/dev/null
K apply -f "$ROOT/deploy/02-rbac.yaml" >/dev/null || fail "deploy/ RBAC refused"
SA_TOKEN=$(K -n "$OPNS" create token ddiloco-operator --duration=1h) \
	|| fail "no token for the ddiloco-operator service account"

# --- the namespace enforces restricted ----------------------------------
K create namespace "$NS" >/dev/null
K label namespace "$NS" pod-security.kubernetes.io/enforce=restricted \
	pod-security.kubernetes.io/enforce-version=latest >/dev/null
until_ok 60 "default service account in $NS" KN get serviceaccount default
if KN run plain --image=ddiloco:latest --restart=Never >"$WORK/plain.out" 2>&1; then
	fail "a pod without a security context was admitted: PodSecurity is not enforcing"
fi
grep -q 'violates PodSecurity "restricted:latest"' "$WORK/plain.out" ||
	{ cat "$WORK/plain.out" >&2; fail "the plain pod was refused for another reason"; }
echo "ok: $NS enforces restricted: $(head -c 160 "$WORK/plain.out")..."

# the operator's own pod (deploy/ and the chart) is admitted there too
op_pod() {   # a Deployment's pod template as a Pod, without its account
	jq -c --arg n "$1" 'select(.kind == "Deployment") |
		{apiVersion: "v1", kind: "Pod", metadata: {name: $n, labels: .spec.template.metadata.labels},
		 spec: (.spec.template.spec | del(.serviceAccountName))}'
}
K create --dry-run=client -o json -f "$ROOT/deploy/04-operator.yaml" | op_pod deploy-op >"$WORK/op-pod.json"
KN create --dry-run=server -f "$WORK/op-pod.json" >"$WORK/op-pod.out" 2>&1 ||
	{ cat "$WORK/op-pod.out" >&2; fail "deploy/04-operator.yaml's pod is refused under restricted"; }
DEPLOY_LABELS=$(jq -c .metadata.labels "$WORK/op-pod.json")
CHART_LABELS=""
[ -n "${HELM:-}" ] && [ -x "$HELM" ] || fail "no helm at '${HELM:-}' (tests/k8s/cluster/build.sh; HELM in /tmp/ddiloco-k8s/env)"
"$HELM" template --kube-version "$KV" ddiloco "$ROOT/charts/ddiloco" --namespace "$OPNS" >"$WORK/chart.yaml" ||
	fail "helm template failed"
K create --dry-run=client -o json -f "$WORK/chart.yaml" 2>/dev/null |
	jq -c 'if .kind == "List" then .items[] else . end' | op_pod chart-op >"$WORK/chart-pod.json"
[ -s "$WORK/chart-pod.json" ] || fail "no Deployment in the chart"
KN create --dry-run=server -f "$WORK/chart-pod.json" >"$WORK/chart-pod.out" 2>&1 ||
	{ cat "$WORK/chart-pod.out" >&2; fail "the chart's operator pod is refused under restricted"; }
grep -q -- "--operator-namespace" "$WORK/chart.yaml" || fail "the chart does not pass --operator-namespace"
CHART_LABELS=$(jq -c .metadata.labels "$WORK/chart-pod.json")
echo "ok: the operator's pod (deploy/ and the chart) passes restricted"

# --- the operator, as the deploy/ service account ------------------------
cat >"$WORK/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: "$KUBE_SERVER", certificate-authority: "$KUBE_CA"}
users:
- name: ddiloco-operator
  user: {token: "$SA_TOKEN"}
contexts:
- name: test
  context: {cluster: test, user: ddiloco-operator, namespace: $NS}
current-context: test
EOF
"$BIN" operator --kubeconfig "$WORK/kubeconfig" --namespace "$NS" --http off --no-chaos \
	--operator-namespace "$OPNS" --resync 5 >"$WORK/op.log" 2>&1 &
PIDS+=($!)

GRPC=7100
HTTP=7101
KN apply -f - >/dev/null <<EOF
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: demo}
spec:
  learners: {replicas: 2}
  syncer: {storage: "", port: $GRPC, httpPort: $HTTP}
  data: {path: /data/tiny.txt}
---
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: claims}
spec:
  learners: {replicas: 1}
  syncer: {storage: 1Gi}
  data: {path: /data/tiny.txt, claimName: corpus}
EOF
JOB_UID=$(jp ddjob/demo '{.metadata.uid}')
[ -n "$JOB_UID" ] || fail "job demo not stored"

pod_running() { [ "$(jp "pod/$1" '{.status.phase}')" = Running ]; }
until_ok 90 "learner pods Running" "pod_running demo-learner-0 && pod_running demo-learner-1"
until_ok 90 "the syncer's pod Running" "pod_running demo-syncer-0"
until_ok 60 "job demo Running" '[ "$(jp ddjob/demo "{.status.phase}")" = Running ]'
# the claims job: pods admitted (they wait for their claims, which no
# provisioner binds here, but they exist)
until_ok 60 "pods of job claims admitted" "KN get pod claims-learner-0 && KN get pod claims-syncer-0"
if KN get events --field-selector reason=FailedCreate -o name | grep -q .; then
	KN get events --field-selector reason=FailedCreate >&2
	fail "a pod was refused"
fi
echo "ok: every pod of both jobs admitted under restricted; demo Running"

# --- each pod: no token, the image's user, nothing to escalate --------------
for p in demo-learner-0 demo-learner-1 demo-syncer-0 claims-learner-0 claims-syncer-0; do
	KN get pod "$p" -o json >"$WORK/pod.json"
	j() { jq -c "$1" "$WORK/pod.json"; }
	eq "$p automountServiceAccountToken" "$(j .spec.automountServiceAccountToken)" false
	eq "$p token volume" "$(j '[.spec.volumes[].name | select(startswith("kube-api-access"))]')" '[]'
	eq "$p token mounts" "$(j '[.spec.containers[], (.spec.initContainers // [])[] | .volumeMounts[]
		| select(.mountPath == "/var/run/secrets/kubernetes.io/serviceaccount")]')" '[]'
	eq "$p pod securityContext" "$(j '.spec.securityContext | {runAsNonRoot, runAsUser, runAsGroup, seccompProfile}')" \
		'{"runAsNonRoot":true,"runAsUser":65532,"runAsGroup":65532,"seccompProfile":{"type":"RuntimeDefault"}}'
	eq "$p containers' securityContext" \
		"$(j '[.spec.containers[], (.spec.initContainers // [])[] | .securityContext] | unique')" \
		'[{"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]},"readOnlyRootFilesystem":true}]'
done
eq "learner containers" "$(jq -c '[.spec.initContainers[].name, .spec.containers[].name]' \
	<<<"$(KN get pod demo-learner-0 -o json)")" '["sidecar","learner"]'
echo "ok: learner and syncer pods: no service-account token, uid 65532, read-only root, no capabilities"

# --- the NetworkPolicy ------------------------------------------------------
np() { KN get networkpolicy demo-syncer -o json; }
until_ok 30 "NetworkPolicy demo-syncer" KN get networkpolicy demo-syncer
N=$(np)
eq "policy owner" "$(jq -c '.metadata.ownerReferences | map({kind, name, uid, controller, blockOwnerDeletion})' <<<"$N")" \
	"[{\"kind\":\"DecoupledTrainingJob\",\"name\":\"demo\",\"uid\":\"$JOB_UID\",\"controller\":true,\"blockOwnerDeletion\":true}]"
eq "policy podSelector" "$(jq -c .spec.podSelector <<<"$N")" \
	'{"matchLabels":{"ddiloco.io/job":"demo","ddiloco.io/role":"syncer"}}'
eq "policy types" "$(jq -c .spec.policyTypes <<<"$N")" '["Ingress"]'
eq "policy ingress" "$(jq -c .spec.ingress <<<"$N")" "[
	{\"from\":[{\"podSelector\":{\"matchLabels\":{\"ddiloco.io/job\":\"demo\",\"ddiloco.io/role\":\"learner\"}}},
	           {\"podSelector\":{\"matchLabels\":{\"ddiloco.io/job\":\"demo\",\"ddiloco.io/role\":\"evaluator\"}}}],
	 \"ports\":[{\"protocol\":\"TCP\",\"port\":$GRPC}]},
	{\"from\":[{\"namespaceSelector\":{\"matchLabels\":{\"kubernetes.io/metadata.name\":\"$OPNS\"}},
	            \"podSelector\":{\"matchLabels\":{\"app.kubernetes.io/component\":\"operator\",\"app.kubernetes.io/name\":\"ddiloco\"}}}],
	 \"ports\":[{\"protocol\":\"TCP\",\"port\":$HTTP}]}]"
# the selectors pick what they mean: the syncer's pod alone ...
sel() { jq -r '.matchLabels | to_entries | map("\(.key)=\(.value)") | join(",")'; }
eq "pods the policy covers" "$(KN get pods -l "$(jq .spec.podSelector <<<"$N" | sel)" -o json |
	jq -c '[.items[].metadata.name]')" '["demo-syncer-0"]'
# ... the job's learners as gRPC clients (the claims job's are not) ...
eq "gRPC clients" "$(KN get pods -l "$(jq '.spec.ingress[0].from[0].podSelector' <<<"$N" | sel)" -o json |
	jq -c '[.items[].metadata.name] | sort')" '["demo-learner-0","demo-learner-1"]'
# ... the namespace the operator runs in (its automatic name label) ...
eq "namespace selector" "$(K get namespaces -l "$(jq '.spec.ingress[1].from[0].namespaceSelector' <<<"$N" | sel)" -o json |
	jq -c '[.items[].metadata.name]')" "[\"$OPNS\"]"
# ... and the operator's pods as deploy/ and the chart label them
OPSEL=$(jq -c '.spec.ingress[1].from[0].podSelector.matchLabels' <<<"$N")
for labels in "$DEPLOY_LABELS" $CHART_LABELS; do
	[ "$(jq -c --argjson s "$OPSEL" '. as $l | $s | to_entries | all(.value == $l[.key])' <<<"$labels")" = true ] ||
		fail "the operator's pod labels $labels do not match the policy's $OPSEL"
done
eq "claims policy ports" "$(KN get networkpolicy claims-syncer -o json | jq -c '[.spec.ingress[].ports[].port]')" \
	'[7070,7071]'
echo "ok: NetworkPolicy demo-syncer: syncer pod only; port $GRPC from the job's learners, $HTTP from $OPNS's operator pods"
# ... and written back under the deploy/ RBAC when changed by hand (drift:
# an update, which the role grants)
KN patch networkpolicy demo-syncer --type merge -p '{"spec":{"ingress":[]}}' >/dev/null ||
	fail "patch the NetworkPolicy"
until_ok 60 "the NetworkPolicy written back" '[ -n "$(jp networkpolicy/demo-syncer "{.spec.ingress}")" ]'
echo "ok: NetworkPolicy demo-syncer emptied by hand, written back with the deploy/ role's update"

# --- the certificates ------------------------------------------------------
until_ok 30 "Secret demo-tls" KN get secret demo-tls
S=$(KN get secret demo-tls -o json)
eq "Secret owner" "$(jq -c '.metadata.ownerReferences | map({kind, uid, controller})' <<<"$S")" \
	"[{\"kind\":\"DecoupledTrainingJob\",\"uid\":\"$JOB_UID\",\"controller\":true}]"
eq "Secret immutable, type" "$(jq -c '[.immutable, .type]' <<<"$S")" '[true,"Opaque"]'
eq "Secret keys" "$(jq -c '.data | keys' <<<"$S")" \
	'["ca.crt","learner-0.crt","learner-0.key","learner-1.crt","learner-1.key","syncer.crt","syncer.key"]'
for k in ca.crt syncer.crt learner-1.crt learner-0.key; do
	jq -r --arg k "$k" '.data[$k]' <<<"$S" | base64 -d >"$WORK/$k" || fail "Secret key $k is not base64"
done
grep -q "PRIVATE KEY" "$WORK/ca.crt" && fail "the CA's key is in the Secret"
openssl verify -CAfile "$WORK/ca.crt" "$WORK/syncer.crt" "$WORK/learner-1.crt" >"$WORK/verify.out" 2>&1 ||
	{ cat "$WORK/verify.out" >&2; fail "the job's certificates do not chain to its CA"; }
openssl x509 -in "$WORK/syncer.crt" -noout -ext subjectAltName >"$WORK/syncer.san"
grep -q "DNS:demo-syncer-0.demo-syncer.$NS.svc," "$WORK/syncer.san" ||
	{ cat "$WORK/syncer.san" >&2; fail "the syncer's certificate lacks the address the sidecars dial"; }
grep -q "URI:ddiloco://demo/syncer" "$WORK/syncer.san" || fail "no syncer identity URI"
openssl x509 -in "$WORK/learner-1.crt" -noout -ext subjectAltName | grep -q "URI:ddiloco://demo/learner/1" ||
	fail "learner-1.crt is not learner 1's"
grep -q "PRIVATE KEY" "$WORK/learner-0.key" || fail "learner-0.key is no key"
# each pod mounts its own pair, read-only; the learner container none
tlsvol() { KN get pod "$1" -o json | jq -c '.spec.volumes[] | select(.name == "tls") | .secret |
	{secretName, defaultMode, items: [.items[] | "\(.key)>\(.path)"]}'; }
eq "learner 1's tls volume" "$(tlsvol demo-learner-1)" \
	'{"secretName":"demo-tls","defaultMode":288,"items":["ca.crt>ca.crt","learner-1.crt>tls.crt","learner-1.key>tls.key"]}'
eq "the syncer's tls volume" "$(tlsvol demo-syncer-0)" \
	'{"secretName":"demo-tls","defaultMode":288,"items":["ca.crt>ca.crt","syncer.crt>tls.crt","syncer.key>tls.key"]}'
eq "tls mounts in learner 1's pod" "$(KN get pod demo-learner-1 -o json | jq -c '[(.spec.initContainers[], .spec.containers[])
	| {name, tls: [.volumeMounts[] | select(.name == "tls") | [.mountPath, .readOnly]]}]')" \
	'[{"name":"sidecar","tls":[["/etc/ddiloco-tls",true]]},{"name":"learner","tls":[]}]'
eq "claims' Secret keys" "$(KN get secret claims-tls -o json | jq -c '.data | keys')" \
	'["ca.crt","learner-0.crt","learner-0.key","syncer.crt","syncer.key"]'
SA=system:serviceaccount:$OPNS:ddiloco-operator
[ "$(K auth can-i create secrets -n "$NS" --as "$SA")" = yes ] || fail "the operator may not create Secrets"
[ "$(K auth can-i get secrets -n "$NS" --as "$SA")" = yes ] || fail "the operator may not read a Secret's owner"
for verb in list watch update patch delete; do
	[ "$(K auth can-i "$verb" secrets -n "$NS" --as "$SA" 2>/dev/null)" = no ] ||
		fail "the operator's account may $verb Secrets"
done
echo "ok: Secret demo-tls: CA certificate and pairs that chain to it; each pod mounts its own; the operator may create and get Secrets, nothing more"

# --- <job>-tls is the job's own (docs/operator.md, Security) ----------------
# deleted under the running job: made again with a new CA, owned by the
# job, and the learner pods and the syncer's pod made again to mount it
OLD_CA=$(jq -r '.data["ca.crt"]' <<<"$S")
uid_of() { jp "pod/$1" '{.metadata.uid}'; }
OLD_L0=$(uid_of demo-learner-0)
OLD_L1=$(uid_of demo-learner-1)
OLD_S0=$(uid_of demo-syncer-0)
KN delete secret demo-tls >/dev/null
new_secret() {
	local s
	s=$(KN get secret demo-tls -o json 2>/dev/null) || return 1
	[ "$(jq -r '.data["ca.crt"]' <<<"$s")" != "$OLD_CA" ] &&
		[ "$(jq -r '.metadata.ownerReferences[0].uid' <<<"$s")" = "$JOB_UID" ]
}
# the operator reads the Secret's owner at most every 30 s while every
# pod is there (PASS_TLS_EVERY, operator/pass.h)
until_ok 90 "demo-tls made again with a new CA" new_secret
rolled() { local u; u=$(uid_of "$1"); [ -n "$u" ] && [ "$u" != "$2" ] && pod_running "$1"; }
until_ok 120 "learner and syncer pods made again" \
	'rolled demo-learner-0 "$OLD_L0" && rolled demo-learner-1 "$OLD_L1" && rolled demo-syncer-0 "$OLD_S0"'
KN get events --field-selector involvedObject.name=demo,reason=SecretRecreated -o name | grep -q . ||
	fail "no SecretRecreated Event"
S=$(KN get secret demo-tls -o json)
jq -r '.data["ca.crt"]' <<<"$S" | base64 -d >"$WORK/ca2.crt"
jq -r '.data["learner-1.crt"]' <<<"$S" | base64 -d >"$WORK/learner-1b.crt"
openssl verify -CAfile "$WORK/ca2.crt" "$WORK/learner-1b.crt" >/dev/null 2>&1 ||
	fail "the new Secret's certificates do not chain to its CA"
if openssl verify -CAfile "$WORK/ca.crt" "$WORK/learner-1b.crt" >/dev/null 2>&1; then
	fail "the new Secret's certificates chain to the old CA"
fi
until_ok 60 "job demo Running again" '[ "$(jp ddjob/demo "{.status.phase}")" = Running ]'
echo "ok: a deleted demo-tls is made again with a new CA and every pod of the job made again"

# a Secret planted under a job's name before the job: refused, no pod;
# once it is gone, the operator makes the job's own
KN create secret generic planted-tls --from-literal=ca.crt=planted >/dev/null
KN apply -f - >/dev/null <<EOF
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: planted}
spec:
  learners: {replicas: 1}
  syncer: {storage: ""}
  data: {path: /data/tiny.txt}
EOF
PLANTED_UID=$(jp ddjob/planted '{.metadata.uid}')
cond() { jp "ddjob/$1" "{.status.conditions[?(@.type==\"$2\")].$3}"; }
until_ok 60 "planted: SecretNotOwned" '[ "$(cond planted SecretNotOwned status)" = True ]'
[ "$(cond planted SecretNotOwned reason)" = NoOwner ] ||
	fail "planted: reason $(cond planted SecretNotOwned reason), want NoOwner"
cond planted SecretNotOwned message | grep -q "Secret 'planted-tls' has no owner" ||
	fail "planted: the condition does not name the Secret: $(cond planted SecretNotOwned message)"
KN get events --field-selector involvedObject.name=planted,reason=SecretNotOwned -o name | grep -q . ||
	fail "planted: no SecretNotOwned Event"
eq "planted: pods" "$(KN get pods -l ddiloco.io/job=planted -o json | jq -c '[.items[].metadata.name]')" '[]'
KN get statefulset planted-syncer >/dev/null 2>&1 && fail "planted: a StatefulSet was made"
eq "planted-tls untouched" "$(KN get secret planted-tls -o json | jq -c '[(.data | keys), .metadata.ownerReferences]')" \
	'[["ca.crt"],null]'
KN delete secret planted-tls >/dev/null
owned() { [ "$(KN get secret planted-tls -o json 2>/dev/null | jq -r '.metadata.ownerReferences[0].uid')" = "$PLANTED_UID" ]; }
until_ok 60 "planted-tls made by the operator" owned
until_ok 60 "planted: its learner pod" KN get pod planted-learner-0
until_ok 30 "planted: SecretNotOwned False" '[ "$(cond planted SecretNotOwned status)" = False ]'
echo "ok: a planted Secret is refused (SecretNotOwned, no pod); deleted, the job gets its own"

# a template the operator's policy refuses: TemplateRefused naming the
# field, an Event, and nothing made, not even the Secret
KN apply -f - >/dev/null <<EOF
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: priv}
spec:
  learners:
    replicas: 1
    template:
      spec:
        containers: [{name: learner, securityContext: {privileged: true}}]
  syncer: {storage: ""}
  data: {path: /data/tiny.txt}
EOF
until_ok 60 "priv: TemplateRefused" '[ "$(cond priv TemplateRefused status)" = True ]'
[ "$(cond priv TemplateRefused reason)" = PrivilegedContainer ] ||
	fail "priv: reason $(cond priv TemplateRefused reason), want PrivilegedContainer"
cond priv TemplateRefused message |
	grep -q '^spec\.learners\.template\.spec\.containers\[0\]\.securityContext\.privileged is true' ||
	fail "priv: the condition does not name the field: $(cond priv TemplateRefused message)"
KN get events --field-selector involvedObject.name=priv,reason=TemplateRefused -o name | grep -q . ||
	fail "priv: no TemplateRefused Event"
eq "priv: pods" "$(KN get pods -l ddiloco.io/job=priv -o json | jq -c '[.items[].metadata.name]')" '[]'
KN get statefulset priv-syncer >/dev/null 2>&1 && fail "priv: a StatefulSet was made"
KN get secret priv-tls >/dev/null 2>&1 && fail "priv: a Secret was made"
echo "ok: a privileged template is refused (TemplateRefused naming the field, no child)"

# deleted, the policy comes back (the operator watches its kind)
OLD=$(jq -r .metadata.uid <<<"$N")
KN delete networkpolicy demo-syncer >/dev/null
until_ok 30 "the policy recreated" \
	'[ -n "$(jp networkpolicy/demo-syncer "{.metadata.uid}")" ] && [ "$(jp networkpolicy/demo-syncer "{.metadata.uid}")" != "$OLD" ]'
eq "recreated policy's ingress" "$(np | jq -c .spec.ingress)" "$(jq -c .spec.ingress <<<"$N")"
echo "ok: a deleted policy is recreated as it was"

# deleting the job collects the policy with the rest
KN delete ddjob demo --wait=false >/dev/null
until_ok 90 "policy and Secret garbage-collected" '! KN get networkpolicy demo-syncer && ! KN get secret demo-tls'
echo "test_security: ok"
