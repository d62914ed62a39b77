#!/usr/bin/env bash
# Start the test control plane on loopback: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler and kwok with fake nodes; with
# E2E=1 also a real node (node.sh: containerd, kubelet, CoreDNS).
# Idempotent: when everything it started is still running and the
# apiserver is ready, it says so and exits 0.
#
# Writes, under $RUN (/tmp/ddiloco-k8s):
#   kubeconfig   admin identity (bearer token, group system:masters)
#   env          KUBECONFIG KUBE_SERVER KUBE_TOKEN KUBE_CA KUBECTL HELM
#   pki/ etcd/ logs/ pids/
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/common.sh"
take_lock
E2E=${E2E:-0}
[ "$E2E" = 0 ] && E2E=""

if all_running && api_ready; then
	if [ -z "$E2E" ] || [ -d "$NODE" ]; then
		echo "cluster-up: already up ($KUBE_SERVER)"
		exit 0
	fi
	# the node's identities are in the apiserver's token file: start afresh
	echo "cluster-up: up without the real node; restarting with it"
	"$HERE/down.sh"
fi
if [ -d "$RUN/pids" ] && [ -n "$(ls -A "$RUN/pids" 2>/dev/null)" ]; then
	echo "cluster-up: a previous cluster is partly running; stopping it first"
	"$HERE/down.sh"
fi

for b in etcd kube-apiserver kube-controller-manager kube-scheduler kwok kubectl; do
	if [ ! -x "$BIN/$b" ]; then
		die "missing $BIN/$b: run tests/k8s/cluster/build.sh (make cluster-up does)"
	fi
done
# what differs with the real node (node.sh)
APISERVER_NODE_ARGS=()
KCM_CONTROLLERS='*,-endpoint,-endpointslice,-endpointslicemirroring'
# kwok fakes only the nodes annotated as its own (up.sh's, the bench's):
# never the real node's pods, nor those of a node made to not answer
# (tests/k8s/test_failure.sh, job l)
KWOK_NODES=--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake
if [ -n "$E2E" ]; then
	# the apiserver's client certificate toward the kubelet (logs, exec),
	# which it reaches at the node's InternalIP (its name resolves nowhere)
	APISERVER_NODE_ARGS=(--kubelet-client-certificate="$RUN/pki/kubelet-client.crt"
		--kubelet-client-key="$RUN/pki/kubelet-client.key"
		--kubelet-preferred-address-types=InternalIP)
	# CoreDNS answers from EndpointSlices; kwok pods' loopback addresses
	# are refused there, real pods' bridge addresses are not
	KCM_CONTROLLERS='*'
fi

for p in "$ETCD_PORT" "$ETCD_PEER_PORT" "$API_PORT"; do
	if port_busy "$p"; then
		die "port 127.0.0.1:$p is already in use; free it, or choose other ports with DDILOCO_K8S_API_PORT, DDILOCO_K8S_ETCD_PORT, DDILOCO_K8S_ETCD_PEER_PORT"
	fi
done

t0=$(date +%s)
rm -rf "$RUN"
mkdir -p "$RUN"/{pki,logs,pids}
mkdir -m 700 "$RUN/etcd"
chmod 700 "$RUN"

# --- certificates and identities ---------------------------------------
PKI=$RUN/pki
(
	cd "$PKI"
	openssl req -x509 -newkey rsa:2048 -nodes -days 30 -sha256 \
		-keyout ca.key -out ca.crt -subj "/CN=ddiloco-test-ca" 2>/dev/null
	cat >apiserver.ext <<-EOF
	basicConstraints=CA:FALSE
	keyUsage=digitalSignature,keyEncipherment
	extendedKeyUsage=serverAuth
	subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:$SERVICE_IP
	EOF
	openssl req -newkey rsa:2048 -nodes -keyout apiserver.key \
		-out apiserver.csr -subj "/CN=kube-apiserver" 2>/dev/null
	openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key \
		-CAcreateserial -days 30 -sha256 -extfile apiserver.ext \
		-out apiserver.crt 2>/dev/null
	# service-account token signing pair
	openssl genrsa -out sa.key 2048 2>/dev/null
	openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
	chmod 600 ./*.key
) || die "openssl failed"

ADMIN_TOKEN=$(openssl rand -hex 24)
KCM_TOKEN=$(openssl rand -hex 24)
SCHED_TOKEN=$(openssl rand -hex 24)
KWOK_TOKEN=$(openssl rand -hex 24)
cat >"$PKI/tokens.csv" <<EOF
$ADMIN_TOKEN,ddiloco-admin,ddiloco-admin,"system:masters"
$KCM_TOKEN,system:kube-controller-manager,system:kube-controller-manager
$SCHED_TOKEN,system:kube-scheduler,system:kube-scheduler
$KWOK_TOKEN,kwok-controller,kwok-controller,"system:masters"
EOF
chmod 600 "$PKI/tokens.csv"
[ -n "$E2E" ] && "$HERE/node.sh" pki

kubeconfig "$RUN/kube-controller-manager.kubeconfig" system:kube-controller-manager "$KCM_TOKEN"
kubeconfig "$RUN/kube-scheduler.kubeconfig" system:kube-scheduler "$SCHED_TOKEN"
kubeconfig "$RUN/kwok.kubeconfig" kwok-controller "$KWOK_TOKEN"
# The admin kubeconfig carries the CA inline: client-go (kubectl, helm)
# refuses a cluster that names both a path and data. The path is in env.
kubeconfig "$RUN/kubeconfig" ddiloco-admin "$ADMIN_TOKEN"
CA_DATA=$(base64 -w0 <"$PKI/ca.crt")
sed -i "s|^    certificate-authority: .*|    certificate-authority-data: $CA_DATA|" "$RUN/kubeconfig"

# --- processes --------------------------------------------------------
start etcd "$BIN/etcd" \
	--name=ddiloco-test \
	--data-dir="$RUN/etcd" \
	--listen-client-urls="http://127.0.0.1:$ETCD_PORT" \
	--advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
	--listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
	--initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
	--initial-cluster="ddiloco-test=http://127.0.0.1:$ETCD_PEER_PORT" \
	--listen-metrics-urls="" \
	--unsafe-no-fsync=true \
	--quota-backend-bytes=$((1 << 30)) \
	--log-level=warn
wait_for "etcd" 30 curl -sf "http://127.0.0.1:$ETCD_PORT/health"

start kube-apiserver "$BIN/kube-apiserver" \
	--etcd-servers="http://127.0.0.1:$ETCD_PORT" \
	--bind-address=127.0.0.1 \
	--advertise-address=127.0.0.1 \
	--secure-port="$API_PORT" \
	--tls-cert-file="$PKI/apiserver.crt" \
	--tls-private-key-file="$PKI/apiserver.key" \
	--client-ca-file="$PKI/ca.crt" \
	--token-auth-file="$PKI/tokens.csv" \
	--authorization-mode=Node,RBAC \
	--anonymous-auth=false \
	--service-account-issuer=https://kubernetes.default.svc.cluster.local \
	--service-account-key-file="$PKI/sa.pub" \
	--service-account-signing-key-file="$PKI/sa.key" \
	--service-cluster-ip-range="$SERVICE_CIDR" \
	--endpoint-reconciler-type=none \
	--allow-privileged=true \
	--profiling=false \
	--enable-priority-and-fairness=false \
	--cert-dir="$PKI" \
	"${APISERVER_NODE_ARGS[@]}" \
	--v=1
wait_for "kube-apiserver" 120 api_ready

# Pod IPs are loopback addresses (below), which Endpoints and EndpointSlices
# refuse; their controllers would only fail and retry, so they do not run.
start kube-controller-manager "$BIN/kube-controller-manager" \
	--kubeconfig="$RUN/kube-controller-manager.kubeconfig" \
	--service-account-private-key-file="$PKI/sa.key" \
	--root-ca-file="$PKI/ca.crt" \
	--use-service-account-credentials=true \
	--leader-elect=false \
	--secure-port=0 \
	--controllers="$KCM_CONTROLLERS" \
	--concurrent-gc-syncs=5 \
	--profiling=false \
	--v=1

start kube-scheduler "$BIN/kube-scheduler" \
	--kubeconfig="$RUN/kube-scheduler.kubeconfig" \
	--leader-elect=false \
	--secure-port=0 \
	--profiling=false \
	--v=1

# kwok manages every node but the real one. Pod IPs come from a
# loopback range so that nothing here ever points at another network.
start kwok "$BIN/kwok" \
	--kubeconfig="$RUN/kwok.kubeconfig" \
	"$KWOK_NODES" \
	--cidr="$POD_CIDR" \
	--node-ip=127.0.0.1 \
	--node-lease-duration-seconds=40 \
	--v=INFO

# --- fake nodes --------------------------------------------------------
for i in $(seq 0 $((NODES - 1))); do
	cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    type: kwok
    kubernetes.io/hostname: kwok-node-$i
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    node-role.kubernetes.io/agent: ""
$([ -n "$E2E" ] && printf '%s\n' "spec:" "  taints: [{key: kwok.x-k8s.io/node, value: fake, effect: NoSchedule}]")
status:
  allocatable: {cpu: "32", memory: 256Gi, pods: "110"}
  capacity: {cpu: "32", memory: 256Gi, pods: "110"}
EOF
done >"$RUN/nodes.yaml"
if [ "$NODES" -gt 0 ]; then
	"$BIN/kubectl" --kubeconfig="$RUN/kubeconfig" apply -f "$RUN/nodes.yaml" >/dev/null \
		|| die "could not create the fake nodes"
fi

nodes_ready() {
	local n
	n=$("$BIN/kubectl" --kubeconfig="$RUN/kubeconfig" get nodes -l type=kwok \
		-o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' \
		2>/dev/null | grep -c '^True$' || true)
	[ "$n" -ge "$NODES" ]
}
wait_for "$NODES fake nodes Ready" 60 nodes_ready
# the controller manager is working once it made the default service account
wait_for "controller manager (default service account)" 60 \
	"$BIN/kubectl" --kubeconfig="$RUN/kubeconfig" get serviceaccount default

# the real node, once the control plane works
if [ -n "$E2E" ]; then
	"$HERE/node.sh" up || die "the real node did not come up (logs: $RUN/logs)"
fi

cat >"$RUN/env" <<EOF
KUBECONFIG=$RUN/kubeconfig
KUBE_SERVER=$KUBE_SERVER
KUBE_TOKEN=$ADMIN_TOKEN
KUBE_CA=$PKI/ca.crt
KUBECTL=$BIN/kubectl
HELM=$BIN/helm
export KUBECONFIG KUBE_SERVER KUBE_TOKEN KUBE_CA KUBECTL HELM
EOF
chmod 600 "$RUN/env"

echo "cluster-up: ready in $(($(date +%s) - t0)) s: $KUBE_SERVER, $NODES kwok nodes${E2E:+, real node $NODE_NAME}"
echo "cluster-up: kubeconfig $RUN/kubeconfig, env $RUN/env (. $RUN/env)"
