# Sourced by test_e2e.sh (its helpers, namespace and operator): job
# e2e-pytorch, examples/pytorch/e2e.yaml, two PyTorch learners of a model
# ddiloco does not know (the MLP of examples/pytorch/external.py,
# spec.model.kind external) through real pods. The learner containers run
# the image ddiloco-pytorch (make image-pytorch), which holds no ddiloco
# (checked here: no package, binary or library); the syncer, the sidecars
# and the init containers that copy the learner library in run the
# runtime image ddiloco:latest (docs/operator.md, Images); both imported
# into the node's containerd by test_e2e.sh. Asserted: Succeeded; the node
# started the two learner containers from the PyTorch image and the
# syncer, both sidecars and both copies from the runtime image; the
# learner container ran the job's command (python3 external.py) with
# DDILOCO_LIB naming the copy; the syncer took one learner's weights as the
# initial model and merged rounds to the budget; each learner's loss at
# the end is below a tenth of the higher of the two learners' losses at
# their first step (the learners' logs);
# both printed "job done".
PJOB=e2e-pytorch
PJOB_FILE=$ROOT/examples/pytorch/e2e.yaml
PDEADLINE=${E2E_PYTORCH_TIMEOUT:-600}
PIMAGE=$(sed -n 's/^ *image: \(ddiloco-pytorch:.*\)$/\1/p' "$PJOB_FILE")

# follow POD CONTAINER FILE: the container's log from its start, once it
# runs (the operator deletes the job's pods, and their logs, when it ends)
follow() {
	local n=0
	while [ $n -lt $((2 * PDEADLINE)) ]; do
		K -n "$NS" logs -f "$1" -c "$2" >"$3" 2>/dev/null && [ -s "$3" ] && return
		n=$((n + 1))
		sleep 0.5
	done
}

bare=$(docker run --pull never --rm --network none --entrypoint /usr/bin/python3 "$PIMAGE" -c '
import ctypes.util, importlib.util, shutil
print(" ".join(w for w, f in (("package", importlib.util.find_spec("ddiloco")),
      ("binary", shutil.which("ddiloco")), ("library", ctypes.util.find_library("ddiloco"))) if f))' 2>&1)
check "$PIMAGE holds no ddiloco package, binary or library (found: ${bare:-none})" '[ -z "$bare" ]'
pv_for $PJOB || fail "the checkpoint volume of $PJOB"
echo "--- load before job $PJOB: $(uptime)"
t_apply=$(now) t_printed=0
K -n "$NS" apply -f "$PJOB_FILE" || fail "kubectl apply -f examples/pytorch/e2e.yaml"
PLOG=$WORK/$PJOB-syncer.log
follow $PJOB-syncer-0 syncer "$PLOG" &
ppids=$!
for i in 0 1; do
	follow $PJOB-learner-$i learner "$WORK/$PJOB-learner-$i.log" &
	ppids="$ppids $!"
done
pt_first="" pt_ready="" pcmd=""
end=$(($(date +%s) + PDEADLINE))
while :; do
	phase=$(jp ddjob/$PJOB '{.status.phase}')
	[ "$phase" = Succeeded ] || [ "$phase" = Failed ] && break
	[ "$(date +%s)" -lt "$end" ] || { bad "job $PJOB did not finish within $PDEADLINE s"; break; }
	# the learner container as the operator made it, while its pod exists
	[ -n "$pcmd" ] ||
		pcmd=$(jp pod/$PJOB-learner-0 '{.spec.containers[?(@.name=="learner")].image} {.spec.containers[?(@.name=="learner")].command} {.spec.containers[?(@.name=="learner")].env[?(@.name=="DDILOCO_LIB")].value}')
	if [ -z "$pt_ready" ] &&
		[ "$(K -n "$NS" get pods -l ddiloco.io/job=$PJOB -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null |
			grep -c '^True$')" -ge 3 ]; then
		pt_ready=$(elapsed "$t_apply")
		say "job $PJOB: its 3 pods Ready $pt_ready s after kubectl apply"
		echo "--- kubectl get pods -o wide ($PJOB)"
		K -n "$NS" get pods -l ddiloco.io/job=$PJOB -o wide
	fi
	if [ -z "$pt_first" ]; then
		st=$(status_json $PJOB || true)
		if [ -n "$st" ] && [ "$(echo "$st" | py 'import json,sys; print(int(json.load(sys.stdin)["answers"]["merged"] > 0))' 2>/dev/null)" = 1 ]; then
			pt_first=$(elapsed "$t_apply")
			say "job $PJOB: first merged round $pt_first s after kubectl apply"
		fi
	fi
	print_ddjobs
	sleep 1
done
pt_job=$(elapsed "$t_apply")
# the followers end with the pods; a last moment for their final lines
sleep 2
for p in $ppids; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
echo "--- load after job $PJOB: $(uptime)"
echo "--- kubectl get ddjob $PJOB (end, $pt_job s)"
K -n "$NS" get ddjob $PJOB
echo "--- the syncer's log of job $PJOB: its start and end"
grep -E "initial model|joined|budget reached|job done" "$PLOG" | head -20
for i in 0 1; do
	echo "--- learner $i of $PJOB: its log"
	tail -n 6 "$WORK/$PJOB-learner-$i.log"
done

phase=$(jp ddjob/$PJOB '{.status.phase}')
check "job $PJOB: phase Succeeded (is $phase, $pt_job s)" '[ "$phase" = Succeeded ]'
# the kubelet's word: each container started from the image, present on
# the node (imported, never pulled)
K -n "$NS" get events --field-selector reason=Pulled \
	-o jsonpath='{range .items[*]}{.involvedObject.name} {.message}{"\n"}{end}' 2>/dev/null |
	grep "^$PJOB-" >"$WORK/$PJOB-pulled.txt"
pimgs=$(grep -c "\"$PIMAGE\" already present" "$WORK/$PJOB-pulled.txt")
rimgs=$(grep -c "\"ddiloco:latest\" already present" "$WORK/$PJOB-pulled.txt")
check "job $PJOB: the learners started from $PIMAGE ($pimgs of 2 containers)" \
	'[ "$pimgs" -ge 2 ]'
check "job $PJOB: the syncer, the sidecars and the library's copies from ddiloco:latest ($rimgs of 5 containers)" \
	'[ "$rimgs" -ge 5 ]'
check "job $PJOB: the learner container ran the job's command with the copied library ($pcmd)" \
	'[ "$pcmd" = "$PIMAGE [\"/usr/bin/python3\",\"/opt/ddiloco/examples/pytorch/external.py\"] /opt/ddiloco-runtime/lib/libddiloco.so" ]'
seeder=$(sed -n "s/.*learner \([0-9]\)'s weights are the job's initial model.*/\1/p" "$PLOG" | head -n 1)
check "job $PJOB: the syncer took learner ${seeder:-?}'s weights as the job's initial model" \
	'[ -n "$seeder" ]'
budget=$(grep -m1 "budget reached" "$PLOG")
prounds=$(echo "$budget" | sed -n 's/.*budget reached: round \([0-9]*\),.*/\1/p')
check "job $PJOB: the syncer reached the budget after ${prounds:-no} rounds (${budget#*: })" \
	'[ "${prounds:-0}" -ge 10 ]'
fell=0 pl=""
# a learner that joined late starts at the job's step, its loss already
# low: both are held to the higher of the two first losses
first=0
for i in 0 1; do
	l1=$(sed -n 's/.*: first step [0-9]*, loss \([0-9.]*\).*/\1/p' \
		"$WORK/$PJOB-learner-$i.log" | head -n 1)
	first=$(awk -v a="${l1:-0}" -v b="$first" 'BEGIN { print (a > b ? a : b) }')
done
for i in 0 1; do
	lf=$WORK/$PJOB-learner-$i.log
	l1=$(sed -n 's/.*: first step \([0-9]*\), loss \([0-9.]*\).*/\2 (step \1)/p' "$lf" | head -n 1)
	le=$(sed -n 's/.*: job done at step \([0-9]*\), loss \([0-9.]*\).*/\2 (step \1)/p' "$lf" | head -n 1)
	pl="$pl learner $i: ${l1:-?} -> ${le:-?};"
	awk -v a="$first" -v b="${le%% *}" 'BEGIN { exit !(a > 0 && b != "" && b < a / 10) }' &&
		fell=$((fell + 1))
done
say "job $PJOB: loss at the first step -> at the end:$pl"
check "job $PJOB: both learners printed job done, their loss below a tenth of the higher first loss $first ($fell of 2:$pl)" \
	'[ "$fell" -eq 2 ]'

# --- job e2e-abi: a learner library of another ABI ------------------------
# The same job with DDILOCO_TEST_ABI_VERSION=99 in the learners' template:
# their library speaks ABI 99 where it meets the sidecar (ABI 1), as a
# library of another release would (docs/abi.md, Versions). Asserted: the
# job Fails with reason VersionMismatch, its condition VersionMismatch
# naming both versions; no learner pod restarted in a loop.
AJOB=e2e-abi
python3 - "$PJOB_FILE" "$AJOB" >"$WORK/$AJOB.yaml" <<'PYEOF' || fail "the ABI job's file"
import sys, yaml
j = yaml.safe_load(open(sys.argv[1]))
j["metadata"]["name"] = sys.argv[2]
j["spec"]["syncer"]["storage"] = ""
j["spec"]["learners"]["template"] = {"spec": {"containers": [
    {"name": "learner", "env": [{"name": "DDILOCO_TEST_ABI_VERSION", "value": "99"}]}]}}
yaml.safe_dump(j, sys.stdout, sort_keys=False)
PYEOF
t_apply=$(now)
K -n "$NS" apply -f "$WORK/$AJOB.yaml" >/dev/null || fail "kubectl apply $AJOB"
end=$(($(date +%s) + 300))
while :; do
	phase=$(jp ddjob/$AJOB '{.status.phase}')
	[ "$phase" = Failed ] || [ "$phase" = Succeeded ] && break
	[ "$(date +%s)" -lt "$end" ] || { bad "job $AJOB did not end within 300 s"; break; }
	sleep 1
done
at_job=$(elapsed "$t_apply")
reason=$(jp ddjob/$AJOB '{.status.conditions[?(@.type=="Failed")].reason}')
vm=$(jp ddjob/$AJOB '{.status.conditions[?(@.type=="VersionMismatch")].message}')
say "job $AJOB: $phase ($reason) after $at_job s; VersionMismatch: $vm"
check "job $AJOB: Failed, reason VersionMismatch (is $phase, $reason)" \
	'[ "$phase" = Failed ] && [ "$reason" = VersionMismatch ]'
check "job $AJOB: its condition names both versions (ABI 99 and ABI 1)" \
	'case "$vm" in *"ABI 99"*"ABI 1,"*) true ;; *) false ;; esac'
K -n "$NS" delete ddjob $AJOB --wait=false >/dev/null 2>&1
