#!/usr/bin/env bash
# spec.learners.template and spec.syncer.template (docs/operator.md, "Pod
# templates") against the real API server and scheduler, as a platform
# team with a TPU pool would use them:
#  - a fake node made a TPU node: the extended resource google.com/tpu: 8
#    in its status and a pool label;
#  - a job whose learner template asks for 4 TPUs each, the pool's
#    nodeSelector, a node affinity, a topology spread, a PriorityClass, an
#    image pull secret, a service account, labels, annotations, env and a
#    volume; the syncer's template has a PriorityClass and a label of its
#    own. Both learners are scheduled onto the TPU node and Running, with
#    every field of the template in the pod the API server stored (the
#    priority resolved from the class); the syncer has its own and none of
#    the learners' (no TPU, not the pool);
#  - templates that would take the operator's volume or container names
#    are refused with the CRD's message.
# Needs the variables of /tmp/ddiloco-k8s/env (tests/k8s/run.sh sets them).
set -euo pipefail

: "${KUBECTL:?run through make test-k8s}" "${KUBE_SERVER:?}" "${KUBE_CA:?}" "${KUBECONFIG:?}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TPU_NODE=kwok-node-1
POOL=ddiloco.io/test-tpu-pool

. "$ROOT/tests/k8s/lib.sh"
op_test template
PC=$NS-training        # PriorityClasses are cluster-wide
extra_cleanup() {      # the cluster-wide changes, undone
	"$KUBECTL" delete priorityclass "$PC" >/dev/null 2>&1
	"$KUBECTL" label node "$TPU_NODE" "$POOL-" >/dev/null 2>&1
	"$KUBECTL" patch node "$TPU_NODE" --subresource=status --type=json -p \
		'[{"op":"remove","path":"/status/capacity/google.com~1tpu"},{"op":"remove","path":"/status/allocatable/google.com~1tpu"}]' \
		>/dev/null 2>&1
}

apply_crd
"$KUBECTL" create namespace "$NS" >/dev/null
"$KUBECTL" create priorityclass "$PC" --value=1000 >/dev/null || fail "create PriorityClass"
KN create serviceaccount trainer >/dev/null || fail "create ServiceAccount"

# --- a TPU node: the resource in its status, the pool's label ---------------
"$KUBECTL" label node "$TPU_NODE" "$POOL=v5e" --overwrite >/dev/null || fail "label $TPU_NODE"
"$KUBECTL" patch node "$TPU_NODE" --subresource=status --type=merge -p \
	'{"status":{"capacity":{"google.com/tpu":"8"},"allocatable":{"google.com/tpu":"8"}}}' \
	>/dev/null || fail "give $TPU_NODE google.com/tpu"
[ "$("$KUBECTL" get node "$TPU_NODE" -o jsonpath='{.status.allocatable.google\.com/tpu}')" = 8 ] ||
	fail "$TPU_NODE does not show google.com/tpu: 8"

# --- refused: the operator's names ------------------------------------------
refused() {   # refused WORDS: the job on stdin is refused, saying WORDS
	if KN apply -f - >"$WORK/out" 2>&1; then
		fail "a template was accepted: $1"
	fi
	grep -qF "$1" "$WORK/out" || { cat "$WORK/out" >&2; fail "no '$1' in the refusal"; }
	echo "refused: $1"
}
refused "a template volume may not be named spec, data, exchange, tls or checkpoints" <<EOF
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: bad-volume}
spec:
  data: {path: /data/tiny.txt}
  learners:
    template:
      spec:
        volumes: [{name: exchange, hostPath: {path: /tmp}}]
EOF
refused "the template's only container is 'syncer'" <<EOF
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: bad-container}
spec:
  data: {path: /data/tiny.txt}
  syncer:
    template:
      spec:
        containers: [{name: logger, image: fluent-bit}]
EOF

# --- the job -------------------------------------------------------------------
KN apply -f - >/dev/null <<EOF || fail "the job with templates was refused"
apiVersion: ddiloco.io/v1alpha1
kind: DecoupledTrainingJob
metadata: {name: tpl}
spec:
  data: {path: /data/tiny.txt}
  learners:
    replicas: 2
    command: [python3, -m, mytrainer]
    args: [--exchange, /run/ddiloco]
    template:
      metadata:
        labels: {team: nlp}
        annotations: {example.com/owner: platform}
      spec:
        nodeSelector: {$POOL: v5e}
        tolerations: [{key: google.com/tpu, operator: Exists, effect: NoSchedule}]
        affinity:
          nodeAffinity:
            requiredDuringSchedulingIgnoredDuringExecution:
              nodeSelectorTerms:
                - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [$TPU_NODE]}]
        topologySpreadConstraints:
          - {maxSkew: 2, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway,
             labelSelector: {matchLabels: {ddiloco.io/job: tpl}}}
        priorityClassName: $PC
        imagePullSecrets: [{name: regcred}]
        serviceAccountName: trainer
        securityContext: {supplementalGroups: [5000]}
        volumes: [{name: cache, emptyDir: {}}]
        containers:
          - name: learner
            env: [{name: HF_HOME, value: /cache}]
            volumeMounts: [{name: cache, mountPath: /cache}]
            resources:
              requests: {google.com/tpu: 4}
              limits: {google.com/tpu: 4}
  syncer:
    storage: ""
    template:
      metadata: {labels: {team: nlp-syncer}}
      spec: {priorityClassName: $PC}
EOF

# the template names the account `trainer`: the operator's pod policy
# refuses any but `default` unless its flag names it (docs/operator.md,
# Pod templates, Policy)
start_operator 0 --template-service-accounts trainer

running() { [ "$(jp "pod/$1" '{.status.phase}')" = Running ]; }
until_ok 90 "pod tpl-learner-0 Running" "running tpl-learner-0"
until_ok 60 "pod tpl-learner-1 Running" "running tpl-learner-1"
until_ok 90 "pod tpl-syncer-0 Running" "running tpl-syncer-0"

# what the API server stored, field by field
want() {   # want WHAT GOT EXPECTED
	[ "$2" = "$3" ] || fail "$1: '$2', expected '$3'"
	echo "ok: $1 = $3"
}
L=pod/tpl-learner-0
want "learner 0 node" "$(jp $L '{.spec.nodeName}')" "$TPU_NODE"
want "learner 1 node" "$(jp pod/tpl-learner-1 '{.spec.nodeName}')" "$TPU_NODE"
want "learner TPUs" "$(jp $L '{.spec.containers[0].resources.limits.google\.com/tpu}')" 4
want "learner label team" "$(jp $L '{.metadata.labels.team}')" nlp
want "learner label ddiloco.io/job" "$(jp $L '{.metadata.labels.ddiloco\.io/job}')" tpl
want "learner annotation" "$(jp $L '{.metadata.annotations.example\.com/owner}')" platform
want "learner priority" "$(jp $L '{.spec.priorityClassName} {.spec.priority}')" "$PC 1000"
want "learner pool" "$(jp $L "{.spec.nodeSelector.ddiloco\.io/test-tpu-pool}")" v5e
want "learner affinity" \
	"$(jp $L '{.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values[0]}')" \
	"$TPU_NODE"
want "learner topology spread" "$(jp $L '{.spec.topologySpreadConstraints[0].maxSkew}')" 2
want "learner tolerations" "$(jp $L '{.spec.tolerations[?(@.key=="google.com/tpu")].operator}')" Exists
want "learner imagePullSecrets" "$(jp $L '{.spec.imagePullSecrets[0].name}')" regcred
want "learner serviceAccountName" "$(jp $L '{.spec.serviceAccountName}')" trainer
want "learner supplementalGroups" "$(jp $L '{.spec.securityContext.supplementalGroups[0]}')" 5000
want "learner runAsUser (the operator's)" "$(jp $L '{.spec.securityContext.runAsUser}')" 65532
want "learner env" "$(jp $L '{.spec.containers[0].env[?(@.name=="HF_HOME")].value}')" /cache
want "learner cache mount" "$(jp $L '{.spec.containers[0].volumeMounts[?(@.name=="cache")].mountPath}')" /cache
want "learner exchange (the operator's)" "$(jp $L '{.spec.volumes[?(@.name=="exchange")].emptyDir.medium}')" Memory
want "learner command" "$(jp $L '{.spec.containers[0].command[*]} | {.spec.containers[0].args[*]}')" \
	"python3 -m mytrainer | --exchange /run/ddiloco"
# no spec.learners.image: the operator's runtime image (its default,
# ddiloco:VERSION), whatever the template says
want "learner image (the operator's)" "$(jp $L '{.spec.containers[0].image}')" \
	"ddiloco:$(sed -n 's/^VERSION *:= *//p' "$ROOT/Makefile")"
want "sidecar (the operator's)" "$(jp $L '{.spec.initContainers[0].name} {.spec.initContainers[0].command[1]}')" \
	"sidecar sidecar"
S=pod/tpl-syncer-0
want "syncer label team" "$(jp $S '{.metadata.labels.team}')" nlp-syncer
want "syncer priority" "$(jp $S '{.spec.priority}')" 1000
want "syncer has no TPU" "$(jp $S '{.spec.containers[0].resources.limits}')" ""
want "syncer not pinned to the pool" "$(jp $S '{.spec.nodeSelector}{.spec.affinity}')" ""
want "syncer requests (the operator's)" "$(jp $S '{.spec.containers[0].resources.requests.cpu}')" 500m
echo "test_template: ok"
