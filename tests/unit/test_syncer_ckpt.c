/* The syncer's checkpoint: exact round trip, corrupt files skipped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "syncer/ckpt.h"
#include "tests/unit/testlib.h"

#define FP 0x1234abcd5678ef01ULL
#define P 3
#define N 1000
#define L 4

static char dir[256];

static int make_dir(void **state)
{
	(void)state;
	return testlib_tmpdir(dir, sizeof(dir), "ddiloco-ckpt");
}

static int remove_dir(void **state)
{
	(void)state;
	return testlib_rmtree(dir);
}

static void fill(struct syncer_ckpt *c, uint64_t round)
{
	assert_int_equal(syncer_ckpt_init(c, P, N, L, NULL), 0);
	c->fingerprint = FP;
	c->rounds_started = round + 2;
	c->rounds_completed = round;
	c->tokens_trained = 123456789;
	c->merged = 11;
	c->late = 2;
	c->rejected = 3;
	c->empty = 4;
	c->bytes_in = 1 << 20;
	c->bytes_out = 3 << 20;
	c->tokens_merged = 4567.25;
	c->elapsed = 99.5;
	c->down = 1.25;
	c->compute_merged = 42.0;
	c->wall_time = 1.7e9;
	c->last_round_elapsed = 98.0;
	c->uptime_start = 2.5;
	c->done = 1;
	for (int p = 0; p < P; p++)
		c->versions[p] = round * 10 + (uint64_t)p;
	for (int i = 0; i < L; i++) {
		c->learners[i].incarnation = 100 + (uint64_t)i;
		c->learners[i].tokens = 1000 * (uint64_t)i;
	}
	c->nevals = 2;
	c->evals[1] = (struct ckpt_eval){ round, 777, 3.25, 12.5 };
	for (int i = 0; i < N; i++) {
		c->theta[i] = (float)i * 0.5f + (float)round;
		c->momentum[i] = -(float)i;
	}
}

static void assert_same(const struct syncer_ckpt *a, const struct syncer_ckpt *b)
{
	assert_int_equal(a->rounds_started, b->rounds_started);
	assert_int_equal(a->rounds_completed, b->rounds_completed);
	assert_int_equal(a->tokens_trained, b->tokens_trained);
	assert_int_equal(a->merged, b->merged);
	assert_int_equal(a->late, b->late);
	assert_int_equal(a->rejected, b->rejected);
	assert_int_equal(a->empty, b->empty);
	assert_int_equal(a->bytes_in, b->bytes_in);
	assert_int_equal(a->bytes_out, b->bytes_out);
	assert_exactly(a->tokens_merged, b->tokens_merged);
	assert_exactly(a->elapsed, b->elapsed);
	assert_exactly(a->down, b->down);
	assert_exactly(a->compute_merged, b->compute_merged);
	assert_exactly(a->wall_time, b->wall_time);
	assert_exactly(a->last_round_elapsed, b->last_round_elapsed);
	assert_exactly(a->uptime_start, b->uptime_start);
	assert_int_equal(a->done, b->done);
	assert_int_equal(a->nevals, b->nevals);
	assert_memory_equal(a->versions, b->versions, P * 8);
	assert_memory_equal(a->learners, b->learners, L * sizeof(*a->learners));
	assert_memory_equal(a->evals, b->evals, a->nevals * sizeof(*a->evals));
	assert_memory_equal(a->theta, b->theta, N * 4);
	assert_memory_equal(a->momentum, b->momentum, N * 4);
}

static void round_trip_is_exact(void **state)
{
	struct syncer_ckpt a, b;
	struct err e;
	void *buf;
	size_t len;

	(void)state;
	fill(&a, 7);
	assert_int_equal(syncer_ckpt_encode(&a, &buf, &len, NULL), 0);
	/* 176 + 3·8 + 4·16 + 2·32 + 1000·8 + 4 */
	assert_int_equal(len, 176 + 24 + 64 + 64 + 8000 + 4);
	assert_int_equal(syncer_ckpt_decode(buf, len, "x", FP, P, N, L, &b, &e), 0);
	assert_same(&a, &b);
	syncer_ckpt_release(&b);
	/* another model's checkpoint is refused by name */
	assert_int_equal(syncer_ckpt_decode(buf, len, "x", FP + 1, P, N, L, &b, &e), -1);
	assert_non_null(strstr(e.msg, "another model"));
	assert_int_equal(syncer_ckpt_decode(buf, len, "x", FP, P, N, L + 1, &b, &e), -1);
	assert_non_null(strstr(e.msg, "learners"));
	free(buf);
	syncer_ckpt_release(&a);
}

static void flipped_byte_and_truncation_are_caught(void **state)
{
	struct syncer_ckpt a, b;
	struct err e;
	uint8_t *buf;
	size_t len;

	(void)state;
	fill(&a, 3);
	assert_int_equal(syncer_ckpt_encode(&a, (void **)&buf, &len, NULL), 0);
	for (size_t at = 0; at < len; at += 997) {
		buf[at] ^= 0x10;
		assert_int_equal(syncer_ckpt_decode(buf, len, "f", FP, P, N, L,
						    &b, &e), -1);
		buf[at] ^= 0x10;
	}
	buf[5000] ^= 1;   /* inside Θ: only the checksum can tell */
	assert_int_equal(syncer_ckpt_decode(buf, len, "f", FP, P, N, L, &b, &e), -1);
	assert_non_null(strstr(e.msg, "checksum mismatch"));
	buf[5000] ^= 1;
	assert_int_equal(syncer_ckpt_decode(buf, len - 1, "t", FP, P, N, L, &b, &e), -1);
	assert_non_null(strstr(e.msg, "'t'"));
	assert_int_equal(syncer_ckpt_decode(buf, 100, "t", FP, P, N, L, &b, &e), -1);
	assert_non_null(strstr(e.msg, "truncated"));
	free(buf);
	syncer_ckpt_release(&a);
}

static void newest_valid_is_loaded(void **state)
{
	struct syncer_ckpt a, b;
	char path[4096], got[4096];
	uint8_t *buf;
	size_t len;

	(void)state;
	assert_int_equal(syncer_ckpt_load_newest(dir, FP, P, N, L, &b, got,
						 sizeof(got), NULL), 0);
	for (uint64_t r = 1; r <= 5; r++) {
		fill(&a, r);
		assert_int_equal(syncer_ckpt_save(dir, &a, 3, path, sizeof(path), NULL), 0);
		syncer_ckpt_release(&a);
	}
	/* kept: 5, 4, 3 */
	snprintf(path, sizeof(path), "%s/syncer-000000000002.ckpt", dir);
	assert_int_not_equal(access(path, F_OK), 0);
	/* flip one byte of the newest (round 5), truncate round 4 */
	snprintf(path, sizeof(path), "%s/syncer-000000000005.ckpt", dir);
	assert_int_equal(file_read_all(path, 1 << 20, (void **)&buf, &len, NULL), 0);
	buf[len / 2] ^= 0x40;
	assert_int_equal(file_write_atomic(path, buf, len, NULL), 0);
	snprintf(path, sizeof(path), "%s/syncer-000000000004.ckpt", dir);
	assert_int_equal(file_write_atomic(path, buf, len / 3, NULL), 0);
	free(buf);
	/* a stray temporary file is not a checkpoint */
	snprintf(path, sizeof(path), "%s/syncer-000000000009.ckpt.tmp.1", dir);
	assert_int_equal(file_write_atomic(path, "x", 1, NULL), 0);

	assert_int_equal(syncer_ckpt_load_newest(dir, FP, P, N, L, &b, got,
						 sizeof(got), NULL), 1);
	assert_non_null(strstr(got, "syncer-000000000003.ckpt"));
	fill(&a, 3);
	assert_same(&a, &b);
	syncer_ckpt_release(&a);
	syncer_ckpt_release(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(round_trip_is_exact),
		cmocka_unit_test(flipped_byte_and_truncation_are_caught),
		cmocka_unit_test(newest_valid_is_loaded),
	};
	return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
