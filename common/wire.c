/*
 * wire: plain structs to protobuf-c messages and back (wire.h). The
 * generated structs take non-const pointers; packing only reads them, so
 * the casts from the plain structs' const pointers are safe.
 *
 * A decode walks the framing before protobuf-c sees the bytes: the outer
 * message and the one submessage its oneof holds, each field's tag, varint
 * or length checked against what is left. protobuf-c only says yes or no;
 * the walk says where a message breaks, which is what a log line needs.
 */
#include "common/wire.h"

#include <stdlib.h>
#include <string.h>

#include "common/encoding.h"
#include "ddiloco/v1/syncer.pb-c.h"

/*
 * An answer's or an update's encoding goes on the wire as the number of
 * enum payload_enc (common/encoding.h) cast to the proto's enum Encoding:
 * the two must agree number for number (make lint checks the names, and
 * the CRD's enums, as well).
 */
_Static_assert((int)ENC_F32 == (int)DDILOCO__V1__ENCODING__ENCODING_F32,
	       "ENC_F32 is not the proto's ENCODING_F32");
_Static_assert((int)ENC_BF16 == (int)DDILOCO__V1__ENCODING__ENCODING_BF16,
	       "ENC_BF16 is not the proto's ENCODING_BF16");
_Static_assert((int)ENC_INT8 == (int)DDILOCO__V1__ENCODING__ENCODING_INT8,
	       "ENC_INT8 is not the proto's ENCODING_INT8");
_Static_assert((int)ENC_INT4 == (int)DDILOCO__V1__ENCODING__ENCODING_INT4,
	       "ENC_INT4 is not the proto's ENCODING_INT4");

/* ---- packing ----------------------------------------------------------- */

struct learner_pb {
	Ddiloco__V1__LearnerMessage m;
	Ddiloco__V1__Hello h;
	Ddiloco__V1__Answer a;
	Ddiloco__V1__Heartbeat hb;
	Ddiloco__V1__Evaluation ev;
};

static void learner_to_pb(const struct wire_learner_msg *w, struct learner_pb *pb)
{
	pb->m = (Ddiloco__V1__LearnerMessage)DDILOCO__V1__LEARNER_MESSAGE__INIT;
	pb->h = (Ddiloco__V1__Hello)DDILOCO__V1__HELLO__INIT;
	pb->a = (Ddiloco__V1__Answer)DDILOCO__V1__ANSWER__INIT;
	pb->hb = (Ddiloco__V1__Heartbeat)DDILOCO__V1__HEARTBEAT__INIT;
	pb->ev = (Ddiloco__V1__Evaluation)DDILOCO__V1__EVALUATION__INIT;
	switch (w->kind) {
	case WIRE_HELLO:
		pb->h.learner_id = w->hello.learner_id;
		pb->h.fingerprint = w->hello.fingerprint;
		pb->h.fragments = w->hello.fragments;
		pb->h.n_fragment_sizes = w->hello.nsizes;
		pb->h.fragment_sizes = (uint64_t *)w->hello.fragment_sizes;
		pb->h.incarnation = w->hello.incarnation;
		pb->h.step = w->hello.step;
		pb->h.job = (char *)(w->hello.job ? w->hello.job : "");
		pb->h.evaluator = w->hello.evaluator != 0;
		pb->m.kind_case = DDILOCO__V1__LEARNER_MESSAGE__KIND_HELLO;
		pb->m.hello = &pb->h;
		break;
	case WIRE_ANSWER:
		pb->a.fragment = w->answer.fragment;
		pb->a.round = w->answer.round;
		pb->a.base_version = w->answer.base_version;
		pb->a.steps = w->answer.steps;
		pb->a.tokens = w->answer.tokens;
		pb->a.encoding = (Ddiloco__V1__Encoding)w->answer.encoding;
		pb->a.payload.data = (uint8_t *)w->answer.payload;
		pb->a.payload.len = w->answer.payload_len;
		pb->a.step = w->answer.step;
		pb->m.kind_case = DDILOCO__V1__LEARNER_MESSAGE__KIND_ANSWER;
		pb->m.answer = &pb->a;
		break;
	case WIRE_HEARTBEAT:
		pb->hb.step = w->heartbeat.step;
		pb->hb.tokens = w->heartbeat.tokens;
		pb->hb.step_time = w->heartbeat.step_time;
		pb->hb.train_loss = w->heartbeat.train_loss;
		pb->hb.incarnation = w->heartbeat.incarnation;
		pb->m.kind_case = DDILOCO__V1__LEARNER_MESSAGE__KIND_HEARTBEAT;
		pb->m.heartbeat = &pb->hb;
		break;
	case WIRE_EVALUATION:
		pb->ev.round = w->evaluation.round;
		pb->ev.loss = w->evaluation.loss;
		pb->ev.tokens = w->evaluation.tokens;
		pb->m.kind_case = DDILOCO__V1__LEARNER_MESSAGE__KIND_EVALUATION;
		pb->m.evaluation = &pb->ev;
		break;
	default:
		break;   /* no kind: an empty message */
	}
}

size_t wire_learner_size(const struct wire_learner_msg *m)
{
	struct learner_pb pb;

	learner_to_pb(m, &pb);
	return ddiloco__v1__learner_message__get_packed_size(&pb.m);
}

void wire_learner_pack(const struct wire_learner_msg *m, uint8_t *out)
{
	struct learner_pb pb;

	learner_to_pb(m, &pb);
	ddiloco__v1__learner_message__pack(&pb.m, out);
}

struct syncer_pb {
	Ddiloco__V1__SyncerMessage m;
	Ddiloco__V1__Welcome w;
	Ddiloco__V1__Pull p;
	Ddiloco__V1__Update u;
};

static void syncer_to_pb(const struct wire_syncer_msg *w, struct syncer_pb *pb)
{
	pb->m = (Ddiloco__V1__SyncerMessage)DDILOCO__V1__SYNCER_MESSAGE__INIT;
	pb->w = (Ddiloco__V1__Welcome)DDILOCO__V1__WELCOME__INIT;
	pb->p = (Ddiloco__V1__Pull)DDILOCO__V1__PULL__INIT;
	pb->u = (Ddiloco__V1__Update)DDILOCO__V1__UPDATE__INIT;
	switch (w->kind) {
	case WIRE_WELCOME:
		pb->w.fragments = w->welcome.fragments;
		pb->w.n_versions = w->welcome.nversions;
		pb->w.versions = (uint64_t *)w->welcome.versions;
		pb->w.round = w->welcome.round;
		pb->w.alpha = w->welcome.alpha;
		pb->w.answer_encoding = (Ddiloco__V1__Encoding)w->welcome.answer_encoding;
		pb->w.resume_step = w->welcome.resume_step;
		pb->m.kind_case = DDILOCO__V1__SYNCER_MESSAGE__KIND_WELCOME;
		pb->m.welcome = &pb->w;
		break;
	case WIRE_PULL:
		pb->p.fragment = w->pull.fragment;
		pb->p.round = w->pull.round;
		pb->m.kind_case = DDILOCO__V1__SYNCER_MESSAGE__KIND_PULL;
		pb->m.pull = &pb->p;
		break;
	case WIRE_UPDATE:
		pb->u.fragment = w->update.fragment;
		pb->u.version = w->update.version;
		pb->u.encoding = (Ddiloco__V1__Encoding)w->update.encoding;
		pb->u.payload.data = (uint8_t *)w->update.payload;
		pb->u.payload.len = w->update.payload_len;
		pb->u.round = w->update.round;
		pb->u.tokens = w->update.tokens;
		pb->m.kind_case = DDILOCO__V1__SYNCER_MESSAGE__KIND_UPDATE;
		pb->m.update = &pb->u;
		break;
	default:
		break;
	}
}

size_t wire_syncer_size(const struct wire_syncer_msg *m)
{
	struct syncer_pb pb;

	syncer_to_pb(m, &pb);
	return ddiloco__v1__syncer_message__get_packed_size(&pb.m);
}

void wire_syncer_pack(const struct wire_syncer_msg *m, uint8_t *out)
{
	struct syncer_pb pb;

	syncer_to_pb(m, &pb);
	ddiloco__v1__syncer_message__pack(&pb.m, out);
}

/* ---- the framing walk ---------------------------------------------------- */

/* Reads a varint at *at; -1 when it runs past len or past 10 bytes. */
static int get_varint(const uint8_t *p, size_t len, size_t *at, uint64_t *v)
{
	uint64_t x = 0;

	for (int shift = 0; shift < 70; shift += 7) {
		if (*at >= len)
			return -1;
		uint8_t b = p[(*at)++];

		x |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*v = x;
			return 0;
		}
	}
	return -1;
}

/*
 * Checks that the fields of p[0, len) fit; base is p's offset in the whole
 * message, for the error. With `inner`, a length-delimited field numbered
 * 1 to 4 (the oneof's submessage) is walked too.
 */
static int walk(const uint8_t *p, size_t len, size_t base, int inner,
		struct err *e)
{
	size_t at = 0;

	while (at < len) {
		size_t start = at, left;
		uint64_t key, n, skip = 0;
		unsigned field, type;

		if (get_varint(p, len, &at, &key))
			return err_set(e, "bad field key at byte %zu (truncated "
				       "or over 10 bytes)", base + start);
		field = (unsigned)(key >> 3);
		type = (unsigned)(key & 7);
		if (field == 0)
			return err_set(e, "field number 0 at byte %zu", base + start);
		switch (type) {
		case 0:
			if (get_varint(p, len, &at, &n))
				return err_set(e, "field %u at byte %zu: varint "
					       "truncated or over 10 bytes", field,
					       base + start);
			break;
		case 1:
			skip = 8;
			break;
		case 5:
			skip = 4;
			break;
		case 2:
			if (get_varint(p, len, &at, &skip))
				return err_set(e, "field %u at byte %zu: truncated "
					       "length", field, base + start);
			break;
		default:
			return err_set(e, "field %u at byte %zu has wire type %u, "
				       "which these messages never use", field,
				       base + start, type);
		}
		left = len - at;
		if (skip > left)
			return err_set(e, "truncated: field %u at byte %zu needs "
				       "%llu bytes, %zu left", field, base + start,
				       (unsigned long long)skip, left);
		if (type == 2 && inner && field >= 1 && field <= 4 &&
		    walk(p + at, (size_t)skip, base + at, 0, e))
			return -1;
		at += (size_t)skip;
	}
	return 0;
}

/*
 * The framing walk, then protobuf-c's unpack with desc: the message, or
 * NULL with e saying why (what: the message type, for the error).
 */
static void *unpack(const ProtobufCMessageDescriptor *desc, const char *what,
		    const uint8_t *data, size_t len, struct err *e)
{
	void *pb;

	if (len > WIRE_MAX_MESSAGE)
		return err_set(e, "cannot parse a %zu-byte %s: over the %u MiB "
			       "limit", len, what, WIRE_MAX_MESSAGE >> 20), NULL;
	if (len && !data)
		return err_set(e, "cannot parse a %zu-byte %s: no data", len,
			       what), NULL;
	if (walk(data, len, 0, 1, e))
		return err_wrap(e, "cannot parse a %zu-byte %s", len, what), NULL;
	pb = protobuf_c_message_unpack(desc, NULL, len, data);
	if (!pb)
		err_set(e, "cannot parse a %zu-byte %s: its fields do not fit "
			"the message", len, what);
	return pb;
}

/* ---- decoding ------------------------------------------------------------ */

int wire_learner_decode(const uint8_t *data, size_t len,
			struct wire_learner_msg *m, struct err *e)
{
	Ddiloco__V1__LearnerMessage *pb;

	memset(m, 0, sizeof(*m));
	pb = unpack(&ddiloco__v1__learner_message__descriptor, "LearnerMessage",
		    data, len, e);
	if (!pb)
		return -1;
	m->own = pb;
	switch (pb->kind_case) {
	case DDILOCO__V1__LEARNER_MESSAGE__KIND_HELLO: {
		const Ddiloco__V1__Hello *h = pb->hello;

		m->kind = WIRE_HELLO;
		m->hello = (struct wire_hello){
			.learner_id = h->learner_id, .fingerprint = h->fingerprint,
			.fragments = h->fragments, .nsizes = h->n_fragment_sizes,
			.fragment_sizes = h->fragment_sizes,
			.incarnation = h->incarnation, .step = h->step,
			.job = h->job ? h->job : "",
			.evaluator = h->evaluator ? 1 : 0,
		};
		break;
	}
	case DDILOCO__V1__LEARNER_MESSAGE__KIND_ANSWER: {
		const Ddiloco__V1__Answer *a = pb->answer;

		m->kind = WIRE_ANSWER;
		m->answer = (struct wire_answer){
			.fragment = a->fragment, .round = a->round,
			.base_version = a->base_version, .steps = a->steps,
			.tokens = a->tokens, .encoding = (int)a->encoding,
			.payload = a->payload.data, .payload_len = a->payload.len,
			.step = a->step,
		};
		break;
	}
	case DDILOCO__V1__LEARNER_MESSAGE__KIND_HEARTBEAT: {
		const Ddiloco__V1__Heartbeat *hb = pb->heartbeat;

		m->kind = WIRE_HEARTBEAT;
		m->heartbeat = (struct wire_heartbeat){
			.step = hb->step, .tokens = hb->tokens,
			.step_time = hb->step_time, .train_loss = hb->train_loss,
			.incarnation = hb->incarnation,
		};
		break;
	}
	case DDILOCO__V1__LEARNER_MESSAGE__KIND_EVALUATION: {
		const Ddiloco__V1__Evaluation *ev = pb->evaluation;

		m->kind = WIRE_EVALUATION;
		m->evaluation = (struct wire_evaluation){
			.round = ev->round, .loss = ev->loss,
			.tokens = ev->tokens,
		};
		break;
	}
	default:
		m->kind = WIRE_NONE;
	}
	return 0;
}

void wire_learner_release(struct wire_learner_msg *m)
{
	if (m->own)
		ddiloco__v1__learner_message__free_unpacked(m->own, NULL);
	memset(m, 0, sizeof(*m));
}

int wire_syncer_decode(const uint8_t *data, size_t len,
		       struct wire_syncer_msg *m, struct err *e)
{
	Ddiloco__V1__SyncerMessage *pb;

	memset(m, 0, sizeof(*m));
	pb = unpack(&ddiloco__v1__syncer_message__descriptor, "SyncerMessage",
		    data, len, e);
	if (!pb)
		return -1;
	m->own = pb;
	switch (pb->kind_case) {
	case DDILOCO__V1__SYNCER_MESSAGE__KIND_WELCOME: {
		const Ddiloco__V1__Welcome *w = pb->welcome;

		m->kind = WIRE_WELCOME;
		m->welcome = (struct wire_welcome){
			.fragments = w->fragments, .nversions = w->n_versions,
			.versions = w->versions, .round = w->round,
			.alpha = w->alpha, .answer_encoding = (int)w->answer_encoding,
			.resume_step = w->resume_step,
		};
		break;
	}
	case DDILOCO__V1__SYNCER_MESSAGE__KIND_PULL:
		m->kind = WIRE_PULL;
		m->pull = (struct wire_pull){ pb->pull->fragment, pb->pull->round };
		break;
	case DDILOCO__V1__SYNCER_MESSAGE__KIND_UPDATE: {
		const Ddiloco__V1__Update *u = pb->update;

		m->kind = WIRE_UPDATE;
		m->update = (struct wire_update){
			.fragment = u->fragment, .version = u->version,
			.encoding = (int)u->encoding, .payload = u->payload.data,
			.payload_len = u->payload.len, .round = u->round,
			.tokens = u->tokens,
		};
		break;
	}
	default:
		m->kind = WIRE_NONE;
	}
	return 0;
}

void wire_syncer_release(struct wire_syncer_msg *m)
{
	if (m->own)
		ddiloco__v1__syncer_message__free_unpacked(m->own, NULL);
	memset(m, 0, sizeof(*m));
}

/* ---- the answer framing ---------------------------------------------------- */

static size_t put_varint(uint8_t *out, uint64_t v)
{
	size_t n = 0;

	while (v >= 0x80) {
		out[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	out[n++] = (uint8_t)v;
	return n;
}

size_t wire_answer_header(uint8_t *out, const struct wire_answer *a)
{
	uint8_t body[WIRE_ANSWER_HDR_MAX];
	size_t n = 0, h = 0;

	/* Answer fields 1-6 and 8, then field 7 (payload) whose bytes follow */
	body[n++] = 0x08, n += put_varint(body + n, a->fragment);
	body[n++] = 0x10, n += put_varint(body + n, a->round);
	body[n++] = 0x18, n += put_varint(body + n, a->base_version);
	body[n++] = 0x20, n += put_varint(body + n, a->steps);
	body[n++] = 0x28, n += put_varint(body + n, a->tokens);
	body[n++] = 0x30, n += put_varint(body + n, (uint64_t)(int64_t)a->encoding);
	body[n++] = 0x40, n += put_varint(body + n, a->step);
	body[n++] = 0x3a, n += put_varint(body + n, a->payload_len);
	/* LearnerMessage field 2 (answer), length-delimited */
	out[h++] = 0x12;
	h += put_varint(out + h, n + a->payload_len);
	memcpy(out + h, body, n);
	return h + n;
}
