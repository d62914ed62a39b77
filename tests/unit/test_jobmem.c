/*
 * jobmem: a job's memory kept across passes and started over for a new
 * job under the old name or another size; the syncer's restarts counted
 * on one pod only, kept in a bounded ring and read within a window; an
 * Event sent twice within the dedupe window goes once.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "operator/jobmem.h"

static void test_get_keeps_and_starts_over(void **state)
{
	struct jobmem_table t;
	struct jobmem *m, *again;

	(void)state;
	jobmem_table_init(&t);
	m = jobmem_get(&t, "ns/a", "uid-1", 3);
	assert_non_null(m);
	assert_int_equal(m->n, 3);
	m->learners[2].restarts = 4;
	m->tls = 1;
	m->progress.have = 1;
	again = jobmem_get(&t, "ns/a", "uid-1", 3);
	assert_ptr_equal(again, m);
	assert_int_equal(again->learners[2].restarts, 4);
	assert_int_equal(again->tls, 1);
	/* another job under the name: nothing of the old one's is kept */
	again = jobmem_get(&t, "ns/a", "uid-2", 3);
	assert_ptr_equal(again, m);
	assert_string_equal(again->uid, "uid-2");
	assert_int_equal(again->learners[2].restarts, 0);
	assert_int_equal(again->tls, 0);
	assert_int_equal(again->progress.have, 0);
	/* another size: as many learners as it has now */
	again->learners[0].restarts = 1;
	again = jobmem_get(&t, "ns/a", "uid-2", 5);
	assert_int_equal(again->n, 5);
	assert_int_equal(again->learners[0].restarts, 0);
	assert_int_equal(again->learners[4].restarts, 0);
	/* a second job has its own; a dropped one is made anew */
	m = jobmem_get(&t, "ns/b", "uid-3", 1);
	assert_ptr_not_equal(m, again);
	m->tls = 1;
	jobmem_drop(&t, "ns/b");
	jobmem_drop(&t, "ns/none");
	m = jobmem_get(&t, "ns/b", "uid-3", 1);
	assert_int_equal(m->tls, 0);
	jobmem_table_release(&t);
}

static void test_syncer_restarts(void **state)
{
	struct jobmem_table t;
	struct jobmem *m;

	(void)state;
	jobmem_table_init(&t);
	m = jobmem_get(&t, "ns/a", "uid", 1);
	/* the first pod seen: its restartCount is the base */
	jobmem_syncer_seen(m, 0, "pod-1", 7, "Error, exit code 1", 100);
	assert_int_equal(jobmem_syncer_restarts(m, 100, 600), 0);
	assert_string_equal(m->syncer_last_exit, "");
	jobmem_syncer_seen(m, 0, "pod-1", 9, "OOMKilled, exit code 137", 200);
	assert_int_equal(jobmem_syncer_restarts(m, 200, 600), 2);
	assert_string_equal(m->syncer_last_exit, "OOMKilled, exit code 137");
	/* the same count again is no restart */
	jobmem_syncer_seen(m, 0, "pod-1", 9, "", 250);
	assert_int_equal(jobmem_syncer_restarts(m, 250, 600), 2);
	assert_string_equal(m->syncer_last_exit, "OOMKilled, exit code 137");
	/* a new pod (a disruption) is a new base, not restarts */
	jobmem_syncer_seen(m, 0, "pod-2", 3, "Error, exit code 2", 300);
	assert_int_equal(jobmem_syncer_restarts(m, 300, 600), 2);
	/* out of the window, they no longer count */
	assert_int_equal(jobmem_syncer_restarts(m, 801, 600), 0);
	assert_int_equal(jobmem_syncer_restarts(m, 800, 600), 2);
	/* shards (docs/operator.md, Shards): each pod its own base, seen in
	 * turn; the restarts of either count together */
	jobmem_syncer_seen(m, 1, "shard-1", 4, "", 810);
	jobmem_syncer_seen(m, 0, "pod-2", 3, "", 810);
	assert_int_equal(jobmem_syncer_restarts(m, 810, 600), 0);
	jobmem_syncer_seen(m, 1, "shard-1", 5, "Error, exit code 1", 820);
	jobmem_syncer_seen(m, 0, "pod-2", 4, "", 820);
	assert_int_equal(jobmem_syncer_restarts(m, 820, 600), 2);
	jobmem_syncer_seen(m, JOB_MAX_SHARDS, "far", 9, "", 830);   /* ignored */
	assert_int_equal(jobmem_syncer_restarts(m, 830, 600), 2);
	jobmem_table_release(&t);
}

static void test_syncer_restarts_ring(void **state)
{
	struct jobmem_table t;
	struct jobmem *m;

	(void)state;
	jobmem_table_init(&t);
	m = jobmem_get(&t, "ns/a", "uid", 1);
	jobmem_syncer_seen(m, 0, "pod", 0, "", 0);
	/* more than are kept: the oldest go, the newest stay */
	jobmem_syncer_seen(m, 0, "pod", JOBMEM_RESTARTS_KEPT, "", 10);
	jobmem_syncer_seen(m, 0, "pod", JOBMEM_RESTARTS_KEPT + 5, "", 20);
	assert_int_equal(m->restart_n, JOBMEM_RESTARTS_KEPT);
	assert_int_equal(jobmem_syncer_restarts(m, 20, 5), 5);
	assert_int_equal(jobmem_syncer_restarts(m, 20, 1000), JOBMEM_RESTARTS_KEPT);
	assert_true(m->restart_at[JOBMEM_RESTARTS_KEPT - 1] == 20);
	jobmem_table_release(&t);
}

static void test_event_dedupe(void **state)
{
	struct jobmem_table t;
	struct jobmem *m;
	char reason[16];

	(void)state;
	jobmem_table_init(&t);
	m = jobmem_get(&t, "ns/a", "uid", 1);
	assert_int_equal(jobmem_event_repeated(m, "Created", "all made", 10), 0);
	assert_int_equal(jobmem_event_repeated(m, "Created", "all made", 20), 1);
	assert_int_equal(jobmem_event_repeated(m, "Created", "other", 20), 0);
	assert_int_equal(jobmem_event_repeated(m, "Running", "all made", 20), 0);
	/* past the window it goes again */
	assert_int_equal(jobmem_event_repeated(m, "Created", "all made",
					       10 + JOBMEM_EVENT_DEDUPE), 0);
	/* the ring forgets the oldest once JOBMEM_EVENTS_KEPT others came */
	assert_int_equal(jobmem_event_repeated(m, "A", "x", 50), 0);
	for (int i = 0; i < JOBMEM_EVENTS_KEPT; i++) {
		snprintf(reason, sizeof(reason), "B%d", i);
		assert_int_equal(jobmem_event_repeated(m, reason, "x", 51), 0);
	}
	assert_int_equal(jobmem_event_repeated(m, "A", "x", 52), 0);
	jobmem_table_release(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_get_keeps_and_starts_over),
		cmocka_unit_test(test_syncer_restarts),
		cmocka_unit_test(test_syncer_restarts_ring),
		cmocka_unit_test(test_event_dedupe),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
