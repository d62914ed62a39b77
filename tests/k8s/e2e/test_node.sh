#!/usr/bin/env bash
# Smoke test of the real node (make cluster-up E2E=1; docs/k8s-testing.md):
#   - the node is Ready, its runtime containerd://...
#   - a pod with a native sidecar (an init container with restartPolicy
#     Always) runs ddiloco:latest: 2/2 Running, its address on the bridge
#   - the sidecar is `ddiloco operator` with the pod's service account:
#     it reaches the API server through the `kubernetes` Service (in-cluster
#     config) and turns Ready once its informers synced
#   - from the main container (busybox), CoreDNS resolves the pod's name in
#     a headless Service, and the API answers the service-account token
#     at https://kubernetes.default.svc
# Needs the env of a running E2E cluster: KUBECTL, KUBECONFIG (run.sh style).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
. "$ROOT/tests/k8s/cluster/common.sh"
[ -f "$RUN/env" ] || { echo "test_node: no cluster (make cluster-up E2E=1)"; exit 1; }
set -a
. "$RUN/env"
set +a
. "$ROOT/tests/k8s/lib.sh"

NS=e2e-node-$$
fail() {
	echo "FAIL test_node: $*"
	KN get pods -o wide 2>/dev/null
	KN describe pod web-0 2>/dev/null | tail -25
	tail -5 "$RUN/logs/kubelet.log" 2>/dev/null
	"$KUBECTL" delete ns "$NS" --wait=false >/dev/null 2>&1
	exit 1
}
t0=$(date +%s%3N)
ms() { echo $(($(date +%s%3N) - t0)); }

rt=$("$KUBECTL" get node "$NODE_NAME" -o 'jsonpath={.status.nodeInfo.containerRuntimeVersion}')
case $rt in containerd://*) ;; *) fail "node $NODE_NAME runtime is '$rt'" ;; esac
[ "$(jp node/"$NODE_NAME" '{.status.conditions[?(@.type=="Ready")].status}')" = True ] \
	|| fail "node $NODE_NAME not Ready"
echo "--- kubectl get nodes -o wide"
"$KUBECTL" get nodes -o wide

apply_crd
"$KUBECTL" create ns "$NS" >/dev/null || fail "cannot create namespace $NS"
KN apply -f - >/dev/null <<EOF || fail "cannot apply the smoke objects"
apiVersion: v1
kind: ServiceAccount
metadata: {name: smoke}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: smoke}
rules:
- apiGroups: [ddiloco.io]
  resources: [decoupledtrainingjobs, decoupledtrainingjobs/status]
  verbs: [get, list, watch]
- apiGroups: ["", apps]
  resources: [pods, services, configmaps, persistentvolumeclaims, statefulsets]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: smoke}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: smoke}
subjects: [{kind: ServiceAccount, name: smoke}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: None
  selector: {app: web}
  ports: [{name: http, port: 8080}]
---
apiVersion: v1
kind: Pod
metadata:
  name: web-0
  labels: {app: web}
spec:
  hostname: web-0
  subdomain: web
  serviceAccountName: smoke
  terminationGracePeriodSeconds: 2
  initContainers:
  - name: operator
    image: ddiloco:latest
    imagePullPolicy: Never
    restartPolicy: Always
    args: [operator, --namespace, $NS, --http, "0.0.0.0:8080", --no-chaos]
    readinessProbe:
      httpGet: {path: /readyz, port: 8080}
      periodSeconds: 1
  containers:
  - name: tools
    image: ddiloco-tools:1
    imagePullPolicy: Never
    command: [sleep, "3600"]
EOF

until_ok 120 "pod web-0 2/2 Ready" \
	'[ "$(jp pod/web-0 "{.status.containerStatuses[0].ready} {.status.initContainerStatuses[0].ready}")" = "true true" ]'
echo "test_node: pod web-0 Ready at $(ms) ms"
echo "--- kubectl get pods -o wide"
KN get pods -o wide
[ "$(KN get pod web-0 --no-headers | awk '{ print $2 " " $3 }')" = "2/2 Running" ] \
	|| fail "web-0 is not 2/2 Running"
ip=$(jp pod/web-0 '{.status.podIP}')
case $ip in "$POD_NET".*) ;; *) fail "pod address '$ip' is not in $POD_SUBNET" ;; esac
[ "$(jp pod/web-0 '{.spec.nodeName}')" = "$NODE_NAME" ] || fail "web-0 is not on $NODE_NAME"

# the sidecar: ddiloco operator, in-cluster config through the Service
KN logs web-0 -c operator | grep -q "serving /metrics /healthz /readyz" \
	|| fail "the operator sidecar did not start (kubectl logs)"

# DNS: the pod's own name in its headless Service, then the Service
name=web-0.web.$NS.svc.cluster.local
until_ok 30 "$name resolves" "KN exec web-0 -c tools -- nslookup $name | grep -q 'Address: $ip'"
echo "test_node: $name -> $ip (CoreDNS at $POD_GW)"
KN exec web-0 -c tools -- nslookup kubernetes.default.svc.cluster.local | grep -q "Address: $SERVICE_IP" \
	|| fail "kubernetes.default.svc.cluster.local does not resolve to $SERVICE_IP"

# the API through the kubernetes Service with the service-account token
out=$(KN exec web-0 -c tools -- sh -c 'wget -q -O- --no-check-certificate \
	--header "Authorization: Bearer $(cat /var/run/secrets/kubernetes.io/serviceaccount/token)" \
	https://kubernetes.default.svc/apis/authentication.k8s.io/v1/selfsubjectreviews \
	--post-data "{\"apiVersion\":\"authentication.k8s.io/v1\",\"kind\":\"SelfSubjectReview\"}" \
	--header "Content-Type: application/json"' 2>&1)
echo "$out" | grep -q "\"username\": *\"system:serviceaccount:$NS:smoke\"" \
	|| fail "SelfSubjectReview through https://kubernetes.default.svc: $out"
echo "test_node: the API at https://kubernetes.default.svc ($SERVICE_IP) knows the pod as system:serviceaccount:$NS:smoke"

"$KUBECTL" delete ns "$NS" --timeout=60s >/dev/null || fail "namespace $NS did not go away"
echo "PASS test_node ($(ms) ms)"
