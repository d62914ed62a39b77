/*
 * beat: a Beat call's rules (beat.h), in the order the checks are made:
 * one Hello, of a learner (not an evaluator) in range, whose certificate
 * names it, whose Train stream is live and of this incarnation; then
 * heartbeats only, each while that Train stream still is.
 */
#include "syncer/beat.h"

#include <grpc/status.h>
#include <inttypes.h>
#include <stdio.h>

void beat_call_init(struct beat_call *b)
{
	b->learner = -1;
	b->incarnation = 0;
}

static void closing(struct beat_outcome *out, int code, const char *msg)
{
	out->v = BEAT_CLOSE;
	out->code = code;
	snprintf(out->msg, sizeof(out->msg), "%s", msg);
}

/* Whether learner id's Train stream is live and of this incarnation. */
static int follows_train(uint32_t id, uint64_t incarnation,
			 const struct beat_env *env, struct beat_outcome *out)
{
	uint64_t live;

	if (!env->train(env->ctx, id, &live)) {
		out->v = BEAT_CLOSE;
		out->code = GRPC_STATUS_FAILED_PRECONDITION;
		snprintf(out->msg, sizeof(out->msg), "learner %u has no live "
			 "Train stream: a Beat follows its Welcome", id);
		return 0;
	}
	if (live != incarnation) {
		out->v = BEAT_CLOSE;
		out->code = GRPC_STATUS_ABORTED;
		snprintf(out->msg, sizeof(out->msg), "incarnation %" PRIu64
			 " is not that of learner %u's Train stream (%" PRIu64
			 ")", incarnation, id, live);
		return 0;
	}
	return 1;
}

static void hello(struct beat_call *b, const struct wire_hello *h,
		  const struct beat_env *env, struct beat_outcome *out)
{
	if (b->learner >= 0) {
		closing(out, GRPC_STATUS_INVALID_ARGUMENT,
			"second hello on one Beat");
		return;
	}
	if (h->evaluator) {
		closing(out, GRPC_STATUS_INVALID_ARGUMENT, "an evaluator sends "
			"no heartbeats that count: no Beat for it");
		return;
	}
	if (h->learner_id >= (uint32_t)env->M) {
		out->v = BEAT_CLOSE;
		out->code = GRPC_STATUS_INVALID_ARGUMENT;
		snprintf(out->msg, sizeof(out->msg), "learner id %u is out of "
			 "range: job '%.64s' has %d learners", h->learner_id,
			 env->job, env->M);
		return;
	}
	if (!env->identity(env->ctx, h)) {
		out->v = BEAT_REFUSED;
		return;
	}
	if (!follows_train(h->learner_id, h->incarnation, env, out))
		return;
	b->learner = (int)h->learner_id;
	b->incarnation = h->incarnation;
	out->v = BEAT_TAKEN;
}

void beat_take(struct beat_call *b, const struct wire_learner_msg *m,
	       const struct beat_env *env, struct beat_outcome *out)
{
	out->msg[0] = '\0';
	out->code = 0;
	if (m->kind == WIRE_HELLO)
		hello(b, &m->hello, env, out);
	else if (b->learner < 0)
		closing(out, GRPC_STATUS_FAILED_PRECONDITION,
			"the first message must be a hello");
	else if (m->kind != WIRE_HEARTBEAT)
		closing(out, GRPC_STATUS_INVALID_ARGUMENT,
			"a Beat carries heartbeats only");
	else if (follows_train((uint32_t)b->learner, b->incarnation, env, out))
		out->v = BEAT_HEARTBEAT;
}
