/*
 * bench_syncer: how fast the syncer merges.
 *
 *   syncer_memcpy_gbps              memcpy bandwidth in this run, 64 MiB buffers
 *   syncer_merge_vs_memcpy_m<M>     merge throughput over memcpy bandwidth for
 *                                   M answers of one 1M-parameter fragment:
 *                                   per answer as it arrives (in the buffer it
 *                                   was decoded into) its norms and its fold,
 *                                   then the streaming RDA merge (share cap
 *                                   0.5) and the Nesterov step,
 *                                   counted as M·4 MB of answers per merge
 *   syncer_merge_vs_memcpy          the smaller of the two (target ≥ 0.5)
 *
 * Rounds with real learners on loopback gRPC, at M = 16 and 1000: see
 * bench/syncer_scale.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "syncer/outer.h"

/* ---- merge against memcpy ------------------------------------------------ */

/*
 * Both sides work on data that does not fit in cache: memcpy copies a
 * 64 MiB buffer; a merge reads M answers of 4 MiB. The machine is shared,
 * so the two are measured in turns and the best of several turns counts.
 */
#define N (1u << 20)
#define NSEG 9
#define MC_BYTES (64u << 20)

struct merge_set {
	int M;
	struct outer_seg seg[NSEG];
	float **x, *theta, *mom, *out;
	double *w, *sq;
	struct outer_acc acc;
};

static void merge_set_init(struct merge_set *m, int M, struct rng *r)
{
	size_t off = 0;

	m->M = M;
	/* an embedding and eight equal tensors, like a model's fragment */
	for (int s = 0; s < NSEG; s++) {
		m->seg[s].offset = off;
		m->seg[s].numel = s == NSEG - 1 ? N - off : N / NSEG;
		m->seg[s].is_embedding = s == 0;
		off += m->seg[s].numel;
	}
	m->x = malloc((size_t)M * sizeof(*m->x));
	m->theta = malloc(N * 4);
	m->mom = malloc(N * 4);
	m->out = malloc(N * 4);
	m->w = malloc((size_t)M * sizeof(double));
	m->sq = malloc((size_t)M * NSEG * sizeof(double));
	if (outer_acc_init(&m->acc, N, NSEG, outer_acc_k(0.5, M))) {
		fprintf(stderr, "bench_syncer: out of memory\n");
		exit(1);
	}
	for (int i = 0; i < M; i++) {
		m->x[i] = malloc(N * 4);
		for (size_t j = 0; j < N; j++)
			m->x[i][j] = (float)rng_normal(r) * 1e-3f;
		m->w[i] = 1000.0 + i;
	}
	for (size_t j = 0; j < N; j++) {
		m->theta[j] = (float)rng_normal(r);
		m->mom[j] = 0;
		m->out[j] = 0;
	}
}

static void merge_set_release(struct merge_set *m)
{
	for (int i = 0; i < m->M; i++)
		free(m->x[i]);
	free(m->x);
	free(m->theta);
	free(m->mom);
	free(m->out);
	free(m->w);
	free(m->sq);
	outer_acc_release(&m->acc);
}

/*
 * One merge as the syncer does it (docs/syncer.md, Merge): each answer
 * lands in the accumulator's input buffer (the syncer decodes it there;
 * here a copy, not timed, as the decode was not before), then its norms
 * and its fold (or kept, the heaviest one at maxShare 0.5) are timed as
 * it comes; then the merge with the cap and the Nesterov step. Returns
 * answer bytes per second of timed work.
 */
static double merge_once(struct merge_set *m)
{
	double t = 0, t0;

	outer_acc_begin(&m->acc, OUTER_RDA, m->seg, NSEG, N);
	for (int i = 0; i < m->M; i++) {
		float *in = outer_acc_input(&m->acc);
		double *sq = m->sq + (size_t)i * NSEG;

		memcpy(in, m->x[i], N * sizeof(float));
		t0 = clock_mono();
		outer_seg_sqnorms(in, m->seg, NSEG, sq);
		outer_acc_add(&m->acc, in, sq, m->w[i]);
		t += clock_mono() - t0;
	}
	t0 = clock_mono();
	outer_acc_merge(&m->acc, 0.5, m->out);
	outer_step(m->theta, m->mom, m->out, N, 0.7, 0.9, 1);
	t += clock_mono() - t0;
	return (double)m->M * N * 4 / t;
}

static double memcpy_once(char *dst, const char *src)
{
	double t = clock_mono();

	memcpy(dst, src, MC_BYTES);
	__asm__ volatile("" ::: "memory");
	return MC_BYTES / (clock_mono() - t);
}

int main(void)
{
	char *src = malloc(MC_BYTES), *dst = malloc(MC_BYTES);
	struct merge_set m4, m16;
	double mc = 0, b4 = 0, b16 = 0, r4, r16;
	struct rng r;

	memset(src, 1, MC_BYTES);
	memset(dst, 2, MC_BYTES);
	rng_seed(&r, 7);
	merge_set_init(&m4, 4, &r);
	merge_set_init(&m16, 16, &r);
	for (int rep = 0; rep < 9; rep++) {
		mc = fmax(mc, memcpy_once(dst, src));
		b4 = fmax(b4, merge_once(&m4));
		b16 = fmax(b16, merge_once(&m16));
	}
	r4 = b4 / mc;
	r16 = b16 / mc;
	printf("syncer_memcpy_gbps=%.2f\n", mc / 1e9);
	printf("syncer_merge_gbps_m4=%.2f\n", b4 / 1e9);
	printf("syncer_merge_gbps_m16=%.2f\n", b16 / 1e9);
	printf("syncer_merge_vs_memcpy_m4=%.3f\n", r4);
	printf("syncer_merge_vs_memcpy_m16=%.3f\n", r16);
	printf("syncer_merge_vs_memcpy=%.3f\n", r4 < r16 ? r4 : r16);
	merge_set_release(&m4);
	merge_set_release(&m16);
	free(src);
	free(dst);
	return 0;
}
