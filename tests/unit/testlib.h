/*
 * testlib: small pieces several unit tests share — a temporary folder and
 * its removal with everything in it, the tiny job the trainer tests
 * train, and comparisons that print both numbers when they fail (cmocka's
 * assert_true prints only the expression; its assert_float_equal works in
 * float and prints six decimals), and a wait for a condition under a
 * deadline. Header only (static inline), so every
 * test binary takes what it uses and the Makefile's one-source-per-test
 * rule stays as it is. Include it after <cmocka.h>.
 */
#ifndef DDILOCO_TESTLIB_H
#define DDILOCO_TESTLIB_H

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/jobspec.h"
#include "common/util.h"

/* Makes a new folder /tmp/NAME-XXXXXX and writes its path into dir[len].
 * 0, or -1 when the path does not fit or mkdtemp fails. */
static inline int testlib_tmpdir(char *dir, size_t len, const char *name)
{
	int n = snprintf(dir, len, "/tmp/%s-XXXXXX", name);

	if (n < 0 || (size_t)n >= len)
		return -1;
	return mkdtemp(dir) ? 0 : -1;
}

static inline int testlib_remove_one(const char *path, const struct stat *st,
				     int type, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	return type == FTW_DP || type == FTW_DNR ? rmdir(path) : unlink(path);
}

/* Removes dir and everything under it, without following symbolic links.
 * 0, or -1 when something could not be removed. */
static inline int testlib_rmtree(const char *dir)
{
	return nftw(dir, testlib_remove_one, 16, FTW_DEPTH | FTW_PHYS) ? -1 : 0;
}

/*
 * The smallest job a trainer runs: one layer, two heads, 16 channels,
 * context 8, batches of 2, two fragments, trained on the text at data.
 * Tests change the fields they care about afterwards.
 */
static inline void testlib_tiny_job(struct job_spec *js, const char *data)
{
	jobspec_defaults(js);
	js->model.layers = 1;
	js->model.heads = 2;
	js->model.channels = 16;
	js->model.context = 8;
	js->optimizer.batch_size = 2;
	js->syncer.fragments = 2;
	snprintf(js->data.path, sizeof(js->data.path), "%s", data);
}

/*
 * Value asserts on doubles (integers convert exactly up to 2^53). Each
 * operand is evaluated once; a failure prints the expressions and values:
 *   assert_near(a, b, eps)     |a − b| < eps
 *   assert_exactly(a, b)       a == b
 *   assert_less(a, b)          a < b       assert_at_most(a, b)   a <= b
 *   assert_greater(a, b)       a > b       assert_at_least(a, b)  a >= b
 *   assert_between(x, lo, hi)  lo <= x <= hi
 */
enum testlib_op { TESTLIB_LT, TESTLIB_LE, TESTLIB_GT, TESTLIB_GE, TESTLIB_EQ };

static inline void testlib_compare(double a, enum testlib_op op, double b,
				   const char *sa, const char *sb,
				   const char *file, int line)
{
	static const char *const name[] = { "<", "<=", ">", ">=", "==" };
	int ok = op == TESTLIB_LT ? a < b : op == TESTLIB_LE ? a <= b :
		 op == TESTLIB_GT ? a > b : op == TESTLIB_GE ? a >= b : a == b;

	if (!ok) {
		print_error("%s %s %s is false: %.17g %s %.17g\n", sa, name[op],
			    sb, a, name[op], b);
		_fail(file, line);
	}
}

static inline void testlib_near(double a, double b, double eps,
				const char *sa, const char *sb,
				const char *file, int line)
{
	if (!(fabs(a - b) < eps)) {
		print_error("%s = %.17g and %s = %.17g differ by %.3g, not less "
			    "than %.3g\n", sa, a, sb, b, fabs(a - b), eps);
		_fail(file, line);
	}
}

static inline void testlib_between(double x, double lo, double hi,
				   const char *sx, const char *file, int line)
{
	if (!(lo <= x && x <= hi)) {
		print_error("%s = %.17g is not in [%.17g, %.17g]\n", sx, x, lo,
			    hi);
		_fail(file, line);
	}
}

#define TESTLIB_CMP(a, op, b) \
	testlib_compare((double)(a), op, (double)(b), #a, #b, __FILE__, __LINE__)
#define assert_less(a, b)       TESTLIB_CMP(a, TESTLIB_LT, b)
#define assert_at_most(a, b)    TESTLIB_CMP(a, TESTLIB_LE, b)
#define assert_greater(a, b)    TESTLIB_CMP(a, TESTLIB_GT, b)
#define assert_at_least(a, b)   TESTLIB_CMP(a, TESTLIB_GE, b)
#define assert_exactly(a, b)    TESTLIB_CMP(a, TESTLIB_EQ, b)
#define assert_near(a, b, eps) \
	testlib_near((double)(a), (double)(b), (double)(eps), #a, #b, \
		     __FILE__, __LINE__)
#define assert_between(x, lo, hi) \
	testlib_between((double)(x), (double)(lo), (double)(hi), #x, \
			__FILE__, __LINE__)

/*
 * Waiting for a condition, never for a duration: a test that sleeps and
 * then asserts on state fails on a loaded machine and is slow on an idle
 * one.
 *   assert_eventually(cond, seconds)
 *       evaluates cond every 10 ms until it holds; fails, printing cond,
 *       when `seconds` pass first
 * A check that something does NOT happen has no condition to wait for:
 * wait for a later event the unwanted one would come before, or state
 * the window it is bounded by where the check is made.
 */
static inline void testlib_timed_out(const char *cond, double seconds,
				     const char *file, int line)
{
	print_error("%s is still false after %.3g s\n", cond, seconds);
	_fail(file, line);
}

#define assert_eventually(cond, seconds) \
	do { \
		double testlib_until_ = clock_mono() + (seconds); \
		while (!(cond)) { \
			if (clock_mono() > testlib_until_) \
				testlib_timed_out(#cond, (double)(seconds), \
						  __FILE__, __LINE__); \
			sleep_seconds(0.01); \
		} \
	} while (0)

#endif
