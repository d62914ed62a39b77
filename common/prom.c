/*
 * prom: Prometheus text lines on a buf; see prom.h. Each function appends
 * whole lines; a failed append leaves the buf's sticky error for the
 * caller to check once.
 */
#include "common/prom.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static const char *type_name(enum prom_type t)
{
	switch (t) {
	case PROM_COUNTER: return "counter";
	case PROM_GAUGE: return "gauge";
	case PROM_SUMMARY: return "summary";
	case PROM_UNTYPED: break;
	}
	return "untyped";
}

/* s with \ and newline escaped, and " too when quote is set. */
static void escaped(struct buf *b, const char *s, int quote)
{
	for (; s && *s; s++) {
		if (*s == '\\')
			buf_append(b, "\\\\", 2);
		else if (*s == '\n')
			buf_append(b, "\\n", 2);
		else if (*s == '"' && quote)
			buf_append(b, "\\\"", 2);
		else
			buf_append(b, s, 1);
	}
}

void prom_family(struct buf *b, const char *name, enum prom_type type,
		 const char *help)
{
	buf_printf(b, "# HELP %s ", name);
	escaped(b, help, 0);
	buf_printf(b, "\n# TYPE %s %s\n", name, type_name(type));
}

static void sample_name(struct buf *b, const char *name,
			const char *const *labels)
{
	int open = 0;

	buf_printf(b, "%s", name);
	for (size_t i = 0; labels && labels[i] && labels[i + 1]; i += 2) {
		buf_printf(b, "%c%s=\"", open ? ',' : '{', labels[i]);
		escaped(b, labels[i + 1], 1);
		buf_append(b, "\"", 1);
		open = 1;
	}
	if (open)
		buf_append(b, "}", 1);
}

void prom_u64(struct buf *b, const char *name, const char *const *labels,
	      uint64_t v)
{
	sample_name(b, name, labels);
	buf_printf(b, " %" PRIu64 "\n", v);
}

void prom_double(struct buf *b, const char *name, const char *const *labels,
		 double v)
{
	char num[32];

	if (isnan(v))
		snprintf(num, sizeof(num), "NaN");
	else if (isinf(v))
		snprintf(num, sizeof(num), "%sInf", v > 0 ? "+" : "-");
	else {
		/* 15 digits print 0.1 as 0.1; 17 always read back exactly */
		snprintf(num, sizeof(num), "%.15g", v);
		if (strtod(num, NULL) != v)
			snprintf(num, sizeof(num), "%.17g", v);
	}
	sample_name(b, name, labels);
	buf_printf(b, " %s\n", num);
}

void prom_counter(struct buf *b, const char *name, const char *help,
		  uint64_t v)
{
	prom_family(b, name, PROM_COUNTER, help);
	prom_u64(b, name, NULL, v);
}

void prom_gauge(struct buf *b, const char *name, const char *help, double v)
{
	prom_family(b, name, PROM_GAUGE, help);
	prom_double(b, name, NULL, v);
}
