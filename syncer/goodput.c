/*
 * goodput: where the learners' time goes (see goodput.h).
 */
#include "syncer/syncer_int.h"

#include <math.h>
#include <stdlib.h>

/* a learner silent longer than this between two steps was not training */
#define GP_GAP_S 2.0
/* the wall time per step is the learner's once it has this much of it */
#define GP_MIN_ACTIVE_S 1.0

int goodput_init(struct syncer *s, double start)
{
	struct goodput *g = &s->gp;

	g->f = calloc((size_t)s->M * (size_t)s->P, sizeof(*g->f));
	g->l = calloc((size_t)s->M, sizeof(*g->l));
	g->start = start;
	g->merged_base = s->acc.compute_merged;
	return g->f && g->l ? 0 : -1;
}

void goodput_release(struct syncer *s)
{
	free(s->gp.f);
	free(s->gp.l);
	s->gp.f = NULL;
	s->gp.l = NULL;
}

/* Wall seconds per step of learner l; before GP_MIN_ACTIVE_S of it, the
 * step time it reported, else ξ_step. */
static double step_seconds(const struct syncer *s, const struct gp_learner *l)
{
	double st = s->learners ? s->learners[l - s->gp.l].step_time : 0;

	if (l->trained > 0 && l->active >= GP_MIN_ACTIVE_S)
		return l->active / l->trained;
	return st > 0 ? st : syncer_round_step_time(&s->rs);
}

static double share(const struct syncer *s, int p)
{
	return (double)s->ft->frags[p].numel / (double)s->nparams;
}

void goodput_join(struct syncer *s, int id, uint64_t incarnation,
		  uint64_t resume, double now)
{
	struct gp_learner *l = &s->gp.l[id];

	if (l->have && l->incarnation == incarnation)
		return;   /* the same process again (its sidecar reconnected) */
	for (int p = 0; p < s->P; p++) {
		struct gp_frag *f = &s->gp.f[id * s->P + p];

		if (l->have && f->have && l->step > f->counted_to)
			l->restarts += (l->step - f->counted_to) * share(s, p);
		*f = (struct gp_frag){ .have = 1, .counted_to = (double)resume,
				       .merged_to = (double)resume };
	}
	l->have = 1;
	l->incarnation = incarnation;
	l->step = (double)resume;
	l->t_rep = now;
}

void goodput_progress(struct syncer *s, int id, uint64_t step, double now)
{
	struct gp_learner *l = &s->gp.l[id];
	double ds = (double)step - l->step, dt = now - l->t_rep;

	if (!l->have || !(ds > 0) || s->done)
		return;   /* the accounting ends with the job, as elapsed does */
	if (l->t_rep >= 0 && dt >= 0 && dt <= GP_GAP_S)
		l->active += dt;
	else if (l->trained > 0)
		l->active += ds * step_seconds(s, l);   /* after a gap: its pace */
	l->trained += ds;
	l->step = (double)step;
	l->t_rep = now;
}

static double *bucket(struct gp_learner *l, enum gp_fate fate)
{
	return fate == GP_LATE ? &l->late : fate == GP_REFUSED ? &l->refused
							       : &l->merged;
}

void goodput_answer(struct syncer *s, int id, int p, uint64_t step,
		    uint64_t steps, enum gp_fate fate)
{
	struct gp_learner *l;
	struct gp_frag *f;
	double k, hi = (double)step, lo = hi - (double)steps, fresh;

	if (id < 0 || id >= s->M || p < 0 || p >= s->P || !s->gp.l[id].have ||
	    s->done)
		return;
	l = &s->gp.l[id];
	f = &s->gp.f[id * s->P + p];
	k = share(s, p);
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

double goodput_merged_seconds(const struct syncer *s)
{
	double t = 0;

	for (int i = 0; i < s->M; i++)
		t += s->gp.l[i].merged * step_seconds(s, &s->gp.l[i]);
	return t;
}

void goodput_shares(const struct syncer *s, double now, struct gp_shares *out)
{
	double cap = s->M * (core_elapsed(s, now) - s->gp.start), trained = 0;

	*out = (struct gp_shares){ .capacity = cap };
	if (!(cap > 0))
		return;
	for (int i = 0; i < s->M; i++) {
		const struct gp_learner *l = &s->gp.l[i];
		double q = step_seconds(s, l) / cap;

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
