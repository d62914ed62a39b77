/*
 * evalthr: the syncer's evaluation thread (docs/syncer.md, Evaluation).
 * It evaluates a copy of Θ, flat in the model's own layout, with the
 * job's eval function, while the run loop goes on. Its state is its own;
 * it shares only the lock of the state around it (`mu`), which it holds
 * while it waits and hands a result back, and releases while it works.
 *
 *   eval_thread_buffer  where the caller copies Θ to (NULL while busy)
 *   eval_thread_go      evaluate what the buffer holds, as of a round
 *   eval_thread_collect the loss of the last one that ended, once
 *
 * Every call but eval_thread_init and eval_thread_stop is made with
 * `mu` held.
 */
#ifndef DDILOCO_SYNCER_EVALTHR_H
#define DDILOCO_SYNCER_EVALTHR_H

#include <pthread.h>
#include <stdint.h>

#include "common/err.h"
#include "syncer/syncer.h"

struct eval_result {
	uint64_t round, tokens;
	double time, loss;
};

struct eval_thread {
	pthread_mutex_t *mu;
	pthread_t thread;
	pthread_cond_t cv;
	syncer_eval_fn eval;
	void *ctx;
	size_t tokens;               /* spec.syncer.evalTokens */
	int started, busy, quit, have_result;
	float *params;               /* flat copy of Θ */
	struct eval_result job;      /* what is (or was last) evaluated */
	char error[256];             /* the last failure, for /status */
};

/* Starts the thread on nparams parameters; fn NULL: none (every call
 * is then a no-op, and eval_thread_buffer gives NULL). */
int eval_thread_init(struct eval_thread *t, pthread_mutex_t *mu,
		     syncer_eval_fn fn, void *ctx, size_t nparams,
		     size_t tokens, struct err *e);
/* Joins the thread and frees what it holds (without `mu`). */
void eval_thread_stop(struct eval_thread *t);
float *eval_thread_buffer(struct eval_thread *t);
void eval_thread_go(struct eval_thread *t, uint64_t round, uint64_t tokens,
		    double time);
/* 1 with *out when an evaluation ended since the last call. */
int eval_thread_collect(struct eval_thread *t, struct eval_result *out);
/* Waits until the thread is idle (`mu` is released meanwhile). */
void eval_thread_wait(struct eval_thread *t);

#endif
