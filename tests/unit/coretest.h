/*
 * coretest: what test_core.c and test_merge.c share to drive the
 * syncer's core on the fixture of corefix.h: starting and stopping it,
 * learners joining, answering and heartbeating, the round machine's
 * actions run by hand (or through core_poll), /status read. Header
 * only; include it after <cmocka.h>.
 */
#ifndef DDILOCO_CORETEST_H
#define DDILOCO_CORETEST_H

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

static inline void fx_start(struct fx *f)
{
	f->s = calloc(1, sizeof(*f->s));
	assert_non_null(f->s);
	assert_int_equal(core_init(f->s, &f->prm, f->now, NULL), 0);
}

static inline void fx_stop(struct fx *f)
{
	core_release(f->s);
	free(f->s);
	f->s = NULL;
}

static inline int setup(void **state)
{
	struct fx *f = corefix_new("core");

	f->js.syncer.grace = 0.5;
	f->js.syncer.checkpoint_every = 1;
	*state = f;
	return 0;
}

static inline int teardown(void **state)
{
	corefix_free(*state);
	return 0;
}

static inline struct wire_hello hello_of(struct fx *f, uint32_t id, uint64_t *sizes)
{
	return corefix_hello(f, id, 0, sizes);
}

/* Every learner joins at step 0; returns how many pulls they got. */
static inline int join_all(struct fx *f)
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
static inline struct round_action poll(struct fx *f)
{
	struct round_action a;

	syncer_round_poll(&f->s->rs, f->now, &a);
	return a;
}

/*
 * Learner id answers round/frag from base: every value `v`, the payload
 * `extra` floats longer than the fragment, in encoding enc.
 */
static inline enum core_verdict answer(struct fx *f, int id, uint64_t round, int frag,
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
static inline enum core_verdict answer_at(struct fx *f, int id, uint64_t round,
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
static inline struct round_action pull_next(struct fx *f, uint64_t *step)
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
 * on (step not NULL) until it has a step for the transport; a pull held
 * for the high-water mark (syncer/markw.h, a thread) is waited for. */
static inline struct core_step core_next(struct fx *f, uint64_t *step)
{
	struct core_step st;

	for (int i = 0; i < 100; i++) {
		if (core_poll(f->s, f->now, &st)) {
			if (st.kind == CORE_STEP_MERGED)
				core_checkpoint_due(f->s, f->now, 1);
			return st;
		}
		if (f->s->ps.holding) {
			assert_eventually(markw_covered(&f->s->ps.mw) >
					  f->s->rs.started, 10);
			continue;
		}
		assert_non_null(step);
		++*step;
		for (int id = 0; id < M; id++)
			core_heartbeat(f->s, id, &(struct wire_heartbeat){
				.step = *step }, f->now);
	}
	fail_msg("core_poll had nothing to do");
	return st;
}

static inline void merge(struct fx *f, struct round_action a, struct core_merged *mg)
{
	assert_int_equal(a.kind, ROUND_MERGE);
	core_merge(f->s, a.slot, f->now, mg);
	/* the checkpoint of the merge on disk, as a run loop has it soon
	 * after (core_checkpoint_due) */
	core_checkpoint_due(f->s, f->now, 1);
}

/* One round of fragment 1 or 0 answered by learners 0 and 1 and merged. */
static inline void one_round(struct fx *f, uint64_t *hb, struct core_merged *mg)
{
	struct round_action a = pull_next(f, hb);

	answer_at(f, 0, a.round, a.frag, f->s->versions[a.frag], 0.1f, *hb, 1, 10);
	answer_at(f, 1, a.round, a.frag, f->s->versions[a.frag], 0.1f, *hb, 1, 10);
	merge(f, poll(f), mg);
	assert_int_equal(mg->merged, 2);
}

static inline json_t *status_of(struct fx *f)
{
	char *txt = http_get(f, "/status");
	json_t *o = json_loads(txt, 0, NULL);

	free(txt);
	assert_non_null(o);
	return o;
}

#endif
