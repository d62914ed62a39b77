/*
 * round: the syncer's round state machine — when to pull, when a quorum
 * is reached, how long the grace window lasts, when to merge, and which
 * answers are late. It holds no fragment data and no clock of its own:
 * every call takes `now` (seconds, any monotonic origin), so tests drive
 * it on a fake clock and the server on clock_mono().
 *
 * Learners are numbered 0 .. max_learners-1. A learner is *joined* once
 * it has been sent every current fragment; only joined learners are
 * pulled and count for pacing.
 *
 * Pacing (docs/design.md §3): round r starts when fewer than τ rounds are in
 * flight, at least K learners are joined, and the K-th most advanced
 * joined learner's step has moved H/P steps past the mark of the previous
 * start. The first round starts as soon as K learners are joined, the
 * mark then at the K-th step.
 * A learner's step is the one it last reported (Answer, Heartbeat) plus
 * the whole steps it has made since at its own pace: the time since the
 * report over its seconds per step, measured between reports at least
 * PACE_ANCHOR_S apart (its reported step time until then), for at most
 * PACE_EST_MAX_S after the report. Without that, steps are known only
 * from answers, which come only after pulls, and from heartbeats, and the
 * rounds waited for the next heartbeat (docs/syncer.md, pacing).
 * On a start the mark moves H/P forward, but never more than the larger
 * of τ·H/P and PACE_BACKLOG_S of ξ_step behind the current K-th step: a
 * slow stretch of rounds is caught up, the steps of a longer stall are
 * dropped and counted in steps_skipped. When the K-th step goes back by
 * more than H/P and PACE_DROP_STEPS (learners restarted at step 0) the
 * mark follows it down, so restarts never stall the rounds. Round r works
 * on fragment r mod P.
 *
 * Invariant: rounds × H/P ≈ the steps the K-th learner made, within 10 %
 * (tests/unit/test_round.c `pace_follows_h`, tests/integration/test_pace.sh),
 * as long as τ rounds fit in τ·H/P steps of the learners;
 * syncer_round_kth_trained and paced_rounds measure it.
 *
 * Quorum and grace: when K answers have been accepted the round enters
 * its grace window of
 *   clamp(γ · (τ·ξ_step − ξ_quorum − ξ_sync), 0, ξ_step),
 * or 0 when the K-th step is already 2·H/P past the pacing mark (the
 * rounds are behind the pace)
 * (ξ: EMAs of the learners' step time, of start-to-quorum time, and of
 * merge time as reported by syncer_round_done). It is ready to merge when
 * the window ends, or earlier when every pulled learner that is still
 * joined has answered. A learner joining while rounds are in flight is
 * pulled for them too (syncer_round_join lists them, oldest first), so a
 * round never waits on a learner that left and came back. Answers for a
 * round that is no longer in flight are late.
 *
 * A fragment's rounds merge in round order: a round due while an older
 * round of its fragment is in flight has that one merged first, at once
 * and with what it has (docs/syncer.md, Quorum and grace). With the
 * pulls in round order, a learner's answers for a fragment reach Θ in
 * the order it gave them, which the audit's mark needs (audit.h).
 */
#ifndef DDILOCO_SYNCER_ROUND_H
#define DDILOCO_SYNCER_ROUND_H

#include <stdint.h>

#include "common/err.h"

struct round_config {
	int quorum;              /* K */
	double grace;            /* γ */
	int overlap;             /* τ: rounds in flight at most */
	int nfrags;              /* P */
	double steps_per_round;  /* H / P */
	double phase;            /* steps the first round waits for (a shard's
				  * stagger, docs/syncer.md, Shards; 0) */
	int max_learners;
	double ema;              /* weight of a new sample in each EMA, (0, 1] */
};

enum round_verdict {
	ROUND_ACCEPTED = 0,   /* counted (or recorded as rejected) */
	ROUND_LATE,           /* the round was merged or abandoned */
	ROUND_DUPLICATE,      /* this learner already answered it */
	ROUND_UNKNOWN,        /* never started, wrong fragment, not pulled */
};

/* ROUND_HELD: a pull was due, but its round number is past `covered` */
enum round_action_kind { ROUND_NONE = 0, ROUND_PULL, ROUND_MERGE, ROUND_HELD };

struct round_action {
	enum round_action_kind kind;
	uint64_t round;
	int frag;
	int slot;   /* for ROUND_MERGE: pass to syncer_round_done */
};

struct round_slot {
	int active;
	uint64_t round;
	int frag;
	double t_start, t_quorum, deadline;   /* t_quorum < 0: no quorum yet */
	int answers;     /* accepted, counting toward the quorum */
	int refused;     /* answered but refused on arrival */
	int pending;     /* pulled, still joined, not answered */
	unsigned char *state;   /* per learner: see round.c */
};

struct syncer_round {
	struct round_config cfg;
	uint64_t started, completed;   /* round numbers started; rounds done */
	/* round numbers past this are not started (the high-water mark on
	 * disk, markw.h); UINT64_MAX from syncer_round_init */
	uint64_t covered;
	int stopped;                   /* no new rounds */
	struct round_slot *slots;      /* cfg.overlap of them */
	unsigned char *joined;
	unsigned char *stale;          /* joined, but not waited for nor paced
					  on (syncer_round_set_stale) */
	double *step;                  /* last step each learner reported */
	double *join_step;             /* the step it joined (resumes) at */
	double mark;
	int have_mark;
	double *rep_t;                 /* when step[i] was reported; < 0:
					  reported since the last poll */
	double *period;                /* measured seconds per step, 0 unknown */
	double *st;                    /* reported step time, 0 unknown */
	double *anchor_step, *anchor_t;   /* the report period[] is measured from */
	/* measure of the pacing, since this process started */
	uint64_t paced_rounds;         /* rounds started */
	double *trained;               /* per learner: Σ rises of its reported
					  step, jumps at a join excepted */
	double steps_skipped;          /* K-th steps the catch-up bound dropped */
	double ema_step, ema_quorum, ema_sync;
	int have_step, have_quorum, have_sync;
	double last_quorum_wait, last_grace;   /* of the latest quorum */
};

int syncer_round_init(struct syncer_round *rs, const struct round_config *cfg,
		      uint64_t started, uint64_t completed, struct err *e);
void syncer_round_release(struct syncer_round *rs);

/*
 * Learner id is now joined at `step`; writes the in-flight rounds it must
 * be pulled for into pulls (room for cfg.overlap) and returns their count.
 */
int syncer_round_join(struct syncer_round *rs, int id, uint64_t step,
		      struct round_action *pulls);
void syncer_round_leave(struct syncer_round *rs, int id);
/*
 * Joined learner id is stale (its step stands still while it keeps
 * talking; docs/syncer.md, Stale learners) or no longer. A stale learner
 * is still pulled and its answers still count, but no round waits for it
 * (`pending` leaves it out) and the pacing's K-th step is taken among the
 * others, so K of the others make a quorum. Leaving or joining again
 * clears it.
 */
void syncer_round_set_stale(struct syncer_round *rs, int id, int stale);
/*
 * A heartbeat or answer told us the learner's step (and step time > 0).
 * A step below the one the learner joined at is ignored: a restarted
 * learner trains a few steps from 0 before it takes the resume step its
 * Welcome gave (docs/protocol.md), and those would pull the K-th step
 * down and back up by the whole resume.
 */
void syncer_round_progress(struct syncer_round *rs, int id, uint64_t step,
			   double step_time);

/*
 * The step learner id, saying hello at hello_step, should train on from
 * (its lr schedule and data; docs/protocol.md, Welcome.resume_step): its
 * own last known step (have_own: the caller has one) when that is larger
 * than hello_step — it restarted from 0 —, else, for a new process
 * (hello_step 0), the pacing reference, the K-th largest step among the
 * other joined learners; else hello_step. Never less than hello_step.
 */
uint64_t syncer_round_resume_step(const struct syncer_round *rs, int id,
				  uint64_t hello_step, int have_own,
				  uint64_t own_step);

/*
 * An answer from learner id for (round, frag) arrived. `valid` = 0 for an
 * answer that was refused on arrival (not finite, wrong size): it stops
 * the round waiting for that learner but does not count toward quorum.
 * When nobody is left to wait for and K learners did answer, some of them
 * refused, the round is merged with the valid answers it has instead of
 * waiting for a quorum that cannot come.
 */
enum round_verdict syncer_round_answer(struct syncer_round *rs, int id,
				       uint64_t round, int frag, int valid,
				       double now);

/*
 * What to do next: a round to merge (ready ones first, lowest round
 * first), a round to start (the caller sends Pull to every joined
 * learner), or nothing. Call until it returns ROUND_NONE.
 */
void syncer_round_poll(struct syncer_round *rs, double now,
		       struct round_action *out);
/* The merge of slot finished; it took sync_seconds (for ξ_sync). */
void syncer_round_done(struct syncer_round *rs, int slot, double sync_seconds);
/* Drops every round in flight (answers to them become late). */
void syncer_round_abandon(struct syncer_round *rs);
/* Earliest grace deadline in flight, or a huge value when none. */
double syncer_round_next_deadline(const struct syncer_round *rs);
/*
 * When the next round is due if the learners keep their pace: `now` or
 * later, or a huge value when no round can start (τ in flight, fewer than
 * K joined, no step time known yet).
 */
double syncer_round_next_pull(const struct syncer_round *rs, double now);
/* The K-th largest of the learners' steps trained since this process
 * started (each learner's reported steps, summed over its restarts). */
double syncer_round_kth_trained(const struct syncer_round *rs);
/* Learner id's step at `now` as the pacing estimates it: the last one it
 * reported plus the whole steps made since at its pace (above). */
double syncer_round_step_at(const struct syncer_round *rs, int id,
			    double now);
/* That over the rounds started since (0 before any). */
double syncer_round_steps_per_round(const struct syncer_round *rs);
/* ξ_step (0 before any report). */
double syncer_round_step_time(const struct syncer_round *rs);
int syncer_round_in_flight(const struct syncer_round *rs);
/* Whether learner id has answered (validly or not) the round in slot. */
int syncer_round_answered(const struct syncer_round *rs, int slot, int id);

#endif
