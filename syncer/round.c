/*
 * round: pacing, quorum, grace and lateness (see round.h).
 *
 * Each round in flight owns a slot and a byte per learner:
 *   0 not pulled, 1 pulled and waited for, 2 answered (counted),
 *   3 answered but refused (not counted).
 * `pending` counts the 1s of joined learners that are not stale, so
 * "everyone answered" is pending == 0 and needs no scan. A stale
 * learner's 1s stay (it may still answer) but are not waited for.
 */
#include "syncer/round.h"

#include "common/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { NOT_PULLED = 0, WAITING = 1, ANSWERED = 2, REFUSED = 3 };

#define NEVER 1e300
/* a learner's period is measured between reports this far apart */
#define PACE_ANCHOR_S 0.5
/* steps are estimated for this long after a learner's last report: a
 * heartbeat comes every second (sidecar/client.c), so a learner silent
 * longer has stalled or left */
#define PACE_EST_MAX_S 1.5
/* the mark trails the K-th step by at most this much of its time (and
 * τ·H/P steps): a slow stretch of rounds is caught up, a long stall not */
#define PACE_BACKLOG_S 2.0
/* an estimate that ran ahead of the next report by up to this many steps
 * (or H/P) is not a restart */
#define PACE_DROP_STEPS 8

int syncer_round_init(struct syncer_round *rs, const struct round_config *cfg,
		      uint64_t started, uint64_t completed, struct err *e)
{
	size_t n = (size_t)cfg->max_learners;

	memset(rs, 0, sizeof(*rs));
	if (cfg->quorum < 1 || cfg->overlap < 1 || cfg->nfrags < 1 ||
	    cfg->max_learners < 1 || !(cfg->steps_per_round > 0) ||
	    !(cfg->ema > 0 && cfg->ema <= 1))
		return err_set(e, "round: bad configuration (K %d, tau %d, P %d, M %d)",
			       cfg->quorum, cfg->overlap, cfg->nfrags,
			       cfg->max_learners);
	rs->cfg = *cfg;
	rs->started = started;
	rs->covered = UINT64_MAX;
	rs->completed = completed;
	rs->slots = calloc((size_t)cfg->overlap, sizeof(*rs->slots));
	rs->joined = calloc(n, 1);
	rs->stale = calloc(n, 1);
	rs->step = calloc(n, sizeof(*rs->step));
	rs->rep_t = calloc(n, sizeof(*rs->rep_t));
	rs->period = calloc(n, sizeof(*rs->period));
	rs->st = calloc(n, sizeof(*rs->st));
	rs->anchor_step = calloc(n, sizeof(*rs->anchor_step));
	rs->anchor_t = calloc(n, sizeof(*rs->anchor_t));
	rs->trained = calloc(n, sizeof(*rs->trained));
	rs->join_step = calloc(n, sizeof(*rs->join_step));
	if (!rs->trained || !rs->join_step || !rs->slots || !rs->joined ||
	    !rs->stale || !rs->step || !rs->rep_t ||
	    !rs->period || !rs->st || !rs->anchor_step || !rs->anchor_t)
		goto oom;
	for (size_t i = 0; i < n; i++)
		rs->rep_t[i] = rs->anchor_t[i] = -1;
	for (int s = 0; s < cfg->overlap; s++)
		if (!(rs->slots[s].state = calloc(n, 1)))
			goto oom;
	return 0;
oom:
	syncer_round_release(rs);
	return err_set(e, "round: out of memory");
}

void syncer_round_release(struct syncer_round *rs)
{
	if (rs->slots)
		for (int s = 0; s < rs->cfg.overlap; s++)
			free(rs->slots[s].state);
	free(rs->slots);
	free(rs->joined);
	free(rs->stale);
	free(rs->step);
	free(rs->rep_t);
	free(rs->period);
	free(rs->st);
	free(rs->anchor_step);
	free(rs->anchor_t);
	free(rs->trained);
	free(rs->join_step);
	memset(rs, 0, sizeof(*rs));
}

static void ema_add(double *v, int *have, double x, double a)
{
	*v = *have ? (1 - a) * *v + a * x : x;
	*have = 1;
}

int syncer_round_join(struct syncer_round *rs, int id, uint64_t step,
		      struct round_action *pulls)
{
	int n = 0;

	if (id < 0 || id >= rs->cfg.max_learners)
		return 0;
	if (rs->joined[id])
		syncer_round_leave(rs, id);
	rs->joined[id] = 1;
	rs->step[id] = rs->join_step[id] = (double)step;
	rs->rep_t[id] = rs->anchor_t[id] = -1;
	for (int s = 0; s < rs->cfg.overlap; s++) {
		struct round_slot *sl = &rs->slots[s];

		if (!sl->active || sl->state[id] >= ANSWERED)
			continue;
		sl->state[id] = WAITING;
		sl->pending++;
		pulls[n].kind = ROUND_PULL;
		pulls[n].round = sl->round;
		pulls[n].frag = sl->frag;
		pulls[n].slot = s;
		n++;
	}
	/* oldest first, not in slot order: the learner answers two rounds
	 * of one fragment in flight in round order, as they are merged
	 * (older_first), so its answers reach Θ in the order it trained
	 * them (docs/syncer.md, Joining) */
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && pulls[j].round < pulls[j - 1].round; j--) {
			struct round_action t = pulls[j];

			pulls[j] = pulls[j - 1];
			pulls[j - 1] = t;
		}
	return n;
}

void syncer_round_leave(struct syncer_round *rs, int id)
{
	if (id < 0 || id >= rs->cfg.max_learners || !rs->joined[id])
		return;
	rs->joined[id] = 0;
	for (int s = 0; s < rs->cfg.overlap; s++) {
		struct round_slot *sl = &rs->slots[s];

		if (sl->active && sl->state[id] == WAITING) {
			sl->state[id] = NOT_PULLED;
			sl->pending -= !rs->stale[id];
		}
	}
	rs->stale[id] = 0;
}

void syncer_round_set_stale(struct syncer_round *rs, int id, int stale)
{
	stale = stale != 0;
	if (id < 0 || id >= rs->cfg.max_learners || !rs->joined[id] ||
	    rs->stale[id] == stale)
		return;
	rs->stale[id] = (unsigned char)stale;
	for (int s = 0; s < rs->cfg.overlap; s++) {
		struct round_slot *sl = &rs->slots[s];

		if (sl->active && sl->state[id] == WAITING)
			sl->pending += stale ? -1 : 1;
	}
}

void syncer_round_progress(struct syncer_round *rs, int id, uint64_t step,
			   double step_time)
{
	if (id < 0 || id >= rs->cfg.max_learners ||
	    (double)step < rs->join_step[id])
		return;
	/* A step below the last one is a report that came late (a heartbeat
	 * read before an answer that went ahead of it), or a learner that
	 * started over without leaving: the pace is measured anew, but the
	 * step and the steps trained only ever grow, so no step is counted
	 * twice when the reports catch up. */
	if ((double)step < rs->step[id]) {
		rs->anchor_t[id] = -1;
		return;
	}
	if (!rs->stopped)   /* the measure ends with the rounds */
		rs->trained[id] += (double)step - rs->step[id];
	rs->step[id] = (double)step;
	rs->rep_t[id] = -1;
	if (step_time > 0 && isfinite(step_time)) {
		rs->st[id] = step_time;
		ema_add(&rs->ema_step, &rs->have_step, step_time, rs->cfg.ema);
	}
}

/* Dates the reports since the last poll at `now` and measures each
 * learner's seconds per step between reports PACE_ANCHOR_S apart. */
static void stamp_reports(struct syncer_round *rs, double now)
{
	for (int i = 0; i < rs->cfg.max_learners; i++) {
		double ds, dt;

		if (rs->rep_t[i] >= 0)
			continue;
		rs->rep_t[i] = now;
		ds = rs->step[i] - rs->anchor_step[i];
		dt = now - rs->anchor_t[i];
		if (rs->anchor_t[i] < 0 || ds < 0) {
			rs->anchor_step[i] = rs->step[i];
			rs->anchor_t[i] = now;
		} else if (dt >= PACE_ANCHOR_S && ds > 0) {
			rs->period[i] = rs->period[i] > 0
					? 0.7 * rs->period[i] + 0.3 * dt / ds
					: dt / ds;
			rs->anchor_step[i] = rs->step[i];
			rs->anchor_t[i] = now;
		}
	}
}

static double learner_period(const struct syncer_round *rs, int i)
{
	return rs->period[i] > 0 ? rs->period[i] : rs->st[i];
}

/* Learner i's step at `now`: the last reported one plus the whole steps
 * made since at its pace, for at most PACE_EST_MAX_S. */
static double step_at(const struct syncer_round *rs, int i, double now)
{
	double p = learner_period(rs, i), dt;

	if (!(p > 0) || rs->rep_t[i] < 0)
		return rs->step[i];
	dt = fmin(now - rs->rep_t[i], PACE_EST_MAX_S);
	return dt > 0 ? rs->step[i] + floor(dt / p) : rs->step[i];
}

double syncer_round_step_at(const struct syncer_round *rs, int id,
			    double now)
{
	if (id < 0 || id >= rs->cfg.max_learners)
		return 0;
	return step_at(rs, id, now);
}

static double kth_step(const struct syncer_round *rs, int skip, double now);

/*
 * γ of the slack that τ rounds in flight leave, capped at one round: a
 * round lasts H/P learner steps (docs/syncer.md, Quorum and grace). A
 * cap of one step lost a slow learner's whole answer at H/P = 16.
 */
static double grace_window(const struct syncer_round *rs)
{
	double round_s = rs->cfg.steps_per_round * rs->ema_step;
	double g = rs->cfg.grace * (rs->cfg.overlap * round_s -
				    rs->ema_quorum - rs->ema_sync);

	if (!(g > 0))
		return 0;
	return g < round_s ? g : round_s;
}

enum round_verdict syncer_round_answer(struct syncer_round *rs, int id,
				       uint64_t round, int frag, int valid,
				       double now)
{
	struct round_slot *sl = NULL;

	if (id < 0 || id >= rs->cfg.max_learners)
		return ROUND_UNKNOWN;
	for (int s = 0; s < rs->cfg.overlap; s++)
		if (rs->slots[s].active && rs->slots[s].round == round)
			sl = &rs->slots[s];
	if (!sl)
		return round >= 1 && round <= rs->started ? ROUND_LATE
							  : ROUND_UNKNOWN;
	if (sl->frag != frag)
		return ROUND_UNKNOWN;
	if (sl->state[id] >= ANSWERED)
		return ROUND_DUPLICATE;
	if (sl->state[id] != WAITING)
		return ROUND_UNKNOWN;
	sl->pending -= !rs->stale[id];
	sl->state[id] = valid ? ANSWERED : REFUSED;
	if (!valid) {
		sl->refused++;
		return ROUND_ACCEPTED;
	}
	sl->answers++;
	if (sl->answers == rs->cfg.quorum) {
		sl->t_quorum = now;
		rs->last_quorum_wait = now - sl->t_start;
		ema_add(&rs->ema_quorum, &rs->have_quorum, rs->last_quorum_wait,
			rs->cfg.ema);
		/* behind the pace by a round: no grace, the next round needs
		 * the slot more than this one needs the late answers */
		rs->last_grace = rs->have_mark &&
				 kth_step(rs, -1, now) >= rs->mark +
							  2 * rs->cfg.steps_per_round
				 ? 0 : grace_window(rs);
		sl->deadline = now + rs->last_grace;
	}
	return ROUND_ACCEPTED;
}

static int cmp_desc(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x < y) - (x > y);
}

/* The K-th largest step among joined learners other than `skip` (-1:
 * none skipped), as reported (now < 0) or estimated at now; -1 if fewer
 * are joined. */
static double kth_step(const struct syncer_round *rs, int skip, double now)
{
	double stack[256], *v = stack, kth = -1;
	int n = 0, M = rs->cfg.max_learners;

	if (M > 256 && !(v = malloc((size_t)M * sizeof(*v))))
		return -1;
	for (int i = 0; i < M; i++)
		if (rs->joined[i] && !rs->stale[i] && i != skip)
			v[n++] = now < 0 ? rs->step[i] : step_at(rs, i, now);
	if (n >= rs->cfg.quorum) {
		qsort(v, (size_t)n, sizeof(*v), cmp_desc);
		kth = v[rs->cfg.quorum - 1];
	}
	if (v != stack)
		free(v);
	return kth;
}

uint64_t syncer_round_resume_step(const struct syncer_round *rs, int id,
				  uint64_t hello_step, int have_own,
				  uint64_t own_step)
{
	double kth;

	if (have_own && own_step > hello_step)
		return own_step;
	/* a learner that has trained keeps its own step: moving it up to the
	 * others' would skip part of its schedule and data */
	if (hello_step > 0 || id < 0 || id >= rs->cfg.max_learners)
		return hello_step;
	kth = kth_step(rs, id, -1);
	return kth > (double)hello_step ? (uint64_t)kth : hello_step;
}

/*
 * A fragment's rounds merge in round order (docs/syncer.md, Quorum and
 * grace): when slot is due and an older round of its fragment is still
 * in flight, that one is merged first, at once and with what it has.
 * The learners it still waits for have as a rule answered the younger
 * round's pull instead (it replaced theirs in the exchange), so waiting
 * would not bring them; merged after the younger, the older round's
 * answers would reach Θ after the later steps of the same learners,
 * which the audit counts as steps merged twice (audit.h). Returns the
 * slot to merge.
 */
static int older_first(struct syncer_round *rs, int slot, double now)
{
	int best = slot;

	for (int s = 0; s < rs->cfg.overlap; s++) {
		const struct round_slot *sl = &rs->slots[s];

		if (sl->active && sl->frag == rs->slots[slot].frag &&
		    sl->round < rs->slots[best].round)
			best = s;
	}
	if (best != slot) {
		struct round_slot *sl = &rs->slots[best];

		if (sl->t_quorum < 0)
			sl->t_quorum = now;
		sl->deadline = now;
	}
	return best;
}

/*
 * The slot whose merge is due, the oldest round first (-1: none), and
 * the first free slot in *free_slot (-1: none). A slot is due once its
 * quorum came and its grace window ended or nobody is left to wait for,
 * and an older round of its fragment goes before it (older_first).
 */
static int merge_due(struct syncer_round *rs, double now, int *free_slot)
{
	int best = -1;

	*free_slot = -1;
	for (int s = 0; s < rs->cfg.overlap; s++) {
		struct round_slot *sl = &rs->slots[s];

		if (!sl->active) {
			if (*free_slot < 0)
				*free_slot = s;
			continue;
		}
		/* K answered, some refused, nobody left to wait for: the quorum
		 * of valid answers cannot come; merge what there is */
		if (sl->t_quorum < 0 && sl->pending == 0 &&
		    sl->answers + sl->refused >= rs->cfg.quorum)
			sl->t_quorum = sl->deadline = now;
		if (sl->t_quorum < 0 || (now < sl->deadline && sl->pending > 0))
			continue;
		if (best < 0 || sl->round < rs->slots[best].round)
			best = s;
	}
	return best >= 0 ? older_first(rs, best, now) : -1;
}

/* The pacing (round.h): whether the K-th step kth makes a pull due; the
 * mark moves on when it does. */
static int pull_due(struct syncer_round *rs, double kth)
{
	double spr = rs->cfg.steps_per_round;
	double backlog = rs->cfg.overlap * spr;

	/*
	 * The first round starts as soon as K learners are joined, without
	 * waiting for their steps to move: learners train from the moment
	 * they are welcomed, and until answers flow their steps are known
	 * from heartbeats, one a second. Every step trained meanwhile would
	 * land in the first answers — hundreds where a round spans a few —
	 * and the outer momentum would carry them on for tens of rounds
	 * (docs/syncer.md).
	 */
	if (!rs->have_mark) {
		/* a shard other than the first waits its phase, so the
		 * shards' rounds take turns as one syncer's would */
		rs->mark = kth - spr + rs->cfg.phase;
		rs->have_mark = 1;
	}
	/*
	 * The K-th step went back by more than a round and PACE_DROP_STEPS:
	 * learners restarted from step 0 (or the most advanced left). Pace
	 * from where the K-th is now instead of waiting for it to climb back
	 * to the old mark. Less is an estimate that ran ahead of the next
	 * report: the mark waits for the steps to come.
	 */
	if (kth < rs->mark - fmax(spr, PACE_DROP_STEPS))
		rs->mark = kth;
	if (rs->have_step && rs->ema_step > 0)
		backlog = fmax(backlog, PACE_BACKLOG_S / rs->ema_step);
	if (kth < rs->mark + spr)
		return 0;
	if (kth - backlog > rs->mark + spr) {
		rs->steps_skipped += kth - backlog - (rs->mark + spr);
		log_debug("pacing: the K-th step %.0f is %.0f past the mark, %.0f "
			 "steps dropped", kth, kth - rs->mark,
			 kth - backlog - (rs->mark + spr));
	}
	rs->mark = fmax(rs->mark + spr, kth - backlog);
	rs->paced_rounds++;
	return 1;
}

/* The next round starts in slot: every joined learner is pulled. */
static void start_round(struct syncer_round *rs, int slot, double now,
			struct round_action *out)
{
	struct round_slot *sl = &rs->slots[slot];

	sl->active = 1;
	sl->round = ++rs->started;
	sl->frag = (int)(sl->round % (uint64_t)rs->cfg.nfrags);
	sl->t_start = now;
	sl->t_quorum = -1;
	sl->deadline = NEVER;
	sl->answers = 0;
	sl->refused = 0;
	sl->pending = 0;
	for (int i = 0; i < rs->cfg.max_learners; i++) {
		sl->state[i] = rs->joined[i] ? WAITING : NOT_PULLED;
		sl->pending += rs->joined[i] && !rs->stale[i];
	}
	out->kind = ROUND_PULL;
	out->round = sl->round;
	out->frag = sl->frag;
	out->slot = slot;
}

void syncer_round_poll(struct syncer_round *rs, double now,
		       struct round_action *out)
{
	int free_slot, best;
	double kth;

	memset(out, 0, sizeof(*out));
	stamp_reports(rs, now);
	if ((best = merge_due(rs, now, &free_slot)) >= 0) {
		out->kind = ROUND_MERGE;
		out->round = rs->slots[best].round;
		out->frag = rs->slots[best].frag;
		out->slot = best;
		return;
	}
	if (rs->stopped || free_slot < 0 || (kth = kth_step(rs, -1, now)) < 0)
		return;
	/* past the mark on disk: said, and the pacing left as it is for
	 * the pull that comes once the mark covers it */
	if (rs->started >= rs->covered) {
		if (!rs->have_mark || kth >= rs->mark + rs->cfg.steps_per_round)
			out->kind = ROUND_HELD;
		return;
	}
	if (pull_due(rs, kth))
		start_round(rs, free_slot, now, out);
}

void syncer_round_done(struct syncer_round *rs, int slot, double sync_seconds)
{
	struct round_slot *sl = &rs->slots[slot];

	if (!sl->active)
		return;
	sl->active = 0;
	rs->completed++;
	if (sync_seconds >= 0)
		ema_add(&rs->ema_sync, &rs->have_sync, sync_seconds, rs->cfg.ema);
}

void syncer_round_abandon(struct syncer_round *rs)
{
	for (int s = 0; s < rs->cfg.overlap; s++)
		rs->slots[s].active = 0;
}

double syncer_round_next_deadline(const struct syncer_round *rs)
{
	double d = NEVER;

	for (int s = 0; s < rs->cfg.overlap; s++)
		if (rs->slots[s].active && rs->slots[s].t_quorum >= 0 &&
		    rs->slots[s].deadline < d)
			d = rs->slots[s].deadline;
	return d;
}

static int cmp_asc(const void *a, const void *b)
{
	return -cmp_desc(a, b);
}

/* When learner i reaches `target` at its pace, or NEVER. */
static double reach_time(const struct syncer_round *rs, int i, double target,
			 double now)
{
	double p = learner_period(rs, i), t;

	if (rs->step[i] >= target || rs->rep_t[i] < 0)
		return now;
	if (!(p > 0))
		return NEVER;
	t = rs->rep_t[i] + ceil(target - rs->step[i]) * p;
	return t - rs->rep_t[i] <= PACE_EST_MAX_S ? t : NEVER;
}

double syncer_round_next_pull(const struct syncer_round *rs, double now)
{
	double stack[256], *v = stack, t = NEVER, target;
	int n = 0, M = rs->cfg.max_learners, free_slot = 0;

	for (int s = 0; s < rs->cfg.overlap; s++)
		free_slot |= !rs->slots[s].active;
	if (rs->stopped || !free_slot)
		return NEVER;
	for (int i = 0; i < M; i++)
		n += rs->joined[i] && !rs->stale[i];
	if (n < rs->cfg.quorum)
		return NEVER;   /* a join wakes the loop */
	if (!rs->have_mark)
		return now;
	n = 0;
	target = rs->mark + rs->cfg.steps_per_round;
	if (M > 256 && !(v = malloc((size_t)M * sizeof(*v))))
		return now;
	for (int i = 0; i < M; i++)
		if (rs->joined[i] && !rs->stale[i])
			v[n++] = reach_time(rs, i, target, now);
	if (n >= rs->cfg.quorum) {
		qsort(v, (size_t)n, sizeof(*v), cmp_asc);
		t = fmax(now, v[rs->cfg.quorum - 1]);
	}
	if (v != stack)
		free(v);
	return t;
}

double syncer_round_kth_trained(const struct syncer_round *rs)
{
	double stack[256], *v = stack, kth = 0;
	int M = rs->cfg.max_learners;

	if (M > 256 && !(v = malloc((size_t)M * sizeof(*v))))
		return 0;
	memcpy(v, rs->trained, (size_t)M * sizeof(*v));
	qsort(v, (size_t)M, sizeof(*v), cmp_desc);
	if (rs->cfg.quorum <= M)
		kth = v[rs->cfg.quorum - 1];
	if (v != stack)
		free(v);
	return kth;
}

double syncer_round_steps_per_round(const struct syncer_round *rs)
{
	if (rs->paced_rounds == 0)
		return 0;
	return syncer_round_kth_trained(rs) / (double)rs->paced_rounds;
}

double syncer_round_step_time(const struct syncer_round *rs)
{
	return rs->have_step ? rs->ema_step : 0;
}

int syncer_round_in_flight(const struct syncer_round *rs)
{
	int n = 0;

	for (int s = 0; s < rs->cfg.overlap; s++)
		n += rs->slots[s].active;
	return n;
}

int syncer_round_answered(const struct syncer_round *rs, int slot, int id)
{
	if (slot < 0 || slot >= rs->cfg.overlap || id < 0 ||
	    id >= rs->cfg.max_learners)
		return 0;
	return rs->slots[slot].state[id] >= ANSWERED;
}
