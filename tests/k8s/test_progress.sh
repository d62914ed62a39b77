#!/usr/bin/env bash
# Progress in the job's status comes from a real syncer's /status.
# The pods on kwok's fake nodes run nothing, so the job's syncer, learner
# and sidecar run here as processes, from the job.json of the job's own
# ConfigMap (what the pods would mount); the operator is pointed at that
# syncer with --status-url. Checked: status.progress (round, tokens, loss,
# goodput, updateTime) moves with the training and `kubectl get ddjobs`
# shows it; over a 45 s watch of the job, its status is written at most
# once per 15 s (APPLY_STATUS_PROGRESS_EVERY) and at least twice.
# Needs the variables of /tmp/ddiloco-k8s/env (tests/k8s/run.sh sets them).
set -euo pipefail

: "${KUBECTL:?run through make test-k8s}" "${KUBECONFIG:?}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) BIN=$BUILD/ddiloco ;; *) BIN=$ROOT/$BUILD/ddiloco ;; esac
NS=progress-$$-$RANDOM
WORK=$(mktemp -d /tmp/test_progress.XXXXXX)
PIDS=()

fail() {
	echo "test_progress: FAIL: $*" >&2
	KN get ddjobs -o wide >&2 2>/dev/null || true
	for f in "$WORK"/*.log; do
		[ -e "$f" ] && { echo "--- $f" >&2; tail -15 "$f" >&2; }
	done
	exit 1
}
cleanup() {
	local rc=$?
	set +e
	stop_pids
	"$KUBECTL" delete namespace "$NS" --wait=false >/dev/null 2>&1
	rm -rf "$WORK"
	exit "$rc"
}
. "$ROOT/tests/k8s/lib.sh"
trap cleanup EXIT

[ -x "$BIN" ] || fail "no $BIN (make first)"
[ -r /usr/share/games/fortunes ] || fail "no /usr/share/games/fortunes (make deps)"
apply_crd
"$KUBECTL" create namespace "$NS" >/dev/null

GRPC=$(free_port)
HTTP=$(free_port)
OPH=$(free_port)
"$BIN" operator --kubeconfig "$KUBECONFIG" --namespace "$NS" --http "127.0.0.1:$OPH" --no-chaos \
	--status-url "http://127.0.0.1:$HTTP/status" >"$WORK/operator.log" 2>&1 &
PIDS+=($!)
KN apply -f - >/dev/null <<EOF
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: live}
spec:
  learners: {replicas: 1}
  model: {channels: 64}
  data: {path: /usr/share/games/fortunes}
  optimizer: {warmupSteps: 5}
  syncer: {fragments: 2, evalEvery: 5, evalTokens: 2048, checkpointEvery: 5, storage: "", insecure: true}
  budget: {tokens: 50000000}
EOF
until_ok 90 "job Running" '[ "$(jp ddjob/live "{.status.phase}")" = Running ]'
[ -z "$(jp ddjob/live '{.status.progress.round}')" ] || fail "progress before any syncer ran"

# the job's own spec, as its pods mount it, run here
KN get configmap live-spec -o 'jsonpath={.data.job\.json}' >"$WORK/job.json"
"$BIN" syncer --job "$WORK/job.json" --listen "127.0.0.1:$GRPC" --http "127.0.0.1:$HTTP" \
	--checkpoint-dir "$WORK/ckpt" >"$WORK/syncer.log" 2>&1 &
PIDS+=($!)
mkdir -p "$WORK/ex"
"$BIN" sidecar --job "$WORK/job.json" --learner 0 --exchange "$WORK/ex" \
	--syncer "127.0.0.1:$GRPC" >"$WORK/sidecar.log" 2>&1 &
PIDS+=($!)
"$BIN" learner --job "$WORK/job.json" --learner 0 --exchange "$WORK/ex" >"$WORK/learner.log" 2>&1 &
PIDS+=($!)

until_ok 60 "progress in status" '[ "$(jp ddjob/live "{.status.progress.round}")" -ge 5 ]'
r1=$(jp ddjob/live '{.status.progress.round}')
u1=$(jp ddjob/live '{.status.progress.updateTime}')
case $u1 in 20[0-9][0-9]-[01][0-9]-[0-3][0-9]T*Z) ;; *) fail "progress.updateTime '$u1' is no RFC 3339 time" ;; esac
# (tokens come with heartbeats, one a second: the first rounds, pulled as
# soon as the learner is joined, can all pass before the first)
until_ok 60 "tokens in status.progress" '[ "$(jp ddjob/live "{.status.progress.tokens}")" -gt 0 ]'
until_ok 60 "a loss in status" '[ -n "$(jp ddjob/live "{.status.progress.loss}")" ]'
until_ok 60 "progress moves" '[ "$(jp ddjob/live "{.status.progress.round}")" -gt "$r1" ]'
g=$(jp ddjob/live '{.status.progress.goodput}')
awk -v g="$g" 'BEGIN { exit !(g > 0 && g <= 1) }' || fail "goodput $g is not in (0, 1]"
# the same numbers as the syncer's own /status, at most one read behind
s=$(curl -sf "http://127.0.0.1:$HTTP/status") || fail "syncer /status"
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); sys.exit(0 if d["round"] >= int(sys.argv[2]) else 1)' \
	"$s" "$(jp ddjob/live '{.status.progress.round}')" || fail "status.progress is ahead of the syncer"
KN get ddjobs >"$WORK/get.txt"
awk '$1 == "live" && $2 == "Running" && $3 == "1/1" && $4 > 0 && $5 > 0 && $6 > 0 { ok = 1 } END { exit !ok }' \
	"$WORK/get.txt" || { cat "$WORK/get.txt" >&2; fail "kubectl get ddjobs does not show the progress"; }

# The job's figures in the operator's /metrics (docs/operator.md, Metrics
# and health), from its status, and the dashboard's queries answered
until_ok 60 "bytes and a checkpoint in status.progress" \
	'[ -n "$(jp ddjob/live "{.status.progress.lastCheckpointTime}")" ] && [ "$(jp ddjob/live "{.status.progress.bytesOut}")" -gt 0 ]'
curl -sf "http://127.0.0.1:$OPH/metrics" >"$WORK/metrics.txt" || fail "GET the operator's /metrics"
python3 "$ROOT/tests/k8s/promcheck.py" "$WORK/metrics.txt" ddiloco_job_phase \
	ddiloco_job_learners ddiloco_job_learners_ready ddiloco_job_rounds ddiloco_job_tokens \
	ddiloco_job_uptime_ratio ddiloco_job_goodput_ratio ddiloco_job_loss \
	ddiloco_job_syncer_bytes ddiloco_job_last_checkpoint_age_seconds >"$WORK/promcheck.txt" 2>&1 ||
	{ cat "$WORK/promcheck.txt" >&2; fail "the exposition format"; }
L="namespace=\"$NS\",job=\"live\""
val() { awk -v s="$1{$L${2:-}}" '$1 == s { print $2 }' "$WORK/metrics.txt"; }
[ "$(val ddiloco_job_phase ',phase="Running"')" = 1 ] || fail "ddiloco_job_phase Running is '$(val ddiloco_job_phase ',phase="Running"')'"
[ "$(val ddiloco_job_phase ',phase="Pending"')" = 0 ] || fail "ddiloco_job_phase Pending is not 0"
[ "$(val ddiloco_job_learners_ready)" = 1 ] && [ "$(val ddiloco_job_learners)" = 1 ] ||
	fail "learners ready $(val ddiloco_job_learners_ready) of $(val ddiloco_job_learners)"
sr=$(curl -sf "http://127.0.0.1:$HTTP/status" | jq -r .round)
awk -v r="$(val ddiloco_job_rounds)" -v s="$sr" 'BEGIN { exit !(r >= 5 && r <= s) }' ||
	fail "ddiloco_job_rounds $(val ddiloco_job_rounds), the syncer at $sr"
awk -v b="$(val ddiloco_job_syncer_bytes ',direction="in"')" -v c="$(val ddiloco_job_syncer_bytes ',direction="out"')" \
	'BEGIN { exit !(b > 0 && c > 0) }' || fail "ddiloco_job_syncer_bytes not counted"
awk -v a="$(val ddiloco_job_last_checkpoint_age_seconds)" 'BEGIN { exit !(a != "" && a >= 0 && a < 120) }' ||
	fail "ddiloco_job_last_checkpoint_age_seconds '$(val ddiloco_job_last_checkpoint_age_seconds)'"
python3 "$ROOT/tests/k8s/dashcheck.py" "$ROOT/charts/ddiloco/dashboards/ddiloco-jobs.json" \
	"$WORK/metrics.txt" "$NS" live || fail "the dashboard's queries"
echo "ok: the job in the operator's /metrics: rounds $(val ddiloco_job_rounds), loss $(val ddiloco_job_loss), bytes out $(val ddiloco_job_syncer_bytes ',direction="out"'), last checkpoint $(val ddiloco_job_last_checkpoint_age_seconds) s ago"

# Throttled status writes (docs/operator.md, Status): while the job runs
# and only its progress moves (read every 5 s), every change of the
# object in a 45 s watch is a status write; progress alone is written
# at most once per APPLY_STATUS_PROGRESS_EVERY (15 s): at most 45/15 + 1 = 4
# writes (one per read of /status without it), each updateTime at least 15 s after
# the one before; and at least 2 (progress is not frozen: /status is read
# every 5 s, so a write comes 15 to 20 s after the one before, 21 s seen
# with the reads' own time: two fall within 45 s).
WINDOW=45 EVERY=15
timeout "$WINDOW" "$KUBECTL" -n "$NS" get ddjob live --watch --output-watch-events \
	-o 'jsonpath={.type}|{.object.metadata.resourceVersion}|{.object.status.progress.updateTime}|{.object.status.phase}|{.object.status.learnersReady}|{.object.status.progress.round}{"\n"}' \
	>"$WORK/watch.txt" 2>"$WORK/watch.err" || [ $? = 124 ] || fail "kubectl watch: $(cat "$WORK/watch.err")"
writes=$(grep -c '^MODIFIED|' "$WORK/watch.txt" || true)
[ "$writes" -le $((WINDOW / EVERY + 1)) ] ||
	{ cat "$WORK/watch.txt" >&2; fail "$writes status writes in $WINDOW s: more than $((WINDOW / EVERY + 1)) (one per $EVERY s)"; }
[ "$writes" -ge 2 ] || { cat "$WORK/watch.txt" >&2; fail "$writes status writes in $WINDOW s: progress frozen"; }
# every line steady (Running, 1/1: so each write was progress only) and
# each updateTime at least EVERY s after the one before
python3 - "$WORK/watch.txt" "$EVERY" >"$WORK/gaps.txt" <<'PY' ||
import sys, datetime
every, prev, bad = int(sys.argv[2]), None, 0
for line in open(sys.argv[1]):
    kind, rv, upd, phase, ready, rnd = line.rstrip("\n").split("|")
    if phase != "Running" or ready != "1/1":
        print("not steady:", line.strip()); bad = 1
    if not upd:
        continue
    t = datetime.datetime.strptime(upd, "%Y-%m-%dT%H:%M:%SZ").timestamp()
    if prev is not None and t - prev < every:
        print("updateTime %s only %.0f s after the one before" % (upd, t - prev)); bad = 1
    prev = t
sys.exit(bad)
PY
	{ cat "$WORK/watch.txt" "$WORK/gaps.txt" >&2; fail "status written faster than once per $EVERY s"; }
echo "ok: $writes status writes in $WINDOW s (at most $((WINDOW / EVERY + 1))), updateTimes at least $EVERY s apart: $(cut -d'|' -f1,3,6 "$WORK/watch.txt" | tr '\n' ' ')"
echo "test_progress: ok"
