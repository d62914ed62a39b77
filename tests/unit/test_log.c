/* log: the text and json lines to the byte, JSON escaping of quotes,
 * control characters and bytes that are not UTF-8, lines cut short that
 * still parse, and log_msg's own lines on stderr read back with jansson. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

/* 2027-01-15T08:00:00Z and 123.456789 ms */
static const struct timespec T = { 1800000000, 123456789 };

static void text_line_exact(void **state)
{
	char out[256];
	size_t n;

	(void)state;
	n = log_format_line(out, sizeof(out), LOG_FORMAT_TEXT, &T, LOG_INFO,
			    "syncer", "gRPC on 0.0.0.0:7000");
	assert_string_equal(out, "2027-01-15T08:00:00.123Z info  syncer: gRPC on 0.0.0.0:7000");
	assert_int_equal(n, strlen(out));
	log_format_line(out, sizeof(out), LOG_FORMAT_TEXT, &T, LOG_WARN,
			"learner-2", "x");
	assert_string_equal(out, "2027-01-15T08:00:00.123Z warn  learner-2: x");
	log_format_line(out, sizeof(out), LOG_FORMAT_TEXT, &T, LOG_ERROR, "operator", "y");
	assert_string_equal(out, "2027-01-15T08:00:00.123Z error operator: y");
	log_format_line(out, sizeof(out), LOG_FORMAT_TEXT, &T, LOG_DEBUG, "run", "z");
	assert_string_equal(out, "2027-01-15T08:00:00.123Z debug run: z");
	/* cut to the buffer, still ended */
	n = log_format_line(out, 11, LOG_FORMAT_TEXT, &T, LOG_INFO, "syncer", "m");
	assert_string_equal(out, "2027-01-15");
	assert_int_equal(n, 10);
}

static void json_line_exact(void **state)
{
	static const struct {
		enum log_level lv;
		const char *severity;
	} lv[] = { { LOG_DEBUG, "DEBUG" }, { LOG_INFO, "INFO" },
		   { LOG_WARN, "WARNING" }, { LOG_ERROR, "ERROR" } };
	char out[256], want[256];
	size_t n;

	(void)state;
	for (size_t i = 0; i < sizeof(lv) / sizeof(lv[0]); i++) {
		n = log_format_line(out, sizeof(out), LOG_FORMAT_JSON, &T, lv[i].lv,
				    "sidecar", "round 3 pushed");
		snprintf(want, sizeof(want), "{\"time\":\"2027-01-15T08:00:00.123Z\","
			 "\"severity\":\"%s\",\"component\":\"sidecar\","
			 "\"message\":\"round 3 pushed\"}", lv[i].severity);
		assert_string_equal(out, want);
		assert_int_equal(n, strlen(want));
	}
}

/* Each case: the message, its JSON string's inside, and what a JSON
 * reader gets back. */
static void json_escapes(void **state)
{
	static const struct {
		const char *in, *escaped, *parsed;
	} c[] = {
		{ "say \"hi\" \\ 'x'", "say \\\"hi\\\" \\\\ 'x'", "say \"hi\" \\ 'x'" },
		{ "a\nb\rc\td\be\ff", "a\\nb\\rc\\td\\be\\ff", "a\nb\rc\td\be\ff" },
		{ "\x01\x1f\x7f", "\\u0001\\u001f\x7f", "\x01\x1f\x7f" },
		/* é, €, 😀 and U+10FFFF are well formed and stay as they are */
		{ "\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf",
		  "\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf",
		  "\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf" },
		/* a stray byte, an overlong NUL, a surrogate, past U+10FFFF,
		 * and a sequence cut by the end: one U+FFFD per bad byte */
		{ "\xff|\xc0\x80|\xed\xa0\x80|\xf4\x90\x80\x80|\xe2\x82",
		  "\\ufffd|\\ufffd\\ufffd|\\ufffd\\ufffd\\ufffd|"
		  "\\ufffd\\ufffd\\ufffd\\ufffd|\\ufffd\\ufffd",
		  "\xef\xbf\xbd|\xef\xbf\xbd\xef\xbf\xbd|\xef\xbf\xbd\xef\xbf\xbd"
		  "\xef\xbf\xbd|\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd|"
		  "\xef\xbf\xbd\xef\xbf\xbd" },
	};
	char out[512], want[512];
	json_error_t je;
	json_t *o;

	(void)state;
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		log_format_line(out, sizeof(out), LOG_FORMAT_JSON, &T, LOG_INFO,
				"learner-\"0\"", c[i].in);
		snprintf(want, sizeof(want), "{\"time\":\"2027-01-15T08:00:00.123Z\","
			 "\"severity\":\"INFO\",\"component\":\"learner-\\\"0\\\"\","
			 "\"message\":\"%s\"}", c[i].escaped);
		assert_string_equal(out, want);
		/* jansson refuses invalid UTF-8 and raw control characters */
		o = json_loads(out, 0, &je);
		if (!o)
			fail_msg("case %zu does not parse: %s: %s", i, je.text, out);
		assert_string_equal(json_string_value(json_object_get(o, "message")),
				    c[i].parsed);
		assert_string_equal(json_string_value(json_object_get(o, "component")),
				    "learner-\"0\"");
		json_decref(o);
	}
}

/* Any buffer size: empty (the head does not fit) or one whole object,
 * never a cut escape. */
static void json_cut_still_parses(void **state)
{
	const char *msg = "\"\\\n\x01\xff\xe2\x82\xac\xf0\x9f\x98\x80 tail";
	char out[400];
	json_error_t je;

	(void)state;
	for (size_t n = 1; n <= sizeof(out); n++) {
		size_t k = log_format_line(out, n, LOG_FORMAT_JSON, &T, LOG_ERROR,
					   "syncer", msg);
		json_t *o;

		assert_true(k < n);
		assert_int_equal(strlen(out), k);
		if (!k)
			continue;
		if (!(o = json_loads(out, 0, &je)))
			fail_msg("n %zu: does not parse: %s: %s", n, je.text, out);
		assert_string_equal(json_string_value(json_object_get(o, "severity")),
				    "ERROR");
		json_decref(o);
	}
	/* the whole of it from some size on */
	log_format_line(out, sizeof(out), LOG_FORMAT_JSON, &T, LOG_ERROR, "syncer", msg);
	assert_non_null(strstr(out, "\\ufffd\xe2\x82\xac\xf0\x9f\x98\x80 tail\"}"));
}

/* stderr into a file while fn runs; its bytes into out. */
static void capture(void (*fn)(void), char *out, size_t n)
{
	FILE *f = tmpfile();
	int saved = dup(2);
	size_t k;

	assert_non_null(f);
	assert_true(saved >= 0);
	assert_true(dup2(fileno(f), 2) >= 0);
	fn();
	fflush(stderr);
	assert_true(dup2(saved, 2) >= 0);
	close(saved);
	rewind(f);
	k = fread(out, 1, n - 1, f);
	out[k] = '\0';
	fclose(f);
}

static void log_some(void)
{
	char big[5000];

	memset(big, 'b', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	log_init("learner-2");
	log_debug("dropped below the threshold");
	log_info("joined as learner %d", 2);
	log_warn("quote \" tab \t bell \a byte \xfe");
	log_error("%s", big);
}

/* log_msg's lines: one JSON object each, in order, the message cut at
 * 2047 bytes; the time now's to the second. */
static void log_msg_writes_json_lines(void **state)
{
	static const char *const sev[] = { "INFO", "WARNING", "ERROR" };
	static char got[65536];
	char *line, *save = NULL;
	json_error_t je;
	int i = 0;

	(void)state;
	setenv("DDILOCO_LOG_FORMAT", "json", 1);
	capture(log_some, got, sizeof(got));
	for (line = strtok_r(got, "\n", &save); line; line = strtok_r(NULL, "\n", &save), i++) {
		json_t *o = json_loads(line, 0, &je);
		const char *t;
		struct tm tm = { 0 };
		struct timespec ts;
		time_t now, at;

		if (!o)
			fail_msg("line %d does not parse: %s: %s", i, je.text, line);
		assert_true(i < 3);
		assert_string_equal(json_string_value(json_object_get(o, "severity")), sev[i]);
		assert_string_equal(json_string_value(json_object_get(o, "component")),
				    "learner-2");
		t = json_string_value(json_object_get(o, "time"));
		assert_int_equal(strlen(t), 24);
		assert_non_null(strptime(t, "%Y-%m-%dT%H:%M:%S", &tm));
		assert_true(t[19] == '.' && t[23] == 'Z');
		at = timegm(&tm);
		/* the clock the logger reads: time() may read a coarser one,
		 * a few ms behind, and so a second earlier at its turn */
		clock_gettime(CLOCK_REALTIME, &ts);
		now = ts.tv_sec;
		assert_true(at <= now && now - at < 60);
		if (i == 0)
			assert_string_equal(json_string_value(json_object_get(o, "message")),
					    "joined as learner 2");
		if (i == 1)
			assert_string_equal(json_string_value(json_object_get(o, "message")),
					    "quote \" tab \t bell \a byte \xef\xbf\xbd");
		if (i == 2)
			assert_int_equal(strlen(json_string_value(json_object_get(o,
					 "message"))), 2047);
		json_decref(o);
	}
	assert_int_equal(i, 3);
	unsetenv("DDILOCO_LOG_FORMAT");
	log_set_format(LOG_FORMAT_TEXT);
}

static void log_one(void)
{
	log_init("operator");
	log_info("serving /metrics");
}

/* Text by default, with the date; a bad DDILOCO_LOG_FORMAT is said, and
 * text it is. */
static void text_by_default_and_bad_env(void **state)
{
	const char *w = " warn  operator: log: DDILOCO_LOG_FORMAT must be text "
			"or json, got 'xml': logging text\n";
	char got[1024], *sp;

	(void)state;
	unsetenv("DDILOCO_LOG_FORMAT");
	capture(log_one, got, sizeof(got));
	assert_int_equal(strlen(got), 24 + strlen(" info  operator: serving /metrics\n"));
	assert_true(got[4] == '-' && got[10] == 'T' && got[23] == 'Z');
	assert_string_equal(got + 24, " info  operator: serving /metrics\n");
	setenv("DDILOCO_LOG_FORMAT", "xml", 1);
	capture(log_one, got, sizeof(got));
	sp = strchr(got, ' ');
	assert_non_null(sp);
	assert_memory_equal(sp, w, strlen(w));
	assert_non_null(strstr(got, "Z info  operator: serving /metrics\n"));
	unsetenv("DDILOCO_LOG_FORMAT");
}

/* --log-format: json or text, set and exported; anything else refused. */
static void cli_option(void **state)
{
	const struct cli_option opts[] = { LOG_CLI_OPTION(), CLI_END() };
	char a0[] = "x", a1[] = "--log-format=json", a2[] = "--log-format", a3[] = "xml";
	char *argv[] = { a0, a1, NULL };
	char *bad[] = { a0, a2, a3, NULL };
	struct err e;

	(void)state;
	unsetenv("DDILOCO_LOG_FORMAT");
	assert_int_equal(cli_parse(opts, 2, argv, &e), 0);
	assert_string_equal(getenv("DDILOCO_LOG_FORMAT"), "json");
	assert_int_equal(cli_parse(opts, 3, bad, &e), -1);
	assert_string_equal(e.msg, "option '--log-format' must be text or json, got 'xml'");
	assert_string_equal(getenv("DDILOCO_LOG_FORMAT"), "json");
	unsetenv("DDILOCO_LOG_FORMAT");
	log_set_format(LOG_FORMAT_TEXT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(text_line_exact),
		cmocka_unit_test(json_line_exact),
		cmocka_unit_test(json_escapes),
		cmocka_unit_test(json_cut_still_parses),
		cmocka_unit_test(log_msg_writes_json_lines),
		cmocka_unit_test(text_by_default_and_bad_env),
		cmocka_unit_test(cli_option),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
