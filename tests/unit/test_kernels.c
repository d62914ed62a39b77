/*
 * The trainer's kernel sets (trainer/kernels.h), each one this CPU runs:
 * every kernel against a naive double-precision loop written here, at
 * lengths with and without a tail past the lanes (tolerances: 1e-5
 * absolute + 1e-4 relative for the exp/tanh paths, 1e-6 + 1e-5 for sums
 * and AdamW, exact where the kernel's float expression in the same order
 * is the reference: residual adds, column sums),
 * and the wider sets against "default" bit for bit.
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
#include "trainer/kernels.h"
#include "tests/unit/testlib.h"

#define ATOL 1e-5
#define RTOL 1e-4
#define SUM_ATOL 1e-6
#define SUM_RTOL 1e-5

static const char *const sets[] = { "default", "avx2", "avx512" };
static const size_t lengths[] = { 1, 7, 16, 37, 64, 100, 130 };

static struct rng rng;

static float *randn(size_t n, double sd)
{
	float *x = malloc((n ? n : 1) * sizeof(float));

	for (size_t i = 0; i < n; i++)
		x[i] = (float)(sd * rng_normal(&rng));
	return x;
}

static void expect_close(const char *set, const char *what, const float *got,
			 const double *want, size_t n, double atol, double rtol)
{
	for (size_t i = 0; i < n; i++)
		if (fabs((double)got[i] - want[i]) > atol + rtol * fabs(want[i])) {
			print_error("%s %s[%zu]: got %.9g, want %.9g\n", set, what,
				    i, (double)got[i], want[i]);
			fail();
		}
}

static double ref_gelu(double x)
{
	return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

static double ref_gelu_grad(double x)
{
	double u = sqrt(2 / M_PI) * (x + 0.044715 * x * x * x), th = tanh(u);

	return 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * sqrt(2 / M_PI) *
	       (1 + 3 * 0.044715 * x * x);
}

static void tanh_is_accurate(void **state)
{
	double worst = 0;

	(void)state;
	for (int i = -200000; i <= 200000; i++) {
		float x = (float)i * 1e-4f;
		double d = fabs((double)kernels_tanhf(x) - tanh((double)x));

		worst = d > worst ? d : worst;
	}
	assert_less(worst, 2e-7);
	assert_exactly(kernels_tanhf(100.0f), 1.0f);
	assert_exactly(kernels_tanhf(-100.0f), -1.0f);
	assert_exactly(kernels_tanhf(0.0f), 0.0f);
}

static void gelu_matches_naive(const struct kernels *k)
{
	enum { R = 3 };

	for (size_t li = 0; li < sizeof(lengths) / sizeof(*lengths); li++) {
		size_t oc = lengths[li], n = R * oc;
		float *x = randn(n, 3), *bias = randn(oc, 1), *d = randn(n, 1);
		float *pre = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
		double *want = malloc(n * sizeof(double));

		memcpy(pre, x, n * sizeof(float));
		k->gelu_forward(out, pre, bias, R, oc);
		for (size_t i = 0; i < n; i++) {
			assert_exactly(pre[i], x[i] + bias[i % oc]);
			want[i] = ref_gelu(pre[i]);
		}
		expect_close(k->name, "gelu", out, want, n, ATOL, RTOL);
		k->gelu_forward(out, x, NULL, R, oc);
		for (size_t i = 0; i < n; i++)
			want[i] = ref_gelu(x[i]);
		expect_close(k->name, "gelu (no bias)", out, want, n, ATOL, RTOL);
		for (size_t i = 0; i < n; i++)
			want[i] = ref_gelu_grad(x[i]) * d[i];
		k->gelu_backward(d, x, d, n);      /* in place */
		expect_close(k->name, "gelu backward", d, want, n, ATOL, RTOL);
		free(x), free(bias), free(d), free(pre), free(out), free(want);
	}
}

static void layernorm_matches_naive(const struct kernels *k)
{
	for (size_t li = 0; li < sizeof(lengths) / sizeof(*lengths); li++) {
		size_t C = lengths[li];
		float *x = randn(C, 2), *w = randn(C, 1), *b = randn(C, 1);
		float *d = randn(C, 1), *out = malloc(C * sizeof(float));
		float *dx = randn(C, 1), *dx0 = malloc(C * sizeof(float));
		double *want = malloc(C * sizeof(double)), m = 0, v = 0, s;
		double dm = 0, dnm = 0;
		float mean, rstd;

		/* a large offset: the two-pass variance keeps its digits */
		for (size_t i = 0; i < C; i++)
			x[i] += 100.0f;
		for (size_t i = 0; i < C; i++)
			m += x[i];
		m /= (double)C;
		for (size_t i = 0; i < C; i++)
			v += (x[i] - m) * (x[i] - m);
		s = 1 / sqrt(v / (double)C + 1e-5);
		for (size_t i = 0; i < C; i++)
			want[i] = (x[i] - m) * s * w[i] + b[i];
		k->layernorm_forward(out, &mean, &rstd, x, w, b, C);
		expect_close(k->name, "layernorm", out, want, C, ATOL, RTOL);
		assert_near(mean, m, 1e-4);
		assert_near(rstd, s, 1e-4 * s);

		for (size_t i = 0; i < C; i++) {
			dm += (double)w[i] * d[i];
			dnm += (double)w[i] * d[i] * (x[i] - m) * s;
		}
		dm /= (double)C;
		dnm /= (double)C;
		memcpy(dx0, dx, C * sizeof(float));
		for (size_t i = 0; i < C; i++)   /* += */
			want[i] = dx0[i] + ((double)w[i] * d[i] - dm -
					    (x[i] - m) * s * dnm) * s;
		k->layernorm_backward(dx, d, x, w, mean, rstd, C);
		expect_close(k->name, "layernorm backward", dx, want, C, ATOL, RTOL);
		free(x), free(w), free(b), free(d), free(out), free(dx);
		free(dx0), free(want);
	}
}

static void softmax_matches_naive(const struct kernels *k)
{
	for (size_t T = 1; T <= 37; T += 4) {
		float *a = randn(T * T, 3), *da = randn(T * T, 1);
		double *p = malloc(T * T * sizeof(double));
		double *want = malloc(T * T * sizeof(double));

		for (size_t i = 0; i < T; i++) {
			double max = a[i * T], sum = 0, dot = 0;

			for (size_t j = 0; j <= i; j++)
				max = a[i * T + j] > max ? a[i * T + j] : max;
			for (size_t j = 0; j <= i; j++)
				sum += exp(a[i * T + j] - max);
			for (size_t j = 0; j < T; j++)
				p[i * T + j] = j <= i ? exp(a[i * T + j] - max) / sum : 0;
			for (size_t j = 0; j <= i; j++)
				dot += p[i * T + j] * da[i * T + j];
			for (size_t j = 0; j < T; j++)
				want[i * T + j] = 0.5 * p[i * T + j] * (da[i * T + j] - dot);
		}
		k->causal_softmax(a, T);
		expect_close(k->name, "causal softmax", a, p, T * T, ATOL, RTOL);
		for (size_t i = 0; i < T; i++)
			for (size_t j = i + 1; j < T; j++)
				assert_exactly(a[i * T + j], 0.0f);
		/* the backward from the kernel's own probabilities */
		k->softmax_backward(da, a, T, 0.5f);
		expect_close(k->name, "softmax backward", da, want, T * T, ATOL, RTOL);
		free(a), free(da), free(p), free(want);
	}
	for (size_t li = 0; li < sizeof(lengths) / sizeof(*lengths); li++) {
		size_t V = lengths[li];
		float *l = randn(V, 4), *p = malloc(V * sizeof(float)), max, sum;
		double *want = malloc(V * sizeof(double)), wmax = l[0], wsum = 0;

		for (size_t i = 0; i < V; i++)
			wmax = l[i] > wmax ? l[i] : wmax;
		for (size_t i = 0; i < V; i++)
			wsum += exp(l[i] - wmax);
		for (size_t i = 0; i < V; i++)
			want[i] = exp(l[i] - wmax) / wsum;
		sum = k->softmax_row(p, l, V, &max);
		assert_exactly(max, wmax);
		assert_near(sum, wsum, SUM_ATOL + RTOL * wsum);
		expect_close(k->name, "softmax row", p, want, V, ATOL, RTOL);
		sum = k->softmax_row(l, l, V, &max);   /* in place */
		assert_memory_equal(l, p, V * sizeof(float));
		free(l), free(p), free(want);
	}
}

/* column sums over 5 rows of n (row stride n + 3), in row order: exact */
static void colsums_match_naive(const struct kernels *k, size_t n)
{
	enum { R = 5 };
	size_t ld = n + 3;
	float *d = randn(R * ld, 1), *x = randn(R * ld, 1), *mean = randn(R, 1);
	float *rstd = randn(R, 1), *dw = randn(n, 1), *db = randn(n, 1);
	float *ww = malloc(n * sizeof(float)), *wb = malloc(n * sizeof(float));

	memcpy(ww, dw, n * sizeof(float));
	memcpy(wb, db, n * sizeof(float));
	for (size_t r = 0; r < R; r++)
		for (size_t i = 0; i < n; i++) {
			wb[i] += d[r * ld + i];
			ww[i] += (x[r * ld + i] - mean[r]) * rstd[r] * d[r * ld + i];
		}
	k->layernorm_colsum(dw, db, d, x, mean, rstd, R, n, ld);
	assert_memory_equal(dw, ww, n * sizeof(float));
	assert_memory_equal(db, wb, n * sizeof(float));
	for (size_t r = 0; r < R; r++)
		for (size_t i = 0; i < n; i++)
			wb[i] += x[r * ld + i];
	k->colsum(db, x, R, n, ld);
	assert_memory_equal(db, wb, n * sizeof(float));
	free(d), free(x), free(mean), free(rstd), free(dw), free(db);
	free(ww), free(wb);
}

static void sums_and_adamw_match_naive(const struct kernels *k)
{
	for (size_t li = 0; li < sizeof(lengths) / sizeof(*lengths); li++) {
		size_t n = lengths[li];
		float *a = randn(n, 1), *b = randn(n, 1), *bias = randn(n, 1);
		float *out = malloc(n * sizeof(float));
		float *p = randn(n, 1), *g = randn(n, 1), *m = randn(n, 0.1);
		float *v = malloc(n * sizeof(float));
		double *want = malloc(n * sizeof(double)), ss = 0;
		struct kernels_adamw s = { .lr = 0.01f, .beta1 = 0.9f,
					   .beta2 = 0.95f, .eps = 1e-8f,
					   .weight_decay = 0.1f, .grad_scale = 0.5f,
					   .bc1 = 0.19f, .bc2 = 0.0975f };

		/* residual: one row of n, then n rows of one */
		k->residual(out, a, b, bias, 1, n);
		for (size_t i = 0; i < n; i++)
			assert_exactly(out[i], a[i] + (b[i] + bias[i]));
		k->residual(out, a, b, NULL, n, 1);
		for (size_t i = 0; i < n; i++)
			assert_exactly(out[i], a[i] + b[i]);
		colsums_match_naive(k, n);
		for (size_t i = 0; i < n; i++)
			ss += (double)g[i] * g[i];
		assert_near(k->sumsq(g, n), ss, 1e-12 * ss);

		for (size_t i = 0; i < n; i++) {
			double gi = 0.5 * g[i], mi, vi;

			v[i] = fabsf(m[i]);
			mi = 0.9 * m[i] + 0.1 * gi;
			vi = 0.95 * v[i] + 0.05 * gi * gi;
			want[i] = p[i] - 0.01 * (mi / 0.19 / (sqrt(vi / 0.0975) + 1e-8) +
						 0.1 * p[i]);
		}
		k->adamw(p, g, m, v, n, &s);
		expect_close(k->name, "adamw", p, want, n, SUM_ATOL, SUM_RTOL);
		free(a), free(b), free(bias), free(out), free(p), free(g);
		free(m), free(v), free(want);
	}
}

static void every_set_matches_naive(void **state)
{
	int ran = 0;

	(void)state;
	for (size_t i = 0; i < sizeof(sets) / sizeof(*sets); i++) {
		const struct kernels *k = kernels_named(sets[i]);

		if (!k)
			continue;   /* the CPU lacks it */
		assert_string_equal(k->name, sets[i]);
		gelu_matches_naive(k);
		layernorm_matches_naive(k);
		softmax_matches_naive(k);
		sums_and_adamw_match_naive(k);
		ran++;
	}
	assert_at_least(ran, 1);
}

/* One run of every kernel on fixed inputs, results side by side in out. */
static void run_all(const struct kernels *k, float *out, size_t n)
{
	struct rng keep = rng;
	size_t T = 29, o = 0;
	float *x = randn(n, 2), *w = randn(n, 1), *b = randn(n, 1);
	float *a = randn(T * T, 3), *da = randn(T * T, 1);
	float *m = randn(n, 0.1), *v = randn(n, 0.1);
	struct kernels_adamw s = { .lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.95f,
				   .eps = 1e-8f, .grad_scale = 1,
				   .bc1 = 0.1f, .bc2 = 0.05f };
	float mean, rstd, max;
	double ss;

	rng = keep;   /* the same inputs for every set */
	for (size_t i = 0; i < n; i++)
		v[i] = fabsf(v[i]);
	k->gelu_forward(out + o, x, b, 1, n), o += n;
	k->gelu_backward(out + o, x, w, n), o += n;
	k->layernorm_forward(out + o, &mean, &rstd, x, w, b, n), o += n;
	out[o++] = mean, out[o++] = rstd;
	memcpy(out + o, w, n * sizeof(float));
	k->layernorm_backward(out + o, b, x, w, mean, rstd, n), o += n;
	k->causal_softmax(a, T);
	k->softmax_backward(da, a, T, 0.125f);
	memcpy(out + o, a, T * T * sizeof(float)), o += T * T;
	memcpy(out + o, da, T * T * sizeof(float)), o += T * T;
	out[o] = k->softmax_row(out + o + 1, x, n, &max), o += n + 1;
	out[o++] = max;
	k->adamw(x, w, m, v, n, &s);
	memcpy(out + o, x, n * sizeof(float)), o += n;
	ss = k->sumsq(w, n);
	memcpy(out + o, &ss, sizeof(ss));
	free(x), free(w), free(b), free(a), free(da), free(m), free(v);
}

static void wider_sets_give_the_same_bits(void **state)
{
	size_t n = 517, len = 8 * n + 2 * 29 * 29 + 16;
	float *want = calloc(len, sizeof(float)), *got = calloc(len, sizeof(float));

	(void)state;
	run_all(kernels_named("default"), want, n);
	for (size_t i = 1; i < sizeof(sets) / sizeof(*sets); i++) {
		const struct kernels *k = kernels_named(sets[i]);

		if (!k)
			continue;
		memset(got, 0, len * sizeof(float));
		run_all(k, got, n);
		assert_memory_equal(got, want, len * sizeof(float));
	}
	free(want);
	free(got);
}

static void choice(void **state)
{
	const struct kernels *best = kernels_get();

	(void)state;
	assert_null(kernels_named("sse9"));
	assert_non_null(kernels_named("default"));
	assert_ptr_equal(kernels_named(best->name), best);
	/* the widest the CPU runs */
	if (kernels_named("avx512"))
		assert_string_equal(best->name, "avx512");
	else if (kernels_named("avx2"))
		assert_string_equal(best->name, "avx2");
	assert_int_equal(kernels_use("sse9"), -1);
	assert_ptr_equal(kernels_get(), best);
	assert_int_equal(kernels_use("default"), 0);
	assert_string_equal(kernels_get()->name, "default");
	assert_int_equal(kernels_use(NULL), 0);
	assert_ptr_equal(kernels_get(), best);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(tanh_is_accurate),
		cmocka_unit_test(every_set_matches_naive),
		cmocka_unit_test(wider_sets_give_the_same_bits),
		cmocka_unit_test(choice),
	};

	rng_seed(&rng, 36);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
