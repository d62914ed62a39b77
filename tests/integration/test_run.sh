#!/bin/sh
# `ddiloco run` with the real parts: a small job with a learner killed every
# few seconds runs to done, kills and restarts show in the report, nothing
# is left behind; run again into a folder with checkpoints it says it
# resumes and does; Ctrl-C stops everything with exit 130; a bad job file is
# refused with its field path. (The quickstart acceptance, longer, is
# tests/acceptance/quickstart.sh.)
set -eu
BIN=${BUILD:-build}/ddiloco
dir=$(mktemp -d /tmp/ddiloco-run-XXXXXX)
name="itest-$$"
pid=""
cleanup() {
	[ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
fail() {
	echo "FAIL: $*"
	for f in "$dir"/run*/events.log; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done
	exit 1
}
# live processes whose command line names this job file (zombies have none)
live() { pgrep -c -f "$dir/job.yaml" || true; }
shm_left() { ls -d /dev/shm/ddiloco-"$name"-* /tmp/ddiloco-"$name"-* 2>/dev/null | wc -l; }
. "$(dirname "$0")/report.sh"   # field: report.json

cat > "$dir/job.yaml" <<YAML
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata:
  name: $name
spec:
  learners: {replicas: 2}
  model: {context: 32, layers: 1, heads: 2, channels: 32}
  data: {path: /usr/share/games/fortunes, valFraction: 0.05}
  optimizer: {lr: 0.005, warmupSteps: 5, batchSize: 8}
  syncer: {minQuorum: 1, fragments: 2, evalEvery: 10, evalTokens: 2048, checkpointEvery: 10,
           outerLr: 1.0, outerMomentum: 0.0}
  budget: {tokens: 2000000}
  chaos: {enabled: true, schedule: interval, intervalSeconds: 1, startAfterSeconds: 0.5,
          recoverySeconds: 0.5, maxDown: 1, seed: 5}
YAML

# 1. to done, with kills
rc=0
"$BIN" run "$dir/job.yaml" --run-dir "$dir/run1" --timeout 400 > "$dir/out1" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || { cat "$dir/out1"; fail "run exited $rc"; }
rep="$dir/run1/report.json"
[ -s "$rep" ] && [ -s "$dir/run1/report.html" ] || fail "no report"
[ "$(field success "$rep")" = true ] || fail "success is not true"
[ "$(field outcome "$rep")" = '"done"' ] || fail "outcome $(field outcome "$rep")"
kills=$(sed -n '/"kills": {/,/}/s/^    "total": \([0-9]*\),$/\1/p' "$rep")
[ "${kills:-0}" -ge 1 ] || fail "no kill in the report"
restarts=$(grep -c 'learner-[0-9] restarted' "$dir/run1/events.log" || true)
[ "$restarts" -ge 1 ] || fail "no restart in events.log"
[ "$(grep -c '"restarts": [1-9]' "$rep")" -ge 1 ] || fail "no per-learner restart in the report"
loss=$(field final_eval_loss "$rep")
awk -v l="$loss" 'BEGIN { exit !(l > 0 && l < 4.5) }' || fail "final eval loss '$loss'"
rounds=$(field rounds "$rep")
[ "${rounds:-0}" -ge 10 ] || fail "rounds '$rounds'"
grep -q "^report: $dir/run1/report.json\$" "$dir/out1" || fail "no report path in the last lines"
[ "$(grep -c '<svg' "$dir/run1/report.html")" -eq 3 ] || fail "report.html has not 3 plots"
[ "$(live)" -eq 0 ] || fail "processes left after the run"
[ "$(shm_left)" -eq 0 ] || fail "exchange folders left after the run"

stamp "run to done passed"
# 1b. a last evaluation longer than the learners' way out (a large
# evalTokens; here DDILOCO_TEST_EVAL_SECONDS): it is waited for, and the
# final loss is that of the last round
sed -e 's/tokens: 2000000}/tokens: 300000}/' -e 's/evalEvery: 10,/evalEvery: 100000,/' \
	-e 's/enabled: true,/enabled: false,/' "$dir/job.yaml" > "$dir/slow-eval.yaml"
grep -q 'evalEvery: 100000' "$dir/slow-eval.yaml" || fail "no slow-eval job"
DDILOCO_TEST_EVAL_SECONDS=12 "$BIN" run "$dir/slow-eval.yaml" --run-dir "$dir/run1b" \
	--timeout 300 > "$dir/out1b" 2>&1 || { cat "$dir/out1b"; fail "the slow-eval run failed"; }
rep="$dir/run1b/report.json"
grep -q 'waiting for its last evaluation' "$dir/run1b/events.log" || fail "no wait for the last evaluation"
jq -e '(.eval_history | length) >= 1 and .eval_history[-1].round == .rounds and
	.final_eval_loss == .eval_history[-1].loss' "$rep" > /dev/null ||
	fail "the final loss is not the last round's: $(jq -c '{rounds, final_eval_loss, eval_history}' "$rep")"
stamp "the last evaluation waited for"
# 1c. the same run folder again: it says it resumes from the checkpoints
# there, and the syncer takes the finished job from them (done at once,
# the tokens it had); a first run says nothing of the kind
! grep -q "resumed from its checkpoint" "$dir/out1" || fail "a first run said it resumes"
tok=$(jq -r .tokens "$dir/run1b/report.json")
"$BIN" run "$dir/slow-eval.yaml" --run-dir "$dir/run1b" --timeout 300 > "$dir/out1c" 2>&1 ||
	{ cat "$dir/out1c"; fail "the resumed run failed"; }
grep -q "syncer: resumed from its checkpoint of round [1-9]" "$dir/out1c" ||
	fail "the rerun did not say it resumes: $(head -3 "$dir/out1c")"
grep -q "resumed from '$dir/run1b/checkpoints/" "$dir/run1b/syncer.log" || fail "the syncer did not resume"
jq -e --argjson t "$tok" '.tokens >= $t and .outcome == "done"' "$dir/run1b/report.json" > /dev/null ||
	fail "the resumed run is not the finished one ($tok tokens): $(jq -c '{tokens, outcome}' "$dir/run1b/report.json")"
stamp "a run folder's checkpoints resumed from"
# 2. Ctrl-C while training: everything stops, exit 130
sed -i 's/tokens: 2000000}/tokens: 100000000}/' "$dir/job.yaml"
"$BIN" run "$dir/job.yaml" --run-dir "$dir/run2" --no-chaos > "$dir/out2" 2>&1 &
pid=$!
i=0
# the runner, the syncer and two pairs
until [ "$(live)" -ge 6 ] && grep -q 'pairs started' "$dir/run2/events.log" 2>/dev/null; do
	i=$((i + 1))
	[ "$i" -lt 600 ] || fail "the parts never all ran: $(live) processes"
	sleep 0.1
done
sleep 1
stamp "interrupting"
kill -INT "$pid"
rc=0
wait "$pid" || rc=$?
pid=""
[ "$rc" -eq 130 ] || { cat "$dir/out2"; fail "Ctrl-C: exit $rc, expected 130"; }
[ "$(field outcome "$dir/run2/report.json")" = '"interrupted"' ] || fail "outcome after Ctrl-C"
[ "$(live)" -eq 0 ] || fail "processes left after Ctrl-C"
[ "$(shm_left)" -eq 0 ] || fail "exchange folders left after Ctrl-C"

stamp "Ctrl-C passed"
# 3. a bad job file: exit 2, the field named, nothing started
sed -i 's/layers: 1,/layers: one,/' "$dir/job.yaml"
rc=0
"$BIN" run "$dir/job.yaml" --run-dir "$dir/run3" > "$dir/out3" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "bad job: exit $rc"
grep -q "spec.model.layers: expected an integer, got 'one'" "$dir/out3" || fail "bad job: $(cat "$dir/out3")"
[ ! -e "$dir/run3" ] || fail "bad job: run folder created"
echo ok
