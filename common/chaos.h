/*
 * chaos: when to kill what (spec.chaos), as a pure schedule.
 *
 * Kill times form one stream, drawn from the seed alone: the first at
 * startAfterSeconds + gap, then one gap after another, where a gap is
 * exponential with mean mtbfSeconds (schedule poisson) or exactly
 * intervalSeconds (schedule interval). No kill is planned after
 * stopAfterSeconds (0 = never stops). Times are seconds since the job
 * started, on the caller's clock.
 *
 * When a planned time comes, the caller says what is down (a learner slot
 * is down while its learner or its sidecar is; the syncer is one more
 * unit) and the schedule picks the victim uniformly among the units that
 * are up and targeted. If maxDown units are already down, or nothing
 * targeted is up, that kill is skipped (counted) and the stream moves on:
 * never more than maxDown down because of chaos, and the time stream stays
 * the same whatever the victims do.
 *
 * The same seed gives the same times and, for the same answers about what
 * is down, the same victims. The executor is whoever owns the processes:
 * `ddiloco run` sends SIGKILL, the operator deletes pods.
 */
#ifndef DDILOCO_CHAOS_H
#define DDILOCO_CHAOS_H

#include <stdint.h>

#include "common/err.h"
#include "common/jobspec.h"
#include "common/util.h"

enum chaos_kind { CHAOS_LEARNER = 0, CHAOS_SIDECAR = 1, CHAOS_SYNCER = 2 };

struct chaos_kill {
	double time;            /* planned time, seconds since start */
	enum chaos_kind kind;
	int index;              /* learner slot; 0 for the syncer */
	uint64_t seq;           /* 1, 2, … over executed kills */
};

/* What is down right now, as the executor sees it. */
struct chaos_view {
	int learners;                   /* slots */
	const unsigned char *slot_down; /* learners entries, nonzero = down */
	int syncer_down;
};

struct chaos {
	struct job_chaos cfg;
	int learners;
	struct rng rng;         /* gaps */
	struct rng pick;        /* victims (separate, so times never depend on them) */
	double next;            /* next planned time; INFINITY when done */
	uint64_t kills, skipped;
};

/* A disabled config gives a schedule that never plans anything. */
void chaos_init(struct chaos *c, const struct job_chaos *cfg, int learners);
/* Time of the next planned kill (INFINITY if none). */
double chaos_next_time(const struct chaos *c);
/*
 * If a planned time is ≤ now: decides that kill (victim, or skip) and
 * moves the stream on. Returns 1 with *out filled when something is to be
 * killed, 0 when nothing is due or the due kill was skipped. Call again
 * until it returns 0: several times may have passed.
 */
int chaos_due(struct chaos *c, double now, const struct chaos_view *v,
	      struct chaos_kill *out);
/* "learner-2", "sidecar-0", "syncer". */
const char *chaos_kill_name(const struct chaos_kill *k, char *buf, int n);

/* The executor: kills what chaos_due chose. 0 = done, -1 = failed. */
struct chaos_executor {
	int (*kill)(void *ctx, const struct chaos_kill *k, struct err *e);
	void *ctx;
};

/*
 * chaos_due + the executor, at most one kill per call (the kill changes
 * what is down; call again with a fresh view). Returns 1 if a kill was
 * executed, 0 if none, -1 (with e) when the executor failed.
 */
int chaos_run_due(struct chaos *c, double now, const struct chaos_view *v,
		  const struct chaos_executor *x, struct err *e);

#endif
