/*
 * The learner ↔ sidecar exchange: the conversation, concurrent readers and
 * writers in two processes, writers killed mid-copy, re-attach.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/exchange.h"
#include "common/util.h"
#include "tests/unit/testlib.h"

/* three tensors in two fragments: {1: 6 values}, {0: 5 values + 2: 2} */
static const struct frag_tensor small_t[3] = {
	{ .offset = 0, .numel = 5, .is_embedding = 1 },
	{ .offset = 5, .numel = 6, .is_embedding = 0 },
	{ .offset = 11, .numel = 2, .is_embedding = 0 },
};
#define SMALL_N 13

struct fx {
	char dir[64];
	struct frag_table ft;
};

static int setup_small(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	assert_int_equal(testlib_tmpdir(f->dir, sizeof(f->dir), "ddx-test"), 0);
	assert_int_equal(frag_table_init(&f->ft, small_t, 3, 2, NULL), 0);
	*state = f;
	return 0;
}

static int setup_big(void **state)
{
	/* two fragments of 128K values: copies take long enough to race */
	static const struct frag_tensor t[2] = {
		{ .offset = 0, .numel = 131072, .is_embedding = 0 },
		{ .offset = 131072, .numel = 131072, .is_embedding = 0 },
	};
	struct fx *f = calloc(1, sizeof(*f));

	assert_int_equal(testlib_tmpdir(f->dir, sizeof(f->dir), "ddx-test"), 0);
	assert_int_equal(frag_table_init(&f->ft, t, 2, 2, NULL), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	assert_int_equal(testlib_rmtree(f->dir), 0);
	frag_table_release(&f->ft);
	free(f);
	return 0;
}

static void publish_const(struct exchange *sc, int p, uint64_t version,
			  float v)
{
	float *d = exchange_inbox_begin(sc, p);

	for (size_t i = 0; i < exchange_frag_numel(sc, p); i++)
		d[i] = v;
	exchange_inbox_commit(sc, p, version);
}

static struct exchange_step step_of(uint64_t step, uint64_t tokens)
{
	struct exchange_step st = {
		.step = step, .tokens = tokens, .tokens_total = step * tokens,
		.loss = 2.5, .step_time = 0.01,
	};
	return st;
}

static void conversation(void **state)
{
	struct fx *f = *state;
	struct exchange *ln, *sc;
	struct exchange_poll_result res;
	struct exchange_answer a;
	struct exchange_counters c;
	struct exchange_stats stats;
	struct exchange_step st;
	float params[SMALL_N], buf[8];

	assert_int_equal(exchange_open(f->dir, EXCHANGE_LEARNER, &f->ft, &ln,
				       NULL), 0);
	assert_int_equal(exchange_open(f->dir, EXCHANGE_SIDECAR, &f->ft, &sc,
				       NULL), 0);
	assert_int_equal(exchange_nfrags(sc), 2);
	assert_int_equal(exchange_frag_numel(sc, 0), 6);
	assert_int_equal(exchange_frag_numel(sc, 1), 7);
	for (int i = 0; i < SMALL_N; i++)
		params[i] = -1.0f;

	/* not every fragment delivered: the learner cannot start */
	assert_int_equal(exchange_learner_start(ln, params), 0);
	publish_const(sc, 0, 7, 1.0f);
	assert_int_equal(exchange_learner_start(ln, params), 0);
	assert_exactly(params[5], -1.0f);
	publish_const(sc, 1, 3, 2.0f);
	assert_int_equal(exchange_wait(ln, 1.0), 1);
	assert_int_equal(exchange_learner_start(ln, params), 1);
	/* fragment 0 = tensor 1, fragment 1 = tensors 0 and 2 */
	for (int i = 5; i < 11; i++)
		assert_exactly(params[i], 1.0f);
	for (int i = 0; i < 5; i++)
		assert_exactly(params[i], 2.0f);
	assert_exactly(params[11], 2.0f);
	assert_exactly(params[12], 2.0f);
	assert_int_equal(exchange_inbox_version(sc, 0), 7);

	/* two steps of training, then a pull of fragment 1 */
	for (int i = 0; i < SMALL_N; i++)
		params[i] += 0.25f * (float)i;
	st = step_of(1, 64);
	exchange_poll(ln, params, &st, &res);
	assert_int_equal(res.served, 0);
	exchange_post_pull(sc, 1, 11);
	assert_int_equal(exchange_take_answer(sc, 1, &a, buf), 0);
	st = step_of(2, 64);
	exchange_poll(ln, params, &st, &res);
	assert_int_equal(res.served, 1);
	assert_int_equal(res.applied, 0);
	assert_int_equal(res.done, 0);
	assert_int_equal(exchange_wait(sc, 1.0), 1);
	assert_int_equal(exchange_take_answer(sc, 1, &a, buf), 1);
	assert_int_equal(a.round, 11);
	assert_int_equal(a.base_version, 3);
	assert_int_equal(a.steps, 2);
	assert_int_equal(a.tokens, 128);
	assert_int_equal(a.step, 2);
	/* Δ = base − θ in fragment order: tensor 0 then tensor 2 */
	for (int i = 0; i < 5; i++)
		assert_float_equal(buf[i], -0.25f * (float)i, 1e-6);
	assert_float_equal(buf[5], -0.25f * 11, 1e-6);
	assert_float_equal(buf[6], -0.25f * 12, 1e-6);
	/* taken once */
	assert_int_equal(exchange_take_answer(sc, 1, &a, buf), 0);

	/* the learner's stats, for heartbeats */
	assert_int_equal(exchange_read_stats(sc, &stats), 0);
	assert_int_equal(stats.step, 2);
	assert_int_equal(stats.tokens_total, 128);
	assert_float_equal(stats.loss, 2.5, 1e-12);
	assert_int_equal(stats.pid, (uint64_t)getpid());
	assert_int_not_equal(stats.incarnation, 0);

	/* an update of fragment 0 overwrites θ and resets its counters */
	publish_const(sc, 0, 4, 5.0f);
	st = step_of(3, 64);
	exchange_poll(ln, params, &st, &res);
	assert_int_equal(res.applied, 1);
	for (int i = 5; i < 11; i++)
		assert_exactly(params[i], 5.0f);
	exchange_post_pull(sc, 0, 12);
	st = step_of(4, 64);
	params[5] = 4.5f;
	exchange_poll(ln, params, &st, &res);
	assert_int_equal(exchange_take_answer(sc, 0, &a, buf), 1);
	assert_int_equal(a.base_version, 4);
	assert_int_equal(a.steps, 1);
	assert_int_equal(a.tokens, 64);
	assert_float_equal(buf[0], 0.5f, 1e-6);
	assert_float_equal(buf[1], 0.0f, 1e-6);

	/* a repeated version (a reconnected sidecar) is skipped */
	params[5] = 4.0f;
	publish_const(sc, 0, 4, 9.0f);
	st = step_of(5, 64);
	exchange_poll(ln, params, &st, &res);
	assert_int_equal(res.applied, 0);
	assert_exactly(params[5], 4.0f);
	exchange_counters(ln, &c);
	assert_int_equal(c.updates_skipped, 1);
	assert_int_equal(c.updates_applied, 1);
	assert_int_equal(c.pulls_served, 2);

	/* mixing: θ ← α·θ + (1 − α)·Θ */
	exchange_set_alpha(sc, 0.25);
	publish_const(sc, 0, 5, 8.0f);
	st = step_of(6, 64);
	exchange_poll(ln, params, &st, &res);
	assert_float_equal(params[5], 0.25f * 4.0f + 0.75f * 8.0f, 1e-6);
	assert_float_equal(params[6], 0.25f * 5.0f + 0.75f * 8.0f, 1e-6);

	/* with α > 0 the steps since the last answer (at step 4) are kept:
	 * the α share of their progress, α·(base − θ), is still to answer */
	exchange_post_pull(sc, 0, 13);
	exchange_poll(ln, params, &st, &res);
	assert_int_equal(exchange_take_answer(sc, 0, &a, buf), 1);
	assert_int_equal(a.steps, 3);
	assert_float_equal(buf[0], 0.25f * (4.5f - 4.0f), 1e-6);
	assert_float_equal(buf[1], 0.0f, 1e-6);

	/* queue depths and superseded work */
	exchange_post_pull(sc, 0, 14);
	exchange_post_pull(sc, 0, 16);
	publish_const(sc, 0, 8, 1.0f);
	publish_const(sc, 0, 9, 1.0f);
	exchange_counters(sc, &c);
	assert_int_equal(c.pulls_superseded, 1);
	assert_int_equal(c.updates_superseded, 1);
	assert_int_equal(c.pulls_pending, 1);
	assert_int_equal(c.inbox_pending, 1);
	exchange_poll(ln, params, &st, &res);
	assert_int_equal(exchange_take_answer(sc, 0, &a, buf), 1);
	assert_int_equal(a.round, 16);
	exchange_counters(sc, &c);
	assert_int_equal(c.pulls_pending, 0);
	assert_int_equal(c.inbox_pending, 0);

	/* done reaches the learner */
	exchange_set_done(sc, 1);
	exchange_poll(ln, params, &st, &res);
	assert_int_equal(res.done, 1);
	exchange_close(sc);
	exchange_close(ln);
}

/* Both fragments from the sidecar at version 1, every value v; the learner
 * started on them. */
static void start_pair(struct fx *f, struct exchange **ln, struct exchange **sc,
		       float *params, float v)
{
	assert_int_equal(exchange_open(f->dir, EXCHANGE_LEARNER, &f->ft, ln,
				       NULL), 0);
	assert_int_equal(exchange_open(f->dir, EXCHANGE_SIDECAR, &f->ft, sc,
				       NULL), 0);
	publish_const(*sc, 0, 1, v);
	publish_const(*sc, 1, 1, v);
	assert_int_equal(exchange_learner_start(*ln, params), 1);
}

/* The learner's poll at step n of 64 tokens. */
static void poll_at(struct exchange *ln, float *params, uint64_t n,
		    struct exchange_poll_result *res)
{
	struct exchange_step st = step_of(n, 64);

	exchange_poll(ln, params, &st, res);
}

/* A pull of fragment p for round posted by the sidecar, then the
 * learner's poll at step n. */
static void pull_at(struct exchange *ln, struct exchange *sc, float *params,
		    int p, uint64_t round, uint64_t n,
		    struct exchange_poll_result *res)
{
	exchange_post_pull(sc, p, round);
	poll_at(ln, params, n, res);
}

/*
 * A second pull of a fragment before the update of the first answer is
 * applied (docs/design.md §3, Learner): the answer moved the base, so the
 * second one holds only the steps since; the update, served after it in
 * the same poll, then overwrites. Keeping the base until the update would
 * send step 1 again, in Δ and in steps and tokens.
 */
static void an_answer_moves_the_base(void **state)
{
	struct fx *f = *state;
	struct exchange *ln, *sc;
	struct exchange_poll_result res;
	struct exchange_answer a;
	struct exchange_counters c;
	float params[SMALL_N], buf[8];

	start_pair(f, &ln, &sc, params, 1.0f);
	/* step 1 moves fragment 0 (tensor 1: params 5..10) by 0.5; pulled */
	for (int i = 5; i < 11; i++)
		params[i] += 0.5f;
	pull_at(ln, sc, params, 0, 10, 1, &res);
	assert_int_equal(exchange_take_answer(sc, 0, &a, buf), 1);
	assert_int_equal(a.steps, 1);
	assert_float_equal(buf[0], -0.5f, 1e-6);
	/* step 2 moves it by 0.25 more; the next pull and the update of the
	 * first answer arrive together */
	for (int i = 5; i < 11; i++)
		params[i] += 0.25f;
	exchange_post_pull(sc, 0, 12);
	publish_const(sc, 0, 2, 3.0f);
	poll_at(ln, params, 2, &res);
	assert_int_equal(res.served, 1);
	assert_int_equal(res.applied, 1);
	assert_int_equal(exchange_take_answer(sc, 0, &a, buf), 1);
	assert_int_equal(a.round, 12);
	assert_int_equal(a.base_version, 1);
	assert_int_equal(a.steps, 1);
	assert_int_equal(a.tokens, 64);
	assert_int_equal(a.step, 2);
	for (int i = 0; i < 6; i++)
		assert_float_equal(buf[i], -0.25f, 1e-6);
	exchange_counters(ln, &c);
	assert_int_equal(c.pulls_before_update, 1);
	/* the update overwrote θ and the base: the next answer starts there */
	for (int i = 5; i < 11; i++)
		assert_exactly(params[i], 3.0f);
	params[5] = 2.0f;
	pull_at(ln, sc, params, 0, 14, 3, &res);
	assert_int_equal(exchange_take_answer(sc, 0, &a, buf), 1);
	assert_int_equal(a.base_version, 2);
	assert_int_equal(a.steps, 1);
	assert_float_equal(buf[0], 1.0f, 1e-6);
	assert_float_equal(buf[1], 0.0f, 1e-6);
	exchange_counters(ln, &c);
	assert_int_equal(c.pulls_before_update, 1);
	exchange_close(sc);
	exchange_close(ln);
}

/*
 * An answer sent from the region (docs/exchange.md, Answers sent from the
 * region): while the sidecar holds generation g, the learner answers
 * g + 1 into the other slot but leaves a pull that would write g + 2
 * over g for a later poll, counting its steps on; released, the pull is
 * answered with every step since g + 1. The region outlives a close
 * while a slot is held.
 */
static void a_held_slot_is_kept(void **state)
{
	struct fx *f = *state;
	struct exchange *ln, *sc;
	struct exchange_poll_result res;
	struct exchange_answer a;
	struct exchange_counters c;
	struct exchange_hold *h, *h2;
	const float *v, *v2;
	float params[SMALL_N], buf[8];

	start_pair(f, &ln, &sc, params, 1.0f);
	/* no stats from the learner yet: it may be of an older build */
	assert_int_equal(exchange_hold_answer(sc, 0, &a, &v, &h), -1);
	for (int i = 5; i < 11; i++)
		params[i] += 0.5f;
	pull_at(ln, sc, params, 0, 10, 1, &res);
	assert_int_equal(res.served, 1);
	assert_int_equal(exchange_hold_answer(sc, 0, &a, &v, &h), 1);
	assert_non_null(h);
	assert_int_equal(a.round, 10);
	assert_int_equal(a.steps, 1);
	for (int i = 0; i < 6; i++)
		assert_exactly(v[i], -0.5f);
	/* nothing newer to take */
	assert_int_equal(exchange_hold_answer(sc, 0, &a, &v2, &h2), 0);
	/* g + 1 goes to the other slot */
	for (int i = 5; i < 11; i++)
		params[i] += 0.25f;
	pull_at(ln, sc, params, 0, 11, 2, &res);
	assert_int_equal(res.served, 1);
	assert_int_equal(exchange_take_answer(sc, 0, &a, buf), 1);
	assert_int_equal(a.round, 11);
	assert_exactly(buf[0], -0.25f);
	/* g + 2 would go over the held g: not now, twice */
	for (int i = 5; i < 11; i++)
		params[i] += 0.125f;
	pull_at(ln, sc, params, 0, 12, 3, &res);
	assert_int_equal(res.served, 0);
	for (int i = 5; i < 11; i++)
		params[i] += 0.125f;
	poll_at(ln, params, 4, &res);
	assert_int_equal(res.served, 0);
	exchange_counters(ln, &c);
	assert_int_equal(c.pulls_held, 2);
	assert_int_equal(c.pulls_served, 2);
	for (int i = 0; i < 6; i++)
		assert_exactly(v[i], -0.5f);
	assert_int_equal(exchange_answer_ready(sc, 0), 0);
	/* released: the next poll answers round 12 with steps 3 and 4 */
	exchange_release(h);
	poll_at(ln, params, 5, &res);
	assert_int_equal(res.served, 1);
	assert_int_equal(exchange_hold_answer(sc, 0, &a, &v, &h), 1);
	assert_int_equal(a.round, 12);
	assert_int_equal(a.steps, 3);
	assert_int_equal(a.step, 5);
	for (int i = 0; i < 6; i++)
		assert_exactly(v[i], -0.25f);
	exchange_counters(sc, &c);
	assert_int_equal(c.answers_held, 2);
	assert_int_equal(c.answers_taken, 3);
	/* closed with a slot held: the values stay readable until released */
	exchange_close(sc);
	assert_exactly(v[5], -0.25f);
	exchange_release(h);
	exchange_close(ln);
}

/*
 * Mixing with α > 0 (docs/design.md §3, Learner): progress g trained
 * before an update and not answered yet is still reported afterwards, at
 * its α share: Δ = α·(−g) against the mixed base, with its steps and
 * tokens, and the version g was trained from. A base set to the mixed θ
 * would report 0; a base set to Θ would report α·(Θ − θ), the outer
 * step's share sent back as progress.
 */
static void mixing_reports_the_alpha_share(void **state)
{
	struct fx *f = *state;
	struct exchange *ln, *sc;
	struct exchange_poll_result res;
	struct exchange_answer a;
	float params[SMALL_N], buf[8], g[6];

	start_pair(f, &ln, &sc, params, 1.0f);
	exchange_set_alpha(sc, 0.5);
	for (int i = 0; i < 6; i++) {
		g[i] = 0.125f * (float)(i + 1);
		params[5 + i] += g[i];
	}
	poll_at(ln, params, 1, &res);
	publish_const(sc, 0, 2, 3.0f);
	poll_at(ln, params, 2, &res);
	assert_int_equal(res.applied, 1);
	for (int i = 0; i < 6; i++)
		assert_float_equal(params[5 + i], 0.5f * (1.0f + g[i]) + 1.5f, 1e-6);
	pull_at(ln, sc, params, 0, 20, 3, &res);
	assert_int_equal(exchange_take_answer(sc, 0, &a, buf), 1);
	assert_int_equal(a.base_version, 1);
	assert_int_equal(a.steps, 3);
	assert_int_equal(a.tokens, 3 * 64);
	for (int i = 0; i < 6; i++)
		assert_float_equal(buf[i], -0.5f * g[i], 1e-6);
	/* with α = 0 the same progress is overwritten, counters and all */
	exchange_set_alpha(sc, 0.0);
	params[5] += 1.0f;
	publish_const(sc, 0, 3, 4.0f);
	poll_at(ln, params, 4, &res);
	pull_at(ln, sc, params, 0, 22, 5, &res);
	assert_int_equal(exchange_take_answer(sc, 0, &a, buf), 1);
	assert_int_equal(a.steps, 1);
	assert_float_equal(buf[0], 0.0f, 0);
	exchange_close(sc);
	exchange_close(ln);
}

/*
 * A lone stretch kept at α (docs/exchange.md, The learner side): 200
 * steps trained from version 1, then an update of version 9 applied with
 * no pull pending. The next answer holds α of those steps, so it reports
 * version 1, the oldest progress in it, and the syncer's staleVersions
 * rule empties it; labelled 9 it would be merged as fresh. The answer
 * after it, and one served in the poll of an update, report the update.
 */
static void a_kept_share_keeps_its_version(void **state)
{
	struct fx *f = *state;
	struct exchange *ln, *sc;
	struct exchange_poll_result res;
	struct exchange_answer a;
	float params[SMALL_N], buf[8];

	start_pair(f, &ln, &sc, params, 1.0f);
	exchange_set_alpha(sc, 0.5);
	for (uint64_t n = 1; n <= 200; n++) {
		params[5] += 0.01f;
		poll_at(ln, params, n, &res);
	}
	publish_const(sc, 0, 9, 3.0f);
	poll_at(ln, params, 201, &res);
	assert_int_equal(res.applied, 1);
	pull_at(ln, sc, params, 0, 40, 202, &res);
	assert_int_equal(exchange_take_answer(sc, 0, &a, buf), 1);
	assert_int_equal(a.base_version, 1);
	assert_int_equal(a.steps, 202);
	assert_float_equal(buf[0], -0.5f * 2.0f, 1e-4);
	/* answered: what is left was trained from version 9 */
	pull_at(ln, sc, params, 0, 41, 203, &res);
	assert_int_equal(exchange_take_answer(sc, 0, &a, buf), 1);
	assert_int_equal(a.base_version, 9);
	assert_int_equal(a.steps, 1);
	/* a pull served before the update of the same poll leaves nothing
	 * to carry: the next answer is the update's */
	exchange_post_pull(sc, 0, 42);
	publish_const(sc, 0, 10, 3.0f);
	poll_at(ln, params, 204, &res);
	assert_int_equal(exchange_take_answer(sc, 0, &a, buf), 1);
	assert_int_equal(a.base_version, 9);
	pull_at(ln, sc, params, 0, 43, 205, &res);
	assert_int_equal(exchange_take_answer(sc, 0, &a, buf), 1);
	assert_int_equal(a.base_version, 10);
	exchange_close(sc);
	exchange_close(ln);
}

static void wrong_model_is_refused(void **state)
{
	struct fx *f = *state;
	static const struct frag_tensor other_t[3] = {
		{ .offset = 0, .numel = 6, .is_embedding = 1 },
		{ .offset = 6, .numel = 4, .is_embedding = 0 },
		{ .offset = 10, .numel = 2, .is_embedding = 0 },
	};
	struct frag_table other;
	struct exchange *a, *b;
	struct err e;

	assert_int_equal(exchange_open(f->dir, EXCHANGE_SIDECAR, &f->ft, &a,
				       NULL), 0);
	assert_int_equal(frag_table_init(&other, other_t, 3, 2, NULL), 0);
	assert_int_equal(exchange_open(f->dir, EXCHANGE_LEARNER, &other, &b, &e),
			 -1);
	assert_non_null(strstr(e.msg, "fingerprint"));
	assert_non_null(strstr(e.msg, "/exchange'"));
	frag_table_release(&other);
	exchange_close(a);
}

static void long_folder_is_refused(void **state)
{
	struct fx *f = *state;
	char dir[256];
	struct exchange *x;
	struct err e;

	snprintf(dir, sizeof(dir), "%s/%0120d", f->dir, 0);
	assert_int_equal(exchange_open(dir, EXCHANGE_LEARNER, &f->ft, &x, &e),
			 -1);
	assert_non_null(strstr(e.msg, "too long"));
}

static void restart_reattaches(void **state)
{
	struct fx *f = *state;
	struct exchange *ln, *sc;
	struct exchange_poll_result res;
	struct exchange_answer a;
	struct exchange_stats s1, s2;
	struct exchange_step st = step_of(1, 10);
	uint64_t rs;
	float params[SMALL_N], buf[8];

	assert_int_equal(exchange_open(f->dir, EXCHANGE_SIDECAR, &f->ft, &sc,
				       NULL), 0);
	publish_const(sc, 0, 1, 1.0f);
	publish_const(sc, 1, 1, 2.0f);
	assert_int_equal(exchange_open(f->dir, EXCHANGE_LEARNER, &f->ft, &ln,
				       NULL), 0);
	assert_int_equal(exchange_learner_start(ln, params), 1);
	exchange_poll(ln, params, &st, &res);
	assert_int_equal(exchange_read_stats(sc, &s1), 0);
	/* a resume step reaches the process it is meant for, no other */
	assert_int_equal(exchange_resume(ln, &rs), 0);
	exchange_set_resume(sc, 77, s1.incarnation + 1);
	assert_int_equal(exchange_resume(ln, &rs), 0);
	exchange_set_resume(sc, 77, s1.incarnation);
	assert_int_equal(exchange_resume(ln, &rs), 1);
	assert_int_equal(rs, 77);
	exchange_post_pull(sc, 0, 5);
	exchange_poll(ln, params, &st, &res);

	/* the sidecar restarts: the answer left behind is not re-sent */
	exchange_set_done(sc, 1);
	exchange_close(sc);
	assert_int_equal(exchange_open(f->dir, EXCHANGE_SIDECAR, &f->ft, &sc,
				       NULL), 0);
	assert_int_equal(exchange_take_answer(sc, 0, &a, buf), 0);
	assert_int_equal(exchange_is_done(sc), 0);
	exchange_post_pull(sc, 0, 6);
	exchange_poll(ln, params, &st, &res);
	assert_int_equal(res.done, 0);
	assert_int_equal(exchange_take_answer(sc, 0, &a, buf), 1);
	assert_int_equal(a.round, 6);

	/* the learner restarts: it starts from the inbox as it is now */
	publish_const(sc, 1, 2, 3.0f);
	exchange_close(ln);
	memset(params, 0, sizeof(params));
	assert_int_equal(exchange_open(f->dir, EXCHANGE_LEARNER, &f->ft, &ln,
				       NULL), 0);
	assert_int_equal(exchange_learner_start(ln, params), 1);
	assert_exactly(params[5], 1.0f);
	assert_exactly(params[0], 3.0f);
	exchange_poll(ln, params, &st, &res);
	assert_int_equal(exchange_read_stats(sc, &s2), 0);
	assert_int_not_equal(s2.incarnation, s1.incarnation);
	/* the step left for the earlier process is not this one's */
	rs = 0;
	assert_int_equal(exchange_resume(ln, &rs), 0);
	assert_int_equal(rs, 0);
	exchange_set_resume(sc, 123, s2.incarnation);
	assert_int_equal(exchange_resume(ln, &rs), 1);
	assert_int_equal(rs, 123);
	exchange_close(ln);
	exchange_close(sc);
}

static int all_equal(const float *v, size_t n)
{
	for (size_t i = 1; i < n; i++)
		if (v[i] != v[0])
			return 0;
	return 1;
}

/* A sidecar killed in the middle of writing an update: the learner gets
 * the last complete one, and a new sidecar carries on. */
static void sidecar_killed_mid_copy(void **state)
{
	struct fx *f = *state;
	struct exchange *ln, *sc;
	struct exchange_poll_result res;
	struct exchange_step st = step_of(1, 1);
	size_t n = f->ft.frags[0].numel;
	float *params = calloc(262144, sizeof(float));
	int pfd[2], status;
	char c;
	pid_t pid;

	assert_int_equal(pipe(pfd), 0);
	pid = fork();
	assert_at_least(pid, 0);
	if (pid == 0) {
		float *d;

		if (exchange_open(f->dir, EXCHANGE_SIDECAR, &f->ft, &sc, NULL))
			_exit(1);
		publish_const(sc, 0, 1, 1.0f);
		publish_const(sc, 1, 1, 1.0f);
		d = exchange_inbox_begin(sc, 0);
		for (size_t i = 0; i < n / 2; i++)
			d[i] = 2.0f;
		if (write(pfd[1], "x", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	assert_int_equal(read(pfd[0], &c, 1), 1);
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	close(pfd[0]);
	close(pfd[1]);

	assert_int_equal(exchange_open(f->dir, EXCHANGE_LEARNER, &f->ft, &ln,
				       NULL), 0);
	assert_int_equal(exchange_learner_start(ln, params), 1);
	assert_true(all_equal(params, 262144));
	assert_exactly(params[0], 1.0f);
	exchange_poll(ln, params, &st, &res);
	assert_int_equal(res.applied, 0);

	/* a new sidecar writes over the abandoned slot */
	assert_int_equal(exchange_open(f->dir, EXCHANGE_SIDECAR, &f->ft, &sc,
				       NULL), 0);
	assert_int_equal(exchange_inbox_version(sc, 0), 1);
	publish_const(sc, 0, 2, 3.0f);
	exchange_poll(ln, params, &st, &res);
	assert_int_equal(res.applied, 1);
	assert_exactly(params[0], 3.0f);
	assert_true(all_equal(params, n));
	exchange_close(sc);
	exchange_close(ln);
	free(params);
}

/* Learner in a child: sets θ to −step everywhere, then polls. The base
 * starts at 0 and moves to θ at each answer, so every answer must be
 * Δ = steps (the steps since the one before) uniformly, whatever the
 * timing. */
static void learner_child(struct fx *f)
{
	struct exchange *ln;
	struct exchange_poll_result res;
	float *params = calloc(262144, sizeof(float));

	if (!params || exchange_open(f->dir, EXCHANGE_LEARNER, &f->ft, &ln, NULL))
		_exit(1);
	while (!exchange_learner_start(ln, params))
		exchange_wait(ln, 0.05);
	for (uint64_t step = 1;; step++) {
		struct exchange_step st = step_of(step, 1);

		for (size_t i = 0; i < 262144; i++)
			params[i] = -(float)step;
		exchange_poll(ln, params, &st, &res);
		if (res.done)
			break;
	}
	exchange_close(ln);
	_exit(0);
}

/* learner_child in a process of its own */
static pid_t fork_learner(struct fx *f)
{
	pid_t pid = fork();

	assert_at_least(pid, 0);
	if (pid == 0)
		learner_child(f);
	return pid;
}

/* A sidecar side with both fragments published (zeros, version 1). */
static struct exchange *published_sidecar(struct fx *f)
{
	struct exchange *sc;

	assert_int_equal(exchange_open(f->dir, EXCHANGE_SIDECAR, &f->ft, &sc,
				       NULL), 0);
	publish_const(sc, 0, 1, 0.0f);
	publish_const(sc, 1, 1, 0.0f);
	return sc;
}

/* A whole answer of the learner_child: every value is its steps (the
 * answer's counters and payload come from the same step). */
static int answer_whole(const struct exchange_answer *a, const float *v,
			size_t n)
{
	return a->steps > 0 && all_equal(v, n) && v[0] == (float)a->steps;
}

static void check_answer(const struct exchange_answer *a, const float *buf,
			 size_t n)
{
	assert_true(answer_whole(a, buf, n));
}

/* Concurrent learner and sidecar in two processes, the learner killed at
 * random moments and restarted: every answer and update read is whole. */
static void concurrent_and_killed(void **state)
{
	struct fx *f = *state;
	struct exchange *sc;
	struct exchange_answer a;
	struct rng rng;
	size_t n = f->ft.frags[0].numel;
	float *buf = malloc(n * sizeof(float));
	uint64_t round = 0, answers = 0;
	int status;

	rng_seed(&rng, 42);
	sc = published_sidecar(f);
	for (int life = 0; life < 4; life++) {
		pid_t pid = fork_learner(f);
		double until;

		until = clock_mono() + 0.15 + 0.2 * rng_uniform(&rng);
		while (clock_mono() < until) {
			for (int p = 0; p < 2; p++) {
				exchange_post_pull(sc, p, ++round);
				if (exchange_take_answer(sc, p, &a, buf)) {
					check_answer(&a, buf, n);
					answers++;
				}
			}
			exchange_wait(sc, 0.001);
		}
		kill(pid, SIGKILL);
		assert_int_equal(waitpid(pid, &status, 0), pid);
		/* whatever the learner was doing, what is published is whole */
		for (int p = 0; p < 2; p++)
			if (exchange_take_answer(sc, p, &a, buf)) {
				check_answer(&a, buf, n);
				answers++;
			}
	}
	assert_greater(answers, 4);

	/* the learner ends cleanly on done */
	{
		pid_t pid = fork_learner(f);

		sleep_seconds(0.05);
		exchange_set_done(sc, 1);
		assert_int_equal(waitpid(pid, &status, 0), pid);
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
	}
	exchange_close(sc);
	free(buf);
}

/* Holds answers while a learner in another process, killed and restarted
 * now and then, keeps answering pulls: a held answer stays whole and
 * unchanged however many pulls come while it is held. (The learner is
 * killed before any assertion.) */
static void held_answers_stay_whole(void **state)
{
	struct fx *f = *state;
	struct exchange *sc;
	struct exchange_answer a;
	size_t n = f->ft.frags[0].numel;
	float *buf = malloc(n * sizeof(float));
	uint64_t round = 0, held = 0, pulls_while_held = 0, bad = 0;
	int status;

	sc = published_sidecar(f);
	for (int life = 0; life < 3; life++) {
		pid_t pid = fork_learner(f);
		double until;

		until = clock_mono() + 0.3;
		while (clock_mono() < until && !bad) {
			struct exchange_hold *h;
			const float *v;
			float first;
			int rc;

			exchange_post_pull(sc, 0, ++round);
			exchange_wait(sc, 0.002);
			rc = exchange_hold_answer(sc, 0, &a, &v, &h);
			if (rc < 0 && exchange_take_answer(sc, 0, &a, buf))
				bad += !answer_whole(&a, buf, n);
			if (rc <= 0 || !h)
				continue;
			bad += !answer_whole(&a, v, n);
			first = v[0];
			/* pulls the learner would answer over this slot */
			for (int k = 0; k < 4; k++) {
				exchange_post_pull(sc, 0, ++round);
				exchange_wait(sc, 0.002);
				if (exchange_take_answer(sc, 0, &a, buf))
					bad += !answer_whole(&a, buf, n);
				pulls_while_held++;
			}
			bad += v[0] != first || !all_equal(v, n);
			exchange_release(h);
			held++;
		}
		kill(pid, SIGKILL);
		assert_int_equal(waitpid(pid, &status, 0), pid);
		assert_int_equal(bad, 0);
	}
	assert_greater(held, 10);
	assert_greater(pulls_while_held, 40);
	exchange_close(sc);
	free(buf);
}

/* Learner in a child applying updates; exits 3 if it ever holds a
 * fragment that is not one whole version, or sees versions go back. */
static void applying_child(struct fx *f)
{
	struct exchange *ln;
	struct exchange_poll_result res;
	size_t n = f->ft.frags[0].numel;
	float *params = calloc(262144, sizeof(float));
	float last[2] = { 0, 0 };

	if (!params || exchange_open(f->dir, EXCHANGE_LEARNER, &f->ft, &ln, NULL))
		_exit(1);
	while (!exchange_learner_start(ln, params))
		exchange_wait(ln, 0.05);
	for (uint64_t step = 1;; step++) {
		struct exchange_step st = step_of(step, 1);

		exchange_poll(ln, params, &st, &res);
		for (int p = 0; p < 2; p++) {
			float *frag = params + (size_t)p * n;

			if (!all_equal(frag, n) || frag[0] < last[p])
				_exit(3);
			last[p] = frag[0];
		}
		if (res.done)
			break;
	}
	exchange_close(ln);
	_exit(0);
}

/* The sidecar publishes as fast as it can while the learner applies; now
 * and then the learner is frozen (SIGSTOP) wherever it is, possibly in
 * the middle of copying a slot, while the sidecar laps it. */
static void concurrent_updates(void **state)
{
	struct fx *f = *state;
	struct exchange *sc;
	struct exchange_counters c;
	struct rng rng;
	uint64_t v = 1;
	int status;
	pid_t pid;
	double until;

	rng_seed(&rng, 7);
	assert_int_equal(exchange_open(f->dir, EXCHANGE_SIDECAR, &f->ft, &sc,
				       NULL), 0);
	exchange_set_give_back(sc, 1);   /* as a large model's */
	publish_const(sc, 0, v, (float)v);
	publish_const(sc, 1, v, (float)v);
	pid = fork();
	assert_at_least(pid, 0);
	if (pid == 0)
		applying_child(f);
	until = clock_mono() + 0.6;
	while (clock_mono() < until) {
		v++;
		for (int p = 0; p < 2; p++)
			publish_const(sc, p, v, (float)v);
		if (rng_uniform(&rng) < 0.3) {
			sleep_seconds(0.0002 * rng_uniform(&rng));
			kill(pid, SIGSTOP);
			for (int k = 0; k < 3; k++, v++)
				for (int p = 0; p < 2; p++)
					publish_const(sc, p, v + 1, (float)(v + 1));
			kill(pid, SIGCONT);
		}
	}
	exchange_set_done(sc, 1);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	exchange_counters(sc, &c);
	assert_greater(c.updates_published, 10);
	assert_greater(c.updates_superseded, 0);
	/* every publication gave back the superseded slot under the reader */
	assert_int_equal(c.slots_released, c.updates_published - 2);
	exchange_close(sc);
}

/* Bytes of the region file's pages in use (tmpfs or disk). */
static long long region_bytes(struct fx *f)
{
	char path[128];
	struct stat st;

	snprintf(path, sizeof(path), "%s/exchange", f->dir);
	assert_int_equal(stat(path, &st), 0);
	return (long long)st.st_blocks * 512;
}

/*
 * Pages given back (docs/exchange.md): the region takes a slot's pages
 * when it is written and gives them back when no one needs them, so a
 * learner's region holds about one inbox slot per fragment. Each side
 * gives back only its own box's slots: the sidecar the superseded inbox
 * slot, the learner an answer the sidecar took (copied, or sent from
 * the region and released; a held one stays).
 */
static void pages_are_given_back(void **state)
{
	struct fx *f = *state;
	struct exchange *ln, *sc;
	struct exchange_poll_result res;
	struct exchange_answer a;
	struct exchange_counters c;
	struct exchange_hold *h;
	const float *v;
	long long slot = (long long)f->ft.frags[0].numel * 4, b;
	size_t n = f->ft.frags[0].numel;
	float *params = calloc(2 * n, sizeof(float));
	float *buf = malloc(n * sizeof(float));

	assert_int_equal(exchange_open(f->dir, EXCHANGE_LEARNER, &f->ft, &ln,
				       NULL), 0);
	assert_int_equal(exchange_open(f->dir, EXCHANGE_SIDECAR, &f->ft, &sc,
				       NULL), 0);
	/* a small model's region keeps its pages */
	assert_int_equal(exchange_gives_back(sc), 0);
	publish_const(sc, 0, 1, 1.0f);
	publish_const(sc, 0, 2, 2.0f);
	b = region_bytes(f);
	publish_const(sc, 0, 3, 3.0f);
	assert_at_least(region_bytes(f), b - 2 * 4096);
	/* as a large model's: version 4 into the other slot, 3's pages go */
	exchange_set_give_back(sc, 1);
	exchange_set_give_back(ln, 1);
	assert_int_equal(exchange_gives_back(sc), 1);
	b = region_bytes(f);
	publish_const(sc, 0, 4, 4.0f);
	assert_true(region_bytes(f) <= b - slot + 2 * 4096);
	publish_const(sc, 1, 4, 4.0f);
	exchange_counters(sc, &c);
	assert_int_equal(c.slots_released, 1);
	assert_int_equal(exchange_learner_start(ln, params), 1);
	assert_int_equal(all_equal(params, 2 * n), 1);
	assert_exactly(params[0], 4.0f);
	/* version 5 written where 3 was and 4's pages gone: the learner
	 * reads 5 (one that had looked at generation 4 retries: its
	 * generation word is cleared) */
	b = region_bytes(f);
	publish_const(sc, 0, 5, 5.0f);
	assert_true(region_bytes(f) <= b + 2 * 4096);
	poll_at(ln, params, 1, &res);
	assert_int_equal(res.applied, 1);
	assert_exactly(params[0], 5.0f);
	assert_exactly(params[n - 1], 5.0f);

	/* an answer copied out: the learner's next poll gives it back */
	for (size_t i = 0; i < n; i++)
		params[i] += 0.5f;
	pull_at(ln, sc, params, 0, 10, 2, &res);
	assert_int_equal(res.served, 1);
	b = region_bytes(f);
	assert_int_equal(exchange_take_answer(sc, 0, &a, buf), 1);
	assert_exactly(buf[0], -0.5f);
	assert_exactly(buf[n - 1], -0.5f);
	poll_at(ln, params, 3, &res);
	assert_true(region_bytes(f) <= b - slot + 2 * 4096);
	exchange_counters(ln, &c);
	assert_int_equal(c.slots_released, 1);

	/* an answer sent from the region: kept while held */
	for (size_t i = 0; i < n; i++)
		params[i] += 0.25f;
	pull_at(ln, sc, params, 0, 11, 4, &res);
	assert_int_equal(res.served, 1);
	b = region_bytes(f);
	assert_int_equal(exchange_hold_answer(sc, 0, &a, &v, &h), 1);
	assert_non_null(h);
	poll_at(ln, params, 5, &res);
	poll_at(ln, params, 6, &res);
	assert_at_least(region_bytes(f), b - 2 * 4096);
	assert_exactly(v[0], -0.25f);
	assert_exactly(v[n - 1], -0.25f);
	exchange_counters(ln, &c);
	assert_int_equal(c.slots_released, 1);
	exchange_release(h);
	poll_at(ln, params, 7, &res);
	assert_true(region_bytes(f) <= b - slot + 2 * 4096);
	exchange_counters(ln, &c);
	assert_int_equal(c.slots_released, 2);
	exchange_close(sc);
	exchange_close(ln);
	free(params);
	free(buf);
}

/*
 * A large model's sidecar gives back applied inbox slots too: the region
 * then holds only updates not yet applied. A learner that restarts finds
 * nothing to start from (and no corruption) until the next updates, as
 * its sidecar's Welcome brings them; a slot being written is kept.
 */
static void applied_updates_leave_the_region(void **state)
{
	struct fx *f = *state;
	struct exchange *ln, *sc;
	struct exchange_counters c;
	struct exchange_poll_result res;
	/* a slot's first and last page, shared with its header or a
	 * neighbour, stay */
	long long slot = (long long)f->ft.frags[0].numel * 4, b;
	size_t n = f->ft.frags[0].numel;
	float *params = calloc(2 * n, sizeof(float)), *d;

	assert_int_equal(exchange_open(f->dir, EXCHANGE_LEARNER, &f->ft, &ln,
				       NULL), 0);
	assert_int_equal(exchange_open(f->dir, EXCHANGE_SIDECAR, &f->ft, &sc,
				       NULL), 0);
	publish_const(sc, 0, 1, 1.0f);
	publish_const(sc, 1, 1, 1.0f);
	/* off for a small model; on, nothing goes before it is applied */
	assert_int_equal(exchange_release_applied(sc), 0);
	exchange_set_give_back(sc, 1);
	exchange_set_give_back(ln, 1);
	assert_int_equal(exchange_release_applied(sc), 0);
	assert_int_equal(exchange_learner_start(ln, params), 1);
	b = region_bytes(f);
	assert_int_equal(exchange_release_applied(sc), 2);
	assert_int_equal(exchange_release_applied(sc), 0);   /* once */
	assert_true(region_bytes(f) <= b - 2 * slot + 4 * 4096);
	assert_exactly(params[0], 1.0f);
	assert_exactly(params[2 * n - 1], 1.0f);
	/* the learner restarts: nothing in the region to start from */
	exchange_close(ln);
	assert_int_equal(exchange_open(f->dir, EXCHANGE_LEARNER, &f->ft, &ln,
				       NULL), 0);
	exchange_set_give_back(ln, 1);
	memset(params, 0, 2 * n * sizeof(float));
	assert_int_equal(exchange_learner_start(ln, params), 0);
	exchange_counters(ln, &c);
	assert_int_equal(c.corrupt_boxes, 0);
	assert_int_equal(c.torn_reads, 0);
	/* the Welcome's updates: it starts from them */
	publish_const(sc, 0, 2, 2.0f);
	assert_int_equal(exchange_learner_start(ln, params), 0);
	publish_const(sc, 1, 2, 2.0f);
	assert_int_equal(exchange_learner_start(ln, params), 1);
	assert_exactly(params[0], 2.0f);
	assert_exactly(params[2 * n - 1], 2.0f);
	b = region_bytes(f);
	assert_int_equal(exchange_release_applied(sc), 2);
	assert_true(region_bytes(f) <= b - 2 * slot + 4 * 4096);
	/* fragment 0's next update half written: its slots stay */
	d = exchange_inbox_begin(sc, 0);
	for (size_t i = 0; i < n; i++)
		d[i] = 3.0f;
	publish_const(sc, 1, 3, 3.0f);
	poll_at(ln, params, 1, &res);
	assert_int_equal(res.applied, 1);
	b = region_bytes(f);
	assert_int_equal(exchange_release_applied(sc), 1);   /* fragment 1 */
	assert_true(region_bytes(f) <= b - slot + 2 * 4096);
	exchange_inbox_commit(sc, 0, 3);
	poll_at(ln, params, 2, &res);
	assert_int_equal(res.applied, 1);
	assert_exactly(params[0], 3.0f);
	assert_exactly(params[n - 1], 3.0f);
	b = region_bytes(f);
	assert_int_equal(exchange_release_applied(sc), 1);   /* fragment 0 */
	assert_true(region_bytes(f) <= b - slot + 2 * 4096);
	exchange_counters(ln, &c);
	assert_int_equal(c.corrupt_boxes, 0);
	exchange_close(sc);
	exchange_close(ln);
	free(params);
}

/* ---- a corrupted region (docs/exchange.md, Trust) ---- */

/* Byte offsets of the region's words (common/exchange.h draws them). */
#define H_MAGIC    0
#define H_LAYOUT   8
#define H_SIZE     16
#define H_FPRINT   24
#define H_DATA_OFF 32
#define H_DONE     40
#define H_ALPHA    48
#define F_NUMEL    0
#define F_IN_GEN   8
#define F_OUT_GEN  40
#define F_OUT_HOLD 48
#define H_HOLD_INC 192
#define S_STEPS    32

/* The region as a third party sees it: mapped by the test itself. */
struct region {
	unsigned char *m;
	size_t size;
};

static void region_map(struct fx *f, struct region *r)
{
	char path[128];
	struct stat st;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", f->dir, EXCHANGE_FILE);
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	r->size = (size_t)st.st_size;
	r->m = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(r->m != MAP_FAILED);
	close(fd);
}

static uint64_t *word(struct region *r, size_t off)
{
	assert_true(off + 8 <= r->size);
	return (uint64_t *)(r->m + off);
}

static uint64_t *frag_word(struct region *r, int p, size_t off)
{
	return word(r, 4096 + 128 * (size_t)p + off);
}

/* Word at off in slot k (0, 1 inbox; 2, 3 outbox) of fragment p. */
static uint64_t *slot_word(struct region *r, struct fx *f, int p, int k,
			   size_t off)
{
	size_t at = *word(r, H_DATA_OFF);

	for (int q = 0; q < p; q++)
		at += 4 * ((64 + f->ft.frags[q].numel * 4 + 63) & ~(size_t)63);
	at += (size_t)k * ((64 + f->ft.frags[p].numel * 4 + 63) & ~(size_t)63);
	return word(r, at + off);
}

/* start_pair, then the region mapped as a third party sees it. */
static void start_mapped(struct fx *f, struct exchange **ln,
			 struct exchange **sc, float *params, struct region *r)
{
	start_pair(f, ln, sc, params, 1.0f);
	region_map(f, r);
}

static void finish_mapped(struct exchange *ln, struct exchange *sc,
			  struct region *r)
{
	munmap(r->m, r->size);
	exchange_close(sc);
	exchange_close(ln);
}

/* The sidecar refuses the answer of fragment p as corrupt, and has now
 * counted n corrupt boxes. */
static void answer_is_refused(struct exchange *sc, int p, float *buf,
			      uint64_t n)
{
	struct exchange_answer a;
	struct exchange_counters c;

	assert_int_equal(exchange_take_answer(sc, p, &a, buf), 0);
	exchange_counters(sc, &c);
	assert_int_equal(c.corrupt_boxes, n);
}

/* x has counted n corrupt header words; its last error holds msg (when
 * msg is not NULL). */
static void corrupt_headers_are(struct exchange *x, uint64_t n,
				const char *msg)
{
	struct exchange_counters c;

	exchange_counters(x, &c);
	assert_int_equal(c.corrupt_headers, n);
	if (msg)
		assert_non_null(strstr(exchange_last_error(x), msg));
}

/*
 * Every length in a copy is the process's own: a region that claims 2^40
 * values in a box is copied with the table's 6 and 7 (a copy of the
 * region's numel would run off the 8-float buffer: ASan under make check,
 * a crash without it), and the learner rewrites the words and counts them.
 */
static void box_lengths_come_from_the_table(void **state)
{
	struct fx *f = *state;
	struct exchange *ln, *sc;
	struct exchange_poll_result res;
	struct exchange_answer a;
	struct region r;
	float params[SMALL_N], buf[8];

	start_mapped(f, &ln, &sc, params, &r);
	for (int i = 5; i < 11; i++)
		params[i] = 2.0f;
	pull_at(ln, sc, params, 0, 5, 1, &res);
	assert_int_equal(res.served, 1);
	assert_int_equal(res.repaired, 0);
	*frag_word(&r, 0, F_NUMEL) = (uint64_t)1 << 40;
	*frag_word(&r, 1, F_NUMEL) = (uint64_t)1 << 40;
	buf[6] = buf[7] = 42.0f;
	assert_int_equal(exchange_take_answer(sc, 0, &a, buf), 1);
	for (int i = 0; i < 6; i++)
		assert_exactly(buf[i], -1.0f);
	assert_exactly(buf[6], 42.0f);   /* nothing past the 6 values */
	/* the learner's next poll finds both words and rewrites them */
	publish_const(sc, 1, 2, 5.0f);
	poll_at(ln, params, 2, &res);
	assert_int_equal(res.repaired, 2);
	assert_int_equal(res.applied, 1);
	assert_exactly(params[0], 5.0f);
	assert_exactly(params[12], 5.0f);
	assert_int_equal(*frag_word(&r, 0, F_NUMEL), 6);
	assert_int_equal(*frag_word(&r, 1, F_NUMEL), 7);
	corrupt_headers_are(ln, 2,
			    "number of values of fragment 1 is 1099511627776");
	finish_mapped(ln, sc, &r);
}

/*
 * Every constant of the header overwritten while both sides are attached,
 * and a done flag of 7: each is found, counted and rewritten; 7 does not
 * end the job, and the pair goes on answering and applying.
 */
static void corrupted_header_is_repaired(void **state)
{
	struct fx *f = *state;
	struct exchange *ln, *sc;
	struct exchange_poll_result res;
	struct exchange_answer a;
	struct region r;
	uint64_t good[5];
	const size_t off[5] = { H_MAGIC, H_LAYOUT, H_SIZE, H_FPRINT,
				H_DATA_OFF };
	float params[SMALL_N], buf[8];

	start_mapped(f, &ln, &sc, params, &r);
	for (int i = 0; i < 5; i++) {
		good[i] = *word(&r, off[i]);
		*word(&r, off[i]) = 0xdeadbeefdeadbeefULL;
	}
	*word(&r, H_DONE) = 7;
	assert_int_equal(exchange_is_done(ln), 0);
	pull_at(ln, sc, params, 1, 3, 1, &res);
	assert_int_equal(res.repaired, 6);
	assert_int_equal(res.done, 0);
	assert_int_equal(res.served, 1);
	for (int i = 0; i < 5; i++)
		assert_int_equal(*word(&r, off[i]), good[i]);
	assert_int_equal(*word(&r, H_DONE), 0);
	corrupt_headers_are(ln, 6, "done flag is 7");
	/* repaired: nothing more is found, and the conversation goes on */
	assert_int_equal(exchange_check(ln), 0);
	assert_int_equal(exchange_check(sc), 0);
	assert_int_equal(exchange_take_answer(sc, 1, &a, buf), 1);
	assert_int_equal(a.round, 3);
	publish_const(sc, 0, 2, 4.0f);
	poll_at(ln, params, 2, &res);
	assert_int_equal(res.applied, 1);
	assert_int_equal(res.repaired, 0);
	assert_exactly(params[5], 4.0f);
	exchange_set_done(sc, 1);
	assert_int_equal(exchange_is_done(ln), 1);
	finish_mapped(ln, sc, &r);
}

/*
 * The generation words: an outbox generation no slot holds, one that goes
 * back, an answer whose steps exceed the learner's step, an inbox
 * generation no slot holds, an α out of range. Each is passed over and
 * counted; the writer's next check rewrites its own word and the next
 * answer or update goes through.
 */
static void corrupted_boxes_are_ignored(void **state)
{
	struct fx *f = *state;
	struct exchange *ln, *sc;
	struct exchange_poll_result res;
	struct exchange_answer a;
	struct exchange_counters c;
	struct region r;
	float params[SMALL_N], buf[8];
	double nan_alpha = 2.0;
	uint64_t bits;

	start_mapped(f, &ln, &sc, params, &r);
	pull_at(ln, sc, params, 0, 5, 1, &res);
	/* outbox generation 1 published; make it one no slot holds */
	*frag_word(&r, 0, F_OUT_GEN) = 12345;
	assert_int_equal(exchange_answer_ready(sc, 0), 1);
	answer_is_refused(sc, 0, buf, 1);
	assert_non_null(strstr(exchange_last_error(sc),
			       "outbox of fragment 0 has generation 12345"));
	/* the learner's own word: rewritten at its next poll */
	poll_at(ln, params, 2, &res);
	assert_int_equal(res.repaired, 1);
	assert_int_equal(*frag_word(&r, 0, F_OUT_GEN), 1);
	assert_int_equal(exchange_take_answer(sc, 0, &a, buf), 1);
	assert_int_equal(a.round, 5);

	/* an answer with more steps since its base than the learner made */
	pull_at(ln, sc, params, 0, 6, 3, &res);
	*slot_word(&r, f, 0, 2, S_STEPS) = 1000;   /* gen 2: outbox[0] */
	answer_is_refused(sc, 0, buf, 2);
	assert_non_null(strstr(exchange_last_error(sc), "steps 1000 at step 3"));
	pull_at(ln, sc, params, 0, 7, 4, &res);
	assert_int_equal(exchange_take_answer(sc, 0, &a, buf), 1);
	assert_int_equal(a.round, 7);
	assert_int_equal(a.steps, 1);

	/* an outbox generation that goes back (the slot agrees with it) */
	pull_at(ln, sc, params, 0, 8, 5, &res);   /* gen 4 in outbox[0] */
	*frag_word(&r, 0, F_OUT_GEN) = 2;
	*slot_word(&r, f, 0, 2, 8) = 2;           /* its gen word */
	answer_is_refused(sc, 0, buf, 3);

	/* an inbox generation no slot holds: the learner keeps its θ */
	params[5] = 9.0f;
	*frag_word(&r, 0, F_IN_GEN) = 777;
	poll_at(ln, params, 6, &res);
	assert_int_equal(res.applied, 0);
	assert_exactly(params[5], 9.0f);
	exchange_counters(ln, &c);
	assert_int_equal(c.corrupt_boxes, 1);
	/* the sidecar's own word: its check rewrites it; an update then
	 * goes through */
	assert_int_equal(exchange_check(sc), 1);
	assert_int_equal(*frag_word(&r, 0, F_IN_GEN), 1);
	publish_const(sc, 0, 3, 6.0f);
	poll_at(ln, params, 7, &res);
	assert_int_equal(res.applied, 1);
	assert_exactly(params[5], 6.0f);

	/* α = 2: counted once by the learner, which mixes with 0 meanwhile;
	 * the sidecar puts its own α back */
	memcpy(&bits, &nan_alpha, sizeof(bits));
	*word(&r, H_ALPHA) = bits;
	publish_const(sc, 0, 4, 8.0f);
	poll_at(ln, params, 7, &res);
	assert_int_equal(res.repaired, 1);
	assert_exactly(params[5], 8.0f);
	poll_at(ln, params, 7, &res);
	assert_int_equal(res.repaired, 0);
	assert_int_equal(exchange_check(sc), 1);
	assert_int_equal(*word(&r, H_ALPHA), 0);
	corrupt_headers_are(ln, 3, NULL);   /* out_gen twice, α */
	finish_mapped(ln, sc, &r);
}

/*
 * A side that attaches to a region whose magic and table are garbage (but
 * made for this size) repairs it in place and goes on; one made for
 * another model is still refused.
 */
static void attach_repairs_a_corrupted_header(void **state)
{
	struct fx *f = *state;
	struct exchange *ln, *sc;
	struct region r;
	float params[SMALL_N];

	start_pair(f, &ln, &sc, params, 1.0f);
	exchange_close(ln);
	region_map(f, &r);
	*word(&r, H_MAGIC) = 0;
	*frag_word(&r, 1, F_NUMEL) = 3;
	assert_int_equal(exchange_open(f->dir, EXCHANGE_LEARNER, &f->ft, &ln,
				       NULL), 0);
	corrupt_headers_are(ln, 2, "number of values of fragment 1 is 3");
	assert_int_equal(*frag_word(&r, 1, F_NUMEL), 7);
	assert_int_equal(exchange_learner_start(ln, params), 1);
	assert_exactly(params[0], 1.0f);
	finish_mapped(ln, sc, &r);
}

/*
 * A hold is only for a learner that keeps off held slots: one of an
 * older build leaves the header's hold incarnation unset (0 here) and
 * its answers are taken as copies. A sidecar that attaches again
 * (restarted) holds nothing: the slots its predecessor held are free.
 */
static void holds_need_a_learner_that_keeps_off(void **state)
{
	struct fx *f = *state;
	struct exchange *ln, *sc, *sc2;
	struct exchange_poll_result res;
	struct exchange_answer a;
	struct exchange_hold *h;
	struct region r;
	const float *v;
	float params[SMALL_N];

	start_mapped(f, &ln, &sc, params, &r);
	pull_at(ln, sc, params, 0, 10, 1, &res);
	*word(&r, H_HOLD_INC) = 0;
	assert_int_equal(exchange_hold_answer(sc, 0, &a, &v, &h), -1);
	/* the learner's next check rewrites its word */
	pull_at(ln, sc, params, 1, 11, 2, &res);
	assert_int_equal(exchange_hold_answer(sc, 0, &a, &v, &h), 1);
	assert_int_equal(a.round, 10);
	assert_int_equal(*frag_word(&r, 0, F_OUT_HOLD + 8), 1);
	/* a sidecar attaching again clears the hold of the one before */
	assert_int_equal(exchange_open(f->dir, EXCHANGE_SIDECAR, &f->ft, &sc2,
				       NULL), 0);
	assert_int_equal(*frag_word(&r, 0, F_OUT_HOLD + 8), 0);
	exchange_close(sc2);
	exchange_release(h);
	finish_mapped(ln, sc, &r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(conversation, setup_small, teardown),
		cmocka_unit_test_setup_teardown(a_held_slot_is_kept, setup_small,
						teardown),
		cmocka_unit_test_setup_teardown(holds_need_a_learner_that_keeps_off,
						setup_small, teardown),
		cmocka_unit_test_setup_teardown(an_answer_moves_the_base, setup_small,
						teardown),
		cmocka_unit_test_setup_teardown(mixing_reports_the_alpha_share,
						setup_small, teardown),
		cmocka_unit_test_setup_teardown(a_kept_share_keeps_its_version,
						setup_small, teardown),
		cmocka_unit_test_setup_teardown(wrong_model_is_refused, setup_small,
						teardown),
		cmocka_unit_test_setup_teardown(long_folder_is_refused, setup_small,
						teardown),
		cmocka_unit_test_setup_teardown(restart_reattaches, setup_small,
						teardown),
		cmocka_unit_test_setup_teardown(sidecar_killed_mid_copy, setup_big,
						teardown),
		cmocka_unit_test_setup_teardown(concurrent_and_killed, setup_big,
						teardown),
		cmocka_unit_test_setup_teardown(held_answers_stay_whole, setup_big,
						teardown),
		cmocka_unit_test_setup_teardown(pages_are_given_back, setup_big,
						teardown),
		cmocka_unit_test_setup_teardown(applied_updates_leave_the_region,
						setup_big, teardown),
		cmocka_unit_test_setup_teardown(concurrent_updates, setup_big,
						teardown),
		cmocka_unit_test_setup_teardown(box_lengths_come_from_the_table,
						setup_small, teardown),
		cmocka_unit_test_setup_teardown(corrupted_header_is_repaired,
						setup_small, teardown),
		cmocka_unit_test_setup_teardown(corrupted_boxes_are_ignored,
						setup_small, teardown),
		cmocka_unit_test_setup_teardown(attach_repairs_a_corrupted_header,
						setup_small, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
