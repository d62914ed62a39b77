/*
 * goodput: where the learners' time goes (see goodput.h). Its state is
 * its own; it knows nothing of the syncer around it.
 */
#include "syncer/goodput.h"

#include <math.h>
#include <stdlib.h>

/* a learner silent longer than this between two steps was not training */
#define GP_GAP_S 2.0
/* the wall time per step is the learner's once it has this much of it */
#define GP_MIN_ACTIVE_S 1.0

int goodput_init(struct goodput *g, int M, int P, const double *share,
		 double start, double merged_base)
{
	*g = (struct goodput){ .M = M, .P = P, .share = share, .start = start,
			       .merged_base = merged_base };
	g->f = calloc((size_t)M * (size_t)P, sizeof(*g->f));
	g->l = calloc((size_t)M, sizeof(*g->l));
	return g->f && g->l ? 0 : -1;
}

void goodput_release(struct goodput *g)
{
	free(g->f);
	free(g->l);
	g->f = NULL;
	g->l = NULL;
}

void goodput_stop(struct goodput *g)
{
	g->stopped = 1;
}

/* Wall seconds per step of learner l; before GP_MIN_ACTIVE_S of it, the
 * step time it reported, else ξ_step. */
static double step_seconds(const struct gp_learner *l, double xi_step)
{
	if (l->trained > 0 && l->active >= GP_MIN_ACTIVE_S)
		return l->active / l->trained;
	return l->step_time > 0 ? l->step_time : xi_step;
}

void goodput_join(struct goodput *g, int id, uint64_t incarnation,
		  uint64_t resume, double now)
{
	struct gp_learner *l = &g->l[id];

	/* the same process again (its sidecar reconnected). Incarnation 0
	 * is a sidecar whose learner has not attached yet: a new pod or
	 * process pair, whose learner starts at resume, never the same */
	if (l->have && incarnation && l->incarnation == incarnation)
		return;
	for (int p = 0; p < g->P; p++) {
		struct gp_frag *f = &g->f[id * g->P + p];

		if (l->have && f->have && l->step > f->counted_to)
			l->restarts += (l->step - f->counted_to) * g->share[p];
		*f = (struct gp_frag){ .have = 1, .counted_to = (double)resume,
				       .merged_to = (double)resume };
	}
	l->have = 1;
	l->incarnation = incarnation;
	l->step = (double)resume;
	l->t_rep = now;
}

void goodput_progress(struct goodput *g, int id, uint64_t incarnation,
		      uint64_t step, double step_time, double now)
{
	struct gp_learner *l = &g->l[id];
	double ds, dt;

	if (l->have && !g->stopped && incarnation && incarnation != l->incarnation) {
		if (l->incarnation)   /* a new process behind the same sidecar */
			goodput_join(g, id, incarnation, step, now);
		else                  /* its learner attached: a reconnect is no restart */
			l->incarnation = incarnation;
	}
	ds = (double)step - l->step;
	dt = now - l->t_rep;

	if (step_time > 0)
		l->step_time = step_time;
	if (!l->have || !(ds > 0) || g->stopped)
		return;   /* the accounting ends with the job, as elapsed does */
	if (l->t_rep >= 0 && dt >= 0 && dt <= GP_GAP_S)
		l->active += dt;
	else if (l->trained > 0)   /* after a gap: its pace */
		l->active += ds * step_seconds(l, l->step_time);
	l->trained += ds;
	l->step = (double)step;
	l->t_rep = now;
}

static double *bucket(struct gp_learner *l, enum gp_fate fate)
{
	return fate == GP_LATE ? &l->late : fate == GP_REFUSED ? &l->refused
							       : &l->merged;
}

void goodput_answer(struct goodput *g, int id, int p, uint64_t step,
		    uint64_t steps, enum gp_fate fate)
{
	struct gp_learner *l;
	struct gp_frag *f;
	double k, hi = (double)step, lo = hi - (double)steps, fresh;

	if (id < 0 || id >= g->M || p < 0 || p >= g->P || !g->l[id].have ||
	    g->stopped)
		return;
	l = &g->l[id];
	f = &g->f[id * g->P + p];
	k = g->share[p];
	if (lo > f->counted_to) {
		l->overwritten += (lo - f->counted_to) * k;
		f->counted_to = lo;
		f->last_amt = 0;   /* the unmerged steps were wiped too */
	}
	fresh = fmax(0, hi - f->counted_to);
	if (fate == GP_MERGED) {
		/* the previous answer's steps, not merged then, carried again */
		double again = fmax(0, f->counted_to - fmax(lo, f->merged_to));
		double moved = fmin(again, f->last_amt);

		*bucket(l, (enum gp_fate)f->last_fate) -= moved * k;
		l->merged += (fresh + moved) * k;
		l->merged_again += fmax(0, f->merged_to - lo) * k;
		f->merged_to = fmax(f->merged_to, hi);
		f->last_amt = 0;
	} else {
		*bucket(l, fate) += fresh * k;
		f->last_amt = f->last_fate == (int)fate ? f->last_amt + fresh
							: fresh;
		f->last_fate = (int)fate;
	}
	f->counted_to = fmax(f->counted_to, hi);
}

double goodput_merged_seconds(const struct goodput *g, double xi_step)
{
	double t = 0;

	for (int i = 0; i < g->M; i++)
		t += g->l[i].merged * step_seconds(&g->l[i], xi_step);
	return t;
}

double goodput_ratio(const struct goodput *g, double elapsed, double xi_step)
{
	if (!(elapsed > 0) || g->M < 1)
		return 0.0;
	return fmin(1.0, (g->merged_base + goodput_merged_seconds(g, xi_step)) /
			 (g->M * elapsed));
}

void goodput_shares(const struct goodput *g, double elapsed, double xi_step,
		    struct gp_shares *out)
{
	double cap = g->M * (elapsed - g->start), trained = 0;

	*out = (struct gp_shares){ .capacity = cap };
	if (!(cap > 0))
		return;
	for (int i = 0; i < g->M; i++) {
		const struct gp_learner *l = &g->l[i];
		double q = step_seconds(l, xi_step) / cap;

		out->merged += l->merged * q;
		out->late += l->late * q;
		out->refused += l->refused * q;
		out->overwritten += l->overwritten * q;
		out->restarts += l->restarts * q;
		out->merged_again += l->merged_again * q;
		out->in_flight += (l->trained - l->merged - l->late - l->refused -
				   l->overwritten - l->restarts) * q;
		trained += l->trained * q;
	}
	out->not_training = fmax(0, 1 - trained);
}

json_t *goodput_learner_json(const struct goodput *g, int id)
{
	const struct gp_learner *l = &g->l[id];
	double q = l->trained > 0 ? 1 / l->trained : 0;

	return json_pack("{sf sf sf sf sf sf}", "trained_steps", l->trained,
		"merged", l->merged * q, "late", l->late * q,
		"refused", l->refused * q, "overwritten", l->overwritten * q,
		"restarts", l->restarts * q);
}

json_t *goodput_json(const struct goodput *g, double elapsed, double xi_step)
{
	struct gp_shares sh;

	goodput_shares(g, elapsed, xi_step, &sh);
	return json_pack("{sf sf sf sf sf sf sf sf sf}",
		"learner_seconds", sh.capacity, "merged", sh.merged,
		"late", sh.late, "refused", sh.refused,
		"overwritten", sh.overwritten, "restarts", sh.restarts,
		"in_flight", sh.in_flight, "not_training", sh.not_training,
		"merged_again", sh.merged_again);
}
