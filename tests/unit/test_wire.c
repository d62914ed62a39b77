/*
 * common/wire: every message packed and decoded back field for field,
 * bytes checked against the protobuf encoding written out by hand, the
 * hand-made answer framing read back, and bad input refused with an error
 * that says what is wrong: every truncation of a message, garbage, wire
 * types these messages never use, fields of the wrong type, too long.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire.h"

static uint8_t *pack_learner(const struct wire_learner_msg *m, size_t *len)
{
	uint8_t *b;

	*len = wire_learner_size(m);
	b = malloc(*len + 1);
	assert_non_null(b);
	wire_learner_pack(m, b);
	return b;
}

static uint8_t *pack_syncer(const struct wire_syncer_msg *m, size_t *len)
{
	uint8_t *b;

	*len = wire_syncer_size(m);
	b = malloc(*len + 1);
	assert_non_null(b);
	wire_syncer_pack(m, b);
	return b;
}

static void learner_messages_round_trip(void **state)
{
	uint64_t sizes[3] = { 100, 1ULL << 40, 7 };
	uint8_t payload[300];
	struct wire_learner_msg m = { .kind = WIRE_HELLO }, d;
	uint8_t *b;
	size_t len;

	(void)state;
	m.hello = (struct wire_hello){
		.learner_id = 5, .fingerprint = 0xfedcba9876543210ULL,
		.fragments = 3, .nsizes = 3, .fragment_sizes = sizes,
		.incarnation = 77, .step = 123456, .job = "job-a",
	};
	b = pack_learner(&m, &len);
	assert_int_equal(wire_learner_decode(b, len, &d, NULL), 0);
	assert_int_equal(d.kind, WIRE_HELLO);
	assert_int_equal(d.hello.learner_id, 5);
	assert_int_equal(d.hello.fingerprint, 0xfedcba9876543210ULL);
	assert_int_equal(d.hello.fragments, 3);
	assert_int_equal(d.hello.nsizes, 3);
	assert_memory_equal(d.hello.fragment_sizes, sizes, sizeof(sizes));
	assert_int_equal(d.hello.incarnation, 77);
	assert_int_equal(d.hello.step, 123456);
	assert_string_equal(d.hello.job, "job-a");
	assert_int_equal(d.hello.evaluator, 0);
	wire_learner_release(&d);
	free(b);
	m.hello.evaluator = 1;
	b = pack_learner(&m, &len);
	assert_int_equal(wire_learner_decode(b, len, &d, NULL), 0);
	assert_int_equal(d.hello.evaluator, 1);
	wire_learner_release(&d);
	free(b);

	for (int i = 0; i < 300; i++)
		payload[i] = (uint8_t)(i * 13);
	m = (struct wire_learner_msg){ .kind = WIRE_ANSWER };
	m.answer = (struct wire_answer){
		.fragment = 2, .round = 99, .base_version = 98, .steps = 20,
		.tokens = 5120, .encoding = 2, .payload = payload,
		.payload_len = sizeof(payload), .step = 4000,
	};
	b = pack_learner(&m, &len);
	assert_int_equal(wire_learner_decode(b, len, &d, NULL), 0);
	assert_int_equal(d.kind, WIRE_ANSWER);
	assert_int_equal(d.answer.fragment, 2);
	assert_int_equal(d.answer.round, 99);
	assert_int_equal(d.answer.base_version, 98);
	assert_int_equal(d.answer.steps, 20);
	assert_int_equal(d.answer.tokens, 5120);
	assert_int_equal(d.answer.encoding, 2);
	assert_int_equal(d.answer.step, 4000);
	assert_int_equal(d.answer.payload_len, sizeof(payload));
	assert_memory_equal(d.answer.payload, payload, sizeof(payload));
	wire_learner_release(&d);
	free(b);

	m = (struct wire_learner_msg){ .kind = WIRE_HEARTBEAT };
	m.heartbeat = (struct wire_heartbeat){
		.step = 31, .tokens = 4096, .step_time = 0.0193,
		.train_loss = 2.75, .incarnation = 3,
	};
	b = pack_learner(&m, &len);
	assert_int_equal(wire_learner_decode(b, len, &d, NULL), 0);
	assert_int_equal(d.kind, WIRE_HEARTBEAT);
	assert_int_equal(d.heartbeat.step, 31);
	assert_int_equal(d.heartbeat.tokens, 4096);
	assert_float_equal(d.heartbeat.step_time, 0.0193, 0);
	assert_float_equal(d.heartbeat.train_loss, 2.75, 0);
	assert_int_equal(d.heartbeat.incarnation, 3);
	wire_learner_release(&d);
	free(b);

	/* an evaluator's report (docs/syncer.md, Evaluators) */
	m = (struct wire_learner_msg){ .kind = WIRE_EVALUATION };
	m.evaluation = (struct wire_evaluation){
		.round = 41, .loss = 0.0123, .tokens = 8192,
	};
	b = pack_learner(&m, &len);
	assert_int_equal(wire_learner_decode(b, len, &d, NULL), 0);
	assert_int_equal(d.kind, WIRE_EVALUATION);
	assert_int_equal(d.evaluation.round, 41);
	assert_float_equal(d.evaluation.loss, 0.0123, 0);
	assert_int_equal(d.evaluation.tokens, 8192);
	wire_learner_release(&d);
	free(b);
}

static void syncer_messages_round_trip(void **state)
{
	uint64_t versions[2] = { 12, 13 };
	uint8_t payload[40];
	struct wire_syncer_msg m = { .kind = WIRE_WELCOME }, d;
	uint8_t *b;
	size_t len;

	(void)state;
	m.welcome = (struct wire_welcome){
		.fragments = 2, .nversions = 2, .versions = versions, .round = 25,
		.alpha = 0.25, .answer_encoding = 1, .resume_step = 800,
	};
	b = pack_syncer(&m, &len);
	assert_int_equal(wire_syncer_decode(b, len, &d, NULL), 0);
	assert_int_equal(d.kind, WIRE_WELCOME);
	assert_int_equal(d.welcome.fragments, 2);
	assert_int_equal(d.welcome.nversions, 2);
	assert_int_equal(d.welcome.versions[0], 12);
	assert_int_equal(d.welcome.versions[1], 13);
	assert_int_equal(d.welcome.round, 25);
	assert_float_equal(d.welcome.alpha, 0.25, 0);
	assert_int_equal(d.welcome.answer_encoding, 1);
	assert_int_equal(d.welcome.resume_step, 800);
	wire_syncer_release(&d);
	free(b);

	memset(payload, 0xab, sizeof(payload));
	m = (struct wire_syncer_msg){ .kind = WIRE_UPDATE };
	m.update = (struct wire_update){
		.fragment = 1, .version = 14, .encoding = 0, .payload = payload,
		.payload_len = sizeof(payload), .round = 26,
		.tokens = 5000000000ULL,
	};
	b = pack_syncer(&m, &len);
	assert_int_equal(wire_syncer_decode(b, len, &d, NULL), 0);
	assert_int_equal(d.kind, WIRE_UPDATE);
	assert_int_equal(d.update.fragment, 1);
	assert_int_equal(d.update.version, 14);
	assert_int_equal(d.update.encoding, 0);
	assert_int_equal(d.update.round, 26);
	assert_int_equal(d.update.tokens, 5000000000ULL);
	assert_int_equal(d.update.payload_len, sizeof(payload));
	assert_memory_equal(d.update.payload, payload, sizeof(payload));
	wire_syncer_release(&d);
	free(b);
}

/* The bytes any protobuf library writes for these, spelled out. */
static void bytes_are_the_protobuf_encoding(void **state)
{
	/* SyncerMessage{pull{fragment 3, round 300}}: field 2, 5 bytes */
	static const uint8_t pull[] = { 0x12, 0x05, 0x08, 0x03, 0x10, 0xac, 0x02 };
	/* LearnerMessage{heartbeat{step 1, step_time 0.5}}: zeros left out */
	static const uint8_t hb[] = { 0x1a, 0x0b, 0x08, 0x01, 0x19,
				      0, 0, 0, 0, 0, 0, 0xe0, 0x3f };
	struct wire_syncer_msg sm = { .kind = WIRE_PULL };
	struct wire_learner_msg lm = { .kind = WIRE_HEARTBEAT };
	uint8_t *b;
	size_t len;

	(void)state;
	sm.pull = (struct wire_pull){ .fragment = 3, .round = 300 };
	b = pack_syncer(&sm, &len);
	assert_int_equal(len, sizeof(pull));
	assert_memory_equal(b, pull, sizeof(pull));
	free(b);
	lm.heartbeat = (struct wire_heartbeat){ .step = 1, .step_time = 0.5 };
	b = pack_learner(&lm, &len);
	assert_int_equal(len, sizeof(hb));
	assert_memory_equal(b, hb, sizeof(hb));
	free(b);
	/* an empty message is zero bytes and decodes to no kind */
	sm = (struct wire_syncer_msg){ .kind = WIRE_NONE };
	assert_int_equal(wire_syncer_size(&sm), 0);
	assert_int_equal(wire_syncer_decode((const uint8_t *)"", 0, &sm, NULL), 0);
	assert_int_equal(sm.kind, WIRE_NONE);
	wire_syncer_release(&sm);
}

static void answer_header_reads_back(void **state)
{
	struct wire_answer a = {
		.fragment = 3, .round = 300, .base_version = 1ULL << 40,
		.steps = 7, .tokens = 123456789, .encoding = 2,
		.payload_len = 1000, .step = 99999,
	};
	uint8_t msg[WIRE_ANSWER_HDR_MAX + 1000];
	struct wire_learner_msg d;
	size_t h;

	(void)state;
	for (int i = 0; i < 1000; i++)
		msg[WIRE_ANSWER_HDR_MAX + i] = (uint8_t)(i * 7);
	h = wire_answer_header(msg, &a);
	assert_in_range(h, 20, WIRE_ANSWER_HDR_MAX);
	memmove(msg + h, msg + WIRE_ANSWER_HDR_MAX, 1000);
	assert_int_equal(wire_learner_decode(msg, h + 1000, &d, NULL), 0);
	assert_int_equal(d.kind, WIRE_ANSWER);
	assert_int_equal(d.answer.fragment, 3);
	assert_int_equal(d.answer.round, 300);
	assert_int_equal(d.answer.base_version, 1ULL << 40);
	assert_int_equal(d.answer.steps, 7);
	assert_int_equal(d.answer.tokens, 123456789);
	assert_int_equal(d.answer.step, 99999);
	assert_int_equal(d.answer.encoding, 2);
	assert_int_equal(d.answer.payload_len, 1000);
	for (int i = 0; i < 1000; i++)
		assert_int_equal(d.answer.payload[i], (uint8_t)(i * 7));
	wire_learner_release(&d);

	/* the largest header fits the maximum */
	a = (struct wire_answer){
		.fragment = UINT32_MAX, .round = UINT64_MAX,
		.base_version = UINT64_MAX, .steps = UINT64_MAX,
		.tokens = UINT64_MAX, .encoding = -1, .payload_len = SIZE_MAX >> 8,
		.step = UINT64_MAX,
	};
	assert_in_range(wire_answer_header(msg, &a), 1, WIRE_ANSWER_HDR_MAX);

	/* an empty answer: fragment 0, no payload, every field still written */
	a = (struct wire_answer){ .round = 4 };
	h = wire_answer_header(msg, &a);
	assert_int_equal(wire_learner_decode(msg, h, &d, NULL), 0);
	assert_int_equal(d.answer.round, 4);
	assert_int_equal(d.answer.steps, 0);
	assert_int_equal(d.answer.payload_len, 0);
	wire_learner_release(&d);
}

/* An Update framed by hand, in parts, decodes as packed ones do. */
static void update_header_reads_back(void **state)
{
	struct wire_update u = {
		.fragment = 2, .version = 77, .encoding = 1, .payload_len = 500,
		.round = 41, .tokens = 1ULL << 33, .part_offset = 1000,
		.payload_total = 4000,
	};
	uint8_t msg[WIRE_UPDATE_HDR_MAX + 500];
	struct wire_syncer_msg d;
	size_t h;

	(void)state;
	h = wire_update_header(msg, &u);
	assert_in_range(h, 10, WIRE_UPDATE_HDR_MAX);
	for (int i = 0; i < 500; i++)
		msg[h + i] = (uint8_t)(i * 3);
	assert_int_equal(wire_syncer_decode(msg, h + 500, &d, NULL), 0);
	assert_int_equal(d.kind, WIRE_UPDATE);
	assert_int_equal(d.update.fragment, 2);
	assert_int_equal(d.update.version, 77);
	assert_int_equal(d.update.encoding, 1);
	assert_int_equal(d.update.round, 41);
	assert_int_equal(d.update.tokens, 1ULL << 33);
	assert_int_equal(d.update.part_offset, 1000);
	assert_int_equal(d.update.payload_total, 4000);
	assert_int_equal(d.update.payload_len, 500);
	assert_int_equal(d.update.payload[499], (uint8_t)(499 * 3));
	wire_syncer_release(&d);
	/* whole: no part fields on the wire, the bytes protobuf-c packs */
	u.part_offset = u.payload_total = 0;
	h = wire_update_header(msg, &u);
	assert_int_equal(wire_syncer_decode(msg, h + 500, &d, NULL), 0);
	assert_int_equal(d.update.payload_total, 0);
	assert_int_equal(d.update.delta, 0);
	assert_int_equal(d.update.checksum, 0);
	assert_int_equal(wire_syncer_size(&d), h + 500);
	wire_syncer_release(&d);
	/* a delta with its checksum (docs/protocol.md, Updates as deltas) */
	u.delta = 1;
	u.delta_from = 76;
	u.checksum = 0xfedcba9876543210ULL;
	h = wire_update_header(msg, &u);
	assert_int_equal(wire_syncer_decode(msg, h + 500, &d, NULL), 0);
	assert_int_equal(d.update.delta, 1);
	assert_int_equal(d.update.delta_from, 76);
	assert_true(d.update.checksum == 0xfedcba9876543210ULL);
	assert_int_equal(d.update.payload_len, 500);
	assert_int_equal(wire_syncer_size(&d), h + 500);
	wire_syncer_release(&d);
	u.delta = 0;
	u.delta_from = u.checksum = 0;
	u = (struct wire_update){
		.fragment = UINT32_MAX, .version = UINT64_MAX, .encoding = -1,
		.payload_len = SIZE_MAX >> 8, .round = UINT64_MAX,
		.tokens = UINT64_MAX, .part_offset = UINT64_MAX,
		.payload_total = UINT64_MAX, .delta = 1,
		.delta_from = UINT64_MAX, .checksum = UINT64_MAX,
	};
	assert_in_range(wire_update_header(msg, &u), 1, WIRE_UPDATE_HDR_MAX);
	/* the largest answer part's header fits too */
	assert_in_range(wire_answer_header(msg, &(struct wire_answer){
		.fragment = UINT32_MAX, .round = UINT64_MAX,
		.base_version = UINT64_MAX, .steps = UINT64_MAX,
		.tokens = UINT64_MAX, .encoding = -1, .step = UINT64_MAX,
		.payload_len = SIZE_MAX >> 8, .part_offset = UINT64_MAX,
		.payload_total = UINT64_MAX }), 1, WIRE_ANSWER_HDR_MAX);
}

/* An answer of `len` payload bytes cut into parts of at most `part`. */
static int feed_answer(struct wire_parts *pt, const uint8_t *payload,
		       size_t len, size_t part, const size_t *order, int n,
		       struct wire_answer *out, struct err *e)
{
	int rc = 0;

	for (int k = 0; k < n; k++) {
		size_t off = order[k] * part;

		*out = (struct wire_answer){
			.fragment = 1, .round = 9, .base_version = 3, .steps = 4,
			.tokens = 64, .encoding = 0, .step = 12,
			.payload = payload + off,
			.payload_len = len - off < part ? len - off : part,
			.part_offset = off, .payload_total = len,
		};
		rc = wire_parts_answer(pt, out, 1 << 20, e);
		if (rc != 0)
			return rc == 1 && k != n - 1 ? 2 : rc;
	}
	return rc;
}

/*
 * Parts put together (docs/protocol.md, Messages in parts): in order
 * they make the payload; out of order, duplicated, missing, another
 * payload's, oversize or truncated, never a torn payload.
 */
static void parts_reassemble(void **state)
{
	uint8_t payload[1000];
	const size_t in_order[4] = { 0, 1, 2, 3 }, swapped[4] = { 0, 2, 1, 3 };
	const size_t twice[4] = { 0, 1, 1, 2 }, skip[3] = { 0, 2, 3 };
	const size_t late[1] = { 1 };
	struct wire_parts pt = { 0 };
	struct wire_answer a;
	struct err e;

	(void)state;
	for (int i = 0; i < 1000; i++)
		payload[i] = (uint8_t)(i * 13 + 1);
	assert_int_equal(feed_answer(&pt, payload, 1000, 300, in_order, 4, &a,
				     &e), 1);
	assert_int_equal(a.payload_len, 1000);
	assert_int_equal(a.payload_total, 0);
	assert_int_equal(a.fragment, 1);
	assert_int_equal(a.steps, 4);
	assert_memory_equal(a.payload, payload, 1000);
	wire_parts_done(&pt);
	assert_int_equal(pt.open, 0);

	assert_int_equal(feed_answer(&pt, payload, 1000, 300, swapped, 4, &a,
				     &e), -1);
	assert_string_equal(e.msg, "answer part at offset 600, expected 300: a "
			    "part is missing");
	assert_int_equal(pt.open, 0);
	assert_null(pt.buf);
	assert_int_equal(feed_answer(&pt, payload, 1000, 300, twice, 4, &a,
				     &e), -1);
	assert_string_equal(e.msg, "answer part at offset 300, expected 600: "
			    "duplicated or out of order");
	assert_int_equal(feed_answer(&pt, payload, 1000, 300, skip, 3, &a,
				     &e), -1);
	assert_int_equal(feed_answer(&pt, payload, 1000, 300, late, 1, &a,
				     &e), -1);
	assert_string_equal(e.msg, "answer part at offset 300 of a payload "
			    "not begun: its first part is missing");

	/* truncated: the stream ends after two parts; nothing is given */
	assert_int_equal(feed_answer(&pt, payload, 1000, 300, in_order, 2, &a,
				     &e), 0);
	assert_int_equal(pt.got, 600);
	/* then a whole answer: the rest of the first is missing */
	a = (struct wire_answer){ .fragment = 2, .round = 10 };
	assert_int_equal(wire_parts_answer(&pt, &a, 1 << 20, &e), -1);
	assert_string_equal(e.msg, "a whole answer (fragment 2) while 400 of "
			    "1000 bytes of an answer in parts are missing");
	/* a part of another answer in the middle of one */
	assert_int_equal(feed_answer(&pt, payload, 1000, 300, in_order, 1, &a,
				     &e), 0);
	a.round = 11;
	a.part_offset = 300;
	assert_int_equal(wire_parts_answer(&pt, &a, 1 << 20, &e), -1);
	assert_string_equal(e.msg, "answer part of another payload while 700 "
			    "of 1000 bytes of one are missing");
	/* more than the fragment can have, before any allocation */
	a = (struct wire_answer){ .fragment = 1, .payload = payload,
				  .payload_len = 10, .payload_total = 1ULL << 62 };
	assert_int_equal(wire_parts_answer(&pt, &a, 1 << 20, &e), -1);
	assert_string_equal(e.msg, "answer in parts of 4611686018427387904 "
			    "bytes: more than the 1048576 its fragment can have");
	/* offsets that overflow */
	a.part_offset = UINT64_MAX - 4;
	a.payload_total = UINT64_MAX;
	assert_int_equal(wire_parts_answer(&pt, &a, 1 << 20, &e), -1);
	assert_non_null(strstr(e.msg, "runs past its payload"));
	/* a whole answer with nothing open passes as it is */
	a = (struct wire_answer){ .fragment = 1, .payload = payload,
				  .payload_len = 10 };
	assert_int_equal(wire_parts_answer(&pt, &a, 1 << 20, &e), 1);
	assert_ptr_equal(a.payload, payload);
	wire_parts_release(&pt);
}

/* Updates in parts, and the limits derived from a payload size. */
static void update_parts_and_limits(void **state)
{
	uint8_t payload[100];
	struct wire_parts pt = { 0 };
	struct wire_update u;
	struct err e;

	(void)state;
	memset(payload, 5, sizeof(payload));
	for (int k = 0; k < 2; k++) {
		u = (struct wire_update){ .fragment = 0, .version = 8,
			.payload = payload + 50 * k, .payload_len = 50,
			.part_offset = 50 * (uint64_t)k, .payload_total = 100 };
		assert_int_equal(wire_parts_update(&pt, &u, 100, &e), k);
	}
	assert_int_equal(u.payload_len, 100);
	assert_memory_equal(u.payload, payload, 100);
	wire_parts_done(&pt);
	/* a new version's part while the old one is open */
	u = (struct wire_update){ .version = 8, .payload = payload,
		.payload_len = 50, .payload_total = 100 };
	assert_int_equal(wire_parts_update(&pt, &u, 100, &e), 0);
	u.version = 9;
	u.part_offset = 50;
	assert_int_equal(wire_parts_update(&pt, &u, 100, &e), -1);
	assert_string_equal(e.msg, "update part of another payload while 50 "
			    "of 100 bytes of one are missing");
	assert_int_equal(wire_message_limit(1000, 0), WIRE_LIMIT_FLOOR);
	assert_int_equal(wire_message_limit(1000, 1 << 20), 1 << 20);
	assert_int_equal(wire_message_limit(16 << 20, 0), (16 << 20) + WIRE_PART_SLACK);
	assert_int_equal(wire_message_limit((size_t)1 << 40, 0), WIRE_MAX_MESSAGE);
	assert_int_equal(wire_message_limit(SIZE_MAX, 0), WIRE_MAX_MESSAGE);
	assert_int_equal(wire_message_limit(1 << 24, 1 << 20), 1 << 20);
	assert_int_equal(wire_peer_limit(0), WIRE_MAX_MESSAGE);
	assert_int_equal(wire_peer_limit(5), WIRE_MIN_MESSAGE);
	assert_int_equal(wire_peer_limit(UINT64_MAX), WIRE_MAX_MESSAGE);
	assert_int_equal(wire_payload_max(1), 5);          /* int8, int4 */
	assert_int_equal(wire_payload_max(1000), 4000);    /* f32 */
	assert_int_equal(wire_payload_max(SIZE_MAX / 4), 0);
}

static void every_truncation_is_refused(void **state)
{
	uint8_t payload[64];
	struct wire_syncer_msg m = { .kind = WIRE_UPDATE }, d;
	struct err e;
	uint8_t *b;
	size_t len;

	(void)state;
	memset(payload, 1, sizeof(payload));
	m.update = (struct wire_update){
		.fragment = 1, .version = 1000, .payload = payload,
		.payload_len = sizeof(payload), .round = 7,
	};
	b = pack_syncer(&m, &len);
	for (size_t cut = 1; cut < len; cut++) {
		assert_int_equal(wire_syncer_decode(b, cut, &d, &e), -1);
		assert_non_null(strstr(e.msg, "cannot parse"));
		assert_non_null(strstr(e.msg, "truncated"));
		assert_int_equal(d.kind, WIRE_NONE);
		assert_null(d.own);
	}
	/* the first cut: the outer field says 70-odd bytes, none follow */
	assert_int_equal(wire_syncer_decode(b, 2, &d, &e), -1);
	assert_non_null(strstr(e.msg, "field 3 at byte 0 needs"));
	assert_non_null(strstr(e.msg, "0 left"));
	free(b);
}

static void garbage_is_refused(void **state)
{
	static const uint8_t ff[12] = {
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
	};
	static const uint8_t group[] = { 0x0b, 0x0c };        /* field 1, group */
	static const uint8_t zero[] = { 0x00, 0x01 };         /* field 0 */
	static const uint8_t inner[] = { 0x12, 0x02, 0x0f, 0x00 };  /* type 7 */
	static const uint8_t wrong_type[] = { 0x08, 0x01 };   /* hello as varint */
	static const uint8_t newer[] = { 0x48, 0x01 };        /* field 9 */
	struct wire_learner_msg d;
	struct err e;

	(void)state;
	assert_int_equal(wire_learner_decode(ff, sizeof(ff), &d, &e), -1);
	assert_non_null(strstr(e.msg, "bad field key at byte 0"));
	assert_int_equal(wire_learner_decode(group, sizeof(group), &d, &e), -1);
	assert_non_null(strstr(e.msg, "wire type 3"));
	assert_int_equal(wire_learner_decode(zero, sizeof(zero), &d, &e), -1);
	assert_non_null(strstr(e.msg, "field number 0"));
	/* inside the oneof's submessage, with its offset in the whole */
	assert_int_equal(wire_learner_decode(inner, sizeof(inner), &d, &e), -1);
	assert_non_null(strstr(e.msg, "field 1 at byte 2 has wire type 7"));
	/* framing fine, types wrong: protobuf-c says no */
	assert_int_equal(wire_learner_decode(wrong_type, sizeof(wrong_type), &d,
					     &e), -1);
	assert_non_null(strstr(e.msg, "do not fit"));
	/* a kind from a newer version is no kind, not an error */
	assert_int_equal(wire_learner_decode(newer, sizeof(newer), &d, &e), 0);
	assert_int_equal(d.kind, WIRE_NONE);
	wire_learner_release(&d);
	/* over the limit: refused before a byte is read */
	assert_int_equal(wire_learner_decode(ff, (size_t)WIRE_MAX_MESSAGE + 1, &d,
					     &e), -1);
	assert_non_null(strstr(e.msg, "64 MiB"));
	assert_int_equal(wire_syncer_decode(NULL, 3, &(struct wire_syncer_msg){ 0 },
					    &e), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(learner_messages_round_trip),
		cmocka_unit_test(syncer_messages_round_trip),
		cmocka_unit_test(bytes_are_the_protobuf_encoding),
		cmocka_unit_test(answer_header_reads_back),
		cmocka_unit_test(update_header_reads_back),
		cmocka_unit_test(parts_reassemble),
		cmocka_unit_test(update_parts_and_limits),
		cmocka_unit_test(every_truncation_is_refused),
		cmocka_unit_test(garbage_is_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
