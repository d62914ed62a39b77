/*
 * AdamW, gradient clipping and the learning-rate schedule against values
 * worked out by hand (tolerance 1e-6 on float results, 1e-12 on double).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>

#include "trainer/optim.h"
#include "tests/unit/testlib.h"

static void adamw_two_steps(void **state)
{
	/* p = 1, g = +0.5 then −0.5, lr 0.1, β (0.9, 0.95), eps 1e-8, wd 0.1:
	 * step 1: m = 0.05, v = 0.0125, m̂ = 0.5, v̂ = 0.25
	 *         p = 1 − 0.1·(0.5/(0.5 + 1e-8) + 0.1·1) = 0.890000002
	 * step 2: m = −0.005, v = 0.024375, m̂ = −0.0263158, v̂ = 0.25
	 *         p = 0.89 − 0.1·(−0.0526316 + 0.1·0.89) = 0.88636316 */
	struct adamw_step s = { .lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.95f,
				.eps = 1e-8f, .weight_decay = 0.1f,
				.grad_scale = 1.0f, .t = 1 };
	float p[2] = { 1.0f, 1.0f }, m[2] = { 0 }, v[2] = { 0 };
	float g[2] = { 0.5f, 0.5f };

	(void)state;
	adamw_update(p, g, m, v, 2, &s);
	assert_near(p[0], 0.890000002f, 1e-6f);
	assert_near(m[0], 0.05f, 1e-7f);
	assert_near(v[0], 0.0125f, 1e-7f);
	g[0] = g[1] = -0.5f;
	s.t = 2;
	adamw_update(p, g, m, v, 2, &s);
	assert_near(p[0], 0.88636316f, 1e-6f);
	assert_near(m[0], -0.005f, 1e-7f);
	assert_near(v[0], 0.024375f, 1e-7f);
	assert_exactly(p[0], p[1]);
}

static void adamw_without_decay_and_scaled(void **state)
{
	/* wd 0: the first step moves by lr·sign(g) (up to eps); a scaled
	 * gradient enters the moments scaled */
	struct adamw_step s = { .lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f,
				.eps = 1e-8f, .weight_decay = 0.0f,
				.grad_scale = 0.5f, .t = 1 };
	float p[3] = { 2.0f, -3.0f, 0.0f }, m[3] = { 0 }, v[3] = { 0 };
	float g[3] = { 4.0f, -1.0f, 0.0f };

	(void)state;
	adamw_update(p, g, m, v, 3, &s);
	assert_near(p[0], 1.99f, 1e-6f);
	assert_near(p[1], -2.99f, 1e-6f);
	assert_exactly(p[2], 0.0f);
	assert_near(m[0], 0.2f, 1e-7f);        /* 0.1 · 0.5 · 4 */
	assert_near(v[0], 0.004f, 1e-6f);      /* 0.001 · 2², 1 − 0.999 in float */
}

static void clipping(void **state)
{
	float g[4] = { 3.0f, 0.0f, -4.0f, 0.0f };

	(void)state;
	assert_exactly(grad_norm(g, 4), 5.0);
	assert_exactly(clip_scale(5.0, 1.0), 0.2f);
	assert_exactly(clip_scale(0.5, 1.0), 1.0f);
	assert_exactly(clip_scale(50.0, 0.0), 1.0f);     /* 0 = off */
}

static void schedule_values(void **state)
{
	struct job_optimizer o = { .lr = 1e-3, .warmup_steps = 10, .min_lr_ratio = 0.1 };

	(void)state;
	/* warmup: lr·(s+1)/10 */
	assert_near(schedule_lr(&o, 0, 110), 1e-4, 1e-12);
	assert_near(schedule_lr(&o, 4, 110), 5e-4, 1e-12);
	assert_near(schedule_lr(&o, 9, 110), 1e-3, 1e-12);
	/* cosine from step 10 to 110 between 1e-3 and 1e-4 */
	assert_near(schedule_lr(&o, 10, 110), 1e-3, 1e-12);
	assert_near(schedule_lr(&o, 35, 110), 8.681980515339464e-4, 1e-12);
	assert_near(schedule_lr(&o, 60, 110), 5.5e-4, 1e-12);
	assert_near(schedule_lr(&o, 110, 110), 1e-4, 1e-12);
	assert_near(schedule_lr(&o, 5000, 110), 1e-4, 1e-12);
	/* no horizon: constant after warmup */
	assert_near(schedule_lr(&o, 5000, 0), 1e-3, 1e-12);
	o.warmup_steps = 0;
	assert_near(schedule_lr(&o, 0, 0), 1e-3, 1e-12);
	assert_near(schedule_lr(&o, 50, 100), 5.5e-4, 1e-12);
}

static void decay_horizon(void **state)
{
	struct job_spec js;

	(void)state;
	jobspec_defaults(&js);
	assert_int_equal(schedule_decay_steps(&js, 4, 8, 64), 0);
	js.budget.outer_steps = 300;
	assert_int_equal(schedule_decay_steps(&js, 4, 8, 64), 300);
	js.budget.tokens = 1000000;   /* / (4·8·64) = 488.28 */
	assert_int_equal(schedule_decay_steps(&js, 4, 8, 64), 488);
	assert_int_equal(schedule_decay_steps(&js, 1, 32, 64), 488);
	js.budget.tokens = 10;
	assert_int_equal(schedule_decay_steps(&js, 4, 8, 64), 1);
	js.optimizer.cosine_steps = 77;
	assert_int_equal(schedule_decay_steps(&js, 4, 8, 64), 77);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(adamw_two_steps),
		cmocka_unit_test(adamw_without_decay_and_scaled),
		cmocka_unit_test(clipping),
		cmocka_unit_test(schedule_values),
		cmocka_unit_test(decay_horizon),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
