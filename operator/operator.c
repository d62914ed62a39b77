/*
 * operator: informers -> work queue of "ns/name" job keys -> workers.
 *
 * Threads: one per informer (own connection each), `workers` workers
 * (own connection and own HTTP handle for the syncers' /status each), the
 * HTTP server's, and the caller's thread, which runs leader election, the
 * periodic resync and the chaos controller.
 *
 * A worker's pass over one job (sync_job), one function per step:
 *   1. observe        the job and its children from the caches, the job
 *                     parsed with jobspec (the same parser as `ddiloco
 *                     run`), the syncer's /status when its pod is ready
 *   2. decide         reconcile() -> actions, phase, conditions (pure)
 *   3. apply_actions  server-side apply, deletes with a uid precondition,
 *                     Events; a failure is written into the Created
 *                     condition too
 *   4. write_status   status_build() (status.c), PUT through /status when
 *                     status_should_write says it moved enough, with
 *                     the resourceVersion read in 1 (409: the cache is
 *                     behind; the key is retried with backoff)
 * Errors requeue the key rate-limited; success forgets its failures.
 *
 * Per-job memory (the learners' and the evaluator's backoff, restarts
 * and expectations, last progress, recent Events) lives in a small table
 * keyed by job key and uid.
 */
#include "operator/operator.h"

#include <curl/curl.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/httpd.h"
#include "common/jobspec.h"
#include "common/log.h"
#include "common/prom.h"
#include "common/syncer_status.h"
#include "common/util.h"
#include "operator/chaos_ctl.h"
#include "operator/children.h"
#include "operator/informer.h"
#include "operator/leader.h"
#include "operator/podcheck.h"
#include "operator/reconcile.h"
#include "operator/status.h"
#include "operator/workqueue.h"

#define CRD_PATH "/apis/" JOB_API_VERSION
#define PROGRESS_EVERY 5.0        /* seconds between /status reads */
/* a status whose only change is progress ticking is written at most this
 * often (status_should_write; docs/operator.md, Status) */
#define STATUS_PROGRESS_EVERY 15.0
#define PROGRESS_TIMEOUT 2.0      /* seconds for one, connecting included */
#define RUNNING_RESYNC 10.0

/* the syncer restarts remembered: more than any sane syncerRestartLimit */
#define SYNCER_RESTARTS_KEPT 64
/* failurePolicy defaults (the CRD's too) */
#define DEFAULT_BACKOFF_RESET 600
#define DEFAULT_SYNCER_RESTART_LIMIT 5
#define DEFAULT_SYNCER_RESTART_WINDOW 600
#define DEFAULT_PENDING_TIMEOUT 300

/* "reason: message" of an Event reconcile asked for */
#define EVENT_TEXT (sizeof(((struct rc_action *)0)->reason) + 2 + \
		    sizeof(((struct rc_action *)0)->message))

struct jobmem {
	char key[WQ_KEY_MAX];
	char uid[64];
	int n;
	struct learner_mem *learners;
	struct learner_mem evaluator; /* <job>-evaluator-0 (spec.evaluator) */
	struct obs_progress progress;
	double progress_at;           /* monotonic */
	int tls;                      /* <job>-tls created, or found existing */
	/* the syncer container's restarts (docs/operator.md, Failure
	 * policy): the pod they were counted on, its last restartCount, and
	 * when each new one was seen (a ring, newest at restart_n - 1) */
	char syncer_uid[64];
	long syncer_restart_count;
	double restart_at[SYNCER_RESTARTS_KEPT];
	int restart_n;
	char syncer_last_exit[128];
	struct { char text[EVENT_TEXT]; double at; } sent[8];  /* recent Events */
	int nsent;
	struct jobmem *next;
};

#define NINFORMERS 7           /* the fields of struct op below */

struct op {
	const struct operator_opts *o;
	struct informer *jobs, *pods, *sts, *svcs, *cms, *pvcs, *netpols;
	struct workqueue *q;
	pthread_mutex_t mu;           /* mems, counters */
	struct jobmem *mems;
	struct chaos_ctl *chaos;
	const volatile sig_atomic_t *stop;
	volatile int quit;
	int leader;
	long reconciles, reconcile_errors, conflicts, actions[ACT_EVENT + 1];
	long status_writes, progress_reads, progress_errors;
	struct prom_hist reconcile_seconds;   /* one pass of sync_job */
	struct prom_hist queue_seconds;       /* a key's wait in the queue */
};

/* seconds: a pass is milliseconds; a wait may be a rate limit's minutes */
static const double latency_bounds[] = {
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
	30, 60,
};
#define NBOUNDS ((int)(sizeof(latency_bounds) / sizeof(latency_bounds[0])))

struct worker {
	struct op *op;
	struct kube *k;
	CURL *http;
	pthread_t thread;
};

/* ---- paths and small helpers -------------------------------------- */

static const char *jget(json_t *o, const char *a, const char *b)
{
	return json_string_value(json_object_get(json_object_get(o, a), b));
}

static void collection(const struct op *op, const char *api, const char *res,
		       char *out, size_t n)
{
	if (op->o->namespace_[0])
		snprintf(out, n, "%s/namespaces/%s/%s", api, op->o->namespace_, res);
	else
		snprintf(out, n, "%s/%s", api, res);
}

static void object_path(const char *api, const char *res, const char *ns,
			const char *name, char *out, size_t n)
{
	snprintf(out, n, "%s/namespaces/%s/%s/%s", api, ns, res, name);
}

/* The job a child belongs to: its controller owner reference. */
static int owner_key(json_t *obj, char *key, size_t n)
{
	json_t *refs = json_object_get(json_object_get(obj, "metadata"), "ownerReferences");
	const char *ns = jget(obj, "metadata", "namespace");
	json_t *r;
	size_t i;

	json_array_foreach(refs, i, r) {
		const char *kind = json_string_value(json_object_get(r, "kind"));
		const char *name = json_string_value(json_object_get(r, "name"));

		if (kind && name && !strcmp(kind, JOB_KIND) &&
		    json_is_true(json_object_get(r, "controller"))) {
			snprintf(key, n, "%s/%s", ns ? ns : "", name);
			return 0;
		}
	}
	return -1;
}

static const char *owner_uid(json_t *obj)
{
	json_t *refs = json_object_get(json_object_get(obj, "metadata"), "ownerReferences");
	json_t *r;
	size_t i;

	json_array_foreach(refs, i, r)
		if (json_is_true(json_object_get(r, "controller")))
			return json_string_value(json_object_get(r, "uid"));
	return NULL;
}

static void on_job(void *ctx, enum kube_event type, json_t *obj)
{
	struct op *op = ctx;
	char key[WQ_KEY_MAX];

	(void)type;
	snprintf(key, sizeof(key), "%s/%s", jget(obj, "metadata", "namespace"),
		 jget(obj, "metadata", "name"));
	wq_add(op->q, key);
}

static void on_child(void *ctx, enum kube_event type, json_t *obj)
{
	struct op *op = ctx;
	char key[WQ_KEY_MAX];

	(void)type;
	if (!owner_key(obj, key, sizeof(key)))
		wq_add(op->q, key);
}

static struct jobmem *jobmem_get(struct op *op, const char *key,
				 const char *uid, int n)
{
	struct jobmem *m;

	pthread_mutex_lock(&op->mu);
	for (m = op->mems; m; m = m->next)
		if (!strcmp(m->key, key))
			break;
	if (m && (strcmp(m->uid, uid) || m->n != n)) {
		/* a new job under an old name, or another size: start over */
		free(m->learners);
		m->learners = calloc((size_t)n, sizeof(*m->learners));
		m->n = n;
		snprintf(m->uid, sizeof(m->uid), "%s", uid);
		memset(&m->progress, 0, sizeof(m->progress));
		memset(&m->evaluator, 0, sizeof(m->evaluator));
		m->tls = 0;
	}
	if (!m && (m = calloc(1, sizeof(*m)))) {
		snprintf(m->key, sizeof(m->key), "%s", key);
		snprintf(m->uid, sizeof(m->uid), "%s", uid);
		m->n = n;
		m->learners = calloc((size_t)n, sizeof(*m->learners));
		m->next = op->mems;
		op->mems = m;
	}
	pthread_mutex_unlock(&op->mu);
	return m && m->learners ? m : NULL;
}

static void jobmem_drop(struct op *op, const char *key)
{
	struct jobmem **pp, *m;

	pthread_mutex_lock(&op->mu);
	for (pp = &op->mems; (m = *pp); pp = &m->next)
		if (!strcmp(m->key, key)) {
			*pp = m->next;
			free(m->learners);
			free(m);
			break;
		}
	pthread_mutex_unlock(&op->mu);
}

static void count(struct op *op, long *counter)
{
	pthread_mutex_lock(&op->mu);
	(*counter)++;
	pthread_mutex_unlock(&op->mu);
}

/* ---- observe: the caches and the syncer ----------------------------- */

/*
 * One pass over one job: what observe() read, what reconcile() decided.
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
	struct obs_pod *pods;
	struct obs_pod evaluator;     /* its pod, when in.evaluator is set */
	char syncer_reason[64], syncer_message[256];   /* why it cannot start */
	struct exit_rule exit_rules[RC_MAX_EXIT_RULES];
	struct rc_input in;
	struct rc_output out;
};

static void pass_release(struct pass *p)
{
	rc_output_release(&p->out);
	free(p->pods);
	json_decref(p->job);
	json_decref(p->core);
	free(p->core_text);
}

static int cond_true(json_t *obj, const char *type, double *since)
{
	json_t *c;
	size_t i;

	json_array_foreach(json_object_get(json_object_get(obj, "status"), "conditions"), i, c) {
		const char *t = json_string_value(json_object_get(c, "type"));
		const char *s = json_string_value(json_object_get(c, "status"));

		if (t && !strcmp(t, type)) {
			if (since)
				*since = kube_time_parse(json_string_value(
					json_object_get(c, "lastTransitionTime")));
			return s && !strcmp(s, "True");
		}
	}
	return 0;
}

/* A pod of the job's learners or its evaluator; `ctr` names the main
 * container, whose exit code is read. */
static void observe_pod(const char *job, json_t *pod, const char *ctr,
			struct obs_pod *p)
{
	const char *phase = jget(pod, "status", "phase");
	const char *uid = jget(pod, "metadata", "uid");

	memset(p, 0, sizeof(*p));
	p->index = learner_index(job, jget(pod, "metadata", "name"));
	snprintf(p->uid, sizeof(p->uid), "%s", uid ? uid : "");
	p->state = !phase ? POD_PENDING :
		   !strcmp(phase, "Running") ? POD_RUNNING :
		   !strcmp(phase, "Succeeded") ? POD_SUCCEEDED :
		   !strcmp(phase, "Failed") ? POD_FAILED : POD_PENDING;
	p->ready = cond_true(pod, "Ready", &p->ready_since);
	if (!p->ready)
		p->ready_since = 0;
	p->deleting = json_object_get(json_object_get(pod, "metadata"),
				      "deletionTimestamp") != NULL;
	p->delete_at = p->deleting ? fmax(0, kube_time_parse(jget(pod, "metadata",
							  "deletionTimestamp"))) : 0;
	p->disrupted = podcheck_disrupted(pod);
	p->exit_code = podcheck_exit_code(pod, ctr);
	if (!podcheck_blocked(pod, p->reason, sizeof(p->reason), p->message,
			      sizeof(p->message)))
		p->starting = podcheck_starting(pod, p->reason, sizeof(p->reason),
						p->message, sizeof(p->message));
	p->created = fmax(0, kube_time_parse(jget(pod, "metadata",
						  "creationTimestamp")));
}

/*
 * The syncer container's restarts by the kubelet (a crash, an OOM kill, a
 * failed liveness probe) on the pod it runs in, each remembered with the
 * time it was first seen. A new pod (deleted, evicted, a chaos kill) is a
 * disruption: its restartCount is taken as the base, not counted.
 */
static void observe_syncer_pod(struct jobmem *m, json_t *pod, double now)
{
	const char *uid = jget(pod, "metadata", "uid");
	json_t *cs;
	size_t i;
	long n = -1;
	char why[128] = "";

	json_array_foreach(json_object_get(json_object_get(pod, "status"),
					   "containerStatuses"), i, cs) {
		json_t *t = json_object_get(json_object_get(cs, "lastState"), "terminated");

		if (!json_is_string(json_object_get(cs, "name")) ||
		    strcmp(json_string_value(json_object_get(cs, "name")), "syncer"))
			continue;
		n = (long)json_integer_value(json_object_get(cs, "restartCount"));
		if (t)
			snprintf(why, sizeof(why), "%s, exit code %d",
				 json_is_string(json_object_get(t, "reason")) ?
				 json_string_value(json_object_get(t, "reason")) : "ended",
				 (int)json_integer_value(json_object_get(t, "exitCode")));
	}
	if (!uid || n < 0)
		return;
	if (strcmp(m->syncer_uid, uid)) {
		snprintf(m->syncer_uid, sizeof(m->syncer_uid), "%s", uid);
		m->syncer_restart_count = n;
		return;
	}
	for (; m->syncer_restart_count < n; m->syncer_restart_count++) {
		if (m->restart_n == SYNCER_RESTARTS_KEPT) {
			memmove(m->restart_at, m->restart_at + 1,
				(SYNCER_RESTARTS_KEPT - 1) * sizeof(double));
			m->restart_n--;
		}
		m->restart_at[m->restart_n++] = now;
	}
	if (why[0])
		snprintf(m->syncer_last_exit, sizeof(m->syncer_last_exit), "%s", why);
}

static int syncer_restarts_within(const struct jobmem *m, double now, int window)
{
	int k = 0;

	for (int i = 0; i < m->restart_n; i++)
		k += now - m->restart_at[i] <= window;
	return k;
}

static void status_url(const struct op *op, const char *job, const char *ns,
		       int port, char *out, size_t n)
{
	const char *t = op->o->status_url;
	size_t k = 0;

	while (*t && k + 1 < n) {
		const char *v = NULL;
		char num[16];

		if (!strncmp(t, "{job}", 5))
			v = job, t += 5;
		else if (!strncmp(t, "{namespace}", 11))
			v = ns, t += 11;
		else if (!strncmp(t, "{port}", 6)) {
			snprintf(num, sizeof(num), "%d", port);
			v = num, t += 6;
		}
		if (v) {
			k += (size_t)snprintf(out + k, n - k, "%s", v);
			if (k >= n)
				k = n - 1;
		} else {
			out[k++] = *t++;
		}
	}
	out[k] = '\0';
}

/*
 * The job from the cache, its meaning through the one parser (jobspec,
 * as `ddiloco run` reads it) and the operator's memory of it. 1 when the
 * job is gone (its memory is dropped), -1 on failure.
 */
static int read_job(struct op *op, const char *key, struct pass *p)
{
	const char *slash = strchr(key, '/');
	json_t *restarts, *failures;
	int M;

	/* a name that does not fit is no job of ours: a label value, the
	 * job's name is at most 63 bytes */
	if (!slash || slash - key >= (long)sizeof(p->ns) ||
	    strlen(slash + 1) >= sizeof(p->name))
		return 1;
	snprintf(p->ns, sizeof(p->ns), "%.*s", (int)(slash - key), key);
	snprintf(p->name, sizeof(p->name), "%s", slash + 1);
	if (!(p->job = informer_get(op->jobs, p->ns, p->name))) {
		jobmem_drop(op, key);
		return 1;
	}
	/* spec.managedBy another controller (e.g. MultiKueue): not ours */
	if (job_managed_elsewhere(p->job)) {
		jobmem_drop(op, key);
		return 1;
	}
	p->uid = jget(p->job, "metadata", "uid");
	p->status = json_object_get(p->job, "status");
	p->core = job_core(p->job);
	p->core_text = json_dumps(p->core, JSON_COMPACT | JSON_SORT_KEYS);
	if (!p->core_text || jobspec_parse(p->core_text, strlen(p->core_text), key,
					   &p->js, &p->spec_err)) {
		p->spec_error = 1;
		jobspec_defaults(&p->js);
		snprintf(p->js.name, sizeof(p->js.name), "%s", p->name);
	}
	M = p->js.learners.replicas;
	if (!(p->m = jobmem_get(op, key, p->uid ? p->uid : "", M)))
		return -1;
	/* restart counts survive an operator restart through status */
	restarts = json_object_get(json_object_get(p->status, "learners"), "restarts");
	failures = json_object_get(json_object_get(p->status, "learners"), "failures");
	for (int k = 0; k < M; k++) {
		int r = (int)json_integer_value(json_array_get(restarts, (size_t)k));
		int f = (int)json_integer_value(json_array_get(failures, (size_t)k));

		if (r > p->m->learners[k].restarts)
			p->m->learners[k].restarts = r;
		/* after an operator restart only: the memory is newer */
		if (!p->m->learners[k].seen && f > p->m->learners[k].failures)
			p->m->learners[k].failures = f;
	}
	return 0;
}

/* The job's learner pods (its own uid's, not an older job's) -> in.pods,
 * and its evaluator's pod -> in.evaluator. */
static int observe_learners(struct op *op, struct pass *p)
{
	json_t *pods = informer_select(op->pods, p->ns, LABEL_JOB, p->name), *pod;
	size_t i, npods = json_array_size(pods);
	char ev[CHILD_NAME_MAX];

	if (child_name(p->name, CHILD_EVALUATOR, 0, ev, sizeof(ev)))
		ev[0] = '\0';
	p->in.want_evaluator = !p->spec_error && p->js.evaluator.command.n > 0 &&
			       p->js.model.kind == MODEL_EXTERNAL;
	p->in.evaluator_mem = &p->m->evaluator;

	if (!(p->pods = calloc(npods ? npods : 1, sizeof(*p->pods)))) {
		json_decref(pods);
		return -1;
	}
	json_array_foreach(pods, i, pod) {
		const char *ou = owner_uid(pod);
		const char *role = json_string_value(json_object_get(json_object_get(
			json_object_get(pod, "metadata"), "labels"), LABEL_ROLE));

		if (role && !strcmp(role, "syncer") && !p->syncer_reason[0] &&
		    !podcheck_blocked(pod, p->syncer_reason, sizeof(p->syncer_reason),
				      p->syncer_message, sizeof(p->syncer_message)) &&
		    (p->in.syncer_starting = podcheck_starting(pod,
				p->syncer_reason, sizeof(p->syncer_reason),
				p->syncer_message, sizeof(p->syncer_message))))
			p->in.syncer_created = fmax(0, kube_time_parse(jget(pod,
					"metadata", "creationTimestamp")));
		/* owned by the StatefulSet: the job's name picks it */
		if (role && !strcmp(role, "syncer"))
			observe_syncer_pod(p->m, pod, clock_wall());
		if (!ou || !p->uid || strcmp(ou, p->uid))
			continue;   /* an older job's pod, or the syncer's */
		if (role && !strcmp(role, "evaluator") && !strcmp(ev,
		    jget(pod, "metadata", "name") ? jget(pod, "metadata", "name") : "")) {
			observe_pod(p->name, pod, "evaluator", &p->evaluator);
			p->evaluator.index = 0;
			p->in.evaluator = &p->evaluator;
			continue;
		}
		if (!role || strcmp(role, "learner"))
			continue;
		observe_pod(p->name, pod, "learner", &p->pods[p->in.npods++]);
	}
	json_decref(pods);
	p->in.pods = p->pods;
	p->in.syncer_reason = p->syncer_reason;
	p->in.syncer_message = p->syncer_message;
	return 0;
}

/* A learner pod we created and the pod informer has since seen deleted
 * (maybe before the cache ever showed it) is gone: reconcile recreates it. */
static void observe_replacements(struct op *op, struct pass *p)
{
	for (int k = 0; k < p->js.learners.replicas; k++) {
		struct learner_mem *lm = &p->m->learners[k];

		if (lm->create_sent > 0 && lm->create_uid[0])
			lm->create_gone = informer_deleted(op->pods, lm->create_uid);
	}
	if (p->m->evaluator.create_sent > 0 && p->m->evaluator.create_uid[0])
		p->m->evaluator.create_gone = informer_deleted(op->pods,
						p->m->evaluator.create_uid);
}

static int cached(struct informer *inf, const char *ns, const char *job,
		  enum child_kind kind)
{
	char name[CHILD_NAME_MAX];
	json_t *x;

	if (child_name(job, kind, 0, name, sizeof(name)))
		return 0;
	x = informer_get(inf, ns, name);
	json_decref(x);
	return x != NULL;
}

/* Which of the other children exist, and whether the syncer is ready. */
static void observe_children(struct op *op, struct pass *p)
{
	char name[CHILD_NAME_MAX];
	const char *stg = jget(json_object_get(p->job, "spec"), "syncer", "storage");
	json_t *sts = NULL, *pvc, *retain;

	if (!child_name(p->name, CHILD_SYNCER, 0, name, sizeof(name)))
		sts = informer_get(op->sts, p->ns, name);
	p->in.statefulset = sts != NULL;
	p->in.syncer_ready = sts && json_integer_value(json_object_get(
		json_object_get(sts, "status"), "readyReplicas")) >= 1;
	json_decref(sts);
	p->in.configmap = cached(op->cms, p->ns, p->name, CHILD_SPEC);
	p->in.service = cached(op->svcs, p->ns, p->name, CHILD_SYNCER);
	if (!child_name(p->name, CHILD_CHECKPOINTS, 0, name, sizeof(name)) &&
	    (pvc = informer_get(op->pvcs, p->ns, name))) {
		const char *ou = owner_uid(pvc);

		p->in.pvc = 1;
		p->in.pvc_owned = ou && p->uid && !strcmp(ou, p->uid);
		json_decref(pvc);
	}
	retain = json_object_get(json_object_get(json_object_get(json_object_get(
		p->job, "spec"), "syncer"), "checkpoints"), "retain");
	p->in.retain = json_is_boolean(retain) ? json_is_true(retain) : -1;
	p->in.netpol = cached(op->netpols, p->ns, p->name, CHILD_SYNCER);
	p->in.tls = p->m->tls;
	p->in.want_tls = !p->js.syncer.insecure;
	p->in.want_pvc = (!stg || stg[0]) && !jget(json_object_get(json_object_get(
		p->job, "spec"), "syncer"), "checkpoints", "claimName");
}

/* The syncer's /status every PROGRESS_EVERY s, else what status last said. */
static void observe_progress(struct worker *w, struct pass *p)
{
	struct op *op = w->op;
	struct jobmem *m = p->m;
	char url[512];
	struct syncer_status got;
	struct err e;

	if (!m->progress.have && json_object_get(p->status, "progress"))
		status_read_progress(json_object_get(p->status, "progress"), &m->progress);
	if (!p->in.syncer_ready || clock_mono() - m->progress_at < PROGRESS_EVERY)
		return;
	status_url(op, p->name, p->ns, p->js.syncer.http_port, url, sizeof(url));
	m->progress_at = clock_mono();
	if (!syncer_status_fetch(w->http, url, PROGRESS_TIMEOUT, &got, &e)) {
		status_progress_from_syncer(&got, &m->progress);
		m->progress.update_time = clock_wall();
		syncer_status_release(&got);
		count(op, &op->progress_reads);
	} else {
		count(op, &op->progress_errors);
		log_debug("%s: %s", p->key, e.msg);
	}
}

/* spec.failurePolicy.rules into out (RC_MAX_EXIT_RULES): how many. The
 * CRD has checked the shape; rules past the bounds are left out. */
static int exit_rules_read(json_t *rules, struct exit_rule *out)
{
	size_t i;
	json_t *r;
	int n = 0;

	json_array_foreach(rules, i, r) {
		json_t *on = json_object_get(r, "onExitCodes"), *v;
		const char *act = json_string_value(json_object_get(r, "action"));
		const char *op = json_string_value(json_object_get(on, "operator"));
		size_t k;

		if (n == RC_MAX_EXIT_RULES || !act || !op)
			break;
		memset(&out[n], 0, sizeof(out[n]));
		out[n].action = !strcmp(act, "FailJob") ? EXIT_FAIL_JOB :
				!strcmp(act, "Ignore") ? EXIT_IGNORE : EXIT_COUNT;
		out[n].not_in = !strcmp(op, "NotIn");
		json_array_foreach(json_object_get(on, "values"), k, v)
			if (out[n].ncodes < RC_MAX_EXIT_CODES && json_is_integer(v))
				out[n].codes[out[n].ncodes++] = (int)json_integer_value(v);
		n++;
	}
	return n;
}

/* An integer field of o (the API server has checked its range), or def. */
static int spec_int(json_t *o, const char *key, int def)
{
	json_t *v = json_object_get(o, key);

	return json_is_integer(v) ? (int)json_integer_value(v) : def;
}

/* The job's own fields reconcile reads: spec, metadata, the last status. */
static void observe_job(struct pass *p)
{
	struct rc_input *in = &p->in;
	json_t *meta = json_object_get(p->job, "metadata");
	json_t *spec = json_object_get(p->job, "spec");
	json_t *bl = json_object_get(spec, "backoffLimit");
	json_t *fp = json_object_get(spec, "failurePolicy");

	in->spec = &p->js;
	in->now = clock_wall();
	in->deleting = json_object_get(meta, "deletionTimestamp") != NULL;
	in->generation = json_integer_value(json_object_get(meta, "generation"));
	in->backoff_limit = json_is_integer(bl) ? (int)json_integer_value(bl) : -1;
	in->backoff_reset = spec_int(fp, "backoffResetSeconds", DEFAULT_BACKOFF_RESET);
	in->active_deadline = spec_int(spec, "activeDeadlineSeconds", -1);
	in->created_time = fmax(0, kube_time_parse(jget(p->job, "metadata",
							"creationTimestamp")));
	in->syncer_restart_limit = spec_int(fp, "syncerRestartLimit",
					    DEFAULT_SYNCER_RESTART_LIMIT);
	in->syncer_restart_window = spec_int(fp, "syncerRestartWindowSeconds",
					     DEFAULT_SYNCER_RESTART_WINDOW);
	in->pending_timeout = spec_int(fp, "pendingTimeoutSeconds",
				       DEFAULT_PENDING_TIMEOUT);
	in->syncer_restarts = syncer_restarts_within(p->m, clock_wall(),
						     in->syncer_restart_window);
	in->syncer_last_exit = p->m->syncer_last_exit[0] ? p->m->syncer_last_exit : NULL;
	in->nexit_rules = exit_rules_read(json_object_get(fp, "rules"), p->exit_rules);
	in->exit_rules = p->exit_rules;
	in->spec_error = p->spec_error;
	in->spec_error_msg = p->spec_err.msg;
	in->phase = job_phase_parse(json_string_value(json_object_get(p->status, "phase")));
	in->start_time = fmax(0, kube_time_parse(json_string_value(
		json_object_get(p->status, "startTime"))));
	in->completion_time = fmax(0, kube_time_parse(json_string_value(
		json_object_get(p->status, "completionTime"))));
	status_read_conditions(p->status, in->conds);
	in->progress = p->m->progress;
}

/* Step 1: everything reconcile() needs. 1: the job is gone; -1: retry. */
static int observe(struct worker *w, const char *key, struct pass *p)
{
	int r;

	p->key = key;
	if ((r = read_job(w->op, key, p)))
		return r;
	if (observe_learners(w->op, p))
		return -1;
	observe_children(w->op, p);
	observe_progress(w, p);
	observe_job(p);
	observe_replacements(w->op, p);
	return 0;
}

/* ---- apply: reconcile's actions as API calls ------------------------ */

/* Server-side apply; *resp (when not NULL) gets the object as written. */
static int apply_resp(struct worker *w, const char *api, const char *res,
		      const char *ns, const char *name, json_t *obj,
		      json_t **resp, struct err *e)
{
	char path[512], full[640];
	struct kube_status st;
	char *body;
	int rc;

	if (!obj)
		return err_set(e, "cannot build %s '%s'", res, name);
	object_path(api, res, ns, name, path, sizeof(path));
	snprintf(full, sizeof(full), "%s?fieldManager=" FIELD_MANAGER "&force=true", path);
	body = json_dumps(obj, JSON_COMPACT);
	json_decref(obj);
	rc = kube_request(w->k, "PATCH", full, "application/apply-patch+yaml", body,
			  resp, &st, e);
	free(body);
	return rc;
}

static int apply(struct worker *w, const char *api, const char *res,
		 const char *ns, const char *name, json_t *obj, struct err *e)
{
	return apply_resp(w, api, res, ns, name, obj, NULL, e);
}

static int delete_obj(struct worker *w, const char *api, const char *res,
		      const char *ns, const char *name, const char *uid,
		      int grace, struct err *e)
{
	char path[512], body[256];
	struct kube_status st;
	int n;

	object_path(api, res, ns, name, path, sizeof(path));
	n = snprintf(body, sizeof(body),
		     "{\"apiVersion\":\"v1\",\"kind\":\"DeleteOptions\","
		     "\"propagationPolicy\":\"Background\"");
	if (uid && uid[0])
		n += snprintf(body + n, sizeof(body) - (size_t)n,
			      ",\"preconditions\":{\"uid\":\"%s\"}", uid);
	if (grace >= 0)
		n += snprintf(body + n, sizeof(body) - (size_t)n,
			      ",\"gracePeriodSeconds\":%d", grace);
	snprintf(body + n, sizeof(body) - (size_t)n, "}");
	if (!kube_request(w->k, "DELETE", path, NULL, body, NULL, &st, e))
		return 0;
	if (st.code == 404 || st.code == 409)
		return 0;   /* gone already, or a newer pod under that name */
	return -1;
}

/*
 * <job>-tls: created (POST), never applied, read or replaced. A 409 means
 * it is there already, with the identities the job's pods hold; the
 * operator's role may create Secrets and nothing more.
 */
static int create_tls(struct worker *w, struct pass *p, const struct child_ctx *c,
		      struct err *e)
{
	char path[512];
	struct kube_status st;
	json_t *obj = child_tls_secret(c, e);
	char *body;
	int rc;

	if (!obj)
		return -1;
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/secrets", p->ns);
	body = json_dumps(obj, JSON_COMPACT);
	json_decref(obj);
	if (!body)
		return err_set(e, "cannot encode Secret '%s-tls'", p->name);
	rc = kube_request(w->k, "POST", path, NULL, body, NULL, &st, e);
	/* the keys were in this text: wipe it before it goes */
	memset(body, 0, strlen(body));
	free(body);
	if (rc && st.code == 409)
		rc = 0;
	if (!rc)
		p->m->tls = 1;
	return rc;
}

static void job_event(struct kube *k, json_t *job, int warning,
		      const char *reason, const char *message)
{
	kube_post_event(k, &(struct kube_event_post){
		FIELD_MANAGER, JOB_API_VERSION, JOB_KIND, job, warning,
		reason, message });
}

/*
 * A pass whose status write lost a race (409) decides again from the same
 * cache and would say the same thing twice: an Event identical to one
 * sent in the last EVENT_DEDUPE seconds is dropped.
 */
#define EVENT_DEDUPE 30.0

static int event_repeated(struct jobmem *m, const char *reason, const char *msg)
{
	char text[EVENT_TEXT];
	double now = clock_mono();

	snprintf(text, sizeof(text), "%s: %s", reason, msg);
	for (int i = 0; i < 8; i++)
		if (m->sent[i].at > 0 && now - m->sent[i].at < EVENT_DEDUPE &&
		    !strcmp(m->sent[i].text, text))
			return 1;
	snprintf(m->sent[m->nsent % 8].text, sizeof(m->sent[0].text), "%s", text);
	m->sent[m->nsent++ % 8].at = now;
	return 0;
}

/* A learner's or the evaluator's pod: its apply keeps the uid it got
 * back in lm; if that pod is seen deleted before the cache ever showed
 * it, it counts as gone. */
static int apply_pod(struct worker *w, struct pass *p, struct learner_mem *lm,
		     const char *name, json_t *obj, struct err *e)
{
	json_t *pod = NULL;
	const char *uid;

	if (apply_resp(w, "/api/v1", "pods", p->ns, name, obj, &pod, e))
		return -1;
	uid = jget(pod, "metadata", "uid");
	snprintf(lm->create_uid, sizeof(lm->create_uid), "%s", uid ? uid : "");
	json_decref(pod);
	return 0;
}

/* Where each action's object lives: API group path, resource, child. */
static const struct {
	const char *api, *res;
	enum child_kind child;
} targets[] = {
	[ACT_APPLY_CONFIGMAP] = { "/api/v1", "configmaps", CHILD_SPEC },
	[ACT_APPLY_SERVICE] = { "/api/v1", "services", CHILD_SYNCER },
	[ACT_APPLY_NETPOL] = { "/apis/networking.k8s.io/v1", "networkpolicies",
			       CHILD_SYNCER },
	[ACT_CREATE_TLS] = { "/api/v1", "secrets", CHILD_TLS },
	[ACT_APPLY_PVC] = { "/api/v1", "persistentvolumeclaims", CHILD_CHECKPOINTS },
	[ACT_APPLY_SYNCER] = { "/apis/apps/v1", "statefulsets", CHILD_SYNCER },
	[ACT_DELETE_SYNCER] = { "/apis/apps/v1", "statefulsets", CHILD_SYNCER },
	[ACT_APPLY_LEARNER] = { "/api/v1", "pods", CHILD_LEARNER },
	[ACT_DELETE_LEARNER] = { "/api/v1", "pods", CHILD_LEARNER },
	[ACT_APPLY_EVALUATOR] = { "/api/v1", "pods", CHILD_EVALUATOR },
	[ACT_DELETE_EVALUATOR] = { "/api/v1", "pods", CHILD_EVALUATOR },
};

static json_t *build_child(const struct child_ctx *c, const struct rc_action *a)
{
	switch (a->kind) {
	case ACT_APPLY_CONFIGMAP:
		return child_configmap(c);
	case ACT_APPLY_SERVICE:
		return child_service(c);
	case ACT_APPLY_NETPOL:
		return child_networkpolicy(c);
	case ACT_APPLY_PVC:
		return child_pvc(c);
	case ACT_APPLY_SYNCER:
		return child_syncer(c);
	case ACT_APPLY_LEARNER:
		return child_learner(c, a->index);
	case ACT_APPLY_EVALUATOR:
		return child_evaluator(c);
	default:
		return NULL;
	}
}

static int act(struct worker *w, struct pass *p, const struct rc_action *a,
	       struct err *e)
{
	struct child_ctx c = { p->name, p->ns, p->uid, &p->js,
			       json_object_get(p->job, "spec"), p->core_text,
			       w->op->o->operator_ns, a->retain,
			       json_object_get(json_object_get(p->job, "metadata"), "labels") };
	char name[CHILD_NAME_MAX];

	switch (a->kind) {
	case ACT_DELETE_JOB:
		log_info("%s/%s: ttlSecondsAfterFinished passed: deleting the job",
			 p->ns, p->name);
		return delete_obj(w, CRD_PATH, "decoupledtrainingjobs", p->ns, p->name,
				  p->uid, -1, e);
	case ACT_EVENT:
		if (!event_repeated(p->m, a->reason, a->message))
			job_event(w->k, p->job, a->warning, a->reason, a->message);
		return 0;
	default:
		break;
	}
	if (child_name(p->name, targets[a->kind].child, a->index, name, sizeof(name)))
		return err_set(e, "the name of a child of '%s' is too long", p->name);
	if (a->kind == ACT_DELETE_SYNCER)
		return delete_obj(w, targets[a->kind].api, targets[a->kind].res, p->ns,
				  name, NULL, -1, e);
	if (a->kind == ACT_DELETE_LEARNER || a->kind == ACT_DELETE_EVALUATOR)
		return delete_obj(w, targets[a->kind].api, targets[a->kind].res, p->ns,
				  name, a->uid, a->force ? 0 : -1, e);
	if (a->kind == ACT_APPLY_LEARNER)
		return apply_pod(w, p, &p->m->learners[a->index], name,
				 build_child(&c, a), e);
	if (a->kind == ACT_APPLY_EVALUATOR)
		return apply_pod(w, p, &p->m->evaluator, name, build_child(&c, a), e);
	if (a->kind == ACT_CREATE_TLS)
		return create_tls(w, p, &c, e);
	return apply(w, targets[a->kind].api, targets[a->kind].res, p->ns, name,
		     build_child(&c, a), e);
}

/* A create that failed: the Created condition says so, and an Event. */
static void undo_failed(struct worker *w, struct pass *p,
			const struct rc_action *a, const char *why)
{
	char msg[300];

	snprintf(msg, sizeof(msg), "%.*s", (int)sizeof(msg) - 1, why);
	if (a->kind != ACT_DELETE_JOB && a->kind != ACT_EVENT &&
	    a->kind != ACT_DELETE_LEARNER && a->kind != ACT_DELETE_SYNCER &&
	    a->kind != ACT_DELETE_EVALUATOR) {
		char now[48];

		kube_time_now(now, sizeof(now), 0);
		cond_set(&p->out.conds[COND_CREATED], 0, "CreateFailed", msg, now);
		job_event(w->k, p->job, 1, "CreateFailed", msg);
	}
	/* an apply that failed made nothing: neither expect it nor count it
	 * as a restart (its event is not sent) */
	if (a->kind == ACT_APPLY_LEARNER) {
		p->m->learners[a->index].create_sent = 0;
		if (a->recreate)
			p->m->learners[a->index].restarts--;
	}
	if (a->kind == ACT_APPLY_EVALUATOR) {
		p->m->evaluator.create_sent = 0;
		if (a->recreate)
			p->m->evaluator.restarts--;
	}
}

/* Step 3: the actions in order, up to the first that fails; -1 then. */
static int apply_actions(struct worker *w, struct pass *p)
{
	struct op *op = w->op;
	struct err e;

	for (int k = 0; k < p->out.nacts; k++) {
		const struct rc_action *a = &p->out.acts[k];

		if (act(w, p, a, &e)) {
			log_warn("%s: %s", p->key, e.msg);
			undo_failed(w, p, a, e.msg);
			return -1;
		}
		count(op, &op->actions[a->kind]);
	}
	return 0;
}

/* ---- write status ---------------------------------------------------- */

/* PUT the status with the resourceVersion we read; 1 on a 409. */
static int put_status(struct worker *w, json_t *job, json_t *status,
		      struct err *e)
{
	char path[512];
	struct kube_status st;
	json_t *obj = json_pack("{s:s, s:s, s:{s:O, s:O, s:O}, s:O}",
				"apiVersion", JOB_API_VERSION,
				"kind", JOB_KIND, "metadata",
				"name", json_object_get(json_object_get(job, "metadata"), "name"),
				"namespace", json_object_get(json_object_get(job, "metadata"), "namespace"),
				"resourceVersion", json_object_get(json_object_get(job, "metadata"), "resourceVersion"),
				"status", status);
	char *body;
	int rc;

	if (!obj)
		return err_set(e, "status: cannot build the object");
	object_path(CRD_PATH, "decoupledtrainingjobs", jget(job, "metadata", "namespace"),
		    jget(job, "metadata", "name"), path, sizeof(path));
	strncat(path, "/status", sizeof(path) - strlen(path) - 1);
	body = json_dumps(obj, JSON_COMPACT);
	json_decref(obj);
	rc = kube_request(w->k, "PUT", path, NULL, body, NULL, &st, e);
	free(body);
	if (rc && st.code == 409)
		return 1;
	return rc;
}

/* Step 4: the status, written when it changed (beyond progress ticking
 * faster than STATUS_PROGRESS_EVERY); -1 to retry. */
static int write_status(struct worker *w, struct pass *p)
{
	struct op *op = w->op;
	struct status_input si = {
		&p->out, p->in.generation, p->m->learners, p->m->n, &p->m->progress,
		p->in.syncer_ready, NULL, p->status,
	};
	json_t *st;
	struct err e;
	int r = 0;

	if (p->in.deleting)
		return 0;   /* the job goes; its status with it */
	if (op->chaos)
		si.chaos = chaos_ctl_status(op->chaos, p->m->key, p->m->uid);
	st = status_build(&si);
	if (status_should_write(p->status, st, STATUS_PROGRESS_EVERY)) {
		r = put_status(w, p->job, st, &e);
		if (r == 1) {
			count(op, &op->conflicts);
			log_debug("%s: status conflict; retrying from a newer read", p->key);
		} else if (r) {
			log_warn("%s: %s", p->key, e.msg);
		} else {
			count(op, &op->status_writes);
		}
	}
	json_decref(st);
	return r ? -1 : 0;
}

/* When to look again without an event: reconcile's wish, and a running
 * job at least every RUNNING_RESYNC seconds (its progress moves). */
static double next_pass(const struct rc_output *out)
{
	double requeue = out->requeue_after;

	if (out->phase == PHASE_RUNNING || out->phase == PHASE_RESTARTING ||
	    out->phase == PHASE_PENDING)
		if (!requeue || requeue > RUNNING_RESYNC)
			requeue = RUNNING_RESYNC;
	return requeue;
}

/*
 * One pass over one job: observe -> decide (reconcile) -> apply -> write
 * status. 0 done, -1 retry with backoff.
 */
static int sync_job(struct worker *w, const char *key, double *requeue)
{
	struct pass p;
	int rc, failed;

	memset(&p, 0, sizeof(p));
	*requeue = 0;
	if ((rc = observe(w, key, &p)) > 0) {
		rc = 0;   /* the job is gone */
		goto out;
	}
	if (rc || reconcile(&p.in, p.m->learners, &p.out)) {
		rc = -1;
		goto out;
	}
	failed = apply_actions(w, &p);
	failed |= write_status(w, &p);
	*requeue = next_pass(&p.out);
	rc = failed ? -1 : 0;
out:
	pass_release(&p);
	return rc;
}

static void *work(void *arg)
{
	struct worker *w = arg;
	struct op *op = w->op;
	char key[WQ_KEY_MAX];
	double waited = 0;
	int r;

	while ((r = wq_get_timed(op->q, key, 1.0, &waited)) >= 0) {
		double requeue, t0;
		int rc;

		if (!r)
			continue;
		t0 = clock_mono();
		rc = sync_job(w, key, &requeue);
		pthread_mutex_lock(&op->mu);
		prom_hist_observe(&op->reconcile_seconds, clock_mono() - t0);
		prom_hist_observe(&op->queue_seconds, waited);
		op->reconciles++;
		if (rc)
			op->reconcile_errors++;
		pthread_mutex_unlock(&op->mu);
		if (rc) {
			wq_add_rate_limited(op->q, key);
		} else {
			wq_forget(op->q, key);
			if (requeue > 0)
				wq_add_after(op->q, key, requeue);
		}
		wq_done(op->q, key);
	}
	return NULL;
}

/* ---- HTTP: /healthz, /readyz, /metrics ---------------------------- */

static const char *kind_names[] = {
	"apply_configmap", "apply_service", "apply_networkpolicy", "create_tls",
	"apply_pvc", "apply_syncer",
	"delete_syncer", "apply_learner", "delete_learner", "apply_evaluator",
	"delete_evaluator", "delete_job", "event",
};

#define M(name) "ddiloco_operator_" name

static void rest_requests(struct op *op, struct buf *b);

/* /metrics: the workers' counters, the queue and each informer's cache. */
static void metrics(struct op *op, struct buf *b)
{
	struct informer *infs[] = { op->jobs, op->pods, op->sts, op->svcs,
				    op->cms, op->pvcs, op->netpols };
	struct informer_stats st[NINFORMERS];
	static const struct { const char *name, *help; size_t off; } per_inf[] = {
		{ M("lists_total"), "Successful lists, by resource.",
		  offsetof(struct informer_stats, lists) },
		{ M("relists_gone_total"), "Relists after a 410 Gone, by resource.",
		  offsetof(struct informer_stats, relists_410) },
		{ M("watch_errors_total"), "Failed lists and watches, by resource.",
		  offsetof(struct informer_stats, errors) },
	};

	pthread_mutex_lock(&op->mu);
	prom_counter(b, M("reconciles_total"), "Passes over a job.",
		     (uint64_t)op->reconciles);
	prom_counter(b, M("reconcile_errors_total"), "Passes that will be retried.",
		     (uint64_t)op->reconcile_errors);
	prom_counter(b, M("status_conflicts_total"), "Status writes refused with 409.",
		     (uint64_t)op->conflicts);
	prom_counter(b, M("status_writes_total"), "Status writes.",
		     (uint64_t)op->status_writes);
	prom_family(b, M("progress_reads_total"), PROM_COUNTER,
		    "Reads of a syncer's /status, by result.");
	prom_u64(b, M("progress_reads_total"), PROM_LABELS("result", "ok"),
		 (uint64_t)op->progress_reads);
	prom_u64(b, M("progress_reads_total"), PROM_LABELS("result", "error"),
		 (uint64_t)op->progress_errors);
	prom_gauge(b, M("leader"), "1 while this operator leads.", op->leader);
	prom_hist_write(b, M("reconcile_duration_seconds"),
			"Time of one pass over a job: observe, decide, act, write status.",
			&op->reconcile_seconds);
	prom_hist_write(b, M("queue_wait_seconds"),
			"Time a job key waited in the work queue before a worker took it.",
			&op->queue_seconds);
	prom_family(b, M("actions_total"), PROM_COUNTER, "API actions done, by kind.");
	for (int k = 0; k <= ACT_EVENT; k++)
		prom_u64(b, M("actions_total"), PROM_LABELS("action", kind_names[k]),
			 (uint64_t)op->actions[k]);
	pthread_mutex_unlock(&op->mu);
	prom_counter(b, "ddiloco_chaos_kills_total", "Pods deleted by the chaos controller.",
		     op->chaos ? (uint64_t)chaos_ctl_kills(op->chaos) : 0);
	prom_gauge(b, M("queue_depth"), "Job keys waiting in the work queue.", wq_len(op->q));
	prom_family(b, M("cached_objects"), PROM_GAUGE, "Objects in each informer's cache.");
	for (size_t i = 0; i < NINFORMERS; i++) {
		informer_get_stats(infs[i], &st[i]);
		prom_u64(b, M("cached_objects"), PROM_LABELS("resource", informer_name(infs[i])),
			 (uint64_t)informer_size(infs[i]));
	}
	for (size_t f = 0; f < sizeof(per_inf) / sizeof(per_inf[0]); f++) {
		prom_family(b, per_inf[f].name, PROM_COUNTER, per_inf[f].help);
		for (size_t i = 0; i < NINFORMERS; i++)
			prom_u64(b, per_inf[f].name,
				 PROM_LABELS("resource", informer_name(infs[i])),
				 (uint64_t)*(const long *)((const char *)&st[i] + per_inf[f].off));
	}
	rest_requests(op, b);
	prom_process(b);
}

/* rest_client_requests_total{code, method}, as client-go names it: every
 * answer of the API server to this process ("<error>": none came). */
static void rest_requests(struct op *op, struct buf *b)
{
	struct kube_stats *s = op->o->cfg.stats, c;
	char code[16];

	prom_family(b, "rest_client_requests_total", PROM_COUNTER,
		    "API server answers, by HTTP code and method.");
	if (!s)
		return;
	kube_stats_copy(s, &c);
	for (int i = 0; i < c.n; i++) {
		if (c.e[i].code > 0)
			snprintf(code, sizeof(code), "%d", c.e[i].code);
		else
			snprintf(code, sizeof(code), "%s", c.e[i].code ? "<other>" : "<error>");
		prom_u64(b, "rest_client_requests_total",
			 PROM_LABELS("code", code, "method", c.e[i].method),
			 (uint64_t)c.e[i].count);
	}
}

#undef M

static int serve(void *ctx, const char *path, struct buf *b, const char **ct)
{
	struct op *op = ctx;
	struct informer *infs[] = { op->jobs, op->pods, op->sts, op->svcs,
				    op->cms, op->pvcs, op->netpols };

	if (!strcmp(path, "/healthz")) {
		buf_printf(b, "ok\n");
		return 200;
	}
	if (!strcmp(path, "/readyz")) {
		for (size_t i = 0; i < NINFORMERS; i++)
			if (!informer_synced(infs[i])) {
				buf_printf(b, "informer %s not synced\n", informer_name(infs[i]));
				return 503;
			}
		buf_printf(b, "ok\n");
		return 200;
	}
	if (strcmp(path, "/metrics"))
		return 404;
	*ct = PROM_CONTENT_TYPE;
	metrics(op, b);
	return 200;
}

/* ---- main loop ------------------------------------------------------ */

static void resync_all(struct op *op)
{
	json_t *keys = informer_keys(op->jobs), *k;
	size_t i;

	json_array_foreach(keys, i, k)
		wq_add(op->q, json_string_value(k));
	json_decref(keys);
}

static void on_touched(void *ctx, const char *key)
{
	struct op *op = ctx;

	wq_add(op->q, key);
}

/*
 * A container's status as podcheck reads it: its name, restarts, and the
 * reason, message and exit code of its state and last state.
 */
static json_t *slim_container_statuses(json_t *list)
{
	static const char *const states[] = { "state", "lastState" };
	json_t *out = json_array(), *cs;
	size_t i;

	json_array_foreach(list, i, cs) {
		json_t *c = json_pack("{s:O?, s:O?}", "name", json_object_get(cs, "name"),
				      "restartCount", json_object_get(cs, "restartCount"));

		for (int k = 0; c && k < 2; k++) {
			json_t *st = json_object_get(cs, states[k]), *slim = json_object();
			const char *kind;
			json_t *v;

			json_object_foreach(st, kind, v)
				json_object_set_new(slim, kind, json_pack("{s:O?, s:O?, s:O?}",
					"reason", json_object_get(v, "reason"),
					"message", json_object_get(v, "message"),
					"exitCode", json_object_get(v, "exitCode")));
			json_object_set_new(c, states[k], slim);
		}
		if (c)
			json_array_append_new(out, c);
	}
	return out;
}

/*
 * Children are read for their metadata (owner, labels, deletion) and the
 * status fields the operator decides by (phase, conditions, ready
 * replicas, the pod's reason such as Evicted, and its containers' states
 * and exit codes, slimmed); the rest is dropped before caching.
 */
static void trim_child(json_t *obj)
{
	static const char *const keep[] = { "phase", "conditions", "readyReplicas",
					    "reason" };
	static const char *const lists[] = { "containerStatuses",
					     "initContainerStatuses" };
	json_t *st = json_object_get(obj, "status"), *kept = json_object();
	const char *key;
	json_t *v;
	void *tmp;

	json_object_foreach_safe(obj, tmp, key, v)
		if (strcmp(key, "metadata") && strcmp(key, "status"))
			json_object_del(obj, key);
	for (size_t i = 0; kept && i < sizeof(keep) / sizeof(keep[0]); i++)
		if ((v = json_object_get(st, keep[i])))
			json_object_set(kept, keep[i], v);
	for (size_t i = 0; kept && i < sizeof(lists) / sizeof(lists[0]); i++)
		if (json_is_array(v = json_object_get(st, lists[i])))
			json_object_set_new(kept, lists[i], slim_container_statuses(v));
	if (st && kept)
		json_object_set(obj, "status", kept);
	json_decref(kept);
}

static struct informer *start_informer(struct op *op, const char *name,
				       const char *api, const char *res,
				       const char *selector, informer_fn fn,
				       struct err *e)
{
	char path[256];
	struct informer *inf;

	collection(op, api, res, path, sizeof(path));
	inf = informer_new(&op->o->cfg, name, path, selector, fn, op);
	if (inf && fn == on_child)
		informer_set_trim(inf, trim_child);
	if (!inf || informer_start(inf, e)) {
		informer_free(inf);
		return NULL;
	}
	return inf;
}

/* The seven informers: jobs, and the children by the managed-by label. */
static int start_informers(struct op *op, struct err *e)
{
	const char *sel = "app.kubernetes.io/managed-by=" FIELD_MANAGER;

	if (!(op->jobs = start_informer(op, "decoupledtrainingjobs", CRD_PATH,
					"decoupledtrainingjobs", NULL, on_job, e)) ||
	    !(op->pods = start_informer(op, "pods", "/api/v1", "pods", sel, on_child, e)) ||
	    !(op->sts = start_informer(op, "statefulsets", "/apis/apps/v1",
				       "statefulsets", sel, on_child, e)) ||
	    !(op->svcs = start_informer(op, "services", "/api/v1", "services", sel,
					on_child, e)) ||
	    !(op->cms = start_informer(op, "configmaps", "/api/v1", "configmaps", sel,
				       on_child, e)) ||
	    !(op->pvcs = start_informer(op, "persistentvolumeclaims", "/api/v1",
					"persistentvolumeclaims", sel, on_child, e)) ||
	    !(op->netpols = start_informer(op, "networkpolicies",
					   "/apis/networking.k8s.io/v1",
					   "networkpolicies", sel, on_child, e)))
		return -1;
	return 0;
}

/* Workers, each with its own connections; *started counts the threads. */
static int start_workers(struct op *op, struct worker *ws, int nw, int *started)
{
	struct err e;

	for (int i = 0; i < nw; i++) {
		ws[i].op = op;
		ws[i].k = kube_new(&op->o->cfg, &e);
		ws[i].http = curl_easy_init();
		if (!ws[i].k || !ws[i].http ||
		    pthread_create(&ws[i].thread, NULL, work, &ws[i])) {
			log_error("cannot start worker %d", i);
			return -1;
		}
		(*started)++;
	}
	log_info("%d workers started%s", nw, op->o->leader_elect ? " (leader)" : "");
	return 0;
}

/*
 * The caller's thread: leader election, then the workers once leader,
 * the chaos controller's ticks and the periodic resync, every 0.2 s.
 * Returns 0 on *stop, OPERATOR_LOST_LEADERSHIP or 1.
 */
static int main_loop(struct op *op, struct kube *main_k, struct leader *lead,
		     struct worker *ws, int nw, int *started)
{
	const struct operator_opts *o = op->o;
	double next_resync = clock_mono() + o->resync, next_lease = 0;
	struct err e;

	while (!*op->stop) {
		double now = clock_mono();

		if (o->leader_elect && now >= next_lease) {
			int was = lead->is_leader;

			if (leader_try(lead, &e) < 0)
				log_warn("leader: %s", e.msg);
			next_lease = now + LEASE_RETRY;
			if (was && !lead->is_leader) {
				log_error("leader: leadership lost: stopping the workers");
				return OPERATOR_LOST_LEADERSHIP;
			}
		}
		op->leader = !o->leader_elect || lead->is_leader;
		if (op->leader && !*started) {
			if (start_workers(op, ws, nw, started))
				return 1;
			resync_all(op);
		}
		if (*started && op->chaos)
			chaos_ctl_tick(op->chaos, main_k);
		if (*started && now >= next_resync) {
			resync_all(op);
			next_resync = now + o->resync;
		}
		sleep_seconds(0.2);
	}
	return 0;
}

int operator_run(const struct operator_opts *o,
		 const volatile sig_atomic_t *stop)
{
	struct op op;
	struct worker *ws = NULL;
	struct httpd *http = NULL;
	struct kube *main_k = NULL;
	struct leader lead;
	struct err e;
	int rc = 0, nw = o->workers > 0 ? o->workers : 2, started = 0;

	memset(&op, 0, sizeof(op));
	op.o = o;
	op.stop = stop;
	pthread_mutex_init(&op.mu, NULL);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	op.q = wq_new(NULL);
	if (prom_hist_init(&op.reconcile_seconds, latency_bounds, NBOUNDS) ||
	    prom_hist_init(&op.queue_seconds, latency_bounds, NBOUNDS)) {
		log_error("operator: out of memory");
		rc = 1;
		goto out;
	}
	if (!(main_k = kube_new(&o->cfg, &e)) || start_informers(&op, &e)) {
		log_error("%s", e.msg);
		rc = 1;
		goto out;
	}
	if (o->http_port >= 0) {
		http = httpd_start(o->http_addr, o->http_port, serve, &op, &e);
		if (!http) {
			log_error("%s", e.msg);
			rc = 1;
			goto out;
		}
		log_info("serving /metrics /healthz /readyz on %s:%d", o->http_addr,
			 httpd_port(http));
	}
	if (o->chaos)
		op.chaos = chaos_ctl_new(op.jobs, op.pods, on_touched, &op);
	leader_init(&lead, main_k, o->lease_ns, o->lease_name, o->identity);
	if (!(ws = calloc((size_t)nw, sizeof(*ws)))) {
		rc = 1;
		goto out;
	}
	rc = main_loop(&op, main_k, &lead, ws, nw, &started);
	wq_shutdown(op.q);
	for (int i = 0; i < started; i++)
		pthread_join(ws[i].thread, NULL);
	if (o->leader_elect)
		leader_release(&lead);
out:
	for (int i = 0; ws && i < nw; i++) {
		kube_free(ws[i].k);
		if (ws[i].http)
			curl_easy_cleanup(ws[i].http);
	}
	free(ws);
	if (http)
		httpd_stop(http);
	chaos_ctl_free(op.chaos);
	informer_free(op.jobs);
	informer_free(op.pods);
	informer_free(op.sts);
	informer_free(op.svcs);
	informer_free(op.cms);
	informer_free(op.pvcs);
	informer_free(op.netpols);
	kube_free(main_k);
	while (op.mems)
		jobmem_drop(&op, op.mems->key);
	wq_free(op.q);
	prom_hist_release(&op.reconcile_seconds);
	prom_hist_release(&op.queue_seconds);
	pthread_mutex_destroy(&op.mu);
	return rc;
}
