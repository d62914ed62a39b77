/*
 * workqueue: dedupe, in-flight re-adds, delays (the earliest due time
 * wins), per-key exponential backoff and forgetting, the overall token
 * bucket, and one worker per key under three consumers.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "common/util.h"
#include "operator/workqueue.h"
#include "tests/unit/testlib.h"

static void test_wq_dedupe_and_order(void **state)
{
	struct workqueue *q = wq_new(NULL);
	char k[WQ_KEY_MAX];

	(void)state;
	wq_add(q, "ns/a");
	wq_add(q, "ns/b");
	wq_add(q, "ns/a");
	assert_int_equal(wq_len(q), 2);
	assert_int_equal(wq_get(q, k, 1), 1);
	assert_string_equal(k, "ns/a");
	/* re-added while processing: not handed out twice, queued on done */
	wq_add(q, "ns/a");
	assert_int_equal(wq_get(q, k, 1), 1);
	assert_string_equal(k, "ns/b");
	assert_int_equal(wq_get(q, k, 0.05), 0);
	wq_done(q, "ns/a");
	assert_int_equal(wq_get(q, k, 1), 1);
	assert_string_equal(k, "ns/a");
	wq_done(q, "ns/a");
	wq_done(q, "ns/b");
	assert_int_equal(wq_len(q), 0);
	wq_shutdown(q);
	assert_int_equal(wq_get(q, k, 1), -1);
	wq_free(q);
}

static void test_wq_delay(void **state)
{
	struct workqueue *q = wq_new(NULL);
	char k[WQ_KEY_MAX];
	double t0 = clock_mono();

	(void)state;
	wq_add_after(q, "late", 0.3);
	wq_add_after(q, "late", 5);      /* the earliest due time wins */
	assert_int_equal(wq_get(q, k, 0.1), 0);
	assert_int_equal(wq_get(q, k, 10), 1);
	assert_string_equal(k, "late");
	/* not the 5 s one */
	assert_in_range((long)((clock_mono() - t0) * 1000), 290, 4999);
	wq_done(q, "late");
	wq_free(q);
}

static void test_wq_backoff(void **state)
{
	struct wq_limits l;
	struct workqueue *q;

	(void)state;
	wq_limits_default(&l);
	assert_float_equal(wq_backoff(&l, 0), 0.005, 1e-12);
	assert_float_equal(wq_backoff(&l, 1), 0.01, 1e-12);
	assert_float_equal(wq_backoff(&l, 10), 0.005 * 1024, 1e-9);
	assert_float_equal(wq_backoff(&l, 30), 1000, 1e-9);
	assert_float_equal(wq_backoff(&l, 1000), 1000, 1e-9);

	l.base = 0.01;
	l.cap = 0.08;
	q = wq_new(&l);
	assert_float_equal(wq_add_rate_limited(q, "k"), 0.01, 1e-12);
	assert_float_equal(wq_add_rate_limited(q, "k"), 0.02, 1e-12);
	assert_float_equal(wq_add_rate_limited(q, "k"), 0.04, 1e-12);
	assert_float_equal(wq_add_rate_limited(q, "k"), 0.08, 1e-12);
	assert_float_equal(wq_add_rate_limited(q, "k"), 0.08, 1e-12);
	assert_int_equal(wq_failures(q, "k"), 5);
	assert_int_equal(wq_failures(q, "other"), 0);
	wq_forget(q, "k");
	assert_int_equal(wq_failures(q, "k"), 0);
	assert_float_equal(wq_add_rate_limited(q, "k"), 0.01, 1e-12);
	wq_free(q);
}

static void test_wq_bucket(void **state)
{
	struct wq_limits l = { 0.001, 0.001, 10, 2 };
	struct workqueue *q = wq_new(&l);
	double d1, d2, d3, d4;

	(void)state;
	/* two tokens in the bucket, then one slot every 1/qps = 0.1 s */
	d1 = wq_add_rate_limited(q, "a");
	d2 = wq_add_rate_limited(q, "b");
	d3 = wq_add_rate_limited(q, "c");
	d4 = wq_add_rate_limited(q, "d");
	assert_float_equal(d1, 0.001, 1e-12);
	assert_float_equal(d2, 0.001, 1e-12);
	assert_in_range((long)(d3 * 1e6), 50001, 100001);
	assert_in_range((long)((d4 - d3) * 1e6), 90001, 200001);
	assert_in_range((long)(d4 * 1e6), 0, 200001);
	wq_free(q);
}

struct consumer {
	struct workqueue *q;
	int got[4];
	int concurrent, max_concurrent;
	int busy;            /* keys between wq_get and wq_done */
	pthread_mutex_t mu;
};

/* No key queued and none being handled: every add so far was handled
 * after it was made (a key added while handled is queued again at its
 * wq_done, before busy drops). */
static int idle(struct consumer *c)
{
	int n;

	pthread_mutex_lock(&c->mu);
	n = c->busy;
	pthread_mutex_unlock(&c->mu);
	return n == 0 && wq_len(c->q) == 0;
}

static void *consume(void *arg)
{
	struct consumer *c = arg;
	char k[WQ_KEY_MAX];

	while (wq_get(c->q, k, 2) > 0) {
		pthread_mutex_lock(&c->mu);
		c->busy++;
		c->got[k[0] - 'a']++;
		if (k[0] == 'a' && ++c->concurrent > c->max_concurrent)
			c->max_concurrent = c->concurrent;
		pthread_mutex_unlock(&c->mu);
		sleep_seconds(0.01);
		pthread_mutex_lock(&c->mu);
		if (k[0] == 'a')
			c->concurrent--;
		pthread_mutex_unlock(&c->mu);
		wq_done(c->q, k);
		pthread_mutex_lock(&c->mu);
		c->busy--;
		pthread_mutex_unlock(&c->mu);
	}
	return NULL;
}

static void test_wq_one_worker_per_key(void **state)
{
	struct consumer c;
	pthread_t th[3];

	(void)state;
	memset(&c, 0, sizeof(c));
	pthread_mutex_init(&c.mu, NULL);
	c.q = wq_new(NULL);
	for (int i = 0; i < 3; i++)
		pthread_create(&th[i], NULL, consume, &c);
	for (int i = 0; i < 50; i++) {
		wq_add(c.q, "a");
		wq_add(c.q, "b");
		sleep_seconds(0.002);
	}
	/* the last adds handled, then the shutdown (a key taken by wq_get
	 * but not yet counted busy is still handled: wq_shutdown ends only
	 * the next wq_get) */
	assert_eventually(idle(&c), 10);
	wq_shutdown(c.q);
	for (int i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(c.max_concurrent, 1);
	assert_in_range(c.got[0], 2, 50);   /* coalesced, never lost */
	assert_in_range(c.got[1], 2, 50);
	wq_free(c.q);
}

/* wq_get_timed: how long the key waited, from its add (no upper bound
 * asserted: the machine may be loaded). */
static void test_wq_waited(void **state)
{
	struct workqueue *q = wq_new(NULL);
	char key[WQ_KEY_MAX];
	double waited = -1;
	struct timespec ts = { 0, 60 * 1000 * 1000 };

	(void)state;
	wq_add(q, "ns/a");
	nanosleep(&ts, NULL);
	assert_int_equal(wq_get_timed(q, key, 1.0, &waited), 1);
	assert_string_equal(key, "ns/a");
	assert_true(waited >= 0.05);
	wq_done(q, key);
	/* no key: waited is left alone */
	waited = -1;
	assert_int_equal(wq_get_timed(q, key, 0.01, &waited), 0);
	assert_true(waited == -1);
	wq_free(q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wq_dedupe_and_order),
		cmocka_unit_test(test_wq_delay),
		cmocka_unit_test(test_wq_backoff),
		cmocka_unit_test(test_wq_bucket),
		cmocka_unit_test(test_wq_one_worker_per_key),
		cmocka_unit_test(test_wq_waited),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
