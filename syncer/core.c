/*
 * core: the syncer's state and what happens to it — Θ and momentum laid
 * out fragment after fragment (the payload layout, so a fragment is one
 * contiguous slice), merges, accounting (tokens, uptime, goodput),
 * checkpoints and the evaluation thread; learners joining, leaving and
 * answering, each answer validated and counted here. The transport
 * (stream.c) calls in with `mu` held and sends what each call's result
 * asks for; nothing here knows gRPC or sends anything, and every time
 * comes in as `now`, so tests/unit/test_core.c runs it on a fake clock.
 * What a learner says about itself (steps, tokens, step time) is held to
 * the bounds of bounds.h before anything of it is used; one answer's
 * share of a merge is capped at maxShare (docs/syncer.md, Bounds).
 *
 * The merge streams (docs/syncer.md, Merge): an accepted answer is
 * decoded into its round slot's accumulator (outer.h, struct outer_acc),
 * screened against the fragment's norm history and folded there at once;
 * the slot keeps only a small record per answer (struct answer) for the
 * audit, goodput and the counters. What a slot holds does not grow with
 * the number of learners.
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
 *              seconds per step; syncer/goodput.c counts it, and where
 *              the rest of the learner time goes
 */
#include "syncer/syncer_int.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/encoding.h"
#include "common/log.h"
#include "common/util.h"
#include "common/wire.h"

static void *eval_main(void *arg);
static void free_answers(struct syncer *s, int slot);

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
	if (off != s->nparams)
		return err_set(e, "syncer: the fragment table covers %zu parameters, "
			       "the model has %zu", off, s->nparams);
	return 0;
}

static int load_checkpoint(struct syncer *s, struct err *e)
{
	struct syncer_ckpt c;
	char path[4096];
	uint64_t newest;
	int rc;

	rc = syncer_ckpt_load_newest(s->prm->ckpt_dir, s->ft->fingerprint,
				     (uint32_t)s->P, s->nparams, (uint32_t)s->M,
				     &c, path, sizeof(path), e);
	if (rc == 1)
		s->ckpt.resumed_from = "checkpoint";
	if (rc == 0) {
		/* no rolling checkpoint loads: the last good one, if any */
		rc = syncer_ckpt_load_good(s->prm->ckpt_dir, s->ft->fingerprint,
					   (uint32_t)s->P, s->nparams,
					   (uint32_t)s->M, &c, path, sizeof(path));
		if (rc == 1 && syncer_ckpt_newest_name(s->prm->ckpt_dir,
						       s->ft->fingerprint,
						       &newest) &&
		    newest > c.rounds_completed)
			s->skip_extra = newest - c.rounds_completed;
		if (rc == 1) {
			s->ckpt.resumed_from = "last_good";
			log_warn("no rolling checkpoint loads; resuming from the "
				 "last good one, %" PRIu64 " round(s) older than "
				 "the newest checkpoint's name", s->skip_extra);
		}
	}
	if (rc <= 0)
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
	s->ckpt.have_ok = 1;
	s->ckpt.last_ok_round = c.rounds_completed;
	log_info("resumed from '%s': round %" PRIu64 ", %" PRIu64
		 " tokens trained, %.1f s elapsed", path, c.rounds_completed,
		 c.tokens_trained, c.elapsed);
	syncer_ckpt_release(&c);
	return 1;
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
	s->flat = malloc(s->nparams * sizeof(float));
	s->ev.params = malloc(s->nparams * sizeof(float));
	s->versions = calloc((size_t)s->P, sizeof(uint64_t));
	s->resumed_at = calloc((size_t)s->P, sizeof(uint64_t));
	s->norm_hist = calloc((size_t)s->P * CORE_NORM_HISTORY,
			      sizeof(*s->norm_hist));
	s->norm_hist_n = calloc((size_t)s->P, sizeof(int));
	s->norm_hist_next = calloc((size_t)s->P, sizeof(int));
	s->theta_norm = calloc((size_t)s->P, sizeof(double));
	s->answers = calloc((size_t)s->js->syncer.overlap, sizeof(*s->answers));
	s->learners = calloc((size_t)s->M, sizeof(*s->learners));
	s->acc.learners = calloc((size_t)s->M, sizeof(*s->acc.learners));
	s->acc.evals = calloc(CKPT_MAX_EVALS, sizeof(*s->acc.evals));
	if (!s->theta || !s->mom || !s->flat || !s->ev.params || !s->in ||
	    !s->in_sq || !s->delta || !s->undo || !s->accs ||
	    !s->versions || !s->resumed_at || !s->answers || !s->learners ||
	    !s->acc.learners || !s->acc.evals || !s->norm_hist ||
	    !s->norm_hist_n || !s->norm_hist_next || !s->theta_norm)
		return err_set(e, "syncer: out of memory for %zu parameters",
			       s->nparams);
	/* per round slot: the streaming merge (docs/syncer.md, Merge) */
	for (int slot = 0; slot < s->js->syncer.overlap; slot++)
		if (outer_acc_init(&s->accs[slot], s->max_numel, s->max_nseg,
				   outer_acc_k(s->js->syncer.max_share, s->M)))
			return err_set(e, "syncer: out of memory for the merge "
				       "of %zu parameters", s->max_numel);
	s->acc.fingerprint = s->ft->fingerprint;
	s->acc.nfrags = (uint32_t)s->P;
	s->acc.nparams = s->nparams;
	s->acc.nlearners = (uint32_t)s->M;
	s->acc.uptime_start = -1;
	if (audit_init(&s->audit, s->M, s->P))
		return err_set(e, "syncer: out of memory");
	return 0;
}

static int bounds_start(struct syncer *s, double now, struct err *e)
{
	const struct job_spec *js = s->js;
	struct bounds_config bc = {
		.min_step_time = js->syncer.min_step_time,
		.max_step_time = js->syncer.max_step_time,
		.tokens_per_step = (uint64_t)js->optimizer.batch_size *
				   (uint64_t)jobspec_seq_len(js),
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
			s->skip_extra;

	for (int q = 0; q < s->P; q++) {
		s->versions[q] += skip;
		s->resumed_at[q] = s->versions[q];
	}
	return s->acc.rounds_started + skip;
}

/*
 * The high-water mark of an earlier process (docs/syncer.md,
 * Checkpoints): round numbers and versions it may have handed out are
 * skipped, whatever checkpoint was (or was not) loaded. -1: out of
 * memory.
 */
static int read_hwm(struct syncer *s, uint64_t *started)
{
	struct syncer_hwm h = { 0 };
	struct err e;
	int rc;

	if (!(h.versions = calloc((size_t)s->P, sizeof(*h.versions))))
		return -1;
	rc = syncer_hwm_read(s->prm->ckpt_dir, s->ft->fingerprint,
			     (uint32_t)s->P, &h, &e);
	if (rc < 0)
		log_error("%s; round numbers and versions rest on the "
			  "checkpoint alone", e.msg);
	if (rc == 1) {
		if (h.rounds > *started)
			*started = h.rounds;
		for (int q = 0; q < s->P; q++) {
			if (h.versions[q] > s->versions[q])
				s->versions[q] = h.versions[q];
			s->resumed_at[q] = s->versions[q];
		}
		s->hwm_rounds = h.rounds;
		log_info("high-water mark: rounds up to %" PRIu64 " may have "
			 "been handed out before", h.rounds);
	}
	free(h.versions);
	return 0;
}

void core_round_started(struct syncer *s, uint64_t round)
{
	struct syncer_hwm h = { 0 };
	struct err e;

	if (round <= s->hwm_rounds)
		return;
	h.rounds = round - 1 + CORE_HWM_ROUNDS;
	h.nfrags = (uint32_t)s->P;
	if (!(h.versions = calloc((size_t)s->P, sizeof(*h.versions)))) {
		log_error("cannot write high-water mark: out of memory");
		return;
	}
	/* a version goes up once per merge: the rounds up to h.rounds and
	 * the τ in flight now at most, and the mark is the next one */
	for (int q = 0; q < s->P; q++)
		h.versions[q] = s->versions[q] + CORE_HWM_ROUNDS +
				(uint64_t)s->rs.cfg.overlap + 1;
	if (syncer_hwm_write(s->prm->ckpt_dir, s->ft->fingerprint, &h, &e))
		log_error("%s", e.msg);
	else
		s->hwm_rounds = h.rounds;
	free(h.versions);
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

static double frag_norm(const struct syncer *s, int p);

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
		pthread_cond_init(&s->ev.cv, NULL);
	}
	s->prm = p;
	s->js = p->js;
	s->ft = p->ft;
	s->P = p->ft->nfrags;
	s->M = p->js->learners.replicas;
	s->nparams = p->nparams;
	s->t0 = now;
	s->last_loop = now;
	if (build_layout(s, e) || alloc_state(s, e) || bounds_start(s, now, e))
		return -1;
	for (int q = 0; q < s->P; q++)
		frag_gather(s->ft, q, p->init_params, s->theta + s->frag_off[q]);
	syncer_ckpt_remove_tmp(p->ckpt_dir, p->ft->fingerprint);
	if ((loaded = load_checkpoint(s, e)) < 0)
		return -1;
	for (int q = 0; q < s->P; q++)
		s->theta_norm[q] = frag_norm(s, q);
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
		s->ckpt.resumed_from = s->hwm_rounds ? "seed" : "new";
	if (!loaded && s->hwm_rounds)
		log_warn("no checkpoint loads, but the high-water mark says "
			 "rounds up to %" PRIu64 " were handed out: the model "
			 "starts over from the seed", s->hwm_rounds);
	if (loaded || s->hwm_rounds)
		log_versions(s, "rounds resume", started + 1);
	rc = (struct round_config){
		.quorum = sy->min_quorum, .grace = sy->grace,
		.overlap = sy->overlap, .nfrags = s->P,
		.steps_per_round = (double)jobspec_sync_every(p->js) / s->P,
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
	if (p->eval) {
		if (pthread_create(&s->ev.thread, NULL, eval_main, s))
			return err_set(e, "syncer: cannot start the evaluation thread");
		s->ev.started = 1;
	}
	return 0;
}

void core_release(struct syncer *s)
{
	core_eval_stop(s);
	for (int slot = 0; s->answers && slot < s->rs.cfg.overlap; slot++)
		free_answers(s, slot);
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
	free(s->ev.params);
	free(s->versions);
	free(s->resumed_at);
	free(s->norm_hist);
	free(s->theta_norm);
	free(s->norm_hist_n);
	free(s->norm_hist_next);
	free(s->answers);
	free(s->learners);
	free(s->acc.learners);
	free(s->acc.evals);
	audit_release(&s->audit);
	bounds_release(&s->bounds);
	pthread_cond_destroy(&s->ev.cv);
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

double core_goodput(const struct syncer *s, double now)
{
	double E = core_elapsed(s, now);

	return goodput_ratio(&s->gp, E, syncer_round_step_time(&s->rs));
}

int core_checkpoint(struct syncer *s, double now, struct err *e)
{
	struct syncer_ckpt c = s->acc;
	char path[4096];
	double t = clock_mono();
	struct err le;

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
	if (syncer_ckpt_save(s->prm->ckpt_dir, &c, 3, path, sizeof(path), &le)) {
		/* the run goes on; the next checkpoint is the retry */
		s->ckpt.failing = 1;
		s->ckpt.failures++;
		snprintf(s->ckpt.error, sizeof(s->ckpt.error), "%s", le.msg);
		return err_set(e, "%s", le.msg);
	}
	if (s->ckpt.failing)
		log_info("checkpoint '%s' written again after %" PRIu64
			 " failure(s)", path, s->ckpt.failures);
	s->ckpt.failing = 0;
	s->ckpt.have_ok = 1;
	s->ckpt.last_ok_round = c.rounds_completed;
	log_debug("checkpoint '%s' written in %.3f s", path, clock_mono() - t);
	return 0;
}

/* The round of slot is over (merged or abandoned): what it held goes. */
static void free_answers(struct syncer *s, int slot)
{
	struct answer *a = s->answers[slot], *next;

	for (; a; a = next) {
		next = a->next;
		free(a);
	}
	s->answers[slot] = NULL;
	if (s->accs)
		outer_acc_clear(&s->accs[slot]);
}

uint8_t *core_update_payload(const struct syncer *s, int p, int *enc_out,
			     size_t *len)
{
	enum payload_enc enc = s->js->syncer.update_encoding;
	size_t n = s->ft->frags[p].numel;
	const float *x = s->theta + s->frag_off[p];
	uint8_t *buf = malloc(enc_size(ENC_F32, n) + 1);

	if (buf && enc_encode(enc, x, n, buf, NULL)) {
		log_warn("fragment %d cannot be sent as %s; sending f32", p,
			 enc_name(enc));
		enc = ENC_F32;
		enc_encode(enc, x, n, buf, NULL);
	}
	*enc_out = (int)enc;
	*len = buf ? enc_size(enc, n) : 0;
	return buf;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* The median of fragment p's merged answer norms; -1 while fewer than
 * CORE_NORM_HISTORY_MIN are held. */
static double history_median(const struct syncer *s, int p)
{
	double v[CORE_NORM_HISTORY];
	int n = s->norm_hist_n[p];

	if (n < CORE_NORM_HISTORY_MIN)
		return -1;
	memcpy(v, s->norm_hist + (size_t)p * CORE_NORM_HISTORY,
	       (size_t)n * sizeof(*v));
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void history_add(struct syncer *s, int p, double norm)
{
	int *next = &s->norm_hist_next[p];

	s->norm_hist[(size_t)p * CORE_NORM_HISTORY + (size_t)*next] = norm;
	*next = (*next + 1) % CORE_NORM_HISTORY;
	if (s->norm_hist_n[p] < CORE_NORM_HISTORY)
		s->norm_hist_n[p]++;
}

/* ‖Θ_p‖, in double. */
static double frag_norm(const struct syncer *s, int p)
{
	const float *t = s->theta + s->frag_off[p];
	double sum = 0;

	for (size_t i = 0; i < s->ft->frags[p].numel; i++)
		sum += (double)t[i] * (double)t[i];
	return sqrt(sum);
}

/*
 * What the size screen measures an answer for fragment p against: ‖Θ_p‖,
 * or, when larger, the RMS value of all of Θ times √n_p, so that a
 * fragment of zeros (biases at the start) is not open to any answer.
 * 0 only for a model of zeros: then there is no screen.
 */
static double size_ref(const struct syncer *s, int p)
{
	double all = 0;

	for (int q = 0; q < s->P; q++)
		all += s->theta_norm[q] * s->theta_norm[q];
	return fmax(s->theta_norm[p],
		    sqrt(all / (double)s->nparams *
			 (double)s->ft->frags[p].numel));
}

/*
 * The size screen, then the history screen (docs/syncer.md, Merge), when
 * an answer of `steps` steps and whole-fragment norm `norm` for fragment
 * p comes: refused when its norm per step is beyond CORE_SIZE_RATIO
 * times size_ref, or beyond normOutlier times the median of the
 * fragment's recently merged ones — per step, since an answer's norm
 * grows with the steps it holds, which vary tenfold at long H. 0: it
 * passes.
 */
static int screened(struct syncer *s, int id, int p, uint64_t round,
		    double norm, uint64_t steps)
{
	double k = s->js->syncer.norm_outlier, med = history_median(s, p);
	double ref = size_ref(s, p);

	if (ref > 0 && norm / (double)steps > CORE_SIZE_RATIO * ref) {
		s->acc.rejected++;
		s->size_refused++;
		log_warn("round %" PRIu64 ": answer of learner %d for fragment "
			 "%d rejected: norm per step %.4g is more than %g times "
			 "the fragment's own size %.4g", round, id, p,
			 norm / (double)steps, CORE_SIZE_RATIO, ref);
		return 1;
	}
	if (!(med > 0) || !(norm / (double)steps > k * med))
		return 0;
	s->acc.rejected++;
	s->norm_history_refused++;
	log_warn("round %" PRIu64 ": answer of learner %d for fragment %d "
		 "rejected: norm per step %.4g is more than %g times the "
		 "median %.4g of its recent merged ones", round, id, p,
		 norm / (double)steps, k, med);
	return 1;
}

/*
 * Slot's merge into s->delta, each answer's share at most maxShare
 * (docs/syncer.md, Bounds); returns how many answers it folded. Empty
 * answers are counted here.
 */
static int merge_slot(struct syncer *s, int slot, uint64_t round)
{
	double sum = 0, top = 0;
	int n = 0, capped;

	for (struct answer *a = s->answers[slot]; a; a = a->next) {
		if (a->fate == ANSWER_EMPTY)
			s->acc.empty++;
		if (a->fate != ANSWER_FOLDED)
			continue;
		n++;
		sum += a->weight;
		top = fmax(top, a->weight);
	}
	if (!n)
		return 0;
	capped = outer_acc_merge(&s->accs[slot], s->js->syncer.max_share,
				 s->delta);
	s->audit.capped += (uint64_t)capped;
	if (capped)
		log_debug("round %" PRIu64 ": %d of %d answers held to a share of "
			  "%g (the largest had %.3f)", round, capped, n,
			  s->js->syncer.max_share, sum > 0 ? top / sum : 0);
	return n;
}

static int all_finite(const float *x, size_t n)
{
	int ok = 1;

	for (size_t i = 0; i < n; i++)
		ok &= isfinite(x[i]) != 0;
	return ok;
}

/*
 * The outer step on fragment p with the merged Δ in s->delta; the folded
 * answers' tokens counted. 0 when Θ moved. Every answer is finite, but their step
 * can still overflow Θ or its momentum (values near FLT_MAX, one answer
 * with nothing to screen it against): then the fragment is left as it
 * was and the answers are counted rejected (found by tests/fuzz/fuzz_wire).
 */
static int apply_merge(struct syncer *s, int slot, int p, uint64_t round,
		       int kept)
{
	const struct job_syncer *sy = &s->js->syncer;
	size_t numel = s->ft->frags[p].numel;
	double share = (double)numel / (double)s->nparams;
	float *theta = s->theta + s->frag_off[p], *mom = s->mom + s->frag_off[p];

	memcpy(s->undo, theta, numel * sizeof(float));
	memcpy(s->undo + numel, mom, numel * sizeof(float));
	outer_step(theta, mom, s->delta, numel, sy->outer_lr,
		   sy->outer_momentum, sy->nesterov);
	if (!all_finite(theta, numel) || !all_finite(mom, numel)) {
		memcpy(theta, s->undo, numel * sizeof(float));
		memcpy(mom, s->undo + numel, numel * sizeof(float));
		s->acc.rejected += (uint64_t)kept;
		s->steps_undone++;
		log_warn("round %" PRIu64 " fragment %d: the step of its %d "
			 "answers makes the global model non-finite; not applied",
			 round, p, kept);
		return -1;
	}
	s->versions[p]++;
	s->theta_norm[p] = frag_norm(s, p);
	for (const struct answer *a = s->answers[slot]; a; a = a->next)
		if (a->fate == ANSWER_FOLDED) {
			s->acc.merged++;
			s->acc.tokens_merged += (double)a->tokens * share;
		}
	return 0;
}

/* What became of slot's answers once merged (kept > 0: Θ moved): the
 * norm history, the audit, where the learner time went (goodput.h). */
static void account_round(struct syncer *s, int slot, int p, int kept)
{
	for (struct answer *a = s->answers[slot]; a; a = a->next) {
		int merged = kept && a->fate == ANSWER_FOLDED;

		if (merged) {
			history_add(s, p, a->norm_step);
			audit_merged(&s->audit, a->learner, p, a->incarnation,
				     a->step, a->steps, a->base_version);
		}
		goodput_answer(&s->gp, a->learner, p, a->step, a->steps,
			       merged ? GP_MERGED : GP_REFUSED);
	}
}

/* The round of slot is over: its timings, the gap since the last one. */
static void close_round(struct syncer *s, int slot, double now, double t)
{
	double E;

	free_answers(s, slot);
	s->quorum_wait_sum += s->rs.slots[slot].t_quorum - s->rs.slots[slot].t_start;
	s->grace_sum += fmax(0, now - s->rs.slots[slot].t_quorum);
	s->quorum_count++;
	syncer_round_done(&s->rs, slot, clock_mono() - t);
	s->merge_sum += clock_mono() - t;
	s->merge_count++;
	E = core_elapsed(s, now);
	s->acc.down += fmax(0, E - s->acc.last_round_elapsed - expected_gap(s));
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

	if ((kept = merge_slot(s, slot, round)) &&
	    apply_merge(s, slot, p, round, kept))
		kept = 0;
	account_round(s, slot, p, kept);
	close_round(s, slot, now, t);
	eval_remote_merged(&s->evr, round, s->acc.tokens_trained);
	log_debug("round %" PRIu64 " fragment %d: %d merged, version %" PRIu64,
		  round, p, kept, s->versions[p]);
	done = core_check_budget(s, now);
	*out = (struct core_merged){ .frag = p, .round = round,
				     .version = s->versions[p], .merged = kept,
				     .updated = kept > 0, .done = done };
	/* checkpoint before the caller sends the update: whatever a learner
	 * receives is in a checkpoint when checkpointEvery is 1 */
	if (!s->done && sy->checkpoint_every > 0 &&
	    s->rs.completed % (uint64_t)sy->checkpoint_every == 0) {
		struct err e;

		if (core_checkpoint(s, now, &e))
			log_error("%s", e.msg);
	}
	if (!s->done && sy->eval_every > 0 &&
	    s->rs.completed % (uint64_t)sy->eval_every == 0)
		core_eval_start(s, now);
}

void core_finish(struct syncer *s, double now)
{
	struct err e;

	syncer_round_abandon(&s->rs);
	for (int slot = 0; slot < s->rs.cfg.overlap; slot++)
		free_answers(s, slot);
	/* done is on disk before the last evaluation, which takes a while:
	 * a syncer killed meanwhile comes back knowing the job is over */
	if (core_checkpoint(s, now, &e))
		log_error("%s", e.msg);
	if (core_eval_sync(s, now) == 0 && core_checkpoint(s, now, &e))
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
		free_answers(s, slot);
	log_versions(s, "stopped: the last round given out", s->rs.started);
	if (!s->done && core_checkpoint(s, now, &e))
		log_error("%s", e.msg);
}

/* ---- learners ---------------------------------------------------------- */

/*
 * Whether the learner of h runs this model cut the same way: -1 with the
 * first fault found in e — another model (fingerprint), another cut of it
 * (fragment count), or sizes that do not match the cut (missing, or the
 * first that differs, with both sizes).
 */
static int model_mismatch(const struct syncer *s, const struct wire_hello *h,
			  struct err *e)
{
	if (h->fingerprint != s->ft->fingerprint)
		return err_set(e, "model fingerprint mismatch: learner %016" PRIx64
			       ", syncer %016" PRIx64, h->fingerprint,
			       s->ft->fingerprint);
	if (h->fragments != (uint32_t)s->P)
		return err_set(e, "fragment count mismatch: learner %u fragments, "
			       "syncer %d", h->fragments, s->P);
	if (h->nsizes != (size_t)s->P)
		return err_set(e, "fragment sizes missing: learner sent %zu sizes "
			       "for %d fragments", h->nsizes, s->P);
	for (int p = 0; p < s->P; p++)
		if (h->fragment_sizes[p] != s->ft->frags[p].numel)
			return err_set(e, "fragment %d size mismatch: learner %"
				       PRIu64 " parameters, syncer %zu", p,
				       h->fragment_sizes[p],
				       s->ft->frags[p].numel);
	return 0;
}

enum core_refusal core_model_check(const struct syncer *s,
				   const struct wire_hello *h, struct err *e)
{
	const char *who = h->evaluator ? "evaluator" : "learner";
	struct err mine;

	if (h->job && h->job[0] && strcmp(h->job, s->js->name))
		return err_set(e, "%s %u belongs to job '%s', this syncer to "
			       "'%s'", who, h->learner_id, h->job, s->js->name),
		       CORE_JOIN_MISMATCH;
	if (model_mismatch(s, h, e ? e : &mine)) {
		log_warn("%s %u refused: %s", who, h->learner_id,
			 (e ? e : &mine)->msg);
		return CORE_JOIN_MISMATCH;
	}
	if (s->done)
		return err_set(e, "job done"), CORE_JOIN_DONE;
	return CORE_JOIN_OK;
}

enum core_refusal core_hello_check(const struct syncer *s,
				   const struct wire_hello *h, struct err *e)
{
	if (h->learner_id >= (uint32_t)s->M)
		return err_set(e, "learner id %u is out of range: job '%s' has %d "
			       "learners", h->learner_id, s->js->name, s->M),
		       CORE_JOIN_INVALID;
	return core_model_check(s, h, e);
}

enum core_refusal core_evaluator_join(struct syncer *s,
				     const struct wire_hello *h, struct err *e)
{
	enum core_refusal rc;

	if (s->js->model.kind != MODEL_EXTERNAL)
		return err_set(e, "job '%s' has no evaluators: the syncer "
			       "evaluates the reference GPT itself",
			       s->js->name), CORE_JOIN_INVALID;
	if (h->learner_id >= EVAL_REMOTE_MAX)
		return eval_remote_join(&s->evr, h, e), CORE_JOIN_INVALID;
	if ((rc = core_model_check(s, h, e)) != CORE_JOIN_OK)
		return rc;
	switch (eval_remote_join(&s->evr, h, e)) {
	case 0:
		return CORE_JOIN_OK;
	case EVAL_REMOTE_FULL:
		return CORE_JOIN_FULL;
	default:
		return CORE_JOIN_INVALID;
	}
}

int core_evaluation(struct syncer *s, int id, const struct wire_evaluation *ev,
		    double now, struct err *e)
{
	const struct syncer_ckpt *c = &s->acc;
	uint64_t tokens = 0;

	if (eval_remote_report(&s->evr, id, ev, c->nevals > 0,
			       c->nevals ? c->evals[c->nevals - 1].round : 0,
			       &tokens, e))
		return -1;
	core_eval_add(s, ev->round, tokens, ev->loss, core_elapsed(s, now));
	return 0;
}

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
	gaplog_learner(&s->gaps, -1, joined_count(s));
	syncer_round_leave(&s->rs, learner);
	log_info("learner %d left: %s", learner, why);
}

/* Learner id reported `step` (its last one was `old`): a step that
 * changed ends a stall (docs/syncer.md, Stale learners). */
static void step_seen(struct syncer *s, int id, uint64_t old, uint64_t step,
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
	if (!s->done && !s->adopting)   /* adopting: no learner yet */
		core_check_stale(s, now);
	return 1;
}

void core_check_stale(struct syncer *s, double now)
{
	s->stale_scans++;
	for (int id = 0; id < s->M; id++) {
		struct learner *l = &s->learners[id];
		double limit = fmax(s->js->syncer.stall_seconds,
				    CORE_STALL_STEPS * l->step_time);

		if (!l->joined || l->stale || now - l->step_moved <= limit ||
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
 * A report of learner id refused by the bounds: one warning at the 1st,
 * 2nd, 4th, 8th … refusal of its kind (a learner that keeps lying would
 * write one a round), the others at debug level.
 */
static void log_refusal(int id, const char *what, uint64_t n, const char *why)
{
	if (n & (n - 1))
		log_debug("learner %d: %s refused: %s", id, what, why);
	else
		log_warn("learner %d: %s refused: %s (%" PRIu64 " of its reports "
			 "of this kind refused; logged at powers of two)", id,
			 what, why, n);
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
		log_refusal(learner, "heartbeat",
			    s->bounds.l[learner].refused_heartbeats, e.msg);
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
	step_seen(s, learner, l->step, hb->step, now);
	l->step = hb->step;
	if (hb->step > l->step_max)
		l->step_max = hb->step;
	l->tokens = hb->tokens;
	l->step_time = hb->step_time;
	l->train_loss = hb->train_loss;
	l->incarnation = hb->incarnation;
	audit_incarnation(&s->audit, learner, hb->incarnation);
	syncer_round_progress(&s->rs, learner, hb->step, hb->step_time);
	goodput_progress(&s->gp, learner, hb->step, hb->step_time, now);
	if (l->joined)
		note_joined(s, now);
	return 0;
}

static int slot_of(const struct syncer *s, uint64_t round)
{
	for (int i = 0; i < s->rs.cfg.overlap; i++)
		if (s->rs.slots[i].active && s->rs.slots[i].round == round)
			return i;
	return -1;
}

/*
 * The answer a carries for fragment p: its values decoded into x and
 * measured into s->in_sq, unless it is empty (no steps, or `empty`).
 * Returns whether it has values; *why is set when the payload cannot be
 * merged (not finite among others: a NaN never reaches the merge).
 */
static int decode_answer(struct syncer *s, int p, const struct wire_answer *a,
			 int empty, float *x, const char **why)
{
	int nseg = s->ft->frags[p].ntensors;
	size_t n = s->ft->frags[p].numel;

	if (a->steps == 0 || empty)
		return 0;
	if (!enc_known(a->encoding))
		*why = "unknown encoding";
	else if (enc_decode((enum payload_enc)a->encoding, a->payload,
			    a->payload_len, x, n, NULL))
		*why = "payload does not decode (size, scale or values)";
	else if (outer_seg_sqnorms(x, s->segs[p], nseg, s->in_sq))
		*why = "values are not finite";
	return 1;
}

/* Counts a verdict of the round state machine that keeps no answer. */
static enum core_verdict not_queued(struct syncer *s, int id,
				    const struct wire_answer *a,
				    enum round_verdict v, const char *why)
{
	switch (v) {
	case ROUND_LATE:
		s->acc.late++;
		return CORE_LATE;
	case ROUND_ACCEPTED:
		s->acc.rejected++;
		log_warn("learner %d: answer for round %" PRIu64 " fragment %u "
			 "rejected: %s", id, a->round, a->fragment, why);
		return CORE_INVALID;
	default:
		s->acc.rejected++;
		log_warn("learner %d: answer for round %" PRIu64 " fragment %u "
			 "refused: %s", id, a->round, a->fragment,
			 v == ROUND_DUPLICATE ? "already answered"
					      : "no such round in flight");
		return CORE_REFUSED;
	}
}

/*
 * Whether answer a for fragment p is stale (docs/syncer.md, bounds): it
 * has steps and its base is more than staleVersions versions behind the
 * fragment's version now.
 */
static int is_stale(const struct syncer *s, int p, const struct wire_answer *a)
{
	uint64_t v = s->versions[p];

	return a->steps > 0 && a->base_version < v &&
	       v - a->base_version > (uint64_t)s->js->syncer.stale_versions;
}

/*
 * The weight of a non-empty answer within the bounds (docs/syncer.md,
 * bounds; outer_bounded_weight): over clipSteps·H steps its Δ and squared
 * norms are scaled down to that many steps; tokens count at most B·T a
 * step. A cut weight is counted in `clipped`.
 */
static double bounded_weight(struct syncer *s, int id, int p,
			     const struct wire_answer *a, float *x)
{
	const struct job_spec *js = s->js;
	uint64_t max_steps = (uint64_t)ceil(js->syncer.clip_steps *
					    jobspec_sync_every(js));
	uint64_t tps = (uint64_t)js->optimizer.batch_size *
		       (uint64_t)jobspec_seq_len(js);
	size_t n = s->ft->frags[p].numel;
	double scale, w;

	w = outer_bounded_weight(a->steps, a->tokens, max_steps, tps, &scale);
	if (scale < 1.0) {
		for (size_t i = 0; i < n; i++)
			x[i] *= (float)scale;
		for (int k = 0; k < s->ft->frags[p].ntensors; k++)
			s->in_sq[k] *= scale * scale;
	}
	if (w < outer_weight(a->steps, a->tokens)) {
		s->audit.clipped++;
		log_debug("learner %d: answer for round %" PRIu64 " fragment "
			  "%d of %" PRIu64 " steps and %" PRIu64 " tokens clipped "
			  "to %" PRIu64 " steps of at most %" PRIu64 " tokens", id,
			  a->round, p, a->steps, a->tokens, max_steps, tps);
	}
	return w;
}

/*
 * An answer whose claims are beyond the bounds (bounds.h): none of its
 * numbers is used, not even its step for the pacing. It stops its round
 * waiting for the learner, as an invalid payload does, and is counted in
 * `rejected` and `refused_bounds`.
 */
static enum core_verdict refused_bounds(struct syncer *s, int id,
					const struct wire_answer *a,
					double now, const char *why)
{
	enum round_verdict v;
	char what[96];
	int slot;

	v = syncer_round_answer(&s->rs, id, a->round, (int)a->fragment, 0, now);
	if (v == ROUND_ACCEPTED && (slot = slot_of(s, a->round)) >= 0)
		bounds_answered(&s->bounds, id, (int)a->fragment,
				s->rs.slots[slot].t_start);
	s->acc.rejected++;
	snprintf(what, sizeof(what), "answer for round %" PRIu64 " fragment %u",
		 a->round, a->fragment);
	log_refusal(id, what, s->bounds.l[id].refused_answers, why);
	return CORE_INVALID;
}

enum core_verdict core_answer(struct syncer *s, int id,
			      const struct wire_answer *a, double now)
{
	struct learner *l = &s->learners[id];
	int p = (int)a->fragment, before_resume, stale, slot, values;
	const char *why = NULL;
	struct answer *ans = NULL;
	enum round_verdict v;
	double norm = 0;
	float *x;
	struct err e;

	l->last_seen = now;
	s->acc.bytes_in += a->payload_len;
	if (a->fragment >= (uint32_t)s->P) {
		s->acc.rejected++;
		log_warn("learner %d: answer for fragment %u of %d refused", id,
			 a->fragment, s->P);
		return CORE_REFUSED;
	}
	/*
	 * Trained from a base older than the version this syncer resumed at:
	 * its Δ spans the time the syncer was away (hundreds of steps where a
	 * round spans a few) and starts from a Θ of the lost rounds or before
	 * them. The outer momentum would carry it about η/(1−μ) times over
	 * the next rounds (docs/syncer.md, restart), so it counts toward
	 * the quorum as an empty answer and is not merged; the
	 * learner has the Welcome's Θ by now and its next answers start there.
	 */
	before_resume = a->steps > 0 && a->base_version < s->resumed_at[p];
	stale = !before_resume && is_stale(s, p, a);
	if (bounds_answer(&s->bounds, id, a, a->steps > 0 && !before_resume &&
			  !stale, now, &e))
		return refused_bounds(s, id, a, now, e.msg);
	if (a->step > l->step) {
		step_seen(s, id, l->step, a->step, now);
		l->step = a->step;
	}
	if (a->step > l->step_max)
		l->step_max = a->step;
	syncer_round_progress(&s->rs, id, l->step, 0);
	goodput_progress(&s->gp, id, l->step, 0, now);
	/* decoded straight into its round's accumulator (outer.h), or aside
	 * when it has no round here */
	slot = slot_of(s, a->round);
	x = slot >= 0 && s->rs.slots[slot].frag == p
	    ? outer_acc_input(&s->accs[slot]) : s->in;
	values = decode_answer(s, p, a, before_resume || stale, x, &why);
	if (!why && !(ans = calloc(1, sizeof(*ans))))
		why = "out of memory";
	v = syncer_round_answer(&s->rs, id, a->round, p, !why, now);
	if (v == ROUND_ACCEPTED && (slot = slot_of(s, a->round)) >= 0)
		bounds_answered(&s->bounds, id, p, s->rs.slots[slot].t_start);
	if (v != ROUND_ACCEPTED || why) {
		if (!why)
			free(ans);
		goodput_answer(&s->gp, id, p, a->step, a->steps,
			       v == ROUND_LATE ? GP_LATE : GP_REFUSED);
		return not_queued(s, id, a, v, why);
	}
	slot = slot_of(s, a->round);
	ans->learner = id;
	ans->step = a->step;
	ans->steps = a->steps;
	ans->tokens = a->tokens;
	ans->base_version = a->base_version;
	ans->incarnation = l->incarnation;
	ans->weight = before_resume || stale || !values
		      ? 0 : bounded_weight(s, id, p, a, x);
	if (stale) {
		s->audit.stale++;
		log_info("learner %d: answer for round %" PRIu64 " fragment %d "
			 "trained from version %" PRIu64 ", %" PRIu64 " behind "
			 "(staleVersions %d): taken as empty", id, a->round, p,
			 a->base_version, s->versions[p] - a->base_version,
			 s->js->syncer.stale_versions);
	}
	if (before_resume)
		log_info("learner %d: answer for round %" PRIu64 " fragment %d "
			 "trained from version %" PRIu64 ", before this syncer "
			 "resumed at %" PRIu64 ": taken as empty", id, a->round,
			 p, a->base_version, s->resumed_at[p]);
	if (!s->answers[slot])   /* the round's first: the fragment's layout */
		outer_acc_begin(&s->accs[slot], s->js->syncer.merge == MERGE_MEAN
				? OUTER_MEAN : OUTER_RDA, s->segs[p],
				s->ft->frags[p].ntensors, s->ft->frags[p].numel);
	ans->next = s->answers[slot];
	s->answers[slot] = ans;
	if (!(ans->weight > 0))
		return CORE_QUEUED;   /* ANSWER_EMPTY: counted at the merge */
	for (int k = 0; k < s->ft->frags[p].ntensors; k++)
		norm += s->in_sq[k];
	norm = sqrt(norm);
	ans->norm_step = norm / (double)a->steps;
	ans->fate = ANSWER_SCREENED;
	if (screened(s, id, p, a->round, norm, a->steps))
		return CORE_QUEUED;
	if (outer_acc_add(&s->accs[slot], x, s->in_sq, ans->weight)) {
		/* its norms and weight were checked finite: a safeguard */
		s->acc.rejected++;
		log_warn("learner %d: answer for round %" PRIu64 " fragment %d "
			 "rejected: weight %g or norms not finite", id, a->round,
			 p, ans->weight);
		return CORE_QUEUED;
	}
	ans->fate = ANSWER_FOLDED;
	return CORE_QUEUED;
}

int core_check_budget(struct syncer *s, double now)
{
	const struct job_budget *b = &s->js->budget;

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

/*
 * An evaluation of round's Θ came back: when its loss is finite and not
 * worse than the best earlier one by more than CORE_GOOD_MARGIN of it,
 * the checkpoint of that round becomes the last good one (docs/syncer.md,
 * Checkpoints). Called before the loss joins the list.
 */
static void mark_good(struct syncer *s, uint64_t round, double loss)
{
	const struct syncer_ckpt *c = &s->acc;
	double best = INFINITY;
	struct err e;
	int rc;

	for (uint32_t i = 0; i < c->nevals; i++)
		if (isfinite(c->evals[i].loss))
			best = fmin(best, c->evals[i].loss);
	if (!isfinite(loss) ||
	    (isfinite(best) && loss > best + CORE_GOOD_MARGIN * fabs(best))) {
		log_warn("eval: round %" PRIu64 " loss %.4f is not good (best "
			 "%.4f); the last good checkpoint stays at round %" PRIu64,
			 round, loss, best, s->good.round);
		return;
	}
	rc = syncer_ckpt_mark_good(s->prm->ckpt_dir, s->ft->fingerprint, round,
				   &e);
	if (rc < 0)
		log_error("%s", e.msg);
	else if (rc == 0)
		log_debug("eval: no checkpoint of round %" PRIu64 " to keep as "
			  "the last good one", round);
	else {
		s->good.have = 1;
		s->good.round = round;
		s->good.loss = loss;
	}
}

void core_eval_add(struct syncer *s, uint64_t round, uint64_t tokens,
		   double loss, double time)
{
	struct syncer_ckpt *c = &s->acc;

	mark_good(s, round, loss);
	if (c->nevals == CKPT_MAX_EVALS) {
		memmove(c->evals, c->evals + 1,
			(CKPT_MAX_EVALS - 1) * sizeof(*c->evals));
		c->nevals--;
	}
	c->evals[c->nevals++] = (struct ckpt_eval){ round, tokens, loss, time };
	log_info("eval: round %" PRIu64 ", %" PRIu64 " tokens, loss %.4f", round,
		 tokens, loss);
}

static void *eval_main(void *arg)
{
	struct syncer *s = arg;
	struct eval_job *ev = &s->ev;

	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (!ev->busy && !ev->quit)
			pthread_cond_wait(&ev->cv, &s->mu);
		if (ev->quit)
			break;
		pthread_mutex_unlock(&s->mu);
		struct err e = { "" };
		double loss = 0;
		int rc = s->prm->eval(s->prm->eval_ctx, ev->params,
				      (size_t)s->js->syncer.eval_tokens, &loss, &e);
		pthread_mutex_lock(&s->mu);
		if (rc) {
			/* the /status field; the log keeps the whole message */
			snprintf(ev->error, sizeof(ev->error), "%.*s",
				 (int)sizeof(ev->error) - 1, e.msg);
			log_error("eval: %s", e.msg);
		} else {
			ev->loss = loss;
			ev->have_result = 1;
		}
		ev->busy = 0;
		pthread_cond_broadcast(&ev->cv);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

static void snapshot(struct syncer *s, float *flat)
{
	for (int q = 0; q < s->P; q++)
		frag_scatter(s->ft, q, s->theta + s->frag_off[q], flat);
}

void core_eval_start(struct syncer *s, double now)
{
	struct eval_job *ev = &s->ev;

	if (!ev->started || ev->busy)
		return;
	snapshot(s, ev->params);
	ev->round = s->rs.completed;
	ev->tokens = s->acc.tokens_trained;
	ev->time = core_elapsed(s, now);
	ev->busy = 1;
	pthread_cond_broadcast(&ev->cv);
}

void core_eval_collect(struct syncer *s)
{
	struct eval_job *ev = &s->ev;

	if (!ev->have_result)
		return;
	ev->have_result = 0;
	core_eval_add(s, ev->round, ev->tokens, ev->loss, ev->time);
}

int core_eval_sync(struct syncer *s, double now)
{
	struct eval_job *ev = &s->ev;
	struct err e;
	double loss;
	int rc;

	if (!ev->started)
		return 0;
	while (ev->busy)
		pthread_cond_wait(&ev->cv, &s->mu);
	core_eval_collect(s);
	if (s->acc.nevals && s->acc.evals[s->acc.nevals - 1].round == s->rs.completed)
		return 0;
	snapshot(s, s->flat);
	/* the HTTP side keeps answering meanwhile: /healthz and /status
	 * take `mu`; nothing else changes the state while the run loop is
	 * here (syncer_int.h, Threads) */
	s->final_eval = 1;
	pthread_mutex_unlock(&s->mu);
	rc = s->prm->eval(s->prm->eval_ctx, s->flat,
			  (size_t)s->js->syncer.eval_tokens, &loss, &e);
	pthread_mutex_lock(&s->mu);
	s->final_eval = 0;
	if (rc) {
		log_error("eval: %s", e.msg);
		return -1;
	}
	core_eval_add(s, s->rs.completed, s->acc.tokens_trained, loss,
		 core_elapsed(s, now));
	return 0;
}

void core_eval_stop(struct syncer *s)
{
	if (!s->ev.started)
		return;
	pthread_mutex_lock(&s->mu);
	s->ev.quit = 1;
	pthread_cond_broadcast(&s->ev.cv);
	pthread_mutex_unlock(&s->mu);
	pthread_join(s->ev.thread, NULL);
	s->ev.started = 0;
}
