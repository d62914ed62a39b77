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
 * The state lives in struct syncer (s->evr), changed on the run loop
 * under `mu` like the rest of the core.
 */
#ifndef DDILOCO_SYNCER_EVAL_REMOTE_H
#define DDILOCO_SYNCER_EVAL_REMOTE_H

#include <stdint.h>

#include "common/err.h"

#define EVAL_REMOTE_MAX  4     /* evaluators connected at once */
#define EVAL_REMOTE_RING 256   /* merged rounds whose tokens are kept */

struct syncer;
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

/* After core_init: the round the syncer starts at is known. */
void eval_remote_init(struct syncer *s);
/* Round `round` was merged (core_merge). */
void eval_remote_merged(struct syncer *s, uint64_t round);
/*
 * An evaluator's Hello (h->evaluator set): its index, job and model are
 * checked as a learner's are. CORE_JOIN_OK counts it connected; the
 * caller then sends it the Welcome and every fragment. CORE_JOIN_FULL
 * when EVAL_REMOTE_MAX are connected already.
 */
int eval_remote_join(struct syncer *s, const struct wire_hello *h,
		     struct err *e);
/* Its stream ended. */
void eval_remote_leave(struct syncer *s, int id, const char *why);
/* A report: 0 taken into the history, -1 refused (e, if not NULL, says
 * why; the log says it too). */
int eval_remote_report(struct syncer *s, int id,
		       const struct wire_evaluation *ev, double now,
		       struct err *e);

#endif
