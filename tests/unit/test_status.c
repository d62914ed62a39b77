/*
 * status: the job's status built from reconcile's output and read back.
 * Conditions survive the round trip with their times; a loss that is not
 * finite is left out; completionTime only in a terminal phase; status.chaos
 * from the chaos controller, else the one already written; progress from
 * the syncer's /status as common/syncer_status reads it.
 */
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "operator/status.h"

static const char *str(json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

static void test_build_and_read_back(void **state)
{
	struct rc_output out;
	struct learner_mem mem[3];
	struct obs_progress p = {
		.have = 1, .round = 12, .tokens = 3456, .loss = NAN,
		.goodput = 0.75, .uptime = 0.9, .elapsed = 60.5,
	}, back;
	struct condition conds[COND_N];
	struct status_input in = { &out, 7, mem, 3, &p, 1, NULL, NULL, 1, 1, -1 };
	json_t *st, *learners;

	(void)state;
	memset(&out, 0, sizeof(out));
	memset(mem, 0, sizeof(mem));
	mem[1].restarts = 2;
	mem[2].failures = 1;
	out.phase = PHASE_RUNNING;
	out.ready = 2;
	out.total = 3;
	out.start_time = 1800000000;
	out.completion_time = 1800000100;   /* not terminal: not written */
	cond_set(&out.conds[COND_CREATED], 1, "ChildrenCreated", "all there",
		 "2027-01-15T08:00:00Z");
	cond_set(&out.conds[COND_RUNNING], 0, "BelowQuorum", "1 of 2",
		 "2027-01-15T08:01:00Z");

	st = status_build(&in);
	assert_int_equal(json_integer_value(json_object_get(st, "observedGeneration")), 7);
	assert_string_equal(str(st, "phase"), "Running");
	assert_string_equal(str(st, "startTime"), "2027-01-15T08:00:00Z");
	assert_null(json_object_get(st, "completionTime"));
	assert_string_equal(str(st, "learnersReady"), "2/3");
	/* the shards: up/total for kubectl's column, the first down */
	assert_string_equal(str(st, "shardsReady"), "1/1");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(st, "shards"),
							    "total")), 1);
	assert_null(json_object_get(json_object_get(st, "shards"), "down"));
	json_decref(st);
	in.shards = 2;
	in.shards_up = 1;
	in.shard_down = 1;
	st = status_build(&in);
	assert_string_equal(str(st, "shardsReady"), "1/2");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(st, "shards"),
							    "down")), 1);
	in.shards = 1;
	in.shards_up = 1;
	in.shard_down = -1;
	learners = json_object_get(st, "learners");
	assert_int_equal(json_integer_value(json_object_get(learners, "total")), 3);
	assert_int_equal(json_integer_value(json_object_get(learners, "ready")), 2);
	assert_int_equal(json_array_size(json_object_get(learners, "restarts")), 3);
	assert_int_equal(json_integer_value(json_array_get(json_object_get(learners, "restarts"), 1)), 2);
	/* failures counted toward backoffLimit, apart from recreations */
	assert_int_equal(json_integer_value(json_array_get(json_object_get(learners, "failures"), 1)), 0);
	assert_int_equal(json_integer_value(json_array_get(json_object_get(learners, "failures"), 2)), 1);
	assert_true(json_is_true(json_object_get(st, "syncerReady")));
	assert_int_equal(json_integer_value(json_object_get(json_object_get(st, "progress"), "tokens")), 3456);
	assert_null(json_object_get(json_object_get(st, "progress"), "loss"));
	assert_null(json_object_get(st, "chaos"));
	assert_int_equal(json_array_size(json_object_get(st, "conditions")), 2);

	status_read_conditions(st, conds);
	assert_int_equal(conds[COND_CREATED].set, 1);
	assert_int_equal(conds[COND_CREATED].status, 1);
	assert_string_equal(conds[COND_CREATED].reason, "ChildrenCreated");
	assert_int_equal(conds[COND_RUNNING].status, 0);
	assert_string_equal(conds[COND_RUNNING].message, "1 of 2");
	assert_string_equal(conds[COND_RUNNING].time, "2027-01-15T08:01:00Z");
	assert_int_equal(conds[COND_COMPLETE].set, 0);

	memset(&back, 0, sizeof(back));
	status_read_progress(json_object_get(st, "progress"), &back);
	assert_int_equal(back.have, 1);
	assert_int_equal(back.round, 12);
	assert_true(isnan(back.loss));
	assert_float_equal(back.goodput, 0.75, 1e-12);
	assert_float_equal(back.elapsed, 60.5, 1e-12);
	json_decref(st);

	/* terminal: completionTime; a finite loss is written; chaos kept */
	out.phase = PHASE_SUCCEEDED;
	p.loss = 2.5;
	in.old = json_pack("{s:{s:i}}", "chaos", "kills", 4);
	st = status_build(&in);
	assert_string_equal(str(st, "completionTime"), "2027-01-15T08:01:40Z");
	assert_float_equal(json_real_value(json_object_get(json_object_get(st, "progress"), "loss")),
			   2.5, 1e-12);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(st, "chaos"), "kills")), 4);
	json_decref(st);

	/* the controller's status.chaos wins over the old one */
	in.chaos = json_pack("{s:i, s:b}", "kills", 5, "active", 1);
	st = status_build(&in);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(st, "chaos"), "kills")), 5);
	json_decref(st);
	json_decref(in.old);
}

static void test_progress_prefers_eval_loss(void **state)
{
	json_t *j = json_pack("{s:i, s:f, s:f, s:b}", "round", 3, "loss", 4.0,
			      "eval_loss", 3.5, "done", 1);
	struct obs_progress p;

	(void)state;
	memset(&p, 0, sizeof(p));
	status_read_progress(j, &p);
	assert_float_equal(p.loss, 3.5, 1e-12);
	assert_int_equal(p.done, 1);
	assert_int_equal(p.tokens, 0);
	json_object_del(j, "eval_loss");
	status_read_progress(j, &p);
	assert_float_equal(p.loss, 4.0, 1e-12);
	json_decref(j);
}

static void test_progress_from_syncer(void **state)
{
	const char *body = "{\"round\":9,\"tokens\":4096,\"done\":true,"
			   "\"eval_loss\":null,\"goodput\":0.5}";
	struct syncer_status s;
	struct obs_progress p;
	struct err e;

	(void)state;
	assert_int_equal(syncer_status_parse(body, strlen(body), &s, &e), 0);
	memset(&p, 0, sizeof(p));
	status_progress_from_syncer(&s, &p);
	assert_int_equal(p.have, 1);
	assert_int_equal(p.round, 9);
	assert_int_equal(p.tokens, 4096);
	assert_int_equal(p.done, 1);
	assert_true(isnan(p.loss));           /* no evaluation yet: left out */
	assert_float_equal(p.goodput, 0.5, 1e-12);
	assert_float_equal(p.uptime, 0, 0);   /* not given: 0, as before */
	assert_float_equal(p.elapsed, 0, 0);
	assert_int_equal(p.ckpt_have, 0);     /* an older syncer: no word */
	syncer_status_release(&s);
}

/* A count past what the status's int64 holds reads LLONG_MAX, never a
 * negative round (regress/status/counts-sum-past-2-64). */
static void test_progress_counts_stay_positive(void **state)
{
	const char *big = "{\"round\":1.8e19,\"tokens\":9223372036854775808.0,"
			  "\"checkpoint\":{\"failures\":1.7e19,"
			  "\"last_ok_round\":1.6e19}}";
	struct syncer_status s;
	struct obs_progress p;
	struct err e;

	(void)state;
	assert_int_equal(syncer_status_parse(big, strlen(big), &s, &e), 0);
	memset(&p, 0, sizeof(p));
	status_progress_from_syncer(&s, &p);
	assert_true(p.round == LLONG_MAX);
	assert_true(p.tokens == LLONG_MAX);
	assert_true(p.ckpt_failures == LLONG_MAX);
	assert_true(p.ckpt_last_ok_round == LLONG_MAX);
	syncer_status_release(&s);
	s.round = 806;
	s.tokens = (uint64_t)LLONG_MAX;
	s.ckpt.have_last_ok = 0;
	status_progress_from_syncer(&s, &p);
	assert_int_equal(p.round, 806);
	assert_true(p.tokens == LLONG_MAX);
	assert_int_equal(p.ckpt_last_ok_round, -1);
}

static void test_checkpoint_from_syncer(void **state)
{
	const char *fail = "{\"round\":9,\"bytes_in\":700,\"bytes_out\":900,"
			   "\"checkpoint\":{\"failing\":true,"
			   "\"error\":\"cannot save checkpoint: No space left on device\","
			   "\"failures\":3,\"last_ok_round\":6,"
			   "\"last_ok_time\":1796000000.5}}";
	const char *ok = "{\"checkpoint\":{\"failing\":false,\"error\":null,"
			 "\"failures\":3,\"last_ok_round\":null}}";
	const char *bad = "{\"checkpoint\":{\"failing\":\"yes\"}}";
	struct syncer_status s;
	struct obs_progress p;
	struct err e;

	(void)state;
	assert_int_equal(syncer_status_parse(fail, strlen(fail), &s, &e), 0);
	memset(&p, 0, sizeof(p));
	status_progress_from_syncer(&s, &p);
	assert_int_equal(p.ckpt_have, 1);
	assert_int_equal(p.ckpt_failing, 1);
	assert_int_equal(p.ckpt_failures, 3);
	assert_int_equal(p.ckpt_last_ok_round, 6);
	assert_true(p.ckpt_time == 1796000000.5);
	assert_int_equal(p.bytes_in, 700);
	assert_int_equal(p.bytes_out, 900);
	assert_string_equal(p.ckpt_error,
			    "cannot save checkpoint: No space left on device");
	syncer_status_release(&s);

	assert_int_equal(syncer_status_parse(ok, strlen(ok), &s, &e), 0);
	status_progress_from_syncer(&s, &p);
	assert_int_equal(p.ckpt_have, 1);
	assert_int_equal(p.ckpt_failing, 0);
	assert_int_equal(p.ckpt_last_ok_round, -1);   /* null: none yet */
	assert_true(p.ckpt_time == 0);                /* absent: unknown */
	assert_string_equal(p.ckpt_error, "");
	syncer_status_release(&s);

	/* a long message is cut before a character, not inside one */
	{
		char body[400], want[161];
		int n = snprintf(body, sizeof(body), "{\"checkpoint\":{\"failing\":true,"
				 "\"error\":\"");

		memset(body + n, 'x', 159);
		n += 159;
		n += snprintf(body + n, sizeof(body) - (size_t)n, "\u00e9tage\"}}");
		assert_int_equal(syncer_status_parse(body, (size_t)n, &s, &e), 0);
		status_progress_from_syncer(&s, &p);
		memset(want, 'x', 159);
		want[159] = '\0';   /* é is 2 bytes: 161 would not fit */
		assert_string_equal(p.ckpt_error, want);
		syncer_status_release(&s);
	}

	assert_int_equal(syncer_status_parse(bad, strlen(bad), &s, &e), -1);
	assert_string_equal(e.msg, "status: field 'checkpoint.failing': not a boolean");

	/* where the syncer process started from: "seed" is a start over,
	 * anything else is not, a syncer that does not say is unknown */
	{
		static const struct { const char *from; int over; } cases[] = {
			{ "\"seed\"", 1 }, { "\"checkpoint\"", 0 },
			{ "\"new\"", 0 }, { "\"last_good\"", 0 }, { "null", -1 },
		};
		char body[200];
		int n;

		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
			n = snprintf(body, sizeof(body), "{\"checkpoint\":{"
				     "\"failing\":false,\"resumed_from\":%s}}",
				     cases[i].from);
			assert_int_equal(syncer_status_parse(body, (size_t)n, &s, &e), 0);
			status_progress_from_syncer(&s, &p);
			assert_int_equal(p.started_over, cases[i].over);
			syncer_status_release(&s);
		}
		assert_int_equal(syncer_status_parse(ok, strlen(ok), &s, &e), 0);
		status_progress_from_syncer(&s, &p);
		assert_int_equal(p.started_over, -1);   /* not said */
		syncer_status_release(&s);
		n = snprintf(body, sizeof(body), "{\"checkpoint\":{\"resumed_from\":3}}");
		assert_int_equal(syncer_status_parse(body, (size_t)n, &s, &e), -1);
		assert_string_equal(e.msg, "status: field 'checkpoint.resumed_from': "
				    "not a string");
	}

	/* the high-water mark's writes: failing, why, what is covered */
	{
		const char *mk = "{\"checkpoint\":{\"failing\":false,\"mark\":{"
				 "\"covered_round\":48,\"failing\":true,\"error\":"
				 "\"cannot write high-water mark: EIO\",\"failures\":3,"
				 "\"holding\":true}}}";
		const char *bad_mark = "{\"checkpoint\":{\"mark\":{\"holding\":1}}}";

		assert_int_equal(syncer_status_parse(mk, strlen(mk), &s, &e), 0);
		assert_int_equal(s.ckpt.mark_failures, 3);
		assert_int_equal(s.ckpt.mark_holding, 1);
		status_progress_from_syncer(&s, &p);
		assert_int_equal(p.mark_failing, 1);
		assert_int_equal(p.mark_covered_round, 48);
		assert_string_equal(p.mark_error, "cannot write high-water mark: EIO");
		syncer_status_release(&s);
		assert_int_equal(syncer_status_parse(ok, strlen(ok), &s, &e), 0);
		status_progress_from_syncer(&s, &p);
		assert_int_equal(p.mark_failing, 0);   /* an older syncer */
		syncer_status_release(&s);
		assert_int_equal(syncer_status_parse(bad_mark, strlen(bad_mark),
						     &s, &e), -1);
		assert_string_equal(e.msg, "status: field 'checkpoint.mark.holding': "
				    "not a boolean");
	}

	/* the learners excluded: counted and named; -1 when not said */
	{
		const char *two = "{\"claims\":{\"cut\":9,\"excluded\":[1,4]}}";
		const char *none = "{\"claims\":{\"cut\":0,\"excluded\":[]}}";
		char body[600];
		int n = snprintf(body, sizeof(body), "{\"claims\":{\"excluded\":[");

		assert_int_equal(syncer_status_parse(two, strlen(two), &s, &e), 0);
		status_progress_from_syncer(&s, &p);
		assert_int_equal(p.excluded, 2);
		assert_string_equal(p.excluded_ids, "1, 4");
		assert_int_equal(syncer_status_parse(none, strlen(none), &s, &e), 0);
		status_progress_from_syncer(&s, &p);
		assert_int_equal(p.excluded, 0);
		assert_string_equal(p.excluded_ids, "");
		assert_int_equal(syncer_status_parse(ok, strlen(ok), &s, &e), 0);
		status_progress_from_syncer(&s, &p);
		assert_int_equal(p.excluded, -1);
		/* more than are kept: the first ones, and an ellipsis */
		for (int i = 0; i < 40; i++)
			n += snprintf(body + n, sizeof(body) - (size_t)n, "%s%d",
				      i ? "," : "", 1000 + i);
		n += snprintf(body + n, sizeof(body) - (size_t)n, "]}}");
		assert_int_equal(syncer_status_parse(body, (size_t)n, &s, &e), 0);
		status_progress_from_syncer(&s, &p);
		assert_int_equal(p.excluded, 40);
		assert_non_null(strstr(p.excluded_ids, "1000, 1001, "));
		assert_non_null(strstr(p.excluded_ids, ", …"));
		assert_true(strlen(p.excluded_ids) < sizeof(p.excluded_ids));
		/* the job's stored progress does not say */
		{
			json_t *j = json_pack("{s:i}", "round", 3);

			status_read_progress(j, &p);
			assert_int_equal(p.excluded, -1);
			json_decref(j);
		}
	}
}

/* A finished job: condition Complete (as batch/v1 Job), phase Succeeded;
 * a status written with the old type Succeeded reads as Complete. */
static void test_complete_condition(void **state)
{
	struct rc_output out;
	struct obs_progress p = { .have = 0 };
	struct status_input in = { &out, 3, NULL, 0, &p, 0, NULL, NULL, 1, 0, -1 };
	struct condition conds[COND_N];
	json_t *st, *c, *old;

	(void)state;
	memset(&out, 0, sizeof(out));
	out.phase = PHASE_SUCCEEDED;
	cond_set(&out.conds[COND_COMPLETE], 1, "BudgetReached", "the budget is reached",
		 "2027-01-15T09:00:00Z");
	st = status_build(&in);
	assert_string_equal(str(st, "phase"), "Succeeded");
	assert_int_equal(json_array_size(json_object_get(st, "conditions")), 1);
	c = json_array_get(json_object_get(st, "conditions"), 0);
	assert_string_equal(str(c, "type"), "Complete");
	assert_string_equal(str(c, "status"), "True");
	assert_string_equal(str(c, "reason"), "BudgetReached");
	json_decref(st);

	old = json_pack("{s:[{s:s, s:s, s:s, s:s}]}", "conditions", "type", "Succeeded",
			"status", "True", "reason", "LearnersCompleted",
			"lastTransitionTime", "2027-01-15T09:01:00Z");
	status_read_conditions(old, conds);
	assert_int_equal(conds[COND_COMPLETE].set, 1);
	assert_int_equal(conds[COND_COMPLETE].status, 1);
	assert_string_equal(conds[COND_COMPLETE].reason, "LearnersCompleted");
	assert_string_equal(conds[COND_COMPLETE].time, "2027-01-15T09:01:00Z");
	json_decref(old);
}

/* progress.updateTime: the wall clock of the syncer's /status read,
 * written as RFC 3339 and read back; absent while unknown. */
static void test_progress_update_time(void **state)
{
	struct rc_output out;
	struct obs_progress p = { .have = 1, .round = 4, .loss = NAN,
				  .update_time = 1800000000.0 }, back;
	struct status_input in = { &out, 1, NULL, 0, &p, 1, NULL, NULL, 1, 1, -1 };
	json_t *st;

	(void)state;
	memset(&out, 0, sizeof(out));
	st = status_build(&in);
	assert_string_equal(str(json_object_get(st, "progress"), "updateTime"),
			    "2027-01-15T08:00:00Z");
	memset(&back, 0, sizeof(back));
	status_read_progress(json_object_get(st, "progress"), &back);
	assert_float_equal(back.update_time, 1800000000.0, 1e-9);
	json_decref(st);
	p.update_time = 0;
	st = status_build(&in);
	assert_null(json_object_get(json_object_get(st, "progress"), "updateTime"));
	json_decref(st);
}

static json_t *prog(int round, const char *t, int done, double loss)
{
	json_t *st = json_pack("{s:s, s:{s:i, s:s, s:b}}", "phase", "Running",
			       "progress", "round", round, "updateTime", t, "done", done);

	if (!isnan(loss))
		json_object_set_new(json_object_get(st, "progress"), "loss", json_real(loss));
	return st;
}

/* Writes skipped while only progress ticks, within the threshold. */
static void test_should_write_threshold(void **state)
{
	json_t *old = prog(10, "2027-01-15T08:00:00Z", 0, 3.0), *b;

	(void)state;
	/* nothing changed */
	b = prog(10, "2027-01-15T08:00:00Z", 0, 3.0);
	assert_int_equal(status_should_write(old, b, 15), 0);
	json_decref(b);
	/* progress ticked 14 s later: skipped; 15 s later: written */
	b = prog(11, "2027-01-15T08:00:14Z", 0, 3.0);
	assert_int_equal(status_should_write(old, b, 15), 0);
	json_decref(b);
	b = prog(12, "2027-01-15T08:00:15Z", 0, 3.0);
	assert_int_equal(status_should_write(old, b, 15), 1);
	json_decref(b);
	/* anything else changed: written at once */
	b = prog(11, "2027-01-15T08:00:01Z", 0, 3.0);
	json_object_set_new(b, "phase", json_string("Restarting"));
	assert_int_equal(status_should_write(old, b, 15), 1);
	json_decref(b);
	/* done: written at once */
	b = prog(11, "2027-01-15T08:00:01Z", 1, 3.0);
	assert_int_equal(status_should_write(old, b, 15), 1);
	json_decref(b);
	json_decref(old);
	/* the first loss, and the first progress: written at once */
	old = prog(10, "2027-01-15T08:00:00Z", 0, NAN);
	b = prog(10, "2027-01-15T08:00:01Z", 0, 2.0);
	assert_int_equal(status_should_write(old, b, 15), 1);
	json_object_del(old, "progress");
	assert_int_equal(status_should_write(old, b, 15), 1);
	json_decref(b);
	/* no status read yet */
	b = prog(1, "2027-01-15T08:00:00Z", 0, NAN);
	assert_int_equal(status_should_write(NULL, b, 15), 1);
	json_decref(b);
	json_decref(old);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_build_and_read_back),
		cmocka_unit_test(test_progress_prefers_eval_loss),
		cmocka_unit_test(test_progress_from_syncer),
		cmocka_unit_test(test_checkpoint_from_syncer),
		cmocka_unit_test(test_progress_counts_stay_positive),
		cmocka_unit_test(test_complete_condition),
		cmocka_unit_test(test_progress_update_time),
		cmocka_unit_test(test_should_write_threshold),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
