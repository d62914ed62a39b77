/*
 * chaos: the kill schedule of spec.chaos; see chaos.h for its rules.
 *
 * Two generators from one seed: `rng` draws the gaps, `pick` the victims,
 * so the times are a function of the seed alone and the victims of the
 * seed plus what the caller reported as down. No clock, no I/O: the
 * caller passes `now` and owns the processes or pods.
 */
#include "common/chaos.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static double gap(struct chaos *c)
{
	if (c->cfg.schedule == CHAOS_INTERVAL)
		return c->cfg.interval_seconds;
	return rng_exponential(&c->rng, c->cfg.mtbf_seconds);
}

/* Moves to the time after t, or INFINITY past stopAfterSeconds. */
static void advance(struct chaos *c, double t)
{
	double next = t + gap(c);

	if (c->cfg.stop_after_seconds > 0 && next > c->cfg.stop_after_seconds)
		next = INFINITY;
	c->next = next;
}

void chaos_init(struct chaos *c, const struct job_chaos *cfg, int learners)
{
	memset(c, 0, sizeof(*c));
	c->cfg = *cfg;
	c->learners = learners;
	rng_seed(&c->rng, cfg->seed);
	rng_seed(&c->pick, cfg->seed ^ 0x9e3779b97f4a7c15ULL);
	c->next = INFINITY;
	if (cfg->enabled && cfg->targets && learners > 0)
		advance(c, cfg->start_after_seconds);
}

double chaos_next_time(const struct chaos *c)
{
	return c->next;
}

int chaos_due(struct chaos *c, double now, const struct chaos_view *v,
	      struct chaos_kill *out)
{
	int down = v->syncer_down ? 1 : 0, up = 0, n = 0, k;
	int t = c->cfg.targets;

	while (c->next <= now) {
		double when = c->next;

		advance(c, when);
		down = v->syncer_down ? 1 : 0;
		up = 0;
		for (int i = 0; i < v->learners; i++) {
			if (v->slot_down[i])
				down++;
			else
				up++;
		}
		n = ((t & CHAOS_TARGET_LEARNERS) ? up : 0) +
		    ((t & CHAOS_TARGET_SIDECARS) ? up : 0) +
		    ((t & CHAOS_TARGET_SYNCER) && !v->syncer_down ? 1 : 0);
		if (down >= c->cfg.max_down || n == 0) {
			c->skipped++;
			continue;
		}
		/* the k-th candidate: learners up, then sidecars up, then syncer */
		k = (int)(rng_next(&c->pick) % (uint64_t)n);
		out->time = when;
		out->seq = ++c->kills;
		for (int pass = 0; pass < 2; pass++) {
			int bit = pass ? CHAOS_TARGET_SIDECARS : CHAOS_TARGET_LEARNERS;

			if (!(t & bit))
				continue;
			for (int i = 0; i < v->learners; i++) {
				if (v->slot_down[i])
					continue;
				if (k-- == 0) {
					out->kind = pass ? CHAOS_SIDECAR : CHAOS_LEARNER;
					out->index = i;
					return 1;
				}
			}
		}
		out->kind = CHAOS_SYNCER;
		out->index = 0;
		return 1;
	}
	return 0;
}

const char *chaos_kill_name(const struct chaos_kill *k, char *buf, int n)
{
	if (k->kind == CHAOS_SYNCER)
		snprintf(buf, (size_t)n, "syncer");
	else
		snprintf(buf, (size_t)n, "%s-%d",
			 k->kind == CHAOS_LEARNER ? "learner" : "sidecar", k->index);
	return buf;
}

int chaos_run_due(struct chaos *c, double now, const struct chaos_view *v,
		  const struct chaos_executor *x, struct err *e)
{
	struct chaos_kill k;
	int done = 0;

	/*
	 * One kill per call: the executor changes what is down, and the
	 * caller's view must say so before the next decision.
	 */
	if (chaos_due(c, now, v, &k)) {
		if (x->kill(x->ctx, &k, e))
			return -1;
		done++;
	}
	return done;
}
