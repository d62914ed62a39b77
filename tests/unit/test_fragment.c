/* Balanced tensor fragmentation: assignment, balance, round trips. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "common/fragment.h"
#include "tests/unit/testlib.h"

static void packs_largest_first_into_smallest(void **state)
{
	/* sizes 10, 7, 5, 4, 2 into 2 bins: 10->0, 7->1, 5->1 (12), 4->0 (14), 2->1 (14) */
	struct frag_tensor t[5] = {
		{ 0, 10, 1 }, { 10, 7, 0 }, { 17, 5, 0 }, { 22, 4, 0 }, { 26, 2, 0 },
	};
	struct frag_table ft;

	(void)state;
	assert_int_equal(frag_table_init(&ft, t, 5, 2, NULL), 0);
	assert_int_equal(ft.frags[0].numel, 14);
	assert_int_equal(ft.frags[1].numel, 14);
	assert_int_equal(ft.frags[0].ntensors, 2);
	assert_int_equal(ft.frags[0].tensors[0], 0);
	assert_int_equal(ft.frags[0].tensors[1], 3);
	assert_int_equal(ft.frags[1].tensors[0], 1);
	assert_int_equal(ft.frags[1].tensors[1], 2);
	assert_int_equal(ft.frags[1].tensors[2], 4);
	assert_exactly(frag_table_imbalance(&ft), 1.0);
	frag_table_release(&ft);
}

static void gather_scatter_round_trip(void **state)
{
	struct frag_tensor t[3] = { { 0, 3, 0 }, { 3, 5, 0 }, { 8, 2, 0 } };
	float params[10], back[10], buf[10];
	struct frag_table ft;

	(void)state;
	for (int i = 0; i < 10; i++)
		params[i] = (float)i;
	assert_int_equal(frag_table_init(&ft, t, 3, 2, NULL), 0);
	/* tensor 1 (5) alone; tensors 0 and 2 together, in model order */
	assert_int_equal(ft.frags[0].numel, 5);
	assert_int_equal(ft.frags[1].numel, 5);
	frag_gather(&ft, 1, params, buf);
	assert_exactly(buf[0], 0);
	assert_exactly(buf[2], 2);
	assert_exactly(buf[3], 8);
	assert_exactly(buf[4], 9);
	memset(back, 0, sizeof(back));
	for (int p = 0; p < 2; p++) {
		frag_gather(&ft, p, params, buf);
		frag_scatter(&ft, p, buf, back);
	}
	assert_memory_equal(params, back, sizeof(params));
	frag_table_release(&ft);
}

static void fingerprint_tracks_shapes(void **state)
{
	struct frag_tensor a[3] = { { 0, 3, 0 }, { 3, 5, 0 }, { 8, 2, 0 } };
	struct frag_tensor b[3] = { { 0, 3, 0 }, { 3, 5, 0 }, { 8, 3, 0 } };
	struct frag_table fa, fb, fc;
	struct err e;

	(void)state;
	assert_int_equal(frag_table_init(&fa, a, 3, 2, NULL), 0);
	assert_int_equal(frag_table_init(&fb, b, 3, 2, NULL), 0);
	assert_int_equal(frag_table_init(&fc, a, 3, 3, NULL), 0);
	assert_int_not_equal(fa.fingerprint, fb.fingerprint);
	assert_int_not_equal(fa.fingerprint, fc.fingerprint);
	frag_table_release(&fa);
	frag_table_release(&fb);
	frag_table_release(&fc);
	assert_int_equal(frag_table_init(&fa, a, 3, 4, &e), -1);
	assert_string_equal(e.msg, "fragment: 4 fragments for only 3 tensors");
}

/* An adopted table (docs/syncer.md, Model-agnostic jobs): one tensor per
 * fragment, in order, with the learners' fingerprint. */
static void table_from_sizes(void **state)
{
	const uint64_t sizes[3] = { 7, 5, 9 };
	const uint64_t bad[2] = { 4, 0 };
	struct frag_table ft;
	struct err e = { "" };

	(void)state;
	assert_int_equal(frag_table_from_sizes(&ft, sizes, 3, 0xabcdULL, &e), 0);
	assert_int_equal(ft.nfrags, 3);
	assert_int_equal(ft.ntensors, 3);
	assert_true(ft.fingerprint == 0xabcdULL);
	for (int p = 0; p < 3; p++) {
		assert_int_equal(ft.frags[p].ntensors, 1);
		assert_int_equal(ft.frags[p].tensors[0], p);
		assert_int_equal(ft.frags[p].numel, sizes[p]);
		assert_int_equal(ft.tensors[p].is_embedding, 0);
	}
	assert_int_equal(ft.tensors[0].offset, 0);
	assert_int_equal(ft.tensors[1].offset, 7);
	assert_int_equal(ft.tensors[2].offset, 12);
	frag_table_release(&ft);
	assert_int_equal(frag_table_from_sizes(&ft, bad, 2, 1, &e), -1);
	assert_string_equal(e.msg, "fragment: fragment 1 has no values");
	assert_int_equal(frag_table_from_sizes(&ft, sizes, 0, 1, &e), -1);
	assert_string_equal(e.msg, "fragment: fragments must be at least 1, not 0");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(packs_largest_first_into_smallest),
		cmocka_unit_test(gather_scatter_round_trip),
		cmocka_unit_test(fingerprint_tracks_shapes),
		cmocka_unit_test(table_from_sizes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
