/*
 * pool: workers park on a condition variable between loops; pool_run
 * publishes (fn, arg, n) under a new generation number, runs chunk 0 in
 * the caller, and waits until every worker reported its chunk done.
 * Chunk k of n items over t threads is [k·n/t, (k+1)·n/t).
 */
#include "trainer/pool.h"

#include <pthread.h>
#include <stdlib.h>

struct pool {
	int n;                       /* threads, the caller included */
	pthread_t *tids;
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	unsigned long gen;           /* bumped for every loop */
	int pending;                 /* workers still running this loop */
	int quit;
	pool_fn fn;
	void *arg;
	size_t items;
};

struct worker_arg {
	struct pool *p;
	int chunk;
};

static void run_chunk(struct pool *p, pool_fn fn, void *arg, size_t n,
		      int chunk)
{
	size_t lo = n * (size_t)chunk / (size_t)p->n;
	size_t hi = n * (size_t)(chunk + 1) / (size_t)p->n;

	if (lo < hi)
		fn(arg, lo, hi, chunk);
}

static void *worker(void *a)
{
	struct worker_arg *wa = a;
	struct pool *p = wa->p;
	int chunk = wa->chunk;
	unsigned long seen = 0;

	free(wa);
	pthread_mutex_lock(&p->mu);
	for (;;) {
		pool_fn fn;
		void *arg;
		size_t n;

		while (p->gen == seen && !p->quit)
			pthread_cond_wait(&p->go, &p->mu);
		if (p->quit)
			break;
		seen = p->gen;
		fn = p->fn;
		arg = p->arg;
		n = p->items;
		pthread_mutex_unlock(&p->mu);
		run_chunk(p, fn, arg, n, chunk);
		pthread_mutex_lock(&p->mu);
		if (--p->pending == 0)
			pthread_cond_signal(&p->done);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

struct pool *pool_new(int nthreads)
{
	struct pool *p;

	if (nthreads < 1)
		nthreads = 1;
	if (nthreads > POOL_MAX_THREADS)
		nthreads = POOL_MAX_THREADS;
	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->n = 1;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->go, NULL);
	pthread_cond_init(&p->done, NULL);
	p->tids = calloc((size_t)nthreads, sizeof(pthread_t));
	if (!p->tids) {
		pool_free(p);
		return NULL;
	}
	for (int i = 1; i < nthreads; i++) {
		struct worker_arg *wa = malloc(sizeof(*wa));

		if (!wa)
			break;
		wa->p = p;
		wa->chunk = i;
		if (pthread_create(&p->tids[i], NULL, worker, wa)) {
			free(wa);
			break;
		}
		p->n++;
	}
	if (p->n != nthreads) {
		pool_free(p);
		return NULL;
	}
	return p;
}

void pool_free(struct pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->quit = 1;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	for (int i = 1; i < p->n; i++)
		pthread_join(p->tids[i], NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->go);
	pthread_cond_destroy(&p->done);
	free(p->tids);
	free(p);
}

int pool_threads(const struct pool *p)
{
	return p ? p->n : 1;
}

void pool_run(struct pool *p, pool_fn fn, void *arg, size_t n)
{
	if (!p || p->n == 1) {
		if (n)
			fn(arg, 0, n, 0);
		return;
	}
	pthread_mutex_lock(&p->mu);
	p->fn = fn;
	p->arg = arg;
	p->items = n;
	p->pending = p->n - 1;
	p->gen++;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	run_chunk(p, fn, arg, n, 0);
	pthread_mutex_lock(&p->mu);
	while (p->pending > 0)
		pthread_cond_wait(&p->done, &p->mu);
	pthread_mutex_unlock(&p->mu);
}
