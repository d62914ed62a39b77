# Sourced by the tests that watch a live `ddiloco run` (test_stale,
# test_poison, test_checkpoint_faults, test_partition); sources report.sh
# (field, sub: report.json).
#   live_init NAME   sets BIN (BUILD's ddiloco), REAL (its full path), dir
#                    (a new folder /tmp/ddiloco-NAME-*), run (the run
#                    folder in it) and runner (empty until the run
#                    starts), and makes live_cleanup the EXIT trap
#   live_exe [LINE] writes $dir/exe, the runner's DDILOCO_EXE: it
#                    records the syncer's HTTP address ($dir/http), pid
#                    ($dir/syncer.pid) and start count ($dir/starts), and
#                    each learner's and sidecar's pid ($dir/learner-ID.pid,
#                    $dir/sidecar-ID.pid); LINE, shell
#                    run before a syncer starts, sees its count in $n
#   live_run SECONDS starts `ddiloco run $dir/job.yaml` without chaos
#                    through $dir/exe in the background (runner), its
#                    output in $dir/out, --timeout SECONDS
#   live_done        waits for the runner: it must exit 0 with the job
#                    done, steps merged and none twice; sets rep (the
#                    report), steps and twice (field, sub: report.sh)
#   live_cleanup     resumes any process the test stopped (SIGSTOP) of
#                    those it recorded, stops the runner, removes $dir
#                    (the EXIT trap)
#   fail WHAT        says WHAT and the ends of the run's logs; exit 1
#   status           the syncer's /status; metrics: its /metrics
#   metric NAME      the value of ddiloco_syncer_NAME
#   wait_for SECONDS CONDITION WHAT
#                    polls CONDITION every 0.2 s; fails when the run
#                    ends or SECONDS pass first
#   now              saves the syncer's /status as $dir/s.json
#   s JQ             a field of $dir/s.json
#   live_job NAME LEARNERS SYNCER TOKENS
#                    writes $dir/job.yaml: the tiny GPT on fortunes with
#                    LEARNERS replicas, spec.syncer SYNCER (a YAML flow
#                    mapping's inside) and a budget of TOKENS
. "$(dirname "$0")/report.sh"

live_init() {
	BIN=${BUILD:-build}/ddiloco
	REAL=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
	dir=$(mktemp -d "/tmp/ddiloco-$1-XXXXXX")
	run=$dir/run
	runner=""
	trap live_cleanup EXIT
}
live_run() {
	DDILOCO_EXE=$dir/exe "$BIN" run "$dir/job.yaml" --run-dir "$run" --no-chaos \
		--timeout "$1" > "$dir/out" 2>&1 &
	runner=$!
}
live_done() {
	rc=0
	wait "$runner" || rc=$?
	runner=""
	[ "$rc" -eq 0 ] || { tail -n 20 "$dir/out"; fail "run exited $rc"; }
	rep=$run/report.json
	[ "$(field outcome "$rep")" = '"done"' ] || fail "outcome $(field outcome "$rep")"
	steps=$(sub invariants merged_steps "$rep")
	twice=$(sub invariants double_merged_steps "$rep")
	[ "$steps" -gt 0 ] || fail "no step merged"
	[ "$twice" -eq 0 ] || fail "$twice learner steps merged twice"
}
live_cleanup() {
	for f in "$dir"/*.pid; do
		[ -f "$f" ] && kill -CONT "$(cat "$f")" 2>/dev/null || :
	done
	if [ -n "$runner" ]; then
		kill "$runner" 2>/dev/null || :
		wait "$runner" 2>/dev/null || :
	fi
	rm -rf "$dir"
}
fail() {
	echo "FAIL: $*"
	[ -f "$run/syncer.log" ] && { echo "--- syncer.log"; tail -n 30 "$run/syncer.log";
		grep "audit:" "$run/syncer.log" | head -n 5 || :; }
	[ -f "$run/events.log" ] && { echo "--- events.log"; tail -n 15 "$run/events.log"; }
	exit 1
}
status() { curl -sf --max-time 2 "http://$(cat "$dir/http")/status"; }
metrics() { curl -sf --max-time 2 "http://$(cat "$dir/http")/metrics"; }
metric() { metrics | sed -n "s/^ddiloco_syncer_$1 //p"; }
wait_for() {
	i=0
	while ! eval "$2" 2>/dev/null; do
		kill -0 "$runner" 2>/dev/null || fail "the run ended waiting for $3"
		i=$((i + 1))
		[ "$i" -le $(($1 * 5)) ] || fail "no $3 within $1 s"
		sleep 0.2
	done
}
now() { status > "$dir/s.json"; }
s() { jq -r "$1" "$dir/s.json"; }
live_exe() {
	cat > "$dir/exe" <<EOF
#!/bin/sh
prev=""
for a in "\$@"; do
	[ "\$1" = syncer ] && [ "\$prev" = --http ] && echo "\$a" > "$dir/http"
	[ "\$1" = learner ] && [ "\$prev" = --learner ] && echo "\$\$" > "$dir/learner-\$a.pid"
	[ "\$1" = sidecar ] && [ "\$prev" = --learner ] && echo "\$\$" > "$dir/sidecar-\$a.pid"
	prev=\$a
done
if [ "\$1" = syncer ]; then
	n=\$(( \$(cat "$dir/starts" 2>/dev/null || echo 0) + 1 ))
	echo "\$\$" > "$dir/syncer.pid"
	echo "\$n" > "$dir/starts"
	${1:-:}
fi
exec "$REAL" "\$@"
EOF
	chmod +x "$dir/exe"
}
live_job() {
	cat > "$dir/job.yaml" <<YAML
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata:
  name: $1
spec:
  learners: {replicas: $2}
  model: {context: 32, layers: 1, heads: 2, channels: 32}
  data: {path: /usr/share/games/fortunes, valFraction: 0.05}
  optimizer: {lr: 0.005, warmupSteps: 5, batchSize: 8}
  syncer: {$3}
  budget: {tokens: $4}
YAML
}
