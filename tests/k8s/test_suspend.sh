#!/usr/bin/env bash
# What a queue's own adapter (Kueue's job framework, for the kinds it
# knows) does to a job, done by hand on the real API server, the operator
# as a local process, pods on the kwok nodes (docs/operator.md, Kueue;
# the operator's own Workload integration: test_kueue.sh):
#  - a job created suspended with a label of the team's: no pod, phase
#    Suspended, condition Suspended True;
#  - admission: while suspended, the learner count changed (partial
#    admission) and a node affinity and a label injected into
#    spec.learners.template; then suspend false. Every learner pod runs
#    on the node the affinity names, with the job's label (propagated)
#    and the injected one; the syncer's pod set is admitted
#    the same way: a node affinity, a nodeSelector and a label injected
#    into spec.syncer.template put q-syncer-0 on its own node with the
#    job's label and the injected one; a syncer field other than its
#    placement (minQuorum) is refused even while suspended;
#  - while it runs, the templates (learners' and syncer's) and the learner
#    count are refused, each with the CRD's message; preempted (suspend
#    true) its pods go; the templates may change again, the learner count
#    may not (it ran);
#  - the CRD's syncer rule names every field of spec.syncer: fixed, or
#    placement;
#  - a job with spec.managedBy another controller is left alone (no
#    child, no status), and managedBy cannot change.
# Needs the variables of /tmp/ddiloco-k8s/env (tests/k8s/run.sh sets them).
set -euo pipefail

: "${KUBECTL:?run through make test-k8s}" "${KUBE_SERVER:?}" "${KUBE_CA:?}" "${KUBECONFIG:?}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
NODE=kwok-node-2
SYNCER_NODE=kwok-node-1

. "$ROOT/tests/k8s/lib.sh"
op_test suspend

phase_is() { [ "$(jp "ddjob/$1" '{.status.phase}')" = "$2" ]; }
npods() { KN get pods -l "ddiloco.io/job=$1" -o name | grep -c . || true; }
refused() {   # refused WORDS PATCH: the merge patch of job q is refused
	if KN patch ddjob q --type merge -p "$2" >"$WORK/out" 2>&1; then
		fail "accepted: $2"
	fi
	grep -qF "$1" "$WORK/out" || { cat "$WORK/out" >&2; fail "no '$1' in the refusal"; }
	echo "refused: $1"
}

apply_crd
"$KUBECTL" create namespace "$NS" >/dev/null
start_operator

KN apply -f - >/dev/null <<EOF || fail "apply job q"
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata:
  name: q
  labels: {example.com/team: team-a}
spec:
  suspend: true
  learners: {replicas: 4}
  syncer: {storage: ""}
  data: {path: /data/tiny.txt}
EOF
until_ok 30 "job q Suspended" phase_is q Suspended
[ "$(jp ddjob/q '{.status.conditions[?(@.type=="Suspended")].status}')" = True ] ||
	fail "no Suspended condition"
sleep 2
[ "$(npods q)" = 0 ] || fail "a suspended job has pods"
echo "ok: created suspended: no pod, Suspended True"

# admission, as Kueue's job framework does it: the pod sets' counts and
# placement into the job while it is suspended, then unsuspend
KN patch ddjob q --type merge -p '{"spec": {"learners": {"replicas": 3, "template": {
  "metadata": {"labels": {"kueue.x-k8s.io/podset": "learners"}},
  "spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
      "values": ["'$NODE'"]}]}]}}}}}}}}' >/dev/null || fail "inject the placement while suspended"
KN patch ddjob q --type merge -p '{"spec": {"syncer": {"template": {
  "metadata": {"labels": {"kueue.x-k8s.io/podset": "syncer"}},
  "spec": {"nodeSelector": {"type": "kwok"}, "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
      "values": ["'$SYNCER_NODE'"]}]}]}}}}}}}}' >/dev/null || fail "inject the syncer's placement while suspended"
refused "spec.syncer is immutable but for template, nodeSelector and tolerations" \
	'{"spec": {"syncer": {"minQuorum": 2}}}'
KN patch ddjob q --type merge -p '{"spec": {"suspend": false}}' >/dev/null || fail "unsuspend"
until_ok 90 "job q Running" phase_is q Running
until_ok 60 "3 learner pods Running" \
	'[ "$(KN get pods -l ddiloco.io/job=q,ddiloco.io/role=learner --field-selector status.phase=Running -o name | grep -c .)" = 3 ]'
for i in 0 1 2; do
	P=pod/q-learner-$i
	[ "$(jp $P '{.spec.nodeName}')" = "$NODE" ] || fail "q-learner-$i on $(jp $P '{.spec.nodeName}')"
	[ "$(jp $P '{.metadata.labels.example\.com/team} {.metadata.labels.kueue\.x-k8s\.io/podset}')" = "team-a learners" ] ||
		fail "q-learner-$i labels: $(jp $P '{.metadata.labels}')"
	[ "$(jp $P '{.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values[0]}')" = "$NODE" ] ||
		fail "q-learner-$i has no injected affinity"
done
KN get pod q-learner-3 >/dev/null 2>&1 && fail "a fourth learner pod after admission of 3"
[ "$(jp pod/q-syncer-0 '{.metadata.labels.example\.com/team} {.metadata.labels.kueue\.x-k8s\.io/podset}')" = "team-a syncer" ] ||
	fail "the syncer's pod labels: $(jp pod/q-syncer-0 '{.metadata.labels}')"
until_ok 60 "q-syncer-0 scheduled" '[ -n "$(jp pod/q-syncer-0 "{.spec.nodeName}")" ]'
[ "$(jp pod/q-syncer-0 '{.spec.nodeName}')" = "$SYNCER_NODE" ] ||
	fail "q-syncer-0 on $(jp pod/q-syncer-0 '{.spec.nodeName}'), not $SYNCER_NODE"
[ "$(jp pod/q-syncer-0 '{.spec.nodeSelector.type} {.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values[0]}')" = "kwok $SYNCER_NODE" ] ||
	fail "q-syncer-0 lacks the injected nodeSelector or affinity"
echo "ok: admitted: 3 learners on $NODE with the affinity and labels, the syncer on $SYNCER_NODE with its own"

refused "may change only while the job is suspended" \
	'{"spec": {"learners": {"template": {"metadata": {"labels": {"x": "y"}}}}}}'
refused "spec.learners.replicas may change only while the job is suspended" \
	'{"spec": {"learners": {"replicas": 2}}}'
refused "spec.syncer.template, nodeSelector and tolerations may change only while the job is suspended" \
	'{"spec": {"syncer": {"template": {"metadata": {"labels": {"x": "y"}}}}}}'
refused "spec.syncer.template, nodeSelector and tolerations may change only while the job is suspended" \
	'{"spec": {"syncer": {"tolerations": [{"key": "pool", "operator": "Exists"}]}}}'

# preemption: suspend; pods go; the placement may change again, the
# learner count may not (the job ran: its certificates and checkpoints)
KN patch ddjob q --type merge -p '{"spec": {"suspend": true}}' >/dev/null || fail "suspend"
until_ok 60 "job q's pods gone" '[ "$(npods q)" = 0 ]'
phase_is q Suspended || fail "job q not Suspended"
KN patch ddjob q --type merge -p '{"spec": {"learners": {"template": {"metadata": {"labels": {"x": "y"}}}}}}' \
	>/dev/null || fail "the template refused while suspended"
KN patch ddjob q --type merge -p '{"spec": {"syncer": {"template": {"metadata": {"labels": {"x": "y"}}}}}}' \
	>/dev/null || fail "the syncer's template refused while suspended"
[ "$(jp ddjob/q '{.spec.syncer.template.metadata.labels.x}')" = y ] || fail "the syncer's template not changed"
refused "before its pods were first made" '{"spec": {"learners": {"replicas": 2}}}'
echo "ok: preempted: pods gone, the templates may change, the count may not"

# every field of spec.syncer is in the CRD's syncer rule (fixed) or its
# placement rule: a field added to the schema and not to a rule fails here
python3 - "$ROOT/crds/decoupledtrainingjobs.yaml" <<'PY' || fail "the CRD's syncer rules miss a field"
import sys, yaml
crd = yaml.safe_load(open(sys.argv[1]))
spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
syncer = spec["properties"]["syncer"]
fixed = next(v["rule"] for v in syncer["x-kubernetes-validations"] if "oldSelf" in v["rule"])
placement = next(v["rule"] for v in spec["x-kubernetes-validations"] if v.get("fieldPath") == ".syncer")
missing = [f for f in syncer["properties"]
           if "self.%s == oldSelf.%s" % (f, f) not in fixed
           and "self.syncer.%s == oldSelf.syncer.%s" % (f, f) not in placement]
print("spec.syncer: %d fields, %d fixed, placement: template nodeSelector tolerations%s"
      % (len(syncer["properties"]), fixed.count("== oldSelf."), "; missing: " + " ".join(missing) if missing else ""))
sys.exit(1 if missing else 0)
PY

# spec.managedBy another controller
KN apply -f - >/dev/null <<EOF || fail "apply job other"
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: other}
spec:
  managedBy: kueue.x-k8s.io/multikueue
  learners: {replicas: 1}
  syncer: {storage: ""}
  data: {path: /data/tiny.txt}
EOF
sleep 5
[ -z "$(jp ddjob/other '{.status}')" ] || fail "job other got a status: $(jp ddjob/other '{.status}')"
[ "$(npods other)" = 0 ] || fail "job other got pods"
KN get configmap other-spec >/dev/null 2>&1 && fail "job other got its ConfigMap"
if KN patch ddjob other --type merge -p '{"spec": {"managedBy": "ddiloco.io/operator"}}' >"$WORK/out" 2>&1; then
	fail "managedBy changed"
fi
grep -qF "spec.managedBy is immutable" "$WORK/out" || { cat "$WORK/out" >&2; fail "no message"; }
echo "ok: managedBy another controller: no child, no status; immutable"
echo "test_suspend: ok"
