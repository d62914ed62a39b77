#!/usr/bin/env bash
# make test-e2e: the product's main path on a real node (kubelet +
# containerd, make cluster-up E2E=1), the way a platform team uses it:
#   1. helm install charts/ddiloco: the operator as a Deployment with its
#      service account (in-cluster config), its pod Ready (probes)
#   2. kubectl apply -f examples/e2e.yaml (the file `ddiloco run` takes):
#      M = 4, K = 3, a learner pod deleted every 15 s by the chaos
#      controller; the syncer's claim bound to a hostPath volume made here;
#      later the syncer pod is deleted once by this script
#   3. it trains to its token budget through real pods
#   4. asserts, from the job's status and the syncer's /status: Succeeded;
#      >= 3 chaos kills, each followed by a new pod (new uid) that got
#      Ready and whose learner the syncer saw connected again; uptime >=
#      0.99; final eval loss within 5% of `ddiloco train` on the host
#      (data-parallel, same tokens); after the syncer's deletion its round
#      and every fragment version are past any seen before (recovered from
#      its checkpoint, nothing reused)
#   5. prints kubectl get ddjobs while it trains, describe ddjob, get nodes
#      -o wide, get pods -o wide
#   6. job deleted and helm uninstall: no pod, StatefulSet, Service or
#      Lease left
# Measures: apply -> first merged round, uptime, loss ratio, time for a
# deleted learner to rejoin (docs/k8s-testing.md). Ends with
# "N passed, N failed".
#
# Uses the cluster that is up (with its real node), else brings one up
# with E2E=1 and down at the end, under the cluster lock.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
CL=$ROOT/tests/k8s/cluster
. "$CL/common.sh"
BUILD=${BUILD:-build}
case $BUILD in /*) BIN_DD=$BUILD/ddiloco ;; *) BIN_DD=$ROOT/$BUILD/ddiloco ;; esac
JOB_FILE=$ROOT/examples/e2e.yaml
JOB=e2e
NS=e2e-$$
REL=ddiloco
OPNS=ddiloco-system
DEADLINE=${E2E_TIMEOUT:-900}   # seconds for the job to succeed
WORK=$(mktemp -d /tmp/test_e2e.XXXXXX)
PV=$NS-checkpoints
PVDIR=$WORK/pv
pass=0 failn=0 started=""

say() { echo "e2e: $*"; }
ok() { echo "PASS $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; failn=$((failn + 1)); }
check() {   # check NAME CMD...: one assertion, counted
	local name=$1
	shift
	if eval "$*" >/dev/null 2>&1; then ok "$name"; else bad "$name"; fi
}
fail() {   # lib.sh's until_ok calls it: fatal for this run
	bad "$*"
	finish
}
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

finish() {
	set +e
	if [ -n "${KUBECTL:-}" ]; then
		if [ "$failn" -gt 0 ]; then
			echo "--- on failure: pods, events, operator log"
			"$KUBECTL" -n "$NS" get pods -o wide 2>/dev/null
			"$KUBECTL" -n "$NS" get events --sort-by=.lastTimestamp 2>/dev/null | tail -25
			"$KUBECTL" -n "$OPNS" logs deploy/$REL --tail=30 2>/dev/null
		fi
		"$KUBECTL" delete namespace "$NS" --wait=false >/dev/null 2>&1
		"$HELM" uninstall "$REL" -n "$OPNS" >/dev/null 2>&1
		"$KUBECTL" delete pv "$PV" --wait=false >/dev/null 2>&1
	fi
	[ -n "$started" ] && "$CL/down.sh" >/dev/null 2>&1
	# the volume's files belong to the image's user: remove as we can
	rm -rf "$WORK" 2>/dev/null
	echo "$pass passed, $failn failed"
	[ "$failn" -eq 0 ]
	exit
}
trap 'bad "interrupted"; finish' INT TERM

# --- the cluster and the image -----------------------------------------
t_ci=$(now)
[ -x "$BIN_DD" ] || fail "no $BIN_DD (make first)"
docker image inspect ddiloco:latest >/dev/null 2>&1 || fail "no image ddiloco:latest (make image)"
take_lock
if all_running && api_ready && [ -d "$NODE" ]; then
	say "using the cluster that is up, with its node $NODE_NAME"
else
	started=1
	E2E=1 "$CL/up.sh" || fail "cluster-up E2E=1"
fi
set -a
. "$RUN/env"
set +a
. "$ROOT/tests/k8s/lib.sh"
K() { "$KUBECTL" "$@"; }
# the image as built now, not as the node got it at cluster-up
t0=$(now)
docker save ddiloco:latest | ctr --address "$NODE/containerd.sock" --namespace k8s.io \
	images import --snapshotter native - >/dev/null || fail "import ddiloco:latest into the node's containerd"
say "ddiloco:latest imported into the node in $(elapsed "$t0") s"

echo "--- kubectl get nodes -o wide"
K get nodes -o wide
check "node $NODE_NAME Ready, runtime containerd" \
	'K get node $NODE_NAME -o jsonpath="{.status.conditions[?(@.type==\"Ready\")].status} {.status.nodeInfo.containerRuntimeVersion}" | grep -q "^True containerd://"'

# --- 1. helm install ------------------------------------------------------
t0=$(now)
"$HELM" install "$REL" "$ROOT/charts/ddiloco" -n "$OPNS" --create-namespace \
	--set image.tag=latest --set image.pullPolicy=IfNotPresent --wait --timeout 180s \
	>"$WORK/helm.log" 2>&1 || { cat "$WORK/helm.log"; fail "helm install"; }
check "operator pod Ready after helm install ($(elapsed "$t0") s)" \
	K -n "$OPNS" wait --for=condition=Ready pod -l app.kubernetes.io/instance=$REL --timeout=60s
OPPOD=$(K -n "$OPNS" get pods -l app.kubernetes.io/instance=$REL -o jsonpath='{.items[0].metadata.name}')
check "operator runs with its service account token" \
	'[ "$(K -n $OPNS get pod $OPPOD -o jsonpath="{.spec.serviceAccountName}")" = "$(K -n $OPNS get deploy -l app.kubernetes.io/instance=$REL -o jsonpath="{.items[0].spec.template.spec.serviceAccountName}")" ] &&
	 K -n $OPNS get pod $OPPOD -o jsonpath="{.spec.volumes[*].projected.sources[*].serviceAccountToken.path}" | grep -q token'
check "operator on the real node" \
	'[ "$(K -n $OPNS get pod $OPPOD -o jsonpath="{.spec.nodeName}")" = "$NODE_NAME" ]'

# --- 2. the job -------------------------------------------------------------
K create namespace "$NS" >/dev/null || fail "create namespace $NS"
mkdir -p "$PVDIR" && chmod 0777 "$PVDIR"
K apply -f - >/dev/null <<EOF || fail "the checkpoint volume"
apiVersion: v1
kind: PersistentVolume
metadata: {name: $PV}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  claimRef: {namespace: $NS, name: $JOB-checkpoints}
  hostPath: {path: $PVDIR, type: Directory}
EOF
t_apply=$(now)
K -n "$NS" apply -f "$JOB_FILE" || fail "kubectl apply -f examples/e2e.yaml"

# --- 3. it trains: watch it ------------------------------------------------
# per learner: the uid of its pod, when it was seen deleted, whether it
# came back (new uid Ready and connected in the syncer's /status)
declare -A uid gone_at back
kills_seen=0 rejoined=0 rejoin_sum=0 rejoin_max=0 t_first="" t_printed=0
syncer_deleted="" syncer_log_shown="" round_before=-1 vers_before="" syncer_uid="" restart_ok="" resumed_line=""
status_json() {
	local ip
	ip=$(K -n "$NS" get pod $JOB-syncer-0 -o jsonpath='{.status.podIP}' 2>/dev/null)
	[ -n "$ip" ] && curl -sf --max-time 2 "http://$ip:7071/status"
}
py() { python3 -c "$@"; }
pods_printed=""
end=$(($(date +%s) + DEADLINE))
while :; do
	phase=$(jp ddjob/$JOB '{.status.phase}')
	[ "$phase" = Succeeded ] || [ "$phase" = Failed ] && break
	[ "$(date +%s)" -lt "$end" ] || { bad "job did not finish within $DEADLINE s"; break; }
	st=$(status_json || true)
	if [ -n "$st" ]; then
		echo "$st" >"$WORK/status.json"
		merged=$(echo "$st" | py 'import json,sys; print(json.load(sys.stdin)["answers"]["merged"])' 2>/dev/null || echo 0)
		if [ -z "$t_first" ] && [ "${merged:-0}" -gt 0 ]; then
			t_first=$(elapsed "$t_apply")
			say "first merged round $t_first s after kubectl apply"
		fi
	fi
	# learners: kills and returns
	while read -r name u del ready; do
		[ -n "$name" ] || continue
		i=${name##*-}
		if [ -n "${uid[$i]:-}" ] && [ -z "${gone_at[$i]:-}" ] &&
			{ [ "${uid[$i]}" != "$u" ] || [ "$del" != d= ]; }; then
			gone_at[$i]=$(now)   # terminating, or replaced between two looks
			kills_seen=$((kills_seen + 1))
		fi
		if [ -n "${gone_at[$i]:-}" ] && [ "${uid[$i]}" != "$u" ] && [ "$del" = d= ] &&
			[ "$ready" = True ]; then
			conn=$(echo "$st" | py "import json,sys; s=json.load(sys.stdin); print([l for l in s['learners'] if l['id']==$i][0]['connected'])" 2>/dev/null)
			if [ "$conn" = True ]; then
				d=$(elapsed "${gone_at[$i]}")
				say "learner $i rejoined $d s after its pod was deleted"
				rejoined=$((rejoined + 1))
				rejoin_sum=$(awk -v a="$rejoin_sum" -v b="$d" 'BEGIN { print a + b }')
				rejoin_max=$(awk -v a="$rejoin_max" -v b="$d" 'BEGIN { print (b > a ? b : a) }')
				unset "gone_at[$i]"
				uid[$i]=$u
			fi
		elif [ -z "${gone_at[$i]:-}" ]; then
			uid[$i]=$u
		fi
	done < <(K -n "$NS" get pods -l ddiloco.io/job=$JOB,ddiloco.io/role=learner -o \
		jsonpath='{range .items[*]}{.metadata.name} {.metadata.uid} d={.metadata.deletionTimestamp} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null)
	# a learner pod missing altogether
	for i in 0 1 2 3; do
		if [ -n "${uid[$i]:-}" ] && [ -z "${gone_at[$i]:-}" ] &&
			! K -n "$NS" get pod $JOB-learner-$i >/dev/null 2>&1; then
			gone_at[$i]=$(now)
			kills_seen=$((kills_seen + 1))
			uid[$i]=gone
		fi
	done
	# the syncer, deleted once when a third of the budget is trained
	if [ -z "$syncer_deleted" ] && [ -n "$st" ]; then
		frac=$(echo "$st" | py 'import json,sys; s=json.load(sys.stdin); print(int(s["tokens"] >= 4000000 / 3))' 2>/dev/null || echo 0)
		if [ "$frac" = 1 ]; then
			round_before=$(echo "$st" | py 'import json,sys; print(json.load(sys.stdin)["round"])')
			vers_before=$(echo "$st" | py 'import json,sys; print(" ".join(map(str, json.load(sys.stdin)["versions"])))')
			syncer_uid=$(jp pod/$JOB-syncer-0 '{.metadata.uid}')
			say "deleting the syncer pod at round $round_before (versions $vers_before)"
			K -n "$NS" delete pod $JOB-syncer-0 --wait=false >/dev/null
			syncer_deleted=$(now)
		fi
	elif [ -n "$syncer_deleted" ] && [ -z "$restart_ok" ] && [ -n "$st" ] &&
		[ "$(jp pod/$JOB-syncer-0 '{.metadata.uid}')" != "$syncer_uid" ]; then
		echo "$st" >"$WORK/status-after.json"
		restart_ok=$(ROUND=$round_before VERS="$vers_before" py '
import json, os
s = json.load(open("'"$WORK"'/status-after.json"))
rb = int(os.environ["ROUND"]); vb = list(map(int, os.environ["VERS"].split()))
ok = s["round"] > rb and all(v > w for v, w in zip(s["versions"], vb))
print("yes" if ok else "no: round %d (before %d), versions %s (before %s)" % (s["round"], rb, s["versions"], vb))')
		resumed_line=$(K -n "$NS" logs $JOB-syncer-0 2>/dev/null | grep -m1 "resumed from" || true)
		say "syncer back $(elapsed "$syncer_deleted") s after its deletion: round $(echo "$st" | py 'import json,sys; print(json.load(sys.stdin)["round"])'), past the old ones: $restart_ok"
	fi
	# the restarted syncer's first 30 s: when its learners came back
	if [ -n "$restart_ok" ] && [ -z "$syncer_log_shown" ] &&
		awk -v a="$syncer_deleted" -v b="$(now)" 'BEGIN { exit !(b - a >= 40) }'; then
		syncer_log_shown=1
		echo "--- the restarted syncer's log, joins and leaves"
		K -n "$NS" logs $JOB-syncer-0 2>/dev/null |
			grep -E "resumed from|joined|left|gRPC on|round .* merged" | head -20
	fi
	if [ $(($(date +%s) - t_printed)) -ge 20 ]; then
		t_printed=$(date +%s)
		echo "--- kubectl get ddjobs ($(elapsed "$t_apply") s)"
		K -n "$NS" get ddjobs
		if [ -z "$pods_printed" ] && [ "$phase" = Running ]; then
			pods_printed=1
			echo "--- kubectl get pods -o wide"
			K -n "$NS" get pods -o wide
		fi
	fi
	sleep 1
done
t_job=$(elapsed "$t_apply")
echo "--- kubectl get ddjobs (end, $t_job s)"
K -n "$NS" get ddjobs
echo "--- kubectl describe ddjob $JOB"
K -n "$NS" describe ddjob $JOB

# --- 4. assertions -------------------------------------------------------
phase=$(jp ddjob/$JOB '{.status.phase}')
check "phase Succeeded (is $phase, $t_job s)" '[ "$phase" = Succeeded ]'
kills=$(jp ddjob/$JOB '{.status.chaos.kills}')
nev=$(K -n "$NS" get events --field-selector involvedObject.name=$JOB,reason=ChaosKill -o name | wc -l)
say "chaos kills: status $kills, events $nev, seen here $kills_seen, rejoined $rejoined"
check "at least 3 chaos kills (status.chaos.kills $kills)" '[ "${kills:-0}" -ge 3 ]'
# a kill in the job's last moments may have no time to come back
check "every kill but the last one rejoined ($rejoined of $kills_seen)" \
	'[ "$rejoined" -ge 3 ] && [ "$rejoined" -ge $((kills_seen - 1)) ]'
uptime=$(jp ddjob/$JOB '{.status.progress.uptime}')
check "uptime >= 0.99 ($uptime)" "awk -v u='${uptime:-0}' 'BEGIN { exit !(u >= 0.99) }'"
check "syncer deleted once and back past every round and version it had: $restart_ok" \
	'[ "$restart_ok" = yes ]'
check "syncer recovered from its checkpoint (${resumed_line:-no 'resumed from' line})" \
	'[ -n "$resumed_line" ]'
loss=$(jp ddjob/$JOB '{.status.progress.loss}')
say "final eval loss $loss; the data-parallel baseline on the host:"
t0=$(now)
"$BIN_DD" train "$JOB_FILE" --batch-mult 4 --threads 2 >"$WORK/baseline.log" 2>&1
base=$(sed -n 's/^final eval_loss=\([0-9.]*\).*/\1/p' "$WORK/baseline.log" | tail -1)
say "baseline eval loss ${base:-?} ($(elapsed "$t0") s)"
ratio=$(awk -v a="${loss:-0}" -v b="${base:-0}" 'BEGIN { if (b > 0) printf "%.4f", a / b; else print "nan" }')
check "final eval loss within 5% of the baseline (ratio $ratio)" \
	"awk -v r='$ratio' 'BEGIN { exit !(r != \"nan\" && r >= 0.95 && r <= 1.05) }'"

# --- 6. deletion and uninstall leave nothing ------------------------------
K -n "$NS" delete ddjob $JOB --wait=true --timeout=120s >/dev/null
until_ok 120 "children collected" \
	"test \"\$(K -n $NS get pods,statefulsets,services -o name | wc -l)\" = 0"
check "job deleted: no pod, StatefulSet or Service left" \
	'[ "$(K -n $NS get pods,statefulsets,services -o name | wc -l)" = 0 ]'
"$HELM" uninstall "$REL" -n "$OPNS" --wait --timeout 120s >/dev/null
until_ok 60 "operator pods gone" \
	"test \"\$(K -n $OPNS get pods -l app.kubernetes.io/instance=$REL -o name | wc -l)\" = 0"
left=$(K -n "$OPNS" get pods,deployments,services,leases -o name 2>/dev/null | tr '\n' ' ')
check "helm uninstall: no operator pod, Deployment, Service or Lease left (${left:-none})" \
	'[ -z "$left" ]'

# --- numbers -----------------------------------------------------------------
rejoin_mean=$(awk -v s="$rejoin_sum" -v n="$rejoined" 'BEGIN { if (n) printf "%.1f", s / n; else print "-" }')
echo "e2e numbers: apply_to_first_merge_s=${t_first:-none} job_s=$t_job uptime=${uptime:-?}" \
	"loss=${loss:-?} baseline=${base:-?} loss_ratio=$ratio kills=${kills:-0}" \
	"rejoin_mean_s=$rejoin_mean rejoin_max_s=$rejoin_max total_s=$(elapsed "$t_ci")"
finish
