#!/usr/bin/env bash
# Resources under a ResourceQuota (docs/operator.md, Resources), on the
# real API server's quota admission, the operator a local process:
#  - the CRD refuses spec.qosClass Guaranteed without the learners' cpu;
#  - a quota that counts limits.cpu and limits.memory: a Burstable job's
#    pods are refused by the API server (an Event CreateFailed naming
#    the containers without limits), a Guaranteed job's pods are made,
#    Running on the kwok nodes, of QoS class Guaranteed, the learner's
#    sidecar with the resources the job gave it;
#  - the quota made to count requests only: a Burstable job's pods are
#    made too (its sidecars ask for the defaults), of class Burstable.
# Needs the variables of /tmp/ddiloco-k8s/env (tests/k8s/run.sh sets them).
set -euo pipefail

: "${KUBECTL:?run through make test-k8s}" "${KUBE_SERVER:?}" "${KUBE_CA:?}" "${KUBECONFIG:?}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

. "$ROOT/tests/k8s/lib.sh"
op_test quota

apply_crd
"$KUBECTL" create namespace "$NS" >/dev/null
quota() {   # quota KEYS: the namespace's quota on cpu and memory
	local hard=""
	for k in "$@"; do
		case $k in *cpu) hard="$hard, $k: \"20\"" ;; *) hard="$hard, $k: 40Gi" ;; esac
	done
	KN apply -f - >/dev/null <<EOF || fail "apply the quota"
apiVersion: v1
kind: ResourceQuota
metadata: {name: compute}
spec: {hard: {pods: "20"$hard}}
EOF
}
job() {   # job NAME EXTRA-SPEC-LINES
	cat <<EOF
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: $1}
spec:
  learners:
    replicas: 2
    resources: {cpu: 500m, memory: 512Mi}
$2
  syncer: {storage: "", insecure: true}
  data: {path: /data/tiny.txt}
EOF
}
GUAR="    sidecar: {resources: {cpu: 200m, memory: 300Mi}}
  qosClass: Guaranteed"
running() { [ "$(jp "pod/$1" '{.status.phase}')" = Running ]; }
pods_of_class() {   # JOB CLASS: its two learners and its syncer Running, of CLASS
	local p
	for p in "$1-learner-0" "$1-learner-1" "$1-syncer-0"; do
		until_ok 90 "pod $p Running" "running $p"
		[ "$(jp "pod/$p" '{.status.qosClass}')" = "$2" ] ||
			fail "$p is of QoS class $(jp "pod/$p" '{.status.qosClass}')"
	done
}

quota requests.cpu requests.memory limits.cpu limits.memory
until_ok 30 "the quota's status" '[ -n "$(jp resourcequota/compute "{.status.hard.pods}")" ]'
start_operator 0 --no-chaos

# the CRD's rule
if printf '%s\n' "apiVersion: ddiloco.io/v1alpha1" "kind: DecoupledTrainingJob" \
	"metadata: {name: nocpu}" "spec:" "  qosClass: Guaranteed" \
	"  learners: {resources: {memory: 1Gi}}" "  data: {path: /data/tiny.txt}" |
	KN apply -f - >"$WORK/out" 2>&1; then
	fail "a Guaranteed job without the learners' cpu was accepted"
fi
grep -q "spec.qosClass Guaranteed needs spec.learners.resources.cpu and memory" "$WORK/out" ||
	fail "the refusal says: $(cat "$WORK/out")"
echo "ok: the CRD refuses qosClass Guaranteed without spec.learners.resources.cpu"

# --- limits counted: Burstable refused, Guaranteed made --------------------
job burst "" | KN apply -f - >/dev/null || fail "apply burst"
until_ok 60 "an Event CreateFailed on burst" \
	'KN get events --field-selector involvedObject.name=burst,reason=CreateFailed -o "jsonpath={.items[*].message}" | grep -q "must specify"'
msg=$(KN get events --field-selector involvedObject.name=burst,reason=CreateFailed \
	-o 'jsonpath={.items[0].message}')
case $msg in *"limits.cpu"*) ;; *) fail "burst: CreateFailed says: $msg" ;; esac
jp pod/burst-learner-0 '{.metadata.name}' | grep -q . && fail "burst-learner-0 was made under the quota"
echo "ok: burst refused by the quota: ${msg:0:200}"
KN delete ddjob burst --wait=false >/dev/null

job guar "$GUAR" | KN apply -f - >/dev/null || fail "apply guar"
pods_of_class guar Guaranteed
side=$(jp pod/guar-learner-0 '{.spec.initContainers[0].resources.limits.cpu} {.spec.initContainers[0].resources.limits.memory}')
[ "$side" = "200m 300Mi" ] || fail "guar's sidecar has limits '$side'"
used=$(jp resourcequota/compute '{.status.used.limits\.cpu}')
echo "ok: guar's pods Running, QoS class Guaranteed, its sidecars' limits $side; the quota counts limits.cpu $used"

# --- requests counted only: a Burstable job is made ---------------------------
KN delete ddjob guar --wait=true --timeout=60s >/dev/null
quota requests.cpu requests.memory
until_ok 30 "the quota on requests only" '[ -z "$(jp resourcequota/compute "{.status.hard.limits\.cpu}")" ]'
job plain "" | KN apply -f - >/dev/null || fail "apply plain"
pods_of_class plain Burstable
side=$(jp pod/plain-learner-0 '{.spec.initContainers[0].resources.requests.cpu} {.spec.initContainers[0].resources.requests.memory}')
case $side in "100m "*Mi) ;; *) fail "plain's sidecar asks for '$side'" ;; esac
echo "ok: plain's pods Running, QoS class Burstable, its sidecars asking for $side"
echo "test_quota: ok"
