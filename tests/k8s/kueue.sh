# Kueue's own controller for the tests (sourced by test_kueue.sh and the
# e2e test's kueue.sh; needs KUBECTL, KUBECONFIG, until_ok, fail and
# free_port): `kueue_start DIR NAME` runs the manager built by
# tests/k8s/cluster/build.sh kueue as a local process (its log
# DIR/kueue.log) with its CRDs and its webhooks for its own kinds, served
# over TLS on 127.0.0.1 (a certificate made here; the webhook
# configurations are named ddiloco-test-kueue-NAME); `kueue_stop` ends it
# and removes the webhook configurations.
KUEUE_CACHE=${DDILOCO_K8S_CACHE:-$HOME/.cache/ddiloco-k8s}
KUEUE_BIN=$KUEUE_CACHE/bin/kueue
KUEUE_PID="" KUEUE_NAME=""

kueue_start() {
	local dir=$1 wh health c n
	KUEUE_NAME=$2
	[ -x "$KUEUE_BIN" ] && [ -s "$KUEUE_CACHE/kueue/webhooks.yaml" ] ||
		fail "no $KUEUE_BIN or its manifests (tests/k8s/cluster/build.sh kueue)"
	mkdir -p "$dir/certs"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
		-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
		-keyout "$dir/certs/tls.key" -out "$dir/certs/tls.crt" 2>/dev/null ||
		fail "openssl: the webhook certificate"
	# the manager reads its metrics certificate from this fixed folder
	# even when metrics are off
	mkdir -p /etc/kueue/metrics/certs
	cp "$dir/certs/tls.crt" "$dir/certs/tls.key" /etc/kueue/metrics/certs/
	"$KUBECTL" apply --server-side -f "$KUEUE_CACHE/kueue/crds" >/dev/null || fail "Kueue's CRDs"
	for c in "$KUEUE_CACHE"/kueue/crds/*.yaml; do
		n=$(sed -n 's/^  name: //p' "$c" | head -n 1)
		until_ok 30 "CRD $n established" "$KUBECTL" wait --for=condition=Established \
			--timeout=1s "crd/$n"
	done
	wh=$(free_port) health=$(free_port)
	python3 - "$KUEUE_CACHE/kueue/webhooks.yaml" "$dir/certs/tls.crt" "$wh" \
		"ddiloco-test-kueue-$KUEUE_NAME" >"$dir/webhooks.yaml" <<'PYEOF' ||
import base64, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
ca = base64.b64encode(open(sys.argv[2], "rb").read()).decode()
out = []
for d in docs:
    hooks = []
    for w in d.get("webhooks", []):
        groups = {g for r in w.get("rules", []) for g in r.get("apiGroups", [])}
        if groups != {"kueue.x-k8s.io"}:
            continue   # the job integrations' hooks (pods, Jobs, ...)
        path = w["clientConfig"]["service"]["path"]
        w["clientConfig"] = {"url": "https://127.0.0.1:%s%s" % (sys.argv[3], path),
                             "caBundle": ca}
        w.pop("namespaceSelector", None)
        hooks.append(w)
    d["metadata"] = {"name": sys.argv[4]}
    d["webhooks"] = hooks
    out.append(d)
yaml.safe_dump_all(out, sys.stdout)
PYEOF
		fail "the webhook configurations"
	cat >"$dir/kueue.yaml" <<YAML
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
leaderElection: {leaderElect: false}
internalCertManagement: {enable: false}
webhook: {host: 127.0.0.1, port: $wh, certDir: $dir/certs}
metrics: {bindAddress: "0"}
health: {healthProbeBindAddress: "127.0.0.1:$health"}
integrations:
  frameworks: [batch/job]
  externalFrameworks: [DecoupledTrainingJob.v1alpha1.ddiloco.io]
featureGates: {VisibilityOnDemand: false}
YAML
	"$KUEUE_BIN" --config "$dir/kueue.yaml" --kubeconfig "$KUBECONFIG" >"$dir/kueue.log" 2>&1 &
	KUEUE_PID=$!
	until_ok 90 "Kueue ready" curl -sf "http://127.0.0.1:$health/readyz"
	"$KUBECTL" apply -f "$dir/webhooks.yaml" >/dev/null || fail "apply the webhook configurations"
	echo "Kueue $(sed -n 's/^KUEUE_VERSION=//p' "$(dirname "${BASH_SOURCE[0]}")/cluster/versions.sh") ready, its webhooks on 127.0.0.1:$wh"
}

kueue_stop() {
	[ -n "$KUEUE_PID" ] && kill "$KUEUE_PID" 2>/dev/null && wait "$KUEUE_PID" 2>/dev/null
	KUEUE_PID=""
	[ -n "$KUEUE_NAME" ] || return 0
	"$KUBECTL" delete validatingwebhookconfiguration "ddiloco-test-kueue-$KUEUE_NAME" \
		--wait=false >/dev/null 2>&1
	"$KUBECTL" delete mutatingwebhookconfiguration "ddiloco-test-kueue-$KUEUE_NAME" \
		--wait=false >/dev/null 2>&1
	return 0
}
