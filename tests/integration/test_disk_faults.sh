#!/bin/sh
# Disk faults under a real run of `ddiloco run` (docs/syncer.md, Disk
# faults): the syncer runs with build/tests/libfaultfs.so preloaded
# (tests/faults/faultfs.c), whose faults on its checkpoint folder the
# test switches by writing one word to a file:
#   eio          checkpoint and high-water mark writes fail with EIO:
#                /status, /metrics and the log say so, the rounds past
#                the mark on disk wait for it, /healthz answers
#   enospc       the mark's retries fail with ENOSPC, then
#   erofs        with EROFS (a read-only remount)
#   fsync-slow 30  the mark's write hangs in fsync for 30 s: /healthz
#                and /status answer within 1 s all the while
#   (none)       the mark and the checkpoints are written again, rounds
#                go on, the fault is gone from /status and /metrics
# Then the syncer is killed (kill -9): the next one resumes at the round
# last acknowledged (checkpoint.last_ok_round) or later, hands out no
# round number or version of the first, and the job ends with no learner
# step merged twice. Learners train on while rounds are held, so the
# budget starts out of reach and is set in the job file before the kill,
# some seconds of training past the tokens trained by then.
set -eu
. "$(dirname "$0")/live.sh"
live_init dfault
ck=$run/checkpoints
shim=$(cd "${BUILD:-build}/tests" && pwd)/libfaultfs.so
[ -f "$shim" ] || { echo "FAIL: no $shim (make $shim)"; exit 1; }
ctl=$dir/fault
echo "room 1048576" > "$ctl"

live_exe "export LD_PRELOAD=$shim FAULTFS_DIR=$ck FAULTFS_CTL=$ctl"
syncer="minQuorum: 2, fragments: 2, overlap: 2, evalEvery: 1000"
syncer="$syncer, evalTokens: 2048, checkpointEvery: 5"
live_job dfault-$$ 3 "$syncer" 100000000000
live_run 400

up() { [ "$(cat "$dir/starts" 2>/dev/null)" = "$1" ] && status > "$dir/s.json"; }
fault() { echo "$1" > "$ctl"; }
healthz_ms() {
	curl -s -o /dev/null -w '%{http_code} %{time_total}\n' --max-time 1 \
		"http://$(cat "$dir/http")/healthz" |
		awk '{ printf "%s %d\n", $1, $2 * 1000 }'
}

# ---- a volume too small, then grown: learners let in once it has room
wait_for 60 'up 1 && [ "$(s .checkpoint.fits)" = false ]' "checkpoint.fits false on a 1 MiB volume"
[ "$(s .rounds_started)" = 0 ] || fail "room: $(s .rounds_started) rounds started on a volume too small"
[ "$(metric checkpoint_fits)" = 0 ] || fail "room: metric checkpoint_fits $(metric checkpoint_fits)"
grep -q "is too small: 5 checkpoints of this model need" "$run/syncer.log" || fail "room: no log line of the small volume"
echo "room: checkpoint.fits false: $(s .checkpoint.needed_bytes) bytes needed, $(s .checkpoint.volume_free_bytes) free"
fault none
wait_for 60 'up 1 && [ "$(s .checkpoint.fits)" = true ] && [ "$(s .rounds_started)" -gt 0 ]' \
	"rounds once the volume has room"
grep -q "has room now" "$run/syncer.log" || fail "room: no log line of the room found"
echo "room: the volume grown, checkpoint.fits true, $(s .rounds_started) rounds started"

# ---- a healthy start
wait_for 60 'up 1 && [ "$(s .checkpoint.last_ok_round)" != null ] && [ "$(s .checkpoint.mark.covered_round)" -ge 16 ]' \
	"a checkpoint and a mark"
wait_for 60 'up 1 && [ "$(s .rounds_started)" -ge 2000 ]' "2000 rounds of a healthy run"
echo "healthy: $(s .rounds_started) rounds started in $(s .elapsed | cut -c1-5) s, $(s .checkpoint.mark.written) marks written, the mark covers $(s .checkpoint.mark.covered_round), $(s .checkpoint.mark.holds) pulls held for it ($(s .checkpoint.mark.held_seconds | cut -c1-6) s)"

# ---- EIO: both writes fail, the rounds past the mark wait
fault eio
wait_for 60 'up 1 && [ "$(s .checkpoint.failing)" = true ] && [ "$(s .checkpoint.mark.failing)" = true ]' \
	"failing checkpoint and mark writes under EIO"
s .checkpoint.error | grep -q "Input/output error" || fail "eio: checkpoint.error $(s .checkpoint.error)"
s .checkpoint.mark.error | grep -q "^cannot write high-water mark: .*Input/output error" ||
	fail "eio: checkpoint.mark.error $(s .checkpoint.mark.error)"
wait_for 60 'up 1 && [ "$(s .checkpoint.mark.holding)" = true ]' "a pull held for the mark"
[ "$(metric mark_failing)" = 1 ] || fail "eio: metric mark_failing $(metric mark_failing)"
[ "$(metric mark_holding)" = 1 ] || fail "eio: metric mark_holding $(metric mark_holding)"
[ "$(metric checkpoint_failing)" = 1 ] || fail "eio: metric checkpoint_failing $(metric checkpoint_failing)"
covered=$(s .checkpoint.mark.covered_round)
started=$(s .rounds_started)
[ "$started" -le "$covered" ] || fail "eio: $started rounds started past the mark's $covered"
grep -q "rounds past $covered wait for it" "$run/syncer.log" || fail "eio: no log line of the held rounds"
echo "eio: held at round $started, the mark covers $covered: $(s .checkpoint.mark.error | sed 's/.*: //')"

# ---- ENOSPC, then EROFS: the mark's retries say each
fault enospc
wait_for 20 'up 1 && s .checkpoint.mark.error | grep -q "No space left on device"' "ENOSPC in checkpoint.mark.error"
fault erofs
wait_for 20 'up 1 && s .checkpoint.mark.error | grep -q "Read-only file system"' "EROFS in checkpoint.mark.error"
[ "$(s .rounds_started)" -le "$covered" ] || fail "erofs: rounds started past the mark"
echo "enospc, erofs: $(s .checkpoint.mark.failures) mark writes failed, still held at $(s .rounds_started)"

# ---- a 30 s fsync: the loop and its HTTP answer all the while
fault "fsync-slow 30"
wait_for 20 'up 1 && [ "$(s .checkpoint.mark.writing)" = true ]' "a mark write under way"
worst=0
i=0
while [ "$i" -lt 25 ]; do
	set -- $(healthz_ms)
	[ "$1" = 200 ] || fail "fsync-slow: /healthz answered $1"
	[ "$2" -gt "$worst" ] && worst=$2
	status > "$dir/s.json" || fail "fsync-slow: /status did not answer"
	i=$((i + 1))
	sleep 0.2
done
[ "$(s .checkpoint.mark.writing)" = true ] || fail "fsync-slow: the write ended early"
echo "fsync-slow: mark write hanging for $(s .checkpoint.mark.writing_seconds) s, /healthz at most $worst ms over 25 probes"
[ "$worst" -lt 1000 ] || fail "fsync-slow: /healthz took $worst ms"

# ---- the disk back: the mark, then rounds and checkpoints again
fault none
wait_for 60 'up 1 && [ "$(s .checkpoint.mark.failing)" = false ] && [ "$(s .checkpoint.mark.covered_round)" -gt "$covered" ] && [ "$(s .rounds_started)" -gt "$covered" ]' \
	"rounds past the old mark once it is written"
wait_for 60 'up 1 && [ "$(s .checkpoint.failing)" = false ] && [ "$(s .checkpoint.last_ok_round)" -gt "$covered" ]' \
	"a checkpoint past the held round"
[ "$(metric mark_failing)" = 0 ] || fail "after: metric mark_failing $(metric mark_failing)"
[ "$(metric mark_holds_total)" -ge 1 ] || fail "after: metric mark_holds_total $(metric mark_holds_total)"
ack=$(s .checkpoint.last_ok_round)
# about 15 s more of training at this run's mean rate, however fast the
# machine: the next syncer reads the job file again
end=$(s '.tokens + (.tokens / .elapsed * 15 | floor)')
sed "s/tokens: 100000000000}/tokens: $end}/" "$dir/job.yaml" > "$dir/job.yaml.new"
mv "$dir/job.yaml.new" "$dir/job.yaml"
v1=$(s '.versions | join(" ")')
kill -9 "$(cat "$dir/syncer.pid")"
rm -f "$dir/http"
echo "after: the mark covers $(s .checkpoint.mark.covered_round), held $(s .checkpoint.mark.holds) time(s) for $(s .checkpoint.mark.held_seconds) s; round $ack acknowledged, killed"

# ---- no acknowledged round lost
wait_for 30 'up 2' "second syncer"
[ "$(s .checkpoint.resumed_from)" = checkpoint ] || fail "start 2: resumed_from $(s .checkpoint.resumed_from)"
[ "$(s .checkpoint.last_ok_round)" -ge "$ack" ] || fail "start 2: resumed at round $(s .checkpoint.last_ok_round), $ack was acknowledged"
p=0
for v in $v1; do
	got=$(s ".versions[$p]")
	[ "$got" -gt "$v" ] || fail "start 2: fragment $p at version $got, start 1 was at $v"
	p=$((p + 1))
done
echo "start 2: resumed at round $(s .checkpoint.last_ok_round) (acknowledged $ack)"
live_done
[ "$(s .budget.tokens)" = "$end" ] || fail "start 2: budget $(s .budget.tokens), not the $end set before the kill"
echo "done: $steps learner steps merged, $twice twice"
