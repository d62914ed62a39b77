/*
 * children: the objects a DecoupledTrainingJob owns, as JSON ready for
 * server-side apply. Pure functions of the job; no I/O.
 *
 *   <job>-spec         ConfigMap  job.json: the job as jobspec reads it
 *   <job>-syncer       Service    headless; learners dial each shard's
 *                                 <job>-syncer-<i>.<job>-syncer.<ns>.svc
 *   <job>-syncer       NetworkPolicy  the syncer pod's ingress: gRPC from
 *                                 the job's learners, HTTP from the
 *                                 operator's pods
 *   <job>-checkpoints  PVC        the syncer's checkpoints (unless
 *                                 spec.syncer.storage is ""); with
 *                                 spec.syncer.shards S > 1 none: the
 *                                 StatefulSet's volumeClaimTemplates make
 *                                 checkpoints-<job>-syncer-<i>, one a shard
 *   <job>-tls          Secret     the job's CA certificate, the syncer's and
 *                                 each learner's certificate and key
 *                                 (created once, immutable; never read back)
 *   <job>-syncer       StatefulSet S replicas (spec.syncer.shards):
 *                                 `ddiloco syncer`, with `--shard auto`
 *                                 when S > 1
 *   <job>-learner-<i>  Pod        container learner + native sidecar,
 *                                 shared emptyDir (medium Memory)
 *   <job>-evaluator-0  Pod        spec.evaluator (external models): the
 *                                 user's evaluator + a sidecar that says
 *                                 Hello as an evaluator; as a learner pod
 *                                 otherwise (image, template, placement)
 *
 * Every child carries the labels ddiloco.io/job and ddiloco.io/role and
 * a controller owner reference (blockOwnerDeletion) to the job. Every pod
 * passes the Pod Security Standard "restricted": non-root (IMAGE_UID),
 * seccomp RuntimeDefault, no privilege escalation, every capability
 * dropped, a read-only root file system (they write only to their
 * volumes), and no service-account token (no job pod calls the API).
 */
#ifndef DDILOCO_CHILDREN_H
#define DDILOCO_CHILDREN_H

#include <jansson.h>

#include "common/err.h"
#include "common/jobspec.h"

#define JOB_API_VERSION "ddiloco.io/v1alpha1"
#define JOB_KIND "DecoupledTrainingJob"
#define CRD_PATH "/apis/" JOB_API_VERSION   /* the jobs' API group path */
#define FIELD_MANAGER "ddiloco-operator"   /* also managed-by and Events' source */

#define LABEL_JOB   "ddiloco.io/job"
#define LABEL_ROLE  "ddiloco.io/role"
#define LABEL_INDEX "ddiloco.io/learner-index"
/* a learner pod's spec as made, hashed (child_learner), and the syncer
 * StatefulSet's pod template (child_syncer): a pod or StatefulSet whose
 * label differs from what the job asks now is rolled (reconcile.h) */
#define LABEL_POD_SPEC "ddiloco.io/pod-spec"
#define EXCHANGE_DIR "/run/ddiloco"
#define SPEC_DIR "/etc/ddiloco"
/* the sidecar's HTTP: /healthz (its liveness probe), /readyz, /metrics */
#define SIDECAR_HTTP_PORT 9090
#define SIDECAR_HTTP "0.0.0.0:9090"
#define CHECKPOINT_DIR "/var/lib/ddiloco"
/* where a pod finds its part of <job>-tls: ca.crt, tls.crt, tls.key */
#define TLS_DIR "/etc/ddiloco-tls"
/* a Secret's data may not pass 1 MiB (the API server's limit) */
#define SECRET_MAX_BYTES (1 << 20)
/* the image's non-root user and group (Dockerfile, scripts/image.sh) */
#define IMAGE_UID 65532
/* the operator's own pods carry these labels (deploy/04-operator.yaml and
 * the chart's selector labels): the syncer's NetworkPolicy lets them in */
#define OPERATOR_NAME_LABEL "app.kubernetes.io/name"
#define OPERATOR_NAME "ddiloco"
#define OPERATOR_COMPONENT_LABEL "app.kubernetes.io/component"
#define OPERATOR_COMPONENT "operator"

/* The children's names (the table above), and the syncer's one pod. */
enum child_kind {
	CHILD_SPEC,                   /* <job>-spec */
	CHILD_SYNCER,                 /* <job>-syncer: Service and StatefulSet */
	CHILD_CHECKPOINTS,            /* <job>-checkpoints */
	CHILD_LEARNER,                /* <job>-learner-<index> */
	CHILD_SYNCER_POD,             /* <job>-syncer-<shard> */
	CHILD_TLS,                    /* <job>-tls */
	CHILD_EVALUATOR,              /* <job>-evaluator-<index>: only 0 */
};

/*
 * The syncer's default requests (docs/operator.md, "The syncer's placement
 * and requests"). It holds about nine fp32 copies of the parameters (theta,
 * momentum, scratch, the flat update, the evaluation model's parameters and
 * gradients, the checkpoint's theta and momentum): 36 bytes a parameter,
 * doubled for the evaluation's activations and the fragments in flight,
 * over a base for the process and its servers.
 */
#define SYNCER_CPU "500m"
#define SYNCER_MEMORY_BASE_MIB 64
#define SYNCER_BYTES_PER_PARAM 72
/*
 * The sidecar's default requests (docs/operator.md, Resources and probes): its own
 * copies of what it sends and receives, about two fp32 copies of the
 * model, over a base; SIDECAR_MEMORY_UNKNOWN_MIB for an external model
 * that declares no table. spec.learners.sidecar.resources replaces them.
 */
#define SIDECAR_CPU "100m"
#define SIDECAR_MEMORY_BASE_MIB 64
#define SIDECAR_BYTES_PER_PARAM 8
#define SIDECAR_MEMORY_UNKNOWN_MIB 256
/* the syncer's startup probe waits this long for its model and checkpoint */
#define SYNCER_STARTUP_SECONDS 600

/*
 * The checkpoint claim's default size (docs/operator.md, "Model
 * lifecycle"): what the syncer holds at most in its folder, CKPT_FILES
 * checkpoint files (the 3 rolling ones syncer/core.c keeps, the last good
 * one when the file system has no hard links, one being written), each
 * 8 bytes a parameter (Θ and momentum, f32) plus CKPT_FILE_EXTRA for the
 * header, versions, learners and up to 4096 evaluations (syncer/ckpt.h),
 * times CKPT_HEADROOM, rounded up to whole GiB, at least 1Gi.
 */
#define CKPT_FILES 5
#define CKPT_FILE_EXTRA (1u << 20)
#define CKPT_HEADROOM 1.5
/*
 * A shard of S holds 1/S of the parameters (common/shard.h), so its claim
 * is sized from 8·N/S bytes a file. An external model's size is not known
 * before its first learner's Hello: without spec.syncer.storage each
 * shard's claim asks for CKPT_EXTERNAL_DEFAULT (or the operator's
 * --external-checkpoint-storage), which holds the checkpoints of about
 * 180M parameters a shard (5 × 1.5 × 8 B a parameter ≈ 60 B); a larger
 * model's claim is resized once a shard says its size (reconcile.h,
 * CheckpointStorage); docs/operator.md says to set spec.syncer.storage.
 */
#define CKPT_EXTERNAL_DEFAULT "10Gi"
/* the name of the StatefulSet's claim template: its claims are
 * checkpoints-<job>-syncer-<i> */
#define CKPT_CLAIM_TEMPLATE "checkpoints"

/* Room for any child's name: a DNS subdomain is at most 253 bytes. */
#define CHILD_NAME_MAX 254

/*
 * Writes the name of job's child of that kind (index: learners, the
 * evaluator and the syncer's pods (the shard) only) into
 * out (size n); 0, or -1 when it does not fit (out is then "").
 */
int child_name(const char *job, enum child_kind kind, int index, char *out,
	       size_t n);

/*
 * The operator's runtime image (--runtime-image, the chart's runtimeImage):
 * it runs the syncer, every sidecar and the init container that copies
 * the learner library into a pod whose learner runs a command of the
 * user's (docs/operator.md, Images); a learner without
 * spec.learners.image runs it too.
 */
struct runtime_image {
	const char *image;            /* NULL: RUNTIME_IMAGE_DEFAULT */
	const char *pull_policy;      /* NULL: IfNotPresent */
};
#define RUNTIME_IMAGE_DEFAULT "ddiloco:" DDILOCO_VERSION
/* where a learner container finds the copied library and package */
#define RUNTIME_DIR "/opt/ddiloco-runtime"

struct child_ctx {
	const char *name, *ns, *uid;
	const struct job_spec *js;
	json_t *spec;                 /* the object's raw spec (pass-through) */
	const char *job_json;         /* job_core as text, for the ConfigMap */
	const char *operator_ns;      /* where the operator's pods run */
	int retain_claim;             /* child_pvc: no owner reference, the
				       * claim outlives the job */
	json_t *labels;               /* the job's metadata.labels, or NULL:
				       * given to its pods */
	const char *external_storage; /* an external model's claim without
				       * spec.syncer.storage, or NULL:
				       * CKPT_EXTERNAL_DEFAULT (the operator's
				       * --external-checkpoint-storage) */
	const struct runtime_image *runtime;   /* or NULL: the defaults */
};

/* spec.managedBy when this operator manages the job (or it is unset) */
#define MANAGED_BY "ddiloco.io/operator"

/* 1 when spec.managedBy names another controller: the job is left alone. */
int job_managed_elsewhere(json_t *job);

/*
 * The part of a DecoupledTrainingJob object that jobspec reads: apiVersion,
 * kind, metadata.{name,namespace} and spec without the fields that only
 * the operator uses (backoffLimit, activeDeadlineSeconds, failurePolicy,
 * managedBy,
 * learners.{imagePullPolicy,
 * nodeSelector, tolerations, template, command, args},
 * data.{claimName,mountPath}, syncer.{storage, storageClassName,
 * nodeSelector, tolerations, resources, template, checkpoints}). A new
 * reference.
 */
json_t *job_core(json_t *obj);

/*
 * The size of a shard's checkpoint claim (the one claim when S is 1):
 * spec.syncer.storage when set, else the default above for the job's
 * model and S (CKPT_EXTERNAL_DEFAULT for an external model); into out
 * (size n). "" (storage "") means no claim.
 */
void checkpoint_claim_size(const struct child_ctx *c, char *out, size_t n);

/* A Kubernetes quantity ("10Gi", "500M", "1.5e9", "2048") in bytes into
 * *out; -1 when q is NULL or not one. */
int quantity_bytes(const char *q, double *out);
/* The bytes a shard's checkpoints take at most (the default above before
 * its rounding to GiB); 0 when the model's size is not known (external). */
double checkpoint_shard_bytes(const struct job_spec *js);
/* The claim of shard i of a sharded job (S > 1):
 * checkpoints-<job>-syncer-<i>; -1 when it does not fit. */
int shard_claim_name(const char *job, int shard, char *out, size_t n);
/* The operator's checkpoint claim of shard i of a job of `shards`:
 * shard_claim_name when shards > 1, else <job>-checkpoints. */
int own_claim_name(const char *job, int shards, int i, char *out, size_t n);
/* The claim the syncer mounts: spec.syncer.checkpoints.claimName (the
 * user's, never created or deleted by the operator), else
 * <job>-checkpoints. -1 when it does not fit. */
int checkpoint_claim_name(const struct child_ctx *c, char *out, size_t n);

/* Each child as JSON (a new reference), or NULL when its name is too long. */
json_t *child_configmap(const struct child_ctx *c);
json_t *child_service(const struct child_ctx *c);
/* the checkpoint claim; of a sharded job, shard's
 * (checkpoints-<job>-syncer-<shard>), NULL for a shard out of range */
json_t *child_pvc(const struct child_ctx *c, int shard);
json_t *child_syncer(const struct child_ctx *c);
/* NULL also when c->operator_ns is unset */
json_t *child_networkpolicy(const struct child_ctx *c);
/*
 * The Secret <job>-tls, with new keys: a CA for the job (its key is not
 * kept: no one can sign another identity for the job later), the
 * syncer's server certificate (DNS names of its pod, URI
 * ddiloco://<job>/syncer) and one client certificate per learner (URI
 * ddiloco://<job>/learner/<i>), as PEM under the keys
 *   ca.crt  syncer.crt  syncer.key  learner-<i>.crt  learner-<i>.key
 * and for an external model (spec.model.kind external, whether or not
 * spec.evaluator is set yet: the Secret is made once) the evaluator's
 * client certificate (URI ddiloco://<job>/evaluator/0) under
 *   evaluator-0.crt  evaluator-0.key
 * Each pod mounts only its own part (child_syncer, child_learner), and
 * the syncer and sidecars get --tls-dir TLS_DIR; with
 * spec.syncer.insecure there is no Secret, mount or flag.
 * NULL with e set when a certificate cannot be made or the whole does
 * not fit in one Secret.
 */
json_t *child_tls_secret(const struct child_ctx *c, struct err *e);
/* Learner i's pod, labelled LABEL_POD_SPEC with the hash of its spec:
 * 16 hex digits of FNV-1a 64 over the spec as compact JSON with sorted
 * keys, so the same job and operator flags give the same label. */
json_t *child_learner(const struct child_ctx *c, int index);
/* The evaluator's pod; NULL also when the job has no spec.evaluator. */
json_t *child_evaluator(const struct child_ctx *c);

/* "<job>-learner-<i>" → i; -1 when the name is not one of the job's. */
int learner_index(const char *job, const char *pod);
/* "<job>-syncer-<i>" → the shard i; -1 when not one of the job's. */
int syncer_shard_index(const char *job, const char *pod);
/* Shard i's gRPC address as learners see it (its pod's name through the
 * headless Service); -1 when it does not fit. */
int syncer_address(const char *job, const char *ns, int port, int shard,
		   char *out, size_t n);
/* Every shard's address, shard 0 first, joined by commas: the sidecar's
 * --syncer (docs/syncer.md, Shards). A new string, or NULL. */
char *syncer_targets(const char *job, const char *ns, int port, int shards);

#endif
