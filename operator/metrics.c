/*
 * metrics: plain counters and two histograms under one lock, taken for
 * each count and once while the page is written, so a page's counters
 * are of one moment. The other figures are read from their owners (the
 * queue, the informers, the chaos controller, the API client) as the
 * page is written.
 */
#include "operator/metrics.h"

#include "operator/crd.h"

#include "common/util.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* seconds: a pass is milliseconds; a wait may be a rate limit's minutes */
static const double latency_bounds[] = {
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
	30, 60,
};
#define NBOUNDS ((int)(sizeof(latency_bounds) / sizeof(latency_bounds[0])))

static const char *kind_names[] = {
	"apply_configmap", "apply_service", "apply_networkpolicy", "create_tls",
	"replace_child", "apply_pvc", "resize_pvc", "apply_syncer",
	"delete_syncer", "delete_syncer_pod", "apply_learner", "delete_learner", "apply_evaluator",
	"delete_evaluator", "delete_job", "event",
};
_Static_assert(sizeof(kind_names) / sizeof(kind_names[0]) == ACT_EVENT + 1,
	       "one name per enum rc_kind, in its order");

int op_metrics_init(struct op_metrics *m)
{
	memset(m, 0, sizeof(*m));
	pthread_mutex_init(&m->mu, NULL);
	if (prom_hist_init(&m->reconcile_seconds, latency_bounds, NBOUNDS) ||
	    prom_hist_init(&m->queue_seconds, latency_bounds, NBOUNDS))
		return -1;
	return 0;
}

void op_metrics_release(struct op_metrics *m)
{
	prom_hist_release(&m->reconcile_seconds);
	prom_hist_release(&m->queue_seconds);
	pthread_mutex_destroy(&m->mu);
}

void op_metrics_count(struct op_metrics *m, long *counter)
{
	pthread_mutex_lock(&m->mu);
	(*counter)++;
	pthread_mutex_unlock(&m->mu);
}

void op_metrics_pass(struct op_metrics *m, double seconds, double waited,
		     int failed)
{
	pthread_mutex_lock(&m->mu);
	prom_hist_observe(&m->reconcile_seconds, seconds);
	prom_hist_observe(&m->queue_seconds, waited);
	m->reconciles++;
	if (failed)
		m->reconcile_errors++;
	pthread_mutex_unlock(&m->mu);
}

#define M(name) "ddiloco_operator_" name

/* The workers' counters and histograms, of one moment. */
static void counted(struct op_metrics *m, int leader, struct buf *b)
{
	pthread_mutex_lock(&m->mu);
	prom_counter(b, M("reconciles_total"), "Passes over a job.",
		     (uint64_t)m->reconciles);
	prom_counter(b, M("reconcile_errors_total"), "Passes that will be retried.",
		     (uint64_t)m->reconcile_errors);
	prom_counter(b, M("status_conflicts_total"), "Status writes refused with 409.",
		     (uint64_t)m->conflicts);
	prom_counter(b, M("status_writes_total"), "Status writes.",
		     (uint64_t)m->status_writes);
	prom_family(b, M("progress_reads_total"), PROM_COUNTER,
		    "Reads of a syncer's /status, by result.");
	prom_u64(b, M("progress_reads_total"), PROM_LABELS("result", "ok"),
		 (uint64_t)m->progress_reads);
	prom_u64(b, M("progress_reads_total"), PROM_LABELS("result", "error"),
		 (uint64_t)m->progress_errors);
	prom_gauge(b, M("leader"), "1 while this operator leads.", leader);
	prom_hist_write(b, M("reconcile_duration_seconds"),
			"Time of one pass over a job: observe, decide, act, write status.",
			&m->reconcile_seconds);
	prom_hist_write(b, M("queue_wait_seconds"),
			"Time a job key waited in the work queue before a worker took it.",
			&m->queue_seconds);
	prom_family(b, M("actions_total"), PROM_COUNTER, "API actions done, by kind.");
	for (int k = 0; k <= ACT_EVENT; k++)
		prom_u64(b, M("actions_total"), PROM_LABELS("action", kind_names[k]),
			 (uint64_t)m->actions[k]);
	pthread_mutex_unlock(&m->mu);
}

/* Each informer's cache size and its list and watch counts. */
static void informers(const struct caches *c, struct buf *b)
{
	struct informer *infs[CACHES_N];
	struct informer_stats st[CACHES_N];
	static const struct { const char *name, *help; size_t off; } per_inf[] = {
		{ M("lists_total"), "Successful lists, by resource.",
		  offsetof(struct informer_stats, lists) },
		{ M("relists_gone_total"), "Relists after a 410 Gone, by resource.",
		  offsetof(struct informer_stats, relists_410) },
		{ M("watch_errors_total"), "Failed lists and watches, by resource.",
		  offsetof(struct informer_stats, errors) },
	};

	caches_list(c, infs);
	prom_family(b, M("cached_objects"), PROM_GAUGE, "Objects in each informer's cache.");
	for (size_t i = 0; i < CACHES_N; i++) {
		informer_get_stats(infs[i], &st[i]);
		prom_u64(b, M("cached_objects"), PROM_LABELS("resource", informer_name(infs[i])),
			 (uint64_t)informer_size(infs[i]));
	}
	for (size_t f = 0; f < sizeof(per_inf) / sizeof(per_inf[0]); f++) {
		prom_family(b, per_inf[f].name, PROM_COUNTER, per_inf[f].help);
		for (size_t i = 0; i < CACHES_N; i++)
			prom_u64(b, per_inf[f].name,
				 PROM_LABELS("resource", informer_name(infs[i])),
				 (uint64_t)*(const long *)((const char *)&st[i] + per_inf[f].off));
	}
}

/* ---- per job, from the jobs' status in the cache ---------------------- */

static const char *const phases[] = { "Pending", "Running", "Restarting",
				      "Suspended", "Succeeded", "Failed" };

/* What one figure of a job is: its name, help, and where in its status. */
static const struct {
	const char *name, *help, *a, *b;
} figures[] = {
	{ "ddiloco_job_learners", "Learners the job has (spec.learners.replicas).",
	  "learners", "total" },
	{ "ddiloco_job_learners_ready", "Learner pods ready.", "learners", "ready" },
	{ "ddiloco_job_rounds", "Outer rounds merged (the syncer's).",
	  "progress", "round" },
	{ "ddiloco_job_tokens", "Tokens trained by all learners.",
	  "progress", "tokens" },
	{ "ddiloco_job_uptime_ratio", "Share of the job's time some round was "
	  "merging (docs/syncer.md, Goodput).", "progress", "uptime" },
	{ "ddiloco_job_goodput_ratio", "Share of the learners' time that was "
	  "merged (docs/syncer.md, Goodput).", "progress", "goodput" },
	{ "ddiloco_job_loss", "The last evaluation loss.", "progress", "loss" },
};

/* Every job of the cache, once a scrape: [{ns, name, status}] in the
 * order of their keys. */
static json_t *jobs_snapshot(struct informer *jobs)
{
	json_t *keys = informer_keys(jobs), *out = json_array(), *k;
	size_t i;

	json_array_foreach(keys, i, k) {
		const char *key = json_string_value(k), *slash = strchr(key, '/');
		char ns[64];
		json_t *job;

		if (!slash || (size_t)(slash - key) >= sizeof(ns))
			continue;
		memcpy(ns, key, (size_t)(slash - key));
		ns[slash - key] = '\0';
		if (!(job = informer_get(jobs, ns, slash + 1)))
			continue;
		json_array_append_new(out, json_pack("{s:s, s:s, s:O?}", "ns", ns,
			"name", slash + 1, "status", json_object_get(job, "status")));
		json_decref(job);
	}
	json_decref(keys);
	return out;
}

/* fn for each job of the snapshot. */
static void each_job(json_t *all, void (*fn)(const char *ns, const char *name,
					     json_t *st, void *ctx), void *ctx)
{
	json_t *j;
	size_t i;

	json_array_foreach(all, i, j)
		fn(json_string_value(json_object_get(j, "ns")),
		   json_string_value(json_object_get(j, "name")),
		   json_object_get(j, "status"), ctx);
}

struct job_pass { struct buf *b; int fig; double now; };

static void job_phase(const char *ns, const char *name, json_t *st, void *ctx)
{
	struct job_pass *p = ctx;
	const char *ph = json_string_value(json_object_get(st, "phase"));

	for (size_t i = 0; i < sizeof(phases) / sizeof(phases[0]); i++)
		prom_u64(p->b, "ddiloco_job_phase", PROM_LABELS("namespace", ns,
			 "job", name, "phase", phases[i]), ph && !strcmp(ph, phases[i]));
}

static void job_figure(const char *ns, const char *name, json_t *st, void *ctx)
{
	struct job_pass *p = ctx;
	json_t *v = json_object_get(json_object_get(st, figures[p->fig].a),
				    figures[p->fig].b);

	if (json_is_number(v))
		prom_double(p->b, figures[p->fig].name, PROM_LABELS("namespace",
			    ns, "job", name), json_number_value(v));
}

static void job_bytes(const char *ns, const char *name, json_t *st, void *ctx)
{
	struct job_pass *p = ctx;
	json_t *pr = json_object_get(st, "progress");

	if (!json_is_integer(json_object_get(pr, "bytesIn")))
		return;
	prom_u64(p->b, "ddiloco_job_syncer_bytes", PROM_LABELS("namespace", ns,
		 "job", name, "direction", "in"),
		 (uint64_t)json_integer_value(json_object_get(pr, "bytesIn")));
	prom_u64(p->b, "ddiloco_job_syncer_bytes", PROM_LABELS("namespace", ns,
		 "job", name, "direction", "out"),
		 (uint64_t)json_integer_value(json_object_get(pr, "bytesOut")));
}

static void job_ckpt_age(const char *ns, const char *name, json_t *st, void *ctx)
{
	struct job_pass *p = ctx;
	const char *t = json_string_value(json_object_get(json_object_get(st,
				"progress"), "lastCheckpointTime"));
	double at = t ? kube_time_parse(t) : 0;

	if (at > 0)
		prom_double(p->b, "ddiloco_job_last_checkpoint_age_seconds",
			    PROM_LABELS("namespace", ns, "job", name),
			    p->now > at ? p->now - at : 0);
}

/* Per job (docs/operator.md, Metrics and health): what its status says,
 * labelled by namespace and job, as kubectl get ddjobs shows it. */
static void jobs(struct informer *inf, struct buf *b)
{
	struct job_pass p = { b, 0, clock_wall() };
	json_t *all = jobs_snapshot(inf);

	prom_family(b, "ddiloco_job_phase", PROM_GAUGE,
		    "1 for the job's phase, 0 for the others.");
	each_job(all, job_phase, &p);
	for (p.fig = 0; p.fig < (int)(sizeof(figures) / sizeof(figures[0])); p.fig++) {
		prom_family(b, figures[p.fig].name, PROM_GAUGE, figures[p.fig].help);
		each_job(all, job_figure, &p);
	}
	prom_family(b, "ddiloco_job_syncer_bytes", PROM_GAUGE,
		    "Bytes the job's syncer received (in) and sent (out).");
	each_job(all, job_bytes, &p);
	prom_family(b, "ddiloco_job_last_checkpoint_age_seconds", PROM_GAUGE,
		    "Seconds since the job's last checkpoint was written.");
	each_job(all, job_ckpt_age, &p);
	json_decref(all);
}

/* rest_client_requests_total{code, method}, as client-go names it: every
 * answer of the API server to this process ("<error>": none came). */
static void rest_requests(struct kube_stats *s, struct buf *b)
{
	struct kube_stats c;
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

void op_metrics_write(struct op_metrics *m, const struct op_metrics_from *f,
		      struct buf *b)
{
	counted(m, f->leader, b);
	prom_counter(b, "ddiloco_chaos_kills_total", "Pods deleted by the chaos controller.",
		     f->chaos ? (uint64_t)chaos_ctl_kills(f->chaos) : 0);
	prom_gauge(b, M("queue_depth"), "Job keys waiting in the work queue.", wq_len(f->q));
	informers(f->caches, b);
	if (f->crd) {
		prom_family(b, M("crd_current"), PROM_GAUGE,
			    "1 when the served job CRD has this operator's schema "
			    "(docs/operator.md, The CRD).");
		prom_u64(b, M("crd_current"), PROM_LABELS("state",
			 crd_state_name(f->crd->state), "served", f->crd->served,
			 "wanted", crd_schema_hash),
			 f->crd->state == CRD_APPLIED || f->crd->state == CRD_CURRENT);
	}
	jobs(f->caches->jobs, b);
	rest_requests(f->stats, b);
	prom_process(b);
}

#undef M
