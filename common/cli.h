/*
 * cli: a command's options as one table, parsed and described from that
 * table, the way git's parse-options does.
 *
 * A table is an array of struct cli_option ending with CLI_END(). Each
 * entry names a long option (--name, --name VALUE or --name=VALUE), an
 * optional short one (-x, -x VALUE or -xVALUE), what its value is and
 * where it goes, and its help. CLI_TEXT entries are printed as they are by
 * cli_usage, in table order: the usage lines, paragraphs, group headings.
 *
 *   kind      destination     value
 *   FLAG      int *           none; sets 1
 *   INT       int *           decimal, within [min, max]
 *   UINT64    uint64_t *      decimal, no sign, at most umax
 *   DOUBLE    double *        finite, within [min, max] (> min with CLI_ABOVE_MIN)
 *   STRING    const char **   any text (argv's own, not copied)
 *   CALLBACK  anything        handed to cb, which checks and stores it
 *
 * A destination is written only when its value is good, so it keeps the
 * default the caller put there before. --help and -h are understood
 * everywhere (anywhere on the line, before "--"); "--" ends the options
 * and "-" alone is a positional argument.
 *
 * No exit(), no printing in cli_parse: errors come back in a struct err,
 * "option '--grace' needs a number, got 'x'", for the command to print.
 */
#ifndef DDILOCO_CLI_H
#define DDILOCO_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "common/err.h"

enum cli_kind {
	CLI_KIND_END,
	CLI_KIND_TEXT,
	CLI_KIND_FLAG,
	CLI_KIND_INT,
	CLI_KIND_UINT64,
	CLI_KIND_DOUBLE,
	CLI_KIND_STRING,
	CLI_KIND_CALLBACK,
};

#define CLI_SHOW_DEFAULT 1u  /* the usage shows the destination's value: "(30)" */
#define CLI_ABOVE_MIN    2u  /* DOUBLE: min itself is refused (a positive number) */

struct cli_option;

/* Checks and stores arg; on a bad value fills e (naming opt) and returns -1. */
typedef int cli_callback(const struct cli_option *opt, const char *arg,
			 struct err *e);

struct cli_option {
	enum cli_kind kind;
	const char *name;       /* long name without "--"; CLI_TEXT: the text */
	char short_name;        /* 0: none */
	void *value;            /* the destination (see the table above) */
	const char *argh;       /* the value's name in the usage: "N", "PATH" */
	const char *help;       /* may hold '\n': continuation lines are aligned */
	unsigned flags;         /* CLI_SHOW_DEFAULT, CLI_ABOVE_MIN */
	double min, max;        /* INT and DOUBLE: the accepted range */
	uint64_t umax;          /* UINT64: the largest accepted value */
	cli_callback *cb;       /* CALLBACK */
};

/* A compile-time check that v points to a T (a warning, so an error here). */
#define CLI_PTR(T, v) (1 ? (v) : (T *)0)

/*
 * The entries. Extra designated initializers may follow the help, e.g.
 * CLI_DOUBLE("timeout", 0, &t, "S", 0, INFINITY, "give up after S seconds",
 *            .flags = CLI_ABOVE_MIN).
 */
#define CLI_END() { .kind = CLI_KIND_END }
#define CLI_TEXT(t) { .kind = CLI_KIND_TEXT, .name = (t) }
#define CLI_FLAG(l, s, v, h, ...) \
	{ .kind = CLI_KIND_FLAG, .name = (l), .short_name = (s), \
	  .value = CLI_PTR(int, v), .help = (h), __VA_ARGS__ }
#define CLI_INT(l, s, v, a, lo, hi, h, ...) \
	{ .kind = CLI_KIND_INT, .name = (l), .short_name = (s), \
	  .value = CLI_PTR(int, v), .argh = (a), .help = (h), .min = (lo), \
	  .max = (hi), __VA_ARGS__ }
#define CLI_UINT64(l, s, v, a, hi, h, ...) \
	{ .kind = CLI_KIND_UINT64, .name = (l), .short_name = (s), \
	  .value = CLI_PTR(uint64_t, v), .argh = (a), .help = (h), .umax = (hi), \
	  __VA_ARGS__ }
#define CLI_DOUBLE(l, s, v, a, lo, hi, h, ...) \
	{ .kind = CLI_KIND_DOUBLE, .name = (l), .short_name = (s), \
	  .value = CLI_PTR(double, v), .argh = (a), .help = (h), .min = (lo), \
	  .max = (hi), __VA_ARGS__ }
#define CLI_STRING(l, s, v, a, h, ...) \
	{ .kind = CLI_KIND_STRING, .name = (l), .short_name = (s), \
	  .value = CLI_PTR(const char *, v), .argh = (a), .help = (h), \
	  __VA_ARGS__ }
#define CLI_CALLBACK(l, s, v, a, fn, h, ...) \
	{ .kind = CLI_KIND_CALLBACK, .name = (l), .short_name = (s), \
	  .value = (v), .argh = (a), .help = (h), .cb = (fn), __VA_ARGS__ }

#define CLI_HELP (-2)   /* cli_parse saw --help or -h */

/*
 * Parses argv[1..argc-1] by the table. The positional arguments are moved,
 * in order, to argv[0..n-1] and n is returned. CLI_HELP after --help or -h
 * (nothing else is parsed), -1 with e filled on an unknown option, a
 * missing value or a bad one.
 */
int cli_parse(const struct cli_option *opts, int argc, char **argv,
	      struct err *e);

/* The usage from the same table: the texts, then every option and its help. */
void cli_usage(const struct cli_option *opts, FILE *f);

/*
 * The end of a command whose cli_parse returned rc < 0: after --help the
 * usage on stdout and 0; else "PROG: message" on stderr and 2.
 */
int cli_exit_code(const struct cli_option *opts, const char *prog, int rc,
		  const struct err *e);

/*
 * Splits "HOST:PORT" (the last colon; PORT 0..65535) into host and port.
 * The host may be empty; -1 when there is no colon, the port is not a
 * number or the host does not fit in hostlen.
 */
int cli_split_hostport(const char *s, char *host, size_t hostlen, int *port);

/*
 * A refusal a restart cannot fix: the learner side and the sidecar speak
 * versions that do not match (docs/abi.md, Versions). `ddiloco sidecar`
 * and `ddiloco learner` exit with this code (sysexits' EX_CONFIG) after
 * cli_termination_message, and the operator stops recreating that pod
 * (docs/operator.md, Failure policy).
 */
#define CLI_EXIT_MISMATCH 78
#define CLI_TERMINATION_LOG "/dev/termination-log"

/*
 * Leaves msg as the container's termination message: written to path
 * (truncated first), the default CLI_TERMINATION_LOG only when it exists
 * (Kubernetes makes it), another path created. 0, or -1 when it could
 * not be written (nothing else to do about it: the log has the message).
 */
int cli_termination_message(const char *path, const char *msg);

#endif
