/*
 * layers: the forward and backward kernels of the decoder, llm.c style.
 *
 * Dimension legend: B batch, T time (sequence length), C channels,
 * NH heads, hs = C/NH head size, OC output channels, V vocabulary,
 * N rows (= B·T). Every tensor is row-major float32; shapes are in the
 * comments as (rows, cols) or (B, T, C).
 *
 * Every matrix product runs on OpenBLAS (cblas_sgemm), attention included
 * (one sgemm per (batch, head) and direction); the O(N·C) loops are
 * written to vectorise. Backward conventions, by argument:
 *   "+=" the kernel accumulates into it (weight/bias grads, and the
 *        residual-stream grad that a layernorm backward adds to);
 *   "="  the kernel overwrites it (no need to zero it first).
 * Runs are deterministic for a given OpenBLAS thread count.
 */
#ifndef DDILOCO_LAYERS_H
#define DDILOCO_LAYERS_H

#include <stddef.h>

/* out (B,T,C) = wte[inp] + wpe[t];  inp (B,T) token ids. */
void encoder_forward(float *out, const int *inp, const float *wte,
		     const float *wpe, int B, int T, int C);
/* dwte (V,C) +=, dwpe (maxT,C) += from dout (B,T,C). */
void encoder_backward(float *dwte, float *dwpe, const float *dout,
		      const int *inp, int B, int T, int C);

/* out (N,C) = layernorm(inp (N,C)) · weight (C) + bias (C);
 * mean, rstd (N) are kept for the backward. */
void layernorm_forward(float *out, float *mean, float *rstd,
		       const float *inp, const float *weight,
		       const float *bias, int N, int C);
/* dinp (N,C) +=, dweight (C) +=, dbias (C) +=. */
void layernorm_backward(float *dinp, float *dweight, float *dbias,
			const float *dout, const float *inp,
			const float *weight, const float *mean,
			const float *rstd, int N, int C);

/* out (N,OC) = inp (N,C) · weight (OC,C)ᵀ + bias (OC); bias may be NULL. */
void matmul_forward(float *out, const float *inp, const float *weight,
		    const float *bias, int N, int C, int OC);
/* dinp (N,C) = dout·weight; dweight (OC,C) += doutᵀ·inp; dbias (OC) +=
 * column sums of dout (dbias may be NULL). */
void matmul_backward(float *dinp, float *dweight, float *dbias,
		     const float *dout, const float *inp, const float *weight,
		     int N, int C, int OC);

/*
 * Causal multi-head self-attention. qkv (B,T,3C) holds q, k, v side by
 * side; out (B,T,C) = softmax(q·kᵀ/√hs, causal)·v per head, heads side by
 * side; att (B,NH,T,T) keeps the probabilities (zero above the diagonal).
 */
void attention_forward(float *out, float *att, const float *qkv,
		       int B, int T, int C, int NH);
/* dqkv (B,T,3C) = ; scratch holds T·T floats. */
void attention_backward(float *dqkv, float *scratch, const float *dout,
			const float *qkv, const float *att,
			int B, int T, int C, int NH);

/* GELU, tanh approximation (as GPT-2), elementwise over n. */
void gelu_forward(float *out, const float *inp, size_t n);
/* dinp = dout · gelu'(inp). */
void gelu_backward(float *dinp, const float *inp, const float *dout,
		   size_t n);

/* out = a + b, elementwise over n (out may alias a). */
void residual_forward(float *out, const float *a, const float *b, size_t n);

/*
 * probs (N,V) = softmax(logits (N,V)), in place allowed; with targets (N),
 * losses (N) = −log probs[target]. Returns the mean loss (0 without targets).
 */
float crossentropy_forward(float *probs, float *losses, const float *logits,
			   const int *targets, int N, int V);
/* dlogits (N,V) = (probs − onehot(target)) · dloss; in place allowed. */
void crossentropy_backward(float *dlogits, const float *probs,
			   const int *targets, float dloss, int N, int V);

/* A vectorisable tanh (|error| < 2e-7 absolute), used by GELU. */
float layers_tanhf(float x);

#endif
