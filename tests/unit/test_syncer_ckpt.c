/*
 * The syncer's checkpoint: exact round trip, corrupt files skipped, the
 * older file names still loaded, pruning that removes only loadable
 * checkpoints of this model and never the file just written, and a write
 * that fails (a file size limit, as a full disk) leaving the folder as it
 * was, the last good checkpoint kept apart from pruning, and the
 * temporary files of a killed write removed at start.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
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

/* dir/syncer-<FP>-<round>.ckpt, or the older name without FP */
static const char *name_of(char *buf, size_t len, uint64_t round, int old)
{
	if (old)
		snprintf(buf, len, "%s/syncer-%012llu.ckpt", dir,
			 (unsigned long long)round);
	else
		snprintf(buf, len, "%s/syncer-%016llx-%012llu.ckpt", dir,
			 (unsigned long long)FP, (unsigned long long)round);
	return buf;
}

static int exists(const char *path)
{
	return access(path, F_OK) == 0;
}

static const char *name_in(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", dir, name);
	return buf;
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
	/* kept: 5, 4, 3, named with the model's fingerprint */
	assert_string_equal(path, name_of(got, sizeof(got), 5, 0));
	assert_false(exists(name_of(path, sizeof(path), 2, 0)));
	assert_false(exists(name_of(path, sizeof(path), 1, 0)));
	assert_true(exists(name_of(path, sizeof(path), 3, 0)));
	/* flip one byte of the newest (round 5), truncate round 4 */
	name_of(path, sizeof(path), 5, 0);
	assert_int_equal(file_read_all(path, 1 << 20, (void **)&buf, &len, NULL), 0);
	buf[len / 2] ^= 0x40;
	assert_int_equal(file_write_atomic(path, buf, len, NULL), 0);
	name_of(path, sizeof(path), 4, 0);
	assert_int_equal(file_write_atomic(path, buf, len / 3, NULL), 0);
	free(buf);
	/* a stray temporary file is not a checkpoint */
	{
		char nm[512];

		snprintf(path, sizeof(path), "%s.tmp.1", name_of(nm, sizeof(nm), 9, 0));
	}
	assert_int_equal(file_write_atomic(path, "x", 1, NULL), 0);

	assert_int_equal(syncer_ckpt_load_newest(dir, FP, P, N, L, &b, got,
						 sizeof(got), NULL), 1);
	assert_string_equal(got, name_of(path, sizeof(path), 3, 0));
	fill(&a, 3);
	assert_same(&a, &b);
	syncer_ckpt_release(&a);
	syncer_ckpt_release(&b);
}

/* Writes c under path as it is, whatever its name says. */
static void put_file(const char *path, const struct syncer_ckpt *c)
{
	void *buf;
	size_t len;

	assert_int_equal(syncer_ckpt_encode(c, &buf, &len, NULL), 0);
	assert_int_equal(file_write_atomic(path, buf, len, NULL), 0);
	free(buf);
}

static void older_names_still_load(void **state)
{
	struct syncer_ckpt a, b;
	char path[4096], got[4096];

	(void)state;
	fill(&a, 7);
	put_file(name_of(path, sizeof(path), 7, 1), &a);
	assert_int_equal(syncer_ckpt_load_newest(dir, FP, P, N, L, &b, got,
						 sizeof(got), NULL), 1);
	assert_string_equal(got, path);
	assert_same(&a, &b);
	syncer_ckpt_release(&b);
	/* a newer round under the new name wins; the older name is one of
	 * the three kept, then pruned like any other */
	for (uint64_t r = 8; r <= 10; r++) {
		a.rounds_completed = r;
		assert_int_equal(syncer_ckpt_save(dir, &a, 3, NULL, 0, NULL), 0);
		assert_int_equal(exists(name_of(path, sizeof(path), 7, 1)), r < 10);
	}
	assert_int_equal(syncer_ckpt_load_newest(dir, FP, P, N, L, &b, got,
						 sizeof(got), NULL), 1);
	assert_string_equal(got, name_of(path, sizeof(path), 10, 0));
	assert_int_equal(b.rounds_completed, 10);
	syncer_ckpt_release(&b);
	syncer_ckpt_release(&a);
}

/*
 * Files with higher round numbers that this job cannot load: a damaged
 * one, one of another learner count, one of another model under the
 * older name, one named for another model. Before, each new checkpoint
 * fell outside the newest three names and was removed right after it
 * was written; now the new one stays, the three newest loadable ones
 * are kept, and none of the strangers is touched.
 */
static void unloadable_newer_files_do_not_prune_the_new_one(void **state)
{
	struct syncer_ckpt a, x;
	char path[4096], got[4096], bad[4][4096];
	uint8_t *buf;
	size_t len;

	(void)state;
	fill(&a, 100);
	name_of(bad[0], sizeof(bad[0]), 100, 0);
	assert_int_equal(syncer_ckpt_encode(&a, (void **)&buf, &len, NULL), 0);
	buf[len / 2] ^= 1;
	assert_int_equal(file_write_atomic(bad[0], buf, len, NULL), 0);
	free(buf);
	syncer_ckpt_release(&a);
	assert_int_equal(syncer_ckpt_init(&x, P, N, L + 1, NULL), 0);
	x.fingerprint = FP;
	put_file(name_of(bad[1], sizeof(bad[1]), 101, 0), &x);
	x.fingerprint = FP + 1;
	put_file(name_of(bad[2], sizeof(bad[2]), 102, 1), &x);
	snprintf(bad[3], sizeof(bad[3]), "%s/syncer-%016llx-%012d.ckpt", dir,
		 (unsigned long long)(FP + 1), 103);
	put_file(bad[3], &x);
	syncer_ckpt_release(&x);

	for (uint64_t r = 1; r <= 5; r++) {
		fill(&a, r);
		assert_int_equal(syncer_ckpt_save(dir, &a, 3, path, sizeof(path), NULL), 0);
		syncer_ckpt_release(&a);
		assert_true(exists(path));              /* the one just written */
		assert_string_equal(path, name_of(got, sizeof(got), r, 0));
	}
	for (uint64_t r = 1; r <= 5; r++)
		assert_int_equal(exists(name_of(path, sizeof(path), r, 0)), r >= 3);
	for (int i = 0; i < 4; i++)
		assert_true(exists(bad[i]));
	/* and it is what a restart loads */
	assert_int_equal(syncer_ckpt_load_newest(dir, FP, P, N, L, &x, got,
						 sizeof(got), NULL), 1);
	assert_string_equal(got, name_of(path, sizeof(path), 5, 0));
	assert_int_equal(x.rounds_completed, 5);
	syncer_ckpt_release(&x);
}

/*
 * A write that fails for want of room: run in a child whose file size
 * limit (RLIMIT_FSIZE, which root is held to too) is below one
 * checkpoint, so write() fails with EFBIG as on a full disk. The child
 * sends its error text back; the folder keeps what it had.
 */
static void a_full_disk_fails_cleanly(void **state)
{
	struct syncer_ckpt a, b;
	char path[4096], got[4096], msg[600] = "", nm[512];
	int fds[2], status;
	ssize_t n;
	pid_t pid;

	(void)state;
	for (uint64_t r = 1; r <= 3; r++) {
		fill(&a, r);
		assert_int_equal(syncer_ckpt_save(dir, &a, 3, NULL, 0, NULL), 0);
		syncer_ckpt_release(&a);
	}
	fill(&a, 4);
	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct rlimit rl;
		struct err e;
		int rc;

		close(fds[0]);
		signal(SIGXFSZ, SIG_IGN);
		getrlimit(RLIMIT_FSIZE, &rl);
		rl.rlim_cur = 4096;     /* a checkpoint here is 8,332 bytes */
		if (setrlimit(RLIMIT_FSIZE, &rl))
			_exit(3);
		rc = syncer_ckpt_save(dir, &a, 3, NULL, 0, &e);
		if (rc == 0)
			_exit(1);
		n = write(fds[1], e.msg, strlen(e.msg));
		_exit(n > 0 ? 0 : 2);
	}
	close(fds[1]);
	n = read(fds[0], msg, sizeof(msg) - 1);
	close(fds[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_true(n > 0);
	msg[n] = '\0';
	snprintf(got, sizeof(got), "cannot save checkpoint: cannot write '%s.tmp.%d': "
		 "File too large", name_of(nm, sizeof(nm), 4, 0), (int)pid);
	assert_string_equal(msg, got);
	/* nothing half written is left, nothing older is gone */
	assert_false(exists(nm));
	snprintf(got, sizeof(got), "%s.tmp.%d", nm, (int)pid);
	assert_false(exists(got));
	for (uint64_t r = 1; r <= 3; r++)
		assert_true(exists(name_of(path, sizeof(path), r, 0)));
	assert_int_equal(syncer_ckpt_load_newest(dir, FP, P, N, L, &b, got,
						 sizeof(got), NULL), 1);
	assert_int_equal(b.rounds_completed, 3);
	syncer_ckpt_release(&b);
	/* with room again the same checkpoint is written */
	assert_int_equal(syncer_ckpt_save(dir, &a, 3, path, sizeof(path), NULL), 0);
	assert_string_equal(path, name_of(got, sizeof(got), 4, 0));
	assert_false(exists(name_of(got, sizeof(got), 1, 0)));
	syncer_ckpt_release(&a);
}

/*
 * The last good checkpoint: a second name for one rolling checkpoint,
 * never pruned, loaded only when asked for, and replaced by the next one
 * marked. A round whose checkpoint is gone cannot be marked.
 */
static void the_last_good_one_outlives_pruning(void **state)
{
	struct syncer_ckpt a, b;
	char path[4096], good[4096], got[4096];
	struct stat st1, st2;
	struct err e;

	(void)state;
	snprintf(good, sizeof(good), "%s/syncer-%016llx-last-good.ckpt", dir,
		 (unsigned long long)FP);
	assert_int_equal(syncer_ckpt_load_good(dir, FP, P, N, L, &b, got,
					       sizeof(got)), 0);
	assert_int_equal(syncer_ckpt_mark_good(dir, FP, 1, &e), 0);
	assert_false(exists(good));
	fill(&a, 1);
	assert_int_equal(syncer_ckpt_save(dir, &a, 3, path, sizeof(path), NULL), 0);
	syncer_ckpt_release(&a);
	assert_int_equal(syncer_ckpt_mark_good(dir, FP, 1, &e), 1);
	assert_int_equal(stat(path, &st1), 0);
	assert_int_equal(stat(good, &st2), 0);
	assert_true(st1.st_ino == st2.st_ino);   /* a hard link here */
	for (uint64_t r = 2; r <= 6; r++) {
		fill(&a, r);
		assert_int_equal(syncer_ckpt_save(dir, &a, 3, NULL, 0, NULL), 0);
		syncer_ckpt_release(&a);
	}
	/* round 1 is pruned; its second name is not, and is not a rolling
	 * checkpoint: the newest still loads first */
	assert_false(exists(name_of(path, sizeof(path), 1, 0)));
	assert_true(exists(good));
	assert_int_equal(syncer_ckpt_load_newest(dir, FP, P, N, L, &b, got,
						 sizeof(got), NULL), 1);
	assert_int_equal(b.rounds_completed, 6);
	syncer_ckpt_release(&b);
	assert_int_equal(syncer_ckpt_load_good(dir, FP, P, N, L, &b, got,
					       sizeof(got)), 1);
	assert_string_equal(got, good);
	fill(&a, 1);
	assert_same(&a, &b);
	syncer_ckpt_release(&a);
	syncer_ckpt_release(&b);
	/* a pruned round cannot be marked; a kept one replaces round 1 */
	assert_int_equal(syncer_ckpt_mark_good(dir, FP, 2, &e), 0);
	assert_int_equal(syncer_ckpt_mark_good(dir, FP, 5, &e), 1);
	assert_int_equal(syncer_ckpt_load_good(dir, FP, P, N, L, &b, got,
					       sizeof(got)), 1);
	assert_int_equal(b.rounds_completed, 5);
	syncer_ckpt_release(&b);
	/* a damaged last good one does not load */
	assert_int_equal(file_write_atomic(good, "x", 1, NULL), 0);
	assert_int_equal(syncer_ckpt_load_good(dir, FP, P, N, L, &b, got,
					       sizeof(got)), 0);
}

/*
 * The high-water mark file: read back exactly, its text as drawn in
 * ckpt.h; none is 0; another model's name is not read; a damaged or
 * truncated one is refused with a message.
 */
static void the_high_water_mark_reads_back(void **state)
{
	uint64_t v[P] = { 7, 0, 18446744073709551615ULL }, w[P];
	struct syncer_hwm h = { 42, P, v }, g = { 0, 0, w };
	char path[4096], want[256];
	struct err e;
	size_t len;
	char *txt;

	(void)state;
	assert_int_equal(syncer_hwm_read(dir, FP, P, &g, &e), 0);
	assert_int_equal(syncer_hwm_write(dir, FP, &h, &e), 0);
	assert_int_equal(syncer_hwm_read(dir, FP, P, &g, &e), 1);
	assert_int_equal(g.rounds, 42);
	assert_memory_equal(w, v, sizeof(v));
	snprintf(path, sizeof(path), "%s/syncer-%016llx-hwm", dir,
		 (unsigned long long)FP);
	assert_int_equal(file_read_all(path, 4096, (void **)&txt, &len, NULL), 0);
	snprintf(want, sizeof(want), "ddiloco-syncer-hwm 1\nfingerprint "
		 "%016llx\nrounds 42\nversions 7 0 18446744073709551615\n",
		 (unsigned long long)FP);
	assert_int_equal(len, strlen(want));
	assert_memory_equal(txt, want, len);
	/* not a checkpoint: the newest-first search does not see it */
	{
		struct syncer_ckpt b;

		assert_int_equal(syncer_ckpt_load_newest(dir, FP, P, N, L, &b,
							 NULL, 0, NULL), 0);
	}
	assert_int_equal(syncer_hwm_read(dir, FP + 1, P, &g, &e), 0);
	/* one version short */
	assert_int_equal(file_write_atomic(path, txt, len - 3, NULL), 0);
	assert_int_equal(syncer_hwm_read(dir, FP, P, &g, &e), -1);
	assert_non_null(strstr(e.msg, "cannot read high-water mark"));
	/* a digit flipped to a letter */
	txt[len - 3] = 'x';
	assert_int_equal(file_write_atomic(path, txt, len, NULL), 0);
	assert_int_equal(syncer_hwm_read(dir, FP, P, &g, &e), -1);
	assert_non_null(strstr(e.msg, "3 versions expected"));
	free(txt);
}

/*
 * What a syncer killed in the middle of a write leaves: the temporary
 * files of this model's checkpoint, mark and last good link are removed
 * at start; the finished files, another model's and anything else stay.
 */
static void temporary_files_of_a_killed_write_are_removed(void **state)
{
	static const char *gone[] = {
		"syncer-1234abcd5678ef01-000000000005.ckpt.tmp.4242",
		"syncer-1234abcd5678ef01-hwm.tmp.77",
		"syncer-1234abcd5678ef01-last-good.ckpt.tmp",
	};
	static const char *kept[] = {
		"syncer-1234abcd5678ef01-000000000004.ckpt",
		"syncer-1234abcd5678ef01-hwm",
		"syncer-1234abcd5678ef02-000000000005.ckpt.tmp.4242",
		"syncer-1234abcd5678ef01-000000000006.ckpt.tmpx",
		"syncer-000000000005.ckpt.tmp.4242",
		"notes.tmp.1",
	};
	char path[4096];

	(void)state;
	for (size_t i = 0; i < 3; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, gone[i]);
		assert_int_equal(file_write_atomic(path, "x", 1, NULL), 0);
	}
	for (size_t i = 0; i < 6; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, kept[i]);
		assert_int_equal(file_write_atomic(path, "x", 1, NULL), 0);
	}
	assert_int_equal(syncer_ckpt_remove_tmp(dir, FP), 3);
	for (size_t i = 0; i < 3; i++)
		assert_false(exists(name_in(path, sizeof(path), gone[i])));
	for (size_t i = 0; i < 6; i++)
		assert_true(exists(name_in(path, sizeof(path), kept[i])));
	assert_int_equal(syncer_ckpt_remove_tmp(dir, FP), 0);
	assert_int_equal(syncer_ckpt_remove_tmp("/nonexistent/ddiloco", FP), 0);
}

static int clean_dir(void **state)
{
	return remove_dir(state) || make_dir(state) ? -1 : 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(round_trip_is_exact),
		cmocka_unit_test(flipped_byte_and_truncation_are_caught),
		cmocka_unit_test_setup(newest_valid_is_loaded, clean_dir),
		cmocka_unit_test_setup(older_names_still_load, clean_dir),
		cmocka_unit_test_setup(unloadable_newer_files_do_not_prune_the_new_one,
				       clean_dir),
		cmocka_unit_test_setup(a_full_disk_fails_cleanly, clean_dir),
		cmocka_unit_test_setup(the_last_good_one_outlives_pruning,
				       clean_dir),
		cmocka_unit_test_setup(the_high_water_mark_reads_back, clean_dir),
		cmocka_unit_test_setup(temporary_files_of_a_killed_write_are_removed,
				       clean_dir),
	};
	return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
