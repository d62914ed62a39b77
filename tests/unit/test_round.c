/* The round state machine on a fake clock: pacing, quorum, grace, lateness. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "syncer/round.h"

#define near(a, b) assert_float_equal((double)(a), (double)(b), 1e-9)

static void setup(struct syncer_round *rs, int K, double gamma, int tau,
		  double spr, int M)
{
	struct round_config c = {
		.quorum = K, .grace = gamma, .overlap = tau, .nfrags = 4,
		.steps_per_round = spr, .max_learners = M, .ema = 0.5,
	};
	struct round_action pulls[8];

	assert_int_equal(syncer_round_init(rs, &c, 0, 0, NULL), 0);
	for (int i = 0; i < M; i++)
		assert_int_equal(syncer_round_join(rs, i, 0, pulls), 0);
}

static void all_step(struct syncer_round *rs, int M, uint64_t step, double st)
{
	for (int i = 0; i < M; i++)
		syncer_round_progress(rs, i, step, st);
}

static void quorum_then_grace_then_late(void **state)
{
	struct syncer_round rs;
	struct round_action a;

	(void)state;
	setup(&rs, 2, 0.5, 2, 1.0, 3);
	all_step(&rs, 3, 1, 1.0);
	syncer_round_poll(&rs, 1.0, &a);       /* the first round, at once */
	assert_int_equal(a.kind, ROUND_PULL);
	assert_int_equal(a.round, 1);
	assert_int_equal(a.frag, 1);           /* r mod P */
	syncer_round_poll(&rs, 1.0, &a);
	assert_int_equal(a.kind, ROUND_NONE);  /* needs one more step */

	assert_int_equal(syncer_round_answer(&rs, 0, 1, 1, 1, 1.2), ROUND_ACCEPTED);
	syncer_round_poll(&rs, 1.2, &a);
	assert_int_equal(a.kind, ROUND_NONE);  /* 1 of K = 2 */
	assert_int_equal(syncer_round_answer(&rs, 1, 1, 1, 1, 1.5), ROUND_ACCEPTED);
	/* quorum after 0.5 s; grace = 0.5·(2·1.0 − 0.5 − 0) = 0.75 */
	near(rs.last_quorum_wait, 0.5);
	near(rs.last_grace, 0.75);
	near(syncer_round_next_deadline(&rs), 2.25);
	/* no merge yet, learner 2 may still come; but 1.2 s at 1 s a step
	 * since the report of step 1: step 2 is due, and round 2 starts */
	syncer_round_poll(&rs, 2.2, &a);
	assert_int_equal(a.kind, ROUND_PULL);
	assert_int_equal(a.round, 2);
	syncer_round_poll(&rs, 2.2, &a);
	assert_int_equal(a.kind, ROUND_NONE);
	syncer_round_poll(&rs, 2.25, &a);
	assert_int_equal(a.kind, ROUND_MERGE);
	assert_int_equal(a.round, 1);
	syncer_round_done(&rs, a.slot, 0.1);
	assert_int_equal(rs.completed, 1);
	assert_int_equal(syncer_round_in_flight(&rs), 1);   /* round 2 */
	/* learner 2 was silent; now it is late */
	assert_int_equal(syncer_round_answer(&rs, 2, 1, 1, 1, 2.3), ROUND_LATE);
	assert_int_equal(syncer_round_answer(&rs, 2, 9, 1, 1, 2.3), ROUND_UNKNOWN);

	/* second round, pulled at 2.2: ξ_quorum = 0.5, ξ_sync = 0.1; quorum
	 * after 0.2 s: ξ_quorum = 0.35, grace = 0.5·(2 − 0.35 − 0.1) = 0.775 */
	all_step(&rs, 3, 2, 1.0);
	syncer_round_poll(&rs, 2.3, &a);
	assert_int_equal(a.kind, ROUND_NONE);   /* step 3 not due */
	assert_int_equal(syncer_round_answer(&rs, 2, 2, 2, 1, 2.3), ROUND_ACCEPTED);
	assert_int_equal(syncer_round_answer(&rs, 2, 2, 2, 1, 2.3), ROUND_DUPLICATE);
	assert_int_equal(syncer_round_answer(&rs, 0, 2, 3, 1, 2.4), ROUND_UNKNOWN);
	assert_int_equal(syncer_round_answer(&rs, 0, 2, 2, 1, 2.4), ROUND_ACCEPTED);
	near(rs.last_grace, 0.775);
	syncer_round_release(&rs);
}

static void everyone_answered_merges_at_once(void **state)
{
	struct syncer_round rs;
	struct round_action a;

	(void)state;
	setup(&rs, 1, 0.5, 2, 1.0, 2);
	all_step(&rs, 2, 1, 4.0);
	syncer_round_poll(&rs, 1.0, &a);
	assert_int_equal(a.kind, ROUND_PULL);
	assert_int_equal(syncer_round_answer(&rs, 1, 1, 1, 1, 1.5), ROUND_ACCEPTED);
	/* grace = min(0.5·(2·4 − 0.5), 4) = 3.75 */
	near(rs.last_grace, 3.75);
	syncer_round_poll(&rs, 1.6, &a);
	assert_int_equal(a.kind, ROUND_NONE);
	assert_int_equal(syncer_round_answer(&rs, 0, 1, 1, 1, 1.7), ROUND_ACCEPTED);
	syncer_round_poll(&rs, 1.7, &a);
	assert_int_equal(a.kind, ROUND_MERGE);
	syncer_round_release(&rs);
}

/*
 * Round numbers past `covered` (the high-water mark on disk) are held:
 * a due pull says ROUND_HELD and starts nothing, a round in flight still
 * merges, and once covered reaches it the pull goes out with its pacing
 * as it was.
 */
static void rounds_past_the_mark_are_held(void **state)
{
	struct syncer_round rs;
	struct round_action a;

	(void)state;
	setup(&rs, 1, 0.5, 2, 1.0, 2);
	rs.covered = 1;
	all_step(&rs, 2, 1, 1.0);
	syncer_round_poll(&rs, 1.0, &a);
	assert_int_equal(a.kind, ROUND_PULL);
	assert_int_equal(a.round, 1);
	all_step(&rs, 2, 2, 1.0);
	syncer_round_poll(&rs, 2.0, &a);        /* round 2 due, not covered */
	assert_int_equal(a.kind, ROUND_HELD);
	assert_int_equal(rs.started, 1);
	assert_int_equal(syncer_round_answer(&rs, 0, 1, 1, 1, 2.1), ROUND_ACCEPTED);
	assert_int_equal(syncer_round_answer(&rs, 1, 1, 1, 1, 2.1), ROUND_ACCEPTED);
	syncer_round_poll(&rs, 2.1, &a);        /* the round in flight merges */
	assert_int_equal(a.kind, ROUND_MERGE);
	syncer_round_done(&rs, a.slot, 0.1);
	syncer_round_poll(&rs, 2.2, &a);
	assert_int_equal(a.kind, ROUND_HELD);
	rs.covered = 2;
	syncer_round_poll(&rs, 2.3, &a);
	assert_int_equal(a.kind, ROUND_PULL);
	assert_int_equal(a.round, 2);
	syncer_round_poll(&rs, 2.3, &a);        /* step 3 not reached */
	assert_int_equal(a.kind, ROUND_NONE);
	syncer_round_release(&rs);
}

static void grace_is_bounded(void **state)
{
	struct syncer_round rs;
	struct round_action a;

	(void)state;
	/* γ = 1, τ = 4: 1·(4·1 − 0.1) = 3.9 is cut to one step, 1.0 */
	setup(&rs, 1, 1.0, 4, 1.0, 2);
	all_step(&rs, 2, 1, 1.0);
	syncer_round_poll(&rs, 10.0, &a);
	assert_int_equal(a.kind, ROUND_PULL);
	syncer_round_answer(&rs, 0, 1, 1, 1, 10.1);
	near(rs.last_grace, 1.0);
	syncer_round_release(&rs);
	/* H/P = 16, steps of 10 ms: the slack of τ = 4 rounds of 0.16 s,
	 * 1·(4·0.16 − 0.1) = 0.54, is cut to one round, 0.16 — not to one
	 * step, which would leave a learner a step behind the quorum out */
	setup(&rs, 1, 1.0, 4, 16.0, 2);
	all_step(&rs, 2, 16, 0.01);
	syncer_round_poll(&rs, 10.0, &a);
	assert_int_equal(a.kind, ROUND_PULL);
	syncer_round_answer(&rs, 0, 1, 1, 1, 10.1);
	near(rs.last_grace, 0.16);
	syncer_round_release(&rs);
	/* γ = 0.5, τ = 2: 0.5·(2·0.16 − 0.1) = 0.11, under the cap */
	setup(&rs, 1, 0.5, 2, 16.0, 2);
	all_step(&rs, 2, 16, 0.01);
	syncer_round_poll(&rs, 10.0, &a);
	assert_int_equal(a.kind, ROUND_PULL);
	syncer_round_answer(&rs, 0, 1, 1, 1, 10.1);
	near(rs.last_grace, 0.11);
	syncer_round_release(&rs);
	/* no step time known yet: γ·(0 − 0.1) < 0 is cut to 0 */
	setup(&rs, 1, 1.0, 4, 1.0, 2);
	all_step(&rs, 2, 1, 0.0);
	syncer_round_poll(&rs, 10.0, &a);
	syncer_round_answer(&rs, 0, 1, 1, 1, 10.1);
	near(rs.last_grace, 0.0);
	syncer_round_poll(&rs, 10.1, &a);
	assert_int_equal(a.kind, ROUND_MERGE);
	syncer_round_release(&rs);
}

static void at_most_tau_in_flight(void **state)
{
	struct syncer_round rs;
	struct round_action a, merge;

	(void)state;
	setup(&rs, 1, 0.0, 2, 1.0, 2);
	all_step(&rs, 2, 1, 1.0);
	syncer_round_poll(&rs, 1.0, &a);
	assert_int_equal(a.round, 1);
	all_step(&rs, 2, 2, 1.0);
	syncer_round_poll(&rs, 2.0, &a);
	assert_int_equal(a.round, 2);
	all_step(&rs, 2, 10, 1.0);
	syncer_round_poll(&rs, 3.0, &a);
	assert_int_equal(a.kind, ROUND_NONE);      /* τ = 2 in flight */
	assert_int_equal(syncer_round_in_flight(&rs), 2);
	/* round 2 reaches quorum first and merges first (γ = 0) */
	syncer_round_answer(&rs, 0, 2, 2, 1, 3.5);
	syncer_round_poll(&rs, 3.5, &merge);
	assert_int_equal(merge.kind, ROUND_MERGE);
	assert_int_equal(merge.round, 2);
	syncer_round_done(&rs, merge.slot, 0.01);
	/* the stall is caught up by τ = 2 rounds at most, not eight */
	syncer_round_poll(&rs, 3.6, &a);
	assert_int_equal(a.kind, ROUND_PULL);
	assert_int_equal(a.round, 3);
	near(rs.mark, 8.0);                        /* max(2 + 1, 10 − 2·1) */
	near(rs.steps_skipped, 5.0);               /* 3 .. 8 */
	syncer_round_poll(&rs, 3.6, &a);
	assert_int_equal(a.kind, ROUND_NONE);      /* full again */
	syncer_round_release(&rs);
}

static void half_a_step_per_round(void **state)
{
	struct syncer_round rs;
	struct round_action a;

	(void)state;
	/* H = 2, P = 4: two rounds per learner step */
	setup(&rs, 1, 0.0, 4, 0.5, 1);
	syncer_round_poll(&rs, 0.0, &a);        /* the first one at once */
	assert_int_equal(a.round, 1);
	syncer_round_poll(&rs, 0.0, &a);
	assert_int_equal(a.kind, ROUND_NONE);
	all_step(&rs, 1, 1, 1.0);
	syncer_round_poll(&rs, 1.0, &a);
	assert_int_equal(a.round, 2);
	syncer_round_poll(&rs, 1.0, &a);
	assert_int_equal(a.round, 3);
	syncer_round_poll(&rs, 1.0, &a);
	assert_int_equal(a.kind, ROUND_NONE);
	syncer_round_release(&rs);
}

static void quorum_waits_for_k_joined(void **state)
{
	struct syncer_round rs;
	struct round_action a, pulls[4];

	(void)state;
	setup(&rs, 2, 0.0, 2, 1.0, 3);
	syncer_round_leave(&rs, 1);
	syncer_round_leave(&rs, 2);
	syncer_round_poll(&rs, 0.0, &a);
	all_step(&rs, 3, 5, 1.0);
	syncer_round_poll(&rs, 1.0, &a);
	assert_int_equal(a.kind, ROUND_NONE);   /* one joined, K = 2 */
	assert_int_equal(syncer_round_join(&rs, 1, 5, pulls), 0);
	all_step(&rs, 3, 6, 1.0);
	syncer_round_poll(&rs, 2.0, &a);        /* K joined: at once */
	assert_int_equal(a.kind, ROUND_PULL);
	near(rs.mark, 6.0);
	/* learner 1 leaves before answering, learner 0 answers */
	syncer_round_leave(&rs, 1);
	assert_int_equal(syncer_round_answer(&rs, 1, 1, 1, 1, 2.1), ROUND_UNKNOWN);
	syncer_round_answer(&rs, 0, 1, 1, 1, 2.2);
	syncer_round_poll(&rs, 5.0, &a);
	assert_int_equal(a.kind, ROUND_NONE);   /* 1 of 2, nobody else pulled */
	/* learner 2 joins and is pulled for the round in flight */
	assert_int_equal(syncer_round_join(&rs, 2, 0, pulls), 1);
	assert_int_equal(pulls[0].round, 1);
	assert_int_equal(pulls[0].frag, 1);
	syncer_round_poll(&rs, 5.5, &a);
	assert_int_equal(a.kind, ROUND_NONE);   /* learner 2 has not answered */
	/* learner 1 comes back: pulled again, its answer makes the quorum;
	 * the grace window is 0 (γ = 0), so the merge is immediate */
	assert_int_equal(syncer_round_join(&rs, 1, 7, pulls), 1);
	assert_int_equal(syncer_round_answer(&rs, 1, 1, 1, 1, 6.0), ROUND_ACCEPTED);
	syncer_round_poll(&rs, 6.0, &a);
	assert_int_equal(a.kind, ROUND_MERGE);
	assert_int_equal(syncer_round_answered(&rs, a.slot, 0), 1);
	assert_int_equal(syncer_round_answered(&rs, a.slot, 1), 1);
	assert_int_equal(syncer_round_answered(&rs, a.slot, 2), 0);
	syncer_round_abandon(&rs);
	assert_int_equal(syncer_round_in_flight(&rs), 0);
	assert_int_equal(syncer_round_answer(&rs, 2, 1, 1, 1, 7.0), ROUND_LATE);
	syncer_round_release(&rs);
}

static void stopped_starts_nothing(void **state)
{
	struct syncer_round rs;
	struct round_action a;

	(void)state;
	setup(&rs, 1, 0.0, 2, 1.0, 1);
	rs.stopped = 1;
	all_step(&rs, 1, 5, 1.0);
	syncer_round_poll(&rs, 1.0, &a);
	assert_int_equal(a.kind, ROUND_NONE);
	syncer_round_release(&rs);
}

/* Learners killed and restarted at step 0 do not stall the rounds. */
/* A late report (a lower step after a higher one) counts nothing, and
 * the steps it seems to give back are not counted again. */
static void late_reports_count_no_step_twice(void **state)
{
	struct syncer_round rs;

	(void)state;
	setup(&rs, 2, 0.5, 2, 1.0, 2);
	all_step(&rs, 2, 10, 1.0);
	syncer_round_progress(&rs, 0, 20, 1.0);
	syncer_round_progress(&rs, 0, 15, 1.0);   /* a heartbeat read earlier */
	syncer_round_progress(&rs, 0, 20, 1.0);
	syncer_round_progress(&rs, 0, 25, 1.0);
	syncer_round_progress(&rs, 1, 25, 1.0);
	near(syncer_round_kth_trained(&rs), 25);
	near(rs.trained[0], 25);
	near(rs.step[0], 25);
	syncer_round_release(&rs);
}

static void restarted_learners_do_not_stall(void **state)
{
	struct syncer_round rs;
	struct round_action a, pulls[8];
	uint64_t before;

	(void)state;
	setup(&rs, 2, 0.0, 1, 1.0, 3);
	for (uint64_t step = 1; step <= 100; step++) {
		all_step(&rs, 3, step, 1.0);
		syncer_round_poll(&rs, (double)step, &a);
		if (a.kind == ROUND_PULL) {
			syncer_round_answer(&rs, 0, a.round, a.frag, 1, (double)step);
			syncer_round_answer(&rs, 1, a.round, a.frag, 1, (double)step);
			syncer_round_answer(&rs, 2, a.round, a.frag, 1, (double)step);
			syncer_round_poll(&rs, (double)step, &a);
			assert_int_equal(a.kind, ROUND_MERGE);
			syncer_round_done(&rs, a.slot, 0.0);
		}
	}
	before = rs.completed;
	assert_in_range(before, 99, UINT64_MAX);
	/* two of three restart: the K-th (2nd) step is now 1, not 100 */
	syncer_round_leave(&rs, 0);
	syncer_round_leave(&rs, 1);
	syncer_round_join(&rs, 0, 0, pulls);
	syncer_round_join(&rs, 1, 0, pulls);
	syncer_round_progress(&rs, 0, 1, 1.0);
	syncer_round_progress(&rs, 1, 1, 1.0);
	syncer_round_poll(&rs, 101.0, &a);         /* the mark follows down to 1 */
	assert_int_equal(a.kind, ROUND_NONE);
	syncer_round_progress(&rs, 0, 2, 1.0);
	syncer_round_progress(&rs, 1, 2, 1.0);
	syncer_round_poll(&rs, 102.0, &a);
	assert_int_equal(a.kind, ROUND_PULL);      /* not after 98 more steps */
	syncer_round_answer(&rs, 0, a.round, a.frag, 1, 102.0);
	syncer_round_answer(&rs, 1, a.round, a.frag, 1, 102.0);
	syncer_round_answer(&rs, 2, a.round, a.frag, 1, 102.0);
	syncer_round_poll(&rs, 102.0, &a);
	assert_int_equal(a.kind, ROUND_MERGE);
	syncer_round_done(&rs, a.slot, 0.0);
	assert_int_equal(rs.completed, before + 1);
	/* and then one round per step of the K-th again */
	syncer_round_poll(&rs, 102.0, &a);
	assert_int_equal(a.kind, ROUND_NONE);
	syncer_round_progress(&rs, 0, 3, 1.0);
	syncer_round_progress(&rs, 1, 3, 1.0);
	syncer_round_poll(&rs, 103.0, &a);
	assert_int_equal(a.kind, ROUND_PULL);
	syncer_round_release(&rs);
}

/*
 * The first round starts as soon as K learners are joined: they train from
 * their Welcome on, and a round that waited for their steps to move (known
 * from heartbeats, one a second) would get answers spanning that wait.
 */
static void first_round_starts_at_once(void **state)
{
	struct syncer_round rs;
	struct round_action a, pulls[8];
	struct round_config c = {
		.quorum = 2, .grace = 0.0, .overlap = 2, .nfrags = 4,
		.steps_per_round = 1.0, .max_learners = 3, .ema = 0.5,
	};

	(void)state;
	/* a restarted syncer: 40 rounds completed, numbers up to 53 skipped */
	assert_int_equal(syncer_round_init(&rs, &c, 53, 40, NULL), 0);
	assert_int_equal(syncer_round_join(&rs, 0, 900, pulls), 0);
	syncer_round_poll(&rs, 0.0, &a);
	assert_int_equal(a.kind, ROUND_NONE);     /* one joined, K = 2 */
	assert_int_equal(syncer_round_join(&rs, 1, 880, pulls), 0);
	/* no step has moved since they joined: the round starts anyway */
	syncer_round_poll(&rs, 0.1, &a);
	assert_int_equal(a.kind, ROUND_PULL);
	assert_int_equal(a.round, 54);
	assert_int_equal(a.frag, 2);              /* 54 mod 4 */
	near(rs.mark, 880.0);                     /* the K-th step */
	/* then one round per step of the K-th, as before */
	syncer_round_poll(&rs, 0.2, &a);
	assert_int_equal(a.kind, ROUND_NONE);
	syncer_round_progress(&rs, 0, 901, 1.0);
	syncer_round_progress(&rs, 1, 881, 1.0);
	syncer_round_poll(&rs, 1.0, &a);
	assert_int_equal(a.kind, ROUND_PULL);
	assert_int_equal(a.round, 55);
	syncer_round_release(&rs);
	/* a new job: the learners just joined at step 0 */
	assert_int_equal(syncer_round_init(&rs, &c, 0, 0, NULL), 0);
	syncer_round_join(&rs, 0, 0, pulls);
	syncer_round_join(&rs, 1, 0, pulls);
	syncer_round_poll(&rs, 0.0, &a);
	assert_int_equal(a.kind, ROUND_PULL);
	assert_int_equal(a.round, 1);
	syncer_round_release(&rs);
}

/*
 * A shard's phase (docs/syncer.md, Shards): shard 1 of 2 in a job of
 * H = P = 4 drives 2 fragments, a round every 2 steps, its first one
 * step after shard 0's, so the shards' pulls take turns every step.
 */
static void a_shards_first_round_waits_its_phase(void **state)
{
	struct syncer_round rs;
	struct round_action a, pulls[8];
	struct round_config c = {
		.quorum = 1, .grace = 0.0, .overlap = 2, .nfrags = 2,
		.steps_per_round = 2.0, .phase = 1.0, .max_learners = 1,
		.ema = 0.5,
	};

	(void)state;
	assert_int_equal(syncer_round_init(&rs, &c, 0, 0, NULL), 0);
	syncer_round_join(&rs, 0, 0, pulls);
	syncer_round_poll(&rs, 0.0, &a);
	assert_int_equal(a.kind, ROUND_NONE);     /* shard 0's turn */
	syncer_round_progress(&rs, 0, 1, 1.0);
	syncer_round_poll(&rs, 1.0, &a);
	assert_int_equal(a.kind, ROUND_PULL);
	assert_int_equal(a.round, 1);
	syncer_round_progress(&rs, 0, 2, 1.0);
	syncer_round_poll(&rs, 2.0, &a);
	assert_int_equal(a.kind, ROUND_NONE);     /* every 2 steps */
	syncer_round_progress(&rs, 0, 3, 1.0);
	syncer_round_poll(&rs, 3.0, &a);
	assert_int_equal(a.kind, ROUND_PULL);
	assert_int_equal(a.round, 2);
	syncer_round_release(&rs);
}

/* Refused answers make no quorum, but the round does not wait forever for
 * one when everyone has answered; too few answers at all still wait. */
static void refused_answers_do_not_stall(void **state)
{
	struct syncer_round rs;
	struct round_action a;

	(void)state;
	setup(&rs, 3, 0.5, 1, 1.0, 4);
	all_step(&rs, 4, 1, 1.0);
	syncer_round_poll(&rs, 1.0, &a);
	assert_int_equal(a.kind, ROUND_PULL);
	assert_int_equal(syncer_round_answer(&rs, 0, 1, 1, 1, 1.1), ROUND_ACCEPTED);
	assert_int_equal(syncer_round_answer(&rs, 1, 1, 1, 0, 1.1), ROUND_ACCEPTED);
	assert_int_equal(syncer_round_answer(&rs, 2, 1, 1, 0, 1.2), ROUND_ACCEPTED);
	syncer_round_poll(&rs, 1.3, &a);
	assert_int_equal(a.kind, ROUND_NONE);   /* learner 3 may still answer */
	assert_int_equal(syncer_round_answer(&rs, 3, 1, 1, 1, 1.4), ROUND_ACCEPTED);
	syncer_round_poll(&rs, 1.4, &a);        /* 2 valid of K = 3, all in */
	assert_int_equal(a.kind, ROUND_MERGE);
	assert_int_equal(a.round, 1);
	syncer_round_done(&rs, a.slot, 0.01);
	assert_int_equal(rs.completed, 1);

	/* round 2: one valid answer, one refused, the other two leave:
	 * 2 answered < K, so it waits (for a rejoin) instead of merging */
	all_step(&rs, 4, 3, 1.0);
	syncer_round_poll(&rs, 2.0, &a);
	assert_int_equal(a.kind, ROUND_PULL);
	assert_int_equal(a.round, 2);
	assert_int_equal(syncer_round_answer(&rs, 0, 2, a.frag, 1, 2.1), ROUND_ACCEPTED);
	assert_int_equal(syncer_round_answer(&rs, 1, 2, a.frag, 0, 2.1), ROUND_ACCEPTED);
	syncer_round_leave(&rs, 2);
	syncer_round_leave(&rs, 3);
	syncer_round_poll(&rs, 9.0, &a);
	assert_int_equal(a.kind, ROUND_NONE);
	syncer_round_release(&rs);
}

/* Welcome.resume_step: own last step, else the K-th of the others. */
static void resume_step_is_the_jobs(void **state)
{
	struct syncer_round rs;
	struct round_action pulls[8];

	(void)state;
	setup(&rs, 2, 0.0, 2, 1.0, 4);
	syncer_round_progress(&rs, 0, 500, 1.0);
	syncer_round_progress(&rs, 1, 480, 1.0);
	syncer_round_progress(&rs, 2, 450, 1.0);
	syncer_round_progress(&rs, 3, 300, 1.0);
	syncer_round_leave(&rs, 3);   /* learner 3 was killed */

	/* its own last step, known and larger than the Hello's: resume there */
	assert_int_equal(syncer_round_resume_step(&rs, 3, 0, 1, 300), 300);
	assert_int_equal(syncer_round_resume_step(&rs, 3, 12, 1, 300), 300);
	/* unknown (the syncer restarted): the K-th (2nd) of the others, 480 */
	assert_int_equal(syncer_round_resume_step(&rs, 3, 0, 0, 0), 480);
	/* a learner that has trained keeps its step, behind the K-th or not */
	assert_int_equal(syncer_round_resume_step(&rs, 3, 300, 1, 300), 300);
	assert_int_equal(syncer_round_resume_step(&rs, 3, 12, 0, 0), 12);
	assert_int_equal(syncer_round_resume_step(&rs, 3, 490, 0, 0), 490);
	assert_int_equal(syncer_round_resume_step(&rs, 3, 900, 1, 300), 900);
	/* a learner still joined is not its own reference: 2nd of {480, 450} */
	assert_int_equal(syncer_round_resume_step(&rs, 0, 0, 0, 0), 450);
	/* fewer than K others joined: nothing to go by but the Hello */
	syncer_round_leave(&rs, 1);
	syncer_round_leave(&rs, 2);
	assert_int_equal(syncer_round_resume_step(&rs, 3, 7, 0, 0), 7);
	assert_int_equal(syncer_round_resume_step(&rs, 3, 7, 1, 300), 300);
	/* out of range ids are answered with the Hello's step */
	assert_int_equal(syncer_round_resume_step(&rs, 9, 7, 0, 0), 7);
	assert_int_equal(syncer_round_resume_step(&rs, -1, 7, 0, 0), 7);
	/* the others rejoin: the reference counts them again */
	syncer_round_join(&rs, 1, 480, pulls);
	syncer_round_join(&rs, 2, 450, pulls);
	assert_int_equal(syncer_round_resume_step(&rs, 3, 0, 0, 0), 480);
	syncer_round_release(&rs);
}


/*
 * Pacing follows H: 4 learners at their own step times, heartbeats once a
 * second, each pull answered at the end of the learner's step in progress
 * and arriving 2 ms later, merges when round.c says; after 60 s of fake
 * clock, rounds × H/P is within 10 % of the K-th learner's steps, for
 * H/P = 1, 4, 16 and 64 (docs/design.md §3, pacing).
 */
#define SIM_M 4
#define SIM_LAG 0.002

struct sim_learner {
	double st, next_step, next_hb;
	uint64_t step;
	double pull_at[8];      /* per slot: when its pull arrives, < 0 none */
	uint64_t pull_round[8];
	int pull_frag[8];
	double ans_at[8];       /* per slot: when its answer arrives, < 0 none */
	uint64_t ans_step[8];
};

static void sim_pull(struct sim_learner *L, const struct round_action *a,
		     double now)
{
	for (int i = 0; i < SIM_M; i++) {
		L[i].pull_at[a->slot] = now + SIM_LAG;
		L[i].pull_round[a->slot] = a->round;
		L[i].pull_frag[a->slot] = a->frag;
		L[i].ans_at[a->slot] = -1;
	}
}

/* One learner over one tick: steps, serves pulls, heartbeats, answers. */
static void sim_learner_tick(struct syncer_round *rs, struct sim_learner *l,
			     int id, double now)
{
	while (now >= l->next_step) {
		l->step++;
		for (int s = 0; s < 8; s++)
			if (l->pull_at[s] >= 0 && l->pull_at[s] <= l->next_step) {
				l->pull_at[s] = -1;
				l->ans_at[s] = l->next_step + SIM_LAG;
				l->ans_step[s] = l->step;
			}
		l->next_step += l->st;
	}
	for (int s = 0; s < 8; s++)
		if (l->ans_at[s] >= 0 && now >= l->ans_at[s]) {
			l->ans_at[s] = -1;
			syncer_round_progress(rs, id, l->ans_step[s], 0);
			syncer_round_answer(rs, id, l->pull_round[s],
					    l->pull_frag[s], 1, now);
		}
	if (now >= l->next_hb) {
		syncer_round_progress(rs, id, l->step, l->st);
		l->next_hb += 1.0;
	}
}

static double sim_pace(double spr, double *per_round)
{
	static const double st[SIM_M] = { 0.018, 0.020, 0.022, 0.025 };
	struct sim_learner L[SIM_M];
	struct syncer_round rs;
	struct round_action a;
	double steps[SIM_M], kth;

	setup(&rs, 3, 0.5, 2, spr, SIM_M);
	rs.cfg.ema = 0.2;
	memset(L, 0, sizeof(L));
	for (int i = 0; i < SIM_M; i++) {
		L[i].st = st[i];
		L[i].next_step = st[i];
		L[i].next_hb = 0.25 * i;
		for (int s = 0; s < 8; s++)
			L[i].pull_at[s] = L[i].ans_at[s] = -1;
	}
	for (int tick = 0; tick <= 60000; tick++) {
		double now = tick * 0.001;

		for (int i = 0; i < SIM_M; i++)
			sim_learner_tick(&rs, &L[i], i, now);
		for (syncer_round_poll(&rs, now, &a); a.kind != ROUND_NONE;
		     syncer_round_poll(&rs, now, &a)) {
			if (a.kind == ROUND_MERGE)
				syncer_round_done(&rs, a.slot, 0.001);
			else
				sim_pull(L, &a, now);
		}
	}
	for (int i = 0; i < SIM_M; i++)
		steps[i] = (double)L[i].step;
	/* the K-th (3rd) largest of four */
	for (int i = 0; i < SIM_M; i++)
		for (int j = i + 1; j < SIM_M; j++)
			if (steps[j] > steps[i]) {
				kth = steps[i];
				steps[i] = steps[j];
				steps[j] = kth;
			}
	kth = steps[2];
	*per_round = syncer_round_steps_per_round(&rs);
	a.round = rs.started;
	syncer_round_release(&rs);
	return (double)a.round * spr / kth;
}

static void pace_follows_h(void **state)
{
	static const double sprs[] = { 1, 4, 16, 64 };

	(void)state;
	for (size_t i = 0; i < sizeof(sprs) / sizeof(sprs[0]); i++) {
		double per_round, q = sim_pace(sprs[i], &per_round);

		print_message("H/P %g: rounds x H/P / K-th steps = %.3f, "
			      "measured steps per round %.2f\n", sprs[i], q,
			      per_round);
		assert_true(q > 0.9 && q < 1.1);
		assert_true(fabs(per_round / sprs[i] - 1) < 0.1);
	}
}

/* A restarted learner reports a few steps from 0 before it takes its
 * resume step: they neither move the mark nor count as trained. */
static void steps_before_the_resume_are_ignored(void **state)
{
	struct syncer_round rs;
	struct round_action a, pulls[8];

	(void)state;
	setup(&rs, 2, 0.0, 2, 1.0, 2);
	all_step(&rs, 2, 500, 1.0);
	near(syncer_round_kth_trained(&rs), 500);
	syncer_round_leave(&rs, 1);
	syncer_round_join(&rs, 1, 500, pulls);     /* resumes at 500 */
	syncer_round_progress(&rs, 1, 3, 1.0);     /* not yet resumed */
	near(rs.step[1], 500);
	syncer_round_progress(&rs, 1, 505, 1.0);
	near(rs.trained[1], 505);                  /* 500 + 5, not + 502 */
	syncer_round_poll(&rs, 1.0, &a);
	assert_int_equal(a.kind, ROUND_PULL);
	near(rs.mark, 500);                        /* at the K-th, 500, not 3 */
	syncer_round_release(&rs);
}

/* Two rounds behind the pace: the quorum merges without a grace window. */
static void behind_the_pace_no_grace(void **state)
{
	struct syncer_round rs;
	struct round_action a;

	(void)state;
	setup(&rs, 1, 0.5, 2, 1.0, 2);
	all_step(&rs, 2, 1, 1.0);
	syncer_round_poll(&rs, 1.0, &a);
	assert_int_equal(a.kind, ROUND_PULL);      /* mark at 1 */
	syncer_round_answer(&rs, 0, 1, 1, 1, 1.1);
	near(rs.last_grace, 0.5 * (2 * 1.0 - 0.1));   /* on pace: 0.95 */
	syncer_round_release(&rs);

	setup(&rs, 1, 0.5, 2, 1.0, 2);
	all_step(&rs, 2, 1, 1.0);
	syncer_round_poll(&rs, 1.0, &a);
	all_step(&rs, 2, 3, 1.0);                  /* K-th at 3 = mark + 2 */
	syncer_round_answer(&rs, 0, 1, 1, 1, 1.1);
	near(rs.last_grace, 0);
	syncer_round_poll(&rs, 1.1, &a);
	assert_int_equal(a.kind, ROUND_MERGE);
	syncer_round_release(&rs);
}

/* When the run loop must wake for the next pull. */
static void next_pull_is_when_the_pace_says(void **state)
{
	struct syncer_round rs;
	struct round_action a;

	(void)state;
	setup(&rs, 2, 0.0, 2, 2.0, 3);
	syncer_round_leave(&rs, 1);
	syncer_round_leave(&rs, 2);
	assert_true(syncer_round_next_pull(&rs, 5.0) > 1e100);   /* 1 of K */
	syncer_round_join(&rs, 1, 0, &a);
	near(syncer_round_next_pull(&rs, 5.0), 5.0);   /* the first: at once */
	all_step(&rs, 2, 10, 0.5);
	syncer_round_poll(&rs, 5.0, &a);
	assert_int_equal(a.kind, ROUND_PULL);          /* mark 10 */
	/* 2 steps more at 0.5 s a step, reported at 5.0 */
	near(syncer_round_next_pull(&rs, 5.2), 6.0);
	syncer_round_poll(&rs, 5.9, &a);
	assert_int_equal(a.kind, ROUND_NONE);
	syncer_round_poll(&rs, 6.0, &a);
	assert_int_equal(a.kind, ROUND_PULL);          /* estimated step 12 */
	assert_true(syncer_round_next_pull(&rs, 6.0) > 1e100);   /* τ in flight */
	syncer_round_release(&rs);
}

/*
 * A stale learner is pulled but not waited for: the two others make the
 * quorum and the round merges when they have answered, not at the end of
 * the grace window. Not stale again, it is waited for. With two of three
 * stale, fewer than K are left to pace on and no round starts.
 */
static void stale_learners_are_not_waited_for(void **state)
{
	struct syncer_round rs;
	struct round_action a;

	(void)state;
	setup(&rs, 2, 0.5, 2, 1.0, 3);
	all_step(&rs, 3, 1, 1.0);
	syncer_round_set_stale(&rs, 2, 1);
	syncer_round_poll(&rs, 1.0, &a);
	assert_int_equal(a.kind, ROUND_PULL);
	assert_int_equal(rs.slots[a.slot].pending, 2);
	assert_int_equal(syncer_round_answer(&rs, 0, 1, 1, 1, 1.2), ROUND_ACCEPTED);
	assert_int_equal(syncer_round_answer(&rs, 1, 1, 1, 1, 1.5), ROUND_ACCEPTED);
	near(syncer_round_next_deadline(&rs), 2.25);   /* as if 2 were waited */
	syncer_round_poll(&rs, 1.5, &a);
	assert_int_equal(a.kind, ROUND_MERGE);          /* at once */
	assert_int_equal(a.round, 1);
	syncer_round_done(&rs, a.slot, 0.1);

	/* round 2 starts with 2 stale; 2 is back before the answers: the
	 * round waits for it until it answers */
	all_step(&rs, 2, 2, 1.0);
	syncer_round_poll(&rs, 2.0, &a);
	assert_int_equal(a.kind, ROUND_PULL);
	assert_int_equal(a.round, 2);
	assert_int_equal(rs.slots[a.slot].pending, 2);
	syncer_round_set_stale(&rs, 2, 0);
	assert_int_equal(rs.slots[a.slot].pending, 3);
	assert_int_equal(syncer_round_answer(&rs, 0, 2, 2, 1, 2.1), ROUND_ACCEPTED);
	assert_int_equal(syncer_round_answer(&rs, 1, 2, 2, 1, 2.1), ROUND_ACCEPTED);
	syncer_round_poll(&rs, 2.1, &a);
	assert_int_equal(a.kind, ROUND_NONE);           /* waits for 2 */
	assert_int_equal(syncer_round_answer(&rs, 2, 2, 2, 1, 2.2), ROUND_ACCEPTED);
	syncer_round_poll(&rs, 2.2, &a);
	assert_int_equal(a.kind, ROUND_MERGE);
	syncer_round_done(&rs, a.slot, 0.1);

	/* two stale of three: one left, K = 2, no round */
	syncer_round_set_stale(&rs, 1, 1);
	syncer_round_set_stale(&rs, 2, 1);
	all_step(&rs, 3, 10, 1.0);
	assert_true(syncer_round_next_pull(&rs, 3.0) > 1e299);
	syncer_round_poll(&rs, 3.0, &a);
	assert_int_equal(a.kind, ROUND_NONE);
	/* a stale learner that leaves and joins again is not stale */
	syncer_round_leave(&rs, 1);
	assert_int_equal(rs.stale[1], 0);
	{
		struct round_action pulls[8];

		syncer_round_join(&rs, 1, 10, pulls);
	}
	all_step(&rs, 3, 12, 1.0);
	syncer_round_poll(&rs, 3.5, &a);
	assert_int_equal(a.kind, ROUND_PULL);
	assert_int_equal(rs.slots[a.slot].pending, 2);
	syncer_round_release(&rs);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(quorum_then_grace_then_late),
		cmocka_unit_test(everyone_answered_merges_at_once),
		cmocka_unit_test(grace_is_bounded),
		cmocka_unit_test(rounds_past_the_mark_are_held),
		cmocka_unit_test(at_most_tau_in_flight),
		cmocka_unit_test(half_a_step_per_round),
		cmocka_unit_test(quorum_waits_for_k_joined),
		cmocka_unit_test(stopped_starts_nothing),
		cmocka_unit_test(late_reports_count_no_step_twice),
		cmocka_unit_test(restarted_learners_do_not_stall),
		cmocka_unit_test(refused_answers_do_not_stall),
		cmocka_unit_test(resume_step_is_the_jobs),
		cmocka_unit_test(first_round_starts_at_once),
		cmocka_unit_test(a_shards_first_round_waits_its_phase),
		cmocka_unit_test(pace_follows_h),
		cmocka_unit_test(next_pull_is_when_the_pace_says),
		cmocka_unit_test(behind_the_pace_no_grace),
		cmocka_unit_test(steps_before_the_resume_are_ignored),
		cmocka_unit_test(stale_learners_are_not_waited_for),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
