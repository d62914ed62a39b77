#!/usr/bin/env bash
# Smoke test of the test control plane: every part is real and working.
#  - a StatefulSet gets its pods from the controller manager, the scheduler
#    puts them on kwok's fake nodes, kwok marks them Running and Ready;
#  - deleting the StatefulSet garbage-collects its pods;
#  - service-account tokens are signed and accepted;
#  - a CRD with a status subresource and printer columns is served, and
#    `kubectl get` shows the columns;
#  - deleting the namespace finishes (namespace controller).
# Needs the variables of /tmp/ddiloco-k8s/env (tests/k8s/run.sh sets them).
set -euo pipefail

: "${KUBECTL:?run through make test-k8s}" "${KUBE_SERVER:?}" "${KUBE_CA:?}"
NS=smoke-$$-$RANDOM
GROUP=smoke$$.ddiloco.io
K() { "$KUBECTL" "$@"; }

fail() {
	echo "test_smoke: FAIL: $*" >&2
	K get all -n "$NS" -o wide >&2 2>/dev/null || true
	exit 1
}

# until SECONDS DESCRIPTION CMD...: poll until CMD succeeds
until_ok() {
	local secs=$1 what=$2 end
	shift 2
	end=$(($(date +%s) + secs))
	until "$@"; do
		[ "$(date +%s)" -lt "$end" ] || fail "timed out after $secs s: $what"
		sleep 1
	done
}

cleanup() {
	K delete namespace "$NS" --wait=false >/dev/null 2>&1 || true
	K delete crd "widgets.$GROUP" --wait=false >/dev/null 2>&1 || true
}
trap cleanup EXIT

K create namespace "$NS" >/dev/null
until_ok 60 "default service account in $NS" \
	K -n "$NS" get serviceaccount default -o name >/dev/null 2>&1

# --- StatefulSet -> pods -> scheduled -> Running ---------------------------
K -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
spec:
  serviceName: web
  replicas: 3
  podManagementPolicy: Parallel
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: main
        image: example.invalid/web:1
EOF

# pods_state: one line per pod: name owner-kind node phase ready
pods_state() {
	K -n "$NS" get pods -l app=web -o jsonpath='{range .items[*]}{.metadata.name} {.metadata.ownerReferences[0].kind} {.spec.nodeName} {.status.phase} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}'
}
three_running() {
	[ "$(pods_state | grep -cE '^web-[0-2] StatefulSet kwok-node-[0-9]+ Running True$')" -eq 3 ]
}
until_ok 120 "3 StatefulSet pods Running on kwok nodes" three_running
pods_state

ready3() {
	[ "$(K -n "$NS" get statefulset web -o jsonpath='{.status.readyReplicas}')" = 3 ]
}
until_ok 60 "statefulset readyReplicas=3" ready3
scheduled() {
	[ "$(K -n "$NS" get events --field-selector reason=Scheduled -o jsonpath='{range .items[*]}{.source.component}{.reportingComponent}{"\n"}{end}' | grep -c default-scheduler)" -ge 3 ]
}
until_ok 60 "3 Scheduled events from default-scheduler" scheduled
# each pod got a service-account token volume (ServiceAccount admission)
vols=$(K -n "$NS" get pod web-0 -o jsonpath='{.spec.volumes[*].name}')
case $vols in *kube-api-access-*) ;; *) fail "no service-account token volume: $vols" ;; esac
echo "ok: StatefulSet pods created, scheduled on kwok nodes and Running"

# --- service-account tokens are signed and accepted -----------------------
tok=$(K -n "$NS" create token default --duration=10m)
who=$(curl -sf --cacert "$KUBE_CA" -H "Authorization: Bearer $tok" \
	-H 'Content-Type: application/json' -X POST \
	-d '{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}' \
	"$KUBE_SERVER/apis/authentication.k8s.io/v1/selfsubjectreviews" | tr -d " \n") \
	|| fail "the apiserver refused a service-account token"
case $who in
*"\"username\":\"system:serviceaccount:$NS:default\""*) ;;
*) fail "service-account token authenticated as something else: $who" ;;
esac
echo "ok: service-account token authenticates as system:serviceaccount:$NS:default"

# --- garbage collection -----------------------------------------------------
K -n "$NS" delete statefulset web --wait=false >/dev/null
no_pods() { [ -z "$(K -n "$NS" get pods -l app=web -o name)" ]; }
until_ok 120 "pods garbage-collected after the StatefulSet was deleted" no_pods
echo "ok: deleting the StatefulSet garbage-collected its pods"

# --- CRD with status subresource and printer columns ----------------------
K apply -f - >/dev/null <<EOF
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.$GROUP
spec:
  group: $GROUP
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    - {name: Phase, type: string, jsonPath: .status.phase}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer, minimum: 1}
          status:
            type: object
            properties:
              phase: {type: string}
EOF
until_ok 60 "CRD Established" \
	K wait --for=condition=Established "crd/widgets.$GROUP" --timeout=5s >/dev/null 2>&1
until_ok 30 "widgets served" K -n "$NS" get "widgets.$GROUP" >/dev/null 2>&1

K -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: $GROUP/v1
kind: Widget
metadata: {name: w1}
spec: {size: 4}
status: {phase: Ignored}
EOF
# status is a subresource: the main resource ignores it...
phase=$(K -n "$NS" get "widgets.$GROUP" w1 -o jsonpath='{.status.phase}')
[ -z "$phase" ] || fail "status written through the main resource: '$phase'"
# ...and schema validation is enforced
if K -n "$NS" patch "widgets.$GROUP" w1 --type=merge -p '{"spec":{"size":0}}' >/dev/null 2>&1; then
	fail "spec.size=0 accepted despite minimum: 1"
fi
K -n "$NS" patch "widgets.$GROUP" w1 --subresource=status --type=merge \
	-p '{"status":{"phase":"Training"}}' >/dev/null
out=$(K -n "$NS" get "widgets.$GROUP" w1)
echo "$out"
echo "$out" | head -1 | grep -qE '^NAME +SIZE +PHASE *$' \
	|| fail "printer columns missing from kubectl get: $(echo "$out" | head -1)"
echo "$out" | sed -n 2p | grep -qE '^w1 +4 +Training *$' \
	|| fail "printer column values wrong: $(echo "$out" | sed -n 2p)"
echo "ok: CRD served with status subresource and printer columns"

# --- namespace deletion completes -------------------------------------------
K delete namespace "$NS" --wait=false >/dev/null
ns_gone() { ! K get namespace "$NS" >/dev/null 2>&1; }
until_ok 120 "namespace $NS deleted" ns_gone
echo "ok: namespace deletion finished"
