/*
 * log: one line per event on stderr, in one of two formats (docs/run.md,
 * "Logs"):
 *
 *   text   <time> <level> <component>: <message>
 *          2026-12-03T13:42:04.123Z info  syncer: gRPC on 0.0.0.0:7000
 *   json   one JSON object a line, the fields Cloud Logging reads:
 *          {"time":"2026-12-03T13:42:04.123Z","severity":"INFO",
 *           "component":"syncer","message":"gRPC on 0.0.0.0:7000"}
 *
 *   field      text                    json
 *   time       RFC 3339, UTC, ms       the same, a string
 *   level      debug info warn error   severity DEBUG INFO WARNING ERROR
 *   component  as given to log_init   a string
 *   message    as formatted            a JSON string: quotes, backslashes
 *                                      and control characters escaped,
 *                                      bytes that are not UTF-8 U+FFFD
 *
 * The component is the process's role ("syncer", "learner-2", ...), set
 * once in the command's main with log_init. Levels below the threshold
 * (DDILOCO_LOG=debug|info|warn|error, default info) are dropped. The
 * format is text unless DDILOCO_LOG_FORMAT=json or --log-format json
 * (LOG_CLI_OPTION) says json; the option also sets DDILOCO_LOG_FORMAT,
 * so the processes this one starts log the same way.
 */
#ifndef DDILOCO_LOG_H
#define DDILOCO_LOG_H

#include <stddef.h>
#include <time.h>

#include "common/cli.h"

enum log_level { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR };
enum log_format { LOG_FORMAT_TEXT, LOG_FORMAT_JSON };

void log_init(const char *component);
void log_msg(enum log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

/* "text" or "json" -> *out; -1 for anything else. */
int log_format_parse(const char *name, enum log_format *out);

/* Sets the format from here on (before threads start, as log_init). */
void log_set_format(enum log_format f);

/*
 * One line in format f, without its newline, into out (always ended by
 * a NUL; a line that does not fit is cut, in json mode between escapes,
 * and still closed). Returns its length.
 */
size_t log_format_line(char *out, size_t n, enum log_format f,
		       const struct timespec *t, enum log_level level,
		       const char *component, const char *message);

/* The --log-format option's callback: parses, sets, exports. */
int log_cli_format(const struct cli_option *opt, const char *arg, struct err *e);

#define LOG_CLI_OPTION() \
	CLI_CALLBACK("log-format", 0, NULL, "text|json", log_cli_format, \
		     "text (default): \"<time> <level> <component>: ...\";\n" \
		     "json: one JSON object a line (docs/run.md, Logs)")

#endif
