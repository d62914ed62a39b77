/* Payload encodings: sizes, error bounds, bad lengths. */
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(f32_is_exact),
		cmocka_unit_test(bf16_within_relative_bound),
		cmocka_unit_test(int8_within_half_scale),
		cmocka_unit_test(wrong_lengths_rejected),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
