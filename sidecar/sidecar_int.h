/*
 * sidecar internals shared by bridge.c (exchange side, message handling)
 * and client.c (gRPC). Not for other modules.
 */
#ifndef DDILOCO_SIDECAR_INT_H
#define DDILOCO_SIDECAR_INT_H

#include <pthread.h>

#include "common/shard.h"
#include "common/wire.h"
#include "sidecar/sidecar.h"

/* One encoded answer waiting for the stream (at most one per fragment). */
struct qanswer {
	int used;
	uint64_t epoch, round;
	uint8_t hdr[WIRE_ANSWER_HDR_MAX];
	size_t hlen;
	uint8_t *payload;        /* malloc'd, or the outbox slot held by
				  * hold; handed to gRPC when sent */
	struct exchange_hold *hold;   /* NULL: payload is malloc'd */
	size_t plen;
	struct wire_answer a;    /* hdr's fields: the framing of its parts */
	double pulled_at;        /* clock_mono when the Pull arrived */
	float *r_before;         /* the residual before this answer (NULL:
				  * none kept), to undo it if never sent */
	uint64_t r_gen;          /* resid_gen it belongs to */
};

struct pull_note {
	uint64_t epoch, round;
	double at;
};

/*
 * One syncer shard's stream, as the exchange side sees it (under the
 * sidecar's mu). A job of S shards (docs/syncer.md, Shards) has S of
 * them, one Train stream each; fragment p's pulls, answers and updates
 * go by the link of its owner (common/shard.h). An unsharded job has one.
 */
struct link {
	const char *target;      /* "host:port" of the shard */
	uint64_t epoch;          /* stream number; 0 = none yet */
	int connected, welcomed;
	enum payload_enc enc;    /* answers, from Welcome */
	uint64_t seed_epoch;     /* the stream a seed request came on */
	uint64_t hello_incarnation;   /* learner's, in our last Hello */
	uint64_t resume_step;    /* from the last Welcome */
	uint64_t welcome_round;  /* from the last Welcome: the round of the
				  * updates a join sends (round 0 on the wire) */
	int rehello;             /* the learner restarted: a new stream */
	uint64_t peer_max;       /* the Welcome's max_message (0: unsaid) */
	struct wire_parts parts; /* client thread: an update in parts */
	int said_parts;          /* client thread: logged the first one */
};

struct sidecar {
	struct sidecar_opts o;
	struct exchange *x;
	const struct frag_table *ft;
	int nfrags;
	int nshards;
	char *targets;           /* o.target split at commas: links' */
	/* messages (docs/protocol.md, Messages in parts): the largest
	 * payload of the table, the largest message taken (Hello) and the
	 * largest sent */
	size_t payload_max, recv_limit, send_cap;

	pthread_mutex_t mu;      /* guards everything below up to metrics */
	struct link *links;      /* nshards entries */
	struct qanswer *queue;   /* nfrags entries */
	struct pull_note *pulls; /* nfrags entries: last Pull per fragment */
	unsigned char *seed_wanted;   /* nfrags: a Pull of round 0 came on
				       * its link's stream seed_epoch
				       * (o.seed_dir) */

	struct sidecar_metrics m;   /* counters: atomics or under mu */
	uint64_t incarnation;    /* learner's, last seen */
	uint64_t learner_step;   /* its step, last seen */
	struct exchange_stats stats;   /* the last consistent read of the
					* learner's stats (sidecar_learner_stats) */
	uint64_t eval_sent;      /* client thread: the evaluator's report
				  * count last sent */
	volatile int stop;       /* the bridge thread ends when set */
	/* when the client loop and the bridge loop last turned (clock_mono
	 * in ms, atomics; 0: not started): sidecar_stuck */
	uint64_t turned_ms[2];
	int mismatch;            /* bridge thread, atomic: the learner's
				  * versions do not match (docs/abi.md,
				  * Versions); the message in mismatch_err */
	struct err mismatch_err;
	int learner_versions;    /* bridge thread: its versions were logged */
	float *take_buf;         /* bridge thread: one fragment */
	uint64_t answers_taken;  /* bridge thread: answers with steps */
	uint8_t *check_buf;      /* bridge thread: decode for the error */
	float *check_vals;
	/* bridge thread: error feedback (docs/protocol.md). One residual per
	 * fragment, allocated at its first lossy answer, kept for answers in
	 * resid_enc from learner process resid_incarnation. */
	float **resid;
	enum payload_enc resid_enc;
	uint64_t resid_incarnation;
	uint64_t resid_gen;      /* counts the resets */
	/* client thread: Updates as deltas (docs/protocol.md). Per fragment
	 * the values of its last Update that carried a checksum, at version
	 * hat_ver1 − 1 (0: none), allocated at the first such Update. */
	float **hat;
	uint64_t *hat_ver1;
};

/* The link fragment p goes by: its owner shard's. */
static inline struct link *sidecar_link(struct sidecar *s, int p)
{
	return &s->links[shard_owner(p, s->nshards)];
}

#define SC_ADD(s, field, n) __atomic_add_fetch(&(s)->m.field, (n), __ATOMIC_RELAXED)

void sidecar_queue_free_entry(struct qanswer *q);
/* Reads the learner's stats. A new incarnation is a learner that
 * (re)started: it counts a restart and sees that the learner gets its
 * resume step (docs/sidecar.md). */
void sidecar_learner_stats(struct sidecar *s, struct exchange_stats *st);

/* Early heartbeats: a learner's first SIDECAR_EARLY_HEARTBEATS
 * heartbeats of a stream follow each other after
 * SIDECAR_EARLY_HEARTBEAT_S instead of heartbeat_every, so that the
 * syncer paces rounds on the learner's steps from its first steps on
 * and its step-time floor follows the learner's moving average down
 * from the slow first steps (docs/sidecar.md, Heartbeats). */
#define SIDECAR_EARLY_HEARTBEAT_S 0.05
#define SIDECAR_EARLY_HEARTBEATS 40
/* Seconds from a heartbeat to the next; *early counts the early ones
 * left on this stream. */
double sidecar_heartbeat_gap(const struct sidecar *s, int *early);

#endif
