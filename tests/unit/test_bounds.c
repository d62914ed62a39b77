/*
 * syncer/bounds.c on its own, with hand-picked times: the allowance and
 * its floor, the edges of the step time range, the resume step a join
 * gives, the base time an answer moves, an answer credited what the clock
 * allows, the job's pace that a claimant does not move and the cuts that
 * exclude it (a burst of them one strike), a cold start's step time
 * that does not hold a learner back, the token rules for the same and
 * for a new learner process, a refusal by time alone accepted later
 * with every token since the last accepted report, and a report that
 * waited in a queue measured from a reference old enough to absorb it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "syncer/bounds.h"

#define T 100   /* B·T */

static struct bounds b;

static int setup(void **state)
{
	struct bounds_config c = { .min_step_time = 1e-3, .max_step_time = 10,
				   .tokens_per_step = T };

	(void)state;
	assert_int_equal(bounds_init(&b, &c, 2, 3, 10.0), 0);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	bounds_release(&b);
	return 0;
}

static int hb(int m, uint64_t step, uint64_t tokens, double st,
	      uint64_t prev, int same, double now, struct err *e)
{
	struct wire_heartbeat h = { .step = step, .tokens = tokens,
				    .step_time = st };

	return bounds_heartbeat(&b, m, &h, prev, same, now, e);
}

static void allowance_and_step_time_range(void **state)
{
	struct err e;

	(void)state;
	/* no step time yet: the floor is minStepTime */
	assert_float_equal(bounds_allowed(&b, 0, 1.0), 4 * 2 / 1e-3, 1e-6);
	assert_float_equal(bounds_allowed(&b, 0, -5), 4 * 1 / 1e-3, 1e-6);
	bounds_join(&b, 0, 0, 10.0);
	/* the edges of [1 ms, 10 s] and 0 (not measured) are accepted */
	assert_int_equal(hb(0, 0, 0, 0, 0, 1, 10.0, &e), 0);
	assert_int_equal(hb(0, 0, 0, 10, 0, 1, 10.0, &e), 0);
	assert_int_equal(hb(0, 0, 0, 1e-3, 0, 1, 10.0, &e), 0);
	assert_int_equal(hb(0, 0, 0, 0.999e-3, 0, 1, 10.0, &e), -1);
	assert_string_equal(e.msg, "step time 0.000999 s is outside [0.001, 10] "
			    "(spec.syncer.minStepTime, maxStepTime)");
	assert_int_equal(hb(0, 0, 0, 10.001, 0, 1, 10.0, &e), -1);
	assert_int_equal(hb(0, 0, 0, NAN, 0, 1, 10.0, &e), -1);
	assert_string_equal(e.msg, "step time nan is not finite");
	assert_int_equal(hb(0, 0, 0, -1e-3, 0, 1, 10.0, &e), -1);
	assert_int_equal(b.heartbeats, 7);
	assert_int_equal(b.heartbeats_refused, 4);
	assert_int_equal(b.l[0].refused_heartbeats, 4);
	/* a refused report leaves the floor alone; an accepted one sets it */
	assert_float_equal(b.l[0].fastest, 1e-3, 0);
	assert_int_equal(hb(0, 0, 0, 0.02, 0, 1, 10.0, &e), 0);
	assert_float_equal(b.l[0].fastest, 1e-3, 0);   /* the lowest stays */
	assert_float_equal(bounds_allowed(&b, 1, 1.0), 8000, 1e-6);
	assert_int_equal(hb(1, 0, 0, 0.02, 0, 1, 10.0, &e), 0);
	assert_float_equal(bounds_allowed(&b, 1, 1.0), 400, 1e-9);
}

static void steps_follow_the_clock(void **state)
{
	struct wire_answer a = { .fragment = 1, .steps = 1, .tokens = T };
	struct bounds_credit c;
	struct err e;

	(void)state;
	/* joined at t = 10, told to resume at step 500 */
	bounds_join(&b, 0, 500, 10.0);
	assert_int_equal(hb(0, 500, 0, 0.01, 0, 1, 10.0, &e), 0);
	/* at 10 ms: 4 · (1 + 1) / 0.01 = 800 steps in 1 s; a step past it
	 * is credited as step 1300, a cut */
	a.step = 1301;
	assert_int_equal(bounds_answer(&b, 0, &a, 1, 11.0, &c, &e), BOUNDS_CUT);
	assert_string_equal(e.msg, "step 1301 is 801 past step 500 of 1 s "
			    "before: more than the 800 steps the job's pace "
			    "allows");
	assert_int_equal(c.step, 1300);
	assert_int_equal(c.steps, 1);
	assert_int_equal(c.tokens, T);
	assert_int_equal(b.l[0].step, 1300);
	assert_int_equal(b.l[0].cuts, 1);
	a.step = 1300;
	assert_int_equal(bounds_answer(&b, 0, &a, 1, 11.0, &c, &e), 0);
	/* a step below the highest is no claim */
	a.step = 7;
	assert_int_equal(bounds_answer(&b, 0, &a, 1, 11.0, &c, &e), 0);
	assert_int_equal(c.step, 7);
	/* steps since the base: from the first join (t = 10) until an
	 * answer moves it to its round's start; credited 800 of 801, and
	 * the tokens of 800 */
	a.step = 1300;
	a.steps = 801;
	a.tokens = 801 * T;
	assert_int_equal(bounds_answer(&b, 0, &a, 1, 11.0, &c, &e), BOUNDS_CUT);
	assert_int_equal(c.steps, 800);
	assert_int_equal(c.tokens, 800 * T);
	assert_int_equal(bounds_answer(&b, 0, &a, 0, 11.0, &c, &e), 0);   /* empty */
	assert_int_equal(c.steps, 801);
	bounds_answered(&b, 0, 1, 10.5);
	bounds_answered(&b, 0, 1, 10.25);   /* never back */
	assert_float_equal(b.from[1], 10.5, 0);
	a.steps = 601;   /* 4 · (0.5 + 1) / 0.01 = 600 */
	a.tokens = 550 * T;
	assert_int_equal(bounds_answer(&b, 0, &a, 1, 11.0, &c, &e), BOUNDS_CUT);
	assert_string_equal(e.msg, "601 steps since its base, 0.5 s ago at the "
			    "earliest: more than the 600 the job's pace allows");
	assert_int_equal(c.steps, 600);
	assert_int_equal(c.tokens, 550 * T);   /* within 600 steps' */
	a.steps = 440;
	a.tokens = 440 * T;
	assert_int_equal(bounds_answer(&b, 0, &a, 1, 11.0, &c, &e), 0);
	assert_int_equal(c.steps, 440);
	/* the other fragments still count from the join */
	assert_float_equal(b.from[0], 10.0, 0);
	assert_float_equal(b.from[3], -1, 0);   /* learner 1: not joined */
	/* more tokens than B·T a step is refused, not cut */
	a.tokens = 440 * T + 1;
	assert_int_equal(bounds_answer(&b, 0, &a, 0, 11.0, &c, &e), -1);
	assert_string_equal(e.msg, "44001 tokens in 440 steps: more than B·T = "
			    "100 a step");
	assert_int_equal(b.answers_refused, 1);
	assert_int_equal(b.l[0].refused_answers, 1);
	assert_int_equal(b.l[0].cuts, 3);
	assert_int_equal(b.cuts, 3);
	assert_int_equal(bounds_excluded(&b, 0), 0);   /* maxClaimCuts 0 */
}

/*
 * The job's pace, not the claimant's: three learners, K = 2. A learner
 * reporting the least step time there is is held to the K-th of the
 * others' / BOUNDS_PACE_SPREAD; its claims past it are cut, and three
 * cuts (maxClaimCuts) exclude it: every report refused after.
 */
static void the_pace_is_the_jobs_not_the_claimants(void **state)
{
	struct bounds_config cfg = { .min_step_time = 1e-3, .max_step_time = 10,
				     .tokens_per_step = T, .quorum = 2,
				     .max_cuts = 3 };
	struct wire_answer a = { .fragment = 0, .step = 10, .steps = 1000000,
				 .tokens = 1000000 * (uint64_t)T };
	struct bounds_credit c;
	struct err e;

	(void)state;
	bounds_release(&b);
	assert_int_equal(bounds_init(&b, &cfg, 3, 2, 10.0), 0);
	for (int m = 0; m < 3; m++)
		bounds_join(&b, m, 0, 10.0);
	assert_float_equal(bounds_pace(&b, 0), 0, 0);   /* nothing reported */
	assert_float_equal(bounds_floor(&b, 0), 1e-3, 0);
	assert_int_equal(hb(0, 0, 0, 1e-3, 0, 1, 10.0, &e), 0);
	assert_int_equal(hb(1, 0, 0, 0.08, 0, 1, 10.0, &e), 0);
	/* one other has reported: the K-th is at most the last of them */
	assert_float_equal(bounds_pace(&b, 0), 0.08, 0);
	assert_float_equal(bounds_pace(&b, 1), 1e-3, 0);
	assert_int_equal(hb(2, 0, 0, 0.16, 0, 1, 10.0, &e), 0);
	/* learner 0's 1 ms moves neither its own pace nor its floor */
	assert_float_equal(bounds_pace(&b, 0), 0.16, 0);
	assert_float_equal(bounds_floor(&b, 0), 0.02, 1e-15);
	assert_float_equal(bounds_pace(&b, 1), 0.16, 0);
	assert_float_equal(bounds_floor(&b, 1), 0.08, 0);   /* its own */
	assert_float_equal(bounds_pace(&b, 2), 0.08, 0);
	assert_float_equal(bounds_floor(&b, 2), 0.16, 0);
	/* 10⁶ steps in 1 s: credited 4 · 2 / 0.02 = 400, their tokens */
	assert_int_equal(bounds_answer(&b, 0, &a, 1, 11.0, &c, &e), BOUNDS_CUT);
	assert_int_equal(c.steps, 400);
	assert_int_equal(c.tokens, 400 * T);
	assert_int_equal(c.step, 10);
	/* heartbeats past the clock: refused, cuts; one in the same half
	 * second is no strike, the third strike excludes */
	assert_int_equal(hb(0, 1000000, 0, 1e-3, 0, 1, 11.2, &e), -1);
	assert_int_equal(b.l[0].strikes, 1);
	assert_int_equal(hb(0, 1000000, 0, 1e-3, 0, 1, 11.5, &e), -1);
	assert_string_equal(e.msg, "step 1000000 is 1000000 past step 0 of 1.5 s "
			    "before: more than the 500 steps the job's pace "
			    "allows");
	assert_int_equal(b.l[0].strikes, 2);
	assert_int_equal(bounds_excluded(&b, 0), 0);
	assert_int_equal(hb(0, 601, 0, 1e-3, 0, 1, 12.0, &e), -1);
	assert_int_equal(bounds_excluded(&b, 0), 1);
	assert_int_equal(b.l[0].cuts, 4);
	assert_int_equal(b.l[0].strikes, 3);
	assert_int_equal(b.excluded, 1);
	/* an honest report of it now: refused all the same */
	assert_int_equal(hb(0, 1, T, 0.02, 0, 1, 12.5, &e), -1);
	assert_string_equal(e.msg, "excluded: 4 of its claims were cut, 3 times "
			    "0.5 s apart (spec.syncer.maxClaimCuts 3)");
	a.steps = 1;
	a.tokens = T;
	assert_int_equal(bounds_answer(&b, 0, &a, 1, 12.5, &c, &e), -1);
	assert_int_equal(b.l[0].refused_heartbeats, 4);
	assert_int_equal(b.l[0].refused_answers, 1);
	/* the others are untouched */
	assert_int_equal(hb(1, 25, 25 * T, 0.08, 0, 1, 12.5, &e), 0);
	assert_int_equal(b.l[1].cuts, 0);
}

/*
 * A burst of cuts is one strike: learner 1's first report says 0.5 s a
 * step (a cold start), which holds learner 0, at 1 ms a step, to
 * 0.5 / 8 until learner 1 reports again. Learner 0 answers every round,
 * and 100 answers in 0.4 s are cut: one strike of maxClaimCuts 3. Learner 1's next report lowers the pace; learner 0's
 * next answers are credited in full.
 */
static void a_burst_of_cuts_is_one_strike(void **state)
{
	struct bounds_config cfg = { .min_step_time = 1e-4, .max_step_time = 10,
				     .tokens_per_step = T, .quorum = 1,
				     .max_cuts = 3 };
	struct wire_answer a = { .fragment = 0, .steps = 300,
				 .tokens = 300 * (uint64_t)T };
	struct bounds_credit c;
	struct err e;

	(void)state;
	bounds_release(&b);
	assert_int_equal(bounds_init(&b, &cfg, 2, 1, 10.0), 0);
	bounds_join(&b, 0, 0, 10.0);
	assert_int_equal(hb(0, 0, 0, 1e-3, 0, 1, 10.0, &e), 0);
	assert_int_equal(hb(0, 1000, 1000 * T, 1e-3, 0, 1, 11.0, &e), 0);
	assert_int_equal(hb(0, 2000, 2000 * T, 1e-3, 1000 * T, 1, 12.0, &e), 0);
	bounds_join(&b, 1, 0, 12.0);
	assert_int_equal(hb(1, 0, 0, 0.5, 0, 1, 12.0, &e), 0);
	assert_float_equal(bounds_floor(&b, 0), 0.5 / 8, 1e-15);
	/* 100 answers in 0.4 s, each of the 300 steps since its base
	 * 0.3 s before: credited 4 · 1.3 / 0.0625 = 83, its step the
	 * highest accepted (the step rule: 64 · (dt + 1) from t = 10) */
	for (int i = 0; i < 100; i++) {
		double t = 12.0 + i * 0.004;

		a.step = 2000 + 4 * (uint64_t)i;
		bounds_answered(&b, 0, 0, t - 0.3);
		assert_int_equal(bounds_answer(&b, 0, &a, 1, t, &c, &e),
				 BOUNDS_CUT);
		assert_int_equal(c.steps, 83);
		assert_int_equal(c.step, 2000);
	}
	assert_int_equal(b.l[0].cuts, 100);
	assert_int_equal(b.l[0].strikes, 1);
	assert_int_equal(bounds_excluded(&b, 0), 0);
	/* learner 1 warmed up: 2 ms a step; learner 0's floor 1 ms again */
	assert_int_equal(hb(1, 400, 400 * T, 2e-3, 0, 1, 13.0, &e), 0);
	assert_float_equal(bounds_floor(&b, 0), 1e-3, 0);
	a.step = 3000;
	bounds_answered(&b, 0, 0, 12.7);
	assert_int_equal(bounds_answer(&b, 0, &a, 1, 13.0, &c, &e), 0);
	assert_int_equal(c.steps, 300);
	assert_int_equal(c.step, 3000);
	assert_int_equal(b.l[0].strikes, 1);
}

/*
 * A learner whose first report carried a cold start's step time (50 ms;
 * it trains at 1 ms) is not held to it: its next report, 1000 steps in
 * a second, says 1 ms a step, which is its floor before the report is
 * measured (4 · 2 / 0.001 = 8000 allowed, not 4 · 2 / 0.05 = 160).
 */
static void a_slow_first_step_time_corrects_itself(void **state)
{
	struct err e;

	(void)state;
	bounds_join(&b, 0, 0, 10.0);
	assert_int_equal(hb(0, 1, T, 0.05, 0, 1, 10.0, &e), 0);
	assert_float_equal(bounds_floor(&b, 0), 0.05, 0);
	assert_int_equal(hb(0, 1000, 1000 * T, 1e-3, T, 1, 11.0, &e), 0);
	assert_float_equal(bounds_floor(&b, 0), 1e-3, 0);
	assert_int_equal(b.l[0].tokens, 1000 * T);
	assert_int_equal(b.l[0].cuts, 0);
}

static void tokens_follow_steps_and_time(void **state)
{
	struct err e;

	(void)state;
	/* a learner resumed at step 1000: its process's tokens start at 0 */
	bounds_join(&b, 0, 1000, 10.0);
	assert_int_equal(hb(0, 1100, 100 * T, 0.01, 0, 1, 11.0, &e), 0);
	/* more than B·T a step at all */
	assert_int_equal(hb(0, 1100, 1102 * T, 0.01, 0, 1, 11.0, &e), -1);
	assert_string_equal(e.msg, "110200 tokens at step 1100: more than "
			    "B·T = 100 a step");
	/* 50 steps, 60 steps' tokens, from the same process */
	assert_int_equal(hb(0, 1150, 160 * T, 0.01, 100 * T, 1, 11.5, &e), -1);
	assert_string_equal(e.msg, "6000 more tokens in 50 steps: more than "
			    "B·T = 100 a step");
	/* the tokens since the reference (t = 10, none): 100 counted and
	 * 902 more, against 4 · (1.5 + 1) / 0.01 + 1 = 1001 steps' worth */
	assert_int_equal(hb(0, 1650, 1002 * T, 0.01, 100 * T, 0, 11.5, &e), -1);
	assert_string_equal(e.msg, "100200 more tokens in 1.5 s: more than the "
			    "100100 the job's pace allows");
	assert_int_equal(hb(0, 1650, 1001 * T, 0.01, 100 * T, 0, 11.5, &e), 0);
	assert_int_equal(b.l[0].tokens, 1001 * T);
	/* a new process's total is counted whole: 50 more, 1041 allowed */
	assert_int_equal(hb(0, 1700, 50 * T, 0.01, 1001 * T, 0, 11.6, &e), -1);
	assert_string_equal(e.msg, "105100 more tokens in 1.6 s: more than the "
			    "104100 the job's pace allows");
	assert_int_equal(hb(0, 1700, 50 * T, 0.01, 1001 * T, 0, 11.7, &e), 0);
	/* refused by time alone (step 2400 is 1400 past the reference, 1120
	 * allowed at 1.8 s), accepted later with all its tokens since */
	assert_int_equal(hb(0, 2400, 750 * T, 0.01, 50 * T, 1, 11.8, &e), -1);
	assert_string_equal(e.msg, "step 2400 is 1400 past step 1000 of 1.8 s "
			    "before: more than the 1120 steps the job's pace "
			    "allows");
	assert_int_equal(hb(0, 2400, 750 * T, 0.01, 50 * T, 1, 12.5, &e), -1);
	assert_int_equal(hb(0, 2400, 750 * T, 0.01, 50 * T, 1, 13.5, &e), 0);
	assert_int_equal(b.l[0].tokens, 1751 * T);
	assert_int_equal(b.l[0].tok_step, 2400);
	assert_int_equal(b.l[0].refused_heartbeats, 6);
	/* tokens restored from a checkpoint written at t = 20 */
	bounds_restored(&b, 20.0);
	assert_float_equal(b.l[1].tok_ref[0].t, 20.0, 0);
	assert_float_equal(b.l[0].tok_ref[1].t, 20.0, 0);
	assert_int_equal(b.l[0].tok_ref[0].v, 1751 * T);
}

/*
 * A learner at 100 steps a second from t = 10 whose report sent at t = 12
 * waited in a queue until t = 30: the next report, sent on time at t = 31,
 * is 1900 steps past it, in 1 s. Measured from the reference at least
 * BOUNDS_WINDOW_S old it is the truth; a tenfold claim is still refused.
 */
static void a_report_that_waited_is_no_lie(void **state)
{
	struct err e;

	(void)state;
	bounds_join(&b, 0, 0, 10.0);
	assert_int_equal(hb(0, 100, 100 * T, 0.01, 0, 1, 11.0, &e), 0);
	assert_int_equal(hb(0, 200, 200 * T, 0.01, 100 * T, 1, 30.0, &e), 0);
	/* the newer reference moved to t = 30; the older is the join */
	assert_float_equal(b.l[0].step_ref[0].t, 10.0, 0);
	assert_float_equal(b.l[0].step_ref[1].t, 30.0, 0);
	assert_int_equal(b.l[0].step_ref[1].v, 200);
	assert_float_equal(b.l[0].tok_ref[1].t, 30.0, 0);
	assert_int_equal(b.l[0].tok_ref[1].v, 200 * T);
	assert_int_equal(hb(0, 2100, 2100 * T, 0.01, 200 * T, 1, 31.0, &e), 0);
	/* ten times the truth at t = 32: 4 · (22 + 1) / 0.01 = 9200 */
	assert_int_equal(hb(0, 22000, 22000 * T, 0.01, 2100 * T, 1, 32.0, &e), -1);
	assert_string_equal(e.msg, "step 22000 is 22000 past step 0 of 22 s "
			    "before: more than the 9200 steps the job's pace "
			    "allows");
	/* the references move on 10 s after the newer one was taken */
	assert_int_equal(hb(0, 3100, 3100 * T, 0.01, 2100 * T, 1, 41.0, &e), 0);
	assert_float_equal(b.l[0].step_ref[0].t, 30.0, 0);
	assert_int_equal(b.l[0].step_ref[0].v, 200);
	assert_float_equal(b.l[0].step_ref[1].t, 41.0, 0);
	assert_int_equal(b.l[0].step_ref[1].v, 3100);
	assert_int_equal(b.l[0].tok_ref[0].v, 200 * T);
	assert_int_equal(b.l[0].refused_heartbeats, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(allowance_and_step_time_range, setup, teardown),
		cmocka_unit_test_setup_teardown(steps_follow_the_clock, setup, teardown),
		cmocka_unit_test_setup_teardown(the_pace_is_the_jobs_not_the_claimants, setup, teardown),
		cmocka_unit_test_setup_teardown(a_burst_of_cuts_is_one_strike, setup, teardown),
		cmocka_unit_test_setup_teardown(a_slow_first_step_time_corrects_itself, setup, teardown),
		cmocka_unit_test_setup_teardown(tokens_follow_steps_and_time, setup, teardown),
		cmocka_unit_test_setup_teardown(a_report_that_waited_is_no_lie, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
