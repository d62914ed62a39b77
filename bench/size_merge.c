/*
 * size_merge: a round of examples/big.yaml's size in the syncer's work,
 * from the answers' arrival to the update ready to leave, against memcpy
 * of the same bytes in the same run.
 *
 * One fragment of 2^28 / 32 = 8M values (big.yaml's), M = 4 int8 answers
 * (encoded beforehand, not timed). Timed, as the syncer does it
 * (docs/syncer.md, Merge): each answer decoded into the accumulator's
 * input, its norms, its fold; then the streaming merge (share cap 0.5),
 * the Nesterov step and the update's bf16 encoding.
 *
 *   size_memcpy_gbps        memcpy of M · 32 MB (4 buffers of a fragment)
 *   size_merge_gbps         M · 32 MB of answers (as f32) over the round's work
 *   size_merge_vs_memcpy    their ratio (goal ≥ 0.3)
 *   size_merge_round_ms     the round's work
 *
 * Best of 5 turns each, in turns (the machine is shared).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/encoding.h"
#include "common/util.h"
#include "syncer/outer.h"

#define F ((size_t)1 << 23)
#define M 4
#define NSEG 9

int main(void)
{
	struct outer_seg seg[NSEG];
	struct outer_acc acc;
	uint8_t *ans[M], *upd = malloc(enc_size(ENC_BF16, F));
	float *x = malloc(F * 4), *theta = malloc(F * 4), *mom = calloc(F, 4),
	      *out = malloc(F * 4), *src = malloc(M * F * 4),
	      *dst = malloc(M * F * 4);
	double sq[NSEG], best_mc = 0, best_t = INFINITY;
	struct rng r;
	struct err e;
	size_t off = 0;

	if (!upd || !x || !theta || !mom || !out || !src || !dst ||
	    outer_acc_init(&acc, F, NSEG, outer_acc_k(0.5, M))) {
		fprintf(stderr, "size_merge: out of memory\n");
		return 1;
	}
	for (int s = 0; s < NSEG; s++) {
		seg[s].offset = off;
		seg[s].numel = s == NSEG - 1 ? F - off : F / NSEG;
		seg[s].is_embedding = s == 0;
		off += seg[s].numel;
	}
	rng_seed(&r, 11);
	for (size_t j = 0; j < F; j++)
		theta[j] = (float)rng_normal(&r);
	for (int i = 0; i < M; i++) {
		for (size_t j = 0; j < F; j++)
			x[j] = (float)rng_normal(&r) * 1e-3f;
		if (!(ans[i] = malloc(enc_size(ENC_INT8, F))) ||
		    enc_encode(ENC_INT8, x, F, ans[i], &e)) {
			fprintf(stderr, "size_merge: cannot encode an answer\n");
			return 1;
		}
	}
	memset(src, 1, M * F * 4);
	memset(dst, 2, M * F * 4);
	for (int rep = 0; rep < 5; rep++) {
		double t = clock_mono();

		memcpy(dst, src, M * F * 4);
		__asm__ volatile("" ::: "memory");
		best_mc = fmax(best_mc, (double)(M * F * 4) / (clock_mono() - t));

		t = clock_mono();
		outer_acc_begin(&acc, OUTER_RDA, seg, NSEG, F);
		for (int i = 0; i < M; i++) {
			float *in = outer_acc_input(&acc);

			if (enc_decode(ENC_INT8, ans[i], enc_size(ENC_INT8, F), in,
				       F, &e)) {
				fprintf(stderr, "size_merge: %s\n", e.msg);
				return 1;
			}
			outer_seg_sqnorms(in, seg, NSEG, sq);
			outer_acc_add(&acc, in, sq, 1000.0 + i);
		}
		outer_acc_merge(&acc, 0.5, out);
		outer_step(theta, mom, out, F, 0.7, 0.9, 1);
		if (enc_encode(ENC_BF16, theta, F, upd, &e)) {
			fprintf(stderr, "size_merge: %s\n", e.msg);
			return 1;
		}
		best_t = fmin(best_t, clock_mono() - t);
	}
	printf("size_memcpy_gbps=%.2f\n", best_mc / 1e9);
	printf("size_merge_gbps=%.2f\n", (double)(M * F * 4) / best_t / 1e9);
	printf("size_merge_vs_memcpy=%.3f\n",
	       (double)(M * F * 4) / best_t / best_mc);
	printf("size_merge_round_ms=%.1f\n", 1e3 * best_t);
	for (int i = 0; i < M; i++)
		free(ans[i]);
	outer_acc_release(&acc);
	free(upd);
	free(x);
	free(theta);
	free(mom);
	free(out);
	free(src);
	free(dst);
	return 0;
}
