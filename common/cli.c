/*
 * cli: the option table's parser and usage printer; see cli.h.
 *
 * One pass over argv: an option is looked up by its long or short name,
 * its value taken from "=VALUE", the rest of a short option or the next
 * argument, converted by kind and range-checked, and only then stored.
 * Everything else is positional and moved to the front of argv.
 */
#include "common/cli.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define USAGE_MAX_COLUMN 30   /* where help starts at the most */

static int is_help(const char *a)
{
	return !strcmp(a, "--help") || !strcmp(a, "-h");
}

static const struct cli_option *find_long(const struct cli_option *opts,
					  const char *name, size_t len)
{
	for (; opts->kind != CLI_KIND_END; opts++)
		if (opts->kind != CLI_KIND_TEXT && opts->name &&
		    strlen(opts->name) == len && !strncmp(opts->name, name, len))
			return opts;
	return NULL;
}

static const struct cli_option *find_short(const struct cli_option *opts,
					   char c)
{
	for (; opts->kind != CLI_KIND_END; opts++)
		if (opts->kind != CLI_KIND_TEXT && opts->short_name == c)
			return opts;
	return NULL;
}

static int parse_int(const struct cli_option *o, const char *shown,
		     const char *v, struct err *e)
{
	char *end;
	long long x;

	errno = 0;
	x = strtoll(v, &end, 10);
	if (end == v || *end || isspace((unsigned char)v[0]))
		return err_set(e, "option '%s' needs a whole number, got '%s'",
			       shown, v);
	if (errno == ERANGE || (double)x < o->min || (double)x > o->max)
		return err_set(e, "option '%s' must be between %.0f and %.0f, got '%s'",
			       shown, o->min, o->max, v);
	*(int *)o->value = (int)x;
	return 0;
}

static int parse_u64(const struct cli_option *o, const char *shown,
		     const char *v, struct err *e)
{
	char *end;
	unsigned long long x;

	/* strtoull takes "-1" as 2^64 - 1, and leading blanks: digits only */
	if (!isdigit((unsigned char)v[0]))
		return err_set(e, "option '%s' needs a whole number, got '%s'",
			       shown, v);
	errno = 0;
	x = strtoull(v, &end, 10);
	if (*end)
		return err_set(e, "option '%s' needs a whole number, got '%s'",
			       shown, v);
	if (errno == ERANGE || x > o->umax)
		return err_set(e, "option '%s' must be at most %llu, got '%s'",
			       shown, (unsigned long long)o->umax, v);
	*(uint64_t *)o->value = x;
	return 0;
}

static int parse_double(const struct cli_option *o, const char *shown,
			const char *v, struct err *e)
{
	char *end;
	double x;

	errno = 0;
	x = strtod(v, &end);
	if (end == v || *end || isspace((unsigned char)v[0]) || !isfinite(x))
		return err_set(e, "option '%s' needs a number, got '%s'", shown, v);
	if ((o->flags & CLI_ABOVE_MIN) && x <= o->min) {
		if (isinf(o->max))
			return err_set(e, "option '%s' must be greater than %g, got '%s'",
				       shown, o->min, v);
		return err_set(e, "option '%s' must be greater than %g and at most %g, got '%s'",
			       shown, o->min, o->max, v);
	}
	if (x < o->min || x > o->max) {
		if (isinf(o->max))
			return err_set(e, "option '%s' must be at least %g, got '%s'",
				       shown, o->min, v);
		if (isinf(o->min))
			return err_set(e, "option '%s' must be at most %g, got '%s'",
				       shown, o->max, v);
		return err_set(e, "option '%s' must be between %g and %g, got '%s'",
			       shown, o->min, o->max, v);
	}
	*(double *)o->value = x;
	return 0;
}

static int set_value(const struct cli_option *o, const char *shown,
		     const char *v, struct err *e)
{
	switch (o->kind) {
	case CLI_KIND_INT:
		return parse_int(o, shown, v, e);
	case CLI_KIND_UINT64:
		return parse_u64(o, shown, v, e);
	case CLI_KIND_DOUBLE:
		return parse_double(o, shown, v, e);
	case CLI_KIND_STRING:
		*(const char **)o->value = v;
		return 0;
	case CLI_KIND_CALLBACK:
		return o->cb(o, v, e);
	default:
		return err_set(e, "option '%s': bad table entry", shown);
	}
}

/*
 * One option at argv[*i]; *i moves past its value when that is the next
 * argument.
 */
static int parse_one(const struct cli_option *opts, int argc, char **argv,
		     int *i, struct err *e)
{
	const char *a = argv[*i], *v = NULL;
	const struct cli_option *o;
	char shown[64];

	if (a[1] == '-') {
		const char *eq = strchr(a + 2, '=');
		size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);

		snprintf(shown, sizeof(shown), "--%.*s", (int)len, a + 2);
		o = find_long(opts, a + 2, len);
		if (eq)
			v = eq + 1;
	} else {
		snprintf(shown, sizeof(shown), "-%c", a[1]);
		o = find_short(opts, a[1]);
		if (a[2])
			v = a + 2;
	}
	if (!o)
		return err_set(e, "unknown option '%s'", a[1] == '-' ? shown : a);
	if (o->kind == CLI_KIND_FLAG) {
		if (v)
			return err_set(e, "option '%s' takes no value", shown);
		*(int *)o->value = 1;
		return 0;
	}
	if (!v) {
		if (*i + 1 >= argc)
			return err_set(e, "option '%s' needs a value", shown);
		v = argv[++*i];
	}
	return set_value(o, shown, v, e);
}

int cli_parse(const struct cli_option *opts, int argc, char **argv,
	      struct err *e)
{
	int n = 0, only_positional = 0;

	/* --help wins wherever it is, before anything is checked or stored */
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
		if (is_help(argv[i]))
			return CLI_HELP;
	for (int i = 1; i < argc; i++) {
		char *a = argv[i];

		if (only_positional || a[0] != '-' || !a[1]) {
			argv[n++] = a;
			continue;
		}
		if (!strcmp(a, "--")) {
			only_positional = 1;
			continue;
		}
		if (parse_one(opts, argc, argv, &i, e))
			return -1;
	}
	return n;
}

/* "  -x, --name ARGH" into out; its length. */
static int option_head(const struct cli_option *o, char *out, size_t n)
{
	int len;

	if (o->short_name)
		len = snprintf(out, n, "  -%c, --%s%s%s", o->short_name, o->name,
			       o->argh ? " " : "", o->argh ? o->argh : "");
	else
		len = snprintf(out, n, "  --%s%s%s", o->name, o->argh ? " " : "",
			       o->argh ? o->argh : "");
	return len < 0 ? 0 : len;
}

static void show_default(const struct cli_option *o, FILE *f)
{
	switch (o->kind) {
	case CLI_KIND_INT:
		fprintf(f, " (%d)", *(const int *)o->value);
		break;
	case CLI_KIND_UINT64:
		fprintf(f, " (%llu)",
			(unsigned long long)*(const uint64_t *)o->value);
		break;
	case CLI_KIND_DOUBLE:
		fprintf(f, " (%g)", *(const double *)o->value);
		break;
	case CLI_KIND_STRING:
		if (*(const char *const *)o->value)
			fprintf(f, " (%s)", *(const char *const *)o->value);
		break;
	default:
		break;
	}
}

static void print_option(const struct cli_option *o, int column, FILE *f)
{
	char head[256];
	int len = option_head(o, head, sizeof(head));
	const char *h = o->help ? o->help : "";

	fputs(head, f);
	if (len + 2 > column) {
		fputc('\n', f);
		len = 0;
	}
	fprintf(f, "%*s", column - len, "");
	for (; *h; h++) {
		fputc(*h, f);
		if (*h == '\n')
			fprintf(f, "%*s", column, "");
	}
	if (o->flags & CLI_SHOW_DEFAULT)
		show_default(o, f);
	fputc('\n', f);
}

void cli_usage(const struct cli_option *opts, FILE *f)
{
	static const struct cli_option help =
		{ .kind = CLI_KIND_FLAG, .name = "help", .short_name = 'h',
		  .help = "this text" };
	const struct cli_option *o, *last = NULL;
	int column = 0;
	char head[256];

	for (o = opts; o->kind != CLI_KIND_END; o++) {
		int len;

		if (o->kind == CLI_KIND_TEXT)
			continue;
		last = o;
		len = option_head(o, head, sizeof(head)) + 2;
		if (len <= USAGE_MAX_COLUMN && len > column)
			column = len;
	}
	if (column < 14)
		column = 14;
	for (o = opts; o->kind != CLI_KIND_END; o++) {
		if (o->kind == CLI_KIND_TEXT)
			fprintf(f, "%s\n", o->name);
		else
			print_option(o, column, f);
		if (o == last)
			print_option(&help, column, f);
	}
	if (!last)
		print_option(&help, column, f);
}

int cli_exit_code(const struct cli_option *opts, const char *prog, int rc,
		  const struct err *e)
{
	if (rc == CLI_HELP) {
		cli_usage(opts, stdout);
		return 0;
	}
	fprintf(stderr, "%s: %s\n", prog, e->msg);
	return 2;
}

int cli_split_hostport(const char *s, char *host, size_t hostlen, int *port)
{
	const char *colon = strrchr(s, ':');
	char *end;
	long p;

	if (!colon || (size_t)(colon - s) >= hostlen ||
	    !isdigit((unsigned char)colon[1]))
		return -1;
	errno = 0;
	p = strtol(colon + 1, &end, 10);
	if (*end || errno || p > 65535)
		return -1;
	memcpy(host, s, (size_t)(colon - s));
	host[colon - s] = 0;
	*port = (int)p;
	return 0;
}

int cli_termination_message(const char *path, const char *msg)
{
	int dflt = !path || !strcmp(path, CLI_TERMINATION_LOG);
	int fd = open(path ? path : CLI_TERMINATION_LOG,
		      O_WRONLY | O_TRUNC | O_CLOEXEC | (dflt ? 0 : O_CREAT), 0644);
	size_t n = strlen(msg);
	ssize_t w;

	if (fd < 0)
		return -1;
	w = write(fd, msg, n);
	if (close(fd) || w != (ssize_t)n)
		return -1;
	return 0;
}
