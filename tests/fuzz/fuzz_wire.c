/*
 * fuzz_wire: what the syncer does with each message of a learner's
 * stream, from the bytes on: common/wire.c decodes, then the checks and
 * state changes of syncer/core.c, driven as syncer/stream.c drives them
 * (first message a Hello, a second Hello closes the stream, a newer
 * stream for a learner replaces the older one, a closed stream leaves its
 * rounds) and the round state machine run after every message (pulls
 * noted, merges done, the Update payload of a merged fragment encoded).
 * Answers in parts (docs/protocol.md, Messages in parts) are put
 * together per stream as stream_msg.c does (a wrong part ends the
 * stream), and Updates in parts as the sidecar does.
 * Whatever the messages, Θ stays finite, no fragment's version goes
 * back, and no payload put together is larger than its bound.
 * No network: four streams of the small job in tests/fuzz/fuzz_model.h.
 *
 * The input is a sequence of records:
 *
 *   | size | what                                                       |
 *   |------|------------------------------------------------------------|
 *   | 1    | bits 0-1 stream; bits 2-5 clock advance (0.1 s units);     |
 *   |      | bit 6: the stream ends after this message; bit 7: the      |
 *   |      | bytes are a SyncerMessage, decoded only (the sidecar side) |
 *   | 2    | length n, little-endian (cut to what is left)              |
 *   | n    | the message, protobuf                                      |
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire.h"
#include "syncer/syncer_int.h"
/* fm: the small job, made before the first input */
#define FUZZ_MODEL_DIR "ddfuzz-wire"
#include "tests/fuzz/fuzz_init.h"

const char fuzz_name[] = "wire";

#define NCONN 4

struct streams {
	int learner[NCONN];     /* the learner a stream speaks for, or -1 */
	int owner[FM_M];        /* the stream a learner is on, or -1 */
	struct wire_parts parts[NCONN];   /* an answer in parts */
	struct wire_parts upd;  /* an update in parts (the sidecar side) */
	size_t max;             /* the largest payload of the table */
};

static void detach(struct syncer *s, struct streams *st, int c)
{
	int id = st->learner[c];

	wire_parts_release(&st->parts[c]);
	if (id < 0)
		return;
	if (st->owner[id] == c) {
		st->owner[id] = -1;
		core_leave(s, id, "fuzz");
	}
	st->learner[c] = -1;
}

static void on_hello(struct syncer *s, struct streams *st, int c,
		     const struct wire_hello *h, double now)
{
	struct round_action pulls[64];
	uint64_t resume;
	struct err e;
	int n;

	if (st->learner[c] >= 0 || core_hello_check(s, h, &e) != CORE_JOIN_OK) {
		detach(s, st, c);
		return;
	}
	if (h->learner_id >= FM_M)
		abort();   /* checked above: an id out of range joined */
	if (st->owner[h->learner_id] >= 0)
		detach(s, st, st->owner[h->learner_id]);
	st->owner[h->learner_id] = c;
	st->learner[c] = (int)h->learner_id;
	n = core_join(s, h, now, &resume, pulls, 64);
	if (n < 0 || n > 64)
		abort();
	for (int i = 0; i < n; i++)
		if (pulls[i].frag < 0 || pulls[i].frag >= FM_P)
			abort();
}

static void on_message(struct syncer *s, struct streams *st, int c,
		       const uint8_t *data, size_t len, double now)
{
	struct wire_learner_msg m;
	struct err e;

	if (wire_learner_decode(data, len, &m, &e)) {
		detach(s, st, c);
		return;
	}
	if (m.kind != WIRE_HELLO && st->learner[c] < 0) {
		detach(s, st, c);
	} else {
		switch (m.kind) {
		case WIRE_HELLO:
			on_hello(s, st, c, &m.hello, now);
			break;
		case WIRE_ANSWER:
			switch (wire_parts_answer(&st->parts[c], &m.answer,
						  st->max, &e)) {
			case -1:
				detach(s, st, c);
				break;
			case 1:
				if (m.answer.payload_len > st->max &&
				    st->parts[c].open)
					abort();   /* put together past its bound */
				core_answer(s, st->learner[c], &m.answer, now);
				wire_parts_done(&st->parts[c]);
				break;
			}
			break;
		case WIRE_HEARTBEAT:
			core_heartbeat(s, st->learner[c], &m.heartbeat, now);
			break;
		default:
			detach(s, st, c);
		}
	}
	wire_learner_release(&m);
}

static void run_rounds(struct syncer *s, double now, uint64_t *versions)
{
	struct round_action a;
	struct core_merged mg;

	for (int guard = 0; guard < 64 && !s->done; guard++) {
		syncer_round_poll(&s->rs, now, &a);
		if (a.kind == ROUND_NONE)
			break;
		if (a.kind != ROUND_MERGE)
			continue;
		core_merge(s, a.slot, now, &mg);
		if (mg.updated) {
			int enc;
			size_t len;
			uint8_t *pl = core_update_payload(s, mg.frag, &enc, &len);

			free(pl);
		}
	}
	for (size_t i = 0; i < FM_N; i++)
		if (!isfinite(s->theta[i]))
			abort();   /* a merged answer made Θ non-finite */
	for (int p = 0; p < FM_P; p++) {
		if (s->versions[p] < versions[p])
			abort();   /* a fragment's version went back */
		versions[p] = s->versions[p];
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct syncer *s = calloc(1, sizeof(*s));
	struct streams st;
	uint64_t versions[FM_P] = { 0 };
	double now = 100.0;
	struct err e;

	if (!s)
		return 0;
	if (core_init(s, &fm.prm, now, &e))
		abort();
	memset(&st, 0, sizeof(st));
	for (int p = 0; p < FM_P; p++)
		if (wire_payload_max(fm.ft.frags[p].numel) > st.max)
			st.max = wire_payload_max(fm.ft.frags[p].numel);
	for (int i = 0; i < NCONN; i++)
		st.learner[i] = -1;
	for (int i = 0; i < FM_M; i++)
		st.owner[i] = -1;
	while (size >= 3 && !s->done) {
		uint8_t b = data[0];
		size_t n = (size_t)data[1] | (size_t)data[2] << 8;

		data += 3;
		size -= 3;
		if (n > size)
			n = size;
		now += 0.1 * ((b >> 2) & 15);
		if (b & 0x80) {
			struct wire_syncer_msg m;

			if (!wire_syncer_decode(data, n, &m, &e)) {
				if (m.kind == WIRE_UPDATE &&
				    wire_parts_update(&st.upd, &m.update, st.max,
						      &e) == 1) {
					if (m.update.payload_len > st.max &&
					    st.upd.open)
						abort();
					wire_parts_done(&st.upd);
				}
				wire_syncer_release(&m);
			}
		} else {
			on_message(s, &st, b & 3, data, n, now);
		}
		if (b & 0x40)
			detach(s, &st, b & 3);
		run_rounds(s, now, versions);
		data += n;
		size -= n;
	}
	for (int i = 0; i < NCONN; i++)
		wire_parts_release(&st.parts[i]);
	wire_parts_release(&st.upd);
	core_release(s);
	free(s);
	fuzz_model_clean(&fm);
	return 0;
}
