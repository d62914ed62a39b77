/*
 * outer: weights, their cap, norms, the merge and the Nesterov step (see
 * outer.h).
 *
 * The merge is memory-bound: every answer is read once for its norms
 * (outer_seg_sqnorms, which also proves it finite; the syncer does this
 * when the answer arrives) and once more for the weighted sum — folded
 * into the accumulator as it arrives (outer_acc_add), or, for the few
 * kept whole, at the merge. A weighted sum of several arrays (the batch
 * merge; the accumulator's sum and the kept copies at a streaming merge)
 * is built block by block so the output block stays in cache while the
 * arrays stream through it four at a time, and the direction's norm is
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

/*
 * Water filling over w[n] and an uncappable mass `folded`: the uncapped
 * answers share 1 − ncap·cap in proportion to their weights; any of them
 * above cap joins the capped, which lowers what the others share, so
 * repeat until none grows (at most n passes). Returns ncap; *rest and
 * *free_sum are the last pass's (it capped none more: they stand).
 */
static int fill(const double *w, int n, double folded, double cap,
		unsigned char *capped, double *rest, double *free_sum)
{
	int ncap = 0, grew = 1;

	memset(capped, 0, (size_t)n);
	while (grew) {
		grew = 0;
		*rest = 1.0 - ncap * cap;
		*free_sum = folded;
		for (int i = 0; i < n; i++)
			if (!capped[i])
				*free_sum += w[i];
		for (int i = 0; i < n; i++)
			if (!capped[i] && *free_sum > 0 &&
			    *rest * w[i] / *free_sum > cap * (1 + 1e-12)) {
				capped[i] = 1;
				ncap++;
				grew = 1;
			}
	}
	return ncap;
}

int outer_cap_shares(double *w, int n, double cap)
{
	double rest, free_sum;
	unsigned char *capped;
	int ncap;

	if (n < 1 || !(cap < 1))
		return 0;
	if (cap * n < 1)
		cap = 1.0 / n;
	if (!(capped = malloc((size_t)n)))
		return 0;   /* uncapped is the merge as it was: not worse */
	ncap = fill(w, n, 0, cap, capped, &rest, &free_sum);
	if (ncap)
		for (int i = 0; i < n; i++)
			w[i] = capped[i] ? cap
				: free_sum > 0 ? rest * w[i] / free_sum : 0;
	free(capped);
	return ncap;
}

int outer_cap_shares_folded(double *w, int n, double folded, int nfolded,
			    double cap, unsigned char *capped,
			    double *fold_share)
{
	int total = n + nfolded, ncap = 0;
	double rest = 1, free_sum = folded;

	memset(capped, 0, (size_t)n);
	for (int i = 0; i < n; i++)
		free_sum += w[i];
	if (total >= 1 && cap < 1) {
		if (cap * total < 1)
			cap = 1.0 / total;
		ncap = fill(w, n, folded, cap, capped, &rest, &free_sum);
	}
	for (int i = 0; i < n; i++)
		w[i] = capped[i] ? cap
			: free_sum > 0 ? rest * w[i] / free_sum : 0;
	*fold_share = free_sum > 0 ? rest / free_sum : 0;
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

/* RDA's last step on a direction sum o of norm dir: rescaled to norm
 * mag, or 0 when the directions cancel (dir 0, or not finite). */
static void to_magnitude(float *o, size_t n, double mag, double dir)
{
	float scale;

	if (!(dir > 0) || !isfinite(dir)) {
		memset(o, 0, n * sizeof(*o));
		return;
	}
	scale = (float)(mag / dir);
	for (size_t j = 0; j < n; j++)
		o[j] *= scale;
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
		to_magnitude(o, g->numel, mag, dir);
	}
	if (c != cstack)
		free(c);
	return 0;
}

/* ---- the streaming merge (outer.h, struct outer_acc) ------------------ */

int outer_acc_k(double cap, int max_answers)
{
	double k;

	if (!(cap < 1))
		return 0;
	k = cap > 0 ? ceil(1.0 / cap) - 1 : (double)max_answers;
	return k < max_answers ? (int)k : max_answers;
}

/* calloc that counts what it gives into a->bytes */
static void *grab(struct outer_acc *a, size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);

	if (p)
		a->bytes += (n ? n : 1) * size;
	return p;
}

int outer_acc_init(struct outer_acc *a, size_t max_numel, int max_nseg, int k)
{
	size_t kk = (size_t)k + 1;

	memset(a, 0, sizeof(*a));
	a->max_numel = max_numel;
	a->max_nseg = max_nseg;
	a->k = k;
	a->sum = grab(a, max_numel, sizeof(float));
	a->in = grab(a, max_numel, sizeof(float));
	a->mag = grab(a, (size_t)max_nseg, sizeof(double));
	a->keep = grab(a, kk, sizeof(*a->keep));
	a->keep_sq = grab(a, kk * (size_t)max_nseg, sizeof(double));
	a->keep_w = grab(a, kk, sizeof(double));
	a->pend_sq = grab(a, (OUTER_ACC_PENDING + 1) * (size_t)max_nseg,
			  sizeof(double));
	a->mx = grab(a, kk, sizeof(*a->mx));
	a->mc = grab(a, kk, sizeof(float));
	a->share = grab(a, kk, sizeof(double));
	a->capped = grab(a, kk, 1);
	if (!a->sum || !a->in || !a->mag || !a->keep || !a->keep_sq ||
	    !a->keep_w || !a->pend_sq || !a->mx || !a->mc || !a->share ||
	    !a->capped)
		return -1;
	for (int i = 0; i < k; i++)
		if (!(a->keep[i] = grab(a, max_numel, sizeof(float))))
			return -1;
	for (int i = 0; i < OUTER_ACC_PENDING; i++)
		if (!(a->pend[i] = grab(a, max_numel, sizeof(float))))
			return -1;
	return 0;
}

void outer_acc_release(struct outer_acc *a)
{
	for (int i = 0; a->keep && i < a->k; i++)
		free(a->keep[i]);
	for (int i = 0; i < OUTER_ACC_PENDING; i++)
		free(a->pend[i]);
	free(a->sum);
	free(a->in);
	free(a->mag);
	free(a->keep);
	free(a->keep_sq);
	free(a->keep_w);
	free(a->pend_sq);
	free(a->mx);
	free(a->mc);
	free(a->share);
	free(a->capped);
	memset(a, 0, sizeof(*a));
}

void outer_acc_begin(struct outer_acc *a, enum outer_rule rule,
		     const struct outer_seg *seg, int nseg, size_t numel)
{
	a->rule = rule;
	a->seg = seg;
	a->nseg = nseg;
	a->numel = numel;
	outer_acc_clear(a);
}

void outer_acc_clear(struct outer_acc *a)
{
	if (a->mag)   /* not made (outer_acc_init failed): nothing held */
		memset(a->mag, 0, (size_t)a->max_nseg * sizeof(*a->mag));
	a->wsum = a->wref = 0;
	a->nfolded = a->nkept = a->npend = 0;
	a->summed = 0;
}

float *outer_acc_input(struct outer_acc *a)
{
	return a->in;
}

int outer_acc_count(const struct outer_acc *a)
{
	return a->nfolded + a->nkept;
}

/*
 * o = Σ c[i]·x[i] (first) or o += Σ c[i]·x[i], over n ≤ 4 arrays of len
 * floats: one pass over o for up to four answers.
 */
static void fold_many(float *o, const float *const *x, const float *c, int n,
		      size_t len, int first)
{
	const float *p[4];
	float cs[4];
	size_t j = 0;

	for (int z = 0; z < 4; z++) {
		p[z] = z < n ? x[z] : x[0];
		cs[z] = z < n ? c[z] : 0.0f;
	}
	v4f c0 = { cs[0], cs[0], cs[0], cs[0] };
	v4f c1 = { cs[1], cs[1], cs[1], cs[1] };
	v4f c2 = { cs[2], cs[2], cs[2], cs[2] };
	v4f c3 = { cs[3], cs[3], cs[3], cs[3] };
	v4f zero = { 0, 0, 0, 0 };

	for (; j + 4 <= len; j += 4)
		store4(o + j, (first ? zero : load4(o + j)) +
			      c0 * load4(p[0] + j) + c1 * load4(p[1] + j) +
			      c2 * load4(p[2] + j) + c3 * load4(p[3] + j));
	for (; j < len; j++)
		o[j] = (first ? 0.0f : o[j]) + cs[0] * p[0][j] +
		       cs[1] * p[1][j] + cs[2] * p[2][j] + cs[3] * p[3][j];
}

/*
 * Sums the pending answers (norms at pend_sq, weights at pend_w) and,
 * when x is not NULL, x of sq and weight w beside them into sum, in one
 * pass.
 */
static void flush(struct outer_acc *a, const float *x, const double *sq,
		  double w)
{
	const float *xs[OUTER_ACC_PENDING + 1], *xo[OUTER_ACC_PENDING + 1];
	float c[OUTER_ACC_PENDING + 1];
	int n = a->npend;

	for (int i = 0; i < n; i++)
		xs[i] = a->pend[i];
	if (x) {
		memcpy(a->pend_sq + (size_t)n * a->max_nseg, sq,
		       (size_t)a->nseg * sizeof(double));
		a->pend_w[n] = w;
		xs[n++] = x;
	}
	if (!n)
		return;
	for (int s = 0; s < a->nseg; s++) {
		const struct outer_seg *g = &a->seg[s];

		for (int i = 0; i < n; i++) {
			double norm = sqrt(a->pend_sq[(size_t)i * a->max_nseg + s]);

			xo[i] = xs[i] + g->offset;
			if (a->rule == OUTER_MEAN || g->is_embedding)
				c[i] = (float)(a->pend_w[i] / a->wref);
			else
				c[i] = norm > 0 ? (float)(a->pend_w[i] /
							  (a->wref * norm)) : 0.0f;
		}
		fold_many(a->sum + g->offset, xo, c, n, g->numel, !a->summed);
	}
	a->summed = 1;
	a->npend = 0;
}

/* The answer in *x (a->in) of norms sq and weight w joins the folded:
 * counted now, summed with the next ones (flush); *x gets a free
 * buffer. */
static void fold(struct outer_acc *a, float **x, const double *sq, double w)
{
	float *t;

	if (!a->nfolded)
		a->wref = w;
	for (int s = 0; s < a->nseg; s++)
		a->mag[s] += w * sqrt(sq[s]);
	a->wsum += w;
	a->nfolded++;
	if (a->npend == OUTER_ACC_PENDING) {
		flush(a, *x, sq, w);
		return;
	}
	/* no copy: the buffers trade places */
	t = a->pend[a->npend];
	a->pend[a->npend] = *x;
	*x = t;
	memcpy(a->pend_sq + (size_t)a->npend * a->max_nseg, sq,
	       (size_t)a->nseg * sizeof(double));
	a->pend_w[a->npend++] = w;
}

int outer_acc_add(struct outer_acc *a, const float *x, const double *sq,
		  double w)
{
	double *spare = a->keep_sq + (size_t)a->k * a->max_nseg, old_w;
	int light = 0;
	float *t;

	if (!(w > 0) || !isfinite(w))
		return -1;
	for (int s = 0; s < a->nseg; s++)
		if (!isfinite(sq[s]))
			return -1;
	if (x != a->in)
		memcpy(a->in, x, a->numel * sizeof(float));
	if (a->nkept < a->k) {
		t = a->keep[a->nkept];
		a->keep[a->nkept] = a->in;
		a->in = t;
		memcpy(a->keep_sq + (size_t)a->nkept * a->max_nseg, sq,
		       (size_t)a->nseg * sizeof(double));
		a->keep_w[a->nkept++] = w;
		return 0;
	}
	for (int i = 1; i < a->nkept; i++)
		if (a->keep_w[i] < a->keep_w[light])
			light = i;
	if (!a->nkept || !(w > a->keep_w[light])) {
		fold(a, &a->in, sq, w);
		return 0;
	}
	/* the new one is kept (its buffer trades places with the lightest
	 * kept one's), and that one is folded */
	old_w = a->keep_w[light];
	memcpy(spare, a->keep_sq + (size_t)light * a->max_nseg,
	       (size_t)a->nseg * sizeof(double));
	t = a->keep[light];
	a->keep[light] = a->in;
	a->in = t;
	memcpy(a->keep_sq + (size_t)light * a->max_nseg, sq,
	       (size_t)a->nseg * sizeof(double));
	a->keep_w[light] = w;
	fold(a, &a->in, spare, old_w);
	return 0;
}

int outer_acc_merge(struct outer_acc *a, double cap, float *out)
{
	int n = a->nkept, ncap;
	double f;

	flush(a, NULL, NULL, 0);
	for (int i = 0; i < n; i++)
		a->share[i] = a->keep_w[i];
	ncap = outer_cap_shares_folded(a->share, n, a->wsum, a->nfolded, cap,
				       a->capped, &f);
	for (int s = 0; s < a->nseg; s++) {
		const struct outer_seg *g = &a->seg[s];
		int rda = a->rule == OUTER_RDA && !g->is_embedding, m = 0;
		float *o = out + g->offset;
		double mag = 0, dir;

		if (a->nfolded && f > 0) {
			a->mx[m] = a->sum;
			a->mc[m++] = (float)(f * a->wref);
			mag += f * a->mag[s];
		}
		for (int i = 0; i < n; i++) {
			double norm = sqrt(a->keep_sq[(size_t)i * a->max_nseg + s]);

			mag += a->share[i] * norm;
			a->mx[m] = a->keep[i];
			a->mc[m++] = (float)(!rda ? a->share[i]
					     : norm > 0 ? a->share[i] / norm : 0);
		}
		if (!m) {
			memset(o, 0, g->numel * sizeof(*o));
			continue;
		}
		dir = sqrt(weighted_sum(a->mx, a->mc, m, g->offset, g->numel, o));
		if (rda)
			to_magnitude(o, g->numel, mag, dir);
	}
	return ncap;
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
