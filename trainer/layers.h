/*
 * layers: the forward and backward kernels of the decoder, llm.c style.
 *
 * Dimension legend: B batch, T time (sequence length), C channels,
 * NH heads, hs = C/NH head size, OC output channels, V vocabulary,
 * N rows (= B·T). Every tensor is row-major float32; shapes are in the
 * comments as (rows, cols) or (B, T, C).
 *
 * Every matrix product runs on OpenBLAS (cblas_sgemm), attention included
 * (one sgemm per (batch, head) and direction); the O(N·C) loops are the
 * kernels of kernels.h, built for AVX-512, AVX2 and SSE2 and chosen at
 * run time. Backward conventions, by argument:
 *   "+=" the kernel accumulates into it (weight/bias grads, and the
 *        residual-stream grad that a layernorm backward adds to);
 *   "="  the kernel overwrites it (no need to zero it first).
 * Every kernel takes the pool its loops run on (NULL: the caller's
 * thread); loops split into contiguous chunks, and no sum depends on the
 * split except where noted, so runs are deterministic for a given thread
 * count (OpenBLAS's and the pool's).
 */
#ifndef DDILOCO_LAYERS_H
#define DDILOCO_LAYERS_H

#include <stddef.h>

#include "trainer/pool.h"

/* out (B,T,C) = wte[inp] + wpe[t];  inp (B,T) token ids. */
void encoder_forward(struct pool *p, float *out, const int *inp,
		     const float *wte, const float *wpe, int B, int T, int C);
/* dwte (V,C) +=, dwpe (maxT,C) += from dout (B,T,C). */
void encoder_backward(struct pool *p, float *dwte, float *dwpe,
		      const float *dout, const int *inp, int B, int T, int C);

/* out (N,C) = layernorm(inp (N,C)) · weight (C) + bias (C);
 * mean, rstd (N) are kept for the backward. */
void layernorm_forward(struct pool *p, float *out, float *mean, float *rstd,
		       const float *inp, const float *weight,
		       const float *bias, int N, int C);
/* dinp (N,C) +=, dweight (C) +=, dbias (C) +=. */
void layernorm_backward(struct pool *p, float *dinp, float *dweight,
			float *dbias, const float *dout, const float *inp,
			const float *weight, const float *mean,
			const float *rstd, int N, int C);

/* out (N,OC) = inp (N,C) · weight (OC,C)ᵀ + bias (OC); bias may be NULL. */
void matmul_forward(struct pool *p, float *out, const float *inp,
		    const float *weight, const float *bias, int N, int C,
		    int OC);
/* dinp (N,C) = dout·weight; dweight (OC,C) += doutᵀ·inp; dbias (OC) +=
 * column sums of dout (dbias may be NULL). */
void matmul_backward(struct pool *p, float *dinp, float *dweight,
		     float *dbias, const float *dout, const float *inp,
		     const float *weight, int N, int C, int OC);

/*
 * Causal multi-head self-attention. qkv (B,T,3C) holds q, k, v side by
 * side; out (B,T,C) = softmax(q·kᵀ/√hs, causal)·v per head, heads side by
 * side; att (B,NH,T,T) keeps the probabilities (zero above the diagonal).
 */
void attention_forward(struct pool *p, float *out, float *att,
		       const float *qkv, int B, int T, int C, int NH);
/* dqkv (B,T,3C) = ; scratch (B,NH,T,T) is overwritten. */
void attention_backward(struct pool *p, float *dqkv, float *scratch,
			const float *dout, const float *qkv, const float *att,
			int B, int T, int C, int NH);

/*
 * GELU, tanh approximation (as GPT-2): pre (N,OC) += bias (OC) in place
 * (the matmul's bias, added here in the same pass; bias may be NULL),
 * then out (N,OC) = gelu(pre).
 */
void gelu_forward(struct pool *p, float *out, float *pre, const float *bias,
		  int N, int OC);
/* dinp = dout · gelu'(inp) (dinp may alias dout). */
void gelu_backward(struct pool *p, float *dinp, const float *inp,
		   const float *dout, size_t n);

/* out (N,C) = a + (b + bias (C)); bias may be NULL, out may alias a. */
void residual_forward(struct pool *p, float *out, const float *a,
		      const float *b, const float *bias, int N, int C);

/*
 * probs (N,V) = softmax(logits (N,V)), in place allowed; with targets (N),
 * losses (N) = −log probs[target]. Returns the mean loss (0 without
 * targets), summed in row order in double whatever the split.
 */
float crossentropy_forward(struct pool *p, float *probs, float *losses,
			   const float *logits, const int *targets, int N,
			   int V);
/* dlogits (N,V) = (probs − onehot(target)) · dloss; in place allowed. */
void crossentropy_backward(struct pool *p, float *dlogits, const float *probs,
			   const int *targets, float dloss, int N, int V);

#endif
