/*
 * What the syncer keeps on its volume (syncer/persist.h), on a real
 * folder: a save and its load, a write that fails and the state /status
 * shows until one succeeds again, the high-water mark written ahead by
 * its thread and read back, and the last good checkpoint marked
 * only for a loss within PERSIST_GOOD_MARGIN of the best.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#include "common/buf.h"
#include "common/util.h"
#include "syncer/persist.h"
#include "tests/unit/slowdisk.h"
#include "tests/unit/testlib.h"

#define FP 0x1234abcd5678ef00ull
#define NP 6

/* The live state a checkpoint is written from: 2 fragments of 3. */
static const size_t off[3] = { 0, 3, NP };
static float theta[NP], mom[NP];

static void start(struct persist *ps, const char *dir)
{
	struct err e;

	assert_int_equal(persist_init(ps, dir, FP, 2, 1, off, theta, mom, &e),
			 0);
}

/* A checkpoint of 2 fragments, NP parameters, 1 learner at `rounds`;
 * the live Θ is v + i. */
static void make(struct syncer_ckpt *c, uint64_t rounds, float v)
{
	struct err e;

	assert_int_equal(syncer_ckpt_init(c, 2, NP, 1, &e), 0);
	c->fingerprint = FP;
	c->rounds_completed = rounds;
	c->rounds_started = rounds + 1;
	c->versions[0] = rounds;
	c->versions[1] = rounds + 7;
	for (int i = 0; i < NP; i++)
		theta[i] = c->theta[i] = v + (float)i;
}

static void a_save_loads_and_a_failure_is_kept(void **state)
{
	struct syncer_ckpt c, got;
	struct persist ps;
	char dir[256], bad[300];
	struct err e;
	json_t *o;

	(void)state;
	assert_int_equal(testlib_tmpdir(dir, sizeof(dir), "persist"), 0);
	start(&ps, dir);
	assert_int_equal(persist_load(&ps, &got, &e), 0);   /* none */
	make(&c, 5, 1.5f);
	assert_int_equal(persist_save(&ps, &c, 1, &e), 0);
	assert_int_equal(ps.w.out.have_ok, 1);
	assert_int_equal(ps.w.out.last_ok_round, 5);

	/* a folder under a file: the write fails, the state says so */
	snprintf(bad, sizeof(bad), "%s/file", dir);
	assert_int_equal(file_write_atomic(bad, "x", 1, &e), 0);
	snprintf(bad, sizeof(bad), "%s/file/deeper", dir);
	ps.w.dir = bad;   /* the writer is idle: it reads dir when busy */
	c.rounds_completed = 6;
	assert_int_not_equal(persist_save(&ps, &c, 1, &e), 0);
	assert_int_equal(ps.w.out.failing, 1);
	assert_int_equal(ps.w.out.failures, 1);
	assert_int_equal(ps.w.out.last_ok_round, 5);
	o = persist_json(&ps);
	assert_true(json_is_true(json_object_get(o, "failing")));
	assert_int_equal(json_integer_value(json_object_get(o, "last_ok_round")), 5);
	json_decref(o);
	ps.w.dir = dir;
	assert_int_equal(persist_save(&ps, &c, 1, &e), 0);
	assert_int_equal(ps.w.out.failing, 0);
	assert_int_equal(ps.w.out.failures, 1);
	persist_release(&ps);

	/* a new process loads the newest */
	start(&ps, dir);
	assert_int_equal(persist_load(&ps, &got, &e), 1);
	assert_string_equal(ps.resumed_from, "checkpoint");
	assert_int_equal(got.rounds_completed, 6);
	assert_int_equal(got.versions[1], 12);
	assert_near(got.theta[5], 6.5, 1e-6);
	persist_release(&ps);
	syncer_ckpt_release(&got);
	syncer_ckpt_release(&c);
	assert_int_equal(testlib_rmtree(dir), 0);
}

/* persist_mark until the mark on disk covers `round` (its writer is a
 * thread of its own); returns what it covers */
static uint64_t mark_until(struct persist *ps, uint64_t next,
			   const uint64_t *v, uint64_t round)
{
	assert_eventually(persist_mark(ps, next, v, 2, 1.0) >= round, 10);
	return persist_mark(ps, next, v, 2, 1.0);
}

static void the_mark_is_written_ahead_and_read_back(void **state)
{
	uint64_t v[2] = { 3, 9 }, got[2] = { 0, 0 }, started = 0;
	struct markw_outcome o;
	struct persist ps;
	char dir[256];

	(void)state;
	assert_int_equal(testlib_tmpdir(dir, sizeof(dir), "persist"), 0);
	start(&ps, dir);
	assert_int_equal(persist_read_hwm(&ps, &started, got), 0);
	/* round 1 asks for a mark of PERSIST_HWM_ROUNDS rounds */
	assert_int_equal(mark_until(&ps, 1, v, 1), PERSIST_HWM_ROUNDS);
	v[0] = 100;   /* not asked again while more than half is left */
	assert_int_equal(persist_mark(&ps, PERSIST_HWM_ROUNDS / 2, v, 2, 1.0),
			 PERSIST_HWM_ROUNDS);
	markw_outcome(&ps.mw, &o);
	assert_int_equal(o.written, 1);
	assert_int_equal(o.wanted, PERSIST_HWM_ROUNDS);
	persist_release(&ps);

	start(&ps, dir);
	assert_int_equal(persist_read_hwm(&ps, &started, got), 1);
	assert_int_equal(started, PERSIST_HWM_ROUNDS);
	/* the versions then, plus the rounds the mark covers and τ + 1 */
	assert_int_equal(got[0], 3 + PERSIST_HWM_ROUNDS + 2 + 1);
	assert_int_equal(got[1], 9 + PERSIST_HWM_ROUNDS + 2 + 1);
	/* a new process covers nothing past the old mark until it writes
	 * its own: the next round past it asks for it */
	assert_int_equal(markw_covered(&ps.mw), PERSIST_HWM_ROUNDS);
	assert_int_equal(mark_until(&ps, PERSIST_HWM_ROUNDS + 1, v,
				    PERSIST_HWM_ROUNDS + 1),
			 2 * PERSIST_HWM_ROUNDS);
	/* half of it left: the next is asked for ahead */
	assert_int_equal(mark_until(&ps, PERSIST_HWM_ROUNDS * 3 / 2 + 1, v,
				    2 * PERSIST_HWM_ROUNDS + 1),
			 PERSIST_HWM_ROUNDS * 5 / 2);
	persist_release(&ps);
	assert_int_equal(testlib_rmtree(dir), 0);
}

/* The mark spans PERSIST_MARK_SECONDS of rounds at the pace they start
 * (at least PERSIST_HWM_ROUNDS, at most PERSIST_MARK_MAX), and is asked
 * again only when half of that is left. */
static void the_mark_spans_seconds_of_rounds(void **state)
{
	uint64_t v[2] = { 0, 0 }, started = 0;
	struct persist ps;
	char dir[256];

	(void)state;
	assert_int_equal(testlib_tmpdir(dir, sizeof(dir), "persist"), 0);
	start(&ps, dir);
	assert_int_equal(persist_read_hwm(&ps, &started, v), 0);
	assert_eventually(persist_mark(&ps, 1, v, 2, 10.0) == 16, 10);
	/* 8 rounds in 0.1 s: 80 a second, 320 in 4 s */
	assert_eventually(persist_mark(&ps, 9, v, 2, 10.1) == 8 + 320, 10);
	assert_int_equal(markw_wanted(&ps.mw), 328);
	/* more than half of it left: nothing asked */
	assert_int_equal(persist_mark(&ps, 160, v, 2, 10.2), 328);
	assert_int_equal(markw_wanted(&ps.mw), 328);
	/* a pace past the cap: PERSIST_MARK_MAX rounds */
	assert_eventually(persist_mark(&ps, 200, v, 2, 10.1001) ==
			  199 + PERSIST_MARK_MAX, 10);
	/* a slow one: PERSIST_HWM_ROUNDS at least */
	persist_mark(&ps, 199 + PERSIST_MARK_MAX, v, 2, 1e7);
	assert_int_equal(ps.mark_span, PERSIST_HWM_ROUNDS);
	persist_release(&ps);
	assert_int_equal(testlib_rmtree(dir), 0);
}

static void only_a_good_loss_marks_the_last_good_one(void **state)
{
	struct ckpt_eval evals[2] = { { .round = 1, .loss = 2.0 },
				      { .round = 2, .loss = 3.0 } };
	struct syncer_ckpt c;
	struct persist ps;
	struct buf b;
	char dir[256];
	struct err e;

	(void)state;
	assert_int_equal(testlib_tmpdir(dir, sizeof(dir), "persist"), 0);
	start(&ps, dir);
	for (uint64_t r = 3; r <= 4; r++) {
		make(&c, r, 0);
		assert_int_equal(persist_save(&ps, &c, 1, &e), 0);
		syncer_ckpt_release(&c);
	}
	/* best 2.0: 2.2 is within 10 %, 2.21 is not, NaN never is */
	persist_eval(&ps, 3, 2.21, evals, 2);
	assert_int_equal(ps.good_have, 0);
	persist_eval(&ps, 3, NAN, evals, 2);
	assert_int_equal(ps.good_have, 0);
	persist_eval(&ps, 4, 2.2, evals, 2);
	assert_int_equal(ps.good_have, 1);
	assert_int_equal(ps.good_round, 4);
	buf_init(&b, 1 << 16);
	persist_metrics(&ps, &b);
	assert_non_null(strstr(b.data, "\nddiloco_syncer_checkpoint_failing 0\n"));
	buf_release(&b);
	persist_release(&ps);
	assert_int_equal(testlib_rmtree(dir), 0);
}

/*
 * A write blocked on a slow disk: the save returns at once, the next one
 * is not taken (counted), /status says a write is under way, and a
 * fragment changed meanwhile is written as it was when the checkpoint
 * was handed over (the copy set aside), the one not changed as well.
 */
static void a_slow_write_stalls_nothing_and_keeps_the_moment(void **state)
{
	struct slowdisk g = SLOWDISK_INIT;
	struct syncer_ckpt c, got;
	struct ckptw_outcome o;
	struct persist ps;
	char dir[256];
	struct err e;
	json_t *j;

	(void)state;
	assert_int_equal(testlib_tmpdir(dir, sizeof(dir), "persist"), 0);
	start(&ps, dir);
	ps.w.write = slowdisk_write;
	ps.w.write_ctx = &g;
	make(&c, 9, 1.0f);
	memset(mom, 0, sizeof(mom));
	assert_int_equal(persist_save(&ps, &c, 0, &e), 1);
	assert_true(slowdisk_wait(&g, 1, NULL));   /* the header: nothing taken */
	ckptw_outcome(&ps.w, &o);
	assert_int_equal(o.writing, 1);
	assert_int_equal(o.writing_round, 9);
	j = persist_json(&ps);
	assert_true(json_is_true(json_object_get(j, "writing")));
	json_decref(j);
	/* the run loop goes on: fragment 1 changes, a save is not taken */
	persist_touch(&ps, 1);
	for (int i = 3; i < NP; i++)
		theta[i] = mom[i] = -100.0f;
	c.rounds_completed = 10;
	assert_int_equal(persist_save(&ps, &c, 0, &e), 0);
	ckptw_outcome(&ps.w, &o);
	assert_int_equal(o.skipped, 1);
	assert_int_equal(o.written, 0);

	slowdisk_open(&g);
	persist_release(&ps);        /* waits for the write under way */
	assert_int_equal(ps.w.out.written, 1);
	assert_int_equal(ps.w.out.last_ok_round, 9);

	start(&ps, dir);
	assert_int_equal(persist_load(&ps, &got, &e), 1);
	assert_int_equal(got.rounds_completed, 9);
	for (int i = 0; i < NP; i++) {
		assert_near(got.theta[i], 1.0 + i, 1e-6);
		assert_near(got.momentum[i], 0.0, 1e-6);
	}
	persist_release(&ps);
	syncer_ckpt_release(&got);
	syncer_ckpt_release(&c);
	assert_int_equal(testlib_rmtree(dir), 0);
}

/*
 * A volume too small at the last look is asked again, no more often
 * than every PERSIST_ROOM_EVERY seconds, and fits once it has the room
 * (here: a model of 2^50 values on a real folder, then the test's own).
 */
static void the_room_is_asked_again_until_it_fits(void **state)
{
	struct persist ps;
	char dir[256];

	(void)state;
	assert_int_equal(testlib_tmpdir(dir, sizeof(dir), "persist"), 0);
	start(&ps, dir);
	assert_int_equal(ps.fits, 1);
	assert_int_equal(persist_room_again(&ps, 1.0), 0);   /* fits: not asked */
	ps.nparams = 1ull << 50;
	ps.fits = 0;
	assert_int_equal(persist_room_again(&ps, 10.0), 0);
	assert_int_equal(ps.fits, 0);
	assert_true(ps.needed_bytes > (uint64_t)ps.free_bytes);
	assert_true(ps.needed_bytes >= PERSIST_FILES * 8 * (1ull << 50));
	ps.nparams = NP;
	assert_int_equal(persist_room_again(&ps, 10.0 + PERSIST_ROOM_EVERY - 0.1), 0);
	assert_int_equal(ps.fits, 0);                         /* too soon */
	assert_int_equal(persist_room_again(&ps, 10.0 + PERSIST_ROOM_EVERY), 1);
	assert_int_equal(ps.fits, 1);
	assert_true(ps.needed_bytes < (uint64_t)ps.free_bytes);
	persist_release(&ps);
	assert_int_equal(testlib_rmtree(dir), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(a_save_loads_and_a_failure_is_kept),
		cmocka_unit_test(the_mark_spans_seconds_of_rounds),
		cmocka_unit_test(the_mark_is_written_ahead_and_read_back),
		cmocka_unit_test(only_a_good_loss_marks_the_last_good_one),
		cmocka_unit_test(a_slow_write_stalls_nothing_and_keeps_the_moment),
		cmocka_unit_test(the_room_is_asked_again_until_it_fits),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
