/*
 * synthetic: the synthetic learner's table, Δ and step loop
 * (trainer/synthetic.h; docs/run.md, Synthetic learners).
 *
 * Δ is cheap at any size: one step fills SYNTH_VEC values from a
 * generator seeded by (seed, learner, step) and adds them, cycled, to
 * every s-th parameter from offset step mod s, so it costs about
 * SYNTH_TOUCH strided adds whatever n is, and over s steps every value
 * moves. The loop keeps a fixed cadence: step k ends no earlier than
 * start + k·stepTime (a late step starts the cadence again from now
 * rather than rushing to catch up).
 */
#include "trainer/synthetic.h"

#include <math.h>
#include <stdlib.h>

#include "common/log.h"
#include "common/util.h"
#include "trainer/model.h"

int synthetic_table(const struct job_spec *js, struct frag_table *ft,
		    size_t *nparams, struct err *e)
{
	const struct job_synthetic *y = &js->learners.synthetic;
	struct model_config cfg;

	if (js->model.kind != MODEL_EXTERNAL) {
		if (model_config_from_job(&js->model, &cfg, e) ||
		    model_frag_table(&cfg, js->syncer.fragments, ft, e))
			return -1;
		*nparams = model_num_params(&cfg);
		return 0;
	}
	/* its own table, else the one the job declares (spec.model.tensors) */
	if (y->ntensors)
		return frag_table_of_numels(ft, y->tensors, y->ntensors,
					    js->syncer.fragments, nparams, e);
	return frag_table_of_numels(ft, js->model.tensors, js->model.ntensors,
				    js->syncer.fragments, nparams, e);
}

void synthetic_init(float *params, size_t n, uint64_t seed)
{
	struct rng r;

	rng_seed(&r, seed);
	for (size_t i = 0; i < n; i++)
		params[i] = (float)(0.04 * rng_uniform(&r) - 0.02);
}

void synthetic_delta(float *params, size_t n, uint64_t seed, int learner,
		     uint64_t step, double scale)
{
	float v[SYNTH_VEC];
	uint64_t key[3] = { seed, (uint64_t)learner, step };
	size_t s = (n + SYNTH_TOUCH - 1) / SYNTH_TOUCH, k = 0;
	struct rng r;

	if (!n)
		return;
	rng_seed(&r, fnv64_update(FNV64_INIT, key, sizeof(key)));
	for (int i = 0; i < SYNTH_VEC; i++)
		v[i] = (float)(scale * (2 * rng_uniform(&r) - 1));
	for (size_t j = (size_t)(step % s); j < n; j += s)
		params[j] += v[k++ & (SYNTH_VEC - 1)];
}

int synthetic_train(struct synthetic_run *r)
{
	const struct job_synthetic *y = &r->js->learners.synthetic;
	uint64_t tokens = (uint64_t)r->js->optimizer.batch_size *
			  (uint64_t)jobspec_seq_len(r->js), rstep;
	struct exchange_step st = { .step = r->step, .loss = NAN };
	double step_time = y->step_time * jobspec_slowdown(r->js, r->learner);
	double last = clock_mono(), next = last + step_time;
	double next_log = last + 5, ema = 0;

	log_info("synthetic: %zu values, a step every %.3f s moving at most "
		 "%u of them by %g at most", r->n, step_time, SYNTH_TOUCH,
		 y->scale);
	while (!*r->stop) {
		struct exchange_poll_result res;
		double now, wait;

		synthetic_delta(r->params, r->n, y->seed, r->learner, r->step,
				y->scale);
		wait = next - clock_mono();
		if (wait > 0)
			sleep_seconds(wait);
		now = clock_mono();
		next = (wait > 0 ? next : now) + step_time;
		ema = ema > 0 ? 0.9 * ema + 0.1 * (now - last) : now - last;
		last = now;
		r->step++;
		st.step = r->step;
		st.tokens = tokens;
		st.tokens_total += tokens;
		st.step_time = ema;
		exchange_poll(r->x, r->params, &st, &res);
		if (res.repaired)
			log_warn("%s", exchange_last_error(r->x));
		if (exchange_resume(r->x, &rstep) && rstep > r->step) {
			log_info("resuming at step %llu (job step; was %llu)",
				 (unsigned long long)rstep,
				 (unsigned long long)r->step);
			r->step = rstep;
		}
		if (res.done) {
			log_info("job done at step %llu",
				 (unsigned long long)r->step);
			break;
		}
		if (now > next_log) {
			log_info("step %llu step %.1f ms",
				 (unsigned long long)r->step, ema * 1e3);
			next_log += 5;
		}
	}
	return 0;
}
