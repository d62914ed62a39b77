/*
 * wire: the messages of the Train stream (docs/protocol.md,
 * proto/ddiloco/v1/syncer.proto) as plain C structs, and their bytes.
 *
 * The protobuf-c code generated from the .proto stays in the build folder
 * and is used by wire.c alone: the syncer (syncer/stream.c) and the
 * sidecar (sidecar/bridge.c, sidecar/client.c) pack and decode through
 * this header, so a change of wire format is one file.
 *
 *   learner → syncer   LearnerMessage, one of
 *     1 Hello      learner_id, fingerprint, fragments, fragment_sizes[],
 *                  incarnation, step, job, evaluator (field 8),
 *                  max_message (9), takes_delta (10)
 *     2 Answer     fragment, round, base_version, steps, tokens,
 *                  encoding, payload (field 7), step, part_offset (9),
 *                  payload_total (10)
 *     3 Heartbeat  step, tokens, step_time, train_loss, incarnation
 *     4 Evaluation round, loss, tokens (evaluators)
 *   syncer → learner   SyncerMessage, one of
 *     1 Welcome    fragments, versions[], round, alpha, answer_encoding,
 *                  resume_step, max_message (7)
 *     2 Pull       fragment, round
 *     3 Update     fragment, version, encoding, payload, round, tokens,
 *                  part_offset (7), payload_total (8), delta (9),
 *                  delta_from (10), checksum (11): docs/protocol.md,
 *                  Updates as deltas
 *
 * A payload larger than what the receiver takes in one message (its
 * Hello's or Welcome's max_message) goes in parts (docs/protocol.md,
 * Messages in parts): each part a whole Answer or Update repeating the
 * other fields, with payload_total set and part_offset the place of its
 * bytes. The parts of one payload come in order, one after the other
 * among the Answers (or the Updates) of the stream; other kinds may
 * come between them. wire_parts puts them together.
 *
 * Packing is protobuf-c's, so the bytes are the ones any protobuf library
 * writes for these messages; wire_answer_header writes the framing of an
 * Answer by hand, payload last, so the payload can be a separate slice.
 *
 * Decoding checks the framing first (every tag, varint and length inside
 * the buffer) so a truncated or garbage message gets an error that says
 * where it breaks, then lets protobuf-c fill the message. Fields are
 * copied into the plain struct; arrays, strings and payloads point into
 * memory the decoded message owns until its _release. Values are not
 * judged here (an encoding number may be unknown, a fragment out of
 * range): that is the receiver's business.
 */
#ifndef DDILOCO_WIRE_H
#define DDILOCO_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* the largest message either side takes (gRPC enforces its own limit,
 * wire_message_limit, too); and what a peer that does not say takes */
#define WIRE_MAX_MESSAGE (64u << 20)
#define WIRE_MIN_MESSAGE (64u << 10)   /* a limit is never below this */
#define WIRE_LIMIT_FLOOR (8u << 20)    /* nor one from a table (a cap is) */
#define WIRE_ANSWER_HDR_MAX 128        /* wire_answer_header's longest */
#define WIRE_UPDATE_HDR_MAX 144        /* wire_update_header's longest */
/* room a part leaves for its fields: a part's payload is at most the
 * limit less this */
#define WIRE_PART_SLACK 256
/* the initial metadata of a Beat the syncer took (proto/ddiloco/v1/
 * syncer.proto): heartbeats may go there; a refusal comes without it */
#define WIRE_BEAT_MARK_KEY "ddiloco-beat"
#define WIRE_BEAT_MARK_VALUE "taken"

enum wire_kind {
	WIRE_NONE = 0,   /* no kind set (an empty or newer message) */
	WIRE_HELLO, WIRE_ANSWER, WIRE_HEARTBEAT,   /* LearnerMessage */
	WIRE_WELCOME, WIRE_PULL, WIRE_UPDATE,      /* SyncerMessage */
	WIRE_EVALUATION,                           /* LearnerMessage */
};

struct wire_hello {
	uint32_t learner_id;
	uint64_t fingerprint;
	uint32_t fragments;
	size_t nsizes;
	const uint64_t *fragment_sizes;
	uint64_t incarnation, step;
	const char *job;                 /* never NULL after a decode */
	int evaluator;                   /* 1: an evaluator, learner_id its
					  * index (docs/syncer.md, Evaluators) */
	uint64_t max_message;            /* 0: WIRE_MAX_MESSAGE */
	int takes_delta;                 /* 1: applies Updates sent as deltas */
};

struct wire_evaluation {
	uint64_t round;
	double loss;
	uint64_t tokens;
};

/* encoding: an enum payload_enc number, unchecked */
struct wire_answer {
	uint32_t fragment;
	uint64_t round, base_version, steps, tokens;
	int encoding;
	const uint8_t *payload;
	size_t payload_len;
	uint64_t step;
	uint64_t part_offset, payload_total;   /* total 0: a whole payload */
};

struct wire_heartbeat {
	uint64_t step, tokens;
	double step_time, train_loss;
	uint64_t incarnation;
};

struct wire_welcome {
	uint32_t fragments;
	size_t nversions;
	const uint64_t *versions;
	uint64_t round;
	double alpha;
	int answer_encoding;
	uint64_t resume_step;
	uint64_t max_message;   /* 0: WIRE_MAX_MESSAGE */
};

struct wire_pull {
	uint32_t fragment;
	uint64_t round;
};

struct wire_update {
	uint32_t fragment;
	uint64_t version;
	int encoding;
	const uint8_t *payload;
	size_t payload_len;
	uint64_t round;
	uint64_t tokens;        /* the job's tokens trained when sent */
	uint64_t part_offset, payload_total;   /* total 0: a whole payload */
	int delta;              /* 1: the change from version delta_from */
	uint64_t delta_from;
	uint64_t checksum;      /* hash_floats of the values (0: unsaid) */
};

/* A LearnerMessage (kind WIRE_HELLO, WIRE_ANSWER, WIRE_HEARTBEAT or
 * WIRE_EVALUATION). */
struct wire_learner_msg {
	enum wire_kind kind;
	union {
		struct wire_hello hello;
		struct wire_answer answer;
		struct wire_heartbeat heartbeat;
		struct wire_evaluation evaluation;
	};
	void *own;   /* what a decode allocated; NULL for a built message */
};

/* A SyncerMessage (kind WIRE_WELCOME, WIRE_PULL or WIRE_UPDATE). */
struct wire_syncer_msg {
	enum wire_kind kind;
	union {
		struct wire_welcome welcome;
		struct wire_pull pull;
		struct wire_update update;
	};
	void *own;
};

/* The packed size, then the bytes: out holds exactly that many. */
size_t wire_learner_size(const struct wire_learner_msg *m);
void wire_learner_pack(const struct wire_learner_msg *m, uint8_t *out);
size_t wire_syncer_size(const struct wire_syncer_msg *m);
void wire_syncer_pack(const struct wire_syncer_msg *m, uint8_t *out);

/*
 * Decodes len bytes. On success m is filled (kind may be WIRE_NONE) and
 * must be released; on error m is left empty and e says what is wrong:
 * too long, truncated where, or not a message of this type.
 */
int wire_learner_decode(const uint8_t *data, size_t len,
			struct wire_learner_msg *m, struct err *e);
void wire_learner_release(struct wire_learner_msg *m);
int wire_syncer_decode(const uint8_t *data, size_t len,
		       struct wire_syncer_msg *m, struct err *e);
void wire_syncer_release(struct wire_syncer_msg *m);

/*
 * The LearnerMessage{answer} framing of an Answer whose payload of
 * a->payload_len bytes follows it (a->payload is not read): fields 1-6
 * and 8, then field 7's tag and length. Every field is written, zeros
 * too. Returns the length (≤ WIRE_ANSWER_HDR_MAX).
 */
size_t wire_answer_header(uint8_t *out, const struct wire_answer *a);
/* The same for a SyncerMessage{update}: fields 1-3 and 5-8, then field
 * 4's tag and length (≤ WIRE_UPDATE_HDR_MAX). */
size_t wire_update_header(uint8_t *out, const struct wire_update *u);

/*
 * The message limit of a side whose largest payload is `payload` bytes:
 * that and WIRE_PART_SLACK, at least WIRE_LIMIT_FLOOR, at most cap
 * (0: WIRE_MAX_MESSAGE). A peer's limit of 0 (an older peer) is
 * WIRE_MAX_MESSAGE.
 */
size_t wire_message_limit(size_t payload, size_t cap);
size_t wire_peer_limit(uint64_t max_message);
/*
 * The test knob DDILOCO_TEST_MAX_MESSAGE (docs/protocol.md, Messages in
 * parts): v (NULL or "": none) as the cap of this side's messages, in
 * bytes, WIRE_MIN_MESSAGE to WIRE_MAX_MESSAGE; 0 in *cap for none.
 */
int wire_test_cap(const char *v, size_t *cap, struct err *e);
/* The most bytes n values take in any encoding (what a part's total may
 * be for a fragment of n values); 0 when that overflows. */
size_t wire_payload_max(size_t n);

/*
 * A payload coming in parts on one stream, put together. Bounded: a
 * payload is at most the `max` its receiver gives, checked before
 * anything is allocated.
 */
struct wire_parts {
	uint8_t *buf;
	size_t total, got;
	uint64_t key[7];   /* the fields every part repeats */
	int open;
};

/*
 * Takes a decoded Answer (Update) into the parts: 1 when *a (*u) is a
 * whole payload, then given as one (payload, payload_len set, part
 * fields 0; the bytes are pt's until wire_parts_done); 0 when more parts
 * are to come; -1 when the part is wrong (out of order, duplicated, one
 * missing, another payload's, over max, not adding up), e saying which,
 * and the partial payload dropped. A whole message while a payload in
 * parts is open is a missing part.
 */
int wire_parts_answer(struct wire_parts *pt, struct wire_answer *a,
		      size_t max, struct err *e);
int wire_parts_update(struct wire_parts *pt, struct wire_update *u,
		      size_t max, struct err *e);
/* The payload given as whole is handled: its buffer is freed. */
void wire_parts_done(struct wire_parts *pt);
/* Drops a partial payload (a stream that ended). */
void wire_parts_release(struct wire_parts *pt);

#endif
