/*
 * synthetic: a learner that trains nothing (docs/run.md, Synthetic
 * learners), a load generator for the exchange, sidecar, gRPC and
 * syncer at any model size.
 *
 * Its table is the job's: the reference GPT's cut of spec.model, or an
 * external model's from spec.learners.synthetic.tensors. Each step
 * moves θ by Δ(seed, learner, step): SYNTH_VEC pseudo-random values in
 * [−scale, scale] added to every s-th value from a step-dependent
 * offset, s chosen so a step moves at most SYNTH_TOUCH values. Then an
 * exchange_poll, as `ddiloco learner` does after a trainer step, and a
 * sleep to the next step's deadline (spec.learners.synthetic.stepTime).
 */
#ifndef DDILOCO_SYNTHETIC_H
#define DDILOCO_SYNTHETIC_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/exchange.h"
#include "common/fragment.h"
#include "common/jobspec.h"

#define SYNTH_VEC   4096        /* distinct values of one step's Δ */
#define SYNTH_TOUCH (1u << 20)  /* values a step moves, at most */

/* The job's fragment table and parameter count (no weights). */
int synthetic_table(const struct job_spec *js, struct frag_table *ft,
		    size_t *nparams, struct err *e);
/* Deterministic initial weights of an external model (its seed file):
 * uniform in [−0.02, 0.02] from spec.model.seed. */
void synthetic_init(float *params, size_t n, uint64_t seed);
/* params += Δ(seed, learner, step) over n values. */
void synthetic_delta(float *params, size_t n, uint64_t seed, int learner,
		     uint64_t step, double scale);

struct synthetic_run {
	const struct job_spec *js;
	int learner;
	struct exchange *x;
	float *params;              /* n values, started from the inbox */
	size_t n;
	uint64_t step;              /* steps done (the resume step at start) */
	const volatile sig_atomic_t *stop;
};
/* Steps until the sidecar marks the exchange done or *stop; 0. */
int synthetic_train(struct synthetic_run *r);

#endif
