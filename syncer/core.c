/*
 * core: the syncer's state and what happens to it — Θ and momentum laid
 * out fragment after fragment (the payload layout, so a fragment is one
 * contiguous slice), merges, accounting (tokens, uptime, goodput),
 * checkpoints and the evaluation thread. The transport (stream.c) calls in
 * with `mu` held; nothing here blocks on the network.
 *
 * Accounting (docs/syncer.md has the definitions):
 *   elapsed  = elapsed in the checkpoint + wall time the syncer was away
 *              + monotonic time since this process started
 *   uptime   = 1 − down / (elapsed − elapsed when K learners were first
 *              joined), where each gap between two completed rounds (the
 *              first from that moment, and the one still open) counts as
 *              down for its part beyond B = max(1 s, 3 · ξ_step · H/P)
 *   goodput  = Σ over merged answers of steps · step time · (fragment's
 *              share of parameters), over M · elapsed
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
#include "ddiloco/v1/syncer.pb-c.h"

static void *eval_main(void *arg);

static int build_layout(struct syncer *s, struct err *e)
{
	const struct frag_table *ft = s->ft;
	size_t off = 0;

	s->frag_off = calloc((size_t)s->P + 1, sizeof(*s->frag_off));
	s->segs = calloc((size_t)s->P, sizeof(*s->segs));
	if (!s->frag_off || !s->segs)
		return err_set(e, "syncer: out of memory");
	for (int p = 0; p < s->P; p++) {
		const struct fragment *f = &ft->frags[p];
		size_t in = 0;

		s->frag_off[p] = off;
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
	int rc;

	rc = syncer_ckpt_load_newest(s->prm->ckpt_dir, s->ft->fingerprint,
				     (uint32_t)s->P, s->nparams, (uint32_t)s->M,
				     &c, path, sizeof(path), e);
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
	log_info("resumed from '%s': round %" PRIu64 ", %" PRIu64
		 " tokens trained, %.1f s elapsed", path, c.rounds_completed,
		 c.tokens_trained, c.elapsed);
	syncer_ckpt_release(&c);
	return 1;
}

int core_init(struct syncer *s, const struct syncer_params *p, struct err *e)
{
	const struct job_syncer *sy = &p->js->syncer;
	struct round_config rc;
	uint64_t started;
	int loaded;

	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->ev.cv, NULL);
	s->prm = p;
	s->js = p->js;
	s->ft = p->ft;
	s->P = p->ft->nfrags;
	s->M = p->js->learners.replicas;
	s->nparams = p->nparams;
	s->t0 = clock_mono();
	s->last_loop = s->t0;
	if (build_layout(s, e))
		return -1;
	for (int q = 0; q < s->P; q++) {
		size_t bytes = enc_size(ENC_F32, s->ft->frags[q].numel) + 1024;

		if (bytes > SYNCER_MAX_MSG)
			return err_set(e, "syncer: fragment %d has %zu parameters: its "
				       "message would pass the %u MiB limit; use more "
				       "fragments (spec.syncer.fragments)", q,
				       s->ft->frags[q].numel, SYNCER_MAX_MSG >> 20);
	}
	s->theta = malloc(s->nparams * sizeof(float));
	s->mom = calloc(s->nparams, sizeof(float));
	s->scratch = malloc(s->nparams * sizeof(float));
	s->flat = malloc(s->nparams * sizeof(float));
	s->ev.params = malloc(s->nparams * sizeof(float));
	s->versions = calloc((size_t)s->P, sizeof(uint64_t));
	s->resumed_at = calloc((size_t)s->P, sizeof(uint64_t));
	s->upd = calloc((size_t)s->P, sizeof(grpc_slice));
	s->upd_valid = calloc((size_t)s->P, sizeof(int));
	s->answers = calloc((size_t)sy->overlap, sizeof(*s->answers));
	s->learners = calloc((size_t)s->M, sizeof(*s->learners));
	s->acc.learners = calloc((size_t)s->M, sizeof(*s->acc.learners));
	s->acc.evals = calloc(CKPT_MAX_EVALS, sizeof(*s->acc.evals));
	if (!s->theta || !s->mom || !s->scratch || !s->flat || !s->ev.params ||
	    !s->versions || !s->resumed_at || !s->upd || !s->upd_valid || !s->answers ||
	    !s->learners || !s->acc.learners || !s->acc.evals)
		return err_set(e, "syncer: out of memory for %zu parameters",
			       s->nparams);
	s->acc.fingerprint = s->ft->fingerprint;
	s->acc.nfrags = (uint32_t)s->P;
	s->acc.nparams = s->nparams;
	s->acc.nlearners = (uint32_t)s->M;
	s->acc.uptime_start = -1;
	for (int q = 0; q < s->P; q++)
		frag_gather(s->ft, q, p->init_params, s->theta + s->frag_off[q]);
	if ((loaded = load_checkpoint(s, e)) < 0)
		return -1;
	if (loaded)
		s->elapsed_base = s->acc.elapsed +
				  fmax(0, clock_wall() - s->acc.wall_time);
	else
		log_info("starting from the seeded model (seed %" PRIu64 ")",
			 p->js->model.seed);
	/*
	 * Round numbers and fragment versions given out after the checkpoint
	 * are never reused: skip past every round that could have been in
	 * flight since, and past every version that could have been sent
	 * (one per completed round at most). A learner holding a version of
	 * the lost rounds would otherwise take a new Update of the same
	 * number for the one it has and skip it, keeping a base this syncer
	 * never had; with the skip every learner takes the Welcome's Θ.
	 */
	started = s->acc.rounds_started;
	if (loaded) {
		uint64_t skip = (uint64_t)sy->overlap +
				(uint64_t)(sy->checkpoint_every > 0
					   ? sy->checkpoint_every : 1000);

		started += skip;
		for (int q = 0; q < s->P; q++) {
			s->versions[q] += skip;
			s->resumed_at[q] = s->versions[q];
		}
	}
	rc = (struct round_config){
		.quorum = sy->min_quorum, .grace = sy->grace,
		.overlap = sy->overlap, .nfrags = s->P,
		.steps_per_round = (double)jobspec_sync_every(p->js) / s->P,
		.max_learners = s->M, .ema = 0.2,
	};
	if (syncer_round_init(&s->rs, &rc, started, s->acc.rounds_completed, e))
		return -1;
	if (s->acc.done) {
		s->done = 1;
		s->done_elapsed = s->acc.elapsed;
		s->rs.stopped = 1;
	}
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
	for (int q = 0; s->upd_valid && q < s->P; q++)
		if (s->upd_valid[q])
			grpc_slice_unref(s->upd[q]);
	for (int slot = 0; s->answers && slot < s->rs.cfg.overlap; slot++)
		core_free_answers(s, slot);
	syncer_round_release(&s->rs);
	for (int q = 0; s->segs && q < s->P; q++)
		free(s->segs[q]);
	free(s->segs);
	free(s->frag_off);
	free(s->theta);
	free(s->mom);
	free(s->scratch);
	free(s->flat);
	free(s->ev.params);
	free(s->versions);
	free(s->resumed_at);
	free(s->upd);
	free(s->upd_valid);
	free(s->answers);
	free(s->learners);
	free(s->acc.learners);
	free(s->acc.evals);
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

/* Opens the uptime window the first time K learners are joined. */
void core_note_joined(struct syncer *s, double now)
{
	int n = 0;

	if (s->acc.uptime_start >= 0)
		return;
	for (int i = 0; i < s->M; i++)
		n += s->learners[i].joined;
	if (n >= s->js->syncer.min_quorum) {
		s->acc.uptime_start = core_elapsed(s, now);
		s->acc.last_round_elapsed = s->acc.uptime_start;
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

	if (!(E > 0) || s->M < 1)
		return 0.0;
	return fmin(1.0, s->acc.compute_merged / (s->M * E));
}

int core_checkpoint(struct syncer *s, double now, struct err *e)
{
	struct syncer_ckpt c = s->acc;
	char path[4096];
	double t = clock_mono();

	c.versions = s->versions;
	c.theta = s->theta;
	c.momentum = s->mom;
	c.rounds_started = s->rs.started;
	c.rounds_completed = s->rs.completed;
	c.elapsed = core_elapsed(s, now);
	c.wall_time = clock_wall();
	c.done = (uint32_t)s->done;
	if (syncer_ckpt_save(s->prm->ckpt_dir, &c, 3, path, sizeof(path), e))
		return -1;
	log_debug("checkpoint '%s' written in %.3f s", path, clock_mono() - t);
	return 0;
}

void core_free_answers(struct syncer *s, int slot)
{
	struct answer *a = s->answers[slot], *next;

	for (; a; a = next) {
		next = a->next;
		free(a->delta);
		free(a->sq);
		free(a);
	}
	s->answers[slot] = NULL;
}

static grpc_slice pack_update(struct syncer *s, int p, uint64_t round,
			      size_t *payload_bytes)
{
	Ddiloco__V1__SyncerMessage m = DDILOCO__V1__SYNCER_MESSAGE__INIT;
	Ddiloco__V1__Update u = DDILOCO__V1__UPDATE__INIT;
	enum payload_enc enc = s->js->syncer.update_encoding;
	size_t n = s->ft->frags[p].numel, len;
	const float *x = s->theta + s->frag_off[p];
	uint8_t *buf;
	grpc_slice sl;

	buf = malloc(enc_size(ENC_F32, n) + 1);
	if (buf && enc_encode(enc, x, n, buf, NULL)) {
		log_warn("fragment %d cannot be sent as %s; sending f32", p,
			 enc_name(enc));
		enc = ENC_F32;
		enc_encode(enc, x, n, buf, NULL);
	}
	u.fragment = (uint32_t)p;
	u.version = s->versions[p];
	u.encoding = (Ddiloco__V1__Encoding)enc;
	u.payload.data = buf;
	u.payload.len = buf ? enc_size(enc, n) : 0;
	u.round = round;
	m.kind_case = DDILOCO__V1__SYNCER_MESSAGE__KIND_UPDATE;
	m.update = &u;
	len = ddiloco__v1__syncer_message__get_packed_size(&m);
	sl = grpc_slice_malloc(len);
	ddiloco__v1__syncer_message__pack(&m, GRPC_SLICE_START_PTR(sl));
	*payload_bytes = u.payload.len;
	free(buf);
	return sl;
}

grpc_slice core_update_slice(struct syncer *s, int p, uint64_t round)
{
	size_t bytes;

	if (round)
		return pack_update(s, p, round, &bytes);
	if (!s->upd_valid[p]) {
		s->upd[p] = pack_update(s, p, 0, &bytes);
		s->upd_valid[p] = 1;
	}
	return grpc_slice_ref(s->upd[p]);
}

void core_merge(struct syncer *s, int slot, double now)
{
	const struct job_syncer *sy = &s->js->syncer;
	int p = s->rs.slots[slot].frag, nseg = s->ft->frags[p].ntensors;
	uint64_t round = s->rs.slots[slot].round;
	size_t numel = s->ft->frags[p].numel;
	double share = (double)numel / (double)s->nparams, t = clock_mono();
	int n = 0, kept = 0;
	struct answer *a, **list = NULL;
	const float **x = NULL;
	double *w = NULL, *sq = NULL, *norm = NULL;
	int *verdict = NULL;

	for (a = s->answers[slot]; a; a = a->next)
		n++;
	list = calloc((size_t)n + 1, sizeof(*list));
	x = calloc((size_t)n + 1, sizeof(*x));
	w = calloc((size_t)n + 1, sizeof(*w));
	norm = calloc((size_t)n + 1, sizeof(*norm));
	verdict = calloc((size_t)n + 1, sizeof(*verdict));
	sq = calloc(((size_t)n + 1) * (size_t)nseg, sizeof(*sq));
	if (!list || !x || !w || !norm || !verdict || !sq) {
		log_error("round %" PRIu64 ": out of memory for the merge; abandoned",
			  round);
		goto out;
	}
	n = 0;
	for (a = s->answers[slot]; a; a = a->next) {
		if (!a->delta || !(a->weight > 0)) {
			s->acc.empty++;
			continue;
		}
		double ss = 0;
		for (int k = 0; k < nseg; k++)
			ss += a->sq[k];
		norm[n] = sqrt(ss);
		list[n++] = a;
	}
	outer_screen(norm, n, sy->norm_outlier, verdict);
	for (int i = 0; i < n; i++) {
		if (verdict[i] != OUTER_OK) {
			s->acc.rejected++;
			log_warn("round %" PRIu64 ": answer of learner %d rejected: norm "
				 "%.4g is more than %g times the others' median", round,
				 list[i]->learner, norm[i], sy->norm_outlier);
			continue;
		}
		a = list[i];
		x[kept] = a->delta;
		w[kept] = a->weight;
		memcpy(sq + (size_t)kept * nseg, a->sq, (size_t)nseg * sizeof(*sq));
		list[kept++] = a;
	}
	if (kept && outer_merge(sy->merge == MERGE_MEAN ? OUTER_MEAN : OUTER_RDA,
				x, w, sq, kept, s->segs[p], nseg, s->scratch)) {
		log_error("round %" PRIu64 ": out of memory for the merge; abandoned",
			  round);
		kept = 0;
	}
	if (kept) {
		outer_step(s->theta + s->frag_off[p], s->mom + s->frag_off[p],
			   s->scratch, numel, sy->outer_lr, sy->outer_momentum,
			   sy->nesterov);
		s->versions[p]++;
		if (s->upd_valid[p]) {
			grpc_slice_unref(s->upd[p]);
			s->upd_valid[p] = 0;
		}
		for (int i = 0; i < kept; i++) {
			struct learner *l = &s->learners[list[i]->learner];
			double st = l->step_time > 0 ? l->step_time
						     : syncer_round_step_time(&s->rs);

			s->acc.merged++;
			s->acc.tokens_merged += (double)list[i]->tokens * share;
			s->acc.compute_merged += (double)list[i]->steps * st * share;
		}
	}
out:
	free(list);
	free(x);
	free(w);
	free(norm);
	free(verdict);
	free(sq);
	core_free_answers(s, slot);
	s->quorum_wait_sum += s->rs.slots[slot].t_quorum - s->rs.slots[slot].t_start;
	s->grace_sum += fmax(0, now - s->rs.slots[slot].t_quorum);
	s->quorum_count++;
	syncer_round_done(&s->rs, slot, clock_mono() - t);
	s->merge_sum += clock_mono() - t;
	s->merge_count++;
	{
		double E = core_elapsed(s, now);

		s->acc.down += fmax(0, E - s->acc.last_round_elapsed -
				       expected_gap(s));
		s->acc.last_round_elapsed = E;
	}
	log_debug("round %" PRIu64 " fragment %d: %d merged, version %" PRIu64,
		  round, p, kept, s->versions[p]);
	core_check_budget(s, now);
	/* checkpoint before the update leaves: whatever a learner receives is
	 * in a checkpoint when checkpointEvery is 1 */
	if (!s->done && sy->checkpoint_every > 0 &&
	    s->rs.completed % (uint64_t)sy->checkpoint_every == 0) {
		struct err e;

		if (core_checkpoint(s, now, &e))
			log_error("%s", e.msg);
	}
	if (kept) {
		size_t bytes;
		grpc_slice msg = pack_update(s, p, round, &bytes);

		stream_broadcast_update(s, p, msg, bytes);
		grpc_slice_unref(msg);
	}
	if (!s->done && sy->eval_every > 0 &&
	    s->rs.completed % (uint64_t)sy->eval_every == 0)
		core_eval_start(s, now);
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
		}
		s->done = 1;
		s->rs.stopped = 1;
		log_info("budget reached: round %" PRIu64 ", %" PRIu64
			 " tokens trained", s->rs.completed, s->acc.tokens_trained);
	}
	return s->done;
}

/* ---- evaluation ------------------------------------------------------ */

static void add_eval(struct syncer *s, uint64_t round, uint64_t tokens,
		     double loss, double time)
{
	struct syncer_ckpt *c = &s->acc;

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
			snprintf(ev->error, sizeof(ev->error), "%s", e.msg);
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
	add_eval(s, ev->round, ev->tokens, ev->loss, ev->time);
}

int core_eval_sync(struct syncer *s, double now)
{
	struct eval_job *ev = &s->ev;
	struct err e;
	double loss;

	if (!ev->started)
		return 0;
	while (ev->busy)
		pthread_cond_wait(&ev->cv, &s->mu);
	core_eval_collect(s);
	if (s->acc.nevals && s->acc.evals[s->acc.nevals - 1].round == s->rs.completed)
		return 0;
	snapshot(s, s->flat);
	if (s->prm->eval(s->prm->eval_ctx, s->flat,
			 (size_t)s->js->syncer.eval_tokens, &loss, &e)) {
		log_error("eval: %s", e.msg);
		return -1;
	}
	add_eval(s, s->rs.completed, s->acc.tokens_trained, loss,
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
