/*
 * reconcile and a learner side of another release (reconcile.h,
 * VersionMismatch; docs/operator.md, Failure policy): the pod whose
 * sidecar exited 78 is deleted and its learner held, not recreated
 * however long the job runs, not counted toward backoffLimit, released
 * by a new generation; the condition names both versions; too many held
 * for minQuorum fail the job (rcfix.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/unit/rcfix.h"

#define MISMATCH "learner library 0.3.0 (ABI 2, exchange 3) and sidecar " \
		 "0.4.0 (ABI 3, exchange 4) do not match"

/* Pod i's sidecar ended with the mismatch exit, its message observed. */
static void mismatched(struct obs_pod *p)
{
	p->version_mismatch = 1;
	snprintf(p->mismatch, sizeof(p->mismatch), "%s", MISMATCH);
}

/* Learner i's pod gone from the cache (the others stay). */
static void pod_gone(struct fx *f, int i)
{
	int k = 0;

	for (int j = 0; j < f->in.npods; j++)
		if (f->pods[j].index != i)
			f->pods[k++] = f->pods[j];
	f->in.npods = k;
}

static int applies_of(const struct rc_output *o, enum rc_kind kind, int i)
{
	int n = 0;

	for (int k = 0; k < o->nacts; k++)
		n += o->acts[k].kind == kind && o->acts[k].index == i;
	return n;
}

/*
 * Learner 1's pod failed (its trainer refused, its sidecar exited 78):
 * deleted, held, never recreated over an hour of passes, not counted;
 * a new generation recreates it; VersionMismatch True with the message,
 * False once every learner is ready again.
 */
static void a_mismatched_learner_is_held(void **state)
{
	struct fx f;
	const struct rc_action *a;
	const struct condition *c;

	(void)state;
	setup_fx(&f, 3);
	running(&f);
	f.in.generation = 4;
	f.in.backoff_limit = 0;   /* a counted failure would fail the job */
	f.pods[1].state = POD_FAILED;
	f.pods[1].ready = 0;
	f.pods[1].exit_code = 1;
	mismatched(&f.pods[1]);
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(applies_of(&f.out, ACT_DELETE_LEARNER, 1), 1);
	assert_string_equal(find(&f.out, ACT_DELETE_LEARNER)->uid, "uid-1");
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 0);
	a = find_event(&f.out, "VersionMismatch");
	assert_non_null(a);
	assert_true(a->warning);
	assert_string_equal(a->message, "learner 1: " MISMATCH ": pod deleted, "
			    "not recreated until the job's spec changes");
	assert_null(find_event(&f.out, "LearnerFailed"));
	c = &f.out.conds[COND_VERSION_MISMATCH];
	assert_true(c->set && c->status);
	assert_string_equal(c->reason, "LearnerVersionMismatch");
	assert_string_equal(c->message, "learner 1: " MISMATCH);
	assert_int_equal(f.out.phase, PHASE_RUNNING);
	assert_int_equal(f.mem[1].failures, 0);
	assert_string_equal(cond_type_name(COND_VERSION_MISMATCH), "VersionMismatch");
	rc_output_release(&f.out);

	/* gone: an hour of passes, well past the 60 s backoff cap */
	pod_gone(&f, 1);
	for (int k = 1; k <= 120; k++) {
		f.in.now = NOW + 30.0 * k;
		memcpy(f.in.conds, f.out.conds, sizeof(f.in.conds));
		reconcile(&f.in, f.mem, &f.out);
		assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 0);
		assert_null(find_event(&f.out, "VersionMismatch"));   /* once */
		assert_true(f.out.conds[COND_VERSION_MISMATCH].status);
		assert_int_equal(f.out.phase, PHASE_RUNNING);
		rc_output_release(&f.out);
	}
	assert_int_equal(f.mem[1].restarts, 0);
	assert_int_equal(f.mem[1].failures, 0);

	/* the spec changed (a new image): recreated */
	f.in.generation = 5;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(applies_of(&f.out, ACT_APPLY_LEARNER, 1), 1);
	assert_non_null(find_event(&f.out, "VersionMismatchReleased"));
	assert_int_equal(f.mem[1].held, 0);
	memcpy(f.in.conds, f.out.conds, sizeof(f.in.conds));
	rc_output_release(&f.out);
	/* its new pod ready with the others: False */
	f.pods[2] = f.pods[1];
	f.pods[1] = (struct obs_pod){ .index = 1, .uid = "uid-1b",
				      .state = POD_RUNNING, .ready = 1,
				      .ready_since = f.in.now, .exit_code = -1 };
	f.in.npods = 3;
	reconcile(&f.in, f.mem, &f.out);
	c = &f.out.conds[COND_VERSION_MISMATCH];
	assert_true(c->set && !c->status);
	assert_string_equal(c->reason, "VersionsMatch");
	rc_output_release(&f.out);
}

/* The sidecar crash-looping in a pod still Running (its learner waits
 * for the model): deleted and held all the same. */
static void a_crash_looping_sidecar_is_held(void **state)
{
	struct fx f;

	(void)state;
	setup_fx(&f, 2);
	running(&f);
	f.pods[0].ready = 0;
	f.pods[0].ready_since = 0;
	snprintf(f.pods[0].reason, sizeof(f.pods[0].reason), "CrashLoopBackOff");
	mismatched(&f.pods[0]);
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(applies_of(&f.out, ACT_DELETE_LEARNER, 0), 1);
	assert_true(f.mem[0].held);
	assert_true(f.out.conds[COND_VERSION_MISMATCH].status);
	rc_output_release(&f.out);
	/* still terminating: no second delete; gone: not recreated */
	f.pods[0].deleting = 1;
	f.pods[0].delete_at = NOW + 10;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_DELETE_LEARNER), 0);
	rc_output_release(&f.out);
	pod_gone(&f, 0);
	f.in.now = NOW + 120;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 0);
	rc_output_release(&f.out);
}

/* Fewer unheld learners than minQuorum: the job Fails, reason
 * VersionMismatch, the message naming both versions. */
static void too_many_held_fail_the_job(void **state)
{
	struct fx f;
	const struct condition *c;

	(void)state;
	setup_fx(&f, 2);
	f.js.syncer.min_quorum = 2;
	running(&f);
	f.pods[1].state = POD_FAILED;
	mismatched(&f.pods[1]);
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.phase, PHASE_FAILED);
	c = &f.out.conds[COND_FAILED];
	assert_true(c->set && c->status);
	assert_string_equal(c->reason, "VersionMismatch");
	assert_string_equal(c->message, "learner 1: " MISMATCH);
	assert_true(f.out.conds[COND_VERSION_MISMATCH].status);
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 0);
	rc_output_release(&f.out);

	/* quorum 1: one held goes on, both held fail */
	setup_fx(&f, 2);
	running(&f);
	mismatched(&f.pods[0]);
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.phase, PHASE_RUNNING);
	rc_output_release(&f.out);
	mismatched(&f.pods[1]);
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.phase, PHASE_FAILED);
	assert_string_equal(f.out.conds[COND_FAILED].message,
			    "learner 0 (and 1 more): " MISMATCH);
	rc_output_release(&f.out);
}

/* The evaluator's sidecar refused it: deleted, not recreated. */
static void a_mismatched_evaluator_is_held(void **state)
{
	struct fx f;

	(void)state;
	setup_fx(&f, 2);
	running(&f);
	f.js.model.kind = MODEL_EXTERNAL;
	f.in.want_evaluator = 1;
	f.in.evaluator_mem = &f.ev_mem;
	f.ev_mem.seen = 1;
	f.ev = (struct obs_pod){ .index = 0, .uid = "ev-uid-1",
				 .state = POD_FAILED, .exit_code = 1 };
	mismatched(&f.ev);
	f.in.evaluator = &f.ev;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_DELETE_EVALUATOR), 1);
	assert_string_equal(find_event(&f.out, "VersionMismatch")->message,
			    "evaluator 0: " MISMATCH ": pod deleted, not "
			    "recreated until the job's spec changes");
	assert_string_equal(f.out.conds[COND_VERSION_MISMATCH].message,
			    "evaluator 0: " MISMATCH);
	assert_int_equal(f.out.phase, PHASE_RUNNING);
	rc_output_release(&f.out);
	f.in.evaluator = NULL;
	for (int k = 1; k <= 10; k++) {
		f.in.now = NOW + 60.0 * k;
		reconcile(&f.in, f.mem, &f.out);
		assert_int_equal(count(&f.out, ACT_APPLY_EVALUATOR), 0);
		rc_output_release(&f.out);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(a_mismatched_learner_is_held),
		cmocka_unit_test(a_crash_looping_sidecar_is_held),
		cmocka_unit_test(too_many_held_fail_the_job),
		cmocka_unit_test(a_mismatched_evaluator_is_held),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
