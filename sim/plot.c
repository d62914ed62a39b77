/*
 * plot: the goodput-vs-chips figure of `ddiloco sim --table`, drawn with
 * common/svg: one line per mode, plus the two published rows as dots.
 */
#include "sim/sim.h"

#include "common/svg.h"

int sim_table_svg(struct buf *out, const char *const *labels,
		  const double *goodput)
{
	static const char *const colors[SIM_TABLE_MODES] = {
		"#d62728", "#ff7f0e", "#2ca02c", "#1f77b4", "#9467bd", "#8c564b",
	};
	double x[SIM_TABLE_SIZES];
	struct svg_series s[SIM_TABLE_MODES + 2];
	struct svg_plot p = {
		.title = "goodput vs chips (ddiloco sim --table)",
		.xlabel = "chips (millions)",
		.ylabel = "goodput",
		.width = 720,
		.height = 420,
		.y_from_zero = 1,
	};
	int n = 0;

	for (int i = 0; i < SIM_TABLE_SIZES; i++)
		x[i] = sim_table_chips[i] / 1e6;
	for (int m = 0; m < SIM_TABLE_MODES; m++)
		s[n++] = (struct svg_series){
			.label = labels[m], .color = colors[m], .x = x,
			.y = goodput + m * SIM_TABLE_SIZES, .n = SIM_TABLE_SIZES,
			.dots = 1,
		};
	s[n++] = (struct svg_series){
		.label = "published nonelastic", .color = "#f4a6a6", .x = x,
		.y = sim_published[0], .n = SIM_TABLE_SIZES, .dots = 1,
	};
	s[n++] = (struct svg_series){
		.label = "published elastic", .color = "#ffc98f", .x = x,
		.y = sim_published[1], .n = SIM_TABLE_SIZES, .dots = 1,
	};
	return svg_plot(out, &p, s, (size_t)n);
}
