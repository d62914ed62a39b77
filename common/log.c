/*
 * log: the process-wide log line writer. The component name and the
 * threshold are the only state; they are set once before threads start.
 */
#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char component[64] = "ddiloco";
static enum log_level threshold = LOG_INFO;

void log_init(const char *name)
{
	const char *lv = getenv("DDILOCO_LOG");

	snprintf(component, sizeof(component), "%s", name);
	if (!lv)
		return;
	if (!strcmp(lv, "debug"))
		threshold = LOG_DEBUG;
	else if (!strcmp(lv, "warn"))
		threshold = LOG_WARN;
	else if (!strcmp(lv, "error"))
		threshold = LOG_ERROR;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	static const char *names[] = { "debug", "info", "warn", "error" };
	char line[2048], stamp[32];
	struct timespec ts;
	struct tm tm;
	va_list ap;
	int n;

	if (level < threshold)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(stamp, sizeof(stamp), "%H:%M:%S", &tm);
	n = snprintf(line, sizeof(line), "%s.%03ld %-5s %s: ", stamp,
		     ts.tv_nsec / 1000000, names[level], component);
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	va_end(ap);
	/* one write per line so lines of concurrent processes do not mix */
	fprintf(stderr, "%s\n", line);
}
