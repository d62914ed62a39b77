/*
 * stream_int: the syncer's streams as stream.c (calls, sends, events,
 * the run loop) and stream_msg.c (what each message does: hellos,
 * identities, Beats, evaluators, an external model's adoption) both see
 * them. Nothing outside these two includes it.
 */
#ifndef DDILOCO_SYNCER_STREAM_INT_H
#define DDILOCO_SYNCER_STREAM_INT_H

#include <grpc/grpc.h>

#include "common/wire.h"
#include "syncer/seed.h"
#include "syncer/syncer_int.h"

enum tag_kind { T_NEW, T_RECV, T_SEND, T_STATUS, T_CLOSE, T_SHUTDOWN };

struct tag {
	enum tag_kind kind;
	struct conn *c;
};

enum out_kind { OUT_WELCOME, OUT_PULL, OUT_UPDATE };

/* An Update's msg is its payload alone, sent in parts of what the
 * learner takes (docs/protocol.md, Messages in parts) after a framing
 * made from u; `sent` of its bytes are out. */
struct out_msg {
	struct out_msg *next;
	enum out_kind kind;
	int frag;
	grpc_slice msg;
	size_t payload;
	struct wire_update u;    /* OUT_UPDATE: the fields (no payload) */
	size_t sent;
};

struct conn {
	struct conn *prev, *next;
	struct stream_server *sv;
	grpc_call *call;
	gpr_timespec deadline;
	grpc_metadata_array md;
	struct tag t_new, t_recv, t_send, t_status, t_close;
	grpc_byte_buffer *rbuf, *sbuf;
	int recv_pending, send_pending, status_pending, close_pending;
	int md_sent, closing, ended, status_sent, cancelled;
	grpc_status_code code;
	grpc_slice details;
	int learner;
	int evaluator;           /* an evaluator's index; -1: none */
	int pending;             /* adopting: said hello, waits for Θ */
	struct wire_hello hello; /* that hello, fragment sizes in sizes */
	uint64_t *sizes;
	int cert_learner;        /* the certificate's learner (or evaluator)
				  * id; -1: none */
	int cert_evaluator;      /* the certificate names an evaluator */
	int beat;                /* a Beat call, not a Train stream */
	int beat_learner;        /* a Beat's learner once taken; -1: none */
	uint64_t incarnation;    /* Train: its Hello's; Beat: the one it
				  * named */
	double t_accept;         /* mono time the call arrived */
	struct out_msg *qhead;
	size_t send_payload;
	uint64_t peer_max;       /* its Hello's max_message (0: unsaid) */
	struct wire_parts parts; /* an answer coming in parts */
	int said_parts;          /* logged the first that came in parts */
	int takes_delta;         /* its Hello: Updates may go as deltas */
	uint64_t *have1;         /* per fragment: the version + 1 its learner
				  * holds once the queue is out (0: none) */
};

struct stream_server {
	struct syncer *s;
	grpc_server *srv;
	grpc_completion_queue *cq;
	void *method, *beat_method;
	struct conn *conns;      /* accepted calls */
	struct conn *waiting;    /* the one request for a new Train call */
	struct conn *waiting_beat;   /* and for a new Beat call */
	struct tag t_shutdown;
	int shut;
	/* per fragment, its Update at version upd_version (round 0), packed
	 * once for every learner that joins until the next merge */
	grpc_slice *upd;         /* the payload; its fields in upd_hdr */
	struct wire_update *upd_hdr;
	uint64_t *upd_version;
	int *upd_valid;
	size_t recv_limit;       /* the largest message taken (Welcome) */
	size_t send_cap;         /* the largest sent */
	size_t payload_max;      /* the largest answer payload; 0 unknown */
	/* spec.model.kind external (docs/syncer.md, Model-agnostic jobs):
	 * the table and weights the core is made with (seed.h), and the
	 * stream asked for the weights */
	struct seed seed;
	struct conn *seeder;
};

/* stream.c */
void conn_close(struct conn *c, grpc_status_code code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Frees c once it is closing and nothing of it is in flight. */
void conn_maybe_free(struct conn *c);
void conn_send_pull(struct conn *c, uint64_t round, int frag);
/* The Welcome, every fragment, then the Pulls of rounds in flight. */
void conn_send_welcome(struct conn *c, uint64_t resume,
		       const struct round_action *pulls, int npull);
/* The Updates kept for joining learners, for P fragments. */
int stream_cache_init(struct stream_server *sv, int P, struct err *e);

/* server.c */
/* A deadline `seconds` from now on the monotonic clock (0 if negative). */
gpr_timespec stream_deadline(double seconds);
/* One call of Train (or of Beat) waited for: sv->waiting(_beat). */
void stream_request_call(struct stream_server *sv, int beat);
/* The message limits of the table, at most cap (WIRE_MAX_MESSAGE or the
 * test knob); an external job's table is not known yet: the cap. */
void stream_set_limits(struct stream_server *sv, size_t cap);
/* The server made, listening on `listen` (mutual TLS when tls), and
 * started with a call of each method waited for; -1 with e filled. */
int stream_start(struct stream_server *sv, const char *listen,
		 const struct tls_files *tls, struct err *e);

/* stream_msg.c */
void stream_on_message(struct conn *c, const uint8_t *data, size_t len,
		       double now);
/* The learner (or evaluator) id the stream's client certificate names,
 * c->cert_evaluator set for an evaluator's; -1 with e filled when it
 * names none of this job's learners or evaluators. */
int stream_cert_learner(struct conn *c, struct err *e);
/* Ends a stream whose identity does not fit; counted and logged. */
void stream_refuse(struct conn *c, const char *why);
/* Streams that said no Hello within helloTimeout are closed. */
void stream_close_silent(struct stream_server *sv, double now);
/* Adopting: a seeder silent too long is dropped; with none, another
 * waiting learner is asked. */
void stream_seed_check(struct stream_server *sv, double now);

#endif
