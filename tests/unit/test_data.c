/*
 * Data loading: text and llm.c token shards, folders, the train/validation
 * split, learner shares, and the exact errors for bad files.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "trainer/data.h"
#include "tests/unit/testlib.h"

static char dir[64];

static void path_of(char *out, size_t cap, const char *name)
{
	snprintf(out, cap, "%s/%s", dir, name);
}

static void write_file(const char *name, const void *buf, size_t n)
{
	char p[256];

	path_of(p, sizeof(p), name);
	assert_int_equal(file_write_atomic(p, buf, n, NULL), 0);
}

static void write_shard(const char *name, size_t n, uint16_t mod)
{
	uint16_t *tok = malloc(n * sizeof(uint16_t));
	char p[256];

	for (size_t i = 0; i < n; i++)
		tok[i] = (uint16_t)(i % mod);
	path_of(p, sizeof(p), name);
	assert_int_equal(data_write_shard(p, tok, n, NULL), 0);
	free(tok);
}

static int setup(void **state)
{
	(void)state;
	return testlib_tmpdir(dir, sizeof(dir), "ddiloco-test-data");
}

static int teardown(void **state)
{
	(void)state;
	return testlib_rmtree(dir);
}

static void text_file_is_bytes(void **state)
{
	struct dataset d;
	char p[256];

	(void)state;
	write_file("hello.txt", "hi\xff", 3);
	path_of(p, sizeof(p), "hello.txt");
	assert_int_equal(dataset_load(&d, p, DATA_AUTO, 256, NULL), 0);
	assert_int_equal(d.n, 3);
	assert_int_equal(d.format, DATA_TEXT);
	assert_int_equal(d.tok[0], 'h');
	assert_int_equal(d.tok[2], 255);
	dataset_release(&d);
}

static void folder_in_name_order(void **state)
{
	struct dataset d;
	struct err e;
	char p[256], link[256];

	(void)state;
	path_of(p, sizeof(p), "corpus");
	assert_int_equal(mkdir_p(p, NULL), 0);
	write_file("corpus/b", "BB", 2);
	write_file("corpus/a", "A", 1);
	write_file("corpus/a.dat", "XXXX", 4);     /* skipped: .dat */
	write_file("corpus/.hidden", "YYYY", 4);   /* skipped: hidden */
	path_of(link, sizeof(link), "corpus/a.u8");
	assert_int_equal(symlink("a", link), 0);   /* skipped: symbolic link */
	assert_int_equal(dataset_load(&d, p, DATA_AUTO, 256, NULL), 0);
	assert_int_equal(d.n, 3);
	assert_int_equal(d.tok[0], 'A');
	assert_int_equal(d.tok[1], 'B');
	dataset_release(&d);

	path_of(p, sizeof(p), "empty");
	assert_int_equal(mkdir_p(p, NULL), 0);
	assert_int_equal(dataset_load(&d, p, DATA_AUTO, 256, &e), -1);
	assert_non_null(strstr(e.msg, "data: no data files in folder '"));
}

/*
 * spec.data.split files: a tree of 60 files (nested folders read too),
 * each marked by its first byte, split by the hash of its path below the
 * folder: every file on exactly one side, validation the files
 * data_file_in_val names, the same files for a copy elsewhere, and the
 * syncer's validation stream the learners'.
 */
/* Files i = 0..59 begin with the byte ' ' + i, their marker: counts each
 * marker in tok[0..n) into seen[i]. */
static void count_markers(int *seen, const uint16_t *tok, size_t n)
{
	for (size_t k = 0; k < n; k++)
		if (tok[k] >= ' ' && tok[k] < ' ' + 60)
			seen[tok[k] - ' ']++;
}

static void split_by_files(void **state)
{
	struct job_data jd = { .val_fraction = 0.25, .split = SPLIT_FILES };
	size_t want_val = 0, want_train = 0;
	int seen[60] = { 0 };
	struct data d, v, c;
	struct err e;
	char name[64];

	(void)state;
	for (int root = 0; root < 2; root++)
		for (int i = 0; i < 60; i++) {
			char buf[40];
			size_t n = 1 + (size_t)i % 7;

			memset(buf, 'a' + i % 26, n);  /* past the markers */
			buf[0] = (char)(' ' + i);    /* which file: its first byte */
			snprintf(name, sizeof(name), "%s/%c/f%02d", root ? "copy" : "tree",
				 'a' + i % 3, i);
			path_of(jd.path, sizeof(jd.path), name);
			*strrchr(jd.path, '/') = '\0';
			assert_int_equal(mkdir_p(jd.path, NULL), 0);
			write_file(name, buf, n);
			if (root)
				continue;
			snprintf(name, sizeof(name), "%c/f%02d", 'a' + i % 3, i);
			if (data_file_in_val(name, 0.25))
				want_val += n;
			else
				want_train += n;
		}
	assert_true(want_val > 0 && want_train > 0);
	path_of(jd.path, sizeof(jd.path), "tree");
	assert_int_equal(data_open(&d, &jd, 256, 0, 1, &e), 0);
	assert_int_equal(d.ntrain, want_train);
	assert_int_equal(d.nval, want_val);
	count_markers(seen, d.train, d.ntrain);
	count_markers(seen, d.val, d.nval);
	for (int i = 0; i < 60; i++)
		assert_int_equal(seen[i], 1);   /* every file, on one side */
	assert_int_equal(data_open_val(&v, &jd, 256, &e), 0);
	assert_int_equal(v.nval, d.nval);
	assert_memory_equal(v.val, d.val, d.nval * sizeof(*d.val));
	path_of(jd.path, sizeof(jd.path), "copy/");   /* elsewhere, a '/' more */
	assert_int_equal(data_open(&c, &jd, 256, 0, 1, &e), 0);
	assert_int_equal(c.nval, d.nval);
	assert_memory_equal(c.val, d.val, d.nval * sizeof(*d.val));
	data_close(&c);
	data_close(&v);
	data_close(&d);
	/* a file cannot be split by files; a split with no file on a side */
	path_of(jd.path, sizeof(jd.path), "tree/a/f00");
	assert_int_equal(data_open(&d, &jd, 256, 0, 1, &e), -1);
	assert_non_null(strstr(e.msg, "spec.data.split files needs a folder"));
	path_of(jd.path, sizeof(jd.path), "tree");
	jd.val_fraction = 1e-9;
	assert_int_equal(data_open(&d, &jd, 256, 0, 1, &e), -1);
	assert_non_null(strstr(e.msg, "in the validation split (spec.data.split files"));
}

/*
 * spec.data.tuneFraction: the tuning split is held out too, apart from
 * validation: the first share of the tail, or of valPath; with a split
 * by files, files of their own, dealt folder by folder (tuning_deals_
 * folders). Nothing is on two sides; validation is what is left.
 */
static void tuning_split(void **state)
{
	struct job_data jd = { .val_fraction = 0.25, .tune_fraction = 0.4 };
	struct data d, view;

	(void)state;
	write_shard("tn.bin", 100, 1000);   /* tokens 0..99 */
	path_of(jd.path, sizeof(jd.path), "tn.bin");
	assert_int_equal(data_open(&d, &jd, 1000, 0, 1, NULL), 0);
	assert_int_equal(d.ntrain, 75);
	assert_int_equal(d.ntune, 10);      /* 0.4 of the 25 held out */
	assert_int_equal(d.tune[0], 75);
	assert_int_equal(d.nval, 15);
	assert_int_equal(d.val[0], 85);
	data_tune_view(&d, &view);
	assert_int_equal(data_val_rows(&view, 4), 2);   /* (10 − 1)/4 */
	assert_ptr_equal(view.val, d.tune);
	data_close(&d);
	path_of(jd.val_path, sizeof(jd.val_path), "tn.bin");   /* valPath */
	assert_int_equal(data_open_val(&d, &jd, 1000, NULL), 0);
	assert_int_equal(d.ntune, 40);
	assert_int_equal(d.nval, 60);
	assert_int_equal(d.val[0], 40);
	data_close(&d);
}

/*
 * With a split by files, the held-out files are dealt between tuning and
 * validation folder by folder: in each folder the tuning side holds its
 * share (tuneFraction) of the held-out bytes within one file, so the two
 * sides read the same mix even when one folder's files are much larger.
 * Training is still every file hashing at or above valFraction.
 */
static void tuning_deals_folders(void **state)
{
	struct job_data jd = { .split = SPLIT_FILES, .val_fraction = 0.5,
			       .tune_fraction = 0.5 };
	size_t size[80], want_train = 0, held[2] = { 0 }, tuned[2] = { 0 };
	int side[80] = { 0 };       /* bit 0 train, 1 validation, 2 tuning */
	struct data d;
	char name[64];

	(void)state;
	path_of(jd.path, sizeof(jd.path), "td/a");
	assert_int_equal(mkdir_p(jd.path, NULL), 0);
	path_of(jd.path, sizeof(jd.path), "td/b");
	assert_int_equal(mkdir_p(jd.path, NULL), 0);
	for (int i = 0; i < 80; i++) {
		char buf[200];

		size[i] = i < 40 ? 8 : 40 + 4 * (size_t)(i - 40);   /* b: 40..196 */
		memset(buf, ' ' + i, sizeof(buf));
		snprintf(name, sizeof(name), "td/%c/f%02d", i < 40 ? 'a' : 'b', i);
		write_file(name, buf, size[i]);
		if (data_file_hash(name + 3) >= 0.5)
			want_train += size[i];
	}
	path_of(jd.path, sizeof(jd.path), "td");
	assert_int_equal(data_open(&d, &jd, 256, 0, 1, NULL), 0);
	assert_int_equal(d.ntrain, want_train);
	for (int s = 0; s < 3; s++) {
		const uint16_t *t = s == 0 ? d.train : s == 1 ? d.val : d.tune;
		size_t n = s == 0 ? d.ntrain : s == 1 ? d.nval : d.ntune;

		for (size_t k = 0; k < n; k++)
			side[t[k] - ' '] |= 1 << s;
	}
	for (int i = 0; i < 80; i++) {
		assert_true(side[i] == 1 || side[i] == 2 || side[i] == 4);
		if (side[i] != 1) {
			held[i >= 40] += size[i];
			tuned[i >= 40] += side[i] == 4 ? size[i] : 0;
		}
	}
	for (int f = 0; f < 2; f++) {
		double off = (double)tuned[f] - 0.5 * (double)held[f];

		assert_true(held[f] > 0);
		assert_true(fabs(off) <= (f ? 196 : 8));   /* within one file */
	}
	data_close(&d);
}

/* An evaluation's rows spread over the split, not its first ones. */
static void validation_rows_are_spread(void **state)
{
	(void)state;
	assert_int_equal(data_val_pick(0, 4, 100), 0);
	assert_int_equal(data_val_pick(1, 4, 100), 25);
	assert_int_equal(data_val_pick(3, 4, 100), 75);
	assert_int_equal(data_val_pick(2, 3, 10), 6);
	for (size_t i = 0; i < 10; i++)
		assert_int_equal(data_val_pick(i, 10, 10), i);   /* all of them */
	assert_int_equal(data_val_pick(5, 8, 4), 3);          /* past: the last */
}

static void shard_round_trip(void **state)
{
	struct dataset d;
	char p[256];

	(void)state;
	write_shard("s.bin", 1000, 50000);
	path_of(p, sizeof(p), "s.bin");
	assert_int_equal(dataset_load(&d, p, DATA_AUTO, 50257, NULL), 0);
	assert_int_equal(d.format, DATA_TOKENS);
	assert_int_equal(d.n, 1000);
	for (int i = 0; i < 1000; i++)
		assert_int_equal(d.tok[i], i);
	dataset_release(&d);
	/* forced text reads the same file as bytes */
	assert_int_equal(dataset_load(&d, p, DATA_TEXT, 256, NULL), 0);
	assert_int_equal(d.n, 1024 + 2000);
	dataset_release(&d);
}

static void expect_error(const char *name, enum data_format fmt, int vocab,
			 const char *what)
{
	struct dataset d;
	struct err e;
	char p[256], want[512];

	path_of(p, sizeof(p), name);
	assert_int_equal(dataset_load(&d, p, fmt, vocab, &e), -1);
	snprintf(want, sizeof(want), "data: '%s': %s", p, what);
	assert_string_equal(e.msg, want);
	assert_null(d.tok);
}

static void bad_shards_are_refused(void **state)
{
	void *buf;
	size_t len;
	char p[256];
	int32_t *h;

	(void)state;
	write_shard("t.bin", 100, 256);
	path_of(p, sizeof(p), "t.bin");
	assert_int_equal(file_read_all(p, 1 << 20, &buf, &len, NULL), 0);

	write_file("trunc.bin", buf, len - 1);
	expect_error("trunc.bin", DATA_AUTO, 256,
		     "truncated token shard: the header says 100 tokens, the file holds 99");
	write_file("short.bin", buf, 500);
	expect_error("short.bin", DATA_TOKENS, 256,
		     "truncated token shard header (500 of 1024 bytes)");
	write_file("long.bin", buf, len);
	{
		char *more = malloc(len + 3);

		memcpy(more, buf, len);
		memset(more + len, 0, 3);
		write_file("long.bin", more, len + 3);
		free(more);
	}
	expect_error("long.bin", DATA_AUTO, 256,
		     "corrupt token shard: 3 bytes after the 100 tokens the header announces");
	expect_error("t.bin", DATA_AUTO, 50,
		     "token 50 at index 50 is outside the vocabulary (50)");
	h = buf;
	h[1] = 2;
	write_file("v2.bin", buf, len);
	expect_error("v2.bin", DATA_AUTO, 256,
		     "unsupported token shard version 2 (expected 1)");
	h[1] = 1;
	h[2] = -5;
	write_file("neg.bin", buf, len);
	expect_error("neg.bin", DATA_AUTO, 256,
		     "corrupt token shard header (token count -5)");
	free(buf);

	write_file("text.txt", "just some text that is long enough", 34);
	expect_error("text.txt", DATA_TOKENS, 256,
		     "not a token shard (magic 1953723754, expected 20240520)");
	{
		struct dataset d;
		struct err e;

		path_of(p, sizeof(p), "text.txt");
		assert_int_equal(dataset_load(&d, p, DATA_AUTO, 100, &e), -1);
		assert_non_null(strstr(e.msg, "is text (bytes) but spec.model.vocabSize is 100, less than 256"));
		path_of(p, sizeof(p), "missing");
		assert_int_equal(dataset_load(&d, p, DATA_AUTO, 256, &e), -1);
		assert_non_null(strstr(e.msg, "data: cannot open '"));
		assert_non_null(strstr(e.msg, "missing': No such file or directory"));
	}
}

static void split_and_learner_windows(void **state)
{
	struct job_data jd = { .val_fraction = 0.25 };
	struct data d;
	int in[8], tg[8];

	(void)state;
	write_shard("w.bin", 100, 1000);   /* tokens 0..99 */
	path_of(jd.path, sizeof(jd.path), "w.bin");
	assert_int_equal(data_open(&d, &jd, 1000, 1, 3, NULL), 0);
	assert_int_equal(d.ntrain, 75);
	assert_int_equal(d.nval, 25);
	assert_int_equal(d.val[0], 75);
	/* B 2 × T 4: windows of 9 tokens every 8, (75 − 1)/8 = 9 of them */
	assert_int_equal(data_windows(&d, 2, 4), 9);
	data_batch(&d, 0, 2, 4, in, tg);        /* learner 1: window 1 */
	assert_int_equal(in[0], 8);
	assert_int_equal(tg[0], 9);
	assert_int_equal(in[7], 15);
	assert_int_equal(tg[7], 16);
	data_batch(&d, 1, 2, 4, in, tg);        /* window 4 */
	assert_int_equal(in[0], 32);
	data_batch(&d, 3, 2, 4, in, tg);        /* window 10 mod 9 = 1 */
	assert_int_equal(in[0], 8);
	/* validation rows of T + 1 every T: (25 − 1)/4 = 6 */
	assert_int_equal(data_val_rows(&d, 4), 6);
	data_val_row(&d, 2, 4, in, tg);
	assert_int_equal(in[0], 83);
	assert_int_equal(tg[3], 87);
	data_close(&d);

	/* valPath: all of path trains */
	path_of(jd.val_path, sizeof(jd.val_path), "t.bin");
	assert_int_equal(data_open(&d, &jd, 1000, 0, 1, NULL), 0);
	assert_int_equal(d.ntrain, 100);
	assert_int_equal(d.nval, 100);
	data_close(&d);
	assert_int_equal(data_open_val(&d, &jd, 1000, NULL), 0);
	assert_int_equal(d.nval, 100);
	data_close(&d);
}

/*
 * spec.data.order spread: every row once in R rows (a bijection), each
 * batch's rows far apart, rows whole (T + 1 tokens at row·T), and the
 * rows 3 learners read at a step those one process reads at 3 × B.
 */
static void spread_rows(void **state)
{
	struct job_data jd = { .val_fraction = 0.1, .order = ORDER_SPREAD };
	struct data l[3], one;
	int in[24], tg[24], lin[8], ltg[8];

	(void)state;
	for (uint64_t R = 1; R <= 300; R++) {
		unsigned char seen[300] = { 0 };

		for (uint64_t x = 0; x < R; x++) {
			uint64_t j = data_spread_row(x, R);

			assert_true(j < R && !seen[j]);
			seen[j] = 1;
		}
	}
	for (uint64_t x = 0; x < 1000; x++) {   /* neighbours ~0.38 R apart */
		uint64_t R = 1000003, a = data_spread_row(x, R),
			 b = data_spread_row(x + 1, R), gap = a > b ? a - b : b - a;

		assert_true(gap > R / 3 && R - gap > R / 3);
	}
	write_shard("s.bin", 1000, 1000);   /* tokens 0..999: 900 train */
	path_of(jd.path, sizeof(jd.path), "s.bin");
	assert_int_equal(data_open(&one, &jd, 1000, 0, 1, NULL), 0);
	for (int m = 0; m < 3; m++)
		assert_int_equal(data_open(&l[m], &jd, 1000, m, 3, NULL), 0);
	for (uint64_t s = 0; s < 40; s++) {
		data_batch(&one, s, 6, 4, in, tg);   /* 3 × B 2, T 4 */
		for (int m = 0; m < 3; m++) {
			data_batch(&l[m], s, 2, 4, lin, ltg);
			assert_memory_equal(lin, in + m * 8, sizeof(lin));
			assert_memory_equal(ltg, tg + m * 8, sizeof(ltg));
		}
		for (int r = 0; r < 6; r++) {
			uint64_t g = s * 6 + (uint64_t)r;

			/* row r: tokens row·4 .. row·4 + 4 of (900 − 1)/4 rows */
			assert_int_equal(in[r * 4], 4 * data_spread_row(g % 224, 224));
			assert_int_equal(tg[r * 4 + 3], in[r * 4] + 4);
		}
	}
	for (int m = 0; m < 3; m++)
		data_close(&l[m]);
	data_close(&one);
}

static void own_shards(void **state)
{
	struct job_data jd = { .val_fraction = 0.1 };
	struct data d;
	struct err e;
	int in[4], tg[4];
	uint16_t tok[50];

	(void)state;
	for (int i = 0; i < 50; i++)
		tok[i] = (uint16_t)(500 + i);
	path_of(jd.shard_pattern, sizeof(jd.shard_pattern), "own-1.bin");
	assert_int_equal(data_write_shard(jd.shard_pattern, tok, 50, NULL), 0);
	path_of(jd.shard_pattern, sizeof(jd.shard_pattern), "own-{learner}.bin");
	assert_int_equal(data_open(&d, &jd, 1000, 1, 2, NULL), 0);
	assert_int_equal(d.ntrain, 45);
	data_batch(&d, 1, 1, 4, in, tg);        /* own shard: window 1 */
	assert_int_equal(in[0], 504);
	data_close(&d);
	assert_int_equal(data_open(&d, &jd, 1000, 0, 2, &e), -1);   /* own-0 missing */
	assert_non_null(strstr(e.msg, "own-0.bin': No such file or directory"));
	path_of(jd.shard_pattern, sizeof(jd.shard_pattern), "own.bin");
	assert_int_equal(data_open(&d, &jd, 1000, 0, 2, &e), -1);
	assert_non_null(strstr(e.msg, "has no {learner}"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(text_file_is_bytes),
		cmocka_unit_test(folder_in_name_order),
		cmocka_unit_test(shard_round_trip),
		cmocka_unit_test(bad_shards_are_refused),
		cmocka_unit_test(split_and_learner_windows),
		cmocka_unit_test(spread_rows),
		cmocka_unit_test(own_shards),
		cmocka_unit_test(split_by_files),
		cmocka_unit_test(tuning_split),
		cmocka_unit_test(tuning_deals_folders),
		cmocka_unit_test(validation_rows_are_spread),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
