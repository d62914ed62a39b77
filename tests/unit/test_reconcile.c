/*
 * reconcile: the operator's decisions without a server. Each test states
 * a situation (spec, pods in the cache, memory) and checks the actions,
 * the phase and the conditions that come out. Also the children's
 * manifests (owner references, native sidecar, pass-through fields).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/pki.h"
#include "operator/children.h"
#include "operator/podcheck.h"
#include "operator/reconcile.h"

#define NOW 1800000000.0

struct fx {
	struct job_spec js;
	struct rc_input in;
	struct learner_mem mem[8];
	struct obs_pod pods[8];
	struct learner_mem ev_mem;
	struct obs_pod ev;
	struct rc_output out;
};

static void setup_fx(struct fx *f, int M)
{
	memset(f, 0, sizeof(*f));
	jobspec_defaults(&f->js);
	f->js.learners.replicas = M;
	f->in.spec = &f->js;
	f->in.now = NOW;
	f->in.backoff_limit = -1;
	f->in.backoff_reset = 600;
	f->in.retain = -1;
	f->in.active_deadline = -1;
	f->in.syncer_restart_limit = -1;
	f->in.syncer_restart_window = 600;
	f->in.pending_timeout = 300;
	f->in.pods = f->pods;
	f->in.want_pvc = 1;
	f->in.want_tls = 1;
}

/* Everything exists, Created is True, every learner Running and ready. */
static void running(struct fx *f)
{
	int M = f->js.learners.replicas;

	f->in.configmap = f->in.service = f->in.pvc = f->in.statefulset = 1;
	f->in.netpol = f->in.tls = 1;
	f->in.pvc_owned = 1;
	f->in.syncer_ready = 1;
	f->in.phase = PHASE_RUNNING;
	f->in.start_time = NOW - 100;
	cond_set(&f->in.conds[COND_CREATED], 1, "ChildrenCreated", "", "t0");
	for (int i = 0; i < M; i++) {
		f->pods[i].index = i;
		snprintf(f->pods[i].uid, sizeof(f->pods[i].uid), "uid-%d", i);
		f->pods[i].state = POD_RUNNING;
		f->pods[i].ready = 1;
		f->pods[i].ready_since = NOW - 100;
	}
	f->in.npods = M;
}

static int count(const struct rc_output *o, enum rc_kind k)
{
	int n = 0;

	for (int i = 0; i < o->nacts; i++)
		n += o->acts[i].kind == k;
	return n;
}

static const struct rc_action *find(const struct rc_output *o, enum rc_kind k)
{
	for (int i = 0; i < o->nacts; i++)
		if (o->acts[i].kind == k)
			return &o->acts[i];
	return NULL;
}

static const struct rc_action *find_event(const struct rc_output *o,
					  const char *reason)
{
	for (int i = 0; i < o->nacts; i++)
		if (o->acts[i].kind == ACT_EVENT && !strcmp(o->acts[i].reason, reason))
			return &o->acts[i];
	return NULL;
}

static void test_new_job_creates_everything(void **state)
{
	struct fx f;

	(void)state;
	setup_fx(&f, 4);
	assert_int_equal(reconcile(&f.in, f.mem, &f.out), 0);
	assert_int_equal(count(&f.out, ACT_APPLY_CONFIGMAP), 1);
	assert_int_equal(count(&f.out, ACT_APPLY_SERVICE), 1);
	assert_int_equal(count(&f.out, ACT_APPLY_NETPOL), 1);
	assert_int_equal(count(&f.out, ACT_APPLY_PVC), 1);
	assert_int_equal(count(&f.out, ACT_APPLY_SYNCER), 1);
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 4);
	assert_int_equal(count(&f.out, ACT_DELETE_LEARNER), 0);
	/* the syncer's policy is in place before any pod of the job */
	assert_true(find(&f.out, ACT_APPLY_NETPOL) < find(&f.out, ACT_APPLY_SYNCER));
	assert_true(find(&f.out, ACT_APPLY_NETPOL) < find(&f.out, ACT_APPLY_LEARNER));
	assert_int_equal(f.out.phase, PHASE_PENDING);
	assert_int_equal(f.out.conds[COND_CREATED].set, 1);
	assert_int_equal(f.out.conds[COND_CREATED].status, 0);
	assert_string_equal(f.out.conds[COND_CREATED].reason, "Creating");
	assert_string_equal(f.out.conds[COND_RUNNING].reason, "SyncerNotReady");
	/* first creations are not restarts */
	for (int i = 0; i < 4; i++) {
		assert_int_equal(f.mem[i].restarts, 0);
		assert_true(f.mem[i].create_sent == NOW);
	}
	rc_output_release(&f.out);

	/* the cache has not caught up: the same pass again creates no more */
	f.in.now = NOW + 1;
	assert_int_equal(reconcile(&f.in, f.mem, &f.out), 0);
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 0);
	assert_true(f.out.requeue_after > 0 && f.out.requeue_after <= RC_EXPECT_SECONDS);
	rc_output_release(&f.out);
}

static void test_no_pvc_when_storage_empty(void **state)
{
	struct fx f;

	(void)state;
	setup_fx(&f, 2);
	f.in.want_pvc = 0;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_APPLY_PVC), 0);
	assert_int_equal(count(&f.out, ACT_APPLY_SYNCER), 1);
	rc_output_release(&f.out);
}

static void test_all_seen_sets_created_and_running(void **state)
{
	struct fx f;

	(void)state;
	setup_fx(&f, 3);
	running(&f);
	memset(f.in.conds, 0, sizeof(f.in.conds));
	f.in.phase = PHASE_PENDING;
	f.in.start_time = 0;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.nacts - count(&f.out, ACT_EVENT), 0);
	assert_int_equal(f.out.conds[COND_CREATED].status, 1);
	assert_string_equal(f.out.conds[COND_CREATED].reason, "ChildrenCreated");
	assert_non_null(find_event(&f.out, "Created"));
	assert_non_null(find_event(&f.out, "Running"));
	assert_int_equal(f.out.phase, PHASE_RUNNING);
	assert_int_equal(f.out.ready, 3);
	assert_int_equal(f.out.total, 3);
	assert_true(f.out.start_time == NOW);
	assert_string_equal(f.out.conds[COND_RUNNING].message,
			    "3/3 learners ready, syncer ready");
	rc_output_release(&f.out);
}

static void test_steady_state_does_nothing(void **state)
{
	struct fx f;

	(void)state;
	setup_fx(&f, 4);
	running(&f);
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.nacts, 0);
	assert_int_equal(f.out.phase, PHASE_RUNNING);
	rc_output_release(&f.out);
}

/* The syncer's /status says its checkpoint writes fail, then not. */
static void test_checkpoint_failing_condition(void **state)
{
	struct fx f;
	struct obs_progress *p = &f.in.progress;
	const struct condition *c;

	(void)state;
	setup_fx(&f, 2);
	running(&f);
	f.in.retain = 0;   /* the claim's owner stays: test_retain_claim */
	p->have = p->ckpt_have = 1;
	p->ckpt_last_ok_round = 4;
	/* writes never failed: no condition, no event */
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.conds[COND_CHECKPOINT_FAILING].set, 0);
	assert_int_equal(f.out.nacts, 0);
	rc_output_release(&f.out);

	p->ckpt_failing = 1;
	p->ckpt_failures = 2;
	snprintf(p->ckpt_error, sizeof(p->ckpt_error), "cannot save checkpoint: "
		 "cannot write 'ck/x.tmp.1': No space left on device");
	reconcile(&f.in, f.mem, &f.out);
	c = &f.out.conds[COND_CHECKPOINT_FAILING];
	assert_int_equal(c->set, 1);
	assert_int_equal(c->status, 1);
	assert_string_equal(c->reason, "CheckpointWriteFailed");
	assert_string_equal(c->message, "syncer: cannot save checkpoint: cannot "
			    "write 'ck/x.tmp.1': No space left on device (2 failed; "
			    "the last checkpoint is of round 4)");
	assert_string_equal(cond_type_name(COND_CHECKPOINT_FAILING),
			    "CheckpointFailing");
	assert_non_null(find_event(&f.out, "CheckpointFailing"));
	assert_int_equal(find_event(&f.out, "CheckpointFailing")->warning, 1);
	assert_int_equal(f.out.phase, PHASE_RUNNING);   /* the job runs on */
	/* still failing on the next pass: no second event */
	memcpy(f.in.conds, f.out.conds, sizeof(f.in.conds));
	rc_output_release(&f.out);
	p->ckpt_failures = 3;
	reconcile(&f.in, f.mem, &f.out);
	assert_null(find_event(&f.out, "CheckpointFailing"));
	assert_non_null(strstr(f.out.conds[COND_CHECKPOINT_FAILING].message,
			       "(3 failed;"));
	memcpy(f.in.conds, f.out.conds, sizeof(f.in.conds));
	rc_output_release(&f.out);

	/* a write succeeds again */
	p->ckpt_failing = 0;
	p->ckpt_last_ok_round = 9;
	p->ckpt_error[0] = '\0';
	f.in.now = NOW + 60;
	reconcile(&f.in, f.mem, &f.out);
	c = &f.out.conds[COND_CHECKPOINT_FAILING];
	assert_int_equal(c->set, 1);
	assert_int_equal(c->status, 0);
	assert_string_equal(c->reason, "CheckpointWritten");
	assert_string_equal(c->message, "checkpoint of round 9 written");
	assert_string_equal(c->time, "2027-01-15T08:01:00Z");
	assert_int_equal(find_event(&f.out, "CheckpointWritten")->warning, 0);
	rc_output_release(&f.out);

	/* an operator restarted before reading the syncer keeps the condition */
	memcpy(f.in.conds, f.out.conds, sizeof(f.in.conds));
	f.in.conds[COND_CHECKPOINT_FAILING].status = 1;
	p->ckpt_have = 0;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.conds[COND_CHECKPOINT_FAILING].status, 1);
	rc_output_release(&f.out);
}

/*
 * ModelStartedOver: a syncer that started from the seed although rounds
 * were handed out before (/status checkpoint.resumed_from "seed") sets
 * it with one Warning Event; a later syncer resumed from a checkpoint
 * sets it False; a syncer that does not say leaves it as it was.
 */
static void test_model_started_over_condition(void **state)
{
	struct fx f;
	struct obs_progress *p = &f.in.progress;
	const struct condition *c;

	(void)state;
	setup_fx(&f, 2);
	running(&f);
	f.in.retain = 0;
	p->have = p->ckpt_have = 1;
	p->started_over = 0;     /* a new job */
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.conds[COND_MODEL_STARTED_OVER].set, 0);
	assert_null(find_event(&f.out, "ModelStartedOver"));
	rc_output_release(&f.out);

	p->started_over = 1;
	reconcile(&f.in, f.mem, &f.out);
	c = &f.out.conds[COND_MODEL_STARTED_OVER];
	assert_int_equal(c->set, 1);
	assert_int_equal(c->status, 1);
	assert_string_equal(c->reason, "NoCheckpointLoaded");
	assert_string_equal(c->message, "syncer: no checkpoint loaded at its "
			    "start although rounds were handed out before: the "
			    "model started over from the seed");
	assert_string_equal(cond_type_name(COND_MODEL_STARTED_OVER),
			    "ModelStartedOver");
	assert_int_equal(find_event(&f.out, "ModelStartedOver")->warning, 1);
	assert_int_equal(f.out.phase, PHASE_RUNNING);   /* the job runs on */
	memcpy(f.in.conds, f.out.conds, sizeof(f.in.conds));
	rc_output_release(&f.out);
	/* the next pass: still set, no second event */
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.conds[COND_MODEL_STARTED_OVER].status, 1);
	assert_null(find_event(&f.out, "ModelStartedOver"));
	memcpy(f.in.conds, f.out.conds, sizeof(f.in.conds));
	rc_output_release(&f.out);
	/* a syncer that does not say: as it was */
	p->started_over = -1;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.conds[COND_MODEL_STARTED_OVER].status, 1);
	memcpy(f.in.conds, f.out.conds, sizeof(f.in.conds));
	rc_output_release(&f.out);
	/* a later syncer resumed from a checkpoint */
	p->started_over = 0;
	reconcile(&f.in, f.mem, &f.out);
	c = &f.out.conds[COND_MODEL_STARTED_OVER];
	assert_int_equal(c->set, 1);
	assert_int_equal(c->status, 0);
	assert_string_equal(c->reason, "ResumedFromCheckpoint");
	rc_output_release(&f.out);
}

static void test_deleted_learner_only_it_recreated(void **state)
{
	struct fx f;

	(void)state;
	setup_fx(&f, 4);
	running(&f);
	f.pods[2] = f.pods[3];   /* learner 2 is gone */
	f.in.npods = 3;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 1);
	assert_int_equal(find(&f.out, ACT_APPLY_LEARNER)->index, 2);
	assert_int_equal(count(&f.out, ACT_DELETE_LEARNER), 0);
	assert_int_equal(count(&f.out, ACT_APPLY_SYNCER), 0);
	assert_int_equal(f.mem[2].restarts, 1);
	assert_int_equal(f.mem[0].restarts + f.mem[1].restarts + f.mem[3].restarts, 0);
	assert_non_null(find_event(&f.out, "LearnerRecreated"));
	assert_string_equal(find_event(&f.out, "LearnerRecreated")->message,
			    "learner 2 recreated (restart 1, backoff 0s)");
	/* still Running: 3 ready ≥ quorum 1 */
	assert_int_equal(f.out.phase, PHASE_RUNNING);
	rc_output_release(&f.out);
}

/*
 * Chaos deletes learner 0. Its pod is Terminating first: nothing may
 * take its name until the cache has lost it (the DELETED event).
 */
static void test_terminating_pod_blocks_replacement(void **state)
{
	struct fx f;

	(void)state;
	setup_fx(&f, 4);
	running(&f);
	f.pods[0].deleting = 1;
	f.pods[0].ready = 0;
	for (int k = 0; k < 3; k++) {
		f.in.now = NOW + k * 10;
		reconcile(&f.in, f.mem, &f.out);
		assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 0);
		assert_int_equal(count(&f.out, ACT_DELETE_LEARNER), 0);
		rc_output_release(&f.out);
	}
	f.pods[0] = f.pods[3];   /* DELETED */
	f.in.npods = 3;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 1);
	assert_int_equal(find(&f.out, ACT_APPLY_LEARNER)->index, 0);
	assert_int_equal(find(&f.out, ACT_APPLY_LEARNER)->recreate, 1);
	rc_output_release(&f.out);
}

/*
 * The replacement is deleted before any pass saw it (a stale delete of
 * the old name: with kwok, the fake kubelet's own delete of the pod that
 * chaos had just force-deleted). The cache reports the uid the apply
 * answered with as deleted: the learner is gone again and comes back
 * after its backoff, not after RC_EXPECT_SECONDS of waiting for a pod
 * that will never appear (the job stayed at 3/4 learners).
 */
/* A pod still Terminating 30 s past its grace period (a lost node) is
 * deleted with grace 0 and its uid; before that, a requeue for then. */
static void test_stuck_terminating_pod_force_deleted(void **state)
{
	struct fx f;
	const struct rc_action *a;

	(void)state;
	setup_fx(&f, 2);
	running(&f);
	f.pods[1].deleting = 1;
	f.pods[1].ready = 0;
	f.pods[1].delete_at = NOW - 10;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_DELETE_LEARNER), 0);
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 0);
	assert_true(fabs(f.out.requeue_after - 20) < 1e-6);
	rc_output_release(&f.out);
	f.pods[1].delete_at = NOW - 31;
	reconcile(&f.in, f.mem, &f.out);
	assert_non_null(a = find(&f.out, ACT_DELETE_LEARNER));
	assert_int_equal(a->index, 1);
	assert_int_equal(a->force, 1);
	assert_string_equal(a->uid, "uid-1");
	assert_non_null(find_event(&f.out, "LearnerForceDeleted"));
	/* still not recreated while the name is held */
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 0);
	rc_output_release(&f.out);
}

static void test_replacement_deleted_unseen_is_recreated(void **state)
{
	struct fx f;

	(void)state;
	setup_fx(&f, 4);
	running(&f);
	f.pods[0] = f.pods[3];   /* learner 0 is gone */
	f.in.npods = 3;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 1);
	assert_int_equal(f.mem[0].restarts, 1);
	rc_output_release(&f.out);
	/* the operator writes down the uid its apply answered with */
	snprintf(f.mem[0].create_uid, sizeof(f.mem[0].create_uid), "uid-0b");

	/* not deleted: the apply is expected, nothing is sent again */
	f.in.now = NOW + 3;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 0);
	rc_output_release(&f.out);

	/* the cache saw uid-0b deleted: gone, backoff 1 s (second failure) */
	f.mem[0].create_gone = 1;
	f.in.now = NOW + 4;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 0);
	assert_true(f.out.requeue_after > 0.9 && f.out.requeue_after <= 1.0);
	assert_int_equal(f.mem[0].create_uid[0], '\0');
	rc_output_release(&f.out);
	f.in.now = NOW + 5.1;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 1);
	assert_int_equal(find(&f.out, ACT_APPLY_LEARNER)->index, 0);
	assert_int_equal(find(&f.out, ACT_APPLY_LEARNER)->recreate, 1);
	assert_int_equal(f.mem[0].restarts, 2);
	rc_output_release(&f.out);

	/* the new pod shows up: the expectation ends, nothing more */
	f.pods[3] = f.pods[0];
	f.pods[0].index = 0;
	snprintf(f.pods[0].uid, sizeof(f.pods[0].uid), "uid-0c");
	f.in.npods = 4;
	f.in.now = NOW + 6;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 0);
	assert_true(f.mem[0].create_sent == 0);
	rc_output_release(&f.out);
}

/* A learner that cannot start names its reason in PodsReady, once. */
static void test_pods_ready_names_the_reason(void **state)
{
	struct fx f;
	const struct rc_action *ev;

	(void)state;
	setup_fx(&f, 4);
	running(&f);
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.conds[COND_PODS_READY].status, 1);
	assert_string_equal(f.out.conds[COND_PODS_READY].reason, "AllPodsReady");
	rc_output_release(&f.out);

	f.pods[2].ready = 0;
	f.pods[2].state = POD_PENDING;
	snprintf(f.pods[2].reason, sizeof(f.pods[2].reason), "ImagePullBackOff");
	snprintf(f.pods[2].message, sizeof(f.pods[2].message),
		 "container learner: Back-off pulling image \"nope:1\"");
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.conds[COND_PODS_READY].set, 1);
	assert_int_equal(f.out.conds[COND_PODS_READY].status, 0);
	assert_string_equal(f.out.conds[COND_PODS_READY].reason, "ImagePullBackOff");
	assert_string_equal(f.out.conds[COND_PODS_READY].message,
			    "learner 2: container learner: Back-off pulling image \"nope:1\"");
	assert_non_null(ev = find_event(&f.out, "ImagePullBackOff"));
	assert_int_equal(ev->warning, 1);
	assert_int_equal(f.out.phase, PHASE_RUNNING);   /* 3 ready, quorum 1 */
	/* the next pass keeps it and says it once */
	memcpy(f.in.conds, f.out.conds, sizeof(f.in.conds));
	rc_output_release(&f.out);
	reconcile(&f.in, f.mem, &f.out);
	assert_string_equal(f.out.conds[COND_PODS_READY].reason, "ImagePullBackOff");
	assert_null(find_event(&f.out, "ImagePullBackOff"));
	rc_output_release(&f.out);

	/* the syncer's pod is unschedulable (its claim unbound): it comes first */
	f.in.syncer_ready = 0;
	f.in.syncer_reason = "Unschedulable";
	f.in.syncer_message = "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims.";
	reconcile(&f.in, f.mem, &f.out);
	assert_string_equal(f.out.conds[COND_PODS_READY].reason, "Unschedulable");
	assert_string_equal(f.out.conds[COND_PODS_READY].message,
			    "syncer: 0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims.");
	assert_non_null(find_event(&f.out, "Unschedulable"));
	rc_output_release(&f.out);

	/* a pod still being made is no problem, just not ready */
	f.in.syncer_ready = 1;
	f.in.syncer_reason = NULL;
	f.pods[2].reason[0] = '\0';
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.conds[COND_PODS_READY].status, 0);
	assert_string_equal(f.out.conds[COND_PODS_READY].reason, "PodsStarting");
	assert_string_equal(f.out.conds[COND_PODS_READY].message,
			    "3/4 learners ready, syncer ready");
	rc_output_release(&f.out);
}

/* A pod still starting is PodsStarting until pendingTimeoutSeconds, then
 * named with its own reason and how long it waited. */
static void test_pending_past_timeout_named(void **state)
{
	struct fx f;
	const struct rc_action *ev;

	(void)state;
	setup_fx(&f, 2);
	running(&f);
	f.in.pending_timeout = 120;
	f.pods[1].ready = 0;
	f.pods[1].ready_since = 0;
	f.pods[1].state = POD_PENDING;
	f.pods[1].starting = 1;
	f.pods[1].created = NOW - 100;
	snprintf(f.pods[1].reason, sizeof(f.pods[1].reason), "ContainerCreating");
	snprintf(f.pods[1].message, sizeof(f.pods[1].message),
		 "container learner: ContainerCreating");
	reconcile(&f.in, f.mem, &f.out);
	assert_string_equal(f.out.conds[COND_PODS_READY].reason, "PodsStarting");
	assert_string_equal(f.out.conds[COND_PODS_READY].message,
			    "1/2 learners ready, syncer ready");
	assert_null(find_event(&f.out, "ContainerCreating"));
	/* a pass is asked for when the timeout is due: 20 s on */
	assert_true(fabs(f.out.requeue_after - 20.0) < 1e-9);
	memcpy(f.in.conds, f.out.conds, sizeof(f.in.conds));
	rc_output_release(&f.out);

	f.in.now = NOW + 30;   /* 130 s since its creation */
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.conds[COND_PODS_READY].status, 0);
	assert_string_equal(f.out.conds[COND_PODS_READY].reason, "ContainerCreating");
	assert_string_equal(f.out.conds[COND_PODS_READY].message,
			    "learner 1: pending since 2027-01-15T07:58:20Z, more than "
			    "pendingTimeoutSeconds 120: container learner: ContainerCreating");
	assert_non_null(ev = find_event(&f.out, "ContainerCreating"));
	assert_int_equal(ev->warning, 1);
	assert_int_equal(f.out.phase, PHASE_RUNNING);   /* not a failure */
	memcpy(f.in.conds, f.out.conds, sizeof(f.in.conds));
	rc_output_release(&f.out);
	/* a later pass: the same condition (no status write), no Event again */
	f.in.now = NOW + 47;
	reconcile(&f.in, f.mem, &f.out);
	assert_string_equal(f.out.conds[COND_PODS_READY].message, f.in.conds[COND_PODS_READY].message);
	assert_string_equal(f.out.conds[COND_PODS_READY].time, f.in.conds[COND_PODS_READY].time);
	assert_null(find_event(&f.out, "ContainerCreating"));
	rc_output_release(&f.out);
	f.in.now = NOW + 30;

	/* its pull then fails: the new reason at once, without the wait */
	f.pods[1].starting = 0;
	snprintf(f.pods[1].reason, sizeof(f.pods[1].reason), "ImagePullBackOff");
	snprintf(f.pods[1].message, sizeof(f.pods[1].message),
		 "container learner: Back-off pulling image \"nope:1\"");
	reconcile(&f.in, f.mem, &f.out);
	assert_string_equal(f.out.conds[COND_PODS_READY].reason, "ImagePullBackOff");
	assert_string_equal(f.out.conds[COND_PODS_READY].message,
			    "learner 1: container learner: Back-off pulling image \"nope:1\"");
	assert_non_null(find_event(&f.out, "ImagePullBackOff"));
	rc_output_release(&f.out);

	/* the syncer's pod on a node that never reports, 0 s timeout: at once */
	f.pods[1].reason[0] = '\0';
	f.in.pending_timeout = 0;
	f.in.syncer_ready = 0;
	f.in.syncer_reason = "Pending";
	f.in.syncer_message = "on node n1, no container started";
	f.in.syncer_starting = 1;
	f.in.syncer_created = NOW + 25;
	reconcile(&f.in, f.mem, &f.out);
	assert_string_equal(f.out.conds[COND_PODS_READY].reason, "Pending");
	assert_string_equal(f.out.conds[COND_PODS_READY].message,
			    "syncer: pending since 2027-01-15T08:00:25Z, more than "
			    "pendingTimeoutSeconds 0: on node n1, no container started");
	rc_output_release(&f.out);
	/* ... and with the default 300 s, not yet */
	f.in.pending_timeout = 300;
	reconcile(&f.in, f.mem, &f.out);
	assert_string_equal(f.out.conds[COND_PODS_READY].reason, "PodsStarting");
	assert_true(fabs(f.out.requeue_after - 295.0) < 1e-9);
	rc_output_release(&f.out);
}

static void check_starting(const char *pod_json, int want, const char *reason,
			   const char *message)
{
	json_t *pod = json_loads(pod_json, 0, NULL);
	char r[64], m[256];

	assert_non_null(pod);
	assert_int_equal(podcheck_starting(pod, r, sizeof(r), m, sizeof(m)), want);
	assert_string_equal(r, reason);
	assert_string_equal(m, message);
	json_decref(pod);
}

static void test_podcheck_starting(void **state)
{
	(void)state;
	check_starting("{\"status\":{\"phase\":\"Pending\",\"initContainerStatuses\":["
		       "{\"name\":\"sidecar\",\"state\":{\"waiting\":{\"reason\":"
		       "\"PodInitializing\"}}}],\"containerStatuses\":[{\"name\":\"learner\","
		       "\"state\":{\"waiting\":{\"reason\":\"ContainerCreating\"}}}]}}",
		       1, "PodInitializing", "container sidecar: PodInitializing");
	check_starting("{\"status\":{\"phase\":\"Pending\",\"containerStatuses\":[{\"name\":"
		       "\"syncer\",\"state\":{\"waiting\":{\"reason\":\"ContainerCreating\","
		       "\"message\":\"pulling image\"}}}]}}",
		       1, "ContainerCreating", "container syncer: pulling image");
	check_starting("{\"spec\":{\"nodeName\":\"n1\"},\"status\":{\"phase\":\"Pending\","
		       "\"conditions\":[{\"type\":\"PodScheduled\",\"status\":\"True\"}]}}",
		       1, "Pending", "on node n1, no container started");
	check_starting("{\"spec\":{\"schedulerName\":\"none\"},\"status\":{\"phase\":\"Pending\"}}",
		       1, "Pending", "not scheduled to a node");
	check_starting("{}", 1, "Pending", "not scheduled to a node");
	/* a problem is podcheck_blocked's, not a start */
	check_starting("{\"status\":{\"phase\":\"Pending\",\"containerStatuses\":[{\"name\":"
		       "\"learner\",\"state\":{\"waiting\":{\"reason\":\"ErrImagePull\"}}}]}}",
		       0, "", "");
	check_starting("{\"status\":{\"phase\":\"Pending\",\"conditions\":[{\"type\":"
		       "\"PodScheduled\",\"status\":\"False\",\"reason\":\"Unschedulable\"}]}}",
		       0, "", "");
	check_starting("{\"status\":{\"phase\":\"Running\"}}", 0, "", "");
	check_starting("{\"metadata\":{\"deletionTimestamp\":\"2026-01-01T00:00:00Z\"},"
		       "\"status\":{\"phase\":\"Pending\"}}", 0, "", "");
}

static void check_blocked(const char *pod_json, int want, const char *reason,
			  const char *message)
{
	json_t *pod = json_loads(pod_json, 0, NULL);
	char r[64], m[256];

	assert_non_null(pod);
	assert_int_equal(podcheck_blocked(pod, r, sizeof(r), m, sizeof(m)), want);
	assert_string_equal(r, reason);
	assert_string_equal(m, message);
	json_decref(pod);
}

static void test_podcheck_reasons(void **state)
{
	(void)state;
	check_blocked("{\"status\":{\"phase\":\"Pending\",\"conditions\":[{\"type\":"
		      "\"PodScheduled\",\"status\":\"False\",\"reason\":\"Unschedulable\","
		      "\"message\":\"0/3 nodes are available\"}]}}",
		      1, "Unschedulable", "0/3 nodes are available");
	/* the sidecar still being made, the learner's image missing */
	check_blocked("{\"status\":{\"conditions\":[{\"type\":\"PodScheduled\",\"status\":\"True\"}],"
		      "\"initContainerStatuses\":[{\"name\":\"sidecar\",\"state\":{\"waiting\":"
		      "{\"reason\":\"PodInitializing\"}}}],"
		      "\"containerStatuses\":[{\"name\":\"learner\",\"state\":{\"waiting\":"
		      "{\"reason\":\"ErrImageNeverPull\",\"message\":\"image \\\"x:1\\\" is not present\"}}}]}}",
		      1, "ErrImageNeverPull", "container learner: image \"x:1\" is not present");
	check_blocked("{\"status\":{\"containerStatuses\":[{\"name\":\"learner\",\"state\":"
		      "{\"waiting\":{\"reason\":\"CrashLoopBackOff\"}}}]}}",
		      1, "CrashLoopBackOff", "container learner: CrashLoopBackOff");
	check_blocked("{\"status\":{\"containerStatuses\":[{\"name\":\"learner\",\"state\":"
		      "{\"waiting\":{\"reason\":\"ContainerCreating\"}}}]}}", 0, "", "");
	check_blocked("{\"status\":{\"phase\":\"Running\",\"containerStatuses\":[{\"name\":"
		      "\"learner\",\"state\":{\"running\":{}}}]}}", 0, "", "");
	check_blocked("{\"metadata\":{\"deletionTimestamp\":\"2026-01-01T00:00:00Z\"},"
		      "\"status\":{\"conditions\":[{\"type\":\"PodScheduled\",\"status\":\"False\"}]}}",
		      0, "", "");
	check_blocked("{}", 0, "", "");
}

/* How a pod ended: the cluster (a disruption) or its program (exit code). */
static void test_podcheck_disruptions(void **state)
{
	static const struct { const char *json; int disrupted, exit_code; } t[] = {
		{ "{\"status\":{\"phase\":\"Failed\",\"conditions\":[{\"type\":"
		  "\"DisruptionTarget\",\"status\":\"True\",\"reason\":"
		  "\"PreemptionByScheduler\"}]}}", 1, -1 },
		{ "{\"status\":{\"conditions\":[{\"type\":\"DisruptionTarget\","
		  "\"status\":\"False\"}]}}", 0, -1 },
		{ "{\"status\":{\"phase\":\"Failed\",\"reason\":\"Evicted\","
		  "\"message\":\"The node was low on resource: memory.\"}}", 1, -1 },
		{ "{\"status\":{\"phase\":\"Failed\",\"reason\":\"NodeShutdown\"}}", 1, -1 },
		{ "{\"status\":{\"phase\":\"Failed\",\"containerStatuses\":["
		  "{\"name\":\"sidecar\",\"state\":{\"terminated\":{\"exitCode\":0}}},"
		  "{\"name\":\"learner\",\"state\":{\"terminated\":{\"exitCode\":2,"
		  "\"reason\":\"Error\"}}}]}}", 0, 2 },
		{ "{\"status\":{\"phase\":\"Failed\",\"reason\":\"OOMKilled\"}}", 0, -1 },
		{ "{}", 0, -1 },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		json_t *pod = json_loads(t[i].json, 0, NULL);

		assert_non_null(pod);
		if (podcheck_disrupted(pod) != t[i].disrupted ||
		    podcheck_exit_code(pod, "learner") != t[i].exit_code)
			fail_msg("pod %zu: disrupted %d exit %d, expected %d %d", i,
				 podcheck_disrupted(pod), podcheck_exit_code(pod, "learner"),
				 t[i].disrupted, t[i].exit_code);
		json_decref(pod);
	}
}

static void test_backoff_grows_with_repeated_failures(void **state)
{
	struct fx f;
	double t;

	(void)state;
	setup_fx(&f, 2);
	running(&f);
	f.in.npods = 1;   /* learner 1 missing */
	/* first loss: immediate */
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 1);
	rc_output_release(&f.out);
	/* it came back, was not stable, and is gone again: 1 s */
	f.mem[1].create_sent = 0;
	f.in.now = NOW + 2;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 0);
	assert_true(fabs(f.out.requeue_after - 1.0) < 1e-9);
	assert_int_equal(f.mem[1].fails, 2);
	rc_output_release(&f.out);
	f.in.now = NOW + 3;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 1);
	assert_int_equal(f.mem[1].restarts, 2);
	rc_output_release(&f.out);
	/* third: 2 s, fourth: 4 s */
	for (int k = 3, want = 2; k <= 4; k++, want *= 2) {
		f.mem[1].create_sent = 0;
		t = f.in.now = f.in.now + 1;
		reconcile(&f.in, f.mem, &f.out);
		assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 0);
		assert_true(fabs(f.out.requeue_after - want) < 1e-9);
		rc_output_release(&f.out);
		f.in.now = t + want;
		reconcile(&f.in, f.mem, &f.out);
		assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 1);
		rc_output_release(&f.out);
	}
	assert_int_equal(f.mem[1].restarts, 4);
	assert_int_equal(f.mem[0].restarts, 0);
	/* stable for 30 s: the backoff resets */
	f.pods[1].index = 1;
	f.pods[1].state = POD_RUNNING;
	f.pods[1].ready = 1;
	f.pods[1].ready_since = f.in.now;
	f.in.npods = 2;
	f.in.now += RC_STABLE_SECONDS;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.mem[1].fails, 0);
	rc_output_release(&f.out);
	assert_true(rc_backoff(0) == 0 && rc_backoff(1) == 0);
	assert_true(rc_backoff(2) == 1 && rc_backoff(5) == 8);
	assert_true(rc_backoff(40) == RC_BACKOFF_CAP);
}

/* A failed apply turns Created False; a learner seen before still counts. */
static void test_recreation_counted_after_create_failed(void **state)
{
	struct fx f;

	(void)state;
	setup_fx(&f, 2);
	running(&f);
	reconcile(&f.in, f.mem, &f.out);   /* both seen */
	rc_output_release(&f.out);
	cond_set(&f.in.conds[COND_CREATED], 0, "CreateFailed", "500", "t1");
	f.in.npods = 1;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 1);
	assert_true(find(&f.out, ACT_APPLY_LEARNER)->recreate);
	assert_int_equal(f.mem[1].restarts, 1);
	rc_output_release(&f.out);
}

static void test_failed_pod_deleted_with_uid(void **state)
{
	struct fx f;
	const struct rc_action *a;

	(void)state;
	setup_fx(&f, 3);
	running(&f);
	f.pods[1].state = POD_FAILED;
	f.pods[1].ready = 0;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_DELETE_LEARNER), 1);
	a = find(&f.out, ACT_DELETE_LEARNER);
	assert_int_equal(a->index, 1);
	assert_string_equal(a->uid, "uid-1");
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 0);
	assert_non_null(find_event(&f.out, "LearnerFailed"));
	assert_true(find_event(&f.out, "LearnerFailed")->warning);
	assert_int_equal(f.out.ready, 2);
	rc_output_release(&f.out);
	/* while it is being deleted: nothing more */
	f.pods[1].deleting = 1;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.nacts, 0);
	rc_output_release(&f.out);
}

static void test_below_quorum_is_restarting(void **state)
{
	struct fx f;

	(void)state;
	setup_fx(&f, 4);
	f.js.syncer.min_quorum = 3;
	running(&f);
	f.pods[0].ready = 0;
	f.pods[1].ready = 0;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.phase, PHASE_RESTARTING);
	assert_int_equal(f.out.conds[COND_RUNNING].status, 0);
	assert_string_equal(f.out.conds[COND_RUNNING].reason, "BelowQuorum");
	assert_string_equal(f.out.conds[COND_RUNNING].message,
			    "2/4 learners ready (quorum 3), syncer ready");
	rc_output_release(&f.out);
}

static void test_budget_done_succeeds_and_stays(void **state)
{
	struct fx f;

	(void)state;
	setup_fx(&f, 2);
	running(&f);
	f.in.progress.have = 1;
	f.in.progress.done = 1;
	f.in.progress.round = 120;
	f.in.progress.tokens = 5000;
	f.js.ttl_seconds_after_finished = 60;
	reconcile(&f.in, f.mem, &f.out);
	/* phase Succeeded, condition Complete as a batch/v1 Job has it */
	assert_int_equal(f.out.phase, PHASE_SUCCEEDED);
	assert_string_equal(job_phase_name(f.out.phase), "Succeeded");
	assert_string_equal(cond_type_name(COND_COMPLETE), "Complete");
	assert_int_equal(f.out.conds[COND_COMPLETE].set, 1);
	assert_int_equal(f.out.conds[COND_COMPLETE].status, 1);
	assert_int_equal(f.out.conds[COND_FAILED].set, 0);
	assert_string_equal(f.out.conds[COND_COMPLETE].reason, "BudgetReached");
	assert_string_equal(f.out.conds[COND_COMPLETE].message,
			    "the budget is reached (round 120, 5000 tokens)");
	assert_int_equal(f.out.conds[COND_RUNNING].status, 0);
	assert_int_equal(count(&f.out, ACT_DELETE_LEARNER), 2);   /* stop them */
	assert_int_equal(count(&f.out, ACT_DELETE_SYNCER), 1);
	assert_true(f.out.completion_time == NOW);
	assert_true(fabs(f.out.requeue_after - 60) < 1e-9);
	rc_output_release(&f.out);

	/* terminal stays terminal: children gone, nothing is recreated */
	f.in.pvc_owned = 0;   /* the claim kept past the job (trained) */
	f.in.phase = PHASE_SUCCEEDED;
	f.in.completion_time = NOW;
	f.in.npods = 0;
	f.in.statefulset = 0;
	f.in.configmap = 0;
	f.in.progress.done = 0;
	f.in.now = NOW + 30;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.phase, PHASE_SUCCEEDED);
	assert_int_equal(f.out.nacts, 0);
	assert_true(fabs(f.out.requeue_after - 30) < 1e-9);
	rc_output_release(&f.out);
	/* after the ttl: the job is deleted */
	f.in.now = NOW + 61;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_DELETE_JOB), 1);
	rc_output_release(&f.out);
}

static void test_all_learners_exit_zero_succeeds(void **state)
{
	struct fx f;

	(void)state;
	setup_fx(&f, 2);
	running(&f);
	f.pods[0].state = f.pods[1].state = POD_SUCCEEDED;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.phase, PHASE_SUCCEEDED);
	assert_string_equal(f.out.conds[COND_COMPLETE].reason, "LearnersCompleted");
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 0);
	assert_int_equal(count(&f.out, ACT_DELETE_LEARNER), 0);
	rc_output_release(&f.out);
}

static void test_backoff_limit_fails(void **state)
{
	struct fx f;

	(void)state;
	setup_fx(&f, 2);
	running(&f);
	f.in.backoff_limit = 3;
	/* recreations after deletions are not failures */
	f.mem[0].restarts = 9;
	f.mem[1].restarts = 9;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.phase, PHASE_RUNNING);
	rc_output_release(&f.out);
	f.mem[0].failures = 2;
	f.mem[1].failures = 2;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.phase, PHASE_FAILED);
	assert_string_equal(f.out.conds[COND_FAILED].reason, "BackoffLimitExceeded");
	assert_non_null(find_event(&f.out, "Failed"));
	assert_true(find_event(&f.out, "Failed")->warning);
	rc_output_release(&f.out);
}

/*
 * A learner pod that ends Failed counts once; one ended by a disruption
 * (DisruptionTarget, eviction) is recreated and never counted; a
 * learner's failures are forgotten after backoff_reset s ready.
 */
static void test_failures_not_disruptions_count(void **state)
{
	struct fx f;

	(void)state;
	setup_fx(&f, 2);
	running(&f);
	f.in.backoff_limit = 1;
	f.pods[0].state = POD_FAILED;
	f.pods[0].ready = 0;
	f.pods[0].disrupted = 1;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.mem[0].failures, 0);
	assert_non_null(find_event(&f.out, "LearnerDisrupted"));
	assert_int_equal(count(&f.out, ACT_DELETE_LEARNER), 1);
	rc_output_release(&f.out);

	f.pods[0].disrupted = 0;
	f.pods[0].exit_code = 3;
	snprintf(f.pods[0].uid, sizeof(f.pods[0].uid), "uid-0b");
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.mem[0].failures, 1);
	assert_non_null(strstr(find_event(&f.out, "LearnerFailed")->message, "exit code 3"));
	rc_output_release(&f.out);
	/* the same pod seen Failed again (its delete not yet in the cache) */
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.mem[0].failures, 1);
	assert_int_equal(f.out.phase, PHASE_RUNNING);
	rc_output_release(&f.out);
	/* a second pod's failure is counted, and passes backoffLimit 1 at
	 * the next pass (the failed pod's deletion brings one) */
	snprintf(f.pods[0].uid, sizeof(f.pods[0].uid), "uid-0c");
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.mem[0].failures, 2);
	rc_output_release(&f.out);
	f.pods[0].deleting = 1;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.phase, PHASE_FAILED);
	assert_string_equal(f.out.conds[COND_FAILED].reason, "BackoffLimitExceeded");
	assert_non_null(strstr(f.out.conds[COND_FAILED].message, "disruptions not counted"));
	rc_output_release(&f.out);

	/* healthy for backoff_reset: forgotten */
	setup_fx(&f, 2);
	running(&f);
	f.mem[1].failures = 2;
	f.pods[1].ready_since = NOW - 599;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.mem[1].failures, 2);
	assert_true(f.out.requeue_after > 0 && f.out.requeue_after <= 1.0);
	rc_output_release(&f.out);
	f.pods[1].ready_since = NOW - 600;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.mem[1].failures, 0);
	assert_non_null(find_event(&f.out, "BackoffReset"));
	rc_output_release(&f.out);
}

/* spec.failurePolicy.rules: the first rule matching the exit code. */
static void test_exit_code_rules(void **state)
{
	static const struct exit_rule rules[] = {
		{ EXIT_IGNORE, 0, 2, { 143, 137 } },
		{ EXIT_FAIL_JOB, 0, 1, { 42 } },
		{ EXIT_COUNT, 1, 1, { 0 } },
	};
	struct fx f;

	(void)state;
	setup_fx(&f, 2);
	running(&f);
	f.in.exit_rules = rules;
	f.in.nexit_rules = 3;
	f.pods[0].state = POD_FAILED;
	f.pods[0].ready = 0;
	f.pods[0].exit_code = 137;   /* ignored */
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.mem[0].failures, 0);
	assert_non_null(find_event(&f.out, "LearnerFailureIgnored"));
	assert_int_equal(f.out.phase, PHASE_RUNNING);
	rc_output_release(&f.out);
	snprintf(f.pods[0].uid, sizeof(f.pods[0].uid), "uid-0b");
	f.pods[0].exit_code = 1;     /* counted (NotIn [0]) */
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.mem[0].failures, 1);
	rc_output_release(&f.out);
	snprintf(f.pods[0].uid, sizeof(f.pods[0].uid), "uid-0c");
	f.pods[0].exit_code = -1;    /* unknown: no rule, counted */
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.mem[0].failures, 2);
	rc_output_release(&f.out);
	snprintf(f.pods[1].uid, sizeof(f.pods[1].uid), "uid-1b");
	f.pods[1].state = POD_FAILED;
	f.pods[1].exit_code = 42;    /* fails the job at once */
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.phase, PHASE_FAILED);
	assert_string_equal(f.out.conds[COND_FAILED].reason, "PodFailurePolicy");
	assert_non_null(strstr(f.out.conds[COND_FAILED].message, "learner 1 exited with code 42"));
	assert_int_equal(count(&f.out, ACT_DELETE_SYNCER), 1);
	rc_output_release(&f.out);
}

/* activeDeadlineSeconds from startTime, else from creation; not while
 * suspended; a requeue at the deadline. */
static void test_active_deadline(void **state)
{
	struct fx f;

	(void)state;
	setup_fx(&f, 2);
	running(&f);
	f.in.active_deadline = 150;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.phase, PHASE_RUNNING);
	assert_true(fabs(f.out.requeue_after - 50) < 1e-6);
	rc_output_release(&f.out);
	f.in.now = NOW + 50;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.phase, PHASE_FAILED);
	assert_string_equal(f.out.conds[COND_FAILED].reason, "DeadlineExceeded");
	assert_int_equal(count(&f.out, ACT_DELETE_SYNCER), 1);
	rc_output_release(&f.out);

	/* never ran: counted from creation */
	setup_fx(&f, 2);
	f.in.active_deadline = 10;
	f.in.created_time = NOW - 11;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.phase, PHASE_FAILED);
	rc_output_release(&f.out);
	/* suspended: not timed out */
	setup_fx(&f, 2);
	f.js.suspend = 1;
	f.in.active_deadline = 10;
	f.in.created_time = NOW - 11;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.phase, PHASE_SUSPENDED);
	rc_output_release(&f.out);
}

static void test_syncer_crash_loop_fails(void **state)
{
	struct fx f;

	(void)state;
	setup_fx(&f, 2);
	running(&f);
	f.in.syncer_restart_limit = 3;
	f.in.syncer_restarts = 3;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.phase, PHASE_RUNNING);
	rc_output_release(&f.out);
	f.in.syncer_restarts = 4;
	f.in.syncer_last_exit = "OOMKilled, exit code 137";
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.phase, PHASE_FAILED);
	assert_string_equal(f.out.conds[COND_FAILED].reason, "SyncerCrashLooping");
	assert_non_null(strstr(f.out.conds[COND_FAILED].message, "OOMKilled, exit code 137"));
	assert_non_null(strstr(f.out.conds[COND_FAILED].message, "4 times within 600 s"));
	rc_output_release(&f.out);
}

/*
 * The checkpoint claim outlives the job (docs/operator.md, "Model
 * lifecycle"): retain unset and nothing trained keeps the owner; a
 * completed round or a checkpoint drops it (an apply without owner and
 * an Event), terminal phases too; retain true drops it from the start,
 * retain false keeps it; a claim of the user's is left alone.
 */
static void test_retain_claim(void **state)
{
	struct fx f;
	const struct rc_action *a;

	(void)state;
	setup_fx(&f, 2);
	running(&f);
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_APPLY_PVC), 0);
	rc_output_release(&f.out);
	f.in.progress.have = 1;
	f.in.progress.ckpt_last_ok_round = -1;
	f.in.progress.round = 3;
	reconcile(&f.in, f.mem, &f.out);
	assert_non_null(a = find(&f.out, ACT_APPLY_PVC));
	assert_int_equal(a->retain, 1);
	assert_non_null(find_event(&f.out, "CheckpointsRetained"));
	rc_output_release(&f.out);
	f.in.pvc_owned = 0;   /* the cache caught up */
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_APPLY_PVC), 0);
	rc_output_release(&f.out);
	/* a finished job whose claim still has its owner */
	f.in.pvc_owned = 1;
	f.in.phase = PHASE_SUCCEEDED;
	f.in.completion_time = NOW;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_APPLY_PVC), 1);
	rc_output_release(&f.out);
	/* explicit false: owned whatever was trained */
	f.in.retain = 0;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_APPLY_PVC), 0);
	rc_output_release(&f.out);

	/* explicit true: the first apply has no owner */
	setup_fx(&f, 2);
	f.in.retain = 1;
	reconcile(&f.in, f.mem, &f.out);
	assert_non_null(a = find(&f.out, ACT_APPLY_PVC));
	assert_int_equal(a->retain, 1);
	rc_output_release(&f.out);
	/* the user's claim (want_pvc 0): nothing */
	setup_fx(&f, 2);
	running(&f);
	f.in.want_pvc = 0;
	f.in.pvc = 0;
	f.in.retain = 1;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_APPLY_PVC), 0);
	rc_output_release(&f.out);
}

static void test_invalid_spec_fails(void **state)
{
	struct fx f;

	(void)state;
	setup_fx(&f, 2);
	f.in.spec_error = 1;
	f.in.spec_error_msg = "spec.syncer.minQuorum: 5 is more than spec.learners.replicas (2)";
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.phase, PHASE_FAILED);
	assert_string_equal(f.out.conds[COND_FAILED].reason, "InvalidSpec");
	assert_string_equal(f.out.conds[COND_FAILED].message, f.in.spec_error_msg);
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 0);
	assert_int_equal(count(&f.out, ACT_APPLY_SYNCER), 0);
	rc_output_release(&f.out);
}

static void test_suspend_and_resume(void **state)
{
	struct fx f;

	(void)state;
	setup_fx(&f, 3);
	running(&f);
	f.js.suspend = 1;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.phase, PHASE_SUSPENDED);
	assert_int_equal(count(&f.out, ACT_DELETE_LEARNER), 3);
	assert_int_equal(count(&f.out, ACT_DELETE_SYNCER), 1);
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 0);
	assert_int_equal(f.out.conds[COND_SUSPENDED].status, 1);
	assert_non_null(find_event(&f.out, "Suspended"));
	rc_output_release(&f.out);

	/* suspended, children gone: quiet */
	f.in.phase = PHASE_SUSPENDED;
	f.in.conds[COND_SUSPENDED] = f.out.conds[COND_SUSPENDED];
	f.in.npods = 0;
	f.in.statefulset = 0;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.nacts, 0);
	rc_output_release(&f.out);

	/* resume: everything comes back, not counted as restarts */
	f.js.suspend = 0;
	reconcile(&f.in, f.mem, &f.out);
	assert_non_null(find_event(&f.out, "Resumed"));
	assert_int_equal(count(&f.out, ACT_APPLY_SYNCER), 1);
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 3);
	assert_int_equal(f.mem[0].restarts + f.mem[1].restarts + f.mem[2].restarts, 0);
	assert_int_equal(f.out.conds[COND_SUSPENDED].status, 0);
	assert_string_equal(f.out.conds[COND_SUSPENDED].reason, "JobResumed");
	assert_int_equal(f.out.phase, PHASE_RESTARTING);   /* it had started */
	rc_output_release(&f.out);
}

/* A policy deleted under a running job comes back, alone; nothing else
 * moves and the job stays Running. */
static void test_missing_networkpolicy_is_reapplied(void **state)
{
	struct fx f;

	(void)state;
	setup_fx(&f, 2);
	running(&f);
	f.in.netpol = 0;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.nacts, 1);
	assert_int_equal(count(&f.out, ACT_APPLY_NETPOL), 1);
	assert_int_equal(f.out.phase, PHASE_RUNNING);
	assert_int_equal(f.out.conds[COND_CREATED].status, 1);
	rc_output_release(&f.out);
	/* a new job is not Created until its policy exists */
	setup_fx(&f, 1);
	f.in.configmap = f.in.service = f.in.pvc = f.in.statefulset = 1;
	f.in.tls = 1;
	f.pods[0].index = 0;
	f.in.npods = 1;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.conds[COND_CREATED].status, 0);
	assert_int_equal(count(&f.out, ACT_APPLY_NETPOL), 1);
	rc_output_release(&f.out);
	f.in.netpol = 1;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.conds[COND_CREATED].status, 1);
	assert_int_equal(count(&f.out, ACT_APPLY_NETPOL), 0);
	rc_output_release(&f.out);
}

/*
 * <job>-tls is created, never applied: once when the operator does not
 * know it exists (a new job, or after a restart: the 409 then tells), and
 * with the syncer's StatefulSet; always before any pod that mounts it.
 */
static void test_tls_secret_created_before_pods(void **state)
{
	struct fx f;

	(void)state;
	setup_fx(&f, 3);
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_CREATE_TLS), 1);
	assert_true(find(&f.out, ACT_CREATE_TLS) < find(&f.out, ACT_APPLY_SYNCER));
	assert_true(find(&f.out, ACT_CREATE_TLS) < find(&f.out, ACT_APPLY_LEARNER));
	rc_output_release(&f.out);
	/* a running job after an operator restart: one create, nothing else */
	setup_fx(&f, 3);
	running(&f);
	f.in.tls = 0;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.nacts, 1);
	assert_int_equal(count(&f.out, ACT_CREATE_TLS), 1);
	assert_int_equal(f.out.conds[COND_CREATED].status, 1);
	assert_int_equal(f.out.phase, PHASE_RUNNING);
	rc_output_release(&f.out);
	/* known to exist: a recreated learner does not make another */
	f.in.tls = 1;
	f.in.npods = 2;
	f.mem[2].seen = 1;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 1);
	assert_int_equal(count(&f.out, ACT_CREATE_TLS), 0);
	rc_output_release(&f.out);
	/* the StatefulSet made again (as after a resume): the Secret too */
	setup_fx(&f, 3);
	running(&f);
	f.in.statefulset = 0;
	f.in.syncer_ready = 0;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_CREATE_TLS), 1);
	assert_true(find(&f.out, ACT_CREATE_TLS) < find(&f.out, ACT_APPLY_SYNCER));
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
	/* a new job is Created only once its Secret is known */
	setup_fx(&f, 1);
	f.in.configmap = f.in.service = f.in.pvc = f.in.statefulset = f.in.netpol = 1;
	f.pods[0].index = 0;
	f.in.npods = 1;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.conds[COND_CREATED].status, 0);
	rc_output_release(&f.out);
}

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

static void test_deleting_job_does_nothing(void **state)
{
	struct fx f;

	(void)state;
	setup_fx(&f, 2);
	f.in.deleting = 1;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.nacts, 0);
	rc_output_release(&f.out);
}

static void test_stray_pod_index_deleted(void **state)
{
	struct fx f;

	(void)state;
	setup_fx(&f, 2);
	running(&f);
	f.pods[2].index = 5;   /* replicas were 6 once */
	snprintf(f.pods[2].uid, sizeof(f.pods[2].uid), "stray");
	f.pods[2].state = POD_RUNNING;
	f.in.npods = 3;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_DELETE_LEARNER), 1);
	assert_string_equal(find(&f.out, ACT_DELETE_LEARNER)->uid, "stray");
	assert_int_equal(f.out.ready, 2);
	rc_output_release(&f.out);
}

static void test_condition_time_kept_when_unchanged(void **state)
{
	struct condition c;

	(void)state;
	memset(&c, 0, sizeof(c));
	cond_set(&c, 1, "A", "m1", "2026-01-01T00:00:00Z");
	cond_set(&c, 1, "B", "m2", "2026-01-01T00:05:00Z");
	assert_string_equal(c.time, "2026-01-01T00:00:00Z");
	assert_string_equal(c.reason, "B");
	cond_set(&c, 0, "C", "m3", "2026-01-01T00:09:00Z");
	assert_string_equal(c.time, "2026-01-01T00:09:00Z");
	assert_string_equal(job_phase_name(job_phase_parse("Restarting")), "Restarting");
	assert_int_equal(job_phase_parse("bogus"), PHASE_PENDING);
	assert_int_equal(job_phase_parse(NULL), PHASE_PENDING);
}

/* ---- children ------------------------------------------------------- */

static json_t *sample_job(void)
{
	return json_loads(
		"{\"apiVersion\":\"ddiloco.io/v1alpha1\",\"kind\":\"DecoupledTrainingJob\","
		"\"metadata\":{\"name\":\"demo\",\"namespace\":\"team\",\"uid\":\"u-1\","
		" \"resourceVersion\":\"42\",\"managedFields\":[]},"
		"\"spec\":{\"backoffLimit\":5,"
		" \"learners\":{\"replicas\":2,\"image\":\"ddiloco:test\","
		"  \"imagePullPolicy\":\"Never\",\"nodeSelector\":{\"pool\":\"a\"},"
		"  \"tolerations\":[{\"key\":\"kwok\",\"operator\":\"Exists\"}],"
		"  \"resources\":{\"cpu\":\"2\",\"memory\":\"1Gi\"}},"
		" \"data\":{\"path\":\"/data/x.txt\",\"claimName\":\"corpus\",\"mountPath\":\"/data\"},"
		" \"syncer\":{\"storage\":\"2Gi\",\"port\":7070,\"httpPort\":7071}},"
		"\"status\":{\"phase\":\"Running\"}}", 0, NULL);
}

/*
 * The sample job as the reconciler builds children from it: the object,
 * its core and the core's text (the ConfigMap's job.json), the spec parsed
 * from that text, and a child_ctx over them with the operator in
 * operator_ns. c points into the struct: keep it where it was opened.
 */
struct sample {
	json_t *job, *core;
	char *txt;
	struct job_spec js;
	struct child_ctx c;
};

static void sample_open(struct sample *s, const char *operator_ns)
{
	struct err e;

	s->job = sample_job();
	s->core = job_core(s->job);
	s->txt = json_dumps(s->core, JSON_COMPACT);
	assert_int_equal(jobspec_parse(s->txt, strlen(s->txt), "demo", &s->js, &e), 0);
	s->c = (struct child_ctx){ "demo", "team", "u-1", &s->js,
				   json_object_get(s->job, "spec"), s->txt, operator_ns, 0,
				   json_object_get(json_object_get(s->job, "metadata"), "labels") };
}

static void sample_close(struct sample *s)
{
	free(s->txt);
	json_decref(s->core);
	json_decref(s->job);
}

static const char *path_str(json_t *o, const char *path)
{
	char buf[256], *save, *tok;
	json_t *cur = o;

	snprintf(buf, sizeof(buf), "%s", path);
	for (tok = strtok_r(buf, ".", &save); tok && cur; tok = strtok_r(NULL, ".", &save)) {
		if (*tok >= '0' && *tok <= '9')
			cur = json_array_get(cur, (size_t)atoi(tok));
		else
			cur = json_object_get(cur, tok);
	}
	return json_string_value(cur);
}

static void test_job_core_strips_operator_fields(void **state)
{
	json_t *job = sample_job(), *core = job_core(job);
	struct job_spec js;
	struct err e;
	char *txt = json_dumps(core, JSON_COMPACT);

	(void)state;
	assert_null(json_object_get(json_object_get(core, "spec"), "backoffLimit"));
	assert_null(json_object_get(json_object_get(json_object_get(core, "spec"),
						    "learners"), "nodeSelector"));
	assert_null(json_object_get(core, "status"));
	assert_null(strstr(txt, "uid"));
	/* the one parser accepts what is left */
	assert_int_equal(jobspec_parse(txt, strlen(txt), "demo", &js, &e), 0);
	assert_string_equal(js.name, "demo");
	assert_string_equal(js.namespace_, "team");
	assert_int_equal(js.learners.replicas, 2);
	assert_string_equal(js.learners.image, "ddiloco:test");
	free(txt);
	json_decref(core);
	json_decref(job);
}

static void test_learner_pod_manifest(void **state)
{
	struct sample s;
	json_t *pod, *ref, *init;

	(void)state;
	sample_open(&s, "ddiloco-system");
	pod = child_learner(&s.c, 1);
	assert_non_null(pod);
	assert_string_equal(path_str(pod, "metadata.name"), "demo-learner-1");
	assert_string_equal(json_string_value(json_object_get(json_object_get(
		json_object_get(pod, "metadata"), "labels"), LABEL_INDEX)), "1");
	ref = json_array_get(json_object_get(json_object_get(pod, "metadata"),
					     "ownerReferences"), 0);
	assert_string_equal(json_string_value(json_object_get(ref, "uid")), "u-1");
	assert_string_equal(json_string_value(json_object_get(ref, "kind")),
			    "DecoupledTrainingJob");
	assert_true(json_is_true(json_object_get(ref, "controller")));
	assert_true(json_is_true(json_object_get(ref, "blockOwnerDeletion")));
	assert_string_equal(path_str(pod, "spec.restartPolicy"), "Never");
	init = json_array_get(json_object_get(json_object_get(pod, "spec"),
					      "initContainers"), 0);
	assert_string_equal(json_string_value(json_object_get(init, "name")), "sidecar");
	assert_string_equal(json_string_value(json_object_get(init, "restartPolicy")),
			    "Always");
	assert_string_equal(json_string_value(json_array_get(json_object_get(init, "command"), 9)),
			    "demo-syncer-0.demo-syncer.team.svc:7070");
	assert_string_equal(path_str(pod, "spec.containers.0.name"), "learner");
	assert_string_equal(path_str(pod, "spec.containers.0.image"), "ddiloco:test");
	assert_string_equal(path_str(pod, "spec.containers.0.imagePullPolicy"), "Never");
	assert_string_equal(path_str(pod, "spec.containers.0.resources.requests.cpu"), "2");
	assert_string_equal(path_str(pod, "spec.containers.0.resources.limits.memory"), "1Gi");
	assert_string_equal(path_str(pod, "spec.volumes.0.emptyDir.medium"), "Memory");
	assert_string_equal(path_str(pod, "spec.volumes.2.persistentVolumeClaim.claimName"),
			    "corpus");
	assert_string_equal(path_str(pod, "spec.nodeSelector.pool"), "a");
	assert_string_equal(path_str(pod, "spec.tolerations.0.key"), "kwok");
	json_decref(pod);

	pod = child_syncer(&s.c);
	assert_non_null(pod);
	assert_string_equal(path_str(pod, "kind"), "StatefulSet");
	assert_string_equal(path_str(pod, "spec.serviceName"), "demo-syncer");
	assert_string_equal(path_str(pod, "spec.template.spec.volumes.2.persistentVolumeClaim.claimName"),
			    "demo-checkpoints");
	/* the image's user can write to a new claim */
	assert_int_equal(json_integer_value(json_object_get(json_object_get(
		json_object_get(json_object_get(json_object_get(pod, "spec"),
			"template"), "spec"), "securityContext"), "fsGroup")), 65532);
	assert_string_equal(path_str(pod, "spec.template.spec.securityContext.fsGroupChangePolicy"),
			    "OnRootMismatch");
	json_decref(pod);
	pod = child_pvc(&s.c);
	assert_string_equal(path_str(pod, "spec.resources.requests.storage"), "2Gi");
	json_decref(pod);
	pod = child_service(&s.c);
	assert_string_equal(path_str(pod, "spec.clusterIP"), "None");
	json_decref(pod);
	pod = child_configmap(&s.c);
	assert_string_equal(json_string_value(json_object_get(json_object_get(pod, "data"),
							      "job.json")), s.txt);
	json_decref(pod);
	sample_close(&s);
}

/*
 * The syncer's pod (docs/operator.md, "The syncer's placement and
 * requests"): not the learners' accelerator pool; requests of its own so
 * it is Burstable; spec.syncer.{nodeSelector, tolerations, resources}.
 */
static void test_syncer_placement_and_requests(void **state)
{
	struct sample s;
	json_t *sts, *spec, *syncer, *core;
	char *txt;
	struct job_spec js;
	struct err e;

	(void)state;
	sample_open(&s, "ddiloco-system");
	sts = child_syncer(&s.c);
	spec = json_object_get(json_object_get(json_object_get(sts, "spec"), "template"), "spec");
	/* the learners' nodeSelector (pool: a) and tolerations stay theirs */
	assert_null(json_object_get(spec, "nodeSelector"));
	assert_null(json_object_get(spec, "tolerations"));
	assert_string_equal(path_str(spec, "containers.0.resources.requests.cpu"), "500m");
	/* 64 MiB + 72 B x 437760 parameters (V 256, T 64, L 2, C 128, tied)
	 * = 94.06 MiB, rounded up */
	assert_string_equal(path_str(spec, "containers.0.resources.requests.memory"), "95Mi");
	assert_null(json_object_get(json_object_get(json_array_get(json_object_get(spec,
		"containers"), 0), "resources"), "limits"));
	json_decref(sts);
	sample_close(&s);

	/* a bigger model asks for more: C 1024, L 8, V 256, T 64 */
	sample_open(&s, "ddiloco-system");
	s.js.model.channels = 1024;
	s.js.model.layers = 8;
	sts = child_syncer(&s.c);
	spec = json_object_get(json_object_get(json_object_get(sts, "spec"), "template"), "spec");
	/* 256*1024 + 64*1024 + 8*(12*1024^2 + 13*1024) + 2*1024 = 101,099,520
	 * parameters: 64 MiB + 72 B each = 7,006 MiB rounded up */
	assert_string_equal(path_str(spec, "containers.0.resources.requests.memory"), "7006Mi");
	json_decref(sts);
	sample_close(&s);

	/* the syncer's own placement and requests */
	sample_open(&s, "ddiloco-system");
	syncer = json_object_get(json_object_get(s.job, "spec"), "syncer");
	json_object_set_new(syncer, "nodeSelector", json_pack("{s:s}", "pool", "cpu"));
	json_object_set_new(syncer, "tolerations",
			    json_pack("[{s:s, s:s}]", "key", "dedicated", "operator", "Exists"));
	json_object_set_new(syncer, "resources", json_pack("{s:i, s:s}", "cpu", 2,
							   "memory", "4Gi"));
	sts = child_syncer(&s.c);
	spec = json_object_get(json_object_get(json_object_get(sts, "spec"), "template"), "spec");
	assert_string_equal(path_str(spec, "nodeSelector.pool"), "cpu");
	assert_int_equal(json_object_size(json_object_get(spec, "nodeSelector")), 1);
	assert_string_equal(path_str(spec, "tolerations.0.key"), "dedicated");
	assert_int_equal(json_array_size(json_object_get(spec, "tolerations")), 1);
	assert_string_equal(path_str(spec, "containers.0.resources.requests.cpu"), "2");
	assert_string_equal(path_str(spec, "containers.0.resources.requests.memory"), "4Gi");
	json_decref(sts);
	/* ... and the learners keep theirs */
	sts = child_learner(&s.c, 0);
	assert_string_equal(path_str(sts, "spec.nodeSelector.pool"), "a");
	assert_string_equal(path_str(sts, "spec.tolerations.0.key"), "kwok");
	json_decref(sts);
	/* none of it reaches job.json, which the one parser still reads */
	core = job_core(s.job);
	syncer = json_object_get(json_object_get(core, "spec"), "syncer");
	assert_null(json_object_get(syncer, "nodeSelector"));
	assert_null(json_object_get(syncer, "tolerations"));
	assert_null(json_object_get(syncer, "resources"));
	txt = json_dumps(core, JSON_COMPACT);
	assert_int_equal(jobspec_parse(txt, strlen(txt), "demo", &js, &e), 0);
	free(txt);
	json_decref(core);
	sample_close(&s);
}

/*
 * spec.learners.template / spec.syncer.template (operator/podtemplate.c
 * has the merge's own tests): each reaches its own pods only, the
 * operator's container and volumes stay; spec.learners.command/args
 * replace the learner's program, never the sidecar's; none of it reaches
 * job.json.
 */
static void test_templates_and_learner_command(void **state)
{
	struct sample s;
	json_t *l, *sy, *pod, *c, *core;
	char *txt;
	struct job_spec js;
	struct err e;
	json_error_t je;

	(void)state;
	sample_open(&s, "ddiloco-system");
	l = json_object_get(json_object_get(s.job, "spec"), "learners");
	sy = json_object_get(json_object_get(s.job, "spec"), "syncer");
	json_object_set_new(l, "template", json_loads(
		"{\"metadata\":{\"labels\":{\"team\":\"nlp\"}},"
		" \"spec\":{\"priorityClassName\":\"training\","
		"  \"nodeSelector\":{\"accel\":\"tpu\"},"
		"  \"containers\":[{\"name\":\"learner\","
		"   \"resources\":{\"limits\":{\"google.com/tpu\":\"4\"}}}]}}", 0, &je));
	json_object_set_new(l, "command", json_pack("[s]", "python3"));
	json_object_set_new(l, "args", json_pack("[s, s]", "train.py", "--fast"));
	json_object_set_new(sy, "template", json_loads(
		"{\"metadata\":{\"annotations\":{\"note\":\"cpu\"}},"
		" \"spec\":{\"priorityClassName\":\"critical\"}}", 0, &je));
	pod = child_learner(&s.c, 0);
	assert_string_equal(path_str(pod, "metadata.labels.team"), "nlp");
	assert_string_equal(path_str(pod, "spec.priorityClassName"), "training");
	/* the template's nodeSelector added to spec.learners.nodeSelector */
	assert_string_equal(path_str(pod, "spec.nodeSelector.pool"), "a");
	assert_string_equal(path_str(pod, "spec.nodeSelector.accel"), "tpu");
	c = json_array_get(json_object_get(json_object_get(pod, "spec"), "containers"), 0);
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(c,
		"resources"), "limits"), "google.com/tpu")), "4");
	assert_string_equal(path_str(c, "resources.requests.cpu"), "2");
	assert_string_equal(path_str(c, "command.0"), "python3");
	assert_int_equal(json_array_size(json_object_get(c, "command")), 1);
	assert_string_equal(path_str(c, "args.1"), "--fast");
	/* what a learner of the user's own needs to find */
	assert_string_equal(path_str(c, "env.1.name"), "DDILOCO_JOB_FILE");
	assert_string_equal(path_str(c, "env.1.value"), "/etc/ddiloco/job.json");
	assert_string_equal(path_str(c, "env.2.value"), "/run/ddiloco");
	/* the sidecar stays ours */
	assert_string_equal(path_str(pod, "spec.initContainers.0.command.1"), "sidecar");
	/* the syncer's template is not the learners' */
	assert_null(json_object_get(json_object_get(pod, "metadata"), "annotations"));
	json_decref(pod);
	pod = child_syncer(&s.c);
	assert_string_equal(path_str(pod, "spec.template.metadata.annotations.note"), "cpu");
	assert_string_equal(path_str(pod, "spec.template.spec.priorityClassName"), "critical");
	assert_null(json_object_get(json_object_get(json_object_get(json_object_get(
		json_object_get(pod, "spec"), "template"), "metadata"), "labels"), "team"));
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(
		json_object_get(json_object_get(pod, "spec"), "template"), "metadata"),
		"labels"), LABEL_ROLE)), "syncer");
	assert_string_equal(path_str(pod, "spec.template.spec.containers.0.command.1"), "syncer");
	json_decref(pod);
	core = job_core(s.job);
	txt = json_dumps(core, JSON_COMPACT);
	assert_null(strstr(txt, "template"));
	assert_null(strstr(txt, "python3"));
	assert_int_equal(jobspec_parse(txt, strlen(txt), "demo", &js, &e), 0);
	free(txt);
	json_decref(core);
	sample_close(&s);
}

static const char *label_of(json_t *meta, const char *key)
{
	return json_string_value(json_object_get(json_object_get(meta, "labels"), key));
}

/*
 * Kueue (docs/operator.md, "Kueue"): the job's labels reach its pods
 * (learners and the syncer's template), under the operator's and the
 * template's; spec.managedBy another controller leaves the job alone.
 */
static void test_job_labels_and_managed_by(void **state)
{
	struct sample s;
	json_t *meta, *pod, *job;
	json_error_t je;

	(void)state;
	sample_open(&s, "ddiloco-system");
	meta = json_object_get(s.job, "metadata");
	json_object_set_new(meta, "labels", json_pack("{s:s, s:s, s:s}",
		"kueue.x-k8s.io/queue-name", "team-a", LABEL_JOB, "spoof",
		"team", "from-job"));
	s.c.labels = json_object_get(meta, "labels");
	json_object_set_new(json_object_get(json_object_get(s.job, "spec"), "learners"),
			    "template", json_pack("{s:{s:{s:s}}}", "metadata", "labels",
						  "team", "from-template"));
	pod = child_learner(&s.c, 0);
	assert_string_equal(label_of(json_object_get(pod, "metadata"),
				     "kueue.x-k8s.io/queue-name"), "team-a");
	assert_string_equal(label_of(json_object_get(pod, "metadata"), LABEL_JOB), "demo");
	assert_string_equal(label_of(json_object_get(pod, "metadata"), "team"), "from-template");
	json_decref(pod);
	pod = child_syncer(&s.c);
	meta = json_object_get(json_object_get(json_object_get(pod, "spec"), "template"),
			       "metadata");
	assert_string_equal(label_of(meta, "kueue.x-k8s.io/queue-name"), "team-a");
	assert_string_equal(label_of(meta, LABEL_ROLE), "syncer");
	/* the StatefulSet's selector is the operator's alone */
	assert_int_equal(json_object_size(json_object_get(json_object_get(json_object_get(pod,
		"spec"), "selector"), "matchLabels")), 2);
	json_decref(pod);
	sample_close(&s);

	job = json_loads("{\"spec\":{}}", 0, &je);
	assert_false(job_managed_elsewhere(job));
	json_object_set_new(json_object_get(job, "spec"), "managedBy", json_string(MANAGED_BY));
	assert_false(job_managed_elsewhere(job));
	json_object_set_new(json_object_get(job, "spec"), "managedBy",
			    json_string("kueue.x-k8s.io/multikueue"));
	assert_true(job_managed_elsewhere(job));
	json_decref(job);
}

/*
 * The checkpoint claim: its size from the model unless spec.syncer.storage
 * says (5 files of 8 B a parameter + 1 MiB, times 1.5, whole GiB, at least
 * 1Gi); no owner reference when retained; a claim of the user's mounted
 * by name. The syncer's liveness and startup probes.
 */
static void test_checkpoint_claim(void **state)
{
	struct sample s;
	json_t *o, *ctr;
	char size[32];

	(void)state;
	sample_open(&s, "ddiloco-system");
	checkpoint_claim_size(&s.c, size, sizeof(size));
	assert_string_equal(size, "2Gi");   /* spec.syncer.storage */
	json_object_del(json_object_get(json_object_get(s.job, "spec"), "syncer"), "storage");
	checkpoint_claim_size(&s.c, size, sizeof(size));
	assert_string_equal(size, "1Gi");   /* 437,760 parameters: 26 MB */
	/* 101,099,520 parameters: 5 x 1.5 x (808.8 MB + 1 MiB) = 5.66 GiB */
	s.js.model.channels = 1024;
	s.js.model.layers = 8;
	checkpoint_claim_size(&s.c, size, sizeof(size));
	assert_string_equal(size, "6Gi");
	o = child_pvc(&s.c);
	assert_string_equal(path_str(o, "spec.resources.requests.storage"), "6Gi");
	assert_non_null(json_object_get(json_object_get(o, "metadata"), "ownerReferences"));
	json_decref(o);
	s.c.retain_claim = 1;
	o = child_pvc(&s.c);
	assert_null(json_object_get(json_object_get(o, "metadata"), "ownerReferences"));
	assert_string_equal(path_str(o, "metadata.name"), "demo-checkpoints");
	json_decref(o);

	/* the syncer: probes, and a claim of the user's */
	o = child_syncer(&s.c);
	ctr = json_array_get(json_object_get(json_object_get(json_object_get(json_object_get(o,
		"spec"), "template"), "spec"), "containers"), 0);
	assert_string_equal(path_str(ctr, "livenessProbe.httpGet.path"), "/healthz");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(ctr,
		"livenessProbe"), "failureThreshold")), 3);
	assert_string_equal(path_str(ctr, "startupProbe.httpGet.path"), "/readyz");
	assert_string_equal(path_str(o, "spec.template.spec.volumes.2.persistentVolumeClaim.claimName"),
			    "demo-checkpoints");
	json_decref(o);
	json_object_set_new(json_object_get(json_object_get(s.job, "spec"), "syncer"),
			    "checkpoints", json_pack("{s:s}", "claimName", "old-run-checkpoints"));
	o = child_syncer(&s.c);
	assert_string_equal(path_str(o, "spec.template.spec.volumes.2.persistentVolumeClaim.claimName"),
			    "old-run-checkpoints");
	json_decref(o);
	sample_close(&s);
}

/*
 * The Pod Security Standard "restricted" as it reads a pod spec (the API
 * server's PodSecurity admission is the real judge: tests/k8s/
 * test_security.sh); plus no service-account token.
 */
static void assert_restricted(json_t *podspec)
{
	json_t *psc = json_object_get(podspec, "securityContext"), *v;
	const char *lists[] = { "initContainers", "containers" };
	size_t i, n = 0;

	assert_true(json_is_true(json_object_get(psc, "runAsNonRoot")));
	assert_int_equal(json_integer_value(json_object_get(psc, "runAsUser")), 65532);
	assert_int_equal(json_integer_value(json_object_get(psc, "runAsGroup")), 65532);
	assert_string_equal(path_str(psc, "seccompProfile.type"), "RuntimeDefault");
	assert_true(json_is_false(json_object_get(podspec, "automountServiceAccountToken")));
	assert_null(json_object_get(podspec, "hostNetwork"));
	assert_null(json_object_get(podspec, "hostPID"));
	for (int l = 0; l < 2; l++) {
		json_array_foreach(json_object_get(podspec, lists[l]), i, v) {
			json_t *sc = json_object_get(v, "securityContext");
			json_t *drop = json_object_get(json_object_get(sc, "capabilities"), "drop");

			assert_true(json_is_false(json_object_get(sc, "allowPrivilegeEscalation")));
			assert_true(json_is_true(json_object_get(sc, "readOnlyRootFilesystem")));
			assert_int_equal(json_array_size(drop), 1);
			assert_string_equal(json_string_value(json_array_get(drop, 0)), "ALL");
			assert_null(json_object_get(json_object_get(sc, "capabilities"), "add"));
			assert_null(json_object_get(sc, "privileged"));
			assert_null(json_object_get(sc, "runAsUser"));
			n++;
		}
	}
	assert_true(n >= 1);
	/* only the volume types restricted allows */
	json_array_foreach(json_object_get(podspec, "volumes"), i, v) {
		int ok = json_object_get(v, "configMap") || json_object_get(v, "emptyDir") ||
			 json_object_get(v, "persistentVolumeClaim") ||
			 json_object_get(v, "secret") || json_object_get(v, "projected");

		assert_true(ok);
		assert_null(json_object_get(v, "hostPath"));
	}
}

static void test_pods_pass_restricted(void **state)
{
	struct sample s;
	json_t *obj, *spec;

	(void)state;
	sample_open(&s, "ddiloco-system");
	obj = child_learner(&s.c, 0);
	spec = json_object_get(obj, "spec");
	assert_restricted(spec);
	/* both the sidecar and the learner were checked */
	assert_int_equal(json_array_size(json_object_get(spec, "initContainers")), 1);
	assert_int_equal(json_array_size(json_object_get(spec, "containers")), 1);
	assert_true(json_is_false(json_object_get(spec, "enableServiceLinks")));
	json_decref(obj);
	obj = child_syncer(&s.c);
	spec = json_object_get(json_object_get(json_object_get(obj, "spec"), "template"),
			       "spec");
	assert_restricted(spec);
	/* fsGroup is kept beside the rest of the pod's context */
	assert_int_equal(json_integer_value(json_object_get(json_object_get(
		spec, "securityContext"), "fsGroup")), 65532);
	json_decref(obj);
	/* the checkpoints in an emptyDir: still restricted */
	json_object_set_new(json_object_get(json_object_get(s.job, "spec"), "syncer"),
			    "storage", json_string(""));
	obj = child_syncer(&s.c);
	assert_restricted(json_object_get(json_object_get(json_object_get(obj, "spec"),
							  "template"), "spec"));
	json_decref(obj);
	sample_close(&s);
}

static void test_networkpolicy_manifest(void **state)
{
	struct sample s;
	json_t *np, *ing, *peer;

	(void)state;
	sample_open(&s, "ops");
	np = child_networkpolicy(&s.c);
	assert_non_null(np);
	assert_string_equal(path_str(np, "apiVersion"), "networking.k8s.io/v1");
	assert_string_equal(path_str(np, "kind"), "NetworkPolicy");
	assert_string_equal(path_str(np, "metadata.name"), "demo-syncer");
	assert_string_equal(path_str(np, "metadata.namespace"), "team");
	assert_string_equal(path_str(np, "metadata.ownerReferences.0.uid"), "u-1");
	assert_true(json_is_true(json_object_get(json_array_get(json_object_get(
		json_object_get(np, "metadata"), "ownerReferences"), 0), "controller")));
	assert_string_equal(json_string_value(json_object_get(json_object_get(
		json_object_get(np, "metadata"), "labels"), "app.kubernetes.io/managed-by")),
		"ddiloco-operator");
	/* the syncer's pod, and only it */
	assert_int_equal(json_object_size(json_object_get(json_object_get(json_object_get(
		np, "spec"), "podSelector"), "matchLabels")), 2);
	assert_string_equal(json_string_value(json_object_get(json_object_get(
		json_object_get(json_object_get(np, "spec"), "podSelector"), "matchLabels"),
		LABEL_JOB)), "demo");
	assert_string_equal(json_string_value(json_object_get(json_object_get(
		json_object_get(json_object_get(np, "spec"), "podSelector"), "matchLabels"),
		LABEL_ROLE)), "syncer");
	assert_string_equal(path_str(np, "spec.policyTypes.0"), "Ingress");
	assert_int_equal(json_array_size(json_object_get(json_object_get(np, "spec"),
							 "policyTypes")), 1);
	ing = json_object_get(json_object_get(np, "spec"), "ingress");
	assert_int_equal(json_array_size(ing), 2);
	/* gRPC: the job's learners and its evaluator, same namespace (no
	 * namespaceSelector) */
	peer = json_array_get(json_object_get(json_array_get(ing, 0), "from"), 1);
	assert_int_equal(json_array_size(json_object_get(json_array_get(ing, 0), "from")), 2);
	assert_null(json_object_get(peer, "namespaceSelector"));
	assert_int_equal(json_object_size(json_object_get(json_object_get(peer,
		"podSelector"), "matchLabels")), 2);
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(
		peer, "podSelector"), "matchLabels"), LABEL_JOB)), "demo");
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(
		peer, "podSelector"), "matchLabels"), LABEL_ROLE)), "evaluator");
	peer = json_array_get(json_object_get(json_array_get(ing, 0), "from"), 0);
	assert_null(json_object_get(peer, "namespaceSelector"));
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(
		peer, "podSelector"), "matchLabels"), LABEL_JOB)), "demo");
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(
		peer, "podSelector"), "matchLabels"), LABEL_ROLE)), "learner");
	assert_int_equal(json_array_size(json_object_get(json_array_get(ing, 0), "ports")), 1);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(json_object_get(
		json_array_get(ing, 0), "ports"), 0), "port")), 7070);
	assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(
		json_array_get(ing, 0), "ports"), 0), "protocol")), "TCP");
	/* HTTP: the operator's pods in its own namespace */
	peer = json_array_get(json_object_get(json_array_get(ing, 1), "from"), 0);
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(
		peer, "namespaceSelector"), "matchLabels"), "kubernetes.io/metadata.name")), "ops");
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(
		peer, "podSelector"), "matchLabels"), "app.kubernetes.io/name")), "ddiloco");
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(
		peer, "podSelector"), "matchLabels"), "app.kubernetes.io/component")), "operator");
	assert_int_equal(json_integer_value(json_object_get(json_array_get(json_object_get(
		json_array_get(ing, 1), "ports"), 0), "port")), 7071);
	json_decref(np);
	/* no operator namespace: no policy that would let nobody in */
	s.c.operator_ns = NULL;
	assert_null(child_networkpolicy(&s.c));
	s.c.operator_ns = "";
	assert_null(child_networkpolicy(&s.c));
	sample_close(&s);
}

/* The volume named "tls" of a pod spec, and whether container c mounts it. */
static json_t *volume_named(json_t *podspec, const char *name)
{
	size_t i;
	json_t *v;

	json_array_foreach(json_object_get(podspec, "volumes"), i, v)
		if (!strcmp(json_string_value(json_object_get(v, "name")), name))
			return v;
	return NULL;
}

static const char *mount_of(json_t *container, const char *name)
{
	size_t i;
	json_t *m;

	json_array_foreach(json_object_get(container, "volumeMounts"), i, m)
		if (!strcmp(json_string_value(json_object_get(m, "name")), name)) {
			assert_true(json_is_true(json_object_get(m, "readOnly")));
			return json_string_value(json_object_get(m, "mountPath"));
		}
	return NULL;
}

/* The last two words of a container's command, as "a b". */
static const char *last_args(json_t *container)
{
	static char buf[256];
	json_t *cmd = json_object_get(container, "command");
	size_t n = json_array_size(cmd);

	assert_true(n >= 2);
	snprintf(buf, sizeof(buf), "%s %s", json_string_value(json_array_get(cmd, n - 2)),
		 json_string_value(json_array_get(cmd, n - 1)));
	return buf;
}

/* items [{key, path}] of a secret volume, as "key>path key>path ..." */
static void items_text(json_t *vol, char *out, size_t n)
{
	size_t i, k = 0;
	json_t *it;

	out[0] = '\0';
	json_array_foreach(json_object_get(json_object_get(vol, "secret"), "items"), i, it)
		k += (size_t)snprintf(out + k, n - k, "%s%s>%s", i ? " " : "",
				      json_string_value(json_object_get(it, "key")),
				      json_string_value(json_object_get(it, "path")));
}

static void test_tls_secret_and_mounts(void **state)
{
	struct sample s;
	json_t *sec, *sd, *pod, *spec, *vol;
	struct err e;
	char items[256];
	struct pki_id id;
	struct pki_names names;
	const char *ca, *key;
	json_t *v;
	int keys = 0, found = 0;

	(void)state;
	sample_open(&s, "ops");
	sec = child_tls_secret(&s.c, &e);
	assert_non_null(sec);
	assert_string_equal(path_str(sec, "kind"), "Secret");
	assert_string_equal(path_str(sec, "metadata.name"), "demo-tls");
	assert_string_equal(path_str(sec, "metadata.ownerReferences.0.uid"), "u-1");
	assert_string_equal(path_str(sec, "type"), "Opaque");
	assert_true(json_is_true(json_object_get(sec, "immutable")));
	sd = json_object_get(sec, "stringData");
	/* the CA certificate, the syncer's pair, one pair per learner: no CA key */
	assert_int_equal(json_object_size(sd), 7);
	json_object_foreach(sd, key, v)
		keys += strstr(json_string_value(v), "PRIVATE KEY") != NULL;
	assert_int_equal(keys, 3);
	ca = json_string_value(json_object_get(sd, "ca.crt"));
	assert_non_null(ca);
	assert_int_equal(pki_verify(ca, json_string_value(json_object_get(sd, "syncer.crt")), &e), 0);
	assert_int_equal(pki_verify(ca, json_string_value(json_object_get(sd, "learner-1.crt")), &e), 0);
	assert_non_null(strstr(json_string_value(json_object_get(sd, "learner-1.key")), "PRIVATE KEY"));
	/* identities */
	assert_int_equal(pki_cert_id(json_string_value(json_object_get(sd, "learner-1.crt")),
				     &id, &e), 0);
	assert_string_equal(id.job, "demo");
	assert_int_equal(id.role, PKI_ROLE_LEARNER);
	assert_int_equal(id.learner, 1);
	assert_int_equal(pki_cert_id(json_string_value(json_object_get(sd, "syncer.crt")),
				     &id, &e), 0);
	assert_int_equal(id.role, PKI_ROLE_SYNCER);
	/* the syncer's certificate names the address the sidecars dial */
	assert_int_equal(pki_cert_names(json_string_value(json_object_get(sd, "syncer.crt")),
					&names, &e), 0);
	for (size_t i = 0; i < names.ndns; i++)
		found += !strcmp(names.dns[i], "demo-syncer-0.demo-syncer.team.svc") ||
			 !strcmp(names.dns[i], "demo-syncer-0.demo-syncer.team.svc.cluster.local");
	assert_int_equal(found, 2);
	pki_names_release(&names);
	/* a second Secret is another CA: fresh keys every time */
	{
		json_t *again = child_tls_secret(&s.c, &e);

		assert_non_null(json_string_value(json_object_get(json_object_get(
			again, "stringData"), "ca.crt")));
		assert_string_not_equal(ca, json_string_value(json_object_get(json_object_get(
			again, "stringData"), "ca.crt")));
		assert_int_equal(pki_verify(ca, json_string_value(json_object_get(json_object_get(
			again, "stringData"), "learner-1.crt")), &e), -1);
		json_decref(again);
	}
	json_decref(sec);

	/* the learner pod: the sidecar mounts only learner 1's pair */
	pod = child_learner(&s.c, 1);
	spec = json_object_get(pod, "spec");
	vol = volume_named(spec, "tls");
	assert_non_null(vol);
	assert_string_equal(path_str(vol, "secret.secretName"), "demo-tls");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(vol, "secret"),
							    "defaultMode")), 0440);
	items_text(vol, items, sizeof(items));
	assert_string_equal(items, "ca.crt>ca.crt learner-1.crt>tls.crt learner-1.key>tls.key");
	assert_string_equal(mount_of(json_array_get(json_object_get(spec, "initContainers"), 0),
				     "tls"), TLS_DIR);
	assert_null(mount_of(json_array_get(json_object_get(spec, "containers"), 0), "tls"));
	/* the sidecar is told where; the learner, which never dials, is not */
	assert_string_equal(last_args(json_array_get(json_object_get(spec, "initContainers"), 0)),
			    "--tls-dir " TLS_DIR);
	assert_string_equal(last_args(json_array_get(json_object_get(spec, "containers"), 0)),
			    "--exchange " EXCHANGE_DIR);
	/* the files' group is the image's, which the pod's user is in */
	assert_int_equal(json_integer_value(json_object_get(json_object_get(
		spec, "securityContext"), "fsGroup")), 65532);
	json_decref(pod);
	/* the syncer: its own pair */
	pod = child_syncer(&s.c);
	spec = json_object_get(json_object_get(json_object_get(pod, "spec"), "template"), "spec");
	vol = volume_named(spec, "tls");
	items_text(vol, items, sizeof(items));
	assert_string_equal(items, "ca.crt>ca.crt syncer.crt>tls.crt syncer.key>tls.key");
	assert_string_equal(mount_of(json_array_get(json_object_get(spec, "containers"), 0),
				     "tls"), TLS_DIR);
	assert_string_equal(last_args(json_array_get(json_object_get(spec, "containers"), 0)),
			    "--tls-dir " TLS_DIR);
	json_decref(pod);
	/* spec.syncer.insecure: no mount, no flag (and no Secret: reconcile) */
	s.js.syncer.insecure = 1;
	pod = child_learner(&s.c, 1);
	spec = json_object_get(pod, "spec");
	assert_null(volume_named(spec, "tls"));
	assert_null(mount_of(json_array_get(json_object_get(spec, "initContainers"), 0), "tls"));
	assert_string_equal(last_args(json_array_get(json_object_get(spec, "initContainers"), 0)),
			    "--http 0.0.0.0:9090");
	assert_restricted(spec);
	json_decref(pod);
	pod = child_syncer(&s.c);
	spec = json_object_get(json_object_get(json_object_get(pod, "spec"), "template"), "spec");
	assert_null(volume_named(spec, "tls"));
	assert_string_equal(last_args(json_array_get(json_object_get(spec, "containers"), 0)),
			    "--checkpoint-dir " CHECKPOINT_DIR);
	json_decref(pod);
	s.js.syncer.insecure = 0;

	/* a job name that is no DNS label cannot name a CA */
	s.c.name = "Demo_1";
	assert_null(child_tls_secret(&s.c, &e));
	assert_non_null(strstr(e.msg, "not a DNS label"));
	sample_close(&s);
}

/*
 * The evaluator's pod (spec.evaluator): the user's command in the main
 * container, a sidecar that says Hello as evaluator 0 with its own
 * certificate, the learners' image, resources, placement and template,
 * restricted like every pod; and its certificate in the Secret of an
 * external job.
 */
static void test_evaluator_pod_manifest(void **state)
{
	struct sample s;
	json_t *spec, *l, *pod, *ps, *init, *c, *sec, *sd;
	struct err e;
	struct pki_id id;
	char items[256];
	json_error_t je;

	(void)state;
	sample_open(&s, "ops");
	/* no spec.evaluator: no pod */
	assert_null(child_evaluator(&s.c));
	spec = json_object_get(s.job, "spec");
	l = json_object_get(spec, "learners");
	json_object_set_new(spec, "evaluator", json_pack("{s:[s], s:[s, s]}",
		"command", "python3", "args", "external.py", "--evaluate"));
	json_object_set_new(l, "template", json_loads(
		"{\"metadata\":{\"labels\":{\"team\":\"nlp\"}},"
		" \"spec\":{\"priorityClassName\":\"training\","
		"  \"containers\":[{\"name\":\"learner\","
		"   \"env\":[{\"name\":\"HF_HOME\",\"value\":\"/cache\"}],"
		"   \"resources\":{\"limits\":{\"google.com/tpu\":\"4\"}}}]}}", 0, &je));
	pod = child_evaluator(&s.c);
	assert_non_null(pod);
	assert_string_equal(path_str(pod, "kind"), "Pod");
	assert_string_equal(path_str(pod, "metadata.name"), "demo-evaluator-0");
	assert_string_equal(path_str(pod, "metadata.namespace"), "team");
	assert_string_equal(label_of(json_object_get(pod, "metadata"), LABEL_ROLE), "evaluator");
	assert_string_equal(label_of(json_object_get(pod, "metadata"), LABEL_JOB), "demo");
	assert_null(label_of(json_object_get(pod, "metadata"), LABEL_INDEX));
	assert_string_equal(label_of(json_object_get(pod, "metadata"), "team"), "nlp");
	assert_string_equal(path_str(pod, "metadata.ownerReferences.0.uid"), "u-1");
	assert_true(json_is_true(json_object_get(json_array_get(json_object_get(
		json_object_get(pod, "metadata"), "ownerReferences"), 0), "controller")));
	ps = json_object_get(pod, "spec");
	assert_string_equal(path_str(ps, "restartPolicy"), "Never");
	assert_string_equal(path_str(ps, "priorityClassName"), "training");
	assert_string_equal(path_str(ps, "nodeSelector.pool"), "a");
	assert_string_equal(path_str(ps, "tolerations.0.key"), "kwok");
	/* the sidecar: an evaluator's Hello, index 0, the syncer's address */
	assert_int_equal(json_array_size(json_object_get(ps, "initContainers")), 1);
	init = json_array_get(json_object_get(ps, "initContainers"), 0);
	assert_string_equal(path_str(init, "name"), "sidecar");
	assert_string_equal(path_str(init, "restartPolicy"), "Always");
	assert_string_equal(path_str(init, "image"), "ddiloco:test");
	{
		const char *want[] = { "ddiloco", "sidecar", "--job", "/etc/ddiloco/job.json",
				       "--evaluator", "--learner", "0", "--exchange",
				       EXCHANGE_DIR, "--syncer",
				       "demo-syncer-0.demo-syncer.team.svc:7070", "--http",
				       "0.0.0.0:9090", "--tls-dir", TLS_DIR };
		json_t *cmd = json_object_get(init, "command");

		assert_int_equal(json_array_size(cmd), 15);
		for (size_t i = 0; i < 15; i++)
			assert_string_equal(json_string_value(json_array_get(cmd, i)), want[i]);
	}
	/* the user's evaluator with the learners' image and resources */
	assert_int_equal(json_array_size(json_object_get(ps, "containers")), 1);
	c = json_array_get(json_object_get(ps, "containers"), 0);
	assert_string_equal(path_str(c, "name"), "evaluator");
	assert_string_equal(path_str(c, "image"), "ddiloco:test");
	assert_string_equal(path_str(c, "imagePullPolicy"), "Never");
	assert_int_equal(json_array_size(json_object_get(c, "command")), 1);
	assert_string_equal(path_str(c, "command.0"), "python3");
	assert_int_equal(json_array_size(json_object_get(c, "args")), 2);
	assert_string_equal(path_str(c, "args.0"), "external.py");
	assert_string_equal(path_str(c, "args.1"), "--evaluate");
	assert_string_equal(path_str(c, "env.0.name"), "DDILOCO_EVALUATOR_ID");
	assert_string_equal(path_str(c, "env.0.value"), "0");
	assert_string_equal(path_str(c, "env.1.name"), "DDILOCO_JOB_FILE");
	assert_string_equal(path_str(c, "env.1.value"), "/etc/ddiloco/job.json");
	assert_string_equal(path_str(c, "env.2.name"), "DDILOCO_EXCHANGE");
	assert_string_equal(path_str(c, "env.2.value"), EXCHANGE_DIR);
	/* the template's "learner" container merged into it */
	assert_string_equal(path_str(c, "env.3.name"), "HF_HOME");
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(c,
		"resources"), "limits"), "google.com/tpu")), "4");
	assert_string_equal(path_str(c, "resources.requests.cpu"), "2");
	assert_string_equal(mount_of(c, "spec"), SPEC_DIR);
	assert_null(mount_of(c, "tls"));
	/* its own certificate, the sidecar's alone */
	items_text(volume_named(ps, "tls"), items, sizeof(items));
	assert_string_equal(items, "ca.crt>ca.crt evaluator-0.crt>tls.crt evaluator-0.key>tls.key");
	assert_string_equal(path_str(volume_named(ps, "tls"), "secret.secretName"), "demo-tls");
	assert_string_equal(mount_of(init, "tls"), TLS_DIR);
	assert_string_equal(path_str(volume_named(ps, "exchange"), "emptyDir.medium"), "Memory");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(
		ps, "securityContext"), "fsGroup")), 65532);
	assert_restricted(ps);
	assert_true(json_is_false(json_object_get(ps, "enableServiceLinks")));
	json_decref(pod);

	/* insecure: no certificate, no flag */
	s.js.syncer.insecure = 1;
	pod = child_evaluator(&s.c);
	ps = json_object_get(pod, "spec");
	assert_null(volume_named(ps, "tls"));
	assert_string_equal(last_args(json_array_get(json_object_get(ps, "initContainers"), 0)),
			    "--http 0.0.0.0:9090");
	assert_restricted(ps);
	json_decref(pod);
	s.js.syncer.insecure = 0;

	/* the Secret of an external job: evaluator 0's client certificate */
	s.js.model.kind = MODEL_EXTERNAL;
	sec = child_tls_secret(&s.c, &e);
	assert_non_null(sec);
	sd = json_object_get(sec, "stringData");
	assert_int_equal(json_object_size(sd), 9);
	assert_int_equal(pki_verify(json_string_value(json_object_get(sd, "ca.crt")),
				    json_string_value(json_object_get(sd, "evaluator-0.crt")),
				    &e), 0);
	assert_int_equal(pki_check_pair(json_string_value(json_object_get(sd, "evaluator-0.crt")),
					json_string_value(json_object_get(sd, "evaluator-0.key")),
					&e), 0);
	assert_int_equal(pki_cert_id(json_string_value(json_object_get(sd, "evaluator-0.crt")),
				     &id, &e), 0);
	assert_string_equal(id.job, "demo");
	assert_int_equal(id.role, PKI_ROLE_EVALUATOR);
	assert_int_equal(id.learner, 0);
	json_decref(sec);
	/* a GPT job's has none (test_tls_secret_and_mounts: 7 keys) */
	s.js.model.kind = MODEL_GPT;
	sec = child_tls_secret(&s.c, &e);
	assert_null(json_object_get(json_object_get(sec, "stringData"), "evaluator-0.crt"));
	json_decref(sec);
	sample_close(&s);
}

/* More learners than one Secret holds: refused, with the reason. */
static void test_tls_secret_too_big(void **state)
{
	struct job_spec js;
	struct child_ctx c = { "big", "team", "u-2", &js, NULL, "{}", "ops", 0, NULL };
	struct err e;

	(void)state;
	jobspec_defaults(&js);
	js.learners.replicas = 4096;
	assert_null(child_tls_secret(&c, &e));
	assert_non_null(strstr(e.msg, "do not fit in one Secret"));
	assert_non_null(strstr(e.msg, "'big'"));
}

static void test_learner_index(void **state)
{
	(void)state;
	assert_int_equal(learner_index("demo", "demo-learner-0"), 0);
	assert_int_equal(learner_index("demo", "demo-learner-17"), 17);
	assert_int_equal(learner_index("demo", "demo-learner-"), -1);
	assert_int_equal(learner_index("demo", "demo-learner-01"), -1);
	assert_int_equal(learner_index("demo", "demo-learner-1x"), -1);
	assert_int_equal(learner_index("demo", "demo-syncer-0"), -1);
	assert_int_equal(learner_index("demo", "demo2-learner-1"), -1);
	assert_int_equal(learner_index("de", "demo-learner-1"), -1);
}

static void test_child_names(void **state)
{
	char name[CHILD_NAME_MAX], small[12], addr[128];
	char long_job[CHILD_NAME_MAX];

	(void)state;
	assert_int_equal(child_name("demo", CHILD_SPEC, 0, name, sizeof(name)), 0);
	assert_string_equal(name, "demo-spec");
	assert_int_equal(child_name("demo", CHILD_SYNCER, 3, name, sizeof(name)), 0);
	assert_string_equal(name, "demo-syncer");   /* the index is a learner's only */
	assert_int_equal(child_name("demo", CHILD_CHECKPOINTS, 0, name, sizeof(name)), 0);
	assert_string_equal(name, "demo-checkpoints");
	assert_int_equal(child_name("demo", CHILD_LEARNER, 12, name, sizeof(name)), 0);
	assert_string_equal(name, "demo-learner-12");
	assert_int_equal(learner_index("demo", name), 12);
	assert_int_equal(child_name("demo", CHILD_SYNCER_POD, 0, name, sizeof(name)), 0);
	assert_string_equal(name, "demo-syncer-0");
	assert_int_equal(child_name("demo", CHILD_EVALUATOR, 0, name, sizeof(name)), 0);
	assert_string_equal(name, "demo-evaluator-0");
	assert_int_equal(learner_index("demo", name), -1);
	/* the longest job name the CRD allows (docs/operator.md, Names): its
	 * evaluator's pod name is a label value and a hostname (<= 63) */
	memset(long_job, 'a', 45);
	long_job[45] = '\0';
	assert_int_equal(child_name(long_job, CHILD_EVALUATOR, 0, name, sizeof(name)), 0);
	assert_true(strlen(name) <= 63);
	assert_int_equal(strlen(name), 57);
	/* "demo-learner-1" needs 15 bytes: refused, and out is left empty */
	assert_int_equal(child_name("demo", CHILD_LEARNER, 1, small, sizeof(small)), -1);
	assert_string_equal(small, "");
	assert_int_equal(child_name("demo", CHILD_SPEC, 0, small, sizeof(small)), 0);
	assert_string_equal(small, "demo-spec");

	assert_int_equal(syncer_address("demo", "ns", 7070, addr, sizeof(addr)), 0);
	assert_string_equal(addr, "demo-syncer-0.demo-syncer.ns.svc:7070");
	assert_int_equal(syncer_address("demo", "ns", 7070, addr, 20), -1);

	/* a job name that leaves no room for a suffix: no child is built */
	memset(long_job, 'a', sizeof(long_job) - 8);
	long_job[sizeof(long_job) - 8] = '\0';
	assert_int_equal(child_name(long_job, CHILD_SPEC, 0, name, sizeof(name)), 0);
	assert_int_equal(child_name(long_job, CHILD_CHECKPOINTS, 0, name, sizeof(name)), -1);
	{
		struct job_spec js;
		struct child_ctx c = { long_job, "ns", "uid", &js, NULL, "{}", "ops", 0, NULL };

		jobspec_defaults(&js);
		assert_null(child_pvc(&c));
		assert_null(child_learner(&c, 0));
		assert_null(child_evaluator(&c));
		assert_null(child_syncer(&c));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_new_job_creates_everything),
		cmocka_unit_test(test_missing_networkpolicy_is_reapplied),
		cmocka_unit_test(test_tls_secret_created_before_pods),
		cmocka_unit_test(test_no_pvc_when_storage_empty),
		cmocka_unit_test(test_all_seen_sets_created_and_running),
		cmocka_unit_test(test_steady_state_does_nothing),
		cmocka_unit_test(test_checkpoint_failing_condition),
		cmocka_unit_test(test_model_started_over_condition),
		cmocka_unit_test(test_deleted_learner_only_it_recreated),
		cmocka_unit_test(test_terminating_pod_blocks_replacement),
		cmocka_unit_test(test_replacement_deleted_unseen_is_recreated),
		cmocka_unit_test(test_stuck_terminating_pod_force_deleted),
		cmocka_unit_test(test_pods_ready_names_the_reason),
		cmocka_unit_test(test_podcheck_reasons),
		cmocka_unit_test(test_pending_past_timeout_named),
		cmocka_unit_test(test_podcheck_starting),
		cmocka_unit_test(test_podcheck_disruptions),
		cmocka_unit_test(test_backoff_grows_with_repeated_failures),
		cmocka_unit_test(test_recreation_counted_after_create_failed),
		cmocka_unit_test(test_failed_pod_deleted_with_uid),
		cmocka_unit_test(test_below_quorum_is_restarting),
		cmocka_unit_test(test_budget_done_succeeds_and_stays),
		cmocka_unit_test(test_all_learners_exit_zero_succeeds),
		cmocka_unit_test(test_backoff_limit_fails),
		cmocka_unit_test(test_failures_not_disruptions_count),
		cmocka_unit_test(test_exit_code_rules),
		cmocka_unit_test(test_active_deadline),
		cmocka_unit_test(test_syncer_crash_loop_fails),
		cmocka_unit_test(test_retain_claim),
		cmocka_unit_test(test_invalid_spec_fails),
		cmocka_unit_test(test_suspend_and_resume),
		cmocka_unit_test(test_evaluator_created_when_asked),
		cmocka_unit_test(test_evaluator_recreated_not_counted),
		cmocka_unit_test(test_evaluator_deleted_at_end_and_on_suspend),
		cmocka_unit_test(test_deleting_job_does_nothing),
		cmocka_unit_test(test_stray_pod_index_deleted),
		cmocka_unit_test(test_condition_time_kept_when_unchanged),
		cmocka_unit_test(test_job_core_strips_operator_fields),
		cmocka_unit_test(test_learner_pod_manifest),
		cmocka_unit_test(test_syncer_placement_and_requests),
		cmocka_unit_test(test_templates_and_learner_command),
		cmocka_unit_test(test_checkpoint_claim),
		cmocka_unit_test(test_job_labels_and_managed_by),
		cmocka_unit_test(test_pods_pass_restricted),
		cmocka_unit_test(test_networkpolicy_manifest),
		cmocka_unit_test(test_tls_secret_and_mounts),
		cmocka_unit_test(test_evaluator_pod_manifest),
		cmocka_unit_test(test_tls_secret_too_big),
		cmocka_unit_test(test_learner_index),
		cmocka_unit_test(test_child_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
