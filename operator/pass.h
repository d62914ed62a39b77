/*
 * pass: one worker's pass over one job, and its first step, observe:
 * everything reconcile() decides from, read into struct rc_input.
 *
 *   the job           the jobs' cache, parsed with jobspec (the one
 *                     parser `ddiloco run` uses too), spec.failurePolicy,
 *                     metadata and the status last written
 *   its children      the caches: learner and evaluator pods (of the
 *                     job's own uid), the syncer's StatefulSet and pod,
 *                     Service, ConfigMap, PVC, NetworkPolicy
 *   its memory        jobmem: restarts, backoff, expectations, the
 *                     syncer's restarts
 *   its Secret        <job>-tls's metadata (never its data), whether it
 *                     is this job's: read before any pod is made, else at
 *                     most every PASS_TLS_EVERY s (docs/operator.md,
 *                     Security)
 *   its templates     checked against the operator's pod policy
 *                     (podtemplate.h)
 *   its progress      the syncer's /status, read every PASS_PROGRESS_EVERY s
 *                     by the progress reader (progress.h)
 *                     while its pod is ready, else the last one read or
 *                     written in status.progress
 *
 * The later steps (operator.c's sync_job) take the same struct pass:
 * reconcile() fills p->out, apply.c writes the actions and the status.
 */
#ifndef DDILOCO_PASS_H
#define DDILOCO_PASS_H

#include <jansson.h>

#include "common/err.h"
#include "common/jobspec.h"
#include "operator/caches.h"
#include "operator/chaos_ctl.h"
#include "operator/children.h"
#include "operator/jobmem.h"
#include "operator/kube.h"
#include "operator/metrics.h"
#include "operator/podtemplate.h"
#include "operator/progress.h"
#include "operator/reconcile.h"

#define PASS_PROGRESS_EVERY 5.0     /* seconds between /status reads */
#define PASS_PROGRESS_TIMEOUT 2.0   /* seconds for one, connecting included */
#define PASS_TLS_EVERY 30.0         /* seconds between reads of <job>-tls
				       while it is this job's and no pod is
				       to be made */

/* What a worker's passes read from and write through. */
struct pass_env {
	const struct caches *caches;
	struct jobmem_table *mems;
	struct op_metrics *metrics;
	const char *status_url;       /* the syncer's /status: {job}
					 {namespace} {port} {shard} replaced */
	const char *operator_ns;      /* for the syncers' NetworkPolicies */
	const struct pod_policy *policy;   /* what templates may ask for */
	struct chaos_ctl *chaos;      /* or NULL: status.chaos is kept */
	struct kube *k;               /* the worker's own connection */
	struct progress *progress;    /* the syncers' /status, read off the
				       * workers (operator/progress.h) */
	const char *external_storage; /* child_ctx's (children.h) */
	const struct runtime_image *runtime;   /* child_ctx's */
};

/*
 * One pass over one job: what observe read, what reconcile() decided.
 * Everything here is the pass's own and freed by pass_release.
 */
struct pass {
	const char *key;
	char ns[64], name[64];
	const char *uid;              /* the job's, inside job */
	json_t *job;                  /* a copy from the cache */
	json_t *status;               /* job's status (borrowed) */
	json_t *core;                 /* job_core(job) */
	char *core_text;
	struct job_spec js;
	int spec_error;
	struct err spec_err;
	struct jobmem *m;
	char drift_rv[DRIFT_N][32];   /* a drifted child's live version */
	/* the syncer StatefulSet's LABEL_POD_SPEC and version as cached, for
	 * pass_outdated ("" none) */
	char syncer_spec[20], syncer_rv[32];
	struct obs_pod *pods;
	struct obs_pod evaluator;     /* its pod, when in.evaluator is set */
	char syncer_reason[64], syncer_message[256];   /* why it cannot start */
	int syncer_ready_replicas;    /* the StatefulSet's readyReplicas */
	struct obs_pod syncer_pods[JOB_MAX_SHARDS];   /* index: the shard */
	int nsyncer_pods;
	struct exit_rule exit_rules[RC_MAX_EXIT_RULES];
	char template_reason[64], template_message[256];
	struct rc_input in;
	struct rc_output out;
	json_t *workload;             /* its Workload as read (queue.h), or NULL */
};

/* The context its children are built in: c is filled from p and env
 * (retain: the claim without an owner). */
void pass_child_ctx(const struct pass_env *env, const struct pass *p, int retain,
		    struct child_ctx *c);

/* Step 1b, once the queue's placement is in p (queue_observe): each
 * learner pod's and the evaluator's outdated, and in.syncer_outdated,
 * from their
 * LABEL_POD_SPEC and what the job asks for now (child_learner,
 * child_evaluator, child_syncer). */
void pass_outdated(const struct pass_env *env, struct pass *p);

/*
 * Step 1: p (overwritten) gets everything reconcile() needs for key
 * "ns/name". 0 done; 1 the job is gone or not ours (its memory is
 * dropped); -1 retry. p is released with pass_release in every case.
 */
int pass_observe(const struct pass_env *env, const char *key, struct pass *p);
void pass_release(struct pass *p);

#endif
