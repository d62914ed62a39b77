/*
 * The syncer's core without gRPC, on a fake clock: learners join, answer
 * and heartbeat through core_join / core_answer / core_heartbeat; the
 * round state machine's actions are run by hand (a pull is just noted, a
 * merge is core_merge). Checks the merged values, versions, counters,
 * refusals (NaN, wrong size, unknown encoding, wrong fragment or round,
 * a truncated or garbled int4 payload,
 * duplicates, a Hello for another model), what a restart from a
 * checkpoint does to versions and to answers trained before it, and
 * checkpoints that cannot be written: the rounds go on, /status and
 * /metrics say so, and the next write that succeeds clears it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/encoding.h"
#include "common/util.h"
#include "common/wire.h"
#include "syncer/syncer_int.h"
#include "tests/unit/corefix.h"

static void fx_start(struct fx *f)
{
	f->s = calloc(1, sizeof(*f->s));
	assert_non_null(f->s);
	assert_int_equal(core_init(f->s, &f->prm, f->now, NULL), 0);
}

static void fx_stop(struct fx *f)
{
	core_release(f->s);
	free(f->s);
	f->s = NULL;
}

static int setup(void **state)
{
	struct fx *f = corefix_new("core");

	f->js.syncer.grace = 0.5;
	f->js.syncer.checkpoint_every = 1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	corefix_free(*state);
	return 0;
}

static struct wire_hello hello_of(struct fx *f, uint32_t id, uint64_t *sizes)
{
	return corefix_hello(f, id, 0, sizes);
}

/* Every learner joins at step 0; returns how many pulls they got. */
static int join_all(struct fx *f)
{
	struct round_action pulls[8];
	uint64_t sizes[2], resume;
	int n = 0;

	for (uint32_t id = 0; id < M; id++) {
		struct wire_hello h = hello_of(f, id, sizes);

		assert_int_equal(core_hello_check(f->s, &h, NULL), CORE_JOIN_OK);
		n += core_join(f->s, &h, f->now, &resume, pulls, 8);
		assert_int_equal(resume, 0);
	}
	assert_int_equal(f->s->learners_connected, M);
	return n;
}

/* The next action of the round state machine at f->now. */
static struct round_action poll(struct fx *f)
{
	struct round_action a;

	syncer_round_poll(&f->s->rs, f->now, &a);
	return a;
}

/*
 * Learner id answers round/frag from base: every value `v`, the payload
 * `extra` floats longer than the fragment, in encoding enc.
 */
static enum core_verdict answer(struct fx *f, int id, uint64_t round, int frag,
				uint64_t base, float v, int extra, int enc)
{
	size_t n = (size_t)frag < (size_t)f->ft.nfrags
		   ? f->ft.frags[frag].numel : 4;
	size_t len = (n + (size_t)extra) * sizeof(float);
	float *x = malloc((n + (size_t)extra) * sizeof(float));
	uint8_t *buf = malloc(len);
	struct wire_answer a = {
		.fragment = (uint32_t)frag, .round = round, .base_version = base,
		.steps = 1, .tokens = 10, .encoding = enc, .payload = buf,
		.payload_len = len, .step = 0,   /* no pacing progress */
	};
	enum core_verdict r;

	for (size_t i = 0; i < n + (size_t)extra; i++)
		x[i] = v;
	assert_int_equal(enc_encode(ENC_F32, x, n + (size_t)extra, buf, NULL), 0);
	r = core_answer(f->s, id, &a, f->now);
	free(x);
	free(buf);
	return r;
}

/*
 * Learner id answers round/frag from base with every value v, as the
 * learner's step `step` after `steps` steps of `tokens` tokens.
 */
static enum core_verdict answer_at(struct fx *f, int id, uint64_t round,
				   int frag, uint64_t base, float v,
				   uint64_t step, uint64_t steps, uint64_t tokens)
{
	size_t n = f->ft.frags[frag].numel;
	float *x = malloc(n * sizeof(float));
	uint8_t *buf = malloc(n * sizeof(float));
	struct wire_answer a = {
		.fragment = (uint32_t)frag, .round = round, .base_version = base,
		.steps = steps, .tokens = tokens, .encoding = ENC_F32,
		.payload = buf, .payload_len = n * sizeof(float), .step = step,
	};
	enum core_verdict r;

	for (size_t i = 0; i < n; i++)
		x[i] = v;
	assert_int_equal(enc_encode(ENC_F32, x, n, buf, NULL), 0);
	r = core_answer(f->s, id, &a, f->now);
	free(x);
	free(buf);
	return r;
}

/* Heartbeats move every learner on until a round is pulled; returns it. */
static struct round_action pull_next(struct fx *f, uint64_t *step)
{
	struct round_action a;

	for (int i = 0; i < 100; i++) {
		syncer_round_poll(&f->s->rs, f->now, &a);
		if (a.kind == ROUND_PULL)
			return a;
		assert_int_equal(a.kind, ROUND_NONE);
		++*step;
		for (int id = 0; id < M; id++)
			core_heartbeat(f->s, id, &(struct wire_heartbeat){
				.step = *step }, f->now);
	}
	fail_msg("no round pulled");
	return a;
}

/* core_poll, as the run loop drives it: heartbeats move every learner
 * on (step not NULL) until it has a step for the transport. */
static struct core_step core_next(struct fx *f, uint64_t *step)
{
	struct core_step st;

	for (int i = 0; i < 100; i++) {
		if (core_poll(f->s, f->now, &st))
			return st;
		assert_non_null(step);
		++*step;
		for (int id = 0; id < M; id++)
			core_heartbeat(f->s, id, &(struct wire_heartbeat){
				.step = *step }, f->now);
	}
	fail_msg("core_poll had nothing to do");
	return st;
}

static void merge(struct fx *f, struct round_action a, struct core_merged *mg)
{
	assert_int_equal(a.kind, ROUND_MERGE);
	core_merge(f->s, a.slot, f->now, mg);
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

static void hello_is_checked(void **state)
{
	struct fx *f = *state;
	uint64_t sizes[2];
	struct wire_hello h;
	struct err e;

	fx_start(f);
	h = hello_of(f, M, sizes);
	assert_int_equal(core_hello_check(f->s, &h, &e), CORE_JOIN_INVALID);
	assert_non_null(strstr(e.msg, "out of range"));
	h = hello_of(f, 0, sizes);
	h.job = "other";
	assert_int_equal(core_hello_check(f->s, &h, &e), CORE_JOIN_MISMATCH);
	assert_non_null(strstr(e.msg, "'other'"));
	h.job = "";                      /* an old sidecar sends no job */
	assert_int_equal(core_hello_check(f->s, &h, &e), CORE_JOIN_OK);
	h.fingerprint ^= 1;
	assert_int_equal(core_hello_check(f->s, &h, &e), CORE_JOIN_MISMATCH);
	assert_non_null(strstr(e.msg, "model fingerprint mismatch: learner "));
	/* the same model cut otherwise: each fault named, not the model */
	h = hello_of(f, 0, sizes);
	sizes[1]++;
	assert_int_equal(core_hello_check(f->s, &h, &e), CORE_JOIN_MISMATCH);
	{
		char want[128];

		snprintf(want, sizeof(want), "fragment 1 size mismatch: learner %zu "
			 "parameters, syncer %zu", f->ft.frags[1].numel + 1,
			 f->ft.frags[1].numel);
		assert_string_equal(e.msg, want);
	}
	h = hello_of(f, 0, sizes);
	h.nsizes = 1;
	assert_int_equal(core_hello_check(f->s, &h, &e), CORE_JOIN_MISMATCH);
	assert_string_equal(e.msg, "fragment sizes missing: learner sent 1 sizes "
			    "for 2 fragments");
	h.nsizes = 0;
	assert_int_equal(core_hello_check(f->s, &h, &e), CORE_JOIN_MISMATCH);
	assert_string_equal(e.msg, "fragment sizes missing: learner sent 0 sizes "
			    "for 2 fragments");
	h = hello_of(f, 0, sizes);
	h.fragments = 3;
	assert_int_equal(core_hello_check(f->s, &h, &e), CORE_JOIN_MISMATCH);
	assert_string_equal(e.msg, "fragment count mismatch: learner 3 fragments, "
			    "syncer 2");
	f->s->done = 1;
	h = hello_of(f, 0, sizes);
	assert_int_equal(core_hello_check(f->s, &h, &e), CORE_JOIN_DONE);
	assert_string_equal(e.msg, "job done");
}

/*
 * Update.tokens (core_job_tokens): the heartbeats' count plus each
 * learner's steps since its last heartbeat, as the pacing estimates them,
 * at the tokens per step between its last two heartbeats.
 */
static void job_tokens_estimate_the_steps_since_a_heartbeat(void **state)
{
	struct fx *f = *state;
	/* 2^-7 s a step, so the estimate's steps are exact */
	struct wire_heartbeat hb = { .step = 10, .tokens = 1000,
				     .step_time = 0.0078125, .incarnation = 1 };

	fx_start(f);
	join_all(f);
	core_heartbeat(f->s, 0, &hb, f->now);
	core_heartbeat(f->s, 1, &hb, f->now);    /* one heartbeat: no rate */
	poll(f);
	f->now += 0.125;
	hb.step = 20;
	hb.tokens = 2000;                        /* 100 tokens a step */
	core_heartbeat(f->s, 0, &hb, f->now);
	poll(f);
	assert_int_equal(f->s->acc.tokens_trained, 3000);
	assert_int_equal(core_job_tokens(f->s, f->now), 3000);
	/* 0.5 s on: 64 steps of learner 0; learner 1 adds nothing */
	assert_int_equal(core_job_tokens(f->s, f->now + 0.5), 3000 + 6400);
	/* the estimate stops PACE_EST_MAX_S (1.5 s) after the report */
	assert_int_equal(core_job_tokens(f->s, f->now + 4), 3000 + 19200);
	/* a new process: the rate is not measured across it, the step is */
	hb = (struct wire_heartbeat){ .step = 30, .tokens = 500,
				      .step_time = 0.0078125, .incarnation = 2 };
	core_heartbeat(f->s, 0, &hb, f->now);
	poll(f);
	assert_int_equal(f->s->acc.tokens_trained, 3500);
	assert_float_equal(f->s->learners[0].tokens_per_step, 100, 0);
	assert_int_equal(core_job_tokens(f->s, f->now + 0.5), 3500 + 6400);
}

static void heartbeats_count_tokens_over_restarts(void **state)
{
	struct fx *f = *state;
	struct wire_heartbeat hb = { .step = 5, .tokens = 500, .step_time = 0.02,
				     .incarnation = 1 };

	fx_start(f);
	join_all(f);
	core_heartbeat(f->s, 0, &hb, f->now);
	assert_int_equal(f->s->acc.tokens_trained, 500);
	hb.tokens = 800;
	core_heartbeat(f->s, 0, &hb, f->now);
	assert_int_equal(f->s->acc.tokens_trained, 800);
	/* a count that went back is a learner that started over */
	hb.tokens = 100;
	hb.incarnation = 2;
	core_heartbeat(f->s, 0, &hb, f->now);
	assert_int_equal(f->s->acc.tokens_trained, 900);
	assert_int_equal(f->s->learners[0].step, 5);
	assert_float_equal(f->s->learners[0].step_time, 0.02, 0);
	assert_int_equal(f->s->acc.learners[0].incarnation, 2);
	core_leave(f->s, 0, "test");
	assert_int_equal(f->s->learners[0].joined, 0);
	assert_int_equal(f->s->learners_connected, M - 1);
}

static void the_budget_ends_the_job(void **state)
{
	struct fx *f = *state;
	struct core_merged mg;
	uint64_t sizes[2];
	struct wire_hello h;

	f->js.budget.outer_steps = 1;
	fx_start(f);
	join_all(f);
	assert_int_equal(poll(f).kind, ROUND_PULL);
	answer(f, 0, 1, 1, 0, 0.1f, 0, ENC_F32);
	answer(f, 1, 1, 1, 0, 0.1f, 0, ENC_F32);
	merge(f, poll(f), &mg);
	assert_int_equal(mg.done, 1);
	assert_int_equal(f->s->done, 1);
	assert_int_equal(poll(f).kind, ROUND_NONE);
	h = hello_of(f, 2, sizes);
	assert_int_equal(core_hello_check(f->s, &h, NULL), CORE_JOIN_DONE);
	pthread_mutex_lock(&f->s->mu);
	core_finish(f->s, f->now);
	pthread_mutex_unlock(&f->s->mu);
	/* a restart comes back knowing the job is over */
	fx_stop(f);
	fx_start(f);
	assert_int_equal(f->s->done, 1);
	assert_int_equal(f->s->rs.completed, 1);
}

static void a_restart_skips_versions_and_empties_older_answers(void **state)
{
	struct fx *f = *state;
	struct round_action a;
	struct core_merged mg;
	float saved[NPARAM];

	fx_start(f);
	join_all(f);
	assert_int_equal(poll(f).kind, ROUND_PULL);
	answer(f, 0, 1, 1, 0, 0.1f, 0, ENC_F32);
	answer(f, 1, 1, 1, 0, 0.3f, 0, ENC_F32);
	merge(f, poll(f), &mg);
	assert_int_equal(mg.version, 1);
	memcpy(saved, f->s->theta, sizeof(saved));
	fx_stop(f);

	/* back from the checkpoint: Θ exact, versions and rounds skip
	 * τ + checkpointEvery = 3 past anything that could have been sent */
	f->now += 10;
	fx_start(f);
	assert_memory_equal(f->s->theta, saved, sizeof(saved));
	assert_int_equal(f->s->versions[0], 3);
	assert_int_equal(f->s->versions[1], 4);
	assert_int_equal(f->s->resumed_at[1], 4);
	assert_int_equal(f->s->rs.completed, 1);
	assert_int_equal(f->s->acc.merged, 2);
	join_all(f);
	a = poll(f);
	assert_int_equal(a.kind, ROUND_PULL);
	assert_int_equal(a.round, 1 + 3 + 1);
	assert_int_equal(a.frag, 1);
	/* trained from version 1, before the restart: an empty answer */
	assert_int_equal(answer(f, 0, a.round, 1, 1, 5.0f, 0, ENC_F32),
			 CORE_QUEUED);
	assert_int_equal(answer(f, 1, a.round, 1, 4, 0.2f, 0, ENC_F32),
			 CORE_QUEUED);
	merge(f, poll(f), &mg);
	assert_int_equal(mg.merged, 1);
	assert_int_equal(mg.version, 5);
	assert_int_equal(f->s->acc.empty, 1);
	for (size_t i = 0; i < f->ft.frags[1].numel; i++) {
		size_t k = f->s->frag_off[1] + i;

		assert_float_equal(f->s->theta[k], saved[k] - 0.2f, 1e-6);
	}
}

static void a_returning_learner_resumes_at_its_own_step(void **state)
{
	struct fx *f = *state;
	struct round_action pulls[8];
	uint64_t sizes[2], resume;
	struct wire_hello h;
	int n;

	fx_start(f);
	join_all(f);
	assert_int_equal(poll(f).kind, ROUND_PULL);   /* round 1 in flight */
	core_heartbeat(f->s, 2, &(struct wire_heartbeat){ .step = 40 }, f->now);
	core_leave(f->s, 2, "test");
	/* it restarted from step 0: it resumes where it was, and is pulled
	 * for the round still in flight */
	h = hello_of(f, 2, sizes);
	n = core_join(f->s, &h, f->now, &resume, pulls, 8);
	assert_int_equal(resume, 40);
	assert_int_equal(n, 1);
	assert_int_equal(pulls[0].round, 1);
	assert_int_equal(pulls[0].frag, 1);
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
 * B·T a step, more steps than the time since its base allows at its step
 * time, a step far ahead of its last one: each answer refused, counted,
 * its step not taken for the pacing, never merged; the honest ones merge.
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
	/* 0.5 s since the join at 10 ms a step: 4 · (0.5 + 1) / 0.01 = 600
	 * steps allowed; 601 refused, 600 not */
	assert_float_equal(bounds_allowed(&f->s->bounds, 1, 0.5), 600, 1e-9);
	assert_int_equal(answer_at(f, 1, a.round, a.frag, 0, 9.0f, 601, 601,
				   601 * 512), CORE_INVALID);
	assert_int_equal(f->s->bounds.answers_refused, 2);
	assert_int_equal(f->s->learners[1].step, 0);   /* not taken */
	assert_int_equal(answer_at(f, 2, a.round, a.frag, 0, 75.0f, 600, 600,
				   600 * 512), CORE_QUEUED);
	assert_int_equal(f->s->learners[2].step, 600);
	merge(f, poll(f), &mg);
	assert_int_equal(mg.merged, 1);
	assert_int_equal(f->s->acc.rejected, 2);
	/* the honest answer alone, clipped to clipSteps·H = 8 steps: 75·8/600 */
	for (size_t i = 0; i < n; i++)
		assert_float_equal(f->s->theta[off + i], before[off + i] - 1.0f,
				   1e-5);
	/* learner 2's next answer reports a step 10⁶ past its last one */
	f->now += 0.5;
	hb.step = 700;
	for (int id = 0; id < M; id++)
		assert_int_equal(core_heartbeat(f->s, id, &hb, f->now), 0);
	a = poll(f);
	assert_int_equal(a.kind, ROUND_PULL);
	assert_int_equal(answer_at(f, 2, a.round, a.frag, 0, 0.5f, 1000600, 1,
				   512), CORE_INVALID);
	assert_int_equal(f->s->bounds.answers_refused, 3);
	assert_int_equal(f->s->learners[2].step_max, 700);
	/* an answer moves the learner's base: its next answer for this
	 * fragment is measured from the start of this round (t = 101) */
	f->now += 1.0;
	assert_int_equal(answer_at(f, 0, a.round, a.frag, 0, 0.1f, 701, 1, 512),
			 CORE_QUEUED);
	assert_float_equal(f->s->bounds.from[0 * 2 + a.frag], 101.0, 0);
	assert_float_equal(f->s->bounds.from[0 * 2 + (1 - a.frag)], 100.0, 0);
	assert_int_equal(f->s->bounds.answers_refused, 3);
}

/*
 * A heartbeat's step time must be finite and within [minStepTime,
 * maxStepTime]; its tokens at most B·T a step and what the time since
 * its reference allows; its step likewise. A refused one changes
 * nothing — not the tokens trained (the budget), not the step — and is
 * counted; honest ones around it count as before.
 */
static void heartbeats_beyond_the_bounds_are_refused(void **state)
{
	struct fx *f = *state;
	const double bad[] = { NAN, INFINITY, -INFINITY, -0.01, 1e-9, 1e4 };
	struct wire_heartbeat hb = { .incarnation = 1 };
	struct round_action pulls[8];
	uint64_t sizes[2], resume;
	struct wire_hello h;

	fx_start(f);
	join_all(f);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		hb = (struct wire_heartbeat){ .step = 1, .tokens = 512,
					      .step_time = bad[i],
					      .incarnation = 1 };
		assert_int_equal(core_heartbeat(f->s, 0, &hb, f->now), -1);
	}
	assert_int_equal(f->s->bounds.heartbeats_refused, 6);
	assert_int_equal(f->s->bounds.l[0].refused_heartbeats, 6);
	assert_int_equal(f->s->acc.tokens_trained, 0);
	assert_int_equal(f->s->learners[0].step, 0);
	assert_float_equal(f->s->learners[0].step_time, 0, 0);
	/* an honest one: 100 steps of 10 ms in 1 s */
	f->now += 1.0;
	hb = (struct wire_heartbeat){ .step = 100, .tokens = 100 * 512,
				      .step_time = 0.01, .incarnation = 1 };
	assert_int_equal(core_heartbeat(f->s, 0, &hb, f->now), 0);
	assert_int_equal(f->s->acc.tokens_trained, 100 * 512);
	assert_int_equal(f->s->learners[0].step, 100);
	/* ten times the tokens of its steps */
	f->now += 1.0;
	hb.step = 200;
	hb.tokens = 100 * 512 + 1000 * 512;
	assert_int_equal(core_heartbeat(f->s, 0, &hb, f->now), -1);
	/* a step far ahead, measured from the reference of its join (step
	 * 0, 2 s before; a reference moves only once it is BOUNDS_WINDOW_S
	 * old): 2 s at 10 ms allows 4 · 3 / 0.01 = 1200 */
	hb.step = 1201;
	hb.tokens = 1201 * 512;
	assert_int_equal(core_heartbeat(f->s, 0, &hb, f->now), -1);
	assert_int_equal(f->s->bounds.heartbeats_refused, 8);
	assert_int_equal(f->s->acc.tokens_trained, 100 * 512);
	assert_int_equal(f->s->learners[0].step, 100);
	/* the truth a second later: counted whole since the last accepted */
	f->now += 1.0;
	hb.step = 300;
	hb.tokens = 300 * 512;
	assert_int_equal(core_heartbeat(f->s, 0, &hb, f->now), 0);
	assert_int_equal(f->s->acc.tokens_trained, 300 * 512);
	/* a learner resumed at step 1000 trains tokens from 0: its total
	 * is far below B·T · step, but it may not grow faster than its step */
	core_leave(f->s, 1, "test");
	h = hello_of(f, 1, sizes);
	h.step = 1000;
	core_join(f->s, &h, f->now, &resume, pulls, 8);
	assert_int_equal(resume, 1000);
	f->now += 0.1;
	hb = (struct wire_heartbeat){ .step = 1010, .tokens = 10 * 512,
				      .step_time = 0.01, .incarnation = 2 };
	assert_int_equal(core_heartbeat(f->s, 1, &hb, f->now), 0);
	f->now += 0.1;
	hb.step = 1012;
	hb.tokens = 18 * 512;        /* 8 steps' tokens in 2 steps */
	assert_int_equal(core_heartbeat(f->s, 1, &hb, f->now), -1);
	hb.tokens = 12 * 512;
	assert_int_equal(core_heartbeat(f->s, 1, &hb, f->now), 0);
	assert_int_equal(f->s->bounds.l[1].refused_heartbeats, 1);
	assert_int_equal(f->s->bounds.heartbeats_refused, 9);
	assert_int_equal(f->s->acc.tokens_trained, 300 * 512 + 12 * 512);
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

/* A gap beyond B while a learner was away: counted down and logged the
 * same, with the learner's leave in it (syncer/gaplog.h). */
static void a_down_gap_is_logged_with_the_learners(void **state)
{
	struct fx *f = *state;
	struct core_merged mg;
	struct round_action a;
	const struct gap *g;

	fx_start(f);
	join_all(f);
	a = poll(f);
	assert_int_equal(a.kind, ROUND_PULL);
	f->now += 0.2;
	answer(f, 0, 1, 1, 0, 0.1f, 0, ENC_F32);
	answer(f, 1, 1, 1, 0, 0.1f, 0, ENC_F32);
	merge(f, poll(f), &mg);   /* 0.2 s after the window opened: not down */
	assert_int_equal(f->s->gaps.n, 0);
	core_leave(f->s, 2, "test");
	core_heartbeat(f->s, 0, &(struct wire_heartbeat){ .step = 2 }, f->now);
	core_heartbeat(f->s, 1, &(struct wire_heartbeat){ .step = 2 }, f->now);
	f->now += 3.0;
	a = poll(f);
	assert_int_equal(a.kind, ROUND_PULL);
	f->now += 0.5;
	answer(f, 0, a.round, a.frag, 0, 0.1f, 0, ENC_F32);
	answer(f, 1, a.round, a.frag, 0, 0.1f, 0, ENC_F32);
	merge(f, poll(f), &mg);
	assert_int_equal(f->s->gaps.n, 1);
	g = gaplog_get(&f->s->gaps, 0);
	assert_float_equal(g->length, 3.5, 1e-9);
	assert_float_equal(g->down, 2.5, 1e-9);   /* B = 1 s: no step time */
	assert_float_equal(g->pulled, 3.0, 1e-9);
	assert_float_equal(g->quorum, 3.5, 1e-9);
	assert_int_equal(g->round, a.round);
	assert_int_equal(g->joined_start, M);
	assert_int_equal(g->joined_min, M - 1);
	assert_int_equal(g->left, 1);
	assert_float_equal(f->s->gaps.down, f->s->acc.down, 1e-9);
	assert_float_equal(f->s->gaps.longest_absent, 3.5, 1e-9);
}

/*
 * The uptime window opens when K learners are joined with their learner
 * process attached: sidecars that join before their learners started
 * (incarnation 0) do not open it; the heartbeat that brings the K-th
 * incarnation does, at its time.
 */
static void uptime_starts_with_the_learner_processes(void **state)
{
	struct fx *f = *state;
	struct round_action pulls[8];
	uint64_t sizes[2], resume;

	fx_start(f);
	for (uint32_t id = 0; id < M; id++) {
		struct wire_hello h = hello_of(f, id, sizes);

		h.incarnation = 0;
		assert_int_equal(core_hello_check(f->s, &h, NULL), CORE_JOIN_OK);
		core_join(f->s, &h, f->now, &resume, pulls, 8);
	}
	assert_true(f->s->acc.uptime_start < 0);
	f->now += 2.0;
	core_heartbeat(f->s, 0, &(struct wire_heartbeat){ .incarnation = 5 },
		       f->now);
	assert_true(f->s->acc.uptime_start < 0);   /* 1 of K = 2 */
	f->now += 1.0;
	core_heartbeat(f->s, 2, &(struct wire_heartbeat){ .incarnation = 6 },
		       f->now);
	assert_true(f->s->acc.uptime_start >= 0);
	assert_float_equal(f->s->acc.uptime_start, core_elapsed(f->s, f->now),
			   1e-9);
	assert_float_equal(core_uptime(f->s, f->now), 1.0, 1e-12);
}

/* One round of fragment 1 or 0 answered by learners 0 and 1 and merged. */
static void one_round(struct fx *f, uint64_t *hb, struct core_merged *mg)
{
	struct round_action a = pull_next(f, hb);

	answer_at(f, 0, a.round, a.frag, f->s->versions[a.frag], 0.1f, *hb, 1, 10);
	answer_at(f, 1, a.round, a.frag, f->s->versions[a.frag], 0.1f, *hb, 1, 10);
	merge(f, poll(f), mg);
	assert_int_equal(mg->merged, 2);
}

/* GET path of the syncer's HTTP side, as text. */
static char *http_get(struct fx *f, const char *path)
{
	const char *ct = "text/plain";
	struct buf b;
	char *txt;

	buf_init(&b, 1 << 20);
	assert_int_equal(status_http(f->s, path, &b, &ct), 200);
	txt = buf_detach(&b, NULL);
	assert_non_null(txt);
	return txt;
}

static json_t *status_of(struct fx *f)
{
	char *txt = http_get(f, "/status");
	json_t *o = json_loads(txt, 0, NULL);

	free(txt);
	assert_non_null(o);
	return o;
}

static json_t *status_ckpt(struct fx *f)
{
	char *txt = http_get(f, "/status");
	json_t *o = json_loads(txt, 0, NULL), *c;

	free(txt);
	assert_non_null(o);
	c = json_incref(json_object_get(o, "checkpoint"));
	json_decref(o);
	assert_true(json_is_object(c));
	return c;
}

/*
 * The checkpoint folder cannot be written (a file stands in its place; a
 * fault that holds for root too, made without limiting this process's
 * own output): rounds merge on, the failure is on /status and /metrics,
 * and the first write that succeeds clears it. A write on a full disk
 * is failed in tests/unit/test_syncer_ckpt.c.
 */
static void checkpoints_that_fail_are_shown_and_retried(void **state)
{
	struct fx *f = *state;
	struct core_merged mg;
	uint64_t hb = 0;
	char ck[128], want[512], *m;
	json_t *c;

	snprintf(ck, sizeof(ck), "%s/ck", f->dir);
	f->prm.ckpt_dir = ck;
	fx_start(f);
	join_all(f);
	c = status_ckpt(f);
	assert_true(json_is_false(json_object_get(c, "failing")));
	assert_true(json_is_null(json_object_get(c, "error")));
	assert_int_equal(json_integer_value(json_object_get(c, "failures")), 0);
	assert_true(json_is_null(json_object_get(c, "last_ok_round")));
	json_decref(c);
	one_round(f, &hb, &mg);            /* round 1 written */
	assert_int_equal(f->s->ps.last_ok_round, 1);

	/* the folder becomes a file: two rounds merge, neither is written */
	assert_int_equal(testlib_rmtree(ck), 0);
	assert_int_equal(file_write_atomic(ck, "x", 1, NULL), 0);
	one_round(f, &hb, &mg);
	one_round(f, &hb, &mg);
	assert_int_equal(f->s->rs.completed, 3);
	assert_int_equal(mg.version, 2);   /* fragment 1's second merge */
	assert_int_equal(f->s->versions[0], 1);
	assert_int_equal(f->s->acc.merged, 6);
	c = status_ckpt(f);
	assert_true(json_is_true(json_object_get(c, "failing")));
	snprintf(want, sizeof(want), "cannot save checkpoint: cannot create "
		 "'%s/syncer-%016llx-%012d.ckpt.tmp.%d': Not a directory", ck,
		 (unsigned long long)f->ft.fingerprint, 3, (int)getpid());
	assert_string_equal(json_string_value(json_object_get(c, "error")), want);
	assert_int_equal(json_integer_value(json_object_get(c, "failures")), 2);
	assert_int_equal(json_integer_value(json_object_get(c, "last_ok_round")), 1);
	json_decref(c);
	m = http_get(f, "/metrics");
	assert_non_null(strstr(m, "\nddiloco_syncer_checkpoint_failures_total 2\n"));
	assert_non_null(strstr(m, "\nddiloco_syncer_checkpoint_failing 1\n"));
	free(m);

	/* the folder back: the next checkpoint is written and clears it */
	assert_int_equal(unlink(ck), 0);
	one_round(f, &hb, &mg);
	c = status_ckpt(f);
	assert_true(json_is_false(json_object_get(c, "failing")));
	assert_true(json_is_null(json_object_get(c, "error")));
	assert_int_equal(json_integer_value(json_object_get(c, "failures")), 2);
	assert_int_equal(json_integer_value(json_object_get(c, "last_ok_round")), 4);
	json_decref(c);
	m = http_get(f, "/metrics");
	assert_non_null(strstr(m, "\nddiloco_syncer_checkpoint_failing 0\n"));
	free(m);
	snprintf(want, sizeof(want), "%s/syncer-%016llx-%012d.ckpt", ck,
		 (unsigned long long)f->ft.fingerprint, 4);
	assert_int_equal(access(want, F_OK), 0);
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

/* One round answered by learners 0 and 1 with every value v; merged. */
static void round_of(struct fx *f, uint64_t *hb, float v, struct core_merged *mg)
{
	struct round_action a = pull_next(f, hb);

	answer_at(f, 0, a.round, a.frag, f->s->versions[a.frag], v, *hb, 1, 10);
	answer_at(f, 1, a.round, a.frag, f->s->versions[a.frag], v, *hb, 1, 10);
	merge(f, poll(f), mg);
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

/* Evaluation losses handed out in turn. */
struct losses {
	const double *v;
	int n, next;
};

static int fake_eval(void *ctx, const float *params, size_t max_tokens,
		     double *loss, struct err *e)
{
	struct losses *l = ctx;

	(void)params;
	(void)max_tokens;
	if (l->next >= l->n)
		return err_set(e, "no more losses");
	*loss = l->v[l->next++];
	return 0;
}

static void eval_now(struct fx *f)
{
	pthread_mutex_lock(&f->s->mu);
	assert_int_equal(core_eval_sync(f->s, f->now), 0);
	pthread_mutex_unlock(&f->s->mu);
}

static uint64_t last_good_round(struct fx *f)
{
	json_t *c = status_ckpt(f), *g = json_object_get(c, "last_good_round");
	uint64_t r = json_is_null(g) ? 0 : (uint64_t)json_integer_value(g);

	json_decref(c);
	return r;
}

/*
 * The checkpoint of a round whose evaluation is finite and at most 10 %
 * above the best so far becomes the last good one; worse or NaN losses
 * leave it. When no rolling checkpoint loads, a restart resumes from it.
 */
static void a_restart_falls_back_to_the_last_good_checkpoint(void **state)
{
	struct fx *f = *state;
	static const double loss[] = { 3.0, 3.2, 3.5, NAN, 3.1, 9.0 };
	struct losses l = { loss, 6, 0 };
	struct core_merged mg;
	float good[NPARAM];
	uint64_t hb = 0, vgood[2];
	char path[512];

	f->prm.eval = fake_eval;
	f->prm.eval_ctx = &l;
	fx_start(f);
	join_all(f);
	assert_int_equal(last_good_round(f), 0);
	for (uint64_t r = 1; r <= 6; r++) {
		one_round(f, &hb, &mg);
		eval_now(f);
		if (r == 5) {
			memcpy(good, f->s->theta, sizeof(good));
			memcpy(vgood, f->s->versions, sizeof(vgood));
		}
		/* 3.0 good, 3.2 within 10 %, 3.5 and NaN not, 3.1 good, 9 not */
		assert_int_equal(last_good_round(f),
				 r < 2 ? 1 : r < 5 ? 2 : 5);
	}
	snprintf(path, sizeof(path), "%s/syncer-%016llx-last-good.ckpt",
		 f->dir, (unsigned long long)f->ft.fingerprint);
	assert_int_equal(access(path, F_OK), 0);
	/* the rolling ones (4, 5, 6) all damaged */
	for (int r = 4; r <= 6; r++) {
		snprintf(path, sizeof(path), "%s/syncer-%016llx-%012d.ckpt", f->dir,
			 (unsigned long long)f->ft.fingerprint, r);
		assert_int_equal(access(path, F_OK), 0);
		assert_int_equal(file_write_atomic(path, "x", 1, NULL), 0);
	}
	fx_stop(f);
	f->prm.eval = NULL;
	fx_start(f);
	assert_int_equal(f->s->acc.rounds_completed, 5);
	/* versions skip the usual margin (overlap 2 + checkpointEvery 1)
	 * and the round from 5 to the newest name, 6 */
	assert_int_equal(f->s->ps.skip_extra, 1);
	assert_int_equal(f->s->versions[0], vgood[0] + 4);
	assert_int_equal(f->s->versions[1], vgood[1] + 4);
	assert_int_equal(f->s->rs.started, f->s->acc.rounds_started + 4);
	for (int i = 0; i < NPARAM; i++)
		assert_exactly(f->s->theta[i], good[i]);
}

/* What the HTTP side saw while the last evaluation ran. */
struct during {
	struct syncer *s;
	int calls, lock_free, healthz, status;
	char body[64];
};

static int http_code(struct syncer *s, const char *path, char *out,
		     size_t len)
{
	const char *ct = "text/plain";
	struct buf b;
	int code;

	buf_init(&b, 1 << 20);
	code = status_http(s, path, &b, &ct);
	if (out)
		snprintf(out, len, "%.*s", (int)b.len, b.data);
	buf_release(&b);
	return code;
}

static int eval_watching(void *ctx, const float *params, size_t max_tokens,
			 double *loss, struct err *e)
{
	struct during *d = ctx;
	struct timespec until;

	(void)params;
	(void)max_tokens;
	(void)e;
	d->calls++;
	/*
	 * Another thread may hold the lock for a moment; a lock held by
	 * the caller (the loop) would make this wait out its 5 s.
	 */
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 5;
	d->lock_free = pthread_mutex_timedlock(&d->s->mu, &until) == 0;
	if (d->lock_free) {
		pthread_mutex_unlock(&d->s->mu);
		d->healthz = http_code(d->s, "/healthz", d->body, sizeof(d->body));
		d->status = http_code(d->s, "/status", NULL, 0);
	}
	*loss = 2.5;
	return 0;
}

/*
 * The last evaluation runs without the state lock: /healthz and /status
 * answer meanwhile, /healthz 200 though the loop has not turned for 20 s
 * (it is evaluating), and 503 for the same 20 s outside it.
 */
static void the_final_evaluation_leaves_the_lock_free(void **state)
{
	struct fx *f = *state;
	struct during d = { 0 };
	struct core_merged mg;
	char body[64];

	f->prm.eval = eval_watching;
	f->prm.eval_ctx = &d;
	f->js.budget.outer_steps = 1;
	fx_start(f);
	d.s = f->s;
	join_all(f);
	assert_int_equal(poll(f).kind, ROUND_PULL);
	answer(f, 0, 1, 1, 0, 0.1f, 0, ENC_F32);
	answer(f, 1, 1, 1, 0, 0.1f, 0, ENC_F32);
	merge(f, poll(f), &mg);
	assert_int_equal(mg.done, 1);
	f->s->last_loop = clock_mono() - 20;
	pthread_mutex_lock(&f->s->mu);
	core_finish(f->s, f->now);
	pthread_mutex_unlock(&f->s->mu);
	assert_int_equal(d.calls, 1);
	assert_int_equal(d.lock_free, 1);
	assert_int_equal(d.healthz, 200);
	assert_string_equal(d.body, "ok (final evaluation)\n");
	assert_int_equal(d.status, 200);
	assert_int_equal(f->s->final_eval, 0);
	assert_int_equal(f->s->acc.nevals, 1);
	assert_float_equal(f->s->acc.evals[0].loss, 2.5, 0);
	assert_int_equal(http_code(f->s, "/healthz", body, sizeof(body)), 503);
	assert_string_equal(body, "run loop stuck\n");
	f->s->last_loop = clock_mono();
	assert_int_equal(http_code(f->s, "/healthz", body, sizeof(body)), 200);
	assert_string_equal(body, "ok\n");
}

static int beat(struct fx *f, int id, uint64_t step)
{
	return core_heartbeat(f->s, id, &(struct wire_heartbeat){
		.step = step, .step_time = 0.5 }, f->now);
}


static int learner_stale(json_t *o, int id)
{
	json_t *l = json_array_get(json_object_get(o, "learners"), (size_t)id);

	assert_true(json_is_boolean(json_object_get(l, "stale")));
	return json_is_true(json_object_get(l, "stale"));
}

/*
 * stallSeconds 30: learner 2 keeps heartbeating with its step at 5 from
 * t = 101; at 131 it is not stale yet, at 132 it is (/status, /metrics),
 * and the round pulled next merges as soon as 0 and 1 have answered.
 * A new step clears it; a learner that goes silent is not stale.
 */
static void a_learner_whose_step_stands_still_is_not_waited_for(void **state)
{
	struct fx *f = *state;
	struct round_action a;
	struct core_merged mg;
	uint64_t step = 0;
	json_t *o;
	char *m;

	f->js.syncer.stall_seconds = 30;
	fx_start(f);
	join_all(f);
	for (int t = 1; t <= 31; t++) {
		f->now = 100 + t;
		step++;
		assert_int_equal(beat(f, 0, step), 0);
		assert_int_equal(beat(f, 1, step), 0);
		assert_int_equal(beat(f, 2, 5), 0);
		core_check_stale(f->s, f->now);
		assert_int_equal(f->s->learners[2].stale, 0);
		/* the rounds it paces are answered by all three */
		while ((a = poll(f)).kind != ROUND_NONE) {
			if (a.kind == ROUND_MERGE) {
				merge(f, a, &mg);
				continue;
			}
			for (int id = 0; id < M; id++)
				answer_at(f, id, a.round, a.frag,
					  f->s->versions[a.frag], 0.1f, id == 2 ? 5 : step,
					  1, 10);
		}
	}
	f->now = 132;
	core_check_stale(f->s, f->now);
	assert_int_equal(f->s->learners[2].stale, 1);
	assert_int_equal(f->s->learners[0].stale, 0);
	o = status_of(f);
	assert_int_equal(learner_stale(o, 2), 1);
	assert_int_equal(learner_stale(o, 0), 0);
	assert_int_equal(json_integer_value(json_object_get(o, "learners_stale")), 1);
	json_decref(o);
	m = http_get(f, "/metrics");
	assert_non_null(strstr(m, "\nddiloco_syncer_learners_stale 1\n"));
	assert_non_null(strstr(m, "\nddiloco_syncer_learners_stale_total 1\n"));
	free(m);

	/* the next round: 0 and 1 answer, it merges without 2 at once */
	a = pull_next(f, &step);
	answer_at(f, 0, a.round, a.frag, f->s->versions[a.frag], 0.1f, step, 1, 10);
	assert_int_equal(poll(f).kind, ROUND_NONE);
	answer_at(f, 1, a.round, a.frag, f->s->versions[a.frag], 0.1f, step, 1, 10);
	merge(f, poll(f), &mg);
	assert_int_equal(mg.round, a.round);
	assert_int_equal(mg.merged, 2);

	/* a new step: not stale */
	assert_int_equal(beat(f, 2, 6), 0);
	assert_int_equal(f->s->learners[2].stale, 0);
	assert_int_equal(f->s->rs.stale[2], 0);
	o = status_of(f);
	assert_int_equal(json_integer_value(json_object_get(o, "learners_stale")), 0);
	json_decref(o);

	/* learner 1 goes silent for 40 s while 0 and 2 move: not stale */
	for (int t = 1; t <= 40; t++) {
		f->now += 1;
		step++;
		assert_int_equal(beat(f, 0, step), 0);
		assert_int_equal(beat(f, 2, 6 + (uint64_t)t), 0);
		core_check_stale(f->s, f->now);
	}
	assert_int_equal(f->s->learners[1].stale, 0);
	assert_int_equal(f->s->stale_marked, 1);
}

/*
 * The run loop turns once per gRPC event; the scan of every learner for
 * stale ones is not done on each turn but once per CORE_TICK_S: a
 * thousand turns in one tick scan once (before, each turn scanned: with
 * M learners answering a round, O(M²) a round). A learner that becomes
 * stale is marked at the next tick, CORE_TICK_S late at most.
 */
static void the_stale_scan_runs_once_per_tick(void **state)
{
	struct fx *f = *state;
	uint64_t scans;

	f->js.syncer.stall_seconds = 30;
	fx_start(f);
	join_all(f);
	scans = f->s->stale_scans;
	assert_int_equal(core_tick(f->s, f->now), 1);
	for (int i = 0; i < 1000; i++)
		assert_int_equal(core_tick(f->s, f->now + 0.049 * i / 1000), 0);
	assert_int_equal(f->s->stale_scans, scans + 1);
	assert_int_equal(core_tick(f->s, f->now + CORE_TICK_S), 1);
	assert_int_equal(f->s->stale_scans, scans + 2);

	/* learner 2 heartbeats at step 5 from 101 on: stale past 131, marked
	 * by the first tick after it and not by the turns between ticks */
	for (int t = 1; t <= 31; t++) {
		f->now = 100 + t;
		assert_int_equal(beat(f, 0, (uint64_t)t), 0);
		assert_int_equal(beat(f, 1, (uint64_t)t), 0);
		assert_int_equal(beat(f, 2, 5), 0);
		assert_int_equal(core_tick(f->s, f->now), 1);
	}
	assert_int_equal(f->s->learners[2].stale, 0);
	assert_int_equal(core_tick(f->s, 131.02), 0);   /* stale from 131 */
	assert_int_equal(core_tick(f->s, 131.04), 0);
	assert_int_equal(f->s->learners[2].stale, 0);
	assert_int_equal(core_tick(f->s, 131.06), 1);
	assert_int_equal(f->s->learners[2].stale, 1);
	/* the job done: ticks go on, no more scans */
	scans = f->s->stale_scans;
	f->s->done = 1;
	assert_int_equal(core_tick(f->s, 200), 1);
	assert_int_equal(f->s->stale_scans, scans);
}

/* The high-water mark file of the fixture's folder, parsed. */
static int read_mark(struct fx *f, uint64_t *rounds, uint64_t *versions)
{
	struct syncer_hwm h = { .versions = versions };

	if (syncer_hwm_read(f->dir, f->ft.fingerprint, 2, &h, NULL) != 1)
		return -1;
	*rounds = h.rounds;
	return 0;
}

/*
 * The high-water mark: written when round 1 starts (rounds up to 16,
 * versions 0 + 16 + τ 2 + 1 = 19), not again until round 17. With every
 * checkpoint gone, a restart resumes round numbers after 16 and versions
 * at 19, answers from older bases empty; round 17 writes the next mark.
 * A mark for another fragment count is refused with a message.
 */
static void the_high_water_mark_outlives_the_checkpoints(void **state)
{
	struct fx *f = *state;
	struct core_merged mg;
	struct core_step st;
	struct round_action a;
	uint64_t hb = 0, rounds, v[2];
	char path[512];
	struct err e;

	fx_start(f);
	join_all(f);
	assert_int_equal(read_mark(f, &rounds, v), -1);   /* none yet */
	/* driven by core_poll, as the run loop does: a pull writes the mark
	 * before it is handed out */
	for (int r = 1; r <= 3; r++) {
		st = core_next(f, &hb);
		assert_int_equal(st.kind, CORE_STEP_PULL);
		assert_int_equal(st.round, (uint64_t)r);
		assert_int_equal(read_mark(f, &rounds, v), 0);
		assert_int_equal(rounds, 16);
		assert_int_equal(v[0], 19);
		assert_int_equal(v[1], 19);
		answer_at(f, 0, st.round, st.frag, f->s->versions[st.frag], 0.1f, hb, 1, 10);
		answer_at(f, 1, st.round, st.frag, f->s->versions[st.frag], 0.1f, hb, 1, 10);
		st = core_next(f, NULL);
		assert_int_equal(st.kind, CORE_STEP_MERGED);
		assert_int_equal(st.merged.round, (uint64_t)r);
		assert_int_equal(st.merged.merged, 2);
		assert_true(st.merged.updated);
	}
	assert_int_equal(f->s->versions[1], 2);
	assert_int_equal(f->s->versions[0], 1);
	fx_stop(f);
	/* every checkpoint gone: a start from the seeded model */
	for (int r = 1; r <= 3; r++) {
		snprintf(path, sizeof(path), "%s/syncer-%016llx-%012d.ckpt", f->dir,
			 (unsigned long long)f->ft.fingerprint, r);
		unlink(path);
	}
	fx_start(f);
	assert_int_equal(f->s->acc.rounds_completed, 0);
	assert_int_equal(f->s->rs.started, 16);
	assert_int_equal(f->s->versions[0], 19);
	assert_int_equal(f->s->versions[1], 19);
	assert_int_equal(f->s->resumed_at[0], 19);
	join_all(f);
	a = poll(f);
	assert_int_equal(a.kind, ROUND_PULL);
	assert_int_equal(a.round, 17);
	persist_round_started(&f->s->ps, a.round, f->s->versions,
			      f->s->rs.cfg.overlap);
	assert_int_equal(read_mark(f, &rounds, v), 0);
	assert_int_equal(rounds, 32);
	assert_int_equal(v[0], 38);
	assert_int_equal(v[1], 38);
	/* trained from version 2 of the process before: empty */
	answer_at(f, 0, a.round, a.frag, 2, 0.1f, 1, 1, 10);
	answer_at(f, 1, a.round, a.frag, 19, 0.1f, 1, 1, 10);
	merge(f, poll(f), &mg);
	assert_int_equal(mg.merged, 1);
	assert_int_equal(f->s->acc.empty, 1);
	assert_int_equal(f->s->versions[1], 20);

	/* a mark of another cut does not read */
	{
		uint64_t vv[3];
		struct syncer_hwm h = { .versions = vv };

		assert_int_equal(syncer_hwm_read(f->dir, f->ft.fingerprint, 3,
						 &h, &e), -1);
		assert_non_null(strstr(e.msg, "3 versions expected"));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(answers_merge_and_the_version_goes_up, setup, teardown),
		cmocka_unit_test_setup_teardown(bad_answers_are_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(int4_answers_and_updates, setup, teardown),
		cmocka_unit_test_setup_teardown(a_merge_with_nothing_valid_changes_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(hello_is_checked, setup, teardown),
		cmocka_unit_test_setup_teardown(job_tokens_estimate_the_steps_since_a_heartbeat,
						setup, teardown),
		cmocka_unit_test_setup_teardown(heartbeats_count_tokens_over_restarts, setup, teardown),
		cmocka_unit_test_setup_teardown(the_budget_ends_the_job, setup, teardown),
		cmocka_unit_test_setup_teardown(a_restart_skips_versions_and_empties_older_answers, setup, teardown),
		cmocka_unit_test_setup_teardown(a_returning_learner_resumes_at_its_own_step, setup, teardown),
		cmocka_unit_test_setup_teardown(steps_merged_twice_are_counted, setup, teardown),
		cmocka_unit_test_setup_teardown(stale_answers_are_empty_and_counted, setup, teardown),
		cmocka_unit_test_setup_teardown(long_answers_are_clipped, setup, teardown),
		cmocka_unit_test_setup_teardown(answers_beyond_the_bounds_are_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(heartbeats_beyond_the_bounds_are_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(one_answer_share_is_capped, setup, teardown),
		cmocka_unit_test_setup_teardown(a_down_gap_is_logged_with_the_learners, setup, teardown),
		cmocka_unit_test_setup_teardown(uptime_starts_with_the_learner_processes, setup, teardown),
		cmocka_unit_test_setup_teardown(checkpoints_that_fail_are_shown_and_retried, setup, teardown),
		cmocka_unit_test_setup_teardown(a_step_that_overflows_is_not_applied, setup, teardown),
		cmocka_unit_test_setup_teardown(answers_far_beyond_the_model_are_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(answers_far_beyond_the_history_are_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(a_round_slot_holds_a_fragment_not_the_answers, setup, teardown),
		cmocka_unit_test_setup_teardown(a_restart_falls_back_to_the_last_good_checkpoint, setup, teardown),
		cmocka_unit_test_setup_teardown(the_final_evaluation_leaves_the_lock_free, setup, teardown),
		cmocka_unit_test_setup_teardown(a_learner_whose_step_stands_still_is_not_waited_for, setup, teardown),
		cmocka_unit_test_setup_teardown(the_high_water_mark_outlives_the_checkpoints, setup, teardown),
		cmocka_unit_test_setup_teardown(the_stale_scan_runs_once_per_tick, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
