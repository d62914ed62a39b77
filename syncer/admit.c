/*
 * admit: who may join the job's rounds — a learner's or an evaluator's
 * Hello checked against the job, the model's cut of the fragments, the
 * job's state and the learner's standing (excluded for its claims), and
 * an evaluator's reports taken into the evaluations' history. Each check
 * returns a core_refusal that stream_msg.c turns into the call's status;
 * nothing here changes a learner's state (core_join does, core.c).
 */
#include "syncer/syncer_int.h"

#include <inttypes.h>
#include <string.h>

#include "common/log.h"
#include "common/wire.h"

/*
 * Whether the learner of h runs this model cut the same way: -1 with the
 * first fault found in e — another model (fingerprint), another cut of it
 * (fragment count), or sizes that do not match the cut (missing, or the
 * first that differs, with both sizes).
 */
static int model_mismatch(const struct syncer *s, const struct wire_hello *h,
			  struct err *e)
{
	const struct frag_table *g = s->gft;

	if (h->fingerprint != g->fingerprint)
		return err_set(e, "model fingerprint mismatch: learner %016" PRIx64
			       ", syncer %016" PRIx64, h->fingerprint,
			       g->fingerprint);
	if (h->fragments != (uint32_t)s->gP)
		return err_set(e, "fragment count mismatch: learner %u fragments, "
			       "syncer %d", h->fragments, s->gP);
	if (h->nsizes != (size_t)s->gP)
		return err_set(e, "fragment sizes missing: learner sent %zu sizes "
			       "for %d fragments", h->nsizes, s->gP);
	for (int p = 0; p < s->gP; p++)
		if (h->fragment_sizes[p] != g->frags[p].numel)
			return err_set(e, "fragment %d size mismatch: learner %"
				       PRIu64 " parameters, syncer %zu", p,
				       h->fragment_sizes[p], g->frags[p].numel);
	return 0;
}

enum core_refusal core_model_check(const struct syncer *s,
				   const struct wire_hello *h, struct err *e)
{
	const char *who = h->evaluator ? "evaluator" : "learner";
	struct err mine;

	if (h->job && h->job[0] && strcmp(h->job, s->js->name))
		return err_set(e, "%s %u belongs to job '%s', this syncer to "
			       "'%s'", who, h->learner_id, h->job, s->js->name),
		       CORE_JOIN_MISMATCH;
	if (model_mismatch(s, h, e ? e : &mine)) {
		log_warn("%s %u refused: %s", who, h->learner_id,
			 (e ? e : &mine)->msg);
		return CORE_JOIN_MISMATCH;
	}
	if (s->done)
		return err_set(e, "job done"), CORE_JOIN_DONE;
	/* nothing trains towards checkpoints that cannot be written
	 * (docs/syncer.md, Checkpoints) */
	if (!s->ps.fits)
		return err_set(e, "the syncer's checkpoint volume is too small "
			       "for this model: %d checkpoints need %" PRIu64
			       " bytes, %" PRId64 " are free (set "
			       "spec.syncer.storage)", PERSIST_FILES,
			       s->ps.needed_bytes, s->ps.free_bytes),
		       CORE_JOIN_NOROOM;
	return CORE_JOIN_OK;
}

enum core_refusal core_hello_check(const struct syncer *s,
				   const struct wire_hello *h, struct err *e)
{
	if (h->learner_id >= (uint32_t)s->M)
		return err_set(e, "learner id %u is out of range: job '%s' has %d "
			       "learners", h->learner_id, s->js->name, s->M),
		       CORE_JOIN_INVALID;
	if (bounds_excluded(&s->bounds, (int)h->learner_id))
		return bounds_why_excluded(&s->bounds, (int)h->learner_id, e),
		       err_wrap(e, "learner %u", h->learner_id),
		       CORE_JOIN_EXCLUDED;
	return core_model_check(s, h, e);
}

enum core_refusal core_evaluator_join(struct syncer *s,
				     const struct wire_hello *h, struct err *e)
{
	enum core_refusal rc;

	if (s->js->model.kind != MODEL_EXTERNAL)
		return err_set(e, "job '%s' has no evaluators: the syncer "
			       "evaluates the reference GPT itself",
			       s->js->name), CORE_JOIN_INVALID;
	if (h->learner_id >= EVAL_REMOTE_MAX)
		return eval_remote_join(&s->evr, h, e), CORE_JOIN_INVALID;
	if ((rc = core_model_check(s, h, e)) != CORE_JOIN_OK)
		return rc;
	switch (eval_remote_join(&s->evr, h, e)) {
	case 0:
		return CORE_JOIN_OK;
	case EVAL_REMOTE_FULL:
		return CORE_JOIN_FULL;
	default:
		return CORE_JOIN_INVALID;
	}
}

int core_evaluation(struct syncer *s, int id, const struct wire_evaluation *ev,
		    double now, struct err *e)
{
	const struct syncer_ckpt *c = &s->acc;
	uint64_t tokens = 0;

	if (eval_remote_report(&s->evr, id, ev, c->nevals > 0,
			       c->nevals ? c->evals[c->nevals - 1].round : 0,
			       &tokens, e))
		return -1;
	core_eval_add(s, ev->round, tokens, ev->loss, core_elapsed(s, now));
	return 0;
}
