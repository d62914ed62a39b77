/*
 * log: the process-wide log line writer (formats in log.h). The
 * component name, the threshold and the format are the only state; they
 * are set once before threads start.
 *
 * A line is made whole in a buffer of its own and written with one
 * fwrite on the unbuffered stderr, so lines of threads and of processes
 * sharing the stream do not mix. The message is formatted first (cut at
 * MSG_MAX bytes), then put into the line: as it is in text, escaped in
 * json, where each escape goes in whole or not at all and the object is
 * always closed, so every line parses.
 */
#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MSG_MAX 2048
#define COMPONENT_MAX 64
/* the worst case: every byte of both strings 6 bytes escaped ("\ufffd") */
#define LINE_MAX_BYTES (6 * (MSG_MAX + COMPONENT_MAX) + 128)

static char component[COMPONENT_MAX] = "ddiloco";
static enum log_level threshold = LOG_INFO;
static enum log_format format = LOG_FORMAT_TEXT;

int log_format_parse(const char *name, enum log_format *out)
{
	if (!name)
		return -1;
	if (!strcmp(name, "text"))
		*out = LOG_FORMAT_TEXT;
	else if (!strcmp(name, "json"))
		*out = LOG_FORMAT_JSON;
	else
		return -1;
	return 0;
}

void log_set_format(enum log_format f)
{
	format = f;
}

int log_cli_format(const struct cli_option *opt, const char *arg, struct err *e)
{
	enum log_format f;

	if (log_format_parse(arg, &f))
		return err_set(e, "option '--%s' must be text or json, got '%s'",
			       opt->name, arg);
	log_set_format(f);
	/* the processes this one starts (ddiloco run's) log the same way */
	setenv("DDILOCO_LOG_FORMAT", arg, 1);
	return 0;
}

void log_init(const char *name)
{
	const char *lv = getenv("DDILOCO_LOG");
	const char *fmt = getenv("DDILOCO_LOG_FORMAT");

	snprintf(component, sizeof(component), "%s", name);
	if (fmt && fmt[0] && log_format_parse(fmt, &format)) {
		format = LOG_FORMAT_TEXT;
		log_warn("log: DDILOCO_LOG_FORMAT must be text or json, got '%s': "
			 "logging text", fmt);
	}
	if (!lv)
		return;
	if (!strcmp(lv, "debug"))
		threshold = LOG_DEBUG;
	else if (!strcmp(lv, "warn"))
		threshold = LOG_WARN;
	else if (!strcmp(lv, "error"))
		threshold = LOG_ERROR;
}

/* The line being made: len bytes of p, at most cap. */
struct line {
	char *p;
	size_t len, cap;
};

/* Appends k bytes whole, or nothing and -1 when they do not fit. */
static int put(struct line *l, const char *s, size_t k)
{
	if (l->len + k > l->cap)
		return -1;
	memcpy(l->p + l->len, s, k);
	l->len += k;
	return 0;
}

/* The length of the well-formed UTF-8 sequence at s (RFC 3629: no
 * overlong form, no surrogate, nothing past U+10FFFF), 0 if there is none. */
static size_t utf8_len(const unsigned char *s)
{
	unsigned char lo = 0x80, hi = 0xbf;
	size_t n;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		n = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		n = 3;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		n = 4;
	else
		return 0;
	if (s[0] == 0xe0)
		lo = 0xa0;
	else if (s[0] == 0xed)
		hi = 0x9f;
	else if (s[0] == 0xf0)
		lo = 0x90;
	else if (s[0] == 0xf4)
		hi = 0x8f;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return n;
}

/* s as the inside of a JSON string (RFC 8259 §7), cut where l is full. */
static void put_escaped(struct line *l, const char *s)
{
	const unsigned char *u = (const unsigned char *)s;
	char esc[8];

	while (*u) {
		size_t n = utf8_len(u);
		const char *piece = esc;
		size_t k = 2;

		esc[0] = '\\';
		if (!n) {
			piece = "\\ufffd", k = 6, n = 1;   /* not UTF-8 */
		} else if (*u == '"' || *u == '\\') {
			esc[1] = (char)*u;
		} else if (*u == '\n' || *u == '\r' || *u == '\t' ||
			   *u == '\b' || *u == '\f') {
			esc[1] = *u == '\n' ? 'n' : *u == '\r' ? 'r' :
				 *u == '\t' ? 't' : *u == '\b' ? 'b' : 'f';
		} else if (*u < 0x20) {
			k = (size_t)snprintf(esc, sizeof(esc), "\\u%04x", *u);
		} else {
			piece = (const char *)u, k = n;
		}
		if (put(l, piece, k))
			return;
		u += n;
	}
}

size_t log_format_line(char *out, size_t n, enum log_format f,
		       const struct timespec *t, enum log_level level,
		       const char *comp, const char *message)
{
	static const char *const names[] = { "debug", "info", "warn", "error" };
	static const char *const severity[] = { "DEBUG", "INFO", "WARNING", "ERROR" };
	char stamp[48], head[160];
	struct line l = { out, 0, n > 3 ? n - 3 : 0 };   /* room for "}\0 */
	struct tm tm;
	int k;

	if (!n)
		return 0;
	gmtime_r(&t->tv_sec, &tm);
	k = (int)strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(stamp + k, sizeof(stamp) - (size_t)k, ".%03ldZ",
		 t->tv_nsec / 1000000);
	if (f == LOG_FORMAT_TEXT) {
		k = snprintf(out, n, "%s %-5s %s: %s", stamp, names[level], comp,
			     message);
		return k < 0 ? 0 : (size_t)k >= n ? n - 1 : (size_t)k;
	}
	/* from the head on, the line is always inside a string: "} closes it */
	k = snprintf(head, sizeof(head),
		     "{\"time\":\"%s\",\"severity\":\"%s\",\"component\":\"",
		     stamp, severity[level]);
	if (put(&l, head, (size_t)k)) {
		out[0] = '\0';
		return 0;
	}
	put_escaped(&l, comp);
	if (!put(&l, "\",\"message\":\"", 13))
		put_escaped(&l, message);
	memcpy(out + l.len, "\"}", 3);
	return l.len + 2;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	char msg[MSG_MAX], line[LINE_MAX_BYTES];
	struct timespec ts;
	va_list ap;
	size_t n;

	if (level < threshold)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	n = log_format_line(line, sizeof(line) - 1, format, &ts, level,
			    component, msg);
	line[n] = '\n';
	/* one write per line so lines of concurrent processes do not mix */
	fwrite(line, 1, n + 1, stderr);
}
