#!/usr/bin/env bash
# The failure policy (docs/operator.md, "Failure policy") on the real API
# server, the operator as a local process, pods on the kwok nodes:
#  - job a (backoffLimit 1): two learner pods evicted through the
#    Eviction API (the API server marks them DisruptionTarget and deletes
#    them) are recreated and never counted: status.learners.failures stays
#    0 while restarts grow and the job keeps Running; then two learner
#    pods that end Failed with exit code 1 (their status written as a
#    kubelet would) are counted and the second passes backoffLimit:
#    Failed, reason BackoffLimitExceeded;
#  - job d (backoffLimit 1, failurePolicy.backoffResetSeconds 8): a
#    failure counted ([1,0]) is forgotten 8 s after the replacement is
#    ready ([0,0], Event BackoffReset, not before 8 s), so a second
#    failure after that leaves the job Running ([1,0]);
#  - job r (failurePolicy.rules): a learner that exits 143 is not
#    counted, one that exits 42 fails the job: PodFailurePolicy;
#  - job l: a learner pod deleted on a node no kubelet answers for stays
#    Terminating; 30 s after its grace period the operator deletes it
#    with grace 0 and recreates it (LearnerForceDeleted), not counted;
#  - job s: the syncer's pod, there too, stays Terminating; 30 s after
#    its grace period the operator deletes it with grace 0
#    (SyncerForceDeleted) and the StatefulSet controller makes it again;
#  - job b (activeDeadlineSeconds 15): Failed, reason DeadlineExceeded,
#    its pods and syncer deleted;
#  - job c (syncerRestartLimit 2): its syncer container's restartCount
#    going to 3 within the window (written as a kubelet would) fails it:
#    SyncerCrashLooping with the last exit's reason.
# Needs the variables of /tmp/ddiloco-k8s/env (tests/k8s/run.sh sets them).
set -euo pipefail

: "${KUBECTL:?run through make test-k8s}" "${KUBE_SERVER:?}" "${KUBE_CA:?}" "${KUBECONFIG:?}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

. "$ROOT/tests/k8s/lib.sh"
op_test failure
LOST=lost-$NS           # a node no kubelet (and no kwok) answers for
extra_cleanup() { "$KUBECTL" delete node "$LOST" --wait=false >/dev/null 2>&1; }

job() {   # job NAME SPEC-LINES
	cat <<EOF
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: $1}
spec:
  learners: {replicas: 2}
  syncer: {storage: ""}
  data: {path: /data/tiny.txt}
$2
EOF
}
running() { [ "$(jp "pod/$1" '{.status.phase}')" = Running ]; }
uid_of() { jp "pod/$1" '{.metadata.uid}'; }
evict() {   # the Eviction API, as kubectl drain uses it
	"$KUBECTL" create --raw "/api/v1/namespaces/$NS/pods/$1/eviction" -f - >/dev/null <<EOF
{"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "$1", "namespace": "$NS"}}
EOF
}
crash() {   # crash POD [CODE]: it ends Failed, its learner exited CODE (1)
	KN patch pod "$1" --subresource=status --type=merge -p '{"status": {"phase": "Failed",
	  "conditions": [{"type": "Ready", "status": "False"}],
	  "containerStatuses": [{"name": "learner", "image": "ddiloco:latest", "imageID": "", "ready": false,
	    "restartCount": 0, "state": {"terminated": {"exitCode": '"${2:-1}"', "reason": "Error"}}}]}}' >/dev/null
}
new_uid() {   # new_uid POD OLD-UID: the pod is back with another uid, Running
	local u
	u=$(uid_of "$1")
	[ -n "$u" ] && [ "$u" != "$2" ] && running "$1"
}

apply_crd
"$KUBECTL" create namespace "$NS" >/dev/null
start_operator

# --- job a: disruptions are not failures; failures are ---------------------
job a "  backoffLimit: 1" | KN apply -f - >/dev/null || fail "apply job a"
until_ok 90 "job a Running" '[ "$(jp ddjob/a "{.status.phase}")" = Running ]'
for i in 0 1; do
	u=$(uid_of a-learner-$i)
	evict a-learner-$i || fail "evict a-learner-$i"
	until_ok 60 "a-learner-$i back after its eviction" new_uid a-learner-$i "$u"
done
# each evicted learner recreated; kwok's second delete by name can land
# on a replacement before it is bound, and its recreation counts too
# (docs/k8s-testing.md: one CI run ended [1,2]), so at least 1 each
restarted() {
	local r
	r=$(jp ddjob/a '{.status.learners.restarts}')
	[[ $r =~ ^\[([0-9]+),([0-9]+)\]$ ]] &&
		[ "${BASH_REMATCH[1]}" -ge 1 ] && [ "${BASH_REMATCH[2]}" -ge 1 ]
}
until_ok 30 "job a: both learners restarted in status" restarted
restarts=$(jp ddjob/a '{.status.learners.restarts}')
[ "$restarts" = "[1,1]" ] ||
	echo "note: restarts $restarts: a replacement was deleted by kwok's second delete and recreated"
[ "$(jp ddjob/a '{.status.learners.failures}')" = "[0,0]" ] ||
	fail "evictions counted as failures: $(jp ddjob/a '{.status.learners.failures}')"
[ "$(jp ddjob/a '{.status.phase}')" = Running ] || fail "job a not Running after evictions"
KN get events --field-selector involvedObject.name=a,reason=LearnerDisrupted -o name | grep -q . ||
	echo "note: evicted pods went before they showed Failed (no LearnerDisrupted Event needed)"
echo "ok: 2 evictions recreated, restarts $restarts, failures [0,0], still Running"

u=$(uid_of a-learner-0)
crash a-learner-0 || fail "crash a-learner-0"
until_ok 60 "a-learner-0 back after its failure" new_uid a-learner-0 "$u"
until_ok 30 "job a: 1 failure" '[ "$(jp ddjob/a "{.status.learners.failures}")" = "[1,0]" ]'
[ "$(jp ddjob/a '{.status.phase}')" = Running ] || fail "one failure (backoffLimit 1) ended job a"
crash a-learner-1 || fail "crash a-learner-1"
until_ok 60 "job a Failed" '[ "$(jp ddjob/a "{.status.phase}")" = Failed ]'
reason=$(jp ddjob/a '{.status.conditions[?(@.type=="Failed")].reason}')
[ "$reason" = BackoffLimitExceeded ] || fail "job a Failed with reason '$reason'"
echo "ok: job a Failed after 2 failures: $(jp ddjob/a '{.status.conditions[?(@.type=="Failed")].message}')"

# --- job d: the count decays after backoffResetSeconds ready ---------------
job d "  backoffLimit: 1
  failurePolicy: {backoffResetSeconds: 8}" | KN apply -f - >/dev/null || fail "apply job d"
until_ok 90 "job d Running" '[ "$(jp ddjob/d "{.status.phase}")" = Running ]'
u=$(uid_of d-learner-0)
crash d-learner-0 || fail "crash d-learner-0"
until_ok 60 "d-learner-0 back after its failure" new_uid d-learner-0 "$u"
until_ok 30 "job d: 1 failure" '[ "$(jp ddjob/d "{.status.learners.failures}")" = "[1,0]" ]'
ready_at=$(date -d "$(jp pod/d-learner-0 '{.status.conditions[?(@.type=="Ready")].lastTransitionTime}')" +%s) ||
	fail "d-learner-0 has no Ready time"
# not forgotten before 8 s ready (a slow poll may be past it: then not checked)
if [ $(($(date +%s) - ready_at)) -lt 6 ]; then
	sleep 2
	[ "$(jp ddjob/d '{.status.learners.failures}')" = "[1,0]" ] ||
		fail "job d: failure forgotten $(($(date +%s) - ready_at)) s after ready, before 8 s"
else
	echo "job d: NOT CHECKED that the failure stands before 8 s: the poll came $(($(date +%s) - ready_at)) s after ready"
fi
until_ok 40 "job d: the failure forgotten" '[ "$(jp ddjob/d "{.status.learners.failures}")" = "[0,0]" ]'
took=$(($(date +%s) - ready_at))
[ "$took" -ge 8 ] || fail "job d: failure forgotten $took s after ready, before backoffResetSeconds 8"
KN get events --field-selector involvedObject.name=d,reason=BackoffReset -o name | grep -q . ||
	fail "no BackoffReset Event on job d"
# a second failure now is the first again: backoffLimit 1 is not passed
u=$(uid_of d-learner-0)
crash d-learner-0 || fail "crash d-learner-0 again"
until_ok 60 "d-learner-0 back after its second failure" new_uid d-learner-0 "$u"
until_ok 30 "job d: 1 failure again" '[ "$(jp ddjob/d "{.status.learners.failures}")" = "[1,0]" ]'
sleep 2
[ "$(jp ddjob/d '{.status.phase}')" = Running ] ||
	fail "job d $(jp ddjob/d '{.status.phase}') after 2 failures 8 s apart (backoffLimit 1, reset 8 s)"
echo "ok: job d: failures [1,0] -> [0,0] $took s after ready (BackoffReset), a later failure [1,0], still Running"

# --- job r: exit-code rules: 143 ignored, 42 fails the job -----------------
job r "  failurePolicy:
    rules:
      - {action: Ignore, onExitCodes: {operator: In, values: [143]}}
      - {action: FailJob, onExitCodes: {operator: In, values: [42]}}" |
	KN apply -f - >/dev/null || fail "apply job r"
until_ok 90 "job r Running" '[ "$(jp ddjob/r "{.status.phase}")" = Running ]'
u=$(uid_of r-learner-0)
crash r-learner-0 143 || fail "crash r-learner-0"
until_ok 60 "r-learner-0 back after exit 143" new_uid r-learner-0 "$u"
[ "$(jp ddjob/r '{.status.learners.failures}')" = "[0,0]" ] ||
	fail "exit 143 counted: $(jp ddjob/r '{.status.learners.failures}')"
crash r-learner-1 42 || fail "crash r-learner-1"
until_ok 60 "job r Failed" '[ "$(jp ddjob/r "{.status.phase}")" = Failed ]'
reason=$(jp ddjob/r '{.status.conditions[?(@.type=="Failed")].reason}')
[ "$reason" = PodFailurePolicy ] || fail "job r Failed with reason '$reason'"
echo "ok: job r: exit 143 ignored, exit 42 failed it: $(jp ddjob/r '{.status.conditions[?(@.type=="Failed")].message}')"

# --- job l: a learner pod Terminating on a node that does not answer -------
node_without_kubelet "$LOST" || fail "create node $LOST"
# jobs l and s wait out the same 30 s side by side
KN apply -f - >/dev/null <<EOF || fail "apply job l"
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: l}
spec:
  backoffLimit: 0
  learners:
    replicas: 2
    template:
      spec:
        nodeSelector: {kubernetes.io/hostname: $LOST}
        tolerations: [{operator: Exists}]
  syncer: {storage: ""}
  data: {path: /data/tiny.txt}
EOF
# --- job s: the syncer's pod Terminating on that node -------------------------
KN apply -f - >/dev/null <<EOF || fail "apply job s"
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: s}
spec:
  learners: {replicas: 1}
  syncer:
    storage: ""
    nodeSelector: {kubernetes.io/hostname: $LOST}
    tolerations: [{operator: Exists}]
  data: {path: /data/tiny.txt}
EOF
until_ok 60 "l-learner-0 bound to $LOST" '[ "$(jp pod/l-learner-0 "{.spec.nodeName}")" = "$LOST" ]'
until_ok 60 "s-syncer-0 bound to $LOST" '[ "$(jp pod/s-syncer-0 "{.spec.nodeName}")" = "$LOST" ]'
ul=$(uid_of l-learner-0)
us=$(uid_of s-syncer-0)
tl=$(date +%s)
KN delete pod l-learner-0 --wait=false >/dev/null || fail "delete l-learner-0"
ts=$(date +%s)
# a grace period of 1 s: the force delete comes 31 s after the delete
KN delete pod s-syncer-0 --grace-period=1 --wait=false >/dev/null || fail "delete s-syncer-0"
until_ok 30 "l-learner-0 Terminating" '[ -n "$(jp pod/l-learner-0 "{.metadata.deletionTimestamp}")" ]'
until_ok 30 "s-syncer-0 Terminating" '[ -n "$(jp pod/s-syncer-0 "{.metadata.deletionTimestamp}")" ]'
until_ok 90 "s-syncer-0 made again" '[ -n "$(uid_of s-syncer-0)" ] && [ "$(uid_of s-syncer-0)" != "$us" ]'
took_s=$(($(date +%s) - ts))
until_ok 90 "l-learner-0 replaced" '[ -n "$(uid_of l-learner-0)" ] && [ "$(uid_of l-learner-0)" != "$ul" ]'
took=$(($(date +%s) - tl))
KN get events --field-selector involvedObject.name=l,reason=LearnerForceDeleted -o name | grep -q . ||
	fail "no LearnerForceDeleted Event"
[ "$took" -ge 38 ] || fail "l-learner-0 replaced after $took s, before its grace (10 s) and 30 s more"
[ "$(jp ddjob/l '{.status.learners.failures}')" = "[0,0]" ] || fail "the lost pod counted as a failure"
echo "ok: job l: a pod stuck Terminating on $LOST force-deleted and replaced after $took s, not counted"
KN get events --field-selector involvedObject.name=s,reason=SyncerForceDeleted -o name | grep -q . ||
	fail "no SyncerForceDeleted Event"
[ "$took_s" -ge 30 ] || fail "s-syncer-0 replaced after $took_s s, before its grace (1 s) and 30 s more"
echo "ok: job s: the syncer's pod stuck Terminating on $LOST force-deleted, the StatefulSet made it again after $took_s s"

# --- job b: activeDeadlineSeconds ------------------------------------------------
t0=$(date +%s)
job b "  activeDeadlineSeconds: 15" | KN apply -f - >/dev/null || fail "apply job b"
until_ok 60 "job b Failed" '[ "$(jp ddjob/b "{.status.phase}")" = Failed ]'
took=$(($(date +%s) - t0))
reason=$(jp ddjob/b '{.status.conditions[?(@.type=="Failed")].reason}')
[ "$reason" = DeadlineExceeded ] || fail "job b Failed with reason '$reason'"
[ "$took" -ge 14 ] || fail "job b failed after $took s, before its deadline of 15 s"
until_ok 60 "job b's pods deleted" '[ -z "$(KN get pods -l ddiloco.io/job=b -o name)" ]'
echo "ok: job b Failed DeadlineExceeded after $took s, pods deleted"

# --- job c: a crash-looping syncer ---------------------------------------------
job c "  failurePolicy: {syncerRestartLimit: 2, syncerRestartWindowSeconds: 300}" |
	KN apply -f - >/dev/null || fail "apply job c"
until_ok 90 "job c Running" '[ "$(jp ddjob/c "{.status.phase}")" = Running ]'
for n in 1 2 3; do
	KN patch pod c-syncer-0 --subresource=status --type=merge -p '{"status": {"containerStatuses": [
	  {"name": "syncer", "image": "ddiloco:latest", "imageID": "", "ready": true, "restartCount": '"$n"',
	   "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}, "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}}' \
		>/dev/null || fail "restartCount $n on c-syncer-0"
	sleep 1
	[ "$n" -lt 3 ] && [ "$(jp ddjob/c '{.status.phase}')" = Failed ] &&
		fail "job c Failed after $n syncer restarts (limit 2)"
done
until_ok 30 "job c Failed" '[ "$(jp ddjob/c "{.status.phase}")" = Failed ]'
reason=$(jp ddjob/c '{.status.conditions[?(@.type=="Failed")].reason}')
msg=$(jp ddjob/c '{.status.conditions[?(@.type=="Failed")].message}')
[ "$reason" = SyncerCrashLooping ] || fail "job c Failed with reason '$reason'"
case $msg in *OOMKilled*) ;; *) fail "job c's message names no OOMKilled: $msg" ;; esac
echo "ok: job c Failed SyncerCrashLooping: $msg"
echo "test_failure: ok"
