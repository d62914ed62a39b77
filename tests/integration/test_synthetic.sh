#!/bin/sh
# Synthetic learners (docs/run.md, Synthetic learners) through the real
# exchange, sidecars, gRPC and syncer under `ddiloco run`: a job of the
# reference GPT's table and one of an external model's table
# (spec.learners.synthetic.tensors, adopted from the first Hello with the
# learner's seed). Their steps and tokens reach the syncer's /status as a
# real learner's do (tokens in steps of batchSize × seqLen, no train loss),
# rounds merge, and each job ends at its budget with exit 0. A budget
# changed in the job file while a job runs is the one it ends at.
set -eu
BIN=$(cd "$(dirname "${BUILD:-build}/ddiloco")" && pwd)/ddiloco
dir=$(mktemp -d /tmp/ddiloco-synthetic-XXXXXX)
run=""
fail() {
	echo "FAIL: $*"
	for f in "$dir"/*.out "$dir"/run-*/*.log; do
		[ -f "$f" ] && { echo "--- $f"; tail -n 8 "$f"; }
	done
	exit 1
}
cleanup() {
	[ -z "$run" ] || kill "$run" 2>/dev/null || true
	wait 2>/dev/null || true
	[ -n "${KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT

# wait_for SECONDS 'shell condition' what
wait_for() {
	t=0
	while ! eval "$2" 2>/dev/null; do
		t=$((t + 1))
		[ "$t" -le $(($1 * 5)) ] || fail "timed out waiting for $3"
		sleep 0.2
	done
}

# job NAME MODEL SYNTHETIC [SLOWDOWN]: a 2-learner job, batch 4 × seqLen 16 = 64
# tokens a step, 4 fragments merged every 8 steps, 300 rounds (about
# 12 s at 0.02 s a step)
job() {
	slow=${4:-"{}"}
	cat > "$dir/$1.yaml" <<YAML
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata:
  name: $1
spec:
  learners:
    replicas: 2
    synthetic: $3
    slowdown: $slow
  model: $2
  data: {path: /usr/share/games/fortunes}
  optimizer: {batchSize: 4, seqLen: 16}
  syncer: {fragments: 4, syncEvery: 8, encoding: int8,
           updateEncoding: bf16, evalEvery: 0, checkpointEvery: 10}
  budget: {outerSteps: 300}
YAML
}

# check NAME: runs the job, follows /status, checks the end
check() {
	name=$1
	"$BIN" run "$dir/$name.yaml" --run-dir "$dir/run-$name" --timeout 120 \
		> "$dir/$name.out" 2>&1 &
	run=$!
	wait_for 30 'grep -q "(http " "$dir/run-$name/events.log"' "the syncer of $name"
	http=$(sed -n 's/.*(http \([^)]*\)).*/\1/p' "$dir/run-$name/events.log" | head -n 1)
	st() { curl -sf "http://$http/status" | jq -r "$1"; }
	wait_for 60 '[ "$(st "[.learners[].step] | min")" -ge 20 ]' "20 steps of each learner of $name"
	for i in 0 1; do
		# tokens come in whole steps of 64 and never run ahead of the
		# steps (the step is an answer's, the tokens a heartbeat's)
		l=$(curl -sf "http://$http/status" |
			jq -r ".learners[$i] | \"\(.step) \(.tokens) \(.train_loss)\"")
		set -- $l
		[ "$2" -gt 0 ] && [ $(($2 % 64)) -eq 0 ] && [ "$2" -le $(($1 * 64)) ] ||
			fail "$name: learner $i has $2 tokens at step $1 (64 a step)"
		[ "$3" = null ] || fail "$name: learner $i reports a train loss $3"
	done
	# the job's tokens come with heartbeats, which may trail the answers
	wait_for 30 '[ "$(st .tokens)" -ge 2560 ]' "2560 tokens counted for $name"
	if [ "$name" = gpt ]; then
		# learner 1 at a third of learner 0's speed (spec.learners.
		# slowdown): fewer than half its steps, more than a tenth
		l=$(st '"\(.learners[0].step) \(.learners[1].step)"')
		set -- $l
		[ $(($2 * 2)) -lt "$1" ] && [ $(($2 * 10)) -gt "$1" ] ||
			fail "gpt: learner 1 at step $2 when learner 0 is at $1 (slowdown 3)"
	fi
	wait_for 60 '[ "$(st .answers.merged)" -ge 4 ]' "merged answers of $name"
	rc=0
	wait "$run" || rc=$?
	run=""
	[ "$rc" -eq 0 ] || fail "$name: ddiloco run exited $rc"
	[ "$(jq -r .rounds "$dir/run-$name/report.json")" -eq 300 ] ||
		fail "$name: $(jq -r .rounds "$dir/run-$name/report.json") rounds, not 300"
	grep -q "synthetic: .* values, a step every 0.020 s" "$dir/run-$name/learner-0.log" ||
		fail "$name: learner 0 did not run synthetic steps"
}

job gpt "{vocabSize: 256, context: 16, layers: 1, heads: 2, channels: 32}" \
	"{stepTime: 0.02, seed: 3}" '{"1": 3}'
check gpt
grep -q "synthetic: .* values, a step every 0.060 s" "$dir/run-gpt/learner-1.log" ||
	fail "gpt: learner 1 is not 3 times slower"

job ext "{kind: external}" "{stepTime: 0.02, tensors: [3000, 2000, 1500, 1000, 700]}"
check ext
grep -q "weights are the job.s initial model" "$dir/run-ext/syncer.log" ||
	fail "ext: the syncer did not adopt the learner's seed"
# the table declared by the job (spec.model.tensors): the synthetic
# learners take it, the syncer fixes it from the spec
job decl "{kind: external, tensors: [3000, 2000, 1500, 1000, 700]}" "{stepTime: 0.02}"
check decl
grep -q "the job's table is fixed: spec.model.tensors declares it" "$dir/run-decl/syncer.log" ||
	fail "decl: the syncer did not fix the declared table"
echo "ok: synthetic learners of a GPT (one 3 times slower), an external table and a declared one, steps and tokens in /status"

# the budget changed in the job file while the job runs (docs/syncer.md,
# The budget): the syncer takes it without a restart and ends there
job live "{vocabSize: 256, context: 16, layers: 1, heads: 2, channels: 32}" "{stepTime: 0.02}"
sed -i 's/outerSteps: 300/outerSteps: 100000/' "$dir/live.yaml"
"$BIN" run "$dir/live.yaml" --run-dir "$dir/run-live" --timeout 120 > "$dir/live.out" 2>&1 &
run=$!
wait_for 30 'grep -q "(http " "$dir/run-live/events.log"' "the syncer of live"
http=$(sed -n 's/.*(http \([^)]*\)).*/\1/p' "$dir/run-live/events.log" | head -n 1)
st() { curl -sf "http://$http/status" | jq -r "$1"; }
wait_for 60 '[ "$(st .round)" -ge 20 ]' "20 rounds of live"
[ "$(st .budget.outer_steps)" = 100000 ] || fail "live: /status budget $(st .budget)"
want=$(($(st .round) + 40))
sed "s/outerSteps: 100000/outerSteps: $want/" "$dir/live.yaml" > "$dir/live.yaml.new"
mv "$dir/live.yaml.new" "$dir/live.yaml"
wait_for 30 '[ "$(st .budget.outer_steps)" = "$want" ]' "the budget of $want rounds in /status"
[ "$(st .budget.changes)" = 1 ] || fail "live: $(st .budget.changes) budget changes, not 1"
rc=0
wait "$run" || rc=$?
run=""
[ "$rc" -eq 0 ] || fail "live: ddiloco run exited $rc"
got=$(jq -r .rounds "$dir/run-live/report.json")
[ "$got" -eq "$want" ] || fail "live: $got rounds, not the $want the changed budget says"
grep -q "budget changed: tokens 0 -> 0, outer steps 100000 -> $want" "$dir/run-live/syncer.log" ||
	fail "live: the syncer did not say the budget changed"
echo "ok: the budget changed while job live ran: it ended at round $want, not 100000"
