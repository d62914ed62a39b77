#!/bin/sh
# The quality study's driver (bench/quality.sh; docs/quality.md) on a
# tiny job: M = 2 with and without a slow learner, one seed, H = 16 in
# f32 and int8 at M = 8 and M = 2, one outer step (η 1, μ 0.5), in a
# folder of its own
# (QUALITY_DIR). Passes when
#   - each cell ran once and left its file, with the job's hash, its
#     loss and, for the slow cells, the slow learner's shares;
#   - the first cell trained the baseline on the tuning split, three
#     learning rates or more, its best one between two worse ones, and
#     the page's rows compare with it;
#   - a cell whose job is an earlier cell's (h16-int8-m2, m2-slow-s1's)
#     is that cell's run, not run again;
#   - the outer cell ran with its η and μ and no chaos, and the page
#     gives its outer steps per fragment;
#   - the baseline's cell also trained one learner alone on 1/M of the
#     tokens, and the page gives the share of data parallel's gain over
#     it that the cell kept;
#   - an inner-rate cell ran at its rate, and the page lists it beside
#     the m2-fast-s1 cell at the job's;
#   - a second call runs nothing (every cell "done before");
#   - the baseline's trials are in the study's cache (its folder): the
#     baseline's cell, its file left as a sweep stopped halfway leaves
#     it (the job's result, no baseline), run again with its data
#     folder's mtime changed (as on another machine), does not train its
#     job again and reads every trial from there;
#   - a changed job file runs its cells again, each from its start (not
#     from the checkpoints its earlier run left), and the page shows
#     only the cells of the job as it is now.
set -eu
dir=$(mktemp -d /tmp/ddiloco-study-XXXXXX)
[ -n "${KEEP:-}" ] || trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export QUALITY_DIR="$dir/q"
unset DDILOCO_CACHE_DIR
# the fortunes in a folder of the test's own (its mtime is changed below)
cp -R /usr/share/games/fortunes "$dir/data"
export MS=2 SEEDS=1 HS=16 HMS="8 2" OUTER=1/0.5
cat > "$dir/job.yaml" <<YAML
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata:
  name: qs
spec:
  learners: {replicas: 2, threads: 1}
  model: {context: 32, layers: 1, heads: 2, channels: 32}
  data: {path: $dir/data, valFraction: 0.1, tuneFraction: 0.5}
  optimizer: {lr: 0.005, warmupSteps: 5, batchSize: 8}
  # H = 16 in int8 both ways, as h16-int8-m2: that cell is m2-slow-s1's
  # run and is not run again
  syncer: {minQuorum: 1, fragments: 2, evalEvery: 10, evalTokens: 2048,
           syncEvery: 16, encoding: int8, updateEncoding: int8, updateDelta: true}
  budget: {tokens: 150000}
  # on, as the study's, but after the job's end: no kill, and the outer
  # cell shows it turns it off
  chaos: {enabled: true, startAfterSeconds: 3600}
YAML
export JOB="$dir/job.yaml"
sh bench/quality.sh run > "$dir/out1" 2>&1 || { cat "$dir/out1"; fail "the study failed"; }
runs=$dir/q/bench/quality/runs
for c in m2-fast-s1 m2-slow-s1 h16-f32 h16-int8 h16-f32-m2 h16-int8-m2 o2-1-0.5; do
	[ -f "$runs/$c.json" ] || fail "no file for cell $c"
	jq -e '.final_eval_loss > 0 and .final_eval_loss < 6 and
		(.job_sha256 | length) == 64' "$runs/$c.json" > /dev/null ||
		fail "cell $c: $(jq -c '{final_eval_loss, job_sha256}' "$runs/$c.json")"
done
jq -e '.baseline.sweep | length >= 3 and all(.tune_loss != null)' "$runs/m2-fast-s1.json" \
	> /dev/null || fail "the baseline was not tuned on its split: $(jq -c .baseline "$runs/m2-fast-s1.json")"
# a bracket search: the best rate on the tuning split has a rate on
# each side, unless the sweep widened as far as it may (3 + 3 rates)
jq -e '.baseline.sweep | (min_by(.tune_loss).lr) as $b | length == 6 or
	(any(.lr < $b) and any(.lr > $b))' "$runs/m2-fast-s1.json" > /dev/null ||
	fail "the sweep's best rate is at its edge: $(jq -c '[.baseline.sweep[] | {lr, tune_loss}]' "$runs/m2-fast-s1.json")"
jq -e '.slow_learner.merged >= 0 and .slow_learner.merged <= 1' "$runs/m2-slow-s1.json" \
	> /dev/null || fail "no slow learner's shares"
jq -e '.syncer.updateDelta == true and .syncer.encoding == "int8"' "$runs/h16-int8.json" \
	> /dev/null || fail "h16-int8 did not run int8 deltas"
jq -e '.learners == 2 and .slow and .syncer.syncEvery == 16 and .rounds > 0' "$runs/h16-int8-m2.json" \
	> /dev/null || fail "h16-int8-m2 did not run M = 2, one slow, H = 16: $(jq -c '{learners, slow, syncer, rounds}' "$runs/h16-int8-m2.json")"
jq -e --slurpfile m "$runs/m2-slow-s1.json" '.same_as == "m2-slow-s1" and .seconds == 0 and
	.final_eval_loss == $m[0].final_eval_loss' "$runs/h16-int8-m2.json" > /dev/null ||
	fail "h16-int8-m2 is not m2-slow-s1's run: $(jq -c '{same_as, seconds, final_eval_loss}' "$runs/h16-int8-m2.json")"
grep -q 'h16-int8-m2: the job of m2-slow-s1, which ran' "$dir/out1" || fail "h16-int8-m2 ran again"
[ ! -e "$dir/q/runs/study/h16-int8-m2" ] || fail "h16-int8-m2 has a run of its own"
grep -q "^| 2 | 16 | int8 (m2-slow-s1's run) | [0-9.]* | " "$dir/q/docs/quality.md" ||
	fail "the page has no H row at M = 2: $(grep '^| 2 | 16 ' "$dir/q/docs/quality.md")"
jq -e '.syncer.outerLr == 1 and .syncer.outerMomentum == 0.5 and .rounds > 0' "$runs/o2-1-0.5.json" > /dev/null ||
	fail "o2-1-0.5 did not run η 1, μ 0.5 and count its rounds: $(jq -c '{syncer, rounds}' "$runs/o2-1-0.5.json")"
grep -q 'chaos on' "$dir/q/runs/study/m2-fast-s1/run.log" || fail "m2-fast-s1 ran without chaos"
! grep -q 'chaos on' "$dir/q/runs/study/o2-1-0.5/run.log" ||
	fail "o2-1-0.5 ran with chaos: $(grep 'chaos on' "$dir/q/runs/study/o2-1-0.5/run.log")"
page=$dir/q/docs/quality.md
base=$(jq -r '.baseline.final_eval_loss' "$runs/m2-fast-s1.json")
grep -q "^| 2 | one 2× slower | 1 | .* | $(printf %.4f "$base") (lr " "$page" ||
	fail "the page has no row of the slow cells against the baseline: $(grep '^| 2' "$page")"
# the sweep's runs listed with both splits' losses, the chosen one
# marked, and the ratio against the sweep's best on the validation split
n=$(jq '.baseline.sweep | length' "$runs/m2-fast-s1.json")
[ "$(grep -cE '^\| 2 \| [0-9.e-]+ \| [0-9.]+ \| [0-9.]+ \| (chosen)? \|$' "$page")" -eq "$n" ] ||
	fail "the page does not list the sweep's $n runs: $(grep '^| 2 |' "$page")"
lr=$(jq -r '.baseline.lr' "$runs/m2-fast-s1.json")
grep -q "^| 2 | $lr | .* | chosen |" "$page" || fail "the chosen lr $lr is not marked"
best=$(jq -r '[.baseline.sweep[].final_eval_loss] | min' "$runs/m2-fast-s1.json")
loss=$(jq -r '.final_eval_loss' "$runs/m2-fast-s1.json")
want=$(awk -v a="$loss" -v b="$best" 'BEGIN { printf "%.4f", a / b }')
grep -q "^| 2 | – | 1 | .* | $want | " "$page" ||
	fail "no ratio $want against the best run: $(grep '^| 2 | – ' "$page")"
# the outer row: outer steps per fragment = rounds / fragments
per=$(jq -r '.rounds / 2 | . * 10 | round / 10' "$runs/o2-1-0.5.json")
grep -q "^| 2 | $(printf %.1f "$per") | 1 | 0.5 | 2.00 | " "$page" ||
	fail "no outer row of $per steps per fragment: $(grep -A3 '^| M | outer' "$page")"
# one learner alone: half the tokens (a whole number of steps of
# 8 × 32), its loss where the page's row has it, and the share kept
jq -e '.alone.tokens > 74000 and .alone.tokens <= 75008 and
	.alone.final_eval_loss > 0 and .alone.final_eval_loss < 6 and .alone.lr == 0.005' \
	"$runs/m2-fast-s1.json" > /dev/null ||
	fail "no lone learner on half the tokens: $(jq -c .alone "$runs/m2-fast-s1.json")"
alone=$(jq -r '.alone.final_eval_loss' "$runs/m2-fast-s1.json")
kept=$(awk -v a="$alone" -v l="$loss" -v b="$base" 'BEGIN { printf "%.2f", (a - l) / (a - b) }')
grep -q "^| 2 | – | 1 | .* | $(printf %.4f "$alone") | $kept | " "$page" ||
	fail "no lone learner $alone and share kept $kept in the row: $(grep '^| 2 | – ' "$page")"
sh bench/quality.sh run l2-0.0035 > "$dir/out5" 2>&1 || { cat "$dir/out5"; fail "the inner-rate cell failed"; }
jq -e '.inner_lr == 0.0035 and .learners == 2 and (.slow | not) and .rounds > 0' "$runs/l2-0.0035.json" > /dev/null ||
	fail "l2-0.0035 did not run its rate: $(jq -c '{inner_lr, learners, slow, rounds}' "$runs/l2-0.0035.json")"
grep -q 'lr: 0.0035' "$dir/q/runs/study/l2-0.0035/job.yaml" || fail "l2-0.0035's job has not its rate"
[ "$(grep -cE '^\| 2 \| 0\.00(35|5) \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$' "$page")" -eq 2 ] ||
	fail "the page does not list the two inner rates: $(grep -A4 '^| M | inner' "$page")"
for p in loss-m2 ratio-m loss-bytes ratio-steps; do
	grep -q '<polyline\|<circle' "$dir/q/docs/quality/$p.svg" || fail "plot $p is empty"
done
sh bench/quality.sh run > "$dir/out2" 2>&1 || { cat "$dir/out2"; fail "the second call failed"; }
[ "$(grep -c 'done before' "$dir/out2")" -eq 7 ] || fail "the second call ran cells: $(cat "$dir/out2")"
[ "$(ls "$dir/q/bench/quality/baseline" | wc -l)" -ge "$n" ] ||
	fail "the study's cache holds $(ls "$dir/q/bench/quality/baseline" | wc -l) trials of $n"
jq 'del(.baseline)' "$runs/m2-fast-s1.json" > "$dir/cell" && mv "$dir/cell" "$runs/m2-fast-s1.json"
touch -d '2001-01-01' "$dir/data"
sh bench/quality.sh run m2-fast-s1 > "$dir/out4" 2>&1 || { cat "$dir/out4"; fail "the rerun failed"; }
! grep -q 'm2-fast-s1: loss' "$dir/out4" || fail "the job ran again for its baseline: $(cat "$dir/out4")"
[ "$(jq -r .final_eval_loss "$runs/m2-fast-s1.json")" = "$loss" ] || fail "the job's loss changed"
[ "$(jq -r .baseline.lr "$runs/m2-fast-s1.json")" = "$lr" ] || fail "the baseline chose another lr"
c=$(grep -c '^baseline: lr .*(cached: ' "$dir/q/runs/study/m2-fast-s1/baseline.log" || true)
[ "$c" -eq "$n" ] || fail "$c of the $n trials came from the cache: $(grep '^baseline: lr' "$dir/q/runs/study/m2-fast-s1/baseline.log")"
sed -i 's/tokens: 150000/tokens: 120000/' "$JOB"
sh bench/quality.sh run m2-slow-s1 > "$dir/out3" 2>&1 || { cat "$dir/out3"; fail "the third call failed"; }
grep -q 'm2-slow-s1: loss' "$dir/out3" || fail "a changed job did not run its cell again"
# from the start, not from the checkpoints its earlier run left
! grep -q 'resumed from' "$dir/q/runs/study/m2-slow-s1/run/syncer.log" ||
	fail "the rerun resumed: $(grep 'resumed from' "$dir/q/runs/study/m2-slow-s1/run/syncer.log")"
grep -q '7 cell files of an earlier text of the job are not shown' "$page" ||
	fail "the page does not say it left out 7 cells: $(head -8 "$page")"
! grep -q '^| 2 | – |' "$page" || fail "the page shows m2-fast-s1, of the earlier job"
[ "$(grep -c '^| 2 | one 2× slower | 1 | ' "$page")" -eq 1 ] || fail "no row of the rerun cell"
[ ! -e "$dir/q/docs/quality/loss-bytes.svg" ] || fail "a plot of cells not shown is left"
echo "study: $(grep -c '' "$page") lines, cells $(ls "$runs" | tr '\n' ' ')"
echo ok
