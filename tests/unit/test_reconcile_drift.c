/*
 * reconcile and drift (docs/operator.md, Drift): a child another manager
 * changed is written again whole, with an Event naming who; a child gone
 * from a job whose children were all made is made again, with an Event,
 * but not when the job was just resumed; the ConfigMap written again when
 * the job's spec changed what it holds (rcfix.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/unit/rcfix.h"

static void test_drifted_children_are_written_again(void **state)
{
	struct fx f;
	const struct rc_action *a;

	(void)state;
	setup_fx(&f, 2);
	running(&f);
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_REPLACE_CHILD), 0);
	assert_null(find_event(&f.out, "DriftRepaired"));
	rc_output_release(&f.out);

	snprintf(f.in.drift[DRIFT_SERVICE], sizeof(f.in.drift[0]), "kubectl-patch");
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_REPLACE_CHILD), 1);
	a = find(&f.out, ACT_REPLACE_CHILD);
	assert_int_equal(a->index, DRIFT_SERVICE);
	assert_string_equal(find_event(&f.out, "DriftRepaired")->message,
			    "Service <job>-syncer was changed by 'kubectl-patch': "
			    "written again as the job asks");
	assert_int_equal(find_event(&f.out, "DriftRepaired")->warning, 1);
	assert_int_equal(count(&f.out, ACT_APPLY_SERVICE), 0);
	rc_output_release(&f.out);

	/* the StatefulSet and the NetworkPolicy at once */
	f.in.drift[DRIFT_SERVICE][0] = '\0';
	snprintf(f.in.drift[DRIFT_SYNCER], sizeof(f.in.drift[0]), "kubectl-edit");
	snprintf(f.in.drift[DRIFT_NETPOL], sizeof(f.in.drift[0]), "kubectl");
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_REPLACE_CHILD), 2);
	rc_output_release(&f.out);

	/* gone: made again, said */
	memset(f.in.drift, 0, sizeof(f.in.drift));
	f.in.netpol = 0;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_APPLY_NETPOL), 1);
	assert_string_equal(find_event(&f.out, "DriftRepaired")->message,
			    "NetworkPolicy <job>-syncer was gone: made again");
	rc_output_release(&f.out);

	/* before the children were all made: made, nothing said */
	f.in.conds[COND_CREATED].set = 0;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_APPLY_NETPOL), 1);
	assert_null(find_event(&f.out, "DriftRepaired"));
	rc_output_release(&f.out);
}

/* spec.budget changed: <job>-spec written again, once, a Normal Event;
 * a drift of it at the same time is one write, said as a drift */
static void test_configmap_follows_the_spec(void **state)
{
	struct fx f;

	(void)state;
	setup_fx(&f, 2);
	running(&f);
	f.in.generation = 3;
	f.in.configmap_outdated = 1;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_REPLACE_CHILD), 1);
	assert_int_equal(find(&f.out, ACT_REPLACE_CHILD)->index, DRIFT_CONFIGMAP);
	assert_string_equal(find_event(&f.out, "SpecUpdated")->message,
			    "ConfigMap <job>-spec written again: the job's spec "
			    "changed (generation 3); a syncer or sidecar reads it "
			    "when it starts");
	assert_int_equal(find_event(&f.out, "SpecUpdated")->warning, 0);
	assert_int_equal(count(&f.out, ACT_DELETE_LEARNER), 0);
	rc_output_release(&f.out);

	snprintf(f.in.drift[DRIFT_CONFIGMAP], sizeof(f.in.drift[0]), "kubectl-edit");
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_REPLACE_CHILD), 1);
	assert_null(find_event(&f.out, "SpecUpdated"));
	assert_non_null(find_event(&f.out, "DriftRepaired"));
	rc_output_release(&f.out);

	/* missing: applied (made), not replaced */
	memset(f.in.drift, 0, sizeof(f.in.drift));
	f.in.configmap = 0;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_REPLACE_CHILD), 0);
	assert_int_equal(count(&f.out, ACT_APPLY_CONFIGMAP), 1);
	rc_output_release(&f.out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_drifted_children_are_written_again),
		cmocka_unit_test(test_configmap_follows_the_spec),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
