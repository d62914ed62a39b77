/* buf: growth, the NUL, and the sticky error that tells "too large" from
 * "out of memory". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"

/* Under AddressSanitizer an impossible allocation must return NULL, as
 * malloc does, instead of stopping the test. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "allocator_may_return_null=1";
}

static void grows_and_stays_terminated(void **state)
{
	struct buf b;
	char big[1000];

	(void)state;
	buf_init(&b, 1 << 20);
	assert_null(b.data);
	assert_int_equal(buf_append(&b, "", 0), 0);
	assert_non_null(b.data);
	assert_string_equal(b.data, "");
	assert_int_equal(buf_printf(&b, "%d-%s", 42, "x"), 0);
	memset(big, 'a', sizeof(big));
	assert_int_equal(buf_append(&b, big, sizeof(big)), 0);
	assert_int_equal(b.len, 4 + sizeof(big));
	assert_memory_equal(b.data, "42-x", 4);
	assert_int_equal(b.data[b.len - 1], 'a');
	assert_int_equal(b.data[b.len], '\0');
	assert_int_equal(buf_error(&b), BUF_OK);
	buf_release(&b);
	assert_null(b.data);
	assert_int_equal(b.len, 0);
}

static void too_large_is_sticky(void **state)
{
	struct buf b;

	(void)state;
	buf_init(&b, 8);
	assert_int_equal(buf_append(&b, "12345", 5), 0);
	assert_int_equal(buf_append(&b, "6789", 4), -1);      /* 9 > 8 */
	assert_int_equal(buf_error(&b), BUF_TOO_LARGE);
	assert_int_equal(b.len, 5);
	assert_string_equal(b.data, "12345");
	/* later appends that would fit do nothing: the text has no hole */
	assert_int_equal(buf_append(&b, "6", 1), -1);
	assert_int_equal(buf_printf(&b, "%d", 7), -1);
	assert_string_equal(b.data, "12345");
	assert_int_equal(buf_error(&b), BUF_TOO_LARGE);
	/* exactly the maximum fits */
	buf_reset(&b);
	assert_int_equal(buf_error(&b), BUF_OK);
	assert_int_equal(buf_printf(&b, "%s", "12345678"), 0);
	assert_int_equal(b.len, 8);
	assert_int_equal(buf_printf(&b, "%s", "9"), -1);
	assert_int_equal(buf_error(&b), BUF_TOO_LARGE);
	assert_string_equal(b.data, "12345678");
	buf_release(&b);
	assert_int_equal(buf_error(&b), BUF_OK);
}

static void out_of_memory_is_told_apart(void **state)
{
	struct buf b;

	(void)state;
	buf_init(&b, SIZE_MAX);
	assert_int_equal(buf_append(&b, "x", 1), 0);
	/* within the maximum, but no allocator gives half the address space;
	 * the source is never read when the room cannot be made */
	assert_int_equal(buf_append(&b, "", SIZE_MAX / 2), -1);
	assert_int_equal(buf_error(&b), BUF_NOMEM);
	assert_int_equal(b.len, 1);
	assert_string_equal(b.data, "x");
	assert_int_equal(buf_append(&b, "y", 1), -1);
	assert_int_equal(buf_error(&b), BUF_NOMEM);
	/* the first failure is the one kept */
	b.max = 4;
	assert_int_equal(buf_append(&b, "12345", 5), -1);
	assert_int_equal(buf_error(&b), BUF_NOMEM);
	buf_reset(&b);
	assert_int_equal(buf_append(&b, "12345", 5), -1);
	assert_int_equal(buf_error(&b), BUF_TOO_LARGE);
	assert_string_not_equal(buf_strerror(BUF_TOO_LARGE), buf_strerror(BUF_NOMEM));
	assert_string_equal(buf_strerror(BUF_NOMEM), "out of memory");
	assert_string_equal(buf_strerror(BUF_TOO_LARGE), "larger than the limit");
	buf_release(&b);
}

static void no_room_for_the_nul(void **state)
{
	struct buf b;

	(void)state;
	buf_init(&b, SIZE_MAX);
	assert_int_equal(buf_append(&b, "x", 1), 0);
	assert_int_equal(buf_append(&b, "", SIZE_MAX - 1), -1);
	assert_int_equal(buf_error(&b), BUF_NOMEM);
	assert_int_equal(b.len, 1);
	buf_release(&b);
}

static void detach_hands_over(void **state)
{
	struct buf b;
	size_t n = 0;
	char *d;

	(void)state;
	buf_init(&b, 64);
	assert_int_equal(buf_printf(&b, "abc"), 0);
	d = buf_detach(&b, &n);
	assert_int_equal(n, 3);
	assert_string_equal(d, "abc");
	assert_null(b.data);
	assert_int_equal(b.len, 0);
	assert_int_equal(b.max, 64);
	free(d);
	buf_release(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(grows_and_stays_terminated),
		cmocka_unit_test(too_large_is_sticky),
		cmocka_unit_test(out_of_memory_is_told_apart),
		cmocka_unit_test(no_room_for_the_nul),
		cmocka_unit_test(detach_hands_over),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
