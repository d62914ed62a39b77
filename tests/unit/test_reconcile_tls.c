/*
 * reconcile, <job>-tls and the refusals (reconcile.h): the Secret made
 * before any pod, made again with the pods rolled when it went missing
 * under a running job, a Secret not the job's refused (SecretNotOwned),
 * and a template the pod policy refuses (TemplateRefused): conditions,
 * Events, and no child made (rcfix.h). The same through the API client
 * against a fake server: test_pass.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/unit/rcfix.h"

/* The actions but Events. */
static int writes(const struct rc_output *o)
{
	return o->nacts - count(o, ACT_EVENT);
}

/* Made before any pod that mounts it; known to be the job's, never again. */
static void test_tls_secret_created_before_pods(void **state)
{
	struct fx f;

	(void)state;
	setup_fx(&f, 3);
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_CREATE_TLS), 1);
	assert_true(find(&f.out, ACT_CREATE_TLS) < find(&f.out, ACT_APPLY_SYNCER));
	assert_true(find(&f.out, ACT_CREATE_TLS) < find(&f.out, ACT_APPLY_LEARNER));
	/* a new job has no pod to roll */
	assert_null(find_event(&f.out, "SecretRecreated"));
	assert_int_equal(count(&f.out, ACT_DELETE_LEARNER), 0);
	rc_output_release(&f.out);
	/* the job's: a recreated learner does not make another */
	setup_fx(&f, 3);
	running(&f);
	f.in.npods = 2;
	f.mem[2].seen = 1;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 1);
	assert_int_equal(count(&f.out, ACT_CREATE_TLS), 0);
	rc_output_release(&f.out);
	/* the StatefulSet made again (as after a resume), the Secret the
	 * job's: it is kept, with the identities the learners hold */
	setup_fx(&f, 3);
	running(&f);
	f.in.statefulset = 0;
	f.in.syncer_ready = 0;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_APPLY_SYNCER), 1);
	assert_int_equal(count(&f.out, ACT_CREATE_TLS), 0);
	rc_output_release(&f.out);
	/* spec.syncer.insecure: no Secret, and Created without it */
	setup_fx(&f, 1);
	f.in.want_tls = 0;
	f.in.configmap = f.in.service = f.in.pvc = f.in.statefulset = f.in.netpol = 1;
	f.pods[0].index = 0;
	f.in.npods = 1;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_CREATE_TLS), 0);
	assert_int_equal(f.out.conds[COND_CREATED].status, 1);
	rc_output_release(&f.out);
	/* suspended: nothing is created */
	setup_fx(&f, 3);
	f.js.suspend = 1;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_CREATE_TLS), 0);
	rc_output_release(&f.out);
	/* a new job is Created only once its Secret is its own */
	setup_fx(&f, 1);
	f.in.configmap = f.in.service = f.in.pvc = f.in.statefulset = f.in.netpol = 1;
	f.pods[0].index = 0;
	f.in.npods = 1;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.conds[COND_CREATED].status, 0);
	rc_output_release(&f.out);
}

/*
 * Missing under a running job: made again (a new CA, children.c), and
 * every pod that mounts the old one deleted with its uid, the syncer's
 * StatefulSet too, all after the create; a Warning Event says so. The
 * next pass, the Secret the job's, deletes nothing more.
 */
static void test_deleted_secret_made_again_and_pods_rolled(void **state)
{
	struct fx f;
	const struct rc_action *ev;
	int first_delete = -1, create = -1;

	(void)state;
	setup_fx(&f, 3);
	running(&f);
	snprintf(f.js.name, sizeof(f.js.name), "demo");
	f.in.tls = 0;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_CREATE_TLS), 1);
	assert_int_equal(count(&f.out, ACT_DELETE_LEARNER), 3);
	assert_int_equal(count(&f.out, ACT_DELETE_SYNCER), 1);
	for (int i = 0; i < f.out.nacts; i++) {
		const struct rc_action *a = &f.out.acts[i];

		if (a->kind == ACT_CREATE_TLS)
			create = i;
		if ((a->kind == ACT_DELETE_LEARNER || a->kind == ACT_DELETE_SYNCER) &&
		    first_delete < 0)
			first_delete = i;
		if (a->kind == ACT_DELETE_LEARNER) {
			char want[16];

			snprintf(want, sizeof(want), "uid-%d", a->index);
			assert_string_equal(a->uid, want);
			assert_int_equal(a->force, 0);
		}
	}
	assert_true(create >= 0 && create < first_delete);
	ev = find_event(&f.out, "SecretRecreated");
	assert_non_null(ev);
	assert_int_equal(ev->warning, 1);
	assert_string_equal(ev->message, "Secret demo-tls was missing: made again "
			    "with a new CA; 3 pod(s) and the syncer's StatefulSet "
			    "deleted to come back with it");
	rc_output_release(&f.out);

	/* made: the pods going, the StatefulSet gone; nothing is rolled again
	 * and the StatefulSet is made again (its pods mount the new one) */
	f.in.tls = 1;
	f.in.statefulset = 0;
	f.in.syncer_ready = 0;
	for (int i = 0; i < 3; i++)
		f.pods[i].deleting = 1;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_CREATE_TLS), 0);
	assert_int_equal(count(&f.out, ACT_DELETE_LEARNER), 0);
	assert_int_equal(count(&f.out, ACT_DELETE_SYNCER), 0);
	assert_int_equal(count(&f.out, ACT_APPLY_SYNCER), 1);
	assert_null(find_event(&f.out, "SecretRecreated"));
	rc_output_release(&f.out);
	/* gone from the cache: each learner comes back */
	f.in.npods = 0;
	f.in.statefulset = 1;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 3);
	assert_int_equal(count(&f.out, ACT_CREATE_TLS), 0);
	rc_output_release(&f.out);
}

/*
 * A Secret not the job's (planted, or a deleted job's of the same name):
 * SecretNotOwned True naming it, one Warning Event, no child made, a
 * pass again soon; the job's own again (the old one collected and a new
 * one made): False, and the children are made.
 */
static void test_secret_not_owned_refused(void **state)
{
	const char *msg = "Secret 'demo-tls' is not this job's: it belongs to "
			  "DecoupledTrainingJob 'demo' uid old-1, not uid new-2";
	const struct condition *c;
	const struct rc_action *ev;
	struct fx f;

	(void)state;
	setup_fx(&f, 2);
	f.in.tls = -1;
	f.in.tls_reason = "OwnedByAnother";
	f.in.tls_message = msg;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(writes(&f.out), 0);
	c = &f.out.conds[COND_SECRET_NOT_OWNED];
	assert_int_equal(c->set, 1);
	assert_int_equal(c->status, 1);
	assert_string_equal(c->reason, "OwnedByAnother");
	assert_string_equal(c->message, msg);
	ev = find_event(&f.out, "SecretNotOwned");
	assert_non_null(ev);
	assert_int_equal(ev->warning, 1);
	assert_string_equal(ev->message, msg);
	assert_int_equal(f.out.phase, PHASE_PENDING);
	assert_true(f.out.requeue_after > 0 &&
		    f.out.requeue_after <= RC_SECRET_RECHECK_SECONDS);
	assert_string_equal(cond_type_name(COND_SECRET_NOT_OWNED), "SecretNotOwned");
	/* the next pass: still refused, no second Event */
	memcpy(f.in.conds, f.out.conds, sizeof(f.in.conds));
	rc_output_release(&f.out);
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(writes(&f.out), 0);
	assert_null(find_event(&f.out, "SecretNotOwned"));
	assert_int_equal(f.out.conds[COND_SECRET_NOT_OWNED].status, 1);
	memcpy(f.in.conds, f.out.conds, sizeof(f.in.conds));
	rc_output_release(&f.out);
	/* collected, then missing: made, and the job goes on */
	f.in.tls = 0;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_CREATE_TLS), 1);
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 2);
	assert_int_equal(f.out.conds[COND_SECRET_NOT_OWNED].status, 0);
	assert_string_equal(f.out.conds[COND_SECRET_NOT_OWNED].reason, "SecretOwned");
	rc_output_release(&f.out);
	/* insecure jobs have no Secret to refuse */
	setup_fx(&f, 2);
	f.in.want_tls = 0;
	f.in.tls = -1;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 2);
	assert_int_equal(f.out.conds[COND_SECRET_NOT_OWNED].set, 0);
	rc_output_release(&f.out);
}

/*
 * A template the pod policy refuses: TemplateRefused True naming the
 * field, a Warning Event, nothing made (not even the Secret); while
 * suspended the condition shows too; allowed again: False, and the
 * children are made. A running job refused (a stricter operator) keeps
 * its pods: none is deleted, none made.
 */
static void test_template_refused(void **state)
{
	const char *msg = "spec.learners.template.spec.containers[0]."
			  "securityContext.privileged is true: refused";
	struct fx f;

	(void)state;
	setup_fx(&f, 2);
	f.in.template_reason = "PrivilegedContainer";
	f.in.template_message = msg;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(writes(&f.out), 0);
	assert_int_equal(f.out.conds[COND_TEMPLATE_REFUSED].status, 1);
	assert_string_equal(f.out.conds[COND_TEMPLATE_REFUSED].reason,
			    "PrivilegedContainer");
	assert_string_equal(f.out.conds[COND_TEMPLATE_REFUSED].message, msg);
	assert_non_null(find_event(&f.out, "TemplateRefused"));
	assert_int_equal(find_event(&f.out, "TemplateRefused")->warning, 1);
	assert_string_equal(cond_type_name(COND_TEMPLATE_REFUSED), "TemplateRefused");
	rc_output_release(&f.out);
	/* suspended: the condition says so before the queue resumes it */
	f.js.suspend = 1;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.conds[COND_TEMPLATE_REFUSED].status, 1);
	assert_int_equal(f.out.phase, PHASE_SUSPENDED);
	memcpy(f.in.conds, f.out.conds, sizeof(f.in.conds));
	f.in.phase = f.out.phase;
	rc_output_release(&f.out);
	/* fixed while suspended, resumed: made */
	f.js.suspend = 0;
	f.in.template_reason = f.in.template_message = NULL;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.conds[COND_TEMPLATE_REFUSED].status, 0);
	assert_string_equal(f.out.conds[COND_TEMPLATE_REFUSED].reason, "TemplateAllowed");
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 2);
	assert_int_equal(count(&f.out, ACT_APPLY_SYNCER), 1);
	assert_null(find_event(&f.out, "TemplateRefused"));
	rc_output_release(&f.out);
	/* running, refused, a learner gone and another failed: left alone */
	setup_fx(&f, 2);
	running(&f);
	f.pods[0].index = 1;   /* learner 0's pod gone, learner 1's failed */
	f.pods[0].state = POD_FAILED;
	f.in.npods = 1;
	f.mem[0].seen = 1;
	f.in.template_reason = "HostPathVolume";
	f.in.template_message = "spec.syncer.template.spec.volumes[0].hostPath is set";
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(writes(&f.out), 0);
	assert_int_equal(f.out.conds[COND_TEMPLATE_REFUSED].status, 1);
	rc_output_release(&f.out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tls_secret_created_before_pods),
		cmocka_unit_test(test_deleted_secret_made_again_and_pods_rolled),
		cmocka_unit_test(test_secret_not_owned_refused),
		cmocka_unit_test(test_template_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
