#!/usr/bin/env bash
# The job CRD kept by the operator (docs/operator.md, The CRD) on the
# real API server. An older CRD is served (this release's without
# spec.syncer.updateDelta, its schema hash another), as after a Helm
# upgrade, which never upgrades a chart's crds/:
#   - a job's updateDelta is pruned in silence by the API server (kubectl
#     --validate=false: Helm and older clients do not refuse it first);
#   - the operator without --manage-crd says the served CRD differs: its
#     log, a Warning Event CRDSchemaDiffers, ddiloco_operator_crd_current 0;
#   - the operator with --manage-crd applies its own at start: the served
#     CRD's hash is this release's, updateDelta is kept, the gauge is 1
#     with state "applied".
# The CRD is put back as the repository has it at the end.
# Needs the variables of /tmp/ddiloco-k8s/env (tests/k8s/run.sh sets them).
set -euo pipefail

: "${KUBECTL:?run through make test-k8s}" "${KUBE_SERVER:?}" "${KUBE_CA:?}" "${KUBECONFIG:?}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

. "$ROOT/tests/k8s/lib.sh"
op_test crd
extra_cleanup() { apply_crd; }

want=$(sed -n 's/^    ddiloco.io\/schema-hash: "\(.*\)"$/\1/p' "$ROOT/crds/decoupledtrainingjobs.yaml")
[ ${#want} -eq 16 ] || fail "no schema hash in the CRD's source"
# the older CRD: no updateDelta (its field and its immutability clause)
sed -e '/^                    updateDelta: /d' \
    -e 's/ (has(self.updateDelta) == has(oldSelf.updateDelta) \&\& (!has(self.updateDelta) || self.updateDelta == oldSelf.updateDelta)) \&\&//' \
    -e "s/ddiloco.io\/schema-hash: \"$want\"/ddiloco.io\/schema-hash: \"0000000000000000\"/" \
    "$ROOT/crds/decoupledtrainingjobs.yaml" > "$WORK/old-crd.yaml"
grep -q 'updateDelta' "$WORK/old-crd.yaml" && fail "the older CRD still has updateDelta"
"$KUBECTL" apply --server-side --force-conflicts -f "$WORK/old-crd.yaml" >/dev/null || fail "the older CRD refused"
until_ok 30 "the older CRD served" \
	'[ "$("$KUBECTL" get crd decoupledtrainingjobs.ddiloco.io -o jsonpath="{.metadata.annotations.ddiloco\.io/schema-hash}")" = 0000000000000000 ]'
"$KUBECTL" create namespace "$NS" >/dev/null
job() {   # NAME: a job asking for updateDelta
	KN apply --validate=false -f - >/dev/null <<EOF2
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: $1}
spec:
  learners: {replicas: 1}
  syncer: {storage: "", insecure: true, updateDelta: true}
  data: {path: /data/tiny.txt}
EOF2
}
until_ok 30 "job a taken" job a
[ -z "$(jp ddjob/a '{.spec.syncer.updateDelta}')" ] || fail "the older CRD kept updateDelta"

metric() { curl -sf "http://127.0.0.1:$port/metrics" | grep '^ddiloco_operator_crd_current'; }
# 1. not managing: says so
port=$(free_port)
start_operator "$port" --no-chaos --operator-namespace "$NS"
until_ok 30 "the gauge at 0" 'metric | grep -q "state=\"other\".*served=\"0000000000000000\".*wanted=\"'"$want"'\"} 0"'
until_ok 30 "a CRDSchemaDiffers Event" \
	'KN get events --field-selector reason=CRDSchemaDiffers -o jsonpath="{.items[0].message}" | grep -q "0000000000000000"'
grep -q "crd: the served CRD decoupledtrainingjobs.ddiloco.io has schema 0000000000000000" "$WORK/op.log" ||
	fail "no log line for the older CRD"
[ "$("$KUBECTL" get crd decoupledtrainingjobs.ddiloco.io -o jsonpath='{.metadata.annotations.ddiloco\.io/schema-hash}')" = 0000000000000000 ] ||
	fail "the operator changed the CRD without --manage-crd"
kill "$OP_PID"; wait "$OP_PID" 2>/dev/null || :; OP_PID=

# 2. managing: applied at start
port=$(free_port)
start_operator "$port" --no-chaos --operator-namespace "$NS" --manage-crd
until_ok 30 "the gauge at 1, applied" 'metric | grep -q "state=\"applied\".*served=\"'"$want"'\".*} 1"'
[ "$("$KUBECTL" get crd decoupledtrainingjobs.ddiloco.io -o jsonpath='{.metadata.annotations.ddiloco\.io/schema-hash}')" = "$want" ] ||
	fail "the served CRD's hash is not this release's"
grep -q "crd: applied decoupledtrainingjobs.ddiloco.io (schema $want)" "$WORK/op.log" || fail "no log line for the apply"
until_ok 30 "the new CRD Established" "$KUBECTL" wait --for=condition=Established --timeout=1s \
	crd/decoupledtrainingjobs.ddiloco.io
until_ok 30 "job b taken" job b
[ "$(jp ddjob/b '{.spec.syncer.updateDelta}')" = true ] || fail "updateDelta pruned with the operator's CRD"
echo "test_crd: the older CRD said (gauge 0, an Event), then applied by --manage-crd ($want)"
