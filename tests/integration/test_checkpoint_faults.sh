#!/bin/sh
# Checkpoint faults in a real run of `ddiloco run` (docs/syncer.md,
# Checkpoints): the runner starts its children through a wrapper
# (DDILOCO_EXE) that counts the syncer's starts and records its pid and
# HTTP address; the test kills the syncer (kill -9) twice.
#   start 1  under a file size limit below one checkpoint (ulimit -f, a
#            full disk for the syncer only): every write fails; the job
#            goes on, /status and /metrics say so, the high-water mark (a
#            small file) is written. A damaged file named for a later
#            round is put in the folder. Killed.
#   start 2  no checkpoint loads (the damaged one is skipped): it starts
#            over from the seed, says so (/status checkpoint.resumed_from
#            "seed", /metrics checkpoint_started_over 1), and gives out
#            no round number nor version the first one may have given.
#            Two more unloadable files of later rounds are put beside its
#            checkpoints (a copy with a flipped byte, a truncated one):
#            the file just written is never pruned, the strangers are not
#            touched. Killed.
#   start 3  skips the three unloadable files (one log line each), loads
#            the newest checkpoint written (what start 2's /status last
#            acknowledged, or later), skips versions past start 2's, and
#            runs the job to its end with no learner step merged twice;
#            then three loadable checkpoints are kept, the newest the
#            end's, the strangers untouched, and no temporary file of a
#            write cut by a kill is left.
set -eu
. "$(dirname "$0")/live.sh"
live_init ckf
ck=$run/checkpoints

# 64 blocks of 512 bytes for the first syncer: a checkpoint of this
# model is ~170 KB
live_exe '[ "$n" = 1 ] && ulimit -f 64'

syncer="minQuorum: 2, fragments: 2, overlap: 2, evalEvery: 100"
syncer="$syncer, evalTokens: 2048, checkpointEvery: 5"
# 8 M tokens: with 4 M an idle machine had the learners' steps while the
# syncer was down bring the job past its budget at start 3's first join,
# so start 3 merged nothing (3 of 4 runs, and 1 of 3 of a build from
# before the exchange's held answers)
live_job ckf-$$ 3 "$syncer" 8000000

live_run 150

# the syncer of start N answers /status, and its state is in $dir/s.json
up() { [ "$(cat "$dir/starts" 2>/dev/null)" = "$1" ] && status > "$dir/s.json"; }
kill_syncer() {
	kill -9 "$(cat "$dir/syncer.pid")"
	rm -f "$dir/http"
}

# ---- start 1: the disk is full for the syncer
wait_for 60 'up 1 && [ "$(s .round)" -ge 12 ] && [ "$(s .checkpoint.failures)" -ge 2 ]' \
	"two failed checkpoint writes"
fp=$(s .fingerprint)
[ "$(s .checkpoint.failing)" = true ] || fail "start 1: checkpoint.failing is $(s .checkpoint.failing)"
s .checkpoint.error | grep -q "^cannot save checkpoint: cannot write '$ck/syncer-$fp-[0-9]*\.ckpt\.tmp\.[0-9]*': File too large$" ||
	fail "start 1: checkpoint.error: $(s .checkpoint.error)"
[ "$(s .checkpoint.last_ok_round)" = null ] || fail "start 1: last_ok_round $(s .checkpoint.last_ok_round)"
[ "$(s .checkpoint.resumed_from)" = new ] || fail "start 1: resumed_from $(s .checkpoint.resumed_from)"
[ "$(metric checkpoint_failing)" = 1 ] || fail "start 1: metric checkpoint_failing $(metric checkpoint_failing)"
[ "$(metric checkpoint_failures_total)" -ge 2 ] || fail "start 1: checkpoint_failures_total $(metric checkpoint_failures_total)"
[ -z "$(ls "$ck" | grep '\.ckpt$')" ] || fail "start 1: checkpoint files: $(ls "$ck")"
[ -s "$ck/syncer-$fp-hwm" ] || fail "start 1: no high-water mark"
# a file of a later round that does not load
printf 'not a checkpoint' > "$ck/syncer-$fp-000000999997.ckpt"
echo "start 1: round $(s .round), $(s .checkpoint.failures) checkpoint writes failed: $(s .checkpoint.error | sed 's/.*: //')"
r1=$(s .rounds_started)
kill_syncer
hwm_rounds=$(sed -n 's/^rounds //p' "$ck/syncer-$fp-hwm")
hwm_versions=$(sed -n 's/^versions //p' "$ck/syncer-$fp-hwm")
[ "$hwm_rounds" -ge "$r1" ] || fail "the high-water mark says $hwm_rounds rounds, start 1 had started $r1"

# ---- start 2: no usable checkpoint
wait_for 30 'up 2' "second syncer"
[ "$(s .checkpoint.resumed_from)" = seed ] || fail "start 2: resumed_from $(s .checkpoint.resumed_from)"
[ "$(metric checkpoint_started_over)" = 1 ] || fail "start 2: metric checkpoint_started_over $(metric checkpoint_started_over)"
grep -q "cannot load checkpoint '$ck/syncer-$fp-000000999997.ckpt': truncated (16 bytes); skipped" "$run/syncer.log" ||
	fail "start 2: the unloadable file was not skipped with a message"
grep -q "the model starts over from the seed" "$run/syncer.log" || fail "start 2: no warning of the start over"
[ "$(s .rounds_started)" -ge "$hwm_rounds" ] || fail "start 2: rounds start at $(s .rounds_started), the mark says $hwm_rounds"
p=0
for v in $hwm_versions; do
	got=$(s ".versions[$p]")
	[ "$got" -ge "$v" ] || fail "start 2: fragment $p at version $got, the mark says $v"
	p=$((p + 1))
done
wait_for 60 'up 2 && [ "$(s .checkpoint.last_ok_round)" != null ] && [ "$(s .checkpoint.last_ok_round)" -ge 10 ]' \
	"checkpoint of start 2"
[ "$(s .checkpoint.failing)" = false ] || fail "start 2: failing"
# two unloadable copies of its newest checkpoint, named for later rounds
# (the newest of the moment: pruning may remove it meanwhile)
wait_for 10 'cp "$ck/$(ls "$ck" | grep "^syncer-$fp-0000000[0-9]*\.ckpt$" | sort | tail -n 1)" "$dir/copy"' \
	"copy of a checkpoint"
cp "$dir/copy" "$dir/flip"
b=$(od -An -tu1 -j2000 -N1 "$dir/flip" | tr -d ' ')
printf "\\$(printf %o $(( (b + 1) % 256 )))" | dd of="$dir/flip" bs=1 seek=2000 conv=notrunc 2>/dev/null
cmp -s "$dir/copy" "$dir/flip" && fail "no byte flipped"
mv "$dir/flip" "$ck/syncer-$fp-000000999999.ckpt"
head -c 5000 "$dir/copy" > "$ck/syncer-$fp-000000999998.ckpt"
ack=$(s .checkpoint.last_ok_round)
wait_for 60 'up 2 && [ "$(s .checkpoint.last_ok_round)" -ge $((ack + 10)) ]' \
	"two more checkpoints of start 2"
ack=$(s .checkpoint.last_ok_round)
v2=$(s '.versions | join(" ")')
kill_syncer
# the newest on disk is the one acknowledged or a later one
top=$(ls "$ck" | sed -n "s/^syncer-$fp-\(0000000[0-9]*\)\.ckpt\$/\1/p" | sort | tail -n 1)
[ "$(expr "$top" + 0)" -ge "$ack" ] || fail "start 2 acknowledged round $ack, the newest checkpoint is $top"
for r in 999997 999998 999999; do
	[ -f "$ck/syncer-$fp-000000$r.ckpt" ] || fail "the unloadable file of round $r was removed"
done
echo "start 2: started over past round $hwm_rounds, acknowledged round $ack, versions $v2; files $(ls "$ck" | sed "s/^syncer-$fp-//" | tr "\\n" " ")"

# ---- start 3: from the newest checkpoint, past the unloadable ones
wait_for 30 'up 3' "third syncer"
[ "$(s .checkpoint.resumed_from)" = checkpoint ] || fail "start 3: resumed_from $(s .checkpoint.resumed_from)"
[ "$(s .checkpoint.last_ok_round)" -ge "$ack" ] || fail "start 3: resumed at round $(s .checkpoint.last_ok_round), $ack was acknowledged"
grep -q "cannot load checkpoint '$ck/syncer-$fp-000000999999.ckpt': checksum mismatch; skipped" "$run/syncer.log" ||
	fail "start 3: the damaged copy was not skipped with a message"
grep -q "cannot load checkpoint '$ck/syncer-$fp-000000999998.ckpt': 5000 bytes" "$run/syncer.log" ||
	fail "start 3: the truncated copy was not skipped with a message"
p=0
for v in $v2; do
	got=$(s ".versions[$p]")
	[ "$got" -gt "$v" ] || fail "start 3: fragment $p at version $got, start 2 was at $v"
	p=$((p + 1))
done
echo "start 3: resumed at round $(s .checkpoint.last_ok_round), versions $(s '.versions | join(" ")')"

live_done
[ "$(sub syncer crashes "$rep")" -eq 2 ] || fail "syncer crashes $(sub syncer crashes "$rep"), not 2"
for r in 999997 999998 999999; do
	[ -f "$ck/syncer-$fp-000000$r.ckpt" ] || fail "the unloadable file of round $r was removed by the end"
done
# after the last checkpoint (the end's): three loadable ones, the newest
# the end's, beside the strangers
loadable=$(ls "$ck" | grep -c "^syncer-$fp-0000000[0-9]*\.ckpt$")
[ "$loadable" -eq 3 ] || fail "$loadable checkpoints kept, not 3: $(ls "$ck")"
top=$(ls "$ck" | sed -n "s/^syncer-$fp-\(0000000[0-9]*\)\.ckpt\$/\1/p" | sort | tail -n 1)
[ "$(expr "$top" + 0)" -eq "$(field rounds "$rep")" ] || fail "the newest checkpoint is of round $top, the job ended at $(field rounds "$rep")"
# a write cut by a kill leaves a temporary file: the next start removes it
[ -z "$(ls "$ck" | grep '\.tmp')" ] || fail "temporary files left: $(ls "$ck" | grep '\.tmp')"
echo "done: rounds $(field rounds "$rep"), merged_steps $steps double_merged_steps $twice"
echo ok
