/*
 * The syncer's round driver without gRPC, on a fake clock (coretest.h):
 * learners join and heartbeat through core_join / core_heartbeat; the
 * round state machine's actions are run by hand or through core_poll.
 * Checks Hellos for another model, the job's tokens and budget, what a
 * restart from a checkpoint does to versions, rounds and to answers
 * trained before it (and the last good checkpoint, the high-water
 * mark), returning learners, down gaps and uptime, checkpoints that
 * cannot be written (the rounds go on, /status and /metrics say so, the
 * next write that succeeds clears it), the evaluations, stale
 * learners, and a learner whose claims are held to the syncer's clock. The answers' way and the merge are test_merge.c's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/unit/coretest.h"
#include "tests/unit/slowdisk.h"

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

/* The high-water mark file of the fixture's folder, parsed. */
static int read_mark(struct fx *f, uint64_t *rounds, uint64_t *versions)
{
	struct syncer_hwm h = { .versions = versions };

	if (syncer_hwm_read(f->dir, f->ft.fingerprint, 2, &h, NULL) != 1)
		return -1;
	*rounds = h.rounds;
	return 0;
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

/* Learner id's answer in a round in flight, as its round keeps it. */
static const struct answer *answer_of(const struct syncer *s, int id)
{
	for (int slot = 0; slot < s->rs.cfg.overlap; slot++)
		for (const struct answer *x = s->answers[slot]; x; x = x->next)
			if (x->learner == id)
				return x;
	fail_msg("no answer of learner %d in flight", id);
	return NULL;
}

/*
 * A learner faster than the job's pace allows has its step claim cut
 * (bounds.h): it is credited a lower step than it trained to. The audit
 * judges the steps it claims, (step − steps, step], not the credited
 * ones: two answers of one fragment in a row, the second's credited
 * steps starting below where the first ended, merge no step twice (a
 * cold first step time made honest learners' claims cut in real runs,
 * and the audit counted their steps as merged twice).
 */
static void a_cut_step_claim_merges_no_step_twice(void **state)
{
	struct fx *f = *state;
	struct wire_heartbeat hb = { .step_time = 1.0 };
	struct round_action a;
	struct core_merged mg;
	const struct answer *x;
	uint64_t step = 0, claim = 0;
	int frag = -1, answered = 0;

	fx_start(f);
	join_all(f);                                 /* at t = 100 */
	for (int id = 0; id < M; id++) {
		hb.step_time = id == 2 ? 0.01 : 1.0;
		assert_int_equal(core_heartbeat(f->s, id, &hb, f->now), 0);
	}
	/* learner 2's floor is the others' 1 s over 8: 32 steps a second
	 * allowed (and 32 for the second of slack), where it trains 100 */
	assert_float_equal(bounds_floor(&f->s->bounds, 2), 0.125, 1e-12);
	while (answered < 2) {
		a = pull_next(f, &step);
		for (int id = 0; id < 2; id++)
			assert_int_equal(answer_at(f, id, a.round, a.frag,
						   f->s->versions[a.frag], 0.01f,
						   step, 1, 10), CORE_QUEUED);
		if (frag < 0)
			frag = a.frag;
		if (a.frag == frag) {
			/* 30 steps by t = 100, then 100 a second */
			uint64_t now_step = 30 + (uint64_t)((f->now - 100) * 100);

			assert_int_equal(answer_at(f, 2, a.round, a.frag,
						   f->s->versions[a.frag], 0.01f,
						   now_step, now_step - claim,
						   10 * (now_step - claim)),
					 CORE_QUEUED);
			x = answer_of(f->s, 2);
			/* the second is cut: credited steps from below
			 * where the first ended */
			if (answered == 1)
				assert_true(x->step - x->steps < claim);
			claim = now_step;
			answered++;
		}
		f->now += 1.5;
		merge(f, poll(f), &mg);
	}
	assert_true(f->s->bounds.l[2].cuts >= 1);
	assert_int_equal(f->s->audit.double_merged_steps, 0);
	assert_int_equal(f->s->audit.mark[2 * f->s->audit.P + frag], claim);
}

/*
 * A learner that claims the least step time there is (1e-4 s) and 10⁶
 * steps is held to the syncer's clock at the job's pace (bounds.h): the
 * others' 1 s a step, over BOUNDS_PACE_SPREAD. Its answer is credited
 * the steps 5 s allow, so the screen measures its 10⁴ times larger
 * update per credited step and refuses it; its heartbeats' tokens never
 * reach the budget; its third strike (maxClaimCuts 3) excludes it: named in
 * /status and /metrics, its Hello refused, the rounds not waiting for it.
 */
static void a_tiny_step_time_does_not_buy_steps(void **state)
{
	struct fx *f = *state;
	const uint64_t BT = 8 * 64, budget = 100000 * BT;
	struct wire_heartbeat hb = { .step_time = 1.0 };
	struct round_action a;
	struct core_merged mg;
	const struct answer *x;
	uint64_t step = 0, sizes[2];
	struct wire_hello h;
	json_t *o, *l2, *ex;
	char *m;

	f->js.budget.tokens = budget;
	f->js.syncer.max_claim_cuts = 3;
	fx_start(f);
	join_all(f);                                 /* at t = 100 */
	for (int id = 0; id < M; id++) {
		hb.step_time = id == 2 ? 1e-4 : 1.0;
		assert_int_equal(core_heartbeat(f->s, id, &hb, f->now), 0);
	}
	/* learner 2's floor: the 2nd of the others' 1 s, over 8 */
	assert_float_equal(bounds_floor(&f->s->bounds, 2), 0.125, 1e-12);
	assert_float_equal(bounds_floor(&f->s->bounds, 0), 1.0, 0);
	/* four honest rounds of one step a second: each fragment's norm
	 * history holds four answers of norm per step 0.01·√n */
	for (int r = 0; r < 4; r++) {
		a = pull_next(f, &step);
		for (int id = 0; id < 2; id++)
			assert_int_equal(answer_at(f, id, a.round, a.frag,
						   f->s->versions[a.frag], 0.01f,
						   step, 1, BT), CORE_QUEUED);
		f->now += 1.5;                   /* the grace window */
		merge(f, poll(f), &mg);
		assert_int_equal(mg.merged, 2);
	}
	assert_int_equal(f->s->bounds.cuts, 0);
	/* t = 106: 10⁶ steps of a 10⁴ times larger update; 4 · (6 + 1) /
	 * 0.125 = 224 steps since its join credited, and their tokens */
	a = pull_next(f, &step);
	assert_int_equal(f->s->scr.hist_n[a.frag], 4);
	assert_int_equal(answer_at(f, 2, a.round, a.frag, f->s->versions[a.frag],
				   100.0f, step + 1000000, 1000000,
				   1000000 * BT), CORE_QUEUED);
	x = answer_of(f->s, 2);
	assert_int_equal(x->steps, 224);
	assert_int_equal(x->tokens, 224 * BT);
	assert_int_equal(x->step, 224);              /* 0 + 224 since the join */
	assert_int_equal(f->s->learners[2].step, 224);
	/* per credited step (clipped to 8, Δ scaled alike) 45 times the
	 * median: refused by the history screen, not by its size */
	assert_int_equal(x->fate, ANSWER_SCREENED);
	assert_int_equal(f->s->scr.history_refused, 1);
	assert_int_equal(f->s->scr.size_refused, 0);
	assert_int_equal(f->s->bounds.l[2].cuts, 1);
	/* its heartbeats claim the budget's tokens and more: refused, cuts,
	 * each a strike half a second after the last */
	hb = (struct wire_heartbeat){ .step = step + 1000000,
				      .tokens = 1000000 * BT, .step_time = 1e-4,
				      .incarnation = 3 };
	f->now += 0.5;
	assert_int_equal(core_heartbeat(f->s, 2, &hb, f->now), -1);
	f->now += 0.5;
	hb.step = 257;               /* 4 · (7 + 1) / 0.125 = 256 allowed */
	hb.tokens = 257 * BT;        /* its step's worth, within 257 steps' */
	assert_int_equal(core_heartbeat(f->s, 2, &hb, f->now), -1);
	assert_int_equal(f->s->acc.tokens_trained, 0);
	assert_int_equal(core_check_budget(f->s, f->now), 0);
	/* an honest heartbeat counts */
	hb = (struct wire_heartbeat){ .step = step, .tokens = step * BT,
				      .step_time = 1.0, .incarnation = 1 };
	assert_int_equal(core_heartbeat(f->s, 0, &hb, f->now), 0);
	assert_int_equal(f->s->acc.tokens_trained, step * BT);
	/* three cuts, three strikes: excluded */
	assert_int_equal(f->s->bounds.l[2].cuts, 3);
	assert_int_equal(f->s->bounds.l[2].strikes, 3);
	assert_int_equal(core_excluded(f->s, 2), 1);
	assert_int_equal(f->s->learners[2].excluded, 1);
	assert_int_equal(f->s->rs.stale[2], 1);      /* not waited for */
	assert_int_equal(core_excluded(f->s, 0), 0);
	/* the round merges the honest answers alone */
	for (int id = 0; id < 2; id++)
		assert_int_equal(answer_at(f, id, a.round, a.frag,
					   f->s->versions[a.frag], 0.01f, step,
					   1, BT), CORE_QUEUED);
	f->now += 1.5;
	merge(f, poll(f), &mg);
	assert_int_equal(mg.merged, 2);
	assert_int_equal(mg.done, 0);
	/* its reports are refused from now on */
	assert_int_equal(answer_at(f, 2, a.round + 1, a.frag, 0, 0.01f, 257, 1,
				   BT), CORE_INVALID);
	assert_int_equal(core_heartbeat(f->s, 2, &hb, f->now), -1);
	/* named in /status and /metrics */
	o = status_of(f);
	l2 = json_array_get(json_object_get(o, "learners"), 2);
	assert_true(json_is_true(json_object_get(l2, "excluded")));
	assert_int_equal(json_integer_value(json_object_get(l2, "claims_cut")), 3);
	assert_true(json_is_false(json_object_get(json_array_get(
		json_object_get(o, "learners"), 0), "excluded")));
	ex = json_object_get(json_object_get(o, "claims"), "excluded");
	assert_int_equal(json_array_size(ex), 1);
	assert_int_equal(json_integer_value(json_array_get(ex, 0)), 2);
	assert_int_equal(json_integer_value(json_object_get(
		json_object_get(o, "claims"), "cut")), 3);
	json_decref(o);
	m = http_get(f, "/metrics");
	assert_non_null(strstr(m, "\nddiloco_syncer_claims_cut_total 3\n"));
	assert_non_null(strstr(m, "\nddiloco_syncer_learners_excluded 1\n"));
	assert_non_null(strstr(m, "\nddiloco_syncer_learner_claims_cut_total"
				  "{learner=\"2\"} 3\n"));
	assert_non_null(strstr(m, "\nddiloco_syncer_learner_excluded"
				  "{learner=\"2\"} 1\n"));
	assert_null(strstr(m, "{learner=\"0\"} 0"));
	free(m);
	/* its Hello is refused */
	h = hello_of(f, 2, sizes);
	assert_int_equal(core_hello_check(f->s, &h, NULL), CORE_JOIN_EXCLUDED);
	h = hello_of(f, 1, sizes);
	assert_int_equal(core_hello_check(f->s, &h, NULL), CORE_JOIN_OK);
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
 * (incarnation 0) do not open it, nor does a round merged before then
 * count its wait as down; the heartbeat that brings the K-th
 * incarnation opens it, at its time.
 */
static void uptime_starts_with_the_learner_processes(void **state)
{
	struct fx *f = *state;
	struct core_merged mg;
	struct round_action pulls[8], a;
	uint64_t sizes[2], resume;

	fx_start(f);
	for (uint32_t id = 0; id < M; id++) {
		struct wire_hello h = hello_of(f, id, sizes);

		h.incarnation = 0;
		assert_int_equal(core_hello_check(f->s, &h, NULL), CORE_JOIN_OK);
		core_join(f->s, &h, f->now, &resume, pulls, 8);
	}
	assert_true(f->s->acc.uptime_start < 0);
	/* a round merged from answers whose learners' heartbeats have not
	 * come yet: the time before it is the start, not down */
	f->now += 2.0;
	a = poll(f);
	assert_int_equal(a.kind, ROUND_PULL);
	answer(f, 0, a.round, a.frag, 0, 0.1f, 0, ENC_F32);
	answer(f, 2, a.round, a.frag, 0, 0.1f, 0, ENC_F32);
	merge(f, poll(f), &mg);
	assert_float_equal(f->s->acc.down, 0, 0);
	assert_true(f->s->acc.uptime_start < 0);
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
	assert_int_equal(f->s->ps.w.out.last_ok_round, 1);

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

/*
 * The high-water mark: on disk before round 1 is handed out (rounds up
 * to 16, versions 0 + 16 + τ 2 + 1 = 19), asked again at round 9. With every
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
	st = core_next(f, &hb);
	assert_int_equal(st.kind, CORE_STEP_PULL);
	assert_int_equal(st.round, 17);
	a = (struct round_action){ .kind = ROUND_PULL, .round = st.round,
				   .frag = st.frag };
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

/* core_merge on a thread of its own, holding `mu` as the run loop does. */
struct merge_call {
	struct fx *f;
	int slot;
	struct core_merged mg;
	struct slowdisk *d;
	int done;
};

static void *merge_main(void *arg)
{
	struct merge_call *m = arg;

	pthread_mutex_lock(&m->f->s->mu);
	core_merge(m->f->s, m->slot, m->f->now, &m->mg);
	pthread_mutex_unlock(&m->f->s->mu);
	pthread_mutex_lock(&m->d->mu);
	m->done = 1;
	pthread_cond_broadcast(&m->d->cv);
	pthread_mutex_unlock(&m->d->mu);
	return NULL;
}

/* GET /healthz on a thread of its own: what it answered, and when. */
struct probe {
	struct fx *f;
	struct slowdisk *d;
	char *body;
	int done;
};

static void *probe_main(void *arg)
{
	struct probe *pr = arg;
	char *txt = http_get(pr->f, "/healthz");

	pthread_mutex_lock(&pr->d->mu);
	pr->body = txt;
	pr->done = 1;
	pthread_cond_broadcast(&pr->d->cv);
	pthread_mutex_unlock(&pr->d->mu);
	return NULL;
}

/* A round answered by learners 0 and 1, up to its merge (not done). */
static struct round_action answered(struct fx *f, uint64_t *hb)
{
	struct round_action a = pull_next(f, hb);

	answer_at(f, 0, a.round, a.frag, f->s->versions[a.frag], 0.1f, *hb, 1, 10);
	answer_at(f, 1, a.round, a.frag, f->s->versions[a.frag], 0.1f, *hb, 1, 10);
	a = poll(f);
	assert_int_equal(a.kind, ROUND_MERGE);
	return a;
}

/*
 * A checkpoint write stuck on a slow disk (an injected write that waits
 * for the test) stalls nothing: the merge that handed it over returns,
 * /healthz and /status answer while the write waits (/healthz even while
 * the state lock is held), and the next round
 * merges; its checkpoint, not taken meanwhile, is taken once the write
 * is through (docs/syncer.md, Checkpoints).
 */
static struct slowdisk d = SLOWDISK_INIT;

/* A failed assertion leaves the disk closed: open it, or the writer
 * never ends. */
static int teardown_disk(void **state)
{
	slowdisk_open(&d);
	return teardown(state);
}

static void healthz_answers_while_a_checkpoint_is_stuck_on_the_disk(void **state)
{
	struct fx *f = *state;
	struct merge_call m = { .f = f, .d = &d };
	struct core_merged mg;
	pthread_t t;
	uint64_t hb = 0;
	json_t *c;
	char *txt;
	int ok;

	fx_start(f);
	join_all(f);
	f->s->ps.w.write = slowdisk_write;
	f->s->ps.w.write_ctx = &d;
	m.slot = answered(f, &hb).slot;
	assert_int_equal(pthread_create(&t, NULL, merge_main, &m), 0);
	ok = slowdisk_wait(&d, 0, &m.done);
	if (!ok)
		slowdisk_open(&d);   /* the merge waits for the disk: a failure */
	pthread_join(t, NULL);
	assert_true(ok);
	assert_int_equal(m.mg.merged, 2);
	assert_true(slowdisk_wait(&d, 1, NULL));   /* at the disk, stuck */

	f->s->last_loop = clock_mono();   /* the run loop turned just now */
	txt = http_get(f, "/healthz");
	assert_string_equal(txt, "ok\n");
	free(txt);
	/* nor does the state lock, held by a long merge: the probe
	 * answers without it */
	{
		struct probe pr = { .f = f, .d = &d };

		pthread_mutex_lock(&f->s->mu);
		assert_int_equal(pthread_create(&t, NULL, probe_main, &pr), 0);
		ok = slowdisk_wait(&d, 0, &pr.done);
		pthread_mutex_unlock(&f->s->mu);
		pthread_join(t, NULL);
		assert_true(ok);
		assert_string_equal(pr.body, "ok\n");
		free(pr.body);
	}
	c = status_ckpt(f);
	assert_true(json_is_true(json_object_get(c, "writing")));
	assert_int_equal(json_integer_value(json_object_get(c, "writing_round")), 1);
	assert_true(json_is_null(json_object_get(c, "last_ok_round")));
	json_decref(c);

	/* the rounds go on; this one's checkpoint is not taken yet */
	core_merge(f->s, answered(f, &hb).slot, f->now, &mg);
	assert_int_equal(mg.merged, 2);
	assert_int_equal(f->s->rs.completed, 2);
	assert_int_equal(f->s->ckpt_due, 1);

	slowdisk_open(&d);
	core_checkpoint_due(f->s, f->now, 1);
	c = status_ckpt(f);
	assert_true(json_is_false(json_object_get(c, "writing")));
	assert_int_equal(json_integer_value(json_object_get(c, "written")), 2);
	assert_int_equal(json_integer_value(json_object_get(c, "skipped")), 1);
	assert_int_equal(json_integer_value(json_object_get(c, "last_ok_round")), 2);
	json_decref(c);
	fx_stop(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(hello_is_checked,
						setup, teardown),
		cmocka_unit_test_setup_teardown(job_tokens_estimate_the_steps_since_a_heartbeat,
						setup, teardown),
		cmocka_unit_test_setup_teardown(heartbeats_count_tokens_over_restarts,
						setup, teardown),
		cmocka_unit_test_setup_teardown(the_budget_ends_the_job,
						setup, teardown),
		cmocka_unit_test_setup_teardown(a_restart_skips_versions_and_empties_older_answers,
						setup, teardown),
		cmocka_unit_test_setup_teardown(a_returning_learner_resumes_at_its_own_step,
						setup, teardown),
		cmocka_unit_test_setup_teardown(heartbeats_beyond_the_bounds_are_refused,
						setup, teardown),
		cmocka_unit_test_setup_teardown(a_cut_step_claim_merges_no_step_twice,
						setup, teardown),
		cmocka_unit_test_setup_teardown(a_tiny_step_time_does_not_buy_steps,
						setup, teardown),
		cmocka_unit_test_setup_teardown(a_down_gap_is_logged_with_the_learners,
						setup, teardown),
		cmocka_unit_test_setup_teardown(uptime_starts_with_the_learner_processes,
						setup, teardown),
		cmocka_unit_test_setup_teardown(checkpoints_that_fail_are_shown_and_retried,
						setup, teardown),
		cmocka_unit_test_setup_teardown(a_restart_falls_back_to_the_last_good_checkpoint,
						setup, teardown),
		cmocka_unit_test_setup_teardown(the_final_evaluation_leaves_the_lock_free,
						setup, teardown),
		cmocka_unit_test_setup_teardown(a_learner_whose_step_stands_still_is_not_waited_for,
						setup, teardown),
		cmocka_unit_test_setup_teardown(the_high_water_mark_outlives_the_checkpoints,
						setup, teardown),
		cmocka_unit_test_setup_teardown(healthz_answers_while_a_checkpoint_is_stuck_on_the_disk,
						setup, teardown_disk),
		cmocka_unit_test_setup_teardown(the_stale_scan_runs_once_per_tick,
						setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
