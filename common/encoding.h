/*
 * encoding: how a fragment payload travels on the wire (docs/protocol.md
 * draws every layout byte by byte).
 *
 *   f32   n × float32, little-endian                        4n bytes
 *   bf16  n × upper 16 bits of float32, round to nearest even  2n bytes
 *   int8  per block of ENC_INT8_BLOCK values:
 *           float32 scale (= max |x| / 127), then the block as int8
 *           (q = round(x / scale), −127 … 127); the last block may be
 *           short                          4·ceil(n/256) + n bytes
 *   int4  per block of ENC_INT4_BLOCK values:
 *           float32 scale (= max |x| / 7), then the block two values a
 *           byte, value 2j in the low nibble of byte j, 2j+1 in the high
 *           one, each nibble q + 8 (q = round(x / scale), −7 … 7, so 1 …
 *           15); an odd block pads its last high nibble with 0; the last
 *           block may be short           4·ceil(n/32) + ceil(n/2) bytes
 *
 * Error bounds per value: bf16 |x − x'| ≤ max(2^-8 |x|, 2^-134) (the
 * second for subnormal x, where bf16 keeps fewer bits: fuzz_enc found
 * it); int8 and int4 |x − x'| ≤ scale/2 of its block, and |x| for a
 * block sent as zeros (max |x| below qmax · 2^-128). Decoding checks the payload length
 * exactly: a truncated or oversize payload is an error, never a partial
 * fragment; so is a bad scale, an int8 byte −128, an int4 nibble 0 or a
 * padding nibble that is not 0 (no encoder writes them). Non-finite input
 * is encoded as is for f32/bf16; int8 and int4 refuse it.
 *
 * Error feedback (enc_encode_feedback): the encoder side keeps a residual
 * r per fragment and sends enc(x + r), then r ← (x + r) − dec(enc(x + r)),
 * so what the decoder sums over many payloads trails what was given by at
 * most the last residual (docs/protocol.md, error feedback).
 */
#ifndef DDILOCO_ENCODING_H
#define DDILOCO_ENCODING_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/*
 * The wire's numbers: proto/ddiloco/v1/syncer.proto's enum Encoding
 * (ENCODING_F32 = 0 ...), tied to these by _Static_assert in
 * common/wire.c. The names are the CRD's enums of syncer.encoding and
 * syncer.updateEncoding (crds/decoupledtrainingjobs.yaml); make lint
 * checks all three agree.
 */
enum payload_enc { ENC_F32 = 0, ENC_BF16 = 1, ENC_INT8 = 2, ENC_INT4 = 3 };

#define ENC_COUNT 4
#define ENC_INT8_BLOCK 256
#define ENC_INT4_BLOCK 32

const char *enc_name(enum payload_enc enc);
/* "f32" | "bf16" | "int8" | "int4" -> 0, else -1 */
int enc_parse(const char *name, enum payload_enc *out);
/* 1 for an encoding this build knows (a wire number may be anything). */
int enc_known(int enc);
/* 1 for the encodings that lose precision (all but f32). */
int enc_lossy(enum payload_enc enc);
size_t enc_size(enum payload_enc enc, size_t n);
/* out must hold enc_size(enc, n) bytes. */
int enc_encode(enum payload_enc enc, const float *x, size_t n, uint8_t *out,
	       struct err *e);
int enc_decode(enum payload_enc enc, const uint8_t *in, size_t len, float *x,
	       size_t n, struct err *e);
/*
 * Encodes x + r with error feedback. x becomes x + r (what was encoded),
 * out its encoding, dec (n floats) its decoding, and r the part lost:
 * (x + r) − dec, 0 where that is not finite. f32 is exact and leaves r 0.
 * On an error (int8 or int4 given a non-finite x + r) r is set to 0, x is
 * x + r and out is undefined.
 */
int enc_encode_feedback(enum payload_enc enc, float *x, float *r, size_t n,
			uint8_t *out, float *dec, struct err *e);

#endif
