/* Chaos schedule: statistics for a seed, maxDown, determinism, windows. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "common/chaos.h"
#include "tests/unit/testlib.h"

static struct job_chaos cfg(enum chaos_schedule s, double mean, int max_down)
{
	struct job_spec js;

	jobspec_defaults(&js);
	js.chaos.enabled = 1;
	js.chaos.schedule = s;
	js.chaos.mtbf_seconds = mean;
	js.chaos.interval_seconds = mean;
	js.chaos.max_down = max_down;
	js.chaos.start_after_seconds = 10;
	js.chaos.seed = 7;
	return js.chaos;
}

static void poisson_mean_and_spread(void **state)
{
	struct job_chaos jc = cfg(CHAOS_POISSON, 20, 1);
	unsigned char down[4] = { 0 };
	struct chaos_view v = { 4, down, 0 };
	struct chaos c;
	struct chaos_kill k;
	double prev = 10, sum = 0, sum2 = 0, first;
	int n = 20000, below_mean = 0;

	(void)state;
	chaos_init(&c, &jc, 4);
	first = chaos_next_time(&c);
	assert_greater(first, 10);
	for (int i = 0; i < n; i++) {
		double t = chaos_next_time(&c);

		assert_int_equal(chaos_due(&c, t, &v, &k), 1);
		assert_exactly(k.time, t);
		assert_int_equal(k.kind, CHAOS_LEARNER);
		assert_in_range(k.index, 0, 3);
		assert_int_equal(k.seq, (uint64_t)i + 1);
		sum += t - prev;
		sum2 += (t - prev) * (t - prev);
		below_mean += t - prev < 20;
		prev = t;
	}
	/* exponential: mean 20 (±2% at n = 20000: ~7 sd), sd 20, P(gap < mean) = 1 - 1/e */
	double mean = sum / n, sd = sqrt(sum2 / n - mean * mean);
	assert_near(mean, 20, 0.4);
	assert_near(sd, 20, 1.0);
	assert_near((double)below_mean / n, (1 - exp(-1)), 0.02);
	assert_int_equal(c.skipped, 0);
}

static void victims_uniform(void **state)
{
	struct job_chaos jc = cfg(CHAOS_INTERVAL, 5, 1);
	unsigned char down[4] = { 0 };
	struct chaos_view v = { 4, down, 0 };
	struct chaos c;
	struct chaos_kill k;
	int count[4] = { 0 }, n = 8000;

	(void)state;
	chaos_init(&c, &jc, 4);
	for (int i = 0; i < n; i++) {
		assert_int_equal(chaos_due(&c, 1e9, &v, &k), 1);
		assert_exactly(k.time, 15 + 5.0 * i);   /* fixed interval */
		count[k.index]++;
	}
	for (int i = 0; i < 4; i++)
		assert_near(count[i], n / 4.0, 150);   /* ~4.5 sd */
}

/*
 * A run with recovery: a victim stays down for 30 s (longer than the mean
 * gap), so maxDown must bite. Never more than maxDown down, and the kills
 * that would pass it are skipped, not delayed.
 */
static void never_beyond_max_down(void **state)
{
	struct job_chaos jc = cfg(CHAOS_POISSON, 5, 2);
	unsigned char down[6] = { 0 };
	double back[6] = { 0 };
	struct chaos_view v = { 6, down, 0 };
	struct chaos c;
	struct chaos_kill k;
	int peak = 0;
	uint64_t planned = 0;

	(void)state;
	jc.targets = CHAOS_TARGET_LEARNERS | CHAOS_TARGET_SIDECARS;
	chaos_init(&c, &jc, 6);
	for (double now = 0; now < 20000; now += 0.25) {
		int ndown = 0;

		for (int i = 0; i < 6; i++)
			if (down[i] && back[i] <= now)
				down[i] = 0;
		while (chaos_due(&c, now, &v, &k)) {
			assert_false(down[k.index]);
			down[k.index] = 1;
			back[k.index] = now + 30;
		}
		for (int i = 0; i < 6; i++)
			ndown += down[i];
		assert_at_most(ndown, 2);
		peak = ndown > peak ? ndown : peak;
	}
	planned = c.kills + c.skipped;
	assert_int_equal(peak, 2);
	assert_greater(c.skipped, 0);
	/* the time stream ignores the victims: about 20000 / 5 planned */
	assert_near((double)planned, 4000, 250);
}

static void same_seed_same_schedule(void **state)
{
	struct job_chaos jc = cfg(CHAOS_POISSON, 20, 1);
	unsigned char down[5] = { 0 };
	struct chaos_view v = { 5, down, 0 };
	struct chaos a, b, d;
	struct chaos_kill ka, kb, kd;
	int differ = 0;

	(void)state;
	jc.targets = CHAOS_TARGET_LEARNERS | CHAOS_TARGET_SYNCER;
	chaos_init(&a, &jc, 5);
	chaos_init(&b, &jc, 5);
	jc.seed = 8;
	chaos_init(&d, &jc, 5);
	for (int i = 0; i < 200; i++) {
		assert_int_equal(chaos_due(&a, 1e9, &v, &ka), 1);
		assert_int_equal(chaos_due(&b, 1e9, &v, &kb), 1);
		assert_int_equal(chaos_due(&d, 1e9, &v, &kd), 1);
		assert_exactly(ka.time, kb.time);
		assert_int_equal(ka.kind, kb.kind);
		assert_int_equal(ka.index, kb.index);
		differ += ka.time != kd.time;
	}
	assert_greater(differ, 190);
}

static void windows_and_targets(void **state)
{
	struct job_chaos jc = cfg(CHAOS_INTERVAL, 10, 1);
	unsigned char down[3] = { 0 };
	struct chaos_view v = { 3, down, 0 };
	struct chaos c;
	struct chaos_kill k;
	char name[32];

	(void)state;
	/* nothing before startAfter + one interval, nothing after stopAfter */
	jc.stop_after_seconds = 45;
	chaos_init(&c, &jc, 3);
	assert_int_equal(chaos_due(&c, 19.9, &v, &k), 0);
	assert_int_equal(chaos_due(&c, 20, &v, &k), 1);
	assert_exactly(k.time, 20);
	assert_int_equal(chaos_due(&c, 30, &v, &k), 1);
	assert_int_equal(chaos_due(&c, 40, &v, &k), 1);
	assert_true(isinf(chaos_next_time(&c)));
	assert_int_equal(chaos_due(&c, 1e9, &v, &k), 0);

	/* syncer only: the syncer, and nothing while it is down */
	jc.stop_after_seconds = 0;
	jc.targets = CHAOS_TARGET_SYNCER;
	chaos_init(&c, &jc, 3);
	assert_int_equal(chaos_due(&c, 20, &v, &k), 1);
	assert_int_equal(k.kind, CHAOS_SYNCER);
	assert_string_equal(chaos_kill_name(&k, name, sizeof(name)), "syncer");
	v.syncer_down = 1;
	assert_int_equal(chaos_due(&c, 30, &v, &k), 0);
	assert_int_equal(c.skipped, 1);

	/* sidecars only */
	v.syncer_down = 0;
	jc.targets = CHAOS_TARGET_SIDECARS;
	jc.max_down = 3;
	chaos_init(&c, &jc, 3);
	down[0] = down[1] = 1;
	assert_int_equal(chaos_due(&c, 20, &v, &k), 1);
	assert_int_equal(k.kind, CHAOS_SIDECAR);
	assert_int_equal(k.index, 2);
	assert_string_equal(chaos_kill_name(&k, name, sizeof(name)), "sidecar-2");

	/* disabled: never */
	jc.enabled = 0;
	chaos_init(&c, &jc, 3);
	assert_true(isinf(chaos_next_time(&c)));
	assert_int_equal(chaos_due(&c, 1e12, &v, &k), 0);
}

struct rec {
	int calls;
	struct chaos_kill last;
	int fail;
};

static int rec_kill(void *ctx, const struct chaos_kill *k, struct err *e)
{
	struct rec *r = ctx;

	r->calls++;
	r->last = *k;
	if (r->fail)
		return err_set(e, "cannot kill");
	return 0;
}

static void executor_called_once_per_kill(void **state)
{
	struct job_chaos jc = cfg(CHAOS_INTERVAL, 10, 4);
	unsigned char down[4] = { 0 };
	struct chaos_view v = { 4, down, 0 };
	struct rec r = { 0 };
	struct chaos_executor x = { rec_kill, &r };
	struct chaos c;
	struct err e;

	(void)state;
	chaos_init(&c, &jc, 4);
	assert_int_equal(chaos_run_due(&c, 15, &v, &x, &e), 0);
	assert_int_equal(r.calls, 0);
	/* 20 and 30 are both due at 35: one per call */
	assert_int_equal(chaos_run_due(&c, 35, &v, &x, &e), 1);
	assert_exactly(r.last.time, 20);
	assert_int_equal(chaos_run_due(&c, 35, &v, &x, &e), 1);
	assert_exactly(r.last.time, 30);
	assert_int_equal(chaos_run_due(&c, 35, &v, &x, &e), 0);
	r.fail = 1;
	assert_int_equal(chaos_run_due(&c, 40, &v, &x, &e), -1);
	assert_string_equal(e.msg, "cannot kill");
	assert_int_equal(r.calls, 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(poisson_mean_and_spread),
		cmocka_unit_test(victims_uniform),
		cmocka_unit_test(never_beyond_max_down),
		cmocka_unit_test(same_seed_same_schedule),
		cmocka_unit_test(windows_and_targets),
		cmocka_unit_test(executor_called_once_per_kill),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
