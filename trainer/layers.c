/*
 * layers: forward/backward kernels of the decoder (see layers.h for the
 * dimension legend and the "=" / "+=" conventions).
 *
 * Matrix products are cblas_sgemm calls with explicit leading dimensions,
 * so attention reads q, k and v of one head straight out of the (B,T,3C)
 * qkv buffer and writes its output straight into the (B,T,C) buffer: no
 * copies, no transposes. The pool is the only set of threads: a product
 * is split by rows of its result into single-threaded OpenBLAS calls, and
 * attention runs one (batch, head) per item, products and softmax
 * together.
 *
 * The remaining loops are O(N·C): each is a pool_run over rows (or over
 * channels when rows would race on a shared gradient), with plain inner
 * loops over contiguous memory and no calls, so the compiler vectorises
 * them; exp and tanh are local polynomial versions for that reason
 * (libm's are opaque calls).
 */
#include "trainer/layers.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

/*
 * exp(x) for x ≤ 0 (Cephes single-precision polynomial, relative error
 * about 1e-7); inputs below -87 are clamped.
 */
static inline __attribute__((always_inline)) float exp_neg(float x)
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
static inline __attribute__((always_inline)) float tanh_fast(float x)
{
	float a = x < 0 ? -x : x;
	float e = exp_neg(-2.0f * a);
	float r = (1.0f - e) / (1.0f + e);

	return x < 0 ? -r : r;
}

float layers_tanhf(float x)
{
	return tanh_fast(x);
}

/*
 * The heaviest elementwise loops also get an AVX2 build, picked at load
 * time; with no contraction or reassociation it gives the same bits.
 */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define VECTOR_CLONES
#endif

/* ---- sgemm on the pool ---- */

struct gemm_arg {
	enum CBLAS_TRANSPOSE ta, tb;
	int M, N, K, lda, ldb, ldc;
	float alpha, beta;
	const float *A, *B;
	float *C;
};

/* Rows [lo, hi) of C (M,N) = alpha·op(A)·op(B) + beta·C. */
static void gemm_rows(void *a, size_t lo, size_t hi, int chunk)
{
	struct gemm_arg *g = a;
	const float *A = g->ta == CblasNoTrans ? g->A + lo * (size_t)g->lda
					       : g->A + lo;

	(void)chunk;
	cblas_sgemm(CblasRowMajor, g->ta, g->tb, (int)(hi - lo), g->N, g->K,
		    g->alpha, A, g->lda, g->B, g->ldb, g->beta,
		    g->C + lo * (size_t)g->ldc, g->ldc);
}

/*
 * cblas_sgemm (row-major) with the rows of C split over the pool, each
 * part a single-threaded OpenBLAS call: one set of threads for products
 * and loops alike.
 */
static void psgemm(struct pool *p, enum CBLAS_TRANSPOSE ta,
		   enum CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
		   const float *A, int lda, const float *B, int ldb, float beta,
		   float *C, int ldc)
{
	struct gemm_arg g = { ta, tb, M, N, K, lda, ldb, ldc, alpha, beta,
			      A, B, C };

	pool_run(p, gemm_rows, &g, (size_t)M);
}

/* ---- encoder ---- */

struct enc_arg {
	float *out, *dwte, *dwpe;
	const float *wte, *wpe, *dout;
	const int *inp;
	int B, T, C;
};

static void encoder_rows(void *a, size_t lo, size_t hi, int chunk)
{
	struct enc_arg *e = a;
	size_t C = (size_t)e->C;

	(void)chunk;
	for (size_t r = lo; r < hi; r++) {
		float *o = e->out + r * C;
		const float *we = e->wte + (size_t)e->inp[r] * C;
		const float *pe = e->wpe + (r % (size_t)e->T) * C;

		for (size_t i = 0; i < C; i++)
			o[i] = we[i] + pe[i];
	}
}

void encoder_forward(struct pool *p, float *out, const int *inp,
		     const float *wte, const float *wpe, int B, int T, int C)
{
	struct enc_arg e = { .out = out, .wte = wte, .wpe = wpe, .inp = inp,
			     .B = B, .T = T, .C = C };

	pool_run(p, encoder_rows, &e, (size_t)B * T);
}

/* split over channels: rows sharing a token never race */
static void encoder_back_cols(void *a, size_t lo, size_t hi, int chunk)
{
	struct enc_arg *e = a;
	size_t C = (size_t)e->C, N = (size_t)e->B * e->T;

	(void)chunk;
	for (size_t r = 0; r < N; r++) {
		const float *d = e->dout + r * C;
		float *dwe = e->dwte + (size_t)e->inp[r] * C;
		float *dpe = e->dwpe + (r % (size_t)e->T) * C;

		for (size_t i = lo; i < hi; i++) {
			dwe[i] += d[i];
			dpe[i] += d[i];
		}
	}
}

void encoder_backward(struct pool *p, float *dwte, float *dwpe,
		      const float *dout, const int *inp, int B, int T, int C)
{
	struct enc_arg e = { .dwte = dwte, .dwpe = dwpe, .dout = dout,
			     .inp = inp, .B = B, .T = T, .C = C };

	pool_run(p, encoder_back_cols, &e, (size_t)C);
}

/* ---- layernorm ---- */

struct ln_arg {
	float *out, *mean, *rstd, *dinp, *dweight, *dbias;
	const float *inp, *weight, *bias, *dout, *cmean, *crstd;
	int N, C;
};

static void layernorm_rows(void *a, size_t lo, size_t hi, int chunk)
{
	struct ln_arg *l = a;
	size_t C = (size_t)l->C;
	const float eps = 1e-5f;

	(void)chunk;
	for (size_t n = lo; n < hi; n++) {
		const float *x = l->inp + n * C;
		float *o = l->out + n * C;
		float m = 0, v = 0, s;

		for (size_t i = 0; i < C; i++)
			m += x[i];
		m /= (float)C;
		for (size_t i = 0; i < C; i++)
			v += (x[i] - m) * (x[i] - m);
		v /= (float)C;
		s = 1.0f / sqrtf(v + eps);
		for (size_t i = 0; i < C; i++)
			o[i] = (x[i] - m) * s * l->weight[i] + l->bias[i];
		l->mean[n] = m;
		l->rstd[n] = s;
	}
}

void layernorm_forward(struct pool *p, float *out, float *mean, float *rstd,
		       const float *inp, const float *weight,
		       const float *bias, int N, int C)
{
	struct ln_arg l = { .out = out, .mean = mean, .rstd = rstd,
			    .inp = inp, .weight = weight, .bias = bias,
			    .N = N, .C = C };

	pool_run(p, layernorm_rows, &l, (size_t)N);
}

static void layernorm_back_rows(void *a, size_t lo, size_t hi, int chunk)
{
	struct ln_arg *l = a;
	size_t C = (size_t)l->C;
	const float *restrict w = l->weight;

	(void)chunk;
	for (size_t n = lo; n < hi; n++) {
		const float *restrict d = l->dout + n * C;
		const float *restrict x = l->inp + n * C;
		float *restrict dx = l->dinp + n * C;
		float m = l->cmean[n], s = l->crstd[n];
		float dnorm_mean = 0, dnorm_norm_mean = 0;

		for (size_t i = 0; i < C; i++) {
			float norm = (x[i] - m) * s;
			float dnorm = w[i] * d[i];

			dnorm_mean += dnorm;
			dnorm_norm_mean += dnorm * norm;
		}
		dnorm_mean /= (float)C;
		dnorm_norm_mean /= (float)C;
		for (size_t i = 0; i < C; i++) {
			float norm = (x[i] - m) * s;
			float dnorm = w[i] * d[i];

			dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
		}
	}
}

/* dweight and dbias sum over rows: split over channels */
static void layernorm_back_cols(void *a, size_t lo, size_t hi, int chunk)
{
	struct ln_arg *l = a;
	size_t C = (size_t)l->C;
	float *restrict dw = l->dweight, *restrict db = l->dbias;

	(void)chunk;
	for (size_t n = 0; n < (size_t)l->N; n++) {
		const float *restrict d = l->dout + n * C;
		const float *restrict x = l->inp + n * C;
		float m = l->cmean[n], s = l->crstd[n];

		for (size_t i = lo; i < hi; i++) {
			db[i] += d[i];
			dw[i] += (x[i] - m) * s * d[i];
		}
	}
}

void layernorm_backward(struct pool *p, float *dinp, float *dweight,
			float *dbias, const float *dout, const float *inp,
			const float *weight, const float *mean,
			const float *rstd, int N, int C)
{
	struct ln_arg l = { .dinp = dinp, .dweight = dweight, .dbias = dbias,
			    .dout = dout, .inp = inp, .weight = weight,
			    .cmean = mean, .crstd = rstd, .N = N, .C = C };

	pool_run(p, layernorm_back_rows, &l, (size_t)N);
	pool_run(p, layernorm_back_cols, &l, (size_t)C);
}

/* ---- matmul ---- */

struct mm_arg {
	float *out, *dbias;
	const float *bias, *dout;
	int N, OC;
};

static void bias_rows(void *a, size_t lo, size_t hi, int chunk)
{
	struct mm_arg *m = a;

	(void)chunk;
	for (size_t n = lo; n < hi; n++)
		memcpy(m->out + n * (size_t)m->OC, m->bias,
		       (size_t)m->OC * sizeof(float));
}

void matmul_forward(struct pool *p, float *out, const float *inp,
		    const float *weight, const float *bias, int N, int C,
		    int OC)
{
	float beta = 0.0f;

	if (bias) {
		struct mm_arg m = { .out = out, .bias = bias, .N = N, .OC = OC };

		pool_run(p, bias_rows, &m, (size_t)N);
		beta = 1.0f;
	}
	/* out (N,OC) = inp (N,C) · weight (OC,C)ᵀ [+ out] */
	psgemm(p, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, weight, C,
	       beta, out, OC);
}

static void bias_back_cols(void *a, size_t lo, size_t hi, int chunk)
{
	struct mm_arg *m = a;

	(void)chunk;
	for (size_t n = 0; n < (size_t)m->N; n++) {
		const float *d = m->dout + n * (size_t)m->OC;

		for (size_t o = lo; o < hi; o++)
			m->dbias[o] += d[o];
	}
}

void matmul_backward(struct pool *p, float *dinp, float *dweight,
		     float *dbias, const float *dout, const float *inp,
		     const float *weight, int N, int C, int OC)
{
	/* dinp (N,C) = dout (N,OC) · weight (OC,C) */
	psgemm(p, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, weight,
	       C, 0.0f, dinp, C);
	/* dweight (OC,C) += dout (N,OC)ᵀ · inp (N,C) */
	psgemm(p, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C,
	       1.0f, dweight, C);
	if (dbias) {
		struct mm_arg m = { .dbias = dbias, .dout = dout, .N = N, .OC = OC };

		pool_run(p, bias_back_cols, &m, (size_t)OC);
	}
}

/* ---- attention ---- */

/*
 * One (batch, head) pair per item: its products and its softmax rows run
 * together on one thread, while the (T,T) block is still in cache.
 */
struct att_arg {
	float *out, *att, *dqkv, *scratch;
	const float *qkv, *dout, *catt;
	int B, T, C, NH;
	float scale;
};

/* Causal softmax of a (T,T) score block, in place. */
VECTOR_CLONES static void causal_softmax(float *a, size_t T)
{
	for (size_t i = 0; i < T; i++) {
		float *row = a + i * T;
		float max = row[0], sum = 0, inv;

		for (size_t j = 1; j <= i; j++)
			max = row[j] > max ? row[j] : max;
		for (size_t j = 0; j <= i; j++) {
			row[j] = exp_neg(row[j] - max);
			sum += row[j];
		}
		inv = 1.0f / sum;
		for (size_t j = 0; j <= i; j++)
			row[j] *= inv;
		for (size_t j = i + 1; j < T; j++)
			row[j] = 0.0f;
	}
}

static void attention_heads(void *arg, size_t lo, size_t hi, int chunk)
{
	struct att_arg *s = arg;
	int T = s->T, C = s->C, NH = s->NH, hs = C / NH, C3 = 3 * C;

	(void)chunk;
	for (size_t bh = lo; bh < hi; bh++) {
		size_t b = bh / (size_t)NH, h = bh % (size_t)NH;
		const float *q = s->qkv + b * T * C3 + h * hs;
		const float *k = q + C, *v = q + 2 * C;
		float *a = s->att + bh * T * T;
		float *o = s->out + b * T * C + h * hs;

		/* a (T,T) = q (T,hs) · k (T,hs)ᵀ / √hs */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans,
			    T, T, hs, s->scale, q, C3, k, C3, 0.0f, a, T);
		causal_softmax(a, (size_t)T);
		/* o (T,hs) = a (T,T) · v (T,hs) */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
			    T, hs, T, 1.0f, a, T, v, C3, 0.0f, o, C);
	}
}

void attention_forward(struct pool *p, float *out, float *att,
		       const float *qkv, int B, int T, int C, int NH)
{
	struct att_arg s = { .out = out, .att = att, .qkv = qkv, .B = B,
			     .T = T, .C = C, .NH = NH,
			     .scale = 1.0f / sqrtf((float)(C / NH)) };

	pool_run(p, attention_heads, &s, (size_t)B * NH);
}

static void attention_back_heads(void *arg, size_t lo, size_t hi, int chunk)
{
	struct att_arg *s = arg;
	int T = s->T, C = s->C, NH = s->NH, hs = C / NH, C3 = 3 * C;

	(void)chunk;
	for (size_t bh = lo; bh < hi; bh++) {
		size_t b = bh / (size_t)NH, h = bh % (size_t)NH;
		const float *q = s->qkv + b * T * C3 + h * hs;
		const float *k = q + C, *v = q + 2 * C;
		const float *a = s->catt + bh * T * T;
		const float *d = s->dout + b * T * C + h * hs;
		float *dq = s->dqkv + b * T * C3 + h * hs;
		float *dk = dq + C, *dv = dq + 2 * C;
		float *da = s->scratch + bh * T * T;

		/* da (T,T) = d (T,hs) · v (T,hs)ᵀ */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans,
			    T, T, hs, 1.0f, d, C, v, C3, 0.0f, da, T);
		/* dv (T,hs) = a (T,T)ᵀ · d (T,hs) */
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans,
			    T, hs, T, 1.0f, a, T, d, C, 0.0f, dv, C3);
		/* softmax backward, scaled: da ← scale·a·(da − Σ a·da) */
		for (size_t i = 0; i < (size_t)T; i++) {
			const float *ar = a + i * T;
			float *dr = da + i * T;
			float dot = 0;

			for (size_t j = 0; j <= i; j++)
				dot += ar[j] * dr[j];
			for (size_t j = 0; j <= i; j++)
				dr[j] = s->scale * ar[j] * (dr[j] - dot);
			for (size_t j = i + 1; j < (size_t)T; j++)
				dr[j] = 0.0f;
		}
		/* dq (T,hs) = da (T,T) · k (T,hs) */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
			    T, hs, T, 1.0f, da, T, k, C3, 0.0f, dq, C3);
		/* dk (T,hs) = da (T,T)ᵀ · q (T,hs) */
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans,
			    T, hs, T, 1.0f, da, T, q, C3, 0.0f, dk, C3);
	}
}

void attention_backward(struct pool *p, float *dqkv, float *scratch,
			const float *dout, const float *qkv, const float *att,
			int B, int T, int C, int NH)
{
	struct att_arg s = { .dqkv = dqkv, .scratch = scratch, .dout = dout,
			     .qkv = qkv, .catt = att, .B = B, .T = T, .C = C,
			     .NH = NH, .scale = 1.0f / sqrtf((float)(C / NH)) };

	pool_run(p, attention_back_heads, &s, (size_t)B * NH);
}

/* ---- elementwise ---- */

#define GELU_SCALE 0.7978845608028654f   /* √(2/π) */

struct ew_arg {
	float *out;
	const float *a, *b;
};

VECTOR_CLONES static void gelu_chunk(void *arg, size_t lo, size_t hi, int chunk)
{
	struct ew_arg *e = arg;
	float *restrict out = e->out;
	const float *restrict inp = e->a;

	(void)chunk;
	for (size_t i = lo; i < hi; i++) {
		float x = inp[i];
		float u = GELU_SCALE * (x + 0.044715f * x * x * x);

		out[i] = 0.5f * x * (1.0f + tanh_fast(u));
	}
}

void gelu_forward(struct pool *p, float *out, const float *inp, size_t n)
{
	struct ew_arg e = { .out = out, .a = inp };

	pool_run(p, gelu_chunk, &e, n);
}

VECTOR_CLONES static void gelu_back_chunk(void *arg, size_t lo, size_t hi, int chunk)
{
	struct ew_arg *e = arg;
	float *dinp = e->out;
	const float *restrict inp = e->a;
	const float *dout = e->b;

	(void)chunk;
	for (size_t i = lo; i < hi; i++) {
		float x = inp[i];
		float u = GELU_SCALE * (x + 0.044715f * x * x * x);
		float th = tanh_fast(u);
		float sech2 = 1.0f - th * th;
		float g = 0.5f * (1.0f + th) +
			  0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);

		dinp[i] = g * dout[i];
	}
}

void gelu_backward(struct pool *p, float *dinp, const float *inp,
		   const float *dout, size_t n)
{
	struct ew_arg e = { .out = dinp, .a = inp, .b = dout };

	pool_run(p, gelu_back_chunk, &e, n);
}

static void residual_chunk(void *arg, size_t lo, size_t hi, int chunk)
{
	struct ew_arg *e = arg;

	(void)chunk;
	for (size_t i = lo; i < hi; i++)
		e->out[i] = e->a[i] + e->b[i];
}

void residual_forward(struct pool *p, float *out, const float *a,
		      const float *b, size_t n)
{
	struct ew_arg e = { .out = out, .a = a, .b = b };

	pool_run(p, residual_chunk, &e, n);
}

/* ---- cross-entropy ---- */

struct ce_arg {
	float *probs, *losses, *dlogits;
	const float *logits, *cprobs;
	const int *targets;
	float dloss;
	int V;
};

VECTOR_CLONES static void ce_rows(void *arg, size_t lo, size_t hi, int chunk)
{
	struct ce_arg *c = arg;
	size_t V = (size_t)c->V;

	(void)chunk;
	for (size_t n = lo; n < hi; n++) {
		const float *l = c->logits + n * V;
		float *p = c->probs + n * V;
		float max = l[0], sum = 0, inv;
		float lt = c->targets ? l[c->targets[n]] : 0.0f;  /* p may alias l */

		for (size_t i = 1; i < V; i++)
			max = l[i] > max ? l[i] : max;
		for (size_t i = 0; i < V; i++) {
			p[i] = exp_neg(l[i] - max);
			sum += p[i];
		}
		inv = 1.0f / sum;
		for (size_t i = 0; i < V; i++)
			p[i] *= inv;
		/* −log p, from the logits so a tiny p loses nothing */
		if (c->targets)
			c->losses[n] = logf(sum) - (lt - max);
	}
}

float crossentropy_forward(struct pool *p, float *probs, float *losses,
			   const float *logits, const int *targets, int N,
			   int V)
{
	struct ce_arg c = { .probs = probs, .losses = losses, .logits = logits,
			    .targets = targets, .V = V };
	double total = 0;

	pool_run(p, ce_rows, &c, (size_t)N);
	if (!targets)
		return 0.0f;
	for (int n = 0; n < N; n++)
		total += losses[n];
	return (float)(total / N);
}

static void ce_back_rows(void *arg, size_t lo, size_t hi, int chunk)
{
	struct ce_arg *c = arg;
	size_t V = (size_t)c->V;

	(void)chunk;
	for (size_t n = lo; n < hi; n++) {
		const float *pr = c->cprobs + n * V;
		float *d = c->dlogits + n * V;

		for (size_t i = 0; i < V; i++)
			d[i] = pr[i] * c->dloss;
		d[c->targets[n]] -= c->dloss;
	}
}

void crossentropy_backward(struct pool *p, float *dlogits, const float *probs,
			   const int *targets, float dloss, int N, int V)
{
	struct ce_arg c = { .dlogits = dlogits, .cprobs = probs,
			    .targets = targets, .dloss = dloss, .V = V };

	pool_run(p, ce_back_rows, &c, (size_t)N);
}
