#!/bin/sh
# The accounting invariants of docs/design.md §3 counted in real runs of
# `ddiloco run` (syncer, sidecars and learners as processes), with P ≤ τ
# (fragments 2, overlap 2) so that learners get a second pull of a
# fragment before the update of their previous answer is applied:
#   1. α = 0, no chaos: no learner step merged twice
#      (invariants.double_merged_steps = 0), while such second answers were
#      merged (invariants.repeat_base > 0, so the check is not vacuous);
#   2. α = 0.5, learners and sidecars killed every half second: the same, and
#      the answer bounds (answers.stale, answers.clipped) in the report.
#   3. α = 0.5, P > τ (fragments 4, 4 steps a round, so that few answers
#      come late), sidecars killed every quarter second: a learner whose
#      sidecar is down trains on alone, and the Welcome's Updates of the
#      fragments it does not pull at once keep half of that; the next
#      answer that carries it must report the version it was trained
#      from (docs/exchange.md, The learner side), so that it is emptied
#      as stale (invariants.stale_held > 0, so the check is not vacuous).
# In every run no merged answer held progress more than staleVersions
# old (invariants.stale_merged = 0). A learner that labels the share it
# keeps with the update's version makes run 3 merge several.
# A learner that keeps its base until the update (the exchange before the
# rule) makes run 1 report hundreds of double-merged steps.
set -eu
BIN=${BUILD:-build}/ddiloco
dir=$(mktemp -d /tmp/ddiloco-inv-XXXXXX)
name="inv-$$"
cleanup() { rm -rf "$dir"; }
trap cleanup EXIT
fail() {
	echo "FAIL: $*"
	for f in "$dir"/run*/events.log; do [ -f "$f" ] && { echo "--- $f"; tail -n 30 "$f"; }; done
	exit 1
}
. "$(dirname "$0")/report.sh"   # field, sub: report.json

job() {   # job NAME ALPHA FRAGMENTS-AND-MORE [CHAOS-LINE]
	cat <<YAML
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata:
  name: $1
spec:
  learners: {replicas: 2}
  model: {context: 32, layers: 1, heads: 2, channels: 32}
  data: {path: /usr/share/games/fortunes, valFraction: 0.05}
  optimizer: {lr: 0.005, warmupSteps: 5, batchSize: 8}
  syncer: {minQuorum: 1, fragments: $3, overlap: 2, alpha: $2, evalEvery: 50,
           evalTokens: 2048, checkpointEvery: 10}
  budget: {tokens: 1000000}
${4:-}
YAML
}

check() {   # check RUN TESTED: done, invariants held, the count TESTED of
	    # invariants above 0; prints them
	rep="$dir/$1/report.json"
	[ -s "$rep" ] || fail "$1: no report"
	[ "$(field outcome "$rep")" = '"done"' ] || fail "$1: outcome $(field outcome "$rep")"
	merged=$(sub invariants merged_steps "$rep")
	twice=$(sub invariants double_merged_steps "$rep")
	repeat=$(sub invariants repeat_base "$rep")
	held=$(sub invariants stale_held "$rep")
	old=$(sub invariants stale_merged "$rep")
	tested=$(sub invariants "$2" "$rep")
	stale=$(sub answers stale "$rep")
	clipped=$(sub answers clipped "$rep")
	answers=$(sub answers merged "$rep")
	echo "$1: merged_steps $merged double_merged_steps $twice repeat_base $repeat" \
	     "stale_held $held stale_merged $old;" \
	     "answers merged $answers stale $stale clipped $clipped"
	[ -n "$merged" ] && [ -n "$twice" ] && [ -n "$repeat" ] && [ -n "$old" ] ||
		fail "$1: no invariants in the report"
	[ -n "$stale" ] && [ -n "$clipped" ] || fail "$1: no answer bounds in the report"
	[ "$merged" -gt 0 ] || fail "$1: no step merged"
	[ "${tested:-0}" -gt 0 ] || fail "$1: $2 is 0: the invariant was not tested"
	[ "$twice" -eq 0 ] || fail "$1: $twice learner steps merged twice"
	[ "$old" -eq 0 ] || fail "$1: $old merged answers held progress older than staleVersions"
}

job "$name-a" 0 2 > "$dir/a.yaml"
rc=0
"$BIN" run "$dir/a.yaml" --run-dir "$dir/run-a" --no-chaos > "$dir/out-a" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || { tail -n 20 "$dir/out-a"; fail "run a exited $rc"; }
check run-a repeat_base

# the first kill at 0.75 s: on an idle machine run b was done at 1.4 s of
# training, before a first kill at 1.5 s
job "$name-b" 0.5 2 "  chaos: {enabled: true, schedule: interval, intervalSeconds: 0.5, startAfterSeconds: 0.25,
          recoverySeconds: 0.5, maxDown: 1, seed: 5, targets: [learners, sidecars]}" > "$dir/b.yaml"
rc=0
"$BIN" run "$dir/b.yaml" --run-dir "$dir/run-b" > "$dir/out-b" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || { tail -n 20 "$dir/out-b"; fail "run b exited $rc"; }
check run-b repeat_base
kills=$(sub kills total "$dir/run-b/report.json")
[ "${kills:-0}" -ge 1 ] || fail "run b: no kill"
echo "run-b: $kills kills"

job "$name-c" 0.5 "4, syncEvery: 16" "  chaos: {enabled: true, schedule: interval, intervalSeconds: 0.25,
          startAfterSeconds: 0.25, recoverySeconds: 0.25, maxDown: 1, seed: 5, targets: [sidecars]}" > "$dir/c.yaml"
rc=0
"$BIN" run "$dir/c.yaml" --run-dir "$dir/run-c" > "$dir/out-c" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || { tail -n 20 "$dir/out-c"; fail "run c exited $rc"; }
check run-c stale_held
echo ok
