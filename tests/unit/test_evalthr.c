/*
 * The evaluation thread (syncer/evalthr.h) with an eval function of the
 * test's own that blocks until the test lets it go: the buffer is
 * refused while a job runs, the result comes back once with the round
 * it was asked for, a failure keeps its message and no result.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <string.h>

#include "common/util.h"
#include "syncer/evalthr.h"
#include "tests/unit/testlib.h"

struct gate {
	pthread_mutex_t m;
	pthread_cond_t cv;
	int open, calls;
	float seen;
	int fail;
};

static int blocking_eval(void *ctx, const float *params, size_t tokens,
			 double *loss, struct err *e)
{
	struct gate *g = ctx;

	pthread_mutex_lock(&g->m);
	g->calls++;
	g->seen = params[0];
	while (!g->open)
		pthread_cond_wait(&g->cv, &g->m);
	g->open = 0;
	pthread_mutex_unlock(&g->m);
	if (g->fail)
		return err_set(e, "eval: the test says no");
	*loss = (double)params[0] + (double)tokens;
	return 0;
}

static void let_go(struct gate *g)
{
	pthread_mutex_lock(&g->m);
	g->open = 1;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->m);
}

static void one_job_at_a_time_and_its_result_once(void **state)
{
	struct gate g = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
			  0, 0, 0, 0 };
	pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	struct eval_thread t;
	struct eval_result r;
	struct err e;
	float *buf;

	(void)state;
	assert_int_equal(eval_thread_init(&t, &mu, blocking_eval, &g, 3, 100,
					  &e), 0);
	pthread_mutex_lock(&mu);
	assert_non_null(buf = eval_thread_buffer(&t));
	buf[0] = 0.5f;
	eval_thread_go(&t, 7, 1000, 2.5);
	assert_null(eval_thread_buffer(&t));     /* the thread's now */
	assert_int_equal(eval_thread_collect(&t, &r), 0);
	pthread_mutex_unlock(&mu);
	let_go(&g);
	pthread_mutex_lock(&mu);
	eval_thread_wait(&t);
	assert_int_equal(eval_thread_collect(&t, &r), 1);
	assert_int_equal(r.round, 7);
	assert_int_equal(r.tokens, 1000);
	assert_near(r.time, 2.5, 1e-12);
	assert_near(r.loss, 100.5, 1e-6);
	assert_int_equal(eval_thread_collect(&t, &r), 0);   /* once */

	/* a failure: its message kept, no result */
	g.fail = 1;
	buf = eval_thread_buffer(&t);
	assert_non_null(buf);
	eval_thread_go(&t, 8, 2000, 3.0);
	pthread_mutex_unlock(&mu);
	let_go(&g);
	pthread_mutex_lock(&mu);
	eval_thread_wait(&t);
	assert_int_equal(eval_thread_collect(&t, &r), 0);
	assert_string_equal(t.error, "eval: the test says no");
	pthread_mutex_unlock(&mu);
	assert_int_equal(g.calls, 2);
	eval_thread_stop(&t);
}

static void without_a_function_nothing_runs(void **state)
{
	pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	struct eval_thread t;
	struct eval_result r;
	struct err e;

	(void)state;
	assert_int_equal(eval_thread_init(&t, &mu, NULL, NULL, 3, 100, &e), 0);
	pthread_mutex_lock(&mu);
	assert_null(eval_thread_buffer(&t));
	eval_thread_go(&t, 1, 1, 1);
	eval_thread_wait(&t);   /* returns: nothing runs */
	assert_int_equal(eval_thread_collect(&t, &r), 0);
	pthread_mutex_unlock(&mu);
	eval_thread_stop(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(one_job_at_a_time_and_its_result_once),
		cmocka_unit_test(without_a_function_nothing_runs),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
