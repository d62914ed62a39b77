/*
 * optim: AdamW, its schedule and gradient clipping (formulas in optim.h).
 * The update is one pass over p, g, m and v (kernels.h: the CPU's widest
 * build); the bias corrections are computed once per call in double.
 */
#include "trainer/optim.h"

#include <math.h>

#include "trainer/kernels.h"

void adamw_update(float *p, const float *g, float *m, float *v, size_t n,
		  const struct adamw_step *s)
{
	struct kernels_adamw k = {
		.lr = s->lr, .beta1 = s->beta1, .beta2 = s->beta2,
		.eps = s->eps, .weight_decay = s->weight_decay,
		.grad_scale = s->grad_scale,
		.bc1 = (float)(1.0 - pow(s->beta1, (double)s->t)),
		.bc2 = (float)(1.0 - pow(s->beta2, (double)s->t)),
	};

	kernels_get()->adamw(p, g, m, v, n, &k);
}

double grad_norm(const float *g, size_t n)
{
	return sqrt(kernels_get()->sumsq(g, n));
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
