#!/bin/sh
# The size acceptance (about ten minutes; not part of `make test`):
# examples/big.yaml, 256M parameters, 4 synthetic learners, run twice by
# `ddiloco run`:
#   S = 1  chaos on the learners, a checkpoint every 16 rounds (2 GiB
#          each): /healthz timed every 100 ms, the probes during writes
#          apart (bench/healthz_during_ckpt.py), peak memory per process
#          (bench/size_rss.py);
#   S = 4  the same job in four shards, shard 1 killed by the chaos
#          200 s into the run, a checkpoint every 8 of a shard's rounds.
# Prints params=, shards=, shard_rss_ratio= (the largest shard's peak RSS
# at S = 4 over the syncer's at S = 1), healthz_p99_ms_during_ckpt=,
# other_fragments_rounds_while_shard_down=, restored_round= (the round
# shard 1 resumed from after its kill) and double_merged_steps=, then
# the same figures as size_256m_rss_mb_per_shard_s1= and _s4=,
# size_shard_rss_ratio=, size_256m_round_s_p50= and
# size_healthz_ms_p99_during_ckpt=; passes
# when rounds merged while the shard was down (> 0), the shard resumed
# from a checkpoint of its own, no learner step was merged twice in
# either run, and both runs ended done. The folder (argument 1, default
# runs/size-<UTC time>) keeps both runs and every figure; given again, a
# folder whose S = 1 run ended keeps it and runs S = 4 only.
set -eu
BUILD=${BUILD:-build}
export BUILD
dir=${1:-runs/size-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$dir"
py=/usr/bin/python3
ok=1
no() { echo "FAIL: $*"; ok=0; }
val() { sed -n "s/^$1=//p" "$2" | tail -n 1; }

# ---- S = 1
if [ ! -f "$dir/s1/report.json" ]; then
sed -e 's/^    checkpointEvery: .*/    checkpointEvery: 16/' examples/big.yaml > "$dir/s1.yaml"
$py bench/healthz_during_ckpt.py --run-dir "$dir/s1" --seconds 240 \
	--prefix s1 > "$dir/healthz.txt" 2>&1 &
hz=$!
$py bench/size_rss.py "$dir/s1.yaml" --run-dir "$dir/s1" --seconds 900 \
	--prefix s1 > "$dir/s1.txt"
wait "$hz" || :
fi
cat "$dir/s1.txt" "$dir/healthz.txt"

# ---- S = 4, shard 1 killed
sed -e 's/^    shards: .*/    shards: 4/' \
    -e 's/^    checkpointEvery: .*/    checkpointEvery: 8/' \
    -e 's/^    targets: .*/    targets: [syncer]\n    syncerShard: 1/' \
    -e 's/^    schedule: .*/    schedule: interval\n    intervalSeconds: 200\n    stopAfterSeconds: 250/' \
    -e 's/^    startAfterSeconds: .*/    startAfterSeconds: 0/' \
    -e 's/^    recoverySeconds: .*/    recoverySeconds: 10/' \
    examples/big.yaml > "$dir/s4.yaml"
$py bench/size_rss.py "$dir/s4.yaml" --run-dir "$dir/s4" --seconds 900 \
	--prefix s4 > "$dir/s4.txt"
cat "$dir/s4.txt"

r1=$dir/s1/report.json
r4=$dir/s4/report.json
for r in "$r1" "$r4"; do
	[ -f "$r" ] || { no "no report: $r"; continue; }
	jq -r .outcome "$r" | grep -q "^done" || no "$r: outcome $(jq -r .outcome "$r")"
done
rss1=$(val s1_syncer_vmrss_mb_peak "$dir/s1.txt")
rss4=$(val s4_syncer_vmrss_mb_peak "$dir/s4.txt")
ratio=$(awk -v a="${rss4:-0}" -v b="${rss1:-0}" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }')
down=$(jq -r '.syncer.rounds_while_shard_down // 0' "$r4" 2>/dev/null || echo 0)
restored=$(sed -n "s/.*resumed from '[^']*': round \([0-9]*\),.*/\1/p" \
	"$dir/s4/syncer-1.log" 2>/dev/null | tail -n 1)
twice=0
for r in "$r1" "$r4"; do
	t=$(jq -r '.invariants.double_merged_steps // "null"' "$r" 2>/dev/null || echo null)
	[ "$t" = null ] && { no "$r: no invariants"; continue; }
	twice=$((twice + t))
done
echo "params=$(jq -r .bytes.params "$r1" 2>/dev/null)"
echo "shards=$(jq -r .syncer.shards "$r4" 2>/dev/null)"
echo "shard_rss_ratio=$ratio"
echo "healthz_p99_ms_during_ckpt=$(val s1_healthz_ms_p99_during_ckpt "$dir/healthz.txt")"
echo "ckpt_writes_seen=$(val s1_ckpt_writes_seen "$dir/healthz.txt")"
echo "other_fragments_rounds_while_shard_down=$down"
echo "restored_round=${restored:-none}"
echo "double_merged_steps=$twice"
# the same figures under the benchmark keys of docs/figures.md, Size
echo "size_256m_rss_mb_per_shard_s1=${rss1:-}"
echo "size_256m_rss_mb_per_shard_s4=${rss4:-}"
echo "size_shard_rss_ratio=$ratio"
echo "size_256m_round_s_p50=$(val s1_round_s_p50 "$dir/s1.txt")"
echo "size_healthz_ms_p99_during_ckpt=$(val s1_healthz_ms_p99_during_ckpt "$dir/healthz.txt")"
[ "$down" -gt 0 ] || no "no round merged while shard 1 was down"
[ -n "$restored" ] || no "shard 1 did not resume from a checkpoint of its own"
[ "$twice" -eq 0 ] || no "$twice learner steps merged twice"
[ "$ok" -eq 1 ] && echo "size: pass" || { echo "size: FAIL"; exit 1; }
