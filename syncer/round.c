/*
 * round: pacing, quorum, grace and lateness (see round.h).
 *
 * Each round in flight owns a slot and a byte per learner:
 *   0 not pulled, 1 pulled and waited for, 2 answered (counted),
 *   3 answered but refused (not counted).
 * `pending` counts the 1s of joined learners, so "everyone answered" is
 * pending == 0 and needs no scan.
 */
#include "syncer/round.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { NOT_PULLED = 0, WAITING = 1, ANSWERED = 2, REFUSED = 3 };

#define NEVER 1e300

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
	rs->completed = completed;
	rs->slots = calloc((size_t)cfg->overlap, sizeof(*rs->slots));
	rs->joined = calloc(n, 1);
	rs->step = calloc(n, sizeof(*rs->step));
	if (!rs->slots || !rs->joined || !rs->step)
		goto oom;
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
	free(rs->step);
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
	rs->step[id] = (double)step;
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
	return n;
}

static double kth_step(const struct syncer_round *rs, int skip);

void syncer_round_leave(struct syncer_round *rs, int id)
{
	double kth;

	if (id < 0 || id >= rs->cfg.max_learners || !rs->joined[id])
		return;
	rs->joined[id] = 0;
	/*
	 * One of the K most advanced left: the K-th step is now a slower
	 * learner's, known from its last report. The rounds go on at once from
	 * there instead of waiting for that learner's next report — with no
	 * round in flight, its next heartbeat, up to a second away (the round
	 * gaps of docs/k8s-testing.md, "pulled 0.97 s" after each deletion).
	 */
	kth = kth_step(rs, -1);
	if (rs->have_mark && kth >= 0 && kth < rs->mark)
		rs->mark = kth - rs->cfg.steps_per_round;
	for (int s = 0; s < rs->cfg.overlap; s++) {
		struct round_slot *sl = &rs->slots[s];

		if (sl->active && sl->state[id] == WAITING) {
			sl->state[id] = NOT_PULLED;
			sl->pending--;
		}
	}
}

void syncer_round_progress(struct syncer_round *rs, int id, uint64_t step,
			   double step_time)
{
	if (id < 0 || id >= rs->cfg.max_learners)
		return;
	rs->step[id] = (double)step;
	if (step_time > 0 && isfinite(step_time))
		ema_add(&rs->ema_step, &rs->have_step, step_time, rs->cfg.ema);
}

static double grace_window(const struct syncer_round *rs)
{
	double g = rs->cfg.grace * (rs->cfg.overlap * rs->ema_step -
				    rs->ema_quorum - rs->ema_sync);

	if (!(g > 0))
		return 0;
	return g < rs->ema_step ? g : rs->ema_step;
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
	sl->pending--;
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
		rs->last_grace = grace_window(rs);
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
 * none skipped); -1 if fewer are joined. */
static double kth_step(const struct syncer_round *rs, int skip)
{
	double stack[256], *v = stack, kth = -1;
	int n = 0, M = rs->cfg.max_learners;

	if (M > 256 && !(v = malloc((size_t)M * sizeof(*v))))
		return -1;
	for (int i = 0; i < M; i++)
		if (rs->joined[i] && i != skip)
			v[n++] = rs->step[i];
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
	kth = kth_step(rs, id);
	return kth > (double)hello_step ? (uint64_t)kth : hello_step;
}

void syncer_round_poll(struct syncer_round *rs, double now,
		       struct round_action *out)
{
	int free_slot = -1, best = -1;
	double kth, spr = rs->cfg.steps_per_round;

	memset(out, 0, sizeof(*out));
	for (int s = 0; s < rs->cfg.overlap; s++) {
		struct round_slot *sl = &rs->slots[s];

		if (!sl->active) {
			if (free_slot < 0)
				free_slot = s;
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
	if (best >= 0) {
		out->kind = ROUND_MERGE;
		out->round = rs->slots[best].round;
		out->frag = rs->slots[best].frag;
		out->slot = best;
		return;
	}
	if (rs->stopped || free_slot < 0 || (kth = kth_step(rs, -1)) < 0)
		return;
	/*
	 * The first round starts as soon as K learners are joined, without
	 * waiting for their steps to move: learners train from the moment
	 * they are welcomed, and until answers flow their steps are known
	 * from heartbeats, one a second. Every step trained meanwhile would
	 * land in the first answers — hundreds where a round spans a few —
	 * and the outer momentum would carry them on for tens of rounds
	 * (eval loss 5.5 → 7-8 at the start of the job, 2.9 → up to 12
	 * after a syncer restart, docs/syncer.md).
	 */
	if (!rs->have_mark) {
		rs->mark = kth - spr;
		rs->have_mark = 1;
	}
	/*
	 * The K-th step went back: learners restarted from step 0 (or the
	 * most advanced left). Pace from where the K-th is now instead of
	 * waiting for it to climb back to the old mark.
	 */
	if (kth < rs->mark)
		rs->mark = kth;
	if (kth < rs->mark + spr)
		return;
	rs->mark = fmax(rs->mark + spr, kth - spr);

	struct round_slot *sl = &rs->slots[free_slot];
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
		sl->pending += rs->joined[i];
	}
	out->kind = ROUND_PULL;
	out->round = sl->round;
	out->frag = sl->frag;
	out->slot = free_slot;
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
