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
		pb->h.max_message = w->hello.max_message;
		pb->h.takes_delta = w->hello.takes_delta != 0;
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
		pb->a.part_offset = w->answer.part_offset;
		pb->a.payload_total = w->answer.payload_total;
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
		pb->w.max_message = w->welcome.max_message;
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
		pb->u.part_offset = w->update.part_offset;
		pb->u.payload_total = w->update.payload_total;
		pb->u.delta = w->update.delta != 0;
		pb->u.delta_from = w->update.delta_from;
		pb->u.checksum = w->update.checksum;
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
			.max_message = h->max_message,
			.takes_delta = h->takes_delta ? 1 : 0,
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
			.step = a->step, .part_offset = a->part_offset,
			.payload_total = a->payload_total,
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
			.max_message = w->max_message,
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
			.tokens = u->tokens, .part_offset = u->part_offset,
			.payload_total = u->payload_total,
			.delta = u->delta, .delta_from = u->delta_from,
			.checksum = u->checksum,
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
	if (a->payload_total) {   /* a part: fields 9 and 10 */
		body[n++] = 0x48, n += put_varint(body + n, a->part_offset);
		body[n++] = 0x50, n += put_varint(body + n, a->payload_total);
	}
	body[n++] = 0x3a, n += put_varint(body + n, a->payload_len);
	/* LearnerMessage field 2 (answer), length-delimited */
	out[h++] = 0x12;
	h += put_varint(out + h, n + a->payload_len);
	memcpy(out + h, body, n);
	return h + n;
}

size_t wire_update_header(uint8_t *out, const struct wire_update *u)
{
	uint8_t body[WIRE_UPDATE_HDR_MAX];
	size_t n = 0, h = 0;

	/* Update fields 1-3 and 5-11, then field 4 (payload) */
	body[n++] = 0x08, n += put_varint(body + n, u->fragment);
	body[n++] = 0x10, n += put_varint(body + n, u->version);
	body[n++] = 0x18, n += put_varint(body + n, (uint64_t)(int64_t)u->encoding);
	body[n++] = 0x28, n += put_varint(body + n, u->round);
	body[n++] = 0x30, n += put_varint(body + n, u->tokens);
	if (u->payload_total) {
		body[n++] = 0x38, n += put_varint(body + n, u->part_offset);
		body[n++] = 0x40, n += put_varint(body + n, u->payload_total);
	}
	if (u->delta) {   /* fields 9 and 10 */
		body[n++] = 0x48, body[n++] = 1;
		body[n++] = 0x50, n += put_varint(body + n, u->delta_from);
	}
	if (u->checksum)   /* field 11 */
		body[n++] = 0x58, n += put_varint(body + n, u->checksum);
	body[n++] = 0x22, n += put_varint(body + n, u->payload_len);
	/* SyncerMessage field 3 (update), length-delimited */
	out[h++] = 0x1a;
	h += put_varint(out + h, n + u->payload_len);
	memcpy(out + h, body, n);
	return h + n;
}

/* ---- limits and parts ------------------------------------------------------ */

size_t wire_message_limit(size_t payload, size_t cap)
{
	size_t n;

	if (!cap || cap > WIRE_MAX_MESSAGE)
		cap = WIRE_MAX_MESSAGE;
	if (__builtin_add_overflow(payload, (size_t)WIRE_PART_SLACK, &n))
		n = cap;
	if (n < WIRE_LIMIT_FLOOR)
		n = WIRE_LIMIT_FLOOR;
	return n > cap ? cap : n;
}

size_t wire_peer_limit(uint64_t max_message)
{
	if (!max_message || max_message > WIRE_MAX_MESSAGE)
		return WIRE_MAX_MESSAGE;
	return max_message < WIRE_MIN_MESSAGE ? WIRE_MIN_MESSAGE
					      : (size_t)max_message;
}

int wire_test_cap(const char *v, size_t *cap, struct err *e)
{
	char *end;
	unsigned long long n;

	*cap = 0;
	if (!v || !*v)
		return 0;
	n = strtoull(v, &end, 10);
	if (*end || n < WIRE_MIN_MESSAGE || n > WIRE_MAX_MESSAGE)
		return err_set(e, "DDILOCO_TEST_MAX_MESSAGE: '%s' is not a number "
			       "of bytes from %u to %u", v, WIRE_MIN_MESSAGE,
			       WIRE_MAX_MESSAGE);
	*cap = (size_t)n;
	return 0;
}

size_t wire_payload_max(size_t n)
{
	size_t most = 0;

	if (n > SIZE_MAX / 8)
		return 0;   /* enc_size's arithmetic would overflow */
	for (int k = ENC_F32; k <= ENC_INT4; k++) {
		size_t b = enc_size((enum payload_enc)k, n);

		most = b > most ? b : most;
	}
	return most;
}

void wire_parts_release(struct wire_parts *pt)
{
	free(pt->buf);
	memset(pt, 0, sizeof(*pt));
}

void wire_parts_done(struct wire_parts *pt)
{
	wire_parts_release(pt);
}

/*
 * One part of `what` (fields in key): bytes [off, off + len) of total.
 * Returns as wire_parts_answer does; on 1 the payload is pt->buf.
 */
static int parts_add(struct wire_parts *pt, const char *what,
		     const uint64_t key[7], uint64_t off, uint64_t total,
		     const uint8_t *data, size_t len, size_t max, struct err *e)
{
	uint64_t end;

	if (__builtin_add_overflow(off, (uint64_t)len, &end) || end > total) {
		err_set(e, "%s part at offset %llu of %zu bytes runs past its "
			"payload of %llu bytes", what, (unsigned long long)off,
			len, (unsigned long long)total);
		goto bad;
	}
	if (!pt->open) {
		if (off != 0) {
			err_set(e, "%s part at offset %llu of a payload not "
				"begun: its first part is missing", what,
				(unsigned long long)off);
			goto bad;
		}
		if (total > max) {
			err_set(e, "%s in parts of %llu bytes: more than the %zu "
				"its fragment can have", what,
				(unsigned long long)total, max);
			goto bad;
		}
		if (!(pt->buf = malloc((size_t)total))) {
			err_set(e, "%s in parts of %llu bytes: out of memory",
				what, (unsigned long long)total);
			goto bad;
		}
		pt->open = 1;
		pt->total = (size_t)total;
		pt->got = 0;
		memcpy(pt->key, key, sizeof(pt->key));
	} else if (memcmp(pt->key, key, sizeof(pt->key)) || total != pt->total) {
		err_set(e, "%s part of another payload while %zu of %zu bytes "
			"of one are missing", what, pt->total - pt->got,
			pt->total);
		goto bad;
	} else if (off != pt->got) {
		err_set(e, "%s part at offset %llu, expected %zu: %s", what,
			(unsigned long long)off, pt->got,
			off < pt->got ? "duplicated or out of order"
				      : "a part is missing");
		goto bad;
	}
	if (!len && end < total) {
		err_set(e, "%s part of no bytes", what);
		goto bad;
	}
	memcpy(pt->buf + pt->got, data, len);
	pt->got += len;
	return pt->got == pt->total;
bad:
	wire_parts_release(pt);
	return -1;
}

int wire_parts_answer(struct wire_parts *pt, struct wire_answer *a,
		      size_t max, struct err *e)
{
	uint64_t key[7] = { a->fragment, a->round, a->base_version, a->steps,
			    a->tokens, (uint64_t)(int64_t)a->encoding, a->step };
	int rc;

	if (!a->payload_total) {
		if (!pt->open)
			return 1;
		err_set(e, "a whole answer (fragment %u) while %zu of %zu bytes "
			"of an answer in parts are missing", a->fragment,
			pt->total - pt->got, pt->total);
		wire_parts_release(pt);
		return -1;
	}
	rc = parts_add(pt, "answer", key, a->part_offset, a->payload_total,
		       a->payload, a->payload_len, max, e);
	if (rc == 1) {
		a->payload = pt->buf;
		a->payload_len = pt->total;
		a->part_offset = a->payload_total = 0;
	}
	return rc;
}

int wire_parts_update(struct wire_parts *pt, struct wire_update *u,
		      size_t max, struct err *e)
{
	uint64_t key[7] = { u->fragment, u->version,
			    (uint64_t)(int64_t)u->encoding, u->round, u->tokens,
			    u->delta ? u->delta_from + 1 : 0, u->checksum };
	int rc;

	if (!u->payload_total) {
		if (!pt->open)
			return 1;
		err_set(e, "a whole update (fragment %u) while %zu of %zu bytes "
			"of an update in parts are missing", u->fragment,
			pt->total - pt->got, pt->total);
		wire_parts_release(pt);
		return -1;
	}
	rc = parts_add(pt, "update", key, u->part_offset, u->payload_total,
		       u->payload, u->payload_len, max, e);
	if (rc == 1) {
		u->payload = pt->buf;
		u->payload_len = pt->total;
		u->part_offset = u->payload_total = 0;
	}
	return rc;
}
