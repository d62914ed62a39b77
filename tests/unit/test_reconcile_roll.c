/*
 * Rolling learners (reconcile.h, Rolling; docs/operator.md, Rolling
 * learners): a learner pod whose spec hash the job no longer asks for is
 * replaced one at a time, only while every learner is Ready and none is
 * awaited, never while the job is not Running; the replacement is no
 * restart and waits no backoff; a pod without the hash is left alone.
 * The syncer's StatefulSet whose pod template is outdated is written
 * again. And the hash itself (child_learner, child_syncer): the same job
 * gives the same label, another image another one (rcfix.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/unit/rcfix.h"

static int acts_of(const struct rc_output *o, enum rc_kind kind, int i)
{
	int n = 0;

	for (int k = 0; k < o->nacts; k++)
		n += o->acts[k].kind == kind && o->acts[k].index == i;
	return n;
}

static void outdated_all(struct fx *f)
{
	for (int i = 0; i < f->in.npods; i++) {
		snprintf(f->pods[i].spec_hash, sizeof(f->pods[i].spec_hash),
			 "%016x", 0xa1);
		f->pods[i].outdated = 1;
	}
}

/* One pass at time t, its conditions carried to the next. */
static void pass_at(struct fx *f, double t)
{
	f->in.now = t;
	reconcile(&f->in, f->mem, &f->out);
	memcpy(f->in.conds, f->out.conds, sizeof(f->in.conds));
	f->in.phase = f->out.phase;
}

/* Learner i's pod: gone from the cache (rm), or made again, Ready, with
 * the spec the job asks for. */
static void replace_pod(struct fx *f, int i, int rm)
{
	int k = 0;

	for (int j = 0; j < f->in.npods; j++)
		if (f->pods[j].index != i)
			f->pods[k++] = f->pods[j];
	f->in.npods = k;
	if (rm)
		return;
	f->pods[f->in.npods++] = (struct obs_pod){
		.index = i, .state = POD_RUNNING, .ready = 1,
		.ready_since = f->in.now, .exit_code = -1,
		.spec_hash = "00000000000000b2" };
	snprintf(f->pods[f->in.npods - 1].uid, sizeof(f->pods[0].uid), "new-%d", i);
	f->mem[i].create_sent = 0;   /* the cache saw the apply */
}

/*
 * Four learners, minQuorum 3, every pod outdated: each pass deletes at
 * most one, only with all four Ready; deleted 0, 1, 2, 3 in that order,
 * each made again at once without a restart; never fewer than 3 ready.
 */
static void outdated_pods_roll_one_at_a_time(void **state)
{
	struct fx f;
	const struct rc_action *a;
	int order[4], n = 0;
	double t = NOW;
	char uid[64];

	(void)state;
	setup_fx(&f, 4);
	f.js.syncer.min_quorum = 3;
	running(&f);
	outdated_all(&f);
	while (n < 4) {
		int victim = -1, ready = 0;

		pass_at(&f, t += 1);
		assert_int_equal(f.out.outdated, 4 - n);
		assert_true(count(&f.out, ACT_DELETE_LEARNER) <= 1);
		for (int i = 0; i < 4; i++)
			if (acts_of(&f.out, ACT_DELETE_LEARNER, i))
				victim = i;
		for (int j = 0; j < f.in.npods; j++)
			ready += f.pods[j].ready;
		if (victim >= 0) {
			assert_int_equal(ready, 4);
			a = find_event(&f.out, "LearnerRolled");
			assert_non_null(a);
			assert_false(a->warning);
			snprintf(uid, sizeof(uid), "uid-%d", victim);
			assert_string_equal(find(&f.out, ACT_DELETE_LEARNER)->uid, uid);
			order[n++] = victim;
			rc_output_release(&f.out);
			/* the pod goes; the next pass makes it again */
			replace_pod(&f, victim, 1);
			assert_true(f.in.npods >= f.js.syncer.min_quorum);
			pass_at(&f, t += 1);
			assert_int_equal(acts_of(&f.out, ACT_APPLY_LEARNER, victim), 1);
			assert_int_equal(count(&f.out, ACT_DELETE_LEARNER), 0);
			assert_null(find_event(&f.out, "LearnerRecreated"));
			rc_output_release(&f.out);
			/* awaited, then seen Ready */
			pass_at(&f, t += 1);
			assert_int_equal(count(&f.out, ACT_DELETE_LEARNER), 0);
			rc_output_release(&f.out);
			replace_pod(&f, victim, 0);
			continue;
		}
		rc_output_release(&f.out);
		assert_true(t < NOW + 100);
	}
	for (int i = 0; i < 4; i++) {
		assert_int_equal(order[i], i);
		assert_int_equal(f.mem[i].restarts, 0);
		assert_int_equal(f.mem[i].rolled, 0);
	}
	/* nothing outdated any more: no more deletes */
	pass_at(&f, t += 1);
	assert_int_equal(count(&f.out, ACT_DELETE_LEARNER), 0);
	assert_null(find_event(&f.out, "LearnerRolled"));
	rc_output_release(&f.out);
}

/* Not while a learner is not Ready, is being deleted, failed, is
 * missing, or the job is not Running; a pod without the hash never. */
static void no_roll_unless_all_ready_and_running(void **state)
{
	struct fx f;

	(void)state;
	for (int c = 0; c < 6; c++) {
		setup_fx(&f, 3);
		running(&f);
		outdated_all(&f);
		switch (c) {
		case 0: f.pods[2].ready = 0; break;
		case 1: f.pods[2].deleting = 1; break;
		case 2:   /* failed: deleted for that, not rolled */
			f.pods[2].state = POD_FAILED;
			f.pods[2].ready = 0;
			f.pods[2].exit_code = 1;
			break;
		case 3: f.in.npods = 2; break;
		case 4: f.in.phase = PHASE_RESTARTING; break;
		case 5:
			for (int i = 0; i < 3; i++) {
				f.pods[i].spec_hash[0] = '\0';
				f.pods[i].outdated = 0;
			}
			break;
		}
		reconcile(&f.in, f.mem, &f.out);
		if (find_event(&f.out, "LearnerRolled"))
			fail_msg("case %d rolled", c);
		for (int i = 0; i < 2; i++)
			assert_int_equal(acts_of(&f.out, ACT_DELETE_LEARNER, i), 0);
		rc_output_release(&f.out);
	}
	/* suspended: pods go for the suspension, none is rolled */
	setup_fx(&f, 3);
	running(&f);
	outdated_all(&f);
	f.js.suspend = 1;
	reconcile(&f.in, f.mem, &f.out);
	assert_null(find_event(&f.out, "LearnerRolled"));
	for (int i = 0; i < 3; i++)
		assert_int_equal(f.mem[i].rolled, 0);
	rc_output_release(&f.out);
}

static const char *hash_of(json_t *pod)
{
	return json_string_value(json_object_get(json_object_get(json_object_get(
		pod, "metadata"), "labels"), LABEL_POD_SPEC));
}

/* The child `make` builds carries the hash, the same twice, another
 * with another runtime image (rt->image is "ddiloco:1" before and after). */
static void follows_the_image(const struct child_ctx *c, struct runtime_image *rt,
			      json_t *(*make)(const struct child_ctx *))
{
	json_t *b = make(c), *d = make(c);

	assert_non_null(b);
	assert_non_null(hash_of(b));
	assert_string_equal(hash_of(b), hash_of(d));
	json_decref(d);
	rt->image = "ddiloco:2";
	d = make(c);
	assert_string_not_equal(hash_of(b), hash_of(d));
	json_decref(d);
	json_decref(b);
	rt->image = "ddiloco:1";
}

/* The label: stable for the same job, changed by the operator's runtime
 * image or the learners' image, not by the training settings (no pod
 * carries them). */
static void the_hash_follows_the_pod_spec(void **state)
{
	struct job_spec js;
	json_t *spec = json_pack("{s:{s:i, s:s}}", "learners", "replicas", 2,
				 "image", "trainer:1");
	struct runtime_image rt = { "ddiloco:1", "IfNotPresent" };
	struct child_ctx c = { "j", "ns", "uid-j", &js, spec, "{}", "ops", 0,
			       NULL, NULL, &rt };
	json_t *a, *b, *d;
	char h[20];

	(void)state;
	jobspec_defaults(&js);
	js.learners.replicas = 2;
	a = child_learner(&c, 1);
	b = child_learner(&c, 1);
	assert_non_null(a);
	assert_non_null(hash_of(a));
	assert_int_equal(strlen(hash_of(a)), 16);
	assert_string_equal(hash_of(a), hash_of(b));
	snprintf(h, sizeof(h), "%s", hash_of(a));
	json_decref(b);
	b = child_learner(&c, 0);   /* another index, another pod */
	assert_string_not_equal(hash_of(b), h);
	json_decref(b);

	rt.image = "ddiloco:2";   /* the operator upgraded */
	b = child_learner(&c, 1);
	assert_string_not_equal(hash_of(b), h);
	json_decref(b);
	rt.image = "ddiloco:1";
	/* the syncer's StatefulSet: its template's hash */
	follows_the_image(&c, &rt, child_syncer);

	js.syncer.outer_lr = 0.5;   /* the ConfigMap's, not the pod's */
	json_object_set_new(spec, "syncer", json_pack("{s:f}", "outerLr", 0.5));
	b = child_learner(&c, 1);
	assert_string_equal(hash_of(b), h);
	json_decref(b);

	/* the evaluator's pod carries one too */
	json_object_set_new(spec, "evaluator", json_pack("{s:[s]}", "command", "eval"));
	follows_the_image(&c, &rt, child_evaluator);

	json_object_set_new(json_object_get(spec, "learners"), "image",
			    json_string("trainer:2"));
	d = child_learner(&c, 1);
	assert_string_not_equal(hash_of(d), h);
	json_decref(d);
	json_decref(a);
	json_decref(spec);
}

/* The syncer's pod template outdated: the StatefulSet written again
 * (its controller rolls the pod), a Normal Event; not while another
 * manager's change of it is put right (one write, a drift). */
static void an_outdated_syncer_is_written_again(void **state)
{
	struct fx f;

	(void)state;
	setup_fx(&f, 2);
	running(&f);
	f.in.syncer_outdated = 1;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_REPLACE_CHILD), 1);
	assert_int_equal(find(&f.out, ACT_REPLACE_CHILD)->index, DRIFT_SYNCER);
	assert_non_null(find_event(&f.out, "SyncerRolled"));
	assert_int_equal(count(&f.out, ACT_DELETE_SYNCER), 0);
	rc_output_release(&f.out);
	snprintf(f.in.drift[DRIFT_SYNCER], sizeof(f.in.drift[0]), "kubectl-edit");
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_REPLACE_CHILD), 1);
	assert_null(find_event(&f.out, "SyncerRolled"));
	rc_output_release(&f.out);
	f.in.drift[DRIFT_SYNCER][0] = '\0';
	f.in.statefulset = 0;   /* missing: made, not written again */
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_REPLACE_CHILD), 0);
	assert_null(find_event(&f.out, "SyncerRolled"));
	rc_output_release(&f.out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(outdated_pods_roll_one_at_a_time),
		cmocka_unit_test(no_roll_unless_all_ready_and_running),
		cmocka_unit_test(the_hash_follows_the_pod_spec),
		cmocka_unit_test(an_outdated_syncer_is_written_again),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
