#!/bin/sh
# A hung learner behind a live sidecar in a real run of `ddiloco run`
# (docs/syncer.md, Stale learners): learner 1's process is stopped
# (SIGSTOP) while its sidecar keeps heartbeating its last step. The
# runner starts its children through a wrapper (DDILOCO_EXE) that records
# their pids. With spec.syncer.stallSeconds 2 the syncer must
#   - mark it stale within a few seconds (/status learners[1].stale and
#     learners_stale, /metrics learners_stale and learners_stale_total, a
#     log line), its step standing still,
#   - go on merging rounds without it meanwhile (K = 2 of 3),
#   - take it back once it runs again (SIGCONT): stale no more, its step
#     and tokens moving,
# and the job ends done with no learner step merged twice.
set -eu
. "$(dirname "$0")/live.sh"
live_init stale

live_exe

syncer="minQuorum: 2, fragments: 2, overlap: 2, evalEvery: 200"
syncer="$syncer, evalTokens: 2048, checkpointEvery: 50, stallSeconds: 2"
live_job stale-$$ 3 "$syncer" 8000000

live_run 300

wait_for 60 'now && [ "$(s .learners_connected)" -eq 3 ] && [ "$(s .round)" -ge 30 ]' \
	"three learners and 30 rounds"
[ "$(s .learners_stale)" -eq 0 ] || fail "a learner stale before any fault"
pid=$(cat "$dir/learner-1.pid")
kill -STOP "$pid"
t0=$(date +%s)
wait_for 30 'now && [ "$(s ".learners[1].stale")" = true ]' "stale learner 1"
stalled=$(( $(date +%s) - t0 ))
step=$(s '.learners[1].step')
r0=$(s .round)
[ "$(s .learners_stale)" -eq 1 ] || fail "learners_stale $(s .learners_stale)"
[ "$(s '.learners[0].stale')" = false ] && [ "$(s '.learners[2].stale')" = false ] ||
	fail "a running learner is stale"
[ "$(s '.learners[1].connected')" = true ] || fail "learner 1's sidecar is not connected"
[ "$(metric learners_stale)" = 1 ] || fail "metric learners_stale $(metric learners_stale)"
[ "$(metric learners_stale_total)" -ge 1 ] || fail "metric learners_stale_total $(metric learners_stale_total)"
grep -q "learner 1: its step $step has not moved for [0-9]* s while it keeps reporting; stale" "$run/syncer.log" ||
	fail "no log line of learner 1 stale at step $step"
# the rounds go on without it (20 of them: how soon depends on the
# machine's load, so no time bound)
wait_for 60 'now && [ "$(s .round)" -ge $((r0 + 20)) ]' "20 rounds while learner 1 was stopped"
[ "$(s '.learners[1].step')" = "$step" ] || fail "the stopped learner's step moved: $(s '.learners[1].step')"
[ "$(s '.learners[1].stale')" = true ] || fail "learner 1 not stale while stopped"
r1=$(s .round)
tok=$(s '.learners[1].tokens')
echo "learner 1 stopped at step $step: stale after ${stalled} s; rounds $r0 -> $r1 while stopped"

kill -CONT "$pid"
wait_for 30 'now && [ "$(s ".learners[1].stale")" = false ] && [ "$(s ".learners[1].step")" -gt "$step" ]' \
	"learner 1 back"
grep -q "learner 1: its step moves again" "$run/syncer.log" || fail "no log line of learner 1 moving again"
[ "$(s .learners_stale)" -eq 0 ] || fail "learners_stale $(s .learners_stale) after it moved"
wait_for 30 'now && [ "$(s ".learners[1].tokens")" -gt "$tok" ]' "tokens of learner 1 after it moved"

live_done
echo "done: rounds $(field rounds "$rep"), merged_steps $steps double_merged_steps $twice"
echo ok
