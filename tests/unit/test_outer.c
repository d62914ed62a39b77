/* The syncer's arithmetic: weights, screening, merges, outer step. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>

#include "common/util.h"
#include "syncer/outer.h"
#include "tests/unit/testlib.h"

#define near(a, b) assert_near(a, b, 1e-5)

static void weights_are_tokens_squared_over_steps(void **state)
{
	(void)state;
	near(outer_weight(4, 8), 16.0);
	near(outer_weight(2, 6), 18.0);
	near(outer_weight(0, 100), 0.0);
	near(outer_weight(1000, 64000), 64000.0 * 64.0);
}

/*
 * The bounded weight: steps over the cap count as the cap with tokens and
 * Δ scaled alike, tokens at most tokens_per_step a step; whatever an
 * answer claims, w ≤ tokens_per_step² · max_steps.
 */
static void weights_are_bounded(void **state)
{
	struct rng r;
	double scale;

	(void)state;
	near(outer_bounded_weight(4, 8, 16, 512, &scale), 16.0);
	near(scale, 1.0);
	near(outer_bounded_weight(80, 800, 8, 512, &scale), 800.0);
	near(scale, 0.1);
	near(outer_bounded_weight(1, 1000000, 8, 512, &scale), 512.0 * 512.0);
	near(scale, 1.0);
	near(outer_bounded_weight(0, 100, 8, 512, &scale), 0.0);
	near(outer_bounded_weight(1000, 64000, 0, 0, &scale), 64000.0 * 64.0);
	rng_seed(&r, 3);
	for (int i = 0; i < 100000; i++) {
		uint64_t steps = rng_next(&r) >> (rng_next(&r) % 64);
		uint64_t tokens = rng_next(&r) >> (rng_next(&r) % 64);
		uint64_t cap = 1 + rng_next(&r) % 1000;
		uint64_t tps = 1 + rng_next(&r) % 100000;
		double w = outer_bounded_weight(steps, tokens, cap, tps, &scale);

		assert_true(w >= 0);
		assert_true(w <= (double)tps * (double)tps * (double)cap * (1 + 1e-12));
		assert_true(w <= outer_weight(steps, tokens) * (1 + 1e-12));
		assert_true(scale > 0 && scale <= 1);
	}
}

/* One answer's share of a merge is capped; the others share the rest in
 * proportion, a cap that pushes another over caps it too. */
static void shares_are_capped(void **state)
{
	double a[3] = { 8, 1, 1 }, b[3] = { 100, 40, 10 }, c[2] = { 5, 1 };
	double d[3] = { 1, 1, 1 }, e[1] = { 7 }, g[3] = { 8, 1, 1 };

	(void)state;
	assert_int_equal(outer_cap_shares(a, 3, 0.5), 1);
	assert_float_equal(a[0], 0.5, 1e-12);
	assert_float_equal(a[1], 0.25, 1e-12);
	assert_float_equal(a[2], 0.25, 1e-12);
	/* 100 of 150 is capped at 0.4; then 40 would be 0.48 of the rest */
	assert_int_equal(outer_cap_shares(b, 3, 0.4), 2);
	assert_float_equal(b[0], 0.4, 1e-12);
	assert_float_equal(b[1], 0.4, 1e-12);
	assert_float_equal(b[2], 0.2, 1e-12);
	/* a cap below 1/n is 1/n: equal shares */
	assert_int_equal(outer_cap_shares(c, 2, 0.3), 1);
	assert_float_equal(c[0], 0.5, 1e-12);
	assert_float_equal(c[1], 0.5, 1e-12);
	/* nothing above the cap, a lone answer, no cap: unchanged */
	assert_int_equal(outer_cap_shares(d, 3, 0.5), 0);
	assert_float_equal(d[0], 1, 0);
	assert_int_equal(outer_cap_shares(e, 1, 0.5), 0);
	assert_float_equal(e[0], 7, 0);
	assert_int_equal(outer_cap_shares(g, 3, 1.0), 0);
	assert_float_equal(g[0], 8, 0);
}

static void sqnorms_per_segment_and_finiteness(void **state)
{
	struct outer_seg seg[2] = { { 0, 2, 0 }, { 2, 2, 1 } };
	float x[4] = { 3, 4, 1, 1 };
	double sq[2];

	(void)state;
	assert_int_equal(outer_seg_sqnorms(x, seg, 2, sq), 0);
	near(sq[0], 25.0);
	near(sq[1], 2.0);
	x[3] = NAN;
	assert_int_equal(outer_seg_sqnorms(x, seg, 2, sq), -1);
	x[3] = INFINITY;
	assert_int_equal(outer_seg_sqnorms(x, seg, 2, sq), -1);
	x[3] = 3e38f;   /* finite, and its square fits a double */
	assert_int_equal(outer_seg_sqnorms(x, seg, 2, sq), 0);
}

static void mean_is_weighted(void **state)
{
	struct outer_seg seg = { 0, 2, 0 };
	float a[2] = { 1, 2 }, b[2] = { 3, 6 }, out[2];
	const float *x[2] = { a, b };
	double w[2] = { 1, 3 }, sq[2] = { 5, 45 };

	(void)state;
	assert_int_equal(outer_merge(OUTER_MEAN, x, w, sq, 2, &seg, 1, out), 0);
	near(out[0], 2.5);   /* (1·1 + 3·3) / 4 */
	near(out[1], 5.0);   /* (1·2 + 3·6) / 4 */
}

static void rda_per_tensor_and_mean_for_embedding(void **state)
{
	/* tensor 0 (RDA): [3,4] (‖‖=5) and [0,2] (‖‖=2), equal weights:
	 *   magnitude (5 + 2) / 2 = 3.5
	 *   direction φ((0.6,0.8) + (0,1)) = (0.3,0.9)/√0.9
	 *   Δ = 3.5 · (0.316228, 0.948683) = (1.106797, 3.320391)
	 * tensor 1 (embedding): mean of [1,1] and [3,3] = [2,2] */
	struct outer_seg seg[2] = { { 0, 2, 0 }, { 2, 2, 1 } };
	float a[4] = { 3, 4, 1, 1 }, b[4] = { 0, 2, 3, 3 }, out[4];
	const float *x[2] = { a, b };
	double w[2] = { 1, 1 }, sq[4];

	(void)state;
	assert_int_equal(outer_seg_sqnorms(a, seg, 2, sq), 0);
	assert_int_equal(outer_seg_sqnorms(b, seg, 2, sq + 2), 0);
	assert_int_equal(outer_merge(OUTER_RDA, x, w, sq, 2, seg, 2, out), 0);
	near(out[0], 1.106797);
	near(out[1], 3.320391);
	near(out[2], 2.0);
	near(out[3], 2.0);
	/* the same with the plain mean everywhere */
	assert_int_equal(outer_merge(OUTER_MEAN, x, w, sq, 2, seg, 2, out), 0);
	near(out[0], 1.5);
	near(out[1], 3.0);
}

static void rda_weights_and_zero_answers(void **state)
{
	/* weights 3 and 1: magnitude (3·5 + 1·2)/4 = 4.25, direction
	 * φ(3(0.6,0.8) + (0,1)) = φ(1.8, 3.4) = (0.467888, 0.883788) */
	struct outer_seg seg = { 0, 2, 0 };
	float a[2] = { 3, 4 }, b[2] = { 0, 2 }, z[2] = { 0, 0 }, out[2];
	const float *x[2] = { a, b };
	const float *xz[2] = { z, b };
	double w[2] = { 3, 1 }, sq[2] = { 25, 4 }, sqz[2] = { 0, 4 };
	double w1[2] = { 1, 1 };

	(void)state;
	assert_int_equal(outer_merge(OUTER_RDA, x, w, sq, 2, &seg, 1, out), 0);
	near(out[0], 4.25 * 0.467888);
	near(out[1], 4.25 * 0.883788);
	/* a zero answer adds no direction and halves the magnitude */
	assert_int_equal(outer_merge(OUTER_RDA, xz, w1, sqz, 2, &seg, 1, out), 0);
	near(out[0], 0.0);
	near(out[1], 1.0);
	/* opposite answers cancel: direction 0, Δ = 0 */
	float c[2] = { 0, -2 };
	const float *xc[2] = { b, c };
	double sqc[2] = { 4, 4 };
	assert_int_equal(outer_merge(OUTER_RDA, xc, w1, sqc, 2, &seg, 1, out), 0);
	near(out[0], 0.0);
	near(out[1], 0.0);
}

static void merge_of_many_answers_over_blocks(void **state)
{
	/* 70 answers (more than the stack coefficients), 5000 values (three
	 * blocks): answer i is the constant i+1 with weight 1, so the mean is
	 * 35.5 everywhere and RDA, all directions equal, gives the mean norm
	 * along that direction: also 35.5 per value. */
	enum { N = 70, LEN = 5000 };
	struct outer_seg seg = { 0, LEN, 0 };
	float *buf = malloc(sizeof(float) * N * LEN), *out = malloc(sizeof(float) * LEN);
	const float *x[N];
	double w[N], sq[N];

	(void)state;
	for (int i = 0; i < N; i++) {
		for (int j = 0; j < LEN; j++)
			buf[(size_t)i * LEN + j] = (float)(i + 1);
		x[i] = buf + (size_t)i * LEN;
		w[i] = 1;
		assert_int_equal(outer_seg_sqnorms(x[i], &seg, 1, &sq[i]), 0);
	}
	assert_int_equal(outer_merge(OUTER_MEAN, x, w, sq, N, &seg, 1, out), 0);
	near(out[0], 35.5);
	near(out[LEN - 1], 35.5);
	assert_int_equal(outer_merge(OUTER_RDA, x, w, sq, N, &seg, 1, out), 0);
	assert_near(out[2049], 35.5, 1e-3);
	assert_near(out[LEN - 1], 35.5, 1e-3);
	free(buf);
	free(out);
}

static void screen_rejects_far_norms(void **state)
{
	double n4[4] = { 1, 1.2, 0.9, 50 }, n2[2] = { 1, 20 }, n1[1] = { 1e9 };
	double z[3] = { 0, 0, 0 };
	int v[4];

	(void)state;
	assert_int_equal(outer_screen(n4, 4, 10, v), 1);
	assert_int_equal(v[3], OUTER_OUTLIER);
	assert_int_equal(v[0], OUTER_OK);
	assert_int_equal(v[2], OUTER_OK);
	/* two answers: the far one goes, the small one stays */
	assert_int_equal(outer_screen(n2, 2, 10, v), 1);
	assert_int_equal(v[0], OUTER_OK);
	assert_int_equal(v[1], OUTER_OUTLIER);
	/* 20 is not more than 10 · ... when k = 30 */
	assert_int_equal(outer_screen(n2, 2, 30, v), 0);
	assert_int_equal(outer_screen(n1, 1, 10, v), 0);
	assert_int_equal(outer_screen(z, 3, 10, v), 0);
}

static void nesterov_and_plain_steps(void **state)
{
	/* u = 0.9·0.5 + 0.2 = 0.65; Θ = 1 − 0.7·(0.2 + 0.9·0.65) = 0.4505 */
	float th[1] = { 1 }, mom[1] = { 0.5f }, d[1] = { 0.2f };

	(void)state;
	outer_step(th, mom, d, 1, 0.7, 0.9, 1);
	near(mom[0], 0.65);
	near(th[0], 0.4505);
	/* plain momentum: Θ = 1 − 0.7·0.65 = 0.545 */
	th[0] = 1;
	mom[0] = 0.5f;
	outer_step(th, mom, d, 1, 0.7, 0.9, 0);
	near(mom[0], 0.65);
	near(th[0], 0.545);
	/* μ = 0, η = 1: plain SGD, Θ − Δ */
	th[0] = 1;
	mom[0] = 0;
	outer_step(th, mom, d, 1, 1.0, 0.0, 1);
	near(th[0], 0.8);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(weights_are_tokens_squared_over_steps),
		cmocka_unit_test(weights_are_bounded),
		cmocka_unit_test(shares_are_capped),
		cmocka_unit_test(sqnorms_per_segment_and_finiteness),
		cmocka_unit_test(mean_is_weighted),
		cmocka_unit_test(rda_per_tensor_and_mean_for_embedding),
		cmocka_unit_test(rda_weights_and_zero_answers),
		cmocka_unit_test(merge_of_many_answers_over_blocks),
		cmocka_unit_test(screen_rejects_far_norms),
		cmocka_unit_test(nesterov_and_plain_steps),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
