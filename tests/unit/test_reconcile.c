/*
 * reconcile: the operator's decisions without a server. Each test states
 * a situation (spec, pods in the cache, memory) and checks the actions,
 * the phase and the conditions that come out (the fixture: rcfix.h).
 * The evaluator's are test_reconcile_eval.c's, the Secret's and the
 * refusals' test_reconcile_tls.c's, the pods' readiness
 * test_podcheck.c's, the children's manifests test_children.c's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/unit/rcfix.h"

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

/*
 * A sharded job (docs/operator.md, Shards): SyncerShards names the shard
 * whose /status did not answer, and turns True when all answer again;
 * CheckpointStorage names the shard whose volume is too small, with the
 * sizes, and stays absent while no syncer says (an older one).
 */
static void test_shard_conditions(void **state)
{
	struct fx f;
	struct obs_progress *p = &f.in.progress;
	const struct condition *c;

	(void)state;
	setup_fx(&f, 2);
	running(&f);
	f.in.retain = 0;
	snprintf(f.js.name, sizeof(f.js.name), "demo");
	f.js.syncer.shards = 2;
	p->have = 1;
	p->shards = 2;
	p->shards_up = 1;
	p->shard_down = 1;
	snprintf(p->shard_down_error, sizeof(p->shard_down_error),
		 "cannot reach 'http://x/status'");
	/* before every shard first answered: starting, no alarm */
	reconcile(&f.in, f.mem, &f.out);
	c = &f.out.conds[COND_SYNCER_SHARDS];
	assert_int_equal(c->status, 0);
	assert_string_equal(c->reason, "ShardsStarting");
	assert_null(find_event(&f.out, "ShardDown"));
	memcpy(f.in.conds, f.out.conds, sizeof(f.in.conds));
	rc_output_release(&f.out);
	p->shard_down = -1;
	p->shards_up = 2;
	reconcile(&f.in, f.mem, &f.out);
	assert_string_equal(f.out.conds[COND_SYNCER_SHARDS].reason, "AllShardsUp");
	assert_null(find_event(&f.out, "ShardsUp"));
	memcpy(f.in.conds, f.out.conds, sizeof(f.in.conds));
	rc_output_release(&f.out);
	/* then a shard goes down */
	p->shard_down = 1;
	p->shards_up = 1;
	reconcile(&f.in, f.mem, &f.out);
	c = &f.out.conds[COND_SYNCER_SHARDS];
	assert_int_equal(c->set, 1);
	assert_int_equal(c->status, 0);
	assert_string_equal(c->reason, "ShardDown");
	assert_string_equal(c->message, "1/2 syncer shards answer; shard 1 "
			    "(demo-syncer-1) does not: cannot reach 'http://x/status'; "
			    "the others' fragments keep merging");
	assert_string_equal(cond_type_name(COND_SYNCER_SHARDS), "SyncerShards");
	assert_int_equal(find_event(&f.out, "ShardDown")->warning, 1);
	/* no syncer said whether its checkpoint fits: no condition */
	assert_int_equal(f.out.conds[COND_CHECKPOINT_STORAGE].set, 0);
	assert_int_equal(f.out.phase, PHASE_RUNNING);   /* the job runs on */
	memcpy(f.in.conds, f.out.conds, sizeof(f.in.conds));
	rc_output_release(&f.out);

	/* back; and shard 0's volume is too small (its size the spec's) */
	f.in.storage_given = 1;
	p->shards_up = 2;
	p->shard_down = -1;
	p->ckpt_room = -1;
	p->ckpt_room_shard = 0;
	p->ckpt_needed = 3000000000ULL;
	p->ckpt_free = 1000000000ULL;
	reconcile(&f.in, f.mem, &f.out);
	c = &f.out.conds[COND_SYNCER_SHARDS];
	assert_int_equal(c->status, 1);
	assert_string_equal(c->reason, "AllShardsUp");
	assert_non_null(find_event(&f.out, "ShardsUp"));
	c = &f.out.conds[COND_CHECKPOINT_STORAGE];
	assert_int_equal(c->set, 1);
	assert_int_equal(c->status, 0);
	assert_string_equal(c->reason, "CheckpointStorageTooSmall");
	assert_string_equal(c->message, "syncer shard 0 (demo-syncer-0): a "
			    "checkpoint needs 3000000000 bytes, its volume has "
			    "1000000000 free: set spec.syncer.storage (each shard's "
			    "claim) larger");
	assert_int_equal(find_event(&f.out, "CheckpointStorageTooSmall")->warning, 1);
	memcpy(f.in.conds, f.out.conds, sizeof(f.in.conds));
	rc_output_release(&f.out);
	/* still too small, the free bytes moved: no second event */
	p->ckpt_free = 999000000ULL;
	reconcile(&f.in, f.mem, &f.out);
	assert_null(find_event(&f.out, "CheckpointStorageTooSmall"));
	memcpy(f.in.conds, f.out.conds, sizeof(f.in.conds));
	rc_output_release(&f.out);
	/* fits (a larger claim) */
	p->ckpt_room = 1;
	reconcile(&f.in, f.mem, &f.out);
	c = &f.out.conds[COND_CHECKPOINT_STORAGE];
	assert_int_equal(c->status, 1);
	assert_string_equal(c->reason, "CheckpointStorageFits");
	rc_output_release(&f.out);

	/* PodsReady wants every shard's pod; one that cannot start is named */
	f.in.syncer_pods_ready = 1;
	reconcile(&f.in, f.mem, &f.out);
	c = &f.out.conds[COND_PODS_READY];
	assert_int_equal(c->status, 0);
	assert_string_equal(c->reason, "PodsStarting");
	assert_string_equal(c->message, "2/2 learners ready, 1/2 syncer shards ready");
	assert_int_equal(f.out.phase, PHASE_RUNNING);   /* shard 0 merges on */
	rc_output_release(&f.out);
	f.in.syncer_reason = "Unschedulable";
	f.in.syncer_message = "0/3 nodes are available";
	reconcile(&f.in, f.mem, &f.out);
	assert_string_equal(f.out.conds[COND_PODS_READY].reason, "Unschedulable");
	rc_output_release(&f.out);
	f.in.syncer_reason = f.in.syncer_message = NULL;
	f.in.syncer_pods_ready = 2;
	reconcile(&f.in, f.mem, &f.out);
	c = &f.out.conds[COND_PODS_READY];
	assert_int_equal(c->status, 1);
	assert_string_equal(c->message, "2/2 learners ready, 2/2 syncer shards ready");
	rc_output_release(&f.out);

	/* an unsharded job has no SyncerShards condition */
	setup_fx(&f, 2);
	running(&f);
	f.in.retain = 0;
	f.in.progress.have = 1;
	f.in.progress.shards = 1;
	f.in.progress.shard_down = 0;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.conds[COND_SYNCER_SHARDS].set, 0);
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

	/* the high-water mark fails too: it names the rounds that wait */
	p->mark_failing = 1;
	p->mark_covered_round = 48;
	snprintf(p->mark_error, sizeof(p->mark_error), "cannot write "
		 "high-water mark: cannot fsync 'ck/m.tmp': Input/output error");
	reconcile(&f.in, f.mem, &f.out);
	c = &f.out.conds[COND_CHECKPOINT_FAILING];
	assert_int_equal(c->status, 1);
	assert_string_equal(c->reason, "MarkWriteFailed");
	assert_string_equal(c->message, "syncer: cannot write high-water mark: "
			    "cannot fsync 'ck/m.tmp': Input/output error "
			    "(rounds past 48 wait for it)");
	assert_non_null(find_event(&f.out, "CheckpointFailing"));
	memcpy(f.in.conds, f.out.conds, sizeof(f.in.conds));
	rc_output_release(&f.out);
	p->mark_failing = 0;

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

/*
 * LearnersExcluded: a syncer that excluded learners for their claims
 * (/status claims.excluded) sets it, naming them, with a Warning Event
 * when it is set and each time the set changes; a syncer that does not
 * say leaves it; one that excludes none (restarted) sets it False.
 */
static void test_learners_excluded_condition(void **state)
{
	struct fx f;
	struct obs_progress *p = &f.in.progress;
	const struct condition *c;

	(void)state;
	setup_fx(&f, 3);
	running(&f);
	f.in.retain = 0;
	p->have = 1;
	p->excluded = 0;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.conds[COND_LEARNERS_EXCLUDED].set, 0);
	rc_output_release(&f.out);

	p->excluded = 1;
	snprintf(p->excluded_ids, sizeof(p->excluded_ids), "2");
	reconcile(&f.in, f.mem, &f.out);
	c = &f.out.conds[COND_LEARNERS_EXCLUDED];
	assert_int_equal(c->set, 1);
	assert_int_equal(c->status, 1);
	assert_string_equal(c->reason, "ClaimsCut");
	assert_string_equal(c->message, "syncer: 1 learner excluded (2): its "
			    "claims of steps or tokens were cut in "
			    "spec.syncer.maxClaimCuts strikes; the others train on");
	assert_string_equal(cond_type_name(COND_LEARNERS_EXCLUDED),
			    "LearnersExcluded");
	assert_int_equal(find_event(&f.out, "LearnersExcluded")->warning, 1);
	assert_int_equal(f.out.phase, PHASE_RUNNING);   /* the job runs on */
	memcpy(f.in.conds, f.out.conds, sizeof(f.in.conds));
	rc_output_release(&f.out);
	/* the next pass: the same, no second Event */
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.conds[COND_LEARNERS_EXCLUDED].status, 1);
	assert_null(find_event(&f.out, "LearnersExcluded"));
	memcpy(f.in.conds, f.out.conds, sizeof(f.in.conds));
	rc_output_release(&f.out);
	/* another one: named, an Event */
	p->excluded = 2;
	snprintf(p->excluded_ids, sizeof(p->excluded_ids), "0, 2");
	reconcile(&f.in, f.mem, &f.out);
	c = &f.out.conds[COND_LEARNERS_EXCLUDED];
	assert_string_equal(c->message, "syncer: 2 learners excluded (0, 2): "
			    "their claims of steps or tokens were cut in "
			    "spec.syncer.maxClaimCuts strikes; the others train on");
	assert_non_null(find_event(&f.out, "LearnersExcluded"));
	memcpy(f.in.conds, f.out.conds, sizeof(f.in.conds));
	rc_output_release(&f.out);
	/* a syncer that does not say: as it was */
	p->excluded = -1;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.conds[COND_LEARNERS_EXCLUDED].status, 1);
	memcpy(f.in.conds, f.out.conds, sizeof(f.in.conds));
	rc_output_release(&f.out);
	/* a restarted syncer excludes none */
	p->excluded = 0;
	reconcile(&f.in, f.mem, &f.out);
	c = &f.out.conds[COND_LEARNERS_EXCLUDED];
	assert_int_equal(c->set, 1);
	assert_int_equal(c->status, 0);
	assert_string_equal(c->reason, "NoneExcluded");
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

/* A syncer shard's pod on a lost node: Terminating 30 s past its grace
 * period, deleted with grace 0 and its uid (the StatefulSet controller
 * makes it again); a healthy shard's and one still in its time are not. */
static void test_syncer_pod_on_lost_node_force_deleted(void **state)
{
	struct obs_pod sp[2] = { { .index = 0, .uid = "s-0", .state = POD_RUNNING,
				   .ready = 1 },
				 { .index = 1, .uid = "s-1", .state = POD_RUNNING,
				   .deleting = 1, .delete_at = NOW - 10 } };
	struct fx f;
	const struct rc_action *a;

	(void)state;
	setup_fx(&f, 2);
	running(&f);
	f.js.syncer.shards = 2;
	f.in.syncer_pods = sp;
	f.in.nsyncer_pods = 2;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_DELETE_SYNCER_POD), 0);
	assert_null(find_event(&f.out, "SyncerForceDeleted"));
	assert_true(fabs(f.out.requeue_after - 20) < 1e-6);
	rc_output_release(&f.out);
	sp[1].delete_at = NOW - 31;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_DELETE_SYNCER_POD), 1);
	a = find(&f.out, ACT_DELETE_SYNCER_POD);
	assert_int_equal(a->index, 1);
	assert_int_equal(a->force, 1);
	assert_string_equal(a->uid, "s-1");
	assert_non_null(a = find_event(&f.out, "SyncerForceDeleted"));
	assert_int_equal(a->warning, 1);
	assert_non_null(strstr(a->message, "syncer shard 1: pod still terminating 31 s"));
	/* the StatefulSet is left alone, the learners too */
	assert_int_equal(count(&f.out, ACT_DELETE_SYNCER), 0);
	assert_int_equal(count(&f.out, ACT_DELETE_LEARNER), 0);
	rc_output_release(&f.out);
	/* a suspended job's too: it would hold the name on resume */
	f.js.suspend = 1;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_DELETE_SYNCER_POD), 1);
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
	f.pods[1].exit_code = 137;
	snprintf(f.pods[1].exit_reason, sizeof(f.pods[1].exit_reason), "OOMKilled");
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_DELETE_LEARNER), 1);
	a = find(&f.out, ACT_DELETE_LEARNER);
	assert_int_equal(a->index, 1);
	assert_string_equal(a->uid, "uid-1");
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 0);
	assert_non_null(find_event(&f.out, "LearnerFailed"));
	assert_true(find_event(&f.out, "LearnerFailed")->warning);
	assert_non_null(strstr(find_event(&f.out, "LearnerFailed")->message,
			       "(exit code 137, OOMKilled)"));
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

/* Learner pods that exited 0 while being deleted (SIGTERM) were stopped:
 * the job goes on and they are made again once gone. */
static void test_deleted_learners_exit_zero_runs_on(void **state)
{
	struct fx f;

	(void)state;
	setup_fx(&f, 2);
	running(&f);
	for (int i = 0; i < 2; i++) {
		f.pods[i].state = POD_SUCCEEDED;
		f.pods[i].deleting = 1;
		f.pods[i].delete_at = NOW;
	}
	reconcile(&f.in, f.mem, &f.out);
	assert_int_not_equal(f.out.phase, PHASE_SUCCEEDED);
	assert_false(f.out.conds[COND_COMPLETE].set && f.out.conds[COND_COMPLETE].status);
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 0);   /* not yet gone */
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

/* A job in a Kueue queue (queue.h): held while its Workload waits, with
 * Kueue's reason in Suspended and Admitted; admitted with 2 of 4
 * learners, only those 2 pods; evicted, held again: its pods go. */
static void test_queue_hold_admit_evict(void **state)
{
	struct fx f;
	struct rc_queue *q;

	(void)state;
	setup_fx(&f, 4);
	q = &f.in.queue;
	q->queued = q->held = 1;
	snprintf(q->reason, sizeof(q->reason), "Pending");
	snprintf(q->message, sizeof(q->message), "queue lq: insufficient quota");
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.phase, PHASE_SUSPENDED);
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 0);
	assert_int_equal(count(&f.out, ACT_APPLY_SYNCER), 0);
	assert_int_equal(f.out.conds[COND_SUSPENDED].status, 1);
	assert_string_equal(f.out.conds[COND_SUSPENDED].reason, "Pending");
	assert_string_equal(f.out.conds[COND_ADMITTED].message, "queue lq: insufficient quota");
	assert_int_equal(f.out.conds[COND_ADMITTED].status, 0);
	rc_output_release(&f.out);

	/* admitted, 2 learners of 4 */
	f.in.phase = PHASE_SUSPENDED;
	f.in.conds[COND_SUSPENDED] = f.out.conds[COND_SUSPENDED];
	f.in.npods = 0;
	f.in.statefulset = 0;
	q->held = 0;
	q->admitted = 1;
	q->learners = 2;
	snprintf(q->reason, sizeof(q->reason), "Admitted");
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_APPLY_LEARNER), 2);
	assert_int_equal(count(&f.out, ACT_APPLY_SYNCER), 1);
	assert_int_equal(f.out.conds[COND_ADMITTED].status, 1);
	assert_int_equal(f.out.conds[COND_SUSPENDED].status, 0);
	assert_string_equal(f.out.conds[COND_SUSPENDED].message, "admitted by its queue");
	rc_output_release(&f.out);

	/* evicted while running: held, every pod and the syncer go */
	running(&f);
	q->held = 1;
	q->admitted = 0;
	snprintf(q->reason, sizeof(q->reason), "Evicted");
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.phase, PHASE_SUSPENDED);
	assert_int_equal(count(&f.out, ACT_DELETE_LEARNER), 4);
	assert_int_equal(count(&f.out, ACT_DELETE_SYNCER), 1);
	assert_string_equal(f.out.conds[COND_SUSPENDED].reason, "Evicted");
	rc_output_release(&f.out);
}

/* A policy deleted under a running job comes back, alone, with its
 * Event (test_reconcile_drift.c); nothing else moves and the job stays
 * Running. */
static void test_missing_networkpolicy_is_reapplied(void **state)
{
	struct fx f;

	(void)state;
	setup_fx(&f, 2);
	running(&f);
	f.in.netpol = 0;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(f.out.nacts, 2);
	assert_int_equal(count(&f.out, ACT_APPLY_NETPOL), 1);
	assert_non_null(find_event(&f.out, "DriftRepaired"));
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_new_job_creates_everything),
		cmocka_unit_test(test_missing_networkpolicy_is_reapplied),
		cmocka_unit_test(test_no_pvc_when_storage_empty),
		cmocka_unit_test(test_all_seen_sets_created_and_running),
		cmocka_unit_test(test_steady_state_does_nothing),
		cmocka_unit_test(test_checkpoint_failing_condition),
		cmocka_unit_test(test_shard_conditions),
		cmocka_unit_test(test_model_started_over_condition),
		cmocka_unit_test(test_learners_excluded_condition),
		cmocka_unit_test(test_deleted_learner_only_it_recreated),
		cmocka_unit_test(test_terminating_pod_blocks_replacement),
		cmocka_unit_test(test_replacement_deleted_unseen_is_recreated),
		cmocka_unit_test(test_stuck_terminating_pod_force_deleted),
		cmocka_unit_test(test_syncer_pod_on_lost_node_force_deleted),
		cmocka_unit_test(test_pods_ready_names_the_reason),
		cmocka_unit_test(test_pending_past_timeout_named),
		cmocka_unit_test(test_backoff_grows_with_repeated_failures),
		cmocka_unit_test(test_recreation_counted_after_create_failed),
		cmocka_unit_test(test_failed_pod_deleted_with_uid),
		cmocka_unit_test(test_below_quorum_is_restarting),
		cmocka_unit_test(test_budget_done_succeeds_and_stays),
		cmocka_unit_test(test_all_learners_exit_zero_succeeds),
		cmocka_unit_test(test_deleted_learners_exit_zero_runs_on),
		cmocka_unit_test(test_backoff_limit_fails),
		cmocka_unit_test(test_failures_not_disruptions_count),
		cmocka_unit_test(test_exit_code_rules),
		cmocka_unit_test(test_active_deadline),
		cmocka_unit_test(test_syncer_crash_loop_fails),
		cmocka_unit_test(test_retain_claim),
		cmocka_unit_test(test_invalid_spec_fails),
		cmocka_unit_test(test_suspend_and_resume),
		cmocka_unit_test(test_queue_hold_admit_evict),
		cmocka_unit_test(test_deleting_job_does_nothing),
		cmocka_unit_test(test_stray_pod_index_deleted),
		cmocka_unit_test(test_condition_time_kept_when_unchanged),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
