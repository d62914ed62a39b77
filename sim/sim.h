/*
 * sim: a discrete-event model of goodput and uptime at cluster scale
 * (10k to millions of chips), for data parallel training with and without
 * elasticity and for Decoupled DiLoCo with M learners (docs/sim.md).
 *
 * What is simulated, per run:
 *   - N chips cut into slices of S chips; slices are split as evenly as
 *     possible among the learners (one learner in the data parallel modes).
 *   - Every chip is interrupted as a Poisson process (mean time between
 *     interruptions per chip: mtbi); a slice fails when one of its chips
 *     does, so the whole allocation fails at rate up_chips / mtbi.
 *   - nonelastic: a failure stops the job for `restart` seconds; the slice
 *     is swapped for a spare, so the job always has its N chips.
 *   - elastic and decoupled: a failed slice leaves its learner for `repair`
 *     seconds; the learner pauses `pause_down` to shrink, and `pause_up`
 *     to grow when the slice comes back. Events that land inside a
 *     restart or pause are folded into it (it is not extended).
 *   - each learner runs at the speed of its slowest slice: slice speeds are
 *     1 - hetero·|Z|, Z standard normal, redrawn at every reconfiguration.
 *   - decoupled: the syncer completes rounds (one per step_s) while at
 *     least K learners run. A learner that is stopped while rounds go on
 *     misses them after its grace window; each missed fragment discards its
 *     unmerged work on that fragment (docs/design.md §3: the update overwrites).
 *   - harvesting (decoupled only): extra capacity of harvest·N chips comes
 *     and goes in windows (exponential on/off), as extra learners of the
 *     same size; joining costs `restart`, leaving discards unmerged work.
 *
 * Cost is O(events · M): nothing is done per chip or per slice.
 */
#ifndef DDILOCO_SIM_H
#define DDILOCO_SIM_H

#include <stdint.h>
#include <stdio.h>

#include "common/err.h"

enum sim_mode { SIM_NONELASTIC, SIM_ELASTIC, SIM_DECOUPLED };

/* Limits, checked by sim_params_check. */
#define SIM_MAX_CHIPS 100000000L
#define SIM_MAX_LEARNERS 256
#define SIM_MAX_REPEATS 1000
#define SIM_MAX_DAYS 3650.0
#define SIM_MAX_HARVEST 10.0

struct sim_params {
	enum sim_mode mode;
	int learners;        /* M; 1 in the data parallel modes */
	int quorum;          /* K, 1..M */
	long chips;          /* N */
	long slice;          /* S, chips per slice */
	double mtbi_h;       /* per-chip mean time between interruptions, hours */
	double restart_s;    /* nonelastic restart; a harvest learner's join */
	double repair_s;     /* a failed slice is away this long */
	double pause_down_s; /* elastic scale-down pause */
	double pause_up_s;   /* elastic scale-up pause */
	double hetero;       /* per-slice speed spread (sd of the slowdown) */
	double step_s;       /* a learner step; one syncer round per step */
	int fragments;       /* P = H */
	double overlap;      /* τ, steps from pull to applied update */
	double grace;        /* γ, share of the overlap window */
	double days;         /* simulated wall time */
	int repeats;         /* seeded repeats for the intervals */
	uint64_t seed;
	double harvest;      /* extra capacity, share of N; 0 = none */
	double harvest_on_h; /* mean length of a window with extra capacity */
	double harvest_off_h;/* mean gap between two windows */
};

/* The defaults (constants fitted by sim_calibrate, see docs/sim.md). */
void sim_params_default(struct sim_params *p);

/* Refuses a bad parameter with a message naming its command-line flag. */
int sim_params_check(const struct sim_params *p, struct err *e);

const char *sim_mode_name(enum sim_mode m);
int sim_mode_parse(const char *s, enum sim_mode *out);

/* One run. */
struct sim_run {
	double goodput;      /* useful chip-time / allocated chip-time */
	double uptime;       /* share of wall time in which training advanced */
	double wall_s;       /* simulated wall time (the budget's when stopped) */
	double useful;       /* useful chip-seconds */
	uint64_t events;     /* failures, repairs, pause ends, windows */
	uint64_t failures;
};

/*
 * Runs repeat number `rep` of p (seed derived from p->seed and rep).
 * budget > 0 stops the run when that many useful chip-seconds are done
 * (wall_s is then the time it took; at most 20× the simulated days).
 */
int sim_run_once(const struct sim_params *p, int rep, double budget,
		 struct sim_run *out, struct err *e);

/* Mean and 95% confidence interval (Student t) over repeats. */
struct sim_stat {
	double mean, lo, hi;
};
struct sim_result {
	struct sim_stat goodput, uptime;
	uint64_t events;
	double cpu_s;        /* time taken to simulate */
};
int sim_estimate(const struct sim_params *p, struct sim_result *out,
		 struct err *e);

/* Speed of a group of n slices at quantile u of its slowest slice
 * (slice speeds 1 - h·|Z|); at least 0.05. */
double sim_group_speed(double u, long n, double h);

/* Mean and interval of x[0..n), n >= 2. */
void sim_stat_of(const double *x, int n, struct sim_stat *out);

/*
 * Compute harvesting: wall time to the token budget of the plain run
 * (p with harvest = 0) when p->harvest extra capacity comes and goes,
 * relative to the plain run's wall time (< 1 is faster).
 */
struct sim_harvest {
	struct sim_stat time_ratio;
	struct sim_stat goodput;
};
int sim_harvest_estimate(const struct sim_params *p, struct sim_harvest *out,
			 struct err *e);

/* The grid of `ddiloco sim --table`: published sizes × 6 modes. */
#define SIM_TABLE_SIZES 5
#define SIM_TABLE_MODES 6
extern const long sim_table_chips[SIM_TABLE_SIZES];
/* Sets mode, learners and quorum of column c (0: nonelastic, 1: elastic,
 * 2..5: decoupled M = 2, 4, 8, 16) and returns its label. */
const char *sim_table_mode(struct sim_params *p, int c);

/* The published goodput rows (nonelastic, elastic), per table size. */
extern const double sim_published[2][SIM_TABLE_SIZES];

/*
 * Fits restart, repair, pauses (down = up), hetero and slice size to the
 * published rows by pattern search on a fixed-seed objective (docs/sim.md);
 * writes progress to log if not NULL and the fitted constants into p.
 */
int sim_calibrate(struct sim_params *p, FILE *out, double *rms_out,
		  struct err *e);

/*
 * The figure of the table: goodput[m * SIM_TABLE_SIZES + i] for column m
 * (labels[m]) at size i, one line each, and the published rows.
 */
struct buf;
int sim_table_svg(struct buf *out, const char *const *labels,
		  const double *goodput);

/* What `ddiloco sim` was asked to do (cmd_sim.c). */
enum sim_action {
	SIM_ONE,          /* one configuration */
	SIM_TABLE,        /* the grid of published sizes × 6 modes */
	SIM_THUMB,        /* M learners on N vs elastic on N/M */
	SIM_HARVEST,      /* harvesting +25% .. +300% */
	SIM_CALIBRATE,    /* fit the constants to the published rows */
	SIM_HELP,
};
enum sim_format { SIM_TEXT, SIM_CSV, SIM_JSON };
struct sim_cli {
	enum sim_action action;
	enum sim_format format;
	struct sim_params p;
	const char *svg;  /* --svg FILE with --table */
};
/* Parses the arguments after `sim`; messages name the flag. */
int sim_cli_parse(int argc, char **argv, struct sim_cli *c, struct err *e);

#endif
