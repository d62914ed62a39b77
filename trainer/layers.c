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
 * channels when rows would race on a shared gradient) whose chunks call
 * the kernels of kernels.h (the widest set the CPU runs). Biases of
 * products followed by an elementwise pass (fc before GELU, the two
 * projections before their residual add) are added in that pass instead
 * of being copied into the product's output first.
 */
#include "trainer/layers.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#include "trainer/kernels.h"

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
	const struct kernels *k = kernels_get();
	size_t C = (size_t)l->C;

	(void)chunk;
	for (size_t n = lo; n < hi; n++)
		k->layernorm_forward(l->out + n * C, &l->mean[n], &l->rstd[n],
				     l->inp + n * C, l->weight, l->bias, C);
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
	const struct kernels *k = kernels_get();
	size_t C = (size_t)l->C;

	(void)chunk;
	for (size_t n = lo; n < hi; n++)
		k->layernorm_backward(l->dinp + n * C, l->dout + n * C,
				      l->inp + n * C, l->weight, l->cmean[n],
				      l->crstd[n], C);
}

/* dweight and dbias sum over rows: split over channels */
static void layernorm_back_cols(void *a, size_t lo, size_t hi, int chunk)
{
	struct ln_arg *l = a;

	(void)chunk;
	kernels_get()->layernorm_colsum(l->dweight + lo, l->dbias + lo,
					l->dout + lo, l->inp + lo, l->cmean,
					l->crstd, (size_t)l->N, hi - lo,
					(size_t)l->C);
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
	kernels_get()->colsum(m->dbias + lo, m->dout + lo, (size_t)m->N, hi - lo,
			      (size_t)m->OC);
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
		kernels_get()->causal_softmax(a, (size_t)T);
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
		kernels_get()->softmax_backward(da, a, (size_t)T, s->scale);
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

struct ew_arg {
	float *out, *pre;
	const float *a, *b, *bias;
	size_t cols;
};

static void gelu_rows(void *arg, size_t lo, size_t hi, int chunk)
{
	struct ew_arg *e = arg;

	(void)chunk;
	kernels_get()->gelu_forward(e->out + lo * e->cols, e->pre + lo * e->cols,
				    e->bias, hi - lo, e->cols);
}

void gelu_forward(struct pool *p, float *out, float *pre, const float *bias,
		  int N, int OC)
{
	struct ew_arg e = { .out = out, .pre = pre, .bias = bias,
			    .cols = (size_t)OC };

	pool_run(p, gelu_rows, &e, (size_t)N);
}

static void gelu_back_chunk(void *arg, size_t lo, size_t hi, int chunk)
{
	struct ew_arg *e = arg;

	(void)chunk;
	kernels_get()->gelu_backward(e->out + lo, e->a + lo, e->b + lo, hi - lo);
}

void gelu_backward(struct pool *p, float *dinp, const float *inp,
		   const float *dout, size_t n)
{
	struct ew_arg e = { .out = dinp, .a = inp, .b = dout };

	pool_run(p, gelu_back_chunk, &e, n);
}

static void residual_rows(void *arg, size_t lo, size_t hi, int chunk)
{
	struct ew_arg *e = arg;
	size_t o = lo * e->cols;

	(void)chunk;
	kernels_get()->residual(e->out + o, e->a + o, e->b + o, e->bias, hi - lo,
				e->cols);
}

void residual_forward(struct pool *p, float *out, const float *a,
		      const float *b, const float *bias, int N, int C)
{
	struct ew_arg e = { .out = out, .a = a, .b = b, .bias = bias,
			    .cols = (size_t)C };

	pool_run(p, residual_rows, &e, (size_t)N);
}

/* ---- cross-entropy ---- */

struct ce_arg {
	float *probs, *losses, *dlogits;
	const float *logits, *cprobs;
	const int *targets;
	float dloss;
	int V;
};

static void ce_rows(void *arg, size_t lo, size_t hi, int chunk)
{
	struct ce_arg *c = arg;
	const struct kernels *k = kernels_get();
	size_t V = (size_t)c->V;

	(void)chunk;
	for (size_t n = lo; n < hi; n++) {
		const float *l = c->logits + n * V;
		float lt = c->targets ? l[c->targets[n]] : 0.0f;  /* p may alias l */
		float max, sum = k->softmax_row(c->probs + n * V, l, V, &max);

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
