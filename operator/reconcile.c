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
#include "operator/children.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *phase_names[] = {
	"Pending", "Running", "Restarting", "Suspended", "Succeeded", "Failed",
};

/* Complete and Failed as batch/v1 Job names them, so what waits for a
 * Job's end (kubectl wait --for=condition=Complete, queueing controllers)
 * reads a job's end the same way; the phase stays Succeeded. */
static const char *cond_names[COND_N] = {
	"Created", "Running", "Complete", "Failed", "Suspended", "PodsReady",
	"CheckpointFailing", "ModelStartedOver", "SyncerShards",
	"CheckpointStorage", "VersionMismatch", "LearnersExcluded",
	"TemplateRefused", "SecretNotOwned", "Admitted",
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

static void delete_evaluator(struct rc_output *o, const struct obs_pod *p)
{
	struct rc_action *a = act(o, ACT_DELETE_EVALUATOR, 0);

	if (a)
		snprintf(a->uid, sizeof(a->uid), "%s", p->uid);
}

/* Stops what still runs: terminal and suspended jobs. */
static void stop_all(const struct rc_input *in, struct rc_output *o)
{
	const struct obs_pod *ev = in->evaluator;

	for (int i = 0; i < in->npods; i++)
		if (!in->pods[i].deleting &&
		    (in->pods[i].state == POD_PENDING ||
		     in->pods[i].state == POD_RUNNING ||
		     in->spec->suspend))
			delete_pod(o, &in->pods[i]);
	if (ev && !ev->deleting && (ev->state == POD_PENDING ||
				    ev->state == POD_RUNNING || in->spec->suspend))
		delete_evaluator(o, ev);
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
		cond_set(&o->conds[COND_COMPLETE], 1, reason, msg, now);
		event(o, 0, "Succeeded", "%s", msg);
	} else {
		cond_set(&o->conds[COND_FAILED], 1, reason, msg, now);
		event(o, 1, "Failed", "%s", msg);
	}
	cond_set(&o->conds[COND_RUNNING], 0, "JobFinished", msg, now);
	terminal(in, o, now);
}

/* What spec.failurePolicy.rules say of a learner's exit code. */
static enum exit_action exit_rule_action(const struct rc_input *in, int code)
{
	for (int r = 0; r < in->nexit_rules; r++) {
		const struct exit_rule *x = &in->exit_rules[r];
		int hit = 0;

		for (int k = 0; k < x->ncodes && !hit; k++)
			hit = x->codes[k] == code;
		/* an exit code not known (-1) matches no rule */
		if (code >= 0 && hit != x->not_in)
			return x->action;
	}
	return EXIT_COUNT;
}

/* Its pod is in the cache: no create is pending any more. */
static void pod_seen(struct learner_mem *m)
{
	m->create_sent = 0;
	m->create_uid[0] = '\0';
	m->create_gone = 0;
	m->seen = 1;
}

/*
 * A create sent and not yet in the cache: 1 while it is awaited (or
 * applied again once RC_EXPECT_SECONDS passed without it), 0 when none
 * is pending.
 */
static int create_pending(const struct rc_input *in, struct learner_mem *m,
			  enum rc_kind kind, int index, struct rc_output *o)
{
	double age;

	if (m->create_sent > 0 && m->create_gone)
		/* made and deleted before this cache showed it (a stale
		 * delete of the old name): gone, not pending */
		pod_seen(m);
	if (m->create_sent <= 0)
		return 0;
	age = in->now - m->create_sent;
	if (age < RC_EXPECT_SECONDS) {
		requeue(o, RC_EXPECT_SECONDS - age);
		return 1;
	}
	act(o, kind, index);   /* never seen: apply again */
	m->create_sent = in->now;
	return 1;
}

/* A pod gone: 1 while its recreation waits out the backoff. */
static int backing_off(const struct rc_input *in, struct learner_mem *m,
		       struct rc_output *o)
{
	double wait;

	if (m->not_before == 0) {   /* just noticed it is gone */
		m->fails++;
		m->not_before = in->now + rc_backoff(m->fails);
	}
	wait = m->not_before - in->now;
	if (wait > 0) {
		requeue(o, wait);
		return 1;
	}
	return 0;
}

/*
 * A pod whose sidecar refused the learner side's versions (reconcile.h,
 * VersionMismatch): its learner (who: "learner" i, or "evaluator" 0) is
 * held at this generation, once, with a Warning Event.
 */
static void hold(const struct rc_input *in, struct learner_mem *m,
		 const struct obs_pod *p, const char *who, int i,
		 struct rc_output *o)
{
	if (m->held && m->held_generation == in->generation)
		return;
	m->held = 1;
	m->held_generation = in->generation;
	m->not_before = 0;
	snprintf(m->held_msg, sizeof(m->held_msg), "%s", p->mismatch);
	event(o, 1, "VersionMismatch", "%s %d: %.180s: pod deleted, not "
	      "recreated until the job's spec changes", who, i, m->held_msg);
}

/* A held learner is released by a new generation of the job: the spec
 * changed (its image, say). */
static void release_hold(const struct rc_input *in, struct learner_mem *m,
			 const char *who, int i, struct rc_output *o)
{
	if (!m->held || m->held_generation == in->generation)
		return;
	m->held = 0;
	event(o, 0, "VersionMismatchReleased", "%s %d: the job's spec changed "
	      "(generation %lld): recreated", who, i, in->generation);
}

/*
 * VersionMismatch from the holds (reconcile.h): True naming the first
 * held learner; 1 when so many are held that minQuorum cannot be met
 * (the job Fails, its message in msg).
 */
static int version_holds(const struct rc_input *in, const struct learner_mem *mem,
			 int M, struct rc_output *o, const char *now, char *msg,
			 size_t n)
{
	struct condition *c = &o->conds[COND_VERSION_MISMATCH];
	const struct learner_mem *ev = in->evaluator_mem;
	int held = 0, first = -1;
	char more[32] = "";

	for (int i = 0; i < M; i++)
		if (mem[i].held && held++ == 0)
			first = i;
	if (held > 1)
		snprintf(more, sizeof(more), " (and %d more)", held - 1);
	if (first >= 0)
		snprintf(msg, n, "learner %d%s: %.200s", first, more,
			 mem[first].held_msg);
	else if (ev && ev->held)
		snprintf(msg, n, "evaluator 0: %.200s", ev->held_msg);
	if (first >= 0 || (ev && ev->held)) {
		cond_set(c, 1, "LearnerVersionMismatch", msg, now);
		return M - held < in->spec->syncer.min_quorum;
	}
	if (c->set && c->status && o->ready == M)
		cond_set(c, 0, "VersionsMatch", "no learner is held for a "
			 "version mismatch", now);
	return 0;
}

/* A learner's pod that failed: deleted, its end judged by the exit-code
 * rules (a disruption never counts) and counted once per pod. */
static void learner_failed(const struct rc_input *in, struct learner_mem *m,
			   const struct obs_pod *p, int i, struct rc_output *o,
			   int *fail_job, char *fail_msg)
{
	enum exit_action x = p->disrupted ? EXIT_IGNORE :
			     exit_rule_action(in, p->exit_code);

	delete_pod(o, p);
	if (x == EXIT_FAIL_JOB && !*fail_job) {
		snprintf(fail_msg, 256, "learner %d exited with code %d, "
			 "which spec.failurePolicy.rules says fails the job",
			 i, p->exit_code);
		*fail_job = 1;
	}
	if (p->disrupted)
		event(o, 0, "LearnerDisrupted",
		      "learner %d disrupted (not counted toward "
		      "backoffLimit): pod deleted, to be recreated", i);
	else if (x == EXIT_IGNORE)
		event(o, 0, "LearnerFailureIgnored",
		      "learner %d exited with code %d: not counted "
		      "(spec.failurePolicy.rules)", i, p->exit_code);
	else
		event(o, 1, "LearnerFailed",
		      "learner %d failed (exit code %d%s%s): pod "
		      "deleted, to be recreated", i, p->exit_code,
		      p->exit_reason[0] ? ", " : "", p->exit_reason);
	/* once per pod: it stays Failed until the delete shows */
	if (x == EXIT_COUNT && strcmp(m->failed_uid, p->uid)) {
		m->failures++;
		snprintf(m->failed_uid, sizeof(m->failed_uid), "%s", p->uid);
	}
}

/* Learner i's pod is in the cache: force-deleted when its node does not
 * let it go, waited for while it terminates, handled when it failed; a
 * ready one resets its backoff, and later its counted failures. */
static void learner_present(const struct rc_input *in, struct learner_mem *m,
			    const struct obs_pod *p, int i, struct rc_output *o,
			    int *fail_job, char *fail_msg)
{
	struct rc_action *ra;

	pod_seen(m);
	if (p->version_mismatch)
		hold(in, m, p, "learner", i, o);
	if (p->deleting && p->delete_at > 0 &&
	    in->now - p->delete_at >= RC_FORCE_DELETE_SECONDS) {
		if ((ra = act(o, ACT_DELETE_LEARNER, i))) {
			snprintf(ra->uid, sizeof(ra->uid), "%s", p->uid);
			ra->force = 1;
		}
		event(o, 1, "LearnerForceDeleted",
		      "learner %d: pod still terminating %.0f s after its "
		      "grace period (its node does not answer): deleted "
		      "with grace period 0", i, in->now - p->delete_at);
		return;
	}
	if (p->deleting) {
		if (p->delete_at > 0)
			requeue(o, p->delete_at + RC_FORCE_DELETE_SECONDS - in->now);
		return;
	}
	if (m->held) {   /* a restart cannot fix it: no failure counted */
		delete_pod(o, p);
		return;
	}
	if (p->state == POD_FAILED) {
		learner_failed(in, m, p, i, o, fail_job, fail_msg);
		return;
	}
	if (p->ready && p->ready_since > 0 &&
	    in->now - p->ready_since >= RC_STABLE_SECONDS)
		m->fails = 0;
	if (p->ready && p->ready_since > 0 && m->failures &&
	    in->now - p->ready_since >= in->backoff_reset) {
		event(o, 0, "BackoffReset",
		      "learner %d healthy for %.0f s: its %d failure(s) "
		      "no longer count", i, in->backoff_reset, m->failures);
		m->failures = 0;
	} else if (p->ready && p->ready_since > 0 && m->failures) {
		requeue(o, p->ready_since + in->backoff_reset - in->now);
	}
}

/* Learner i has no pod: created the first time (created: the job's
 * children were made once), else recreated once its backoff allows. */
static void learner_missing(const struct rc_input *in, struct learner_mem *m,
			    int i, int created, struct rc_output *o)
{
	struct rc_action *ra;

	if (m->held)   /* until the spec changes (VersionMismatch) */
		return;
	if (create_pending(in, m, ACT_APPLY_LEARNER, i, o))
		return;
	if (m->rolled) {   /* roll(): made again at once, no restart */
		m->rolled = 0;
		act(o, ACT_APPLY_LEARNER, i);
		m->create_sent = in->now;
		return;
	}
	if (!created && !m->seen) {   /* a first creation */
		act(o, ACT_APPLY_LEARNER, i);
		m->create_sent = in->now;
		return;
	}
	if (backing_off(in, m, o))
		return;
	m->restarts++;
	m->not_before = 0;
	if ((ra = act(o, ACT_APPLY_LEARNER, i)))
		ra->recreate = 1;
	m->create_sent = in->now;
	event(o, 0, "LearnerRecreated",
	      "learner %d recreated (restart %d, backoff %.0fs)", i,
	      m->restarts, rc_backoff(m->fails));
}

/* Learner pods: delete failed ones, (re)create missing ones. A failure
 * that the exit-code rules say fails the job sets *fail_job and its
 * message (256 bytes). */
static void learners(const struct rc_input *in, struct learner_mem *mem,
		     const struct obs_pod **seen, int created, int M,
		     struct rc_output *o, int *fail_job, char *fail_msg)
{
	for (int i = 0; i < M; i++) {
		release_hold(in, &mem[i], "learner", i, o);
		if (seen[i])
			learner_present(in, &mem[i], seen[i], i, o, fail_job, fail_msg);
		else
			learner_missing(in, &mem[i], i, created, o);
	}
}

/* Rolling (reconcile.h): the first outdated learner pod is deleted when
 * the job runs with every learner Ready and none awaited. */
static void roll(const struct rc_input *in, struct learner_mem *mem,
		 const struct obs_pod **seen, int M, struct rc_output *o)
{
	const struct obs_pod *p = NULL;
	int first = -1;

	if (in->phase != PHASE_RUNNING)
		return;
	for (int i = 0; i < M; i++) {
		p = seen[i];
		if (!p || !p->ready || p->state != POD_RUNNING || p->deleting ||
		    mem[i].create_sent > 0 || mem[i].held)
			return;
		if (p->outdated && first < 0)
			first = i;
	}
	if (first < 0)
		return;
	delete_pod(o, seen[first]);
	mem[first].rolled = 1;
	event(o, 0, "LearnerRolled", "learner %d: the job asks for another pod "
	      "spec (%s): replaced, one learner at a time (%d of %d ready "
	      "meanwhile, minQuorum %d)", first, seen[first]->spec_hash, M - 1, M,
	      in->spec->syncer.min_quorum);
}

/*
 * The evaluator's pod (reconcile.h): as a learner's in learners(), but an
 * end of any kind is only a recreation, never a failure of the job.
 */
static void evaluator(const struct rc_input *in, struct rc_output *o)
{
	const struct obs_pod *p = in->evaluator;
	struct learner_mem *m = in->evaluator_mem;
	struct rc_action *ra;

	if (!m)
		return;
	if (!in->want_evaluator) {
		if (p && !p->deleting)
			delete_evaluator(o, p);   /* spec.evaluator removed */
		return;
	}
	release_hold(in, m, "evaluator", 0, o);
	if (p) {
		pod_seen(m);
		if (p->version_mismatch)
			hold(in, m, p, "evaluator", 0, o);
		if (p->deleting) {
			if (p->delete_at > 0 &&
			    in->now - p->delete_at >= RC_FORCE_DELETE_SECONDS) {
				if ((ra = act(o, ACT_DELETE_EVALUATOR, 0))) {
					snprintf(ra->uid, sizeof(ra->uid), "%s", p->uid);
					ra->force = 1;
				}
			} else if (p->delete_at > 0) {
				requeue(o, p->delete_at + RC_FORCE_DELETE_SECONDS - in->now);
			}
			return;
		}
		if (m->held) {
			delete_evaluator(o, p);
			return;
		}
		if (p->state == POD_FAILED || p->state == POD_SUCCEEDED) {
			delete_evaluator(o, p);
			/* once per pod: it stays ended until the delete shows */
			if (strcmp(m->failed_uid, p->uid)) {
				event(o, p->state == POD_FAILED && !p->disrupted,
				      "EvaluatorEnded", "evaluator 0 %s (exit code %d): "
				      "pod deleted, to be recreated (not counted toward "
				      "backoffLimit)", p->state == POD_FAILED ?
				      "failed" : "exited", p->exit_code);
				snprintf(m->failed_uid, sizeof(m->failed_uid), "%s",
					 p->uid);
			}
			return;
		}
		if (p->ready && p->ready_since > 0 &&
		    in->now - p->ready_since >= RC_STABLE_SECONDS)
			m->fails = 0;
		/* rolled as a learner is, but alone: it is no part of quorum */
		if (p->outdated && p->ready && in->phase == PHASE_RUNNING) {
			delete_evaluator(o, p);
			m->rolled = 1;
			event(o, 0, "EvaluatorRolled", "evaluator 0: the job asks "
			      "for another pod spec (%s): replaced", p->spec_hash);
		}
		return;
	}
	if (m->held || create_pending(in, m, ACT_APPLY_EVALUATOR, 0, o))
		return;
	if (m->rolled) {   /* made again at once, no restart */
		m->rolled = 0;
		act(o, ACT_APPLY_EVALUATOR, 0);
		m->create_sent = in->now;
		return;
	}
	if (!m->seen) {   /* a first creation, or after a resume */
		act(o, ACT_APPLY_EVALUATOR, 0);
		m->create_sent = in->now;
		return;
	}
	if (backing_off(in, m, o))
		return;
	m->restarts++;
	m->not_before = 0;
	if ((ra = act(o, ACT_APPLY_EVALUATOR, 0)))
		ra->recreate = 1;
	m->create_sent = in->now;
	event(o, 0, "EvaluatorRecreated", "evaluator 0 recreated (restart %d, "
	      "backoff %.0fs)", m->restarts, rc_backoff(m->fails));
}

/*
 * Whether a pod's reason is for PodsReady now: a problem at once, a start
 * under way once it lasted past pendingTimeoutSeconds (and a pass is
 * asked for then).
 */
static int reportable(const struct rc_input *in, const char *reason,
		      int starting, double created, struct rc_output *o)
{
	double due;

	if (!reason || !reason[0])
		return 0;
	if (!starting)
		return 1;
	due = (created > 0 ? created : in->now) + in->pending_timeout;
	if (in->now >= due)
		return 1;
	requeue(o, due - in->now);
	return 0;
}

/* "learner 2: " or "syncer: " and a pod's message; for a pod still
 * starting, since when it has been pending first: a time, not an age,
 * so that the condition stays the same from pass to pass and costs no
 * status write. Cut to fit. */
static void pod_message(const struct rc_input *in, const char *who, int nmore,
			const char *message, int starting, double created,
			char *out, size_t n)
{
	char more[32] = "", age[96] = "", since[40];

	if (nmore > 0)
		snprintf(more, sizeof(more), " (and %d more)", nmore);
	if (starting && created > 0) {
		fmt_time(created, since, sizeof(since));
		snprintf(age, sizeof(age), "pending since %s, more than "
			 "pendingTimeoutSeconds %d: ", since, in->pending_timeout);
	}
	/* the condition's message is a summary: the pod's message is cut so
	 * that it fits after the prefix */
	snprintf(out, n, "%s%s: %s%.200s", who, more, age, message ? message : "");
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
	char msg[256], who[32];
	int nb = 0, S = in->spec->syncer.shards;

	for (int i = 0; i < in->npods; i++) {
		const struct obs_pod *p = &in->pods[i];

		if (p->index < 0 || p->index >= M || p->deleting || p->ready ||
		    !reportable(in, p->reason, p->starting, p->created, o))
			continue;
		if (!b)
			b = p;
		nb++;
	}
	if ((!in->syncer_ready || (S > 1 && in->syncer_pods_ready < S)) &&
	    reportable(in, in->syncer_reason, in->syncer_starting,
		       in->syncer_created, o)) {
		reason = in->syncer_reason;
		pod_message(in, "syncer", 0, in->syncer_message,
			    in->syncer_starting, in->syncer_created, msg, sizeof(msg));
	} else if (b) {
		reason = b->reason;
		snprintf(who, sizeof(who), "learner %d", b->index);
		pod_message(in, who, nb - 1, b->message, b->starting, b->created,
			    msg, sizeof(msg));
	}
	if (reason) {
		if (!c->set || c->status || strcmp(c->reason, reason))
			event(o, 1, reason, "%s", msg);
		cond_set(c, 0, reason, msg, now);
		return;
	}
	/* a sharded syncer: every shard's pod (docs/operator.md, Shards) */
	if (S > 1 && o->ready == M && in->syncer_pods_ready >= S) {
		snprintf(msg, sizeof(msg), "%d/%d learners ready, %d/%d syncer "
			 "shards ready", o->ready, M, in->syncer_pods_ready, S);
		cond_set(c, 1, "AllPodsReady", msg, now);
	} else if (S > 1) {
		snprintf(msg, sizeof(msg), "%d/%d learners ready, %d/%d syncer "
			 "shards ready", o->ready, M, in->syncer_pods_ready, S);
		cond_set(c, 0, "PodsStarting", msg, now);
	} else if (o->ready == M && in->syncer_ready) {
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
 * CheckpointFailing from the syncer's last /status: set when a
 * checkpoint write fails (CheckpointWriteFailed) or the high-water
 * mark's does (MarkWriteFailed: rounds past the mark on disk wait), an
 * Event at each turn, False again when writes succeed.
 */
static void ckpt_failing(const struct rc_input *in, struct rc_output *o,
			 const char *now)
{
	const struct obs_progress *p = &in->progress;
	struct condition *c = &o->conds[COND_CHECKPOINT_FAILING];
	char msg[256];

	if (!p->have || !p->ckpt_have)
		return;
	if (p->mark_failing) {
		snprintf(msg, sizeof(msg), "syncer: %s (rounds past %lld wait "
			 "for it)", p->mark_error, p->mark_covered_round);
		if (!c->set || !c->status || strcmp(c->reason, "MarkWriteFailed"))
			event(o, 1, "CheckpointFailing", "%s", msg);
		cond_set(c, 1, "MarkWriteFailed", msg, now);
	} else if (p->ckpt_failing) {
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
 * A claim of the operator's own that is too small for the adopted model
 * (an external model's size is known only from its first Hello) is
 * resized, unless spec.syncer.storage says its size: to what a
 * checkpoint needs times CKPT_HEADROOM in whole GiB. What is said of it
 * goes after "...free: " in msg (n bytes).
 */
static void claim_grow(const struct rc_input *in, struct rc_output *o,
		       char *msg, size_t n)
{
	const struct obs_progress *p = &in->progress;
	int i = p->ckpt_room_shard;
	double gib = ceil(CKPT_HEADROOM * (double)p->ckpt_needed / 0x1p30), want;
	char claim[CHILD_NAME_MAX];
	struct rc_action *a;

	if (!in->want_pvc || in->pvc_owned != 1 || in->storage_given || i < 0 ||
	    i >= JOB_MAX_SHARDS ||
	    own_claim_name(in->spec->name, in->spec->syncer.shards, i, claim,
			   sizeof(claim))) {
		snprintf(msg, n, "set spec.syncer.storage (each shard's claim) larger");
		return;
	}
	want = (gib < 1 ? 1 : gib) * 0x1p30;
	if (in->resize_refused && in->resize_refused_shard == i &&
	    in->resize_refused_bytes >= want) {
		snprintf(msg, n, "resizing claim %s to %.0fGi was refused (%s): set "
			 "spec.syncer.storage larger", claim, want / 0x1p30,
			 in->resize_refused);
	} else if (in->claim_bytes[i] < want && (a = act(o, ACT_RESIZE_PVC, i))) {
		a->bytes = want;
		snprintf(msg, n, "claim %s resized to %.0fGi (its StorageClass must "
			 "allow volume expansion)", claim, want / 0x1p30);
		/* the Event once the API server took it (apply.c) */
		snprintf(a->reason, sizeof(a->reason), "CheckpointClaimResized");
		snprintf(a->message, sizeof(a->message), "claim %.190s: %.0fGi asked "
			 "for a checkpoint of %llu bytes", claim, want / 0x1p30,
			 p->ckpt_needed);
	} else {
		snprintf(msg, n, "claim %s asks for %.0fGi: waiting for its volume "
			 "to grow", claim, in->claim_bytes[i] / 0x1p30);
	}
}

/* CheckpointStorage from the shards' last /status (reconcile.h). */
static void ckpt_storage(const struct rc_input *in, struct rc_output *o,
			 const char *now)
{
	const struct obs_progress *p = &in->progress;
	struct condition *c = &o->conds[COND_CHECKPOINT_STORAGE];
	char msg[1024], pod[96], what[720];   /* cut to 255 by cond_set */

	if (!p->have || !p->ckpt_room)
		return;
	if (p->ckpt_room > 0) {
		cond_set(c, 1, "CheckpointStorageFits", "a checkpoint of the "
			 "model fits on every syncer shard's volume", now);
		return;
	}
	snprintf(pod, sizeof(pod), "%s-syncer-%d", in->spec->name,
		 p->ckpt_room_shard);
	claim_grow(in, o, what, sizeof(what));
	snprintf(msg, sizeof(msg), "syncer shard %d (%s): a checkpoint needs "
		 "%llu bytes, its volume has %llu free: %s", p->ckpt_room_shard,
		 pod, p->ckpt_needed, p->ckpt_free, what);
	if (!c->set || c->status)
		event(o, 1, "CheckpointStorageTooSmall", "%s", msg);
	cond_set(c, 0, "CheckpointStorageTooSmall", msg, now);
}

/* SyncerShards from the shards' last /status reads (reconcile.h). */
static void syncer_shards(const struct rc_input *in, struct rc_output *o,
			  const char *now)
{
	const struct obs_progress *p = &in->progress;
	struct condition *c = &o->conds[COND_SYNCER_SHARDS];
	char msg[512];   /* cut to a condition's 255 by cond_set */

	if (in->spec->syncer.shards < 2 || p->shards < 2)
		return;
	if (p->shard_down < 0) {
		snprintf(msg, sizeof(msg), "all %d syncer shards answer", p->shards);
		if (c->set && !c->status && !strcmp(c->reason, "ShardDown"))
			event(o, 0, "ShardsUp", "%s", msg);
		cond_set(c, 1, "AllShardsUp", msg, now);
		return;
	}
	/* the pod's name is at most 63 bytes (docs/operator.md, Names), so
	 * the error keeps 90 of the message's 255 */
	snprintf(msg, sizeof(msg), "%d/%d syncer shards answer; shard %d "
		 "(%.53s-syncer-%d) does not: %.90s; the others' fragments keep "
		 "merging", p->shards_up, p->shards, p->shard_down, in->spec->name,
		 p->shard_down, p->shard_down_error);
	/* before every shard first answered, the job is starting: no alarm */
	if (!c->set || !strcmp(c->reason, "ShardsStarting")) {
		cond_set(c, 0, "ShardsStarting", msg, now);
		return;
	}
	if (c->status)
		event(o, 1, "ShardDown", "%s", msg);
	cond_set(c, 0, "ShardDown", msg, now);
}

/*
 * ModelStartedOver from the syncer's last /status: True while the
 * running syncer process started from the seed although the high-water
 * mark says rounds were handed out before (no checkpoint loaded: the
 * model trained so far is lost), with a Warning Event when it is set;
 * False once a later syncer process resumes from a checkpoint.
 */
static void started_over(const struct rc_input *in, struct rc_output *o,
			 const char *now)
{
	const struct obs_progress *p = &in->progress;
	struct condition *c = &o->conds[COND_MODEL_STARTED_OVER];
	const char *msg = "syncer: no checkpoint loaded at its start although "
			  "rounds were handed out before: the model started "
			  "over from the seed";

	if (!p->have || !p->ckpt_have || p->started_over < 0)
		return;
	if (p->started_over) {
		if (!c->set || !c->status)
			event(o, 1, "ModelStartedOver", "%s", msg);
		cond_set(c, 1, "NoCheckpointLoaded", msg, now);
	} else if (c->set && c->status) {
		cond_set(c, 0, "ResumedFromCheckpoint", "syncer: resumed from "
			 "a checkpoint", now);
	}
}

/*
 * LearnersExcluded from the syncer's last /status: True while it has
 * excluded learners for their claims (docs/syncer.md, What a learner
 * claims), naming them, with a Warning Event each time the set grows;
 * False once a syncer excludes none (a restarted one forgets the cuts).
 * Absent while none was ever excluded; the job runs on either way.
 */
static void learners_excluded(const struct rc_input *in, struct rc_output *o,
			      const char *now)
{
	const struct obs_progress *p = &in->progress;
	struct condition *c = &o->conds[COND_LEARNERS_EXCLUDED];
	char msg[256];

	if (!p->have || p->excluded < 0)
		return;
	if (p->excluded > 0) {
		snprintf(msg, sizeof(msg), "syncer: %d learner%s excluded (%s): "
			 "%s claims of steps or tokens were cut in "
			 "spec.syncer.maxClaimCuts strikes; the others train on",
			 p->excluded, p->excluded > 1 ? "s" : "",
			 p->excluded_ids, p->excluded > 1 ? "their" : "its");
		if (!c->set || !c->status || strcmp(c->message, msg))
			event(o, 1, "LearnersExcluded", "%s", msg);
		cond_set(c, 1, "ClaimsCut", msg, now);
	} else if (c->set && c->status) {
		cond_set(c, 0, "NoneExcluded", "syncer: no learner excluded",
			 now);
	}
}

/* Whether the checkpoint claim must outlive the job (reconcile.h). */
static int retain_claim(const struct rc_input *in)
{
	const struct obs_progress *p = &in->progress;

	if (in->retain >= 0)
		return in->retain;
	return p->have && (p->round > 0 || p->ckpt_last_ok_round >= 0);
}

/* A claim that has the job as owner and must outlive it loses the owner
 * (and one that must not gets it back). */
static void keep_claim(const struct rc_input *in, struct rc_output *o)
{
	int keep = retain_claim(in);
	struct rc_action *a;

	if (!in->want_pvc || !in->pvc || in->pvc_owned == !keep ||
	    !(a = act(o, ACT_APPLY_PVC, -1)))
		return;
	a->retain = keep;
	if (keep)
		event(o, 0, "CheckpointsRetained", "the checkpoint claim no longer "
		      "belongs to the job: it stays when the job is deleted");
}

/*
 * The failure policy (reconcile.h): backoffLimit over counted failures,
 * activeDeadlineSeconds, a crash-looping syncer. 1 when the job Failed.
 */
static int failure_policy(const struct rc_input *in, int failures,
			  struct rc_output *o, const char *now)
{
	char msg[256];
	double t0 = in->start_time > 0 ? in->start_time : in->created_time;

	if (in->backoff_limit >= 0 && failures > in->backoff_limit) {
		snprintf(msg, sizeof(msg),
			 "learner pods failed %d times (disruptions not counted), "
			 "more than spec.backoffLimit (%d)", failures, in->backoff_limit);
		finish(in, o, PHASE_FAILED, "BackoffLimitExceeded", msg, now);
		return 1;
	}
	if (in->active_deadline >= 0 && t0 > 0) {
		double due = t0 + in->active_deadline;

		if (in->now >= due) {
			snprintf(msg, sizeof(msg), "the job was active for %.0f s, "
				 "past spec.activeDeadlineSeconds (%d)", in->now - t0,
				 in->active_deadline);
			finish(in, o, PHASE_FAILED, "DeadlineExceeded", msg, now);
			return 1;
		}
		requeue(o, due - in->now);
	}
	if (in->syncer_restart_limit >= 0 &&
	    in->syncer_restarts > in->syncer_restart_limit) {
		snprintf(msg, sizeof(msg), "the syncer restarted %d times within "
			 "%d s, more than spec.failurePolicy.syncerRestartLimit (%d)%s%.120s",
			 in->syncer_restarts, in->syncer_restart_window,
			 in->syncer_restart_limit,
			 in->syncer_last_exit ? "; last: " : "",
			 in->syncer_last_exit ? in->syncer_last_exit : "");
		finish(in, o, PHASE_FAILED, "SyncerCrashLooping", msg, now);
		return 1;
	}
	return 0;
}

/* The learners' pods by index into seen (M entries, the first of an
 * index wins); o->ready and *succeeded count among them. */
static void index_pods(const struct rc_input *in, int M,
		       const struct obs_pod **seen, struct rc_output *o,
		       int *succeeded)
{
	for (int i = 0; i < in->npods; i++) {
		const struct obs_pod *p = &in->pods[i];

		if (p->index >= 0 && p->index < M && !seen[p->index])
			seen[p->index] = p;
		if (p->index >= 0 && p->index < M && p->ready &&
		    p->state == POD_RUNNING && !p->deleting)
			o->ready++;
		if (p->index >= 0 && p->index < M && p->outdated && !p->deleting)
			o->outdated++;
		/* a pod being deleted was stopped, not done: `ddiloco
		 * learner` exits 0 on SIGTERM, and a deletion of every
		 * learner's pod (the certificates rolled, a resize) must not
		 * read as a finished job */
		if (p->index >= 0 && p->index < M && p->state == POD_SUCCEEDED &&
		    !p->deleting)
			(*succeeded)++;
	}
}

/* spec.suspend: the pods and the syncer go, the phase is Suspended, and
 * the pods recreated on resume will not count as restarts. */
static void suspend(const struct rc_input *in, struct learner_mem *mem, int M,
		    struct rc_output *o, const char *now)
{
	const struct rc_queue *q = &in->queue;
	int held = q->held && !in->spec->suspend;

	stop_all(in, o);
	if (o->phase != PHASE_SUSPENDED)
		event(o, 0, "Suspended", held ?
		      "job held by its queue: learner pods and syncer deleted, checkpoints kept" :
		      "job suspended: learner pods and syncer deleted, checkpoints kept");
	o->phase = PHASE_SUSPENDED;
	cond_set(&o->conds[COND_SUSPENDED], 1, held ? q->reason : "JobSuspended",
		 held ? q->message : "spec.suspend is true", now);
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
	if (in->evaluator_mem) {
		in->evaluator_mem->not_before = 0;
		in->evaluator_mem->create_sent = 0;
		in->evaluator_mem->seen = 0;
	}
}

/* The budget is reached, or every learner exited successfully: 1 when
 * the job Succeeded. */
static int done(const struct rc_input *in, int M, int succeeded,
		struct rc_output *o, const char *now)
{
	char msg[256];

	if (!(in->progress.have && in->progress.done) &&
	    !(M > 0 && succeeded == M))
		return 0;
	snprintf(msg, sizeof(msg), in->progress.have && in->progress.done ?
		 "the budget is reached (round %lld, %lld tokens)" :
		 "every learner exited successfully (round %lld, %lld tokens)",
		 in->progress.round, in->progress.tokens);
	finish(in, o, PHASE_SUCCEEDED,
	       in->progress.have && in->progress.done ? "BudgetReached" :
	       "LearnersCompleted", msg, now);
	return 1;
}

/* A syncer shard's pod still Terminating RC_FORCE_DELETE_SECONDS after its
 * grace period is on a node that does not answer, as a learner's
 * (learner_present): deleted with grace 0 and its uid, so that the
 * StatefulSet controller, which waits for the name, makes it again. */
static void syncer_pods_lost(const struct rc_input *in, struct rc_output *o)
{
	for (int i = 0; i < in->nsyncer_pods; i++) {
		const struct obs_pod *p = &in->syncer_pods[i];
		struct rc_action *ra;

		if (!p->deleting || p->delete_at <= 0 || p->index < 0)
			continue;
		if (in->now - p->delete_at < RC_FORCE_DELETE_SECONDS) {
			requeue(o, p->delete_at + RC_FORCE_DELETE_SECONDS - in->now);
			continue;
		}
		if ((ra = act(o, ACT_DELETE_SYNCER_POD, p->index))) {
			snprintf(ra->uid, sizeof(ra->uid), "%s", p->uid);
			ra->force = 1;
		}
		event(o, 1, "SyncerForceDeleted",
		      "syncer shard %d: pod still terminating %.0f s after its "
		      "grace period (its node does not answer): deleted with "
		      "grace period 0", p->index, in->now - p->delete_at);
	}
}

/*
 * Drift (docs/operator.md, Drift): a child another manager changed (a
 * kubectl edit, patch or apply of its spec or data) is written again
 * whole, as the job asks, with an Event naming who changed it; one the
 * cache lacks although the job's children were all made (and it was not
 * just resumed) is made again by children(), with an Event too.
 */
static void drift(const struct rc_input *in, int resumed, struct rc_output *o)
{
	static const char *const what[DRIFT_N] = {
		"ConfigMap <job>-spec", "Service <job>-syncer",
		"NetworkPolicy <job>-syncer", "StatefulSet <job>-syncer",
	};
	const int have[DRIFT_N] = { in->configmap, in->service, in->netpol,
				    in->statefulset };
	const struct condition *made = &in->conds[COND_CREATED];

	for (int k = 0; k < DRIFT_N; k++) {
		if (have[k] && in->drift[k][0] && act(o, ACT_REPLACE_CHILD, k))
			event(o, 1, "DriftRepaired", "%s was changed by '%s': "
			      "written again as the job asks", what[k],
			      in->drift[k]);
		else if (!have[k] && made->set && made->status && !resumed)
			event(o, 1, "DriftRepaired", "%s was gone: made again",
			      what[k]);
	}
	if (in->configmap && in->configmap_outdated && !in->drift[DRIFT_CONFIGMAP][0] &&
	    act(o, ACT_REPLACE_CHILD, DRIFT_CONFIGMAP))
		event(o, 0, "SpecUpdated", "ConfigMap <job>-spec written again: "
		      "the job's spec changed (generation %lld); a syncer or "
		      "sidecar reads it when it starts", in->generation);
	if (in->statefulset && in->syncer_outdated && !in->drift[DRIFT_SYNCER][0] &&
	    act(o, ACT_REPLACE_CHILD, DRIFT_SYNCER))
		event(o, 0, "SyncerRolled", "StatefulSet <job>-syncer written "
		      "again: the job asks for another pod template; the syncer "
		      "restarts from its checkpoint while the learners train on");
}

/* The children but the learners' and the evaluator's pods, made when the
 * cache lacks them; pods of an index past M deleted. */
static void children(const struct rc_input *in, int M, struct rc_output *o)
{
	struct rc_action *ra;

	if (!in->configmap)
		act(o, ACT_APPLY_CONFIGMAP, -1);
	if (!in->service)
		act(o, ACT_APPLY_SERVICE, -1);
	/* before the syncer: its pod is never up without its policy */
	if (!in->netpol)
		act(o, ACT_APPLY_NETPOL, -1);
	/* a create, never a replace, and before any pod that mounts it */
	if (in->want_tls && !in->tls)
		act(o, ACT_CREATE_TLS, -1);
	if (in->want_pvc && !in->pvc && (ra = act(o, ACT_APPLY_PVC, -1)))
		ra->retain = retain_claim(in);
	if (!in->statefulset)
		act(o, ACT_APPLY_SYNCER, -1);
	for (int i = 0; i < in->npods; i++)
		if ((in->pods[i].index < 0 || in->pods[i].index >= M) &&
		    !in->pods[i].deleting)
			delete_pod(o, &in->pods[i]);   /* not ours to keep */
}

/* The Created condition: true once every child is in the cache, false
 * again while a resumed job's are recreated. */
static void created_cond(const struct rc_input *in, const struct obs_pod **seen,
			 int M, int resumed, struct rc_output *o, const char *now)
{
	struct condition *c = &o->conds[COND_CREATED];
	char msg[256];

	if (!(c->set && c->status)) {
		int all = in->configmap && in->service && in->netpol &&
			  (!in->want_tls || in->tls > 0) && in->statefulset &&
			  (!in->want_pvc || in->pvc);

		for (int i = 0; i < M && all; i++)
			all = seen[i] != NULL;
		if (all) {
			snprintf(msg, sizeof(msg),
				 "%d learner pods, syncer StatefulSet and Service created", M);
			cond_set(c, 1, "ChildrenCreated", msg, now);
			event(o, 0, "Created", "%s", msg);
		} else if (!c->set) {
			cond_set(c, 0, "Creating",
				 "creating the syncer and learner pods", now);
		}
	} else if (resumed) {
		cond_set(c, 0, "Creating",
			 "recreating the syncer and learner pods after resume", now);
	}
}

/* Running with a ready syncer and K ready learners, else Restarting (it
 * ran before) or Pending; the Running condition says which. */
static void running(const struct rc_input *in, int M, struct rc_output *o,
		    const char *now)
{
	int K = in->spec->syncer.min_quorum;
	char msg[256];

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
}

/*
 * <job>-tls missing while the job has pods (reconcile.h): children() has
 * made it again; the pods that mount the old one go, to come back with
 * the new certificates.
 */
static void tls_roll(const struct rc_input *in, int M, struct rc_output *o)
{
	const struct obs_pod *ev = in->evaluator;
	int pods = 0;

	if (!in->want_tls || in->tls)
		return;
	for (int i = 0; i < in->npods; i++)
		if (!in->pods[i].deleting && in->pods[i].index >= 0 &&
		    in->pods[i].index < M) {
			delete_pod(o, &in->pods[i]);
			pods++;
		}
	if (ev && !ev->deleting) {
		delete_evaluator(o, ev);
		pods++;
	}
	if (in->statefulset)
		act(o, ACT_DELETE_SYNCER, -1);
	if (pods || in->statefulset)
		event(o, 1, "SecretRecreated", "Secret %.64s-tls was missing: made "
		      "again with a new CA; %d pod(s)%s deleted to come back with "
		      "it", in->spec->name, pods,
		      in->statefulset ? " and the syncer's StatefulSet" : "");
}

/*
 * A refusal's condition (reconcile.h): True with a Warning Event (when it
 * turns True or its message changes) while reason is set, False with
 * ok_reason once it no longer holds. 1 while it holds.
 */
static int refusal(struct rc_output *o, enum cond_type t, const char *reason,
		   const char *msg, const char *ok_reason, const char *ok_msg,
		   const char *now)
{
	struct condition *c = &o->conds[t];

	if (reason) {
		if (!c->set || !c->status ||
		    strncmp(c->message, msg, sizeof(c->message) - 1))
			event(o, 1, cond_type_name(t), "%s", msg);
		cond_set(c, 1, reason, msg, now);
		return 1;
	}
	if (c->set && c->status)
		cond_set(c, 0, ok_reason, ok_msg, now);
	return 0;
}

static int template_refused(const struct rc_input *in, struct rc_output *o,
			    const char *now)
{
	return refusal(o, COND_TEMPLATE_REFUSED, in->template_reason,
		       in->template_message ? in->template_message : "",
		       "TemplateAllowed", "the pod templates are allowed", now);
}

/* Either refusal: the job makes nothing (a Secret not its own is looked
 * at again soon). */
static int refused(const struct rc_input *in, struct rc_output *o,
		   const char *now)
{
	int t = template_refused(in, o, now), s = 0;

	if (in->want_tls)
		s = refusal(o, COND_SECRET_NOT_OWNED, in->tls < 0 ?
			    (in->tls_reason ? in->tls_reason : "NotOwned") : NULL,
			    in->tls_message ? in->tls_message : "",
			    "SecretOwned", "the Secret is this job's", now);
	if (s)
		requeue(o, RC_SECRET_RECHECK_SECONDS);
	return t || s;
}

/* A job that goes on: its children, learners and evaluator, the Created
 * condition, the phase and PodsReady. */
static void go_on(const struct rc_input *in, struct learner_mem *mem,
		  const struct obs_pod **seen, int M, int resumed,
		  struct rc_output *o, const char *now)
{
	int created, fail_job = 0;
	char msg[256];

	drift(in, resumed, o);
	children(in, M, o);
	tls_roll(in, M, o);
	created = o->conds[COND_CREATED].set && o->conds[COND_CREATED].status &&
		  !resumed;
	learners(in, mem, seen, created, M, o, &fail_job, msg);
	if (fail_job) {
		finish(in, o, PHASE_FAILED, "PodFailurePolicy", msg, now);
		return;
	}
	roll(in, mem, seen, M, o);
	evaluator(in, o);
	if (version_holds(in, mem, M, o, now, msg, sizeof(msg))) {
		finish(in, o, PHASE_FAILED, "VersionMismatch", msg, now);
		return;
	}
	created_cond(in, seen, M, resumed, o, now);
	running(in, M, o, now);
	if (o->conds[COND_SUSPENDED].set && o->conds[COND_SUSPENDED].status)
		cond_set(&o->conds[COND_SUSPENDED], 0, "JobResumed",
			 "spec.suspend is false", now);
	pods_ready(in, M, o, now);
}

/*
 * The decisions of reconcile.h in their order, each able to end the
 * pass: deleting, terminal, invalid spec, suspend, resume, done, the
 * failure policy, then a job that goes on (go_on).
 */
/* A job in a Kueue queue (queue.h): condition Admitted as its Workload
 * stands, and only the learners admitted are made (M). */
static void queued(const struct rc_input *in, int *M, struct rc_output *o,
		   const char *now)
{
	const struct rc_queue *q = &in->queue;

	if (!q->queued)
		return;
	cond_set(&o->conds[COND_ADMITTED], q->admitted, q->reason, q->message, now);
	if (q->admitted && q->learners > 0 && q->learners < *M)
		*M = q->learners;
}

int reconcile(const struct rc_input *in, struct learner_mem *mem,
	      struct rc_output *o)
{
	int M = in->spec->learners.replicas;
	const struct obs_pod **seen;
	int failures = 0, succeeded = 0, resumed = 0;
	char now[40];

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
	ckpt_storage(in, o, now);
	syncer_shards(in, o, now);
	started_over(in, o, now);
	learners_excluded(in, o, now);
	keep_claim(in, o);
	syncer_pods_lost(in, o);
	if (M < 1 || M > RC_MAX_LEARNERS)
		M = 0;
	queued(in, &M, o, now);
	if (!(seen = calloc((size_t)(M ? M : 1), sizeof(*seen))))
		return -1;
	index_pods(in, M, seen, o, &succeeded);
	for (int i = 0; i < M; i++)
		failures += mem[i].failures;

	if (o->phase == PHASE_SUCCEEDED || o->phase == PHASE_FAILED) {
		if (!o->completion_time)
			o->completion_time = in->now;
		terminal(in, o, now);
	} else if (in->spec_error) {
		finish(in, o, PHASE_FAILED, "InvalidSpec",
		       in->spec_error_msg ? in->spec_error_msg : "invalid spec", now);
	} else if (in->spec->suspend || in->queue.held) {
		template_refused(in, o, now);
		suspend(in, mem, M, o, now);
	} else {
		if (o->phase == PHASE_SUSPENDED) {
			resumed = 1;
			o->phase = o->start_time ? PHASE_RESTARTING : PHASE_PENDING;
			event(o, 0, "Resumed",
			      "job resumed: recreating the syncer and learners");
			cond_set(&o->conds[COND_SUSPENDED], 0, "JobResumed",
				 in->queue.queued ? "admitted by its queue" :
				 "spec.suspend is false", now);
		}
		if (!done(in, M, succeeded, o, now) &&
		    !failure_policy(in, failures, o, now) &&
		    !refused(in, o, now))
			go_on(in, mem, seen, M, resumed, o, now);
	}
	free(seen);
	return 0;
}

void rc_output_release(struct rc_output *o)
{
	free(o->acts);
	o->acts = NULL;
	o->nacts = o->cap = 0;
}
