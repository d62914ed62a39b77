# Shell helpers shared by tests/k8s/test_*.sh (sourced; needs a fail(),
# and NS, ROOT and KUBECTL set by the test).
KN() { "$KUBECTL" -n "$NS" "$@"; }
jp() { KN get "$1" -o "jsonpath=$2" 2>/dev/null; }
# the DecoupledTrainingJob CRD applied and Established
apply_crd() {
	"$KUBECTL" apply --server-side -f "$ROOT/crds/decoupledtrainingjobs.yaml" >/dev/null \
		|| fail "CRD refused"
	until_ok 30 "CRD established" "$KUBECTL" wait --for=condition=Established \
		--timeout=1s crd/decoupledtrainingjobs.ddiloco.io
}
# for cleanup: stop every process the test started (their pids in PIDS)
stop_pids() {
	local p
	for p in "${PIDS[@]:-}"; do
		[ -n "$p" ] && kill "$p" 2>/dev/null && wait "$p" 2>/dev/null
	done
}
until_ok() {   # CMD is evaluated again on every try
	local secs=$1 what=$2 end
	shift 2
	end=$(($(date +%s) + secs))
	until eval "$*" >/dev/null 2>&1; do
		[ "$(date +%s)" -lt "$end" ] || fail "timed out after $secs s: $what"
		sleep 0.5
	done
}
# the test cluster's version, for helm template (which else assumes an old
# one, below the chart's kubeVersion)
kube_version() {
	"$KUBECTL" version -o json 2>/dev/null | jq -r .serverVersion.gitVersion
}
free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# The frame of a test that runs the operator as a local process in a
# namespace of its own (test_names, test_template, test_failure,
# test_lifecycle, test_kueue, test_suspend, test_metrics, test_evaluator): `op_test NAME` sets BIN, NS
# (NAME-<pid>-<random>) and WORK (a new folder), and on exit stops the
# operator, runs the test's own extra_cleanup when it has one, deletes NS
# and removes WORK. `start_operator [PORT [FLAGS...]]` runs the operator
# on NS, with more flags when given, its log in WORK/op.log. A test without a fail() of its own gets one
# that prints the namespace's jobs, pods, claims and last Events and the
# operator's log.
op_test() {
	TEST=$1
	BUILD=${BUILD:-build}
	case $BUILD in /*) BIN=$BUILD/ddiloco ;; *) BIN=$ROOT/$BUILD/ddiloco ;; esac
	NS=$1-$$-$RANDOM
	WORK=$(mktemp -d "/tmp/test_$1.XXXXXX")
	OP_PID=
	trap op_cleanup EXIT
	[ -x "$BIN" ] || fail "no $BIN (make first)"
}
declare -F fail >/dev/null || fail() {
	echo "test_$TEST: FAIL: $*" >&2
	KN get ddjobs,pods,pvc -o wide >&2 2>/dev/null || true
	KN get events --sort-by=.lastTimestamp 2>/dev/null | tail -10 >&2 || true
	[ -e "$WORK/op.log" ] && tail -30 "$WORK/op.log" >&2
	echo "test_$TEST: FAIL: $*" >&2   # again, last, where a log's tail shows it
	exit 1
}
op_cleanup() {
	local rc=$?
	set +e
	[ -n "$OP_PID" ] && kill "$OP_PID" 2>/dev/null && wait "$OP_PID" 2>/dev/null
	declare -F extra_cleanup >/dev/null && extra_cleanup
	"$KUBECTL" delete namespace "$NS" --wait=false >/dev/null 2>&1
	rm -rf "$WORK"
	exit "$rc"
}
start_operator() {   # [PORT [MORE OPERATOR FLAGS...]]
	local port=${1:-0}
	[ $# -gt 0 ] && shift
	"$BIN" operator --kubeconfig "$KUBECONFIG" --namespace "$NS" \
		--http "127.0.0.1:$port" "$@" >"$WORK/op.log" 2>&1 &
	OP_PID=$!
}

# A node no kubelet (and no kwok) answers for, named $1 (test_failure,
# test_pending). Tainted: only the test's own pods, which tolerate every
# taint, land there, not those of a test run beside it (tests/k8s/run.sh's
# lanes).
node_without_kubelet() {
	"$KUBECTL" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $1
  labels: {kubernetes.io/hostname: $1}
spec:
  taints: [{key: ddiloco.io/test-node, value: $NS, effect: NoSchedule}]
status:
  allocatable: {cpu: "8", memory: 32Gi, pods: "10"}
  capacity: {cpu: "8", memory: 32Gi, pods: "10"}
EOF
}
