/*
 * ckptw: the checkpoint writer thread and its copy-on-write of the
 * fragments a write has not taken yet (ckptw.h).
 */
#include "syncer/ckptw.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"

static size_t frag_len(const struct ckpt_writer *w, uint32_t p)
{
	return w->off[p + 1] - w->off[p];
}

/* Takes pass (0 Θ, 1 momentum) of fragment p into w->buf: from the copy
 * set aside when the run loop changed it, else from the live state. */
static void take(struct ckpt_writer *w, int pass, uint32_t p)
{
	size_t n = frag_len(w, p);
	const float *src;

	pthread_mutex_lock(&w->mu);
	src = w->aside[p] ? w->aside[p] + (size_t)pass * n
			  : (pass ? w->mom : w->theta) + w->off[p];
	memcpy(w->buf, src, n * sizeof(float));
	w->taken[p] = (uint8_t)(pass + 1);
	pthread_mutex_unlock(&w->mu);
}

/* The checkpoint in hand to disk: header, Θ, momentum, CRC. */
static int write_one(struct ckpt_writer *w, struct err *e)
{
	struct ckpt_out o = { .write = w->write, .write_ctx = w->write_ctx,
			      .known = &w->known };

	if (ckpt_out_open(&o, w->dir, &w->head, e))
		return -1;
	for (int pass = 0; pass < 2; pass++)
		for (uint32_t p = 0; p < w->P; p++) {
			take(w, pass, p);
			if (ckpt_out_write(&o, w->buf,
					   frag_len(w, p) * sizeof(float), e))
				return -1;
		}
	return ckpt_out_commit(&o, w->dir, &w->head, w->keep, e);
}

/* Under mu: the outcome of the write just ended. */
static void record(struct ckpt_writer *w, int rc, const struct err *e,
		   double seconds)
{
	struct ckptw_outcome *o = &w->out;
	uint64_t round = w->head.rounds_completed;

	if (rc) {
		o->failures++;
		o->failing = 1;
		snprintf(o->error, sizeof(o->error), "%s", e->msg);
		log_error("%s", e->msg);
	} else {
		if (o->failing)
			log_info("checkpoint of round %" PRIu64 " written again "
				 "after %" PRIu64 " failure(s)", round,
				 o->failures);
		o->failing = 0;
		o->written++;
		o->have_ok = 1;
		o->last_ok_round = round;
		o->last_seconds = seconds;
		o->last_ok_wall = clock_wall();
		log_debug("checkpoint of round %" PRIu64 " written in %.3f s",
			  round, seconds);
	}
	for (uint32_t p = 0; p < w->P; p++) {
		free(w->aside[p]);
		w->aside[p] = NULL;
	}
	o->writing = 0;
	w->last_rc = rc;
	w->busy = 0;
	w->seq_done = w->seq;
	pthread_cond_broadcast(&w->cv);
}

static void *writer_main(void *arg)
{
	struct ckpt_writer *w = arg;

	pthread_mutex_lock(&w->mu);
	for (;;) {
		while (!w->busy && !w->stop)
			pthread_cond_wait(&w->cv, &w->mu);
		if (!w->busy)
			break;
		pthread_mutex_unlock(&w->mu);

		double t = clock_mono();
		struct err e = { 0 };
		int rc = write_one(w, &e);

		pthread_mutex_lock(&w->mu);
		record(w, rc, &e, clock_mono() - t);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

int ckptw_start(struct ckpt_writer *w, const char *dir, int keep,
		uint32_t P, const size_t *off, const float *theta,
		const float *mom, uint32_t nlearners, struct err *e)
{
	size_t big = 0;

	for (uint32_t p = 0; p < P; p++)
		if (off[p + 1] - off[p] > big)
			big = off[p + 1] - off[p];
	*w = (struct ckpt_writer){ .dir = dir, .keep = keep, .P = P,
				   .off = off, .theta = theta, .mom = mom };
	w->head.nfrags = P;
	w->head.nparams = off[P];
	w->head.nlearners = nlearners;
	w->head.versions = calloc(P ? P : 1, sizeof(*w->head.versions));
	w->head.learners = calloc(nlearners ? nlearners : 1,
				  sizeof(*w->head.learners));
	w->head.evals = calloc(CKPT_MAX_EVALS, sizeof(*w->head.evals));
	w->taken = calloc(P ? P : 1, 1);
	w->aside = calloc(P ? P : 1, sizeof(*w->aside));
	w->buf = malloc((big ? big : 1) * sizeof(float));
	if (!w->head.versions || !w->head.learners || !w->head.evals ||
	    !w->taken || !w->aside || !w->buf) {
		ckptw_stop(w);
		return err_set(e, "checkpoint writer: out of memory");
	}
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	if (pthread_create(&w->thread, NULL, writer_main, w)) {
		pthread_mutex_destroy(&w->mu);
		pthread_cond_destroy(&w->cv);
		ckptw_stop(w);
		return err_set(e, "checkpoint writer: cannot start its thread");
	}
	w->running = 1;
	return 0;
}

void ckptw_stop(struct ckpt_writer *w)
{
	if (w->running) {
		pthread_mutex_lock(&w->mu);
		w->stop = 1;
		pthread_cond_broadcast(&w->cv);
		pthread_mutex_unlock(&w->mu);
		pthread_join(w->thread, NULL);
		pthread_mutex_destroy(&w->mu);
		pthread_cond_destroy(&w->cv);
		w->running = 0;
	}
	for (uint32_t p = 0; w->aside && p < w->P; p++)
		free(w->aside[p]);
	free(w->aside);
	free(w->taken);
	free(w->buf);
	free(w->head.versions);
	free(w->head.learners);
	free(w->head.evals);
	ckpt_known_release(&w->known);
	w->aside = NULL;
	w->taken = NULL;
	w->buf = NULL;
	w->head.versions = NULL;
	w->head.learners = NULL;
	w->head.evals = NULL;
}

/* Under mu, not busy: c's small part into head. */
static void copy_head(struct ckpt_writer *w, const struct syncer_ckpt *c)
{
	struct syncer_ckpt *h = &w->head;
	uint64_t *v = h->versions;
	struct ckpt_learner *l = h->learners;
	struct ckpt_eval *ev = h->evals;

	*h = *c;
	h->versions = v;
	h->learners = l;
	h->evals = ev;
	h->theta = h->momentum = NULL;
	h->nfrags = w->P;
	h->nparams = w->off[w->P];
	memcpy(v, c->versions, w->P * sizeof(*v));
	memcpy(l, c->learners, c->nlearners * sizeof(*l));
	if (h->nevals > CKPT_MAX_EVALS)
		h->nevals = CKPT_MAX_EVALS;
	memcpy(ev, c->evals, h->nevals * sizeof(*ev));
}

int ckptw_submit(struct ckpt_writer *w, const struct syncer_ckpt *c,
		 int wait, struct err *e)
{
	uint64_t mine;
	int rc;

	pthread_mutex_lock(&w->mu);
	if (w->busy && !wait) {
		w->out.skipped++;
		log_debug("checkpoint of round %" PRIu64 " not taken: the one "
			  "of round %" PRIu64 " is still being written",
			  c->rounds_completed, w->head.rounds_completed);
		pthread_mutex_unlock(&w->mu);
		return 0;
	}
	while (w->busy)
		pthread_cond_wait(&w->cv, &w->mu);
	copy_head(w, c);
	memset(w->taken, 0, w->P);
	w->busy = 1;
	mine = ++w->seq;
	w->out.writing = 1;
	w->out.writing_round = c->rounds_completed;
	pthread_cond_broadcast(&w->cv);
	if (!wait) {
		pthread_mutex_unlock(&w->mu);
		return 1;
	}
	while (w->seq_done < mine)
		pthread_cond_wait(&w->cv, &w->mu);
	rc = w->last_rc;
	if (rc)
		err_set(e, "%s", w->out.error);
	pthread_mutex_unlock(&w->mu);
	return rc ? -1 : 0;
}

void ckptw_wait(struct ckpt_writer *w)
{
	if (!w->running)
		return;
	pthread_mutex_lock(&w->mu);
	while (w->busy)
		pthread_cond_wait(&w->cv, &w->mu);
	pthread_mutex_unlock(&w->mu);
}

int ckptw_busy(struct ckpt_writer *w)
{
	int busy;

	if (!w->running)
		return 0;
	pthread_mutex_lock(&w->mu);
	busy = w->busy;
	pthread_mutex_unlock(&w->mu);
	return busy;
}

void ckptw_touch(struct ckpt_writer *w, uint32_t p)
{
	size_t n;

	pthread_mutex_lock(&w->mu);
	if (!w->busy || w->taken[p] == 2 || w->aside[p]) {
		pthread_mutex_unlock(&w->mu);
		return;
	}
	n = frag_len(w, p);
	w->aside[p] = malloc(2 * (n ? n : 1) * sizeof(float));
	while (!w->aside[p]) {
		/* no memory for the copy: the change waits until the
		 * thread has taken the fragment, which it does next */
		pthread_mutex_unlock(&w->mu);
		sleep_seconds(0.001);
		pthread_mutex_lock(&w->mu);
		if (!w->busy || w->taken[p] == 2)
			break;
		w->aside[p] = malloc(2 * (n ? n : 1) * sizeof(float));
	}
	if (w->aside[p]) {
		memcpy(w->aside[p], w->theta + w->off[p], n * sizeof(float));
		memcpy(w->aside[p] + n, w->mom + w->off[p], n * sizeof(float));
	}
	pthread_mutex_unlock(&w->mu);
}

void ckptw_outcome(struct ckpt_writer *w, struct ckptw_outcome *o)
{
	if (!w->running) {
		*o = w->out;
		return;
	}
	pthread_mutex_lock(&w->mu);
	*o = w->out;
	pthread_mutex_unlock(&w->mu);
}
