/*
 * record: the data a run accumulates (samples, kills, restarts, the last
 * /status), each array bounded, and the two derived figures the report
 * needs: the model's parameter count and what data parallel would move.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "runner/run.h"

int run_record_init(struct run_record *r, const struct job_spec *js,
		    const char *job_file, const char *dir, struct err *e)
{
	memset(r, 0, sizeof(*r));
	snprintf(r->job, sizeof(r->job), "%s", js->name);
	snprintf(r->job_file, sizeof(r->job_file), "%s", job_file);
	snprintf(r->dir, sizeof(r->dir), "%s", dir);
	r->learners = js->learners.replicas;
	r->quorum = js->syncer.min_quorum;
	r->chaos = js->chaos.enabled;
	r->shards = js->syncer.shards;
	r->started_wall = clock_wall();
	r->params = run_param_count(&js->model);
	r->tokens_per_step = (uint64_t)js->optimizer.batch_size *
			     (uint64_t)jobspec_seq_len(js);
	syncer_status_init(&r->final);
	r->baseline.loss = r->twin.loss = NAN;
	r->done_at = NAN;
	r->restarts = calloc((size_t)r->learners, sizeof(int));
	r->crashes = calloc((size_t)r->learners, sizeof(int));
	if (!r->restarts || !r->crashes) {
		run_record_release(r);
		return err_set(e, "run: out of memory");
	}
	return 0;
}

void run_record_release(struct run_record *r)
{
	free(r->samples);
	free(r->kills);
	free(r->restarts);
	free(r->crashes);
	syncer_status_release(&r->final);
	free(r->twin.evals);
	free(r->baseline.evals);
	r->samples = NULL;
	r->kills = NULL;
	r->restarts = r->crashes = NULL;
	r->twin.evals = r->baseline.evals = NULL;
}

/* Doubles *cap up to max; 0 if there is room for one more. */
static int grow(void **p, size_t *cap, size_t n, size_t size, size_t max)
{
	size_t want;
	void *q;

	if (n < *cap)
		return 0;
	if (n >= max)
		return -1;
	want = *cap ? *cap * 2 : 256;
	if (want > max)
		want = max;
	q = realloc(*p, want * size);
	if (!q)
		return -1;
	*p = q;
	*cap = want;
	return 0;
}

int run_record_sample(struct run_record *r, const struct run_sample *s)
{
	if (grow((void **)&r->samples, &r->cap_samples, r->nsamples,
		 sizeof(*s), RUN_MAX_SAMPLES))
		return -1;
	r->samples[r->nsamples++] = *s;
	return 0;
}

int run_record_kill(struct run_record *r, double t, const struct chaos_kill *k)
{
	if (grow((void **)&r->kills, &r->cap_kills, r->nkills, sizeof(*r->kills),
		 RUN_MAX_KILLS))
		return -1;
	r->kills[r->nkills].t = t;
	r->kills[r->nkills].k = *k;
	r->nkills++;
	return 0;
}

uint64_t run_param_count(const struct job_model *m)
{
	uint64_t V = (uint64_t)m->vocab_size, T = (uint64_t)m->context;
	uint64_t C = (uint64_t)m->channels, L = (uint64_t)m->layers;

	/* wte + wpe + per layer (ln1 2C, qkv 3C²+3C, attproj C²+C, ln2 2C,
	 * fc 4C²+4C, fcproj 4C²+C) + lnf 2C + lm_head when untied */
	return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C +
	       (m->tied ? 0 : V * C);
}

double run_dp_bytes(uint64_t params, int learners, uint64_t tokens,
		    uint64_t tokens_per_step)
{
	double steps;

	if (learners < 2 || !tokens_per_step)
		return 0;
	steps = (double)tokens / ((double)learners * (double)tokens_per_step);
	return steps * 8.0 * (double)params * (double)(learners - 1);
}
