/*
 * gaplog: the syncer's record of the gaps between completed rounds that
 * uptime counts as down (core.c head comment: the part of a gap beyond
 * B = max(1 s, 3 · ξ_step · H/P)), each with what the learners did while
 * it lasted, and the longest gap of any length while a learner was not
 * joined. /status shows it as "gaps" (docs/status.md); each down gap is
 * also one log line. Not checkpointed: it covers this process only.
 *
 * Times are the syncer's elapsed seconds (core_elapsed), the clock uptime
 * is counted on.
 */
#ifndef DDILOCO_SYNCER_GAPLOG_H
#define DDILOCO_SYNCER_GAPLOG_H

#include <stdint.h>

#define GAPLOG_KEEP 16

struct gap {
	double at;          /* elapsed when it began: the round before ended */
	double length;      /* seconds until the round that ended it */
	double down;        /* its part beyond B */
	uint64_t round;     /* the round that ended it; 0: the job's end */
	/* that round was pulled, and reached its quorum, this long after
	 * `at` (negative: before it; quorum < -1e9: none, merged without) */
	double pulled, quorum;
	int joined_start;   /* learners joined when it began */
	int joined_min;     /* fewest joined while it lasted */
	int left, joins;    /* learners that left and joined meanwhile */
	int starting;       /* the job's first gap: from K joined to round 1 */
};

struct gap_log {
	struct gap last[GAPLOG_KEEP];   /* a ring: the newest is last[(n-1) % KEEP] */
	uint64_t n;                     /* down gaps recorded */
	double down;                    /* their down seconds, summed */
	/* the longest gap, down or not, while fewer than M learners were
	 * joined or one left; and the round that ended it. The job's first
	 * gap counts only if one left: the others are starting, not gone */
	double longest_absent;
	uint64_t longest_absent_round;
	struct gap cur;                 /* the gap open now */
	int open;
};

/* A gap opens at elapsed `at` with `joined` learners joined. */
void gaplog_open(struct gap_log *g, double at, int joined);
/* The same for the job's first gap, opened when K learners are joined. */
void gaplog_start(struct gap_log *g, double at, int joined);
/* A learner joined (+1) or left (-1); `joined` is the count after it. */
void gaplog_learner(struct gap_log *g, int change, int joined);
/*
 * The open gap ends at elapsed E with `round` (0: the job's end), pulled
 * and at quorum at those elapsed times (quorum < 0: none); B its
 * allowance, M the learners. Returns 1 when it was a down gap (recorded,
 * logged), then opens the next gap at E.
 */
int gaplog_close(struct gap_log *g, double E, double B, uint64_t round,
		 double pulled, double quorum, int joined, int M);
/* The i-th newest recorded gap (0: newest), NULL past the kept ones. */
const struct gap *gaplog_get(const struct gap_log *g, uint64_t i);

#endif
