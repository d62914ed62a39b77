/*
 * bounds: the checks of a learner's reports against the syncer's clock
 * (see bounds.h for the rules and why they hold for an honest learner).
 */
#include "syncer/bounds.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
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
	b->pace = calloc(M > 0 ? (size_t)M : 1, sizeof(*b->pace));
	if (!b->l || !b->from || !b->pace) {
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
	free(b->pace);
	b->l = NULL;
	b->from = NULL;
	b->pace = NULL;
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

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, c = *(const double *)y;

	return (a > c) - (a < c);
}

/* The learners' fastest step times, sorted: after one of them changed. */
static void pace_sort(struct bounds *b)
{
	b->npace = 0;
	for (int j = 0; j < b->M; j++)
		if (b->l[j].fastest > 0)
			b->pace[b->npace++] = b->l[j].fastest;
	qsort(b->pace, (size_t)b->npace, sizeof(*b->pace), cmp_double);
}

double bounds_pace(const struct bounds *b, int m)
{
	int k = b->cfg.quorum > 1 ? b->cfg.quorum : 1, n = b->npace;
	double mine = m >= 0 && m < b->M ? b->l[m].fastest : 0;

	if (mine > 0)
		n--;           /* the others only */
	if (n <= 0)
		return 0;
	if (k > n)
		k = n;
	/* m's own value among the first k of all moves the others' k-th
	 * one place on (equal values are the same value) */
	return mine > 0 && mine <= b->pace[k - 1] ? b->pace[k] : b->pace[k - 1];
}

double bounds_floor(const struct bounds *b, int m)
{
	double floor_st = b->cfg.min_step_time;

	if (m < 0 || m >= b->M)
		return floor_st;
	floor_st = fmax(floor_st, b->l[m].fastest);
	return fmax(floor_st, bounds_pace(b, m) / BOUNDS_PACE_SPREAD);
}

double bounds_allowed(const struct bounds *b, int m, double dt)
{
	return BOUNDS_SLACK * (fmax(dt, 0) + BOUNDS_SLACK_S) / bounds_floor(b, m);
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
 * the reference step: -1 (e says why) when past it, *credit the most the
 * clock allows; else 0 and *credit = step. */
static int check_step(const struct bounds *b, int m, uint64_t step, double now,
		      uint64_t *credit, struct err *e)
{
	const struct bounds_learner *l = &b->l[m];
	const struct bounds_ref *r = &l->step_ref[0];
	double dt, allowed;

	*credit = step;
	if (!l->have_step || step <= l->step)
		return 0;
	dt = now - r->t;
	allowed = bounds_allowed(b, m, dt);
	if ((double)(step - r->v) <= allowed)
		return 0;
	*credit = r->v + (uint64_t)allowed;
	if (*credit < l->step)
		*credit = l->step;
	return err_set(e, "step %" PRIu64 " is %" PRIu64 " past step %"
		       PRIu64 " of %.3g s before: more than the %.0f "
		       "steps the job's pace allows", step,
		       step - r->v, r->v, dt, allowed);
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

/* A claim of learner m past the clock at now: a cut, counted; a strike
 * when BOUNDS_STRIKE_S after the last; maxClaimCuts strikes exclude it. */
static void cut(struct bounds *b, int m, double now)
{
	struct bounds_learner *l = &b->l[m];

	l->cuts++;
	b->cuts++;
	if (!l->strikes || now - l->strike_t >= BOUNDS_STRIKE_S) {
		l->strikes++;
		l->strike_t = now;
	}
	if (b->cfg.max_cuts > 0 && l->strikes >= (uint64_t)b->cfg.max_cuts &&
	    !l->excluded) {
		l->excluded = 1;
		b->excluded++;
	}
}

int bounds_excluded(const struct bounds *b, int m)
{
	return m >= 0 && m < b->M && b->l[m].excluded;
}

/* Learner m is excluded: every report of it is refused, e says why. */
int bounds_why_excluded(const struct bounds *b, int m, struct err *e)
{
	return err_set(e, "excluded: %" PRIu64 " of its claims were cut, "
		       "%" PRIu64 " times %g s apart (spec.syncer.maxClaimCuts "
		       "%d)", b->l[m].cuts, b->l[m].strikes, BOUNDS_STRIKE_S,
		       b->cfg.max_cuts);
}

int bounds_heartbeat(struct bounds *b, int m, const struct wire_heartbeat *hb,
		     uint64_t prev_tokens, int same_process, double now,
		     struct err *e)
{
	struct bounds_learner *l;
	const struct bounds_config *c = &b->cfg;
	double st = hb->step_time, saved, dt, cap;
	uint64_t T = c->tokens_per_step, inc, since, credit;

	if (m < 0 || m >= b->M)
		return err_set(e, "no such learner");
	l = &b->l[m];
	b->heartbeats++;
	if (l->excluded)
		return bounds_why_excluded(b, m, e),
		       refuse(&l->refused_heartbeats, &b->heartbeats_refused);
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
	if (st > 0 && (l->fastest == 0 || st < l->fastest)) {
		l->fastest = st;
		pace_sort(b);
	}
	if (T && (double)hb->tokens > (double)T * ((double)hb->step + 1)) {
		err_set(e, "%" PRIu64 " tokens at step %" PRIu64 ": more than "
			"B·T = %" PRIu64 " a step", hb->tokens, hb->step, T);
		goto refused;
	}
	if (check_step(b, m, hb->step, now, &credit, e))
		goto cut;
	/* what core_heartbeat will add: the increase, or a new total whole;
	 * with what was counted since the reference */
	inc = hb->tokens >= prev_tokens ? hb->tokens - prev_tokens : hb->tokens;
	since = l->tokens - l->tok_ref[0].v + inc;
	dt = now - l->tok_ref[0].t;
	cap = (double)T * (bounds_allowed(b, m, dt) + 1);
	if (T && (double)since > cap) {
		err_set(e, "%" PRIu64 " more tokens in %.3g s: more than the "
			"%.0f the job's pace allows", since, dt, cap);
		goto cut;
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
cut:
	cut(b, m, now);
refused:
	if (l->fastest != saved) {
		l->fastest = saved;
		pace_sort(b);
	}
	return refuse(&l->refused_heartbeats, &b->heartbeats_refused);
}

/* The most steps learner m's answer for fragment p may hold, when it
 * would be merged: what the time since its base can first have moved
 * allows, at least 1; UINT64_MAX when there is no such time. */
static uint64_t steps_allowed(const struct bounds *b, int m, uint32_t p,
			      double now, double *dt)
{
	double from = b->from[(size_t)m * b->P + p], allowed;

	*dt = from >= 0 ? now - from : 0;
	if (from < 0)
		return UINT64_MAX;
	allowed = floor(bounds_allowed(b, m, *dt));
	return allowed >= 1 ? (uint64_t)allowed : 1;
}

int bounds_answer(struct bounds *b, int m, const struct wire_answer *a,
		  int merged, double now, struct bounds_credit *out,
		  struct err *e)
{
	struct bounds_learner *l;
	uint64_t T = b->cfg.tokens_per_step, most;
	struct bounds_credit c = { a->step, a->steps, a->tokens };
	struct err e2;
	double dt;
	int rc = 0;

	if (m < 0 || m >= b->M)
		return err_set(e, "no such learner");
	l = &b->l[m];
	if (l->excluded)
		return bounds_why_excluded(b, m, e),
		       refuse(&l->refused_answers, &b->answers_refused);
	if (T && (double)a->tokens > (double)T * (double)a->steps)
		return err_set(e, "%" PRIu64 " tokens in %" PRIu64 " steps: more "
			       "than B·T = %" PRIu64 " a step", a->tokens,
			       a->steps, T),
		       refuse(&l->refused_answers, &b->answers_refused);
	if (check_step(b, m, a->step, now, &c.step, e))
		rc = BOUNDS_CUT;
	if (merged && a->fragment < (uint32_t)b->P &&
	    a->steps > (most = steps_allowed(b, m, a->fragment, now, &dt))) {
		c.steps = most;
		if (T && c.tokens > most * T)
			c.tokens = most * T;
		err_set(rc ? &e2 : e, "%" PRIu64 " steps since its base, %.3g s "
			"ago at the earliest: more than the %" PRIu64 " the "
			"job's pace allows", a->steps, dt, most);
		if (rc && e)
			err_wrap(e, "%s", e2.msg);
		rc = BOUNDS_CUT;
	}
	if (rc)
		cut(b, m, now);
	accept_step(b, m, c.step, now);
	if (out)
		*out = c;
	return rc;
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

/* A family of one sample per learner with cuts: its cuts, or whether it
 * is excluded. */
static void learner_family(const struct bounds *b, struct buf *out,
			   const char *name, enum prom_type type,
			   const char *help, int excl)
{
	char id[16];

	prom_family(out, name, type, help);
	for (int m = 0; m < b->M; m++) {
		if (!b->l[m].cuts)
			continue;
		snprintf(id, sizeof(id), "%d", m);
		prom_u64(out, name, PROM_LABELS("learner", id),
			 excl ? (uint64_t)b->l[m].excluded : b->l[m].cuts);
	}
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
	prom_counter(out, "ddiloco_syncer_claims_cut_total",
		     "Answers credited less than they claimed, and heartbeats "
		     "refused by the clock.", b->cuts);
	prom_gauge(out, "ddiloco_syncer_learners_excluded",
		   "Learners excluded: their claims cut in spec.syncer."
		   "maxClaimCuts strikes.", b->excluded);
	learner_family(b, out, "ddiloco_syncer_learner_claims_cut_total",
		       PROM_COUNTER, "Each learner's claims cut (learners with "
		       "none left out).", 0);
	learner_family(b, out, "ddiloco_syncer_learner_excluded", PROM_GAUGE,
		       "1 for a learner excluded by its cuts, 0 for one cut "
		       "and not excluded.", 1);
}
