#!/bin/sh
# The bounds on what a learner claims (docs/syncer.md, Bounds) in a real
# run of `ddiloco run` (syncer, sidecars and learners as processes): the
# sidecar of learner 1 reports ten times the tokens its learner trained
# (the test knob DDILOCO_TEST_INFLATE_TOKENS, docs/sidecar.md). The run
# must end with
#   - that learner's answers refused and counted (answers.refused_bounds,
#     about one a round) and its heartbeats too (heartbeats.refused),
#   - the other two learners' answers merged and never refused,
#   - no learner step merged twice (invariants.double_merged_steps 0).
set -eu
BIN=${BUILD:-build}/ddiloco
dir=$(mktemp -d /tmp/ddiloco-bounds-XXXXXX)
cleanup() { rm -rf "$dir"; }
trap cleanup EXIT
fail() {
	echo "FAIL: $*"
	[ -f "$dir/run/syncer.log" ] && { echo "--- syncer.log"; tail -n 30 "$dir/run/syncer.log"; }
	exit 1
}
. "$(dirname "$0")/report.sh"   # field, sub: report.json

cat > "$dir/job.yaml" <<YAML
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata:
  name: bounds-$$
spec:
  learners: {replicas: 3}
  model: {context: 32, layers: 1, heads: 2, channels: 32}
  data: {path: /usr/share/games/fortunes, valFraction: 0.05}
  optimizer: {lr: 0.005, warmupSteps: 5, batchSize: 8}
  syncer: {minQuorum: 2, fragments: 2, overlap: 2, evalEvery: 50,
           evalTokens: 2048, checkpointEvery: 10}
  budget: {tokens: 1500000}
YAML

rc=0
DDILOCO_TEST_INFLATE_TOKENS=1:10 "$BIN" run "$dir/job.yaml" --run-dir "$dir/run" \
	--no-chaos > "$dir/out" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || { tail -n 20 "$dir/out"; fail "run exited $rc"; }
rep="$dir/run/report.json"
log="$dir/run/syncer.log"
[ -s "$rep" ] || fail "no report"
[ "$(field outcome "$rep")" = '"done"' ] || fail "outcome $(field outcome "$rep")"
rounds=$(field rounds "$rep")
merged=$(sub answers merged "$rep")
rejected=$(sub answers rejected "$rep")
refused=$(sub answers refused_bounds "$rep")
capped=$(sub answers capped "$rep")
hb=$(sub heartbeats received "$rep")
hb_refused=$(sub heartbeats refused "$rep")
steps=$(sub invariants merged_steps "$rep")
twice=$(sub invariants double_merged_steps "$rep")
echo "rounds $rounds; answers merged $merged rejected $rejected refused_bounds $refused" \
     "capped $capped; heartbeats $hb refused $hb_refused;" \
     "merged_steps $steps double_merged_steps $twice"
[ -n "$refused" ] && [ -n "$hb_refused" ] && [ -n "$capped" ] || fail "no bounds counters in the report"
[ -n "$twice" ] && [ -n "$steps" ] || fail "no invariants in the report"
[ "$merged" -gt 0 ] || fail "nothing merged"
[ "$steps" -gt 0 ] || fail "no step merged"
[ "$twice" -eq 0 ] || fail "$twice learner steps merged twice"
# learner 1 answers every round: all of them refused
[ $((refused * 2)) -ge "$rounds" ] || fail "$refused answers refused in $rounds rounds"
[ "$rejected" -ge "$refused" ] || fail "refused_bounds $refused is not within rejected $rejected"
[ "$hb_refused" -ge 1 ] || fail "no heartbeat refused"
# who was refused, from the syncer's log (every bounds message names one
# of these); the first refusal of each kind is always logged
bounds="refused: .*(B·T = |the job's pace allows|is outside \\[|is not finite)"
grep -Eq "learner 1: answer for round [0-9]+ fragment [0-9]+ $bounds" "$log" ||
	fail "no answer of learner 1 refused in the log"
grep -Eq "learner 1: heartbeat $bounds" "$log" ||
	fail "no heartbeat of learner 1 refused in the log"
if grep -E "learner [02]: .*$bounds" "$log"; then
	fail "an honest learner was refused"
fi
# nor were its claims cut (docs/syncer.md, What a learner claims)
if grep -E "learner [02]: .* cut: " "$log"; then
	fail "an honest learner's claims were cut"
fi
echo ok
