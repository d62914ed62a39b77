/* The option table: every kind, bad and out-of-range values, --help, positionals, usage. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"

/* Every kind, with the defaults a command would set before parsing. */
struct vals {
	int verbose, workers;
	uint64_t tokens;
	double timeout, ratio;
	const char *name;
	int color;                      /* set by the callback */
};

static int parse_color(const struct cli_option *opt, const char *arg,
		       struct err *e)
{
	int *dst = opt->value;

	if (!strcmp(arg, "red"))
		*dst = 1;
	else if (!strcmp(arg, "blue"))
		*dst = 2;
	else
		return err_set(e, "option '--%s' needs red or blue, got '%s'",
			       opt->name, arg);
	return 0;
}

#define TABLE(v) \
	const struct cli_option opts[] = { \
		CLI_TEXT("usage: prog [options] FILE..."), \
		CLI_FLAG("verbose", 'v', &(v)->verbose, "say more"), \
		CLI_INT("workers", 'w', &(v)->workers, "N", 1, 64, "workers", \
			.flags = CLI_SHOW_DEFAULT), \
		CLI_UINT64("tokens", 0, &(v)->tokens, "N", 1000, "token budget"), \
		CLI_DOUBLE("timeout", 't', &(v)->timeout, "S", 0, INFINITY, \
			   "give up after S seconds", .flags = CLI_ABOVE_MIN), \
		CLI_DOUBLE("ratio", 0, &(v)->ratio, "X", 0, 1, \
			   "a share\nof something", .flags = CLI_SHOW_DEFAULT), \
		CLI_STRING("name", 'n', &(v)->name, "NAME", "a name"), \
		CLI_CALLBACK("color", 0, &(v)->color, "C", parse_color, "red or blue"), \
		CLI_TEXT("the end"), \
		CLI_END(), \
	}

static void defaults(struct vals *v)
{
	memset(v, 0, sizeof(*v));
	v->workers = 2;
	v->timeout = 30;
	v->ratio = 0.5;
	v->name = "none";
}

/* Parses a NULL-terminated list (after a program name); argv is kept for positionals. */
static int parse(struct vals *v, char **argv, struct err *e, const char *const *args)
{
	TABLE(v);
	int argc = 0;

	argv[argc++] = (char *)"prog";
	for (; *args; args++)
		argv[argc++] = (char *)*args;
	argv[argc] = NULL;
	memset(e, 0, sizeof(*e));
	return cli_parse(opts, argc, argv, e);
}

#define PARSE(v, argv, e, ...) parse(v, argv, e, (const char *const[]){ __VA_ARGS__, NULL })

static void every_kind_is_stored(void **state)
{
	struct vals v;
	struct err e;
	char *argv[32];

	(void)state;
	defaults(&v);
	assert_int_equal(PARSE(&v, argv, &e, "--verbose", "--workers", "8",
			       "--tokens=1000", "--timeout", "2.5", "--ratio=0.25",
			       "--name", "job", "--color", "blue"), 0);
	assert_int_equal(v.verbose, 1);
	assert_int_equal(v.workers, 8);
	assert_int_equal(v.tokens, 1000);
	assert_float_equal(v.timeout, 2.5, 0);
	assert_float_equal(v.ratio, 0.25, 0);
	assert_string_equal(v.name, "job");
	assert_int_equal(v.color, 2);
}

static void defaults_kept_when_not_given(void **state)
{
	struct vals v;
	struct err e;
	char *argv[32];

	(void)state;
	defaults(&v);
	assert_int_equal(PARSE(&v, argv, &e, "--verbose"), 0);
	assert_int_equal(v.workers, 2);
	assert_int_equal(v.tokens, 0);
	assert_float_equal(v.timeout, 30, 0);
	assert_string_equal(v.name, "none");
	assert_int_equal(v.color, 0);
}

static void short_names(void **state)
{
	struct vals v;
	struct err e;
	char *argv[32];

	(void)state;
	defaults(&v);
	assert_int_equal(PARSE(&v, argv, &e, "-v", "-w", "3", "-t0.5", "-nx"), 0);
	assert_int_equal(v.verbose, 1);
	assert_int_equal(v.workers, 3);
	assert_float_equal(v.timeout, 0.5, 0);
	assert_string_equal(v.name, "x");
}

static void positionals_come_back_in_order(void **state)
{
	struct vals v;
	struct err e;
	char *argv[32];

	(void)state;
	defaults(&v);
	assert_int_equal(PARSE(&v, argv, &e, "a.yaml", "--workers", "4", "-",
			       "b", "--", "--name", "-v"), 5);
	assert_string_equal(argv[0], "a.yaml");
	assert_string_equal(argv[1], "-");
	assert_string_equal(argv[2], "b");
	assert_string_equal(argv[3], "--name");   /* after "--": positional */
	assert_string_equal(argv[4], "-v");
	assert_int_equal(v.workers, 4);
	assert_int_equal(v.verbose, 0);
	assert_string_equal(v.name, "none");
}

/* A refused argument: -1, the message, and the destinations untouched. */
static void refused(const char *want, const char *const *args)
{
	struct vals v;
	struct err e;
	char *argv[32];

	defaults(&v);
	assert_int_equal(parse(&v, argv, &e, args), -1);
	assert_string_equal(e.msg, want);
	assert_int_equal(v.workers, 2);
	assert_int_equal(v.tokens, 0);
	assert_float_equal(v.timeout, 30, 0);
	assert_float_equal(v.ratio, 0.5, 0);
	assert_string_equal(v.name, "none");
	assert_int_equal(v.color, 0);
}

#define REFUSED(want, ...) refused(want, (const char *const[]){ __VA_ARGS__, NULL })

static void bad_numbers_refused(void **state)
{
	(void)state;
	REFUSED("option '--workers' needs a whole number, got 'x'", "--workers", "x");
	REFUSED("option '--workers' needs a whole number, got '4.5'", "--workers", "4.5");
	REFUSED("option '--workers' needs a whole number, got ''", "--workers=");
	REFUSED("option '--workers' needs a whole number, got ' 4'", "--workers", " 4");
	REFUSED("option '-w' needs a whole number, got '0x10'", "-w", "0x10");
	REFUSED("option '--tokens' needs a whole number, got '-1'", "--tokens", "-1");
	REFUSED("option '--tokens' needs a whole number, got '+5'", "--tokens", "+5");
	REFUSED("option '--tokens' needs a whole number, got '12k'", "--tokens", "12k");
	REFUSED("option '--timeout' needs a number, got 'soon'", "--timeout", "soon");
	REFUSED("option '--timeout' needs a number, got 'nan'", "--timeout", "nan");
	REFUSED("option '--timeout' needs a number, got 'inf'", "--timeout", "inf");
	REFUSED("option '--ratio' needs a number, got '0.5s'", "--ratio", "0.5s");
	REFUSED("option '--color' needs red or blue, got 'green'", "--color", "green");
}

static void out_of_range_refused(void **state)
{
	(void)state;
	REFUSED("option '--workers' must be between 1 and 64, got '0'", "--workers", "0");
	REFUSED("option '--workers' must be between 1 and 64, got '65'", "--workers", "65");
	REFUSED("option '--workers' must be between 1 and 64, got '99999999999999999999'",
		"--workers", "99999999999999999999");
	REFUSED("option '--tokens' must be at most 1000, got '1001'", "--tokens", "1001");
	REFUSED("option '--tokens' must be at most 1000, got '18446744073709551616'",
		"--tokens", "18446744073709551616");
	REFUSED("option '--timeout' must be greater than 0, got '0'", "--timeout", "0");
	REFUSED("option '-t' must be greater than 0, got '-3'", "-t", "-3");
	REFUSED("option '--ratio' must be between 0 and 1, got '1.5'", "--ratio", "1.5");
	REFUSED("option '--ratio' must be between 0 and 1, got '-0.1'", "--ratio=-0.1");
}

static void unknown_and_malformed_refused(void **state)
{
	(void)state;
	REFUSED("unknown option '--worker'", "--worker", "3");
	REFUSED("unknown option '--nope'", "--nope=3");
	REFUSED("unknown option '-x'", "-x");
	REFUSED("option '--workers' needs a value", "--workers");
	REFUSED("option '-n' needs a value", "-n");
	REFUSED("option '--verbose' takes no value", "--verbose=1");
	REFUSED("option '-v' takes no value", "-vv");
}

static void help_anywhere(void **state)
{
	struct vals v;
	struct err e;
	char *argv[32];

	(void)state;
	defaults(&v);
	assert_int_equal(PARSE(&v, argv, &e, "--help"), CLI_HELP);
	/* before a bad value is even looked at */
	assert_int_equal(PARSE(&v, argv, &e, "--workers", "x", "-h"), CLI_HELP);
	assert_int_equal(v.workers, 2);
	/* after "--" it is a positional argument */
	assert_int_equal(PARSE(&v, argv, &e, "--", "--help"), 1);
	assert_string_equal(argv[0], "--help");
}

static void usage_from_the_table(void **state)
{
	struct vals v;
	char *text = NULL;
	size_t len = 0;
	FILE *f;

	(void)state;
	defaults(&v);
	{
		TABLE(&v);

		f = open_memstream(&text, &len);
		assert_non_null(f);
		cli_usage(opts, f);
		fclose(f);
	}
	assert_string_equal(text,
		"usage: prog [options] FILE...\n"
		"  -v, --verbose    say more\n"
		"  -w, --workers N  workers (2)\n"
		"  --tokens N       token budget\n"
		"  -t, --timeout S  give up after S seconds\n"
		"  --ratio X        a share\n"
		"                   of something (0.5)\n"
		"  -n, --name NAME  a name\n"
		"  --color C        red or blue\n"
		"  -h, --help       this text\n"
		"the end\n");
	free(text);
}

static void exit_codes(void **state)
{
	struct vals v;
	struct err e = { "option '--workers' needs a value" };
	char *text = NULL;
	size_t len = 0;
	FILE *saved = stderr;

	(void)state;
	defaults(&v);
	{
		TABLE(&v);

		stderr = open_memstream(&text, &len);
		assert_non_null(stderr);
		assert_int_equal(cli_exit_code(opts, "ddiloco prog", -1, &e), 2);
		fclose(stderr);
		stderr = saved;
	}
	assert_string_equal(text, "ddiloco prog: option '--workers' needs a value\n");
	free(text);
}

static void host_and_port(void **state)
{
	char host[16];
	int port = -1;

	(void)state;
	assert_int_equal(cli_split_hostport("127.0.0.1:8080", host, sizeof(host), &port), 0);
	assert_string_equal(host, "127.0.0.1");
	assert_int_equal(port, 8080);
	assert_int_equal(cli_split_hostport(":0", host, sizeof(host), &port), 0);
	assert_string_equal(host, "");
	assert_int_equal(port, 0);
	assert_int_equal(cli_split_hostport("[::1]:9", host, sizeof(host), &port), 0);
	assert_string_equal(host, "[::1]");
	assert_int_equal(port, 9);
	port = 7;
	assert_int_equal(cli_split_hostport("host", host, sizeof(host), &port), -1);
	assert_int_equal(cli_split_hostport("host:", host, sizeof(host), &port), -1);
	assert_int_equal(cli_split_hostport("host:-1", host, sizeof(host), &port), -1);
	assert_int_equal(cli_split_hostport("host:65536", host, sizeof(host), &port), -1);
	assert_int_equal(cli_split_hostport("host:80x", host, sizeof(host), &port), -1);
	assert_int_equal(cli_split_hostport("a-very-long-host-name:80", host,
					    sizeof(host), &port), -1);
	assert_int_equal(port, 7);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_kind_is_stored),
		cmocka_unit_test(defaults_kept_when_not_given),
		cmocka_unit_test(short_names),
		cmocka_unit_test(positionals_come_back_in_order),
		cmocka_unit_test(bad_numbers_refused),
		cmocka_unit_test(out_of_range_refused),
		cmocka_unit_test(unknown_and_malformed_refused),
		cmocka_unit_test(help_anywhere),
		cmocka_unit_test(usage_from_the_table),
		cmocka_unit_test(exit_codes),
		cmocka_unit_test(host_and_port),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
