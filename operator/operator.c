/*
 * operator: informers -> work queue of "ns/name" job keys -> workers.
 *
 * Threads: one per informer (own connection each), `workers` workers
 * (own connection and own HTTP handle for the syncers' /status each), the
 * HTTP server's, and the caller's thread, which runs leader election, the
 * periodic resync and the chaos controller.
 *
 * A worker's pass over one job (sync_job):
 *   1. read the job and its children from the caches
 *   2. parse the job with jobspec (the same parser as `ddiloco run`)
 *   3. read the syncer's /status when its pod is ready
 *   4. reconcile() -> actions, phase, conditions
 *   5. actions: server-side apply, deletes with a uid precondition,
 *      Events; a failure is written into the Created condition too
 *   6. status through /status with the resourceVersion read in 1 (409:
 *      the cache is behind; the key is retried with backoff)
 * Errors requeue the key rate-limited; success forgets its failures.
 *
 * Per-job memory (learner backoff, restarts, expectations, last progress,
 * chaos) lives in a small table keyed by job key and uid.
 */
#include "operator/operator.h"

#include <curl/curl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/httpd.h"
#include "common/jobspec.h"
#include "common/log.h"
#include "common/util.h"
#include "operator/chaos_ctl.h"
#include "operator/children.h"
#include "operator/informer.h"
#include "operator/leader.h"
#include "operator/podcheck.h"
#include "operator/reconcile.h"
#include "operator/workqueue.h"

#define CRD_PATH "/apis/ddiloco.io/v1alpha1"
#define FIELD_MANAGER "ddiloco-operator"
#define STATUS_MAX_BODY (4u << 20)
#define PROGRESS_EVERY 5.0        /* seconds between /status reads */
#define RUNNING_RESYNC 10.0

struct jobmem {
	char key[WQ_KEY_MAX];
	char uid[64];
	int n;
	struct learner_mem *learners;
	struct obs_progress progress;
	double progress_at;           /* monotonic */
	struct { char text[320]; double at; } sent[8];  /* recent Events */
	int nsent;
	struct jobmem *next;
};

struct op {
	const struct operator_opts *o;
	struct informer *jobs, *pods, *sts, *svcs, *cms, *pvcs;
	struct workqueue *q;
	pthread_mutex_t mu;           /* mems, counters */
	struct jobmem *mems;
	struct chaos_ctl *chaos;
	const volatile int *stop;
	volatile int quit;
	int leader;
	long reconciles, reconcile_errors, conflicts, actions[ACT_EVENT + 1];
	long status_writes, progress_reads, progress_errors;
};

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

		if (kind && name && !strcmp(kind, "DecoupledTrainingJob") &&
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

/* ---- observing ------------------------------------------------------ */

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

static void observe_pod(const char *job, json_t *pod, struct obs_pod *p)
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
	podcheck_blocked(pod, p->reason, sizeof(p->reason), p->message,
			 sizeof(p->message));
}

static void read_conditions(json_t *status, struct condition *conds)
{
	json_t *c;
	size_t i;

	memset(conds, 0, sizeof(struct condition) * COND_N);
	json_array_foreach(json_object_get(status, "conditions"), i, c) {
		const char *t = json_string_value(json_object_get(c, "type"));

		for (int k = 0; t && k < COND_N; k++) {
			const char *s, *r, *m, *tm;

			if (strcmp(t, cond_type_name((enum cond_type)k)))
				continue;
			s = json_string_value(json_object_get(c, "status"));
			r = json_string_value(json_object_get(c, "reason"));
			m = json_string_value(json_object_get(c, "message"));
			tm = json_string_value(json_object_get(c, "lastTransitionTime"));
			conds[k].set = 1;
			conds[k].status = s && !strcmp(s, "True");
			snprintf(conds[k].reason, sizeof(conds[k].reason), "%s", r ? r : "");
			snprintf(conds[k].message, sizeof(conds[k].message), "%s", m ? m : "");
			snprintf(conds[k].time, sizeof(conds[k].time), "%s", tm ? tm : "");
		}
	}
}

static void progress_from_json(json_t *j, struct obs_progress *p)
{
	json_t *loss = json_object_get(j, "eval_loss");

	if (!loss)
		loss = json_object_get(j, "loss");
	p->have = 1;
	p->round = json_integer_value(json_object_get(j, "round"));
	p->tokens = json_integer_value(json_object_get(j, "tokens"));
	p->loss = json_is_number(loss) ? json_number_value(loss) : NAN;
	p->goodput = json_number_value(json_object_get(j, "goodput"));
	p->uptime = json_number_value(json_object_get(j, "uptime"));
	p->elapsed = json_number_value(json_object_get(j, "elapsed"));
	p->done = json_is_true(json_object_get(j, "done"));
}

static size_t on_status_body(char *p, size_t sz, size_t n, void *arg)
{
	return buf_append(arg, p, sz * n) ? 0 : sz * n;
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

/* GET the syncer's /status; 0 and *p filled when it answered. */
static int read_progress(struct worker *w, const char *url,
			 struct obs_progress *p, struct err *e)
{
	struct buf b;
	CURLcode cc;
	long code = 0;
	json_t *j;
	int rc = -1;

	buf_init(&b, STATUS_MAX_BODY);
	curl_easy_reset(w->http);
	curl_easy_setopt(w->http, CURLOPT_URL, url);
	curl_easy_setopt(w->http, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(w->http, CURLOPT_TIMEOUT_MS, 2000L);
	curl_easy_setopt(w->http, CURLOPT_CONNECTTIMEOUT_MS, 1000L);
	curl_easy_setopt(w->http, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(w->http, CURLOPT_WRITEFUNCTION, on_status_body);
	curl_easy_setopt(w->http, CURLOPT_WRITEDATA, &b);
	cc = curl_easy_perform(w->http);
	curl_easy_getinfo(w->http, CURLINFO_RESPONSE_CODE, &code);
	if (cc != CURLE_OK || code != 200) {
		err_set(e, "syncer status '%s': %s", url,
			cc != CURLE_OK ? curl_easy_strerror(cc) : "not 200");
		goto out;
	}
	if (!(j = json_loadb(b.data, b.len, 0, NULL)) || !json_is_object(j)) {
		json_decref(j);
		err_set(e, "syncer status '%s': not a JSON object", url);
		goto out;
	}
	progress_from_json(j, p);
	json_decref(j);
	rc = 0;
out:
	buf_release(&b);
	return rc;
}

/* ---- acting --------------------------------------------------------- */

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

int operator_event(struct kube *k, json_t *job, int warning,
		   const char *reason, const char *message)
{
	const char *ns = jget(job, "metadata", "namespace");
	const char *name = jget(job, "metadata", "name");
	char path[256], now[48], gen[128];
	struct kube_status st;
	struct err e;
	json_t *ev;
	char *body;
	int rc;

	kube_time_now(now, sizeof(now), 0);
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/events", ns);
	snprintf(gen, sizeof(gen), "%s.", name);
	ev = json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:s, s:s, s:s, s:s, s:s?},"
		       " s:s, s:s, s:s, s:{s:s}, s:s, s:s, s:i, s:s}",
		       "apiVersion", "v1", "kind", "Event",
		       "metadata", "generateName", gen, "namespace", ns,
		       "involvedObject", "apiVersion", "ddiloco.io/v1alpha1",
		       "kind", "DecoupledTrainingJob", "name", name, "namespace", ns,
		       "uid", jget(job, "metadata", "uid"),
		       "reason", reason, "message", message,
		       "type", warning ? "Warning" : "Normal",
		       "source", "component", FIELD_MANAGER,
		       "firstTimestamp", now, "lastTimestamp", now, "count", 1,
		       "reportingComponent", FIELD_MANAGER);
	body = json_dumps(ev, JSON_COMPACT);
	json_decref(ev);
	rc = kube_request(k, "POST", path, NULL, body, NULL, &st, &e);
	free(body);
	if (rc)
		log_warn("event %s on %s/%s: %s", reason, ns, name, e.msg);
	else
		log_info("%s/%s: %s: %s", ns, name, reason, message);
	return rc;
}

static json_t *cond_json(const struct condition *c, enum cond_type t,
			 long long gen)
{
	return json_pack("{s:s, s:s, s:s, s:s, s:s, s:I}",
			 "type", cond_type_name(t), "status", c->status ? "True" : "False",
			 "reason", c->reason, "message", c->message,
			 "lastTransitionTime", c->time, "observedGeneration", (json_int_t)gen);
}

static void fmt_time(double t, char *out, size_t n)
{
	time_t s = (time_t)t;
	struct tm tm;

	gmtime_r(&s, &tm);
	strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static json_t *build_status(struct op *op, const struct rc_output *out,
			    const struct jobmem *m, long long gen,
			    int syncer_ready, json_t *old)
{
	json_t *chaos = op->chaos ? chaos_ctl_status(op->chaos, m->key, m->uid) : NULL;
	json_t *st = json_object(), *restarts = json_array(), *conds = json_array();
	char buf[48];

	json_object_set_new(st, "observedGeneration", json_integer(gen));
	json_object_set_new(st, "phase", json_string(job_phase_name(out->phase)));
	if (out->start_time > 0) {
		fmt_time(out->start_time, buf, sizeof(buf));
		json_object_set_new(st, "startTime", json_string(buf));
	}
	if (out->completion_time > 0 &&
	    (out->phase == PHASE_SUCCEEDED || out->phase == PHASE_FAILED)) {
		fmt_time(out->completion_time, buf, sizeof(buf));
		json_object_set_new(st, "completionTime", json_string(buf));
	}
	snprintf(buf, sizeof(buf), "%d/%d", out->ready, out->total);
	json_object_set_new(st, "learnersReady", json_string(buf));
	for (int i = 0; i < m->n; i++)
		json_array_append_new(restarts, json_integer(m->learners[i].restarts));
	json_object_set_new(st, "learners", json_pack("{s:i, s:i, s:o}",
		"total", out->total, "ready", out->ready, "restarts", restarts));
	json_object_set_new(st, "syncerReady", json_boolean(syncer_ready));
	if (m->progress.have) {
		json_t *p = json_pack("{s:I, s:I, s:f, s:f, s:f, s:b}",
				      "round", (json_int_t)m->progress.round,
				      "tokens", (json_int_t)m->progress.tokens,
				      "goodput", m->progress.goodput,
				      "uptime", m->progress.uptime,
				      "elapsed", m->progress.elapsed,
				      "done", m->progress.done);
		if (isfinite(m->progress.loss))
			json_object_set_new(p, "loss", json_real(m->progress.loss));
		json_object_set_new(st, "progress", p);
	}
	if (chaos)
		json_object_set_new(st, "chaos", chaos);
	else if (json_object_get(old, "chaos"))
		json_object_set(st, "chaos", json_object_get(old, "chaos"));
	for (int k = 0; k < COND_N; k++)
		if (out->conds[k].set)
			json_array_append_new(conds, cond_json(&out->conds[k],
							       (enum cond_type)k, gen));
	json_object_set_new(st, "conditions", conds);
	return st;
}

/* PUT the status with the resourceVersion we read; 1 on a 409. */
static int write_status(struct worker *w, json_t *job, json_t *status,
			struct err *e)
{
	char path[512];
	struct kube_status st;
	json_t *obj = json_pack("{s:s, s:s, s:{s:O, s:O, s:O}, s:O}",
				"apiVersion", "ddiloco.io/v1alpha1",
				"kind", "DecoupledTrainingJob", "metadata",
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

struct job_view {
	const char *ns, *name, *uid;
	json_t *job, *core;
	char *core_text;
	struct job_spec js;
	int spec_error;
	struct err spec_err;
};

/*
 * A pass whose status write lost a race (409) decides again from the same
 * cache and would say the same thing twice: an Event identical to one
 * sent in the last EVENT_DEDUPE seconds is dropped.
 */
#define EVENT_DEDUPE 30.0

static int event_repeated(struct jobmem *m, const char *reason, const char *msg)
{
	char text[320];
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

static int act(struct worker *w, struct job_view *v, struct jobmem *m,
	       const struct rc_action *a, struct err *e)
{
	struct child_ctx c = { v->name, v->ns, v->uid, &v->js,
			       json_object_get(v->job, "spec"), v->core_text };
	char name[160];

	switch (a->kind) {
	case ACT_APPLY_CONFIGMAP:
		snprintf(name, sizeof(name), "%s-spec", v->name);
		return apply(w, "/api/v1", "configmaps", v->ns, name, child_configmap(&c), e);
	case ACT_APPLY_SERVICE:
		snprintf(name, sizeof(name), "%s-syncer", v->name);
		return apply(w, "/api/v1", "services", v->ns, name, child_service(&c), e);
	case ACT_APPLY_PVC:
		snprintf(name, sizeof(name), "%s-checkpoints", v->name);
		return apply(w, "/api/v1", "persistentvolumeclaims", v->ns, name,
			     child_pvc(&c), e);
	case ACT_APPLY_SYNCER:
		snprintf(name, sizeof(name), "%s-syncer", v->name);
		return apply(w, "/apis/apps/v1", "statefulsets", v->ns, name,
			     child_syncer(&c), e);
	case ACT_DELETE_SYNCER:
		snprintf(name, sizeof(name), "%s-syncer", v->name);
		return delete_obj(w, "/apis/apps/v1", "statefulsets", v->ns, name,
				  NULL, -1, e);
	case ACT_APPLY_LEARNER: {
		struct learner_mem *lm = &m->learners[a->index];
		json_t *pod = NULL;
		const char *uid;

		snprintf(name, sizeof(name), "%s-learner-%d", v->name, a->index);
		if (apply_resp(w, "/api/v1", "pods", v->ns, name,
			       child_learner(&c, a->index), &pod, e))
			return -1;
		uid = jget(pod, "metadata", "uid");
		snprintf(lm->create_uid, sizeof(lm->create_uid), "%s", uid ? uid : "");
		json_decref(pod);
		return 0;
	}
	case ACT_DELETE_LEARNER:
		snprintf(name, sizeof(name), "%s-learner-%d", v->name, a->index);
		return delete_obj(w, "/api/v1", "pods", v->ns, name, a->uid, -1, e);
	case ACT_DELETE_JOB:
		log_info("%s/%s: ttlSecondsAfterFinished passed: deleting the job",
			 v->ns, v->name);
		return delete_obj(w, CRD_PATH, "decoupledtrainingjobs", v->ns, v->name,
				  v->uid, -1, e);
	case ACT_EVENT:
		if (!event_repeated(m, a->reason, a->message))
			operator_event(w->k, v->job, a->warning, a->reason, a->message);
		return 0;
	}
	return 0;
}

static void view_release(struct job_view *v)
{
	json_decref(v->job);
	json_decref(v->core);
	free(v->core_text);
}

/* One pass over one job; 0 done, -1 retry with backoff. */
static int sync_job(struct worker *w, const char *key, double *requeue)
{
	struct op *op = w->op;
	struct job_view v;
	char ns[64], name[64], cname[160];
	const char *slash = strchr(key, '/');
	json_t *status, *pods, *sts = NULL, *pod, *newst;
	struct obs_pod *obs = NULL;
	struct rc_input in;
	struct rc_output out;
	struct jobmem *m;
	struct err e;
	size_t i, npods;
	int rc = 0, failed = 0, M;
	json_t *restarts, *bl;
	char syncer_reason[64] = "", syncer_message[256] = "";

	memset(&v, 0, sizeof(v));
	memset(&in, 0, sizeof(in));
	*requeue = 0;
	if (!slash || slash - key >= (long)sizeof(ns))
		return 0;
	snprintf(ns, sizeof(ns), "%.*s", (int)(slash - key), key);
	snprintf(name, sizeof(name), "%s", slash + 1);
	v.ns = ns;
	v.name = name;
	if (!(v.job = informer_get(op->jobs, ns, name))) {
		jobmem_drop(op, key);
		return 0;
	}
	v.uid = jget(v.job, "metadata", "uid");
	status = json_object_get(v.job, "status");

	/* the job's meaning, through the one parser */
	v.core = job_core(v.job);
	v.core_text = json_dumps(v.core, JSON_COMPACT | JSON_SORT_KEYS);
	if (!v.core_text || jobspec_parse(v.core_text, strlen(v.core_text), key,
					  &v.js, &v.spec_err)) {
		v.spec_error = 1;
		jobspec_defaults(&v.js);
		snprintf(v.js.name, sizeof(v.js.name), "%s", name);
	}
	M = v.js.learners.replicas;
	if (!(m = jobmem_get(op, key, v.uid ? v.uid : "", M))) {
		view_release(&v);
		return -1;
	}
	restarts = json_object_get(json_object_get(status, "learners"), "restarts");
	for (int k = 0; k < M; k++) {
		int r = (int)json_integer_value(json_array_get(restarts, (size_t)k));
		if (r > m->learners[k].restarts)
			m->learners[k].restarts = r;
	}

	/* observe */
	pods = informer_select(op->pods, ns, LABEL_JOB, name);
	npods = json_array_size(pods);
	obs = calloc(npods ? npods : 1, sizeof(*obs));
	in.npods = 0;
	json_array_foreach(pods, i, pod) {
		const char *ou = owner_uid(pod);
		const char *role = json_string_value(json_object_get(json_object_get(
			json_object_get(pod, "metadata"), "labels"), LABEL_ROLE));

		if (role && !strcmp(role, "syncer") && !syncer_reason[0])
			podcheck_blocked(pod, syncer_reason, sizeof(syncer_reason),
					 syncer_message, sizeof(syncer_message));
		if (!ou || !v.uid || strcmp(ou, v.uid))
			continue;   /* an older job's pod, or the syncer's */
		if (!role || strcmp(role, "learner"))
			continue;
		observe_pod(name, pod, &obs[in.npods++]);
	}
	snprintf(cname, sizeof(cname), "%s-syncer", name);
	sts = informer_get(op->sts, ns, cname);
	in.statefulset = sts != NULL;
	in.syncer_ready = sts && json_integer_value(json_object_get(
		json_object_get(sts, "status"), "readyReplicas")) >= 1;
	snprintf(cname, sizeof(cname), "%s-spec", name);
	{
		json_t *x = informer_get(op->cms, ns, cname);
		in.configmap = x != NULL;
		json_decref(x);
		snprintf(cname, sizeof(cname), "%s-syncer", name);
		x = informer_get(op->svcs, ns, cname);
		in.service = x != NULL;
		json_decref(x);
		snprintf(cname, sizeof(cname), "%s-checkpoints", name);
		x = informer_get(op->pvcs, ns, cname);
		in.pvc = x != NULL;
		json_decref(x);
	}
	{
		const char *stg = jget(json_object_get(v.job, "spec"), "syncer", "storage");
		in.want_pvc = !stg || stg[0];
	}

	/* progress: the syncer's /status, else what status last said */
	if (!m->progress.have && json_object_get(status, "progress"))
		progress_from_json(json_object_get(status, "progress"), &m->progress);
	if (in.syncer_ready && clock_mono() - m->progress_at >= PROGRESS_EVERY) {
		char url[512];
		struct obs_progress p;

		status_url(op, name, ns, v.js.syncer.http_port, url, sizeof(url));
		m->progress_at = clock_mono();
		if (!read_progress(w, url, &p, &e)) {
			m->progress = p;
			count(op, &op->progress_reads);
		} else {
			count(op, &op->progress_errors);
			log_debug("%s: %s", key, e.msg);
		}
	}

	in.spec = &v.js;
	in.now = clock_wall();
	in.deleting = json_object_get(json_object_get(v.job, "metadata"),
				      "deletionTimestamp") != NULL;
	in.generation = json_integer_value(json_object_get(json_object_get(v.job, "metadata"),
							   "generation"));
	bl = json_object_get(json_object_get(v.job, "spec"), "backoffLimit");
	in.backoff_limit = json_is_integer(bl) ? (int)json_integer_value(bl) : -1;
	in.spec_error = v.spec_error;
	in.spec_error_msg = v.spec_err.msg;
	in.phase = job_phase_parse(json_string_value(json_object_get(status, "phase")));
	in.start_time = fmax(0, kube_time_parse(json_string_value(json_object_get(status, "startTime"))));
	in.completion_time = fmax(0, kube_time_parse(json_string_value(
		json_object_get(status, "completionTime"))));
	read_conditions(status, in.conds);
	in.pods = obs;
	in.progress = m->progress;
	in.syncer_reason = syncer_reason;
	in.syncer_message = syncer_message;
	for (int k = 0; k < M; k++) {
		struct learner_mem *lm = &m->learners[k];

		if (lm->create_sent > 0 && lm->create_uid[0])
			lm->create_gone = informer_deleted(op->pods, lm->create_uid);
	}

	if (reconcile(&in, m->learners, &out)) {
		rc = -1;
		goto out;
	}
	for (int k = 0; k < out.nacts; k++) {
		const struct rc_action *a = &out.acts[k];

		if (act(w, &v, m, a, &e)) {
			char msg[300];

			failed = 1;
			log_warn("%s: %s", key, e.msg);
			snprintf(msg, sizeof(msg), "%s", e.msg);
			if (a->kind != ACT_DELETE_JOB && a->kind != ACT_EVENT &&
			    a->kind != ACT_DELETE_LEARNER && a->kind != ACT_DELETE_SYNCER) {
				char now[48];

				kube_time_now(now, sizeof(now), 0);
				cond_set(&out.conds[COND_CREATED], 0, "CreateFailed", msg, now);
				operator_event(w->k, v.job, 1, "CreateFailed", msg);
			}
			/* an apply that failed made nothing: neither expect
			 * it nor count it as a restart (its event is not sent) */
			if (a->kind == ACT_APPLY_LEARNER) {
				m->learners[a->index].create_sent = 0;
				if (a->recreate)
					m->learners[a->index].restarts--;
			}
			break;
		}
		pthread_mutex_lock(&op->mu);
		op->actions[a->kind]++;
		pthread_mutex_unlock(&op->mu);
	}

	if (!in.deleting) {
		newst = build_status(op, &out, m, in.generation, in.syncer_ready, status);
		if (!json_equal(newst, status)) {
			int r = write_status(w, v.job, newst, &e);

			if (r == 1) {
				pthread_mutex_lock(&op->mu);
				op->conflicts++;
				pthread_mutex_unlock(&op->mu);
				log_debug("%s: status conflict; retrying from a newer read", key);
				failed = 1;
			} else if (r) {
				log_warn("%s: %s", key, e.msg);
				failed = 1;
			} else {
				count(op, &op->status_writes);
			}
		}
		json_decref(newst);
	}
	*requeue = out.requeue_after;
	if (out.phase == PHASE_RUNNING || out.phase == PHASE_RESTARTING ||
	    out.phase == PHASE_PENDING)
		if (!*requeue || *requeue > RUNNING_RESYNC)
			*requeue = RUNNING_RESYNC;
	rc = failed ? -1 : 0;
out:
	rc_output_release(&out);
	free(obs);
	json_decref(pods);
	json_decref(sts);
	view_release(&v);
	return rc;
}

static void *work(void *arg)
{
	struct worker *w = arg;
	struct op *op = w->op;
	char key[WQ_KEY_MAX];
	int r;

	while ((r = wq_get(op->q, key, 1.0)) >= 0) {
		double requeue;
		int rc;

		if (!r)
			continue;
		rc = sync_job(w, key, &requeue);
		pthread_mutex_lock(&op->mu);
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
	"apply_configmap", "apply_service", "apply_pvc", "apply_syncer",
	"delete_syncer", "apply_learner", "delete_learner", "delete_job", "event",
};

static int serve(void *ctx, const char *path, struct buf *b, const char **ct)
{
	struct op *op = ctx;
	struct informer *infs[] = { op->jobs, op->pods, op->sts, op->svcs,
				    op->cms, op->pvcs };

	if (!strcmp(path, "/healthz")) {
		buf_printf(b, "ok\n");
		return 200;
	}
	if (!strcmp(path, "/readyz")) {
		for (size_t i = 0; i < 6; i++)
			if (!informer_synced(infs[i])) {
				buf_printf(b, "informer %s not synced\n", informer_name(infs[i]));
				return 503;
			}
		buf_printf(b, "ok\n");
		return 200;
	}
	if (strcmp(path, "/metrics"))
		return 404;
	*ct = "text/plain; version=0.0.4";
	pthread_mutex_lock(&op->mu);
	buf_printf(b, "# TYPE ddiloco_operator_reconciles_total counter\n"
		   "ddiloco_operator_reconciles_total %ld\n"
		   "# TYPE ddiloco_operator_reconcile_errors_total counter\n"
		   "ddiloco_operator_reconcile_errors_total %ld\n"
		   "# TYPE ddiloco_operator_status_conflicts_total counter\n"
		   "ddiloco_operator_status_conflicts_total %ld\n"
		   "# TYPE ddiloco_operator_status_writes_total counter\n"
		   "ddiloco_operator_status_writes_total %ld\n"
		   "# TYPE ddiloco_operator_progress_reads_total counter\n"
		   "ddiloco_operator_progress_reads_total{result=\"ok\"} %ld\n"
		   "ddiloco_operator_progress_reads_total{result=\"error\"} %ld\n"
		   "# TYPE ddiloco_operator_leader gauge\nddiloco_operator_leader %d\n"
		   "# TYPE ddiloco_operator_actions_total counter\n",
		   op->reconciles, op->reconcile_errors, op->conflicts,
		   op->status_writes, op->progress_reads, op->progress_errors,
		   op->leader);
	for (int k = 0; k <= ACT_EVENT; k++)
		buf_printf(b, "ddiloco_operator_actions_total{action=\"%s\"} %ld\n",
			   kind_names[k], op->actions[k]);
	pthread_mutex_unlock(&op->mu);
	buf_printf(b, "# TYPE ddiloco_chaos_kills_total counter\n"
		   "ddiloco_chaos_kills_total %ld\n",
		   op->chaos ? chaos_ctl_kills(op->chaos) : 0L);
	buf_printf(b, "# TYPE ddiloco_operator_queue_depth gauge\n"
		   "ddiloco_operator_queue_depth %d\n", wq_len(op->q));
	buf_printf(b, "# TYPE ddiloco_operator_cached_objects gauge\n");
	for (size_t i = 0; i < 6; i++) {
		struct informer_stats s;

		informer_get_stats(infs[i], &s);
		buf_printf(b, "ddiloco_operator_cached_objects{resource=\"%s\"} %d\n",
			   informer_name(infs[i]), informer_size(infs[i]));
		buf_printf(b, "ddiloco_operator_lists_total{resource=\"%s\"} %ld\n"
			   "ddiloco_operator_relists_gone_total{resource=\"%s\"} %ld\n"
			   "ddiloco_operator_watch_errors_total{resource=\"%s\"} %ld\n",
			   informer_name(infs[i]), s.lists, informer_name(infs[i]),
			   s.relists_410, informer_name(infs[i]), s.errors);
	}
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
 * Children are read for their metadata (owner, labels, deletion) and three
 * status fields; the rest is dropped before caching.
 */
static void trim_child(json_t *obj)
{
	static const char *const keep[] = { "phase", "conditions", "readyReplicas" };
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

int operator_run(const struct operator_opts *o, const volatile int *stop)
{
	struct op op;
	struct worker *ws = NULL;
	struct httpd *http = NULL;
	struct kube *main_k = NULL;
	struct leader lead;
	struct err e;
	const char *sel = "app.kubernetes.io/managed-by=" FIELD_MANAGER;
	double next_resync, next_lease = 0;
	int rc = 0, nw = o->workers > 0 ? o->workers : 2, started = 0;

	memset(&op, 0, sizeof(op));
	op.o = o;
	op.stop = stop;
	pthread_mutex_init(&op.mu, NULL);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	op.q = wq_new(NULL);
	if (!(main_k = kube_new(&o->cfg, &e))) {
		log_error("%s", e.msg);
		rc = 1;
		goto out;
	}
	if (!(op.jobs = start_informer(&op, "decoupledtrainingjobs", CRD_PATH,
				       "decoupledtrainingjobs", NULL, on_job, &e)) ||
	    !(op.pods = start_informer(&op, "pods", "/api/v1", "pods", sel, on_child, &e)) ||
	    !(op.sts = start_informer(&op, "statefulsets", "/apis/apps/v1",
				      "statefulsets", sel, on_child, &e)) ||
	    !(op.svcs = start_informer(&op, "services", "/api/v1", "services", sel,
				       on_child, &e)) ||
	    !(op.cms = start_informer(&op, "configmaps", "/api/v1", "configmaps", sel,
				      on_child, &e)) ||
	    !(op.pvcs = start_informer(&op, "persistentvolumeclaims", "/api/v1",
				       "persistentvolumeclaims", sel, on_child, &e))) {
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
	ws = calloc((size_t)nw, sizeof(*ws));
	next_resync = clock_mono() + o->resync;
	while (!*stop) {
		double now = clock_mono();

		if (o->leader_elect && now >= next_lease) {
			int was = lead.is_leader;

			if (leader_try(&lead, &e) < 0)
				log_warn("leader: %s", e.msg);
			next_lease = now + LEASE_RETRY;
			if (was && !lead.is_leader) {
				log_error("leader: leadership lost: stopping the workers");
				rc = OPERATOR_LOST_LEADERSHIP;
				break;
			}
		}
		op.leader = !o->leader_elect || lead.is_leader;
		if (op.leader && !started) {
			for (int i = 0; i < nw; i++) {
				ws[i].op = &op;
				ws[i].k = kube_new(&o->cfg, &e);
				ws[i].http = curl_easy_init();
				if (!ws[i].k || !ws[i].http ||
				    pthread_create(&ws[i].thread, NULL, work, &ws[i])) {
					log_error("cannot start worker %d", i);
					rc = 1;
					goto stop;
				}
				started++;
			}
			log_info("%d workers started%s", nw, o->leader_elect ? " (leader)" : "");
			resync_all(&op);
		}
		if (started && op.chaos)
			chaos_ctl_tick(op.chaos, main_k);
		if (started && now >= next_resync) {
			resync_all(&op);
			next_resync = now + o->resync;
		}
		sleep_seconds(0.2);
	}
stop:
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
	kube_free(main_k);
	while (op.mems)
		jobmem_drop(&op, op.mems->key);
	wq_free(op.q);
	pthread_mutex_destroy(&op.mu);
	return rc;
}
