/*
 * operator: informers -> work queue of "ns/name" job keys -> workers.
 *
 * Threads: one per informer (own connection each; caches.c), `workers`
 * workers (own connection and own HTTP handle for the syncers' /status
 * each), the HTTP server's, and the caller's thread, which runs leader
 * election, the periodic resync and the chaos controller.
 *
 * A worker's pass over one job (sync_job), one module per step:
 *   1. observe        pass.c: the job and its children from the caches,
 *                     the job parsed with jobspec (the same parser as
 *                     `ddiloco run`), the syncer's /status when its pod
 *                     is ready
 *   1b. queue         queue.c: a job in a Kueue queue, its Workload read
 *                     (made when missing): held, or admitted and placed
 *   2. decide         reconcile() -> actions, phase, conditions (pure)
 *   3. apply_actions  apply.c: server-side apply, deletes with a uid
 *                     precondition, Events; a failure is written into
 *                     the Created condition too
 *   4. apply_status   apply.c: status_build() (status.c), PUT through
 *                     /status when status_should_write says it moved
 *                     enough, with the resourceVersion read in 1 (409:
 *                     the cache is behind; the key is retried with backoff)
 *   5. queue_after    queue.c: the Workload's reservation given back once an
 *                     evicted job stopped, Finished once the job ended
 * Errors requeue the key rate-limited; success forgets its failures.
 *
 * This file owns the wiring and the threads: what the workers share
 * (struct op), each worker's own connections (struct pass_env), the
 * HTTP endpoints, and the main loop. Per-job memory (the learners' and
 * the evaluator's backoff, restarts and expectations, last progress,
 * recent Events) is jobmem.c's; the counters and /metrics, metrics.c's.
 */
#include "operator/operator.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/httpd.h"
#include "common/log.h"
#include "common/prom.h"
#include "common/util.h"
#include "operator/apply.h"
#include "operator/caches.h"
#include "operator/chaos_ctl.h"
#include "operator/crd.h"
#include "operator/jobmem.h"
#include "operator/leader.h"
#include "operator/metrics.h"
#include "operator/pass.h"
#include "operator/queue.h"
#include "operator/reconcile.h"
#include "operator/workqueue.h"

#define RUNNING_RESYNC 10.0

/* What the workers and the main loop share. */
struct op {
	const struct operator_opts *o;
	struct caches caches;
	struct workqueue *q;
	struct jobmem_table mems;
	struct op_metrics metrics;
	struct chaos_ctl *chaos;
	struct progress progress;     /* the syncers' /status (progress.h) */
	int progress_on;
	const volatile sig_atomic_t *stop;
	int leader;
	struct crd_check crd;         /* the CRD applied or checked at start */
};

struct worker {
	struct op *op;
	struct pass_env env;          /* env.k: the worker's own */
	pthread_t thread;
};

/* ---- the workers ---------------------------------------------------- */

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

	*requeue = 0;
	if ((rc = pass_observe(&w->env, key, &p)) > 0) {
		rc = 0;   /* the job is gone */
		goto out;
	}
	if (!rc)
		rc = queue_observe(&w->env, &p);
	if (!rc)
		pass_outdated(&w->env, &p);
	if (rc || reconcile(&p.in, p.m->learners, &p.out)) {
		rc = -1;
		goto out;
	}
	failed = apply_actions(&w->env, &p);
	failed |= apply_status(&w->env, &p);
	failed |= queue_after(&w->env, &p);
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
		op_metrics_pass(&op->metrics, clock_mono() - t0, waited, rc != 0);
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

/* Workers, each with its own connections; *started counts the threads. */
static int start_workers(struct op *op, struct worker *ws, int nw, int *started)
{
	struct err e;

	for (int i = 0; i < nw; i++) {
		ws[i].op = op;
		ws[i].env = (struct pass_env){
			&op->caches, &op->mems, &op->metrics, op->o->status_url,
			op->o->operator_ns, &op->o->policy, op->chaos, NULL, &op->progress,
			op->o->external_storage, &op->o->runtime,
		};
		ws[i].env.k = kube_new(&op->o->cfg, &e);
		if (!ws[i].env.k ||
		    pthread_create(&ws[i].thread, NULL, work, &ws[i])) {
			log_error("cannot start worker %d", i);
			return -1;
		}
		(*started)++;
	}
	log_info("%d workers started%s", nw, op->o->leader_elect ? " (leader)" : "");
	return 0;
}

/* ---- HTTP: /healthz, /readyz, /metrics ---------------------------- */

static int serve(void *ctx, const char *path, struct buf *b, const char **ct)
{
	struct op *op = ctx;
	struct informer *behind;

	if (!strcmp(path, "/healthz")) {
		buf_printf(b, "ok\n");
		return 200;
	}
	if (!strcmp(path, "/readyz")) {
		if ((behind = caches_unsynced(&op->caches))) {
			buf_printf(b, "informer %s not synced\n", informer_name(behind));
			return 503;
		}
		buf_printf(b, "ok\n");
		return 200;
	}
	if (strcmp(path, "/metrics"))
		return 404;
	*ct = PROM_CONTENT_TYPE;
	op_metrics_write(&op->metrics, &(struct op_metrics_from){
		&op->caches, op->q, op->chaos, op->o->cfg.stats, op->leader,
		&op->crd }, b);
	return 200;
}

/* ---- main loop ------------------------------------------------------ */

static void on_touched(void *ctx, const char *key)
{
	struct op *op = ctx;

	wq_add(op->q, key);
}

/* 1 once every informer has listed; while one has not, said every
 * CACHES_WAIT_LOG seconds (its list may be refused: /readyz says it too). */
#define CACHES_WAIT_LOG 10.0
static int caches_waited(struct op *op, double now, double *next_log)
{
	struct informer *behind = caches_unsynced(&op->caches);

	if (!behind)
		return 1;
	if (now >= *next_log) {
		log_warn("operator: waiting for the informer of %s to list before "
			 "the workers start", informer_name(behind));
		*next_log = now + CACHES_WAIT_LOG;
	}
	return 0;
}

/*
 * The caller's thread: leader election, then the workers once leader and
 * every cache has listed, the chaos controller's ticks and the periodic
 * resync, every 0.2 s.
 * Returns 0 on *stop, OPERATOR_LOST_LEADERSHIP or 1.
 */
static int main_loop(struct op *op, struct kube *main_k, struct leader *lead,
		     struct worker *ws, int nw, int *started)
{
	const struct operator_opts *o = op->o;
	double next_resync = clock_mono() + o->resync, next_lease = 0;
	double next_wait_log = clock_mono() + CACHES_WAIT_LOG;
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
		/* not before every cache has listed once: a pass on a partial
		 * view would take the children it does not see yet for gone
		 * (made again, counted as restarts) */
		if (op->leader && !*started && caches_waited(op, now, &next_wait_log)) {
			if (start_workers(op, ws, nw, started))
				return 1;
			caches_resync(&op->caches, op->q);
		}
		if (*started && op->chaos)
			chaos_ctl_tick(op->chaos, main_k);
		if (*started && now >= next_resync) {
			caches_resync(&op->caches, op->q);
			next_resync = now + o->resync;
		}
		sleep_seconds(0.2);
	}
	return 0;
}

/* The caches, the HTTP server, the chaos controller and the progress
 * reader; 1 on failure (logged), what was started left for the caller
 * to stop. */
static int start_parts(struct op *op, struct kube **main_k, struct httpd **http)
{
	const struct operator_opts *o = op->o;
	struct err e;

	if (op_metrics_init(&op->metrics)) {
		log_error("operator: out of memory");
		return 1;
	}
	if (!(*main_k = kube_new(&o->cfg, &e))) {
		log_error("%s", e.msg);
		return 1;
	}
	/* before the informers list jobs: their schema is the one applied */
	crd_reconcile(*main_k, o->manage_crd, o->operator_ns, &op->crd);
	if (caches_start(&op->caches, &o->cfg, o->namespace_, op->q, &e)) {
		log_error("%s", e.msg);
		return 1;
	}
	if (o->http_port >= 0) {
		*http = httpd_start(o->http_addr, o->http_port, serve, op, &e);
		if (!*http) {
			log_error("%s", e.msg);
			return 1;
		}
		log_info("serving /metrics /healthz /readyz on %s:%d", o->http_addr,
			 httpd_port(*http));
	}
	if (o->chaos)
		op->chaos = chaos_ctl_new(op->caches.jobs, op->caches.pods, on_touched, op);
	if (progress_start(&op->progress, &op->metrics, PASS_PROGRESS_EVERY,
			   PASS_PROGRESS_TIMEOUT)) {
		log_error("operator: cannot start the progress reader");
		return 1;
	}
	op->progress_on = 1;
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
	int rc = 0, nw = o->workers > 0 ? o->workers : 2, started = 0;

	memset(&op, 0, sizeof(op));
	op.o = o;
	op.stop = stop;
	jobmem_table_init(&op.mems);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	op.q = wq_new(NULL);
	if ((rc = start_parts(&op, &main_k, &http)))
		goto out;
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
	for (int i = 0; ws && i < nw; i++)
		kube_free(ws[i].env.k);
	free(ws);
	if (op.progress_on)
		progress_stop(&op.progress);
	if (http)
		httpd_stop(http);
	chaos_ctl_free(op.chaos);
	caches_release(&op.caches);
	kube_free(main_k);
	jobmem_table_release(&op.mems);
	wq_free(op.q);
	op_metrics_release(&op.metrics);
	return rc;
}
