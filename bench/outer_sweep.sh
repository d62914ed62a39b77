#!/bin/sh
# The outer optimizer and encodings at long H, by measurement: runs a job
# once per configuration (without chaos) against its tuned data-parallel
# baseline (computed once, then read from its cache, docs/run.md) and prints
# one table row per run:
#   config  H  eta  mu  nesterov  answers  updates  rounds  H_run  bytes/DP  loss  loss/DP
# H_run = the syncer's pace.h_effective (docs/status.md), else learner
# steps × P / rounds with learner steps = tokens / (M·B·T).
# Usage: sh bench/outer_sweep.sh [JOB] [CONFIG ...]
#   JOB     default examples/lowbandwidth.yaml
#   CONFIG  key=value[,key=value...] over spec.syncer fields that the job
#           file sets, e.g. syncEvery=128,outerLr=0.7,outerMomentum=0.9
# Without configs it runs the default grid below. Each run takes about as
# long as the job (minutes); the run folders stay in runs/sweep-*.
set -eu
BUILD=${BUILD:-build}
BIN=$BUILD/ddiloco
job=${1:-examples/lowbandwidth.yaml}
[ $# -gt 0 ] && shift
if [ $# -eq 0 ]; then
	set -- \
		outerLr=1.0,outerMomentum=0.0 \
		outerLr=0.7,outerMomentum=0.9 \
		outerLr=0.7,outerMomentum=0.5 \
		outerLr=1.0,outerMomentum=0.5 \
		outerLr=0.5,outerMomentum=0.8
fi
stamp=$(date -u +%Y%m%dT%H%M%SZ)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# the job file with spec.syncer's keys replaced; a key the file lacks is an error
variant() {
	cp "$job" "$tmp/job.yaml"
	echo "$1" | tr ',' '\n' | while IFS='=' read -r k v; do
		grep -q "^    $k:" "$tmp/job.yaml" ||
			{ echo "outer_sweep: $job has no spec.syncer.$k" >&2; exit 1; }
		sed -i "s|^    $k:.*|    $k: $v|" "$tmp/job.yaml"
	done
}

printf '%-44s %4s %5s %5s %5s %6s %6s %6s %8s %8s %7s %7s\n' config H eta mu nest answ upd rounds H_run bytes/DP loss loss/DP
for cfg in "$@"; do
	variant "$cfg"
	dir=runs/sweep-$stamp-$(echo "$cfg" | tr ',=' '_-')
	if ! "$BIN" run "$tmp/job.yaml" --no-chaos --baseline --run-dir "$dir" \
		> "$tmp/out" 2>&1; then
		echo "$cfg: run failed; see $dir" >&2
		tail -n 5 "$tmp/out" >&2
		continue
	fi
	y() { sed -n "s/^    $1: *//p" "$tmp/job.yaml" | head -n 1; }
	y2() { sed -n "s/^ *$1: *//p" "$tmp/job.yaml" | head -n 1; }
	jq -r --arg c "$cfg" --arg h "$(y syncEvery)" --arg eta "$(y outerLr)" \
		--arg mu "$(y outerMomentum)" --arg n "$(y nesterov)" \
		--arg a "$(y encoding)" --arg u "$(y updateEncoding)" \
		--argjson mbt "$(($(y2 replicas) * $(y2 batchSize) * $(y2 context)))" \
		--argjson p "$(y fragments)" '
		[$c, $h, $eta, $mu, $n, $a, $u, (.rounds | tostring),
		 ((.pace.h_effective // (if .rounds > 0 then .tokens / $mbt * $p / .rounds else null end))
		 | if . == null then "-" else (. * 10 | round / 10 | tostring) end),
		 (.bytes.ratio | . * 100000 | round / 100000 | tostring),
		 (.final_eval_loss | tostring),
		 (.baseline.loss_ratio | . * 10000 | round / 10000 | tostring)] | @tsv' \
		"$dir/report.json" |
		awk -F'\t' '{ printf "%-44s %4s %5s %5s %5s %6s %6s %6s %8s %8s %7s %7s\n",
			$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12 }'
done
