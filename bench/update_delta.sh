#!/bin/sh
# Updates as deltas against whole updates (docs/protocol.md, Updates as
# deltas): the quickstart without chaos (examples/quickstart-nochaos.yaml,
# int8 answers) run with its bf16 whole updates, then with int8 and int4
# deltas (spec.syncer.updateDelta), REPS times each in turn, one line per
# run:
#   update_delta config=C rep=R eval_loss=L bytes=B bytes_vs_dp=X
# bytes: the payload bytes the syncer received and sent (report.json
# bytes.exchanged); bytes_vs_dp: over data parallel's f32 ring all-reduce
# for the same tokens. Each run takes about as long as the quickstart
# (a minute or two); the run folders stay in runs/update-delta-*.
# Usage: [REPS=1] sh bench/update_delta.sh
set -eu
BUILD=${BUILD:-build}
REPS=${REPS:-1}
out=runs/update-delta-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$out"
job() {   # job NAME ENCODING DELTA
	sed -e "s/name: quickstart-nochaos/name: ud-$1/" \
	    -e "s/    updateEncoding: bf16/    updateEncoding: $2\n    updateDelta: $3/" \
	    examples/quickstart-nochaos.yaml > "$out/$1.yaml"
	grep -q "updateDelta: $3" "$out/$1.yaml"
}
job whole-bf16 bf16 false
job delta-int8 int8 true
job delta-int4 int4 true
for rep in $(seq 1 "$REPS"); do
	for c in whole-bf16 delta-int8 delta-int4; do
		"$BUILD/ddiloco" run "$out/$c.yaml" --run-dir "$out/$c-$rep" \
			--no-chaos > "$out/$c-$rep.out" 2>&1
		/usr/bin/python3 - "$out/$c-$rep/report.json" "$c" "$rep" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
b = r["bytes"]
print("update_delta config=%s rep=%s eval_loss=%.4f bytes=%d bytes_vs_dp=%.5f"
      % (sys.argv[2], sys.argv[3], r["final_eval_loss"], b["exchanged"], b["ratio"]))
PY
	done
done
