/* encoding: f32, bf16, block-scaled int8 and int4 payloads, error
 * feedback; see encoding.h and docs/protocol.md. */
#include "common/encoding.h"

#include <math.h>
#include <string.h>

static const char *names[ENC_COUNT] = { "f32", "bf16", "int8", "int4" };

const char *enc_name(enum payload_enc enc)
{
	return enc_known((int)enc) ? names[enc] : "unknown";
}

int enc_parse(const char *name, enum payload_enc *out)
{
	for (int i = 0; i < ENC_COUNT; i++)
		if (!strcmp(name, names[i])) {
			*out = (enum payload_enc)i;
			return 0;
		}
	return -1;
}

int enc_known(int enc)
{
	return enc >= 0 && enc < ENC_COUNT;
}

int enc_lossy(enum payload_enc enc)
{
	return enc != ENC_F32;
}

static size_t nblocks(size_t n, size_t b)
{
	return (n + b - 1) / b;
}

size_t enc_size(enum payload_enc enc, size_t n)
{
	switch (enc) {
	case ENC_F32:
		return 4 * n;
	case ENC_BF16:
		return 2 * n;
	case ENC_INT8:
		return 4 * nblocks(n, ENC_INT8_BLOCK) + n;
	case ENC_INT4:
		/* every block but the last has an even length */
		return 4 * nblocks(n, ENC_INT4_BLOCK) + (n + 1) / 2;
	}
	return 0;
}

/* inf/nan kept, a nan quieted; else rounded to the nearest even, with
 * no branch, so that the loop vectorizes */
static uint16_t to_bf16(float f)
{
	uint32_t u, keep, round;

	memcpy(&u, &f, 4);
	keep = (u >> 16) | ((u & 0xffff) ? 0x40u : 0u);
	round = (u + 0x7fff + ((u >> 16) & 1)) >> 16;
	return (uint16_t)((u & 0x7f800000u) == 0x7f800000u ? keep : round);
}

static float from_bf16(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;

	memcpy(&f, &u, 4);
	return f;
}

/*
 * The scale of the block x[0..m) for integers up to qmax: max |x| / qmax,
 * written at out; *inv is its inverse (0 for an all-zero block). -1 at
 * the first non-finite value (*bad is its index).
 */
static int block_scale(const float *x, size_t m, float qmax, uint8_t *out,
		       float *inv, size_t *bad)
{
	float amax = 0, scale;

	for (size_t i = 0; i < m; i++) {
		if (!isfinite(x[i])) {
			*bad = i;
			return -1;
		}
		amax = fmaxf(amax, fabsf(x[i]));
	}
	scale = amax / qmax;
	*inv = scale > 0 ? 1.0f / scale : 0.0f;
	if (!isfinite(*inv))   /* |x| < qmax · 2^-128: sent as zeros */
		scale = *inv = 0.0f;
	memcpy(out, &scale, 4);
	return 0;
}

static int quant(float x, float inv, float qmax)
{
	return (int)fminf(qmax, fmaxf(-qmax, roundf(x * inv)));
}

static int encode_int8(const float *x, size_t n, uint8_t *out, struct err *e)
{
	for (size_t b = 0; b < n; b += ENC_INT8_BLOCK) {
		size_t m = n - b < ENC_INT8_BLOCK ? n - b : ENC_INT8_BLOCK, bad;
		float inv;

		if (block_scale(x + b, m, 127.0f, out, &inv, &bad))
			return err_set(e, "encoding: int8 cannot hold the "
				       "non-finite value at %zu", b + bad);
		out += 4;
		for (size_t i = 0; i < m; i++)
			*out++ = (uint8_t)(int8_t)quant(x[b + i], inv, 127.0f);
	}
	return 0;
}

static int encode_int4(const float *x, size_t n, uint8_t *out, struct err *e)
{
	for (size_t b = 0; b < n; b += ENC_INT4_BLOCK) {
		size_t m = n - b < ENC_INT4_BLOCK ? n - b : ENC_INT4_BLOCK, bad;
		float inv;

		if (block_scale(x + b, m, 7.0f, out, &inv, &bad))
			return err_set(e, "encoding: int4 cannot hold the "
				       "non-finite value at %zu", b + bad);
		out += 4;
		for (size_t i = 0; i < m; i += 2) {
			unsigned lo = (unsigned)(quant(x[b + i], inv, 7.0f) + 8);
			unsigned hi = i + 1 < m ?
				(unsigned)(quant(x[b + i + 1], inv, 7.0f) + 8) : 0;
			*out++ = (uint8_t)(lo | hi << 4);
		}
	}
	return 0;
}

int enc_encode(enum payload_enc enc, const float *x, size_t n, uint8_t *out,
	       struct err *e)
{
	switch (enc) {
	case ENC_F32:
		memcpy(out, x, 4 * n);
		return 0;
	case ENC_BF16:
		for (size_t i = 0; i < n; i++) {
			uint16_t h = to_bf16(x[i]);
			memcpy(out + 2 * i, &h, 2);
		}
		return 0;
	case ENC_INT8:
		return encode_int8(x, n, out, e);
	case ENC_INT4:
		return encode_int4(x, n, out, e);
	}
	return err_set(e, "encoding: unknown encoding %d", (int)enc);
}

/* The scale at in, for block k of an encoding named name. */
static int read_scale(const uint8_t *in, const char *name, size_t k,
		      float *scale, struct err *e)
{
	memcpy(scale, in, 4);
	if (!isfinite(*scale) || *scale < 0)
		return err_set(e, "encoding: %s block %zu has a bad scale",
			       name, k);
	return 0;
}

static int decode_int8(const uint8_t *in, float *x, size_t n, struct err *e)
{
	for (size_t b = 0; b < n; b += ENC_INT8_BLOCK) {
		size_t m = n - b < ENC_INT8_BLOCK ? n - b : ENC_INT8_BLOCK;
		float scale;
		int bad = 0;

		if (read_scale(in, "int8", b / ENC_INT8_BLOCK, &scale, e))
			return -1;
		in += 4;
		/* -128 checked after the block, so that the loop vectorizes */
		for (size_t i = 0; i < m; i++) {
			int8_t q = (int8_t)in[i];

			bad |= q == -128;
			x[b + i] = (float)q * scale;
		}
		for (size_t i = 0; bad && i < m; i++)
			if ((int8_t)in[i] == -128)
				return err_set(e, "encoding: int8 value %zu is "
					       "-128, which no encoder writes",
					       b + i);
		in += m;
	}
	return 0;
}

static int decode_int4(const uint8_t *in, float *x, size_t n, struct err *e)
{
	for (size_t b = 0; b < n; b += ENC_INT4_BLOCK) {
		size_t m = n - b < ENC_INT4_BLOCK ? n - b : ENC_INT4_BLOCK;
		float scale;

		if (read_scale(in, "int4", b / ENC_INT4_BLOCK, &scale, e))
			return -1;
		in += 4;
		for (size_t i = 0; i < m; i++) {
			unsigned nib = i & 1 ? in[i / 2] >> 4 : in[i / 2] & 15u;

			if (!nib)
				return err_set(e, "encoding: int4 value %zu is "
					       "nibble 0, which no encoder writes",
					       b + i);
			x[b + i] = (float)((int)nib - 8) * scale;
		}
		if ((m & 1) && in[m / 2] >> 4)
			return err_set(e, "encoding: int4 block %zu ends in a "
				       "padding nibble that is not 0",
				       b / ENC_INT4_BLOCK);
		in += (m + 1) / 2;
	}
	return 0;
}

int enc_decode(enum payload_enc enc, const uint8_t *in, size_t len, float *x,
	       size_t n, struct err *e)
{
	size_t want;

	if (!enc_known((int)enc))
		return err_set(e, "encoding: unknown encoding %d", (int)enc);
	want = enc_size(enc, n);
	if (len != want)
		return err_set(e, "encoding: %s payload of %zu bytes for %zu values, expected %zu bytes",
			       enc_name(enc), len, n, want);
	switch (enc) {
	case ENC_F32:
		memcpy(x, in, 4 * n);
		return 0;
	case ENC_BF16:
		for (size_t i = 0; i < n; i++) {
			uint16_t h;
			memcpy(&h, in + 2 * i, 2);
			x[i] = from_bf16(h);
		}
		return 0;
	case ENC_INT8:
		return decode_int8(in, x, n, e);
	case ENC_INT4:
		return decode_int4(in, x, n, e);
	}
	return 0;
}

int enc_encode_feedback(enum payload_enc enc, float *x, float *r, size_t n,
			uint8_t *out, float *dec, struct err *e)
{
	for (size_t i = 0; i < n; i++)
		x[i] += r[i];
	if (enc_encode(enc, x, n, out, e) ||
	    enc_decode(enc, out, enc_size(enc, n), dec, n, e)) {
		memset(r, 0, n * sizeof(float));
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		float d = x[i] - dec[i];

		r[i] = isfinite(d) ? d : 0.0f;
	}
	return 0;
}
