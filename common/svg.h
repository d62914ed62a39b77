/*
 * svg: small line plots as standalone SVG, for reports.
 *
 * One plot: a title, two linear axes with 1-2-5 ticks chosen to cover the
 * data, any number of series (polyline or steps, optional dots), optional
 * vertical marks (e.g. kill times) and horizontal reference lines (e.g. a
 * baseline's final loss). Text is XML-escaped. Non-finite points are
 * skipped. The output is appended to a bounded buf.
 */
#ifndef DDILOCO_SVG_H
#define DDILOCO_SVG_H

#include <stddef.h>

#include "common/buf.h"

struct svg_series {
	const char *label;
	const char *color;      /* CSS color; NULL = from the palette */
	const double *x, *y;
	size_t n;
	int steps;              /* 1 = hold each value until the next x */
	int dots;               /* 1 = a dot on each point */
};

struct svg_hline {
	const char *label;
	double y;
	const char *color;
};

struct svg_plot {
	const char *title, *xlabel, *ylabel;
	int width, height;      /* pixels; 0 = 640 × 300 */
	const double *marks;    /* vertical lines at these x */
	size_t nmarks;
	const char *marks_label;
	const struct svg_hline *hlines;
	size_t nhlines;
	int y_from_zero;        /* include 0 in the y range */
};

/* Appends one <svg> element; -1 when out has an error (buf_error), now or
 * from before. */
int svg_plot(struct buf *out, const struct svg_plot *p,
	     const struct svg_series *s, size_t ns);

/* Ticks from lo to hi with a 1-2-5 step, about `want` of them; returns the
 * count (at most max) and widens [*lo, *hi] to whole steps. */
int svg_ticks(double *lo, double *hi, int want, double *ticks, int max);

/* Appends s with &, <, >, " escaped; -1 when out has an error. */
int svg_escape(struct buf *out, const char *s);

#endif
