#!/bin/sh
# pytorch_exchange_overhead: the share of a PyTorch learner's step spent in
# ddiloco_poll (target <= 0.01), through the real sidecar and syncer.
# One learner, examples/pytorch/train.py (the reference GPT in PyTorch),
# trains the default job's model (437,760 parameters, 4 fragments) at the
# fastest cadence, H = P: every step its poll serves one pull and applies
# one update, as bench/exchange_overhead.c does for the C learner. The
# share is the learner's own count (ddiloco_times: seconds in poll over
# seconds between polls). Needs Debian's python3-torch (make test-pytorch
# installs it); skipped without it. Prints key=value lines.
BUILD=${BUILD:-build}
BIN=$BUILD/ddiloco
PY=/usr/bin/python3
if ! "$PY" -c "import torch" 2>/dev/null; then
	echo "pytorch_exchange: skipped (no torch for $PY: make test-pytorch installs it)"
	exit 0
fi
dir=$(mktemp -d /tmp/ddiloco-ptbench-XXXXXX)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/job.yaml" <<YAML
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: ptbench}
spec:
  learners:
    replicas: 1
    command: [$PY, $(pwd)/examples/pytorch/train.py]
  data: {path: /usr/share/games/fortunes}
  optimizer: {lr: 0.001, warmupSteps: 20}
  syncer: {minQuorum: 1, fragments: 4, syncEvery: 4, evalEvery: 1000,
           checkpointEvery: 1000}
  budget: {tokens: 153600}
YAML
"$BIN" run "$dir/job.yaml" --run-dir "$dir/run" --no-chaos --timeout 600 \
	> "$dir/out" 2>&1 || { tail -n 20 "$dir/out" "$dir/run/learner-0.log"; exit 1; }
load=$(cut -d' ' -f1 /proc/loadavg)
sed -n 's/.*poll took \([0-9.]*\) of step time (\([0-9]*\) steps, step \([0-9.]*\) ms, poll \([0-9.]*\) ms).*/pytorch_exchange_overhead=\1\npytorch_steps=\2\npytorch_step_ms=\3\npytorch_poll_ms=\4/p' \
	"$dir/run/learner-0.log" | tail -n 4
echo "pytorch_bench_load=$load"
