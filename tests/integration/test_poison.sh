#!/bin/sh
# Poisoned answers in a real run of `ddiloco run` (docs/syncer.md, Merge;
# the test knob DDILOCO_TEST_POISON_ANSWERS, docs/sidecar.md). Two
# learners, quorum 2, the plain mean, η 1, μ 0.5 (Nesterov):
#   - the first two answers of both learners have every value ±3·10³⁸:
#     finite, and no history to screen them against yet (a fragment's
#     first merges); before the size screen they moved Θ by some 10³⁸
#     (a step still below FLT_MAX, so not undone) and every learner
#     then failed on a non-finite loss. Now refused, each
#     over 100 times its fragment of Θ (/status answers.refused_size,
#     /metrics answers_size_refused_total, a warning), and no outer step
#     has to be undone (steps_undone 0);
#   - learner 1's answers 41 to 60 have every value ±1: within the size
#     screen, some 20 times the median norm per step of the merged
#     answers: refused by the history screen (/status
#     answers.refused_history, /metrics
#     answers_norm_history_refused_total, warnings naming learner 1), the
#     other learner's answer merged alone meanwhile.
# The job must end done, every evaluation of Θ finite and the last one
# below the first, no learner step merged twice. (An outer step that
# leaves Θ non-finite, undone, cannot be reached through the screens:
# tests/unit/test_merge.c a_step_that_overflows_is_not_applied.)
set -eu
. "$(dirname "$0")/live.sh"
live_init poison

# the knob's bound of 4 ranges is per learner: a sidecar takes 4 of its
# own followed by another learner's, and refuses 5 of its own (exit 2)
knob() {   # knob LIST: the sidecar of learner 0's exit code
	rc=0
	DDILOCO_TEST_POISON_ANSWERS=$1 "$BIN" sidecar --job "$dir/none.yaml" \
		--learner 0 --exchange "$dir/none" --syncer 127.0.0.1:1 \
		> "$dir/knob.log" 2>&1 || rc=$?
	echo "$rc"
}
four="0:1:1:1,0:2:1:1,0:3:1:1,0:4:1:1"
[ "$(knob "$four,1:1:1:1")" = 1 ] && grep -q "cannot open" "$dir/knob.log" ||
	fail "4 ranges of learner 0 and one of learner 1 refused: $(cat "$dir/knob.log")"
[ "$(knob "$four,0:5:1:1")" = 2 ] &&
	grep -q "at most 4 ranges a learner" "$dir/knob.log" ||
	fail "5 ranges of learner 0 taken: $(cat "$dir/knob.log")"

live_exe

syncer="minQuorum: 2, fragments: 2, overlap: 2, evalEvery: 50"
syncer="$syncer, evalTokens: 2048, checkpointEvery: 10, merge: mean"
syncer="$syncer, outerLr: 1.0, outerMomentum: 0.5, nesterov: true"
live_job poison-$$ 2 "$syncer" 3000000

DDILOCO_TEST_POISON_ANSWERS=0:1:2:3e38,1:1:2:3e38,1:41:20:1
export DDILOCO_TEST_POISON_ANSWERS
live_run 150


# while the job runs (the syncer's counters are its process's)
wait_for 60 'now && [ "$(s .answers.refused_history)" -ge 1 ] && [ "$(s .round)" -ge 100 ]' \
	"answers refused by the history and 100 rounds"
undone=$(s .steps_undone)
size=$(s .answers.refused_size)
hist=$(s .answers.refused_history)
[ "$size" -ge 1 ] || fail "refused_size $size"
[ "$undone" -eq 0 ] || fail "steps_undone $undone: a poisoned answer reached the outer step"
[ "$(metric steps_undone_total)" = 0 ] || fail "metric steps_undone_total $(metric steps_undone_total)"
[ "$(metric answers_size_refused_total)" -ge "$size" ] ||
	fail "metric answers_size_refused_total $(metric answers_size_refused_total)"
[ "$(metric answers_norm_history_refused_total)" -ge "$hist" ] ||
	fail "metric answers_norm_history_refused_total $(metric answers_norm_history_refused_total)"
[ "$(s .answers.rejected)" -ge $((size + hist)) ] ||
	fail "rejected $(s .answers.rejected): fewer than the $size + $hist refused"
grep -q "round [0-9]*: answer of learner [01] for fragment [0-9]* rejected: norm per step .* is more than 100 times the fragment's own size" "$run/syncer.log" ||
	fail "no warning of an answer refused by the size screen"
grep -q "round [0-9]*: answer of learner 1 for fragment [0-9]* rejected: norm per step .* median" "$run/syncer.log" ||
	fail "no warning naming learner 1 refused by the history"
if grep "answer of learner 0 for fragment [0-9]* rejected: norm per step .* median" "$run/syncer.log"; then
	fail "the honest learner was refused by the history"
fi
grep -q "sidecar-1: test knob DDILOCO_TEST_POISON_ANSWERS: answer 60 sent" "$run/sidecar-1.log" ||
	fail "learner 1's sidecar did not send its 60th answer poisoned"

live_done
# the report carries the syncer's last counts: at least what it had then
[ "$(sub answers refused_size "$rep")" -ge "$size" ] ||
	fail "report: answers.refused_size $(sub answers refused_size "$rep") < $size"
[ "$(sub answers refused_history "$rep")" -ge "$hist" ] ||
	fail "report: answers.refused_history $(sub answers refused_history "$rep") < $hist"
[ "$(field steps_undone "$rep")" = 0 ] || fail "report: steps_undone $(field steps_undone "$rep")"
n=$(jq '.eval_history | length' "$rep")
first=$(jq '.eval_history[0].loss' "$rep")
last=$(jq '.eval_history[-1].loss' "$rep")
[ "$n" -ge 2 ] || fail "$n evaluations"
jq -e '[.eval_history[].loss | select(type == "number" and . < 10)] | length == ('"$n"')' "$rep" > /dev/null ||
	fail "an evaluation of Θ is not finite: $(jq -c '[.eval_history[].loss]' "$rep")"
jq -e "$last < $first" -n > /dev/null || fail "eval loss $first -> $last"
echo "answers refused by the size screen $size, by the history $hist, steps undone $undone;" \
     "eval loss $first -> $last over $n evaluations; rounds $(field rounds "$rep")," \
     "merged_steps $steps double_merged_steps $twice"
echo ok
