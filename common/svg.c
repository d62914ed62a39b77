/*
 * svg: line plots; see svg.h. The data range (with the marks and
 * reference lines) is widened to whole 1-2-5 ticks, mapped linearly into
 * the plot area inside fixed margins, and drawn as polylines. Appends are
 * not checked one by one: out keeps its first error (buf.h), which
 * svg_plot returns at the end.
 */
#include "common/svg.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *palette[] = {
	"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf",
};

int svg_escape(struct buf *out, const char *s)
{
	for (; s && *s; s++) {
		switch (*s) {
		case '&': buf_printf(out, "&amp;"); break;
		case '<': buf_printf(out, "&lt;"); break;
		case '>': buf_printf(out, "&gt;"); break;
		case '"': buf_printf(out, "&quot;"); break;
		default: buf_append(out, s, 1); break;
		}
	}
	return buf_error(out) ? -1 : 0;
}

int svg_ticks(double *lo, double *hi, int want, double *ticks, int max)
{
	double span, raw, mag, step;
	int n = 0;

	if (!(*hi > *lo)) {
		double pad = *lo != 0 ? fabs(*lo) * 0.1 : 1;
		*lo -= pad;
		*hi += pad;
	}
	span = *hi - *lo;
	raw = span / (want > 1 ? want : 1);
	mag = pow(10, floor(log10(raw)));
	step = raw / mag <= 1 ? mag : raw / mag <= 2 ? 2 * mag
	     : raw / mag <= 5 ? 5 * mag : 10 * mag;
	*lo = floor(*lo / step + 1e-9) * step;
	*hi = ceil(*hi / step - 1e-9) * step;
	for (double t = *lo; t <= *hi + step * 1e-6 && n < max; t += step)
		ticks[n++] = fabs(t) < step * 1e-9 ? 0 : t;
	return n;
}

/* A tick label: short, no trailing zeros; k/M suffixes for big values. */
static void fmt_tick(char *b, size_t n, double v)
{
	double a = fabs(v);

	if (a >= 1e9)
		snprintf(b, n, "%gG", v / 1e9);
	else if (a >= 1e6)
		snprintf(b, n, "%gM", v / 1e6);
	else if (a >= 1e4)
		snprintf(b, n, "%gk", v / 1e3);
	else
		snprintf(b, n, "%.4g", v);
}

/* The box every finite point, mark and horizontal line falls in; [0, 1]
 * on an axis with nothing on it. */
static void data_range(const struct svg_plot *p, const struct svg_series *s,
		       size_t ns, double *x0, double *x1, double *y0, double *y1)
{
	*x0 = *y0 = INFINITY;
	*x1 = *y1 = -INFINITY;
	for (size_t i = 0; i < ns; i++)
		for (size_t j = 0; j < s[i].n; j++) {
			if (!isfinite(s[i].x[j]) || !isfinite(s[i].y[j]))
				continue;
			*x0 = fmin(*x0, s[i].x[j]);
			*x1 = fmax(*x1, s[i].x[j]);
			*y0 = fmin(*y0, s[i].y[j]);
			*y1 = fmax(*y1, s[i].y[j]);
		}
	for (size_t i = 0; i < p->nmarks; i++)
		if (isfinite(p->marks[i])) {
			*x0 = fmin(*x0, p->marks[i]);
			*x1 = fmax(*x1, p->marks[i]);
		}
	for (size_t i = 0; i < p->nhlines; i++)
		if (isfinite(p->hlines[i].y)) {
			*y0 = fmin(*y0, p->hlines[i].y);
			*y1 = fmax(*y1, p->hlines[i].y);
		}
	if (!isfinite(*x0)) {
		*x0 = 0;
		*x1 = 1;
	}
	if (!isfinite(*y0)) {
		*y0 = 0;
		*y1 = 1;
	}
	if (p->y_from_zero && *y0 > 0)
		*y0 = 0;
}

/* Long because the SVG is written top to bottom in drawing order (grid,
 * frame, axis titles, marks, lines, series, legend); the ranges are
 * data_range()'s. */
int svg_plot(struct buf *out, const struct svg_plot *p,
	     const struct svg_series *s, size_t ns)
{
	int W = p->width ? p->width : 640, H = p->height ? p->height : 300;
	double ml = 64, mr = 16, mt = 28, mb = 44;
	double x0, x1, y0, y1;
	double xt[32], yt[32], pw = W - ml - mr, ph = H - mt - mb;
	int nxt, nyt;
	char lab[32];

	data_range(p, s, ns, &x0, &x1, &y0, &y1);
	nxt = svg_ticks(&x0, &x1, 6, xt, 32);
	nyt = svg_ticks(&y0, &y1, 5, yt, 32);
#define PX(x) (ml + ((x) - x0) / (x1 - x0) * pw)
#define PY(y) (mt + ph - ((y) - y0) / (y1 - y0) * ph)

	buf_printf(out, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
	           "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"11\">\n",
	           W, H, W, H);
	buf_printf(out, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
	buf_printf(out, "<text x=\"%g\" y=\"16\" font-size=\"13\" font-weight=\"bold\">", ml);
	svg_escape(out, p->title);
	buf_printf(out, "</text>\n");
	for (int i = 0; i < nxt; i++) {
		fmt_tick(lab, sizeof(lab), xt[i]);
		buf_printf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
		           "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
		           PX(xt[i]), mt, PX(xt[i]), mt + ph, PX(xt[i]), mt + ph + 14, lab);
	}
	for (int i = 0; i < nyt; i++) {
		fmt_tick(lab, sizeof(lab), yt[i]);
		buf_printf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
		           "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
		           ml, PY(yt[i]), ml + pw, PY(yt[i]), ml - 4, PY(yt[i]) + 4, lab);
	}
	buf_printf(out, "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"#888\"/>\n",
	           ml, mt, pw, ph);
	buf_printf(out, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">", ml + pw / 2, H - 8);
	svg_escape(out, p->xlabel);
	buf_printf(out, "</text>\n<text transform=\"translate(14,%.1f) rotate(-90)\" text-anchor=\"middle\">",
	           mt + ph / 2);
	svg_escape(out, p->ylabel);
	buf_printf(out, "</text>\n");

	for (size_t i = 0; i < p->nmarks; i++) {
		if (!isfinite(p->marks[i]))
			continue;
		buf_printf(out, "<line class=\"mark\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
		           "stroke=\"#d62728\" stroke-dasharray=\"3,3\"/>\n",
		           PX(p->marks[i]), mt, PX(p->marks[i]), mt + ph);
	}
	for (size_t i = 0; i < p->nhlines; i++) {
		const struct svg_hline *h = &p->hlines[i];
		if (!isfinite(h->y))
			continue;
		buf_printf(out, "<line class=\"hline\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
		           "stroke=\"%s\" stroke-dasharray=\"6,3\"/>\n",
		           ml, PY(h->y), ml + pw, PY(h->y), h->color ? h->color : "#555");
	}
	for (size_t i = 0; i < ns; i++) {
		const char *color = s[i].color ? s[i].color : palette[i % 6];
		int started = 0;
		double lasty = 0;

		buf_printf(out, "<polyline class=\"series\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"",
		           color);
		for (size_t j = 0; j < s[i].n; j++) {
			double x = s[i].x[j], y = s[i].y[j];
			if (!isfinite(x) || !isfinite(y))
				continue;
			if (s[i].steps && started)
				buf_printf(out, "%.1f,%.1f ", PX(x), PY(lasty));
			buf_printf(out, "%.1f,%.1f ", PX(x), PY(y));
			lasty = y;
			started = 1;
		}
		buf_printf(out, "\"/>\n");
		for (size_t j = 0; s[i].dots && j < s[i].n; j++)
			if (isfinite(s[i].x[j]) && isfinite(s[i].y[j]))
				buf_printf(out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2\" fill=\"%s\"/>\n",
				           PX(s[i].x[j]), PY(s[i].y[j]), color);
	}
	/* legend, top right inside the plot */
	{
		double ly = mt + 14;
		size_t items = ns + p->nhlines + (p->nmarks && p->marks_label ? 1 : 0);
		for (size_t i = 0; i < items; i++, ly += 14) {
			const char *label, *color, *dash = "";
			if (i < ns) {
				label = s[i].label;
				color = s[i].color ? s[i].color : palette[i % 6];
			} else if (i < ns + p->nhlines) {
				label = p->hlines[i - ns].label;
				color = p->hlines[i - ns].color ? p->hlines[i - ns].color : "#555";
				dash = " stroke-dasharray=\"6,3\"";
			} else {
				label = p->marks_label;
				color = "#d62728";
				dash = " stroke-dasharray=\"3,3\"";
			}
			buf_printf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s/>"
			           "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">",
			           ml + pw - 24, ly - 4, ml + pw - 6, ly - 4, color, dash,
			           ml + pw - 28, ly);
			svg_escape(out, label);
			buf_printf(out, "</text>\n");
		}
	}
	buf_printf(out, "</svg>\n");
	/* the appends above are checked here, once: buf's error is sticky */
	return buf_error(out) ? -1 : 0;
#undef PX
#undef PY
}
