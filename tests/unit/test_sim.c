/* The goodput simulator: known answers, seeds, bad parameters, outputs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "sim/sim.h"
#include "tests/unit/testlib.h"

static void base(struct sim_params *p, enum sim_mode mode, int m, long chips)
{
	sim_params_default(p);
	p->mode = mode;
	p->learners = m;
	p->chips = chips;
	p->days = 10;
	p->repeats = 5;
}

static void no_failures_goodput_one(void **state)
{
	enum sim_mode modes[3] = { SIM_NONELASTIC, SIM_ELASTIC, SIM_DECOUPLED };
	int ms[3] = { 1, 1, 4 };

	(void)state;
	for (int i = 0; i < 3; i++) {
		struct sim_params p;
		struct sim_run r;

		base(&p, modes[i], ms[i], 600000);
		p.mtbi_h = 1e12;
		p.hetero = 0;
		assert_int_equal(sim_run_once(&p, 0, 0, &r, NULL), 0);
		assert_int_equal(r.failures, 0);
		assert_near(r.goodput, 1.0, 1e-12);
		assert_near(r.uptime, 1.0, 1e-12);
		assert_near(r.wall_s, 10 * 86400.0, 1e-6);
	}
}

/* Every failure costs the whole job D seconds: goodput = 1 / (1 + D/MTBF). */
static void rare_failures_match_renewal_formula(void **state)
{
	struct sim_params p;
	struct sim_result r;
	double mtbf, expect;

	(void)state;
	base(&p, SIM_NONELASTIC, 1, 10000);
	p.hetero = 0;
	p.restart_s = 300;
	p.days = 30;
	p.repeats = 20;
	mtbf = p.mtbi_h * 3600.0 / (double)p.chips; /* whole job: 3154 s */
	expect = 1.0 / (1.0 + p.restart_s / mtbf);   /* 0.9131 */
	assert_int_equal(sim_estimate(&p, &r, NULL), 0);
	assert_at_most(r.goodput.lo, expect);
	assert_at_most(expect, r.goodput.hi);
	assert_less(r.goodput.hi - r.goodput.lo, 0.01);
	/* the job is all up or all down: uptime is the same number */
	assert_near(r.uptime.mean, r.goodput.mean, 1e-9);
}

/* Elastic: each failure costs two pauses; repairs hold S·repair/MTBI of chips. */
static void elastic_matches_its_formula(void **state)
{
	struct sim_params p;
	struct sim_result r;
	double away, lambda, expect;

	(void)state;
	base(&p, SIM_ELASTIC, 1, 100000);
	p.hetero = 0;
	p.days = 20;
	p.repeats = 10;
	/* share of slices away for repair; failures come from the rest; a
	 * pause starts on a failure or a return while running */
	away = (double)p.slice * p.repair_s / (p.mtbi_h * 3600.0);
	lambda = (1.0 - away) * (double)p.chips / (p.mtbi_h * 3600.0);
	expect = (1.0 - away) /
		 (1.0 + lambda * (p.pause_down_s + p.pause_up_s));
	assert_int_equal(sim_estimate(&p, &r, NULL), 0);
	assert_near(r.goodput.mean, expect, 0.005);
}

static void same_seed_same_result(void **state)
{
	struct sim_params p;
	struct sim_result a, b, c;

	(void)state;
	base(&p, SIM_DECOUPLED, 4, 300000);
	p.hetero = 0.01;
	assert_int_equal(sim_estimate(&p, &a, NULL), 0);
	assert_int_equal(sim_estimate(&p, &b, NULL), 0);
	assert_memory_equal(&a.goodput, &b.goodput, sizeof(a.goodput));
	assert_memory_equal(&a.uptime, &b.uptime, sizeof(a.uptime));
	assert_int_equal(a.events, b.events);
	p.seed = 2;
	assert_int_equal(sim_estimate(&p, &c, NULL), 0);
	assert_true(c.goodput.mean != a.goodput.mean);
	assert_near(c.goodput.mean, a.goodput.mean, 0.02);
}

/* Within the fitted model the rule of thumb holds: M on N ~ elastic on N/M. */
static void decoupled_like_elastic_on_n_over_m(void **state)
{
	struct sim_params d, el;
	struct sim_result rd, re;

	(void)state;
	base(&d, SIM_DECOUPLED, 4, 1200000);
	base(&el, SIM_ELASTIC, 1, 300000);
	assert_int_equal(sim_estimate(&d, &rd, NULL), 0);
	assert_int_equal(sim_estimate(&el, &re, NULL), 0);
	assert_near(rd.goodput.mean, re.goodput.mean, 0.01);
	assert_greater(rd.uptime.mean, 0.999); /* K = 1: someone is always up */
	assert_less(re.uptime.mean, 0.9);
}

/* Short steps and long pauses: a stopped learner misses rounds and loses
 * unmerged work; K = M stops the rounds instead (uptime falls, no loss). */
static void missed_rounds_and_quorum(void **state)
{
	struct sim_params p;
	struct sim_result k1, kall, el;

	(void)state;
	base(&p, SIM_DECOUPLED, 4, 600000);
	p.step_s = 1;
	p.pause_down_s = p.pause_up_s = 30;
	assert_int_equal(sim_estimate(&p, &k1, NULL), 0);
	p.quorum = 4;
	assert_int_equal(sim_estimate(&p, &kall, NULL), 0);
	base(&p, SIM_ELASTIC, 1, 150000);
	p.pause_down_s = p.pause_up_s = 30;
	assert_int_equal(sim_estimate(&p, &el, NULL), 0);
	assert_less(k1.goodput.hi, el.goodput.lo);     /* missed work */
	assert_near(kall.goodput.mean, el.goodput.mean, 0.01);
	assert_less(kall.uptime.mean, 0.9 * k1.uptime.mean);
}

static void heterogeneity_costs_big_groups_more(void **state)
{
	struct sim_params p;
	struct sim_result flat, h1, h16;

	(void)state;
	base(&p, SIM_ELASTIC, 1, 600000);
	p.hetero = 0;
	assert_int_equal(sim_estimate(&p, &flat, NULL), 0);
	p.hetero = 0.02;
	assert_int_equal(sim_estimate(&p, &h1, NULL), 0);
	/* min over ~2300 slices of 1 - 0.02|Z|: about 1 - 0.02·3.6 */
	assert_greater(flat.goodput.mean - h1.goodput.mean, 0.05);
	assert_less(flat.goodput.mean - h1.goodput.mean, 0.09);
	base(&p, SIM_DECOUPLED, 16, 600000 * 16);
	p.hetero = 0.02;
	p.mtbi_h = 1e12;
	assert_int_equal(sim_estimate(&p, &h16, NULL), 0);
	assert_less(h16.goodput.mean, 1.0 - 0.05);
}

static void harvesting_shortens_wall_time(void **state)
{
	struct sim_params p;
	struct sim_harvest a, b;

	(void)state;
	base(&p, SIM_DECOUPLED, 4, 150000);
	p.harvest = 1.0;
	p.harvest_on_h = 8;
	p.harvest_off_h = 16;
	assert_int_equal(sim_harvest_estimate(&p, &a, NULL), 0);
	p.harvest = 3.0;
	assert_int_equal(sim_harvest_estimate(&p, &b, NULL), 0);
	/* a third of the time with 2× (4×) the chips: about 0.75 (0.5) */
	assert_greater(a.time_ratio.mean, 0.65);
	assert_less(a.time_ratio.mean, 0.85);
	assert_less(b.time_ratio.mean, a.time_ratio.mean);
	assert_greater(b.time_ratio.mean, 0.35);
}

static void expect_refused(const char *const *args, const char *want)
{
	char *argv[16];
	int argc = 0;
	struct sim_cli c;
	struct err e = { { 0 } };

	argv[argc++] = (char *)"sim";
	for (; *args; args++)
		argv[argc++] = (char *)*args;
	if (sim_cli_parse(argc, argv, &c, &e) == 0)
		fail_msg("accepted: %s", want);
	if (!strstr(e.msg, want))
		fail_msg("message '%s' does not say '%s'", e.msg, want);
}

static void bad_parameters_refused(void **state)
{
#define R(want, ...) expect_refused((const char *const[]){ __VA_ARGS__, NULL }, want)
	(void)state;
	R("--mode must be nonelastic, elastic or decoupled, got 'sync'", "--mode", "sync");
	R("--learners must be between 1 and 256, got 0", "--mode", "decoupled", "--learners", "0");
	R("--learners must be 1 with --mode elastic", "--mode", "elastic", "--learners", "4");
	R("--quorum must be between 1 and 4, got 5", "--mode", "decoupled", "--learners", "4", "--quorum", "5");
	R("--chips must be at least --slice × --learners", "--mode", "decoupled", "--learners", "16", "--chips", "1000");
	R("option '--chips' needs a whole number (150000, 150k, 2.4M), got 'lots'", "--chips", "lots");
	R("option '--chips' needs a whole number (150000, 150k, 2.4M), got '1.5'", "--chips", "1.5");
	R("option '--chips' needs a whole number (150000, 150k, 2.4M), got '2G'", "--chips", "2G");
	R("option '--learners' needs a whole number, got '4.5'", "--learners", "4.5");
	R("--chips must be between 1 and", "--chips", "-5");
	R("--slice must be between 1 and", "--slice", "0");
	R("--mtbi-hours must be between", "--mtbi-hours", "0");
	R("--restart must be between 0 and", "--restart", "-1");
	R("option '--repair' needs a number, got 'soon'", "--repair", "soon");
	R("option '--pause-down' needs a number, got 'nan'", "--pause-down", "nan");
	R("--pause-up must be between 0 and", "--pause-up", "-3");
	R("--hetero must be between 0 and 0.5, got 0.9", "--hetero", "0.9");
	R("--step must be between", "--step", "0");
	R("--fragments must be between 1 and 1024", "--fragments", "0");
	R("--overlap must be between 0 and 1000", "--overlap", "-1");
	R("--grace must be between 0 and 1, got 2", "--grace", "2");
	R("--days must be between", "--days", "0");
	R("--repeats must be between 2 and 1000, got 1", "--repeats", "1");
	R("option '--seed' needs a whole number, got '-1'", "--seed", "-1");
	R("--harvest needs --mode decoupled", "--mode", "elastic", "--harvest", "1");
	R("--harvest must be between 0 and 10", "--harvest", "11");
	R("--harvest-on must be between", "--harvest-on", "0");
	R("--harvest-off must be between", "--harvest-off", "0");
	R("--format must be text, csv or json, got 'xml'", "--format", "xml");
	R("unknown option '--chip'", "--chip", "5");
	R("option '--days' needs a value", "--days");
	R("option '--table' takes no value", "--table=1");
	R("do not go with --table", "--table", "--chips", "150000");
	R("--svg goes with --table", "--svg", "x.svg");
	R("--slice must be at most 9375 for the grid", "--table", "--slice", "10000");
	R("unexpected argument 'fast'", "fast");
	R("--mode is required", "--chips", "150000");
	R("--calibrate prints text only", "--calibrate", "--format", "json");
#undef R
}

static void good_arguments_parsed(void **state)
{
	char *argv[] = { (char *)"sim", (char *)"--mode", (char *)"decoupled",
			 (char *)"--learners=8", (char *)"--chips", (char *)"1.2M",
			 (char *)"--quorum", (char *)"2", (char *)"--format", (char *)"json" };
	struct sim_cli c;

	(void)state;
	assert_int_equal(sim_cli_parse(10, argv, &c, NULL), 0);
	assert_int_equal(c.action, SIM_ONE);
	assert_int_equal(c.format, SIM_JSON);
	assert_int_equal(c.p.mode, SIM_DECOUPLED);
	assert_int_equal(c.p.learners, 8);
	assert_int_equal(c.p.quorum, 2);
	assert_int_equal(c.p.chips, 1200000);
}

static void svg_has_one_line_per_mode(void **state)
{
	const char *labels[SIM_TABLE_MODES] = { "nonelastic", "elastic", "M=2",
						"M=4", "M=8", "M=16" };
	double g[SIM_TABLE_MODES * SIM_TABLE_SIZES];
	struct buf b;
	char *s;
	int lines = 0;

	(void)state;
	for (int i = 0; i < SIM_TABLE_MODES * SIM_TABLE_SIZES; i++)
		g[i] = 0.5 + 0.01 * i;
	buf_init(&b, 1 << 20);
	assert_int_equal(sim_table_svg(&b, labels, g), 0);
	for (s = b.data; (s = strstr(s, "<polyline")); s++)
		lines++;
	assert_int_equal(lines, SIM_TABLE_MODES + 2); /* + the published rows */
	assert_non_null(strstr(b.data, ">M=16<"));
	assert_non_null(strstr(b.data, ">published elastic<"));
	assert_non_null(strstr(b.data, "</svg>"));
	buf_release(&b);
	/* a buffer too small is an error, not a cut plot */
	buf_init(&b, 100);
	assert_int_equal(sim_table_svg(&b, labels, g), -1);
	buf_release(&b);
}

/* Median of max|Z| over n, found by bisection of erf(z/√2)^n = 1/2. */
static void group_speed_quantiles(void **state)
{
	(void)state;
	assert_near(sim_group_speed(0.5, 10, 0.1), (1 - 0.1 * 1.831895), 1e-6);
	assert_near(sim_group_speed(0.5, 1000, 0.1), (1 - 0.1 * 3.392370), 1e-6);
	assert_near(sim_group_speed(0.5, 100000, 0.1), (1 - 0.1 * 4.495783), 1e-6);
	/* one slice: |Z| at u = 0.5 is 0.674490 */
	assert_near(sim_group_speed(0.5, 1, 0.1), (1 - 0.1 * 0.674490), 1e-6);
	assert_exactly(sim_group_speed(0.5, 1000, 0), 1.0);
	assert_exactly(sim_group_speed(0.999999, 10, 0.5), 0.05);
	/* more slices, slower: the slowest member sets the pace */
	assert_less(sim_group_speed(0.3, 5000, 0.01), sim_group_speed(0.3, 50, 0.01));
}

static void stat_interval(void **state)
{
	double x[4] = { 1, 2, 3, 4 };
	struct sim_stat s;

	(void)state;
	sim_stat_of(x, 4, &s);
	assert_near(s.mean, 2.5, 1e-12);
	/* sd 1.2910, t(3) 3.182: half width 2.054 */
	assert_near(s.hi - s.mean, 3.182 * 1.2909944 / 2, 1e-6);
	assert_near(s.mean - s.lo, (s.hi - s.mean), 1e-12);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(no_failures_goodput_one),
		cmocka_unit_test(rare_failures_match_renewal_formula),
		cmocka_unit_test(elastic_matches_its_formula),
		cmocka_unit_test(same_seed_same_result),
		cmocka_unit_test(decoupled_like_elastic_on_n_over_m),
		cmocka_unit_test(missed_rounds_and_quorum),
		cmocka_unit_test(heterogeneity_costs_big_groups_more),
		cmocka_unit_test(harvesting_shortens_wall_time),
		cmocka_unit_test(bad_parameters_refused),
		cmocka_unit_test(good_arguments_parsed),
		cmocka_unit_test(svg_has_one_line_per_mode),
		cmocka_unit_test(group_speed_quantiles),
		cmocka_unit_test(stat_interval),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
