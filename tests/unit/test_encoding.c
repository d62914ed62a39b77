/* Payload encodings: sizes, error bounds, bad lengths, the int4 layout
 * byte by byte, garbled payloads, and error feedback over many rounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/encoding.h"
#include "tests/unit/testlib.h"

#define N 1000

static void fill(float *x)
{
	for (int i = 0; i < N; i++)
		x[i] = sinf((float)i * 0.37f) * (1.0f + (float)(i % 7));
}

static void f32_is_exact(void **state)
{
	float x[N], y[N];
	uint8_t buf[4 * N];

	(void)state;
	fill(x);
	assert_int_equal(enc_size(ENC_F32, N), 4 * N);
	assert_int_equal(enc_encode(ENC_F32, x, N, buf, NULL), 0);
	assert_int_equal(enc_decode(ENC_F32, buf, sizeof(buf), y, N, NULL), 0);
	assert_memory_equal(x, y, sizeof(x));
}

static void bf16_within_relative_bound(void **state)
{
	float x[N], y[N];
	uint8_t buf[2 * N];

	(void)state;
	fill(x);
	assert_int_equal(enc_encode(ENC_BF16, x, N, buf, NULL), 0);
	assert_int_equal(enc_decode(ENC_BF16, buf, sizeof(buf), y, N, NULL), 0);
	for (int i = 0; i < N; i++)
		assert_at_most(fabsf(x[i] - y[i]), ldexpf(fabsf(x[i]), -8));
	/* 1 + 2^-9 rounds to even (1.0); 1 + 3·2^-9 rounds up */
	x[0] = 1.0f + ldexpf(1, -9);
	x[1] = 1.0f + 3 * ldexpf(1, -9);
	enc_encode(ENC_BF16, x, 2, buf, NULL);
	enc_decode(ENC_BF16, buf, 4, y, 2, NULL);
	assert_exactly(y[0], 1.0f);
	assert_exactly(y[1], 1.0f + ldexpf(1, -7));
}

static void int8_within_half_scale(void **state)
{
	float x[N], y[N];
	size_t sz = enc_size(ENC_INT8, N);
	uint8_t *buf = malloc(sz);

	(void)state;
	fill(x);
	assert_int_equal(sz, 4 * 4 + N);
	assert_int_equal(enc_encode(ENC_INT8, x, N, buf, NULL), 0);
	assert_int_equal(enc_decode(ENC_INT8, buf, sz, y, N, NULL), 0);
	for (int b = 0; b < N; b += ENC_INT8_BLOCK) {
		float amax = 0;
		int m = N - b < ENC_INT8_BLOCK ? N - b : ENC_INT8_BLOCK;
		for (int i = 0; i < m; i++)
			amax = fmaxf(amax, fabsf(x[b + i]));
		for (int i = 0; i < m; i++)
			assert_at_most(fabsf(x[b + i] - y[b + i]),
				       amax / 127.0f * 0.5f * 1.0001f);
	}
	x[5] = NAN;
	assert_int_equal(enc_encode(ENC_INT8, x, N, buf, NULL), -1);
	free(buf);
}

static void wrong_lengths_rejected(void **state)
{
	float x[N];
	uint8_t buf[4 * N + 4] = { 0 };
	struct err e;

	(void)state;
	assert_int_equal(enc_decode(ENC_F32, buf, 4 * N - 1, x, N, &e), -1);
	assert_string_equal(e.msg, "encoding: f32 payload of 3999 bytes for 1000 values, expected 4000 bytes");
	assert_int_equal(enc_decode(ENC_BF16, buf, 2 * N + 2, x, N, &e), -1);
	assert_int_equal(enc_decode(ENC_INT8, buf, N, x, N, &e), -1);
	assert_int_equal(enc_decode((enum payload_enc)7, buf, N, x, N, &e), -1);
}

/* The int4 layout of docs/protocol.md, one short odd block. */
static void int4_layout_is_exact(void **state)
{
	const float x[5] = { 1.75f, -0.8f, 0.3f, 0.0f, -1.5f };
	/* scale 0.25 (1.75 / 7), q = 7 −3 1 0 −6, nibbles q + 8 */
	const uint8_t want[7] = { 0x00, 0x00, 0x80, 0x3e, 0x5f, 0x89, 0x02 };
	const float back[5] = { 1.75f, -0.75f, 0.25f, 0.0f, -1.5f };
	uint8_t buf[7];
	float y[5];

	(void)state;
	assert_int_equal(enc_size(ENC_INT4, 5), 7);
	assert_int_equal(enc_encode(ENC_INT4, x, 5, buf, NULL), 0);
	assert_memory_equal(buf, want, 7);
	assert_int_equal(enc_decode(ENC_INT4, buf, 7, y, 5, NULL), 0);
	assert_memory_equal(y, back, sizeof(back));
	assert_int_equal(enc_size(ENC_INT4, 0), 0);
	assert_int_equal(enc_size(ENC_INT4, 1), 5);
	assert_int_equal(enc_size(ENC_INT4, 32), 20);
	assert_int_equal(enc_size(ENC_INT4, 33), 4 + 16 + 4 + 1);
	assert_int_equal(enc_size(ENC_INT4, 70), 12 + 35);
	assert_string_equal(enc_name(ENC_INT4), "int4");
}

/* Three blocks (32, 32, 6), the second all zeros; within scale/2. */
static void int4_blocks_within_half_scale(void **state)
{
	enum { M = 70 };
	float x[M], y[M];
	uint8_t buf[47];

	(void)state;
	for (int i = 0; i < M; i++)
		x[i] = i >= 32 && i < 64 ? 0.0f : sinf((float)i) * (1 + i % 5);
	assert_int_equal(enc_size(ENC_INT4, M), sizeof(buf));
	assert_int_equal(enc_encode(ENC_INT4, x, M, buf, NULL), 0);
	/* the zero block: scale 0, every nibble 8 */
	for (int i = 0; i < 4; i++)
		assert_int_equal(buf[20 + i], 0);
	for (int i = 0; i < 16; i++)
		assert_int_equal(buf[24 + i], 0x88);
	assert_int_equal(enc_decode(ENC_INT4, buf, sizeof(buf), y, M, NULL), 0);
	for (int b = 0; b < M; b += ENC_INT4_BLOCK) {
		int m = M - b < ENC_INT4_BLOCK ? M - b : ENC_INT4_BLOCK;
		float amax = 0;

		for (int i = 0; i < m; i++)
			amax = fmaxf(amax, fabsf(x[b + i]));
		for (int i = 0; i < m; i++)
			assert_at_most(fabsf(x[b + i] - y[b + i]),
				       amax / 7.0f * 0.5f * 1.0001f);
	}
	for (int i = 32; i < 64; i++)
		assert_exactly(y[i], 0.0f);
}

static void int4_refuses_bad_input(void **state)
{
	float x[40] = { 0 }, y[40];
	uint8_t buf[64];
	struct err e;

	(void)state;
	x[35] = INFINITY;
	assert_int_equal(enc_encode(ENC_INT4, x, 40, buf, &e), -1);
	assert_string_equal(e.msg, "encoding: int4 cannot hold the non-finite value at 35");
	x[35] = NAN;
	assert_int_equal(enc_encode(ENC_INT4, x, 40, buf, &e), -1);
	x[35] = 1.0f;
	assert_int_equal(enc_encode(ENC_INT4, x, 40, buf, NULL), 0);
	/* 4 + 16 + 4 + 4 = 28 bytes: truncated and oversize */
	assert_int_equal(enc_decode(ENC_INT4, buf, 27, y, 40, &e), -1);
	assert_string_equal(e.msg, "encoding: int4 payload of 27 bytes for 40 values, expected 28 bytes");
	assert_int_equal(enc_decode(ENC_INT4, buf, 29, y, 40, &e), -1);
	assert_int_equal(enc_decode(ENC_INT4, buf, 28, y, 40, NULL), 0);
	assert_exactly(y[35], 1.0f);
	/* a nibble 0 */
	buf[26] &= 0xf0;
	assert_int_equal(enc_decode(ENC_INT4, buf, 28, y, 40, &e), -1);
	assert_string_equal(e.msg, "encoding: int4 value 36 is nibble 0, which no encoder writes");
	/* a bad scale */
	assert_int_equal(enc_encode(ENC_INT4, x, 40, buf, NULL), 0);
	memcpy(buf + 20, &(float){ NAN }, 4);
	assert_int_equal(enc_decode(ENC_INT4, buf, 28, y, 40, &e), -1);
	assert_string_equal(e.msg, "encoding: int4 block 1 has a bad scale");
	memcpy(buf + 20, &(float){ -1.0f }, 4);
	assert_int_equal(enc_decode(ENC_INT4, buf, 28, y, 40, &e), -1);
	/* padding of an odd block */
	assert_int_equal(enc_encode(ENC_INT4, x, 39, buf, NULL), 0);
	assert_int_equal(enc_size(ENC_INT4, 39), 28);
	assert_int_equal(buf[27] >> 4, 0);
	buf[27] |= 0x80;
	assert_int_equal(enc_decode(ENC_INT4, buf, 28, y, 39, &e), -1);
	assert_string_equal(e.msg, "encoding: int4 block 1 ends in a padding nibble that is not 0");
}

static void int8_refuses_garbled(void **state)
{
	float x[10] = { 1, 2, 3 }, y[10];
	uint8_t buf[14];
	struct err e;

	(void)state;
	assert_int_equal(enc_encode(ENC_INT8, x, 10, buf, NULL), 0);
	assert_int_equal((int8_t)buf[6], 127);
	buf[6] = 0x80;
	assert_int_equal(enc_decode(ENC_INT8, buf, 14, y, 10, &e), -1);
	assert_string_equal(e.msg, "encoding: int8 value 2 is -128, which no encoder writes");
}

/* A block of values with no exact image in any lossy encoding. */
#define FB_N 40
#define FB_ROUNDS 2000

static void fb_delta(float *d)
{
	for (int i = 0; i < FB_N; i++)
		d[i] = 0.01f * (0.3f + (float)((i * 37) % 41) / 41.0f) *
		       (i % 3 ? 1.0f : -1.0f);
}

/* One quantization step of x for enc: the spacing of its grid. */
static double fb_step(enum payload_enc enc, const float *x, int i)
{
	float amax = 0;

	for (int j = 0; j < FB_N; j++)
		amax = fmaxf(amax, fabsf(x[j]));
	switch (enc) {
	case ENC_BF16: {
		int ex;

		frexp(x[i], &ex);   /* |x| in [2^(ex-1), 2^ex): 8 bits kept */
		return ldexp(1.0, ex - 8);
	}
	case ENC_INT8:
		return amax / 127.0;
	case ENC_INT4:
		return amax / 7.0;
	default:
		return 0;
	}
}

/*
 * The largest |Σ decoded − Σ Δ| over FB_ROUNDS rounds of a constant Δ,
 * in quantization steps, with or without the residual.
 */
static double fb_drift(enum payload_enc enc, int feedback)
{
	float d[FB_N], x[FB_N], r[FB_N] = { 0 }, dec[FB_N];
	double sum[FB_N] = { 0 }, worst = 0;
	uint8_t buf[4 * FB_N];

	fb_delta(d);
	for (int t = 1; t <= FB_ROUNDS; t++) {
		memcpy(x, d, sizeof(x));
		if (feedback) {
			assert_int_equal(enc_encode_feedback(enc, x, r, FB_N, buf,
							     dec, NULL), 0);
		} else {
			assert_int_equal(enc_encode(enc, x, FB_N, buf, NULL), 0);
			assert_int_equal(enc_decode(enc, buf, enc_size(enc, FB_N),
						    dec, FB_N, NULL), 0);
		}
		for (int i = 0; i < FB_N; i++)
			sum[i] += dec[i];
	}
	for (int i = 0; i < FB_N; i++) {
		double off = fabs(sum[i] - (double)FB_ROUNDS * d[i]);

		worst = fmax(worst, off / fb_step(enc, d, i));
	}
	return worst;
}

/* docs/protocol.md, error feedback: with it the sum of the decoded
 * answers stays within one step of the sum of the true ones; without it
 * the per-round error adds up. */
static void feedback_tracks_the_sum(void **state)
{
	const enum payload_enc lossy[] = { ENC_BF16, ENC_INT8, ENC_INT4 };

	(void)state;
	for (int k = 0; k < 3; k++) {
		double with = fb_drift(lossy[k], 1), without = fb_drift(lossy[k], 0);

		print_message("%s: drift %.3f steps with feedback, %.1f without\n",
			      enc_name(lossy[k]), with, without);
		assert_at_most(with, 1.0);
		assert_greater(without, 50.0);
	}
}

static void feedback_f32_and_non_finite(void **state)
{
	float x[4] = { 1, 2, 3, 4 }, r[4] = { 0.5f, 0, 0, 0 }, dec[4];
	uint8_t buf[16];

	(void)state;
	/* f32: the residual is sent along and becomes 0 */
	assert_int_equal(enc_encode_feedback(ENC_F32, x, r, 4, buf, dec, NULL), 0);
	assert_exactly(dec[0], 1.5f);
	assert_exactly(r[0], 0.0f);
	/* int8 refuses a NaN: x keeps x + r, the residual is dropped */
	x[1] = NAN;
	r[0] = 0.25f;
	assert_int_equal(enc_encode_feedback(ENC_INT8, x, r, 4, buf, dec, NULL), -1);
	assert_exactly(x[0], 1.75f);
	assert_exactly(r[0], 0.0f);
	/* bf16 carries inf as is; no residual is kept for it */
	x[1] = INFINITY;
	x[2] = 1.0f + ldexpf(1, -9) * 3;
	assert_int_equal(enc_encode_feedback(ENC_BF16, x, r, 4, buf, dec, NULL), 0);
	assert_exactly(dec[1], INFINITY);
	assert_exactly(r[1], 0.0f);
	assert_exactly(r[2], -ldexpf(1, -9));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(f32_is_exact),
		cmocka_unit_test(bf16_within_relative_bound),
		cmocka_unit_test(int8_within_half_scale),
		cmocka_unit_test(wrong_lengths_rejected),
		cmocka_unit_test(int4_layout_is_exact),
		cmocka_unit_test(int4_blocks_within_half_scale),
		cmocka_unit_test(int4_refuses_bad_input),
		cmocka_unit_test(int8_refuses_garbled),
		cmocka_unit_test(feedback_tracks_the_sum),
		cmocka_unit_test(feedback_f32_and_non_finite),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
