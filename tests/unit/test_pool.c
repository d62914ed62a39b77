/* The trainer's thread pool: every item once, fixed contiguous chunks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "trainer/pool.h"

struct count {
	int hits[1000];
	size_t lo[8], hi[8];
	int calls[8];
};

static void mark(void *a, size_t lo, size_t hi, int chunk)
{
	struct count *c = a;

	for (size_t i = lo; i < hi; i++)
		c->hits[i]++;
	c->lo[chunk] = lo;
	c->hi[chunk] = hi;
	c->calls[chunk]++;
}

static void every_item_once(void **state)
{
	static struct count c;
	struct pool *p = pool_new(3);

	(void)state;
	assert_non_null(p);
	assert_int_equal(pool_threads(p), 3);
	for (int round = 0; round < 200; round++) {
		memset(&c, 0, sizeof(c));
		pool_run(p, mark, &c, 1000);
		for (int i = 0; i < 1000; i++)
			assert_int_equal(c.hits[i], 1);
	}
	/* chunk k of n over t: [k·n/t, (k+1)·n/t) */
	assert_int_equal(c.lo[1], 333);
	assert_int_equal(c.hi[1], 666);
	assert_int_equal(c.hi[2], 1000);
	/* fewer items than threads: empty chunks are not called */
	memset(&c, 0, sizeof(c));
	pool_run(p, mark, &c, 2);
	assert_int_equal(c.hits[0] + c.hits[1], 2);
	assert_int_equal(c.calls[0] + c.calls[1] + c.calls[2], 2);
	pool_run(p, mark, &c, 0);
	pool_free(p);
}

static void null_pool_runs_inline(void **state)
{
	static struct count c;

	(void)state;
	memset(&c, 0, sizeof(c));
	pool_run(NULL, mark, &c, 10);
	assert_int_equal(c.calls[0], 1);
	assert_int_equal(c.hi[0], 10);
	assert_int_equal(pool_threads(NULL), 1);
	pool_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_item_once),
		cmocka_unit_test(null_pool_runs_inline),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
