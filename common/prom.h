/*
 * prom: the Prometheus text exposition format (version 0.0.4), written on
 * a struct buf, for every /metrics of the project.
 *
 * A family is opened by prom_family, which writes its # HELP and # TYPE
 * lines; its samples follow with prom_u64 or prom_double. A sample's name
 * is the family's, or, in a summary, the family's plus _sum or _count.
 * Labels are a NULL-terminated list of name, value pairs, made with
 * PROM_LABELS; values are escaped (\\, \" and \n), HELP text too (\\, \n).
 *
 *   prom_family(b, "x_answers_total", PROM_COUNTER, "Answers by outcome.");
 *   prom_u64(b, "x_answers_total", PROM_LABELS("result", "late"), late);
 *
 * writes
 *
 *   # HELP x_answers_total Answers by outcome.
 *   # TYPE x_answers_total counter
 *   x_answers_total{result="late"} 3
 *
 * Nothing is returned: appends fail the buf's sticky way (buf.h), and the
 * caller (httpd) checks buf_error once at the end.
 */
#ifndef DDILOCO_PROM_H
#define DDILOCO_PROM_H

#include <stdint.h>

#include "common/buf.h"

#define PROM_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

enum prom_type { PROM_COUNTER, PROM_GAUGE, PROM_SUMMARY, PROM_HISTOGRAM,
		 PROM_UNTYPED };

/* { "name", "value", ..., NULL } for a sample's labels. */
#define PROM_LABELS(...) ((const char *const[]){ __VA_ARGS__, NULL })

/* # HELP and # TYPE lines of the family name. */
void prom_family(struct buf *b, const char *name, enum prom_type type,
		 const char *help);
/* One sample; labels NULL or PROM_LABELS(...). Integers are exact. */
void prom_u64(struct buf *b, const char *name, const char *const *labels,
	      uint64_t v);
/* Reals in the fewest digits that read back the same double; NaN, +Inf
 * and -Inf as the format spells them. */
void prom_double(struct buf *b, const char *name, const char *const *labels,
		 double v);
/* A family of one sample without labels. */
void prom_counter(struct buf *b, const char *name, const char *help,
		  uint64_t v);
void prom_gauge(struct buf *b, const char *name, const char *help, double v);

/*
 * A histogram: n upper bounds, increasing, and the count of observations
 * at or below each (cumulative when written), their count and sum. Not
 * locked: its owner serializes observe and write.
 *
 *   x_seconds_bucket{le="0.01"} 3  ...  x_seconds_bucket{le="+Inf"} 7
 *   x_seconds_sum 0.42
 *   x_seconds_count 7
 */
struct prom_hist {
	const double *bounds;
	int n;
	uint64_t *counts;             /* n: observations in (bound[i-1], bound[i]] */
	uint64_t count;
	double sum;
};

/* 0, or -1 out of memory. */
int prom_hist_init(struct prom_hist *h, const double *bounds, int n);
void prom_hist_release(struct prom_hist *h);
void prom_hist_observe(struct prom_hist *h, double v);
/* The family (HELP, TYPE histogram) with its buckets, sum and count. */
void prom_hist_write(struct buf *b, const char *name, const char *help,
		     const struct prom_hist *h);

/*
 * The process_* families every Prometheus client library exports, read
 * from /proc/self: process_cpu_seconds_total,
 * process_resident_memory_bytes, process_virtual_memory_bytes,
 * process_start_time_seconds, process_open_fds, process_max_fds. A value
 * that cannot be read is left out with its family.
 */
void prom_process(struct buf *b);

#endif
