/*
 * `ddiloco sim`: the command line of the goodput simulator (sim.h).
 *
 * Parses flags into a struct sim_cli (every message names its flag; bad
 * input exits 2), runs the asked action and prints text, CSV or JSON.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmds.h"
#include "common/buf.h"
#include "common/util.h"
#include "sim/sim.h"

static const char usage_text[] =
"usage: ddiloco sim --mode nonelastic|elastic|decoupled [--learners M]\n"
"                   [--chips N] [--quorum K] [--format text|csv|json] [options]\n"
"       ddiloco sim --table [--svg FILE] [--format ...]   the whole grid\n"
"       ddiloco sim --rule-of-thumb [--format ...]        M on N vs elastic on N/M\n"
"       ddiloco sim --harvest-table [--chips N] [--learners M]\n"
"       ddiloco sim --calibrate                           refit the constants\n"
"\n"
"Goodput (useful chip-time / allocated chip-time) and uptime (share of wall\n"
"time in which training advanced), mean and 95%% interval over seeded repeats.\n"
"\n"
"model (defaults fitted to the published data parallel rows, docs/sim.md):\n"
"  --slice S          chips per slice (%ld)\n"
"  --mtbi-hours H     per-chip mean time between interruptions (%g)\n"
"  --restart SEC      nonelastic restart; a harvest learner's join (%g)\n"
"  --repair SEC       a failed slice is away this long (%g)\n"
"  --pause-down SEC   elastic scale-down pause (%g)\n"
"  --pause-up SEC     elastic scale-up pause (%g)\n"
"  --hetero X         spread of slice speeds, slowest slice sets the pace (%g)\n"
"decoupled:\n"
"  --step SEC         learner step, one syncer round per step (%g)\n"
"  --fragments P      fragments, H = P (%d)\n"
"  --overlap TAU      steps from pull to applied update (%g)\n"
"  --grace G          grace share of the overlap window (%g)\n"
"  --harvest X        extra temporary capacity, share of N, e.g. 0.25 .. 3\n"
"  --harvest-on H     mean hours the extra capacity stays (%g)\n"
"  --harvest-off H    mean hours between two windows (%g)\n"
"run:\n"
"  --days D           simulated days (%g)\n"
"  --repeats R        seeded repeats (%d)\n"
"  --seed S           first seed; same seed, same result (%llu)\n";

static void usage(FILE *f)
{
	struct sim_params d;

	sim_params_default(&d);
	fprintf(f, usage_text, d.slice, d.mtbi_h, d.restart_s, d.repair_s,
		d.pause_down_s, d.pause_up_s, d.hetero, d.step_s, d.fragments,
		d.overlap, d.grace, d.harvest_on_h, d.harvest_off_h, d.days,
		d.repeats, (unsigned long long)d.seed);
}

static int parse_double(const char *flag, const char *v, double *out,
			struct err *e)
{
	char *end;
	double x;

	errno = 0;
	x = strtod(v, &end);
	if (end == v || *end || errno || !isfinite(x))
		return err_set(e, "sim: %s wants a number, got '%s'", flag, v);
	*out = x;
	return 0;
}

/* A whole number of chips, with an optional k or M: 150000, 150k, 2.4M
 * (decimal only: no hex). */
static int parse_long(const char *flag, const char *v, long *out,
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
		return err_set(e, "sim: %s wants a whole number (150000, 150k, 2.4M), got '%s'",
			       flag, v);
	*out = (long)x;
	return 0;
}

static int parse_int(const char *flag, const char *v, int *out, struct err *e)
{
	char *end;
	long x;

	errno = 0;
	x = strtol(v, &end, 10);
	if (end == v || *end || errno)
		return err_set(e, "sim: %s wants a whole number, got '%s'", flag, v);
	if (x < -1000000000L || x > 1000000000L)
		return err_set(e, "sim: %s is out of range, got '%s'", flag, v);
	*out = (int)x;
	return 0;
}

enum kind { K_DOUBLE, K_LONG, K_INT };

int sim_cli_parse(int argc, char **argv, struct sim_cli *c, struct err *e)
{
	struct sim_params *p = &c->p;
	const struct {
		const char *flag;
		enum kind kind;
		void *dst;
	} opts[] = {
		{ "--learners", K_INT, &p->learners },
		{ "--quorum", K_INT, &p->quorum },
		{ "--chips", K_LONG, &p->chips },
		{ "--slice", K_LONG, &p->slice },
		{ "--mtbi-hours", K_DOUBLE, &p->mtbi_h },
		{ "--restart", K_DOUBLE, &p->restart_s },
		{ "--repair", K_DOUBLE, &p->repair_s },
		{ "--pause-down", K_DOUBLE, &p->pause_down_s },
		{ "--pause-up", K_DOUBLE, &p->pause_up_s },
		{ "--hetero", K_DOUBLE, &p->hetero },
		{ "--step", K_DOUBLE, &p->step_s },
		{ "--fragments", K_INT, &p->fragments },
		{ "--overlap", K_DOUBLE, &p->overlap },
		{ "--grace", K_DOUBLE, &p->grace },
		{ "--days", K_DOUBLE, &p->days },
		{ "--repeats", K_INT, &p->repeats },
		{ "--harvest", K_DOUBLE, &p->harvest },
		{ "--harvest-on", K_DOUBLE, &p->harvest_on_h },
		{ "--harvest-off", K_DOUBLE, &p->harvest_off_h },
	};
	int seen_mode = 0, seen_grid = 0, nactions = 0;

	memset(c, 0, sizeof(*c));
	sim_params_default(p);
	c->action = SIM_ONE;
	c->format = SIM_TEXT;
	for (int i = 1; i < argc; i++) {
		char name[64];
		const char *a = argv[i], *v = NULL, *eq = strchr(a, '=');
		size_t k, nopts = sizeof(opts) / sizeof(opts[0]);

		if (strncmp(a, "--", 2))
			return err_set(e, "sim: unexpected argument '%s' (see --help)", a);
		if (eq) {
			snprintf(name, sizeof(name), "%.*s", (int)(eq - a), a);
			v = eq + 1;
		} else {
			snprintf(name, sizeof(name), "%s", a);
		}
		/* the flags without a value */
		{
			static const struct {
				const char *flag;
				enum sim_action action;
			} acts[] = {
				{ "--help", SIM_HELP }, { "--table", SIM_TABLE },
				{ "--rule-of-thumb", SIM_THUMB },
				{ "--harvest-table", SIM_HARVEST },
				{ "--calibrate", SIM_CALIBRATE },
			};
			size_t j;

			for (j = 0; j < sizeof(acts) / sizeof(acts[0]); j++)
				if (!strcmp(name, acts[j].flag))
					break;
			if (j < sizeof(acts) / sizeof(acts[0])) {
				if (v)
					return err_set(e, "sim: %s takes no value", name);
				if (acts[j].action == SIM_HELP) {
					c->action = SIM_HELP;
					return 0;
				}
				c->action = acts[j].action;
				nactions++;
				continue;
			}
		}
		if (!v) {
			if (i + 1 >= argc)
				return err_set(e, "sim: %s needs a value", name);
			v = argv[++i];
		}
		if (!strcmp(name, "--mode")) {
			if (sim_mode_parse(v, &p->mode))
				return err_set(e, "sim: --mode must be nonelastic, elastic or decoupled, got '%s'", v);
			seen_mode = 1;
			continue;
		}
		if (!strcmp(name, "--format")) {
			if (!strcmp(v, "text"))
				c->format = SIM_TEXT;
			else if (!strcmp(v, "csv"))
				c->format = SIM_CSV;
			else if (!strcmp(v, "json"))
				c->format = SIM_JSON;
			else
				return err_set(e, "sim: --format must be text, csv or json, got '%s'", v);
			continue;
		}
		if (!strcmp(name, "--svg")) {
			c->svg = v;
			continue;
		}
		if (!strcmp(name, "--seed")) {
			char *end;

			errno = 0;
			p->seed = strtoull(v, &end, 10);
			if (end == v || *end || errno || *v == '-')
				return err_set(e, "sim: --seed wants a whole number, got '%s'", v);
			continue;
		}
		for (k = 0; k < nopts; k++)
			if (!strcmp(name, opts[k].flag))
				break;
		if (k == nopts)
			return err_set(e, "sim: unknown option '%s' (see --help)", name);
		if (!strcmp(name, "--learners") || !strcmp(name, "--quorum") ||
		    !strcmp(name, "--chips"))
			seen_grid = 1;
		switch (opts[k].kind) {
		case K_DOUBLE:
			if (parse_double(name, v, opts[k].dst, e))
				return -1;
			break;
		case K_LONG:
			if (parse_long(name, v, opts[k].dst, e))
				return -1;
			break;
		case K_INT:
			if (parse_int(name, v, opts[k].dst, e))
				return -1;
			break;
		}
	}
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
		usage(stdout);
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
