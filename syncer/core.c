/*
 * core: the round driver — Θ and momentum laid out fragment after
 * fragment (the payload layout, so a fragment is one contiguous slice),
 * learners joining, leaving and reporting, the rounds (core_poll), the
 * accounting (tokens, uptime, goodput), the budget and the evaluations'
 * history. Who may join is admit.c's; an answer's way into its round and
 * the merge are merge.c's;
 * the screens, checkpoints, the evaluation thread, goodput and the
 * evaluators are parts with their own state (syncer_int.h). The
 * transport (stream.c) calls in with `mu` held and sends what each
 * call's result asks for; nothing here knows gRPC or sends anything, and
 * every time comes in as `now`, so tests/unit/test_core.c runs it on a
 * fake clock.
 *
 * Accounting (docs/syncer.md has the definitions):
 *   elapsed  = elapsed in the checkpoint + wall time the syncer was away
 *              + monotonic time since this process started
 *   uptime   = 1 − down / (elapsed − elapsed when K learners were first
 *              joined), where each gap between two completed rounds (the
 *              first from that moment, and the one still open) counts as
 *              down for its part beyond B = max(1 s, 3 · ξ_step · H/P)
 *   goodput  = learner time whose training reached Θ, over M · elapsed:
 *              Σ over merged answers of their steps not merged before ·
 *              (fragment's share of parameters) · the learner's wall
 *              seconds per step; goodput.c counts it, and where
 *              the rest of the learner time goes (syncer/goodput.h)
 */
#include "syncer/syncer_int.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/encoding.h"
#include "common/log.h"
#include "common/shard.h"
#include "common/util.h"
#include "common/wire.h"


static int build_layout(struct syncer *s, struct err *e)
{
	const struct frag_table *ft = s->ft;
	size_t off = 0;

	s->frag_off = calloc((size_t)s->P + 1, sizeof(*s->frag_off));
	s->segs = calloc((size_t)s->P, sizeof(*s->segs));
	s->frag_share = calloc((size_t)s->P, sizeof(*s->frag_share));
	if (!s->frag_off || !s->segs || !s->frag_share)
		return err_set(e, "syncer: out of memory");
	for (int p = 0; p < s->P; p++) {
		const struct fragment *f = &ft->frags[p];
		size_t in = 0;

		s->frag_off[p] = off;
		s->frag_share[p] = (double)f->numel / (double)s->nparams;
		s->segs[p] = calloc((size_t)f->ntensors, sizeof(**s->segs));
		if (!s->segs[p])
			return err_set(e, "syncer: out of memory");
		for (int k = 0; k < f->ntensors; k++) {
			const struct frag_tensor *t = &ft->tensors[f->tensors[k]];

			s->segs[p][k].offset = in;
			s->segs[p][k].numel = t->numel;
			s->segs[p][k].is_embedding = t->is_embedding;
			in += t->numel;
		}
		off += f->numel;
	}
	s->frag_off[s->P] = off;
	if (s->nshards == 1 && off != s->prm->nparams)
		return err_set(e, "syncer: the fragment table covers %zu parameters, "
			       "the model has %zu", off, s->prm->nparams);
	return 0;
}

/* The newest checkpoint that loads (persist.h) into the state: 1 when
 * one did, 0 none, -1 error. */
static int load_checkpoint(struct syncer *s, struct err *e)
{
	struct syncer_ckpt c;
	int rc;

	if ((rc = persist_load(&s->ps, &c, e)) <= 0)
		return rc;
	memcpy(s->theta, c.theta, s->nparams * sizeof(float));
	memcpy(s->mom, c.momentum, s->nparams * sizeof(float));
	memcpy(s->versions, c.versions, (size_t)s->P * sizeof(uint64_t));
	memcpy(s->acc.learners, c.learners, (size_t)s->M * sizeof(*c.learners));
	memcpy(s->acc.evals, c.evals, c.nevals * sizeof(*c.evals));
	s->acc.nevals = c.nevals;
	s->acc.done = c.done;
	s->acc.rounds_started = c.rounds_started;
	s->acc.rounds_completed = c.rounds_completed;
	s->acc.tokens_trained = c.tokens_trained;
	s->acc.merged = c.merged;
	s->acc.late = c.late;
	s->acc.rejected = c.rejected;
	s->acc.empty = c.empty;
	s->acc.bytes_in = c.bytes_in;
	s->acc.bytes_out = c.bytes_out;
	s->acc.tokens_merged = c.tokens_merged;
	s->acc.elapsed = c.elapsed;
	s->acc.down = c.down;
	s->acc.compute_merged = c.compute_merged;
	s->acc.wall_time = c.wall_time;
	s->acc.last_round_elapsed = c.last_round_elapsed;
	s->acc.uptime_start = c.uptime_start;
	syncer_ckpt_release(&c);
	return 1;
}

/* The screens (screen.h) on this table. */
static int screen_start(struct syncer *s)
{
	size_t *numel = malloc((size_t)s->P * sizeof(*numel));
	int rc;

	if (!numel)
		return -1;
	for (int q = 0; q < s->P; q++)
		numel[q] = s->ft->frags[q].numel;
	rc = screen_init(&s->scr, s->P, numel, s->nparams);
	free(numel);
	return rc;
}

/* Θ̂ for Updates sent as deltas (updelta.h) */
static int core_updelta_start(struct syncer *s, struct err *e)
{
	size_t *numel = calloc((size_t)s->P, sizeof(*numel));
	int rc;

	if (!numel)
		return err_set(e, "syncer: out of memory");
	for (int p = 0; p < s->P; p++)
		numel[p] = s->ft->frags[p].numel;
	rc = updelta_init(&s->upd, s->P, numel, s->js->syncer.update_encoding, e);
	free(numel);
	s->upd_on = rc == 0;
	return rc;
}

static int alloc_state(struct syncer *s, struct err *e)
{
	for (int q = 0; q < s->P; q++) {
		size_t bytes = enc_size(ENC_F32, s->ft->frags[q].numel) + 1024;

		if (bytes > WIRE_MAX_MESSAGE)
			return err_set(e, "syncer: fragment %d has %zu parameters: its "
				       "message would pass the %u MiB limit; use more "
				       "fragments (spec.syncer.fragments)", q,
				       s->ft->frags[q].numel, WIRE_MAX_MESSAGE >> 20);
	}
	s->theta = malloc(s->nparams * sizeof(float));
	s->mom = calloc(s->nparams, sizeof(float));
	for (int q = 0; q < s->P; q++) {
		if (s->ft->frags[q].numel > s->max_numel)
			s->max_numel = s->ft->frags[q].numel;
		if (s->ft->frags[q].ntensors > s->max_nseg)
			s->max_nseg = s->ft->frags[q].ntensors;
	}
	s->in = malloc(s->max_numel * sizeof(float));
	s->in_sq = calloc((size_t)s->max_nseg + 1, sizeof(double));
	s->delta = malloc(s->max_numel * sizeof(float));
	s->undo = malloc(2 * s->max_numel * sizeof(float));
	s->accs = calloc((size_t)s->js->syncer.overlap, sizeof(*s->accs));
	/* Θ in model order, for the last evaluation only */
	s->flat = s->prm->eval ? malloc(s->nparams * sizeof(float)) : NULL;
	s->versions = calloc((size_t)s->P, sizeof(uint64_t));
	s->resumed_at = calloc((size_t)s->P, sizeof(uint64_t));
	s->answers = calloc((size_t)s->js->syncer.overlap, sizeof(*s->answers));
	s->learners = calloc((size_t)s->M, sizeof(*s->learners));
	s->acc.learners = calloc((size_t)s->M, sizeof(*s->acc.learners));
	s->acc.evals = calloc(CKPT_MAX_EVALS, sizeof(*s->acc.evals));
	if (!s->theta || !s->mom || (s->prm->eval && !s->flat) || !s->in ||
	    !s->in_sq || !s->delta || !s->undo || !s->accs ||
	    !s->versions || !s->resumed_at || !s->answers || !s->learners ||
	    !s->acc.learners || !s->acc.evals || screen_start(s))
		return err_set(e, "syncer: out of memory for %zu parameters",
			       s->nparams);
	/* per round slot: the streaming merge (docs/syncer.md, Merge) */
	for (int slot = 0; slot < s->js->syncer.overlap; slot++)
		if (outer_acc_init(&s->accs[slot], s->max_numel, s->max_nseg,
				   outer_acc_k(s->js->syncer.max_share, s->M)))
			return err_set(e, "syncer: out of memory for the merge "
				       "of %zu parameters", s->max_numel);
	/* a shard's checkpoints are its own (common/shard.h) */
	s->acc.fingerprint = shard_fingerprint(s->ft->fingerprint, s->shard,
					       s->nshards);
	s->acc.nfrags = (uint32_t)s->P;
	s->acc.nparams = s->nparams;
	s->acc.nlearners = (uint32_t)s->M;
	s->acc.uptime_start = -1;
	if (audit_init(&s->audit, s->M, s->P))
		return err_set(e, "syncer: out of memory");
	s->audit.gid = s->scr.gid = s->gid;
	return s->js->syncer.update_delta ? core_updelta_start(s, e) : 0;
}

static int bounds_start(struct syncer *s, double now, struct err *e)
{
	const struct job_spec *js = s->js;
	struct bounds_config bc = {
		.min_step_time = js->syncer.min_step_time,
		.max_step_time = js->syncer.max_step_time,
		.tokens_per_step = (uint64_t)js->optimizer.batch_size *
				   (uint64_t)jobspec_seq_len(js),
		.quorum = js->syncer.min_quorum,
		.max_cuts = js->syncer.max_claim_cuts,
	};

	if (bounds_init(&s->bounds, &bc, s->M, s->P, now))
		return err_set(e, "syncer: out of memory");
	return 0;
}

/*
 * Round numbers and fragment versions given out after the checkpoint are
 * never reused: skip past every round that could have been in flight
 * since, and past every version that could have been sent (one per
 * completed round at most). A learner holding a version of the lost
 * rounds would otherwise take a new Update of the same number for the one
 * it has and skip it, keeping a base this syncer never had; with the skip
 * every learner takes the Welcome's Θ. Resumed from the last good
 * checkpoint, the rounds between it and the newest checkpoint file's
 * name are skipped too (skip_extra). Returns the rounds started.
 */
static uint64_t skip_lost(struct syncer *s)
{
	const struct job_syncer *sy = &s->js->syncer;
	uint64_t skip = (uint64_t)sy->overlap +
			(uint64_t)(sy->checkpoint_every > 0
				   ? sy->checkpoint_every : 1000) +
			s->ps.skip_extra;

	for (int q = 0; q < s->P; q++) {
		s->versions[q] += skip;
		s->resumed_at[q] = s->versions[q];
	}
	return s->acc.rounds_started + skip;
}

/*
 * The high-water mark of an earlier process (persist.h): round numbers
 * and versions it may have handed out are skipped, whatever checkpoint
 * was (or was not) loaded. -1: out of memory.
 */
static int read_hwm(struct syncer *s, uint64_t *started)
{
	int rc = persist_read_hwm(&s->ps, started, s->versions);

	for (int q = 0; rc == 1 && q < s->P; q++)
		s->resumed_at[q] = s->versions[q];
	return rc < 0 ? -1 : 0;
}

/* One line: `what` at round number `round`, and every fragment's version
 * (the restart test of docs/k8s-testing.md reads it). */
static void log_versions(const struct syncer *s, const char *what,
			 uint64_t round)
{
	char v[512];
	size_t n = 0;

	v[0] = '\0';
	for (int q = 0; q < s->P && n < sizeof(v) - 24; q++)
		n += (size_t)snprintf(v + n, sizeof(v) - n, "%s%" PRIu64,
				      q ? " " : "", s->versions[q]);
	log_info("%s at round number %" PRIu64 ", fragment versions %s", what,
		 round, v);
}

int core_init(struct syncer *s, const struct syncer_params *p, double now,
	      struct err *e)
{
	const struct job_syncer *sy = &p->js->syncer;
	struct round_config rc;
	uint64_t started;
	int loaded;

	/* an adopting syncer (stream.c) has served streams and HTTP with
	 * this struct and its lock already: they stay */
	if (!s->adopting) {
		memset(s, 0, sizeof(*s));
		pthread_mutex_init(&s->mu, NULL);
	}
	s->prm = p;
	s->js = p->js;
	s->M = p->js->learners.replicas;
	s->t0 = now;
	s->last_loop = now;
	budgetw_init(&s->bw, p->job_path, &p->js->budget, now);
	if (core_owned_init(s, p, e) || build_layout(s, e) ||
	    alloc_state(s, e) || bounds_start(s, now, e))
		return -1;
	for (int q = 0; q < s->P; q++)
		frag_gather(s->ft, q, p->init_params, s->theta + s->frag_off[q]);
	if (persist_init(&s->ps, p->ckpt_dir, s->acc.fingerprint,
			 (uint32_t)s->P, (uint32_t)s->M, s->frag_off, s->theta,
			 s->mom, e) ||
	    (loaded = load_checkpoint(s, e)) < 0)
		return -1;
	for (int q = 0; q < s->P; q++)
		screen_theta(&s->scr, q, s->theta + s->frag_off[q]);
	if (loaded) {
		s->elapsed_base = s->acc.elapsed +
				  fmax(0, clock_wall() - s->acc.wall_time);
		/* the token totals it holds were reported before it was written */
		bounds_restored(&s->bounds,
				now - fmax(0, clock_wall() - s->acc.wall_time));
	}
	/* the gap open at the checkpoint goes on: it spans the restart */
	if (loaded && s->acc.uptime_start >= 0 && !s->acc.done)
		gaplog_open(&s->gaps, s->acc.last_round_elapsed, 0);
	else if (p->js->model.kind == MODEL_EXTERNAL)
		log_info("starting from a learner's weights");
	else
		log_info("starting from the seeded model (seed %" PRIu64 ")",
			 p->js->model.seed);
	started = loaded ? skip_lost(s) : s->acc.rounds_started;
	if (read_hwm(s, &started))
		return err_set(e, "syncer: out of memory");
	if (!loaded)
		s->ps.resumed_from = s->ps.hwm_rounds ? "seed" : "new";
	if (!loaded && s->ps.hwm_rounds)
		log_warn("no checkpoint loads, but the high-water mark says "
			 "rounds up to %" PRIu64 " were handed out: the model "
			 "starts over from the seed", s->ps.hwm_rounds);
	if (loaded || s->ps.hwm_rounds)
		log_versions(s, "rounds resume", started + 1);
	rc = (struct round_config){
		.quorum = sy->min_quorum, .grace = sy->grace,
		.overlap = sy->overlap, .nfrags = s->P,
		.steps_per_round = (double)jobspec_sync_every(p->js) / s->P,
		/* shard i's first round i·H/P steps in: the shards' pulls
		 * interleave every H/P steps (docs/syncer.md, Shards) */
		.phase = (double)s->shard * jobspec_sync_every(p->js) / s->gP,
		.max_learners = s->M, .ema = 0.2,
	};
	if (syncer_round_init(&s->rs, &rc, started, s->acc.rounds_completed, e))
		return -1;
	if (goodput_init(&s->gp, s->M, s->P, s->frag_share,
			 core_elapsed(s, now), s->acc.compute_merged))
		return err_set(e, "syncer: out of memory");
	if (s->acc.done) {
		s->done = 1;
		s->done_elapsed = s->acc.elapsed;
		s->rs.stopped = 1;
		goodput_stop(&s->gp);
	}
	eval_remote_init(&s->evr, s->rs.completed, s->acc.tokens_trained);
	return eval_thread_init(&s->ev, &s->mu, p->eval, p->eval_ctx,
				s->nparams, (size_t)sy->eval_tokens, e);
}

void core_release(struct syncer *s)
{
	eval_thread_stop(&s->ev);
	persist_release(&s->ps);   /* the write under way reads Θ */
	for (int slot = 0; s->answers && slot < s->rs.cfg.overlap; slot++)
		merge_free_answers(s, slot);
	syncer_round_release(&s->rs);
	goodput_release(&s->gp);
	for (int q = 0; s->segs && q < s->P; q++)
		free(s->segs[q]);
	free(s->segs);
	free(s->frag_off);
	free(s->frag_share);
	free(s->theta);
	free(s->mom);
	free(s->in);
	free(s->in_sq);
	free(s->delta);
	free(s->undo);
	/* sized by the job, like their allocation: the round state is
	 * released by now */
	for (int slot = 0; s->accs && slot < s->js->syncer.overlap; slot++)
		outer_acc_release(&s->accs[slot]);
	free(s->accs);
	free(s->flat);
	free(s->versions);
	free(s->resumed_at);
	screen_release(&s->scr);
	free(s->answers);
	free(s->learners);
	free(s->acc.learners);
	free(s->acc.evals);
	audit_release(&s->audit);
	updelta_release(&s->upd);
	bounds_release(&s->bounds);
	core_owned_release(s);
	pthread_mutex_destroy(&s->mu);
}

double core_elapsed(const struct syncer *s, double now)
{
	if (s->done)
		return s->done_elapsed;
	return s->elapsed_base + (now - s->t0);
}

/* B: a gap between completed rounds longer than this is partly down. */
static double expected_gap(const struct syncer *s)
{
	double b = 3 * syncer_round_step_time(&s->rs) * s->rs.cfg.steps_per_round;

	return b > 1.0 ? b : 1.0;
}

/* Learners joined; with attached, only those whose learner process is
 * known (its incarnation: a sidecar joins with 0 before it). */
static int count_joined(const struct syncer *s, int attached)
{
	int n = 0;

	for (int i = 0; i < s->M; i++)
		n += s->learners[i].joined &&
		     (!attached || s->learners[i].incarnation != 0);
	return n;
}

static int joined_count(const struct syncer *s)
{
	return count_joined(s, 0);
}

/*
 * Opens the uptime window the first time K learners are joined with
 * their learner process attached: a sidecar joins with incarnation 0
 * while its learner is still starting, which is not the syncer's
 * downtime (docs/syncer.md, Accounting). The heartbeats bring the
 * incarnation.
 */
static void note_joined(struct syncer *s, double now)
{
	int n = joined_count(s);

	if (s->acc.uptime_start >= 0)
		return;
	if (count_joined(s, 1) >= s->js->syncer.min_quorum) {
		s->acc.uptime_start = core_elapsed(s, now);
		s->acc.last_round_elapsed = s->acc.uptime_start;
		gaplog_start(&s->gaps, s->acc.uptime_start, n);
	}
}

double core_uptime(const struct syncer *s, double now)
{
	double E = core_elapsed(s, now), down = s->acc.down, span;

	if (s->acc.uptime_start < 0)
		return 1.0;   /* nothing to measure before a quorum could exist */
	if (!s->done)
		down += fmax(0, E - s->acc.last_round_elapsed - expected_gap(s));
	span = E - s->acc.uptime_start;
	if (!(span > 0))
		return 1.0;
	return fmin(1.0, fmax(0.0, 1.0 - down / span));
}

double core_uptime_span(const struct syncer *s, double now)
{
	if (s->acc.uptime_start < 0)
		return 0;
	return fmax(0, core_elapsed(s, now) - s->acc.uptime_start);
}

double core_goodput(const struct syncer *s, double now)
{
	double E = core_elapsed(s, now);

	return goodput_ratio(&s->gp, E, syncer_round_step_time(&s->rs));
}

int core_checkpoint(struct syncer *s, double now, int wait, struct err *e)
{
	struct syncer_ckpt c = s->acc;
	int rc;

	c.versions = s->versions;
	c.theta = s->theta;
	c.momentum = s->mom;
	c.rounds_started = s->rs.started;
	c.rounds_completed = s->rs.completed;
	c.elapsed = core_elapsed(s, now);
	c.compute_merged = s->gp.merged_base +
			   goodput_merged_seconds(&s->gp,
						  syncer_round_step_time(&s->rs));
	c.wall_time = clock_wall();
	c.done = (uint32_t)s->done;
	rc = persist_save(&s->ps, &c, wait, e);
	/* not taken (a write under way): due, taken when the writer is idle */
	s->ckpt_due = !wait && rc == 0;
	return rc < 0 ? -1 : 0;
}

void core_checkpoint_due(struct syncer *s, double now, int wait)
{
	struct err e;

	if (wait)
		ckptw_wait(&s->ps.w);
	if (s->ckpt_due && !s->done && !ckptw_busy(&s->ps.w) &&
	    core_checkpoint(s, now, wait, &e))
		log_error("%s", e.msg);
}

/* The round of slot is over: its timings, the gap since the last one. */
static void close_round(struct syncer *s, int slot, double now, double t)
{
	double E;

	merge_free_answers(s, slot);
	s->quorum_wait_sum += s->rs.slots[slot].t_quorum - s->rs.slots[slot].t_start;
	s->grace_sum += fmax(0, now - s->rs.slots[slot].t_quorum);
	s->quorum_count++;
	syncer_round_done(&s->rs, slot, clock_mono() - t);
	s->merge_sum += clock_mono() - t;
	s->merge_count++;
	E = core_elapsed(s, now);
	/* before the window opens (a round whose learners' heartbeats have
	 * not come yet) the wait is the start, not down */
	if (s->acc.uptime_start >= 0)
		s->acc.down += fmax(0, E - s->acc.last_round_elapsed -
					  expected_gap(s));
	s->acc.last_round_elapsed = E;
	if (s->acc.uptime_start >= 0) {
		const struct round_slot *sl = &s->rs.slots[slot];

		gaplog_close(&s->gaps, E, expected_gap(s), sl->round,
			     E - (now - sl->t_start),
			     sl->t_quorum >= 0 ? E - (now - sl->t_quorum) : -1,
			     joined_count(s), s->M);
	}
}

void core_merge(struct syncer *s, int slot, double now, struct core_merged *out)
{
	const struct job_syncer *sy = &s->js->syncer;
	int p = s->rs.slots[slot].frag, kept, done;
	uint64_t round = s->rs.slots[slot].round;
	double t = clock_mono();

	kept = merge_round(s, slot, p, round);
	close_round(s, slot, now, t);
	eval_remote_merged(&s->evr, round, s->acc.tokens_trained);
	log_debug("round %" PRIu64 " fragment %d: %d merged, version %" PRIu64,
		  round, s->gid[p], kept, s->versions[p]);
	done = core_check_budget(s, now);
	*out = (struct core_merged){ .frag = p, .round = round,
				     .version = s->versions[p], .merged = kept,
				     .updated = kept > 0, .done = done };
	/* handed to the writer thread, which writes it while the rounds go
	 * on (ckptw.h); an update may reach a learner before its checkpoint
	 * is on disk, and the high-water mark keeps a restarted syncer from
	 * handing out its version again (docs/syncer.md, Checkpoints) */
	if (!s->done && sy->checkpoint_every > 0 &&
	    s->rs.completed % (uint64_t)sy->checkpoint_every == 0) {
		struct err e;

		if (core_checkpoint(s, now, 0, &e))
			log_error("%s", e.msg);
	}
	if (!s->done && sy->eval_every > 0 &&
	    s->rs.completed % (uint64_t)sy->eval_every == 0)
		core_eval_start(s, now);
}

int core_poll(struct syncer *s, double now, struct core_step *out)
{
	struct round_action a;

	if (s->done)
		return 0;
	if (s->ckpt_due)
		core_checkpoint_due(s, now, 0);
	/* no round is handed out before a mark that covers it is on disk;
	 * the next one is asked for ahead (persist.h, markw.h) */
	s->rs.covered = persist_mark(&s->ps, s->rs.started + 1, s->versions,
				     s->rs.cfg.overlap, now);
	syncer_round_poll(&s->rs, now, &a);
	if (a.kind == ROUND_HELD || a.kind == ROUND_PULL)
		persist_mark_held(&s->ps, a.kind == ROUND_HELD, now);
	switch (a.kind) {
	case ROUND_MERGE:
		*out = (struct core_step){ .kind = CORE_STEP_MERGED };
		core_merge(s, a.slot, now, &out->merged);
		return 1;
	case ROUND_PULL:
		*out = (struct core_step){ .kind = CORE_STEP_PULL,
					   .round = a.round, .frag = a.frag };
		log_debug("round %" PRIu64 " fragment %d: pulled", a.round,
			  s->gid[a.frag]);
		return 1;
	default:
		return 0;
	}
}

void core_finish(struct syncer *s, double now)
{
	struct err e;

	syncer_round_abandon(&s->rs);
	for (int slot = 0; slot < s->rs.cfg.overlap; slot++)
		merge_free_answers(s, slot);
	/* done is on disk before the last evaluation, which takes a while:
	 * a syncer killed meanwhile comes back knowing the job is over */
	if (core_checkpoint(s, now, 1, &e))
		log_error("%s", e.msg);
	if (core_eval_sync(s, now) == 0 && core_checkpoint(s, now, 1, &e))
		log_error("%s", e.msg);
}

void core_stop(struct syncer *s, double now)
{
	struct err e;

	s->stopping = 1;
	s->ready = 0;
	if (syncer_round_in_flight(&s->rs))
		log_info("stopping: %d round(s) in flight abandoned",
			 syncer_round_in_flight(&s->rs));
	syncer_round_abandon(&s->rs);
	for (int slot = 0; slot < s->rs.cfg.overlap; slot++)
		merge_free_answers(s, slot);
	log_versions(s, "stopped: the last round given out", s->rs.started);
	if (!s->done && core_checkpoint(s, now, 1, &e))
		log_error("%s", e.msg);
}

/* ---- learners ---------------------------------------------------------- */

int core_join(struct syncer *s, const struct wire_hello *h, double now,
	      uint64_t *resume, struct round_action *pulls, int max)
{
	int id = (int)h->learner_id;
	struct learner *l = &s->learners[id];
	uint64_t r;
	int npull;

	/* chosen before this learner joins: the reference is the others' */
	r = syncer_round_resume_step(&s->rs, id, h->step, l->seen, l->step_max);
	l->seen = 1;
	l->last_seen = now;
	l->step_moved = now;
	l->stale = 0;
	l->step = r;
	if (r > l->step_max)
		l->step_max = r;
	l->incarnation = h->incarnation;
	audit_incarnation(&s->audit, id, h->incarnation);
	audit_hello(&s->audit, id, h->step);
	l->joined = 1;
	s->learners_connected++;
	goodput_join(&s->gp, id, h->incarnation, r, now);
	gaplog_learner(&s->gaps, +1, joined_count(s));
	note_joined(s, now);
	bounds_join(&s->bounds, id, r, now);
	npull = s->rs.cfg.overlap <= max
		? syncer_round_join(&s->rs, id, r, pulls) : 0;
	if (r > h->step)
		log_info("learner %u joined (step %" PRIu64 ", resumes at %" PRIu64
			 ", incarnation %" PRIu64 ")", h->learner_id, h->step,
			 r, h->incarnation);
	else
		log_info("learner %u joined (step %" PRIu64 ", incarnation %"
			 PRIu64 ")", h->learner_id, h->step, h->incarnation);
	*resume = r;
	return npull;
}

void core_leave(struct syncer *s, int learner, const char *why)
{
	s->learners[learner].joined = 0;
	s->learners[learner].stale = 0;
	s->learners_connected--;
	audit_left(&s->audit, learner, s->versions);
	gaplog_learner(&s->gaps, -1, joined_count(s));
	syncer_round_leave(&s->rs, learner);
	log_info("learner %d left: %s", learner, why);
}

/* Learner id reported `step` (its last one was `old`): a step that
 * changed ends a stall (docs/syncer.md, Stale learners). */
void core_step_seen(struct syncer *s, int id, uint64_t old, uint64_t step,
		    double now)
{
	struct learner *l = &s->learners[id];

	if (step == old)
		return;
	l->step_moved = now;
	if (l->stale) {
		l->stale = 0;
		syncer_round_set_stale(&s->rs, id, 0);
		log_info("learner %d: its step moves again (%" PRIu64 "); "
			 "rounds wait for it again", id, step);
	}
}

int core_tick(struct syncer *s, double now)
{
	if (now < s->next_tick)
		return 0;
	s->next_tick = now + CORE_TICK_S;
	if (!s->done && !s->adopting) {   /* adopting: no learner yet */
		core_check_stale(s, now);
		persist_room_again(&s->ps, now);
		budgetw_poll(&s->bw, now);
	}
	return 1;
}

void core_check_stale(struct syncer *s, double now)
{
	s->stale_scans++;
	for (int id = 0; id < s->M; id++) {
		struct learner *l = &s->learners[id];
		double limit = fmax(s->js->syncer.stall_seconds,
				    CORE_STALL_STEPS * l->step_time);

		if (!l->joined || l->stale || l->excluded ||
		    now - l->step_moved <= limit ||
		    now - l->last_seen > CORE_STALL_HEARD_S)
			continue;
		l->stale = 1;
		s->stale_marked++;
		syncer_round_set_stale(&s->rs, id, 1);
		log_warn("learner %d: its step %" PRIu64 " has not moved for "
			 "%.0f s while it keeps reporting; stale: rounds no "
			 "longer wait for it", id, l->step, now - l->step_moved);
	}
}

/*
 * Learner id's claims were cut (bounds.h): when that made it excluded,
 * the rounds stop waiting for it (the transport ends its stream:
 * core_excluded) and a warning says so.
 */
void core_claims_cut(struct syncer *s, int id)
{
	struct learner *l = &s->learners[id];
	struct err e;

	if (!bounds_excluded(&s->bounds, id) || l->excluded)
		return;
	l->excluded = 1;
	syncer_round_set_stale(&s->rs, id, 1);
	bounds_why_excluded(&s->bounds, id, &e);
	log_warn("learner %d %s; its reports are refused from now on", id,
		 e.msg);
}

int core_excluded(const struct syncer *s, int id)
{
	return id >= 0 && id < s->M && bounds_excluded(&s->bounds, id);
}

/*
 * A report of learner id refused by the bounds: one warning at the 1st,
 * 2nd, 4th, 8th … refusal of its kind (a learner that keeps lying would
 * write one a round), the others at debug level.
 */
void core_log_refusal(int id, const char *what, uint64_t n, const char *why)
{
	if (n & (n - 1))
		log_debug("learner %d: %s refused: %s", id, what, why);
	else
		log_warn("learner %d: %s refused: %s (%" PRIu64 " of its reports "
			 "of this kind refused; logged at powers of two)", id,
			 what, why, n);
}

/* A cut of learner id's claims (bounds.h), logged as a refusal is: the
 * n-th cut of the learner, a warning at powers of two. */
void core_log_cut(int id, const char *what, uint64_t n, const char *why)
{
	if (n & (n - 1))
		log_debug("learner %d: %s cut: %s", id, what, why);
	else
		log_warn("learner %d: %s cut: %s (%" PRIu64 " of its claims cut; "
			 "logged at powers of two)", id, what, why, n);
}

uint64_t core_job_tokens(const struct syncer *s, double now)
{
	double more = 0;

	if (s->done)
		return s->acc.tokens_trained;
	for (int i = 0; i < s->M; i++) {
		const struct learner *l = &s->learners[i];
		double ahead;

		if (!l->joined || !(l->tokens_per_step > 0))
			continue;
		ahead = syncer_round_step_at(&s->rs, i, now) - (double)l->hb_step;
		if (ahead > 0)
			more += ahead * l->tokens_per_step;
	}
	return s->acc.tokens_trained + (uint64_t)more;
}

int core_heartbeat(struct syncer *s, int learner,
		   const struct wire_heartbeat *hb, double now)
{
	struct learner *l = &s->learners[learner];
	struct ckpt_learner *cl = &s->acc.learners[learner];
	struct err e;

	l->last_seen = now;
	if (bounds_heartbeat(&s->bounds, learner, hb, cl->tokens,
			     hb->incarnation == cl->incarnation, now, &e)) {
		core_log_refusal(learner, "heartbeat",
			    s->bounds.l[learner].refused_heartbeats, e.msg);
		core_claims_cut(s, learner);
		return -1;
	}

	/* its tokens per step, for core_job_tokens: between two heartbeats
	 * of one process that both moved */
	if (hb->incarnation == cl->incarnation && hb->step > l->hb_step &&
	    hb->tokens > cl->tokens)
		l->tokens_per_step = (double)(hb->tokens - cl->tokens) /
				     (double)(hb->step - l->hb_step);
	l->hb_step = hb->step;
	/* a count that went back is a learner that started over */
	if (hb->tokens >= cl->tokens)
		s->acc.tokens_trained += hb->tokens - cl->tokens;
	else
		s->acc.tokens_trained += hb->tokens;
	cl->tokens = hb->tokens;
	cl->incarnation = hb->incarnation;
	core_step_seen(s, learner, l->step, hb->step, now);
	l->step = hb->step;
	if (hb->step > l->step_max)
		l->step_max = hb->step;
	l->tokens = hb->tokens;
	l->step_time = hb->step_time;
	l->train_loss = hb->train_loss;
	l->incarnation = hb->incarnation;
	audit_incarnation(&s->audit, learner, hb->incarnation);
	syncer_round_progress(&s->rs, learner, hb->step, hb->step_time);
	goodput_progress(&s->gp, learner, hb->incarnation, hb->step,
			 hb->step_time, now);
	if (l->joined)
		note_joined(s, now);
	return 0;
}

int core_check_budget(struct syncer *s, double now)
{
	const struct job_budget *b = &s->bw.budget;

	if (s->done)
		return 1;
	if ((b->tokens && s->acc.tokens_trained >= b->tokens) ||
	    (b->outer_steps && s->rs.completed >= b->outer_steps)) {
		s->done_elapsed = core_elapsed(s, now);
		/* the gap since the last round ends here: count it now, the
		 * uptime is frozen from this moment */
		if (s->acc.uptime_start >= 0) {
			s->acc.down += fmax(0, s->done_elapsed -
					       s->acc.last_round_elapsed -
					       expected_gap(s));
			s->acc.last_round_elapsed = s->done_elapsed;
			gaplog_close(&s->gaps, s->done_elapsed, expected_gap(s),
				     0, -1, -1, joined_count(s), s->M);
		}
		s->done = 1;
		s->rs.stopped = 1;
		goodput_stop(&s->gp);
		log_info("budget reached: round %" PRIu64 ", %" PRIu64
			 " tokens trained", s->rs.completed, s->acc.tokens_trained);
	}
	return s->done;
}

/* ---- evaluation ------------------------------------------------------ */

void core_eval_add(struct syncer *s, uint64_t round, uint64_t tokens,
		   double loss, double time)
{
	struct syncer_ckpt *c = &s->acc;

	/* before the loss joins the list: it is held to the earlier ones */
	persist_eval(&s->ps, round, loss, c->evals, c->nevals);
	if (c->nevals == CKPT_MAX_EVALS) {
		memmove(c->evals, c->evals + 1,
			(CKPT_MAX_EVALS - 1) * sizeof(*c->evals));
		c->nevals--;
	}
	c->evals[c->nevals++] = (struct ckpt_eval){ round, tokens, loss, time };
	log_info("eval: round %" PRIu64 ", %" PRIu64 " tokens, loss %.4f", round,
		 tokens, loss);
}

/* Θ, in the model's own layout, into flat. */
static void snapshot(struct syncer *s, float *flat)
{
	for (int q = 0; q < s->P; q++)
		frag_scatter(s->ft, q, s->theta + s->frag_off[q], flat);
}

void core_eval_start(struct syncer *s, double now)
{
	float *buf = eval_thread_buffer(&s->ev);

	if (!buf)
		return;
	snapshot(s, buf);
	eval_thread_go(&s->ev, s->rs.completed, s->acc.tokens_trained,
		       core_elapsed(s, now));
}

void core_eval_collect(struct syncer *s)
{
	struct eval_result r;

	if (eval_thread_collect(&s->ev, &r))
		core_eval_add(s, r.round, r.tokens, r.loss, r.time);
}

int core_eval_sync(struct syncer *s, double now)
{
	struct err e;
	double loss;
	int rc;

	if (!s->ev.started)
		return 0;
	eval_thread_wait(&s->ev);
	core_eval_collect(s);
	if (s->acc.nevals && s->acc.evals[s->acc.nevals - 1].round == s->rs.completed)
		return 0;
	snapshot(s, s->flat);
	/* the HTTP side keeps answering meanwhile: /healthz and /status
	 * take `mu`; nothing else changes the state while the run loop is
	 * here (syncer_int.h, Threads) */
	__atomic_store_n(&s->final_eval, 1, __ATOMIC_RELAXED);   /* /healthz */
	pthread_mutex_unlock(&s->mu);
	rc = s->prm->eval(s->prm->eval_ctx, s->flat,
			  (size_t)s->js->syncer.eval_tokens, &loss, &e);
	pthread_mutex_lock(&s->mu);
	__atomic_store_n(&s->final_eval, 0, __ATOMIC_RELAXED);
	if (rc) {
		log_error("eval: %s", e.msg);
		return -1;
	}
	core_eval_add(s, s->rs.completed, s->acc.tokens_trained, loss,
		 core_elapsed(s, now));
	return 0;
}
