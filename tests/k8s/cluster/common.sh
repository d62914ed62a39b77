# Shared by up.sh, down.sh and the tests: paths, ports and helpers.
# Ports are fixed (loopback only); override them through the environment.
CACHE=${DDILOCO_K8S_CACHE:-$HOME/.cache/ddiloco-k8s}
BIN=$CACHE/bin
RUN=${DDILOCO_K8S_RUN:-/tmp/ddiloco-k8s}
API_PORT=${DDILOCO_K8S_API_PORT:-16443}
ETCD_PORT=${DDILOCO_K8S_ETCD_PORT:-16379}
ETCD_PEER_PORT=${DDILOCO_K8S_ETCD_PEER_PORT:-16380}
KUBE_SERVER=https://127.0.0.1:$API_PORT
SERVICE_CIDR=10.96.0.0/16
SERVICE_IP=10.96.0.1
POD_CIDR=127.64.0.1/16
NODES=${DDILOCO_K8S_NODES:-3}
# One cluster per machine: up, down and a whole test-k8s run hold this lock
# (outside $RUN, which down removes), so runs from two checkouts queue
# instead of stopping each other's processes.
LOCK=$RUN.lock
# stop order is the reverse of this; the last three run only on a
# cluster with the real node (E2E=1, node.sh)
COMPONENTS="etcd kube-apiserver kube-controller-manager kube-scheduler kwok containerd coredns kubelet"
# The real node: its state, its bridge and pod subnet (a /24 of its own,
# the bridge is the gateway and the node's address), its local ports.
NODE=$RUN/node
NODE_NAME=e2e-node
BRIDGE=ddl0
POD_NET=${DDILOCO_K8S_POD_NET:-10.244.0}
POD_SUBNET=$POD_NET.0/24
POD_PREFIX=24
POD_GW=$POD_NET.1
CNI_BIN=/usr/lib/cni
KUBELET_HEALTHZ_PORT=${DDILOCO_K8S_KUBELET_HEALTHZ_PORT:-16248}
COREDNS_HEALTH_PORT=${DDILOCO_K8S_COREDNS_HEALTH_PORT:-16080}
COREDNS_READY_PORT=${DDILOCO_K8S_COREDNS_READY_PORT:-16181}
# the NetworkPolicy engine's /metrics, on the node's address
NETPOL_METRICS_PORT=${DDILOCO_K8S_NETPOL_METRICS_PORT:-16099}

# kubeconfig FILE USER TOKEN: an identity of the test cluster (CA by path)
kubeconfig() {
	cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: ddiloco-test
  cluster:
    server: $KUBE_SERVER
    certificate-authority: $RUN/pki/ca.crt
users:
- name: $2
  user:
    token: $3
contexts:
- name: ddiloco-test
  context:
    cluster: ddiloco-test
    user: $2
    namespace: default
current-context: ddiloco-test
EOF
	chmod 600 "$1"
}

die() {
	echo "cluster: $*" >&2
	exit 1
}

# take_lock: hold $LOCK on fd 9 until the script exits; nothing to do when
# the caller (tests/k8s/run.sh) already holds it for us.
take_lock() {
	[ -n "${DDILOCO_K8S_LOCKED:-}" ] && return 0
	exec 9>>"$LOCK"
	if ! flock -n 9; then
		echo "cluster: another cluster-up/down or test-k8s holds $LOCK; waiting (up to 30 min)" >&2
		flock -w 1800 9 || die "gave up waiting for $LOCK"
	fi
	export DDILOCO_K8S_LOCKED=1
}

port_busy() {
	ss -Hltn "sport = :$1" 2>/dev/null | grep -q .
}

# start NAME BINARY ARGS...: in its own session, output to logs/NAME.log;
# the pid file holds the pid and the binary, so down.sh stops only it.
start() {
	local name=$1
	shift
	# 9>&-: the lock must not outlive the script that took it
	setsid "$@" >"$RUN/logs/$name.log" 2>&1 </dev/null 9>&- &
	printf '%s\n%s\n' "$!" "$1" >"$RUN/pids/$name.pid"
	# Until the fork has exec'd the binary (through setsid), its
	# /proc/PID/exe is bash's or setsid's, and pid_of takes it for gone:
	# wait_for then said "etcd exited" of an etcd still starting on a
	# loaded machine, and down.sh left it running. Wait for the exec.
	local pid=$! _
	for _ in $(seq 1 100); do
		pid_of "$name" >/dev/null && break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
}

# pid_of NAME: the pid if the recorded process still runs that binary
pid_of() {
	local f=$RUN/pids/$1.pid pid bin exe
	[ -f "$f" ] || return 1
	{ read -r pid; read -r bin; } <"$f"
	[ -n "$pid" ] || return 1
	exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
	case $exe in
	"$bin" | "$bin (deleted)") echo "$pid" ;;
	*) return 1 ;;
	esac
}

all_running() {
	local c
	for c in $COMPONENTS; do
		case $c in containerd | coredns | kubelet) [ -d "$NODE" ] || continue ;; esac
		pid_of "$c" >/dev/null || return 1
	done
}

api_ready() {
	local tok
	[ -f "$RUN/pki/tokens.csv" ] || return 1
	tok=$(head -1 "$RUN/pki/tokens.csv" | cut -d, -f1)
	curl -sf --max-time 5 --cacert "$RUN/pki/ca.crt" \
		-H "Authorization: Bearer $tok" "$KUBE_SERVER/readyz" >/dev/null 2>&1
}

# wait_for WHAT SECONDS CMD...: poll CMD until it succeeds; on timeout show
# the logs and fail. A component that exits meanwhile fails at once.
wait_for() {
	local what=$1 secs=$2 end c
	shift 2
	end=$(($(date +%s) + secs))
	while ! "$@" >/dev/null 2>&1; do
		for c in $COMPONENTS; do
			if [ -f "$RUN/pids/$c.pid" ] && ! pid_of "$c" >/dev/null; then
				tail -20 "$RUN/logs/$c.log" >&2
				die "$c exited while waiting for $what (log: $RUN/logs/$c.log)"
			fi
		done
		if [ "$(date +%s)" -ge "$end" ]; then
			for c in $COMPONENTS; do
				[ -f "$RUN/logs/$c.log" ] && { echo "--- $c" >&2; tail -5 "$RUN/logs/$c.log" >&2; }
			done
			die "timed out after $secs s waiting for $what"
		fi
		sleep 0.5
	done
}
