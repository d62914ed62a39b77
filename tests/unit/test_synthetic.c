/*
 * The synthetic learner (trainer/synthetic.h): its Δ is a function of
 * (seed, learner, step) alone, small and spread over the model; its
 * table is the job's, for the reference GPT and for an external model.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(same_seed_same_delta),
		cmocka_unit_test(a_step_is_cheap),
		cmocka_unit_test(the_table_is_the_jobs),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
