/*
 * The run's report: the one-sided verdict against the data-parallel
 * baseline and the twin (better is reported as better, worse by more than
 * the tolerance fails), and the baseline's learning-rate sweep in the
 * summary and in report.json.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "runner/run.h"

static void record(struct run_record *r, double loss, double base)
{
	struct job_spec js;
	struct err e;

	jobspec_defaults(&js);
	snprintf(js.name, sizeof(js.name), "rep");
	assert_int_equal(run_record_init(r, &js, "rep.yaml", "/tmp/rep", &e), 0);
	r->final.eval_loss = loss;
	r->baseline.ran = r->baseline.ok = 1;
	r->baseline.loss = base;
	r->baseline.tokens = 1000;
	r->baseline.nsweep = 3;
	r->baseline.best = 1;
	for (int i = 0; i < 3; i++) {
		r->baseline.sweep[i].lr = 0.001 * (1 << i);
		r->baseline.sweep[i].warmup = 20;
		r->baseline.sweep[i].ok = 1;
		r->baseline.sweep[i].loss = i == 1 ? base : base + 0.1 * i + 0.05;
	}
}

static char *summary(struct run_record *r)
{
	struct buf b;
	char *s;

	buf_init(&b, 1 << 16);
	assert_int_equal(run_summary(r, &b), 0);
	s = strdup(b.data);
	buf_release(&b);
	return s;
}

static json_t *report(struct run_record *r)
{
	struct buf b;
	struct err e;
	json_error_t je;
	json_t *j;

	buf_init(&b, 1 << 20);
	assert_int_equal(run_report_json(r, &b, &e), 0);
	j = json_loads(b.data, 0, &je);
	assert_non_null(j);
	buf_release(&b);
	return j;
}

static void better_is_reported_as_better(void **state)
{
	struct run_record r;
	char *s;
	json_t *j, *bl;

	(void)state;
	record(&r, 1.86, 2.0);
	s = summary(&r);
	assert_non_null(strstr(s, "ratio 0.9300 (better by 7.0%)"));
	assert_null(strstr(s, "NOT"));
	j = report(&r);
	bl = json_object_get(j, "baseline");
	assert_true(json_is_true(json_object_get(bl, "within_tolerance")));
	assert_float_equal(json_real_value(json_object_get(bl, "loss_ratio")), 0.93, 1e-9);
	json_decref(j);
	free(s);
	run_record_release(&r);
}

static void worse_by_more_than_tolerance_fails(void **state)
{
	struct run_record r;
	char *s;
	json_t *j;

	(void)state;
	record(&r, 2.12, 2.0);
	s = summary(&r);
	assert_non_null(strstr(s, "ratio 1.0600 (NOT within 5%: worse by 6.0%)"));
	j = report(&r);
	assert_true(json_is_false(json_object_get(json_object_get(j, "baseline"),
						  "within_tolerance")));
	json_decref(j);
	free(s);
	run_record_release(&r);

	record(&r, 2.08, 2.0);
	s = summary(&r);
	assert_non_null(strstr(s, "ratio 1.0400 (within 5%)"));
	free(s);
	run_record_release(&r);
}

static void sweep_is_listed_with_the_chosen_rate(void **state)
{
	struct run_record r;
	char *s;
	json_t *j, *sw;

	(void)state;
	record(&r, 2.0, 2.0);
	s = summary(&r);
	assert_non_null(strstr(s, "data-parallel baseline: lr 0.001: eval loss 2.0500\n"));
	assert_non_null(strstr(s, "data-parallel baseline: lr 0.002: eval loss 2.0000 (chosen)\n"));
	assert_non_null(strstr(s, "data-parallel baseline: lr 0.004: eval loss 2.2500\n"));
	assert_null(strstr(s, "bytes:"));       /* nothing exchanged: no line */
	j = report(&r);
	assert_float_equal(json_real_value(json_object_get(json_object_get(j, "baseline"), "lr")),
			   0.002, 1e-12);
	sw = json_object_get(json_object_get(j, "baseline"), "sweep");
	assert_int_equal(json_array_size(sw), 3);
	assert_true(json_is_true(json_object_get(json_array_get(sw, 1), "chosen")));
	assert_true(json_is_false(json_object_get(json_array_get(sw, 2), "chosen")));
	assert_int_equal(json_integer_value(json_object_get(json_array_get(sw, 0),
							    "warmup_steps")), 20);
	json_decref(j);
	free(s);
	run_record_release(&r);
}

static void bytes_against_data_parallel(void **state)
{
	struct run_record r;
	char *s;

	(void)state;
	record(&r, 2.0, 2.0);
	/* N params, M learners: data parallel moves 8·N·(M−1) bytes a step */
	r.final.tokens = 100 * r.tokens_per_step * (uint64_t)r.learners;
	r.final.bytes_in = (uint64_t)(8.0 * (double)r.params * (r.learners - 1) * 100 / 250);
	r.final.bytes_out = 0;
	s = summary(&r);
	assert_non_null(strstr(s, "of the"));
	assert_non_null(strstr(s, "0.0040 of the"));
	assert_non_null(strstr(s, "(1/250)"));
	free(s);
	run_record_release(&r);
}

static void baseline_rates_are_checked(void **state)
{
	struct job_spec js;
	struct err e;
	double lr[RUN_SWEEP_MAX];
	size_t n;

	(void)state;
	jobspec_defaults(&js);
	js.optimizer.lr = 0.002;
	assert_int_equal(run_baseline_lrs(&js, NULL, lr, &n, &e), 0);
	assert_int_equal(n, 3);
	assert_float_equal(lr[0], 0.001, 1e-12);
	assert_float_equal(lr[2], 0.004, 1e-12);
	assert_int_equal(run_baseline_lrs(&js, "0.01,0.02", lr, &n, &e), 0);
	assert_int_equal(n, 2);
	assert_float_equal(lr[1], 0.02, 1e-12);
	assert_int_equal(run_baseline_lrs(&js, "0.01,x", lr, &n, &e), -1);
	assert_non_null(strstr(e.msg, "--baseline-lr"));
	assert_int_equal(run_baseline_lrs(&js, "2", lr, &n, &e), -1);
	assert_int_equal(run_baseline_lrs(&js, "", lr, &n, &e), -1);
	assert_int_equal(run_baseline_lrs(&js, "1e-3,1e-3,1e-3,1e-3,1e-3,1e-3,1e-3,1e-3,1e-3",
					  lr, &n, &e), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(better_is_reported_as_better),
		cmocka_unit_test(worse_by_more_than_tolerance_fails),
		cmocka_unit_test(sweep_is_listed_with_the_chosen_rate),
		cmocka_unit_test(bytes_against_data_parallel),
		cmocka_unit_test(baseline_rates_are_checked),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
