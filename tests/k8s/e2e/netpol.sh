# Sourced by test_e2e.sh (its K, NS, RUN and the node's env): the job's
# NetworkPolicy in force. The node's engine (kube-network-policies,
# tests/k8s/cluster/node.sh) drops the first packet of a connection that
# no policy admits. While job $1 trains, two pods of the tools image
# (busybox) in the job's namespace dial its syncer:
#   probe-out  no label: refused on the gRPC port (only the job's learner
#              and evaluator pods are admitted) and on the HTTP port
#              (only the operator's pods)
#   probe-in   labelled e2e-probe=in, which a NetworkPolicy of the test's
#              own admits to the gRPC port ("policies add up",
#              docs/operator.md, Security): connects there, and is
#              still refused on the HTTP port
# The job training through the same engine is the learners' side.
# netpol_step JOB is called once a look and never blocks it: the dials
# (3 s each for a refusal) run in the background, since the look also
# times the chaos kills' rejoins. It sets np_done once they have run
# (their results in np_*).
np_state=0 np_done="" np_pid="" np_in_grpc="" np_out_grpc="" np_in_http="" np_out_http=""

probe_pod() {   # probe_pod NAME [LABEL]: a busybox pod that waits
	K -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
  labels: {${2:-e2e-probe: out}}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  securityContext:
    runAsNonRoot: true
    runAsUser: 65534
    seccompProfile: {type: RuntimeDefault}
  containers:
  - name: probe
    image: ddiloco-tools:1
    imagePullPolicy: Never
    command: [sleep, "600"]
    securityContext:
      allowPrivilegeEscalation: false
      capabilities: {drop: [ALL]}
EOF
}

# dial POD IP PORT: "open" when a TCP connection was made within 3 s
# (busybox's nc, its input empty: it ends once connected), "refused"
# otherwise (a dropped SYN: "nc: timed out")
dial() {
	if K -n "$NS" exec "$1" -- nc -w 3 "$2" "$3" </dev/null >/dev/null 2>&1; then
		echo open
	else
		echo refused
	fi
}

# the engine's packets by verdict, from its /metrics
netpol_verdicts() {
	curl -sf --max-time 2 "http://$POD_GW:$NETPOL_METRICS_PORT/metrics" |
		awk '/^kube_network_policies_packet_count\{/ { v = $1; sub(/.*verdict="/, "", v); sub(/".*/, "", v); n[v] += $2 }
			END { for (v in n) printf "%s=%d ", v, n[v] }'
}

netpol_step() {
	local job=$1 ip ready
	case $np_state in
	0)
		K -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: e2e-probe}
spec:
  podSelector: {matchLabels: {ddiloco.io/job: $job, ddiloco.io/role: syncer}}
  policyTypes: [Ingress]
  ingress:
  - from: [{podSelector: {matchLabels: {e2e-probe: in}}}]
    ports: [{protocol: TCP, port: 7070}]
EOF
		probe_pod probe-in "e2e-probe: in"
		probe_pod probe-out
		np_state=1 ;;
	1)
		ready=$(K -n "$NS" get pod probe-in probe-out -o \
			jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{end}' 2>/dev/null)
		[ "$ready" = TrueTrue ] || return 0
		ip=$(K -n "$NS" get pod "$job-syncer-0" -o jsonpath='{.status.podIP}' 2>/dev/null)
		[ -n "$ip" ] || return 0
		rm -f "$WORK/netpol.res"
		{
			echo "$(dial probe-in "$ip" 7070) $(dial probe-out "$ip" 7070)" \
			     "$(dial probe-in "$ip" 7071) $(dial probe-out "$ip" 7071)" \
				>"$WORK/netpol.res.tmp"
			mv "$WORK/netpol.res.tmp" "$WORK/netpol.res"
		} &
		np_pid=$! np_state=2 ;;
	2)
		[ -s "$WORK/netpol.res" ] || return 0
		read -r np_in_grpc np_out_grpc np_in_http np_out_http <"$WORK/netpol.res"
		np_verdicts=$(netpol_verdicts)
		say "the syncer's ports dialled from two pods of the namespace: probe-in gRPC $np_in_grpc, HTTP $np_in_http; probe-out gRPC $np_out_grpc, HTTP $np_out_http (the engine's packets: ${np_verdicts:-no metrics})"
		K -n "$NS" delete pod probe-in probe-out --wait=false >/dev/null 2>&1
		K -n "$NS" delete networkpolicy e2e-probe --wait=false >/dev/null 2>&1
		np_state=3 np_done=1 ;;
	esac
}

# after the job's loop: the dials' results, if they were still running
netpol_finish() {
	[ "$np_state" = 2 ] || return 0
	wait "$np_pid" 2>/dev/null
	netpol_step "$1"
}
