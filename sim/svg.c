/*
 * svg: goodput (0..1, linear y) against chips (log x), one polyline with
 * dots per line and a legend. Plain SVG 1.1, no scripts, no fonts beyond
 * the generic sans-serif.
 */
#include "sim/sim.h"

#include <math.h>

#define W 720
#define H 440
#define L 70  /* plot area: left, right, top, bottom margins */
#define R 150
#define T 30
#define B 60

static const char *const colors[] = {
	"#d62728", "#ff7f0e", "#2ca02c", "#1f77b4", "#9467bd", "#8c564b",
	"#e377c2", "#7f7f7f",
};

int sim_svg_write(FILE *f, const long *chips, int nsizes,
		  const char *const *labels, int nlines, const double *goodput)
{
	double x0 = log((double)chips[0]), x1 = log((double)chips[nsizes - 1]);
	double pw = W - L - R, ph = H - T - B;

	if (x1 <= x0)
		x1 = x0 + 1;
#define PX(c) (L + pw * (log((double)(c)) - x0) / (x1 - x0))
#define PY(g) (T + ph * (1.0 - (g)))
	fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		   "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
		   "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
		   "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
		W, H, W, H);
	fprintf(f, "<text x=\"%d\" y=\"18\" font-size=\"14\">goodput vs chips (ddiloco sim)</text>\n", L);
	for (int i = 0; i <= 10; i += 2) {
		double y = PY(i / 10.0);

		fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n"
			   "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%d%%</text>\n",
			L, y, L + pw, y, L - 6, y + 4, i * 10);
	}
	for (int i = 0; i < nsizes; i++) {
		double x = PX(chips[i]);

		fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n"
			   "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%gk</text>\n",
			x, T, x, T + ph, x, T + ph + 16, chips[i] / 1000.0);
	}
	fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">chips (log scale)</text>\n"
		   "<text x=\"16\" y=\"%.1f\" transform=\"rotate(-90 16 %.1f)\" text-anchor=\"middle\">goodput</text>\n",
		L + pw / 2, H - 16, T + ph / 2, T + ph / 2);
	for (int k = 0; k < nlines; k++) {
		const char *c = colors[k % (int)(sizeof(colors) / sizeof(colors[0]))];

		fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", c);
		for (int i = 0; i < nsizes; i++)
			fprintf(f, "%s%.1f,%.1f", i ? " " : "", PX(chips[i]),
				PY(goodput[k * nsizes + i]));
		fprintf(f, "\"/>\n");
		for (int i = 0; i < nsizes; i++)
			fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
				PX(chips[i]), PY(goodput[k * nsizes + i]), c);
		fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"/>\n"
			   "<text x=\"%.1f\" y=\"%d\">%s</text>\n",
			L + pw + 14, T + 10 + 20 * k, L + pw + 40, T + 10 + 20 * k, c,
			L + pw + 46, T + 14 + 20 * k, labels[k]);
	}
#undef PX
#undef PY
	fprintf(f, "</svg>\n");
	return ferror(f) ? -1 : 0;
}
