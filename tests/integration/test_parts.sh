#!/bin/sh
# No size wall (docs/protocol.md, Messages in parts, and
# common/fragment.h): a GPT whose tied embedding alone (65600 × 256
# values, 67 MB in f32) is more than the 64 MiB message every sidecar
# used to refuse at start. In a real run of `ddiloco run` with messages
# held to 1 MiB by the test knob DDILOCO_TEST_MAX_MESSAGE, it must
#   - cut the embedding at rows across the 2 fragments (the syncer says
#     so) and balance them;
#   - send answers and updates in parts, each put together whole (the
#     syncer and the sidecars say so), rounds merging to done;
#   - merge no learner step twice;
# and a model over spec.syncer.maxParameters, or a knob out of range, is
# refused with a clear message.
set -eu
BIN=${BUILD:-build}/ddiloco
dir=$(mktemp -d /tmp/ddiloco-parts-XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() {
	echo "FAIL: $*"
	[ -f "$dir/run/events.log" ] && cat "$dir/run/events.log"
	exit 1
}
. "$(dirname "$0")/report.sh"   # field, sub: report.json

job() {   # name, syncer fields
	cat <<YAML
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata:
  name: $1
spec:
  learners: {replicas: 2, threads: 1}
  model: {vocabSize: 65600, context: 16, layers: 1, heads: 2, channels: 256}
  data: {path: /usr/share/games/fortunes, valFraction: 0.05}
  optimizer: {lr: 0.003, warmupSteps: 10, batchSize: 2}
  syncer: {fragments: 2, minQuorum: 1, evalEvery: 0, checkpointEvery: 4, $2}
  budget: {tokens: 12000}
  chaos: {enabled: false}
YAML
}

# 1. bad input: a model over the shard's budget; a knob out of range
job budget-$$ "maxParameters: 10000000, insecure: true" > "$dir/budget.yaml"
rc=0
"$BIN" syncer --job "$dir/budget.yaml" --checkpoint-dir "$dir/ck" \
	> "$dir/budget.out" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "a model over maxParameters: syncer exited $rc"
grep -q "the model has 17587968 parameters for this syncer: more than spec.syncer.maxParameters 10000000" \
	"$dir/budget.out" || fail "no clear refusal: $(cat "$dir/budget.out")"
job knob-$$ "insecure: true" > "$dir/knob.yaml"
rc=0
DDILOCO_TEST_MAX_MESSAGE=12 "$BIN" syncer --job "$dir/knob.yaml" \
	--checkpoint-dir "$dir/ck" > "$dir/knob.out" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "a knob of 12 bytes: syncer exited $rc"
grep -q "DDILOCO_TEST_MAX_MESSAGE: '12' is not a number of bytes" "$dir/knob.out" ||
	fail "no clear knob refusal: $(cat "$dir/knob.out")"

# 2. the run, in parts of 1 MiB
job parts-$$ "" > "$dir/job.yaml"
rc=0
DDILOCO_TEST_MAX_MESSAGE=1048576 "$BIN" run "$dir/job.yaml" --run-dir "$dir/run" \
	--timeout 500 > "$dir/out" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || { cat "$dir/out"; fail "run exited $rc"; }
rep="$dir/run/report.json"
# "done", or "done (syncer exited 0)" when the syncer ended before the
# runner saw it say so
case "$(field outcome "$rep")" in
'"done'*) ;;
*) fail "outcome $(field outcome "$rep")" ;;
esac
log="$dir/run/syncer.log"
grep -q "17587968 parameters in 2 fragments (imbalance 1.000, tensors cut at rows: 1)" "$log" ||
	fail "the embedding is not cut: $(grep 'parameters in' "$log")"
grep -q "answers in parts" "$log" || fail "no answer came in parts"
for i in 0 1; do
	grep -q "updates in parts" "$dir/run/sidecar-$i.log" ||
		fail "sidecar $i got no update in parts"
done
! grep -qE "part (at offset|of another|of no)|runs past its payload" "$log" \
	"$dir/run/sidecar-0.log" "$dir/run/sidecar-1.log" ||
	fail "a part was refused: $(grep -hE 'part ' "$log" "$dir"/run/sidecar-*.log | head -3)"
rounds=$(field rounds "$rep")
[ "${rounds:-0}" -gt 0 ] || fail "no round merged"
twice=$(sub invariants double_merged_steps "$rep")
steps=$(sub invariants merged_steps "$rep")
[ "${steps:-0}" -gt 0 ] || fail "no merged steps"
[ "$twice" = 0 ] || fail "$twice learner steps merged twice"
echo "parts: $rounds rounds of a model with a 16793600-value tensor in" \
	"1 MiB messages, $steps steps merged, none twice"
echo ok
