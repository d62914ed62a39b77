# Shell helpers shared by tests/k8s/test_*.sh (sourced; needs a fail()).
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
