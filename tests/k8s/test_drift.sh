#!/usr/bin/env bash
# Drift (docs/operator.md, Drift) on the real API server, the operator a
# local process with a 5 s resync: a job's children changed by hand —
# its Service's port (kubectl patch), its NetworkPolicy's ingress, its
# ConfigMap's job.json, its syncer StatefulSet scaled to 0 (kubectl
# scale) — are each written again as the job asks, with a Warning Event
# DriftRepaired naming who changed it when the API server recorded who,
# and once only (no repair loop
# over the next resyncs); its Service deleted is made again, with an
# Event too.
# Needs the variables of /tmp/ddiloco-k8s/env (tests/k8s/run.sh sets them).
set -euo pipefail

: "${KUBECTL:?run through make test-k8s}" "${KUBE_SERVER:?}" "${KUBE_CA:?}" "${KUBECONFIG:?}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

. "$ROOT/tests/k8s/lib.sh"
op_test drift

apply_crd
"$KUBECTL" create namespace "$NS" >/dev/null
start_operator 0 --no-chaos --resync 5
KN apply -f - >/dev/null <<EOF2 || fail "apply d"
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: d}
spec:
  learners: {replicas: 1}
  syncer: {storage: "", insecure: true}
  data: {path: /data/tiny.txt}
EOF2
until_ok 60 "job d Running" '[ "$(jp ddjob/d "{.status.phase}")" = Running ]'
port=$(jp service/d-syncer '{.spec.ports[0].port}')
ingress=$(jp networkpolicy/d-syncer '{.spec.ingress}')
cm=$(jp configmap/d-spec '{.data.job\.json}')
[ -n "$port" ] && [ -n "$ingress" ] && [ -n "$cm" ] || fail "d's children"
events() { KN get events --field-selector involvedObject.name=d,reason=DriftRepaired \
	-o 'jsonpath={range .items[*]}{.message}{"\n"}{end}'; }

KN patch service d-syncer --type json -p '[{"op":"replace","path":"/spec/ports/0/port","value":7099}]' >/dev/null ||
	fail "patch the Service"
KN patch networkpolicy d-syncer --type merge -p '{"spec":{"ingress":[]}}' >/dev/null ||
	fail "patch the NetworkPolicy"
KN patch configmap d-spec --type merge -p '{"data":{"job.json":"{}"}}' >/dev/null ||
	fail "patch the ConfigMap"
KN scale statefulset d-syncer --replicas=0 >/dev/null || fail "scale the StatefulSet"
until_ok 30 "the Service's port back" '[ "$(jp service/d-syncer "{.spec.ports[0].port}")" = "$port" ]'
until_ok 30 "the NetworkPolicy's ingress back" '[ "$(jp networkpolicy/d-syncer "{.spec.ingress}")" = "$ingress" ]'
until_ok 30 "the ConfigMap's job.json back" '[ "$(jp configmap/d-spec "{.data.job\.json}")" = "$cm" ]'
until_ok 30 "the StatefulSet's replicas back" '[ "$(jp statefulset/d-syncer "{.spec.replicas}")" = 1 ]'
until_ok 30 "four DriftRepaired Events" '[ "$(events | grep -c "written again")" -ge 4 ]'
# who: the manager the API server recorded; an emptied list and a scale
# leave none in managedFields ("another manager")
for w in "Service <job>-syncer was changed by 'kubectl-patch'" \
	"NetworkPolicy <job>-syncer was changed by '" \
	"ConfigMap <job>-spec was changed by 'kubectl-patch'" \
	"StatefulSet <job>-syncer was changed by '"; do
	# (read whole: grep -q quitting early would fail the pipe, pipefail)
	ev=$(events)
	grep -qF "$w" <<<"$ev" || { echo "$ev" >&2; fail "no Event: $w"; }
done
echo "ok: Service port, NetworkPolicy ingress, ConfigMap job.json and the StatefulSet's replicas written again; Events:"
events | sed 's/^/  /'

# once: no repair again over the next three resyncs
n1=$(grep -c "DriftRepaired: .* written again" "$WORK/op.log" || true)
r1=$(grep -c "DriftRepaired" "$WORK/op.log" || true)
rv=$(jp service/d-syncer '{.metadata.resourceVersion}')
t_end=$(($(date +%s) + 16))
while [ "$(date +%s)" -lt "$t_end" ]; do
	[ "$(jp service/d-syncer '{.metadata.resourceVersion}')" = "$rv" ] || fail "the Service was written again"
	sleep 1
done
[ "$(grep -c "DriftRepaired" "$WORK/op.log" || true)" = "$r1" ] ||
	{ grep DriftRepaired "$WORK/op.log" >&2; fail "repaired again without a change"; }
echo "ok: $n1 repairs, none again over three resyncs"

uid=$(jp service/d-syncer '{.metadata.uid}')
KN delete service d-syncer >/dev/null || fail "delete the Service"
until_ok 30 "the Service made again" \
	'[ -n "$(jp service/d-syncer "{.metadata.uid}")" ] && [ "$(jp service/d-syncer "{.metadata.uid}")" != "$uid" ]'
until_ok 30 "an Event for the Service gone" 'grep -qF "Service <job>-syncer was gone: made again" <<<"$(events)"'
echo "ok: the Service deleted was made again, with an Event"
echo "test_drift: ok"
