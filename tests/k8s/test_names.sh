#!/usr/bin/env bash
# The CRD's rules on a job's name (docs/operator.md, "Names"), against the
# real API server, and the longest name's children on the kwok nodes:
#  - a name with a leading digit and a 46-character name are refused, each
#    with the CRD's message that says why;
#  - the longest allowed name (45 characters) is accepted; the operator (a
#    local process) creates its ConfigMap, Service, StatefulSet, Secret
#    and learner pods, and the syncer's and learners' pods are Running;
#  - a 45-character external job with spec.evaluator: its evaluator's
#    pod, the longest child name (57 characters), is Running too.
# Needs the variables of /tmp/ddiloco-k8s/env (tests/k8s/run.sh sets them).
set -euo pipefail

: "${KUBECTL:?run through make test-k8s}" "${KUBE_SERVER:?}" "${KUBE_CA:?}" "${KUBECONFIG:?}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LONG=n23456789012345678901234567890123456789012345  # 45 characters
LONGE=e23456789012345678901234567890123456789012345 # 45, with an evaluator

. "$ROOT/tests/k8s/lib.sh"
op_test names

job() {   # job NAME
	cat <<EOF2
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: $1}
spec:
  learners: {replicas: 2}
  syncer: {storage: ""}
  data: {path: /data/tiny.txt}
EOF2
}
refused() {   # refused NAME WORDS: the apply fails and says WORDS
	if job "$1" | KN apply -f - >"$WORK/out" 2>&1; then
		fail "job '$1' was accepted"
	fi
	grep -qF "$2" "$WORK/out" || { cat "$WORK/out" >&2; fail "job '$1': no '$2' in the refusal"; }
	echo "refused '$1': $(grep -oF "$2" "$WORK/out" | head -1)"
}
running() { [ "$(jp "pod/$1" '{.status.phase}')" = Running ]; }
external() {   # external NAME: a job of a model of its own, with an evaluator
	cat <<EOF2
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: $1}
spec:
  learners: {replicas: 1, command: [/usr/bin/python3, train.py]}
  model: {kind: external}
  evaluator: {command: [/usr/bin/python3, eval.py]}
  syncer: {storage: ""}
  data: {path: /data/tiny.txt}
EOF2
}

[ ${#LONG} -eq 45 ] || fail "LONG is ${#LONG} characters"
[ ${#LONGE} -eq 45 ] || fail "LONGE is ${#LONGE} characters"
apply_crd
"$KUBECTL" create namespace "$NS" >/dev/null

refused 7up "metadata.name is not a DNS-1035 label: it must start with a lower-case letter"
refused "${LONG}x" "metadata.name is longer than 45 characters"
job "$LONG" | KN apply -f - >/dev/null || fail "the 45-character name was refused"
external "$LONGE" | KN apply -f - >/dev/null || fail "the 45-character external job was refused"

start_operator

until_ok 60 "StatefulSet $LONG-syncer" "KN get statefulset $LONG-syncer"
for o in "configmap/$LONG-spec" "service/$LONG-syncer" "secret/$LONG-tls"; do
	KN get "$o" >/dev/null 2>&1 || fail "no $o"
done
until_ok 90 "pod $LONG-syncer-0 Running" "running $LONG-syncer-0"
until_ok 90 "pod $LONG-learner-0 Running" "running $LONG-learner-0"
until_ok 30 "pod $LONG-learner-1 Running" "running $LONG-learner-1"
hash=$(jp "pod/$LONG-syncer-0" '{.metadata.labels.controller-revision-hash}')
[ -n "$hash" ] || fail "the syncer pod has no controller-revision-hash label"
echo "longest name ok: ${#LONG} characters, controller-revision-hash '$hash' (${#hash})"
until_ok 90 "pod $LONGE-evaluator-0 Running" "running $LONGE-evaluator-0"
echo "longest child name ok: $LONGE-evaluator-0 (${#LONGE} + 12 characters) Running"
echo "test_names: ok"
