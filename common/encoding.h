/*
 * encoding: how a fragment payload travels on the wire.
 *
 *   f32   n × float32, little-endian                        4n bytes
 *   bf16  n × upper 16 bits of float32, round to nearest even  2n bytes
 *   int8  per block of ENC_INT8_BLOCK values:
 *           float32 scale (= max |x| / 127), then the block as int8
 *           (q = round(x / scale)); the last block may be short
 *                                         4·ceil(n/B) + n bytes
 *
 * Error bounds per value: bf16 |x − x'| ≤ 2^-8 |x|; int8 |x − x'| ≤
 * scale/2 of its block. Decoding checks the payload length exactly: a
 * truncated or oversize payload is an error, never a partial fragment.
 * Non-finite input is encoded as is for f32/bf16; int8 refuses it.
 */
#ifndef DDILOCO_ENCODING_H
#define DDILOCO_ENCODING_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

enum payload_enc { ENC_F32 = 0, ENC_BF16 = 1, ENC_INT8 = 2 };

#define ENC_INT8_BLOCK 256

const char *enc_name(enum payload_enc enc);
/* "f32" | "bf16" | "int8" -> 0, else -1 */
int enc_parse(const char *name, enum payload_enc *out);
size_t enc_size(enum payload_enc enc, size_t n);
/* out must hold enc_size(enc, n) bytes. */
int enc_encode(enum payload_enc enc, const float *x, size_t n, uint8_t *out,
	       struct err *e);
int enc_decode(enum payload_enc enc, const uint8_t *in, size_t len, float *x,
	       size_t n, struct err *e);

#endif
