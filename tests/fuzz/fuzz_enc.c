/*
 * fuzz_enc: the payload encoders and decoders (common/encoding.c) at the
 * sizes fragments have, up to 2^20 values (4 MiB of float32), on values
 * the fuzzer chooses: every encoding encodes and decodes the same
 * array.
 *
 * Input: bytes 0 and 1 give the count, n = 1 + (b0 | b1 << 8) · 16
 * (up to 1,048,561); the rest, read as little-endian float32 and
 * repeated until n values, is the array (no rest: all zeros); a value
 * whose index is a multiple of 4099 is scaled by 2^(b2 mod 64 − 32), so
 * blocks mix magnitudes.
 *
 * What must hold (encoding.h's bounds): enc_size is the bytes written;
 * f32 and bf16 take every array, int8 and int4 exactly the finite ones;
 * what encodes decodes; f32 gives back the same bits; bf16 |x − x'| ≤
 * 2^-8 |x| for finite x whose rounding stays finite, the same
 * infinities, and NaN for NaN (2^-134 for a subnormal x: this harness
 * found that bound missing from encoding.h); int8 and int4 |x − x'| ≤
 * scale/2 of the block (scale = max |x| / 127 or / 7), with one float
 * rounding of slack, and |x| for a block sent as zeros (max |x| below
 * qmax · 2^-128). A payload one byte short or long is refused.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/encoding.h"
#include "tests/fuzz/fuzz_init.h"

const char fuzz_name[] = "enc";

#define NMAX (1 + 0xffff * 16)

static float x[NMAX], y[NMAX];
static uint8_t buf[4 * NMAX + 64];

static int all_finite(size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!isfinite(x[i]))
			return 0;
	return 1;
}

static void check_bf16(size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (isnan(x[i])) {
			if (!isnan(y[i]))
				abort();
		} else if (isinf(x[i]) || isinf(y[i])) {
			/* an infinity stays one; a finite value may round
			 * past the largest bf16 */
			if (isinf(x[i]) && y[i] != x[i])
				abort();
			if (!isinf(x[i]) && fabsf(x[i]) < 3.38e38f)
				abort();
		} else if (fabs((double)x[i] - y[i]) >
			   fmax(ldexp(fabs((double)x[i]), -8), ldexp(1, -134))) {
			abort();
		}
	}
}

static void check_blocks(size_t n, size_t block, double levels)
{
	for (size_t b = 0; b < n; b += block) {
		size_t e = b + block < n ? b + block : n;
		double mx = 0, scale;

		for (size_t i = b; i < e; i++)
			mx = fmax(mx, fabs((double)x[i]));
		scale = (double)(float)(mx / levels);
		for (size_t i = b; i < e; i++) {
			double err = fabs((double)x[i] - y[i]);

			if (mx < levels * ldexp(1, -128) ? err > fabs((double)x[i])
			    : err > scale / 2 * (1 + 1e-5) + 1e-6 * mx)
				abort();
		}
	}
}

static void one(enum payload_enc enc, size_t n)
{
	size_t len = enc_size(enc, n);
	int fin = all_finite(n);
	int rc;

	memset(buf, 0xa5, len + 8);
	rc = enc_encode(enc, x, n, buf, NULL);
	if ((rc == 0) != (enc == ENC_F32 || enc == ENC_BF16 || fin))
		abort();
	if (rc)
		return;
	if (buf[len] != 0xa5)   /* nothing past enc_size */
		abort();
	if (enc_decode(enc, buf, len, y, n, NULL))
		abort();
	if (!enc_decode(enc, buf, len - 1, y, n, NULL) ||
	    !enc_decode(enc, buf, len + 1, y, n, NULL))
		abort();
	if (enc_decode(enc, buf, len, y, n, NULL))
		abort();
	switch (enc) {
	case ENC_F32:
		if (memcmp(x, y, 4 * n))
			abort();
		break;
	case ENC_BF16:
		check_bf16(n);
		break;
	case ENC_INT8:
		check_blocks(n, ENC_INT8_BLOCK, 127);
		break;
	case ENC_INT4:
		check_blocks(n, ENC_INT4_BLOCK, 7);
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t n, m;

	if (size < 3)
		return 0;
	n = 1 + ((size_t)data[0] | (size_t)data[1] << 8) * 16;
	m = (size - 3) / 4;
	for (size_t i = 0; i < n; i++) {
		if (m) {
			memcpy(&x[i], data + 3 + 4 * (i % m), 4);
		} else {
			x[i] = 0;
		}
		if (i % 4099 == 0)
			x[i] = ldexpf(x[i], (int)(data[2] % 64) - 32);
	}
	for (int enc = 0; enc < ENC_COUNT; enc++)
		one((enum payload_enc)enc, n);
	return 0;
}
