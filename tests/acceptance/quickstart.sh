#!/bin/sh
# The quickstart acceptance (several minutes; not part of `make test`):
# examples/quickstart.yaml with a learner killed about every 20 s, its
# no-chaos twin and its data-parallel baseline. Passes when
#   uptime >= 0.99,
#   final eval loss within 3% of the twin's and within 5% of the baseline's.
# Prints the figures; the report is in the run folder (argument 1, default
# runs/acceptance-<UTC time>).
set -eu
BIN=${BUILD:-build}/ddiloco
dir=${1:-runs/acceptance-$(date -u +%Y%m%dT%H%M%SZ)}
"$BIN" run examples/quickstart.yaml --twin --baseline --run-dir "$dir"
rep="$dir/report.json"
jq -r '"uptime \(.uptime)  goodput \(.goodput)  kills \(.kills.total)  rounds \(.rounds)  tokens \(.tokens)",
       "final eval loss \(.final_eval_loss)",
       "twin \(.twin.final_eval_loss)  ratio \(.twin.loss_ratio)",
       "baseline \(.baseline.final_eval_loss)  ratio \(.baseline.loss_ratio)",
       "bytes exchanged \(.bytes.exchanged)  data parallel \(.bytes.data_parallel)  ratio \(.bytes.ratio)"' "$rep"
ok=1
jq -e '.uptime >= 0.99' "$rep" > /dev/null || { echo "FAIL: uptime below 0.99"; ok=0; }
jq -e '.kills.learners >= 3' "$rep" > /dev/null || { echo "FAIL: fewer than 3 learner kills"; ok=0; }
jq -e '.twin.within_tolerance == true' "$rep" > /dev/null || { echo "FAIL: not within 3% of the no-chaos twin"; ok=0; }
jq -e '.baseline.within_tolerance == true' "$rep" > /dev/null || { echo "FAIL: not within 5% of the data-parallel baseline"; ok=0; }
[ "$ok" -eq 1 ] && echo "acceptance: pass" || { echo "acceptance: FAIL"; exit 1; }
