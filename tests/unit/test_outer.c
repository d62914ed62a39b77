/* The syncer's arithmetic: weights, caps, merges (batch and streaming),
 * outer step. */
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

/*
 * Random answers of random weights, with a few heavy ones among them in
 * random places (so the cap has work), merged by the batch merge of every
 * copy with capped shares (the reference) and by the accumulator: equal
 * within float tolerance for both rules, several caps and counts.
 */
static void streaming_merge_equals_batch(void **state)
{
	enum { LEN = 9000, NSEG = 3, MAXM = 300 };
	struct outer_seg seg[NSEG] = { { 0, 1000, 1 }, { 1000, 5000, 0 },
				       { 6000, 3000, 0 } };
	float *buf = malloc(sizeof(float) * MAXM * LEN);
	float *ref = malloc(sizeof(float) * LEN), *got = malloc(sizeof(float) * LEN);
	const float *x[MAXM];
	double w[MAXM], sq[MAXM * NSEG];
	const double caps[] = { 0.5, 0.3, 0.2, 0.1, 0.75, 1.0 };
	const int ms[] = { 1, 2, 3, 5, 17, 64, MAXM };
	struct rng r;
	int checked = 0, capped_seen = 0;

	(void)state;
	rng_seed(&r, 11);
	for (int i = 0; i < MAXM; i++) {
		for (int j = 0; j < LEN; j++)
			buf[(size_t)i * LEN + j] = (float)rng_normal(&r) *
						   (1.0f + (float)(i % 7));
		if (i % 13 == 5)   /* a zero tensor: RDA gives it no direction */
			for (int j = 1000; j < 6000; j++)
				buf[(size_t)i * LEN + j] = 0;
		x[i] = buf + (size_t)i * LEN;
		assert_int_equal(outer_seg_sqnorms(x[i], seg, NSEG, sq + i * NSEG), 0);
	}
	for (size_t ci = 0; ci < sizeof(caps) / sizeof(caps[0]); ci++)
	for (size_t mi = 0; mi < sizeof(ms) / sizeof(ms[0]); mi++)
	for (int rule = OUTER_RDA; rule <= OUTER_MEAN; rule++) {
		int M = ms[mi], k = outer_acc_k(caps[ci], M), ncap, nref;
		struct outer_acc acc;
		double cw[MAXM], scale = 0;

		for (int i = 0; i < M; i++)
			w[i] = cw[i] = 1 + rng_uniform(&r) * 100 *
				       (rng_uniform(&r) < 0.05 ? 1000 : 1);
		nref = outer_cap_shares(cw, M, caps[ci]);
		assert_int_equal(outer_merge((enum outer_rule)rule, x, cw, sq, M,
					     seg, NSEG, ref), 0);
		assert_int_equal(outer_acc_init(&acc, LEN, NSEG, k), 0);
		outer_acc_begin(&acc, (enum outer_rule)rule, seg, NSEG, LEN);
		for (int i = 0; i < M; i++)
			assert_int_equal(outer_acc_add(&acc, x[i], sq + i * NSEG,
						       w[i]), 0);
		assert_int_equal(outer_acc_count(&acc), M);
		ncap = outer_acc_merge(&acc, caps[ci], got);
		assert_int_equal(ncap, nref);
		capped_seen += ncap > 0;
		for (int j = 0; j < LEN; j++)
			scale = fmax(scale, fabs(ref[j]));
		for (int j = 0; j < LEN; j++)
			assert_near(got[j], ref[j], 1e-5 * scale + 1e-6);
		outer_acc_release(&acc);
		checked++;
	}
	assert_int_equal(checked, 6 * 7 * 2);
	assert_true(capped_seen > 10);
	free(buf);
	free(ref);
	free(got);
}

/*
 * What the accumulator holds is fixed when it is made: adding 10, 100 or
 * 1000 answers allocates nothing more (the bytes it counts, and a second
 * accumulator's, are the same whatever the number), and it is a few
 * few fragments' worth: the sum, the input buffer, ⌈1/cap⌉ − 1 copies
 * and the pending answers, plus small change.
 */
static void accumulator_memory_does_not_grow_with_answers(void **state)
{
	enum { LEN = 4096, NSEG = 2 };
	struct outer_seg seg[NSEG] = { { 0, 96, 1 }, { 96, LEN - 96, 0 } };
	float *x = malloc(sizeof(float) * LEN), *out = malloc(sizeof(float) * LEN);
	const int counts[] = { 10, 100, 1000 };
	size_t bytes[3];
	struct rng r;

	(void)state;
	rng_seed(&r, 5);
	for (int c = 0; c < 3; c++) {
		struct outer_acc acc;
		double sq[NSEG];

		assert_int_equal(outer_acc_init(&acc, LEN, NSEG, outer_acc_k(0.5, 1000)), 0);
		outer_acc_begin(&acc, OUTER_RDA, seg, NSEG, LEN);
		for (int i = 0; i < counts[c]; i++) {
			for (int j = 0; j < LEN; j++)
				x[j] = (float)rng_normal(&r);
			assert_int_equal(outer_seg_sqnorms(x, seg, NSEG, sq), 0);
			assert_int_equal(outer_acc_add(&acc, x, sq, 1 + rng_uniform(&r)), 0);
		}
		assert_int_equal(outer_acc_count(&acc), counts[c]);
		outer_acc_merge(&acc, 0.5, out);
		bytes[c] = acc.bytes;
		outer_acc_release(&acc);
	}
	assert_int_equal(bytes[0], bytes[1]);
	assert_int_equal(bytes[0], bytes[2]);
	/* sum, input, the one copy (k = 1 at 0.5) and the pending ones */
	assert_true(bytes[0] >= (3 + OUTER_ACC_PENDING) * LEN * sizeof(float));
	assert_true(bytes[0] < (3 + OUTER_ACC_PENDING) * LEN * sizeof(float) + 1024);
	/* k: ⌈1/cap⌉ − 1, never more than the answers a round can have, 0
	 * without a cap */
	assert_int_equal(outer_acc_k(0.5, 1000), 1);
	assert_int_equal(outer_acc_k(0.3, 1000), 3);
	assert_int_equal(outer_acc_k(0.75, 1000), 1);
	assert_int_equal(outer_acc_k(0.001, 16), 16);
	assert_int_equal(outer_acc_k(1.0, 16), 0);
	free(x);
	free(out);
}

/*
 * A NaN or infinite norm, or a weight that is not a positive finite
 * number, is refused by outer_acc_add and leaves the accumulator as it
 * was; clear drops what was added.
 */
static void accumulator_refuses_nonfinite_and_clears(void **state)
{
	struct outer_seg seg = { 0, 2, 0 };
	float a[2] = { 1, 2 }, b[2] = { 3, 6 }, bad[2] = { NAN, 1 }, out[2];
	double sqa = 5, sqb = 45, sqbad = NAN, sqinf = INFINITY;
	struct outer_acc acc;

	(void)state;
	assert_int_equal(outer_acc_init(&acc, 2, 1, 0), 0);   /* all folded */
	outer_acc_begin(&acc, OUTER_MEAN, &seg, 1, 2);
	assert_int_equal(outer_acc_add(&acc, a, &sqa, 1), 0);
	assert_int_equal(outer_acc_add(&acc, bad, &sqbad, 1), -1);
	assert_int_equal(outer_acc_add(&acc, b, &sqinf, 1), -1);
	assert_int_equal(outer_acc_add(&acc, b, &sqb, NAN), -1);
	assert_int_equal(outer_acc_add(&acc, b, &sqb, INFINITY), -1);
	assert_int_equal(outer_acc_add(&acc, b, &sqb, 0), -1);
	assert_int_equal(outer_acc_add(&acc, b, &sqb, -1), -1);
	assert_int_equal(outer_acc_count(&acc), 1);
	assert_int_equal(outer_acc_add(&acc, b, &sqb, 3), 0);
	assert_int_equal(outer_acc_merge(&acc, 1.0, out), 0);
	near(out[0], 2.5);   /* (1·1 + 3·3) / 4, untouched by the NaN */
	near(out[1], 5.0);
	/* cleared: the next round holds only its own answers */
	outer_acc_clear(&acc);
	assert_int_equal(outer_acc_count(&acc), 0);
	assert_int_equal(outer_acc_merge(&acc, 1.0, out), 0);
	near(out[0], 0.0);
	near(out[1], 0.0);
	assert_int_equal(outer_acc_add(&acc, b, &sqb, 2), 0);
	outer_acc_merge(&acc, 1.0, out);
	near(out[0], 3.0);
	near(out[1], 6.0);
	outer_acc_release(&acc);
}

/* The water filling with folded answers: the same shares as over every
 * weight, and one factor per unit of folded weight. */
static void shares_with_folded_answers(void **state)
{
	/* 100, 40 kept; 6 and 4 folded (10): caps at 0.4 as b above */
	double w[2] = { 100, 40 }, f;
	unsigned char capped[2];

	(void)state;
	assert_int_equal(outer_cap_shares_folded(w, 2, 10, 2, 0.4, capped, &f), 2);
	assert_float_equal(w[0], 0.4, 1e-12);
	assert_float_equal(w[1], 0.4, 1e-12);
	assert_float_equal(f * 10, 0.2, 1e-12);
	/* no cap: plain shares */
	w[0] = 3;
	w[1] = 1;
	assert_int_equal(outer_cap_shares_folded(w, 2, 4, 3, 1.0, capped, &f), 0);
	assert_float_equal(w[0], 3.0 / 8, 1e-12);
	assert_float_equal(f, 1.0 / 8, 1e-12);
	/* nothing at all */
	assert_int_equal(outer_cap_shares_folded(w, 0, 0, 0, 0.5, capped, &f), 0);
	assert_float_equal(f, 0, 0);
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
		cmocka_unit_test(streaming_merge_equals_batch),
		cmocka_unit_test(accumulator_memory_does_not_grow_with_answers),
		cmocka_unit_test(accumulator_refuses_nonfinite_and_clears),
		cmocka_unit_test(shares_with_folded_answers),
		cmocka_unit_test(nesterov_and_plain_steps),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
