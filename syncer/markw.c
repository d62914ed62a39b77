/*
 * markw: the high-water mark's writer thread (markw.h).
 */
#include "syncer/markw.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "common/util.h"

/* One write of the newest mark asked for, the lock held on entry and on
 * return (not during the write). */
static void write_one(struct markw *w)
{
	struct syncer_hwm h = { w->out.wanted, w->P, w->buf };
	struct err e;
	int rc, was_failing;

	memcpy(w->buf, w->want_versions, w->P * sizeof(*w->buf));
	w->out.writing = 1;
	w->writing_since = clock_mono();
	pthread_mutex_unlock(&w->mu);
	rc = w->write(w->dir, w->fingerprint, &h, &e);
	pthread_mutex_lock(&w->mu);
	w->out.writing = 0;
	was_failing = w->out.failing;
	if (rc) {
		w->out.failures++;
		w->out.failing = 1;
		snprintf(w->out.error, sizeof(w->out.error), "%s", e.msg);
		if (!was_failing)
			log_error("%s; rounds past %" PRIu64 " wait for it (tried "
				  "again every %.0f s)", e.msg, w->out.covered,
				  MARKW_RETRY);
		return;
	}
	w->out.written++;
	w->out.failing = 0;
	if (h.rounds > w->out.covered)
		w->out.covered = h.rounds;
	if (was_failing)
		log_info("high-water mark written again: rounds up to %" PRIu64
			 " covered", w->out.covered);
}

static void *thread_main(void *arg)
{
	struct markw *w = arg;

	pthread_mutex_lock(&w->mu);
	while (!w->stop) {
		if (w->out.wanted <= w->out.covered) {
			pthread_cond_wait(&w->cv, &w->mu);
			continue;
		}
		write_one(w);
		if (w->out.failing && !w->stop) {
			/* a stop or a new mark wakes it sooner */
			struct timespec ts = clock_wall_after(MARKW_RETRY);

			pthread_cond_timedwait(&w->cv, &w->mu, &ts);
		}
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

int markw_start(struct markw *w, const char *dir, uint64_t fingerprint,
		uint32_t P, uint64_t covered, struct err *e)
{
	int rc;

	memset(w, 0, sizeof(*w));
	w->dir = dir;
	w->fingerprint = fingerprint;
	w->P = P;
	w->out.covered = w->out.wanted = covered;
	w->write = syncer_hwm_write;   /* a test's may replace it before any want */
	w->want_versions = calloc(P ? P : 1, sizeof(*w->want_versions));
	w->buf = calloc(P ? P : 1, sizeof(*w->buf));
	if (!w->want_versions || !w->buf) {
		free(w->want_versions);
		free(w->buf);
		return err_set(e, "syncer: out of memory for the high-water "
			       "mark");
	}
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	if ((rc = pthread_create(&w->thread, NULL, thread_main, w))) {
		free(w->want_versions);
		free(w->buf);
		return err_set(e, "syncer: cannot start the high-water mark's "
			       "writer: %s", strerror(rc));
	}
	w->running = 1;
	return 0;
}

void markw_stop(struct markw *w)
{
	if (!w->running)
		return;
	pthread_mutex_lock(&w->mu);
	w->stop = 1;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
	pthread_join(w->thread, NULL);
	pthread_cond_destroy(&w->cv);
	pthread_mutex_destroy(&w->mu);
	free(w->want_versions);
	free(w->buf);
	w->running = 0;
}

void markw_want(struct markw *w, uint64_t rounds, const uint64_t *versions,
		uint64_t add)
{
	pthread_mutex_lock(&w->mu);
	if (rounds > w->out.wanted) {
		w->out.wanted = rounds;
		for (uint32_t q = 0; q < w->P; q++)
			w->want_versions[q] = versions[q] + add;
		pthread_cond_signal(&w->cv);
	}
	pthread_mutex_unlock(&w->mu);
}

uint64_t markw_covered(struct markw *w)
{
	uint64_t c;

	pthread_mutex_lock(&w->mu);
	c = w->out.covered;
	pthread_mutex_unlock(&w->mu);
	return c;
}

uint64_t markw_wanted(struct markw *w)
{
	uint64_t c;

	pthread_mutex_lock(&w->mu);
	c = w->out.wanted;
	pthread_mutex_unlock(&w->mu);
	return c;
}

void markw_outcome(struct markw *w, struct markw_outcome *o)
{
	pthread_mutex_lock(&w->mu);
	*o = w->out;
	o->writing_seconds = w->out.writing ? clock_mono() - w->writing_since
					    : 0;
	pthread_mutex_unlock(&w->mu);
}
