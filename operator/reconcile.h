/*
 * reconcile: what should be done for one DecoupledTrainingJob, as a pure
 * function of its spec, what the caches show, and the operator's memory
 * of each learner. No I/O: the caller (operator.c) turns the actions into
 * API calls and writes the status this returns.
 *
 * Decisions, in order:
 *   deleting            nothing (owner references collect the children)
 *   terminal phase      stays terminal: stop what still runs, count down
 *                       ttlSecondsAfterFinished, then delete the job
 *   spec.suspend        delete learner pods and the syncer StatefulSet;
 *                       keep the spec ConfigMap, Service, NetworkPolicy
 *                       and checkpoints
 *   otherwise           make the children that are missing (the Secret
 *                       <job>-tls: when not known to exist, and again
 *                       with the syncer's StatefulSet, so a job resumed
 *                       after its Secret was deleted gets one); a failed
 *                       learner pod is deleted, a missing one recreated
 *                       after its own backoff; the others are left alone
 *
 * A learner is recreated only once its old pod is gone from the cache
 * (the DELETED event): a pod with a deletionTimestamp still holds the
 * name and blocks its replacement. The replacement's apply is expected
 * in the cache for RC_EXPECT_SECONDS, unless the cache reports the uid
 * that apply answered with deleted first (create_gone): then it came and
 * went unseen, and counts as gone at once.
 *
 * Condition PodsReady: True when every learner and the syncer are ready;
 * False with the pod's own reason (Unschedulable, ImagePullBackOff, ...)
 * and message when one cannot start, else PodsStarting.
 *
 * Condition CheckpointFailing: True with the syncer's error while its
 * /status says its checkpoint writes fail; False once one succeeds
 * again; absent while none has failed.
 *
 * Phase: Succeeded when the syncer says done or every learner exited 0;
 * Failed when learner recreations pass spec.backoffLimit; Running when the
 * syncer is ready and at least minQuorum learners are; Restarting when a
 * job that ran has fallen below that; Pending before.
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
	/* why it cannot start (podcheck.h): "" or e.g. ImagePullBackOff */
	char reason[64];
	char message[256];
};

/* The syncer's /status, as last read. */
struct obs_progress {
	int have;
	long long round, tokens;
	double loss;                  /* NAN: no evaluation yet */
	double goodput, uptime, elapsed;
	int done;
	/* the syncer's checkpoint writes; ckpt_have 0 until a /status of
	 * this operator process gave them */
	int ckpt_have, ckpt_failing;
	long long ckpt_failures;
	long long ckpt_last_ok_round; /* -1: none written or loaded */
	char ckpt_error[161];         /* cut whole characters */
};

enum cond_type { COND_CREATED, COND_RUNNING, COND_SUCCEEDED, COND_FAILED,
		 COND_SUSPENDED, COND_PODS_READY, COND_CHECKPOINT_FAILING,
		 COND_N };

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
};

#define RC_MAX_LEARNERS 4096
#define RC_BACKOFF_BASE 1.0       /* seconds: 0, 1, 2, 4, ... */
#define RC_BACKOFF_CAP 60.0
#define RC_STABLE_SECONDS 30.0    /* ready this long: fails reset */
#define RC_EXPECT_SECONDS 30.0    /* a create not seen after this is redone */

struct rc_input {
	const struct job_spec *spec;
	double now;                   /* wall clock */
	int deleting;
	long long generation;
	int backoff_limit;            /* -1: none */
	int spec_error;               /* jobspec refused it */
	const char *spec_error_msg;
	enum job_phase phase;         /* from status */
	double start_time, completion_time;  /* 0 = unset */
	struct condition conds[COND_N];
	const struct obs_pod *pods;
	int npods;
	int configmap, service, pvc, statefulset;  /* exist in the cache */
	int netpol;                   /* the syncer's NetworkPolicy exists */
	int tls;                      /* <job>-tls is known to exist (the
				       * operator may not read Secrets: it
				       * remembers a create answered 201/409) */
	int want_pvc;                 /* spec.syncer.storage is not "" */
	int want_tls;                 /* spec.syncer.insecure is false */
	int syncer_ready;
	/* why the syncer's pod cannot start, as obs_pod.reason/message */
	const char *syncer_reason, *syncer_message;
	struct obs_progress progress; /* now, or the last in status */
};

enum rc_kind {
	ACT_APPLY_CONFIGMAP, ACT_APPLY_SERVICE, ACT_APPLY_NETPOL, ACT_CREATE_TLS,
	ACT_APPLY_PVC,
	ACT_APPLY_SYNCER, ACT_DELETE_SYNCER,
	ACT_APPLY_LEARNER, ACT_DELETE_LEARNER,
	ACT_DELETE_JOB, ACT_EVENT
};

struct rc_action {
	enum rc_kind kind;
	int index;                    /* learner */
	char uid[64];                 /* delete precondition */
	int recreate;                 /* apply of a learner that existed before */
	int warning;                  /* event type Warning, else Normal */
	char reason[64];
	char message[256];
};

struct rc_output {
	struct rc_action *acts;
	int nacts, cap;
	enum job_phase phase;
	int ready, total;
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
