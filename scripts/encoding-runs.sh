#!/bin/sh
# The quickstart without chaos (examples/quickstart-nochaos.yaml) once per
# answer/update encoding pair, one run at a time; for each it prints the
# final eval loss and the payload bytes the syncer received and sent
# (report.json bytes.*). docs/figures.md keeps what it printed.
#
#   sh scripts/encoding-runs.sh [ANSWERS/UPDATES/FEEDBACK ...]
#
# Each argument is e.g. int4/f32/true; by default a fixed list. Runs go
# to runs/enc-*; each takes a few minutes on 2 cores.
set -eu
BUILD=${BUILD:-build}
bin=$BUILD/ddiloco
[ -x "$bin" ] || { echo "encoding-runs: build $bin first (make)"; exit 1; }
set -- ${@:-f32/f32/true bf16/f32/true int8/f32/true int4/f32/true \
	int4/f32/false int8/int8/true int4/int4/true}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%-8s %-8s %-8s %10s %12s %12s %7s\n' answers updates feedback \
	eval_loss received sent seconds
for v in "$@"; do
	a=${v%%/*}; rest=${v#*/}; u=${rest%%/*}; fb=${rest#*/}
	name=enc-$a-$u-$fb
	sed -e "s/^  name: .*/  name: $name/" \
	    -e "s/^    outerMomentum: 0.0$/    outerMomentum: 0.0\n    encoding: $a\n    updateEncoding: $u\n    errorFeedback: $fb/" \
	    examples/quickstart-nochaos.yaml > "$tmp/$name.yaml"
	dir=runs/$name-$(date -u +%Y%m%dT%H%M%S)
	"$bin" run "$tmp/$name.yaml" --run-dir "$dir" > "$tmp/$name.log" 2>&1 ||
		{ echo "$name: ddiloco run failed, see $dir"; continue; }
	jq -r --arg a "$a" --arg u "$u" --arg f "$fb" \
		'[$a, $u, $f, (.final_eval_loss | tostring), (.bytes.received | tostring),
		  (.bytes.sent | tostring), (.seconds | floor | tostring)] | @tsv' \
		"$dir/report.json" |
		awk -F'\t' '{ printf "%-8s %-8s %-8s %10.4f %12s %12s %7s\n", $1, $2, $3, $4, $5, $6, $7 }'
done
