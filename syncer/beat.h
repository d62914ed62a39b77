/*
 * beat: what the messages of a Beat call do (docs/syncer.md, Heartbeats
 * on a call of their own), apart from gRPC. A Beat starts with a Hello
 * of a learner whose Train stream is live, of the same incarnation; then
 * it carries that learner's heartbeats only. syncer/stream_msg.c runs
 * the outcome (closes the call with its status, sends the mark, gives a
 * heartbeat to the core); tests/fuzz/fuzz_beat.c fuzzes it.
 */
#ifndef DDILOCO_SYNCER_BEAT_H
#define DDILOCO_SYNCER_BEAT_H

#include <stdint.h>

#include "common/wire.h"

/* One Beat call: learner −1 until its Hello is taken. */
struct beat_call {
	int learner;
	uint64_t incarnation;
};

/* What the call may see of the syncer. */
struct beat_env {
	const char *job;              /* its name */
	int M;                        /* learners 0 .. M−1 */
	/* 1 when learner id has a live Train stream, with the incarnation
	 * its Hello gave (0: the learner was not attached yet), 0: none */
	int (*train)(void *ctx, uint32_t id, uint64_t *incarnation);
	/* whether the peer's certificate names learner h->learner_id; when
	 * not, the callee has refused the call itself */
	int (*identity)(void *ctx, const struct wire_hello *h);
	void *ctx;
};

enum beat_verdict {
	BEAT_CLOSE,      /* close the call: code and msg */
	BEAT_REFUSED,    /* env.identity refused it already */
	BEAT_TAKEN,      /* the Hello is taken: send the mark */
	BEAT_HEARTBEAT,  /* a heartbeat of b->learner for the core */
};

struct beat_outcome {
	enum beat_verdict v;
	int code;                     /* a grpc_status_code, with BEAT_CLOSE */
	char msg[160];
};

void beat_call_init(struct beat_call *b);
/* Message m on call b: the outcome, b updated when a Hello is taken. */
void beat_take(struct beat_call *b, const struct wire_learner_msg *m,
	       const struct beat_env *env, struct beat_outcome *out);

#endif
