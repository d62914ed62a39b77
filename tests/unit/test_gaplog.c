/*
 * The syncer's gap log (syncer/gaplog.h): which gaps between rounds are
 * recorded as down, what they say about the learners, the ring of the
 * newest ones, and the longest gap while a learner was away.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "syncer/gaplog.h"

#define near(a, b) assert_float_equal((double)(a), (double)(b), 1e-9)

static void short_gaps_are_not_recorded(void **state)
{
	struct gap_log g;

	(void)state;
	memset(&g, 0, sizeof(g));
	gaplog_open(&g, 10.0, 4);
	assert_int_equal(gaplog_close(&g, 10.5, 1.0, 1, 10.1, 10.3, 4, 4), 0);
	assert_int_equal(gaplog_close(&g, 11.5, 1.0, 2, 10.6, 11.2, 4, 4), 0);
	assert_int_equal(g.n, 0);
	near(g.down, 0);
	near(g.longest_absent, 0);   /* every learner joined throughout */
	near(g.cur.at, 11.5);        /* the next gap opened at the last round */
}

static void a_down_gap_says_what_the_learners_did(void **state)
{
	struct gap_log g;
	const struct gap *c;

	(void)state;
	memset(&g, 0, sizeof(g));
	gaplog_open(&g, 20.0, 4);
	gaplog_learner(&g, -1, 3);
	gaplog_learner(&g, -1, 2);
	gaplog_learner(&g, +1, 3);
	assert_int_equal(gaplog_close(&g, 23.5, 1.0, 7, 22.0, 23.0, 3, 4), 1);
	assert_int_equal(g.n, 1);
	near(g.down, 2.5);
	c = gaplog_get(&g, 0);
	assert_non_null(c);
	near(c->at, 20.0);
	near(c->length, 3.5);
	near(c->down, 2.5);
	assert_int_equal(c->round, 7);
	near(c->pulled, 2.0);
	near(c->quorum, 3.0);
	assert_int_equal(c->joined_start, 4);
	assert_int_equal(c->joined_min, 2);
	assert_int_equal(c->left, 2);
	assert_int_equal(c->joins, 1);
	near(g.longest_absent, 3.5);
	assert_int_equal(g.longest_absent_round, 7);
	assert_null(gaplog_get(&g, 1));
	/* the next gap starts with the learners joined at the close */
	assert_int_equal(g.cur.joined_start, 3);
	assert_int_equal(g.cur.left, 0);
}

static void a_short_gap_with_a_learner_away_is_the_longest_absent(void **state)
{
	struct gap_log g;

	(void)state;
	memset(&g, 0, sizeof(g));
	gaplog_open(&g, 0.0, 3);   /* one of 4 not joined */
	assert_int_equal(gaplog_close(&g, 0.4, 1.0, 1, 0.1, -1, 3, 4), 0);
	assert_int_equal(gaplog_close(&g, 0.6, 1.0, 2, 0.1, -1, 4, 4), 0);
	near(g.longest_absent, 0.4);
	assert_int_equal(g.longest_absent_round, 1);
	/* all 4 joined: a longer gap is not an absent one */
	assert_int_equal(gaplog_close(&g, 1.5, 1.0, 3, 0.7, 1.2, 4, 4), 0);
	near(g.longest_absent, 0.4);
}

static void the_job_start_is_not_an_absence(void **state)
{
	struct gap_log g;

	(void)state;
	memset(&g, 0, sizeof(g));
	gaplog_start(&g, 0.0, 3);   /* K = 3 of 4 joined, the 4th starting */
	assert_int_equal(gaplog_close(&g, 1.2, 1.0, 1, 0.1, 1.1, 4, 4), 1);
	near(g.longest_absent, 0.0);
	/* after round 1, a gap with one not joined is an absence */
	gaplog_learner(&g, -1, 3);
	assert_int_equal(gaplog_close(&g, 1.5, 1.0, 2, 1.3, 1.4, 3, 4), 0);
	near(g.longest_absent, 0.3);
	assert_int_equal(g.longest_absent_round, 2);
	/* a first gap in which a learner left does count */
	memset(&g, 0, sizeof(g));
	gaplog_start(&g, 0.0, 4);
	gaplog_learner(&g, -1, 3);
	assert_int_equal(gaplog_close(&g, 0.8, 1.0, 1, 0.1, 0.7, 3, 4), 0);
	near(g.longest_absent, 0.8);
}

static void the_ring_keeps_the_newest(void **state)
{
	struct gap_log g;

	(void)state;
	memset(&g, 0, sizeof(g));
	gaplog_open(&g, 0.0, 4);
	for (int i = 1; i <= GAPLOG_KEEP + 3; i++)
		assert_int_equal(gaplog_close(&g, 2.0 * i, 1.0, (uint64_t)i,
					      2.0 * i - 1, -1, 4, 4), 1);
	assert_int_equal(g.n, GAPLOG_KEEP + 3);
	near(g.down, GAPLOG_KEEP + 3);
	assert_int_equal(gaplog_get(&g, 0)->round, GAPLOG_KEEP + 3);
	assert_int_equal(gaplog_get(&g, GAPLOG_KEEP - 1)->round, 4);
	assert_null(gaplog_get(&g, GAPLOG_KEEP));
	assert_true(gaplog_get(&g, 0)->quorum < -1e9);
}

static void nothing_before_the_window_opens(void **state)
{
	struct gap_log g;

	(void)state;
	memset(&g, 0, sizeof(g));
	gaplog_learner(&g, -1, 0);
	assert_int_equal(g.cur.left, 0);
	/* closing without an open gap records nothing, then opens one */
	assert_int_equal(gaplog_close(&g, 5.0, 1.0, 1, 0, -1, 4, 4), 0);
	assert_int_equal(g.n, 0);
	assert_int_equal(g.open, 1);
	near(g.cur.at, 5.0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(short_gaps_are_not_recorded),
		cmocka_unit_test(a_down_gap_says_what_the_learners_did),
		cmocka_unit_test(a_short_gap_with_a_learner_away_is_the_longest_absent),
		cmocka_unit_test(the_job_start_is_not_an_absence),
		cmocka_unit_test(the_ring_keeps_the_newest),
		cmocka_unit_test(nothing_before_the_window_opens),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
