/*
 * eval_remote: an evaluator's Hello, its reports and their refusals
 * (eval_remote.h; docs/syncer.md, Evaluators). Its state is its own; the
 * history a report joins is the core's (core_evaluation adds it with
 * core_eval_add): the same list, the same last-good marking of
 * checkpoints as the syncer's own evaluation.
 */
#include "syncer/eval_remote.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "common/log.h"
#include "common/prom.h"
#include "common/wire.h"

static void ring_put(struct eval_remote *r, uint64_t round, uint64_t tokens)
{
	r->ring_round[r->ring_next] = round;
	r->ring_tokens[r->ring_next] = tokens;
	r->ring_next = (r->ring_next + 1) % EVAL_REMOTE_RING;
	if (r->ring_n < EVAL_REMOTE_RING)
		r->ring_n++;
}

void eval_remote_init(struct eval_remote *r, uint64_t round, uint64_t tokens)
{
	memset(r, 0, sizeof(*r));
	r->merged_max = round;
	ring_put(r, round, tokens);
}

void eval_remote_merged(struct eval_remote *r, uint64_t round,
			uint64_t tokens)
{
	if (round > r->merged_max)
		r->merged_max = round;
	ring_put(r, round, tokens);
}

int eval_remote_join(struct eval_remote *r, const struct wire_hello *h,
		     struct err *e)
{
	if (h->learner_id >= EVAL_REMOTE_MAX)
		return err_set(e, "evaluator id %u is out of range (0 to %d)",
			       h->learner_id, EVAL_REMOTE_MAX - 1),
		       EVAL_REMOTE_INVALID;
	if (r->connected >= EVAL_REMOTE_MAX)
		return err_set(e, "%d evaluators are connected already",
			       EVAL_REMOTE_MAX), EVAL_REMOTE_FULL;
	r->connected++;
	log_info("evaluator %u joined (%d connected)", h->learner_id,
		 r->connected);
	return 0;
}

void eval_remote_leave(struct eval_remote *r, int id, const char *why)
{
	r->connected--;
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

int eval_remote_report(struct eval_remote *r, int id,
		       const struct wire_evaluation *ev, int have_last,
		       uint64_t last_round, uint64_t *tokens, struct err *e)
{
	struct err mine;

	if (!e)
		e = &mine;
	if (!isfinite(ev->loss))
		err_set(e, "loss %g is not finite", ev->loss);
	else if (ev->round > r->merged_max)
		err_set(e, "round %" PRIu64 " is not merged yet (newest %" PRIu64
			")", ev->round, r->merged_max);
	else if (have_last && ev->round <= last_round)
		err_set(e, "round %" PRIu64 " is not newer than the last "
			"evaluation (round %" PRIu64 ")", ev->round, last_round);
	else if (tokens_at(r, ev->round, tokens))
		err_set(e, "round %" PRIu64 " is older than the last %d merged "
			"rounds", ev->round, EVAL_REMOTE_RING);
	else {
		log_debug("evaluator %d: round %" PRIu64 " on %" PRIu64
			  " evaluation tokens", id, ev->round, ev->tokens);
		r->evaluations++;
		return 0;
	}
	r->refused++;
	log_warn("evaluator %d: evaluation refused: %s", id, e->msg);
	return -1;
}

json_t *eval_remote_json(const struct eval_remote *r)
{
	return json_pack("{si sI sI}", "connected", r->connected,
			 "evaluations", (json_int_t)r->evaluations,
			 "refused", (json_int_t)r->refused);
}

void eval_remote_metrics(const struct eval_remote *r, struct buf *b)
{
	prom_gauge(b, "ddiloco_syncer_evaluators_connected", "Evaluators with "
		   "an open stream (docs/syncer.md, Evaluators).", r->connected);
	prom_counter(b, "ddiloco_syncer_evaluations_total", "Evaluators' "
		     "reports taken into the eval history.", r->evaluations);
	prom_counter(b, "ddiloco_syncer_evaluations_refused_total",
		     "Evaluators' reports refused: loss not finite, round not "
		     "merged yet, or not newer than the last evaluation.",
		     r->refused);
}
