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
 *                  incarnation, step, job, evaluator (field 8)
 *     2 Answer     fragment, round, base_version, steps, tokens,
 *                  encoding, payload (field 7), step
 *     3 Heartbeat  step, tokens, step_time, train_loss, incarnation
 *     4 Evaluation round, loss, tokens (evaluators)
 *   syncer → learner   SyncerMessage, one of
 *     1 Welcome    fragments, versions[], round, alpha, answer_encoding,
 *                  resume_step
 *     2 Pull       fragment, round
 *     3 Update     fragment, version, encoding, payload, round, tokens
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

#define WIRE_MAX_MESSAGE (64u << 20)   /* either way; gRPC enforces it too */
#define WIRE_ANSWER_HDR_MAX 96         /* wire_answer_header's longest */
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

#endif
