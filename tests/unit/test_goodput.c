/*
 * Where the learners' time goes (syncer/goodput.h), on its own state:
 * one learner, two fragments of half the parameters each, a step every
 * 0.1 s; answers merged, late, merged again over an unmerged one, merged
 * twice, and a restart. Each figure is checked against the steps it must
 * hold.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "syncer/goodput.h"

#define near(a, b) assert_float_equal((double)(a), (double)(b), 1e-9)

/* One learner joined at 0 with incarnation inc, ten steps of 0.1 s
 * reported by heartbeats of incarnation beat. */
static const struct gp_learner *ten_steps(struct goodput *s, uint64_t inc,
					  uint64_t beat)
{
	static const double share[2] = { 0.5, 0.5 };

	assert_int_equal(goodput_init(s, 1, 2, share, 0.0, 0.0), 0);
	goodput_join(s, 0, inc, 0, 0.0);
	for (int k = 1; k <= 10; k++)
		goodput_progress(s, 0, beat, (uint64_t)k, 0, 0.1 * k);
	return &s->l[0];
}

/* ten_steps, then p0 answered up to step 8 and p1 up to step 6: steps
 * 9-10 of p0 and 7-10 of p1 are in no answer, UNANSWERED steps' worth */
#define UNANSWERED ((2 + 4) * 0.5)
static const struct gp_learner *eight_and_six(struct goodput *s, uint64_t inc,
					      uint64_t beat)
{
	const struct gp_learner *l = ten_steps(s, inc, beat);

	goodput_answer(s, 0, 0, 8, 8, GP_MERGED);
	goodput_answer(s, 0, 1, 6, 6, GP_MERGED);
	return l;
}

static void shares_add_up(void **state)
{
	struct goodput s;
	struct gp_shares g;
	const struct gp_learner *l = ten_steps(&s, 1, 1);

	(void)state;
	near(l->trained, 10);
	near(l->active, 1.0);                   /* 0.1 s a step */

	goodput_answer(&s, 0, 0, 4, 4, GP_MERGED);    /* (0, 4] of p0 */
	near(l->merged, 2);                     /* 4 steps × share 1/2 */
	goodput_answer(&s, 0, 1, 5, 5, GP_LATE);      /* (0, 5] of p1: late */
	near(l->late, 2.5);
	/* the update of p0 came at step 6: steps 5 and 6 were wiped */
	goodput_answer(&s, 0, 0, 8, 2, GP_MERGED);
	near(l->overwritten, 1);
	near(l->merged, 3);
	/* p1 never got an update: (0, 9] merged, the late 5 steps with it */
	goodput_answer(&s, 0, 1, 9, 9, GP_MERGED);
	near(l->late, 0);
	near(l->merged, 7.5);
	near(l->merged_again, 0);
	/* a second pull of p0 before its update: (6, 10] again, 2 new */
	goodput_answer(&s, 0, 0, 10, 4, GP_MERGED);
	near(l->merged, 8.5);
	near(l->merged_again, 1);               /* steps 7, 8 of p0 */
	/* a new process: step 10 of p1 was in no answer */
	goodput_join(&s, 0, 2, 10, 1.0);
	near(l->restarts, 0.5);
	/* the same process again (its sidecar reconnected): nothing lost */
	goodput_join(&s, 0, 2, 10, 1.0);
	near(l->restarts, 0.5);

	goodput_shares(&s, 2.0, 0, &g);           /* capacity 1 × 2 s */
	near(g.capacity, 2.0);
	near(g.merged, 8.5 * 0.1 / 2);
	near(g.late, 0);
	near(g.overwritten, 0.1 / 2);
	near(g.restarts, 0.05 / 2);
	near(g.merged_again, 0.1 / 2);
	near(g.in_flight, 0);
	near(g.not_training, 0.5);
	near(g.merged + g.late + g.refused + g.overwritten + g.restarts +
	     g.in_flight + g.not_training, 1.0);
	near(goodput_merged_seconds(&s, 0), 0.85);
	near(goodput_ratio(&s, 2.0, 0), 0.85 / 2.0);
	{
		/* the learner's own shares, of its 10 steps ("fates") */
		json_t *f = goodput_learner_json(&s, 0);

		near(json_number_value(json_object_get(f, "trained_steps")), 10);
		near(json_number_value(json_object_get(f, "merged")), 0.85);
		near(json_number_value(json_object_get(f, "late")), 0);
		near(json_number_value(json_object_get(f, "overwritten")), 0.1);
		near(json_number_value(json_object_get(f, "restarts")), 0.05);
		json_decref(f);
	}
	/* the job is done: nothing more is counted */
	goodput_stop(&s);
	goodput_progress(&s, 0, 1, 20, 0, 3.0);
	goodput_answer(&s, 0, 0, 20, 10, GP_MERGED);
	near(l->trained, 10);
	near(goodput_merged_seconds(&s, 0), 0.85);
	goodput_release(&s);
}

/*
 * A learner and its sidecar killed together and started again (chaos, a
 * pod deleted): each new sidecar joins with incarnation 0, before its
 * learner attaches. Its steps not answered are lost to the restart, and
 * the resume step's jump is no training. Counted as the same process
 * before, the lost steps were booked overwritten at the next answer and
 * the jump as trained steps.
 */
static void a_new_sidecar_is_a_restart(void **state)
{
	struct goodput s;
	const struct gp_learner *l = eight_and_six(&s, 0, 0);

	(void)state;
	/* killed at step 10, back 3 s later resuming at the job's step 40 */
	goodput_join(&s, 0, 0, 40, 4.0);
	near(l->restarts, UNANSWERED);
	for (int k = 41; k <= 44; k++)
		goodput_progress(&s, 0, 0, (uint64_t)k, 0, 4.0 + 0.1 * (k - 40));
	near(l->trained, 14);                   /* not 44 */
	goodput_answer(&s, 0, 0, 44, 4, GP_MERGED);   /* (40, 44] */
	near(l->overwritten, 0);
	near(l->merged, (8 + 6 + 4) * 0.5);
	goodput_release(&s);
}

/*
 * A sidecar joins with incarnation 0 and its learner attaches after:
 * the heartbeats' incarnation is the learner's. When the sidecar
 * reconnects (a cut link) its Hello carries that incarnation: the same
 * process, nothing lost. A new learner process behind the same sidecar,
 * seen first in a heartbeat, is a restart: what the old one had not
 * answered is lost, once, also when its Hello follows.
 */
static void a_reconnect_is_no_restart(void **state)
{
	struct goodput s;
	const struct gp_learner *l = eight_and_six(&s, 0, 7);

	(void)state;
	goodput_join(&s, 0, 7, 10, 2.0);              /* the link came back */
	near(l->restarts, 0);
	near(l->trained, 10);
	/* learner 7 killed at step 10; learner 9 resumes at 10 behind the
	 * same sidecar */
	goodput_progress(&s, 0, 9, 10, 0, 3.0);
	near(l->restarts, UNANSWERED);
	goodput_join(&s, 0, 9, 10, 3.1);        /* its sidecar's Hello */
	near(l->restarts, UNANSWERED);
	goodput_progress(&s, 0, 9, 11, 0, 3.2);
	near(l->trained, 11);
	goodput_release(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(shares_add_up),
		cmocka_unit_test(a_reconnect_is_no_restart),
		cmocka_unit_test(a_new_sidecar_is_a_restart),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
