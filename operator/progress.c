/*
 * progress: the reader thread of progress.h. The jobs asked for are a
 * list under one lock; the thread takes the most overdue one, reads its
 * shards with the lock released, and stores the read with a new number.
 * A job changed or forgotten meanwhile drops the read.
 */
#include "operator/progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/jobspec.h"
#include "common/log.h"
#include "common/util.h"

struct progress_job {
	char key[WQ_KEY_MAX];
	int S;
	char (*url)[PROGRESS_URL_MAX];  /* S */
	struct syncer_status *st;       /* S: the last read's */
	int *up;                        /* S */
	char why[256];
	uint64_t gen;                   /* its last read's number; 0: none */
	double read_at, asked_at;       /* monotonic; read_at 0: never */
	struct progress_job *next;
};

static void job_free(struct progress_job *j)
{
	for (int i = 0; i < j->S; i++)
		syncer_status_release(&j->st[i]);
	free(j->st);
	free(j->up);
	free(j->url);
	free(j);
}

static struct progress_job *job_new(const char *key, int S,
				    const char (*url)[PROGRESS_URL_MAX])
{
	struct progress_job *j = calloc(1, sizeof(*j));

	if (!j)
		return NULL;
	snprintf(j->key, sizeof(j->key), "%s", key);
	j->S = S;
	j->url = calloc((size_t)S, sizeof(*j->url));
	j->st = calloc((size_t)S, sizeof(*j->st));
	j->up = calloc((size_t)S, sizeof(*j->up));
	if (!j->url || !j->st || !j->up) {
		j->S = 0;
		job_free(j);
		return NULL;
	}
	for (int i = 0; i < S; i++) {
		memcpy(j->url[i], url[i], PROGRESS_URL_MAX);
		syncer_status_init(&j->st[i]);
	}
	return j;
}

/* The job of key (its link in *pp), or NULL. Under mu. */
static struct progress_job *find(struct progress *r, const char *key,
				 struct progress_job ***pp)
{
	struct progress_job **l;

	for (l = &r->head; *l; l = &(*l)->next)
		if (!strcmp((*l)->key, key)) {
			if (pp)
				*pp = l;
			return *l;
		}
	return NULL;
}

static int same_urls(const struct progress_job *j, int S,
		     const char (*url)[PROGRESS_URL_MAX])
{
	if (j->S != S)
		return 0;
	for (int i = 0; i < S; i++)
		if (strcmp(j->url[i], url[i]))
			return 0;
	return 1;
}

void progress_want(struct progress *r, const char *key, int S,
		   const char (*url)[PROGRESS_URL_MAX])
{
	struct progress_job *j, **pp;

	if (S < 1 || S > JOB_MAX_SHARDS)
		return;
	pthread_mutex_lock(&r->mu);
	j = find(r, key, &pp);
	if (j && !same_urls(j, S, url)) {
		*pp = j->next;
		job_free(j);
		j = NULL;
	}
	if (!j && (j = job_new(key, S, url))) {
		j->next = r->head;
		r->head = j;
		pthread_cond_signal(&r->cv);
	}
	if (j)
		j->asked_at = clock_mono();
	pthread_mutex_unlock(&r->mu);
}

int progress_take(struct progress *r, const char *key, int S,
		  struct syncer_status *st, int *up, uint64_t *seen,
		  char *why, size_t n)
{
	struct progress_job *j;
	int got = 0;

	pthread_mutex_lock(&r->mu);
	j = find(r, key, NULL);
	if (j && j->S == S && j->gen > *seen) {
		for (int i = 0; i < S; i++) {
			st[i] = j->st[i];          /* handed over whole */
			syncer_status_init(&j->st[i]);
			up[i] = j->up[i];
		}
		snprintf(why, n, "%s", j->why);
		*seen = j->gen;
		got = 1;
	}
	pthread_mutex_unlock(&r->mu);
	return got;
}

/* Under mu: forgets jobs nobody asked for; the most overdue job, or
 * NULL with *wait the seconds until one is due. */
static struct progress_job *due(struct progress *r, double now, double *wait)
{
	struct progress_job **l = &r->head, *best = NULL, *j;

	*wait = 1.0;
	while ((j = *l)) {
		double at = j->read_at + r->every;

		if (now - j->asked_at > PROGRESS_FORGET_S) {
			*l = j->next;
			job_free(j);
			continue;
		}
		if (at <= now && (!best || j->read_at < best->read_at))
			best = j;
		else if (at > now && at - now < *wait)
			*wait = at - now;
		l = &j->next;
	}
	return best;
}

/* Reads one job's shards (mu not held) into st/up/why. */
static void read_job(struct progress *r, int S,
		     const char (*url)[PROGRESS_URL_MAX],
		     struct syncer_status *st, int *up, char *why, size_t n)
{
	why[0] = '\0';
	for (int i = 0; i < S; i++) {
		struct err e;

		syncer_status_init(&st[i]);
		up[i] = !syncer_status_fetch(r->http, url[i], r->timeout, &st[i], &e);
		if (r->metrics)
			op_metrics_count(r->metrics, up[i] ? &r->metrics->progress_reads
						  : &r->metrics->progress_errors);
		if (!up[i]) {
			log_debug("progress: %s", e.msg);
			if (!why[0])
				snprintf(why, n, "%.*s", (int)n - 1, e.msg);
		}
	}
}

/* Stores a read into key's job when it is still the same one. Under mu. */
static void store(struct progress *r, const char *key, int S,
		  const char (*url)[PROGRESS_URL_MAX], struct syncer_status *st,
		  const int *up, const char *why, double now)
{
	struct progress_job *j = find(r, key, NULL);

	if (!j || !same_urls(j, S, url))
		return;
	for (int i = 0; i < S; i++) {
		syncer_status_move(&j->st[i], &st[i]);
		j->up[i] = up[i];
	}
	snprintf(j->why, sizeof(j->why), "%s", why);
	j->gen = ++r->reads;
	j->read_at = now;
}

static void *reader(void *arg)
{
	struct progress *r = arg;

	pthread_mutex_lock(&r->mu);
	while (!r->stop) {
		struct syncer_status st[JOB_MAX_SHARDS];
		int up[JOB_MAX_SHARDS], S;
		char key[WQ_KEY_MAX], why[256], (*url)[PROGRESS_URL_MAX];
		double wait;
		struct progress_job *j = due(r, clock_mono(), &wait);

		if (!j) {
			struct timespec ts = clock_wall_after(wait);

			pthread_cond_timedwait(&r->cv, &r->mu, &ts);
			continue;
		}
		S = j->S;
		snprintf(key, sizeof(key), "%s", j->key);
		if (!(url = malloc((size_t)S * sizeof(*url)))) {
			j->read_at = clock_mono();   /* try again next time */
			continue;
		}
		memcpy(url, j->url, (size_t)S * sizeof(*url));
		pthread_mutex_unlock(&r->mu);
		read_job(r, S, (const char (*)[PROGRESS_URL_MAX])url, st, up, why,
			 sizeof(why));
		pthread_mutex_lock(&r->mu);
		store(r, key, S, (const char (*)[PROGRESS_URL_MAX])url, st, up, why,
		      clock_mono());
		for (int i = 0; i < S; i++)
			syncer_status_release(&st[i]);
		free(url);
	}
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

int progress_start(struct progress *r, struct op_metrics *m, double every,
		   double timeout)
{
	memset(r, 0, sizeof(*r));
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	r->metrics = m;
	r->every = every;
	r->timeout = timeout;
	if (!(r->http = curl_easy_init()) ||
	    pthread_create(&r->thread, NULL, reader, r)) {
		progress_stop(r);
		return -1;
	}
	r->started = 1;
	return 0;
}

void progress_stop(struct progress *r)
{
	pthread_mutex_lock(&r->mu);
	r->stop = 1;
	pthread_cond_signal(&r->cv);
	pthread_mutex_unlock(&r->mu);
	if (r->started)
		pthread_join(r->thread, NULL);
	r->started = 0;
	while (r->head) {
		struct progress_job *j = r->head;

		r->head = j->next;
		job_free(j);
	}
	if (r->http)
		curl_easy_cleanup(r->http);
	r->http = NULL;
	pthread_cond_destroy(&r->cv);
	pthread_mutex_destroy(&r->mu);
}
