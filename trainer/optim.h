/*
 * optim: the inner optimizer — AdamW with decoupled weight decay, the
 * learning-rate schedule (linear warmup, then cosine decay to
 * minLrRatio·lr), and global-norm gradient clipping.
 *
 * Schedule, for step s (0-based) with W warmup steps and D decay steps:
 *   s < W        lr·(s+1)/W
 *   D = 0        lr (constant after warmup)
 *   W ≤ s < D    min + ½(1 + cos(π·(s−W)/(D−W)))·(lr − min),  min = ratio·lr
 *   s ≥ D        min
 * D is spec.optimizer.cosineSteps, or when 0 budget.tokens/(M·B·T), or
 * when that is 0 too budget.outerSteps; 0 when none is set.
 */
#ifndef DDILOCO_OPTIM_H
#define DDILOCO_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "common/jobspec.h"

struct adamw_step {
	float lr, beta1, beta2, eps;
	float weight_decay;      /* applied as p −= lr·wd·p; 0 for non-matrices */
	float grad_scale;        /* clipping factor applied to g */
	uint64_t t;              /* 1-based step count, for bias correction */
};

/*
 * m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²  (g scaled by grad_scale)
 * p −= lr·( m̂ / (√v̂ + eps) + wd·p ),  m̂ = m/(1−β1ᵗ), v̂ = v/(1−β2ᵗ)
 */
void adamw_update(float *p, const float *g, float *m, float *v, size_t n,
		  const struct adamw_step *s);

/* √Σg² over n values, accumulated in double. */
double grad_norm(const float *g, size_t n);
/* The factor that brings norm down to clip (1 when below or clip = 0). */
float clip_scale(double norm, double clip);

uint64_t schedule_decay_steps(const struct job_spec *js, int learners,
			      int B, int T);
double schedule_lr(const struct job_optimizer *o, uint64_t step,
		   uint64_t decay_steps);

#endif
