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
		{ .offset = 0, .numel = 10, .is_embedding = 1 },
		{ .offset = 10, .numel = 7, .is_embedding = 0 },
		{ .offset = 17, .numel = 5, .is_embedding = 0 },
		{ .offset = 22, .numel = 4, .is_embedding = 0 },
		{ .offset = 26, .numel = 2, .is_embedding = 0 },
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
	struct frag_tensor t[3] = { { .offset = 0, .numel = 3, .is_embedding = 0 }, { .offset = 3, .numel = 5, .is_embedding = 0 }, { .offset = 8, .numel = 2, .is_embedding = 0 } };
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
	struct frag_tensor a[3] = { { .offset = 0, .numel = 3, .is_embedding = 0 }, { .offset = 3, .numel = 5, .is_embedding = 0 }, { .offset = 8, .numel = 2, .is_embedding = 0 } };
	struct frag_tensor b[3] = { { .offset = 0, .numel = 3, .is_embedding = 0 }, { .offset = 3, .numel = 5, .is_embedding = 0 }, { .offset = 8, .numel = 3, .is_embedding = 0 } };
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
	/* tensors of one row each cannot be cut */
	for (int i = 0; i < 3; i++)
		a[i].row = a[i].numel;
	assert_int_equal(frag_table_init(&fa, a, 3, 4, &e), -1);
	assert_string_equal(e.msg, "fragment: 4 fragments for only 3 tensors");
}

/* Each value of [0, total) in exactly one piece, each piece within its
 * tensor and at a row boundary, fragments' sizes the sum of theirs. */
static void assert_covers(const struct frag_table *ft,
			  const struct frag_tensor *t, size_t total)
{
	size_t at = 0, sum = 0;

	for (int k = 0; k < ft->ntensors; k++) {
		const struct frag_tensor *pc = &ft->tensors[k];
		const struct frag_tensor *of = &t[pc->tensor];
		size_t row = of->row ? of->row : 1;

		/* pieces are in model order, so in offset order here */
		assert_int_equal(pc->offset, at);
		assert_int_equal(pc->offset, of->offset + pc->row0 * row);
		assert_int_equal(pc->numel % row, 0);
		assert_true(pc->offset + pc->numel <= of->offset + of->numel);
		at += pc->numel;
	}
	assert_int_equal(at, total);
	for (int p = 0; p < ft->nfrags; p++) {
		size_t n = 0;

		for (int k = 0; k < ft->frags[p].ntensors; k++) {
			int i = ft->frags[p].tensors[k];

			assert_int_equal(ft->owner[i], p);
			if (k)
				assert_true(i > ft->frags[p].tensors[k - 1]);
			n += ft->tensors[i].numel;
		}
		assert_int_equal(ft->frags[p].numel, n);
		sum += n;
	}
	assert_int_equal(sum, total);
}

/*
 * Four 4096 × 4096 tensors into 8 fragments: each tensor is
 * cut at row 2048, a half per fragment, in order; into 4 fragments they
 * need no cut and keep the table (and fingerprint) of before the cut.
 */
static void big_tensors_cut_at_rows(void **state)
{
	const size_t N = 4096 * 4096;
	struct frag_tensor t[4];
	struct frag_table ft, whole;

	(void)state;
	for (int i = 0; i < 4; i++)
		t[i] = (struct frag_tensor){ .offset = (size_t)i * N, .numel = N,
					     .row = 4096 };
	assert_int_equal(frag_table_init(&ft, t, 4, 8, NULL), 0);
	assert_int_equal(ft.nmodel, 4);
	assert_int_equal(ft.ncut, 4);
	assert_int_equal(ft.ntensors, 8);
	assert_exactly(frag_table_imbalance(&ft), 1.0);
	for (int p = 0; p < 8; p++) {
		const struct frag_tensor *pc = &ft.tensors[ft.frags[p].tensors[0]];

		assert_int_equal(ft.frags[p].numel, N / 2);
		assert_int_equal(ft.frags[p].ntensors, 1);
		assert_int_equal(pc->tensor, p / 2);
		assert_int_equal(pc->row0, (size_t)(p % 2) * 2048);
		assert_int_equal(pc->numel, 2048 * 4096);
	}
	assert_covers(&ft, t, 4 * N);
	assert_int_equal(frag_table_init(&whole, t, 4, 4, NULL), 0);
	assert_int_equal(whole.ncut, 0);
	assert_int_equal(whole.ntensors, 4);
	/* what the table had before tensors were cut (git show of
	 * fragment.c before the cut, the same tensors) */
	assert_true(whole.fingerprint == 0x0c68ed6885aa3f6dULL);
	assert_true(ft.fingerprint != whole.fingerprint);
	frag_table_release(&ft);
	frag_table_release(&whole);
}

/* A table that needs no cut is the one of before, fingerprint too. */
static void uncut_fingerprint_unchanged(void **state)
{
	struct frag_tensor t[5] = {
		{ .offset = 0, .numel = 10, .is_embedding = 1 },
		{ .offset = 10, .numel = 7, .is_embedding = 0 },
		{ .offset = 17, .numel = 5, .is_embedding = 0 },
		{ .offset = 22, .numel = 4, .is_embedding = 0 },
		{ .offset = 26, .numel = 2, .is_embedding = 0 },
	};
	struct frag_table ft;

	(void)state;
	assert_int_equal(frag_table_init(&ft, t, 5, 2, NULL), 0);
	assert_int_equal(ft.ncut, 0);
	assert_true(ft.fingerprint == 0x6580b21f04c73ca9ULL);
	frag_table_release(&ft);
}

/*
 * One large tensor beside small ones: the small ones are packed whole,
 * the large one's rows fill the fragments up to one level; round trips
 * through gather and scatter; another row size cuts elsewhere and is
 * another model.
 */
static void mixed_cut_balanced(void **state)
{
	/* 60 rows of 10 values, then 40, 30, 20 whole */
	struct frag_tensor t[4] = {
		{ .offset = 0, .numel = 600, .row = 10 },
		{ .offset = 600, .numel = 40, .row = 8 },
		{ .offset = 640, .numel = 30 },
		{ .offset = 670, .numel = 20, .is_embedding = 1 },
	};
	float params[690], back[690], buf[690];
	struct frag_table ft, other;

	(void)state;
	assert_int_equal(frag_table_init(&ft, t, 4, 4, NULL), 0);
	assert_int_equal(ft.ncut, 1);
	assert_covers(&ft, t, 690);
	/* packed whole: 40, 30, 20, 0; level 173 puts the boundaries in
	 * tensor 0 at values 133, 276, 429: rows 13, 28, 43 (nearest) */
	assert_int_equal(ft.frags[0].numel, 40 + 130);
	assert_int_equal(ft.frags[1].numel, 30 + 150);
	assert_int_equal(ft.frags[2].numel, 20 + 150);
	assert_int_equal(ft.frags[3].numel, 170);
	assert_true(frag_table_imbalance(&ft) < 1.1);
	/* the embedding flag goes with the piece */
	assert_true(ft.tensors[ft.ntensors - 1].is_embedding);
	for (int i = 0; i < 690; i++)
		params[i] = (float)i;
	memset(back, 0, sizeof(back));
	for (int p = 0; p < 4; p++) {
		frag_gather(&ft, p, params, buf);
		frag_scatter(&ft, p, buf, back);
	}
	assert_memory_equal(params, back, sizeof(params));
	/* fragment 0: tensor 0's rows 0-12, then tensor 1 whole */
	frag_gather(&ft, 0, params, buf);
	assert_exactly(buf[129], 129);
	assert_exactly(buf[130], 600);
	t[0].row = 15;   /* cut elsewhere: another model */
	assert_int_equal(frag_table_init(&other, t, 4, 4, NULL), 0);
	assert_covers(&other, t, 690);
	assert_true(other.fingerprint != ft.fingerprint);
	frag_table_release(&other);
	frag_table_release(&ft);
}

/* Bad tables: rows that do not divide a tensor, too few rows, sizes
 * that overflow. */
static void cut_refusals(void **state)
{
	struct frag_tensor t[2] = { { .offset = 0, .numel = 7 },
				    { .offset = 7, .numel = 10, .row = 4 } };
	struct frag_table ft;
	struct err e;

	(void)state;
	assert_int_equal(frag_table_init(&ft, t, 2, 2, &e), -1);
	assert_string_equal(e.msg, "fragment: tensor 1 has 10 values, not "
			    "rows of 4");
	/* 7 values of one value a row: 7 pieces at most, not 8 */
	assert_int_equal(frag_table_init(&ft, t, 1, 8, &e), -1);
	assert_string_equal(e.msg, "fragment: 8 fragments for only 1 tensors "
			    "(1 of them cut at rows): fragment 7 would be empty");
	assert_int_equal(frag_table_init(&ft, t, 1, 7, &e), 0);
	assert_exactly(frag_table_imbalance(&ft), 1.0);
	frag_table_release(&ft);
	t[0].numel = SIZE_MAX / 2;
	t[1] = (struct frag_tensor){ .numel = SIZE_MAX / 2 };
	assert_int_equal(frag_table_init(&ft, t, 2, 2, &e), -1);
	assert_string_equal(e.msg, "fragment: the tensors' sizes overflow");
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
	/* sizes from a Hello whose sum (or its bytes) would overflow */
	{
		const uint64_t huge[2] = { UINT64_MAX / 4, UINT64_MAX / 4 };

		assert_int_equal(frag_table_from_sizes(&ft, huge, 2, 1, &e), -1);
		assert_non_null(strstr(e.msg, "fragment sizes overflow"));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(packs_largest_first_into_smallest),
		cmocka_unit_test(gather_scatter_round_trip),
		cmocka_unit_test(fingerprint_tracks_shapes),
		cmocka_unit_test(table_from_sizes),
		cmocka_unit_test(big_tensors_cut_at_rows),
		cmocka_unit_test(uncut_fingerprint_unchanged),
		cmocka_unit_test(mixed_cut_balanced),
		cmocka_unit_test(cut_refusals),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
