/*
 * workqueue: a FIFO of keys, a set of dirty keys, a set of keys being
 * processed, a list of delayed keys (with their due time) and per-key
 * failure counts. The sets are small linear tables: an operator holds
 * keys for jobs (hundreds), so a scan is cheaper than a hash here and
 * reads in one sitting. Tables grow by doubling.
 */
#include "operator/workqueue.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/util.h"

struct entry {
	char key[WQ_KEY_MAX];
	double due;          /* delayed: monotonic time; failures: count */
};

struct table {
	struct entry *e;
	int n, cap;
};

struct workqueue {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct wq_limits lim;
	struct table queue;       /* FIFO order */
	struct table dirty;       /* queued or to be queued after done */
	struct table processing;
	struct table delayed;
	struct table failures;
	double tokens, last_fill; /* the overall bucket */
	double bucket_next;       /* next free slot when the bucket is empty */
	int shutdown;
};

static int find(const struct table *t, const char *key)
{
	for (int i = 0; i < t->n; i++)
		if (!strcmp(t->e[i].key, key))
			return i;
	return -1;
}

static struct entry *push(struct table *t, const char *key, double due)
{
	if (t->n == t->cap) {
		int cap = t->cap ? t->cap * 2 : 16;
		struct entry *e = realloc(t->e, (size_t)cap * sizeof(*e));
		if (!e)
			return NULL;
		t->e = e;
		t->cap = cap;
	}
	snprintf(t->e[t->n].key, WQ_KEY_MAX, "%s", key);
	t->e[t->n].due = due;
	return &t->e[t->n++];
}

static void drop(struct table *t, int i)
{
	memmove(&t->e[i], &t->e[i + 1], (size_t)(t->n - i - 1) * sizeof(t->e[0]));
	t->n--;
}

void wq_limits_default(struct wq_limits *l)
{
	l->base = 0.005;
	l->cap = 1000;
	l->qps = 10;
	l->burst = 100;
}

double wq_backoff(const struct wq_limits *l, int failures)
{
	double d;

	if (failures < 0)
		failures = 0;
	if (failures > 60)
		return l->cap;
	d = l->base * ldexp(1.0, failures);
	return d > l->cap ? l->cap : d;
}

struct workqueue *wq_new(const struct wq_limits *l)
{
	struct workqueue *q = calloc(1, sizeof(*q));

	if (!q)
		return NULL;
	pthread_mutex_init(&q->mu, NULL);
	pthread_cond_init(&q->cv, NULL);
	if (l)
		q->lim = *l;
	else
		wq_limits_default(&q->lim);
	q->tokens = q->lim.burst;
	q->last_fill = clock_mono();
	return q;
}

void wq_free(struct workqueue *q)
{
	if (!q)
		return;
	free(q->queue.e);
	free(q->dirty.e);
	free(q->processing.e);
	free(q->delayed.e);
	free(q->failures.e);
	pthread_cond_destroy(&q->cv);
	pthread_mutex_destroy(&q->mu);
	free(q);
}

/* Under the lock. */
static void add_locked(struct workqueue *q, const char *key)
{
	if (q->shutdown || find(&q->dirty, key) >= 0)
		return;
	push(&q->dirty, key, 0);
	if (find(&q->processing, key) >= 0)
		return;   /* wq_done queues it */
	push(&q->queue, key, clock_mono());   /* queue entries: when queued */
	pthread_cond_signal(&q->cv);
}

void wq_add(struct workqueue *q, const char *key)
{
	pthread_mutex_lock(&q->mu);
	add_locked(q, key);
	pthread_mutex_unlock(&q->mu);
}

static void add_after_locked(struct workqueue *q, const char *key, double s)
{
	double due;
	int i;

	if (s <= 0) {
		add_locked(q, key);
		return;
	}
	due = clock_mono() + s;
	if ((i = find(&q->delayed, key)) >= 0) {
		if (due < q->delayed.e[i].due)
			q->delayed.e[i].due = due;
	} else {
		push(&q->delayed, key, due);
	}
	pthread_cond_broadcast(&q->cv);
}

void wq_add_after(struct workqueue *q, const char *key, double seconds)
{
	pthread_mutex_lock(&q->mu);
	if (!q->shutdown)
		add_after_locked(q, key, seconds);
	pthread_mutex_unlock(&q->mu);
}

double wq_add_rate_limited(struct workqueue *q, const char *key)
{
	double now, d, bucket = 0;
	int i, f;

	pthread_mutex_lock(&q->mu);
	now = clock_mono();
	if ((i = find(&q->failures, key)) < 0) {
		push(&q->failures, key, 0);
		i = q->failures.n - 1;
	}
	f = (int)q->failures.e[i].due;
	q->failures.e[i].due = f + 1;
	d = wq_backoff(&q->lim, f);

	/* the overall bucket: a token now, or a slot in the future */
	q->tokens += (now - q->last_fill) * q->lim.qps;
	if (q->tokens > q->lim.burst)
		q->tokens = q->lim.burst;
	q->last_fill = now;
	if (q->tokens >= 1) {
		q->tokens -= 1;
	} else {
		if (q->bucket_next < now)
			q->bucket_next = now;
		q->bucket_next += 1.0 / q->lim.qps;
		bucket = q->bucket_next - now;
	}
	if (bucket > d)
		d = bucket;
	if (!q->shutdown)
		add_after_locked(q, key, d);
	pthread_mutex_unlock(&q->mu);
	return d;
}

void wq_forget(struct workqueue *q, const char *key)
{
	int i;

	pthread_mutex_lock(&q->mu);
	if ((i = find(&q->failures, key)) >= 0)
		drop(&q->failures, i);
	pthread_mutex_unlock(&q->mu);
}

int wq_failures(struct workqueue *q, const char *key)
{
	int i, f = 0;

	pthread_mutex_lock(&q->mu);
	if ((i = find(&q->failures, key)) >= 0)
		f = (int)q->failures.e[i].due;
	pthread_mutex_unlock(&q->mu);
	return f;
}

/* Moves due delayed keys to the queue; returns the next due time or 0. */
static double promote(struct workqueue *q, double now)
{
	double next = 0;

	for (int i = 0; i < q->delayed.n;) {
		if (q->delayed.e[i].due <= now) {
			char key[WQ_KEY_MAX];

			memcpy(key, q->delayed.e[i].key, WQ_KEY_MAX);
			drop(&q->delayed, i);
			add_locked(q, key);
			continue;
		}
		if (!next || q->delayed.e[i].due < next)
			next = q->delayed.e[i].due;
		i++;
	}
	return next;
}

int wq_get(struct workqueue *q, char *key, double timeout)
{
	return wq_get_timed(q, key, timeout, NULL);
}

int wq_get_timed(struct workqueue *q, char *key, double timeout, double *waited)
{
	double deadline = clock_mono() + timeout;
	int rc = 0;

	pthread_mutex_lock(&q->mu);
	for (;;) {
		double now = clock_mono(), next, until;
		struct timespec ts;

		if (q->shutdown) {
			rc = -1;
			break;
		}
		next = promote(q, now);
		if (q->queue.n) {
			int d;

			memcpy(key, q->queue.e[0].key, WQ_KEY_MAX);
			if (waited)
				*waited = now - q->queue.e[0].due;
			drop(&q->queue, 0);
			if ((d = find(&q->dirty, key)) >= 0)
				drop(&q->dirty, d);
			push(&q->processing, key, 0);
			rc = 1;
			break;
		}
		if (now >= deadline)
			break;
		until = next && next < deadline ? next : deadline;
		{
			double w = clock_wall() + (until - now);
			ts.tv_sec = (time_t)w;
			ts.tv_nsec = (long)((w - (double)ts.tv_sec) * 1e9);
		}
		pthread_cond_timedwait(&q->cv, &q->mu, &ts);
	}
	pthread_mutex_unlock(&q->mu);
	return rc;
}

void wq_done(struct workqueue *q, const char *key)
{
	int i;

	pthread_mutex_lock(&q->mu);
	if ((i = find(&q->processing, key)) >= 0)
		drop(&q->processing, i);
	if (find(&q->dirty, key) >= 0 && !q->shutdown) {
		push(&q->queue, key, clock_mono());
		pthread_cond_signal(&q->cv);
	}
	pthread_mutex_unlock(&q->mu);
}

void wq_shutdown(struct workqueue *q)
{
	pthread_mutex_lock(&q->mu);
	q->shutdown = 1;
	pthread_cond_broadcast(&q->cv);
	pthread_mutex_unlock(&q->mu);
}

int wq_len(struct workqueue *q)
{
	int n;

	pthread_mutex_lock(&q->mu);
	n = q->queue.n;
	pthread_mutex_unlock(&q->mu);
	return n;
}
