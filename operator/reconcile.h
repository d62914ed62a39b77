/*
 * reconcile: what should be done for one DecoupledTrainingJob, as a pure
 * function of its spec, what the caches show, and the operator's memory
 * of each learner. No I/O: the caller (apply.c) turns the actions into
 * API calls and writes the status this returns.
 *
 * Decisions, in order:
 *   deleting            nothing (owner references collect the children)
 *   terminal phase      stays terminal: stop what still runs, count down
 *                       ttlSecondsAfterFinished, then delete the job
 *   spec.suspend        delete learner pods and the syncer StatefulSet;
 *                       keep the spec ConfigMap, Service, NetworkPolicy
 *                       and checkpoints
 *   refused             nothing is made while the operator's pod policy
 *                       refuses a template (TemplateRefused) or <job>-tls
 *                       is not this job's (SecretNotOwned)
 *   otherwise           make the children that are missing; a failed
 *                       learner pod is deleted, a missing one recreated
 *                       after its own backoff; the others are left alone
 *
 * The refusals (docs/operator.md, Pod templates and Security): each is a
 * condition True, with a Warning Event, while it holds (its message names
 * the field, or the Secret and its owner), False once it no longer does.
 * A refused job makes no child and deletes none: pods it had before (an
 * operator restarted with a stricter policy) are left as they are.
 *
 * <job>-tls (docs/operator.md, Security) is created when it is missing,
 * always before any pod that mounts it. Missing while the job has pods
 * (it was deleted under a running job), it is made again with a new CA,
 * and the pods that mount the old one are deleted so that they come back
 * with the new certificates: every learner pod, the evaluator's, and the
 * syncer's StatefulSet (made again at the next pass, its pods with it).
 * Old and new certificates cannot talk to each other, so the roll is all
 * at once, as a suspend and resume is; the syncer resumes from its
 * checkpoint.
 *
 * The evaluator (spec.evaluator, an external model's; docs/operator.md,
 * "What the operator creates") is made with the learners and kept while
 * the job runs: its pod ended (Failed or Succeeded) is deleted and
 * recreated after the same backoff as a learner's (rc_backoff), with an
 * Event; it never fails the job, never counts toward backoffLimit,
 * quorum, PodsReady or the job's success (it does not train). It is
 * deleted with the learners at the end and on suspend, and when
 * spec.evaluator is gone.
 *
 * A learner is recreated only once its old pod is gone from the cache
 * (the DELETED event): a pod with a deletionTimestamp still holds the
 * name and blocks its replacement. One still there RC_FORCE_DELETE_SECONDS
 * after its grace period ended is on a node whose kubelet does not answer
 * (lost, partitioned): it is deleted with grace period 0 (its uid as
 * precondition), which frees the name. The replacement's apply is expected
 * in the cache for RC_EXPECT_SECONDS, unless the cache reports the uid
 * that apply answered with deleted first (create_gone): then it came and
 * went unseen, and counts as gone at once.
 *
 * A syncer shard's pod (the StatefulSet's) is held the same way: the
 * StatefulSet controller makes <job>-syncer-<i> again only once the old
 * one is gone. One still Terminating RC_FORCE_DELETE_SECONDS after its
 * grace period is deleted with grace period 0 and its uid
 * (ACT_DELETE_SYNCER_POD, a SyncerForceDeleted Warning Event), in every
 * phase but a job being deleted.
 *
 * Condition PodsReady: True when every learner and the syncer (every
 * shard's pod) are ready;
 * False with the pod's own reason (Unschedulable, ImagePullBackOff, ...)
 * and message when one cannot start, else PodsStarting. A pod still
 * starting (ContainerCreating, PodInitializing, Pending without a
 * container status) is PodsStarting until it is older than
 * failurePolicy.pendingTimeoutSeconds; then its own reason is named the
 * same way, the message saying since when it has been pending.
 *
 * The checkpoint claim (docs/operator.md, "Model lifecycle") is made
 * with the job as its owner and applied again without one once it must
 * outlive the job: checkpoints.retain true, or unset and the job has
 * trained (a round completed or a checkpoint written): so deleting the
 * job, or its TTL, leaves the model. Checked in every phase, terminal
 * too; never while the job is being deleted (too late).
 *
 * Condition CheckpointFailing: True with the syncer's error while its
 * /status says its checkpoint writes fail; False once one succeeds
 * again; absent while none has failed.
 *
 * Condition CheckpointStorage: False (reason CheckpointStorageTooSmall,
 * a Warning Event) while a shard's /status says a checkpoint of the
 * adopted model cannot fit on its volume, naming the shard and the
 * bytes; True once every shard that says so fits; absent while no
 * syncer says (an older one). A claim of the operator's own without
 * spec.syncer.storage is then resized (ACT_RESIZE_PVC) to the
 * checkpoint's need × CKPT_HEADROOM in whole GiB, unless it asks for
 * that already or the API refused that size (docs/operator.md).
 *
 * Condition SyncerShards (spec.syncer.shards > 1 only): True while every
 * shard answers its /status, False naming the first that does not:
 * ShardsStarting until every shard first answered, ShardDown (a Warning
 * Event) after; the others' fragments keep merging meanwhile.
 *
 * Phase: Succeeded when the syncer says done or every learner exited 0;
 * Failed (docs/operator.md, "Failure policy") when learner failures pass
 * spec.backoffLimit, when the job was active longer than
 * spec.activeDeadlineSeconds, or when the syncer's container restarted
 * more than failurePolicy.syncerRestartLimit times within
 * syncerRestartWindowSeconds; Running when the syncer is ready and at
 * least minQuorum learners are; Restarting when a job that ran has fallen
 * below that; Pending before.
 *
 * Condition VersionMismatch (docs/operator.md, Failure policy): True,
 * reason LearnerVersionMismatch, when the sidecar of a learner (or the
 * evaluator) exited CLI_EXIT_MISMATCH (its state or last state): its
 * termination message names both versions. That learner is held: its
 * pod deleted (a Warning Event VersionMismatch, once) and not recreated
 * while the job's generation stays the same, never counted toward
 * backoffLimit; a new generation (the spec changed, e.g. the image)
 * releases it. The job Fails, reason VersionMismatch, when fewer than
 * minQuorum learners are left unheld. False, reason VersionsMatch, once
 * none is held and every learner is ready. The holds live in the
 * operator's memory: after its restart a held learner is recreated once
 * and held again at its sidecar's exit.
 *
 * Rolling (docs/operator.md, Rolling learners): a learner pod whose
 * spec hash (LABEL_POD_SPEC) differs from what the job asks now (its
 * image, resources, template, the operator's runtime image) is replaced
 * one learner at a time: only while the phase is Running and every
 * learner's pod is Ready and none is awaited, the lowest index first,
 * deleted with its uid and an Event LearnerRolled; its recreation waits
 * no backoff and is no restart. With minQuorum below replicas the quorum
 * holds throughout. A pod without the label (an older operator's) is
 * left as it is. Changes of the job that no pod spec carries (the
 * training settings in the ConfigMap) roll nothing. The evaluator's pod,
 * no part of the quorum, is replaced when it is Ready and the job
 * Running (EvaluatorRolled), whatever the learners do.
 *
 * Failures and disruptions: a learner pod that ends Failed counts toward
 * backoffLimit once (by uid) unless it was disrupted (a DisruptionTarget
 * condition, or evicted or preempted); a pod deleted (chaos, a drain, a
 * user) or lost with its node is recreated but never counted. A
 * learner's count goes back to 0 once its pod has been ready for
 * failurePolicy.backoffResetSeconds.
 */
#ifndef DDILOCO_RECONCILE_H
#define DDILOCO_RECONCILE_H

#include "common/jobspec.h"

enum job_phase { PHASE_PENDING, PHASE_RUNNING, PHASE_RESTARTING,
		 PHASE_SUSPENDED, PHASE_SUCCEEDED, PHASE_FAILED };

const char *job_phase_name(enum job_phase p);
enum job_phase job_phase_parse(const char *s);   /* unknown: PENDING */

enum pod_state { POD_PENDING, POD_RUNNING, POD_SUCCEEDED, POD_FAILED };

struct obs_pod {
	int index;                    /* learner index from its name */
	char uid[64];
	enum pod_state state;
	int ready;
	int deleting;                 /* has a deletionTimestamp */
	double ready_since;           /* wall time it became Ready, or 0 */
	int disrupted;                /* DisruptionTarget, evicted, preempted:
				       * its end is not the learner's failure */
	int exit_code;                /* the learner container's, -1 unknown */
	char exit_reason[32];         /* its terminated reason (OOMKilled) */
	double delete_at;             /* metadata.deletionTimestamp (wall):
				       * when its grace period ends; 0 none */
	/* why it cannot start (podcheck.h): "" or e.g. ImagePullBackOff */
	char reason[64];
	char message[256];
	int starting;                 /* reason is a start under way
				       * (podcheck_starting: ContainerCreating,
				       * Pending, ...), not a problem yet */
	double created;               /* metadata.creationTimestamp (wall), 0 unknown */
	/* its sidecar ended with CLI_EXIT_MISMATCH: the learner side's
	 * versions do not match (docs/abi.md, Versions); the sidecar's
	 * termination message */
	int version_mismatch;
	char mismatch[256];
	/* a learner's or the evaluator's: its LABEL_POD_SPEC ("" none:
	 * made by an older operator), and 1 when the job now asks for
	 * another spec */
	char spec_hash[20];
	int outdated;
};

/* The syncer's /status, as last read. */
struct obs_progress {
	int have;
	long long round, tokens;
	double loss;                  /* NAN: no evaluation yet */
	double goodput, uptime, elapsed;
	int done;
	double update_time;           /* wall clock of the /status read; 0 unknown */
	long long bytes_in, bytes_out;   /* the syncers' bytes received, sent */
	double ckpt_time;             /* wall clock of the last checkpoint (the
				       * oldest shard's); 0 unknown */
	/* the syncer's checkpoint writes; ckpt_have 0 until a /status of
	 * this operator process gave them */
	int ckpt_have, ckpt_failing;
	long long ckpt_failures;
	long long ckpt_last_ok_round; /* -1: none written or loaded */
	char ckpt_error[161];         /* cut whole characters */
	/* the high-water mark's writes: failing, why, and the rounds its
	 * last mark on disk covers (past them rounds wait) */
	int mark_failing;
	long long mark_covered_round;
	char mark_error[161];
	/* the syncer process started from the seed although rounds had
	 * been handed out before: the model trained so far was lost; -1:
	 * the syncer does not say */
	int started_over;
	/* the shards (docs/operator.md, Shards): of how many the last read
	 * was (0: no read by this operator process yet), how many answered,
	 * the first that did not (-1: none) and why */
	int shards, shards_up, shard_down;
	char shard_down_error[128];
	/* whether a checkpoint fits on each shard's volume: 1 every shard
	 * that says fits, -1 shard ckpt_room_shard's does not (needed and
	 * free bytes), 0 no shard says (older syncers) */
	int ckpt_room, ckpt_room_shard;
	unsigned long long ckpt_needed, ckpt_free;
	/* the learners the syncer excluded for their claims (docs/syncer.md,
	 * What a learner claims): how many (-1: the syncer does not say),
	 * and their ids as text, "1, 4" ("" for none) */
	int excluded;
	char excluded_ids[96];
};

enum cond_type { COND_CREATED, COND_RUNNING, COND_COMPLETE, COND_FAILED,
		 COND_SUSPENDED, COND_PODS_READY, COND_CHECKPOINT_FAILING,
		 COND_MODEL_STARTED_OVER, COND_SYNCER_SHARDS,
		 COND_CHECKPOINT_STORAGE, COND_VERSION_MISMATCH,
		 COND_LEARNERS_EXCLUDED, COND_TEMPLATE_REFUSED,
		 COND_SECRET_NOT_OWNED, COND_ADMITTED, COND_N };

const char *cond_type_name(enum cond_type t);

struct condition {
	int set;                      /* 0: not present */
	int status;                   /* 1 True, 0 False */
	char reason[64];
	char message[256];
	char time[40];                /* lastTransitionTime, RFC 3339 */
};

/* The operator's memory of one learner (lost on restart; rebuilt). */
struct learner_mem {
	int restarts;                 /* recreations, also in status */
	int fails;                    /* recent ones, for backoff */
	double not_before;            /* no recreation before (wall) */
	double create_sent;           /* an apply not yet seen in the cache */
	char create_uid[64];          /* the uid that apply answered with */
	int create_gone;              /* the cache saw create_uid deleted */
	int seen;                     /* its pod was in the cache once */
	int failures;                 /* counted toward backoffLimit, also in
				       * status; 0 again after a healthy period */
	char failed_uid[64];          /* the pod last counted */
	/* held for a version mismatch: not recreated while the job's
	 * generation is held_generation (docs/operator.md, Failure
	 * policy); why, the sidecar's message */
	int held;
	long long held_generation;
	char held_msg[256];
	int rolled;                   /* deleted for a new spec: its
				       * recreation is no restart */
};

#define RC_MAX_LEARNERS 4096
#define RC_BACKOFF_BASE 1.0       /* seconds: 0, 1, 2, 4, ... */
#define RC_BACKOFF_CAP 60.0
#define RC_STABLE_SECONDS 30.0    /* ready this long: fails reset */
#define RC_EXPECT_SECONDS 30.0    /* a create not seen after this is redone */
/* a learner's, the evaluator's or a syncer shard's pod still Terminating
 * this long after its grace period ended is on a node that does not
 * answer: deleted with grace 0 */
#define RC_FORCE_DELETE_SECONDS 30.0
/* a Secret not this job's is looked at again this soon: the garbage
 * collector removes one whose owner, an older job of the name, is gone */
#define RC_SECRET_RECHECK_SECONDS 5.0

/*
 * spec.failurePolicy.rules (docs/operator.md, "Failure policy"): the
 * first rule whose exit codes match a learner's failed exit decides:
 * fail the job at once, ignore the failure (not counted), or count it
 * (what happens without a matching rule).
 */
enum exit_action { EXIT_COUNT, EXIT_IGNORE, EXIT_FAIL_JOB };
#define RC_MAX_EXIT_RULES 16
#define RC_MAX_EXIT_CODES 32
struct exit_rule {
	enum exit_action action;
	int not_in;                   /* operator NotIn, else In */
	int ncodes;
	int codes[RC_MAX_EXIT_CODES];
};

/* The children put right when another manager changed them. */
enum drift_kind { DRIFT_CONFIGMAP, DRIFT_SERVICE, DRIFT_NETPOL, DRIFT_SYNCER,
		  DRIFT_N };

struct rc_input {
	const struct job_spec *spec;
	double now;                   /* wall clock */
	int deleting;
	long long generation;
	int backoff_limit;            /* -1: none */
	double backoff_reset;         /* s ready after which failures reset */
	int active_deadline;          /* spec.activeDeadlineSeconds, -1: none */
	double created_time;          /* metadata.creationTimestamp, 0 unknown */
	int syncer_restart_limit;     /* -1: none */
	int syncer_restart_window;    /* seconds */
	int syncer_restarts;          /* container restarts within the window */
	const char *syncer_last_exit; /* why it last ended, or NULL */
	const struct exit_rule *exit_rules;
	int nexit_rules;
	int spec_error;               /* jobspec refused it */
	const char *spec_error_msg;
	enum job_phase phase;         /* from status */
	double start_time, completion_time;  /* 0 = unset */
	struct condition conds[COND_N];
	const struct obs_pod *pods;
	int npods;
	int configmap, service, pvc, statefulset;  /* exist in the cache */
	int netpol;                   /* the syncer's NetworkPolicy exists */
	/* children whose spec (or data) another manager wrote since this
	 * operator last put them right (docs/operator.md, Drift): that
	 * manager's name, "" for none */
	char drift[DRIFT_N][64];
	/* <job>-spec holds another job.json than the job asks for now (a
	 * field that may change while it runs, e.g. spec.budget): written
	 * again (docs/operator.md, Drift) */
	int configmap_outdated;
	/* the syncer StatefulSet's pod template is not what the job asks for
	 * now (its LABEL_POD_SPEC: the operator's runtime image after an
	 * upgrade): written again, and its controller rolls the syncer */
	int syncer_outdated;
	/* <job>-tls as last read (its metadata only, pass.c): 1 this job's
	 * (an owner reference with the job's uid), 0 missing, -1 another's
	 * or no one's, tls_reason and tls_message then saying whose */
	int tls;
	const char *tls_reason, *tls_message;
	/* a template the operator's pod policy refuses (podtemplate.h): the
	 * reason and the message naming the field; NULL: none */
	const char *template_reason, *template_message;
	int want_pvc;                 /* spec.syncer.storage is not "" and no
				       * checkpoints.claimName of the user's */
	int pvc_owned;                /* the claim has the job as its owner */
	int storage_given;            /* spec.syncer.storage is set */
	/* each shard's claim's spec.resources.requests.storage in bytes
	 * (0: unknown), and the last resize of one the API refused: its
	 * shard, the bytes asked and why (NULL: none) */
	double claim_bytes[JOB_MAX_SHARDS];
	int resize_refused_shard;
	double resize_refused_bytes;
	const char *resize_refused;
	int retain;                   /* spec.syncer.checkpoints.retain:
				       * 1 true, 0 false, -1 unset */
	int want_tls;                 /* spec.syncer.insecure is false */
	int syncer_ready;             /* a syncer pod (any shard's) is ready */
	int syncer_pods_ready;        /* how many are (the StatefulSet's
				       * readyReplicas): PodsReady of a sharded
				       * job wants every shard's */
	/* why the syncer's pod cannot start, as obs_pod.reason/message,
	 * starting and created */
	const char *syncer_reason, *syncer_message;
	int syncer_starting;
	double syncer_created;
	/* the syncer's pods, index its shard: one lost with its node is
	 * force-deleted as a learner's (the comment at the top) */
	const struct obs_pod *syncer_pods;
	int nsyncer_pods;
	int pending_timeout;          /* failurePolicy.pendingTimeoutSeconds */
	struct obs_progress progress; /* now, or the last in status */
	int want_evaluator;           /* spec.evaluator of an external model */
	const struct obs_pod *evaluator;   /* <job>-evaluator-0, or NULL */
	struct learner_mem *evaluator_mem; /* the operator's memory of it,
				       * updated in place as mem; NULL: none
				       * (failures stays 0: never counted) */
	/* a job in a Kueue queue (queue.h): held as if suspended until its
	 * Workload is admitted and again once evicted, with Kueue's reason
	 * and message; the learners admitted (0: all of them) */
	struct rc_queue {
		int queued, held, admitted, learners;
		char reason[64], message[512];
	} queue;
};

enum rc_kind {
	ACT_APPLY_CONFIGMAP, ACT_APPLY_SERVICE, ACT_APPLY_NETPOL, ACT_CREATE_TLS,
	ACT_REPLACE_CHILD,            /* a drifted child (index: enum drift_kind)
				       * written whole as the job asks */
	ACT_APPLY_PVC, ACT_RESIZE_PVC,
	ACT_APPLY_SYNCER, ACT_DELETE_SYNCER,
	ACT_DELETE_SYNCER_POD,        /* a shard's pod lost with its node */
	ACT_APPLY_LEARNER, ACT_DELETE_LEARNER,
	ACT_APPLY_EVALUATOR, ACT_DELETE_EVALUATOR,
	ACT_DELETE_JOB, ACT_EVENT
};

struct rc_action {
	enum rc_kind kind;
	int index;                    /* learner, or evaluator (0) */
	char uid[64];                 /* delete precondition */
	int recreate;                 /* apply of a learner or the evaluator
				       * that existed before */
	int retain;                   /* apply of the claim without an owner */
	int force;                    /* delete with grace period 0 */
	double bytes;                 /* resize of a shard's claim (index) */
	int warning;                  /* event type Warning, else Normal */
	char reason[64];
	char message[256];
};

struct rc_output {
	struct rc_action *acts;
	int nacts, cap;
	enum job_phase phase;
	int ready, total;
	int outdated;                 /* learner pods the job would make
				       * otherwise now (rolling) */
	double start_time, completion_time;
	struct condition conds[COND_N];
	double requeue_after;         /* seconds; 0 = only on events */
};

/*
 * Decides. mem has spec->learners.replicas entries and is updated in
 * place (restarts, backoff, expectations). out is released with
 * rc_output_release.
 */
int reconcile(const struct rc_input *in, struct learner_mem *mem,
	      struct rc_output *out);
void rc_output_release(struct rc_output *out);

/* Seconds to wait before the recreation after `fails` recent failures. */
double rc_backoff(int fails);

/* Sets a condition; keeps its lastTransitionTime when status is unchanged. */
void cond_set(struct condition *c, int status, const char *reason,
	      const char *message, const char *now_rfc3339);

#endif
