/*
 * The decoder's kernels and model.
 *
 * Each layer's forward is compared with a naive double-precision loop
 * (tolerance: 1e-5 absolute + 1e-4 relative), and each backward with
 * central finite differences of that double forward (step 1e-6, tolerance
 * 1e-5 absolute + 1e-3 relative), over every input and weight of small
 * random shapes. The whole model's gradient is checked the same way on a
 * sample of its parameters, with finite differences of the float model
 * (step 1e-2, tolerance 2e-3 absolute + 5e-2 relative: float forward).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "trainer/layers.h"
#include "trainer/model.h"
#include "tests/unit/testlib.h"

#define FWD_ATOL 1e-5
#define FWD_RTOL 1e-4
#define FD_STEP 1e-6
#define BWD_ATOL 1e-5
#define BWD_RTOL 1e-3

static struct rng rng;

static void fill(float *x, size_t n, double sd)
{
	for (size_t i = 0; i < n; i++)
		x[i] = (float)(sd * rng_normal(&rng));
}

static double *to_double(const float *x, size_t n)
{
	double *d = malloc(n * sizeof(double));

	for (size_t i = 0; i < n; i++)
		d[i] = x[i];
	return d;
}

static void expect_close(const char *what, const float *got,
			 const double *want, size_t n, double atol, double rtol)
{
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)got[i] - want[i]);

		if (d > atol + rtol * fabs(want[i])) {
			print_error("%s[%zu]: got %.9g, want %.9g\n", what, i,
				    (double)got[i], want[i]);
			fail();
		}
	}
}

/*
 * Central differences of loss(ctx) with respect to every element of x
 * (which loss reads), compared with the analytic gradient.
 */
static void check_grad(const char *what, double *x, size_t n,
		       const float *analytic, double (*loss)(void *), void *ctx)
{
	double *num = malloc(n * sizeof(double));

	for (size_t i = 0; i < n; i++) {
		double keep = x[i], lp, lm;

		x[i] = keep + FD_STEP;
		lp = loss(ctx);
		x[i] = keep - FD_STEP;
		lm = loss(ctx);
		x[i] = keep;
		num[i] = (lp - lm) / (2 * FD_STEP);
	}
	expect_close(what, analytic, num, n, BWD_ATOL, BWD_RTOL);
	free(num);
}

/* ---- naive double references ---- */

static void ref_matmul(double *out, const double *inp, const double *w,
		       const double *bias, int N, int C, int OC)
{
	for (int n = 0; n < N; n++)
		for (int o = 0; o < OC; o++) {
			double s = bias ? bias[o] : 0;

			for (int i = 0; i < C; i++)
				s += inp[n * C + i] * w[o * C + i];
			out[n * OC + o] = s;
		}
}

static void ref_layernorm(double *out, const double *x, const double *w,
			  const double *b, int N, int C)
{
	for (int n = 0; n < N; n++) {
		double m = 0, v = 0;

		for (int i = 0; i < C; i++)
			m += x[n * C + i];
		m /= C;
		for (int i = 0; i < C; i++)
			v += (x[n * C + i] - m) * (x[n * C + i] - m);
		v /= C;
		for (int i = 0; i < C; i++)
			out[n * C + i] = (x[n * C + i] - m) / sqrt(v + 1e-5) * w[i] + b[i];
	}
}

static void ref_attention(double *out, const double *qkv, int B, int T,
			  int C, int NH)
{
	int hs = C / NH;
	double *a = malloc((size_t)T * sizeof(double));

	for (int b = 0; b < B; b++)
		for (int h = 0; h < NH; h++)
			for (int i = 0; i < T; i++) {
				const double *q = qkv + (b * T + i) * 3 * C + h * hs;
				double max = -1e300, sum = 0;

				for (int j = 0; j <= i; j++) {
					const double *k = qkv + (b * T + j) * 3 * C + C + h * hs;
					double s = 0;

					for (int d = 0; d < hs; d++)
						s += q[d] * k[d];
					a[j] = s / sqrt((double)hs);
					max = a[j] > max ? a[j] : max;
				}
				for (int j = 0; j <= i; j++) {
					a[j] = exp(a[j] - max);
					sum += a[j];
				}
				for (int d = 0; d < hs; d++) {
					double s = 0;

					for (int j = 0; j <= i; j++)
						s += a[j] / sum * qkv[(b * T + j) * 3 * C + 2 * C + h * hs + d];
					out[(b * T + i) * C + h * hs + d] = s;
				}
			}
	free(a);
}

static double ref_gelu(double x)
{
	return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

static double dot(const double *a, const double *b, size_t n)
{
	double s = 0;

	for (size_t i = 0; i < n; i++)
		s += a[i] * b[i];
	return s;
}

/* ---- kernels ---- */

struct mm_ctx {
	double *inp, *w, *b, *dout, *out;
	int N, C, OC;
};

static double mm_loss(void *p)
{
	struct mm_ctx *c = p;

	ref_matmul(c->out, c->inp, c->w, c->b, c->N, c->C, c->OC);
	return dot(c->out, c->dout, (size_t)c->N * c->OC);
}

static void matmul_matches_naive(void **state)
{
	enum { N = 7, C = 5, OC = 6 };
	float inp[N * C], w[OC * C], b[OC], out[N * OC], dout[N * OC];
	float dinp[N * C], dw[OC * C], db[OC];
	struct mm_ctx c = { .N = N, .C = C, .OC = OC };
	double want[N * OC];

	(void)state;
	fill(inp, N * C, 1);
	fill(w, OC * C, 1);
	fill(b, OC, 1);
	fill(dout, N * OC, 1);
	c.inp = to_double(inp, N * C);
	c.w = to_double(w, OC * C);
	c.b = to_double(b, OC);
	c.dout = to_double(dout, N * OC);
	c.out = want;

	matmul_forward(NULL, out, inp, w, b, N, C, OC);
	ref_matmul(want, c.inp, c.w, c.b, N, C, OC);
	expect_close("matmul out", out, want, N * OC, FWD_ATOL, FWD_RTOL);
	matmul_forward(NULL, out, inp, w, NULL, N, C, OC);
	ref_matmul(want, c.inp, c.w, NULL, N, C, OC);
	expect_close("matmul out (no bias)", out, want, N * OC, FWD_ATOL, FWD_RTOL);

	/* dinp is overwritten (start from garbage), dw and db accumulate */
	for (int i = 0; i < N * C; i++)
		dinp[i] = 1e6f;
	memset(dw, 0, sizeof(dw));
	memset(db, 0, sizeof(db));
	matmul_backward(NULL, dinp, dw, db, dout, inp, w, N, C, OC);
	check_grad("matmul dinp", c.inp, N * C, dinp, mm_loss, &c);
	check_grad("matmul dweight", c.w, OC * C, dw, mm_loss, &c);
	check_grad("matmul dbias", c.b, OC, db, mm_loss, &c);
	/* a second backward adds the same again */
	matmul_backward(NULL, dinp, dw, db, dout, inp, w, N, C, OC);
	for (int i = 0; i < OC; i++)
		dw[i] *= 0.5f, db[i] *= 0.5f;
	check_grad("matmul dbias twice", c.b, OC, db, mm_loss, &c);
	free(c.inp);
	free(c.w);
	free(c.b);
	free(c.dout);
}

struct ln_ctx {
	double *x, *w, *b, *dout, *out;
	int N, C;
};

static double ln_loss(void *p)
{
	struct ln_ctx *c = p;

	ref_layernorm(c->out, c->x, c->w, c->b, c->N, c->C);
	return dot(c->out, c->dout, (size_t)c->N * c->C);
}

static void layernorm_matches_naive(void **state)
{
	enum { N = 6, C = 9 };
	float x[N * C], w[C], b[C], out[N * C], dout[N * C], mean[N], rstd[N];
	float dx[N * C], dw[C], db[C];
	double want[N * C];
	struct ln_ctx c = { .N = N, .C = C, .out = want };

	(void)state;
	fill(x, N * C, 2);
	fill(w, C, 1);
	fill(b, C, 1);
	fill(dout, N * C, 1);
	c.x = to_double(x, N * C);
	c.w = to_double(w, C);
	c.b = to_double(b, C);
	c.dout = to_double(dout, N * C);
	layernorm_forward(NULL, out, mean, rstd, x, w, b, N, C);
	ref_layernorm(want, c.x, c.w, c.b, N, C);
	expect_close("layernorm out", out, want, N * C, FWD_ATOL, FWD_RTOL);
	memset(dx, 0, sizeof(dx));
	memset(dw, 0, sizeof(dw));
	memset(db, 0, sizeof(db));
	layernorm_backward(NULL, dx, dw, db, dout, x, w, mean, rstd, N, C);
	check_grad("layernorm dinp", c.x, N * C, dx, ln_loss, &c);
	check_grad("layernorm dweight", c.w, C, dw, ln_loss, &c);
	check_grad("layernorm dbias", c.b, C, db, ln_loss, &c);
	free(c.x);
	free(c.w);
	free(c.b);
	free(c.dout);
}

struct att_ctx {
	double *qkv, *dout, *out;
	int B, T, C, NH;
};

static double att_loss(void *p)
{
	struct att_ctx *c = p;

	ref_attention(c->out, c->qkv, c->B, c->T, c->C, c->NH);
	return dot(c->out, c->dout, (size_t)c->B * c->T * c->C);
}

static void attention_matches_naive(void **state)
{
	enum { B = 2, T = 5, C = 6, NH = 2 };
	float qkv[B * T * 3 * C], out[B * T * C], att[B * NH * T * T];
	float dout[B * T * C], dqkv[B * T * 3 * C], scratch[B * NH * T * T];
	double want[B * T * C];
	struct att_ctx c = { .B = B, .T = T, .C = C, .NH = NH, .out = want };

	(void)state;
	fill(qkv, B * T * 3 * C, 1);
	fill(dout, B * T * C, 1);
	c.qkv = to_double(qkv, B * T * 3 * C);
	c.dout = to_double(dout, B * T * C);
	attention_forward(NULL, out, att, qkv, B, T, C, NH);
	ref_attention(want, c.qkv, B, T, C, NH);
	expect_close("attention out", out, want, B * T * C, FWD_ATOL, FWD_RTOL);
	/* probabilities: rows sum to 1, zero above the diagonal */
	for (int r = 0; r < B * NH * T; r++) {
		double s = 0;

		for (int j = 0; j < T; j++) {
			s += att[r * T + j];
			if (j > r % T)
				assert_exactly(att[r * T + j], 0.0f);
		}
		assert_near(s, 1, 1e-6);
	}
	for (int i = 0; i < B * T * 3 * C; i++)
		dqkv[i] = 1e6f;   /* overwritten */
	attention_backward(NULL, dqkv, scratch, dout, qkv, att, B, T, C, NH);
	check_grad("attention dqkv", c.qkv, B * T * 3 * C, dqkv, att_loss, &c);
	free(c.qkv);
	free(c.dout);
}

struct gelu_ctx {
	double *x, *dout;
	size_t n;
};

static double gelu_loss(void *p)
{
	struct gelu_ctx *c = p;
	double s = 0;

	for (size_t i = 0; i < c->n; i++)
		s += ref_gelu(c->x[i]) * c->dout[i];
	return s;
}

static void gelu_matches_naive(void **state)
{
	enum { R = 4, OC = 19, N = R * OC };
	float x[N], pre[N], bias[OC], out[N], dout[N], dx[N];
	double want[N];
	struct gelu_ctx c = { .n = N };

	(void)state;
	fill(x, N, 3);
	fill(bias, OC, 1);
	fill(dout, N, 1);
	/* the bias is added into pre, which the backward then reads */
	memcpy(pre, x, sizeof(pre));
	gelu_forward(NULL, out, pre, bias, R, OC);
	for (int i = 0; i < N; i++) {
		assert_exactly(pre[i], x[i] + bias[i % OC]);
		want[i] = ref_gelu((double)pre[i]);
	}
	expect_close("gelu out (bias)", out, want, N, FWD_ATOL, FWD_RTOL);
	gelu_forward(NULL, out, x, NULL, R, OC);
	c.x = to_double(x, N);
	c.dout = to_double(dout, N);
	for (int i = 0; i < N; i++)
		want[i] = ref_gelu(c.x[i]);
	expect_close("gelu out", out, want, N, FWD_ATOL, FWD_RTOL);
	gelu_backward(NULL, dx, x, dout, N);
	check_grad("gelu dinp", c.x, N, dx, gelu_loss, &c);
	free(c.x);
	free(c.dout);
}

struct ce_ctx {
	double *logits;
	const int *targets;
	int N, V;
};

static double ce_loss(void *p)
{
	struct ce_ctx *c = p;
	double total = 0;

	for (int n = 0; n < c->N; n++) {
		const double *l = c->logits + n * c->V;
		double max = l[0], s = 0;

		for (int i = 1; i < c->V; i++)
			max = l[i] > max ? l[i] : max;
		for (int i = 0; i < c->V; i++)
			s += exp(l[i] - max);
		total += log(s) - (l[c->targets[n]] - max);
	}
	return total / c->N;
}

static void crossentropy_matches_naive(void **state)
{
	enum { N = 5, V = 11 };
	float logits[N * V], probs[N * V], losses[N], d[N * V];
	int targets[N] = { 0, 3, 10, 7, 3 };
	struct ce_ctx c = { .targets = targets, .N = N, .V = V };
	float loss;

	(void)state;
	fill(logits, N * V, 3);
	c.logits = to_double(logits, N * V);
	loss = crossentropy_forward(NULL, probs, losses, logits, targets, N, V);
	assert_near(loss, ce_loss(&c), 1e-5);
	/* in place gives the same */
	memcpy(d, logits, sizeof(d));
	assert_exactly(crossentropy_forward(NULL, d, losses, d, targets, N, V), loss);
	crossentropy_backward(NULL, d, probs, targets, 1.0f / N, N, V);
	check_grad("crossentropy dlogits", c.logits, N * V, d, ce_loss, &c);
	free(c.logits);
}

static void encoder_adds_rows(void **state)
{
	enum { B = 2, T = 3, C = 4, V = 5 };
	float wte[V * C], wpe[T * C], out[B * T * C], dout[B * T * C];
	float dwte[V * C] = { 0 }, dwpe[T * C] = { 0 };
	int inp[B * T] = { 1, 4, 1, 0, 2, 1 };

	(void)state;
	fill(wte, V * C, 1);
	fill(wpe, T * C, 1);
	fill(dout, B * T * C, 1);
	encoder_forward(NULL, out, inp, wte, wpe, B, T, C);
	for (int b = 0; b < B; b++)
		for (int t = 0; t < T; t++)
			for (int i = 0; i < C; i++)
				assert_exactly(out[(b * T + t) * C + i],
					       wte[inp[b * T + t] * C + i] + wpe[t * C + i]);
	encoder_backward(NULL, dwte, dwpe, dout, inp, B, T, C);
	/* token 1 appears at (0,0), (0,2), (1,2) */
	for (int i = 0; i < C; i++) {
		float want = dout[0 * C + i] + dout[2 * C + i] + dout[5 * C + i];

		assert_near(dwte[1 * C + i], want, 1e-6f);
		assert_exactly(dwte[3 * C + i], 0.0f);
		assert_near(dwpe[1 * C + i], (dout[1 * C + i] + dout[4 * C + i]), 1e-6f);
	}
}

/* ---- model ---- */

static const struct model_config small = { .V = 13, .maxT = 8, .L = 2, .NH = 2, .C = 8, .tied = 1 };

static void tensor_table_is_contiguous(void **state)
{
	struct model_tensor t[64];
	struct model_config c = small;
	int n;

	(void)state;
	n = model_tensors(&c, t, 64);
	assert_int_equal(n, 2 + 12 * 2 + 2);
	assert_string_equal(t[0].name, "wte");
	assert_true(t[0].is_embedding);
	assert_true(t[0].is_matrix);
	assert_string_equal(t[2].name, "h0.ln1w");
	assert_string_equal(t[4].name, "h0.qkvw");
	assert_int_equal(t[4].numel, 3 * 8 * 8);
	assert_true(t[4].is_matrix);
	assert_false(t[2].is_matrix);
	assert_false(t[5].is_matrix);
	assert_string_equal(t[n - 1].name, "lnfb");
	for (int i = 1; i < n; i++)
		assert_int_equal(t[i].offset, t[i - 1].offset + t[i - 1].numel);
	assert_int_equal(t[n - 1].offset + t[n - 1].numel, model_num_params(&c));
	/* V·C + maxT·C + L·(12C² + 13C) + 2C */
	assert_int_equal(model_num_params(&c), 13 * 8 + 8 * 8 + 2 * (12 * 64 + 13 * 8) + 16);
	c.tied = 0;
	n = model_tensors(&c, t, 64);
	assert_int_equal(n, 2 + 12 * 2 + 3);
	assert_string_equal(t[n - 1].name, "lm_head");
	assert_int_equal(model_num_params(&c), model_num_params(&small) + 13 * 8);
}

/* A shard's part of the initial model is the whole model's values at
 * its offsets, and nothing else in the array is written. */
static void init_of_a_part_writes_only_the_part(void **state)
{
	size_t n = model_num_params(&small);
	float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
	const size_t rg[3][2] = { { 3, 40 }, { n / 3, n / 2 }, { n - 7, n } };

	(void)state;
	model_init_params(&small, a, 42);
	for (size_t i = 0; i < n; i++)
		b[i] = -7.0f;
	model_init_params_part(&small, b, 42, rg, 3);
	for (size_t i = 0, r = 0; i < n; i++) {
		while (r < 3 && i >= rg[r][1])
			r++;
		if (r < 3 && i >= rg[r][0])
			assert_exactly(b[i], a[i]);
		else
			assert_exactly(b[i], -7.0f);
	}
	free(a);
	free(b);
}

static void init_is_pure_and_gpt2_like(void **state)
{
	size_t n = model_num_params(&small);
	float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
	struct model_tensor t[64];
	double ss = 0;

	(void)state;
	model_tensors(&small, t, 64);
	model_init_params(&small, a, 42);
	model_init_params(&small, b, 42);
	assert_memory_equal(a, b, n * sizeof(float));
	model_init_params(&small, b, 43);
	assert_memory_not_equal(a, b, t[0].numel * sizeof(float));
	for (size_t i = 0; i < t[2].numel; i++)
		assert_exactly(a[t[2].offset + i], 1.0f);    /* ln1w */
	for (size_t i = 0; i < t[5].numel; i++)
		assert_exactly(a[t[5].offset + i], 0.0f);    /* qkvb */
	for (size_t i = 0; i < t[0].numel; i++)
		ss += (double)a[i] * a[i];
	/* sd 0.02 over 104 draws: the sample sd is within 30% */
	assert_near(sqrt(ss / (double)t[0].numel), 0.02, 0.006);
	free(a);
	free(b);
}

static void frag_table_covers_model(void **state)
{
	struct frag_table ft, ft2;
	size_t total = 0;

	(void)state;
	assert_int_equal(model_frag_table(&small, 4, &ft, NULL), 0);
	assert_int_equal(ft.nfrags, 4);
	assert_int_equal(ft.ntensors, 2 + 12 * 2 + 2);
	for (int p = 0; p < 4; p++)
		total += ft.frags[p].numel;
	assert_int_equal(total, model_num_params(&small));
	assert_true(ft.tensors[0].is_embedding);
	assert_int_equal(model_frag_table(&small, 4, &ft2, NULL), 0);
	assert_int_equal(ft.fingerprint, ft2.fingerprint);
	frag_table_release(&ft);
	frag_table_release(&ft2);
	assert_int_equal(model_frag_table(&small, 1000, &ft, NULL), -1);
}

static void flops_count(void **state)
{
	struct model_config c = { .V = 256, .maxT = 64, .L = 2, .NH = 4, .C = 128, .tied = 1 };

	(void)state;
	/* 6·(2·12·128² + 256·128) + 12·2·64·128 */
	assert_exactly(model_flops_per_token(&c, 64), 6.0 * (24.0 * 16384 + 32768) + 12.0 * 2 * 64 * 128);
}

static void config_from_job(void **state)
{
	struct job_spec js;
	struct model_config c;
	struct err e;

	(void)state;
	jobspec_defaults(&js);
	assert_int_equal(model_config_from_job(&js.model, &c, &e), 0);
	assert_int_equal(c.V, 256);
	assert_int_equal(c.maxT, 64);
	assert_int_equal(c.C, 128);
	assert_int_equal(c.NH, 4);
	assert_int_equal(c.L, 2);
	assert_int_equal(c.tied, 1);
	js.model.channels = 130;
	assert_int_equal(model_config_from_job(&js.model, &c, &e), -1);
	assert_string_equal(e.msg, "model: spec.model.channels 130 is not a multiple of spec.model.heads 4");
}

/* Loss of the float model at its current parameters. */
static double model_loss_at(struct model *m, const int *in, const int *tg)
{
	return model_forward(m, in, tg);
}

static void model_gradient_matches_differences(void **state)
{
	const int B = 2, T = 6;
	struct model_config cs[2] = { small, small };
	int in[12], tg[12];

	(void)state;
	cs[1].tied = 0;
	for (int i = 0; i < B * T; i++) {
		in[i] = (int)(rng_next(&rng) % 13);
		tg[i] = (int)(rng_next(&rng) % 13);
	}
	for (int k = 0; k < 2; k++) {
		struct model *m = model_new(&cs[k], B, T, NULL);
		float *p, *g, *grad;
		size_t n;
		double base;

		assert_non_null(m);
		p = model_params(m);
		g = model_grads(m);
		n = model_size(m);
		model_init_params(&cs[k], p, 7);
		/* larger weights than init so every path carries gradient */
		for (size_t i = 0; i < n; i++)
			p[i] += (float)(0.3 * rng_normal(&rng));
		base = model_forward(m, in, tg);
		assert_greater(base, 0);
		assert_true(isfinite(base));
		model_backward(m);
		grad = malloc(n * sizeof(float));
		memcpy(grad, g, n * sizeof(float));
		for (size_t i = 0; i < n; i += 7) {
			float keep = p[i];
			double lp, lm, num;

			p[i] = keep + 1e-2f;
			lp = model_loss_at(m, in, tg);
			p[i] = keep - 1e-2f;
			lm = model_loss_at(m, in, tg);
			p[i] = keep;
			num = (lp - lm) / 2e-2;
			if (fabs(num - grad[i]) > 2e-3 + 5e-2 * fabs(num)) {
				print_error("model (tied %d) grad[%zu]: got %g, want %g\n",
					    cs[k].tied, i, (double)grad[i], num);
				fail();
			}
		}
		/* the wpe rows past T get no gradient */
		for (size_t i = (size_t)13 * 8 + (size_t)T * 8; i < (size_t)13 * 8 + 8 * 8; i++)
			assert_exactly(grad[i], 0.0f);
		free(grad);
		model_free(m);
	}
}

static void threads_are_deterministic(void **state)
{
	/*
	 * With threads, products are split by rows: the same thread count
	 * gives the same bits, another count the same values to rounding
	 * (1e-5 absolute + 1e-4 relative).
	 */
	struct model_config c = { .V = 40, .maxT = 16, .L = 2, .NH = 4, .C = 32, .tied = 1 };
	struct model *m[3];
	int in[48], tg[48];
	float loss[3];
	size_t n;

	(void)state;
	for (int k = 0; k < 3; k++) {
		m[k] = model_new(&c, 3, 16, NULL);
		assert_non_null(m[k]);
		model_init_params(&c, model_params(m[k]), 11);
	}
	assert_int_equal(model_set_threads(m[1], 3, NULL), 0);
	assert_int_equal(model_set_threads(m[2], 3, NULL), 0);
	assert_non_null(model_pool(m[1]));
	assert_null(model_pool(m[0]));
	for (int i = 0; i < 48; i++) {
		in[i] = (int)(rng_next(&rng) % 40);
		tg[i] = (int)(rng_next(&rng) % 40);
	}
	for (int k = 0; k < 3; k++) {
		loss[k] = model_forward(m[k], in, tg);
		model_backward(m[k]);
	}
	n = model_size(m[0]);
	assert_exactly(loss[1], loss[2]);
	assert_memory_equal(model_grads(m[1]), model_grads(m[2]), n * sizeof(float));
	assert_near(loss[0], loss[1], 1e-5f);
	{
		double *want = to_double(model_grads(m[0]), n);

		expect_close("grads with 3 threads", model_grads(m[1]), want, n,
			     1e-5, 1e-4);
		free(want);
	}
	for (int k = 0; k < 3; k++)
		model_free(m[k]);
}

static void forward_without_targets(void **state)
{
	struct model *m = model_new(&small, 1, 4, NULL);
	int in[4] = { 1, 2, 3, 4 };

	(void)state;
	model_init_params(&small, model_params(m), 1);
	assert_exactly(model_forward(m, in, NULL), 0.0f);
	assert_greater(model_forward(m, in, in), 0.0f);
	model_free(m);
	assert_null(model_new(&small, 1, 9, NULL));   /* T > maxT */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(matmul_matches_naive),
		cmocka_unit_test(layernorm_matches_naive),
		cmocka_unit_test(attention_matches_naive),
		cmocka_unit_test(gelu_matches_naive),
		cmocka_unit_test(crossentropy_matches_naive),
		cmocka_unit_test(encoder_adds_rows),
		cmocka_unit_test(tensor_table_is_contiguous),
		cmocka_unit_test(init_is_pure_and_gpt2_like),
		cmocka_unit_test(frag_table_covers_model),
		cmocka_unit_test(flops_count),
		cmocka_unit_test(config_from_job),
		cmocka_unit_test(model_gradient_matches_differences),
		cmocka_unit_test(threads_are_deterministic),
		cmocka_unit_test(init_of_a_part_writes_only_the_part),
		cmocka_unit_test(forward_without_targets),
	};

	rng_seed(&rng, 2024);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
