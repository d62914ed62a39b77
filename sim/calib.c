/*
 * calib: fits the constants the published rows do not state (restart,
 * repair, pause, hetero, slice size) to those rows.
 *
 * Objective: root mean square of (simulated − published) goodput over the
 * ten published points (nonelastic and elastic × 5 sizes). Every
 * evaluation uses the same seeds (common random numbers), so the
 * objective is a deterministic function of the constants and a pattern
 * search can compare two points without noise. For each slice size in a
 * short list, a Hooke–Jeeves search (coordinate steps, halved when no step
 * improves) runs over log(restart), log(repair), log(pause) and hetero,
 * with pause_down = pause_up. The best slice size wins.
 */
#include "sim/sim.h"

#include <math.h>

#define CAL_DAYS 10.0
#define CAL_REPEATS 2
#define CAL_HALVINGS 6

static const long cal_slices[] = { 256, 1024, 4096 };

/* x: log restart, log repair, log pause, hetero */
static void apply(struct sim_params *p, const double *x)
{
	p->restart_s = exp(x[0]);
	p->repair_s = exp(x[1]);
	p->pause_down_s = p->pause_up_s = exp(x[2]);
	p->hetero = x[3] < 0 ? 0 : x[3] > 0.5 ? 0.5 : x[3];
}

static int objective(struct sim_params *p, const double *x, double *rms,
		     struct err *e)
{
	double sq = 0;

	apply(p, x);
	for (int row = 0; row < 2; row++)
		for (int i = 0; i < SIM_TABLE_SIZES; i++) {
			double g = 0;

			sim_table_mode(p, row);
			p->chips = sim_table_chips[i];
			for (int r = 0; r < CAL_REPEATS; r++) {
				struct sim_run run;

				if (sim_run_once(p, r, 0, &run, e))
					return -1;
				g += run.goodput / CAL_REPEATS;
			}
			sq += (g - sim_published[row][i]) * (g - sim_published[row][i]);
		}
	*rms = sqrt(sq / (2 * SIM_TABLE_SIZES));
	return 0;
}

int sim_calibrate(struct sim_params *p, FILE *out, double *rms_out,
		  struct err *e)
{
	struct sim_params q = *p, best = *p;
	double best_rms = INFINITY;
	int evals = 0;

	q.days = CAL_DAYS;
	q.repeats = CAL_REPEATS;
	q.harvest = 0;
	for (size_t si = 0; si < sizeof(cal_slices) / sizeof(cal_slices[0]); si++) {
		double x[4] = { log(80.0), log(1800.0 * 1024 / cal_slices[si]),
				log(9.0), 0.005 };
		double step[4] = { log(2.0), log(2.0), log(2.0), 0.004 };
		double f;

		q.slice = cal_slices[si];
		if (objective(&q, x, &f, e))
			return -1;
		evals++;
		for (int halvings = 0; halvings < CAL_HALVINGS;) {
			int improved = 0;

			for (int k = 0; k < 4; k++)
				for (int sgn = -1; sgn <= 1; sgn += 2) {
					double y[4] = { x[0], x[1], x[2], x[3] }, g;

					y[k] += sgn * step[k];
					if (k == 3 && (y[3] < 0 || y[3] > 0.5))
						continue;
					if (objective(&q, y, &g, e))
						return -1;
					evals++;
					if (g < f) {
						for (int j = 0; j < 4; j++)
							x[j] = y[j];
						f = g;
						improved = 1;
						break;
					}
				}
			if (!improved) {
				for (int k = 0; k < 4; k++)
					step[k] /= 2;
				halvings++;
			}
		}
		apply(&q, x);
		if (out)
			fprintf(out, "slice %ld: restart %.1f s, repair %.0f s, pause %.2f s, hetero %.4f: rms %.4f\n",
				q.slice, q.restart_s, q.repair_s, q.pause_down_s,
				q.hetero, f);
		if (f < best_rms) {
			best_rms = f;
			best = q;
		}
	}
	if (out)
		fprintf(out, "%d evaluations\n", evals);
	p->slice = best.slice;
	p->restart_s = best.restart_s;
	p->repair_s = best.repair_s;
	p->pause_down_s = best.pause_down_s;
	p->pause_up_s = best.pause_up_s;
	p->hetero = best.hetero;
	*rms_out = best_rms;
	return 0;
}
