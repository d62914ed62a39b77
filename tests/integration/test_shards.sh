#!/bin/sh
# A sharded syncer in a real run of `ddiloco run` (docs/syncer.md,
# Shards): spec.syncer.shards 2 over 4 fragments, the chaos killing the
# syncer every few seconds, a shard at a time. It must
#   - run to done, each shard owning its own fragments (its log says
#     which) and restarting from its own checkpoints
#     (RUN/checkpoints/shard-<i>), never from the seed;
#   - keep merging the other shard's fragments while one is down
#     (report.json syncer.rounds_while_shard_down > 0);
#   - merge no learner step twice, over both shards;
# and a job of more shards than fragments, or a sidecar given fewer
# addresses than the job has shards, is refused with a clear message.
set -eu
BIN=${BUILD:-build}/ddiloco
dir=$(mktemp -d /tmp/ddiloco-shards-XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() {
	echo "FAIL: $*"
	[ -f "$dir/run/events.log" ] && cat "$dir/run/events.log"
	# a step merged twice: the audit's own words (syncer/audit.c)
	grep -h "audit:" "$dir"/run/syncer-*.log 2>/dev/null | head -n 5
	exit 1
}
. "$(dirname "$0")/report.sh"   # field, sub: report.json

job() {   # name, syncer fields, chaos, tokens
	cat <<YAML
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata:
  name: $1
spec:
  learners: {replicas: 2, threads: 1}
  model: {context: 32, layers: 1, heads: 2, channels: 32}
  data: {path: /usr/share/games/fortunes, valFraction: 0.05}
  optimizer: {lr: 0.003, warmupSteps: 10, batchSize: 4}
  syncer: {minQuorum: 1, evalEvery: 0, checkpointEvery: 10, $2}
  budget: {tokens: $4}
  chaos: {$3}
YAML
}

# 1. bad input: more shards than fragments; a sidecar short of addresses
job bad-$$ "fragments: 2, shards: 3" "enabled: false" 3000000 > "$dir/bad.yaml"
rc=0
"$BIN" run "$dir/bad.yaml" --run-dir "$dir/bad" > "$dir/bad.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "a job of 3 shards over 2 fragments ran"
grep -q "spec.syncer.shards: 3 is more than spec.syncer.fragments (2)" "$dir/bad.out" ||
	fail "no clear refusal: $(cat "$dir/bad.out")"
job two-$$ "fragments: 4, shards: 2" "enabled: false" 3000000 > "$dir/two.yaml"
rc=0
"$BIN" sidecar --job "$dir/two.yaml" --learner 0 --exchange "$dir/x" \
	--syncer 127.0.0.1:1 > "$dir/sc.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || fail "a sidecar with one address for two shards exited $rc"
grep -q "syncer has 1 address, job 'two-$$' has 2 syncer shards" "$dir/sc.out" ||
	fail "no clear sidecar refusal: $(cat "$dir/sc.out")"

# 2. two shards, each killed in turn: kills 5, 8, 11 s in, a shard's
# restart about 2 s, and a budget of about 19 s on a fast machine
job shards-$$ "fragments: 4, shards: 2" "enabled: true, schedule: interval, \
intervalSeconds: 3, targets: [syncer], startAfterSeconds: 2, recoverySeconds: 2" \
	6000000 > "$dir/job.yaml"
rc=0
"$BIN" run "$dir/job.yaml" --run-dir "$dir/run" --timeout 400 > "$dir/out" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || { cat "$dir/out"; fail "run exited $rc"; }
rep="$dir/run/report.json"
[ "$(field outcome "$rep")" = '"done"' ] || fail "outcome $(field outcome "$rep")"
[ "$(sub syncer shards "$rep")" = 2 ] || fail "report: shards $(sub syncer shards "$rep")"
restarts=$(sub syncer restarts "$rep")
[ "${restarts:-0}" -ge 2 ] || fail "$restarts syncer restarts: both shards must be killed"
for i in 0 1; do
	log="$dir/run/syncer-$i.log"
	grep -q "shard $i of 2: fragments p with p mod 2 = $i" "$log" ||
		fail "shard $i does not say which fragments it owns"
	grep -q "resumed from '$dir/run/checkpoints/shard-$i/" "$log" ||
		fail "shard $i never resumed from its own checkpoints"
	! grep -q "no checkpoint loads" "$log" || fail "shard $i started over from the seed"
	# the job's fragment numbers in its log: its own only
	other=$(( 1 - i ))
	! grep -qE "fragment [$other$((other + 2))]( |:)" "$log" ||
		fail "shard $i logs another shard's fragment: $(grep -E "fragment [$other$((other + 2))]( |:)" "$log" | head -1)"
done
down=$(sub syncer rounds_while_shard_down "$rep")
[ "${down:-0}" -gt 0 ] || fail "no round merged while a shard was down"
twice=$(sub invariants double_merged_steps "$rep")
steps=$(sub invariants merged_steps "$rep")
[ "${steps:-0}" -gt 0 ] || fail "no merged steps"
[ "$twice" = 0 ] || fail "$twice learner steps merged twice"
echo "2 shards: $(field rounds "$rep") rounds, $restarts shard restarts," \
	"$down rounds merged while one was down, $steps steps merged, none twice"
echo ok
