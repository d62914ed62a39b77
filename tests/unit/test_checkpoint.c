/*
 * Trainer checkpoints: an exact round trip (training resumes bit for bit)
 * and every kind of bad file refused with its own message, leaving the
 * trainer untouched.
 */
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
#include "trainer/trainer.h"
#include "tests/unit/testlib.h"

static char dir[64], text[256];

static int setup(void **state)
{
	char buf[2048];

	(void)state;
	if (testlib_tmpdir(dir, sizeof(dir), "ddiloco-test-ckpt"))
		return -1;
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (char)('a' + (i * 7 + i / 13) % 26);
	snprintf(text, sizeof(text), "%s/text.txt", dir);
	return file_write_atomic(text, buf, sizeof(buf), NULL);
}

static int teardown(void **state)
{
	(void)state;
	return testlib_rmtree(dir);
}

static void tiny_job(struct job_spec *js)
{
	testlib_tiny_job(js, text);
	js->optimizer.warmup_steps = 2;
}

static struct trainer *trained(const struct job_spec *js, int steps)
{
	struct trainer *t = trainer_new(js, 0, 1, NULL);

	assert_non_null(t);
	for (int i = 0; i < steps; i++)
		assert_int_equal(trainer_step(t, NULL, NULL), 0);
	return t;
}

static void round_trip_resumes_exactly(void **state)
{
	struct job_spec js;
	struct trainer *a, *b;
	char path[256];
	size_t n;

	(void)state;
	tiny_job(&js);
	snprintf(path, sizeof(path), "%s/ck.bin", dir);
	a = trained(&js, 3);
	assert_int_equal(trainer_save(a, path, NULL), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(trainer_step(a, NULL, NULL), 0);

	b = trained(&js, 0);
	assert_int_equal(trainer_load(b, path, NULL), 0);
	assert_int_equal(trainer_steps(b), 3);
	assert_int_equal(trainer_tokens(b), 3 * 2 * 8);
	for (int i = 0; i < 2; i++)
		assert_int_equal(trainer_step(b, NULL, NULL), 0);
	n = model_num_params(trainer_config(a));
	/* parameters, moments and data position all came back */
	assert_memory_equal(trainer_params(a), trainer_params(b), n * sizeof(float));
	trainer_free(a);
	trainer_free(b);
}

/* Writes a changed copy of the checkpoint and expects load to refuse it. */
static void expect_refused(struct trainer *t, const void *buf, size_t len,
			   const char *what)
{
	char path[256], want[512];
	struct err e;
	size_t n = model_num_params(trainer_config(t));
	float *before = malloc(n * sizeof(float));
	uint64_t steps = trainer_steps(t);

	snprintf(path, sizeof(path), "%s/bad.bin", dir);
	assert_int_equal(file_write_atomic(path, buf, len, NULL), 0);
	memcpy(before, trainer_params(t), n * sizeof(float));
	assert_int_equal(trainer_load(t, path, &e), -1);
	snprintf(want, sizeof(want), "trainer: cannot load checkpoint '%s': %s",
		 path, what);
	assert_string_equal(e.msg, want);
	assert_memory_equal(before, trainer_params(t), n * sizeof(float));
	assert_int_equal(trainer_steps(t), steps);
	free(before);
}

static void bad_checkpoints_are_refused(void **state)
{
	struct job_spec js, other;
	struct trainer *t, *o;
	char path[256], want[128];
	uint8_t *buf, *copy;
	size_t len;
	struct err e;

	(void)state;
	tiny_job(&js);
	snprintf(path, sizeof(path), "%s/good.bin", dir);
	t = trained(&js, 2);
	assert_int_equal(trainer_save(t, path, NULL), 0);
	assert_int_equal(file_read_all(path, 1 << 24, (void **)&buf, &len, NULL), 0);
	/* 56 + 12n + 4 bytes */
	assert_int_equal(len, 56 + 12 * model_num_params(trainer_config(t)) + 4);
	copy = malloc(len);
	trainer_free(t);
	t = trained(&js, 1);

	memcpy(copy, buf, len);
	copy[len / 2] ^= 0x10;                /* one flipped bit in the moments */
	expect_refused(t, copy, len, "checksum mismatch");
	memcpy(copy, buf, len);
	copy[100] ^= 0xff;                    /* in the parameters */
	expect_refused(t, copy, len, "checksum mismatch");
	memcpy(copy, buf, len);
	copy[len - 1] ^= 0x01;                /* in the checksum itself */
	expect_refused(t, copy, len, "checksum mismatch");
	snprintf(want, sizeof(want), "truncated (%zu bytes, expected %zu)", len - 7, len);
	expect_refused(t, buf, len - 7, want);
	expect_refused(t, buf, 10, "truncated (10 bytes, shorter than the 56-byte header)");
	memcpy(copy, buf, len);
	copy[0] = 'X';
	expect_refused(t, copy, len, "not a trainer checkpoint (bad magic)");
	memcpy(copy, buf, len);
	copy[4] = 9;
	expect_refused(t, copy, len, "unsupported version 9 (expected 1)");
	/* same size, different heads: only the shapes tell */
	memcpy(copy, buf, len);
	copy[20] = 4;
	{
		uint32_t crc = crc32_update(0, copy, len - 4);

		memcpy(copy + len - 4, &crc, 4);
	}
	expect_refused(t, copy, len,
		       "shape mismatch: the checkpoint has V=256 maxT=8 L=1 NH=4 C=16 tied=1, the job has V=256 maxT=8 L=1 NH=2 C=16 tied=1");

	/* a checkpoint of another model */
	other = js;
	other.model.channels = 32;
	o = trained(&other, 0);
	assert_int_equal(trainer_load(o, path, &e), -1);
	snprintf(want, sizeof(want), "%s", "shape mismatch: the checkpoint has V=256 maxT=8 L=1 NH=2 C=16 tied=1, the job has V=256 maxT=8 L=1 NH=2 C=32 tied=1");
	assert_non_null(strstr(e.msg, want));
	trainer_free(o);

	snprintf(path, sizeof(path), "%s/none.bin", dir);
	assert_int_equal(trainer_load(t, path, &e), -1);
	assert_non_null(strstr(e.msg, "none.bin': No such file or directory"));
	/* saving into a folder that does not exist fails and says where */
	snprintf(path, sizeof(path), "%s/no/such/ck.bin", dir);
	assert_int_equal(trainer_save(t, path, &e), -1);
	assert_non_null(strstr(e.msg, "trainer: cannot save checkpoint '"));
	free(buf);
	free(copy);
	trainer_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(round_trip_resumes_exactly),
		cmocka_unit_test(bad_checkpoints_are_refused),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
