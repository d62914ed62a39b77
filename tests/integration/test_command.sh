#!/bin/sh
# `ddiloco run` with a learner command of the job's own
# (spec.learners.groups, spec.learners.command; docs/run.md): learner 1 is
# a shell script that checks its DDILOCO_* environment and then runs
# `ddiloco learner` from it, killed and restarted by chaos like any
# learner; learner 0 is `ddiloco learner` itself. spec.learners.args
# without a command is refused. (The PyTorch learners: make test-pytorch.)
set -eu
BIN=${BUILD:-build}/ddiloco
ABS=$(cd "$(dirname "$BIN")" && pwd)/ddiloco
dir=$(mktemp -d /tmp/ddiloco-cmd-XXXXXX)
name="itest-cmd-$$"
trap 'rm -rf "$dir"' EXIT
fail() {
	echo "FAIL: $*"
	for f in "$dir"/run*/events.log "$dir"/run*/learner-1.log; do
		[ -f "$f" ] && { echo "--- $f"; tail -n 30 "$f"; }
	done
	exit 1
}
. "$(dirname "$0")/report.sh"   # field: report.json

cat > "$dir/job.yaml" <<YAML
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata:
  name: $name
spec:
  learners:
    replicas: 2
    groups:
      - replicas: 1
      - replicas: 1
        command:
          - sh
          - -c
          - |
            echo "own learner \$DDILOCO_LEARNER_ID of \$DDILOCO_JOB_FILE lib \$DDILOCO_LIB"
            test -f "\$DDILOCO_LIB" && test -d "\$DDILOCO_EXCHANGE" || exit 3
            exec "\$0" learner --job "\$DDILOCO_JOB_FILE" --learner "\$DDILOCO_LEARNER_ID" --exchange "\$DDILOCO_EXCHANGE"
          - $ABS
  model: {context: 32, layers: 1, heads: 2, channels: 32}
  data: {path: /usr/share/games/fortunes, valFraction: 0.05}
  optimizer: {lr: 0.005, warmupSteps: 5, batchSize: 8}
  syncer: {minQuorum: 1, fragments: 2, evalEvery: 10, evalTokens: 2048, checkpointEvery: 10}
  # 4 M tokens: about 14 s on an idle machine, so chaos has time to kill
  # and restart learner 1 (at 600 k the job was done in 2.6 s, unkilled)
  budget: {tokens: 4000000}
  chaos: {enabled: true, schedule: interval, intervalSeconds: 2, startAfterSeconds: 1,
          recoverySeconds: 0.5, maxDown: 1, seed: 2}
YAML

rc=0
"$BIN" run "$dir/job.yaml" --run-dir "$dir/run1" --timeout 300 > "$dir/out1" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || { cat "$dir/out1"; fail "run exited $rc"; }
rep="$dir/run1/report.json"
[ "$(field outcome "$rep")" = '"done"' ] || fail "outcome $(field outcome "$rep")"
own=$(grep -c "^own learner 1 of $dir/job.yaml lib .*/libddiloco.so\$" "$dir/run1/learner-1.log" || true)
[ "$own" -ge 1 ] || fail "learner 1 did not run the job's command"
! grep -q "own learner" "$dir/run1/learner-0.log" || fail "learner 0 ran the group's command"
grep -q "got the global model" "$dir/run1/learner-1.log" || fail "learner 1 never trained"
grep -q "learner-1 restarted" "$dir/run1/events.log" || fail "learner 1 was never restarted"
[ "$own" -ge 2 ] || fail "the restarted learner 1 did not run the command again"
echo "learner 1 ran the job's command $own times"

# args without a command: refused, naming the fields
sed -i '/^    groups:/,/^          - \//d; s/^    replicas: 2$/    replicas: 2\n    args: [--x]/' "$dir/job.yaml"
rc=0
"$BIN" run "$dir/job.yaml" --run-dir "$dir/run2" --timeout 60 > "$dir/out2" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "args without a command: exit 0"
grep -q "spec.learners.args without spec.learners.command" "$dir/out2" || fail "args without a command: $(cat "$dir/out2")"
echo ok
