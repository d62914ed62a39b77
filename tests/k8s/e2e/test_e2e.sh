#!/usr/bin/env bash
# make test-e2e: the product's main path on a real node (kubelet +
# containerd, make cluster-up E2E=1), the way a platform team uses it:
#   1. helm install charts/ddiloco: the operator as a Deployment with its
#      service account (in-cluster config), its pod Ready (probes)
#   2. job e2e: kubectl apply -f examples/e2e.yaml (the file `ddiloco run`
#      takes): M = 4, K = 3, a learner pod deleted every 10 s (for 45 s) by the chaos
#      controller; the syncer's claim bound to a hostPath volume made here
#   3. it trains to its token budget through real pods; asserted from the
#      job's status and the syncer's /status: Succeeded; >= 3 chaos kills,
#      each followed by a new pod (new uid) that got Ready and whose
#      learner the syncer saw connected again (but for one the job's end
#      overtook), and all four learners Ready together after the last
#      kill; uptime >= 0.99; while a
#      learner was gone the rounds never stopped for longer than the
#      uptime's own allowance B plus a grace window plus one cadence (the
#      syncer's gap log, docs/syncer.md); its NetworkPolicy in force
#      (tests/k8s/e2e/netpol.sh): a pod of the namespace refused by the
#      syncer's ports, one a policy of the test admits let in on gRPC
#      only; final eval loss at most 1.05 ×
#      that of `ddiloco train` on the host (data-parallel, same tokens, same
#      evaluation tokens), the best of the job's lr × 1/√2, 1 and √2
#   4. job e2e-restart: the same file, chaos off, 10 M tokens; once a
#      quarter of it is trained this script deletes the syncer pod. Asserted:
#      Succeeded; the new syncer resumed from its checkpoint; the first
#      round number and every fragment version it gives out are past the
#      last ones the old syncer gave out (its log, read while it stopped)
#      and past any seen in /status; K learners connected and a round
#      merged again within RESTART_BOUND s of the deletion; then learner
#      1's process killed on the node (a crash: exit code 137, reason
#      Error), and once it is back learner 2 killed by the kernel for its
#      memory limit (OOMKilled; tests/k8s/e2e/faults.sh): each pod Failed,
#      a LearnerFailed Event with that reason, replaced, Ready, and its
#      join in the new syncer's log
#   5. prints kubectl get ddjobs while it trains, describe ddjob, get nodes
#      -o wide, get pods -o wide, the gap log
#   6. job e2e-pytorch (tests/k8s/e2e/pytorch.sh): two PyTorch learners of
#      a model of their own from the image ddiloco-pytorch (make
#      image-pytorch), which holds no ddiloco: the library copied in from
#      the runtime image; Succeeded, the learners ran that image and their
#      command, the rest the runtime image, the syncer took a learner's
#      weights and reached the budget, each learner's loss fell below a
#      tenth of its first; then job e2e-abi, its learners' library of
#      another ABI: Failed, VersionMismatch naming both versions
#   6b. jobs through Kueue's own controller (tests/k8s/e2e/queue.sh): a
#      preemption, after which the preempted job resumes from its
#      checkpoint with no version reused; a partial admission that trains
#   6c. job e2e-up (tests/k8s/e2e/upgrade.sh): helm upgrade to another
#      image tag while it trains: its learners and syncer rolled one at a
#      time, rounds go on, Succeeded
#   7. jobs deleted and helm uninstall: no pod, StatefulSet, Service or
#      Lease left
# Measures: apply -> first merged round, uptime, loss ratio, time for a
# deleted learner to rejoin, syncer restart to quorum (docs/k8s-testing.md).
# Ends with "N passed, N failed".
#
# Uses the cluster that is up (with its real node), else brings one up
# with E2E=1 and down at the end, under the cluster lock.
# E2E_ONLY=pytorch runs job e2e-pytorch alone (steps 1, 6 and 7).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
CL=$ROOT/tests/k8s/cluster
. "$CL/common.sh"
BUILD=${BUILD:-build}
case $BUILD in /*) BIN_DD=$BUILD/ddiloco ;; *) BIN_DD=$ROOT/$BUILD/ddiloco ;; esac
JOB_FILE=$ROOT/examples/e2e.yaml
JOB=e2e
RJOB=e2e-restart
# tokens of the restart job: learners never wait for the syncer, so the
# ~10 s it is away they train on (about 1.5 M tokens here), and what is
# left after it is back must outlast this script's looks at it
RBUDGET=10000000
RESTART_BOUND=${E2E_RESTART_BOUND:-30}   # s from the syncer's deletion to quorum
NS=e2e-$$
REL=ddiloco
OPNS=ddiloco-system
DEADLINE=${E2E_TIMEOUT:-900}   # seconds for the job to succeed
WORK=$(mktemp -d /tmp/test_e2e.XXXXXX)
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
			# every job still there: its status, its syncer's
			# last lines and /status
			"$KUBECTL" -n "$NS" get ddjobs -o wide 2>/dev/null
			for j in $("$KUBECTL" -n "$NS" get ddjobs -o name 2>/dev/null); do
				j=${j#*/}
				echo "--- job $j: conditions, then its syncer's last lines and /status"
				"$KUBECTL" -n "$NS" get ddjob "$j" -o jsonpath='{range .status.conditions[*]}{.type}={.status} {.reason}: {.message}{"\n"}{end}' 2>/dev/null
				"$KUBECTL" -n "$NS" logs "$j-syncer-0" -c syncer --tail=20 2>/dev/null
				status_json "$j" | head -c 1500
				echo
			done
			# the syncer's restart as it went: its pods every 5 s
			# from the deletion on, and both syncers' last lines
			[ -s "$WORK/restart-pods.log" ] &&
				{ echo "--- after the syncer's deletion"; cat "$WORK/restart-pods.log"; }
			for f in syncer-old.log syncer-new.log; do
				[ -s "$WORK/$f" ] && { echo "--- $f (end)"; tail -25 "$WORK/$f"; }
			done
		fi
		"$KUBECTL" delete namespace "$NS" --wait=false >/dev/null 2>&1
		"$HELM" uninstall "$REL" -n "$OPNS" >/dev/null 2>&1
		"$KUBECTL" delete pv "$NS-$JOB" "$NS-$RJOB" "$NS-e2e-pytorch" "$NS-e2e-queued" "$NS-e2e-up" \
			--wait=false >/dev/null 2>&1
		declare -F kueue_stop >/dev/null && kueue_stop
	fi
	[ -n "${LOGPID:-}" ] && kill "$LOGPID" 2>/dev/null
	[ -n "${NEWLOGPID:-}" ] && kill "$NEWLOGPID" 2>/dev/null
	[ -n "${SAMPLEPID:-}" ] && kill "$SAMPLEPID" 2>/dev/null
	[ -n "${SCRAPEPID:-}" ] && kill "$SCRAPEPID" 2>/dev/null
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
PTIMG=$(sed -n 's/^ *image: \(ddiloco-pytorch:.*\)$/\1/p' "$ROOT/examples/pytorch/e2e.yaml")
docker image inspect "$PTIMG" >/dev/null 2>&1 || fail "no image $PTIMG (make image-pytorch)"
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
t0=$(now)
docker save "$PTIMG" | ctr --address "$NODE/containerd.sock" --namespace k8s.io \
	images import --snapshotter native - >/dev/null || fail "import $PTIMG into the node's containerd"
t_ptimport=$(elapsed "$t0")
say "$PTIMG imported into the node in $t_ptimport s"

echo "--- kubectl get nodes -o wide"
K get nodes -o wide
check "node $NODE_NAME Ready, runtime containerd" \
	'K get node $NODE_NAME -o jsonpath="{.status.conditions[?(@.type==\"Ready\")].status} {.status.nodeInfo.containerRuntimeVersion}" | grep -q "^True containerd://"'
check "the node's NetworkPolicy engine Ready (kube-network-policies)" \
	K -n kube-system wait --for=condition=Ready pod/kube-network-policies --timeout=60s

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

# --- 2. the jobs' namespace and checkpoint volumes ---------------------------
K create namespace "$NS" >/dev/null || fail "create namespace $NS"
# the jobs' pods must pass Pod Security "restricted" (docs/security.md)
K label namespace "$NS" pod-security.kubernetes.io/enforce=restricted >/dev/null ||
	fail "label namespace $NS restricted"
pv_for() {   # a hostPath PersistentVolume of no class for the claim of job $1
	mkdir -p "$WORK/pv-$1" && chmod 0777 "$WORK/pv-$1"
	K apply -f - >/dev/null <<PVEOF
apiVersion: v1
kind: PersistentVolume
metadata: {name: $NS-$1}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  claimRef: {namespace: $NS, name: $1-checkpoints}
  hostPath: {path: $WORK/pv-$1, type: Directory}
PVEOF
}
pv_for $JOB || fail "the checkpoint volume of $JOB"
pv_for $RJOB || fail "the checkpoint volume of $RJOB"

py() { python3 -c "$@"; }
status_json() {   # the syncer's /status of job $1, straight from its pod
	local ip
	ip=$(K -n "$NS" get pod "$1-syncer-0" -o jsonpath='{.status.podIP}' 2>/dev/null)
	[ -n "$ip" ] && curl -sf --max-time 2 "http://$ip:7071/status"
}
sj() {   # sj FILE EXPR: a value of the /status JSON in FILE (s: the object)
	FILE=$1 py 'import json, os; s = json.load(open(os.environ["FILE"])); print('"$2"')' 2>/dev/null
}
print_ddjobs() {
	if [ $(($(date +%s) - t_printed)) -ge 20 ]; then
		t_printed=$(date +%s)
		echo "--- kubectl get ddjobs ($(elapsed "$t_apply") s)"
		K -n "$NS" get ddjobs
	fi
}

# E2E_ONLY=pytorch: job e2e-pytorch alone (steps 3-5 skipped), for work
# on the PyTorch learner's image
t_job=- t_rjob=- ratio=- rejoined=0 rejoin_sum=0 rejoin_max=0
if [ "${E2E_ONLY:-}" != pytorch ]; then
# --- 3. job e2e: learner pods deleted by the chaos controller --------------
echo "--- load before job $JOB: $(uptime)"
# the operator's /metrics every 2 s while the job runs: the dashboard is
# drawn from them (tests/k8s/dashrender.py)
OPIP=$(K -n "$OPNS" get pod "$OPPOD" -o jsonpath='{.status.podIP}')
while :; do
	echo "# at $(date +%s.%N)"
	curl -sf --max-time 2 "http://$OPIP:8080/metrics"
	sleep 2
done >"$WORK/scrapes.txt" 2>/dev/null &
SCRAPEPID=$!
. "$ROOT/tests/k8s/e2e/netpol.sh"
t_apply=$(now)
K -n "$NS" apply -f "$JOB_FILE" || fail "kubectl apply -f examples/e2e.yaml"
# per learner: the uid of its pod, when it was seen deleted, whether it
# came back (new uid Ready and connected in the syncer's /status)
# joins_alive: the syncer's count of this learner's joins at the last look
# that saw its old pod alive. A replacement can join between two looks
# (a look takes seconds under load), so the count taken when the deletion
# is first seen may already hold the new join.
declare -A uid gone_at joins_at joins_alive
LOGF=$WORK/syncer-$JOB.log EPID=""
joins_of() { grep -c "learner $1 joined" "$LOGF" 2>/dev/null; }
# the syncer said the job is done (its log is json: the message alone is
# matched): pods deleted from then on are the end's cleanup, not kills
# (the operator deletes them before it writes the phase,
# docs/k8s-testing.md)
ended() { grep -q "job done: round" "$LOGF" 2>/dev/null; }
kills_seen=0 rejoined=0 rejoin_sum=0 rejoin_max=0 t_first="" t_printed=0 pods_printed=""
# all_ready_at: the kills seen when all four learners were last seen Ready
# together (none terminating, none waiting to rejoin)
all_ready_at=-1

end=$(($(date +%s) + DEADLINE))
while :; do
	phase=$(jp ddjob/$JOB '{.status.phase}')
	[ "$phase" = Succeeded ] || [ "$phase" = Failed ] && break
	[ "$(date +%s)" -lt "$end" ] || { bad "job $JOB did not finish within $DEADLINE s"; break; }
	st=$(status_json $JOB || true)
	# the syncer's log from its start: joins, leaves, down gaps
	if [ -z "$EPID" ] && [ -n "$st" ]; then
		K -n "$NS" logs -f $JOB-syncer-0 >"$LOGF" 2>&1 &
		EPID=$!
	fi
	# the job's end: the operator deletes the learner pods, no kill
	[ -n "$st" ] && [ "$(echo "$st" | py 'import json,sys; print(json.load(sys.stdin)["done"])' 2>/dev/null)" = False ] ||
		{ print_ddjobs; sleep 1; continue; }
	if [ -n "$st" ]; then
		echo "$st" >"$WORK/status-$JOB.json"
		merged=$(sj "$WORK/status-$JOB.json" 's["answers"]["merged"]' || echo 0)
		if [ -z "$t_first" ] && [ "${merged:-0}" -gt 0 ]; then
			t_first=$(elapsed "$t_apply")
			say "first merged round $t_first s after kubectl apply"
		fi
	fi
	# learners: kills and returns
	ready_now=0
	while read -r name u del ready; do
		[ -n "$name" ] || continue
		i=${name##*-}
		if [ -n "${uid[$i]:-}" ] && [ -z "${gone_at[$i]:-}" ] &&
			{ [ "${uid[$i]}" != "$u" ] || [ "$del" != d= ]; } && ! ended; then
			gone_at[$i]=$(now)   # terminating, or replaced between two looks
			joins_at[$i]=${joins_alive[$i]:-0}
			kills_seen=$((kills_seen + 1))
		fi
		if [ -n "${gone_at[$i]:-}" ] && [ "${uid[$i]}" != "$u" ] && [ "$del" = d= ] &&
			[ "$ready" = True ]; then
			# rejoined: the syncer logged a join of this learner since
			if [ "$(joins_of $i)" -gt "${joins_at[$i]:-0}" ]; then
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
			joins_alive[$i]=$(joins_of $i)
		fi
		[ -z "${gone_at[$i]:-}" ] && [ "$del" = d= ] && [ "$ready" = True ] &&
			ready_now=$((ready_now + 1))
	done < <(K -n "$NS" get pods -l ddiloco.io/job=$JOB,ddiloco.io/role=learner -o \
		jsonpath='{range .items[*]}{.metadata.name} {.metadata.uid} d={.metadata.deletionTimestamp} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null)
	[ "$ready_now" -eq 4 ] && ! ended && all_ready_at=$kills_seen
	# a learner pod missing altogether
	for i in 0 1 2 3; do
		if [ -n "${uid[$i]:-}" ] && [ -z "${gone_at[$i]:-}" ] && ! ended &&
			! K -n "$NS" get pod $JOB-learner-$i >/dev/null 2>&1; then
			gone_at[$i]=$(now)
			joins_at[$i]=${joins_alive[$i]:-0}
			kills_seen=$((kills_seen + 1))
			uid[$i]=gone
		fi
	done
	# the NetworkPolicy probes, once rounds are merged
	[ -z "$np_done" ] && [ -n "$t_first" ] && netpol_step $JOB
	print_ddjobs
	if [ -z "$pods_printed" ] && [ "$phase" = Running ] && [ -n "$t_first" ]; then
		pods_printed=1
		echo "--- kubectl get pods -o wide"
		K -n "$NS" get pods -o wide
	fi
	sleep 1
done
t_job=$(elapsed "$t_apply") t_end=$(now)
[ -n "$EPID" ] && { kill "$EPID" 2>/dev/null; wait "$EPID" 2>/dev/null; }
kill "$SCRAPEPID" 2>/dev/null
SCRAPEPID=""
netpol_finish $JOB
# the dashboard, every panel drawn from the run (E2E_DASHBOARD=FILE keeps
# the picture: docs/dashboard.svg is one)
check "the jobs' dashboard drawn from $(grep -c '^# at ' "$WORK/scrapes.txt") scrapes of the operator's /metrics" \
	'/usr/bin/python3 "$ROOT/tests/k8s/dashrender.py" "$ROOT/charts/ddiloco/dashboards/ddiloco-jobs.json" \
		"$WORK/scrapes.txt" "$NS" "$JOB" "$WORK/dashboard.svg" >"$WORK/dashrender.out" 2>&1'
cat "$WORK/dashrender.out"
[ -n "${E2E_DASHBOARD:-}" ] && cp "$WORK/dashboard.svg" "$E2E_DASHBOARD"
echo "--- load after job $JOB: $(uptime)"
echo "--- the syncer's log of job $JOB: joins, leaves, down gaps, the end"
grep -E "joined|left|round gap|budget reached|job done" "$LOGF" | tail -60
echo "--- kubectl get ddjobs (end, $t_job s)"
K -n "$NS" get ddjobs
echo "--- kubectl describe ddjob $JOB"
K -n "$NS" describe ddjob $JOB

phase=$(jp ddjob/$JOB '{.status.phase}')
check "job $JOB: phase Succeeded (is $phase, $t_job s)" '[ "$phase" = Succeeded ]'
# mutual TLS on the job's own CA: the operator's Secret, the syncer's word
tls_keys=$(K -n "$NS" get secret $JOB-tls -o jsonpath='{.data}' 2>/dev/null |
	py 'import json, sys; print(" ".join(sorted(json.load(sys.stdin))))')
say "secret $JOB-tls: ${tls_keys:-none}"
check "job $JOB: its certificates in Secret $JOB-tls (CA, syncer, 4 learners)" \
	'[ "$tls_keys" = "ca.crt learner-0.crt learner-0.key learner-1.crt learner-1.key learner-2.crt learner-2.key learner-3.crt learner-3.key syncer.crt syncer.key" ]'
insecure=$(sj "$WORK/status-$JOB.json" 's["insecure"]')
check "job $JOB: the syncer served mutual TLS (/status insecure ${insecure:-?})" '[ "$insecure" = False ]'
kills=$(jp ddjob/$JOB '{.status.chaos.kills}')
nev=$(K -n "$NS" get events --field-selector involvedObject.name=$JOB,reason=ChaosKill -o name | wc -l)
say "chaos kills: status $kills, events $nev, seen here $kills_seen, rejoined $rejoined"
check "at least 3 chaos kills (status.chaos.kills $kills)" '[ "${kills:-0}" -ge 3 ]'
# the kills stop half way (stopAfterSeconds): each has the time to come
# back, but for one the job's end overtook (less than LATE_KILL_S before it)
LATE_KILL_S=15 late=0
for i in 0 1 2 3; do
	[ -n "${gone_at[$i]:-}" ] && awk -v g="${gone_at[$i]}" -v t="$t_end" -v l="$LATE_KILL_S" \
		'BEGIN { exit !(t - g < l) }' && late=$((late + 1))
done
check "every kill rejoined ($rejoined of $kills_seen; $late within ${LATE_KILL_S} s of the end)" \
	'[ "$rejoined" -ge 3 ] && [ "$((rejoined + late))" -eq "$kills_seen" ] && [ "$late" -le 1 ]'
check "all 4 learners Ready together after the last kill (seen after kill $all_ready_at of $kills_seen)" \
	'[ "$late" -eq 1 ] || [ "$all_ready_at" -eq "$kills_seen" ]'
uptime=$(jp ddjob/$JOB '{.status.progress.uptime}')
check "NetworkPolicy in force: probe-out refused on the syncer's gRPC and HTTP ports, probe-in admitted on gRPC only (gRPC in ${np_in_grpc:-?} out ${np_out_grpc:-?}, HTTP in ${np_in_http:-?} out ${np_out_http:-?}; the engine's packets: ${np_verdicts:-?})" \
	'[ "$np_in_grpc" = open ] && [ "$np_out_grpc" = refused ] && [ "$np_in_http" = refused ] &&
	 [ "$np_out_http" = refused ] && echo "$np_verdicts" | grep -q "drop=[1-9]"'
check "uptime >= 0.99 ($uptime)" "awk -v u='${uptime:-0}' 'BEGIN { exit !(u >= 0.99) }'"
# the gap log of the syncer's last /status (docs/syncer.md): every gap
# uptime counted as down, and the longest gap while a learner was away
SF=$WORK/status-$JOB.json
echo "--- the syncer's down gaps (last /status, elapsed $(sj "$SF" 's["elapsed"]') s, uptime $(sj "$SF" 's["uptime"]'))"
sj "$SF" '"\n".join("at %.2f s: %.2f s (%.2f s down) until round %d, pulled %.2f s in, quorum %s; joined %d at start, %d at fewest, %d left, %d joined" % (g["at"], g["length"], g["down"], g["round"], g["pulled"], "none" if g["quorum"] is None else "%.2f s in" % g["quorum"], g["joined_start"], g["joined_min"], g["left"], g["joined"]) for g in s["gaps"]["last"]) or "none"'
say "down gaps: $(sj "$SF" 's["gaps"]["count"]') ($(sj "$SF" '"%.2f" % s["gaps"]["down"]') s), gaps object: $(sj "$SF" 'json.dumps({k: v for k, v in s["gaps"].items() if k != "last"})')"
say "pace: $(sj "$SF" 'json.dumps(s.get("pace"))'), answers: $(sj "$SF" 'json.dumps(s.get("answers"))'); learner time: $(sj "$SF" 'json.dumps(s.get("goodput_breakdown"))')"
absent=$(sj "$SF" '"%.3f" % s["gaps"]["longest_absent"]')
xi=$(sj "$SF" '"%.4f" % s["step_time"]')
# B = max(1 s, 3 cadences) (core.c), a grace window at most ξ_step, a
# cadence ξ_step · H/P with H = P here
gap_bound=$(awk -v x="${xi:-0}" 'BEGIN { b = 3 * x; if (b < 1) b = 1; printf "%.3f", b + 2 * x }')
check "rounds never stopped longer than B + grace + cadence while a learner was gone (longest ${absent:-?} s, bound $gap_bound s)" \
	"awk -v a='${absent:-99}' -v b='$gap_bound' 'BEGIN { exit !(a <= b) }'"
loss=$(jp ddjob/$JOB '{.status.progress.loss}')

# --- 4. job e2e-restart: the syncer pod deleted once ------------------------
quiet_job() {   # quiet_job NAME TOKENS: examples/e2e.yaml renamed, chaos off
	python3 - "$JOB_FILE" "$1" "$2" <<'PYEOF'
import sys, yaml
j = yaml.safe_load(open(sys.argv[1]))
j["metadata"]["name"] = sys.argv[2]
j["spec"]["chaos"]["enabled"] = False
j["spec"]["budget"]["tokens"] = int(sys.argv[3])
yaml.safe_dump(j, sys.stdout, sort_keys=False)
PYEOF
}
quiet_job $RJOB $RBUDGET >"$WORK/$RJOB.yaml" || fail "the restart job's file"
. "$ROOT/tests/k8s/e2e/faults.sh"
echo "--- load before job $RJOB: $(uptime)"
t_apply=$(now) t_printed=0
K -n "$NS" apply -f "$WORK/$RJOB.yaml" || fail "kubectl apply $RJOB"
syncer_deleted="" restarted="" back_s="" quorum_s="" round_before=-1 vers_before="" started_before=-1
syncer_uid="" restart_ok="" resume_round="" syncer_log_shown=""
end=$(($(date +%s) + DEADLINE))
while :; do
	phase=$(jp ddjob/$RJOB '{.status.phase}')
	[ "$phase" = Succeeded ] || [ "$phase" = Failed ] && break
	[ "$(date +%s)" -lt "$end" ] || { bad "job $RJOB did not finish within $DEADLINE s"; break; }
	# the pod's uid before its /status: a new uid means the answer came
	# from the new pod
	cur_uid=$(jp pod/$RJOB-syncer-0 '{.metadata.uid}')
	st=$(status_json $RJOB || true)
	[ -n "$st" ] && echo "$st" >"$WORK/status-$RJOB.json"
	SF=$WORK/status-$RJOB.json
	if [ -z "$syncer_deleted" ] && [ -n "$st" ] &&
		[ "$(sj "$SF" 'int(s["tokens"] >= '$RBUDGET' / 4)')" = 1 ]; then
		round_before=$(sj "$SF" 's["round"]')
		started_before=$(sj "$SF" 's["rounds_started"]')
		vers_before=$(sj "$SF" '" ".join(map(str, s["versions"]))')
		syncer_uid=$(jp pod/$RJOB-syncer-0 '{.metadata.uid}')
		# its log to the end: the last round and versions it gave out
		K -n "$NS" logs -f $RJOB-syncer-0 >"$WORK/syncer-old.log" 2>&1 &
		LOGPID=$!
		sleep 0.2
		say "deleting the syncer pod at round $round_before, round number $started_before (versions $vers_before)"
		K -n "$NS" delete pod $RJOB-syncer-0 --wait=false >/dev/null
		syncer_deleted=$(now)
		# what the new pod went through, printed if a check fails
		for _ in $(seq 12); do
			echo "--- $(date +%T)"
			K -n "$NS" get pods -o wide
			K -n "$NS" describe pod $RJOB-syncer-0 | sed -n '/^Status:/p;/^Node:/p;/^Conditions:/,/^Volumes:/p;/^Events:/,$p'
			K -n "$NS" logs $RJOB-syncer-0 --tail=8
			sleep 5
		done >"$WORK/restart-pods.log" 2>&1 &
		SAMPLEPID=$!
	elif [ -n "$syncer_deleted" ] && [ -z "$restarted" ] && [ -n "$st" ] &&
		[ -n "$cur_uid" ] && [ "$cur_uid" != "$syncer_uid" ]; then
		restarted=1
		back_s=$(elapsed "$syncer_deleted")
		restart_ok=$(ROUND=$round_before VERS="$vers_before" sj "$SF" '"yes" if s["round"] >= int(os.environ["ROUND"]) - 10 and all(v > w for v, w in zip(s["versions"], map(int, os.environ["VERS"].split()))) else "no: round %d (before %s), versions %s (before %s)" % (s["round"], os.environ["ROUND"], s["versions"], os.environ["VERS"])')
		say "syncer back $back_s s after its deletion: round $(sj "$SF" 's["round"]'), versions $(sj "$SF" 's["versions"]'): $restart_ok"
		resume_round=$(sj "$SF" 's["round"]')
		# the new syncer's log from now on: the job may end, and the
		# operator delete the syncer, before a look below keeps it
		K -n "$NS" logs -f $RJOB-syncer-0 >"$WORK/syncer-new.log" 2>&1 &
		NEWLOGPID=$!
	fi
	if [ -n "$restarted" ] && [ -z "$quorum_s" ] && [ -n "$st" ] &&
		[ "$(sj "$SF" 'int(s["learners_connected"] >= 3 and s["round"] > '"$resume_round"')')" = 1 ]; then
		quorum_s=$(elapsed "$syncer_deleted")
		say "quorum back and a round merged $quorum_s s after the syncer's deletion"
	fi
	# then learner 1's crash and learner 2's OOM kill (faults.sh)
	[ -n "$quorum_s" ] && [ "$phase" = Running ] && fault_step $RJOB "$WORK/syncer-new.log"
	if [ -n "$quorum_s" ] && [ -z "$syncer_log_shown" ]; then
		syncer_log_shown=1
		echo "--- the restarted syncer's log, joins and leaves"
		grep -E "resumed from|rounds resume|joined|left|gRPC on|round gap" \
			"$WORK/syncer-new.log" | head -20
	fi
	print_ddjobs
	sleep 1
done
t_rjob=$(elapsed "$t_apply")
echo "--- load after job $RJOB: $(uptime)"
echo "--- the Events of job $RJOB"
K -n "$NS" get events --field-selector "involvedObject.name=$RJOB" \
	-o jsonpath='{range .items[*]}{.reason}: {.message}{"\n"}{end}' 2>/dev/null | tail -n 20
[ -n "${LOGPID:-}" ] && { kill "$LOGPID" 2>/dev/null; wait "$LOGPID" 2>/dev/null; LOGPID=""; }
[ -n "${NEWLOGPID:-}" ] && { kill "$NEWLOGPID" 2>/dev/null; wait "$NEWLOGPID" 2>/dev/null; NEWLOGPID=""; }
K -n "$NS" get ddjobs
phase=$(jp ddjob/$RJOB '{.status.phase}')
check "job $RJOB: phase Succeeded (is $phase, $t_rjob s)" '[ "$phase" = Succeeded ]'
check "syncer deleted once and back: /status rounds completed at least the old count minus checkpointEvery, every version past the old ones: ${restart_ok:-never back}" \
	'[ "$restart_ok" = yes ]'
stopped=$(grep -m1 "stopped: the last round given out" "$WORK/syncer-old.log" 2>/dev/null)
resumed=$(grep -m1 "resumed from" "$WORK/syncer-new.log" 2>/dev/null)
resumes=$(grep -m1 "rounds resume at" "$WORK/syncer-new.log" 2>/dev/null)
echo "--- old syncer: ${stopped:-no 'stopped' line}"
echo "--- new syncer: ${resumed:-no 'resumed from' line}"
echo "--- new syncer: ${resumes:-no 'rounds resume' line}"
check "syncer recovered from its checkpoint" '[ -n "$resumed" ]'
# "... at round number N, fragment versions v0 v1 ...": the new syncer's
# first round number and its versions past the last the old one gave out
reuse=$(OLD="$stopped" NEW="$resumes" py '
import os, re
def parse(l):
    m = re.search(r"round number (\d+), fragment versions ([\d ]+)", l)
    return (int(m.group(1)), list(map(int, m.group(2).split()))) if m else None
o, n = parse(os.environ["OLD"]), parse(os.environ["NEW"])
if not o or not n:
    print("no: a line is missing")
elif n[0] > o[0] and len(n[1]) == len(o[1]) and all(b > a for a, b in zip(o[1], n[1])):
    print("yes: round %d after %d, versions %s after %s" % (n[0], o[0], n[1], o[1]))
else:
    print("no: round %d after %d, versions %s after %s" % (n[0], o[0], n[1], o[1]))')
check "no round number or version reused after the restart ($reuse)" '[ "${reuse%%:*}" = yes ]'
check "quorum back and a round merged within $RESTART_BOUND s of the syncer's deletion (${quorum_s:-never} s)" \
	"awk -v q='${quorum_s:-999}' -v b='$RESTART_BOUND' 'BEGIN { exit !(q <= b) }'"
# the crash and the OOM kill: each pod Failed, counted as its learner's
# failure (LearnerFailed with the container's reason), recreated, back
fails=$(K -n "$NS" get events --field-selector involvedObject.name=$RJOB,reason=LearnerFailed \
	-o jsonpath='{range .items[*]}{.message}{"\n"}{end}' 2>/dev/null)
echo "--- LearnerFailed Events of job $RJOB"
echo "${fails:-none}"
check "learner 1's process killed (a crash): exit code 137, Error, and back (${crash_back:-never} s after)" \
	'[ -n "$crash_back" ] && echo "$fails" | grep -q "^learner 1 failed (exit code 137, Error)"'
check "learner 2 killed for its memory: exit code 137, OOMKilled, and back (${oom_back:-never} s after)" \
	'[ -n "$oom_back" ] && echo "$fails" | grep -q "^learner 2 failed (exit code 137, OOMKilled)"'

# --- 5. the loss of job e2e against data parallel ----------------------------
# the baseline tuned over the job's lr × 1/√2, 1, √2 (the best is kept),
# and the check one-sided: ending below it is no failure
say "job $JOB's final eval loss $loss; the data-parallel baseline on the host:"
t0=$(now)
lr0=$(awk '/^    lr:/ { print $2; exit }' "$JOB_FILE")
base=
# A baseline run is a function of its inputs: the trainer's and common
# code, the Makefile's flags, the job file, the data and the lr. Its log
# is kept under their hash and used again while they are the same (the
# three runs are minutes of this test: docs/figures.md, The end-to-end
# test).
BCACHE=${XDG_CACHE_HOME:-$HOME/.cache}/ddiloco-baseline
mkdir -p "$BCACHE"
# (the data, spec.data.path, is a folder: its files in name order)
bsrc=$(cat "$ROOT"/trainer/*.[ch] "$ROOT"/common/*.[ch] "$ROOT/Makefile" "$JOB_FILE" \
	$(find /usr/share/games/fortunes -type f | sort) | sha256sum | cut -c1-16)
for lr in $(awk -v l="$lr0" 'BEGIN { s = sqrt(2); printf "%g %g %g", l / s, l, l * s }'); do
	kept=$BCACHE/$bsrc-$lr.log from=""
	if [ -s "$kept" ] && grep -q '^final eval_loss=' "$kept"; then
		cp "$kept" "$WORK/baseline-$lr.log"
		from=" (kept from an earlier run of the same inputs, $bsrc)"
	else
		"$BIN_DD" train "$JOB_FILE" --batch-mult 4 --threads 2 --lr "$lr" \
			>"$WORK/baseline-$lr.log" 2>&1 &&
			cp "$WORK/baseline-$lr.log" "$kept.tmp" && mv "$kept.tmp" "$kept"
	fi
	b=$(sed -n 's/^final eval_loss=\([0-9.]*\).*/\1/p' "$WORK/baseline-$lr.log" | tail -1)
	say "baseline lr $lr: eval loss ${b:-?}$from"
	if [ -n "$b" ] && { [ -z "$base" ] || awk -v b="$b" -v m="$base" 'BEGIN { exit !(b < m) }'; }; then
		base=$b
	fi
done
say "baseline eval loss ${base:-?}, the best of three ($(elapsed "$t0") s)"
ratio=$(awk -v a="${loss:-0}" -v b="${base:-0}" 'BEGIN { if (b > 0) printf "%.4f", a / b; else print "nan" }')
check "final eval loss at most 1.05 times the tuned baseline's (ratio $ratio)" \
	"awk -v r='$ratio' 'BEGIN { exit !(r != \"nan\" && r <= 1.05) }'"

fi   # E2E_ONLY

# --- 6. job e2e-pytorch: PyTorch learners from the image ddiloco-pytorch --
. "$ROOT/tests/k8s/e2e/pytorch.sh"

# --- 6b. jobs e2e-queued and e2e-urgent through Kueue: a preemption ------
if [ "${E2E_ONLY:-}" != pytorch ]; then
	. "$ROOT/tests/k8s/e2e/queue.sh"
fi

# nothing changed the pods the operator makes: none of its passes found
# a learner pod or the syncer's template outdated (docs/operator.md,
# Rolling learners)
nroll=$(K -n "$NS" get events --field-selector reason=LearnerRolled -o name | wc -l)
nsroll=$(K -n "$NS" get events --field-selector reason=SyncerRolled -o name | wc -l)
check "nothing rolled (LearnerRolled Events: $nroll, SyncerRolled: $nsroll)" \
	'[ "$nroll" -eq 0 ] && [ "$nsroll" -eq 0 ]'

# --- 6c. job e2e-up: a helm upgrade under it (tests/k8s/e2e/upgrade.sh) --
if [ "${E2E_ONLY:-}" != pytorch ]; then
	. "$ROOT/tests/k8s/e2e/upgrade.sh"
fi

# --- 7. deletion and uninstall leave nothing ------------------------------
K -n "$NS" delete ddjob $JOB $RJOB $PJOB --wait=true --timeout=120s >/dev/null
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
	"rejoin_mean_s=$rejoin_mean rejoin_max_s=$rejoin_max longest_absent_s=${absent:-?}" \
	"restart_back_s=${back_s:-none} restart_quorum_s=${quorum_s:-none} restart_job_s=$t_rjob" \
	"pytorch_import_s=$t_ptimport pytorch_ready_s=${pt_ready:-none} pytorch_first_merge_s=${pt_first:-none}" \
	"pytorch_job_s=$pt_job upgrade_roll_s=${t_rolled:-none}" \
	"total_s=$(elapsed "$t_ci") load=\"$(uptime | sed 's/.*average: //')\""
finish
