/*
 * reconcile and the evaluator of an external model: its pod made when
 * the job asks for one, recreated when it goes without counting as a
 * learner's failure, deleted at the end and on a suspend, rolled when
 * the job asks for another pod spec (rcfix.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/unit/rcfix.h"

/* A job with spec.evaluator (an external model's), and its pod Running. */
static void with_evaluator(struct fx *f)
{
	f->js.model.kind = MODEL_EXTERNAL;
	f->js.evaluator.command.n = 1;
	snprintf(f->js.evaluator.command.buf, sizeof(f->js.evaluator.command.buf),
		 "python3");
	f->in.want_evaluator = 1;
	f->in.evaluator_mem = &f->ev_mem;
	f->ev.index = 0;
	snprintf(f->ev.uid, sizeof(f->ev.uid), "ev-uid-1");
	f->ev.state = POD_RUNNING;
	f->ev.ready = 1;
	f->ev.ready_since = NOW - 100;
	f->ev.exit_code = -1;
}

static int failures_total(const struct fx *f)
{
	int n = 0;

	for (int i = 0; i < f->js.learners.replicas; i++)
		n += f->mem[i].failures;
	return n;
}

/* Made with the learners when asked, and only then; once seen, left alone. */
static void test_evaluator_created_when_asked(void **state)
{
	struct fx f;
	const struct rc_action *a;

	(void)state;
	/* no spec.evaluator: no evaluator pod */
	setup_fx(&f, 2);
	f.in.evaluator_mem = &f.ev_mem;
	assert_int_equal(reconcile(&f.in, f.mem, &f.out), 0);
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 2);
	assert_int_equal(count(&f.out, ACT_APPLY_EVALUATOR), 0);
	assert_int_equal(count(&f.out, ACT_DELETE_EVALUATOR), 0);
	rc_output_release(&f.out);

	/* a new job with one: made in the first pass, as a first creation */
	setup_fx(&f, 2);
	with_evaluator(&f);
	assert_int_equal(reconcile(&f.in, f.mem, &f.out), 0);
	assert_int_equal(count(&f.out, ACT_APPLY_EVALUATOR), 1);
	a = find(&f.out, ACT_APPLY_EVALUATOR);
	assert_int_equal(a->index, 0);
	assert_int_equal(a->recreate, 0);
	/* after the Secret it mounts */
	assert_true(find(&f.out, ACT_CREATE_TLS) < a);
	assert_true(f.ev_mem.create_sent == NOW);
	assert_int_equal(f.ev_mem.restarts, 0);
	assert_null(find_event(&f.out, "EvaluatorRecreated"));
	rc_output_release(&f.out);
	/* the cache has not caught up: not made twice */
	f.in.now = NOW + 1;
	assert_int_equal(reconcile(&f.in, f.mem, &f.out), 0);
	assert_int_equal(count(&f.out, ACT_APPLY_EVALUATOR), 0);
	assert_true(f.out.requeue_after > 0 && f.out.requeue_after <= RC_EXPECT_SECONDS);
	rc_output_release(&f.out);

	/* a running job with its evaluator Running: nothing to do, and it
	 * is not a learner (ready, total and PodsReady count learners) */
	setup_fx(&f, 2);
	running(&f);
	with_evaluator(&f);
	f.in.evaluator = &f.ev;
	assert_int_equal(reconcile(&f.in, f.mem, &f.out), 0);
	assert_int_equal(f.out.nacts, 0);
	assert_int_equal(f.out.ready, 2);
	assert_int_equal(f.out.total, 2);
	assert_int_equal(f.out.phase, PHASE_RUNNING);
	assert_int_equal(f.ev_mem.seen, 1);
	rc_output_release(&f.out);
	/* an operator restart (memory lost) with the pod gone: made again
	 * without counting a restart */
	memset(&f.ev_mem, 0, sizeof(f.ev_mem));
	f.in.evaluator = NULL;
	assert_int_equal(reconcile(&f.in, f.mem, &f.out), 0);
	assert_int_equal(count(&f.out, ACT_APPLY_EVALUATOR), 1);
	assert_int_equal(f.ev_mem.restarts, 0);
	rc_output_release(&f.out);
	/* spec.evaluator gone: its pod goes */
	f.in.evaluator = &f.ev;
	f.in.want_evaluator = 0;
	assert_int_equal(reconcile(&f.in, f.mem, &f.out), 0);
	assert_int_equal(count(&f.out, ACT_DELETE_EVALUATOR), 1);
	assert_string_equal(find(&f.out, ACT_DELETE_EVALUATOR)->uid, "ev-uid-1");
	assert_int_equal(count(&f.out, ACT_APPLY_EVALUATOR), 0);
	rc_output_release(&f.out);
}

/*
 * An evaluator that ends (Failed or Succeeded) while the job runs is
 * deleted and recreated after the learners' backoff, with Events; the
 * job's failures, backoffLimit and phase are not touched.
 */
static void test_evaluator_recreated_not_counted(void **state)
{
	struct fx f;
	const struct rc_action *a;

	(void)state;
	setup_fx(&f, 2);
	running(&f);
	with_evaluator(&f);
	f.in.backoff_limit = 0;           /* one counted failure would fail it */
	f.in.evaluator = &f.ev;
	f.ev.state = POD_FAILED;
	f.ev.ready = 0;
	f.ev.exit_code = 3;
	f.ev_mem.seen = 1;
	assert_int_equal(reconcile(&f.in, f.mem, &f.out), 0);
	assert_int_equal(count(&f.out, ACT_DELETE_EVALUATOR), 1);
	a = find(&f.out, ACT_DELETE_EVALUATOR);
	assert_string_equal(a->uid, "ev-uid-1");
	assert_int_equal(a->force, 0);
	assert_int_equal(count(&f.out, ACT_DELETE_LEARNER), 0);
	a = find_event(&f.out, "EvaluatorEnded");
	assert_non_null(a);
	assert_int_equal(a->warning, 1);
	assert_non_null(strstr(a->message, "exit code 3"));
	assert_int_equal(f.out.phase, PHASE_RUNNING);
	assert_false(f.out.conds[COND_FAILED].set);
	assert_int_equal(failures_total(&f), 0);
	assert_int_equal(f.ev_mem.failures, 0);
	rc_output_release(&f.out);
	/* still Failed in the cache: deleted again, the Event not repeated */
	f.in.now = NOW + 1;
	assert_int_equal(reconcile(&f.in, f.mem, &f.out), 0);
	assert_int_equal(count(&f.out, ACT_DELETE_EVALUATOR), 1);
	assert_null(find_event(&f.out, "EvaluatorEnded"));
	rc_output_release(&f.out);

	/* gone: the first recreation has no backoff */
	f.in.evaluator = NULL;
	f.in.now = NOW + 2;
	assert_int_equal(reconcile(&f.in, f.mem, &f.out), 0);
	assert_int_equal(count(&f.out, ACT_APPLY_EVALUATOR), 1);
	assert_int_equal(find(&f.out, ACT_APPLY_EVALUATOR)->recreate, 1);
	assert_non_null(find_event(&f.out, "EvaluatorRecreated"));
	assert_non_null(strstr(find_event(&f.out, "EvaluatorRecreated")->message,
			       "restart 1"));
	assert_int_equal(f.ev_mem.restarts, 1);
	assert_int_equal(f.ev_mem.fails, 1);
	assert_int_equal(f.out.phase, PHASE_RUNNING);
	assert_int_equal(failures_total(&f), 0);
	rc_output_release(&f.out);

	/* the new pod exits 0 soon after: ended, not a warning ... */
	f.in.evaluator = &f.ev;
	snprintf(f.ev.uid, sizeof(f.ev.uid), "ev-uid-2");
	f.ev.state = POD_SUCCEEDED;
	f.ev.exit_code = 0;
	f.in.now = NOW + 3;
	assert_int_equal(reconcile(&f.in, f.mem, &f.out), 0);
	assert_int_equal(count(&f.out, ACT_DELETE_EVALUATOR), 1);
	assert_string_equal(find(&f.out, ACT_DELETE_EVALUATOR)->uid, "ev-uid-2");
	assert_int_equal(find_event(&f.out, "EvaluatorEnded")->warning, 0);
	/* ... and the job does not succeed for it */
	assert_int_equal(f.out.phase, PHASE_RUNNING);
	rc_output_release(&f.out);
	/* ... and the second recreation waits rc_backoff(2) = 1 s */
	f.in.evaluator = NULL;
	f.in.now = NOW + 4;
	assert_int_equal(reconcile(&f.in, f.mem, &f.out), 0);
	assert_int_equal(count(&f.out, ACT_APPLY_EVALUATOR), 0);
	assert_true(fabs(f.out.requeue_after - 1.0) < 1e-9);
	rc_output_release(&f.out);
	f.in.now = NOW + 5;
	assert_int_equal(reconcile(&f.in, f.mem, &f.out), 0);
	assert_int_equal(count(&f.out, ACT_APPLY_EVALUATOR), 1);
	assert_int_equal(f.ev_mem.restarts, 2);
	assert_int_equal(failures_total(&f), 0);
	assert_int_equal(f.out.phase, PHASE_RUNNING);
	rc_output_release(&f.out);

	/* a pod stuck terminating past its grace period: deleted with grace 0 */
	f.in.evaluator = &f.ev;
	f.ev.state = POD_RUNNING;
	f.ev.deleting = 1;
	f.ev.delete_at = f.in.now - RC_FORCE_DELETE_SECONDS - 1;
	assert_int_equal(reconcile(&f.in, f.mem, &f.out), 0);
	assert_int_equal(count(&f.out, ACT_DELETE_EVALUATOR), 1);
	assert_int_equal(find(&f.out, ACT_DELETE_EVALUATOR)->force, 1);
	assert_int_equal(count(&f.out, ACT_APPLY_EVALUATOR), 0);
	rc_output_release(&f.out);
}

/* Deleted with the job's other pods at its end and on suspend. */
static void test_evaluator_deleted_at_end_and_on_suspend(void **state)
{
	struct fx f;

	(void)state;
	/* suspend: deleted; resumed: made again, not as a restart */
	setup_fx(&f, 2);
	running(&f);
	with_evaluator(&f);
	f.in.evaluator = &f.ev;
	f.ev_mem.seen = 1;
	f.js.suspend = 1;
	assert_int_equal(reconcile(&f.in, f.mem, &f.out), 0);
	assert_int_equal(count(&f.out, ACT_DELETE_LEARNER), 2);
	assert_int_equal(count(&f.out, ACT_DELETE_EVALUATOR), 1);
	assert_string_equal(find(&f.out, ACT_DELETE_EVALUATOR)->uid, "ev-uid-1");
	assert_int_equal(count(&f.out, ACT_APPLY_EVALUATOR), 0);
	assert_int_equal(f.out.phase, PHASE_SUSPENDED);
	assert_int_equal(f.ev_mem.seen, 0);
	rc_output_release(&f.out);
	/* suspended with no pod left: nothing is made */
	f.in.phase = PHASE_SUSPENDED;
	f.in.npods = 0;
	f.in.evaluator = NULL;
	f.in.statefulset = 0;
	assert_int_equal(reconcile(&f.in, f.mem, &f.out), 0);
	assert_int_equal(count(&f.out, ACT_APPLY_EVALUATOR), 0);
	assert_int_equal(count(&f.out, ACT_DELETE_EVALUATOR), 0);
	rc_output_release(&f.out);
	f.js.suspend = 0;
	assert_int_equal(reconcile(&f.in, f.mem, &f.out), 0);
	assert_int_equal(count(&f.out, ACT_APPLY_EVALUATOR), 1);
	assert_int_equal(find(&f.out, ACT_APPLY_EVALUATOR)->recreate, 0);
	assert_int_equal(f.ev_mem.restarts, 0);
	rc_output_release(&f.out);

	/* the budget reached: the job succeeds and its evaluator goes */
	setup_fx(&f, 2);
	running(&f);
	with_evaluator(&f);
	f.in.evaluator = &f.ev;
	f.in.progress.have = 1;
	f.in.progress.done = 1;
	assert_int_equal(reconcile(&f.in, f.mem, &f.out), 0);
	assert_int_equal(f.out.phase, PHASE_SUCCEEDED);
	assert_int_equal(count(&f.out, ACT_DELETE_EVALUATOR), 1);
	assert_int_equal(count(&f.out, ACT_APPLY_EVALUATOR), 0);
	rc_output_release(&f.out);
	/* terminal: one still running is stopped, one that ended is kept
	 * (its log), none is made */
	f.in.phase = PHASE_FAILED;
	f.in.progress.done = 0;
	f.in.completion_time = NOW - 5;
	assert_int_equal(reconcile(&f.in, f.mem, &f.out), 0);
	assert_int_equal(count(&f.out, ACT_DELETE_EVALUATOR), 1);
	rc_output_release(&f.out);
	f.ev.state = POD_SUCCEEDED;
	assert_int_equal(reconcile(&f.in, f.mem, &f.out), 0);
	assert_int_equal(count(&f.out, ACT_DELETE_EVALUATOR), 0);
	rc_output_release(&f.out);
	f.in.evaluator = NULL;
	assert_int_equal(reconcile(&f.in, f.mem, &f.out), 0);
	assert_int_equal(count(&f.out, ACT_APPLY_EVALUATOR), 0);
	rc_output_release(&f.out);
}

/*
 * An evaluator pod whose spec the job no longer asks for: deleted once
 * it is Ready and the job Running, with EvaluatorRolled, and made again
 * at once with no restart; not while it is not Ready or the job is not
 * Running, and never one without the label.
 */
static void test_evaluator_rolled(void **state)
{
	struct fx f;

	(void)state;
	for (int c = 0; c < 4; c++) {
		setup_fx(&f, 2);
		running(&f);
		with_evaluator(&f);
		f.in.evaluator = &f.ev;
		f.ev_mem.seen = 1;
		snprintf(f.ev.spec_hash, sizeof(f.ev.spec_hash), "%016x", 0xe1);
		f.ev.outdated = 1;
		if (c == 1)
			f.ev.ready = 0;
		if (c == 2)
			f.in.phase = PHASE_RESTARTING;
		if (c == 3) {
			f.ev.spec_hash[0] = '\0';
			f.ev.outdated = 0;
		}
		assert_int_equal(reconcile(&f.in, f.mem, &f.out), 0);
		if (c) {
			if (count(&f.out, ACT_DELETE_EVALUATOR) ||
			    find_event(&f.out, "EvaluatorRolled"))
				fail_msg("case %d rolled", c);
			rc_output_release(&f.out);
			continue;
		}
		assert_int_equal(count(&f.out, ACT_DELETE_EVALUATOR), 1);
		assert_string_equal(find(&f.out, ACT_DELETE_EVALUATOR)->uid, "ev-uid-1");
		assert_non_null(find_event(&f.out, "EvaluatorRolled"));
		assert_false(find_event(&f.out, "EvaluatorRolled")->warning);
		assert_int_equal(count(&f.out, ACT_DELETE_LEARNER), 0);
		rc_output_release(&f.out);
		/* gone: made again in the next pass, no restart, no backoff */
		f.in.evaluator = NULL;
		f.in.now = NOW + 1;
		assert_int_equal(reconcile(&f.in, f.mem, &f.out), 0);
		assert_int_equal(count(&f.out, ACT_APPLY_EVALUATOR), 1);
		assert_int_equal(find(&f.out, ACT_APPLY_EVALUATOR)->recreate, 0);
		assert_null(find_event(&f.out, "EvaluatorRecreated"));
		assert_int_equal(f.ev_mem.restarts, 0);
		assert_int_equal(f.ev_mem.rolled, 0);
		rc_output_release(&f.out);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_evaluator_created_when_asked),
		cmocka_unit_test(test_evaluator_recreated_not_counted),
		cmocka_unit_test(test_evaluator_deleted_at_end_and_on_suspend),
		cmocka_unit_test(test_evaluator_rolled),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
