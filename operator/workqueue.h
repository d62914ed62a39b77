/*
 * workqueue: a keyed work queue with delayed adds and rate-limited
 * retries, shaped like client-go's.
 *
 * - A key is in the queue at most once; adding a queued key is a no-op.
 * - A key handed out by wq_get is "processing": adding it again marks it
 *   dirty, and it is queued again by wq_done, so one key is never
 *   reconciled by two workers at once and no event is lost.
 * - wq_add_after(key, d) queues the key after d seconds (earliest wins).
 * - wq_add_rate_limited(key): after the per-key exponential backoff
 *   (base·2^failures, capped) and an overall token bucket (qps, burst);
 *   wq_forget(key) resets the key's failures after a success.
 *
 * Thread-safe: one mutex, one condition variable. Keys are strings of at
 * most WQ_KEY_MAX-1 bytes.
 */
#ifndef DDILOCO_WORKQUEUE_H
#define DDILOCO_WORKQUEUE_H

#define WQ_KEY_MAX 160

struct workqueue;

struct wq_limits {
	double base, cap;             /* per-key backoff, seconds */
	double qps, burst;            /* overall bucket */
};

/* client-go's defaults: 5 ms → 1000 s, 10 qps, burst 100. */
void wq_limits_default(struct wq_limits *l);

struct workqueue *wq_new(const struct wq_limits *l);
void wq_free(struct workqueue *q);

void wq_add(struct workqueue *q, const char *key);
void wq_add_after(struct workqueue *q, const char *key, double seconds);
/* Returns the delay chosen (seconds). */
double wq_add_rate_limited(struct workqueue *q, const char *key);
void wq_forget(struct workqueue *q, const char *key);
int wq_failures(struct workqueue *q, const char *key);

/*
 * Waits up to timeout seconds for a key; copies it into key (size
 * WQ_KEY_MAX) and returns 1, or 0 on timeout, -1 after shutdown.
 */
int wq_get(struct workqueue *q, char *key, double timeout);
/* The same, and *waited (when not NULL): the seconds the key was queued
 * (from its add, or its due time, to now). */
int wq_get_timed(struct workqueue *q, char *key, double timeout, double *waited);
void wq_done(struct workqueue *q, const char *key);
/* Wakes every waiter; wq_get returns -1 from then on. */
void wq_shutdown(struct workqueue *q);
/* Keys queued now (not delayed, not processing). */
int wq_len(struct workqueue *q);

/* The per-key delay after `failures` failures (pure). */
double wq_backoff(const struct wq_limits *l, int failures);

#endif
