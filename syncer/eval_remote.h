/*
 * eval_remote: evaluators of the user's own (spec.model.kind external;
 * docs/syncer.md, Evaluators).
 *
 * An evaluator is a process running the user's model that meets its own
 * sidecar through the exchange like a learner. Its stream says Hello
 * with `evaluator` set and its index (0 .. EVAL_REMOTE_MAX−1) as
 * learner_id; it gets the Welcome and every Update as a learner does,
 * but it is never pulled, is none of the M learners and never counts
 * for a quorum, the pacing or the accounting. It reports its loss on Θ
 * of a round in Evaluation messages; this module judges each one and
 * puts the good ones into the eval history the syncer's own evaluation
 * of the reference GPT fills (core.c), so /status, /metrics and the run
 * report show them alike.
 *
 * A report is refused (counted, logged, the stream kept) when its loss is
 * not finite, its round is not merged yet, it is not newer than the last
 * evaluation in the history, or its round is older than every round this
 * module still knows the trained tokens of (the last EVAL_REMOTE_RING
 * merged rounds).
 *
 * The state is its own (struct eval_remote); the core (core.c) checks a
 * Hello's job and model as it does a learner's, hands this module what
 * it must judge, and adds a report taken to the history itself
 * (core_evaluator_join, core_evaluation). Changed on the run loop under
 * `mu` like the rest of the core.
 */
#ifndef DDILOCO_SYNCER_EVAL_REMOTE_H
#define DDILOCO_SYNCER_EVAL_REMOTE_H

#include <jansson.h>
#include <stdint.h>

#include "common/err.h"

#define EVAL_REMOTE_MAX  4     /* evaluators connected at once */
#define EVAL_REMOTE_RING 256   /* merged rounds whose tokens are kept */

struct buf;
struct wire_evaluation;
struct wire_hello;

struct eval_remote {
	int connected;               /* evaluator streams joined now */
	uint64_t evaluations;        /* reports taken into the history */
	uint64_t refused;            /* reports refused */
	uint64_t merged_max;         /* newest round merged (or resumed at) */
	/* the tokens trained when round ring_round[i] was merged */
	uint64_t ring_round[EVAL_REMOTE_RING], ring_tokens[EVAL_REMOTE_RING];
	int ring_n, ring_next;       /* entries held; where the next goes */
};

/* The syncer starts at round `round` with `tokens` trained. */
void eval_remote_init(struct eval_remote *r, uint64_t round, uint64_t tokens);
/* Round `round` was merged with `tokens` trained (core_merge). */
void eval_remote_merged(struct eval_remote *r, uint64_t round,
			uint64_t tokens);
/*
 * An evaluator's Hello (h->evaluator set) whose job and model the core
 * found right: 0 counts it connected (the caller then sends it the
 * Welcome and every fragment); EVAL_REMOTE_INVALID for an index out of
 * range, EVAL_REMOTE_FULL when EVAL_REMOTE_MAX are connected already.
 */
#define EVAL_REMOTE_INVALID (-1)
#define EVAL_REMOTE_FULL    (-2)
int eval_remote_join(struct eval_remote *r, const struct wire_hello *h,
		     struct err *e);
/* Its stream ended. */
void eval_remote_leave(struct eval_remote *r, int id, const char *why);
/*
 * A report, against the newest evaluation in the history (its round,
 * have_last 0 when there is none): 0 when it is taken, with the tokens
 * trained as of its round in *tokens, for the caller to add to the
 * history; -1 refused (e, if not NULL, says why; the log says it too).
 */
int eval_remote_report(struct eval_remote *r, int id,
		       const struct wire_evaluation *ev, int have_last,
		       uint64_t last_round, uint64_t *tokens, struct err *e);
/* Its figures: "evaluators" of /status, and its Prometheus lines. */
json_t *eval_remote_json(const struct eval_remote *r);
void eval_remote_metrics(const struct eval_remote *r, struct buf *b);

#endif
