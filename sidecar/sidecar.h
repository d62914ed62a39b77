/*
 * sidecar: moves fragments between one learner's exchange and the syncer
 * (docs/protocol.md, docs/sidecar.md).
 *
 * Two threads. The client thread owns the gRPC channel and the one call
 * (the Train stream): it sends Hello, heartbeats and queued answers with
 * one send in flight, and turns what it receives into exchange writes
 * (Update → inbox, Pull → pull round, Welcome → α and answer encoding).
 * The bridge thread sleeps on the exchange socket, takes each answer the
 * learner published, encodes it in the encoding the Welcome asked for and
 * queues it. The queue holds at most one answer per fragment (a newer one
 * replaces it), so memory is bounded by one encoded model plus the message
 * in flight, whatever the learner or the syncer do.
 *
 * The syncer is found through the gRPC resolver: "host:port" is a DNS name
 * or an address. A sharded syncer (docs/syncer.md, Shards) is S of them,
 * one stream each; fragment p goes by shard p mod S. With TLS the stream is mutual TLS on the job's CA, and
 * nothing the syncer sends (updates, pulls, "job done", a refusal) is
 * used before its certificate is seen to name this job's syncer. When the stream ends with anything but OK "job done" the
 * client reconnects with exponential backoff (100 ms doubling to 5 s, ±20%
 * jitter) and says Hello again; the learner never waits for any of it.
 */
#ifndef DDILOCO_SIDECAR_H
#define DDILOCO_SIDECAR_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/encoding.h"
#include "common/err.h"
#include "common/exchange.h"
#include "common/fragment.h"
#include "common/tls.h"


#define SIDECAR_MAX_POISON 4
/* evaluators a job may have (the syncer's limit, docs/syncer.md) */
#define SIDECAR_MAX_EVALUATORS 4

struct sidecar_opts {
	const char *target;       /* "host:port" (DNS name or address); a job
	                           * of S syncer shards: S of them, comma
	                           * separated, shard 0 first (docs/syncer.md,
	                           * Shards) */
	unsigned learner_id;
	const char *job;          /* metadata.name, sent in Hello */
	double heartbeat_every;   /* seconds; 0 = 1 */
	double backoff_min, backoff_max;   /* seconds; 0 = 0.1 and 5 */
	int no_feedback;          /* 1: no residual (spec.syncer.errorFeedback
	                           * false); docs/protocol.md, error feedback */
	/* this learner's certificate and key and the job's CA: the syncer
	 * must show a certificate of that CA naming the job's syncer; NULL:
	 * plaintext (spec.syncer.insecure, docs/security.md) */
	const struct tls_files *tls;
	/* spec.model.kind external: the exchange folder, where the learner
	 * left its seed; a Pull of round 0 asks for it (docs/syncer.md,
	 * Model-agnostic jobs). NULL: the reference GPT, no seed. */
	const char *seed_dir;
	/* an evaluator's sidecar (docs/syncer.md, Evaluators): Hello says
	 * evaluator with learner_id its index, updates are applied with
	 * α = 0, and the evaluator's reports go out as Evaluations */
	int evaluator;
	uint64_t inflate_tokens;  /* a test knob: the tokens of every Answer
	                           * and Heartbeat times this (0 or 1: as
	                           * trained); docs/sidecar.md, test knobs */
	/* a test knob: the answers from..from+count-1 (1 = the first this
	 * process sends) have every value set to ±value, the sign of the
	 * learner's (docs/sidecar.md, test knobs); count 0: none */
	struct sidecar_poison {
		uint64_t from, count;
		float value;
	} poison[SIDECAR_MAX_POISON];
	/* a test knob (DDILOCO_TEST_MAX_MESSAGE): the most bytes a message
	 * may have either way, so payloads go in parts (docs/protocol.md,
	 * Messages in parts); 0: WIRE_MAX_MESSAGE */
	size_t max_message;
};

struct sidecar_metrics {
	uint64_t bytes_sent, bytes_received;        /* gRPC message bytes */
	uint64_t messages_sent, messages_received;
	uint64_t connects, disconnects, reconnect_attempts;
	uint64_t welcomes;
	uint64_t updates_received, updates_rejected;
	uint64_t updates_delta;         /* applied as a delta */
	uint64_t updates_delta_refused; /* a delta from a version not held, or
					 * a checksum that did not match */
	uint64_t parts_sent, parts_received;   /* docs/protocol.md, Messages
						* in parts */
	uint64_t pulls_received, pulls_rejected;
	uint64_t answers_queued, answers_sent;
	uint64_t answers_replaced;   /* a newer answer for the same fragment */
	uint64_t answers_dropped;    /* for a stream that is gone */
	uint64_t heartbeats_sent;     /* on Train or Beat */
	uint64_t beat_heartbeats_sent;   /* of those, on the Beat call */
	uint64_t evaluations_sent;   /* an evaluator's reports sent */
	uint64_t learner_restarts;   /* incarnation changes seen */
	uint64_t round_trips;        /* pulls answered on the same stream */
	double round_trip_last;      /* seconds from Pull received to Answer sent */
	double encoding_error_last, encoding_error_max;   /* relative L2 */
	uint64_t residual_resets;    /* residuals dropped: new learner or encoding */
	uint64_t queue_answers, queue_bytes;         /* now */
	int connected, welcomed;     /* every shard's stream */
	int shards, shards_welcomed; /* syncer shards; welcomed streams */
	int encoding;                /* enum payload_enc of answers */
	struct exchange_counters x;
};

struct sidecar;

struct sidecar *sidecar_new(const struct sidecar_opts *o, struct exchange *x,
			    const struct frag_table *ft, struct err *e);
void sidecar_free(struct sidecar *s);
/*
 * Runs until the syncer ends the stream with OK "job done" (marks the
 * exchange done, returns 0), *stop is set (by a signal handler; returns
 * 1), or the syncer refused this learner for good (returns -1 with e
 * filled), or the learner's versions do not match this build's
 * (EXCHANGE_VERSION_MISMATCH with e filled; docs/abi.md, Versions).
 */
int sidecar_run(struct sidecar *s, const volatile sig_atomic_t *stop,
		struct err *e);
void sidecar_get_metrics(struct sidecar *s, struct sidecar_metrics *m);
/*
 * Seconds since the later-stuck of its two loops (the client's, the
 * bridge's) last turned; 0 before sidecar_run started them. Each turns at
 * least every 50 ms while it works, so more than SIDECAR_STUCK_SECONDS
 * means a thread is stuck: /healthz says so and the kubelet's liveness
 * probe restarts the sidecar (docs/sidecar.md, HTTP).
 */
#define SIDECAR_STUCK_SECONDS 10.0
double sidecar_stuck(struct sidecar *s, double now);
/* Prometheus text for /metrics. */
void sidecar_metrics_text(struct sidecar *s, struct buf *b);

/* ---- the pieces below are shared by client.c and the tests ---- */

/* One SyncerMessage received from shard `shard` applied to the exchange.
 * -1 with e filled for a message that cannot be used (it is counted and
 * dropped); -2 for a Welcome this sidecar cannot work with (the stream
 * should end). */
int sidecar_handle(struct sidecar *s, int shard, const uint8_t *msg,
		   size_t len, struct err *e);
/* Takes and queues every answer the learner published; returns how many. */
int sidecar_collect(struct sidecar *s);
/* Marks a new stream to shard `shard`; answers of its fragments for
 * older streams are dropped. */
void sidecar_stream_begin(struct sidecar *s, int shard);

#endif
