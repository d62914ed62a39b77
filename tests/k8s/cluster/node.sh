#!/usr/bin/env bash
# The test cluster's real node (make cluster-up E2E=1): a kubelet with
# containerd through CRI, CNI bridge networking and CoreDNS, everything
# under $RUN/node. Called by up.sh and down.sh, which hold the lock.
#
#   node.sh pki     identities for the kubelet and CoreDNS, and the
#                   apiserver's client certificate for the kubelet
#                   (before the apiserver starts: they go in tokens.csv)
#   node.sh up      bridge, iptables rules, containerd, images, CoreDNS,
#                   kubelet, the NetworkPolicy engine; returns once the
#                   node is Ready and the engine has its rules in place
#   node.sh clean   after the processes stopped (or were killed): stop the
#                   containers and shims left behind, unmount, remove the
#                   bridge, veths and rules; down.sh then removes $RUN
#
# Network (docs/k8s-testing.md, "The real node"):
#   bridge $BRIDGE $POD_GW/24, pods in $POD_SUBNET, each in a network
#   namespace containerd makes (mounted under $NODE/containerd/state);
#   the node's address is $POD_GW, so the kubelet (10250) and CoreDNS (53)
#   listen only on the bridge; the apiserver stays on 127.0.0.1.
#   Pods reach it as https://$SERVICE_IP:443 (the `kubernetes` Service)
#   through one DNAT rule to 127.0.0.1:$API_PORT (route_localnet on the
#   bridge): the apiserver's only endpoint is a loopback address, which
#   Endpoints refuse, so kube-proxy would have nothing to program.
#   NetworkPolicy is enforced by kube-network-policies (built by build.sh
#   from netpol/go.mod), a pod of kube-system on the host's network that
#   judges the packets of NFQUEUE $NETPOL_QUEUE; this kernel has no nft
#   `queue`, so one iptables rule of ours feeds it the first packet of
#   each connection from pod to pod (docs/k8s-testing.md, The real node).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/common.sh"
. "$HERE/versions.sh"

PKI=$RUN/pki
SOCK=$NODE/containerd.sock
RUNC_ROOT=$NODE/runc
# every rule this script adds carries this comment; clean removes by it
TAG=ddiloco-k8s-node
PAUSE_IMAGE=ddiloco-pause:1
# busybox (nslookup, wget with TLS, sh) for tests that look from inside
TOOLS_IMAGE=ddiloco-tools:1
# the NetworkPolicy engine: its static binary FROM scratch
NETPOL_IMAGE=ddiloco-netpol:$NETPOL_VERSION
NETPOL_QUEUE=100
KCTL() { "$BIN/kubectl" --kubeconfig="$RUN/kubeconfig" "$@"; }
CTR() { ctr --address "$SOCK" --namespace k8s.io "$@"; }
ms() { date +%s%3N; }

cmd_pki() {
	mkdir -p "$NODE"
	chmod 700 "$NODE"
	local kt ct
	kt=$(openssl rand -hex 24)
	ct=$(openssl rand -hex 24)
	# the Node authorizer knows the kubelet by this name and group
	printf '%s,system:node:%s,system:node:%s,"system:nodes"\n' "$kt" "$NODE_NAME" "$NODE_NAME" >>"$PKI/tokens.csv"
	printf '%s,system:coredns,system:coredns\n' "$ct" >>"$PKI/tokens.csv"
	kubeconfig "$NODE/kubelet.kubeconfig" "system:node:$NODE_NAME" "$kt"
	kubeconfig "$NODE/coredns.kubeconfig" system:coredns "$ct"
	# the apiserver's identity toward the kubelet (logs, exec)
	(
		cd "$PKI"
		openssl req -newkey rsa:2048 -nodes -keyout kubelet-client.key \
			-out kubelet-client.csr -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" 2>/dev/null
		printf 'extendedKeyUsage=clientAuth\n' >kubelet-client.ext
		openssl x509 -req -in kubelet-client.csr -CA ca.crt -CAkey ca.key \
			-CAcreateserial -days 30 -sha256 -extfile kubelet-client.ext \
			-out kubelet-client.crt 2>/dev/null
		chmod 600 kubelet-client.key
	) || die "openssl failed (kubelet client certificate)"
}

need() {
	local missing="" p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
	done
	[ -z "$missing" ] && return 0
	echo "node: installing:$missing"
	local sudo=""
	[ "$(id -u)" -ne 0 ] && sudo=sudo
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null
}

# the pause image: one static binary FROM scratch, built from pause/pause.c
pause_image() {
	docker image inspect "$PAUSE_IMAGE" >/dev/null 2>&1 && return 0
	local ctx=$NODE/pause-image
	mkdir -p "$ctx"
	cc -static -Os -Wall -Wextra -Werror -o "$ctx/pause" "$HERE/pause/pause.c" \
		|| die "cannot build the pause binary (a static libc: apt-get install libc6-dev)"
	strip "$ctx/pause" 2>/dev/null || true
	printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$ctx/Dockerfile"
	docker build -q -t "$PAUSE_IMAGE" "$ctx" >/dev/null || die "docker build of $PAUSE_IMAGE failed"
}

# the tools image: Debian's static busybox FROM scratch, its applets as links
tools_image() {
	docker image inspect "$TOOLS_IMAGE" >/dev/null 2>&1 && return 0
	local ctx=$NODE/tools-image a
	mkdir -p "$ctx/root/bin" "$ctx/root/tmp"
	cp /bin/busybox "$ctx/root/bin/busybox"
	for a in $(/bin/busybox --list); do
		[ "$a" = busybox ] || ln -sf busybox "$ctx/root/bin/$a"
	done
	printf 'FROM scratch\nCOPY root /\nENV PATH=/bin\nCMD ["sh"]\n' >"$ctx/Dockerfile"
	docker build -q -t "$TOOLS_IMAGE" "$ctx" >/dev/null || die "docker build of $TOOLS_IMAGE failed"
}

netpol_image() {
	docker image inspect "$NETPOL_IMAGE" >/dev/null 2>&1 && return 0
	local ctx=$NODE/netpol-image
	mkdir -p "$ctx"
	cp "$BIN/kube-network-policies" "$ctx/netpol"
	printf 'FROM scratch\nCOPY netpol /netpol\nENTRYPOINT ["/netpol"]\n' >"$ctx/Dockerfile"
	docker build -q -t "$NETPOL_IMAGE" "$ctx" >/dev/null || die "docker build of $NETPOL_IMAGE failed"
}

# the engine has its queue open (the kernel's list of bound queues)
netpol_queue() {
	awk -v q="$NETPOL_QUEUE" '$1 == q { found = 1 } END { exit !found }' \
		/proc/net/netfilter/nfnetlink_queue
}

# The engine as upstream runs it (its install.yaml: a privileged pod on
# the host's network whose service account lists pods, namespaces and
# policies), as one pod bound to this node. The `kubernetes` Service's
# DNAT is for packets from the bridge: on the host's network the pod
# reaches the apiserver on loopback. Its /metrics (packets by verdict)
# on the node's address, which its readiness probe reads.
netpol_up() {
	KCTL apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ServiceAccount
metadata: {name: kube-network-policies, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: kube-network-policies}
rules:
- apiGroups: [""]
  resources: [pods, namespaces]
  verbs: [list, watch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: kube-network-policies}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kube-network-policies}
subjects:
- {kind: ServiceAccount, name: kube-network-policies, namespace: kube-system}
---
apiVersion: v1
kind: Pod
metadata:
  name: kube-network-policies
  namespace: kube-system
  labels: {app: kube-network-policies}
spec:
  nodeName: $NODE_NAME
  hostNetwork: true
  serviceAccountName: kube-network-policies
  tolerations: [{operator: Exists}]
  containers:
  - name: netpol
    image: $NETPOL_IMAGE
    imagePullPolicy: Never
    args: [--hostname-override=$NODE_NAME, --nfqueue-id=$NETPOL_QUEUE,
           --metrics-bind-address=$POD_GW:$NETPOL_METRICS_PORT, --v=2]
    env:
    - {name: KUBERNETES_SERVICE_HOST, value: 127.0.0.1}
    - {name: KUBERNETES_SERVICE_PORT, value: "$API_PORT"}
    securityContext: {privileged: true}
    readinessProbe:
      httpGet: {path: /metrics, port: $NETPOL_METRICS_PORT}
      periodSeconds: 2
EOF
	wait_for "the NetworkPolicy engine's queue (kubectl -n kube-system logs kube-network-policies)" \
		90 netpol_queue
	iptables -I FORWARD 1 -i "$BRIDGE" -o "$BRIDGE" -m conntrack --ctstate NEW \
		-m comment --comment "$TAG" -j NFQUEUE --queue-num "$NETPOL_QUEUE"
	echo "node: NetworkPolicy engine kube-network-policies $NETPOL_VERSION running"
}

write_containerd_config() {
	mkdir -p "$NODE/containerd/root" "$NODE/containerd/state" "$NODE/cni/net.d" \
		"$NODE/cni/ipam" "$RUNC_ROOT" "$NODE/opt"
	cat >"$NODE/containerd.toml" <<EOF
version = 2
root = "$NODE/containerd/root"
state = "$NODE/containerd/state"
[grpc]
  address = "$SOCK"
[ttrpc]
  address = ""
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$NODE/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # lowering oom_score_adj is not permitted here: runc fails every
  # sandbox ("can't get final child's PID from pipe") without this
  restrict_oom_score_adj = true
  # network namespaces under state, not /var/run/netns
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    # overlayfs does not mount here; native copies each layer
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "$RUNC_ROOT"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN"
    conf_dir = "$NODE/cni/net.d"
    max_conf_num = 1
EOF
	# bridge + host-local; the loopback plugin is run by the CRI itself.
	# No masquerade: pod traffic stays on the bridge. No portmap: no pod
	# here uses a hostPort.
	cat >"$NODE/cni/net.d/10-ddiloco.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "ddiloco-e2e",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_SUBNET", "gateway": "$POD_GW"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$NODE/cni/ipam"
      }
    }
  ]
}
EOF
}

write_kubelet_config() {
	mkdir -p "$NODE/kubelet" "$NODE/pod-logs" "$NODE/volume-plugins"
	cat >"$NODE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $POD_GW
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
containerRuntimeEndpoint: unix://$SOCK
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
cgroupsPerQOS: false
enforceNodeAllocatable: []
clusterDNS: [$POD_GW]
clusterDomain: cluster.local
resolvConf: ""
podLogsDir: $NODE/pod-logs
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization:
  mode: Webhook
serializeImagePulls: false
# the images are imported, never pulled: never collect them, and evict
# nothing on a busy shared disk
imageGCHighThresholdPercent: 100
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
nodeStatusReportFrequency: 10s
maxPods: 50
EOF
}

write_corefile() {
	cat >"$NODE/Corefile" <<EOF
.:53 {
    bind $POD_GW
    errors
    health 127.0.0.1:$COREDNS_HEALTH_PORT
    ready 127.0.0.1:$COREDNS_READY_PORT
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $NODE/coredns.kubeconfig ddiloco-test
        pods insecure
        ttl 5
    }
    cache 5
}
EOF
	# what CoreDNS's kubernetes plugin reads (as the upstream manifest)
	KCTL apply -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns"}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:coredns"}
EOF
}

net_up() {
	if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
		ip link add "$BRIDGE" type bridge
	fi
	ip addr replace "$POD_GW/$POD_PREFIX" dev "$BRIDGE"
	ip link set "$BRIDGE" up
	sysctl -qw "net.ipv4.conf.$BRIDGE.route_localnet=1"
	# the `kubernetes` Service: its cluster IP to the apiserver on loopback
	iptables -t nat -A PREROUTING -i "$BRIDGE" -d "$SERVICE_IP/32" -p tcp --dport 443 \
		-m comment --comment "$TAG" -j DNAT --to-destination "127.0.0.1:$API_PORT"
	# Docker loads br_netfilter and drops what it does not know in
	# FORWARD: pod to pod across the bridge must pass
	iptables -I FORWARD 1 -i "$BRIDGE" -o "$BRIDGE" -m comment --comment "$TAG" -j ACCEPT
}

node_ready() {
	[ "$(KCTL get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

cmd_up() {
	local t0 t
	t0=$(ms)
	need containernetworking-plugins iptables busybox-static
	command -v containerd >/dev/null || die "no containerd (the one beside Docker Engine, /usr/bin/containerd)"
	command -v runc >/dev/null || die "no runc (installed with Docker Engine's containerd)"
	for b in kubelet coredns kube-network-policies; do
		[ -x "$BIN/$b" ] || die "missing $BIN/$b: E2E=1 tests/k8s/cluster/build.sh (make cluster-up E2E=1 does)"
	done
	docker image inspect ddiloco:latest >/dev/null 2>&1 \
		|| die "no image ddiloco:latest: make image (make cluster-up E2E=1 does)"
	for p in "$KUBELET_HEALTHZ_PORT" "$COREDNS_HEALTH_PORT" "$COREDNS_READY_PORT"; do
		port_busy "$p" && die "port 127.0.0.1:$p is already in use"
	done
	if ! ip link show "$BRIDGE" >/dev/null 2>&1 && [ -n "$(ip -4 route show "$POD_SUBNET")" ]; then
		die "$POD_SUBNET is already routed on this machine; choose another with DDILOCO_K8S_POD_NET (10.X.0)"
	fi

	write_containerd_config
	write_kubelet_config
	net_up
	start containerd /usr/bin/containerd --config "$NODE/containerd.toml"
	wait_for containerd 30 CTR version
	t=$(ms)
	echo "node: containerd up in $((t - t0)) ms"

	# images: pause and tools (built here), ddiloco:latest (make image), all
	# from Docker into the runtime, unpacked by the native snapshotter
	pause_image
	tools_image
	netpol_image
	# ddiloco:latest and ddiloco:VERSION (the tag the chart's appVersion
	# names), one image
	local v images="$PAUSE_IMAGE $TOOLS_IMAGE $NETPOL_IMAGE ddiloco:latest"
	v=$(docker image inspect --format '{{index .Config.Labels "org.opencontainers.image.version"}}' ddiloco:latest)
	if [ -n "$v" ] && docker image inspect "ddiloco:$v" >/dev/null 2>&1; then
		images="$images ddiloco:$v"
	fi
	# shellcheck disable=SC2086
	docker save $images \
		| CTR images import --snapshotter native - >/dev/null \
		|| die "cannot import the images into containerd"
	echo "node: images imported in $(($(ms) - t)) ms: $images"

	write_corefile
	start coredns "$BIN/coredns" -conf "$NODE/Corefile"
	start kubelet "$BIN/kubelet" \
		--config="$NODE/kubelet.yaml" \
		--kubeconfig="$NODE/kubelet.kubeconfig" \
		--root-dir="$NODE/kubelet" \
		--cert-dir="$NODE/kubelet/pki" \
		--volume-plugin-dir="$NODE/volume-plugins" \
		--hostname-override="$NODE_NAME" \
		--node-ip="$POD_GW" \
		--node-labels="type=e2e" \
		--v=1
	wait_for "node $NODE_NAME Ready" 120 node_ready
	wait_for "CoreDNS ready" 60 curl -sf "http://127.0.0.1:$COREDNS_READY_PORT/ready"
	netpol_up
	echo "node: $NODE_NAME Ready in $(($(ms) - t0)) ms" \
		"($(KCTL get node "$NODE_NAME" -o 'jsonpath={.status.nodeInfo.containerRuntimeVersion}'))"
}

# the containers, shims, mounts, namespaces and links the node left,
# found by where they live (under $NODE) or what they name (our socket,
# our bridge, our rule comment); nothing else is touched
cmd_clean() {
	[ -d "$NODE" ] || return 0
	local id pid f sockhash n=0 ids=""
	# best effort: each step runs even when one before it found nothing
	set +e +o pipefail
	# the shim keeps runc's state in Root/<namespace>
	if [ -d "$RUNC_ROOT/k8s.io" ]; then
		for f in "$RUNC_ROOT"/k8s.io/*/; do
			[ -d "$f" ] || continue
			id=$(basename "$f")
			ids="$ids $id"
			runc --root "$RUNC_ROOT/k8s.io" kill "$id" KILL >/dev/null 2>&1
			runc --root "$RUNC_ROOT/k8s.io" delete --force "$id" >/dev/null 2>&1
			# the shim's socket: /run/containerd/s/sha256(address/ns/id)
			sockhash=$(printf '%s' "$SOCK/k8s.io/$id" | sha256sum | cut -d' ' -f1)
			rm -f "/run/containerd/s/$sockhash"
			n=$((n + 1))
		done
	fi
	# shims of our containerd: their command line names our socket; each
	# leaves its socket /run/containerd/s/sha256(address/namespace/id)
	local cmd
	for f in /proc/[0-9]*/cmdline; do
		pid=${f#/proc/}
		pid=${pid%/cmdline}
		cmd=$(tr '\0' ' ' 2>/dev/null <"$f")
		case $cmd in *" -address $SOCK "*) ;; *) continue ;; esac
		kill -KILL "$pid" 2>/dev/null
		id=$(echo "$cmd" | sed -n 's/.* -id \([^ ]*\) .*/\1/p')
		[ -n "$id" ] || continue
		ids="$ids $id"
		sockhash=$(printf '%s' "$SOCK/k8s.io/$id" | sha256sum | cut -d' ' -f1)
		rm -f "/run/containerd/s/$sockhash"
	done
	# cgroups runc did not remove (containerd puts them in k8s.io/<id>
	# when the kubelet names no parent: cgroupsPerQOS is off)
	for id in $ids; do
		for f in /sys/fs/cgroup/*/k8s.io/"$id" /sys/fs/cgroup/k8s.io/"$id"; do
			[ -d "$f" ] && rmdir "$f" 2>/dev/null
		done
	done
	rmdir /sys/fs/cgroup/*/k8s.io 2>/dev/null   # only where empty
	# mounts under $NODE (netns, shm, rootfs, volumes), deepest first
	awk -v p="$NODE/" 'index($2, p) == 1 { print $2 }' /proc/self/mounts \
		| sort -r | while read -r m; do
			umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
		done
	# host ends of pod veths left on the bridge, then the bridge
	if ip link show "$BRIDGE" >/dev/null 2>&1; then
		for l in $(ip -o link show master "$BRIDGE" | awk -F': ' '{ print $2 }' | cut -d@ -f1); do
			ip link del "$l" 2>/dev/null || true
		done
		ip link del "$BRIDGE" 2>/dev/null || true
	fi
	for t in nat filter; do
		iptables -t "$t" -S 2>/dev/null | grep -- "--comment $TAG" | sed 's/^-A /-D /' \
			| while read -r rule; do
				eval "iptables -t $t $rule" || true
			done
	done
	# the kubelet's links to container logs in the fixed /var/log/containers
	for f in /var/log/containers/*; do
		[ -L "$f" ] || continue
		case $(readlink "$f") in "$NODE"/*) rm -f "$f" ;; esac
	done
	[ "$n" -gt 0 ] && echo "node: removed $n containers left running"
	return 0
}

# sourced (by a test that wants its functions): define, do nothing
[ "${BASH_SOURCE[0]}" = "$0" ] || return 0
case ${1:-} in
pki) cmd_pki ;;
up) cmd_up ;;
clean) cmd_clean ;;
*) die "usage: node.sh pki|up|clean" ;;
esac
