/*
 * evalthr: the evaluation thread (evalthr.h). One job at a time: `busy`
 * says the buffer is the thread's; the run loop copies Θ into it only
 * while it is not.
 */
#include "syncer/evalthr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

static void *eval_main(void *arg)
{
	struct eval_thread *t = arg;

	pthread_mutex_lock(t->mu);
	for (;;) {
		while (!t->busy && !t->quit)
			pthread_cond_wait(&t->cv, t->mu);
		if (t->quit)
			break;
		pthread_mutex_unlock(t->mu);
		struct err e = { "" };
		double loss = 0;
		int rc = t->eval(t->ctx, t->params, t->tokens, &loss, &e);

		pthread_mutex_lock(t->mu);
		if (rc) {
			/* the /status field; the log keeps the whole message */
			snprintf(t->error, sizeof(t->error), "%.*s",
				 (int)sizeof(t->error) - 1, e.msg);
			log_error("eval: %s", e.msg);
		} else {
			t->job.loss = loss;
			t->have_result = 1;
		}
		t->busy = 0;
		pthread_cond_broadcast(&t->cv);
	}
	pthread_mutex_unlock(t->mu);
	return NULL;
}

int eval_thread_init(struct eval_thread *t, pthread_mutex_t *mu,
		     syncer_eval_fn fn, void *ctx, size_t nparams,
		     size_t tokens, struct err *e)
{
	memset(t, 0, sizeof(*t));
	t->mu = mu;
	t->eval = fn;
	t->ctx = ctx;
	t->tokens = tokens;
	pthread_cond_init(&t->cv, NULL);
	if (!fn)
		return 0;
	if (!(t->params = malloc(nparams * sizeof(float))))
		return err_set(e, "syncer: out of memory for the evaluation's "
			       "copy of %zu parameters", nparams);
	if (pthread_create(&t->thread, NULL, eval_main, t))
		return err_set(e, "syncer: cannot start the evaluation thread");
	t->started = 1;
	return 0;
}

void eval_thread_stop(struct eval_thread *t)
{
	if (t->started) {
		pthread_mutex_lock(t->mu);
		t->quit = 1;
		pthread_cond_broadcast(&t->cv);
		pthread_mutex_unlock(t->mu);
		pthread_join(t->thread, NULL);
		t->started = 0;
	}
	free(t->params);
	t->params = NULL;
	pthread_cond_destroy(&t->cv);
}

float *eval_thread_buffer(struct eval_thread *t)
{
	return t->started && !t->busy ? t->params : NULL;
}

void eval_thread_go(struct eval_thread *t, uint64_t round, uint64_t tokens,
		    double time)
{
	if (!t->started || t->busy)
		return;
	t->job = (struct eval_result){ .round = round, .tokens = tokens,
				       .time = time };
	t->busy = 1;
	pthread_cond_broadcast(&t->cv);
}

int eval_thread_collect(struct eval_thread *t, struct eval_result *out)
{
	if (!t->have_result)
		return 0;
	t->have_result = 0;
	*out = t->job;
	return 1;
}

void eval_thread_wait(struct eval_thread *t)
{
	while (t->started && t->busy)
		pthread_cond_wait(&t->cv, t->mu);
}
