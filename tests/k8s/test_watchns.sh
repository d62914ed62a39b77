#!/usr/bin/env bash
# The chart's watchNamespace narrows the operator's rights to that
# namespace (docs/operator.md, RBAC): the chart's RBAC and service account
# rendered with watchNamespace=NS (helm template) and applied; the
# ClusterRole keeps only the job CRD and Kueue's cluster-wide kinds, the
# rest is a Role (and the chaos controller's) in NS. Asserted with
# kubectl auth can-i as the operator's service account: pods, jobs and
# Secrets in NS yes, in another namespace and cluster-wide no; then the
# operator run here with that account's token only (a kubeconfig of its
# own) and --namespace NS makes a job's pods in NS, and leaves a job in
# the other namespace alone.
# Needs the variables of /tmp/ddiloco-k8s/env (tests/k8s/run.sh sets them).
set -euo pipefail

: "${KUBECTL:?run through make test-k8s}" "${KUBE_SERVER:?}" "${KUBE_CA:?}" "${HELM:?}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

. "$ROOT/tests/k8s/lib.sh"
op_test watchns
OTHER=$NS-other
OPNS=$NS-op
REL=w$$
K() { "$KUBECTL" "$@"; }
extra_cleanup() {
	K delete namespace "$OTHER" "$OPNS" --wait=false >/dev/null 2>&1
	K delete clusterrole "$REL-ddiloco" "$REL-ddiloco-view" "$REL-ddiloco-edit" \
		--wait=false >/dev/null 2>&1
	K delete clusterrolebinding "$REL-ddiloco" --wait=false >/dev/null 2>&1
}

apply_crd
for n in "$NS" "$OTHER" "$OPNS"; do K create namespace "$n" >/dev/null; done
"$HELM" template "$REL" "$ROOT/charts/ddiloco" -n "$OPNS" --kube-version "$(kube_version)" \
	--set watchNamespace="$NS" --show-only templates/rbac.yaml \
	--show-only templates/serviceaccount.yaml >"$WORK/rbac.yaml" || fail "helm template"
K apply -f "$WORK/rbac.yaml" >/dev/null || fail "apply the chart's RBAC"
SA=$(python3 -c 'import sys, yaml
print([d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "ServiceAccount"][0]["metadata"]["name"])' "$WORK/rbac.yaml")
AS=system:serviceaccount:$OPNS:$SA
kinds=$(python3 -c 'import sys, yaml
print(" ".join(sorted("%s/%s" % (d["kind"], d["metadata"].get("namespace", "-")) for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] in ("Role", "ClusterRole"))))' "$WORK/rbac.yaml")
echo "rendered: $kinds"

can() {   # can VERB RESOURCE[:SUBRESOURCE] NAMESPACE|-A
	local where=(-n "$3") res=${2%%:*} sub=()
	[ "$3" = -A ] && where=(--all-namespaces)
	[ "$res" = "$2" ] || sub=(--subresource="${2#*:}")
	K auth can-i "$1" "$res" "${sub[@]}" "${where[@]}" --as="$AS" 2>/dev/null || true
}
for check in "list pods $NS yes" "create pods $NS yes" "list decoupledtrainingjobs $NS yes" \
	"create secrets $NS yes" "patch decoupledtrainingjobs:status $NS yes" \
	"list pods $OTHER no" "create pods $OTHER no" "list decoupledtrainingjobs $OTHER no" \
	"get secrets $OTHER no" "list pods -A no" "list decoupledtrainingjobs -A no"; do
	set -- $check
	got=$(can "$1" "$2" "$3")
	[ "$got" = "$4" ] || fail "can-i $1 $2 in $3: $got, want $4"
done
[ "$(K auth can-i get customresourcedefinitions/decoupledtrainingjobs.ddiloco.io --as="$AS" 2>/dev/null || true)" = yes ] ||
	fail "the operator may not read its CRD"
echo "ok: $SA may act in $NS only (and read its CRD)"

# the operator with that account's token alone
TOKEN=$(K -n "$OPNS" create token "$SA" --duration 1h) || fail "kubectl create token"
cat >"$WORK/sa.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "$KUBE_SERVER", certificate-authority: "$KUBE_CA"}}]
users: [{name: u, user: {token: "$TOKEN"}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: $NS}}]
current-context: x
EOF
"$BIN" operator --kubeconfig "$WORK/sa.kubeconfig" --namespace "$NS" --no-chaos \
	--http 127.0.0.1:0 >"$WORK/op.log" 2>&1 &
OP_PID=$!
for n in "$NS" "$OTHER"; do
	K -n "$n" apply -f - >/dev/null <<EOF || fail "apply a job in $n"
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: w}
spec:
  learners: {replicas: 2}
  syncer: {storage: ""}
  data: {path: /data/tiny.txt}
EOF
done
until_ok 60 "job w's learner pods in $NS" \
	'[ "$(K -n '$NS' get pods -l ddiloco.io/job=w,ddiloco.io/role=learner -o name | grep -c .)" = 2 ]'
until_ok 60 "job w Running in $NS" '[ "$(K -n '$NS' get ddjob w -o jsonpath={.status.phase})" = Running ]'
[ -z "$(K -n "$OTHER" get ddjob w -o jsonpath='{.status}')" ] || fail "the job in $OTHER got a status"
[ "$(K -n "$OTHER" get pods -o name | grep -c . || true)" = 0 ] || fail "the job in $OTHER got pods"
if grep -q "Forbidden\|403" "$WORK/op.log"; then
	grep "Forbidden\|403" "$WORK/op.log" | head -5 >&2
	fail "the operator was refused something"
fi
echo "ok: the operator with the narrowed account ran job w in $NS and left $OTHER alone"
echo "test_watchns: ok"
