#!/bin/sh
# `ddiloco train`: learns on the fortunes, prints the final line, resumes
# from a checkpoint to the same result, refuses bad input clearly.
set -eu
BIN=${BUILD:-build}/ddiloco
dir=$(mktemp -d /tmp/ddiloco-train-XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

cat > "$dir/job.yaml" <<YAML
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata:
  name: t
spec:
  learners: {replicas: 1, threads: 1}
  model: {context: 32, layers: 1, heads: 2, channels: 32}
  data: {path: /usr/share/games/fortunes, valFraction: 0.05}
  optimizer: {lr: 0.005, warmupSteps: 5, batchSize: 8}
  syncer: {fragments: 2, evalTokens: 4096}
  budget: {tokens: 12800}
YAML

# 12800 tokens / (8 × 32) = 50 steps
"$BIN" train "$dir/job.yaml" > "$dir/a.out"
last=$(tail -n 1 "$dir/a.out")
echo "$last" | grep -Eq '^final eval_loss=[0-9.]+ tokens=12800 tokens_per_s=[0-9]+$' ||
	fail "last line: $last"
grep -q '^step 50/50 loss=' "$dir/a.out" || fail "no progress line for step 50"
loss=$(echo "$last" | sed 's/.*eval_loss=\([0-9.]*\).*/\1/')
# uniform over bytes is 5.55 nats; 50 small steps get well below
awk -v l="$loss" 'BEGIN { exit !(l < 3.6) }' || fail "eval loss $loss did not drop"

# 20 steps, checkpoint, resume to 50: the same model as straight through
"$BIN" train "$dir/job.yaml" --steps 20 --checkpoint "$dir/ck" > /dev/null
[ -s "$dir/ck" ] || fail "no checkpoint written"
"$BIN" train "$dir/job.yaml" --resume "$dir/ck" > "$dir/b.out"
[ "$(tail -n 1 "$dir/b.out" | cut -d' ' -f1-3)" = "$(echo "$last" | cut -d' ' -f1-3)" ] ||
	fail "resumed run ends at '$(tail -n 1 "$dir/b.out")', straight run at '$last'"

# --batch-mult 2 halves the steps for the same tokens
"$BIN" train "$dir/job.yaml" --batch-mult 2 > "$dir/c.out"
grep -q '^step 25/25 ' "$dir/c.out" || fail "batch-mult 2 did not take 25 steps"

# bad input: a clear message, exit code not 0
printf 'garbage' > "$dir/ck"
if "$BIN" train "$dir/job.yaml" --resume "$dir/ck" > /dev/null 2> "$dir/err"; then
	fail "a corrupt checkpoint was accepted"
fi
grep -q "cannot load checkpoint '$dir/ck': truncated" "$dir/err" || fail "message: $(cat "$dir/err")"
if "$BIN" train "$dir/job.yaml" --steps x > /dev/null 2> "$dir/err"; then
	fail "--steps x was accepted"
fi
grep -q "ddiloco train: option '--steps' needs a whole number, got 'x'" "$dir/err" || fail "message: $(cat "$dir/err")"
"$BIN" train --help | grep -q -- '--batch-mult M' || fail "--help"
echo "ok"
