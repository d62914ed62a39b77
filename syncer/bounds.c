/*
 * bounds: the checks of a learner's reports against the syncer's clock
 * (see bounds.h for the rules and why they hold for an honest learner).
 */
#include "syncer/bounds.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/prom.h"

int bounds_init(struct bounds *b, const struct bounds_config *cfg, int M,
		int P, double now)
{
	size_t n = (size_t)M * (size_t)P;

	memset(b, 0, sizeof(*b));
	b->cfg = *cfg;
	b->M = M;
	b->P = P;
	b->l = calloc(M > 0 ? (size_t)M : 1, sizeof(*b->l));
	b->from = malloc((n ? n : 1) * sizeof(*b->from));
	if (!b->l || !b->from) {
		bounds_release(b);
		return -1;
	}
	for (size_t i = 0; i < n; i++)
		b->from[i] = -1;
	bounds_restored(b, now);
	return 0;
}

void bounds_release(struct bounds *b)
{
	free(b->l);
	free(b->from);
	b->l = NULL;
	b->from = NULL;
}

static void ref_set(struct bounds_ref r[2], double t, uint64_t v)
{
	r[0] = r[1] = (struct bounds_ref){ .t = t, .v = v };
}

/* v accepted at t: the newer reference becomes the older one once it is
 * BOUNDS_WINDOW_S old, and v the newer one. */
static void ref_move(struct bounds_ref r[2], double t, uint64_t v)
{
	if (t - r[1].t >= BOUNDS_WINDOW_S) {
		r[0] = r[1];
		r[1] = (struct bounds_ref){ .t = t, .v = v };
	}
}

void bounds_restored(struct bounds *b, double t)
{
	for (int m = 0; m < b->M; m++)
		ref_set(b->l[m].tok_ref, t, b->l[m].tokens);
}

double bounds_allowed(const struct bounds *b, int m, double dt)
{
	double floor_st = b->cfg.min_step_time;

	if (m >= 0 && m < b->M && b->l[m].fastest > floor_st)
		floor_st = b->l[m].fastest;
	return BOUNDS_SLACK * (fmax(dt, 0) + BOUNDS_SLACK_S) / floor_st;
}

void bounds_join(struct bounds *b, int m, uint64_t resume, double now)
{
	struct bounds_learner *l;

	if (m < 0 || m >= b->M)
		return;
	l = &b->l[m];
	/* the resume step is the syncer's word: the learner jumps to it */
	if (!l->have_step || resume > l->step) {
		l->have_step = 1;
		l->step = resume;
		ref_set(l->step_ref, now, resume);
	}
	for (int p = 0; p < b->P; p++)
		if (b->from[(size_t)m * b->P + p] < 0)
			b->from[(size_t)m * b->P + p] = now;
}

/* The step a report claims, if above the highest accepted one, against
 * the reference step. */
static int check_step(const struct bounds *b, int m, uint64_t step, double now,
		      struct err *e)
{
	const struct bounds_learner *l = &b->l[m];
	const struct bounds_ref *r = &l->step_ref[0];
	double dt, allowed;

	if (!l->have_step || step <= l->step)
		return 0;
	dt = now - r->t;
	allowed = bounds_allowed(b, m, dt);
	if ((double)(step - r->v) > allowed)
		return err_set(e, "step %" PRIu64 " is %" PRIu64 " past step %"
			       PRIu64 " of %.3g s before: more than the %.0f "
			       "steps its step time allows", step,
			       step - r->v, r->v, dt, allowed);
	return 0;
}

static void accept_step(struct bounds *b, int m, uint64_t step, double now)
{
	struct bounds_learner *l = &b->l[m];

	if (!l->have_step) {
		l->have_step = 1;
		l->step = step;
		ref_set(l->step_ref, now, step);
		return;
	}
	if (step > l->step)
		l->step = step;
	ref_move(l->step_ref, now, l->step);
}

/* Counts a refusal; the message in e is the caller's to log. */
static int refuse(uint64_t *mine, uint64_t *all)
{
	++*mine;
	++*all;
	return -1;
}

int bounds_heartbeat(struct bounds *b, int m, const struct wire_heartbeat *hb,
		     uint64_t prev_tokens, int same_process, double now,
		     struct err *e)
{
	struct bounds_learner *l;
	const struct bounds_config *c = &b->cfg;
	double st = hb->step_time, saved, dt, cap;
	uint64_t T = c->tokens_per_step, inc, since;

	if (m < 0 || m >= b->M)
		return err_set(e, "no such learner");
	l = &b->l[m];
	b->heartbeats++;
	if (!isfinite(st))
		return err_set(e, "step time %g is not finite", st),
		       refuse(&l->refused_heartbeats, &b->heartbeats_refused);
	if (st < 0 || (st > 0 && st < c->min_step_time) || st > c->max_step_time)
		return err_set(e, "step time %g s is outside [%g, %g] "
			       "(spec.syncer.minStepTime, maxStepTime)", st,
			       c->min_step_time, c->max_step_time),
		       refuse(&l->refused_heartbeats, &b->heartbeats_refused);
	/* this report's step time counts toward the floor it is held to:
	 * a learner may say it got faster, within the range */
	saved = l->fastest;
	if (st > 0 && (l->fastest == 0 || st < l->fastest))
		l->fastest = st;
	if (T && (double)hb->tokens > (double)T * ((double)hb->step + 1)) {
		err_set(e, "%" PRIu64 " tokens at step %" PRIu64 ": more than "
			"B·T = %" PRIu64 " a step", hb->tokens, hb->step, T);
		goto refused;
	}
	if (check_step(b, m, hb->step, now, e))
		goto refused;
	/* what core_heartbeat will add: the increase, or a new total whole;
	 * with what was counted since the reference */
	inc = hb->tokens >= prev_tokens ? hb->tokens - prev_tokens : hb->tokens;
	since = l->tokens - l->tok_ref[0].v + inc;
	dt = now - l->tok_ref[0].t;
	cap = (double)T * (bounds_allowed(b, m, dt) + 1);
	if (T && (double)since > cap) {
		err_set(e, "%" PRIu64 " more tokens in %.3g s: more than the "
			"%.0f its step time allows", since, dt, cap);
		goto refused;
	}
	if (T && same_process && hb->tokens >= prev_tokens && l->have_tok_step) {
		uint64_t ds = hb->step > l->tok_step ? hb->step - l->tok_step : 0;

		if ((double)inc > (double)T * ((double)ds + 1)) {
			err_set(e, "%" PRIu64 " more tokens in %" PRIu64 " steps: "
				"more than B·T = %" PRIu64 " a step", inc, ds, T);
			goto refused;
		}
	}
	accept_step(b, m, hb->step, now);
	l->tokens += inc;
	ref_move(l->tok_ref, now, l->tokens);
	l->tok_step = hb->step;
	l->have_tok_step = 1;
	return 0;
refused:
	l->fastest = saved;
	return refuse(&l->refused_heartbeats, &b->heartbeats_refused);
}

int bounds_answer(struct bounds *b, int m, const struct wire_answer *a,
		  int merged, double now, struct err *e)
{
	struct bounds_learner *l;
	uint64_t T = b->cfg.tokens_per_step;

	if (m < 0 || m >= b->M)
		return err_set(e, "no such learner");
	l = &b->l[m];
	if (T && (double)a->tokens > (double)T * (double)a->steps)
		return err_set(e, "%" PRIu64 " tokens in %" PRIu64 " steps: more "
			       "than B·T = %" PRIu64 " a step", a->tokens,
			       a->steps, T),
		       refuse(&l->refused_answers, &b->answers_refused);
	if (check_step(b, m, a->step, now, e))
		return refuse(&l->refused_answers, &b->answers_refused);
	if (merged && a->fragment < (uint32_t)b->P) {
		double from = b->from[(size_t)m * b->P + a->fragment];
		double dt = from >= 0 ? now - from : 0;
		double allowed = bounds_allowed(b, m, dt);

		if (from >= 0 && (double)a->steps > allowed)
			return err_set(e, "%" PRIu64 " steps since its base, "
				       "%.3g s ago at the earliest: more than "
				       "the %.0f its step time allows",
				       a->steps, dt, allowed),
			       refuse(&l->refused_answers, &b->answers_refused);
	}
	accept_step(b, m, a->step, now);
	return 0;
}

void bounds_answered(struct bounds *b, int m, int p, double t_start)
{
	double *f;

	if (m < 0 || m >= b->M || p < 0 || p >= b->P)
		return;
	f = &b->from[(size_t)m * b->P + p];
	if (t_start > *f)
		*f = t_start;
}

void bounds_metrics(const struct bounds *b, struct buf *out)
{
	prom_counter(out, "ddiloco_syncer_answers_refused_bounds_total",
		     "Answers refused: claims beyond the bounds (also in rejected).",
		     b->answers_refused);
	prom_counter(out, "ddiloco_syncer_heartbeats_total",
		     "Heartbeats received.", b->heartbeats);
	prom_counter(out, "ddiloco_syncer_heartbeats_refused_total",
		     "Heartbeats refused: claims beyond the bounds.",
		     b->heartbeats_refused);
}
