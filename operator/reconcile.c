/*
 * reconcile: the decisions of reconcile.h. Inputs are plain structs so
 * the unit tests can state a situation in a few lines and check the
 * actions, phase and conditions that come out.
 *
 * Duplicate children cannot come from here: every child has a fixed name
 * (<job>-learner-<i>, <job>-syncer, ...), and a create is server-side
 * apply, so a repeated decision writes the same object. What memory
 * guards against is counting a recreation twice while the cache has not
 * yet seen the pod just applied (create_sent: "expectations").
 */
#include "operator/reconcile.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *phase_names[] = {
	"Pending", "Running", "Restarting", "Suspended", "Succeeded", "Failed",
};

static const char *cond_names[COND_N] = {
	"Created", "Running", "Succeeded", "Failed", "Suspended", "PodsReady",
	"CheckpointFailing",
};

const char *job_phase_name(enum job_phase p)
{
	return phase_names[p];
}

enum job_phase job_phase_parse(const char *s)
{
	for (int i = 0; s && i < 6; i++)
		if (!strcmp(s, phase_names[i]))
			return (enum job_phase)i;
	return PHASE_PENDING;
}

const char *cond_type_name(enum cond_type t)
{
	return cond_names[t];
}

double rc_backoff(int fails)
{
	double d;

	if (fails <= 1)
		return 0;
	if (fails > 30)
		return RC_BACKOFF_CAP;
	d = RC_BACKOFF_BASE * ldexp(1.0, fails - 2);
	return d > RC_BACKOFF_CAP ? RC_BACKOFF_CAP : d;
}

void cond_set(struct condition *c, int status, const char *reason,
	      const char *message, const char *now)
{
	if (!c->set || c->status != status)
		snprintf(c->time, sizeof(c->time), "%s", now);
	c->set = 1;
	c->status = status;
	snprintf(c->reason, sizeof(c->reason), "%s", reason);
	snprintf(c->message, sizeof(c->message), "%s", message);
}

static struct rc_action *act(struct rc_output *o, enum rc_kind kind, int index)
{
	struct rc_action *a;

	if (o->nacts == o->cap) {
		int cap = o->cap ? o->cap * 2 : 16;
		struct rc_action *n = realloc(o->acts, (size_t)cap * sizeof(*n));
		if (!n)
			return NULL;
		o->acts = n;
		o->cap = cap;
	}
	a = &o->acts[o->nacts++];
	memset(a, 0, sizeof(*a));
	a->kind = kind;
	a->index = index;
	return a;
}

__attribute__((format(printf, 4, 5)))
static void event(struct rc_output *o, int warning, const char *reason,
		  const char *fmt, ...)
{
	struct rc_action *a = act(o, ACT_EVENT, -1);
	va_list ap;

	if (!a)
		return;
	a->warning = warning;
	snprintf(a->reason, sizeof(a->reason), "%s", reason);
	va_start(ap, fmt);
	vsnprintf(a->message, sizeof(a->message), fmt, ap);
	va_end(ap);
}

static void requeue(struct rc_output *o, double after)
{
	if (after < 0.05)
		after = 0.05;
	if (!o->requeue_after || after < o->requeue_after)
		o->requeue_after = after;
}

static void fmt_time(double t, char *out, size_t n)
{
	time_t s = (time_t)t;
	struct tm tm;

	gmtime_r(&s, &tm);
	strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void delete_pod(struct rc_output *o, const struct obs_pod *p)
{
	struct rc_action *a = act(o, ACT_DELETE_LEARNER, p->index);

	if (a)
		snprintf(a->uid, sizeof(a->uid), "%s", p->uid);
}

/* Stops what still runs: terminal and suspended jobs. */
static void stop_all(const struct rc_input *in, struct rc_output *o)
{
	for (int i = 0; i < in->npods; i++)
		if (!in->pods[i].deleting &&
		    (in->pods[i].state == POD_PENDING ||
		     in->pods[i].state == POD_RUNNING ||
		     in->spec->suspend))
			delete_pod(o, &in->pods[i]);
	if (in->statefulset)
		act(o, ACT_DELETE_SYNCER, -1);
}

static void terminal(const struct rc_input *in, struct rc_output *o,
		     const char *now)
{
	int ttl = in->spec->ttl_seconds_after_finished;

	stop_all(in, o);
	if (o->conds[COND_RUNNING].set && o->conds[COND_RUNNING].status)
		cond_set(&o->conds[COND_RUNNING], 0, "JobFinished",
			 "the job has finished", now);
	if (o->conds[COND_PODS_READY].set && o->conds[COND_PODS_READY].status)
		cond_set(&o->conds[COND_PODS_READY], 0, "JobFinished",
			 "the job has finished", now);
	if (ttl >= 0 && o->completion_time > 0) {
		double due = o->completion_time + ttl;

		if (in->now >= due)
			act(o, ACT_DELETE_JOB, -1);
		else
			requeue(o, due - in->now);
	}
}

static void finish(const struct rc_input *in, struct rc_output *o,
		   enum job_phase phase, const char *reason, const char *msg,
		   const char *now)
{
	o->phase = phase;
	o->completion_time = in->now;
	if (phase == PHASE_SUCCEEDED) {
		cond_set(&o->conds[COND_SUCCEEDED], 1, reason, msg, now);
		event(o, 0, "Succeeded", "%s", msg);
	} else {
		cond_set(&o->conds[COND_FAILED], 1, reason, msg, now);
		event(o, 1, "Failed", "%s", msg);
	}
	cond_set(&o->conds[COND_RUNNING], 0, "JobFinished", msg, now);
	terminal(in, o, now);
}

/* Learner pods: delete failed ones, (re)create missing ones. */
static void learners(const struct rc_input *in, struct learner_mem *mem,
		     const struct obs_pod **seen, int created, int M,
		     struct rc_output *o)
{
	for (int i = 0; i < M; i++) {
		const struct obs_pod *p = seen[i];
		struct learner_mem *m = &mem[i];
		struct rc_action *ra;
		double wait;

		if (p) {
			m->create_sent = 0;
			m->create_uid[0] = '\0';
			m->create_gone = 0;
			m->seen = 1;
			if (p->deleting)
				continue;
			if (p->state == POD_FAILED) {
				delete_pod(o, p);
				event(o, 1, "LearnerFailed",
				      "learner %d failed: pod deleted, to be recreated", i);
				continue;
			}
			if (p->ready && p->ready_since > 0 &&
			    in->now - p->ready_since >= RC_STABLE_SECONDS)
				m->fails = 0;
			continue;
		}
		if (m->create_sent > 0 && m->create_gone) {
			/* made and deleted before this cache showed it (a
			 * stale delete of the old name): gone, not pending */
			m->create_sent = 0;
			m->create_uid[0] = '\0';
			m->create_gone = 0;
			m->seen = 1;
		}
		if (m->create_sent > 0) {
			double age = in->now - m->create_sent;

			if (age < RC_EXPECT_SECONDS) {
				requeue(o, RC_EXPECT_SECONDS - age);
				continue;
			}
			m->create_sent = 0;   /* never seen: apply again */
			act(o, ACT_APPLY_LEARNER, i);
			m->create_sent = in->now;
			continue;
		}
		if (!created && !m->seen) {   /* a first creation */
			act(o, ACT_APPLY_LEARNER, i);
			m->create_sent = in->now;
			continue;
		}
		if (m->not_before == 0) {   /* just noticed it is gone */
			m->fails++;
			m->not_before = in->now + rc_backoff(m->fails);
		}
		wait = m->not_before - in->now;
		if (wait > 0) {
			requeue(o, wait);
			continue;
		}
		m->restarts++;
		m->not_before = 0;
		if ((ra = act(o, ACT_APPLY_LEARNER, i)))
			ra->recreate = 1;
		m->create_sent = in->now;
		event(o, 0, "LearnerRecreated",
		      "learner %d recreated (restart %d, backoff %.0fs)", i,
		      m->restarts, rc_backoff(m->fails));
	}
}

/*
 * PodsReady: the first pod that cannot start names the reason; an Event
 * goes out when that reason first appears.
 */
static void pods_ready(const struct rc_input *in, int M, struct rc_output *o,
		       const char *now)
{
	struct condition *c = &o->conds[COND_PODS_READY];
	const struct obs_pod *b = NULL;
	const char *reason = NULL;
	char msg[256];
	int nb = 0;

	for (int i = 0; i < in->npods; i++) {
		const struct obs_pod *p = &in->pods[i];

		if (p->index < 0 || p->index >= M || p->deleting || p->ready ||
		    !p->reason[0])
			continue;
		if (!b)
			b = p;
		nb++;
	}
	if (in->syncer_reason && in->syncer_reason[0] && !in->syncer_ready) {
		reason = in->syncer_reason;
		/* the condition's message is a summary: a pod's message is cut to
		 * 200 characters so that it fits after the prefix */
		snprintf(msg, sizeof(msg), "syncer: %.200s",
			 in->syncer_message ? in->syncer_message : "");
	} else if (b) {
		reason = b->reason;
		if (nb > 1)
			snprintf(msg, sizeof(msg), "learner %d (and %d more): %.200s",
				 b->index, nb - 1, b->message);
		else
			snprintf(msg, sizeof(msg), "learner %d: %.200s", b->index,
				 b->message);
	}
	if (reason) {
		if (!c->set || c->status || strcmp(c->reason, reason))
			event(o, 1, reason, "%s", msg);
		cond_set(c, 0, reason, msg, now);
		return;
	}
	if (o->ready == M && in->syncer_ready) {
		snprintf(msg, sizeof(msg), "%d/%d learners ready, syncer ready",
			 o->ready, M);
		cond_set(c, 1, "AllPodsReady", msg, now);
	} else {
		snprintf(msg, sizeof(msg), "%d/%d learners ready, syncer %s",
			 o->ready, M, in->syncer_ready ? "ready" : "not ready");
		cond_set(c, 0, "PodsStarting", msg, now);
	}
}

/*
 * CheckpointFailing from the syncer's last /status: set when a write
 * fails, an Event at each turn, False again when a write succeeds.
 */
static void ckpt_failing(const struct rc_input *in, struct rc_output *o,
			 const char *now)
{
	const struct obs_progress *p = &in->progress;
	struct condition *c = &o->conds[COND_CHECKPOINT_FAILING];
	char msg[256];

	if (!p->have || !p->ckpt_have)
		return;
	if (p->ckpt_failing) {
		if (p->ckpt_last_ok_round >= 0)
			snprintf(msg, sizeof(msg), "syncer: %s (%lld failed; "
				 "the last checkpoint is of round %lld)",
				 p->ckpt_error, p->ckpt_failures,
				 p->ckpt_last_ok_round);
		else
			snprintf(msg, sizeof(msg), "syncer: %s (%lld failed; "
				 "no checkpoint yet)", p->ckpt_error,
				 p->ckpt_failures);
		if (!c->set || !c->status)
			event(o, 1, "CheckpointFailing", "%s", msg);
		cond_set(c, 1, "CheckpointWriteFailed", msg, now);
	} else if (c->set && c->status) {
		snprintf(msg, sizeof(msg), "checkpoint of round %lld written",
			 p->ckpt_last_ok_round);
		event(o, 0, "CheckpointWritten", "%s", msg);
		cond_set(c, 0, "CheckpointWritten", msg, now);
	}
}

/*
 * Long on purpose: the decisions of reconcile.h in their order (deleting,
 * terminal, invalid spec, suspend, done, backoff limit, children, phase),
 * each able to end the pass, read best as one sequence.
 */
int reconcile(const struct rc_input *in, struct learner_mem *mem,
	      struct rc_output *o)
{
	const struct job_spec *js = in->spec;
	int M = js->learners.replicas, K = js->syncer.min_quorum;
	const struct obs_pod **seen;
	int created, restarts = 0, succeeded = 0, resumed = 0;
	char now[40], msg[256];

	memset(o, 0, sizeof(*o));
	o->phase = in->phase;
	o->total = M;
	o->start_time = in->start_time;
	o->completion_time = in->completion_time;
	memcpy(o->conds, in->conds, sizeof(o->conds));
	fmt_time(in->now, now, sizeof(now));
	if (in->deleting)
		return 0;
	ckpt_failing(in, o, now);
	if (M < 1 || M > RC_MAX_LEARNERS)
		M = 0;
	if (!(seen = calloc((size_t)(M ? M : 1), sizeof(*seen))))
		return -1;
	for (int i = 0; i < in->npods; i++) {
		const struct obs_pod *p = &in->pods[i];

		if (p->index >= 0 && p->index < M && !seen[p->index])
			seen[p->index] = p;
		if (p->index >= 0 && p->index < M && p->ready &&
		    p->state == POD_RUNNING && !p->deleting)
			o->ready++;
		if (p->index >= 0 && p->index < M && p->state == POD_SUCCEEDED)
			succeeded++;
	}
	for (int i = 0; i < M; i++)
		restarts += mem[i].restarts;

	if (o->phase == PHASE_SUCCEEDED || o->phase == PHASE_FAILED) {
		if (!o->completion_time)
			o->completion_time = in->now;
		terminal(in, o, now);
		goto out;
	}
	if (in->spec_error) {
		finish(in, o, PHASE_FAILED, "InvalidSpec",
		       in->spec_error_msg ? in->spec_error_msg : "invalid spec", now);
		goto out;
	}

	if (js->suspend) {
		stop_all(in, o);
		if (o->phase != PHASE_SUSPENDED)
			event(o, 0, "Suspended",
			      "job suspended: learner pods and syncer deleted, checkpoints kept");
		o->phase = PHASE_SUSPENDED;
		cond_set(&o->conds[COND_SUSPENDED], 1, "JobSuspended",
			 "spec.suspend is true", now);
		cond_set(&o->conds[COND_RUNNING], 0, "JobSuspended",
			 "spec.suspend is true", now);
		if (o->conds[COND_PODS_READY].set)
			cond_set(&o->conds[COND_PODS_READY], 0, "JobSuspended",
				 "spec.suspend is true", now);
		for (int i = 0; i < M; i++) {
			mem[i].not_before = 0;
			mem[i].create_sent = 0;
			mem[i].seen = 0;   /* resumed pods are not restarts */
		}
		goto out;
	}
	if (o->phase == PHASE_SUSPENDED) {
		resumed = 1;
		o->phase = o->start_time ? PHASE_RESTARTING : PHASE_PENDING;
		event(o, 0, "Resumed", "job resumed: recreating the syncer and learners");
		cond_set(&o->conds[COND_SUSPENDED], 0, "JobResumed",
			 "spec.suspend is false", now);
	}

	if ((in->progress.have && in->progress.done) ||
	    (M > 0 && succeeded == M)) {
		snprintf(msg, sizeof(msg), in->progress.have && in->progress.done ?
			 "the budget is reached (round %lld, %lld tokens)" :
			 "every learner exited successfully (round %lld, %lld tokens)",
			 in->progress.round, in->progress.tokens);
		finish(in, o, PHASE_SUCCEEDED,
		       in->progress.have && in->progress.done ? "BudgetReached" :
		       "LearnersCompleted", msg, now);
		goto out;
	}
	if (in->backoff_limit >= 0 && restarts > in->backoff_limit) {
		snprintf(msg, sizeof(msg),
			 "learner pods were recreated %d times, more than spec.backoffLimit (%d)",
			 restarts, in->backoff_limit);
		finish(in, o, PHASE_FAILED, "BackoffLimitExceeded", msg, now);
		goto out;
	}

	/* children */
	if (!in->configmap)
		act(o, ACT_APPLY_CONFIGMAP, -1);
	if (!in->service)
		act(o, ACT_APPLY_SERVICE, -1);
	/* before the syncer: its pod is never up without its policy */
	if (!in->netpol)
		act(o, ACT_APPLY_NETPOL, -1);
	/* a create, never a replace: 409 leaves the job's identities alone */
	if (in->want_tls && (!in->tls || !in->statefulset))
		act(o, ACT_CREATE_TLS, -1);
	if (in->want_pvc && !in->pvc)
		act(o, ACT_APPLY_PVC, -1);
	if (!in->statefulset)
		act(o, ACT_APPLY_SYNCER, -1);
	for (int i = 0; i < in->npods; i++)
		if ((in->pods[i].index < 0 || in->pods[i].index >= M) &&
		    !in->pods[i].deleting)
			delete_pod(o, &in->pods[i]);   /* not ours to keep */
	created = o->conds[COND_CREATED].set && o->conds[COND_CREATED].status &&
		  !resumed;
	learners(in, mem, seen, created, M, o);

	if (!(o->conds[COND_CREATED].set && o->conds[COND_CREATED].status)) {
		int all = in->configmap && in->service && in->netpol &&
			  (!in->want_tls || in->tls) && in->statefulset &&
			  (!in->want_pvc || in->pvc);

		for (int i = 0; i < M && all; i++)
			all = seen[i] != NULL;
		if (all) {
			snprintf(msg, sizeof(msg),
				 "%d learner pods, syncer StatefulSet and Service created", M);
			cond_set(&o->conds[COND_CREATED], 1, "ChildrenCreated", msg, now);
			event(o, 0, "Created", "%s", msg);
		} else if (!o->conds[COND_CREATED].set) {
			cond_set(&o->conds[COND_CREATED], 0, "Creating",
				 "creating the syncer and learner pods", now);
		}
	} else if (resumed) {
		cond_set(&o->conds[COND_CREATED], 0, "Creating",
			 "recreating the syncer and learner pods after resume", now);
	}

	if (in->syncer_ready && o->ready >= K) {
		if (o->phase != PHASE_RUNNING)
			event(o, 0, "Running", "%d/%d learners ready, syncer ready",
			      o->ready, M);
		o->phase = PHASE_RUNNING;
		if (!o->start_time)
			o->start_time = in->now;
		snprintf(msg, sizeof(msg), "%d/%d learners ready, syncer ready",
			 o->ready, M);
		cond_set(&o->conds[COND_RUNNING], 1, "QuorumReady", msg, now);
	} else {
		o->phase = o->start_time ? PHASE_RESTARTING : PHASE_PENDING;
		snprintf(msg, sizeof(msg), "%d/%d learners ready (quorum %d), syncer %s",
			 o->ready, M, K, in->syncer_ready ? "ready" : "not ready");
		cond_set(&o->conds[COND_RUNNING], 0,
			 in->syncer_ready ? "BelowQuorum" : "SyncerNotReady", msg, now);
	}
	if (o->conds[COND_SUSPENDED].set && o->conds[COND_SUSPENDED].status)
		cond_set(&o->conds[COND_SUSPENDED], 0, "JobResumed",
			 "spec.suspend is false", now);
	pods_ready(in, M, o, now);
out:
	free(seen);
	return 0;
}

void rc_output_release(struct rc_output *o)
{
	free(o->acts);
	o->acts = NULL;
	o->nacts = o->cap = 0;
}
