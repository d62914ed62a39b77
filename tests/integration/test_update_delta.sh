#!/bin/sh
# Updates as deltas (docs/protocol.md, Updates as deltas) in a live
# `ddiloco run`: spec.syncer.updateDelta with int8 deltas, three learners,
# and learner 1's sidecar cut off (SIGSTOP) until the syncer drops it,
# then let go: it joins again holding fragments of versions long gone.
# H = P (a round every learner step): the Updates for the stopped
# sidecar outrun what its connection's windows and socket buffers take
# in (several MB) before the syncer drops it, so the next Update of a
# fragment finds the one before still queued and goes whole. At the
# default H = 4P they did so in about half the runs.
# Passes when
#   - merged fragments go as deltas (updates.delta grows) at int8's size,
#     about a quarter of a whole f32 fragment, before and after the cut;
#   - no sidecar refused a delta (a delta from a version it does not hold,
#     or a checksum that does not match: "joins again" in its log), so
#     every delta went to a learner that held the version before it: the
#     rejoined one got whole fragments first;
#   - the job ends done, no learner step merged twice.
set -eu
. "$(dirname "$0")/live.sh"
live_init delta

live_exe
syncer="minQuorum: 2, fragments: 2, syncEvery: 2, updateDelta: true, updateEncoding: int8"
syncer="$syncer, evalEvery: 200, evalTokens: 2048"
live_job delta-$$ 3 "$syncer" 6000000
live_run 300

joins() { grep -c 'learner 1 joined' "$run/syncer.log" || :; }
wait_for 60 'now && [ "$(s .learners_connected)" -eq 3 ] && [ "$(s .round)" -ge 10 ] &&
	[ "$(s .updates_delta)" -gt 0 ]' "three learners, 10 rounds and deltas sent"
d0=$(s .updates_delta)
j0=$(joins)
sidecar=$(cat "$dir/sidecar-1.pid")
kill -STOP "$sidecar"
wait_for 30 'grep -q "learner 1 left" "$run/syncer.log"' "learner 1 dropped by the syncer"
now
r0=$(s .round)
wait_for 60 'now && [ "$(s .round)" -ge $((r0 + 6)) ]' "6 rounds without learner 1"
kill -CONT "$sidecar"
wait_for 30 '[ "$(joins)" -gt "$j0" ] && now && [ "$(s ".learners[1].connected")" = true ]' \
	"learner 1 back"
d1=$(s .updates_delta)
r1=$(s .round)
wait_for 60 'now && [ "$(s .round)" -ge $((r1 + 10)) ]' "10 rounds after the rejoin"
d2=$(s .updates_delta)
nd=$(s .updates_delta) bd=$(s .update_bytes_delta)
nw=$(s .updates_whole) bw=$(s .update_bytes_whole)
echo "deltas: $d0 before the cut, $d1 at the rejoin, $d2 after 10 more rounds;" \
	"$nd deltas of $bd bytes, $nw whole of $bw bytes"
[ "$d1" -gt "$d0" ] || fail "no delta sent between the first look and the rejoin"
# two fragments, three learners: a round's merge goes to each joined one
[ "$((d2 - d1))" -ge 20 ] || fail "only $((d2 - d1)) deltas in 10 rounds after the rejoin"
refused=$(cat "$run"/sidecar-*.log | grep -c "joins again" || :)
[ "$refused" -eq 0 ] || fail "$refused deltas refused by a sidecar"
[ "$nw" -gt 0 ] || fail "no merged fragment went whole"
# int8: n + 4 n/256 bytes of the f32 4 n, for fragments of whole blocks
ratio=$(echo "$bd $nd $bw $nw" | awk '{ printf "%.4f", ($1 / $2) / ($3 / $4) }')
echo "a delta's bytes over a whole fragment's: $ratio"
awk -v r="$ratio" 'BEGIN { exit !(r > 0.25 && r < 0.26) }' ||
	fail "a delta is $ratio of a whole fragment, not int8's 0.254"
live_done
echo "done: rounds $(field rounds "$rep"), double_merged_steps $twice"
echo ok
