/*
 * syncer_status: the one reader of the syncer's GET /status (the JSON
 * object of docs/status.md), for `ddiloco run` and the operator: an HTTP
 * GET with libcurl into a bounded buffer, within a timeout, and a parse
 * with jansson into struct syncer_status.
 *
 * Fields are read by the contract's types, the same way for every user:
 *   counts (round, tokens, answers, bytes, learners): a JSON integer >= 0,
 *     or a real with a whole value (an older syncer wrote some as reals);
 *   figures (eval_loss, uptime, goodput, elapsed, eval times and losses):
 *     any JSON number; null means "none";
 *   done, checkpoint.failing, checkpoint.fits: a boolean; checkpoint.error:
 *   a string or null; claims.excluded: a list of learner ids (counts).
 * A field that is missing reads 0, or NAN for a figure, so an older or
 * newer syncer still shows what it has; a field of the wrong type (a
 * string, a negative or fractional count) is an error naming the field.
 */
#ifndef DDILOCO_SYNCER_STATUS_H
#define DDILOCO_SYNCER_STATUS_H

#include <curl/curl.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define SYNCER_STATUS_MAX_BODY  (4u << 20)   /* largest /status body read */
#define SYNCER_STATUS_MAX_EVALS 100000       /* eval_history kept, oldest first */
#define SYNCER_STATUS_MAX_EXCLUDED 16        /* claims.excluded ids kept */

/* One evaluation of the global model. */
struct syncer_eval {
	uint64_t round, tokens;
	double loss, time;              /* loss NAN if null; time: s since start */
};

struct syncer_status {
	uint64_t round, tokens, tokens_merged;
	int done;
	double eval_loss;               /* NAN while none */
	int learners_connected, learners_total;
	uint64_t merged, late, rejected, empty;     /* answers */
	uint64_t stale, clipped;                    /* answers, bounds */
	uint64_t refused_bounds, capped;            /* answers, bounds */
	uint64_t refused_history, refused_size;     /* answers, screens */
	uint64_t steps_undone;
	uint64_t heartbeats, heartbeats_refused;    /* "heartbeats" */
	/* "claims" (docs/status.md): have_claims 0 when the syncer gave
	 * none (an older one); the cuts, and the learners excluded: how
	 * many, and the first SYNCER_STATUS_MAX_EXCLUDED of their ids,
	 * ascending */
	int have_claims;
	uint64_t claims_cut;
	int nexcluded;
	int excluded[SYNCER_STATUS_MAX_EXCLUDED];
	/* invariants (docs/status.md): have_invariants 0 when the syncer
	 * gave none */
	int have_invariants;
	uint64_t merged_steps, double_merged_steps, repeat_base;
	uint64_t stale_held, stale_merged;
	uint64_t bytes_in, bytes_out;
	double uptime, goodput, elapsed;            /* NAN when not given */
	double uptime_span;       /* seconds uptime is over; NAN: not given */
	struct {                        /* "pace": rounds against steps */
		double h, h_effective, steps_per_round;
		double steps_per_round_effective, kth_steps, steps_skipped;
		uint64_t rounds;
	} pace;
	struct {                        /* "goodput_breakdown": shares */
		double learner_seconds, merged, late, refused, overwritten;
		double restarts, in_flight, not_training, merged_again;
	} gpb;
	struct {                        /* "checkpoint": the syncer's writes */
		int have;               /* 0: the syncer gave none */
		int failing;
		uint64_t failures;
		int have_last_ok;       /* last_ok_round was not null */
		uint64_t last_ok_round;
		double last_ok_time;    /* its wall time (s); NAN: not given */
		char error[256];        /* "" when null */
		/* what the syncer process started from: "new",
		 * "checkpoint", "last_good", "seed" (docs/status.md);
		 * "" from a syncer that does not say */
		char resumed_from[16];
		/* whether a checkpoint of the adopted model fits on the
		 * volume (docs/status.md): 1, 0, or -1 when the syncer does
		 * not say (an older one); the bytes one needs and the
		 * volume's free bytes, 0 when not given */
		int fits;
		uint64_t needed_bytes, volume_free_bytes;
		/* "checkpoint.mark": the high-water mark's writes
		 * (docs/status.md); zeros from a syncer that does not say */
		int mark_failing, mark_holding;
		uint64_t mark_failures, mark_covered_round;
		char mark_error[256];   /* "" when null */
	} ckpt;
	struct syncer_eval *evals;      /* eval_history, owned */
	size_t nevals;
	/* a sharded syncer (docs/syncer.md, Shards): the shard this is and
	 * of how many (0 and 0 from a syncer that does not say: 0 of 1),
	 * the fragments it owns; an aggregate of every shard
	 * (syncer_status_shards) says how many answered and the first that
	 * did not (-1: none) */
	int shard, shards, owned;
	int shards_up, shard_down;
};

/* Zeros, and NAN for every figure: what a status reads before any /status. */
void syncer_status_init(struct syncer_status *s);
void syncer_status_release(struct syncer_status *s);
/* Moves src into dst (releasing what dst held); src is left empty. */
void syncer_status_move(struct syncer_status *dst, struct syncer_status *src);

/*
 * The job's status from its S shards' (docs/syncer.md, Shards): st[i] is
 * shard i's last /status, up[i] whether its last fetch answered. Counts
 * (rounds, answers, bytes, invariants) add up; the job's tokens and
 * elapsed are the largest; the learners excluded are every shard's (a
 * shard excludes on its own cuts), have_claims when any shard says;
 * uptime, goodput and its shares are each shard's weighted by the
 * fragments it owns (a shard that is not up counts the elapsed time
 * since its last /status as down, so uptime is per fragment); done when
 * every shard is;
 * learners connected: the fewest any shard has; the checkpoint fails
 * when any shard's does; the evaluations, pace and resumed_from are
 * shard 0's. out gets its own copy of the evaluations.
 */
void syncer_status_shards(struct syncer_status *out,
			  const struct syncer_status *st, const int *up, int n);

/* Parses a /status body into *out (written only on success). */
int syncer_status_parse(const char *text, size_t len, struct syncer_status *out,
			struct err *e);

/*
 * GET url (http or https, no proxy) within timeout seconds, the connection
 * included, and parse it. c: a handle to reuse (reset before and after),
 * or NULL for one made and freed here. Errors name the url: unreachable, not 200,
 * a body over SYNCER_STATUS_MAX_BODY, or what the parse found.
 */
int syncer_status_fetch(CURL *c, const char *url, double timeout,
			struct syncer_status *out, struct err *e);

#endif
