/*
 * kernels: one body per kernel, as an always-inline function of plain C;
 * DEFINE_KERNELS wraps every body in a function built for one instruction
 * set (GCC's target attribute) and collects them in a struct kernels.
 * The bodies are written so the vectoriser takes them without fast-math:
 * elementwise loops with no calls (exp and tanh are local polynomials,
 * libm's are opaque), and sums kept in KERNELS_LANES accumulators (see
 * kernels.h). No contraction (-std=c11 turns it off), so the AVX-512,
 * AVX2 and SSE2 builds compute the same operations in the same order.
 *
 * Where a kernel reads its data twice (the layernorm row's mean, then
 * variance, then output; softmax's max, then exp, then sum) the data is
 * one row, in L1: the passes cost arithmetic, not memory. The variance
 * stays two-pass (Σ(x − mean)²), which keeps its digits where a one-pass
 * E[x²] − mean² would not.
 */
#include "trainer/kernels.h"

#include <math.h>
#include <string.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define LANES KERNELS_LANES

/*
 * exp(x) for x ≤ 0 (Cephes single-precision polynomial, relative error
 * about 1e-7); inputs below -87 are clamped.
 */
ALWAYS_INLINE float exp_neg(float x)
{
	union { float f; int i; } s;
	float t, p;
	int k;

	x = x < -87.0f ? -87.0f : x;
	x = x > 0.0f ? 0.0f : x;
	/* k = floor(x·log2(e) + 0.5), computed with a positive truncation */
	k = (int)(x * 1.44269504088896341f + 128.5f) - 128;
	t = x - (float)k * 0.693359375f;
	t = t - (float)k * -2.12194440e-4f;
	p = 1.9875691500e-4f;
	p = p * t + 1.3981999507e-3f;
	p = p * t + 8.3334519073e-3f;
	p = p * t + 4.1665795894e-2f;
	p = p * t + 1.6666665459e-1f;
	p = p * t + 5.0000001201e-1f;
	p = p * t * t + t + 1.0f;
	s.i = (k + 127) << 23;
	return p * s.f;
}

/* tanh(x) = sign(x)·(1 − e)/(1 + e), e = exp(−2|x|) */
ALWAYS_INLINE float tanh_fast(float x)
{
	float a = x < 0 ? -x : x;
	float e = exp_neg(-2.0f * a);
	float r = (1.0f - e) / (1.0f + e);

	return x < 0 ? -r : r;
}

float kernels_tanhf(float x)
{
	return tanh_fast(x);
}

/* ---- sums in lanes ---- */

/* acc[0] = Σ acc[k], in a fixed tree */
ALWAYS_INLINE float lanes_sum(float *acc)
{
	for (int w = LANES / 2; w; w /= 2)
		for (int k = 0; k < w; k++)
			acc[k] += acc[k + w];
	return acc[0];
}

ALWAYS_INLINE float sum_body(const float *x, size_t n)
{
	float acc[LANES] = { 0 };
	size_t i = 0;

	for (; i + LANES <= n; i += LANES)
		for (int k = 0; k < LANES; k++)
			acc[k] += x[i + k];
	for (int k = 0; i + k < n; k++)
		acc[k] += x[i + k];
	return lanes_sum(acc);
}

/* max of x (n ≥ 1); exact, so any order gives the same value */
ALWAYS_INLINE float max_body(const float *x, size_t n)
{
	float acc[LANES];
	size_t i = 0;

	for (int k = 0; k < LANES; k++)
		acc[k] = x[0];
	for (; i + LANES <= n; i += LANES)
		for (int k = 0; k < LANES; k++)
			acc[k] = x[i + k] > acc[k] ? x[i + k] : acc[k];
	for (int k = 0; i + k < n; k++)
		acc[k] = x[i + k] > acc[k] ? x[i + k] : acc[k];
	for (int w = LANES / 2; w; w /= 2)
		for (int k = 0; k < w; k++)
			acc[k] = acc[k + w] > acc[k] ? acc[k + w] : acc[k];
	return acc[0];
}

/* Σ a·b */
ALWAYS_INLINE float dot_body(const float *a, const float *b, size_t n)
{
	float acc[LANES] = { 0 };
	size_t i = 0;

	for (; i + LANES <= n; i += LANES)
		for (int k = 0; k < LANES; k++)
			acc[k] += a[i + k] * b[i + k];
	for (int k = 0; i + k < n; k++)
		acc[k] += a[i + k] * b[i + k];
	return lanes_sum(acc);
}

/* ---- GELU ---- */

#define GELU_SCALE 0.7978845608028654f   /* √(2/π) */

ALWAYS_INLINE void gelu_forward_body(float *out, float *pre, const float *bias,
				     size_t rows, size_t oc)
{
	for (size_t r = 0; r < rows; r++) {
		float *x = pre + r * oc, *o = out + r * oc;

		if (bias)
			for (size_t i = 0; i < oc; i++)
				x[i] += bias[i];
		for (size_t i = 0; i < oc; i++) {
			float v = x[i];
			float u = GELU_SCALE * (v + 0.044715f * v * v * v);

			o[i] = 0.5f * v * (1.0f + tanh_fast(u));
		}
	}
}

ALWAYS_INLINE void gelu_backward_body(float *dinp, const float *inp,
				      const float *dout, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		float x = inp[i];
		float u = GELU_SCALE * (x + 0.044715f * x * x * x);
		float th = tanh_fast(u);
		float sech2 = 1.0f - th * th;
		float g = 0.5f * (1.0f + th) +
			  0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);

		dinp[i] = g * dout[i];
	}
}

/* ---- layernorm rows ---- */

ALWAYS_INLINE void layernorm_forward_body(float *out, float *mean, float *rstd,
					  const float *x, const float *w,
					  const float *b, size_t C)
{
	float acc[LANES] = { 0 };
	float m = sum_body(x, C) / (float)C, s;
	size_t i = 0;

	for (; i + LANES <= C; i += LANES)
		for (int k = 0; k < LANES; k++)
			acc[k] += (x[i + k] - m) * (x[i + k] - m);
	for (int k = 0; i + k < C; k++)
		acc[k] += (x[i + k] - m) * (x[i + k] - m);
	s = 1.0f / sqrtf(lanes_sum(acc) / (float)C + 1e-5f);
	for (i = 0; i < C; i++)
		out[i] = (x[i] - m) * s * w[i] + b[i];
	*mean = m;
	*rstd = s;
}

ALWAYS_INLINE void layernorm_backward_body(float *dx, const float *d,
					   const float *x, const float *w,
					   float m, float s, size_t C)
{
	float a1[LANES] = { 0 }, a2[LANES] = { 0 };
	float dnorm_mean, dnorm_norm_mean;
	size_t i = 0;

	/* Σ w·d and Σ w·d·norm, norm = (x − mean)·rstd */
	for (; i + LANES <= C; i += LANES)
		for (int k = 0; k < LANES; k++) {
			float dn = w[i + k] * d[i + k];

			a1[k] += dn;
			a2[k] += dn * ((x[i + k] - m) * s);
		}
	for (int k = 0; i + k < C; k++) {
		float dn = w[i + k] * d[i + k];

		a1[k] += dn;
		a2[k] += dn * ((x[i + k] - m) * s);
	}
	dnorm_mean = lanes_sum(a1) / (float)C;
	dnorm_norm_mean = lanes_sum(a2) / (float)C;
	for (i = 0; i < C; i++) {
		float norm = (x[i] - m) * s;
		float dnorm = w[i] * d[i];

		dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
	}
}

/* ---- softmax ---- */

/* p (n) = exp(l − max) / Σ, p may alias l; returns Σ */
ALWAYS_INLINE float softmax_body(float *p, const float *l, size_t n, float max)
{
	float sum, inv;

	for (size_t j = 0; j < n; j++)
		p[j] = exp_neg(l[j] - max);
	sum = sum_body(p, n);
	inv = 1.0f / sum;
	for (size_t j = 0; j < n; j++)
		p[j] *= inv;
	return sum;
}

ALWAYS_INLINE void causal_softmax_body(float *a, size_t T)
{
	for (size_t i = 0; i < T; i++) {
		float *row = a + i * T;

		softmax_body(row, row, i + 1, max_body(row, i + 1));
		memset(row + i + 1, 0, (T - i - 1) * sizeof(float));
	}
}

ALWAYS_INLINE void softmax_backward_body(float *da, const float *a, size_t T,
					 float scale)
{
	for (size_t i = 0; i < T; i++) {
		const float *ar = a + i * T;
		float *dr = da + i * T;
		float dot = dot_body(ar, dr, i + 1);

		for (size_t j = 0; j <= i; j++)
			dr[j] = scale * ar[j] * (dr[j] - dot);
		memset(dr + i + 1, 0, (T - i - 1) * sizeof(float));
	}
}

ALWAYS_INLINE float softmax_row_body(float *p, const float *l, size_t V,
				     float *max)
{
	*max = max_body(l, V);
	return softmax_body(p, l, V, *max);
}

/* ---- residual ---- */

ALWAYS_INLINE void residual_body(float *out, const float *a, const float *b,
				 const float *bias, size_t rows, size_t C)
{
	if (!bias) {
		for (size_t i = 0; i < rows * C; i++)
			out[i] = a[i] + b[i];
		return;
	}
	for (size_t r = 0; r < rows; r++) {
		float *o = out + r * C;
		const float *x = a + r * C, *y = b + r * C;

		for (size_t i = 0; i < C; i++)
			o[i] = x[i] + (y[i] + bias[i]);
	}
}

/* ---- column sums ---- */

/*
 * Blocks of COLS columns keep their sums in registers over all the rows
 * (the order per column is still row by row), instead of loading and
 * storing dst once per row.
 */
#define COLS 64

ALWAYS_INLINE void colsum_body(float *dst, const float *src, size_t rows,
			       size_t cols, size_t ld)
{
	size_t c = 0;

	for (; c + COLS <= cols; c += COLS) {
		float acc[COLS];

		memcpy(acc, dst + c, sizeof(acc));
		for (size_t r = 0; r < rows; r++)
#pragma GCC unroll 64
			for (int k = 0; k < COLS; k++)
				acc[k] += src[r * ld + c + k];
		memcpy(dst + c, acc, sizeof(acc));
	}
	for (size_t r = 0; r < rows; r++)
		for (size_t k = c; k < cols; k++)
			dst[k] += src[r * ld + k];
}

ALWAYS_INLINE void layernorm_colsum_body(float *dw, float *db, const float *d,
					 const float *x, const float *mean,
					 const float *rstd, size_t rows,
					 size_t cols, size_t ld)
{
	size_t c = 0;

	for (; c + COLS / 2 <= cols; c += COLS / 2) {
		float aw[COLS / 2], ab[COLS / 2];

		memcpy(aw, dw + c, sizeof(aw));
		memcpy(ab, db + c, sizeof(ab));
		for (size_t r = 0; r < rows; r++) {
			const float *dr = d + r * ld + c, *xr = x + r * ld + c;
			float m = mean[r], s = rstd[r];

#pragma GCC unroll 32
			for (int k = 0; k < COLS / 2; k++) {
				ab[k] += dr[k];
				aw[k] += (xr[k] - m) * s * dr[k];
			}
		}
		memcpy(dw + c, aw, sizeof(aw));
		memcpy(db + c, ab, sizeof(ab));
	}
	for (size_t r = 0; r < rows; r++)
		for (size_t k = c; k < cols; k++) {
			db[k] += d[r * ld + k];
			dw[k] += (x[r * ld + k] - mean[r]) * rstd[r] * d[r * ld + k];
		}
}

/* ---- optimizer ---- */

ALWAYS_INLINE void adamw_body(float *p, const float *g, float *m, float *v,
			      size_t n, const struct kernels_adamw *s)
{
	float b1 = s->beta1, b2 = s->beta2, gs = s->grad_scale;
	float bc1 = s->bc1, bc2 = s->bc2;
	float lr = s->lr, eps = s->eps, wd = s->weight_decay;

	for (size_t i = 0; i < n; i++) {
		float gi = g[i] * gs;
		float mi = b1 * m[i] + (1.0f - b1) * gi;
		float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
		float mh = mi / bc1, vh = vi / bc2;

		m[i] = mi;
		v[i] = vi;
		p[i] -= lr * (mh / (sqrtf(vh) + eps) + wd * p[i]);
	}
}

ALWAYS_INLINE double sumsq_body(const float *g, size_t n)
{
	double acc[LANES] = { 0 };
	size_t i = 0;

	for (; i + LANES <= n; i += LANES)
		for (int k = 0; k < LANES; k++)
			acc[k] += (double)g[i + k] * g[i + k];
	for (int k = 0; i + k < n; k++)
		acc[k] += (double)g[i + k] * g[i + k];
	for (int w = LANES / 2; w; w /= 2)
		for (int k = 0; k < w; k++)
			acc[k] += acc[k + w];
	return acc[0];
}

/* ---- the sets ---- */

/* Every kernel of one instruction set: name_<isa>, and kernels_<isa>. */
#define DEFINE_KERNELS(isa, attr)                                              \
attr static void gelu_forward_##isa(float *out, float *pre, const float *bias, \
				    size_t rows, size_t oc)                    \
{ gelu_forward_body(out, pre, bias, rows, oc); }                               \
attr static void gelu_backward_##isa(float *dinp, const float *inp,            \
				     const float *dout, size_t n)              \
{ gelu_backward_body(dinp, inp, dout, n); }                                    \
attr static void layernorm_forward_##isa(float *out, float *mean, float *rstd, \
					 const float *x, const float *w,       \
					 const float *b, size_t C)             \
{ layernorm_forward_body(out, mean, rstd, x, w, b, C); }                       \
attr static void layernorm_backward_##isa(float *dx, const float *d,           \
					  const float *x, const float *w,      \
					  float m, float s, size_t C)          \
{ layernorm_backward_body(dx, d, x, w, m, s, C); }                             \
attr static void causal_softmax_##isa(float *a, size_t T)                      \
{ causal_softmax_body(a, T); }                                                 \
attr static void softmax_backward_##isa(float *da, const float *a, size_t T,   \
					float scale)                           \
{ softmax_backward_body(da, a, T, scale); }                                    \
attr static void residual_##isa(float *out, const float *a, const float *b,    \
				const float *bias, size_t rows, size_t C)      \
{ residual_body(out, a, b, bias, rows, C); }                                   \
attr static float softmax_row_##isa(float *p, const float *l, size_t V,        \
				    float *max)                                \
{ return softmax_row_body(p, l, V, max); }                                     \
attr static void colsum_##isa(float *dst, const float *src, size_t rows,       \
			      size_t cols, size_t ld)                          \
{ colsum_body(dst, src, rows, cols, ld); }                                     \
attr static void layernorm_colsum_##isa(float *dw, float *db, const float *d,  \
					const float *x, const float *mean,     \
					const float *rstd, size_t rows,        \
					size_t cols, size_t ld)                \
{ layernorm_colsum_body(dw, db, d, x, mean, rstd, rows, cols, ld); }           \
attr static void adamw_##isa(float *p, const float *g, float *m, float *v,     \
			     size_t n, const struct kernels_adamw *s)          \
{ adamw_body(p, g, m, v, n, s); }                                              \
attr static double sumsq_##isa(const float *g, size_t n)                       \
{ return sumsq_body(g, n); }                                                   \
static const struct kernels kernels_##isa = {                                  \
	#isa, gelu_forward_##isa, gelu_backward_##isa,                         \
	layernorm_forward_##isa, layernorm_backward_##isa,                     \
	causal_softmax_##isa, softmax_backward_##isa, residual_##isa,          \
	softmax_row_##isa, colsum_##isa, layernorm_colsum_##isa,               \
	adamw_##isa, sumsq_##isa,                                              \
};

DEFINE_KERNELS(default, )

/* sanitizer builds keep to the default set (their instrumentation is the
 * point there, not the width) */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_ADDRESS__)
#define HAVE_X86_SETS 1
DEFINE_KERNELS(avx2, __attribute__((target("avx2"))))
DEFINE_KERNELS(avx512, __attribute__((target("avx512f"))))
#endif

static const struct kernels *forced;   /* kernels_use's choice */

const struct kernels *kernels_named(const char *name)
{
	if (!strcmp(name, "default"))
		return &kernels_default;
#ifdef HAVE_X86_SETS
	__builtin_cpu_init();
	if (!strcmp(name, "avx2") && __builtin_cpu_supports("avx2"))
		return &kernels_avx2;
	if (!strcmp(name, "avx512") && __builtin_cpu_supports("avx512f"))
		return &kernels_avx512;
#endif
	return NULL;
}

const struct kernels *kernels_get(void)
{
	const struct kernels *k;

	if (forced)
		return forced;
	k = kernels_named("avx512");
	if (!k)
		k = kernels_named("avx2");
	return k ? k : &kernels_default;
}

int kernels_use(const char *name)
{
	const struct kernels *k = name ? kernels_named(name) : NULL;

	if (name && !k)
		return -1;
	forced = k;
	return 0;
}
