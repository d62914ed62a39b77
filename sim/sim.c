/*
 * sim: the event loop (model in sim.h, reasons in docs/sim.md).
 *
 * State is per learner, never per chip: how many slices it owns and how
 * many are up, until when it is stopped (restart or pause), its speed, and
 * for Decoupled DiLoCo the unmerged work it had when it stopped and how
 * much round time it has missed since. Slices away for repair sit in a
 * FIFO (the repair time is fixed, so they come back in the order they
 * left). Between two events everything is linear in time and is
 * integrated exactly; the next event is the earliest of: the next failure
 * (one exponential draw for the whole allocation, redrawn after every
 * event, which is exact for a Poisson process), the oldest repair, the end
 * of a stop, a harvest window opening or closing, the end of the run.
 */
#include "sim/sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/util.h"

#define HOUR 3600.0
#define DAY 86400.0

void sim_params_default(struct sim_params *p)
{
	memset(p, 0, sizeof(*p));
	p->mode = SIM_DECOUPLED;
	p->learners = 1;
	p->quorum = 1;
	p->chips = 150000;
	/* fitted by `ddiloco sim --calibrate` (docs/sim.md) */
	p->slice = 256;
	p->restart_s = 76.6;
	p->repair_s = 7519.0;
	p->pause_down_s = 9.40;
	p->pause_up_s = 9.40;
	p->hetero = 0.0008;
	/* assumed, not fitted */
	p->mtbi_h = 8760.0;
	p->step_s = 5.0;
	p->fragments = 4;
	p->overlap = 2.0;
	p->grace = 0.5;
	p->days = 30.0;
	p->repeats = 5;
	p->seed = 1;
	p->harvest = 0.0;
	p->harvest_on_h = 8.0;
	p->harvest_off_h = 16.0;
}

const char *sim_mode_name(enum sim_mode m)
{
	switch (m) {
	case SIM_NONELASTIC: return "nonelastic";
	case SIM_ELASTIC: return "elastic";
	case SIM_DECOUPLED: return "decoupled";
	}
	return "?";
}

int sim_mode_parse(const char *s, enum sim_mode *out)
{
	for (int m = SIM_NONELASTIC; m <= SIM_DECOUPLED; m++)
		if (!strcmp(s, sim_mode_name(m))) {
			*out = m;
			return 0;
		}
	return -1;
}

static int bad_range(struct err *e, const char *flag, double v, double lo,
		     double hi)
{
	return err_set(e, "sim: %s must be between %g and %g, got %g", flag,
		       lo, hi, v);
}

/* lo <= v <= hi, and finite */
static int in(double v, double lo, double hi)
{
	return isfinite(v) && v >= lo && v <= hi;
}

int sim_params_check(const struct sim_params *p, struct err *e)
{
	if (p->mode != SIM_NONELASTIC && p->mode != SIM_ELASTIC &&
	    p->mode != SIM_DECOUPLED)
		return err_set(e, "sim: --mode must be nonelastic, elastic or decoupled");
	if (!in(p->learners, 1, SIM_MAX_LEARNERS))
		return bad_range(e, "--learners", p->learners, 1, SIM_MAX_LEARNERS);
	if (p->mode != SIM_DECOUPLED && p->learners != 1)
		return err_set(e, "sim: --learners must be 1 with --mode %s (data parallel is one learner), got %d",
			       sim_mode_name(p->mode), p->learners);
	if (!in(p->quorum, 1, p->learners))
		return bad_range(e, "--quorum", p->quorum, 1, p->learners);
	if (!in((double)p->slice, 1, SIM_MAX_CHIPS))
		return bad_range(e, "--slice", (double)p->slice, 1, SIM_MAX_CHIPS);
	if (!in((double)p->chips, 1, SIM_MAX_CHIPS))
		return bad_range(e, "--chips", (double)p->chips, 1, SIM_MAX_CHIPS);
	if (p->chips < p->slice * p->learners)
		return err_set(e, "sim: --chips must be at least --slice × --learners (%ld × %d = %ld), got %ld",
			       p->slice, p->learners, p->slice * p->learners,
			       p->chips);
	if (!in(p->mtbi_h, 1e-3, 1e12))
		return bad_range(e, "--mtbi-hours", p->mtbi_h, 1e-3, 1e12);
	if (!in(p->restart_s, 0, 1e7))
		return bad_range(e, "--restart", p->restart_s, 0, 1e7);
	if (!in(p->repair_s, 0, 1e7))
		return bad_range(e, "--repair", p->repair_s, 0, 1e7);
	if (!in(p->pause_down_s, 0, 1e7))
		return bad_range(e, "--pause-down", p->pause_down_s, 0, 1e7);
	if (!in(p->pause_up_s, 0, 1e7))
		return bad_range(e, "--pause-up", p->pause_up_s, 0, 1e7);
	if (!in(p->hetero, 0, 0.5))
		return bad_range(e, "--hetero", p->hetero, 0, 0.5);
	if (!in(p->step_s, 1e-3, 1e5))
		return bad_range(e, "--step", p->step_s, 1e-3, 1e5);
	if (!in(p->fragments, 1, 1024))
		return bad_range(e, "--fragments", p->fragments, 1, 1024);
	if (!in(p->overlap, 0, 1000))
		return bad_range(e, "--overlap", p->overlap, 0, 1000);
	if (!in(p->grace, 0, 1))
		return bad_range(e, "--grace", p->grace, 0, 1);
	if (!in(p->days, 1e-3, SIM_MAX_DAYS))
		return bad_range(e, "--days", p->days, 1e-3, SIM_MAX_DAYS);
	if (!in(p->repeats, 2, SIM_MAX_REPEATS))
		return bad_range(e, "--repeats", p->repeats, 2, SIM_MAX_REPEATS);
	if (!in(p->harvest, 0, SIM_MAX_HARVEST))
		return bad_range(e, "--harvest", p->harvest, 0, SIM_MAX_HARVEST);
	if (p->harvest > 0 && p->mode != SIM_DECOUPLED)
		return err_set(e, "sim: --harvest needs --mode decoupled (extra capacity joins as extra learners)");
	if (!in(p->harvest_on_h, 1e-3, 1e5))
		return bad_range(e, "--harvest-on", p->harvest_on_h, 1e-3, 1e5);
	if (!in(p->harvest_off_h, 1e-3, 1e5))
		return bad_range(e, "--harvest-off", p->harvest_off_h, 1e-3, 1e5);
	return 0;
}

/*
 * Speed of a synchronous group of n slices: the slowest slice's, each
 * 1 - h·|Z|. max|Z| over n has CDF erf(z/√2)^n, so it is drawn by
 * inversion: erfc(z/√2) = q with q = 1 - u^(1/n), solved by Newton on
 * log erfc from the tail asymptote.
 */
double sim_group_speed(double u, long n, double h)
{
	double q, lq, z, s;

	if (h <= 0 || n <= 0)
		return 1.0;
	if (u < 1e-300)
		u = 1e-300;
	q = -expm1(log(u) / (double)n);
	if (q >= 1.0)
		return 1.0;
	if (q < 1e-300)
		q = 1e-300;
	lq = log(q);
	z = 1.0;
	if (q < 0.3) { /* erfc(z/√2) ≈ √(2/π)·exp(-z²/2)/z, one fixed-point step */
		z = sqrt(-2.0 * lq);
		z = sqrt(fmax(0.0, 2.0 * (0.5 * log(2.0 / M_PI) - lq - log(z))));
	}
	for (int i = 0; i < 20; i++) {
		double c = erfc(z / M_SQRT2), f, df, dz;

		if (c <= 0)
			break;
		f = log(c) - lq;
		df = -sqrt(2.0 / M_PI) * exp(-0.5 * z * z) / c;
		dz = f / df;
		z -= dz;
		if (z < 0)
			z = 0;
		if (fabs(dz) < 1e-7)
			break;
	}
	s = 1.0 - h * z;
	return s < 0.05 ? 0.05 : s;
}

static double draw_speed(struct rng *r, long n, double h)
{
	if (h <= 0 || n <= 0)
		return 1.0;
	return sim_group_speed(rng_uniform(r), n, h);
}

struct lrn {
	long slices;     /* owned: up + away for repair */
	long up;
	double speed;
	double stop_until; /* restarting or pausing until then */
	int present;     /* 0: a harvest learner whose capacity is gone */
	unsigned epoch;  /* bumped when it leaves: its repairs are void */
	int running;     /* as of the last settle */
	double rate;     /* useful chip-s per s while running */
	double work;     /* useful chip-s since it started running, up to t_seg */
	double t_seg;
	double at_risk;  /* unmerged work when it stopped */
	double stop_clock; /* round clock (uptime) when it stopped */
};

struct away {
	double t;
	int l;
	unsigned epoch;
};

struct fifo {
	struct away *a;
	size_t cap, head, n, max;
};

static int fifo_push(struct fifo *q, struct away x, struct err *e)
{
	if (q->n == q->cap) {
		size_t ncap = q->cap ? 2 * q->cap : 1024;
		struct away *na;

		if (ncap > q->max)
			ncap = q->max;
		if (ncap <= q->n)
			return err_set(e, "sim: repair queue full (%zu slices)", q->n);
		na = malloc(ncap * sizeof(*na));
		if (!na)
			return err_set(e, "sim: out of memory for %zu repairs", ncap);
		for (size_t i = 0; i < q->n; i++)
			na[i] = q->a[(q->head + i) % q->cap];
		free(q->a);
		q->a = na;
		q->cap = ncap;
		q->head = 0;
	}
	q->a[(q->head + q->n) % q->cap] = x;
	q->n++;
	return 0;
}

/*
 * Sums kept up to date by settle() so that advancing time is O(1): the
 * slices that can fail, the slices allocated, the running learners and
 * their useful rate. The round clock is the uptime integral: rounds go on
 * exactly while at least K learners run, so a stopped learner has missed
 * (uptime now − uptime when it stopped) of round time.
 */
struct state {
	const struct sim_params *p;
	struct rng rng;
	struct lrn *l;
	int nl;          /* base learners + harvest learners */
	int nbase;
	struct fifo q;
	double grace_s;
	long up_slices, alloc_slices;
	int nrun;
	double rate;
	double useful, alloc, uptime;
};

static int is_running(const struct lrn *l, double t)
{
	return l->present && l->up > 0 && t >= l->stop_until;
}

/* Work lost by a learner that stopped: the fragments whose rounds it missed. */
static double missed_loss(const struct state *s, const struct lrn *l,
			  double grace_s)
{
	double missed = s->uptime - l->stop_clock;
	double rounds = floor(fmax(0.0, missed - grace_s) / s->p->step_s);

	if (rounds > s->p->fragments)
		rounds = s->p->fragments;
	return l->at_risk * rounds / s->p->fragments;
}

/* Unmerged work of a running learner at t: one outer period (H = P steps). */
static double unmerged(const struct state *s, const struct lrn *l, double t)
{
	double cap = (double)s->p->fragments * s->p->step_s * l->rate;
	double w = l->work + l->rate * (t - l->t_seg);

	return w < cap ? w : cap;
}

/* Brings learner l's running state and the sums up to date at time t. */
static void settle(struct state *s, struct lrn *l, double t)
{
	int run = is_running(l, t);

	if (l->running) {
		s->rate -= l->rate;
		s->nrun--;
		if (!run) {
			l->at_risk = unmerged(s, l, t);
			l->stop_clock = s->uptime;
		} else {
			l->work += l->rate * (t - l->t_seg);
		}
	} else if (run) {
		l->speed = draw_speed(&s->rng, l->up, s->p->hetero);
		s->useful -= missed_loss(s, l, s->grace_s);
		l->work = 0;
		l->at_risk = 0;
	}
	if (run) {
		l->rate = (double)l->up * (double)s->p->slice * l->speed;
		l->t_seg = t;
		s->rate += l->rate;
		s->nrun++;
	}
	if (s->nrun == 0)
		s->rate = 0; /* no rounding residue from the sums */
	l->running = run;
}

/* Advances time by dt with the current states. */
static void integrate(struct state *s, double dt)
{
	s->useful += s->rate * dt;
	s->alloc += (double)s->alloc_slices * (double)s->p->slice * dt;
	if (s->nrun >= s->p->quorum)
		s->uptime += dt;
}

static int fail_one(struct state *s, double t, struct err *e)
{
	const struct sim_params *p = s->p;
	double x = rng_uniform(&s->rng) * (double)s->up_slices;
	struct lrn *l = NULL;

	for (int i = 0; i < s->nl; i++) {
		if (!s->l[i].present)
			continue;
		l = &s->l[i];
		x -= (double)l->up;
		if (x < 0)
			break;
	}
	if (!l)
		return 0;
	if (p->mode == SIM_NONELASTIC) {
		/* a spare takes its place; the whole job restarts */
		if (t >= l->stop_until)
			l->stop_until = t + p->restart_s;
		settle(s, l, t);
		return 0;
	}
	if (t >= l->stop_until && l->up > 0)
		l->stop_until = t + p->pause_down_s;
	l->up--;
	s->up_slices--;
	settle(s, l, t);
	return fifo_push(&s->q,
			 (struct away){ t + p->repair_s, (int)(l - s->l), l->epoch },
			 e);
}

static void repaired(struct state *s, double t, struct away a)
{
	struct lrn *l = &s->l[a.l];

	if (!l->present || l->epoch != a.epoch)
		return;
	if (t >= l->stop_until)
		l->stop_until = t + s->p->pause_up_s;
	l->up++;
	s->up_slices++;
	settle(s, l, t);
}

/* Harvest capacity arrives (joins after a restart) or leaves. */
static void harvest_toggle(struct state *s, double t, int arrive)
{
	for (int i = s->nbase; i < s->nl; i++) {
		struct lrn *l = &s->l[i];

		if (arrive) {
			l->present = 1;
			l->up = l->slices;
			l->stop_until = t + s->p->restart_s;
			l->work = l->at_risk = 0;
			l->stop_clock = s->uptime;
			s->up_slices += l->up;
			s->alloc_slices += l->slices;
			settle(s, l, t);
			continue;
		}
		/* what it had not merged yet is gone with it */
		s->useful -= l->running ? unmerged(s, l, t) : l->at_risk;
		if (l->running) {
			s->rate -= l->rate;
			s->nrun--;
		}
		s->up_slices -= l->up;
		s->alloc_slices -= l->slices;
		l->present = 0;
		l->running = 0;
		l->up = 0;
		l->epoch++;
	}
}

static void split(struct lrn *l, int n, long slices)
{
	for (int i = 0; i < n; i++) {
		l[i].slices = slices / n + (i < slices % n);
		l[i].up = l[i].slices;
		l[i].present = 1;
		l[i].speed = 1.0;
	}
}

/* Long because it is one run's event loop: the next of four clocks
 * chosen and handled in place, the run's state on the stack. */
int sim_run_once(const struct sim_params *p, int rep, double budget,
		 struct sim_run *out, struct err *e)
{
	struct state s = { 0 };
	long base_slices, extra_slices = 0;
	int extra = 0, rc = -1;
	double t = 0, tend = p->days * DAY, next_fail, next_toggle = INFINITY;
	int harvest_on = 0;
	struct sim_run r = { 0 };

	if (sim_params_check(p, e))
		return -1;
	if (budget > 0)
		tend *= 20;
	s.p = p;
	rng_seed(&s.rng, p->seed * 0x9E3779B97F4A7C15ULL + (uint64_t)rep);
	base_slices = p->chips / p->slice;
	if (p->harvest > 0) {
		extra_slices = (long)llround(p->harvest * (double)base_slices);
		extra = (int)llround(p->harvest * p->learners);
		if (extra < 1)
			extra = 1;
		if (extra > extra_slices)
			extra = (int)extra_slices;
	}
	s.nbase = p->learners;
	s.nl = p->learners + extra;
	s.l = calloc((size_t)s.nl, sizeof(*s.l));
	if (!s.l)
		return err_set(e, "sim: out of memory");
	split(s.l, p->learners, base_slices);
	if (extra > 0) {
		split(s.l + s.nbase, extra, extra_slices);
		for (int i = s.nbase; i < s.nl; i++) {
			s.l[i].present = 0;
			s.l[i].up = 0;
		}
		next_toggle = rng_exponential(&s.rng, p->harvest_off_h * HOUR);
	}
	s.up_slices = s.alloc_slices = base_slices;
	s.q.max = (size_t)(base_slices + extra_slices);
	s.grace_s = fmin(p->grace * p->overlap * p->step_s, p->step_s);
	for (int i = 0; i < s.nl; i++)
		settle(&s, &s.l[i], 0);

	for (;;) {
		double tn = tend, dt;
		int what = 0; /* 0 end, 1 failure, 2 repair, 3 toggle, 4 stop ends */

		next_fail = s.up_slices > 0
			? t + rng_exponential(&s.rng, p->mtbi_h * HOUR /
					      (double)(s.up_slices * p->slice))
			: INFINITY;
		if (next_fail < tn) {
			tn = next_fail;
			what = 1;
		}
		if (s.q.n && s.q.a[s.q.head].t < tn) {
			tn = s.q.a[s.q.head].t;
			what = 2;
		}
		if (next_toggle < tn) {
			tn = next_toggle;
			what = 3;
		}
		for (int i = 0; i < s.nl; i++)
			if (s.l[i].present && s.l[i].stop_until > t &&
			    s.l[i].stop_until < tn) {
				tn = s.l[i].stop_until;
				what = 4;
			}
		dt = tn - t;
		if (budget > 0 && s.rate > 0 && s.useful + s.rate * dt >= budget) {
			dt = (budget - s.useful) / s.rate;
			integrate(&s, dt);
			t += dt;
			break;
		}
		integrate(&s, dt);
		t = tn;
		if (what == 0)
			break;
		r.events++;
		if (what == 1) {
			r.failures++;
			if (fail_one(&s, t, e))
				goto out;
		} else if (what == 2) {
			struct away a = s.q.a[s.q.head];

			s.q.head = (s.q.head + 1) % s.q.cap;
			s.q.n--;
			repaired(&s, t, a);
		} else if (what == 3) {
			harvest_on = !harvest_on;
			harvest_toggle(&s, t, harvest_on);
			next_toggle = t + rng_exponential(&s.rng,
				(harvest_on ? p->harvest_on_h : p->harvest_off_h) * HOUR);
		} else {
			for (int i = 0; i < s.nl; i++)
				if (s.l[i].present && !s.l[i].running)
					settle(&s, &s.l[i], t);
		}
	}
	/* learners still stopped lose what they have missed so far */
	for (int i = 0; i < s.nl; i++)
		if (s.l[i].present && !s.l[i].running)
			s.useful -= missed_loss(&s, &s.l[i], s.grace_s);
	r.wall_s = t;
	r.useful = s.useful;
	r.goodput = s.alloc > 0 ? s.useful / s.alloc : 0;
	r.uptime = t > 0 ? s.uptime / t : 0;
	*out = r;
	rc = 0;
out:
	free(s.q.a);
	free(s.l);
	return rc;
}

/* Student t, two-sided 95%, by degrees of freedom. */
static double t95(int df)
{
	static const double t[] = { 0, 12.706, 4.303, 3.182, 2.776, 2.571,
		2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
		2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069,
		2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042 };

	if (df < 1)
		return INFINITY;
	if (df <= 30)
		return t[df];
	return 1.960 + 2.4 / df;
}

void sim_stat_of(const double *x, int n, struct sim_stat *out)
{
	double m = 0, v = 0, h;

	for (int i = 0; i < n; i++)
		m += x[i];
	m /= n;
	for (int i = 0; i < n; i++)
		v += (x[i] - m) * (x[i] - m);
	v = n > 1 ? v / (n - 1) : 0;
	h = t95(n - 1) * sqrt(v / n);
	out->mean = m;
	out->lo = m - h;
	out->hi = m + h;
}

static double cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int sim_estimate(const struct sim_params *p, struct sim_result *out,
		 struct err *e)
{
	double g[SIM_MAX_REPEATS], u[SIM_MAX_REPEATS], t0 = cpu_now();
	struct sim_result r = { 0 };

	if (sim_params_check(p, e))
		return -1;
	for (int i = 0; i < p->repeats; i++) {
		struct sim_run run;

		if (sim_run_once(p, i, 0, &run, e))
			return -1;
		g[i] = run.goodput;
		u[i] = run.uptime;
		r.events += run.events;
	}
	sim_stat_of(g, p->repeats, &r.goodput);
	sim_stat_of(u, p->repeats, &r.uptime);
	r.cpu_s = cpu_now() - t0;
	*out = r;
	return 0;
}

int sim_harvest_estimate(const struct sim_params *p, struct sim_harvest *out,
			 struct err *e)
{
	double ratio[SIM_MAX_REPEATS], g[SIM_MAX_REPEATS];
	struct sim_params base = *p;

	if (sim_params_check(p, e))
		return -1;
	if (p->harvest <= 0)
		return err_set(e, "sim: --harvest must be above 0 to compare with the plain run");
	base.harvest = 0;
	for (int i = 0; i < p->repeats; i++) {
		struct sim_run b, h;

		if (sim_run_once(&base, i, 0, &b, e) ||
		    sim_run_once(p, i, b.useful, &h, e))
			return -1;
		ratio[i] = h.wall_s / b.wall_s;
		g[i] = h.goodput;
	}
	sim_stat_of(ratio, p->repeats, &out->time_ratio);
	sim_stat_of(g, p->repeats, &out->goodput);
	return 0;
}

const long sim_table_chips[SIM_TABLE_SIZES] = {
	150000, 300000, 600000, 1200000, 2400000,
};

const double sim_published[2][SIM_TABLE_SIZES] = {
	{ 0.72, 0.57, 0.38, 0.27, 0.18 },
	{ 0.88, 0.80, 0.69, 0.58, 0.40 },
};

const char *sim_table_mode(struct sim_params *p, int c)
{
	static const char *const label[SIM_TABLE_MODES] = {
		"nonelastic", "elastic", "M=2", "M=4", "M=8", "M=16",
	};

	p->quorum = 1;
	if (c == 0) {
		p->mode = SIM_NONELASTIC;
		p->learners = 1;
	} else if (c == 1) {
		p->mode = SIM_ELASTIC;
		p->learners = 1;
	} else {
		p->mode = SIM_DECOUPLED;
		p->learners = 1 << (c - 1);
	}
	return label[c];
}
