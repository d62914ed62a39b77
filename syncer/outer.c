/*
 * outer: weights, screening, merge and the Nesterov step (see outer.h).
 *
 * The merge is memory-bound: every answer is read once for its norms
 * (outer_seg_sqnorms, which also proves it finite) and once more for the
 * weighted sum. The sum is built block by block so the output block stays
 * in L1 while the n answers stream through it, and the direction's norm
 * is taken from each finished block while it is still hot; only RDA then
 * rescales the output in one last pass.
 */
#include "syncer/outer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 2048   /* floats: 8 KiB of output stays in L1 */

double outer_weight(uint64_t steps, uint64_t tokens)
{
	if (!steps)
		return 0.0;
	return (double)tokens * ((double)tokens / (double)steps);
}

static double sqnorm(const float *x, size_t n)
{
	double a[8] = { 0 };
	size_t i = 0;

	/* eight independent sums: strict FP keeps the compiler from doing it */
	for (; i + 8 <= n; i += 8)
		for (int k = 0; k < 8; k++)
			a[k] += (double)x[i + k] * x[i + k];
	for (; i < n; i++)
		a[0] += (double)x[i] * x[i];
	return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

int outer_seg_sqnorms(const float *x, const struct outer_seg *seg, int nseg,
		      double *sq)
{
	int ok = 1;

	for (int s = 0; s < nseg; s++) {
		/* a NaN or Inf anywhere makes the double sum non-finite;
		 * float squares cannot overflow a double */
		sq[s] = sqnorm(x + seg[s].offset, seg[s].numel);
		if (!isfinite(sq[s]))
			ok = 0;
	}
	return ok ? 0 : -1;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int outer_screen(const double *norm, int n, double k, int *verdict)
{
	double *others;
	int bad = 0;

	for (int i = 0; i < n; i++)
		verdict[i] = OUTER_OK;
	if (n < 2)
		return 0;
	others = malloc((size_t)(n - 1) * sizeof(*others));
	if (!others)
		return 0;   /* screening is a safeguard; without memory, merge */
	for (int i = 0; i < n; i++) {
		int m = 0;
		double med;

		for (int j = 0; j < n; j++)
			if (j != i)
				others[m++] = norm[j];
		qsort(others, (size_t)m, sizeof(*others), cmp_double);
		med = m % 2 ? others[m / 2]
			    : 0.5 * (others[m / 2 - 1] + others[m / 2]);
		if (med > 0 && norm[i] > k * med) {
			verdict[i] = OUTER_OUTLIER;
			bad++;
		}
	}
	free(others);
	return bad;
}

/*
 * out[0..numel) = Σ c[i] x[i][off..off+numel); returns ‖out‖² (double).
 * Answers with c[i] = 0 are skipped.
 */
static double weighted_sum(const float *const *x, const float *c, int n,
			   size_t off, size_t numel, float *out)
{
	double total = 0;

	for (size_t b = 0; b < numel; b += BLOCK) {
		size_t len = numel - b < BLOCK ? numel - b : BLOCK;
		float *o = out + b;
		int first = 1;

		for (int i = 0; i < n; i++) {
			const float *xi = x[i] + off + b;
			float ci = c[i];

			if (ci == 0.0f)
				continue;
			if (first) {
				for (size_t j = 0; j < len; j++)
					o[j] = ci * xi[j];
				first = 0;
			} else {
				for (size_t j = 0; j < len; j++)
					o[j] += ci * xi[j];
			}
		}
		if (first)
			memset(o, 0, len * sizeof(*o));
		total += sqnorm(o, len);
	}
	return total;
}

int outer_merge(enum outer_rule rule, const float *const *x, const double *w,
		const double *sq, int n, const struct outer_seg *seg, int nseg,
		float *out)
{
	float cstack[64], *c = cstack;
	double W = 0;

	if (n > 64 && !(c = malloc((size_t)n * sizeof(*c))))
		return -1;
	for (int i = 0; i < n; i++)
		W += w[i];
	for (int s = 0; s < nseg; s++) {
		const struct outer_seg *g = &seg[s];
		float *o = out + g->offset;
		double mag = 0, dir;

		if (W <= 0) {
			memset(o, 0, g->numel * sizeof(*o));
			continue;
		}
		if (rule == OUTER_MEAN || g->is_embedding) {
			for (int i = 0; i < n; i++)
				c[i] = (float)(w[i] / W);
			weighted_sum(x, c, n, g->offset, g->numel, o);
			continue;
		}
		for (int i = 0; i < n; i++) {
			double norm = sqrt(sq[(size_t)i * nseg + s]);

			mag += w[i] * norm / W;
			c[i] = norm > 0 ? (float)(w[i] / (W * norm)) : 0.0f;
		}
		dir = sqrt(weighted_sum(x, c, n, g->offset, g->numel, o));
		if (!(dir > 0) || !isfinite(dir)) {
			memset(o, 0, g->numel * sizeof(*o));
			continue;
		}
		float scale = (float)(mag / dir);
		for (size_t j = 0; j < g->numel; j++)
			o[j] *= scale;
	}
	if (c != cstack)
		free(c);
	return 0;
}

void outer_step(float *theta, float *mom, const float *delta, size_t n,
		double lr, double momentum, int nesterov)
{
	float eta = (float)lr, mu = (float)momentum;

	if (nesterov) {
		for (size_t i = 0; i < n; i++) {
			float u = mu * mom[i] + delta[i];

			mom[i] = u;
			theta[i] -= eta * (delta[i] + mu * u);
		}
	} else {
		for (size_t i = 0; i < n; i++) {
			float u = mu * mom[i] + delta[i];

			mom[i] = u;
			theta[i] -= eta * u;
		}
	}
}
