/*
 * The trainer's inner loop and the evaluator: overfitting one batch,
 * determinism, learner shares, schedule in the stats, evaluation.
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
#include "trainer/optim.h"
#include "trainer/trainer.h"
#include "tests/unit/testlib.h"

static char dir[64], text[256];

static int setup(void **state)
{
	char buf[4096];
	struct rng r;

	(void)state;
	if (testlib_tmpdir(dir, sizeof(dir), "ddiloco-test-trainer"))
		return -1;
	/* a repetitive text: a small model learns it within a few steps */
	rng_seed(&r, 5);
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = "the cat sat on the mat. "[i % 24];
	for (int i = 0; i < 40; i++)
		buf[rng_next(&r) % sizeof(buf)] = (char)('a' + rng_next(&r) % 26);
	snprintf(text, sizeof(text), "%s/text.txt", dir);
	return file_write_atomic(text, buf, sizeof(buf), NULL);
}

static int teardown(void **state)
{
	(void)state;
	return testlib_rmtree(dir);
}

/* testlib's tiny job, twice as wide and long, learning fast */
static void tiny_job(struct job_spec *js)
{
	testlib_tiny_job(js, text);
	js->model.channels = 32;
	js->model.context = 16;
	js->optimizer.batch_size = 4;
	js->optimizer.seq_len = 16;
	js->optimizer.warmup_steps = 0;
	js->optimizer.lr = 3e-3;
	assert_int_equal(jobspec_validate(js, NULL), 0);
}

static void overfits_one_batch(void **state)
{
	struct job_spec js;
	struct trainer *t;
	struct trainer_stats st;
	struct err e;
	char one[256];
	uint8_t bytes[33];
	struct rng r;
	float first = 0;

	(void)state;
	/* exactly one window of B·T + 1 = 33 random bytes */
	rng_seed(&r, 9);
	for (int i = 0; i < 33; i++)
		bytes[i] = (uint8_t)(rng_next(&r) % 256);
	snprintf(one, sizeof(one), "%s/one.bin", dir);
	assert_int_equal(file_write_atomic(one, bytes, sizeof(bytes), NULL), 0);
	tiny_job(&js);
	js.optimizer.batch_size = 2;
	js.data.format = DATA_TEXT;
	js.data.val_fraction = 0;
	js.optimizer.lr = 1e-2;
	js.optimizer.weight_decay = 0;
	snprintf(js.data.path, sizeof(js.data.path), "%s", one);
	t = trainer_new(&js, 0, 1, &e);
	assert_non_null(t);
	for (int i = 0; i < 150; i++) {
		assert_int_equal(trainer_step(t, &st, &e), 0);
		if (i == 0)
			first = st.loss;
	}
	/* from ln 256 ≈ 5.5 to near zero */
	assert_greater(first, 5.0f);
	assert_less(first, 6.0f);
	assert_less(st.loss, 0.05f);
	trainer_free(t);
}

static void steps_are_deterministic(void **state)
{
	struct job_spec js;
	struct trainer *a, *b, *c;
	struct trainer_stats sa, sb;
	size_t n;

	(void)state;
	tiny_job(&js);
	a = trainer_new(&js, 0, 2, NULL);
	b = trainer_new(&js, 0, 2, NULL);
	c = trainer_new(&js, 1, 2, NULL);
	assert_non_null(a);
	assert_non_null(b);
	assert_non_null(c);
	n = model_num_params(trainer_config(a));
	/* the same initial model for every learner */
	assert_memory_equal(trainer_params(a), trainer_params(c), n * sizeof(float));
	for (int i = 0; i < 5; i++) {
		assert_int_equal(trainer_step(a, &sa, NULL), 0);
		assert_int_equal(trainer_step(b, &sb, NULL), 0);
		assert_int_equal(trainer_step(c, NULL, NULL), 0);
		assert_exactly(sa.loss, sb.loss);
	}
	assert_memory_equal(trainer_params(a), trainer_params(b), n * sizeof(float));
	/* learner 1 trains on other windows */
	assert_memory_not_equal(trainer_params(a), trainer_params(c), n * sizeof(float));
	assert_int_equal(sa.step, 5);
	assert_int_equal(sa.tokens, 4 * 16);
	assert_int_equal(sa.tokens_total, 5 * 4 * 16);
	assert_int_equal(trainer_steps(a), 5);
	trainer_free(a);
	trainer_free(b);
	trainer_free(c);
}

static void two_threads_are_deterministic(void **state)
{
	struct job_spec js;
	struct trainer *a, *b;

	(void)state;
	tiny_job(&js);
	js.learners.threads = 2;
	a = trainer_new(&js, 0, 1, NULL);
	b = trainer_new(&js, 0, 1, NULL);
	assert_non_null(a);
	assert_non_null(b);
	for (int i = 0; i < 5; i++) {
		assert_int_equal(trainer_step(a, NULL, NULL), 0);
		assert_int_equal(trainer_step(b, NULL, NULL), 0);
	}
	assert_memory_equal(trainer_params(a), trainer_params(b),
			    model_num_params(trainer_config(a)) * sizeof(float));
	trainer_free(a);
	trainer_free(b);
}

static void learns_and_follows_schedule(void **state)
{
	struct job_spec js;
	struct trainer *t;
	struct trainer_stats st;
	double before, after;

	(void)state;
	tiny_job(&js);
	js.optimizer.warmup_steps = 5;
	js.budget.tokens = 60 * 4 * 16;     /* 60 steps of decay horizon */
	t = trainer_new(&js, 0, 1, NULL);
	assert_non_null(t);
	assert_int_equal(trainer_decay_steps(t), 60);
	assert_int_equal(trainer_eval(t, 0, &before, NULL), 0);
	assert_near(before, log(256.0), 0.2);   /* untrained: uniform-ish */
	for (int i = 0; i < 60; i++) {
		assert_int_equal(trainer_step(t, &st, NULL), 0);
		assert_near(st.lr, schedule_lr(&js.optimizer, (uint64_t)i, 60), 1e-12);
	}
	assert_near(st.lr, 3e-3 * 0.1, 1e-4);
	assert_int_equal(trainer_eval(t, 0, &after, NULL), 0);
	assert_less(after, before - 1.5);
	trainer_free(t);
}

/*
 * The schedule at the job's step (docs/design.md §3, Learner): the rate
 * is the schedule's at the step set, the data window stays the own
 * step, and 0 gives the own step back.
 */
static void schedule_step_is_the_jobs(void **state)
{
	struct job_spec js;
	struct trainer *t, *u;
	struct trainer_stats st, su;

	(void)state;
	tiny_job(&js);
	js.optimizer.warmup_steps = 5;
	js.budget.tokens = 60 * 4 * 16;
	t = trainer_new(&js, 0, 1, NULL);
	u = trainer_new(&js, 0, 1, NULL);
	assert_non_null(t);
	assert_non_null(u);
	for (int i = 0; i < 10; i++) {
		assert_int_equal(trainer_step(t, &st, NULL), 0);
		assert_int_equal(trainer_step(u, &su, NULL), 0);
	}
	assert_int_equal(trainer_schedule_step(t), 10);
	trainer_set_schedule_step(t, 50);
	assert_int_equal(trainer_schedule_step(t), 50);
	assert_int_equal(trainer_step(t, &st, NULL), 0);
	assert_int_equal(trainer_step(u, &su, NULL), 0);
	assert_near(st.lr, schedule_lr(&js.optimizer, 50, 60), 1e-12);
	assert_less(st.lr, su.lr / 2);
	/* the same batch as the trainer at its own step: same loss */
	assert_int_equal(st.step, 11);
	assert_true(st.loss == su.loss);
	trainer_set_schedule_step(t, 70);   /* past the horizon: the floor */
	assert_int_equal(trainer_step(t, &st, NULL), 0);
	assert_near(st.lr, 3e-3 * 0.1, 1e-12);
	trainer_set_schedule_step(t, 0);
	assert_int_equal(trainer_step(t, &st, NULL), 0);
	assert_near(st.lr, schedule_lr(&js.optimizer, 12, 60), 1e-12);
	trainer_free(t);
	trainer_free(u);
}

/* Largest |a[i] − b[i]| over n floats. */
static double max_change(const float *a, const float *b, size_t n)
{
	double m = 0;

	for (size_t i = 0; i < n; i++)
		if (fabs((double)a[i] - b[i]) > m)
			m = fabs((double)a[i] - b[i]);
	return m;
}

/*
 * A resumed learner takes the schedule step (and data window) of the job
 * but corrects its zero AdamW moments from t = 1, and its learning rate
 * warms up again: its first update moves the largest-gradient parameters
 * by about lr/W (the first step of the warmup), not by ≈0.42·lr as t = 41
 * would (m̂/√v̂ = (0.1/(1−0.9⁴¹)) / √(0.05/(1−0.95⁴¹))) nor by lr; after W
 * steps of its own the rate is the schedule's.
 */
static void resume_moves_schedule_not_adam_t(void **state)
{
	struct job_spec js;
	struct trainer *t, *u;
	struct trainer_stats st;
	size_t n;
	float *before;
	double lr40, moved;

	(void)state;
	tiny_job(&js);
	js.optimizer.warmup_steps = 5;
	js.optimizer.cosine_steps = 60;

	/* a fresh learner resumes at the job's step 40 */
	u = trainer_new(&js, 0, 1, NULL);
	assert_non_null(u);
	n = model_num_params(trainer_config(u));
	before = malloc(n * sizeof(float));
	assert_non_null(before);
	memcpy(before, trainer_params(u), n * sizeof(float));
	assert_int_equal(trainer_resume_at(u, 40), 1);
	assert_int_equal(trainer_steps(u), 40);
	assert_int_equal(trainer_adam_t(u), 0);
	assert_int_equal(trainer_resume_at(u, 40), 0);   /* not larger */
	assert_int_equal(trainer_resume_at(u, 12), 0);
	assert_int_equal(trainer_steps(u), 40);
	assert_int_equal(trainer_step(u, &st, NULL), 0);
	lr40 = schedule_lr(&js.optimizer, 40, 60);
	assert_less(lr40, 3e-3 * 0.5);                  /* well into the decay */
	assert_near(st.lr, lr40 / 5, 1e-12);     /* the warmup's first step */
	assert_int_equal(st.step, 41);
	assert_int_equal(trainer_adam_t(u), 1);
	moved = max_change(trainer_params(u), before, n);
	assert_greater(moved, 0.97 * lr40 / 5);
	assert_less(moved, 1.01 * lr40 / 5);
	for (int i = 2; i <= 5; i++) {
		assert_int_equal(trainer_step(u, &st, NULL), 0);
		assert_near(st.lr, schedule_lr(&js.optimizer, 39 + (uint64_t)i, 60) * i / 5,
			    1e-12);
	}
	assert_int_equal(trainer_step(u, &st, NULL), 0);
	assert_near(st.lr, schedule_lr(&js.optimizer, 45, 60), 1e-12);

	/* a learner with moments keeps its t when it moves forward */
	t = trainer_new(&js, 0, 1, NULL);
	assert_non_null(t);
	for (int i = 0; i < 3; i++)
		assert_int_equal(trainer_step(t, &st, NULL), 0);
	assert_int_equal(trainer_adam_t(t), 3);
	assert_int_equal(trainer_resume_at(t, 20), 1);
	assert_int_equal(trainer_adam_t(t), 3);
	assert_int_equal(trainer_step(t, &st, NULL), 0);
	/* its moments have 3 of the 5 warmup steps: the rate goes on from 4/5 */
	assert_near(st.lr, schedule_lr(&js.optimizer, 20, 60) * 4 / 5, 1e-12);
	assert_int_equal(st.step, 21);
	assert_int_equal(trainer_adam_t(t), 4);
	free(before);
	trainer_free(t);
	trainer_free(u);
}

static void evaluator_scores_params(void **state)
{
	struct job_spec js;
	struct trainer *t;
	struct evaluator *ev;
	double lt, le, lsmall;

	(void)state;
	tiny_job(&js);
	t = trainer_new(&js, 0, 1, NULL);
	ev = evaluator_new(&js, NULL);
	assert_non_null(t);
	assert_non_null(ev);
	for (int i = 0; i < 10; i++)
		assert_int_equal(trainer_step(t, NULL, NULL), 0);
	/* same validation rows, same parameters: same loss */
	assert_int_equal(trainer_eval(t, 1000, &lt, NULL), 0);
	assert_int_equal(evaluator_loss(ev, trainer_params(t), 1000, &le, NULL), 0);
	assert_near(lt, le, 1e-6);
	/* fewer tokens still scores at least one batch */
	assert_int_equal(evaluator_loss(ev, trainer_params(t), 1, &lsmall, NULL), 0);
	assert_true(isfinite(lsmall));
	assert_greater(lsmall, 0);
	evaluator_free(ev);
	trainer_free(t);
}

static void refuses_bad_setups(void **state)
{
	struct job_spec js;
	struct err e;
	char tiny[256], want[512];

	(void)state;
	tiny_job(&js);
	snprintf(tiny, sizeof(tiny), "%s/tiny.txt", dir);
	assert_int_equal(file_write_atomic(tiny, "0123456789", 10, NULL), 0);
	snprintf(js.data.path, sizeof(js.data.path), "%s", tiny);
	assert_null(trainer_new(&js, 0, 1, &e));
	snprintf(want, sizeof(want),
		 "data: '%s' holds 9 training tokens, fewer than one batch (4 × 16 + 1)", tiny);
	assert_string_equal(e.msg, want);
	assert_null(evaluator_new(&js, &e));
	snprintf(want, sizeof(want),
		 "data: the validation split of '%s' holds 1 tokens, fewer than one row (16 + 1)", tiny);
	assert_string_equal(e.msg, want);
	assert_null(trainer_new(&js, 2, 2, &e));
	assert_string_equal(e.msg, "trainer: learner 2 of 2 does not exist");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(overfits_one_batch),
		cmocka_unit_test(steps_are_deterministic),
		cmocka_unit_test(two_threads_are_deterministic),
		cmocka_unit_test(learns_and_follows_schedule),
		cmocka_unit_test(resume_moves_schedule_not_adam_t),
		cmocka_unit_test(schedule_step_is_the_jobs),
		cmocka_unit_test(evaluator_scores_params),
		cmocka_unit_test(refuses_bad_setups),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
