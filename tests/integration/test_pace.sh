#!/bin/sh
# The configured H is the H a real job runs (docs/design.md §3, pacing):
# `ddiloco run` on a small job without chaos, at H/P = 1 and H/P = 16; from
# the report, rounds × H/P is within 10 % of the steps the K-th learner
# made until the job was done (pace.kth_steps, the K-th largest of the
# learners' reported steps, checked against their logs' `job done at step
# N`: no more, and at least 80 % — learners train on during the final
# evaluation), pace.h_effective is within 10 % of pace.h, and each
# learner's lr schedule ended at 0.8 to 1.5 times the job's step (it
# follows the job's tokens; the report's count trails the learners' last
# second). Also prints the learner-time
# breakdown the report carries (syncer/goodput.h) and checks it adds up.
set -eu
BIN=${BUILD:-build}/ddiloco
dir=$(mktemp -d /tmp/ddiloco-pace-XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() {
	echo "FAIL: $*"
	exit 1
}
# a number from report.json: python-free, the runner writes one per line
num() { sed -n "/\"$1\": {/,/}/s/^    \"$2\": \([-0-9.e+]*\),\{0,1\}\$/\1/p" "$3" | head -n 1; }

run_job() {   # H P tokens batch τ: runs the job
	name="pace-$1-$$"
	cat > "$dir/$1.yaml" <<YAML
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata:
  name: $name
spec:
  learners: {replicas: 3}
  model: {context: 64, layers: 2, heads: 4, channels: 64}
  data: {path: /usr/share/games/fortunes, valFraction: 0.05}
  optimizer: {lr: 0.005, warmupSteps: 5, batchSize: $4}
  syncer: {minQuorum: 2, fragments: $2, syncEvery: $1, overlap: $5, evalEvery: 0,
           checkpointEvery: 0, outerLr: 1.0, outerMomentum: 0.0}
  budget: {tokens: $3}
YAML
	rc=0
	"$BIN" run "$dir/$1.yaml" --no-chaos --run-dir "$dir/run-$1" \
		--timeout 300 > "$dir/out-$1" 2>&1 || rc=$?
	[ "$rc" -eq 0 ] || { cat "$dir/out-$1"; fail "H $1: run exited $rc"; }
}

check() {   # H P BUDGET
	rep="$dir/run-$1/report.json"
	# rounds started (pace.rounds): the report's `rounds` are those
	# completed, τ fewer at most (the rounds in flight at done)
	rounds=$(num pace rounds "$rep")
	# the K-th (2nd) largest final step of the three learners
	last=$(grep -ho 'job done at step [0-9]*' "$dir/run-$1"/learner-*.log |
	      awk '{print $5}' | sort -n -r | sed -n 2p)
	kth=$(num pace kth_steps "$rep")
	h=$(num pace h "$rep")
	he=$(num pace h_effective "$rep")
	[ -n "$rounds" ] && [ -n "$kth" ] && [ -n "$last" ] && [ -n "$h" ] && [ -n "$he" ] ||
		fail "H $1: report fields missing (rounds '$rounds', kth '$kth', logs '$last', h '$h', h_effective '$he')"
	echo "H $1, P $2: $rounds rounds x H/P $(( $1 / $2 )) vs K-th learner $kth steps (logs: $last at exit); h_effective $he"
	grep '^pace:\|^learner time:' "$dir/out-$1"
	awk -v k="$kth" -v l="$last" 'BEGIN { exit !(k <= l + 1 && k >= 0.8 * l) }' ||
		fail "H $1: the syncer counted $kth steps of the K-th learner, its log says $last"
	awk -v r="$rounds" -v s="$(( $1 / $2 ))" -v k="$kth" \
		'BEGIN { q = r * s / k; exit !(q > 0.9 && q < 1.1) }' ||
		fail "H $1: rounds x H/P = $(( rounds * $1 / $2 )), K-th learner $kth steps"
	awk -v h="$h" -v e="$he" 'BEGIN { exit !(h == '"$1"' && e > 0.9 * h && e < 1.1 * h) }' ||
		fail "H $1: h $h, h_effective $he"
	# the lr schedule followed the job's tokens (docs/design.md §3,
	# Learner): every learner ended near the job's step, the horizon
	# times the tokens the job trained (past the budget: the syncer sees
	# it spent from heartbeats) over the budget. These learners are even,
	# so their own steps would end there too: this checks the C
	# learner's line and its arithmetic; tests/pytorch/test_mixed.py,
	# with learners three to six times apart, checks the rule
	tokens=$(sed -n 's/^  "tokens": \([0-9]*\),$/\1/p' "$rep")
	grep -ho 'job done at step [0-9]*, schedule step [0-9]* of [0-9]*' \
		"$dir/run-$1"/learner-*.log > "$dir/sched-$1" || true
	[ -n "$tokens" ] && [ "$(wc -l < "$dir/sched-$1")" -eq 3 ] ||
		fail "H $1: tokens '$tokens', $(wc -l < "$dir/sched-$1") learners logged their schedule step"
	awk -v t="$tokens" -v b="$3" '{ q = $8 / ($10 * t / b); if (!(q >= 0.8 && q <= 1.5)) bad = 1 }
		END { exit bad }' "$dir/sched-$1" ||
		fail "H $1: schedule steps at the end: $(tr '\n' ';' < "$dir/sched-$1") tokens $tokens of $3"
	echo "H $1: at the end $(awk -v t="$tokens" -v b="$3" '{ printf "%s%s (own %d)", (NR > 1 ? ", " : ""), $8, $5 }
		END { printf " of %d; the job'"'"'s %.0f", $10, $10 * t / b }' "$dir/sched-$1")"
	# the breakdown: shares in [0, 1] that add up to 1 (in_flight may be
	# slightly negative when a learner's pace changed)
	sum=0
	for k in merged late refused overwritten restarts in_flight not_training; do
		v=$(num goodput_breakdown $k "$rep")
		[ -n "$v" ] || fail "H $1: goodput_breakdown.$k missing"
		sum=$(awk -v a="$sum" -v b="$v" 'BEGIN { print a + b }')
	done
	awk -v s="$sum" 'BEGIN { exit !(s > 0.97 && s < 1.03) }' ||
		fail "H $1: goodput_breakdown adds up to $sum"
}

# The invariant holds while τ rounds (pull, the learner's step in progress,
# answers, grace, merge) fit in τ·H/P steps (syncer/round.h). At H/P = 1
# on 2 cores shared with other jobs a round takes 1 to 3 steps, so that
# run has τ = 4 rounds in flight over P = 4 fragments, and batch 16.
run_job 4 4 1500000 16 4
check 4 4 1500000
run_job 32 2 1000000 8 2
check 32 2 1000000
echo ok
