/*
 * kernels: the trainer's O(N·C) loops outside the matrix products —
 * GELU, layernorm rows, causal softmax blocks, residual adds, the
 * cross-entropy softmax, the column sums of bias and layernorm
 * gradients, AdamW and the sum of squares of the gradient —
 * written once in plain C and built for three instruction sets: SSE2
 * ("default"), AVX2 and AVX-512F. The set the CPU runs best is chosen at
 * run time (kernels_get); each kernel works on a contiguous range and
 * knows nothing of threads (layers.c and trainer.c split the work on the
 * pool).
 *
 * Every sum is kept in KERNELS_LANES independent accumulators, lane k
 * taking elements i ≡ k (mod lanes), added in a fixed tree at the end:
 * the compiler vectorises that without reassociating anything, and the
 * order of every operation is the C source's, so the three builds give
 * the same bits (tests/unit/test_kernels.c checks it, and every kernel
 * against a naive loop).
 *
 * Shapes as in layers.h: rows of C (or OC, V) contiguous floats.
 */
#ifndef DDILOCO_KERNELS_H
#define DDILOCO_KERNELS_H

#include <stddef.h>

#define KERNELS_LANES 16

/* AdamW's per-step constants (optim.h has the formula). */
struct kernels_adamw {
	float lr, beta1, beta2, eps, weight_decay, grad_scale;
	float bc1, bc2;         /* 1 − β1^t, 1 − β2^t */
};

struct kernels {
	const char *name;       /* "avx512", "avx2" or "default" */
	/* pre (rows,oc) += bias (oc) (bias may be NULL), then
	 * out (rows,oc) = gelu(pre); tanh approximation, as GPT-2 */
	void (*gelu_forward)(float *out, float *pre, const float *bias,
			     size_t rows, size_t oc);
	/* dinp (n) = dout · gelu'(inp); dinp may alias dout */
	void (*gelu_backward)(float *dinp, const float *inp, const float *dout,
			      size_t n);
	/* one row: out (C) = (x − mean)·rstd·w + b; writes mean and rstd */
	void (*layernorm_forward)(float *out, float *mean, float *rstd,
				  const float *x, const float *w,
				  const float *b, size_t C);
	/* one row: dx (C) += the layernorm input gradient */
	void (*layernorm_backward)(float *dx, const float *dout, const float *x,
				   const float *w, float mean, float rstd,
				   size_t C);
	/* a (T,T) score block, in place: causal softmax of each row, zero
	 * above the diagonal */
	void (*causal_softmax)(float *a, size_t T);
	/* da (T,T) ← scale·a·(da − Σⱼ a·da) per row, zero above the
	 * diagonal; a the probabilities of causal_softmax */
	void (*softmax_backward)(float *da, const float *a, size_t T,
				 float scale);
	/* out (rows,C) = a + (b + bias); bias may be NULL; out may alias a */
	void (*residual)(float *out, const float *a, const float *b,
			 const float *bias, size_t rows, size_t C);
	/* one row: p (V) = softmax(l) (p may alias l); returns Σ exp(l − max)
	 * and writes max */
	float (*softmax_row)(float *p, const float *l, size_t V, float *max);
	/* dst (cols) += Σ over rows of src (rows, ld), row by row in order;
	 * for a bias gradient */
	void (*colsum)(float *dst, const float *src, size_t rows, size_t cols,
		       size_t ld);
	/* dbias (cols) += Σ dout, dweight (cols) += Σ (x − mean)·rstd·dout
	 * over rows of dout and x (rows, ld), row by row in order */
	void (*layernorm_colsum)(float *dweight, float *dbias, const float *dout,
				 const float *x, const float *mean,
				 const float *rstd, size_t rows, size_t cols,
				 size_t ld);
	/* AdamW over n contiguous parameters */
	void (*adamw)(float *p, const float *g, float *m, float *v, size_t n,
		      const struct kernels_adamw *s);
	/* Σ g², in double */
	double (*sumsq)(const float *g, size_t n);
};

/*
 * The set in use: the widest the CPU runs, unless kernels_use chose
 * another. A process-wide choice, as an ifunc would be: it depends on
 * the CPU only, and results do not depend on it.
 */
const struct kernels *kernels_get(void);
/* The set called name, or NULL when unknown or the CPU lacks it. */
const struct kernels *kernels_named(const char *name);
/*
 * Use the set called name from now on (NULL: back to the CPU's best);
 * -1 when kernels_named refuses it. For tests and benchmarks, before any
 * thread runs a kernel.
 */
int kernels_use(const char *name);

/* The tanh every set uses (|error| < 2e-7 absolute). */
float kernels_tanhf(float x);

#endif
