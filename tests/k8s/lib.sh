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
free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
