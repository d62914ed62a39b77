/*
 * An answer's way into its round and the merge (syncer/merge.c) on the
 * core's fixture, without gRPC, on a fake clock (coretest.h): the merged
 * values, versions and counters; refusals (NaN, wrong size, unknown
 * encoding, wrong fragment or round, a truncated or garbled int4
 * payload, duplicates); steps merged twice counted; stale, clipped and
 * capped answers; claims beyond the bounds; a step that would overflow
 * Θ undone; the size and history screens; what a round slot holds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/unit/coretest.h"

/* Learner id answers round/frag with the payload bytes buf[0..len). */
static enum core_verdict answer_bytes(struct fx *f, int id, uint64_t round,
				      int frag, int enc, const uint8_t *buf,
				      size_t len)
{
	struct wire_answer a = {
		.fragment = (uint32_t)frag, .round = round, .steps = 1,
		.tokens = 10, .encoding = enc, .payload = buf,
		.payload_len = len,
	};

	return core_answer(f->s, id, &a, f->now);
}

/* The next round pulled for fragment p: a round of another fragment in
 * between is answered empty by everyone and merged. */
static struct round_action pull_frag(struct fx *f, uint64_t *step, int p)
{
	struct round_action a = pull_next(f, step);
	struct core_merged mg;

	if (a.frag != p) {
		for (int id = 0; id < M; id++)
			answer_at(f, id, a.round, a.frag, 0, 0, *step, 0, 0);
		merge(f, poll(f), &mg);
		a = pull_next(f, step);
	}
	assert_int_equal(a.frag, p);
	return a;
}

/* One round answered by learners 0 and 1 with every value v; merged. */
static void round_of(struct fx *f, uint64_t *hb, float v, struct core_merged *mg)
{
	struct round_action a = pull_next(f, hb);

	answer_at(f, 0, a.round, a.frag, f->s->versions[a.frag], v, *hb, 1, 10);
	answer_at(f, 1, a.round, a.frag, f->s->versions[a.frag], v, *hb, 1, 10);
	merge(f, poll(f), mg);
}

static void answers_merge_and_the_version_goes_up(void **state)
{
	struct fx *f = *state;
	struct round_action a;
	struct core_merged mg;
	float before[NPARAM];
	const float *th;
	size_t off, n;

	fx_start(f);
	assert_int_equal(join_all(f), 0);
	a = poll(f);                     /* the first round, at once */
	assert_int_equal(a.kind, ROUND_PULL);
	assert_int_equal(a.round, 1);
	assert_int_equal(a.frag, 1);     /* round mod P */
	off = f->s->frag_off[1];
	n = f->ft.frags[1].numel;
	memcpy(before, f->s->theta, sizeof(before));

	f->now += 0.3;
	assert_int_equal(answer(f, 0, 1, 1, 0, 0.1f, 0, ENC_F32), CORE_QUEUED);
	assert_int_equal(poll(f).kind, ROUND_NONE);   /* 1 of K = 2 */
	assert_int_equal(answer(f, 1, 1, 1, 0, 0.3f, 0, ENC_F32), CORE_QUEUED);
	/* no step time known: no grace, the merge is due at the quorum */
	merge(f, poll(f), &mg);
	assert_int_equal(mg.frag, 1);
	assert_int_equal(mg.round, 1);
	assert_int_equal(mg.merged, 2);
	assert_int_equal(mg.updated, 1);
	assert_int_equal(mg.version, 1);
	assert_int_equal(mg.done, 0);
	assert_int_equal(f->s->versions[1], 1);
	assert_int_equal(f->s->versions[0], 0);
	assert_int_equal(f->s->rs.completed, 1);
	assert_int_equal(f->s->acc.merged, 2);
	/* equal weights (10² / 1): Δ = 0.2, Θ ← Θ − Δ on fragment 1 only */
	th = f->s->theta;
	for (size_t i = 0; i < n; i++)
		assert_float_equal(th[off + i], before[off + i] - 0.2f, 1e-6);
	for (size_t i = 0; i < f->s->frag_off[1]; i++)
		assert_float_equal(th[i], before[i], 0);
	/* tokens and compute counted for the fragment's share */
	assert_float_equal(f->s->acc.tokens_merged,
			   2 * 10.0 * (double)n / NPARAM, 1e-9);
	/* learner 2 answers after the merge: late, not an error */
	assert_int_equal(answer(f, 2, 1, 1, 0, 0.1f, 0, ENC_F32), CORE_LATE);
	assert_int_equal(f->s->acc.late, 1);
	assert_int_equal(f->s->acc.rejected, 0);
	/* the merge wrote a checkpoint (checkpointEvery 1) */
	assert_int_equal(access(f->dir, F_OK), 0);
}

static void bad_answers_are_refused(void **state)
{
	struct fx *f = *state;
	struct round_action a;
	struct core_merged mg;
	float before[NPARAM];
	size_t off, n;

	fx_start(f);
	join_all(f);
	a = poll(f);
	assert_int_equal(a.kind, ROUND_PULL);
	memcpy(before, f->s->theta, sizeof(before));
	/* refused outright: not counted for the round */
	assert_int_equal(answer(f, 0, 1, 7, 0, 0.1f, 0, ENC_F32), CORE_REFUSED);
	assert_int_equal(answer(f, 0, 9, 1, 0, 0.1f, 0, ENC_F32), CORE_REFUSED);
	assert_int_equal(answer(f, 0, 1, 0, 0, 0.1f, 0, ENC_F32), CORE_REFUSED);
	assert_int_equal(f->s->acc.rejected, 3);
	/* counted for the round, not merged */
	assert_int_equal(answer(f, 0, 1, 1, 0, NAN, 0, ENC_F32), CORE_INVALID);
	assert_int_equal(answer(f, 0, 1, 1, 0, 0.1f, 0, ENC_F32), CORE_REFUSED);
	assert_int_equal(answer(f, 2, 1, 1, 0, 0.1f, 1, ENC_F32), CORE_INVALID);
	assert_int_equal(f->s->acc.rejected, 6);
	assert_int_equal(poll(f).kind, ROUND_NONE);   /* no valid answer yet */
	/* the last learner's is valid: all are in, what is valid merges */
	assert_int_equal(answer(f, 1, 1, 1, 0, 0.5f, 0, ENC_F32), CORE_QUEUED);
	/* only the valid answer reached the round's accumulator */
	assert_int_equal(outer_acc_count(&f->s->accs[a.slot]), 1);
	merge(f, poll(f), &mg);
	assert_int_equal(mg.merged, 1);
	assert_int_equal(mg.version, 1);
	off = f->s->frag_off[1];
	n = f->ft.frags[1].numel;
	for (size_t i = 0; i < n; i++)
		assert_float_equal(f->s->theta[off + i], before[off + i] - 0.5f, 1e-6);

	/* round 2 (fragment 0): an unknown encoding is invalid too */
	for (int id = 0; id < M; id++)
		core_heartbeat(f->s, id, &(struct wire_heartbeat){ .step = 1 },
			       f->now);
	a = poll(f);
	assert_int_equal(a.kind, ROUND_PULL);
	assert_int_equal(a.round, 2);
	assert_int_equal(answer(f, 0, 2, 0, 1, 0.1f, 0, 7), CORE_INVALID);
	assert_int_equal(f->s->acc.rejected, 7);
}

/*
 * int4 answers (docs/protocol.md): a truncated and a garbled one are
 * counted refusals, a valid one merges its decoded values; an int4
 * update decodes within half a block scale of Θ.
 */
static void int4_answers_and_updates(void **state)
{
	struct fx *f = *state;
	struct round_action a;
	struct core_merged mg;
	float before[NPARAM], x[NPARAM], dec[NPARAM];
	uint8_t buf[64], *up;
	size_t n, off, len;
	int enc;

	fx_start(f);
	join_all(f);
	a = poll(f);
	assert_int_equal(a.kind, ROUND_PULL);
	n = f->ft.frags[a.frag].numel;
	off = f->s->frag_off[a.frag];
	len = enc_size(ENC_INT4, n);
	assert_true(len <= sizeof(buf));
	memcpy(before, f->s->theta, sizeof(before));
	for (size_t i = 0; i < n; i++)
		x[i] = 0.07f * ((float)(i % 8) - 3.2f);
	assert_int_equal(enc_encode(ENC_INT4, x, n, buf, NULL), 0);
	assert_int_equal(enc_decode(ENC_INT4, buf, len, dec, n, NULL), 0);
	/* truncated by one byte */
	assert_int_equal(answer_bytes(f, 0, a.round, a.frag, ENC_INT4, buf,
				      len - 1), CORE_INVALID);
	assert_int_equal(f->s->acc.rejected, 1);
	/* garbled: a nibble 0 */
	buf[4] &= 0xf0;
	assert_int_equal(answer_bytes(f, 1, a.round, a.frag, ENC_INT4, buf,
				      len), CORE_INVALID);
	assert_int_equal(f->s->acc.rejected, 2);
	assert_int_equal(enc_encode(ENC_INT4, x, n, buf, NULL), 0);
	assert_int_equal(answer_bytes(f, 2, a.round, a.frag, ENC_INT4, buf,
				      len), CORE_QUEUED);
	merge(f, poll(f), &mg);
	assert_int_equal(mg.merged, 1);
	for (size_t i = 0; i < n; i++)
		assert_float_equal(f->s->theta[off + i], before[off + i] - dec[i],
				   1e-6);
	/* the update of that fragment in int4 */
	f->js.syncer.update_encoding = ENC_INT4;
	up = core_update_payload(f->s, a.frag, &enc, &len);
	assert_non_null(up);
	assert_int_equal(enc, ENC_INT4);
	assert_int_equal(len, enc_size(ENC_INT4, n));
	assert_int_equal(enc_decode(ENC_INT4, up, len, dec, n, NULL), 0);
	for (size_t b = 0; b < n; b += ENC_INT4_BLOCK) {
		size_t m = n - b < ENC_INT4_BLOCK ? n - b : ENC_INT4_BLOCK;
		float amax = 0;

		for (size_t i = 0; i < m; i++)
			amax = fmaxf(amax, fabsf(f->s->theta[off + b + i]));
		for (size_t i = 0; i < m; i++)
			assert_at_most(fabsf(dec[b + i] - f->s->theta[off + b + i]),
				       amax / 14.0f * 1.0001f);
	}
	free(up);
}

static void a_merge_with_nothing_valid_changes_nothing(void **state)
{
	struct fx *f = *state;
	struct core_merged mg;

	fx_start(f);
	join_all(f);
	assert_int_equal(poll(f).kind, ROUND_PULL);
	for (int id = 0; id < M; id++)
		assert_int_equal(answer(f, id, 1, 1, 0, INFINITY, 0, ENC_F32),
				 CORE_INVALID);
	merge(f, poll(f), &mg);
	assert_int_equal(mg.merged, 0);
	assert_int_equal(mg.updated, 0);
	assert_int_equal(mg.version, 0);
	assert_int_equal(f->s->rs.completed, 1);
	assert_int_equal(f->s->acc.rejected, M);
}

/*
 * The audit of merged steps (syncer/audit.h): an answer that holds steps
 * of one merged before — what a learner that keeps its base until the
 * update sends — is counted in double_merged_steps; answers that follow
 * the rule (docs/design.md §3, Learner) are not; a new learner process
 * starts its count again. Per learner: its merged steps and the most in
 * one merged answer.
 */
static void steps_merged_twice_are_counted(void **state)
{
	struct fx *f = *state;
	struct round_action a;
	struct core_merged mg;
	struct round_action pulls[8];
	uint64_t sizes[2], resume, hb = 0;
	struct wire_hello h;

	fx_start(f);
	join_all(f);
	a = pull_next(f, &hb);
	assert_int_equal(a.frag, 1);
	/* learners 0 and 1: steps 1..5 from version 0 */
	answer_at(f, 0, a.round, 1, 0, 0.1f, 5, 5, 50);
	answer_at(f, 1, a.round, 1, 0, 0.1f, 5, 5, 50);
	merge(f, poll(f), &mg);
	assert_int_equal(mg.merged, 2);
	assert_int_equal(audit_merged_steps(&f->s->audit), 10);
	assert_int_equal(f->s->audit.double_merged_steps, 0);
	assert_int_equal(f->s->audit.repeat_base, 0);
	assert_int_equal(f->s->audit.steps[0], 5);
	assert_int_equal(f->s->audit.max_steps[1], 5);
	/* fragment 0's round: nothing to merge */
	a = pull_next(f, &hb);
	assert_int_equal(a.frag, 0);
	answer_at(f, 0, a.round, 0, 0, 0, 5, 0, 0);
	answer_at(f, 1, a.round, 0, 0, 0, 5, 0, 0);
	merge(f, poll(f), &mg);
	assert_int_equal(mg.merged, 0);
	/* fragment 1 again, both still on version 0 (the update not applied
	 * yet): learner 0 sends steps 1..8, learner 1 only 6..8 */
	a = pull_next(f, &hb);
	assert_int_equal(a.frag, 1);
	answer_at(f, 0, a.round, 1, 0, 0.1f, 8, 8, 80);
	answer_at(f, 1, a.round, 1, 0, 0.1f, 8, 3, 30);
	merge(f, poll(f), &mg);
	assert_int_equal(mg.merged, 2);
	assert_int_equal(audit_merged_steps(&f->s->audit), 21);
	assert_int_equal(f->s->audit.double_merged_steps, 5);
	assert_int_equal(f->s->audit.repeat_base, 2);
	assert_int_equal(f->s->audit.max_steps[0], 8);
	assert_int_equal(f->s->audit.max_steps[1], 5);
	/* learner 0 answers the next round of fragment 1 at its step 100,
	 * then restarts before the merge: the new process (incarnation 99)
	 * numbers its steps from 2. The old answer's steps count as merged
	 * but are no mark for the new process */
	a = pull_frag(f, &hb, 1);
	answer_at(f, 0, a.round, 1, 2, 0.1f, 100, 3, 30);
	core_leave(f->s, 0, "test");
	h = hello_of(f, 0, sizes);
	h.incarnation = 99;
	core_join(f->s, &h, f->now, &resume, pulls, 8);
	answer_at(f, 1, a.round, 1, 2, 0.1f, 9, 1, 10);
	merge(f, poll(f), &mg);
	assert_int_equal(mg.merged, 2);
	assert_int_equal(audit_merged_steps(&f->s->audit), 25);
	assert_int_equal(f->s->audit.double_merged_steps, 5);
	a = pull_frag(f, &hb, 1);
	answer_at(f, 0, a.round, 1, 3, 0.1f, 4, 2, 20);
	answer_at(f, 1, a.round, 1, 3, 0.1f, 10, 1, 10);
	merge(f, poll(f), &mg);
	assert_int_equal(mg.merged, 2);
	assert_int_equal(audit_merged_steps(&f->s->audit), 28);
	assert_int_equal(f->s->audit.double_merged_steps, 5);
	assert_int_equal(f->s->audit.repeat_base, 2);
	/* per learner: the steps, and the most in one answer, the earlier
	 * process's answer included */
	assert_int_equal(f->s->audit.steps[0], 18);
	assert_int_equal(f->s->audit.steps[1], 10);
	assert_int_equal(f->s->audit.max_steps[0], 8);
	assert_int_equal(f->s->audit.max_steps[1], 5);
	/* a late answer is not merged: neither count moves */
	assert_int_equal(answer_at(f, 2, a.round, 1, 3, 0.1f, 60, 50, 500),
			 CORE_LATE);
	assert_int_equal(f->s->audit.steps[2], 0);
	assert_int_equal(f->s->audit.max_steps[2], 0);
	assert_int_equal(audit_merged_steps(&f->s->audit), 28);
}

/* Merges every round that is due now, oldest first as core_poll takes
 * them; their round numbers into order[] (room for 8), how many back. */
static int merge_due_rounds(struct fx *f, uint64_t *order)
{
	struct round_action a;
	struct core_merged mg;
	int n = 0;

	while ((a = poll(f)).kind == ROUND_MERGE) {
		assert_true(n < 8);
		order[n++] = a.round;
		merge(f, a, &mg);
	}
	return n;
}

/* Learner id leaves and joins again, the same process (its sidecar
 * reconnected after a partition); its pulls into pulls (room for 8). */
static int rejoin(struct fx *f, uint32_t id, struct round_action *pulls)
{
	struct wire_hello h;
	uint64_t sizes[2], resume;

	core_leave(f->s, (int)id, "test");
	h = hello_of(f, id, sizes);
	return core_join(f->s, &h, f->now, &resume, pulls, 8);
}

/*
 * Two rounds of one fragment in flight (r + 1 merged before r): the
 * younger is ready while the older still waits for learners whose pull
 * the younger's replaced in their exchange. The older is merged first,
 * with what it has: merged after the younger it would put learner 0's
 * answer to it below the steps of its answer to the younger, and the
 * audit would count them merged twice (docs/syncer.md, Quorum and
 * grace). Before, the older round waited on, and a learner joining
 * again after a partition brought it its quorum, long after.
 */
static void a_fragment_merges_its_rounds_in_order(void **state)
{
	struct fx *f = *state;
	struct round_action r1, r2, r3, pulls[8];
	uint64_t hb = 0, order[16];
	int n, k;

	fx_start(f);
	join_all(f);
	r1 = pull_next(f, &hb);
	r2 = pull_next(f, &hb);
	assert_int_equal(r1.frag, 1);
	assert_int_equal(r2.frag, 0);
	/* round 1: learner 0 only, steps (hb − 2, hb] */
	answer_at(f, 0, r1.round, 1, 0, 0.1f, hb, 2, 20);
	for (int id = 0; id < M; id++)
		answer_at(f, id, r2.round, 0, 0, 0.1f, hb, 2, 20);
	assert_int_equal(merge_due_rounds(f, order), 1);
	assert_int_equal(order[0], r2.round);
	/* round 3, fragment 1 again, while round 1 is in flight */
	r3 = pull_next(f, &hb);
	assert_int_equal(r3.frag, 1);
	for (int id = 0; id < M; id++)
		answer_at(f, id, r3.round, 1, 0, 0.1f, hb + 3, 3, 30);
	n = merge_due_rounds(f, order);
	/* learner 2 back after a partition, pulled for what is in flight;
	 * it answers round 1 if it is (its quorum, before) */
	k = rejoin(f, 2, pulls);
	for (int i = 0; i < k; i++)
		if (pulls[i].round == r1.round)
			answer_at(f, 2, r1.round, 1, 0, 0.1f, hb + 5, 2, 20);
	n += merge_due_rounds(f, order + n);
	assert_int_equal(f->s->audit.double_merged_steps, 0);
	assert_int_equal(n, 2);
	assert_int_equal(order[0], r1.round);
	assert_int_equal(order[1], r3.round);
	assert_int_equal(f->s->versions[1], 2);
	/* round 1 is over: an answer to it is late */
	assert_int_equal(answer_at(f, 2, r1.round, 1, 0, 0.1f, hb + 5, 2, 20),
			 CORE_LATE);
	/* learner 0: 2 + 2 + 3 steps, each merged once */
	assert_int_equal(f->s->audit.steps[0], 7);
}

/*
 * A learner joining while two rounds of one fragment are in flight, the
 * younger in the lower slot, is pulled for them oldest first: it answers
 * them in that order, and as the fragment merges them in that order its
 * steps reach Θ in the order it trained them. Pulled in slot order, its
 * answer to the younger round held its earlier steps, merged after those
 * of its answer to the older one: counted merged twice.
 */
static void a_joining_learner_is_pulled_oldest_first(void **state)
{
	struct fx *f = *state;
	struct round_action r1, r2, r3, r4, pulls[8];
	uint64_t hb = 0, order[8], s;
	int n, k;

	fx_start(f);
	join_all(f);
	r1 = pull_next(f, &hb);
	r2 = pull_next(f, &hb);
	for (int id = 0; id < M; id++)
		answer_at(f, id, r1.round, 1, 0, 0.1f, hb, 1, 10);
	assert_int_equal(merge_due_rounds(f, order), 1);
	/* round 2 (fragment 0) waits: learner 0 only */
	answer_at(f, 0, r2.round, 0, 0, 0.1f, hb, 2, 20);
	r3 = pull_next(f, &hb);
	assert_int_equal(r3.frag, 1);
	assert_int_equal(r3.slot, r1.slot);
	for (int id = 0; id < M; id++)
		answer_at(f, id, r3.round, 1, 1, 0.1f, hb, 1, 10);
	assert_int_equal(merge_due_rounds(f, order), 1);
	assert_int_equal(order[0], r3.round);
	/* round 4, fragment 0 again, in the lower slot */
	r4 = pull_next(f, &hb);
	assert_int_equal(r4.frag, 0);
	assert_true(r4.slot < r2.slot);
	/* learner 2 back: pulled for both, and answers them as they came,
	 * two steps apart */
	k = rejoin(f, 2, pulls);
	assert_int_equal(k, 2);
	s = hb;
	for (int i = 0; i < k; i++)
		answer_at(f, 2, pulls[i].round, 0, 0, 0.1f, s + 2 * (uint64_t)(i + 1),
			  2, 20);
	answer_at(f, 0, r4.round, 0, 0, 0.1f, hb + 1, 1, 10);
	answer_at(f, 1, r4.round, 0, 0, 0.1f, hb + 1, 1, 10);
	n = merge_due_rounds(f, order);
	assert_int_equal(f->s->audit.double_merged_steps, 0);
	/* oldest first, and merged in that order */
	assert_int_equal(pulls[0].round, r2.round);
	assert_int_equal(pulls[1].round, r4.round);
	assert_int_equal(n, 2);
	assert_int_equal(order[0], r2.round);
	assert_int_equal(order[1], r4.round);
	assert_int_equal(f->s->audit.steps[2], 1 + 1 + 2 + 2);
}

/*
 * An answer from a base more than staleVersions behind the fragment's
 * version is taken as empty and counted; one within the bound merges.
 */
static void stale_answers_are_empty_and_counted(void **state)
{
	struct fx *f = *state;
	struct core_merged mg;
	struct round_action a;
	float before[NPARAM];
	size_t off;

	fx_start(f);
	join_all(f);
	a = poll(f);
	assert_int_equal(a.kind, ROUND_PULL);
	assert_int_equal(a.frag, 1);
	f->s->versions[1] = 6;            /* as after six merges */
	memcpy(before, f->s->theta, sizeof(before));
	/* 5 behind the default 4: stale; 4 behind: merged */
	assert_int_equal(answer_at(f, 0, a.round, 1, 1, 5.0f, 3, 3, 30),
			 CORE_QUEUED);
	assert_int_equal(f->s->audit.stale, 1);
	assert_int_equal(answer_at(f, 1, a.round, 1, 2, 0.5f, 3, 3, 30),
			 CORE_QUEUED);
	assert_int_equal(f->s->audit.stale, 1);
	merge(f, poll(f), &mg);
	assert_int_equal(mg.merged, 1);
	assert_int_equal(mg.version, 7);
	assert_int_equal(f->s->acc.empty, 1);
	off = f->s->frag_off[1];
	for (size_t i = 0; i < f->ft.frags[1].numel; i++)
		assert_float_equal(f->s->theta[off + i], before[off + i] - 0.5f,
				   1e-6);
	assert_int_equal(audit_merged_steps(&f->s->audit), 3);
}

/* A round of fragment 1 at the learners' step `step`: learner 0 answers
 * `steps` steps from base b0, learner 1 one step from b1; the merged
 * answers' count. */
static int stale_round(struct fx *f, uint64_t *hb, uint64_t step, uint64_t b0,
		       uint64_t steps, uint64_t b1)
{
	struct round_action a = pull_frag(f, hb, 1);
	struct core_merged mg;

	answer_at(f, 0, a.round, 1, b0, 0.1f, step, steps, 10 * steps);
	answer_at(f, 1, a.round, 1, b1, 0.1f, step, 1, 10);
	merge(f, poll(f), &mg);
	return mg.merged;
}

/*
 * invariants.stale_merged (syncer/audit.h): learner 0 leaves with
 * fragment 1 at version 0 and says Hello again at its step 50, six
 * versions on. An answer holding its steps from 20, before that Hello,
 * that reports the current version (a share kept at α labelled with
 * the Welcome's, docs/exchange.md) is merged and counted; reporting its
 * own version 0 it is emptied as stale, not counted; one of steps all
 * after the Hello is not judged, nor is a new learner process.
 */
static void stale_progress_merged_is_counted(void **state)
{
	struct fx *f = *state;
	struct round_action pulls[8];
	uint64_t sizes[2], resume, hb = 50;
	struct wire_hello h;
	json_t *st;

	fx_start(f);
	join_all(f);
	core_leave(f->s, 0, "test");
	f->s->versions[1] = 6;            /* six merges without it */
	h = hello_of(f, 0, sizes);
	h.step = 50;
	core_join(f->s, &h, f->now, &resume, pulls, 8);
	assert_int_equal(stale_round(f, &hb, 60, 6, 40, 6), 2);
	assert_int_equal(f->s->audit.stale_held, 1);
	assert_int_equal(f->s->audit.stale_merged, 1);
	assert_int_equal(stale_round(f, &hb, 70, 0, 50, 7), 1);
	assert_int_equal(f->s->audit.stale, 1);
	assert_int_equal(f->s->audit.stale_held, 2);
	assert_int_equal(f->s->audit.stale_merged, 1);
	assert_int_equal(stale_round(f, &hb, 80, 8, 10, 8), 2);
	assert_int_equal(f->s->audit.stale_merged, 1);
	/* a new process starts from what it is sent after its start */
	core_leave(f->s, 0, "test");
	f->s->versions[1] += 6;
	h.incarnation = 99;
	h.step = 90;
	core_join(f->s, &h, f->now, &resume, pulls, 8);
	assert_int_equal(stale_round(f, &hb, 91, f->s->versions[1], 5,
				  f->s->versions[1]), 2);
	assert_int_equal(f->s->audit.stale_held, 2);
	assert_int_equal(f->s->audit.stale_merged, 1);
	st = status_of(f);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(
		st, "invariants"), "stale_merged")), 1);
	json_decref(st);
}

/*
 * The bounds on one answer (docs/syncer.md): over clipSteps·H steps its
 * Δ and weight are scaled to that many steps; tokens count at most B·T a
 * step, whatever the answer claims.
 */
static void long_answers_are_clipped(void **state)
{
	struct fx *f = *state;
	struct core_merged mg;
	struct round_action a;
	float before[NPARAM];
	uint64_t hb = 0;
	size_t off = 0, n = 0;

	fx_start(f);
	join_all(f);
	/* H = P = 2, clipSteps 4: at most 8 steps; B·T = 8 · 64 */
	a = pull_next(f, &hb);
	memcpy(before, f->s->theta, sizeof(before));
	off = f->s->frag_off[a.frag];
	n = f->ft.frags[a.frag].numel;
	/* 80 steps, Δ 1: as 8 steps, Δ 0.1, weight 80²/8; the other 8
	 * steps, Δ 0.5, the same weight: the mean is 0.3 (unbounded: 0.95) */
	answer_at(f, 0, a.round, a.frag, 0, 1.0f, 80, 80, 800);
	answer_at(f, 1, a.round, a.frag, 0, 0.5f, 8, 8, 80);
	assert_int_equal(f->s->audit.clipped, 1);
	/* screened per step of the 8 it was scaled to, not of its 80: a
	 * norm per step ten times too small would pass any screen */
	for (int slot = 0, seen = 0; slot < f->s->rs.cfg.overlap; slot++)
		for (const struct answer *x = f->s->answers[slot]; x; x = x->next)
			if (x->learner == 0) {
				assert_float_equal(x->norm_step,
						   0.1 * sqrt((double)n) / 8, 1e-6);
				assert_int_equal(++seen, 1);
			}
	merge(f, poll(f), &mg);
	assert_int_equal(mg.merged, 2);
	for (size_t i = 0; i < n; i++)
		assert_float_equal(f->s->theta[off + i], before[off + i] - 0.3f,
				   1e-6);
	/* a claim of 10⁶ tokens in one step is a lie (B·T = 512): refused,
	 * the other answer merged alone */
	a = pull_next(f, &hb);
	memcpy(before, f->s->theta, sizeof(before));
	off = f->s->frag_off[a.frag];
	n = f->ft.frags[a.frag].numel;
	assert_int_equal(answer_at(f, 0, a.round, a.frag, 0, 1.0f, 81, 1,
				   1000000), CORE_INVALID);
	assert_int_equal(answer_at(f, 1, a.round, a.frag, 0, 0.25f, 9, 1, 512),
			 CORE_QUEUED);
	answer_at(f, 2, a.round, a.frag, 0, 0.25f, 9, 1, 512);
	assert_int_equal(f->s->audit.clipped, 1);
	assert_int_equal(f->s->bounds.answers_refused, 1);
	merge(f, poll(f), &mg);
	assert_int_equal(mg.merged, 2);
	for (size_t i = 0; i < n; i++)
		assert_float_equal(f->s->theta[off + i], before[off + i] - 0.25f,
				   1e-6);
}

/*
 * What a learner claims about itself (syncer/bounds.h): more tokens than
 * B·T a step is refused, counted, its step not taken for the pacing,
 * never merged; more steps than the time since its base allows at the
 * job's pace, or a step far ahead of its last one, is credited what the
 * clock allows (a cut, counted): the merge, the pacing and the learner's
 * step see the credited numbers only.
 */
static void answers_beyond_the_bounds_are_refused(void **state)
{
	struct fx *f = *state;
	struct wire_heartbeat hb = { .step_time = 0.01 };
	struct round_action a;
	struct core_merged mg;
	float before[NPARAM];
	size_t off, n;

	fx_start(f);
	join_all(f);                       /* at t = 100 */
	for (int id = 0; id < M; id++)     /* each learner: 10 ms a step */
		assert_int_equal(core_heartbeat(f->s, id, &hb, f->now), 0);
	a = poll(f);
	assert_int_equal(a.kind, ROUND_PULL);
	memcpy(before, f->s->theta, sizeof(before));
	off = f->s->frag_off[a.frag];
	n = f->ft.frags[a.frag].numel;
	f->now += 0.5;
	/* B·T = 512: 513 tokens in one step is refused, 512 is not */
	assert_int_equal(answer_at(f, 0, a.round, a.frag, 0, 9.0f, 1, 1, 513),
			 CORE_INVALID);
	assert_int_equal(f->s->bounds.answers_refused, 1);
	assert_int_equal(f->s->bounds.l[0].refused_answers, 1);
	assert_int_equal(f->s->acc.rejected, 1);
	assert_int_equal(f->s->learners[0].step, 0);   /* not taken */
	/* 0.5 s since the join at 10 ms a step: 4 · (0.5 + 1) / 0.01 = 600
	 * steps allowed; 601 (at step 601) credited 600 (at step 600) */
	assert_float_equal(bounds_allowed(&f->s->bounds, 1, 0.5), 600, 1e-9);
	assert_int_equal(answer_at(f, 1, a.round, a.frag, 0, 9.0f, 601, 601,
				   601 * 512), CORE_QUEUED);
	assert_int_equal(f->s->bounds.answers_refused, 1);
	assert_int_equal(f->s->bounds.l[1].cuts, 1);
	assert_int_equal(f->s->learners[1].step, 600);
	assert_int_equal(f->s->answers[0] ? f->s->answers[0]->steps
					  : f->s->answers[1]->steps, 600);
	assert_int_equal(answer_at(f, 2, a.round, a.frag, 0, 75.0f, 600, 600,
				   600 * 512), CORE_QUEUED);
	assert_int_equal(f->s->learners[2].step, 600);
	assert_int_equal(f->s->bounds.l[2].cuts, 0);
	merge(f, poll(f), &mg);
	assert_int_equal(mg.merged, 2);
	assert_int_equal(f->s->acc.rejected, 1);
	/* both clipped to clipSteps·H = 8 steps, of equal weight:
	 * (9 + 75) · 8 / 600 / 2 */
	for (size_t i = 0; i < n; i++)
		assert_float_equal(f->s->theta[off + i], before[off + i] - 0.56f,
				   1e-5);
	/* learner 2's next answer reports a step 10⁶ past its last one:
	 * credited 800, what 1 s since its reference (the join) allows */
	f->now += 0.5;
	hb.step = 700;
	for (int id = 0; id < M; id++)
		assert_int_equal(core_heartbeat(f->s, id, &hb, f->now), 0);
	a = poll(f);
	assert_int_equal(a.kind, ROUND_PULL);
	assert_int_equal(answer_at(f, 2, a.round, a.frag, 0, 0.5f, 1000600, 1,
				   512), CORE_QUEUED);
	assert_int_equal(f->s->bounds.l[2].cuts, 1);
	assert_int_equal(f->s->learners[2].step_max, 800);
	assert_int_equal(f->s->bounds.cuts, 2);
	/* an answer moves the learner's base: its next answer for this
	 * fragment is measured from the start of this round (t = 101) */
	f->now += 1.0;
	assert_int_equal(answer_at(f, 0, a.round, a.frag, 0, 0.1f, 701, 1, 512),
			 CORE_QUEUED);
	assert_float_equal(f->s->bounds.from[0 * 2 + a.frag], 101.0, 0);
	assert_float_equal(f->s->bounds.from[0 * 2 + (1 - a.frag)], 100.0, 0);
	assert_int_equal(f->s->bounds.answers_refused, 1);
	assert_int_equal(f->s->bounds.excluded, 0);   /* 2 cuts of 10 */
}

/*
 * One answer's share of a merge is at most maxShare (0.5): weights
 * 4·512², 512², 512² (shares 2/3, 1/6, 1/6) become 1/2, 1/4, 1/4.
 */
static void one_answer_share_is_capped(void **state)
{
	struct fx *f = *state;
	struct core_merged mg;
	struct round_action a;
	float before[NPARAM];
	uint64_t hb = 0;
	size_t off, n;

	fx_start(f);
	join_all(f);
	for (int cap = 0; cap < 2; cap++) {
		f->js.syncer.max_share = cap ? 0.5 : 1.0;
		a = pull_next(f, &hb);
		memcpy(before, f->s->theta, sizeof(before));
		off = f->s->frag_off[a.frag];
		n = f->ft.frags[a.frag].numel;
		answer_at(f, 0, a.round, a.frag, 0, 1.2f, hb, 4, 4 * 512);
		answer_at(f, 1, a.round, a.frag, 0, 0.0f, hb, 1, 512);
		answer_at(f, 2, a.round, a.frag, 0, 0.0f, hb, 1, 512);
		merge(f, poll(f), &mg);
		assert_int_equal(mg.merged, 3);
		assert_int_equal(f->s->audit.capped, cap ? 1 : 0);
		/* Δ = Σ share · Δ_m: 2/3 · 1.2 = 0.8 uncapped, 1/2 · 1.2 capped */
		for (size_t i = 0; i < n; i++)
			assert_float_equal(f->s->theta[off + i],
					   before[off + i] - (cap ? 0.6f : 0.8f),
					   1e-6);
	}
}

/*
 * Finite answers whose step overflows Θ (found by tests/fuzz/fuzz_wire):
 * Θ at 10³⁷, so that Δ = −3·10³⁸ passes the size screen (30 times the
 * fragment, not 100), and Nesterov momentum 0.9 moves Θ by 1.9 · 3·10³⁸,
 * past FLT_MAX. The step is undone: the fragment keeps its Θ, momentum
 * and version, the answers count as rejected, /status steps_undone and
 * /metrics steps_undone_total say so. The job goes on: the next round of
 * the fragment merges, no step is merged twice, and the checkpoint
 * written then loads with a finite Θ.
 */
static void a_step_that_overflows_is_not_applied(void **state)
{
	struct fx *f = *state;
	struct round_action a;
	struct core_merged mg;
	float before[NPARAM];
	uint64_t rejected, hb = 0;
	struct syncer_ckpt c;
	json_t *o;
	char *m;

	for (int i = 0; i < NPARAM; i++)
		f->init[i] = 1e37f;
	f->js.syncer.outer_momentum = 0.9;
	f->js.syncer.nesterov = 1;
	fx_start(f);
	join_all(f);
	a = poll(f);
	assert_int_equal(a.kind, ROUND_PULL);
	memcpy(before, f->s->theta, sizeof(before));
	rejected = f->s->acc.rejected;
	assert_int_equal(answer(f, 0, a.round, a.frag, 0, -3e38f, 0, ENC_F32),
			 CORE_QUEUED);
	assert_int_equal(answer(f, 1, a.round, a.frag, 0, -3e38f, 0, ENC_F32),
			 CORE_QUEUED);
	a = poll(f);
	merge(f, a, &mg);
	assert_int_equal(mg.merged, 0);
	assert_int_equal(mg.updated, 0);
	assert_int_equal(f->s->versions[mg.frag], 0);
	assert_int_equal(f->s->acc.rejected, rejected + 2);
	assert_int_equal(f->s->scr.size_refused, 0);
	assert_int_equal(f->s->steps_undone, 1);
	for (int i = 0; i < NPARAM; i++) {
		assert_exactly(f->s->theta[i], before[i]);
		assert_exactly(f->s->mom[i], 0.0f);
	}
	o = status_of(f);
	assert_int_equal(json_integer_value(json_object_get(o, "steps_undone")), 1);
	json_decref(o);
	m = http_get(f, "/metrics");
	assert_non_null(strstr(m, "\nddiloco_syncer_steps_undone_total 1\n"));
	free(m);

	/* rounds go on: fragment 0, then fragment 1 again, both merged */
	for (int r = 0; r < 2; r++) {
		one_round(f, &hb, &mg);
		assert_int_equal(mg.updated, 1);
		assert_int_equal(f->s->versions[mg.frag], 1);
	}
	assert_int_equal(f->s->steps_undone, 1);
	assert_int_equal(f->s->audit.double_merged_steps, 0);
	/* what was written since is a finite Θ */
	assert_int_equal(syncer_ckpt_load_newest(f->dir, f->ft.fingerprint, 2,
						 NPARAM, M, &c, NULL, 0, NULL), 1);
	assert_int_equal(c.rounds_completed, 3);
	for (int i = 0; i < NPARAM; i++) {
		assert_true(isfinite(c.theta[i]));
		assert_exactly(c.theta[i], f->s->theta[i]);
	}
	syncer_ckpt_release(&c);
}

/*
 * The size screen: in a fragment's first merges, with no history to
 * screen against, an answer whose norm per step is over 100 times its
 * fragment of Θ is refused at once (a finite one, ±1000 against values
 * of 0.01 to 0.23, which would have moved Θ by 500 and left the learners
 * nothing to train on): counted in rejected, /status answers.refused_size
 * and /metrics; the other answer merges alone, and the next rounds merge
 * as before. A model of zeros has nothing to measure by: no screen.
 */
static void answers_far_beyond_the_model_are_refused(void **state)
{
	struct fx *f = *state;
	struct round_action a;
	struct core_merged mg;
	uint64_t hb = 0;
	float before;
	json_t *o;
	char *m;

	fx_start(f);
	join_all(f);
	a = pull_next(f, &hb);
	before = f->s->theta[f->s->frag_off[a.frag]];
	assert_int_equal(answer_at(f, 0, a.round, a.frag, 0, 1000.0f, hb, 1, 10),
			 CORE_QUEUED);
	assert_int_equal(answer_at(f, 1, a.round, a.frag, 0, 0.1f, hb, 1, 10),
			 CORE_QUEUED);
	assert_int_equal(f->s->scr.size_refused, 1);
	assert_int_equal(f->s->scr.history_refused, 0);
	merge(f, poll(f), &mg);
	assert_int_equal(mg.merged, 1);
	assert_int_equal(f->s->versions[a.frag], 1);
	assert_float_equal(f->s->theta[f->s->frag_off[a.frag]], before - 0.1f, 1e-6);
	o = status_of(f);
	assert_int_equal(json_integer_value(json_object_get(
			 json_object_get(o, "answers"), "refused_size")), 1);
	assert_int_equal(json_integer_value(json_object_get(
			 json_object_get(o, "answers"), "rejected")), 1);
	json_decref(o);
	m = http_get(f, "/metrics");
	assert_non_null(strstr(m, "\nddiloco_syncer_answers_size_refused_total 1\n"));
	free(m);
	/* 37 times the fragment per step passes (the history has none yet) */
	a = pull_next(f, &hb);
	assert_int_equal(answer_at(f, 0, a.round, a.frag, f->s->versions[a.frag],
				   5.0f, hb, 1, 10), CORE_QUEUED);
	assert_int_equal(answer_at(f, 1, a.round, a.frag, f->s->versions[a.frag],
				   5.0f, hb, 1, 10), CORE_QUEUED);
	merge(f, poll(f), &mg);
	assert_int_equal(mg.merged, 2);
	assert_int_equal(f->s->scr.size_refused, 1);
	fx_stop(f);

	/* a model of zeros has no size to measure by: the screen is off */
	for (int i = 0; i < NPARAM; i++)
		f->init[i] = 0;
	assert_int_equal(testlib_rmtree(f->dir), 0);
	assert_int_equal(mkdir(f->dir, 0700), 0);
	hb = 0;
	fx_start(f);
	join_all(f);
	a = pull_next(f, &hb);
	answer_at(f, 0, a.round, a.frag, 0, 1e-3f, hb, 1, 10);
	answer_at(f, 1, a.round, a.frag, 0, 1e-3f, hb, 1, 10);
	merge(f, poll(f), &mg);
	assert_int_equal(mg.merged, 2);
	assert_int_equal(f->s->scr.size_refused, 0);
}

/*
 * Two answers that agree with each other pass the per-round screen, but
 * not the history: once a fragment has SCREEN_HISTORY_MIN merged
 * norms, an answer above normOutlier (10) times their median is refused,
 * counted in rejected, /status and /metrics. Before that, nothing is
 * held against it.
 */
static void answers_far_beyond_the_history_are_refused(void **state)
{
	struct fx *f = *state;
	struct core_merged mg;
	uint64_t hb = 0, rejected;
	char *m;
	json_t *o;

	fx_start(f);
	join_all(f);
	round_of(f, &hb, 2.0f, &mg);      /* round 1, fragment 1: no history */
	assert_int_equal(mg.frag, 1);
	assert_int_equal(mg.merged, 2);
	for (int r = 2; r <= 6; r++) {    /* fragment 1: 2, 2, .1 ×4 */
		round_of(f, &hb, 0.1f, &mg);
		assert_int_equal(mg.merged, 2);
	}
	assert_int_equal(f->s->scr.hist_n[1], 6);
	assert_int_equal(f->s->scr.hist_n[0], 6);
	rejected = f->s->acc.rejected;
	/* round 7, fragment 1: 20 times the median, both refused */
	round_of(f, &hb, 2.0f, &mg);
	assert_int_equal(mg.frag, 1);
	assert_int_equal(mg.merged, 0);
	assert_int_equal(mg.updated, 0);
	assert_int_equal(f->s->versions[1], 3);
	assert_int_equal(f->s->acc.rejected, rejected + 2);
	assert_int_equal(f->s->scr.history_refused, 2);
	assert_int_equal(f->s->scr.hist_n[1], 6);   /* refused: not held */
	/* round 8, fragment 0: 5 times the median merges */
	round_of(f, &hb, 0.5f, &mg);
	assert_int_equal(mg.frag, 0);
	assert_int_equal(mg.merged, 2);
	assert_int_equal(f->s->versions[0], 4);
	assert_int_equal(f->s->scr.history_refused, 2);
	m = http_get(f, "/status");
	o = json_loads(m, 0, NULL);
	free(m);
	assert_non_null(o);
	assert_int_equal(json_integer_value(json_object_get(
			 json_object_get(o, "answers"), "refused_history")), 2);
	json_decref(o);
	m = http_get(f, "/metrics");
	assert_non_null(strstr(m, "\nddiloco_syncer_answers_norm_history_refused_total 2\n"));
	free(m);
}

/*
 * The streaming merge's state (docs/syncer.md, Merge): what a round slot
 * holds is sized by the fragment, not by the learners (the same bytes
 * for 3 and 1000 of them), and a round abandoned with an answer folded
 * leaves its slot empty: the next round there merges only its own.
 */
static void a_round_slot_holds_a_fragment_not_the_answers(void **state)
{
	struct fx *f = *state;
	struct round_action a;
	struct core_merged mg;
	float before[NPARAM];
	size_t bytes, off, n;
	uint64_t hb = 0;

	fx_start(f);
	bytes = f->s->accs[0].bytes;
	/* the sum, the input, ⌈1/0.5⌉ − 1 = 1 copy and the pending ones:
	 * fragment-sized buffers */
	assert_true(bytes >= (3 + OUTER_ACC_PENDING) * f->s->max_numel * sizeof(float));
	assert_true(bytes < (3 + OUTER_ACC_PENDING) * f->s->max_numel * sizeof(float) + 1024);
	fx_stop(f);
	f->js.learners.replicas = 1000;
	fx_start(f);
	for (int slot = 0; slot < f->js.syncer.overlap; slot++)
		assert_int_equal(f->s->accs[slot].bytes, bytes);
	fx_stop(f);
	f->js.learners.replicas = M;

	fx_start(f);
	join_all(f);
	a = pull_next(f, &hb);
	assert_int_equal(answer_at(f, 0, a.round, a.frag, 0, 5.0f, hb, 1, 10),
			 CORE_QUEUED);
	assert_int_equal(outer_acc_count(&f->s->accs[a.slot]), 1);
	core_stop(f->s, f->now);
	for (int slot = 0; slot < f->js.syncer.overlap; slot++) {
		assert_null(f->s->answers[slot]);
		assert_int_equal(outer_acc_count(&f->s->accs[slot]), 0);
	}
	/* the rounds go on (a stop request is the run loop's to act on):
	 * the next one in that slot holds its two answers only */
	f->s->stopping = 0;
	memcpy(before, f->s->theta, sizeof(before));
	a = pull_next(f, &hb);
	answer_at(f, 0, a.round, a.frag, 0, 0.25f, hb, 1, 10);
	answer_at(f, 1, a.round, a.frag, 0, 0.25f, hb, 1, 10);
	merge(f, poll(f), &mg);
	assert_int_equal(mg.merged, 2);
	off = f->s->frag_off[a.frag];
	n = f->ft.frags[a.frag].numel;
	for (size_t i = 0; i < n; i++)
		assert_float_equal(f->s->theta[off + i], before[off + i] - 0.25f,
				   1e-6);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(answers_merge_and_the_version_goes_up,
						setup, teardown),
		cmocka_unit_test_setup_teardown(bad_answers_are_refused,
						setup, teardown),
		cmocka_unit_test_setup_teardown(int4_answers_and_updates,
						setup, teardown),
		cmocka_unit_test_setup_teardown(a_merge_with_nothing_valid_changes_nothing,
						setup, teardown),
		cmocka_unit_test_setup_teardown(steps_merged_twice_are_counted,
						setup, teardown),
		cmocka_unit_test_setup_teardown(stale_progress_merged_is_counted,
						setup, teardown),
		cmocka_unit_test_setup_teardown(a_fragment_merges_its_rounds_in_order,
						setup, teardown),
		cmocka_unit_test_setup_teardown(a_joining_learner_is_pulled_oldest_first,
						setup, teardown),
		cmocka_unit_test_setup_teardown(stale_answers_are_empty_and_counted,
						setup, teardown),
		cmocka_unit_test_setup_teardown(long_answers_are_clipped,
						setup, teardown),
		cmocka_unit_test_setup_teardown(answers_beyond_the_bounds_are_refused,
						setup, teardown),
		cmocka_unit_test_setup_teardown(one_answer_share_is_capped,
						setup, teardown),
		cmocka_unit_test_setup_teardown(a_step_that_overflows_is_not_applied,
						setup, teardown),
		cmocka_unit_test_setup_teardown(answers_far_beyond_the_model_are_refused,
						setup, teardown),
		cmocka_unit_test_setup_teardown(answers_far_beyond_the_history_are_refused,
						setup, teardown),
		cmocka_unit_test_setup_teardown(a_round_slot_holds_a_fragment_not_the_answers,
						setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
