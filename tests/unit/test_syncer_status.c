/*
 * syncer_status: a /status document captured from a running syncer read
 * field by field; truncated and garbage bodies, fields of the wrong type,
 * counts written as reals; the GET against a real HTTP server (body too
 * large, a handler past the server's limit, HTTP 404, a server too slow,
 * nobody listening).
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

#include "common/httpd.h"
#include "common/syncer_status.h"
#include "common/util.h"

/* `curl /status` of a syncer 10.6 s into a 2-learner job (ddiloco run). */
#define RUNNING "tests/data/status/running.json"

static char *load(const char *path, size_t *n)
{
	void *p = NULL;
	struct err e;

	if (file_read_all(path, 1 << 20, &p, n, &e))
		fail_msg("%s", e.msg);
	return p;
}

static void running_syncer_document(void **state)
{
	struct syncer_status s;
	struct err e;
	size_t n;
	char *text = load(RUNNING, &n);

	(void)state;
	assert_int_equal(syncer_status_parse(text, n, &s, &e), 0);
	assert_int_equal(s.round, 806);
	assert_int_equal(s.tokens, 1563392);
	assert_int_equal(s.tokens_merged, 1082267);
	assert_int_equal(s.done, 0);
	assert_float_equal(s.eval_loss, 2.4749361276626587, 1e-15);
	assert_int_equal(s.learners_connected, 2);
	assert_int_equal(s.learners_total, 2);
	assert_int_equal(s.merged, 868);
	assert_int_equal(s.late, 481);
	assert_int_equal(s.rejected, 17);
	assert_int_equal(s.empty, 0);
	assert_int_equal(s.bytes_in, 60098816);
	assert_int_equal(s.bytes_out, 71052324);
	assert_float_equal(s.uptime, 1.0, 0);
	assert_float_equal(s.goodput, 0.882059362251119, 1e-15);
	assert_float_equal(s.elapsed, 10.619781179000029, 1e-12);
	assert_int_equal(s.nevals, 64);
	assert_int_equal(s.evals[0].round, 10);
	assert_int_equal(s.evals[0].tokens, 0);
	assert_float_equal(s.evals[0].loss, 3.6914612054824829, 1e-15);
	assert_float_equal(s.evals[0].time, 0.49229348300002584, 1e-15);
	assert_int_equal(s.evals[63].round, 800);
	assert_int_equal(s.evals[63].tokens, 1563392);
	assert_float_equal(s.evals[63].loss, s.eval_loss, 0);
	assert_float_equal(s.evals[63].time, 10.408259283999996, 1e-12);
	syncer_status_release(&s);
	assert_null(s.evals);
	free(text);
}

/* "pace" and "goodput_breakdown": figures; absent reads NAN, a wrong type
 * is an error naming the field. */
static void pace_and_breakdown(void **state)
{
	static const char doc[] =
		"{\"round\": 10, \"pace\": {\"h\": 4, \"steps_per_round\": 1,"
		" \"h_effective\": 4.2, \"steps_per_round_effective\": 1.05,"
		" \"kth_steps\": 42, \"rounds\": 40, \"steps_skipped\": 0},"
		" \"goodput_breakdown\": {\"learner_seconds\": 100, \"merged\": 0.5,"
		" \"late\": 0.05, \"refused\": 0.01, \"overwritten\": 0.3,"
		" \"restarts\": 0.02, \"in_flight\": 0.02, \"not_training\": 0.1,"
		" \"merged_again\": 0.03}}";
	static const char bad[] = "{\"goodput_breakdown\": {\"late\": \"x\"}}";
	struct syncer_status s;
	struct err e;
	size_t n;
	char *text = load(RUNNING, &n);

	(void)state;
	assert_int_equal(syncer_status_parse(doc, strlen(doc), &s, &e), 0);
	assert_float_equal(s.pace.h, 4, 0);
	assert_float_equal(s.pace.h_effective, 4.2, 1e-12);
	assert_float_equal(s.pace.steps_per_round_effective, 1.05, 1e-12);
	assert_float_equal(s.pace.kth_steps, 42, 0);
	assert_int_equal(s.pace.rounds, 40);
	assert_float_equal(s.gpb.learner_seconds, 100, 0);
	assert_float_equal(s.gpb.merged, 0.5, 0);
	assert_float_equal(s.gpb.overwritten, 0.3, 0);
	assert_float_equal(s.gpb.not_training, 0.1, 0);
	assert_float_equal(s.gpb.merged_again, 0.03, 0);
	syncer_status_release(&s);
	/* an older syncer: none of it */
	assert_int_equal(syncer_status_parse(text, n, &s, &e), 0);
	assert_true(isnan(s.pace.h_effective) && isnan(s.gpb.merged));
	syncer_status_release(&s);
	free(text);
	assert_int_equal(syncer_status_parse("{\"pace\": 3}", 11, &s, &e), -1);
	assert_string_equal(e.msg, "status: field 'pace': not an object");
	assert_int_equal(syncer_status_parse(bad, strlen(bad), &s, &e), -1);
	assert_string_equal(e.msg, "status: field 'goodput_breakdown.late': not a number");
}

static void truncated_and_garbage_are_told(void **state)
{
	static const char *const not_objects[] = { "[1, 2]", "[]", "[{}]" };
	struct syncer_status s = { .round = 7 };
	struct err e;
	size_t n;
	char *text = load(RUNNING, &n);

	(void)state;
	/* cut anywhere: in a key, in a number, before the closing brace */
	for (size_t cut = 0; cut < n - 1; cut += 97) {
		assert_int_equal(syncer_status_parse(text, cut, &s, &e), -1);
		if (!strstr(e.msg, "status: not JSON: line 1 column"))
			fail_msg("cut at %zu: %s", cut, e.msg);
	}
	assert_int_equal(syncer_status_parse(text, n - 2, &s, &e), -1);
	assert_int_equal(syncer_status_parse("<html>502 Bad Gateway</html>", 28, &s, &e), -1);
	assert_non_null(strstr(e.msg, "status: not JSON: line 1 column 1: "));
	assert_int_equal(syncer_status_parse(NULL, 0, &s, &e), -1);
	assert_non_null(strstr(e.msg, "not JSON"));
	assert_int_equal(syncer_status_parse("42", 2, &s, &e), -1);
	assert_non_null(strstr(e.msg, "not JSON"));
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(syncer_status_parse(not_objects[i],
			strlen(not_objects[i]), &s, &e), -1);
		assert_string_equal(e.msg, "status: not a JSON object");
	}
	assert_int_equal(s.round, 7);   /* never written on failure */
	free(text);
}

static int parse(const char *json, struct syncer_status *s, struct err *e)
{
	return syncer_status_parse(json, strlen(json), s, e);
}

static void fields_by_the_contract(void **state)
{
	static const struct { const char *json, *msg; } bad[] = {
		{ "{\"round\": \"5\"}", "status: field 'round': not a count" },
		{ "{\"round\": -1}", "status: field 'round': not a count" },
		{ "{\"tokens\": 1.5}", "status: field 'tokens': not a count" },
		{ "{\"answers\": {\"late\": -3}}", "status: field 'answers.late': not a count" },
		{ "{\"answers\": [1]}", "status: field 'answers': not an object" },
		{ "{\"answers\": {\"stale\": 0.5}}", "status: field 'answers.stale': not a count" },
		{ "{\"invariants\": 0}", "status: field 'invariants': not an object" },
		{ "{\"invariants\": {\"double_merged_steps\": -1}}",
		  "status: field 'invariants.double_merged_steps': not a count" },
		{ "{\"done\": 1}", "status: field 'done': not a boolean" },
		{ "{\"uptime\": \"1.0\"}", "status: field 'uptime': not a number" },
		{ "{\"uptime_span\": true}", "status: field 'uptime_span': not a number" },
		{ "{\"learners_total\": 3000000000}",
		  "status: field 'learners_total': 3000000000 is too large" },
		{ "{\"eval_history\": {}}", "status: field 'eval_history': not an array" },
		{ "{\"eval_history\": [{\"round\": 1}, 7]}",
		  "status: field 'eval_history[1]': not an object" },
		{ "{\"eval_history\": [{\"loss\": true}]}",
		  "status: field 'eval_history[0].loss': not a number" },
		{ "{\"checkpoint\": {\"fits\": 1}}",
		  "status: field 'checkpoint.fits': not a boolean" },
		{ "{\"checkpoint\": {\"needed_bytes\": -5}}",
		  "status: field 'checkpoint.needed_bytes': not a count" },
	};
	struct syncer_status s;
	struct err e;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(parse(bad[i].json, &s, &e), -1);
		assert_string_equal(e.msg, bad[i].msg);
	}
	/* missing: counts 0, figures NAN (not 0: "unknown" is not "none") */
	assert_int_equal(parse("{}", &s, &e), 0);
	assert_int_equal(s.round, 0);
	assert_int_equal(s.done, 0);
	assert_true(isnan(s.eval_loss) && isnan(s.uptime) && isnan(s.goodput) &&
		    isnan(s.elapsed) && isnan(s.uptime_span));
	assert_int_equal(s.nevals, 0);
	assert_int_equal(parse("{\"uptime\": 0.5, \"uptime_span\": 12.5}", &s, &e), 0);
	assert_float_equal(s.uptime_span, 12.5, 0);
	assert_int_equal(s.have_invariants, 0);
	assert_int_equal(s.ckpt.fits, -1);   /* an older syncer: not said */
	/* whether a checkpoint fits on the volume (docs/status.md) */
	assert_int_equal(parse("{\"checkpoint\": {\"failing\": false, \"fits\": false,"
			       " \"needed_bytes\": 3000000000, \"volume_free_bytes\": 1000}}",
			       &s, &e), 0);
	assert_int_equal(s.ckpt.fits, 0);
	assert_int_equal(s.ckpt.needed_bytes, 3000000000ULL);
	assert_int_equal(s.ckpt.volume_free_bytes, 1000);
	assert_int_equal(parse("{\"checkpoint\": {\"fits\": true}}", &s, &e), 0);
	assert_int_equal(s.ckpt.fits, 1);
	assert_int_equal(parse("{\"checkpoint\": {\"failing\": false}}", &s, &e), 0);
	assert_int_equal(s.ckpt.fits, -1);
	/* the answer bounds and the invariants (docs/status.md) */
	assert_int_equal(parse("{\"answers\": {\"stale\": 3, \"clipped\": 4},"
			       " \"invariants\": {\"merged_steps\": 900,"
			       " \"double_merged_steps\": 0, \"repeat_base\": 12,"
			       " \"stale_held\": 5, \"stale_merged\": 3}}",
			       &s, &e), 0);
	assert_int_equal(s.stale, 3);
	assert_int_equal(s.clipped, 4);
	assert_int_equal(s.have_invariants, 1);
	assert_int_equal(s.merged_steps, 900);
	assert_int_equal(s.double_merged_steps, 0);
	assert_int_equal(s.repeat_base, 12);
	assert_int_equal(s.stale_held, 5);
	assert_int_equal(s.stale_merged, 3);
	/* what learners claimed beyond the bounds (docs/syncer.md, Bounds) */
	assert_int_equal(parse("{\"answers\": {\"refused_bounds\": 7, \"capped\": 2,"
			       " \"refused_history\": 6, \"refused_size\": 1},"
			       " \"steps_undone\": 8,"
			       " \"heartbeats\": {\"received\": 40, \"refused\": 5}}",
			       &s, &e), 0);
	assert_int_equal(s.refused_bounds, 7);
	assert_int_equal(s.capped, 2);
	assert_int_equal(s.refused_history, 6);
	assert_int_equal(s.refused_size, 1);
	assert_int_equal(s.steps_undone, 8);
	assert_int_equal(s.heartbeats, 40);
	assert_int_equal(s.heartbeats_refused, 5);
	assert_int_equal(parse("{\"heartbeats\": 3}", &s, &e), -1);
	assert_string_equal(e.msg, "status: field 'heartbeats': not an object");
	/* the claims cut and the learners excluded (docs/status.md): an
	 * older syncer says nothing; ids past the kept ones are counted */
	assert_int_equal(parse("{\"round\": 1}", &s, &e), 0);
	assert_int_equal(s.have_claims, 0);
	assert_int_equal(parse("{\"claims\": {\"cut\": 12, \"excluded\": [1, 4]}}",
			       &s, &e), 0);
	assert_int_equal(s.have_claims, 1);
	assert_int_equal(s.claims_cut, 12);
	assert_int_equal(s.nexcluded, 2);
	assert_int_equal(s.excluded[0], 1);
	assert_int_equal(s.excluded[1], 4);
	{
		char doc[512];
		size_t n = (size_t)snprintf(doc, sizeof(doc),
					    "{\"claims\": {\"excluded\": [");

		for (int i = 0; i < 20; i++)
			n += (size_t)snprintf(doc + n, sizeof(doc) - n, "%s%d",
					      i ? ", " : "", 3 * i);
		snprintf(doc + n, sizeof(doc) - n, "]}}");
		assert_int_equal(parse(doc, &s, &e), 0);
		assert_int_equal(s.nexcluded, 20);
		assert_int_equal(s.excluded[SYNCER_STATUS_MAX_EXCLUDED - 1],
				 3 * (SYNCER_STATUS_MAX_EXCLUDED - 1));
	}
	assert_int_equal(parse("{\"claims\": {\"excluded\": [4, 1]}}", &s, &e), -1);
	assert_string_equal(e.msg, "status: field 'claims.excluded': item 1 is "
			    "not a learner id above the one before it");
	assert_int_equal(parse("{\"claims\": {\"excluded\": [\"1\"]}}", &s, &e), -1);
	assert_int_equal(parse("{\"claims\": {\"excluded\": 1}}", &s, &e), -1);
	assert_string_equal(e.msg, "status: field 'claims.excluded': not a list");
	assert_int_equal(parse("{\"claims\": [1]}", &s, &e), -1);
	assert_string_equal(e.msg, "status: field 'claims': not an object");
	assert_int_equal(parse("{\"claims\": {\"cut\": -1}}", &s, &e), -1);
	assert_string_equal(e.msg, "status: field 'claims.cut': not a count");
	syncer_status_release(&s);
	/* a count written as a whole real reads as the integer; null is none */
	assert_int_equal(parse("{\"tokens\": 1.5e6, \"round\": 12.0, \"done\": true,"
			       " \"eval_loss\": null, \"goodput\": 1,"
			       " \"eval_history\": [{\"round\": 3, \"tokens\": 4096,"
			       " \"loss\": null, \"time\": 2}]}", &s, &e), 0);
	assert_int_equal(s.tokens, 1500000);
	assert_int_equal(s.round, 12);
	assert_int_equal(s.done, 1);
	assert_true(isnan(s.eval_loss));
	assert_float_equal(s.goodput, 1.0, 0);
	assert_int_equal(s.nevals, 1);
	assert_int_equal(s.evals[0].tokens, 4096);
	assert_true(isnan(s.evals[0].loss));
	assert_float_equal(s.evals[0].time, 2.0, 0);
	syncer_status_release(&s);
}

/* ---- the GET ---------------------------------------------------------- */

struct srv {
	char *doc;
	size_t len;
};

static int serve(void *ctx, const char *path, struct buf *body,
		 const char **content_type)
{
	struct srv *v = ctx;

	*content_type = "application/json";
	if (!strcmp(path, "/status")) {
		buf_append(body, v->doc, v->len);
		return 200;
	}
	if (!strcmp(path, "/half")) {
		buf_append(body, v->doc, v->len / 2);
		return 200;
	}
	if (!strcmp(path, "/big")) {
		for (size_t i = 0; i <= SYNCER_STATUS_MAX_BODY / v->len; i++)
			buf_append(body, v->doc, v->len);
		return 200;
	}
	if (!strcmp(path, "/overflow")) {
		/* past httpd's own 16 MiB: the server answers 500 */
		while (!buf_append(body, v->doc, v->len))
			;
		return 200;
	}
	if (!strcmp(path, "/slow")) {
		sleep_seconds(1.5);
		buf_append(body, v->doc, v->len);
		return 200;
	}
	return 404;
}

static void fetch_from_a_server(void **state)
{
	static const struct { const char *path, *msg; } refused[] = {
		{ "/half", "/half': not JSON: line 1 column" },
		{ "/big", "/big': body larger than 4194304 bytes" },
		{ "/overflow", "/overflow': HTTP 500" },
		{ "/nothing", "/nothing': HTTP 404" },
	};
	struct srv v;
	struct syncer_status s;
	struct httpd *h;
	struct err e;
	char url[128];
	CURL *c = curl_easy_init();
	double t;
	int port;

	(void)state;
	v.doc = load(RUNNING, &v.len);
	h = httpd_start("127.0.0.1", 0, serve, &v, &e);
	assert_non_null(h);
	port = httpd_port(h);
	assert_non_null(c);

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/status", port);
	assert_int_equal(syncer_status_fetch(NULL, url, 5, &s, &e), 0);
	assert_int_equal(s.round, 806);
	assert_int_equal(s.nevals, 64);
	syncer_status_release(&s);
	/* a reused handle, twice */
	for (int i = 0; i < 2; i++) {
		assert_int_equal(syncer_status_fetch(c, url, 5, &s, &e), 0);
		assert_int_equal(s.rejected, 17);
		syncer_status_release(&s);
	}

	/* each refused, with the reason after the url; reused handle or not */
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port,
			 refused[i].path);
		assert_int_equal(syncer_status_fetch(i % 2 ? NULL : c, url, 5,
						     &s, &e), -1);
		if (!strstr(e.msg, refused[i].msg))
			fail_msg("%s: %s", refused[i].path, e.msg);
	}
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/slow", port);
	t = clock_mono();
	assert_int_equal(syncer_status_fetch(c, url, 0.3, &s, &e), -1);
	assert_in_range((long)((clock_mono() - t) * 1000), 250, 1400);
	assert_non_null(strstr(e.msg, "/slow': "));
	snprintf(url, sizeof(url), "file:///etc/hostname");
	assert_int_equal(syncer_status_fetch(NULL, url, 1, &s, &e), -1);

	httpd_stop(h);
	/* nobody listens there any more */
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/status", port);
	assert_int_equal(syncer_status_fetch(c, url, 1, &s, &e), -1);
	assert_non_null(strstr(e.msg, "status: 'http://127.0.0.1:"));
	curl_easy_cleanup(c);
	free(v.doc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(running_syncer_document),
		cmocka_unit_test(pace_and_breakdown),
		cmocka_unit_test(truncated_and_garbage_are_told),
		cmocka_unit_test(fields_by_the_contract),
		cmocka_unit_test(fetch_from_a_server),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
