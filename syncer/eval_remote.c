/*
 * eval_remote: an evaluator's Hello, its reports and their refusals
 * (eval_remote.h; docs/syncer.md, Evaluators). The history itself is
 * the core's (core_eval_add): the same list, the same last-good marking
 * of checkpoints as the syncer's own evaluation.
 */
#include "syncer/syncer_int.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "common/log.h"
#include "common/wire.h"

static void ring_put(struct eval_remote *r, uint64_t round, uint64_t tokens)
{
	r->ring_round[r->ring_next] = round;
	r->ring_tokens[r->ring_next] = tokens;
	r->ring_next = (r->ring_next + 1) % EVAL_REMOTE_RING;
	if (r->ring_n < EVAL_REMOTE_RING)
		r->ring_n++;
}

void eval_remote_init(struct syncer *s)
{
	struct eval_remote *r = &s->evr;

	memset(r, 0, sizeof(*r));
	r->merged_max = s->rs.completed;
	ring_put(r, s->rs.completed, s->acc.tokens_trained);
}

void eval_remote_merged(struct syncer *s, uint64_t round)
{
	struct eval_remote *r = &s->evr;

	if (round > r->merged_max)
		r->merged_max = round;
	ring_put(r, round, s->acc.tokens_trained);
}

int eval_remote_join(struct syncer *s, const struct wire_hello *h,
		     struct err *e)
{
	enum core_refusal rc;

	if (s->js->model.kind != MODEL_EXTERNAL)
		return err_set(e, "job '%s' has no evaluators: the syncer "
			       "evaluates the reference GPT itself",
			       s->js->name), CORE_JOIN_INVALID;
	if (h->learner_id >= EVAL_REMOTE_MAX)
		return err_set(e, "evaluator id %u is out of range (0 to %d)",
			       h->learner_id, EVAL_REMOTE_MAX - 1),
		       CORE_JOIN_INVALID;
	if ((rc = core_model_check(s, h, e)) != CORE_JOIN_OK)
		return rc;
	if (s->evr.connected >= EVAL_REMOTE_MAX)
		return err_set(e, "%d evaluators are connected already",
			       EVAL_REMOTE_MAX), CORE_JOIN_FULL;
	s->evr.connected++;
	log_info("evaluator %u joined (%d connected)", h->learner_id,
		 s->evr.connected);
	return CORE_JOIN_OK;
}

void eval_remote_leave(struct syncer *s, int id, const char *why)
{
	s->evr.connected--;
	log_info("evaluator %d left: %s", id, why);
}

/* The tokens trained as of round: those of the newest merged round not
 * after it that is still known; -1 when none is. */
static int tokens_at(const struct eval_remote *r, uint64_t round,
		     uint64_t *tokens)
{
	int best = -1;

	for (int i = 0; i < r->ring_n; i++)
		if (r->ring_round[i] <= round &&
		    (best < 0 || r->ring_round[i] > r->ring_round[best]))
			best = i;
	if (best < 0)
		return -1;
	*tokens = r->ring_tokens[best];
	return 0;
}

int eval_remote_report(struct syncer *s, int id,
		       const struct wire_evaluation *ev, double now,
		       struct err *e)
{
	struct eval_remote *r = &s->evr;
	const struct syncer_ckpt *c = &s->acc;
	uint64_t tokens = 0;
	struct err mine;

	if (!e)
		e = &mine;
	if (!isfinite(ev->loss))
		err_set(e, "loss %g is not finite", ev->loss);
	else if (ev->round > r->merged_max)
		err_set(e, "round %" PRIu64 " is not merged yet (newest %" PRIu64
			")", ev->round, r->merged_max);
	else if (c->nevals && ev->round <= c->evals[c->nevals - 1].round)
		err_set(e, "round %" PRIu64 " is not newer than the last "
			"evaluation (round %" PRIu64 ")", ev->round,
			c->evals[c->nevals - 1].round);
	else if (tokens_at(r, ev->round, &tokens))
		err_set(e, "round %" PRIu64 " is older than the last %d merged "
			"rounds", ev->round, EVAL_REMOTE_RING);
	else {
		log_debug("evaluator %d: round %" PRIu64 " on %" PRIu64
			  " evaluation tokens", id, ev->round, ev->tokens);
		core_eval_add(s, ev->round, tokens, ev->loss,
			      core_elapsed(s, now));
		r->evaluations++;
		return 0;
	}
	r->refused++;
	log_warn("evaluator %d: evaluation refused: %s", id, e->msg);
	return -1;
}
