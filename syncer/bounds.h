/*
 * bounds: what a learner may claim about itself (docs/syncer.md, Bounds).
 * Every number in a Heartbeat or an Answer is the learner's word; the
 * syncer's clock is the one thing the syncer knows. What a report claims
 * past what wall time allows at the job's pace is not believed: an
 * answer is credited what the clock allows, a heartbeat refused:
 *
 *   step time    finite, and 0 (not measured yet) or within
 *                [minStepTime, maxStepTime]
 *   pace(m)      the K-th lowest of the other learners' fastest accepted
 *                step times (K = minQuorum, at most as many as have
 *                reported one; 0 while none has): the job's pace, which
 *                learner m's own claims do not move
 *   floor(m)     the largest of minStepTime, m's own fastest accepted
 *                step time, and pace(m) / BOUNDS_PACE_SPREAD: the job's
 *                fastest plausible step for m. A learner that claims a
 *                tiny step time lowers none of the three below the
 *                others' pace / BOUNDS_PACE_SPREAD
 *   allowed(dt)  = BOUNDS_SLACK · (dt + BOUNDS_SLACK_S) / floor:
 *                the most steps a learner can make in dt seconds
 *   reference    a (time, value) pair the syncer accepted: a step (the
 *                highest accepted, or the resume step the syncer gave)
 *                or the tokens counted so far. Claims are measured from
 *                the older of two references, which moves forward every
 *                BOUNDS_WINDOW_S seconds, not from the last report: a
 *                report that waited in a queue carries a value older
 *                than its arrival, and the next one, measured from it,
 *                would claim that wait's steps as its own
 *   step         at most the reference step + allowed(time since it)
 *   heartbeat    tokens (its process's running total) at most
 *                B·T · (step + 1); the tokens counted since the reference
 *                plus this report's increase at most
 *                B·T · (allowed(time since it) + 1), and from the same
 *                process the increase at most B·T · (step increase + 1).
 *                Refused otherwise: its tokens are not counted, so the
 *                budget counts only tokens the clock allows
 *   answer       tokens at most B·T · steps (refused otherwise); its step
 *                credited at most what the step rule allows, and, when it
 *                would be merged, its steps at most allowed(time since
 *                its base can first have moved), at least 1: a learner
 *                moves its base when it answers, so that is the start of
 *                the round of its previous answer for the fragment, or
 *                its first join when there was none. Its tokens are
 *                credited at most B·T · credited steps. The merge (its
 *                weight, the screens' norm per step, the audit, the
 *                pacing) uses the credited numbers only
 *
 * A cut is an answer credited less than it claimed, or a heartbeat
 * refused by a time rule (the step, or tokens beyond allowed(dt));
 * each is counted per learner. A strike is a cut at least
 * BOUNDS_STRIKE_S after the learner's last strike, and
 * spec.syncer.maxClaimCuts strikes (0: never) exclude the learner: every
 * later report of it is refused, and the syncer ends its stream and
 * refuses its Hello (syncer_int.h). Strikes, not cuts: a learner answers
 * every round, so one moment of a floor set too high (another learner's
 * first step time, the slow step a cold start measures, moves its pace
 * until that learner's next heartbeat) cuts an honest learner's answers
 * as fast as rounds run; a liar keeps lying, a heartbeat a second.
 *
 * B·T (batchSize × seqLen) is what a learner trains in one step, exactly:
 * a token claim above it is a lie, never noise. The time bounds are
 * loose on purpose (a factor BOUNDS_SLACK and BOUNDS_SLACK_S seconds; a
 * reference at least BOUNDS_WINDOW_S old absorbs a queue wait of up to
 * (BOUNDS_SLACK - 1) · BOUNDS_WINDOW_S), and a heartbeat refused by them
 * alone is accepted later: the reference a report is measured from moves
 * only when one is accepted, while its allowance grows BOUNDS_SLACK times
 * faster than any honest learner trains.
 *
 * Nothing here changes state the caller did not ask for: a check says
 * yes, cut, or no with a reason, and moves the references only on yes
 * or cut. Counts (cuts and exclusions too) are kept from the syncer
 * process's start, not checkpointed.
 */
#ifndef DDILOCO_SYNCER_BOUNDS_H
#define DDILOCO_SYNCER_BOUNDS_H

#include <stdint.h>

#include "common/err.h"
#include "common/wire.h"

#define BOUNDS_SLACK 4.0     /* times the steps the floor allows */
#define BOUNDS_SLACK_S 1.0   /* seconds added to every span */
#define BOUNDS_WINDOW_S 10.0 /* a reference's least age once it moves */
#define BOUNDS_STRIKE_S 0.5  /* a strike's least distance from the last */
/* how many times faster than the job's pace (the K-th other learner's
 * fastest step) a learner may be: with BOUNDS_SLACK, an allowance of
 * 32 times that pace */
#define BOUNDS_PACE_SPREAD 8.0
#define BOUNDS_CUT 1         /* bounds_answer: accepted, credited less */

/* A value accepted at time t; ref[0] is the older, measured from. */
struct bounds_ref {
	double t;
	uint64_t v;
};

struct bounds_config {
	double min_step_time, max_step_time;   /* seconds */
	uint64_t tokens_per_step;              /* B·T */
	int quorum;                            /* K: pace's rank */
	int max_cuts;                          /* maxClaimCuts; 0: none */
};

struct bounds_learner {
	double fastest;          /* lowest accepted step time; 0: none */
	int have_step;
	uint64_t step;           /* highest step accepted (or resume given) */
	struct bounds_ref step_ref[2];
	uint64_t tokens;         /* counted from its heartbeats so far */
	struct bounds_ref tok_ref[2];
	uint64_t tok_step;       /* the step of the last accepted heartbeat */
	int have_tok_step;
	uint64_t refused_answers, refused_heartbeats;
	uint64_t cuts;           /* claims cut (answers) or refused by time */
	uint64_t strikes;        /* cuts BOUNDS_STRIKE_S apart */
	double strike_t;         /* the last strike's time */
	int excluded;            /* maxClaimCuts strikes reached */
};

struct bounds {
	struct bounds_config cfg;
	int M, P;
	struct bounds_learner *l;
	double *from;            /* M × P: earliest its counters for p can
				  * have started; < 0 before it joined */
	double *pace;            /* M: the fastest step times reported,
				  * sorted (npace of them) */
	int npace;
	uint64_t answers_refused;
	uint64_t heartbeats, heartbeats_refused;
	uint64_t cuts;           /* every learner's */
	int excluded;            /* learners excluded */
};

/* An answer as credited: its step, steps and tokens. */
struct bounds_credit {
	uint64_t step, steps, tokens;
};

int bounds_init(struct bounds *b, const struct bounds_config *cfg, int M,
		int P, double now);
void bounds_release(struct bounds *b);
/* The token totals restored from a checkpoint were reported at time t
 * or before (on the caller's clock). */
void bounds_restored(struct bounds *b, double t);
/* pace(m), floor(m) and allowed(dt) for learner m. */
double bounds_pace(const struct bounds *b, int m);
double bounds_floor(const struct bounds *b, int m);
double bounds_allowed(const struct bounds *b, int m, double dt);
/* Why learner m is excluded, into e ("excluded: N of its claims were
 * cut, …"); returns -1. */
int bounds_why_excluded(const struct bounds *b, int m, struct err *e);

/* Whether learner m is excluded (maxClaimCuts strikes reached). */
int bounds_excluded(const struct bounds *b, int m);
/* Learner m joined at `now` and was told to resume at step `resume`. */
void bounds_join(struct bounds *b, int m, uint64_t resume, double now);
/*
 * A heartbeat of learner m; prev_tokens is the total last counted for
 * it, same_process whether it comes from the process that reported
 * prev_tokens. 0: accepted (references moved); -1: refused and counted,
 * e says why.
 */
int bounds_heartbeat(struct bounds *b, int m, const struct wire_heartbeat *hb,
		     uint64_t prev_tokens, int same_process, double now,
		     struct err *e);
/*
 * An answer of learner m; `merged` when it would go into a merge (not
 * empty). 0: accepted as it is; BOUNDS_CUT: accepted with less credited
 * than claimed (counted a cut; e says what was cut); both write *out
 * (if not NULL). -1: refused and counted, e says why.
 */
int bounds_answer(struct bounds *b, int m, const struct wire_answer *a,
		  int merged, double now, struct bounds_credit *out,
		  struct err *e);
/* Learner m answered a round of fragment p that started at t_start. */
void bounds_answered(struct bounds *b, int m, int p, double t_start);

struct buf;
/* Its Prometheus lines: heartbeats taken and refused, answers refused,
 * the cuts and exclusions, each learner's named. */
void bounds_metrics(const struct bounds *b, struct buf *out);

#endif
