#!/bin/sh
# `ddiloco run --baseline-lr`: the data-parallel baseline's sweep on a small
# job. Every learning rate runs to its final loss, the lowest is chosen and
# compared, each run's log is in the run folder; a second run with the same
# settings reads every trial from the cache and chooses the same; a bad
# list is refused before anything runs. With spec.data.tuneFraction the
# sweep chooses by the loss on the tuning split, and the loss it reports
# is on the validation split. With --baseline-widen a best rate at the
# sweep's edge is followed by the next rate past it. --baseline-only
# trains the sweep without the job (here, all from the cache), and is
# refused for a job with no token budget.
set -eu
BIN=${BUILD:-build}/ddiloco
dir=$(mktemp -d /tmp/ddiloco-baseline-XXXXXX)
export DDILOCO_CACHE_DIR="$dir/cache"
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

cat > "$dir/job.yaml" <<YAML
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata:
  name: bl-$$
spec:
  learners: {replicas: 2, threads: 1}
  model: {context: 32, layers: 1, heads: 2, channels: 32}
  data: {path: /usr/share/games/fortunes, valFraction: 0.05}
  optimizer: {lr: 0.005, warmupSteps: 5, batchSize: 8}
  syncer: {minQuorum: 1, fragments: 2, evalEvery: 10, evalTokens: 2048}
  budget: {tokens: 300000}
YAML

rc=0
"$BIN" run "$dir/job.yaml" --run-dir "$dir/runs/a" --baseline-lr 0.0005,0.01 \
	--timeout 300 > "$dir/out1" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || { cat "$dir/out1"; fail "run exited $rc"; }
rep="$dir/runs/a/report.json"
[ "$(jq '.baseline.sweep | length' "$rep")" -eq 2 ] || fail "sweep has not 2 runs"
for lr in 0.0005 0.01; do
	grep -q '^final eval_loss=' "$dir/runs/a/baseline-lr$lr.log" || fail "no final loss for lr $lr"
done
# the chosen run is the lowest loss, and it is the baseline's loss
jq -e '.baseline as $b | ($b.sweep | min_by(.final_eval_loss)) as $m |
	$m.chosen and $b.lr == $m.lr and $b.final_eval_loss == $m.final_eval_loss' "$rep" > /dev/null ||
	fail "the chosen rate is not the lowest loss: $(jq -c .baseline.sweep "$rep")"
# the two rates are far apart: their losses differ
jq -e '.baseline.sweep | (.[0].final_eval_loss - .[1].final_eval_loss) | fabs > 0.01' "$rep" > /dev/null ||
	fail "the two learning rates gave the same loss"
jq -e '.baseline.within_tolerance == (.baseline.loss_ratio <= 1.05)' "$rep" > /dev/null ||
	fail "within_tolerance is not loss_ratio <= 1.05"
grep -q '^data-parallel baseline: lr 0.01: eval loss' "$dir/out1" || fail "no sweep line in the summary"
[ "$(ls "$dir/cache" | wc -l)" -eq 2 ] || fail "not 2 cached runs"

# 2. the same again: both trials from the cache, the same choice
"$BIN" run "$dir/job.yaml" --run-dir "$dir/elsewhere/b" --baseline-lr 0.0005,0.01 \
	--timeout 300 > "$dir/out2" 2>&1 || { cat "$dir/out2"; fail "second run failed"; }
[ "$(grep -c '(cached: ' "$dir/out2")" -eq 2 ] || fail "the second run did not use the cache"
[ "$(jq -c '[.baseline.sweep[].final_eval_loss]' "$dir/runs/a/report.json")" = \
  "$(jq -c '[.baseline.sweep[].final_eval_loss]' "$dir/elsewhere/b/report.json")" ] ||
	fail "cached losses differ"

# 3. a bad list: exit 2 before the job runs
rc=0
"$BIN" run "$dir/job.yaml" --run-dir "$dir/runs/c" --baseline-lr 0.01,fast > "$dir/out3" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "bad --baseline-lr exited $rc"
grep -q "baseline-lr: '0.01,fast' is not a list" "$dir/out3" || fail "no clear error: $(cat "$dir/out3")"
[ ! -e "$dir/runs/c/report.json" ] || fail "the job ran with a bad --baseline-lr"

# 4. tuned on a split of its own (spec.data.tuneFraction)
sed 's/valFraction: 0.05}/valFraction: 0.1, tuneFraction: 0.5}/' "$dir/job.yaml" > "$dir/tune.yaml"
grep -q 'tuneFraction: 0.5' "$dir/tune.yaml" || fail "no tuneFraction in the job"
"$BIN" run "$dir/tune.yaml" --run-dir "$dir/runs/d" --baseline-lr 0.0005,0.01 \
	--timeout 300 > "$dir/out4" 2>&1 || { cat "$dir/out4"; fail "the tuned run failed"; }
tr="$dir/runs/d/report.json"
for lr in 0.0005 0.01; do
	grep -q '^final eval_loss=.* tune_loss=' "$dir/runs/d/baseline-lr$lr.log" ||
		fail "no tune_loss in the final line for lr $lr"
done
jq -e '.baseline as $b | ($b.sweep | min_by(.tune_loss)) as $m |
	$m.chosen and $b.lr == $m.lr and $b.final_eval_loss == $m.final_eval_loss' "$tr" > /dev/null ||
	fail "the chosen rate is not the lowest tuning loss: $(jq -c .baseline.sweep "$tr")"
jq -e '.baseline.sweep | all(.tune_loss != .final_eval_loss)' "$tr" > /dev/null ||
	fail "the tuning and validation losses are the same: one split"

# 5. --baseline-widen 1: the best of two rates is at an edge, so a third
# runs past it, by the same step (0.0005 comes from the cache)
"$BIN" run "$dir/job.yaml" --run-dir "$dir/runs/e" --baseline-lr 0.0005,0.001 \
	--baseline-widen 1 --timeout 300 > "$dir/out5" 2>&1 || { cat "$dir/out5"; fail "the widened run failed"; }
wr="$dir/runs/e/report.json"
jq -e '.baseline.sweep | length == 3 and
	.[2].lr == (if .[1].final_eval_loss < .[0].final_eval_loss then 0.002 else 0.00025 end)' \
	"$wr" > /dev/null || fail "the sweep did not go on past its edge: $(jq -c .baseline.sweep "$wr")"
grep -q 'is at the edge of the sweep: trying ' "$dir/out5" || fail "no line on the widening"
# 6. the baseline alone: no learner, no syncer, the same choice as 1.
"$BIN" run "$dir/job.yaml" --run-dir "$dir/runs/f" --baseline-only --baseline-lr 0.0005,0.01 \
	--timeout 300 > "$dir/out6" 2>&1 || { cat "$dir/out6"; fail "--baseline-only failed"; }
[ ! -e "$dir/runs/f/syncer.log" ] || fail "--baseline-only ran the job"
grep -q 'the data-parallel baseline alone' "$dir/out6" || fail "no line saying the job is left out"
grep -q ': not run (--baseline-only)$' "$dir/out6" || fail "no summary line saying the job was not run"
! grep -q 'rounds, .* tokens, eval loss' "$dir/out6" || fail "a summary of the job that did not run"
[ "$(grep -c '(cached: ' "$dir/out6")" -eq 2 ] || fail "--baseline-only did not use the cache"
[ "$(jq -c '.baseline | {lr, final_eval_loss}' "$dir/runs/f/report.json")" = \
  "$(jq -c '.baseline | {lr, final_eval_loss}' "$rep")" ] || fail "--baseline-only chose otherwise"
sed 's/budget: {tokens: 300000}/budget: {outerSteps: 20}/' "$dir/job.yaml" > "$dir/steps.yaml"
rc=0
"$BIN" run "$dir/steps.yaml" --run-dir "$dir/runs/g" --baseline-only > "$dir/out7" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "--baseline-only without a token budget exited $rc"
grep -q 'baseline-only: the job sets no spec.budget.tokens' "$dir/out7" || fail "no clear error: $(cat "$dir/out7")"
echo "widened sweep: $(jq -c '[.baseline.sweep[] | {lr, final_eval_loss}]' "$wr")"
echo "tuned sweep: $(jq -c '[.baseline.sweep[] | {lr, tune_loss, final_eval_loss}]' "$tr")"
echo "baseline sweep: $(jq -c '[.baseline.sweep[] | {lr, final_eval_loss}]' "$rep")"
echo "test_baseline: pass"
