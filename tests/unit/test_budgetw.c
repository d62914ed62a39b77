/*
 * The budget read again from the job file while the syncer runs
 * (syncer/budgetw.h), on a real file: unchanged, nothing; a new file
 * swapped in (as the kubelet swaps a ConfigMap's) or written in place, its
 * budget once it is due and not before; a file that does not load keeps
 * the budget in force; the metrics say the budget and the changes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "common/buf.h"
#include "syncer/budgetw.h"
#include "tests/unit/testlib.h"

static char dir[64], path[128];

/* The job file with budget tokens t and outer steps s, swapped in by a
 * rename (inplace 0) or written over (1). */
static void write_job(unsigned long long t, unsigned long long s, int inplace)
{
	char tmp[160];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.new", path);
	f = fopen(inplace ? path : tmp, "w");
	assert_non_null(f);
	fprintf(f, "apiVersion: ddiloco.io/v1alpha1\nkind: DecoupledTrainingJob\n"
		"metadata: {name: b}\nspec:\n  data: {path: %s}\n"
		"  budget: {tokens: %llu, outerSteps: %llu}\n", path, t, s);
	assert_int_equal(fclose(f), 0);
	if (!inplace)
		assert_int_equal(rename(tmp, path), 0);
}

static void the_budget_follows_the_file(void **state)
{
	struct job_budget b0 = { .tokens = 1000, .outer_steps = 0 };
	struct budgetw w;
	struct buf m;
	double now = 100;

	(void)state;
	assert_int_equal(testlib_tmpdir(dir, sizeof(dir), "ddbudgetw"), 0);
	snprintf(path, sizeof(path), "%s/job.yaml", dir);
	write_job(1000, 0, 0);
	budgetw_init(&w, path, &b0, now);
	/* unchanged: nothing, however often */
	for (int i = 1; i <= 3; i++)
		assert_int_equal(budgetw_poll(&w, now + i * BUDGETW_EVERY), 0);
	now += 3 * BUDGETW_EVERY;
	/* swapped in: taken once it is due, not before */
	write_job(5000, 7, 0);
	assert_int_equal(budgetw_poll(&w, now + BUDGETW_EVERY / 2), 0);
	assert_int_equal(w.budget.tokens, 1000);
	now += BUDGETW_EVERY;
	assert_int_equal(budgetw_poll(&w, now), 1);
	assert_int_equal(w.budget.tokens, 5000);
	assert_int_equal(w.budget.outer_steps, 7);
	assert_int_equal(w.changes, 1);
	now += BUDGETW_EVERY;
	assert_int_equal(budgetw_poll(&w, now), 0);
	/* written in place, another size */
	write_job(250000, 7, 1);
	now += BUDGETW_EVERY;
	assert_int_equal(budgetw_poll(&w, now), 1);
	assert_int_equal(w.budget.tokens, 250000);
	/* a file that does not load: the budget stays */
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs("spec: [not, a, job\n", f);
	fclose(f);
	now += BUDGETW_EVERY;
	assert_int_equal(budgetw_poll(&w, now), 0);
	assert_int_equal(w.failing, 1);
	assert_int_equal(w.budget.tokens, 250000);
	/* gone for a moment: the budget stays */
	assert_int_equal(remove(path), 0);
	now += BUDGETW_EVERY;
	assert_int_equal(budgetw_poll(&w, now), 0);
	/* back, loading, the same budget: no change counted */
	write_job(250000, 7, 0);
	now += BUDGETW_EVERY;
	assert_int_equal(budgetw_poll(&w, now), 0);
	assert_int_equal(w.failing, 0);
	assert_int_equal(w.changes, 2);
	buf_init(&m, 1 << 16);
	budgetw_metrics(&w, &m);
	assert_non_null(strstr(m.data, "ddiloco_syncer_budget_tokens 250000\n"));
	assert_non_null(strstr(m.data, "ddiloco_syncer_budget_outer_steps 7\n"));
	assert_non_null(strstr(m.data, "ddiloco_syncer_budget_changes_total 2\n"));
	buf_release(&m);
	/* no file: nothing ever */
	budgetw_init(&w, NULL, &b0, now);
	assert_int_equal(budgetw_poll(&w, now + 100), 0);
	assert_int_equal(w.budget.tokens, 1000);
	testlib_rmtree(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(the_budget_follows_the_file),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
