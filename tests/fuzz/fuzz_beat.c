/*
 * fuzz_beat: the messages of Beat calls as the syncer judges them
 * (syncer/beat.c; docs/syncer.md, Heartbeats on a call of their own),
 * decoded by common/wire.c, against a table of the learners' live Train
 * streams that the input changes between messages.
 *
 * Input: byte 0: the job has M = 1 + (b & 7) learners; then records,
 * each a flag byte f:
 *   f & 1 == 0  learner (f >> 1) % M's Train stream is now: the next
 *               byte's top bit, live or none; its low 7 bits, the
 *               incarnation its Hello gave (0 too: a learner not
 *               attached yet);
 *   f & 1 == 1  a message on the present call: a length (2 bytes,
 *               little-endian), a LearnerMessage; its certificate names
 *               the learner of its Hello unless f & 2.
 * A call closed or refused is followed by a new one.
 * Checks, against the rules restated here: a Hello is taken only once a
 * call, from a learner in range (not an evaluator) whose certificate
 * names it and whose Train stream is live and of its incarnation; a
 * heartbeat reaches the core only on a taken call while that stays so;
 * anything else closes the call with a status and a message.
 */
#include <grpc/status.h>
#include <string.h>

#include "common/wire.h"
#include "syncer/beat.h"
#include "tests/fuzz/fuzz_init.h"

const char fuzz_name[] = "beat";

struct run {
	int M;
	uint64_t train[8];   /* a live Train stream's incarnation */
	int live[8];         /* whether there is one */
	int cert_ok;
};

static int train(void *ctx, uint32_t id, uint64_t *incarnation)
{
	const struct run *r = ctx;
	int live = id < (uint32_t)r->M && r->live[id];

	*incarnation = live ? r->train[id] : 0;
	return live;
}

static int identity(void *ctx, const struct wire_hello *h)
{
	(void)h;
	return ((const struct run *)ctx)->cert_ok;
}

/* The outcome the rules give m on call b (before it). */
static enum beat_verdict expected(const struct run *r, const struct beat_call *b,
				  const struct wire_learner_msg *m)
{
	const struct wire_hello *h = &m->hello;

	if (m->kind == WIRE_HELLO) {
		if (b->learner >= 0 || h->evaluator || h->learner_id >= (uint32_t)r->M)
			return BEAT_CLOSE;
		if (!r->cert_ok)
			return BEAT_REFUSED;
		return r->live[h->learner_id] && r->train[h->learner_id] == h->incarnation
		       ? BEAT_TAKEN : BEAT_CLOSE;
	}
	if (b->learner < 0 || m->kind != WIRE_HEARTBEAT)
		return BEAT_CLOSE;
	return r->live[b->learner] && r->train[b->learner] == b->incarnation
	       ? BEAT_HEARTBEAT : BEAT_CLOSE;
}

static void judge(struct run *r, struct beat_call *b,
		  const struct wire_learner_msg *m, const struct beat_env *env)
{
	struct beat_call before = *b;
	enum beat_verdict want = expected(r, b, m);
	struct beat_outcome out;

	beat_take(b, m, env, &out);
	if (out.v != want)
		abort();
	switch (out.v) {
	case BEAT_TAKEN:
		if (b->learner != (int)m->hello.learner_id ||
		    b->incarnation != m->hello.incarnation)
			abort();
		break;
	case BEAT_HEARTBEAT:
		if (b->learner != before.learner || b->learner < 0 ||
		    b->incarnation != r->train[b->learner])
			abort();
		break;
	case BEAT_CLOSE:
		if (out.code == GRPC_STATUS_OK || !out.msg[0] ||
		    !memchr(out.msg, '\0', sizeof(out.msg)))
			abort();
		break;
	case BEAT_REFUSED:
		break;
	}
	if (out.v == BEAT_CLOSE || out.v == BEAT_REFUSED) {
		if (b->learner != before.learner)
			abort();   /* nothing taken on a closed call */
		beat_call_init(b);   /* the call ends, a new one follows */
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct run r;
	struct beat_call b;
	struct beat_env env = { "fuzz", 0, train, identity, &r };
	size_t at = 1;

	if (size < 1 || size > (1 << 16))
		return 0;
	memset(&r, 0, sizeof(r));
	r.M = env.M = 1 + (data[0] & 7);
	beat_call_init(&b);
	while (at + 2 <= size) {
		uint8_t f = data[at];
		size_t len;
		struct wire_learner_msg m;
		struct err e;

		if (!(f & 1)) {
			/* the top bit: live; the rest: its incarnation */
			r.live[(f >> 1) % r.M] = data[at + 1] >> 7;
			r.train[(f >> 1) % r.M] = data[at + 1] & 0x7f;
			at += 2;
			continue;
		}
		if (at + 3 > size)
			break;
		len = (size_t)data[at + 1] | (size_t)data[at + 2] << 8;
		r.cert_ok = !(f & 2);
		at += 3;
		if (len > size - at)
			len = size - at;
		if (!wire_learner_decode(data + at, len, &m, &e)) {
			judge(&r, &b, &m, &env);
			wire_learner_release(&m);
		}
		at += len;
	}
	return 0;
}
