# Sourced by test_e2e.sh (its helpers, namespace and operator): two jobs
# through Kueue's own controller on the real node (docs/operator.md,
# Kueue; tests/k8s/kueue.sh starts it). A ResourceFlavor on the node,
# WorkloadPriorityClasses low and high, and a ClusterQueue whose CPU quota
# is 1.5 times what job e2e-queued's Workload asks (read from its pod
# sets): one job at a time. e2e-queued (examples/e2e.yaml, chaos off, 4 M
# tokens, priority low) is admitted and trains; once a quarter through,
# e2e-urgent (1 M tokens, priority high) preempts it. Asserted:
# e2e-queued is held with reason Evicted and its pods go (its syncer
# checkpoints as it stops), e2e-urgent runs and Succeeds, then e2e-queued
# is admitted again, its new syncer resumed from its checkpoint with no
# round number or version given out before, and it Succeeds; both
# Workloads end Finished. Then the quota is cut below four learners:
# e2e-partial (4 learners, minQuorum 3) is admitted with 3 (Kueue's
# partial admission) and trains to its budget with them.
QLOW=e2e-queued QHIGH=e2e-urgent QBUDGET=4000000
. "$ROOT/tests/k8s/kueue.sh"
kueue_start "$WORK/kueue" "$NS"
K apply -f - >/dev/null <<QEOF || fail "the queue's flavor and priorities"
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: rf-$NS}
spec:
  nodeLabels: {type: e2e}
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
QEOF
qjob() {   # qjob NAME PRIORITY TOKENS STORAGE: examples/e2e.yaml in queue lq
	python3 - "$JOB_FILE" "$1" "$2-$NS" "$3" "$4" <<'PYEOF'
import sys, yaml
j = yaml.safe_load(open(sys.argv[1]))
j["metadata"]["name"] = sys.argv[2]
j["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "lq",
                           "kueue.x-k8s.io/priority-class": sys.argv[3]}
j["spec"]["chaos"]["enabled"] = False
j["spec"]["budget"]["tokens"] = int(sys.argv[4])
if sys.argv[5] != "claim":
    j["spec"]["syncer"]["storage"] = ""
yaml.safe_dump(j, sys.stdout, sort_keys=False)
PYEOF
}
pv_for $QLOW || fail "the checkpoint volume of $QLOW"
qjob $QLOW low $QBUDGET claim >"$WORK/$QLOW.yaml" || fail "the queued job's file"
qjob $QHIGH high 1000000 none >"$WORK/$QHIGH.yaml" || fail "the urgent job's file"
t_apply=$(now) t_printed=0
K -n "$NS" apply -f "$WORK/$QLOW.yaml" >/dev/null || fail "kubectl apply $QLOW"
until_ok 60 "$QLOW's Workload" jp workload/$QLOW-ddjob '{.metadata.name}'
# what the Workload asks, millicores: native sidecars and containers
need=$(K -n "$NS" get workload $QLOW-ddjob -o json | python3 -c '
import json, sys
def milli(q):
    return float(q[:-1]) if q.endswith("m") else float(q) * 1000
t = 0
for ps in json.load(sys.stdin)["spec"]["podSets"]:
    s = ps["template"]["spec"]
    cs = [c for c in s.get("initContainers", []) if c.get("restartPolicy") == "Always"]
    cs += s["containers"]
    t += ps["count"] * sum(milli(c.get("resources", {}).get("requests", {}).get("cpu", "0")) for c in cs)
print(int(t))')
# and one learner pod of it
per=$(K -n "$NS" get workload $QLOW-ddjob -o json 2>/dev/null | python3 -c '
import json, sys
def milli(q):
    return float(q[:-1]) if q.endswith("m") else float(q) * 1000
s = json.load(sys.stdin)["spec"]["podSets"][0]["template"]["spec"]
cs = [c for c in s.get("initContainers", []) if c.get("restartPolicy") == "Always"] + s["containers"]
print(int(sum(milli(c.get("resources", {}).get("requests", {}).get("cpu", "0")) for c in cs)))' 2>/dev/null)
[ -n "$per" ] || per=$((need / 5))
quota=$((need * 3 / 2))
say "job $QLOW's Workload asks ${need}m CPU; the ClusterQueue has ${quota}m"
K apply -f - >/dev/null <<QEOF || fail "the ClusterQueue and LocalQueue"
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
            - {name: cpu, nominalQuota: ${quota}m}
            - {name: memory, nominalQuota: 256Gi}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: lq, namespace: $NS}
spec: {clusterQueue: cq-$NS}
QEOF
qphase() { jp "ddjob/$1" '{.status.phase}'; }
qreason() { jp "ddjob/$1" '{.status.conditions[?(@.type=="Suspended")].reason}'; }
end=$(($(date +%s) + DEADLINE))
until [ "$(qphase $QLOW)" = Running ] &&
	st=$(status_json $QLOW) && [ -n "$st" ] && echo "$st" >"$WORK/q-status.json" &&
	[ "$(sj "$WORK/q-status.json" 'int(s["tokens"] >= '$QBUDGET' / 4)')" = 1 ]; do
	[ "$(date +%s)" -lt "$end" ] || fail "job $QLOW did not train a quarter of its budget within $DEADLINE s"
	print_ddjobs
	sleep 1
done
say "job $QLOW admitted and trained to round $(sj "$WORK/q-status.json" 's["round"]'); $QHIGH submitted"
K -n "$NS" logs -f $QLOW-syncer-0 >"$WORK/q-old.log" 2>&1 &
QLOGPID=$!
sleep 0.2
K -n "$NS" apply -f "$WORK/$QHIGH.yaml" >/dev/null || fail "kubectl apply $QHIGH"
until_ok 120 "$QLOW held, Evicted" '[ "$(qreason '$QLOW')" = Evicted ]'
until_ok 120 "$QLOW's pods gone" \
	'[ "$(K -n '$NS' get pods -l ddiloco.io/job='$QLOW' -o name | grep -c .)" = 0 ]'
kill "$QLOGPID" 2>/dev/null; wait "$QLOGPID" 2>/dev/null
say "job $QLOW preempted: $(jp ddjob/$QLOW '{.status.conditions[?(@.type=="Suspended")].message}')"
until_ok "$DEADLINE" "$QHIGH Succeeded" '[ "$(qphase '$QHIGH')" = Succeeded ]'
say "job $QHIGH Succeeded $(elapsed "$t_apply") s after $QLOW was applied"
until_ok 120 "$QLOW admitted again" '[ "$(qphase '$QLOW')" = Running ] || [ "$(qphase '$QLOW')" = Restarting ]'
until_ok 120 "$QLOW's new syncer resumed" \
	'K -n '$NS' logs '$QLOW'-syncer-0 2>/dev/null | grep -q "rounds resume at"'
K -n "$NS" logs $QLOW-syncer-0 >"$WORK/q-new.log" 2>/dev/null
until_ok "$DEADLINE" "$QLOW Succeeded" '[ "$(qphase '$QLOW')" = Succeeded ]'
q_job=$(elapsed "$t_apply")
qstop=$(grep -m1 "stopped: the last round given out" "$WORK/q-old.log")
qres=$(grep -m1 "resumed from" "$WORK/q-new.log")
qrs=$(grep -m1 "rounds resume at" "$WORK/q-new.log")
echo "--- $QLOW's first syncer: ${qstop:-no 'stopped' line}"
echo "--- $QLOW's second syncer: ${qres:-no 'resumed from' line}"
echo "--- $QLOW's second syncer: ${qrs:-no 'rounds resume' line}"
check "job $QHIGH (priority high) preempted $QLOW and Succeeded" '[ "$(qphase $QHIGH)" = Succeeded ]'
check "job $QLOW: held with reason Evicted, admitted again, Succeeded ($q_job s)" \
	'[ "$(qphase $QLOW)" = Succeeded ]'
check "job $QLOW resumed from its checkpoint after the preemption" '[ -n "$qres" ]'
qreuse=$(OLD="$qstop" NEW="$qrs" py '
import os, re
def parse(l):
    m = re.search(r"round number (\d+), fragment versions ([\d ]+)", l)
    return (int(m.group(1)), list(map(int, m.group(2).split()))) if m else None
o, n = parse(os.environ["OLD"]), parse(os.environ["NEW"])
if not o or not n:
    print("no: a line is missing")
elif n[0] > o[0] and len(n[1]) == len(o[1]) and all(b > a for a, b in zip(o[1], n[1])):
    print("yes: round %d after %d, versions %s after %s" % (n[0], o[0], n[1], o[1]))
else:
    print("no: round %d after %d, versions %s after %s" % (n[0], o[0], n[1], o[1]))')
check "job $QLOW: no round number or version reused after the preemption ($qreuse)" \
	'[ "${qreuse%%:*}" = yes ]'
qfin=$(jp workload/$QLOW-ddjob '{.status.conditions[?(@.type=="Finished")].status}')/$(jp workload/$QHIGH-ddjob '{.status.conditions[?(@.type=="Finished")].status}')
check "both Workloads Finished ($qfin)" '[ "$qfin" = True/True ]'
K -n "$NS" delete ddjob $QLOW $QHIGH --wait=true --timeout=120s >/dev/null 2>&1

# partial admission: the quota cut to what three learners and the syncer
# ask; job e2e-partial (4 learners, minQuorum 3) is admitted with 3 and
# trains to its budget with them
QPART=e2e-partial
K patch clusterqueue cq-$NS --type json -p '[{"op": "replace",
	"path": "/spec/resourceGroups/0/flavors/0/resources/0/nominalQuota",
	"value": "'$((need - per / 2))'m"}]' >/dev/null || fail "cut the quota"
qjob $QPART low 1000000 none >"$WORK/$QPART.yaml" || fail "the partial job's file"
t_apply=$(now)
K -n "$NS" apply -f "$WORK/$QPART.yaml" >/dev/null || fail "kubectl apply $QPART"
until_ok "$DEADLINE" "$QPART Succeeded" '[ "$(qphase '$QPART')" = Succeeded ] || [ "$(qphase '$QPART')" = Failed ]'
qp_adm=$(jp workload/$QPART-ddjob '{.status.admission.podSetAssignments[0].count}')
qp_msg=$(jp ddjob/$QPART '{.status.conditions[?(@.type=="Admitted")].message}')
say "job $QPART: $(qphase $QPART) after $(elapsed "$t_apply") s; $qp_msg; $(jp ddjob/$QPART '{.status.progress.tokens}') tokens"
check "job $QPART: admitted with 3 of its 4 learners (quota $((need - per / 2))m, a learner ${per}m) and trained to Succeeded" \
	'[ "$(qphase $QPART)" = Succeeded ] && [ "$qp_adm" = 3 ]'
K -n "$NS" delete ddjob $QPART --wait=true --timeout=120s >/dev/null 2>&1
K delete clusterqueue cq-$NS resourceflavor rf-$NS --wait=false >/dev/null 2>&1
K delete workloadpriorityclass low-$NS high-$NS --wait=false >/dev/null 2>&1
kueue_stop
