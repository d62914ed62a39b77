/* encoding: f32, bf16 and block-scaled int8 payloads; see encoding.h. */
#include "common/encoding.h"

#include <math.h>
#include <string.h>

static const char *names[] = { "f32", "bf16", "int8" };

const char *enc_name(enum payload_enc enc)
{
	return (unsigned)enc < 3 ? names[enc] : "unknown";
}

int enc_parse(const char *name, enum payload_enc *out)
{
	for (int i = 0; i < 3; i++)
		if (!strcmp(name, names[i])) {
			*out = (enum payload_enc)i;
			return 0;
		}
	return -1;
}

size_t enc_size(enum payload_enc enc, size_t n)
{
	switch (enc) {
	case ENC_F32:
		return 4 * n;
	case ENC_BF16:
		return 2 * n;
	case ENC_INT8:
		return 4 * ((n + ENC_INT8_BLOCK - 1) / ENC_INT8_BLOCK) + n;
	}
	return 0;
}

static uint16_t to_bf16(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	if ((u & 0x7f800000u) == 0x7f800000u)   /* inf/nan: keep, quiet nan */
		return (uint16_t)(u >> 16) | ((u & 0xffff) ? 0x40 : 0);
	u += 0x7fff + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;

	memcpy(&f, &u, 4);
	return f;
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
		for (size_t b = 0; b < n; b += ENC_INT8_BLOCK) {
			size_t m = n - b < ENC_INT8_BLOCK ? n - b : ENC_INT8_BLOCK;
			float amax = 0, scale, inv;
			for (size_t i = 0; i < m; i++) {
				if (!isfinite(x[b + i]))
					return err_set(e, "encoding: int8 cannot hold the non-finite value at %zu",
						       b + i);
				amax = fmaxf(amax, fabsf(x[b + i]));
			}
			scale = amax / 127.0f;
			inv = scale > 0 ? 1.0f / scale : 0.0f;
			memcpy(out, &scale, 4);
			out += 4;
			for (size_t i = 0; i < m; i++) {
				float q = roundf(x[b + i] * inv);
				q = fminf(127.0f, fmaxf(-127.0f, q));
				*out++ = (uint8_t)(int8_t)q;
			}
		}
		return 0;
	}
	return err_set(e, "encoding: unknown encoding %d", (int)enc);
}

int enc_decode(enum payload_enc enc, const uint8_t *in, size_t len, float *x,
	       size_t n, struct err *e)
{
	size_t want = enc_size(enc, n);

	if ((unsigned)enc > ENC_INT8)
		return err_set(e, "encoding: unknown encoding %d", (int)enc);
	if (len != want)
		return err_set(e, "encoding: %s payload of %zu bytes for %zu values, expected %zu bytes",
			       enc_name(enc), len, n, want);
	switch (enc) {
	case ENC_F32:
		memcpy(x, in, 4 * n);
		break;
	case ENC_BF16:
		for (size_t i = 0; i < n; i++) {
			uint16_t h;
			memcpy(&h, in + 2 * i, 2);
			x[i] = from_bf16(h);
		}
		break;
	case ENC_INT8:
		for (size_t b = 0; b < n; b += ENC_INT8_BLOCK) {
			size_t m = n - b < ENC_INT8_BLOCK ? n - b : ENC_INT8_BLOCK;
			float scale;
			memcpy(&scale, in, 4);
			in += 4;
			if (!isfinite(scale) || scale < 0)
				return err_set(e, "encoding: int8 block %zu has a bad scale",
					       b / ENC_INT8_BLOCK);
			for (size_t i = 0; i < m; i++)
				x[b + i] = (float)(int8_t)*in++ * scale;
		}
		break;
	}
	return 0;
}
