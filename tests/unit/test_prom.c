/*
 * prom: the Prometheus text writer, read back by a small exposition-format
 * checker (every family has HELP then TYPE before its samples, names and
 * label names valid, label values properly quoted, values parse), and the
 * sidecar's real /metrics text through the same checker.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/exchange.h"
#include "common/prom.h"
#include "sidecar/sidecar.h"

/* ---- the checker ---------------------------------------------------- */

struct check {
	int families, samples;
	char why[160];               /* the first problem, "" if none */
};

static int refuse(struct check *c, int line, const char *what)
{
	snprintf(c->why, sizeof(c->why), "line %d: %s", line, what);
	return -1;
}

static int name_char(char ch, int first, int colon)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' ||
	       (colon && ch == ':') || (!first && ch >= '0' && ch <= '9');
}

/* Length of a valid name at s (metric names may hold ':'); 0 if none. */
static size_t name_len(const char *s, int colon)
{
	size_t n = 0;

	while (s[n] && name_char(s[n], n == 0, colon))
		n++;
	return n;
}

static int value_ok(const char *s)
{
	char *end;

	if (!strcmp(s, "NaN") || !strcmp(s, "+Inf") || !strcmp(s, "-Inf"))
		return 1;
	if (!*s || !(*s == '-' || *s == '+' || *s == '.' || (*s >= '0' && *s <= '9')))
		return 0;   /* strtod would also take "nan", "inf", hex */
	strtod(s, &end);
	return *end == '\0';
}

/* {name="value",...}: returns the length consumed, 0 when malformed. */
static size_t labels_len(const char *s)
{
	size_t i = 1, n;

	if (*s != '{')
		return 0;
	for (;;) {
		if (!(n = name_len(s + i, 0)))
			return 0;
		i += n;
		if (s[i++] != '=' || s[i++] != '"')
			return 0;
		while (s[i] != '"') {
			if (!s[i] || s[i] == '\n')
				return 0;
			if (s[i] == '\\') {
				if (s[i + 1] != '\\' && s[i + 1] != '"' && s[i + 1] != 'n')
					return 0;
				i++;
			}
			i++;
		}
		i++;
		if (s[i] == '}')
			return i + 1;
		if (s[i++] != ',')
			return 0;
	}
}

/* The sample name l[0..n) is the family's, or a summary's _sum or _count. */
static int in_family(const char *l, size_t n, const char *family,
		     const char *type)
{
	size_t f = strlen(family);

	if (n < f || strncmp(l, family, f))
		return 0;
	if (n == f)
		return 1;
	if (!strcmp(type, "histogram") && n == f + 7 && !strncmp(l + f, "_bucket", 7))
		return 1;
	return (!strcmp(type, "summary") || !strcmp(type, "histogram")) &&
	       ((n == f + 4 && !strncmp(l + f, "_sum", 4)) ||
		(n == f + 6 && !strncmp(l + f, "_count", 6)));
}

static int check_text(const char *text, struct check *c)
{
	char family[128] = "", type[16] = "", seen[64][128];
	int nseen = 0, line = 0;
	const char *p = text;

	memset(c, 0, sizeof(*c));
	if (!text || !*text)
		return refuse(c, 0, "empty");
	while (*p) {
		const char *nl = strchr(p, '\n');
		char l[1024];
		size_t n;

		line++;
		if (!nl)
			return refuse(c, line, "no newline at the end");
		if ((size_t)(nl - p) >= sizeof(l))
			return refuse(c, line, "too long");
		memcpy(l, p, (size_t)(nl - p));
		l[nl - p] = '\0';
		p = nl + 1;
		if (!strncmp(l, "# HELP ", 7)) {
			const char *t;
			char want[160];

			n = name_len(l + 7, 1);
			if (!n || n >= sizeof(family) || l[7 + n] != ' ')
				return refuse(c, line, "bad HELP name");
			memcpy(family, l + 7, n);
			family[n] = '\0';
			for (int i = 0; i < nseen; i++)
				if (!strcmp(seen[i], family))
					return refuse(c, line, "family twice");
			if (nseen < 64)
				snprintf(seen[nseen++], sizeof(seen[0]), "%s", family);
			for (t = l + 8 + n; *t; t++)
				if (*t == '\\' && t[1] != '\\' && t[1] != 'n')
					return refuse(c, line, "bad escape in HELP");
				else if (*t == '\\')
					t++;
			/* TYPE must come next, for the same name */
			nl = strchr(p, '\n');
			snprintf(want, sizeof(want), "# TYPE %s ", family);
			if (!nl || strncmp(p, want, strlen(want)))
				return refuse(c, line + 1, "HELP without its TYPE");
			n = (size_t)(nl - p) - strlen(want);
			if (n >= sizeof(type))
				return refuse(c, line + 1, "bad TYPE");
			memcpy(type, p + strlen(want), n);
			type[n] = '\0';
			if (strcmp(type, "counter") && strcmp(type, "gauge") &&
			    strcmp(type, "summary") && strcmp(type, "histogram") &&
			    strcmp(type, "untyped"))
				return refuse(c, line + 1, "unknown TYPE");
			p = nl + 1;
			line++;
			c->families++;
			continue;
		}
		if (l[0] == '#')
			return refuse(c, line, "comment that is not HELP");
		n = name_len(l, 1);
		if (!n)
			return refuse(c, line, "bad sample name");
		if (!family[0])
			return refuse(c, line, "sample before any HELP and TYPE");
		if (!in_family(l, n, family, type))
			return refuse(c, line, "sample outside its family");
		if (l[n] == '{') {
			size_t k = labels_len(l + n);
			if (!k)
				return refuse(c, line, "bad labels");
			n += k;
		}
		if (l[n] != ' ' || !value_ok(l + n + 1))
			return refuse(c, line, "bad value");
		c->samples++;
	}
	return 0;
}

/* ---- the writer ----------------------------------------------------- */

static void writes_families_and_samples(void **state)
{
	struct buf b;
	struct check c;

	(void)state;
	buf_init(&b, 1 << 16);
	prom_family(&b, "t_answers_total", PROM_COUNTER, "Answers by outcome.");
	prom_u64(&b, "t_answers_total", PROM_LABELS("result", "merged"), 868);
	prom_u64(&b, "t_answers_total", PROM_LABELS("result", "late"), 481);
	prom_family(&b, "t_wait_seconds", PROM_SUMMARY, "Time to quorum.");
	prom_double(&b, "t_wait_seconds_sum", NULL, 13.252385);
	prom_u64(&b, "t_wait_seconds_count", NULL, 988);
	prom_gauge(&b, "t_uptime_ratio", "Share of wall time.", 1.0);
	prom_counter(&b, "t_bytes_total", "Bytes.", UINT64_MAX);
	prom_family(&b, "t_step", PROM_GAUGE, "Two labels.");
	prom_u64(&b, "t_step", PROM_LABELS("learner", "0", "role", "a"), 3);
	assert_int_equal(buf_error(&b), BUF_OK);
	assert_string_equal(b.data,
		"# HELP t_answers_total Answers by outcome.\n"
		"# TYPE t_answers_total counter\n"
		"t_answers_total{result=\"merged\"} 868\n"
		"t_answers_total{result=\"late\"} 481\n"
		"# HELP t_wait_seconds Time to quorum.\n"
		"# TYPE t_wait_seconds summary\n"
		"t_wait_seconds_sum 13.252385\n"
		"t_wait_seconds_count 988\n"
		"# HELP t_uptime_ratio Share of wall time.\n"
		"# TYPE t_uptime_ratio gauge\n"
		"t_uptime_ratio 1\n"
		"# HELP t_bytes_total Bytes.\n"
		"# TYPE t_bytes_total counter\n"
		"t_bytes_total 18446744073709551615\n"
		"# HELP t_step Two labels.\n"
		"# TYPE t_step gauge\n"
		"t_step{learner=\"0\",role=\"a\"} 3\n");
	assert_int_equal(check_text(b.data, &c), 0);
	assert_string_equal(c.why, "");
	assert_int_equal(c.families, 5);
	assert_int_equal(c.samples, 7);
	buf_release(&b);
}

static void values_read_back(void **state)
{
	const double v[] = { 0.1, 1.0 / 3, 2.5e-300, -7, 1e21, 0.8820593622511190 };
	struct buf b;
	struct check c;

	(void)state;
	buf_init(&b, 1 << 16);
	prom_family(&b, "t_v", PROM_GAUGE, "Values.");
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		const char *line;

		buf_reset(&b);
		prom_double(&b, "t_v", NULL, v[i]);
		line = strchr(b.data, ' ');
		assert_non_null(line);
		assert_true(strtod(line + 1, NULL) == v[i]);
	}
	buf_reset(&b);
	prom_double(&b, "t_v", NULL, 0.1);
	assert_string_equal(b.data, "t_v 0.1\n");
	buf_reset(&b);
	prom_family(&b, "t_v", PROM_GAUGE, "Values.");
	prom_double(&b, "t_v", PROM_LABELS("k", "nan"), NAN);
	prom_double(&b, "t_v", PROM_LABELS("k", "inf"), INFINITY);
	prom_double(&b, "t_v", PROM_LABELS("k", "-inf"), -INFINITY);
	assert_non_null(strstr(b.data, "t_v{k=\"nan\"} NaN\n"));
	assert_non_null(strstr(b.data, "t_v{k=\"inf\"} +Inf\n"));
	assert_non_null(strstr(b.data, "t_v{k=\"-inf\"} -Inf\n"));
	assert_int_equal(check_text(b.data, &c), 0);
	buf_release(&b);
}

static void escapes_label_values_and_help(void **state)
{
	struct buf b;
	struct check c;

	(void)state;
	buf_init(&b, 1 << 16);
	prom_family(&b, "t_e", PROM_GAUGE, "a \\ and\na newline, \"quoted\"");
	prom_u64(&b, "t_e", PROM_LABELS("v", "a\"b\\c\nd"), 1);
	assert_string_equal(b.data,
		"# HELP t_e a \\\\ and\\na newline, \"quoted\"\n"
		"# TYPE t_e gauge\n"
		"t_e{v=\"a\\\"b\\\\c\\nd\"} 1\n");
	assert_int_equal(check_text(b.data, &c), 0);
	buf_release(&b);
}

static void full_buffer_is_told(void **state)
{
	struct buf b;

	(void)state;
	buf_init(&b, 40);
	prom_counter(&b, "t_a_total", "A counter with a long help text.", 1);
	prom_counter(&b, "t_b_total", "B.", 2);
	assert_int_equal(buf_error(&b), BUF_TOO_LARGE);
	assert_true(b.len <= 40);
	buf_release(&b);
}

/* The checker is only worth its passes if it fails: each text is wrong once. */
static void checker_refuses_bad_text(void **state)
{
	static const char *const bad[] = {
		"x 1\n",                                              /* no family */
		"# HELP x X.\nx 1\n",                                 /* no TYPE */
		"# TYPE x gauge\n# HELP x X.\nx 1\n",                 /* TYPE first */
		"# HELP x X.\n# TYPE x gauge\ny 1\n",                 /* other family */
		"# HELP x X.\n# TYPE x gauge\nx_sum 1\n",             /* not a summary */
		"# HELP x X.\n# TYPE x gauge\nx nan\n",               /* value spelling */
		"# HELP x X.\n# TYPE x gauge\nx 1.5.2\n",
		"# HELP x X.\n# TYPE x gauge\nx{a=b} 1\n",            /* unquoted */
		"# HELP x X.\n# TYPE x gauge\nx{a=\"\\t\"} 1\n",      /* bad escape */
		"# HELP x X.\n# TYPE x gauge\nx{1a=\"v\"} 1\n",       /* label name */
		"# HELP 1x X.\n# TYPE 1x gauge\n",                    /* metric name */
		"# HELP x X.\n# TYPE x meter\n",                      /* type */
		"# HELP x X.\n# TYPE x gauge\n# HELP x X.\n# TYPE x gauge\n",
		"# HELP x X.\n# TYPE x gauge\nx 1",                   /* no newline */
		"# HELP x X.\n# TYPE x gauge\nx 1 2 3\n",
	};
	struct check c;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (check_text(bad[i], &c) != -1)
			fail_msg("accepted: %s", bad[i]);
		assert_string_not_equal(c.why, "");
	}
	assert_int_equal(check_text("# HELP x_total X.\n# TYPE x_total counter\n"
				    "x_total{a=\"1\",b=\"\\\"\"} 1e3\n", &c), 0);
}

/* ---- a real writer: the sidecar's /metrics -------------------------- */

static int remove_one(const char *path, const struct stat *st, int flag,
		      struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void sidecar_metrics_pass(void **state)
{
	static const struct frag_tensor tens[1] = {
		{ .offset = 0, .numel = 100 },
	};
	struct sidecar_opts o = { .target = "localhost:1", .job = "t" };
	char dir[] = "/tmp/ddprom-test-XXXXXX";
	struct frag_table ft;
	struct exchange *x;
	struct sidecar *s;
	struct check c;
	struct buf b;

	(void)state;
	assert_non_null(mkdtemp(dir));
	assert_int_equal(frag_table_init(&ft, tens, 1, 1, NULL), 0);
	assert_int_equal(exchange_open(dir, EXCHANGE_SIDECAR, &ft, &x, NULL), 0);
	s = sidecar_new(&o, x, &ft, NULL);
	assert_non_null(s);
	buf_init(&b, 1 << 20);
	sidecar_metrics_text(s, &b);
	assert_int_equal(buf_error(&b), BUF_OK);
	if (check_text(b.data, &c))
		fail_msg("%s\n%s", c.why, b.data);
	assert_int_equal(c.families, c.samples);   /* one sample each */
	assert_in_range(c.families, 25, 100);
	assert_non_null(strstr(b.data, "\nddiloco_sidecar_connected 0\n"));
	assert_non_null(strstr(b.data, "# TYPE ddiloco_sidecar_bytes_sent_total counter\n"));
	buf_release(&b);
	sidecar_free(s);
	exchange_close(x);
	frag_table_release(&ft);
	assert_int_equal(nftw(dir, remove_one, 8, FTW_DEPTH | FTW_PHYS), 0);
}

/* A histogram: cumulative buckets, +Inf equal to the count, the sum. */
static void histogram_written(void **state)
{
	static const double bounds[] = { 0.01, 0.1, 1 };
	struct prom_hist h;
	struct buf b;
	struct check c;

	(void)state;
	assert_int_equal(prom_hist_init(&h, bounds, 3), 0);
	prom_hist_observe(&h, 0.005);
	prom_hist_observe(&h, 0.01);   /* a bound is inclusive */
	prom_hist_observe(&h, 0.5);
	prom_hist_observe(&h, 7);
	prom_hist_observe(&h, NAN);    /* not an observation */
	buf_init(&b, 1 << 16);
	prom_hist_write(&b, "t_seconds", "Time.", &h);
	buf_append(&b, "", 1);
	assert_string_equal(b.data,
		"# HELP t_seconds Time.\n"
		"# TYPE t_seconds histogram\n"
		"t_seconds_bucket{le=\"0.01\"} 2\n"
		"t_seconds_bucket{le=\"0.1\"} 2\n"
		"t_seconds_bucket{le=\"1\"} 3\n"
		"t_seconds_bucket{le=\"+Inf\"} 4\n"
		"t_seconds_sum 7.515\n"
		"t_seconds_count 4\n");
	assert_int_equal(check_text(b.data, &c), 0);
	assert_int_equal(c.samples, 6);
	buf_release(&b);
	prom_hist_release(&h);
}

/* process_*: every family there, well formed, with this process's values. */
static void process_families(void **state)
{
	struct buf b;
	struct check c;
	char *rss;

	(void)state;
	buf_init(&b, 1 << 16);
	prom_process(&b);
	buf_append(&b, "", 1);
	if (check_text(b.data, &c))
		fail_msg("%s\n%s", c.why, b.data);
	assert_int_equal(c.families, 6);
	assert_non_null(strstr(b.data, "# TYPE process_cpu_seconds_total counter\n"));
	assert_non_null(strstr(b.data, "\nprocess_start_time_seconds 1"));   /* after 2001 */
	assert_non_null(rss = strstr(b.data, "\nprocess_resident_memory_bytes "));
	assert_true(strtod(rss + 31, NULL) > 1e5);
	assert_non_null(strstr(b.data, "\nprocess_open_fds "));
	assert_non_null(strstr(b.data, "\nprocess_max_fds "));
	buf_release(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(writes_families_and_samples),
		cmocka_unit_test(values_read_back),
		cmocka_unit_test(escapes_label_values_and_help),
		cmocka_unit_test(full_buffer_is_told),
		cmocka_unit_test(checker_refuses_bad_text),
		cmocka_unit_test(sidecar_metrics_pass),
		cmocka_unit_test(histogram_written),
		cmocka_unit_test(process_families),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
