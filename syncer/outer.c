/*
 * outer: weights, screening, merge and the Nesterov step (see outer.h).
 *
 * The merge is memory-bound: every answer is read once for its norms
 * (outer_seg_sqnorms, which also proves it finite; the syncer does this
 * when the answer arrives) and once more for the weighted sum. The sum is
 * built block by block so the output block stays in cache while the
 * answers stream through it four at a time, and the direction's norm is
 * taken from each finished block while it is still hot; only RDA then
 * rescales the output in one last pass.
 */
#include "syncer/outer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 8192   /* floats: 32 KiB of output stays in L1/L2 */

double outer_weight(uint64_t steps, uint64_t tokens)
{
	if (!steps)
		return 0.0;
	return (double)tokens * ((double)tokens / (double)steps);
}

double outer_bounded_weight(uint64_t steps, uint64_t tokens, uint64_t max_steps,
			    uint64_t tokens_per_step, double *scale)
{
	double s = (double)steps, t = (double)tokens;

	*scale = 1.0;
	if (!steps)
		return 0.0;
	if (max_steps && steps > max_steps) {
		*scale = (double)max_steps / s;
		t *= *scale;
		s = (double)max_steps;
	}
	if (tokens_per_step && t > (double)tokens_per_step * s)
		t = (double)tokens_per_step * s;
	return t * (t / s);
}

int outer_cap_shares(double *w, int n, double cap)
{
	double rest, free_sum;
	int ncap = 0, grew = 1;
	unsigned char *capped;

	if (n < 1 || !(cap < 1))
		return 0;
	if (cap * n < 1)
		cap = 1.0 / n;
	if (!(capped = calloc((size_t)n, 1)))
		return 0;   /* uncapped is the merge as it was: not worse */
	/*
	 * Water filling: the uncapped answers share 1 − ncap·cap in
	 * proportion to their weights; any of them above cap joins the
	 * capped, which lowers what the others share, so repeat until none
	 * grows (at most n passes).
	 */
	while (grew) {
		grew = 0;
		rest = 1.0 - ncap * cap;
		free_sum = 0;
		for (int i = 0; i < n; i++)
			if (!capped[i])
				free_sum += w[i];
		for (int i = 0; i < n; i++)
			if (!capped[i] && free_sum > 0 &&
			    rest * w[i] / free_sum > cap * (1 + 1e-12)) {
				capped[i] = 1;
				ncap++;
				grew = 1;
			}
	}
	/* the last pass capped none more: its rest and free_sum stand */
	if (ncap)
		for (int i = 0; i < n; i++)
			w[i] = capped[i] ? cap
				: free_sum > 0 ? rest * w[i] / free_sum : 0;
	free(capped);
	return ncap;
}

/*
 * The hot loops use GCC/Clang vector extensions: -O2 does not vectorise
 * loops that need alias checks or tails, and these carry the merge.
 */
typedef float v4f __attribute__((vector_size(16)));   /* SSE/NEON width */

static inline v4f load4(const float *p)
{
	v4f v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static inline void store4(float *p, v4f v)
{
	memcpy(p, &v, sizeof(v));
}

static double sqnorm_exact(const float *x, size_t n)
{
	double a = 0;

	for (size_t i = 0; i < n; i++)
		a += (double)x[i] * x[i];
	return a;
}

/*
 * Σ x² in float vectors over chunks of 512 values, each chunk's sum added
 * in double. A chunk whose float sum is not finite (NaN, Inf, or squares
 * past FLT_MAX) is redone in double, so the result is non-finite exactly
 * when some value is.
 */
static double sqnorm(const float *x, size_t n)
{
	double total = 0;

	for (size_t i = 0; i < n; i += 512) {
		size_t len = n - i < 512 ? n - i : 512, j = 0;
		v4f a = { 0 }, b = { 0 };
		float part = 0;

		for (; j + 8 <= len; j += 8) {
			v4f u = load4(x + i + j), v = load4(x + i + j + 4);

			a += u * u;
			b += v * v;
		}
		a += b;
		for (int k = 0; k < 4; k++)
			part += a[k];
		for (; j < len; j++)
			part += x[i + j] * x[i + j];
		total += isfinite(part) ? (double)part : sqnorm_exact(x + i, len);
	}
	return total;
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
	const float *xs[4];
	float cs[4];
	double total = 0;

	for (size_t b = 0; b < numel; b += BLOCK) {
		size_t len = numel - b < BLOCK ? numel - b : BLOCK;
		float *o = out + b;
		int i = 0;

		memset(o, 0, len * sizeof(*o));
		/* four answers per pass over the output block: a quarter of the
		 * output loads and stores; missing ones have coefficient 0 */
		while (i < n) {
			int k = 0;

			while (k < 4 && i < n) {
				if (c[i] != 0.0f) {
					xs[k] = x[i] + off + b;
					cs[k++] = c[i];
				}
				i++;
			}
			for (int z = k; z < 4; z++) {
				xs[z] = xs[0];
				cs[z] = 0.0f;
			}
			if (!k)
				break;
			v4f c0 = { cs[0], cs[0], cs[0], cs[0] };
			v4f c1 = { cs[1], cs[1], cs[1], cs[1] };
			v4f c2 = { cs[2], cs[2], cs[2], cs[2] };
			v4f c3 = { cs[3], cs[3], cs[3], cs[3] };
			size_t j = 0;

			for (; j + 4 <= len; j += 4)
				store4(o + j, load4(o + j) + c0 * load4(xs[0] + j) +
					      c1 * load4(xs[1] + j) +
					      c2 * load4(xs[2] + j) +
					      c3 * load4(xs[3] + j));
			for (; j < len; j++)
				o[j] += cs[0] * xs[0][j] + cs[1] * xs[1][j] +
					cs[2] * xs[2][j] + cs[3] * xs[3][j];
		}
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
	/* plain momentum is Θ − η·u: the Nesterov form with the Δ term off */
	float kd = nesterov ? 1.0f : 0.0f, ku = nesterov ? mu : 1.0f;
	v4f ev = { eta, eta, eta, eta };
	v4f mv = { mu, mu, mu, mu };
	v4f dv = { kd, kd, kd, kd };
	v4f uv = { ku, ku, ku, ku };
	size_t i = 0;

	for (; i + 4 <= n; i += 4) {
		v4f d = load4(delta + i);
		v4f u = mv * load4(mom + i) + d;

		store4(mom + i, u);
		store4(theta + i, load4(theta + i) - ev * (dv * d + uv * u));
	}
	for (; i < n; i++) {
		float u = mu * mom[i] + delta[i];

		mom[i] = u;
		theta[i] -= eta * (kd * delta[i] + ku * u);
	}
}
