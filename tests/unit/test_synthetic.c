/*
 * The synthetic learner (trainer/synthetic.h): its Δ is a function of
 * (seed, learner, step) alone, small and spread over the model; its
 * table is the job's, for the reference GPT and for an external model;
 * `ddiloco learner --synthetic` refuses a sidecar of another release.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cmds.h"
#include "common/cli.h"
#include "common/exchange.h"
#include "common/jobspec.h"
#include "trainer/model.h"
#include "trainer/synthetic.h"
#include "tests/unit/testlib.h"

#define N 3000001   /* > 2 · SYNTH_TOUCH: a stride of 3 */

static void same_seed_same_delta(void **state)
{
	float *a = calloc(N, sizeof(float)), *b = calloc(N, sizeof(float));
	float *c = calloc(N, sizeof(float));
	size_t moved = 0, differ = 0;

	(void)state;
	for (uint64_t step = 0; step < 3; step++) {
		synthetic_delta(a, N, 7, 1, step, 1e-3);
		synthetic_delta(b, N, 7, 1, step, 1e-3);
	}
	assert_int_equal(memcmp(a, b, N * sizeof(float)), 0);
	/* three steps of stride 3 move every value once, by at most scale */
	for (size_t i = 0; i < N; i++) {
		moved += a[i] != 0.0f;
		assert_true(fabsf(a[i]) <= 1e-3f);
	}
	assert_greater(moved, N - N / 1000);
	/* another learner, seed or step moves θ otherwise */
	synthetic_delta(c, N, 7, 2, 0, 1e-3);
	synthetic_delta(b, N, 7, 1, 0, 1e-3);
	memset(a, 0, N * sizeof(float));
	synthetic_delta(a, N, 7, 1, 0, 1e-3);
	for (size_t i = 0; i < N; i += 3)
		differ += a[i] != c[i];
	assert_greater(differ, N / 3 - N / 300);
	memset(c, 0, N * sizeof(float));
	synthetic_delta(c, N, 8, 1, 0, 1e-3);
	assert_true(memcmp(a, c, N * sizeof(float)) != 0);
	free(a);
	free(b);
	free(c);
}

/* At most SYNTH_TOUCH values a step whatever the size, from the step's
 * offset: a 2^28-value model moves every 256th value. */
static void a_step_is_cheap(void **state)
{
	size_t n = (size_t)SYNTH_TOUCH * 5 + 3, moved = 0, first = n;
	size_t want = (n - 4 + 5) / 6;   /* i = 4, 10, 16, … below n */
	float *a = calloc(n, sizeof(float));

	(void)state;
	synthetic_delta(a, n, 1, 0, 4, 0.5);
	for (size_t i = 0; i < n; i++)
		if (a[i] != 0.0f) {
			moved++;
			first = first < i ? first : i;
		}
	assert_true(moved <= SYNTH_TOUCH);
	assert_true(moved <= want);
	assert_greater(moved, want - want / 1000);
	assert_int_equal(first, 4);   /* stride 6, offset 4 mod 6 */
	free(a);
}

static void the_table_is_the_jobs(void **state)
{
	struct job_spec js;
	struct err e = { "" };
	struct frag_table ft, ref;
	struct model_config cfg;
	size_t n, max = 0;

	(void)state;
	assert_int_equal(jobspec_load("examples/big.yaml", &js, &e), 0);
	assert_int_equal(synthetic_table(&js, &ft, &n, &e), 0);
	assert_int_equal(n, (size_t)1 << 28);   /* 1 GiB of float32 */
	assert_int_equal(model_config_from_job(&js.model, &cfg, &e), 0);
	assert_int_equal(model_frag_table(&cfg, 32, &ref, &e), 0);
	assert_int_equal(ft.fingerprint, ref.fingerprint);
	assert_int_equal(ft.nfrags, 32);
	for (int p = 0; p < ft.nfrags; p++)
		max = ft.frags[p].numel > max ? ft.frags[p].numel : max;
	/* a float32 fragment and its message header under 64 MiB */
	assert_true(max * 4 + 1024 <= (size_t)64 << 20);
	frag_table_release(&ft);
	frag_table_release(&ref);

	/* an external model: its table as the ABI cuts it */
	jobspec_defaults(&js);
	js.model.kind = MODEL_EXTERNAL;
	js.syncer.fragments = 2;
	js.learners.synthetic.ntensors = 3;
	js.learners.synthetic.tensors[0] = 10;
	js.learners.synthetic.tensors[1] = 7;
	js.learners.synthetic.tensors[2] = 4;
	assert_int_equal(synthetic_table(&js, &ft, &n, &e), 0);
	assert_int_equal(n, 21);
	assert_int_equal(ft.frags[0].numel, 10);
	assert_int_equal(ft.frags[1].numel, 11);
	assert_int_equal(ft.tensors[2].offset, 17);
	frag_table_release(&ft);
}

/* `ddiloco learner --synthetic` on dir, in a child process. */
static pid_t start_learner(char *job, char *dir)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		char args[] = "learner\0--job\0\0--learner\0" "0\0--exchange\0\0"
			      "--synthetic\0--init-timeout\0" "60";
		char *argv[11], *a = args;

		/* cmd_learner takes argv as main has it: writable strings */
		for (int i = 0; i < 10; i++) {
			argv[i] = a;
			a += strlen(a) + 1;
		}
		argv[2] = job;
		argv[6] = dir;
		argv[10] = NULL;
		_exit(cmd_learner(10, argv));
	}
	return pid;
}

/* A sidecar of versions v attaches to dir: 1 when it is refused (the
 * learner's versions are there), 0 when it got in (it leaves again). */
static int sidecar_refused(const char *dir, const struct frag_table *ft,
			   const struct exchange_version *v)
{
	struct exchange *sx = NULL;
	int rc = exchange_open_version(dir, EXCHANGE_SIDECAR, ft, v, &sx, NULL);

	if (rc == 0)
		exchange_close(sx);
	return rc == EXCHANGE_VERSION_MISMATCH;
}

/*
 * A sidecar of another release (docs/abi.md, Versions): `ddiloco
 * learner` exits 78, whether the sidecar was there first (its open) or
 * came while it waited for the model (not at its 60 s timeout).
 */
static void a_sidecar_of_another_release_is_refused(void **state)
{
	struct exchange_version other = { .abi = 3, .exchange = 4,
					   .release = "0.4.0" };
	const uint64_t sizes[1] = { 64 };
	char dir[64], job[128], path[128];
	struct frag_table ft;
	struct exchange *sx = NULL;
	int status = -1;
	pid_t pid;
	FILE *fp;

	(void)state;
	assert_int_equal(testlib_tmpdir(dir, sizeof(dir), "ddsyn-ver"), 0);
	snprintf(job, sizeof(job), "%s/job.yaml", dir);
	snprintf(path, sizeof(path), "%s/exchange", dir);
	fp = fopen(job, "w");
	assert_non_null(fp);
	fprintf(fp, "apiVersion: ddiloco.io/v1alpha1\nkind: DecoupledTrainingJob\n"
		"metadata: {name: ver}\nspec:\n  learners: {replicas: 1}\n"
		"  model: {vocabSize: 16, context: 8, layers: 1, heads: 2, "
		"channels: 8}\n  data: {path: /dev/null}\n");
	fclose(fp);
	assert_int_equal(frag_table_from_sizes(&ft, sizes, 1, 1, NULL), 0);

	assert_int_equal(exchange_open_version(dir, EXCHANGE_SIDECAR, &ft, &other,
					       &sx, NULL), 0);
	pid = start_learner(job, dir);
	assert_eventually(waitpid(pid, &status, WNOHANG) == pid, 30);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), CLI_EXIT_MISMATCH);
	exchange_close(sx);
	assert_int_equal(unlink(path), 0);

	/* the learner first, waiting; the sidecar after it */
	pid = start_learner(job, dir);
	assert_eventually(access(path, F_OK) == 0, 30);
	assert_eventually(sidecar_refused(dir, &ft, &other), 30);
	assert_eventually(waitpid(pid, &status, WNOHANG) == pid, 30);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), CLI_EXIT_MISMATCH);
	frag_table_release(&ft);
	assert_int_equal(testlib_rmtree(dir), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(same_seed_same_delta),
		cmocka_unit_test(a_step_is_cheap),
		cmocka_unit_test(the_table_is_the_jobs),
		cmocka_unit_test(a_sidecar_of_another_release_is_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
