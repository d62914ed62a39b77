#!/usr/bin/env bash
# Kueue's own controller admits the operator's jobs (docs/operator.md,
# Kueue; operator/queue.h): Kueue v0.17.0's manager, built like the control
# plane from its pinned Go module (tests/k8s/cluster/build.sh kueue), runs
# here as a local process with its CRDs and its webhooks for its own kinds
# (served over TLS on 127.0.0.1, a certificate made here); the operator as
# a local process, pods on the kwok nodes. One ResourceFlavor whose node
# labels name kwok-node-2, a ClusterQueue with 3 CPUs of quota (one job's
# 2 learners and syncer need 2.7) that preempts lower priorities, a
# LocalQueue, two WorkloadPriorityClasses:
#  - jobs a and b, both in the queue: each gets its Workload <job>-ddjob
#    (pod sets learners, syncer); a is admitted and runs, its pods on the
#    flavor's node; b stays held (phase Suspended, no pod) with Kueue's
#    reason in its Admitted condition, and runs once a has finished (its
#    Workload Finished);
#  - job h of a higher priority preempts b: b's pods go, b is held with
#    reason Evicted and its Workload's reservation is given back; h runs;
#    once h has finished, b is admitted again and runs;
#  - job p, 4 learners of which 2 make a quorum: Kueue admits 2 (its
#    minCount), 2 learner pods run and no third is ever made;
#  - in a watch of every change to the namespace's pods throughout: the
#    CPU the jobs' pods request at once never exceeds the quota;
#  - no learner pod or syncer rolled (the admission's placement is the
#    spec the pods were made with).
# Needs the variables of /tmp/ddiloco-k8s/env (tests/k8s/run.sh sets them).
set -euo pipefail

: "${KUBECTL:?run through make test-k8s}" "${KUBE_SERVER:?}" "${KUBE_CA:?}" "${KUBECONFIG:?}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
NODE=kwok-node-2
QUOTA_MILLI=3000

. "$ROOT/tests/k8s/lib.sh"
op_test kueue
K() { "$KUBECTL" "$@"; }
SAMPLER=""
extra_cleanup() {
	[ -n "$SAMPLER" ] && kill "$SAMPLER" 2>/dev/null
	declare -F kueue_stop >/dev/null && kueue_stop
	K delete clusterqueue "cq-$NS" --wait=false >/dev/null 2>&1
	K delete resourceflavor "rf-$NS" --wait=false >/dev/null 2>&1
	K delete workloadpriorityclass "low-$NS" "high-$NS" --wait=false >/dev/null 2>&1
}
fail() {
	echo "test_kueue: FAIL: $*" >&2
	KN get ddjobs,workloads,pods -o wide >&2 2>/dev/null || true
	KN get workloads -o jsonpath='{range .items[*]}{.metadata.name}: {.status.conditions}{"\n"}{end}' >&2 2>/dev/null || true
	[ -e "$WORK/op.log" ] && tail -20 "$WORK/op.log" >&2
	[ -e "$WORK/kueue.log" ] && grep -iE 'error|fail' "$WORK/kueue.log" | tail -10 >&2
	exit 1
}

# --- Kueue up -------------------------------------------------------------
. "$ROOT/tests/k8s/kueue.sh"
kueue_start "$WORK" "$NS"
echo "ok: Kueue up"

apply_crd
K create namespace "$NS" >/dev/null
until_ok 60 "the queue's objects (through Kueue's webhooks)" K apply -f - <<EOF
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: rf-$NS}
spec:
  nodeLabels: {kubernetes.io/hostname: $NODE}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq-$NS}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
    - coveredResources: [cpu, memory]
      flavors:
        - name: rf-$NS
          resources:
            - {name: cpu, nominalQuota: ${QUOTA_MILLI}m}
            - {name: memory, nominalQuota: 64Gi}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: lq, namespace: $NS}
spec: {clusterQueue: cq-$NS}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: low-$NS}
value: 10
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: high-$NS}
value: 1000
EOF
start_operator

# job NAME PRIORITY [REPLICAS [QUORUM]]: a job in queue lq, 1 CPU a learner
job() {
	KN apply -f - >/dev/null <<EOF || fail "apply job $1"
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata:
  name: $1
  labels: {kueue.x-k8s.io/queue-name: lq, kueue.x-k8s.io/priority-class: $2-$NS}
spec:
  learners: {replicas: ${3:-2}, resources: {cpu: "1", memory: 256Mi}}
  syncer: {storage: "", minQuorum: ${4:-${3:-2}}}
  data: {path: /data/tiny.txt}
EOF
}
phase_is() { [ "$(jp "ddjob/$1" '{.status.phase}')" = "$2" ]; }
learners_running() {
	KN get pods -l "ddiloco.io/job=$1,ddiloco.io/role=learner" \
		--field-selector status.phase=Running -o name | grep -c . || true
}
npods() { KN get pods -l "ddiloco.io/job=$1" -o name | grep -c . || true; }
admitted_is() { [ "$(jp "ddjob/$1" '{.status.conditions[?(@.type=="Admitted")].status}')" = "$2" ]; }
finish() {   # every learner of job $1 exits 0
	local p
	for p in $(KN get pods -l "ddiloco.io/job=$1,ddiloco.io/role=learner" -o name); do
		KN patch "$p" --subresource=status --type merge \
			-p '{"status":{"phase":"Succeeded"}}' >/dev/null
	done
	until_ok 60 "job $1 Succeeded" phase_is "$1" Succeeded
	until_ok 30 "job $1's Workload Finished" \
		'[ "$(jp workload/'"$1"'-ddjob "{.status.conditions[?(@.type==\"Finished\")].status}")" = True ]'
}

# every change to the namespace's pods, for the CPU they request at once
# (kubectl itself in the background, so that the kill below ends it)
"$KUBECTL" -n "$NS" get pods --watch --output-watch-events -o json >"$WORK/pods.json" 2>/dev/null &
SAMPLER=$!

# --- a runs, b waits for it ------------------------------------------------
job a low
until_ok 30 "job a's Workload" jp workload/a-ddjob '{.metadata.name}'
# b once a holds its reservation: two Workloads made 0.2 s apart are not
# always taken in that order (Kueue once admitted b first)
until_ok 60 "job a's Workload admitted" \
	'[ "$(jp workload/a-ddjob "{.status.conditions[?(@.type==\"QuotaReserved\")].status}")" = True ]'
job b low
until_ok 90 "job a Running" phase_is a Running
until_ok 60 "job a's 2 learners Running" '[ "$(learners_running a)" = 2 ]'
for p in a-learner-0 a-learner-1 a-syncer-0; do
	until_ok 30 "$p scheduled" '[ -n "$(jp pod/'$p' "{.spec.nodeName}")" ]'
	[ "$(jp pod/$p '{.spec.nodeName} {.spec.nodeSelector.kubernetes\.io/hostname}')" = "$NODE $NODE" ] ||
		fail "$p: node $(jp pod/$p '{.spec.nodeName}'), nodeSelector $(jp pod/$p '{.spec.nodeSelector}')"
done
admitted_is a True || fail "job a: Admitted $(jp ddjob/a '{.status.conditions[?(@.type=="Admitted")]}')"
[ "$(jp workload/a-ddjob '{.spec.podSets[*].name} {.spec.podSets[0].count} {.spec.priority}')" = "learners syncer 2 10" ] ||
	fail "job a's Workload: $(jp workload/a-ddjob '{.spec.podSets[*].name} {.spec.podSets[0].count} {.spec.priority}')"
until_ok 30 "job b held" admitted_is b False
phase_is b Suspended || fail "job b is $(jp ddjob/b '{.status.phase}')"
[ "$(npods b)" = 0 ] || fail "job b has pods while a runs"
why_b() { jp ddjob/b '{.status.conditions[?(@.type=="Admitted")].reason}: {.status.conditions[?(@.type=="Admitted")].message}'; }
# the condition says "waiting for the Workload's admission" until Kueue
# has tried b's Workload against the quota and the operator read its reason
says_quota() { case $(why_b) in *quota*) return 0 ;; esac; return 1; }
until_ok 30 "job b's Admitted condition to say Kueue's reason, the quota" says_quota
echo "job b held: $(why_b)"
echo "ok: a admitted and on $NODE, b held"

finish a
until_ok 90 "job b Running after a finished" phase_is b Running
until_ok 60 "job b's 2 learners Running" '[ "$(learners_running b)" = 2 ]'
echo "ok: a finished, its Workload Finished; b admitted and running"

# --- h preempts b -----------------------------------------------------------
job h high
until_ok 90 "job b evicted and held" '[ "$(jp ddjob/b "{.status.conditions[?(@.type==\"Suspended\")].reason}")" = Evicted ]'
until_ok 60 "job b's pods gone" '[ "$(npods b)" = 0 ]'
until_ok 60 "job b's reservation given back" \
	'[ -z "$(jp workload/b-ddjob "{.status.admission}")" ]'
until_ok 90 "job h Running" phase_is h Running
until_ok 60 "job h's 2 learners Running" '[ "$(learners_running h)" = 2 ]'
echo "ok: h preempted b (b held, Evicted: $(jp ddjob/b '{.status.conditions[?(@.type=="Suspended")].message}'))"
finish h
until_ok 90 "job b Running again" '[ "$(learners_running b)" = 2 ]'
admitted_is b True || fail "job b not Admitted after h"
echo "ok: h finished; b admitted again and running"
finish b

# --- partial admission --------------------------------------------------------
job p low 4 2
until_ok 90 "job p Running" phase_is p Running
until_ok 60 "job p's 2 learners Running" '[ "$(learners_running p)" = 2 ]'
[ "$(jp workload/p-ddjob '{.spec.podSets[0].count} {.spec.podSets[0].minCount} {.status.admission.podSetAssignments[0].count}')" = "4 2 2" ] ||
	fail "job p's Workload: $(jp workload/p-ddjob '{.spec.podSets[0]} {.status.admission}')"
echo "ok: p admitted with 2 of 4 learners: $(jp ddjob/p '{.status.conditions[?(@.type=="Admitted")].message}')"

kill "$SAMPLER" 2>/dev/null
SAMPLER=""
# the events, the most CPU requested at once, whether p-learner-2 was made
read -r n max third < <(python3 "$ROOT/tests/k8s/podwatch.py" cpu "$WORK/pods.json" p-learner-2)
[ "${n:-0}" -ge 20 ] || fail "only ${n:-0} changes to the pods watched"
[ "$third" = 0 ] || fail "job p: a third learner pod with 2 admitted"
[ "${max:-0}" -le "$QUOTA_MILLI" ] || fail "the pods asked for ${max}m CPU at once, over the quota ${QUOTA_MILLI}m"
echo "ok: $n changes to the pods watched, at most ${max}m CPU requested at once (quota ${QUOTA_MILLI}m); no p-learner-2"
# the placement Kueue gave is the pods' own: nothing rolled for it
rolled=$(KN get events -o jsonpath='{range .items[*]}{.reason}{"\n"}{end}' | grep -c "Rolled$" || true)
[ "$rolled" = 0 ] || fail "$rolled LearnerRolled or SyncerRolled Events: the admission's placement read as a new spec"
echo "test_kueue: ok"
