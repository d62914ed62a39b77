/*
 * reconcile and the checkpoint claims (reconcile.h, CheckpointStorage;
 * docs/operator.md, Model lifecycle): a claim of the operator's own too
 * small for the adopted model is resized, once, and a refused resize is
 * said (rcfix.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/unit/rcfix.h"

/*
 * A claim of the operator's own too small for the adopted model, with no
 * spec.syncer.storage (an external model's default): resized to what a
 * checkpoint needs × CKPT_HEADROOM in whole GiB, once; then waited for;
 * a refused resize is said and not asked again.
 */
static void test_claim_resized_for_the_model(void **state)
{
	struct fx f;
	struct obs_progress *p = &f.in.progress;
	const struct rc_action *a;
	const struct condition *c;

	(void)state;
	setup_fx(&f, 2);
	running(&f);
	f.in.retain = 0;
	snprintf(f.js.name, sizeof(f.js.name), "demo");
	f.js.syncer.shards = 2;
	p->have = 1;
	p->shards = 2;
	p->shards_up = 2;
	p->shard_down = -1;
	p->ckpt_room = -1;
	p->ckpt_room_shard = 1;
	p->ckpt_needed = 3000000000ULL;   /* × 1.5 = 4.19 GiB */
	p->ckpt_free = 1000000000ULL;
	f.in.claim_bytes[1] = 0x1p30;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_RESIZE_PVC), 1);
	a = find(&f.out, ACT_RESIZE_PVC);
	assert_int_equal(a->index, 1);
	assert_float_equal(a->bytes, 5 * 0x1p30, 0);
	c = &f.out.conds[COND_CHECKPOINT_STORAGE];
	assert_int_equal(c->status, 0);
	assert_string_equal(c->message, "syncer shard 1 (demo-syncer-1): a "
			    "checkpoint needs 3000000000 bytes, its volume has "
			    "1000000000 free: claim checkpoints-demo-syncer-1 resized "
			    "to 5Gi (its StorageClass must allow volume expansion)");
	/* its Event goes with the patch, posted once the API took it */
	assert_null(find_event(&f.out, "CheckpointClaimResized"));
	assert_string_equal(a->reason, "CheckpointClaimResized");
	assert_string_equal(a->message, "claim checkpoints-demo-syncer-1: 5Gi "
			    "asked for a checkpoint of 3000000000 bytes");
	memcpy(f.in.conds, f.out.conds, sizeof(f.in.conds));
	rc_output_release(&f.out);
	/* the claim asks for it: no second resize, the volume is waited for */
	f.in.claim_bytes[1] = 5 * 0x1p30;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_RESIZE_PVC), 0);
	assert_string_equal(f.out.conds[COND_CHECKPOINT_STORAGE].message,
			    "syncer shard 1 (demo-syncer-1): a checkpoint needs "
			    "3000000000 bytes, its volume has 1000000000 free: claim "
			    "checkpoints-demo-syncer-1 asks for 5Gi: waiting for its "
			    "volume to grow");
	rc_output_release(&f.out);
	/* refused by the API: said, and not asked again */
	f.in.claim_bytes[1] = 0x1p30;
	f.in.resize_refused = "forbidden: only dynamically provisioned pvc can be resized";
	f.in.resize_refused_shard = 1;
	f.in.resize_refused_bytes = 5 * 0x1p30;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_RESIZE_PVC), 0);
	assert_string_equal(f.out.conds[COND_CHECKPOINT_STORAGE].message,
			    "syncer shard 1 (demo-syncer-1): a checkpoint needs "
			    "3000000000 bytes, its volume has 1000000000 free: resizing "
			    "claim checkpoints-demo-syncer-1 to 5Gi was refused "
			    "(forbidden: only dynamically provisioned pvc can be "
			    "resized): set spec.syncer.storage larger");
	rc_output_release(&f.out);
	/* a model that grew past what was refused is asked for again */
	p->ckpt_needed = 6000000000ULL;
	reconcile(&f.in, f.mem, &f.out);
	assert_float_equal(find(&f.out, ACT_RESIZE_PVC)->bytes, 9 * 0x1p30, 0);
	rc_output_release(&f.out);
	/* the user's size (spec.syncer.storage) or claim is never resized */
	f.in.storage_given = 1;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_RESIZE_PVC), 0);
	rc_output_release(&f.out);
	f.in.storage_given = 0;
	f.in.want_pvc = 0;
	reconcile(&f.in, f.mem, &f.out);
	assert_int_equal(count(&f.out, ACT_RESIZE_PVC), 0);
	rc_output_release(&f.out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_claim_resized_for_the_model),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
