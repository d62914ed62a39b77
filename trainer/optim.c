/*
 * optim: AdamW, its schedule and gradient clipping (formulas in optim.h).
 * The update loop is one pass over contiguous floats with no calls, so it
 * vectorises; the bias corrections are computed once per step in double.
 */
#include "trainer/optim.h"

#include <math.h>

/* an AVX2 build too, picked at load time: same bits (no contraction) */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("avx2", "default")))
#endif
void adamw_update(float *p, const float *g, float *m, float *v, size_t n,
		  const struct adamw_step *s)
{
	float b1 = s->beta1, b2 = s->beta2, gs = s->grad_scale;
	float bc1 = (float)(1.0 - pow(s->beta1, (double)s->t));
	float bc2 = (float)(1.0 - pow(s->beta2, (double)s->t));
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

double grad_norm(const float *g, size_t n)
{
	double s = 0;

	for (size_t i = 0; i < n; i++)
		s += (double)g[i] * g[i];
	return sqrt(s);
}

float clip_scale(double norm, double clip)
{
	if (clip <= 0 || norm <= clip)
		return 1.0f;
	return (float)(clip / norm);
}

uint64_t schedule_decay_steps(const struct job_spec *js, int learners,
			      int B, int T)
{
	uint64_t per_step = (uint64_t)learners * (uint64_t)B * (uint64_t)T;

	if (js->optimizer.cosine_steps > 0)
		return (uint64_t)js->optimizer.cosine_steps;
	if (js->budget.tokens > 0) {
		uint64_t d = js->budget.tokens / per_step;

		return d ? d : 1;
	}
	return js->budget.outer_steps;
}

double schedule_lr(const struct job_optimizer *o, uint64_t step,
		   uint64_t decay_steps)
{
	uint64_t W = (uint64_t)o->warmup_steps;
	double min = o->lr * o->min_lr_ratio, progress;

	if (step < W)
		return o->lr * (double)(step + 1) / (double)W;
	if (decay_steps == 0)
		return o->lr;
	if (step >= decay_steps)
		return min;
	progress = (double)(step - W) / (double)(decay_steps - W);
	return min + 0.5 * (1.0 + cos(M_PI * progress)) * (o->lr - min);
}
