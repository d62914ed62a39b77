/*
 * The answer screens (syncer/screen.h): the size screen against ‖Θ_p‖
 * and the RMS floor, the history screen once SCREEN_HISTORY_MIN merged
 * norms are held, per step, and the ring that keeps the last
 * SCREEN_HISTORY of them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "common/buf.h"
#include "syncer/screen.h"
#include "tests/unit/testlib.h"

/* Two fragments of 4 values; fragment 0 of Θ is all 1 (‖Θ_0‖ = 2),
 * fragment 1 all 0. */
static void start(struct screen *sc)
{
	static const size_t numel[2] = { 4, 4 };
	static const float ones[4] = { 1, 1, 1, 1 }, zeros[4] = { 0 };

	assert_int_equal(screen_init(sc, 2, numel, 8), 0);
	screen_theta(sc, 0, ones);
	screen_theta(sc, 1, zeros);
	assert_near(sc->theta_norm[0], 2.0, 1e-12);
}

static void the_size_screen_holds_an_answer_to_its_fragment(void **state)
{
	struct screen sc;

	(void)state;
	start(&sc);
	/* 100 × ‖Θ_0‖ = 200 per step: 199 passes, 201 does not; per step,
	 * so 10 steps may carry 1990 */
	assert_int_equal(screen_answer(&sc, 0, 0, 1, 199, 1, 3), SCREEN_PASS);
	assert_int_equal(screen_answer(&sc, 0, 0, 1, 1990, 10, 3), SCREEN_PASS);
	assert_int_equal(screen_answer(&sc, 0, 0, 1, 201, 1, 3), SCREEN_SIZE);
	/* a fragment of zeros is held to the RMS of Θ times √n: √(4/8)·2 */
	assert_int_equal(screen_answer(&sc, 1, 1, 1, 141, 1, 3), SCREEN_PASS);
	assert_int_equal(screen_answer(&sc, 1, 1, 1, 142, 1, 3), SCREEN_SIZE);
	assert_int_equal(sc.size_refused, 2);
	assert_int_equal(sc.history_refused, 0);
	screen_release(&sc);
}

static void the_history_screen_needs_enough_merged_norms(void **state)
{
	struct screen sc;

	(void)state;
	start(&sc);
	for (int i = 0; i < SCREEN_HISTORY_MIN - 1; i++)
		screen_merged(&sc, 0, 1.0);
	assert_near(screen_median(&sc, 0), -1, 1e-12);
	/* too few: 10 times the others passes */
	assert_int_equal(screen_answer(&sc, 0, 0, 2, 10, 1, 3), SCREEN_PASS);
	screen_merged(&sc, 0, 3.0);   /* 1 1 1 3: median 1 */
	assert_near(screen_median(&sc, 0), 1.0, 1e-12);
	assert_int_equal(screen_answer(&sc, 0, 0, 2, 3, 1, 3), SCREEN_PASS);
	assert_int_equal(screen_answer(&sc, 0, 0, 2, 3.01, 1, 3),
			 SCREEN_HISTORY_OUTLIER);
	/* per step: 6 over 2 steps is 3 */
	assert_int_equal(screen_answer(&sc, 0, 0, 2, 6, 2, 3), SCREEN_PASS);
	/* the other fragment has a history of its own: none */
	assert_int_equal(screen_answer(&sc, 1, 1, 2, 100, 1, 3), SCREEN_PASS);
	assert_int_equal(sc.history_refused, 1);
	screen_release(&sc);
}

static void the_ring_keeps_the_last_merged_norms(void **state)
{
	struct screen sc;
	struct buf b;

	(void)state;
	start(&sc);
	for (int i = 0; i < SCREEN_HISTORY; i++)
		screen_merged(&sc, 0, 100.0);
	for (int i = 0; i < SCREEN_HISTORY; i++)
		screen_merged(&sc, 0, 1.0);   /* every 100 is gone */
	assert_int_equal(sc.hist_n[0], SCREEN_HISTORY);
	assert_near(screen_median(&sc, 0), 1.0, 1e-12);
	assert_int_equal(screen_answer(&sc, 0, 0, 3, 50, 1, 3),
			 SCREEN_HISTORY_OUTLIER);
	buf_init(&b, 1 << 16);
	screen_metrics(&sc, &b);
	assert_non_null(strstr(b.data, "\nddiloco_syncer_answers_norm_history_refused_total 1\n"));
	assert_non_null(strstr(b.data, "\nddiloco_syncer_answers_size_refused_total 0\n"));
	buf_release(&b);
	screen_release(&sc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(the_size_screen_holds_an_answer_to_its_fragment),
		cmocka_unit_test(the_history_screen_needs_enough_merged_norms),
		cmocka_unit_test(the_ring_keeps_the_last_merged_norms),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
