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

job() {   # job NAME ALPHA [CHAOS-LINE]
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
  syncer: {minQuorum: 1, fragments: 2, overlap: 2, alpha: $2, evalEvery: 50,
           evalTokens: 2048, checkpointEvery: 10}
  budget: {tokens: 1000000}
${3:-}
YAML
}

check() {   # check RUN: done, invariants held and tested; prints them
	rep="$dir/$1/report.json"
	[ -s "$rep" ] || fail "$1: no report"
	[ "$(field outcome "$rep")" = '"done"' ] || fail "$1: outcome $(field outcome "$rep")"
	merged=$(sub invariants merged_steps "$rep")
	twice=$(sub invariants double_merged_steps "$rep")
	repeat=$(sub invariants repeat_base "$rep")
	stale=$(sub answers stale "$rep")
	clipped=$(sub answers clipped "$rep")
	answers=$(sub answers merged "$rep")
	echo "$1: merged_steps $merged double_merged_steps $twice repeat_base $repeat;" \
	     "answers merged $answers stale $stale clipped $clipped"
	[ -n "$merged" ] && [ -n "$twice" ] && [ -n "$repeat" ] || fail "$1: no invariants in the report"
	[ -n "$stale" ] && [ -n "$clipped" ] || fail "$1: no answer bounds in the report"
	[ "$merged" -gt 0 ] || fail "$1: no step merged"
	[ "$repeat" -gt 0 ] || fail "$1: no answer on a repeated base: the invariant was not tested"
	[ "$twice" -eq 0 ] || fail "$1: $twice learner steps merged twice"
}

job "$name-a" 0 > "$dir/a.yaml"
rc=0
"$BIN" run "$dir/a.yaml" --run-dir "$dir/run-a" --no-chaos > "$dir/out-a" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || { tail -n 20 "$dir/out-a"; fail "run a exited $rc"; }
check run-a

# the first kill at 0.75 s: on an idle machine run b was done at 1.4 s of
# training, before a first kill at 1.5 s
job "$name-b" 0.5 "  chaos: {enabled: true, schedule: interval, intervalSeconds: 0.5, startAfterSeconds: 0.25,
          recoverySeconds: 0.5, maxDown: 1, seed: 5, targets: [learners, sidecars]}" > "$dir/b.yaml"
rc=0
"$BIN" run "$dir/b.yaml" --run-dir "$dir/run-b" > "$dir/out-b" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || { tail -n 20 "$dir/out-b"; fail "run b exited $rc"; }
check run-b
kills=$(sub kills total "$dir/run-b/report.json")
[ "${kills:-0}" -ge 1 ] || fail "run b: no kill"
echo "run-b: $kills kills"
echo ok
