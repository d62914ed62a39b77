/* The job's status from its shards': common/syncer_status.h,
 * syncer_status_shards. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/syncer_status.h"

/* Σ w·x over the shards that have x (NAN when none has). */
static double weighted(const double *x, const double *w, int n)
{
	double sum = 0, wsum = 0;

	for (int i = 0; i < n; i++)
		if (!isnan(x[i])) {
			sum += w[i] * x[i];
			wsum += w[i];
		}
	return wsum > 0 ? sum / wsum : NAN;
}

#define WEIGHTED(field) do {                                    \
		double x_[64];                                  \
		for (int i_ = 0; i_ < n; i_++)                  \
			x_[i_] = st[i_].field;                  \
		out->field = weighted(x_, w, n);                \
	} while (0)

/*
 * Shard i's uptime at the job's elapsed E: as it said when it answered;
 * a shard that no longer answers, from its last answer, with the time
 * since (E less the elapsed it said then) counted down for its fragments
 * (docs/syncer.md, Shards: uptime per fragment).
 */
static double shard_uptime(const struct syncer_status *s, int up, double E)
{
	double span = s->uptime_span, away = E - s->elapsed;

	if (up || isnan(s->uptime) || isnan(span) || isnan(away) || !(away > 0))
		return s->uptime;
	return 1 - ((1 - s->uptime) * span + away) / (span + away);
}

/* A count of the job: the shards' sum, held at UINT64_MAX rather than
 * wrapped round to a small number (a shard's /status is the job image's
 * word, docs/security.md). */
static void add(uint64_t *o, uint64_t v)
{
	if (__builtin_add_overflow(*o, v, o))
		*o = UINT64_MAX;
}

static void add_counts(struct syncer_status *o, const struct syncer_status *s)
{
	add(&o->round, s->round);
	add(&o->tokens_merged, s->tokens_merged);
	add(&o->merged, s->merged);
	add(&o->late, s->late);
	add(&o->rejected, s->rejected);
	add(&o->empty, s->empty);
	add(&o->stale, s->stale);
	add(&o->clipped, s->clipped);
	add(&o->refused_bounds, s->refused_bounds);
	add(&o->capped, s->capped);
	add(&o->refused_history, s->refused_history);
	add(&o->refused_size, s->refused_size);
	add(&o->steps_undone, s->steps_undone);
	add(&o->heartbeats, s->heartbeats);
	add(&o->heartbeats_refused, s->heartbeats_refused);
	add(&o->claims_cut, s->claims_cut);
	add(&o->merged_steps, s->merged_steps);
	add(&o->double_merged_steps, s->double_merged_steps);
	add(&o->repeat_base, s->repeat_base);
	add(&o->stale_held, s->stale_held);
	add(&o->stale_merged, s->stale_merged);
	add(&o->bytes_in, s->bytes_in);
	add(&o->bytes_out, s->bytes_out);
	add(&o->ckpt.failures, s->ckpt.failures);
	add(&o->ckpt.mark_failures, s->ckpt.mark_failures);
	if (s->tokens > o->tokens)
		o->tokens = s->tokens;
	if (!isnan(s->elapsed) && (isnan(o->elapsed) || s->elapsed > o->elapsed))
		o->elapsed = s->elapsed;
}

static void shard_flags(struct syncer_status *o, const struct syncer_status *s,
			int i, int up)
{
	o->done &= s->done;
	o->have_invariants &= s->have_invariants;
	if (i == 0 || s->learners_connected < o->learners_connected)
		o->learners_connected = s->learners_connected;
	if (s->learners_total > o->learners_total)
		o->learners_total = s->learners_total;
	o->shards_up += up;
	if (!up && o->shard_down < 0)
		o->shard_down = i;
	o->ckpt.have |= s->ckpt.have;
	o->ckpt.failing |= s->ckpt.failing;
	o->ckpt.mark_holding |= s->ckpt.mark_holding;
	if (s->ckpt.mark_failing && !o->ckpt.mark_failing) {
		o->ckpt.mark_failing = 1;
		o->ckpt.mark_covered_round = s->ckpt.mark_covered_round;
		memcpy(o->ckpt.mark_error, s->ckpt.mark_error,
		       sizeof(o->ckpt.mark_error));
	}
	/* fits when every shard's does; a shard that does not say leaves it */
	if (s->ckpt.fits == 0 || (s->ckpt.fits == 1 && o->ckpt.fits < 0)) {
		o->ckpt.fits = s->ckpt.fits;
		o->ckpt.needed_bytes = s->ckpt.needed_bytes;
		o->ckpt.volume_free_bytes = s->ckpt.volume_free_bytes;
	}
	if (!o->ckpt.error[0] && s->ckpt.error[0])
		memcpy(o->ckpt.error, s->ckpt.error, sizeof(o->ckpt.error));
	if (s->ckpt.have_last_ok && (!o->ckpt.have_last_ok ||
				     s->ckpt.last_ok_round < o->ckpt.last_ok_round)) {
		o->ckpt.have_last_ok = 1;
		o->ckpt.last_ok_round = s->ckpt.last_ok_round;
	}
	/* the job's last checkpoint is its oldest shard's */
	if (isfinite(s->ckpt.last_ok_time) && !(o->ckpt.last_ok_time <=
						s->ckpt.last_ok_time))
		o->ckpt.last_ok_time = s->ckpt.last_ok_time;
}

#define MAXEX SYNCER_STATUS_MAX_EXCLUDED

/* The learners shard s excluded join o's: the two ascending lists
 * merged without repeats; ids beyond the lists kept are counted (once
 * per shard that names them). */
static void add_excluded(struct syncer_status *o, const struct syncer_status *s)
{
	int a = o->nexcluded < MAXEX ? o->nexcluded : MAXEX;
	int b = s->nexcluded < MAXEX ? s->nexcluded : MAXEX;
	int t[MAXEX], n = 0, i = 0, j = 0, all = 0, id;

	while (i < a || j < b) {
		if (j >= b || (i < a && o->excluded[i] < s->excluded[j]))
			id = o->excluded[i++];
		else if (i >= a || s->excluded[j] < o->excluded[i])
			id = s->excluded[j++];
		else
			id = o->excluded[i++], j++;
		all++;
		if (n < MAXEX)
			t[n++] = id;
	}
	memcpy(o->excluded, t, (size_t)n * sizeof(*t));
	o->nexcluded = all + (o->nexcluded - a) + (s->nexcluded - b);
	o->have_claims |= s->have_claims;
}

void syncer_status_shards(struct syncer_status *out,
			  const struct syncer_status *st, const int *up, int n)
{
	double w[64];

	syncer_status_release(out);
	syncer_status_init(out);
	if (n < 1 || n > 64)
		return;
	out->done = out->have_invariants = 1;
	out->shards = n;
	out->shard_down = -1;
	for (int i = 0; i < n; i++) {
		/* a shard's fragments are its weight (they are balanced) */
		w[i] = st[i].owned > 0 ? st[i].owned : 1;
		out->owned += st[i].owned;
		add_counts(out, &st[i]);
		add_excluded(out, &st[i]);
		shard_flags(out, &st[i], i, up[i]);
	}
	{
		double u[64];

		for (int i = 0; i < n; i++)
			u[i] = shard_uptime(&st[i], up[i], out->elapsed);
		out->uptime = weighted(u, w, n);
	}
	WEIGHTED(goodput);
	WEIGHTED(gpb.learner_seconds);
	WEIGHTED(gpb.merged);
	WEIGHTED(gpb.late);
	WEIGHTED(gpb.refused);
	WEIGHTED(gpb.overwritten);
	WEIGHTED(gpb.restarts);
	WEIGHTED(gpb.in_flight);
	WEIGHTED(gpb.not_training);
	WEIGHTED(gpb.merged_again);
	out->eval_loss = st[0].eval_loss;
	out->pace = st[0].pace;
	memcpy(out->ckpt.resumed_from, st[0].ckpt.resumed_from,
	       sizeof(out->ckpt.resumed_from));
	if (st[0].nevals &&
	    (out->evals = malloc(st[0].nevals * sizeof(*out->evals)))) {
		memcpy(out->evals, st[0].evals, st[0].nevals * sizeof(*out->evals));
		out->nevals = st[0].nevals;
	}
}
