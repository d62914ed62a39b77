/*
 * metrics: the operator's counters and latency histograms, counted by
 * the workers, and the text of its /metrics page (Prometheus), which
 * adds the work queue's depth, each informer's cache and list/watch
 * counts, the chaos controller's kills, the API server's answers by
 * code and method, and the process's own figures.
 *
 *   ddiloco_operator_reconciles_total, _reconcile_errors_total  passes
 *   ddiloco_operator_status_writes_total, _status_conflicts_total
 *   ddiloco_operator_progress_reads_total{result}  syncer /status reads
 *   ddiloco_operator_actions_total{action}         reconcile's actions
 *   ddiloco_operator_reconcile_duration_seconds    one pass (histogram)
 *   ddiloco_operator_queue_wait_seconds            a key's wait (histogram)
 */
#ifndef DDILOCO_OP_METRICS_H
#define DDILOCO_OP_METRICS_H

#include <pthread.h>

#include "common/buf.h"
#include "common/prom.h"
#include "operator/caches.h"
#include "operator/chaos_ctl.h"
#include "operator/kube.h"
#include "operator/reconcile.h"
#include "operator/workqueue.h"

struct op_metrics {
	pthread_mutex_t mu;           /* every field below */
	long reconciles, reconcile_errors, conflicts, actions[ACT_EVENT + 1];
	long status_writes, progress_reads, progress_errors;
	struct prom_hist reconcile_seconds;   /* one pass of sync_job */
	struct prom_hist queue_seconds;       /* a key's wait in the queue */
};

/* -1 when out of memory; op_metrics_release is called either way. */
int op_metrics_init(struct op_metrics *m);
void op_metrics_release(struct op_metrics *m);

/* One more of *counter, a field of m. */
void op_metrics_count(struct op_metrics *m, long *counter);
/* A pass over a job took seconds after its key waited; failed: retried. */
void op_metrics_pass(struct op_metrics *m, double seconds, double waited,
		     int failed);

/* What the page shows besides m; chaos and stats may be NULL. */
struct op_metrics_from {
	const struct caches *caches;
	struct workqueue *q;
	struct chaos_ctl *chaos;
	struct kube_stats *stats;     /* the API client's answers */
	int leader;                   /* 1 while this operator leads */
	const struct crd_check *crd;  /* the CRD's check at start (crd.h) */
};

/* The /metrics page into b. */
void op_metrics_write(struct op_metrics *m, const struct op_metrics_from *f,
		      struct buf *b);

#endif
