/* Updates as deltas, the syncer's side (syncer/updelta.h): Θ̂ and the
 * deltas that move it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "common/util.h"
#include "syncer/updelta.h"

#define N 1000

/* Θ moves a step of about 1e-3 a version; Θ̂ follows it by int8 deltas
 * alone. What each delta loses is sent with the next (error feedback):
 * after 200 versions Θ̂ is as near Θ as after one, and a learner that
 * adds the deltas to the keyframe holds Θ̂ bit for bit. */
static void deltas_keep_up_with_feedback(void **state)
{
	size_t numel[1] = { N };
	static float theta[N], learner[N], d[N];
	struct updelta u;
	const uint8_t *pay;
	size_t len;
	uint64_t sum;
	double first = 0, worst = 0, drift = 0;
	struct rng r;

	(void)state;
	rng_seed(&r, 7);
	for (int i = 0; i < N; i++)
		theta[i] = (float)rng_uniform(&r) - 0.5f;
	assert_int_equal(updelta_init(&u, 1, numel, ENC_INT8, NULL), 0);
	memcpy(learner, updelta_keyframe(&u, 0, theta, 0, &sum), sizeof(learner));
	assert_true(sum == hash_floats(theta, N));
	for (uint64_t v = 1; v <= 200; v++) {
		double err = 0;

		for (int i = 0; i < N; i++)   /* one block much larger */
			theta[i] += (float)((rng_uniform(&r) - 0.5) *
					    (i < 256 ? 2e-2 : 2e-3));
		assert_int_equal(updelta_step(&u, 0, theta, v, NULL), 0);
		assert_int_equal(updelta_get(&u, 0, v, &pay, &len, &sum), 1);
		assert_int_equal(len, enc_size(ENC_INT8, N));
		assert_int_equal(enc_decode(ENC_INT8, pay, len, d, N, NULL), 0);
		for (int i = 0; i < N; i++) {
			learner[i] = learner[i] + d[i];
			err = fmax(err, fabs((double)theta[i] - learner[i]));
		}
		assert_true(hash_floats(learner, N) == sum);
		assert_memory_equal(learner, u.hat, sizeof(learner));
		if (v == 1)
			first = err;
		worst = fmax(worst, err);
		drift = err;
	}
	/* a block's step of ±1e-2 in int8: at most 1e-2/127 a value, and
	 * what is left over does not add up */
	assert_true(first < 1e-2 / 127 * 1.01);
	assert_true(worst < 2e-2 / 127 * 1.01);
	assert_true(drift < 2e-2 / 127 * 1.01);
	assert_int_equal(u.deltas, 200);
	assert_int_equal(u.remade, 1);
	/* no delta to a version it did not make */
	assert_int_equal(updelta_get(&u, 0, 199, &pay, &len, &sum), 0);
	updelta_release(&u);
}

/* A merge that finds Θ̂ not at the version before (never made, or a
 * version skipped) makes it again from Θ: no delta, keyframes follow.
 * A change int8 cannot carry (not finite) does the same. */
static void without_the_version_before_it_is_made_again(void **state)
{
	size_t numel[2] = { 4, 3 };
	float a[4] = { 1, 2, 3, 4 }, b[3] = { 5, 6, 7 };
	const uint8_t *pay;
	struct updelta u;
	uint64_t sum;
	size_t len;

	(void)state;
	assert_int_equal(updelta_init(&u, 2, numel, ENC_INT8, NULL), 0);
	assert_int_equal(updelta_step(&u, 1, b, 5, NULL), 0);   /* never made */
	assert_int_equal(updelta_get(&u, 1, 5, &pay, &len, &sum), 0);
	assert_memory_equal(u.hat + u.off[1], b, sizeof(b));
	assert_int_equal(u.remade, 1);
	b[0] = 5.5f;
	assert_int_equal(updelta_step(&u, 1, b, 6, NULL), 0);
	assert_int_equal(updelta_get(&u, 1, 6, &pay, &len, &sum), 1);
	assert_int_equal(updelta_step(&u, 1, b, 8, NULL), 0);   /* 7 skipped */
	assert_int_equal(updelta_get(&u, 1, 8, &pay, &len, &sum), 0);
	assert_int_equal(u.remade, 2);
	updelta_keyframe(&u, 0, a, 0, &sum);
	a[2] = INFINITY;
	assert_int_equal(updelta_step(&u, 0, a, 1, NULL), 0);
	assert_int_equal(updelta_get(&u, 0, 1, &pay, &len, &sum), 0);
	assert_int_equal(u.remade, 4);
	assert_int_equal(u.deltas, 1);
	updelta_release(&u);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(deltas_keep_up_with_feedback),
		cmocka_unit_test(without_the_version_before_it_is_made_again),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
