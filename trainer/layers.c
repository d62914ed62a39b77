/*
 * layers: forward/backward kernels of the decoder (see layers.h for the
 * dimension legend and the "=" / "+=" conventions).
 *
 * Matrix products are cblas_sgemm calls with explicit leading dimensions,
 * so attention reads q, k and v of one head straight out of the (B,T,3C)
 * qkv buffer and writes its output straight into the (B,T,C) buffer: no
 * copies, no transposes. The remaining loops are O(N·C) and are written as
 * plain inner loops over contiguous memory with no calls, so the compiler
 * vectorises them; exp and tanh are local polynomial versions for that
 * reason (libm's are opaque calls).
 */
#include "trainer/layers.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

/*
 * exp(x) for x ≤ 0 (Cephes single-precision polynomial, relative error
 * about 1e-7); inputs below -87 are clamped.
 */
static inline float exp_neg(float x)
{
	union { float f; int i; } s;
	float t, p;
	int k;

	if (x < -87.0f)
		x = -87.0f;
	if (x > 0.0f)
		x = 0.0f;
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

float layers_tanhf(float x)
{
	float a = x < 0 ? -x : x;
	float e = exp_neg(-2.0f * a);
	float r = (1.0f - e) / (1.0f + e);

	return x < 0 ? -r : r;
}

void encoder_forward(float *out, const int *inp, const float *wte,
		     const float *wpe, int B, int T, int C)
{
	for (int b = 0; b < B; b++)
		for (int t = 0; t < T; t++) {
			float *o = out + ((size_t)b * T + t) * C;
			const float *we = wte + (size_t)inp[b * T + t] * C;
			const float *pe = wpe + (size_t)t * C;

			for (int i = 0; i < C; i++)
				o[i] = we[i] + pe[i];
		}
}

void encoder_backward(float *dwte, float *dwpe, const float *dout,
		      const int *inp, int B, int T, int C)
{
	for (int b = 0; b < B; b++)
		for (int t = 0; t < T; t++) {
			const float *d = dout + ((size_t)b * T + t) * C;
			float *dwe = dwte + (size_t)inp[b * T + t] * C;
			float *dpe = dwpe + (size_t)t * C;

			for (int i = 0; i < C; i++) {
				dwe[i] += d[i];
				dpe[i] += d[i];
			}
		}
}

void layernorm_forward(float *out, float *mean, float *rstd,
		       const float *inp, const float *weight,
		       const float *bias, int N, int C)
{
	const float eps = 1e-5f;

	for (int n = 0; n < N; n++) {
		const float *x = inp + (size_t)n * C;
		float *o = out + (size_t)n * C;
		float m = 0, v = 0, s;

		for (int i = 0; i < C; i++)
			m += x[i];
		m /= (float)C;
		for (int i = 0; i < C; i++)
			v += (x[i] - m) * (x[i] - m);
		v /= (float)C;
		s = 1.0f / sqrtf(v + eps);
		for (int i = 0; i < C; i++)
			o[i] = (x[i] - m) * s * weight[i] + bias[i];
		mean[n] = m;
		rstd[n] = s;
	}
}

void layernorm_backward(float *dinp, float *dweight, float *dbias,
			const float *dout, const float *inp,
			const float *weight, const float *mean,
			const float *rstd, int N, int C)
{
	for (int n = 0; n < N; n++) {
		const float *d = dout + (size_t)n * C;
		const float *x = inp + (size_t)n * C;
		float *dx = dinp + (size_t)n * C;
		float m = mean[n], s = rstd[n];
		float dnorm_mean = 0, dnorm_norm_mean = 0;

		for (int i = 0; i < C; i++) {
			float norm = (x[i] - m) * s;
			float dnorm = weight[i] * d[i];

			dnorm_mean += dnorm;
			dnorm_norm_mean += dnorm * norm;
		}
		dnorm_mean /= (float)C;
		dnorm_norm_mean /= (float)C;
		for (int i = 0; i < C; i++) {
			float norm = (x[i] - m) * s;
			float dnorm = weight[i] * d[i];

			dbias[i] += d[i];
			dweight[i] += norm * d[i];
			dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
		}
	}
}

void matmul_forward(float *out, const float *inp, const float *weight,
		    const float *bias, int N, int C, int OC)
{
	float beta = 0.0f;

	if (bias) {
		for (int n = 0; n < N; n++)
			memcpy(out + (size_t)n * OC, bias, (size_t)OC * sizeof(float));
		beta = 1.0f;
	}
	/* out (N,OC) = inp (N,C) · weight (OC,C)ᵀ [+ out] */
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C,
		    1.0f, inp, C, weight, C, beta, out, OC);
}

void matmul_backward(float *dinp, float *dweight, float *dbias,
		     const float *dout, const float *inp, const float *weight,
		     int N, int C, int OC)
{
	/* dinp (N,C) = dout (N,OC) · weight (OC,C) */
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC,
		    1.0f, dout, OC, weight, C, 0.0f, dinp, C);
	/* dweight (OC,C) += dout (N,OC)ᵀ · inp (N,C) */
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N,
		    1.0f, dout, OC, inp, C, 1.0f, dweight, C);
	if (dbias)
		for (int n = 0; n < N; n++) {
			const float *d = dout + (size_t)n * OC;

			for (int o = 0; o < OC; o++)
				dbias[o] += d[o];
		}
}

/* Row-wise causal softmax of a (T,T) score block, in place. */
static void causal_softmax(float *a, int T)
{
	for (int i = 0; i < T; i++) {
		float *row = a + (size_t)i * T;
		float max = row[0], sum = 0, inv;

		for (int j = 1; j <= i; j++)
			max = row[j] > max ? row[j] : max;
		for (int j = 0; j <= i; j++) {
			row[j] = exp_neg(row[j] - max);
			sum += row[j];
		}
		inv = 1.0f / sum;
		for (int j = 0; j <= i; j++)
			row[j] *= inv;
		for (int j = i + 1; j < T; j++)
			row[j] = 0.0f;
	}
}

void attention_forward(float *out, float *att, const float *qkv,
		       int B, int T, int C, int NH)
{
	int hs = C / NH, C3 = 3 * C;
	float scale = 1.0f / sqrtf((float)hs);

	for (int b = 0; b < B; b++)
		for (int h = 0; h < NH; h++) {
			const float *q = qkv + (size_t)b * T * C3 + h * hs;
			const float *k = q + C, *v = q + 2 * C;
			float *a = att + ((size_t)b * NH + h) * T * T;
			float *o = out + (size_t)b * T * C + h * hs;

			/* a (T,T) = q (T,hs) · k (T,hs)ᵀ / √hs */
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans,
				    T, T, hs, scale, q, C3, k, C3, 0.0f, a, T);
			causal_softmax(a, T);
			/* o (T,hs) = a (T,T) · v (T,hs) */
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
				    T, hs, T, 1.0f, a, T, v, C3, 0.0f, o, C);
		}
}

void attention_backward(float *dqkv, float *scratch, const float *dout,
			const float *qkv, const float *att,
			int B, int T, int C, int NH)
{
	int hs = C / NH, C3 = 3 * C;
	float scale = 1.0f / sqrtf((float)hs);

	for (int b = 0; b < B; b++)
		for (int h = 0; h < NH; h++) {
			const float *q = qkv + (size_t)b * T * C3 + h * hs;
			const float *k = q + C, *v = q + 2 * C;
			const float *a = att + ((size_t)b * NH + h) * T * T;
			const float *d = dout + (size_t)b * T * C + h * hs;
			float *dq = dqkv + (size_t)b * T * C3 + h * hs;
			float *dk = dq + C, *dv = dq + 2 * C;
			float *da = scratch;

			/* da (T,T) = d (T,hs) · v (T,hs)ᵀ */
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans,
				    T, T, hs, 1.0f, d, C, v, C3, 0.0f, da, T);
			/* dv (T,hs) = a (T,T)ᵀ · d (T,hs) */
			cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans,
				    T, hs, T, 1.0f, a, T, d, C, 0.0f, dv, C3);
			/* softmax backward, scaled: da ← scale·a·(da − Σ a·da) */
			for (int i = 0; i < T; i++) {
				const float *ar = a + (size_t)i * T;
				float *dr = da + (size_t)i * T;
				float dot = 0;

				for (int j = 0; j <= i; j++)
					dot += ar[j] * dr[j];
				for (int j = 0; j <= i; j++)
					dr[j] = scale * ar[j] * (dr[j] - dot);
				for (int j = i + 1; j < T; j++)
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

#define GELU_SCALE 0.7978845608028654f   /* √(2/π) */

void gelu_forward(float *out, const float *inp, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		float x = inp[i];
		float u = GELU_SCALE * (x + 0.044715f * x * x * x);

		out[i] = 0.5f * x * (1.0f + layers_tanhf(u));
	}
}

void gelu_backward(float *dinp, const float *inp, const float *dout,
		   size_t n)
{
	for (size_t i = 0; i < n; i++) {
		float x = inp[i];
		float u = GELU_SCALE * (x + 0.044715f * x * x * x);
		float th = layers_tanhf(u);
		float sech2 = 1.0f - th * th;
		float g = 0.5f * (1.0f + th) +
			  0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);

		dinp[i] = g * dout[i];
	}
}

void residual_forward(float *out, const float *a, const float *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out[i] = a[i] + b[i];
}

float crossentropy_forward(float *probs, float *losses, const float *logits,
			   const int *targets, int N, int V)
{
	double total = 0;

	for (int n = 0; n < N; n++) {
		const float *l = logits + (size_t)n * V;
		float *p = probs + (size_t)n * V;
		float max = l[0], sum = 0, inv;
		float lt = targets ? l[targets[n]] : 0.0f;  /* p may alias l */

		for (int i = 1; i < V; i++)
			max = l[i] > max ? l[i] : max;
		for (int i = 0; i < V; i++) {
			p[i] = exp_neg(l[i] - max);
			sum += p[i];
		}
		inv = 1.0f / sum;
		for (int i = 0; i < V; i++)
			p[i] *= inv;
		if (targets) {
			/* −log p, from the logits so a tiny p loses nothing */
			float ce = logf(sum) - (lt - max);

			losses[n] = ce;
			total += ce;
		}
	}
	return targets ? (float)(total / N) : 0.0f;
}

void crossentropy_backward(float *dlogits, const float *probs,
			   const int *targets, float dloss, int N, int V)
{
	for (int n = 0; n < N; n++) {
		const float *p = probs + (size_t)n * V;
		float *d = dlogits + (size_t)n * V;

		for (int i = 0; i < V; i++)
			d[i] = p[i] * dloss;
		d[targets[n]] -= dloss;
	}
}
