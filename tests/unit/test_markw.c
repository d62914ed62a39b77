/*
 * The high-water mark's writer thread (syncer/markw.h), its disk a test
 * double: a mark asked for never waits for the disk, a slow write covers
 * nothing until it is done, a failing one is kept (error, failures) and
 * tried again until the disk takes it, the newest mark asked for is the
 * one written, and a real write reads back.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <string.h>

#include "common/util.h"
#include "syncer/markw.h"
#include "tests/unit/testlib.h"

#define FP 0x0badc0de12345678ull

/* the disk: closed (writes wait), failing (writes fail), what it took */
static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int closed, failing, calls;
	uint64_t rounds, v0;
} disk = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0,
	   0, 0 };

static int disk_write(const char *dir, uint64_t fp, const struct syncer_hwm *h,
		      struct err *e)
{
	int rc = 0;

	(void)dir;
	assert_int_equal(fp, FP);
	pthread_mutex_lock(&disk.mu);
	disk.calls++;
	pthread_cond_broadcast(&disk.cv);
	while (disk.closed)
		pthread_cond_wait(&disk.cv, &disk.mu);
	if (disk.failing)
		rc = err_set(e, "cannot write high-water mark: Input/output "
			     "error");
	else {
		disk.rounds = h->rounds;
		disk.v0 = h->versions[0];
	}
	pthread_mutex_unlock(&disk.mu);
	return rc;
}

static void disk_set(int closed, int failing)
{
	pthread_mutex_lock(&disk.mu);
	disk.closed = closed;
	disk.failing = failing;
	pthread_cond_broadcast(&disk.cv);
	pthread_mutex_unlock(&disk.mu);
}

static int disk_calls(void)
{
	int n;

	pthread_mutex_lock(&disk.mu);
	n = disk.calls;
	pthread_mutex_unlock(&disk.mu);
	return n;
}

static void start(struct markw *w, uint64_t covered)
{
	struct err e;

	disk_set(0, 0);
	disk.calls = 0;
	assert_int_equal(markw_start(w, "/nonexistent", FP, 2, covered, &e), 0);
	w->write = disk_write;
}

static void a_slow_disk_holds_the_mark_not_the_caller(void **state)
{
	uint64_t v[2] = { 5, 6 };
	struct markw_outcome o;
	struct markw w;
	double t0;

	(void)state;
	start(&w, 16);
	assert_int_equal(markw_covered(&w), 16);
	disk_set(1, 0);
	t0 = clock_mono();
	markw_want(&w, 32, v, 10);
	assert_true(clock_mono() - t0 < 1.0);
	assert_eventually(disk_calls() == 1, 10);
	/* the write under way covers nothing yet */
	markw_outcome(&w, &o);
	assert_int_equal(o.writing, 1);
	assert_int_equal(o.covered, 16);
	assert_int_equal(o.wanted, 32);
	/* a newer mark asked meanwhile replaces the one not yet taken */
	v[0] = 7;
	markw_want(&w, 48, v, 10);
	markw_want(&w, 40, v, 10);   /* older than the one asked: ignored */
	assert_int_equal(markw_wanted(&w), 48);
	disk_set(0, 0);
	assert_eventually(markw_covered(&w) == 48, 10);
	assert_int_equal(disk.rounds, 48);
	assert_int_equal(disk.v0, 17);
	markw_outcome(&w, &o);
	assert_int_equal(o.written, 2);
	assert_int_equal(o.failures, 0);
	assert_int_equal(o.writing, 0);
	markw_stop(&w);
}

static void a_failing_disk_is_kept_and_tried_again(void **state)
{
	uint64_t v[2] = { 1, 2 };
	struct markw_outcome o;
	struct markw w;

	(void)state;
	start(&w, 0);
	disk_set(0, 1);
	markw_want(&w, 16, v, 0);
	assert_eventually(disk_calls() >= 2, 10);   /* tried again */
	markw_outcome(&w, &o);
	assert_int_equal(o.failing, 1);
	assert_true(o.failures >= 1);
	assert_string_equal(o.error, "cannot write high-water mark: "
			    "Input/output error");
	assert_int_equal(o.covered, 0);
	disk_set(0, 0);
	assert_eventually(markw_covered(&w) == 16, 10);
	markw_outcome(&w, &o);
	assert_int_equal(o.failing, 0);
	assert_int_equal(o.written, 1);
	markw_stop(&w);
}

static void a_real_mark_reads_back(void **state)
{
	uint64_t v[2] = { 3, 4 }, got[2];
	struct syncer_hwm h = { .versions = got };
	struct markw w;
	char dir[256];
	struct err e;

	(void)state;
	assert_int_equal(testlib_tmpdir(dir, sizeof(dir), "markw"), 0);
	assert_int_equal(markw_start(&w, dir, FP, 2, 0, &e), 0);
	markw_want(&w, 16, v, 19);
	assert_eventually(markw_covered(&w) == 16, 10);
	markw_stop(&w);
	assert_int_equal(syncer_hwm_read(dir, FP, 2, &h, &e), 1);
	assert_int_equal(h.rounds, 16);
	assert_int_equal(got[0], 22);
	assert_int_equal(got[1], 23);
	assert_int_equal(testlib_rmtree(dir), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(a_slow_disk_holds_the_mark_not_the_caller),
		cmocka_unit_test(a_failing_disk_is_kept_and_tried_again),
		cmocka_unit_test(a_real_mark_reads_back),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
