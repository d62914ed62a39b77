#!/usr/bin/env bash
# Rolling learners (docs/operator.md, Rolling learners) on the real API
# server, the operator as a local process, pods started by kwok:
#  - a change no pod carries (spec.budget.tokens, the ConfigMap's) once
#    the operator has seen it (observedGeneration): every learner pod is
#    the one it was, no LearnerRolled Event;
#  - the operator restarted with another --runtime-image (an upgrade):
#    every learner pod replaced, with its new spec hash (label
#    ddiloco.io/pod-spec) and image, one at a time: each new pod made no
#    earlier than the one before it was Ready and never fewer than 2 of
#    the 3 Ready in a watch of every change to them, an Event LearnerRolled for
#    each learner, no restart counted, the job Running at the end with
#    status.learners.outdated 0; the syncer's StatefulSet written again
#    with the new image in its template (Event SyncerRolled, once), its
#    pod made again by the StatefulSet controller.
# Needs the variables of /tmp/ddiloco-k8s/env (tests/k8s/run.sh sets them).
set -euo pipefail

: "${KUBECTL:?run through make test-k8s}" "${KUBE_SERVER:?}" "${KUBE_CA:?}" "${KUBECONFIG:?}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

. "$ROOT/tests/k8s/lib.sh"
op_test roll

job() {   # job TOKENS
	cat <<EOF
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: r}
spec:
  learners: {replicas: 3}
  syncer: {storage: "", minQuorum: 2}
  budget: {tokens: $1}
  data: {path: /data/tiny.txt}
EOF
}
# "name uid hash ready-time created-time" a line, by learner index
pods() {
	KN get pods -l ddiloco.io/job=r,ddiloco.io/role=learner -o json | python3 -c '
import json, sys
for p in sorted(json.load(sys.stdin)["items"], key=lambda p: p["metadata"]["name"]):
    ready = [c.get("lastTransitionTime", "-") for c in p.get("status", {}).get("conditions", [])
             if c["type"] == "Ready" and c["status"] == "True"]
    print(p["metadata"]["name"], p["metadata"]["uid"],
          p["metadata"]["labels"].get("ddiloco.io/pod-spec", "-"),
          ready[0] if ready and not p["metadata"].get("deletionTimestamp") else "-",
          p["metadata"]["creationTimestamp"])'
}
running3() {
	[ "$(jp ddjob/r '{.status.phase} {.status.learners.ready}')" = "Running 3" ]
}

apply_crd
"$KUBECTL" create namespace "$NS" >/dev/null
start_operator 0 --no-chaos --runtime-image ddiloco:roll-a
job 1000000 | KN apply -f - >/dev/null || fail "apply job r"
until_ok 60 "job r Running with 3 learners ready" running3
before=$(pods)
echo "$before"
[ "$(echo "$before" | awk '$3 != "-"' | grep -c .)" = 3 ] || fail "learner pods without a spec hash"

# a training setting: the ConfigMap changes, no pod
job 2000000 | KN apply -f - >/dev/null || fail "apply budget.tokens 2000000"
gen=$(jp ddjob/r '{.metadata.generation}')
until_ok 30 "observedGeneration $gen" '[ "$(jp ddjob/r "{.status.observedGeneration}")" = '"$gen"' ]'
until_ok 30 "tokens 2000000 in the ConfigMap" \
	'jp configmap/r-spec "{.data.job\\.json}" | grep -q "\"tokens\": *2000000"'
[ "$(jp ddjob/r '{.status.learners.outdated}')" = 0 ] || fail "outdated learners after a budget change"
[ "$(pods | awk '{print $1, $2}')" = "$(echo "$before" | awk '{print $1, $2}')" ] ||
	fail "a budget change replaced a learner pod"
[ -z "$(KN get events --field-selector reason=LearnerRolled -o name)" ] ||
	fail "LearnerRolled after a budget change"
echo "ok: budget.tokens changed in the ConfigMap, the same 3 learner pods"

# the operator upgraded: its runtime image, in every learner pod, rolled;
# every change to the learner pods watched meanwhile
"$KUBECTL" -n "$NS" get pods -l ddiloco.io/job=r,ddiloco.io/role=learner --watch \
	--output-watch-events -o json >"$WORK/watch.json" 2>/dev/null &
WATCH_PID=$!
extra_cleanup() { kill "$WATCH_PID" 2>/dev/null; }
until_ok 30 "the watch's first events" '[ -s "$WORK/watch.json" ]'
kill "$OP_PID" && wait "$OP_PID" || true
start_operator 0 --no-chaos --runtime-image ddiloco:roll-b
rolled() {
	local now
	now=$(pods)
	[ "$(echo "$now" | awk '$4 != "-"' | grep -c .)" = 3 ] || return 1
	for i in 0 1 2; do
		[ "$(echo "$now" | awk -v n="r-learner-$i" '$1 == n {print $3}')" != \
		  "$(echo "$before" | awk -v n="r-learner-$i" '$1 == n {print $3}')" ] || return 1
	done
	running3
}
until_ok 120 "every learner pod with its new spec, Ready" rolled
after=$(pods)
echo "$after"
prev_ready=""
for i in 0 1 2; do
	line=$(echo "$after" | awk -v n="r-learner-$i" '$1 == n')
	set -- $line
	[ "$2" != "$(echo "$before" | awk -v n="r-learner-$i" '$1 == n {print $2}')" ] ||
		fail "r-learner-$i was not replaced"
	[ "$(jp "pod/r-learner-$i" '{.spec.initContainers[0].image} {.spec.containers[0].image}')" = \
	  "ddiloco:roll-b ddiloco:roll-b" ] || fail "r-learner-$i does not run ddiloco:roll-b"
	# one at a time: made no earlier than the last replacement was Ready
	[ -z "$prev_ready" ] || [[ ! "$5" < "$prev_ready" ]] ||
		fail "r-learner-$i made at $5, before the one before it was Ready ($prev_ready)"
	prev_ready=$4
done
# the fewest learner pods Ready (and not being deleted) at once, event by event
kill "$WATCH_PID" 2>/dev/null || true
fewest=$(python3 "$ROOT/tests/k8s/podwatch.py" fewest "$WORK/watch.json" 3)
echo "watched: the fewest learner pods Ready at once, and the events: $fewest"
set -- $fewest
[ "$1" = 2 ] || fail "the roll left $1 learner pods Ready at once, not 2 (minQuorum 2)"
[ "$2" -ge 12 ] || fail "the watch saw $2 events, fewer than a roll of 3 pods makes"
msgs=$(KN get events --field-selector reason=LearnerRolled -o jsonpath='{range .items[*]}{.message}{"\n"}{end}')
for i in 0 1 2; do
	echo "$msgs" | grep -q "^learner $i: " || fail "no LearnerRolled Event for learner $i: $msgs"
done
[ "$(jp ddjob/r '{.status.learners.restarts}')" = "[0,0,0]" ] ||
	fail "restarts counted for a roll: $(jp ddjob/r '{.status.learners.restarts}')"
[ "$(jp ddjob/r '{.status.learners.outdated}')" = 0 ] || fail "outdated learners after the roll"
until_ok 60 "the syncer's pod with ddiloco:roll-b" \
	'[ "$(jp pod/r-syncer-0 "{.spec.containers[0].image}")" = ddiloco:roll-b ]'
[ "$(jp statefulset/r-syncer '{.spec.template.spec.containers[0].image}')" = ddiloco:roll-b ] ||
	fail "the syncer's StatefulSet still has $(jp statefulset/r-syncer '{.spec.template.spec.containers[0].image}')"
nsr=$(KN get events --field-selector reason=SyncerRolled -o name | grep -c . || true)
[ "$nsr" = 1 ] || fail "$nsr SyncerRolled Events, not 1"
echo "ok: 3 learner pods rolled one at a time to ddiloco:roll-b, no restart counted; the syncer rolled once"
echo "test_roll: ok"
