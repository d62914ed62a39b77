/*
 * merge: an answer's way into its round, and the round's merge (the
 * core's; syncer_int.h). An accepted answer is decoded into its round
 * slot's accumulator (outer.h, struct outer_acc), screened (screen.h)
 * and folded there at once; the slot keeps only a small record per
 * answer (struct answer) for the audit, goodput and the counters, so
 * what a slot holds does not grow with the number of learners
 * (docs/syncer.md, Merge). What a learner claims is held to the bounds
 * of bounds.h before anything of it is used; one answer's share of a
 * merge is capped at maxShare (docs/syncer.md, Bounds). At the merge the
 * outer step moves Θ_p, or is undone when it would make Θ non-finite.
 */
#include "syncer/syncer_int.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/encoding.h"
#include "common/log.h"
#include "common/wire.h"

void merge_free_answers(struct syncer *s, int slot)
{
	struct answer *a = s->answers[slot], *next;

	for (; a; a = next) {
		next = a->next;
		free(a);
	}
	s->answers[slot] = NULL;
	if (s->accs)
		outer_acc_clear(&s->accs[slot]);
}

uint8_t *core_update_payload(const struct syncer *s, int p, int *enc_out,
			     size_t *len)
{
	enum payload_enc enc = s->js->syncer.update_encoding;
	size_t n = s->ft->frags[p].numel;
	const float *x = s->theta + s->frag_off[p];
	uint8_t *buf = malloc(enc_size(ENC_F32, n) + 1);

	if (buf && enc_encode(enc, x, n, buf, NULL)) {
		log_warn("fragment %d cannot be sent as %s; sending f32", s->gid[p],
			 enc_name(enc));
		enc = ENC_F32;
		enc_encode(enc, x, n, buf, NULL);
	}
	*enc_out = (int)enc;
	*len = buf ? enc_size(enc, n) : 0;
	return buf;
}

/*
 * Slot's merge into s->delta, each answer's share at most maxShare
 * (docs/syncer.md, Bounds); returns how many answers it folded. Empty
 * answers are counted here.
 */
static int merge_slot(struct syncer *s, int slot, uint64_t round)
{
	double sum = 0, top = 0;
	int n = 0, capped;

	for (struct answer *a = s->answers[slot]; a; a = a->next) {
		if (a->fate == ANSWER_EMPTY)
			s->acc.empty++;
		if (a->fate != ANSWER_FOLDED)
			continue;
		n++;
		sum += a->weight;
		top = fmax(top, a->weight);
	}
	if (!n)
		return 0;
	capped = outer_acc_merge(&s->accs[slot], s->js->syncer.max_share,
				 s->delta);
	s->audit.capped += (uint64_t)capped;
	if (capped)
		log_debug("round %" PRIu64 ": %d of %d answers held to a share of "
			  "%g (the largest had %.3f)", round, capped, n,
			  s->js->syncer.max_share, sum > 0 ? top / sum : 0);
	return n;
}

static int all_finite(const float *x, size_t n)
{
	int ok = 1;

	for (size_t i = 0; i < n; i++)
		ok &= isfinite(x[i]) != 0;
	return ok;
}

/*
 * The outer step on fragment p with the merged Δ in s->delta; the folded
 * answers' tokens counted. 0 when Θ moved. Every answer is finite, but their step
 * can still overflow Θ or its momentum (values near FLT_MAX, one answer
 * with nothing to screen it against): then the fragment is left as it
 * was and the answers are counted rejected (found by tests/fuzz/fuzz_wire).
 */
static int apply_merge(struct syncer *s, int slot, int p, uint64_t round,
		       int kept)
{
	const struct job_syncer *sy = &s->js->syncer;
	size_t numel = s->ft->frags[p].numel;
	double share = (double)numel / (double)s->nparams;
	float *theta = s->theta + s->frag_off[p], *mom = s->mom + s->frag_off[p];
	struct err e;

	persist_touch(&s->ps, (uint32_t)p);   /* a write may not have it yet */
	memcpy(s->undo, theta, numel * sizeof(float));
	memcpy(s->undo + numel, mom, numel * sizeof(float));
	outer_step(theta, mom, s->delta, numel, sy->outer_lr,
		   sy->outer_momentum, sy->nesterov);
	if (!all_finite(theta, numel) || !all_finite(mom, numel)) {
		memcpy(theta, s->undo, numel * sizeof(float));
		memcpy(mom, s->undo + numel, numel * sizeof(float));
		s->acc.rejected += (uint64_t)kept;
		s->steps_undone++;
		log_warn("round %" PRIu64 " fragment %d: the step of its %d "
			 "answers makes the global model non-finite; not applied",
			 round, s->gid[p], kept);
		return -1;
	}
	s->versions[p]++;
	if (s->upd_on && updelta_step(&s->upd, p, theta, s->versions[p], &e))
		log_warn("%s: fragment %d goes as a whole", e.msg, s->gid[p]);
	screen_theta(&s->scr, p, theta);
	for (const struct answer *a = s->answers[slot]; a; a = a->next)
		if (a->fate == ANSWER_FOLDED) {
			s->acc.merged++;
			s->acc.tokens_merged += (double)a->tokens * share;
		}
	return 0;
}

/* A merged answer held progress older than staleVersions (audit.h): an
 * invariant broken, what the next look needs. */
static void stale_merged(struct syncer *s, const struct answer *a, int p)
{
	s->audit.stale_merged++;
	log_warn("audit: learner %d fragment %d: answer of steps (%" PRIu64
		 ", %" PRIu64 "] from base %" PRIu64 " merged, but its steps "
		 "from before its Hello were trained from a version more than "
		 "staleVersions behind", a->learner, s->gid[p],
		 a->claim_step > a->claim_steps ? a->claim_step - a->claim_steps : 0,
		 a->claim_step, a->base_version);
}

/* What became of slot's answers once merged (kept > 0: Θ moved): the
 * norm history, the audit, where the learner time went (goodput.h). */
static void account_round(struct syncer *s, int slot, int p, int kept)
{
	for (struct answer *a = s->answers[slot]; a; a = a->next) {
		int merged = kept && a->fate == ANSWER_FOLDED;

		s->audit.stale_held += (uint64_t)a->predates;
		if (merged) {
			screen_merged(&s->scr, p, a->norm_step);
			audit_merged(&s->audit, a->learner, p, a->incarnation,
				     a->claim_step, a->claim_steps, a->steps,
				     a->base_version);
			if (a->predates)
				stale_merged(s, a, p);
		}
		goodput_answer(&s->gp, a->learner, p, a->step, a->steps,
			       merged ? GP_MERGED : GP_REFUSED);
	}
}


static int slot_of(const struct syncer *s, uint64_t round)
{
	for (int i = 0; i < s->rs.cfg.overlap; i++)
		if (s->rs.slots[i].active && s->rs.slots[i].round == round)
			return i;
	return -1;
}

/*
 * The answer a carries for fragment p: its values decoded into x and
 * measured into s->in_sq, unless it is empty (no steps, or `empty`).
 * Returns whether it has values; *why is set when the payload cannot be
 * merged (not finite among others: a NaN never reaches the merge).
 */
static int decode_answer(struct syncer *s, int p, const struct wire_answer *a,
			 int empty, float *x, const char **why)
{
	int nseg = s->ft->frags[p].ntensors;
	size_t n = s->ft->frags[p].numel;

	if (a->steps == 0 || empty)
		return 0;
	if (!enc_known(a->encoding))
		*why = "unknown encoding";
	else if (enc_decode((enum payload_enc)a->encoding, a->payload,
			    a->payload_len, x, n, NULL))
		*why = "payload does not decode (size, scale or values)";
	else if (outer_seg_sqnorms(x, s->segs[p], nseg, s->in_sq))
		*why = "values are not finite";
	return 1;
}

/* Counts a verdict of the round state machine that keeps no answer. */
static enum core_verdict not_queued(struct syncer *s, int id,
				    const struct wire_answer *a,
				    enum round_verdict v, const char *why)
{
	switch (v) {
	case ROUND_LATE:
		s->acc.late++;
		return CORE_LATE;
	case ROUND_ACCEPTED:
		s->acc.rejected++;
		log_warn("learner %d: answer for round %" PRIu64 " fragment %d "
			 "rejected: %s", id, a->round, s->gid[a->fragment], why);
		return CORE_INVALID;
	default:
		s->acc.rejected++;
		log_warn("learner %d: answer for round %" PRIu64 " fragment %d "
			 "refused: %s", id, a->round, s->gid[a->fragment],
			 v == ROUND_DUPLICATE ? "already answered"
					      : "no such round in flight");
		return CORE_REFUSED;
	}
}

/*
 * Whether answer a for fragment p is stale (docs/syncer.md, bounds): it
 * has steps and its base is more than staleVersions versions behind the
 * fragment's version now.
 */
static int is_stale(const struct syncer *s, int p, const struct wire_answer *a)
{
	uint64_t v = s->versions[p];

	return a->steps > 0 && a->base_version < v &&
	       v - a->base_version > (uint64_t)s->js->syncer.stale_versions;
}

/*
 * The weight of a non-empty answer within the bounds (docs/syncer.md,
 * bounds; outer_bounded_weight): over clipSteps·H steps its Δ and squared
 * norms are scaled down to that many steps; tokens count at most B·T a
 * step. A cut weight is counted in `clipped`.
 */
static uint64_t clip_max_steps(const struct syncer *s)
{
	return (uint64_t)ceil(s->js->syncer.clip_steps *
			      jobspec_sync_every(s->js));
}

static double bounded_weight(struct syncer *s, int id, int p,
			     const struct wire_answer *a, float *x)
{
	const struct job_spec *js = s->js;
	uint64_t max_steps = clip_max_steps(s);
	uint64_t tps = (uint64_t)js->optimizer.batch_size *
		       (uint64_t)jobspec_seq_len(js);
	size_t n = s->ft->frags[p].numel;
	double scale, w;

	w = outer_bounded_weight(a->steps, a->tokens, max_steps, tps, &scale);
	if (scale < 1.0) {
		for (size_t i = 0; i < n; i++)
			x[i] *= (float)scale;
		for (int k = 0; k < s->ft->frags[p].ntensors; k++)
			s->in_sq[k] *= scale * scale;
	}
	if (w < outer_weight(a->steps, a->tokens)) {
		s->audit.clipped++;
		log_debug("learner %d: answer for round %" PRIu64 " fragment "
			  "%d of %" PRIu64 " steps and %" PRIu64 " tokens clipped "
			  "to %" PRIu64 " steps of at most %" PRIu64 " tokens", id,
			  a->round, s->gid[p], a->steps, a->tokens, max_steps, tps);
	}
	return w;
}

/*
 * An answer whose claims are beyond the bounds (bounds.h): none of its
 * numbers is used, not even its step for the pacing. It stops its round
 * waiting for the learner, as an invalid payload does, and is counted in
 * `rejected` and `refused_bounds`.
 */
static enum core_verdict refused_bounds(struct syncer *s, int id,
					const struct wire_answer *a,
					double now, const char *why)
{
	enum round_verdict v;
	char what[96];
	int slot;

	v = syncer_round_answer(&s->rs, id, a->round, (int)a->fragment, 0, now);
	if (v == ROUND_ACCEPTED && (slot = slot_of(s, a->round)) >= 0)
		bounds_answered(&s->bounds, id, (int)a->fragment,
				s->rs.slots[slot].t_start);
	s->acc.rejected++;
	snprintf(what, sizeof(what), "answer for round %" PRIu64 " fragment %d",
		 a->round, s->gid[a->fragment]);
	core_log_refusal(id, what, s->bounds.l[id].refused_answers, why);
	return CORE_INVALID;
}

/*
 * Answer a of learner id held to the bounds (bounds.h): -1 when refused
 * (e says why), else 0 with a's step, steps and tokens the credited ones
 * — all that is used of it from here on: its weight, the screens' norm
 * per step, the audit, the pacing. A cut is logged like a refusal and
 * can exclude the learner (core_claims_cut).
 */
static int credit(struct syncer *s, int id, struct wire_answer *a,
		  int merged, double now, struct err *e)
{
	struct bounds_credit c;
	char what[96];
	int rc = bounds_answer(&s->bounds, id, a, merged, now, &c, e);

	if (rc < 0)
		return -1;
	if (rc == BOUNDS_CUT) {
		snprintf(what, sizeof(what), "answer for round %" PRIu64
			 " fragment %d: credited %" PRIu64 " steps, %" PRIu64
			 " tokens and step %" PRIu64 ";", a->round,
			 s->gid[a->fragment], c.steps, c.tokens, c.step);
		core_log_cut(id, what, s->bounds.l[id].cuts, e->msg);
		core_claims_cut(s, id);
	}
	a->step = c.step;
	a->steps = c.steps;
	a->tokens = c.tokens;
	return 0;
}

/* Learner id's answer says it is at `step`: the pacing and goodput
 * learn it. */
static void step_progress(struct syncer *s, int id, uint64_t step, double now)
{
	struct learner *l = &s->learners[id];

	if (step > l->step) {
		core_step_seen(s, id, l->step, step, now);
		l->step = step;
	}
	if (step > l->step_max)
		l->step_max = step;
	syncer_round_progress(&s->rs, id, l->step, 0);
	goodput_progress(&s->gp, id, 0, l->step, 0, now);
}

/* An answer taken as empty: stale (staleVersions), or trained before
 * this syncer resumed. */
static void log_empty(const struct syncer *s, int id, int p,
		      const struct wire_answer *a, int stale)
{
	if (stale)
		log_info("learner %d: answer for round %" PRIu64 " fragment %d "
			 "trained from version %" PRIu64 ", %" PRIu64 " behind "
			 "(staleVersions %d): taken as empty", id, a->round, s->gid[p],
			 a->base_version, s->versions[p] - a->base_version,
			 s->js->syncer.stale_versions);
	else
		log_info("learner %d: answer for round %" PRIu64 " fragment %d "
			 "trained from version %" PRIu64 ", before this syncer "
			 "resumed at %" PRIu64 ": taken as empty", id, a->round,
			 s->gid[p], a->base_version, s->resumed_at[p]);
}

/* ans joins slot's answers; the round's first sets the fragment's
 * layout in its accumulator. */
static void queue_answer(struct syncer *s, int slot, int p, struct answer *ans)
{
	if (!s->answers[slot])
		outer_acc_begin(&s->accs[slot], s->js->syncer.merge == MERGE_MEAN
				? OUTER_MEAN : OUTER_RDA, s->segs[p],
				s->ft->frags[p].ntensors, s->ft->frags[p].numel);
	ans->next = s->answers[slot];
	s->answers[slot] = ans;
}

/* A weighed answer with values x: screened (screen.h), then folded into
 * its slot's accumulator. */
static void fold_answer(struct syncer *s, int slot, int p,
			const struct wire_answer *a, struct answer *ans,
			const float *x)
{
	/* a clipped answer's norm is its scaled-down one: per step of the
	 * steps it was scaled to (bounded_weight) */
	uint64_t steps = a->steps < clip_max_steps(s) ? a->steps
						       : clip_max_steps(s);
	double norm = 0;

	for (int k = 0; k < s->ft->frags[p].ntensors; k++)
		norm += s->in_sq[k];
	norm = sqrt(norm);
	ans->norm_step = norm / (double)steps;
	ans->fate = ANSWER_SCREENED;
	if (screen_answer(&s->scr, ans->learner, p, a->round, norm, steps,
			  s->js->syncer.norm_outlier) != SCREEN_PASS) {
		s->acc.rejected++;
		return;
	}
	if (outer_acc_add(&s->accs[slot], x, s->in_sq, ans->weight)) {
		/* its norms and weight were checked finite: a safeguard */
		s->acc.rejected++;
		log_warn("learner %d: answer for round %" PRIu64 " fragment %d "
			 "rejected: weight %g or norms not finite", ans->learner,
			 a->round, s->gid[p], ans->weight);
		return;
	}
	ans->fate = ANSWER_FOLDED;
}

enum core_verdict core_answer(struct syncer *s, int id,
			      const struct wire_answer *wa, double now)
{
	struct learner *l = &s->learners[id];
	/* from here on the fragment is this syncer's number (owned.c) */
	struct wire_answer la = *wa;
	const struct wire_answer *a = &la;
	int p = core_local(s, wa->fragment), before_resume, stale, slot, values;
	const char *why = NULL;
	struct answer *ans = NULL;
	enum round_verdict v;
	float *x;
	struct err e;

	l->last_seen = now;
	s->acc.bytes_in += a->payload_len;
	if (p < 0) {
		s->acc.rejected++;
		log_warn("learner %d: answer for fragment %u refused: %s", id,
			 wa->fragment, wa->fragment < (uint32_t)s->gP
			 ? "another shard's" : "no such fragment");
		return CORE_REFUSED;
	}
	la.fragment = (uint32_t)p;
	/*
	 * Trained from a base older than the version this syncer resumed at:
	 * its Δ spans the time the syncer was away (hundreds of steps where a
	 * round spans a few) and starts from a Θ of the lost rounds or before
	 * them. The outer momentum would carry it about η/(1−μ) times over
	 * the next rounds (docs/syncer.md, restart), so it counts toward
	 * the quorum as an empty answer and is not merged; the
	 * learner has the Welcome's Θ by now and its next answers start there.
	 */
	before_resume = a->steps > 0 && a->base_version < s->resumed_at[p];
	stale = !before_resume && is_stale(s, p, a);
	if (credit(s, id, &la, a->steps > 0 && !before_resume && !stale, now,
		   &e))
		return refused_bounds(s, id, a, now, e.msg);
	step_progress(s, id, a->step, now);
	/* decoded straight into its round's accumulator (outer.h), or aside
	 * when it has no round here */
	slot = slot_of(s, a->round);
	x = slot >= 0 && s->rs.slots[slot].frag == p
	    ? outer_acc_input(&s->accs[slot]) : s->in;
	values = decode_answer(s, p, a, before_resume || stale, x, &why);
	if (!why && !(ans = calloc(1, sizeof(*ans))))
		why = "out of memory";
	v = syncer_round_answer(&s->rs, id, a->round, p, !why, now);
	if (v == ROUND_ACCEPTED && (slot = slot_of(s, a->round)) >= 0)
		bounds_answered(&s->bounds, id, p, s->rs.slots[slot].t_start);
	if (v != ROUND_ACCEPTED || why) {
		if (!why)
			free(ans);
		goodput_answer(&s->gp, id, p, a->step, a->steps,
			       v == ROUND_LATE ? GP_LATE : GP_REFUSED);
		return not_queued(s, id, a, v, why);
	}
	slot = slot_of(s, a->round);
	*ans = (struct answer){
		.learner = id, .step = a->step, .steps = a->steps,
		.tokens = a->tokens, .base_version = a->base_version,
		.incarnation = l->incarnation,
		.claim_step = wa->step, .claim_steps = wa->steps,
		.predates = audit_predates(&s->audit, id, p, wa->step, wa->steps,
					   s->versions[p],
					   s->js->syncer.stale_versions),
		.weight = before_resume || stale || !values
			  ? 0 : bounded_weight(s, id, p, a, x),
	};
	if (stale)
		s->audit.stale++;
	if (stale || before_resume)
		log_empty(s, id, p, a, stale);
	queue_answer(s, slot, p, ans);
	if (ans->weight > 0)   /* else ANSWER_EMPTY: counted at the merge */
		fold_answer(s, slot, p, a, ans, x);
	return CORE_QUEUED;
}


int merge_round(struct syncer *s, int slot, int p, uint64_t round)
{
	int kept = merge_slot(s, slot, round);

	if (kept && apply_merge(s, slot, p, round, kept))
		kept = 0;
	account_round(s, slot, p, kept);
	return kept;
}
