/*
 * `ddiloco sim`: the command line of the goodput simulator (sim.h).
 *
 * Parses flags into a struct sim_cli (an option table, common/cli.h; every
 * message names its flag; bad input exits 2), runs the asked action and
 * prints text, CSV or JSON.
 */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmds.h"
#include "common/buf.h"
#include "common/cli.h"
#include "common/util.h"
#include "sim/sim.h"

/* A whole number of chips, with an optional k or M: 150000, 150k, 2.4M
 * (decimal only: no hex). The destination is a long. */
static int parse_chips(const struct cli_option *opt, const char *v,
		       struct err *e)
{
	char *end;
	double x, mult = 1;

	errno = 0;
	x = strtod(v, &end);
	if (end != v && (*end == 'k' || *end == 'M') && end[1] == '\0') {
		mult = *end == 'k' ? 1e3 : 1e6;
		end++;
	}
	x *= mult;
	if (end == v || *end || errno || !isfinite(x) || x != floor(x) ||
	    fabs(x) > 1e15 || strpbrk(v, "xX"))
		return err_set(e, "option '--%s' needs a whole number (150000, 150k, 2.4M), got '%s'",
			       opt->name, v);
	*(long *)opt->value = (long)x;
	return 0;
}

/* Given on the command line or not: the grid options' sentinels. */
#define UNSET_INT  INT_MIN
#define UNSET_LONG LONG_MIN

/*
 * What the action and the options given say together; the parameters'
 * own ranges are sim_params_check's.
 */
static int check_cli(struct sim_cli *c, int nactions, int seen_mode,
		     int seen_grid, struct err *e)
{
	struct sim_params *p = &c->p;

	if (nactions > 1)
		return err_set(e, "sim: choose one of --table, --rule-of-thumb, --harvest-table, --calibrate");
	if ((c->action == SIM_TABLE || c->action == SIM_THUMB ||
	     c->action == SIM_CALIBRATE) && (seen_mode || seen_grid))
		return err_set(e, "sim: --mode, --learners, --quorum and --chips do not go with --table, --rule-of-thumb or --calibrate (they run their own grid)");
	if (c->svg && c->action != SIM_TABLE)
		return err_set(e, "sim: --svg goes with --table");
	if (c->action == SIM_HARVEST) {
		if (seen_mode && p->mode != SIM_DECOUPLED)
			return err_set(e, "sim: --harvest-table needs --mode decoupled");
		p->mode = SIM_DECOUPLED;
		if (p->harvest > 0)
			return err_set(e, "sim: --harvest-table runs its own --harvest values");
		p->harvest = 1; /* checked with a harvest; the table sets its own */
		if (sim_params_check(p, e))
			return -1;
		p->harvest = 0;
		return 0;
	}
	if (c->action == SIM_ONE) {
		if (sim_params_check(p, e))
			return -1;
		if (!seen_mode)
			return err_set(e, "sim: --mode is required (nonelastic, elastic or decoupled), or ask for --table (see --help)");
		return 0;
	}
	if (c->action == SIM_CALIBRATE && c->format != SIM_TEXT)
		return err_set(e, "sim: --calibrate prints text only; drop --format");
	/* the grid sets mode, learners, chips: check the rest with M = 16 */
	{
		struct sim_params q = *p;

		q.mode = SIM_DECOUPLED;
		q.learners = 16;
		q.chips = sim_table_chips[0];
		if (q.harvest > 0)
			return err_set(e, "sim: --harvest goes with one configuration or --harvest-table");
		if (q.slice > q.chips / q.learners)
			return err_set(e, "sim: --slice must be at most %ld for the grid (16 learners on %ld chips), got %ld",
				       q.chips / q.learners, q.chips, q.slice);
		return sim_params_check(&q, e);
	}
}

/*
 * The usage is printed here after --help (c->action = SIM_HELP): it comes
 * from this function's option table. Long because that table is declared
 * here, beside the variables it fills.
 */
int sim_cli_parse(int argc, char **argv, struct sim_cli *c, struct err *e)
{
	struct sim_params *p = &c->p;
	const char *mode = NULL, *format = NULL;
	int learners = UNSET_INT, quorum = UNSET_INT, n;
	long chips = UNSET_LONG;
	int table = 0, thumb = 0, harvest_table = 0, calibrate = 0;
	char slice_help[64];
	const double lo = -INFINITY, hi = INFINITY, ilo = -1e9, ihi = 1e9;
	const unsigned def = CLI_SHOW_DEFAULT;
	const struct cli_option opts[] = {
		CLI_TEXT("usage: ddiloco sim --mode nonelastic|elastic|decoupled [--learners M]\n"
			 "                   [--chips N] [--quorum K] [--format text|csv|json] [options]\n"
			 "       ddiloco sim --table [--svg FILE] [--format ...]   the whole grid\n"
			 "       ddiloco sim --rule-of-thumb [--format ...]        M on N vs elastic on N/M\n"
			 "       ddiloco sim --harvest-table [--chips N] [--learners M]\n"
			 "       ddiloco sim --calibrate                           refit the constants\n"
			 "\n"
			 "Goodput (useful chip-time / allocated chip-time) and uptime (share of wall\n"
			 "time in which training advanced), mean and 95% interval over seeded repeats.\n"
			 "\n"
			 "what to simulate:"),
		CLI_STRING("mode", 0, &mode, "MODE", "nonelastic, elastic or decoupled"),
		CLI_INT("learners", 0, &learners, "M", ilo, ihi, "learners (M)"),
		CLI_CALLBACK("chips", 0, &chips, "N", parse_chips,
			     "chips in all (N): 150000, 150k, 2.4M"),
		CLI_INT("quorum", 0, &quorum, "K", ilo, ihi, "minimum quorum (K)"),
		CLI_FLAG("table", 0, &table,
			 "the whole grid: published sizes × 6 modes"),
		CLI_STRING("svg", 0, &c->svg, "FILE", "with --table: its plot as SVG"),
		CLI_FLAG("rule-of-thumb", 0, &thumb,
			 "M learners on N chips vs elastic on N/M"),
		CLI_FLAG("harvest-table", 0, &harvest_table,
			 "harvesting +25% .. +300% of extra capacity"),
		CLI_FLAG("calibrate", 0, &calibrate,
			 "refit the constants to the published rows"),
		CLI_STRING("format", 0, &format, "F", "text, csv or json (default text)"),
		CLI_TEXT("model (defaults fitted to the published data parallel rows, docs/sim.md):"),
		CLI_CALLBACK("slice", 0, &p->slice, "S", parse_chips, slice_help),
		CLI_DOUBLE("mtbi-hours", 0, &p->mtbi_h, "H", lo, hi,
			   "per-chip mean time between interruptions", .flags = def),
		CLI_DOUBLE("restart", 0, &p->restart_s, "SEC", lo, hi,
			   "nonelastic restart; a harvest learner's join", .flags = def),
		CLI_DOUBLE("repair", 0, &p->repair_s, "SEC", lo, hi,
			   "a failed slice is away this long", .flags = def),
		CLI_DOUBLE("pause-down", 0, &p->pause_down_s, "SEC", lo, hi,
			   "elastic scale-down pause", .flags = def),
		CLI_DOUBLE("pause-up", 0, &p->pause_up_s, "SEC", lo, hi,
			   "elastic scale-up pause", .flags = def),
		CLI_DOUBLE("hetero", 0, &p->hetero, "X", lo, hi,
			   "spread of slice speeds, slowest slice sets the pace",
			   .flags = def),
		CLI_TEXT("decoupled:"),
		CLI_DOUBLE("step", 0, &p->step_s, "SEC", lo, hi,
			   "learner step, one syncer round per step", .flags = def),
		CLI_INT("fragments", 0, &p->fragments, "P", ilo, ihi,
			"fragments, H = P", .flags = def),
		CLI_DOUBLE("overlap", 0, &p->overlap, "TAU", lo, hi,
			   "steps from pull to applied update", .flags = def),
		CLI_DOUBLE("grace", 0, &p->grace, "G", lo, hi,
			   "grace share of the overlap window", .flags = def),
		CLI_DOUBLE("harvest", 0, &p->harvest, "X", lo, hi,
			   "extra temporary capacity, share of N, e.g. 0.25 .. 3"),
		CLI_DOUBLE("harvest-on", 0, &p->harvest_on_h, "H", lo, hi,
			   "mean hours the extra capacity stays", .flags = def),
		CLI_DOUBLE("harvest-off", 0, &p->harvest_off_h, "H", lo, hi,
			   "mean hours between two windows", .flags = def),
		CLI_TEXT("run:"),
		CLI_DOUBLE("days", 0, &p->days, "D", lo, hi, "simulated days",
			   .flags = def),
		CLI_INT("repeats", 0, &p->repeats, "R", ilo, ihi, "seeded repeats",
			.flags = def),
		CLI_UINT64("seed", 0, &p->seed, "S", UINT64_MAX,
			   "first seed; same seed, same result", .flags = def),
		CLI_END(),
	};

	memset(c, 0, sizeof(*c));
	sim_params_default(p);
	c->action = SIM_ONE;
	c->format = SIM_TEXT;
	snprintf(slice_help, sizeof(slice_help), "chips per slice (%ld)", p->slice);
	n = cli_parse(opts, argc, argv, e);
	if (n == CLI_HELP) {
		cli_usage(opts, stdout);
		c->action = SIM_HELP;
		return 0;
	}
	if (n < 0)
		return err_wrap(e, "sim");
	if (n > 0)
		return err_set(e, "sim: unexpected argument '%s' (see --help)", argv[0]);
	if (mode && sim_mode_parse(mode, &p->mode))
		return err_set(e, "sim: --mode must be nonelastic, elastic or decoupled, got '%s'", mode);
	if (!format || !strcmp(format, "text"))
		c->format = SIM_TEXT;
	else if (!strcmp(format, "csv"))
		c->format = SIM_CSV;
	else if (!strcmp(format, "json"))
		c->format = SIM_JSON;
	else
		return err_set(e, "sim: --format must be text, csv or json, got '%s'", format);
	if (learners != UNSET_INT)
		p->learners = learners;
	if (quorum != UNSET_INT)
		p->quorum = quorum;
	if (chips != UNSET_LONG)
		p->chips = chips;
	c->action = table ? SIM_TABLE : thumb ? SIM_THUMB :
		    harvest_table ? SIM_HARVEST : calibrate ? SIM_CALIBRATE : SIM_ONE;
	return check_cli(c, table + thumb + harvest_table + calibrate, mode != NULL,
			 learners != UNSET_INT || quorum != UNSET_INT ||
			 chips != UNSET_LONG, e);
}

static json_t *stat_json(const struct sim_stat *s)
{
	return json_pack("[f,f]", s->lo, s->hi);
}

static json_t *result_json(const struct sim_params *p, const char *label,
			   const struct sim_result *r)
{
	return json_pack("{s:s,s:s,s:i,s:i,s:I,s:f,s:o,s:f,s:o,s:i,s:f,s:I,s:I}",
			 "label", label, "mode", sim_mode_name(p->mode),
			 "learners", p->learners, "quorum", p->quorum,
			 "chips", (json_int_t)p->chips,
			 "goodput", r->goodput.mean, "goodput_ci", stat_json(&r->goodput),
			 "uptime", r->uptime.mean, "uptime_ci", stat_json(&r->uptime),
			 "repeats", p->repeats, "days", p->days,
			 "seed", (json_int_t)p->seed, "events", (json_int_t)r->events);
}

static int print_json(json_t *j)
{
	int rc = 0;

	if (!j) {
		fprintf(stderr, "ddiloco sim: cannot build the JSON output\n");
		return 1;
	}
	if (json_dumpf(j, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(6)) ||
	    fputc('\n', stdout) == EOF)
		rc = 1;
	json_decref(j);
	return rc;
}

static const char csv_head[] =
	"label,mode,learners,quorum,chips,goodput,goodput_lo,goodput_hi,uptime,uptime_lo,uptime_hi";

static void csv_row(const struct sim_params *p, const char *label,
		    const struct sim_result *r)
{
	printf("%s,%s,%d,%d,%ld,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f", label,
	       sim_mode_name(p->mode), p->learners, p->quorum, p->chips,
	       r->goodput.mean, r->goodput.lo, r->goodput.hi, r->uptime.mean,
	       r->uptime.lo, r->uptime.hi);
}

static int run_one(const struct sim_cli *c)
{
	struct sim_result r;
	struct err e;
	const struct sim_params *p = &c->p;

	if (p->harvest > 0) {
		struct sim_harvest h;

		if (sim_harvest_estimate(p, &h, &e)) {
			fprintf(stderr, "ddiloco %s\n", e.msg);
			return 1;
		}
		if (c->format == SIM_JSON)
			return print_json(json_pack("{s:f,s:f,s:o,s:f,s:o}",
				"harvest", p->harvest,
				"time_ratio", h.time_ratio.mean, "time_ratio_ci", stat_json(&h.time_ratio),
				"goodput", h.goodput.mean, "goodput_ci", stat_json(&h.goodput)));
		if (c->format == SIM_CSV)
			printf("harvest,time_ratio,time_ratio_lo,time_ratio_hi,goodput,goodput_lo,goodput_hi\n"
			       "%.2f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f\n", p->harvest,
			       h.time_ratio.mean, h.time_ratio.lo, h.time_ratio.hi,
			       h.goodput.mean, h.goodput.lo, h.goodput.hi);
		else
			printf("harvest +%.0f%%: time to the plain run's tokens %.4f (95%% CI %.4f .. %.4f) of the plain run's; goodput %.4f\n",
			       100 * p->harvest, h.time_ratio.mean, h.time_ratio.lo,
			       h.time_ratio.hi, h.goodput.mean);
		return 0;
	}
	if (sim_estimate(p, &r, &e)) {
		fprintf(stderr, "ddiloco %s\n", e.msg);
		return 1;
	}
	switch (c->format) {
	case SIM_JSON:
		return print_json(result_json(p, sim_mode_name(p->mode), &r));
	case SIM_CSV:
		printf("%s\n", csv_head);
		csv_row(p, sim_mode_name(p->mode), &r);
		printf("\n");
		return 0;
	case SIM_TEXT:
		printf("mode %s, learners %d, quorum %d, chips %ld, %g days × %d repeats\n"
		       "goodput %.4f (95%% CI %.4f .. %.4f)\n"
		       "uptime  %.4f (95%% CI %.4f .. %.4f)\n"
		       "events  %llu in %.2f s\n",
		       sim_mode_name(p->mode), p->learners, p->quorum, p->chips,
		       p->days, p->repeats, r.goodput.mean, r.goodput.lo,
		       r.goodput.hi, r.uptime.mean, r.uptime.lo, r.uptime.hi,
		       (unsigned long long)r.events, r.cpu_s);
	}
	return 0;
}

/* The folder must be writable before minutes of simulation are spent. */
static int svg_writable(const char *path)
{
	char dir[4096];
	char *slash;

	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == dir)
		dir[1] = '\0';
	else
		*slash = '\0';
	if (access(dir, W_OK)) {
		fprintf(stderr, "ddiloco sim: --svg: cannot write in '%s': %s\n",
			dir, strerror(errno));
		return 0;
	}
	return 1;
}

/* Written whole or not at all (file_write_atomic). */
static int write_svg(const char *path, const char *const *labels,
		     const double *good)
{
	struct buf b;
	struct err e;
	int rc = -1;

	buf_init(&b, 1 << 20);
	if (sim_table_svg(&b, labels, good))
		fprintf(stderr, "ddiloco sim: --svg: cannot draw the plot\n");
	else if (file_write_atomic(path, b.data, b.len, &e))
		fprintf(stderr, "ddiloco sim: --svg: %s\n", e.msg);
	else
		rc = 0;
	buf_release(&b);
	return rc;
}

static int run_table(const struct sim_cli *c)
{
	struct sim_result res[SIM_TABLE_MODES][SIM_TABLE_SIZES];
	const char *labels[SIM_TABLE_MODES];
	double good[SIM_TABLE_MODES * SIM_TABLE_SIZES];
	struct sim_params p = c->p;
	json_t *arr = NULL;
	struct err e;
	double cpu = 0;
	uint64_t events = 0;

	if (c->svg && !svg_writable(c->svg))
		return 1;
	for (int m = 0; m < SIM_TABLE_MODES; m++)
		for (int i = 0; i < SIM_TABLE_SIZES; i++) {
			labels[m] = sim_table_mode(&p, m);
			p.chips = sim_table_chips[i];
			if (sim_estimate(&p, &res[m][i], &e)) {
				fprintf(stderr, "ddiloco %s\n", e.msg);
				return 1;
			}
			good[m * SIM_TABLE_SIZES + i] = res[m][i].goodput.mean;
			cpu += res[m][i].cpu_s;
			events += res[m][i].events;
		}
	if (c->svg && write_svg(c->svg, labels, good))
		return 1;
	if (c->format == SIM_JSON)
		arr = json_array();
	if (c->format == SIM_CSV)
		printf("%s,published\n", csv_head);
	if (c->format == SIM_TEXT) {
		printf("goodput (uptime) over %g days × %d repeats; published in [brackets]\n%-9s",
		       p.days, p.repeats, "chips");
		for (int m = 0; m < SIM_TABLE_MODES; m++)
			printf(" %-20s", labels[m]);
		printf("\n");
	}
	for (int i = 0; i < SIM_TABLE_SIZES; i++) {
		if (c->format == SIM_TEXT)
			printf("%-9ld", sim_table_chips[i]);
		for (int m = 0; m < SIM_TABLE_MODES; m++) {
			const struct sim_result *r = &res[m][i];
			double pub = m < 2 ? sim_published[m][i] : NAN;
			char cell[64];

			sim_table_mode(&p, m);
			p.chips = sim_table_chips[i];
			if (c->format == SIM_JSON) {
				json_t *o = result_json(&p, labels[m], r);

				if (m < 2)
					json_object_set_new(o, "published", json_real(pub));
				json_array_append_new(arr, o);
			} else if (c->format == SIM_CSV) {
				csv_row(&p, labels[m], r);
				if (m < 2)
					printf(",%.2f\n", pub);
				else
					printf(",\n");
			} else {
				if (m < 2)
					snprintf(cell, sizeof(cell), "%.3f (%.3f) [%.2f]",
						 r->goodput.mean, r->uptime.mean, pub);
				else
					snprintf(cell, sizeof(cell), "%.3f (%.3f)",
						 r->goodput.mean, r->uptime.mean);
				printf(" %-20s", cell);
			}
		}
		if (c->format == SIM_TEXT)
			printf("\n");
	}
	if (c->format == SIM_JSON)
		return print_json(arr);
	if (c->format == SIM_TEXT)
		printf("%llu events simulated in %.2f s of CPU\n",
		       (unsigned long long)events, cpu);
	return 0;
}

/* M learners on N chips against one elastic learner on N/M chips. */
static int run_thumb(const struct sim_cli *c)
{
	struct sim_params p = c->p;
	json_t *arr = c->format == SIM_JSON ? json_array() : NULL;
	double sum = 0, worst = 0;
	int n = 0;
	struct err e;

	if (c->format == SIM_CSV)
		printf("chips,learners,decoupled,decoupled_lo,decoupled_hi,elastic_n_over_m,elastic_lo,elastic_hi,difference\n");
	if (c->format == SIM_TEXT)
		printf("%-9s %-3s %-24s %-24s %s\n", "chips", "M",
		       "decoupled M on N", "elastic on N/M", "difference");
	for (int i = 0; i < SIM_TABLE_SIZES; i++)
		for (int m = 2; m < SIM_TABLE_MODES; m++) {
			struct sim_result d, el;
			struct sim_params q;

			sim_table_mode(&p, m);
			p.chips = sim_table_chips[i];
			q = p;
			sim_table_mode(&q, 1);
			q.chips = p.chips / p.learners;
			if (sim_estimate(&p, &d, &e) || sim_estimate(&q, &el, &e)) {
				fprintf(stderr, "ddiloco %s\n", e.msg);
				json_decref(arr);
				return 1;
			}
			sum += fabs(d.goodput.mean - el.goodput.mean);
			if (fabs(d.goodput.mean - el.goodput.mean) > fabs(worst))
				worst = d.goodput.mean - el.goodput.mean;
			n++;
			if (arr)
				json_array_append_new(arr, json_pack("{s:I,s:i,s:f,s:o,s:f,s:o,s:f}",
					"chips", (json_int_t)p.chips, "learners", p.learners,
					"decoupled", d.goodput.mean, "decoupled_ci", stat_json(&d.goodput),
					"elastic_n_over_m", el.goodput.mean, "elastic_ci", stat_json(&el.goodput),
					"difference", d.goodput.mean - el.goodput.mean));
			else if (c->format == SIM_CSV)
				printf("%ld,%d,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%+.4f\n", p.chips,
				       p.learners, d.goodput.mean, d.goodput.lo, d.goodput.hi,
				       el.goodput.mean, el.goodput.lo, el.goodput.hi,
				       d.goodput.mean - el.goodput.mean);
			else
				printf("%-9ld %-3d %.4f (%.4f..%.4f)  %.4f (%.4f..%.4f)  %+.4f\n",
				       p.chips, p.learners, d.goodput.mean, d.goodput.lo,
				       d.goodput.hi, el.goodput.mean, el.goodput.lo,
				       el.goodput.hi, d.goodput.mean - el.goodput.mean);
		}
	if (arr)
		return print_json(arr);
	if (c->format == SIM_TEXT)
		printf("mean |difference| %.4f, largest %+.4f\n", sum / n, worst);
	return 0;
}

static int run_harvest(const struct sim_cli *c)
{
	static const double extra[] = { 0.25, 0.5, 1.0, 2.0, 3.0 };
	struct sim_params p = c->p;
	json_t *arr = c->format == SIM_JSON ? json_array() : NULL;
	struct err e;

	if (c->format == SIM_CSV)
		printf("harvest,time_ratio,time_ratio_lo,time_ratio_hi,goodput\n");
	if (c->format == SIM_TEXT)
		printf("decoupled M=%d on %ld chips; extra capacity for ~%gh every ~%gh\n"
		       "%-8s %s\n", p.learners, p.chips, p.harvest_on_h,
		       p.harvest_on_h + p.harvest_off_h, "extra",
		       "wall time to the same tokens, relative to no extra capacity");
	for (size_t i = 0; i < sizeof(extra) / sizeof(extra[0]); i++) {
		struct sim_harvest h;

		p.harvest = extra[i];
		if (sim_harvest_estimate(&p, &h, &e)) {
			fprintf(stderr, "ddiloco %s\n", e.msg);
			json_decref(arr);
			return 1;
		}
		if (arr)
			json_array_append_new(arr, json_pack("{s:f,s:f,s:o,s:f}",
				"harvest", extra[i], "time_ratio", h.time_ratio.mean,
				"time_ratio_ci", stat_json(&h.time_ratio),
				"goodput", h.goodput.mean));
		else if (c->format == SIM_CSV)
			printf("%.2f,%.4f,%.4f,%.4f,%.4f\n", extra[i],
			       h.time_ratio.mean, h.time_ratio.lo, h.time_ratio.hi,
			       h.goodput.mean);
		else {
			char label[16];

			snprintf(label, sizeof(label), "+%.0f%%", 100 * extra[i]);
			printf("%-8s %.4f (95%% CI %.4f .. %.4f), goodput %.4f\n",
			       label, h.time_ratio.mean, h.time_ratio.lo,
			       h.time_ratio.hi, h.goodput.mean);
		}
	}
	return arr ? print_json(arr) : 0;
}

static int run_calibrate(const struct sim_cli *c)
{
	struct sim_params p = c->p;
	double rms;
	struct err e;

	if (sim_calibrate(&p, stdout, &rms, &e)) {
		fprintf(stderr, "ddiloco %s\n", e.msg);
		return 1;
	}
	printf("fitted: --slice %ld --restart %.1f --repair %.0f --pause-down %.2f --pause-up %.2f --hetero %.4f\n"
	       "rms goodput error %.4f\n", p.slice, p.restart_s, p.repair_s,
	       p.pause_down_s, p.pause_up_s, p.hetero, rms);
	return 0;
}

int cmd_sim(int argc, char **argv)
{
	struct sim_cli c;
	struct err e;

	if (sim_cli_parse(argc, argv, &c, &e)) {
		fprintf(stderr, "ddiloco %s\n", e.msg);
		return 2;
	}
	switch (c.action) {
	case SIM_HELP:
		return 0;
	case SIM_ONE:
		return run_one(&c);
	case SIM_TABLE:
		return run_table(&c);
	case SIM_THUMB:
		return run_thumb(&c);
	case SIM_HARVEST:
		return run_harvest(&c);
	case SIM_CALIBRATE:
		return run_calibrate(&c);
	}
	return 2;
}
