#!/usr/bin/env bash
# Namespace users and DecoupledTrainingJobs (docs/operator.md, "Access for
# namespace users"): with deploy/05-user-rbac.yaml applied, the
# ClusterRole aggregation controller folds its two roles into the
# built-in ones, and RoleBindings in one namespace to them give:
#  - edit: create, update, patch, delete ddjobs, and a create through the
#    API server goes through; the status stays the operator's;
#  - view: get, list, watch ddjobs and their status, no create (the API
#    server answers Forbidden), no delete;
#  - admin: what edit may; and nothing in another namespace.
# The chart renders the same two roles (and none with
# aggregateRoles.enabled=false).
# Needs the variables of /tmp/ddiloco-k8s/env (tests/k8s/run.sh sets them).
set -euo pipefail

: "${KUBECTL:?run through make test-k8s}" "${KUBE_SERVER:?}" "${KUBE_CA:?}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
NS=rbac-$$-$RANDOM
OTHER=$NS-other
WORK=$(mktemp -d /tmp/test_rbac.XXXXXX)
K() { "$KUBECTL" "$@"; }

fail() {
	echo "test_rbac: FAIL: $*" >&2
	K get clusterrole ddiloco-view ddiloco-edit -o yaml >&2 2>/dev/null || true
	exit 1
}
cleanup() {
	local rc=$?
	set +e
	K delete namespace "$NS" "$OTHER" --wait=false >/dev/null 2>&1
	# cluster-wide: the chart's release "ddiloco" makes roles of these names
	K delete -f "$ROOT/deploy/05-user-rbac.yaml" --wait=false >/dev/null 2>&1
	rm -rf "$WORK"
	exit "$rc"
}
. "$ROOT/tests/k8s/lib.sh"
KV=$(kube_version)
trap cleanup EXIT
command -v jq >/dev/null || fail "no jq (make deps)"

apply_crd
K apply -f "$ROOT/deploy/05-user-rbac.yaml" >/dev/null || fail "deploy/05-user-rbac.yaml refused"
K create namespace "$NS" >/dev/null
K create namespace "$OTHER" >/dev/null
for who in editor viewer owner; do
	K -n "$NS" create serviceaccount "$who" >/dev/null
done
K -n "$NS" create rolebinding editor --clusterrole=edit --serviceaccount="$NS:editor" >/dev/null
K -n "$NS" create rolebinding viewer --clusterrole=view --serviceaccount="$NS:viewer" >/dev/null
K -n "$NS" create rolebinding owner --clusterrole=admin --serviceaccount="$NS:owner" >/dev/null

# can WHO VERB RESOURCE[:SUBRESOURCE] [NAMESPACE]: kubectl auth can-i's
# answer, yes or no
can() {
	local res=${3%%:*} sub=()
	[ "$res" = "$3" ] || sub=(--subresource="${3#*:}")
	K auth can-i "$2" "$res" "${sub[@]}" -n "${4:-$NS}" \
		--as="system:serviceaccount:$NS:$1" 2>/dev/null || true
}
# want WHO VERB RESOURCE[:SUBRESOURCE] ANSWER [NAMESPACE]
want() {
	local got
	got=$(can "$1" "$2" "$3" "${5:-}")
	[ "$got" = "$4" ] || fail "$1 may $2 $3 in ${5:-$NS}: '$got', want '$4'"
}

# the aggregation controller fills view, edit and admin in its own time
until_ok 60 "edit aggregates ddiloco-edit" '[ "$(can editor create ddjobs)" = yes ]'
until_ok 60 "view aggregates ddiloco-view" '[ "$(can viewer list ddjobs)" = yes ]'
until_ok 60 "admin aggregates ddiloco-edit" '[ "$(can owner create ddjobs)" = yes ]'

for verb in get list watch create update patch delete deletecollection; do
	want editor "$verb" ddjobs yes
	want owner "$verb" ddjobs yes
done
for verb in get list watch; do
	want viewer "$verb" ddjobs yes
	want viewer "$verb" ddjobs:status yes
done
for verb in create update patch delete deletecollection; do
	want viewer "$verb" ddjobs no
done
want editor update ddjobs:status no
want editor patch ddjobs:status no
want editor create ddjobs no "$OTHER"
want viewer list ddjobs no "$OTHER"
echo "ok: edit and admin may create/update/patch/delete ddjobs, view may get/list/watch them and their status"

# ... and the API server acts on it: the editor's create goes through,
# the viewer's is Forbidden, the viewer lists what the editor made
job() {
	cat <<EOF2
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: $1}
spec:
  learners: {replicas: 1}
  syncer: {storage: ""}
  data: {path: /data/tiny.txt}
EOF2
}
job by-editor | K -n "$NS" --as="system:serviceaccount:$NS:editor" create -f - >"$WORK/edit.out" 2>&1 ||
	{ cat "$WORK/edit.out" >&2; fail "the editor's create was refused"; }
if job by-viewer | K -n "$NS" --as="system:serviceaccount:$NS:viewer" create -f - >"$WORK/view.out" 2>&1; then
	fail "the viewer's create went through"
fi
grep -q "Forbidden\|forbidden" "$WORK/view.out" ||
	{ cat "$WORK/view.out" >&2; fail "the viewer's create failed for another reason"; }
got=$(K -n "$NS" --as="system:serviceaccount:$NS:viewer" get ddjobs -o name)
[ "$got" = decoupledtrainingjob.ddiloco.io/by-editor ] || fail "the viewer lists '$got'"
echo "ok: the editor created by-editor, the viewer was Forbidden and lists it"

# --- the chart: the same roles, and none when switched off -------------
roles_of() {   # the aggregated ClusterRoles of a manifest: names, labels, rules
	# (kubectl prints one JSON object per document)
	K create --dry-run=client -o json -f "$1" |
		jq -cSs '[.[] | (.items // [.])[] | select(.kind == "ClusterRole")
			 | select(.metadata.labels | tostring | test("aggregate-to"))
			 | {name: .metadata.name,
			    agg: (.metadata.labels | with_entries(select(.key | startswith("rbac.")))),
			    rules}] | sort_by(.name)'
}
"$HELM" template --kube-version "$KV" ddiloco "$ROOT/charts/ddiloco" --namespace ddiloco-system >"$WORK/chart.yaml" ||
	fail "helm template failed"
want_roles=$(roles_of "$ROOT/deploy/05-user-rbac.yaml")
[ "$(jq length <<<"$want_roles")" = 2 ] || fail "deploy/05-user-rbac.yaml: $want_roles"
chart_roles=$(roles_of "$WORK/chart.yaml")
[ "$chart_roles" = "$want_roles" ] || fail "the chart's roles $chart_roles, deploy/'s $want_roles"
"$HELM" template --kube-version "$KV" ddiloco "$ROOT/charts/ddiloco" --namespace ddiloco-system \
	--set aggregateRoles.enabled=false >"$WORK/chart-off.yaml" || fail "helm template (off) failed"
[ "$(roles_of "$WORK/chart-off.yaml")" = "[]" ] || fail "aggregateRoles.enabled=false still renders roles"
echo "ok: the chart renders the same two roles, none when switched off"
