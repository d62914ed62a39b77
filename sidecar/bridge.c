/*
 * bridge: the sidecar's exchange side. Received SyncerMessages, decoded
 * by common/wire.h, become exchange writes (an Update's payload is decoded
 * straight into the inbox slot); answers the learner published become
 * encoded LearnerMessages framed by wire_answer_header, in a queue of one
 * entry per fragment. Nothing here touches gRPC.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/prom.h"
#include "common/util.h"
#include "common/wire.h"
#include "sidecar/sidecar_int.h"

/* o.target's shards into s->links, shard 0 first: 1 .. P of them, none
 * empty. */
static int split_targets(struct sidecar *s, struct err *e)
{
	int n = 1;
	char *t;

	if (!s->o.target || !(s->targets = strdup(s->o.target)))
		return err_set(e, "sidecar: %s", s->o.target ? "out of memory"
			       : "no syncer address");
	for (t = s->targets; *t; t++)
		n += *t == ',';
	if (n > s->nfrags)
		return err_set(e, "sidecar: %d syncer shards for %d fragments: "
			       "a shard owns at least one", n, s->nfrags);
	if (!(s->links = calloc((size_t)n, sizeof(*s->links))))
		return err_set(e, "sidecar: out of memory");
	s->nshards = n;
	t = s->targets;
	for (int k = 0; k < n; k++) {
		char *comma = strchr(t, ',');

		if (comma)
			*comma = '\0';
		if (!*t)
			return err_set(e, "sidecar: syncer address %d of '%s' is "
				       "empty", k, s->o.target);
		s->links[k].target = t;
		t = comma ? comma + 1 : t + strlen(t);
	}
	return 0;
}

struct sidecar *sidecar_new(const struct sidecar_opts *o, struct exchange *x,
			    const struct frag_table *ft, struct err *e)
{
	struct sidecar *s = calloc(1, sizeof(*s));
	size_t maxn = 1;

	if (!s)
		return err_set(e, "sidecar: out of memory"), NULL;
	s->o = *o;
	if (s->o.heartbeat_every <= 0)
		s->o.heartbeat_every = 1.0;
	if (s->o.backoff_min <= 0)
		s->o.backoff_min = 0.1;
	if (s->o.backoff_max <= 0)
		s->o.backoff_max = 5.0;
	s->x = x;
	s->ft = ft;
	s->nfrags = ft->nfrags;
	if (split_targets(s, e)) {
		sidecar_free(s);
		return NULL;
	}
	for (int p = 0; p < ft->nfrags; p++)
		if (ft->frags[p].numel > maxn)
			maxn = ft->frags[p].numel;
	s->queue = calloc((size_t)s->nfrags, sizeof(*s->queue));
	s->pulls = calloc((size_t)s->nfrags, sizeof(*s->pulls));
	s->seed_wanted = calloc((size_t)s->nfrags, 1);
	s->resid = calloc((size_t)s->nfrags, sizeof(*s->resid));
	s->take_buf = malloc(maxn * sizeof(float));
	s->check_vals = malloc(maxn * sizeof(float));
	if (!s->queue || !s->pulls || !s->resid || !s->take_buf ||
	    !s->check_vals) {
		sidecar_free(s);
		return err_set(e, "sidecar: out of memory"), NULL;
	}
	/* a payload larger than a message goes in parts: no fragment is too
	 * large for the wire, only for the memory */
	if (!(s->payload_max = wire_payload_max(maxn))) {
		sidecar_free(s);
		return err_set(e, "sidecar: largest fragment has %zu values: its "
			       "bytes overflow", maxn), NULL;
	}
	s->recv_limit = wire_message_limit(s->payload_max, o->max_message);
	s->send_cap = wire_message_limit(SIZE_MAX, o->max_message);
	pthread_mutex_init(&s->mu, NULL);
	return s;
}

/* An answer's payload given back: its outbox slot, or its buffer. */
static void payload_free(uint8_t *payload, struct exchange_hold *hold)
{
	if (hold)
		exchange_release(hold);
	else
		free(payload);
}

void sidecar_queue_free_entry(struct qanswer *q)
{
	payload_free(q->payload, q->hold);
	free(q->r_before);
	memset(q, 0, sizeof(*q));
}

void sidecar_free(struct sidecar *s)
{
	if (!s)
		return;
	if (s->queue) {
		for (int p = 0; p < s->nfrags; p++)
			sidecar_queue_free_entry(&s->queue[p]);
		pthread_mutex_destroy(&s->mu);
	}
	free(s->queue);
	free(s->pulls);
	free(s->seed_wanted);
	for (int k = 0; s->links && k < s->nshards; k++)
		wire_parts_release(&s->links[k].parts);
	free(s->links);
	free(s->targets);
	free(s->take_buf);
	free(s->check_vals);
	for (int p = 0; s->resid && p < s->nfrags; p++)
		free(s->resid[p]);
	free(s->resid);
	for (int p = 0; s->hat && p < s->nfrags; p++)
		free(s->hat[p]);
	free(s->hat);
	free(s->hat_ver1);
	free(s);
}

double sidecar_heartbeat_gap(const struct sidecar *s, int *early)
{
	double every = s->o.heartbeat_every;

	if (s->o.evaluator || *early <= 0 || every <= SIDECAR_EARLY_HEARTBEAT_S)
		return every;
	(*early)--;
	return SIDECAR_EARLY_HEARTBEAT_S;
}

void sidecar_stream_begin(struct sidecar *s, int shard)
{
	struct link *lk = &s->links[shard];

	wire_parts_release(&lk->parts);   /* a part cut off is no update */
	lk->said_parts = 0;
	pthread_mutex_lock(&s->mu);
	lk->epoch++;
	lk->welcomed = 0;
	for (int p = 0; p < s->nfrags; p++) {
		if (s->queue[p].used && sidecar_link(s, p) == lk) {
			s->m.answers_dropped++;
			sidecar_queue_free_entry(&s->queue[p]);
		}
	}
	pthread_mutex_unlock(&s->mu);
}

/* Fragment p's kept values, made on first use; NULL without memory. */
static float *hat_of(struct sidecar *s, int p, size_t n)
{
	if (!s->hat) {
		s->hat = calloc((size_t)s->nfrags, sizeof(*s->hat));
		s->hat_ver1 = calloc((size_t)s->nfrags, sizeof(*s->hat_ver1));
		if (!s->hat || !s->hat_ver1) {
			free(s->hat);
			free(s->hat_ver1);
			s->hat = NULL;
			s->hat_ver1 = NULL;
			return NULL;
		}
	}
	if (!s->hat[p])
		s->hat[p] = malloc(n * sizeof(float));
	return s->hat[p];
}

/*
 * Updates as deltas (docs/protocol.md): slot holds the decoded payload;
 * a delta is added to the values of version delta_from. With a checksum
 * the result is checked and kept for the next delta. -2 (the stream
 * joins again, and its Welcome brings whole fragments) when the delta's
 * base is not held or the checksum does not match.
 */
static int delta_apply(struct sidecar *s, const struct wire_update *u,
		       float *slot, size_t n, struct err *e)
{
	int p = (int)u->fragment;
	float *hat;

	if (u->delta) {
		if (!s->hat || !s->hat[p] || s->hat_ver1[p] != u->delta_from + 1) {
			SC_ADD(s, updates_delta_refused, 1);
			err_set(e, "sidecar: update of fragment %d version %llu is "
				"a delta from version %llu, which this sidecar does "
				"not hold: joins again", p,
				(unsigned long long)u->version,
				(unsigned long long)u->delta_from);
			return -2;
		}
		hat = s->hat[p];
		for (size_t i = 0; i < n; i++)
			slot[i] = hat[i] + slot[i];
	}
	if (!u->checksum)
		return 0;
	if (hash_floats(slot, n) != u->checksum) {
		SC_ADD(s, updates_delta_refused, 1);
		if (s->hat_ver1)
			s->hat_ver1[p] = 0;
		err_set(e, "sidecar: update of fragment %d version %llu: its "
			"values do not match the syncer's checksum: joins again",
			p, (unsigned long long)u->version);
		return -2;
	}
	if ((hat = hat_of(s, p, n))) {
		memcpy(hat, slot, n * sizeof(float));
		s->hat_ver1[p] = u->version + 1;
	}
	SC_ADD(s, updates_delta, (uint64_t)(u->delta != 0));
	return 0;
}

static int handle_update(struct sidecar *s, struct link *lk,
			 const struct wire_update *u, struct err *e)
{
	uint64_t wround;
	size_t n;
	float *slot;
	int rc;

	if (u->fragment >= (uint32_t)s->nfrags)
		return err_set(e, "sidecar: update for fragment %u, the model "
			       "has %d", u->fragment, s->nfrags);
	if (sidecar_link(s, (int)u->fragment) != lk)
		return err_set(e, "sidecar: update for fragment %u from a shard "
			       "that does not own it", u->fragment);
	if (!enc_known(u->encoding))
		return err_set(e, "sidecar: update of fragment %u: unknown "
			       "encoding %d", u->fragment, (int)u->encoding);
	n = exchange_frag_numel(s->x, (int)u->fragment);
	slot = exchange_inbox_begin(s->x, (int)u->fragment);
	/* a failed decode leaves the slot unpublished: the learner keeps
	 * the previous version */
	if (enc_decode((enum payload_enc)u->encoding, u->payload,
		       u->payload_len, slot, n, e))
		return err_wrap(e, "sidecar: update of fragment %u version %llu",
				u->fragment, (unsigned long long)u->version);
	if ((rc = delta_apply(s, u, slot, n, e)))
		return rc;
	pthread_mutex_lock(&s->mu);
	wround = lk->welcome_round;
	pthread_mutex_unlock(&s->mu);
	exchange_inbox_commit_round(s->x, (int)u->fragment, u->version,
				    u->round ? u->round : wround, u->tokens);
	return 0;
}

static int handle_welcome(struct sidecar *s, struct link *lk,
			  const struct wire_welcome *w, struct err *e)
{
	uint64_t inc;

	if (w->fragments != (uint32_t)s->nfrags)
		return err_set(e, "sidecar: welcome for %u fragments, this "
			       "model has %d", w->fragments, s->nfrags);
	if (!enc_known(w->answer_encoding))
		return err_set(e, "sidecar: welcome asks for unknown encoding %d",
			       (int)w->answer_encoding);
	if (!(w->alpha >= 0.0 && w->alpha < 1.0))
		return err_set(e, "sidecar: welcome has alpha %g (0 <= alpha < 1)",
			       w->alpha);
	/* an evaluator holds Θ as it is: no mixing with what it had */
	exchange_set_alpha(s->x, s->o.evaluator ? 0.0 : w->alpha);
	pthread_mutex_lock(&s->mu);
	lk->welcome_round = w->round;
	lk->peer_max = w->max_message;
	lk->enc = (enum payload_enc)w->answer_encoding;
	lk->welcomed = 1;
	s->m.welcomes++;
	lk->resume_step = w->resume_step;
	/* meant for the learner our Hello spoke of; a Hello sent before any
	 * learner attached speaks for the first one that does */
	inc = lk->hello_incarnation ? lk->hello_incarnation : s->incarnation;
	if (inc)
		exchange_set_resume(s->x, w->resume_step, inc);
	pthread_mutex_unlock(&s->mu);
	log_info("welcome%s%.0d: %u fragments, round %llu, alpha %g, answers "
		 "in %s, resume at step %llu", s->nshards > 1 ? " from shard " : "",
		 s->nshards > 1 ? (int)(lk - s->links) : 0, w->fragments,
		 (unsigned long long)w->round, w->alpha,
		 enc_name((enum payload_enc)w->answer_encoding),
		 (unsigned long long)w->resume_step);
	return 0;
}

static int handle_pull(struct sidecar *s, struct link *lk,
		       const struct wire_pull *pl, struct err *e)
{
	SC_ADD(s, pulls_received, 1);
	if (pl->fragment >= (uint32_t)s->nfrags ||
	    sidecar_link(s, (int)pl->fragment) != lk) {
		SC_ADD(s, pulls_rejected, 1);
		return err_set(e, "sidecar: pull of fragment %u: %s", pl->fragment,
			       pl->fragment >= (uint32_t)s->nfrags
			       ? "no such fragment" : "another shard's");
	}
	if (pl->round == 0) {
		/* the seed request of an adopting syncer */
		if (!s->o.seed_dir) {
			SC_ADD(s, pulls_rejected, 1);
			return err_set(e, "sidecar: pull of round 0 (a seed) for "
				       "a job of the reference GPT");
		}
		pthread_mutex_lock(&s->mu);
		s->seed_wanted[pl->fragment] = 1;
		lk->seed_epoch = lk->epoch;
		pthread_mutex_unlock(&s->mu);
		return 0;
	}
	pthread_mutex_lock(&s->mu);
	s->pulls[pl->fragment].epoch = lk->epoch;
	s->pulls[pl->fragment].round = pl->round;
	s->pulls[pl->fragment].at = clock_mono();
	pthread_mutex_unlock(&s->mu);
	exchange_post_pull(s->x, (int)pl->fragment, pl->round);
	return 0;
}

/*
 * An update's part into the link's parts (docs/protocol.md, Messages in
 * parts): 1 when u is a whole update now, 0 when more parts are to
 * come, -1 when the part is wrong (the update is refused; the learner
 * keeps the version it had).
 */
static int update_parts(struct sidecar *s, struct link *lk,
			struct wire_update *u, struct err *e)
{
	size_t max = u->fragment < (uint32_t)s->nfrags
		     ? wire_payload_max(exchange_frag_numel(s->x, (int)u->fragment))
		     : 0;

	int part = u->payload_total != 0;
	int rc = wire_parts_update(&lk->parts, u, max, e);

	if (rc < 0)
		return err_wrap(e, "sidecar: update of fragment %u version %llu",
				u->fragment, (unsigned long long)u->version);
	SC_ADD(s, parts_received, (uint64_t)part);
	if (rc == 1 && part && !lk->said_parts) {
		lk->said_parts = 1;
		log_info("updates in parts: %zu bytes for fragment %u",
			 u->payload_len, u->fragment);
	}
	return rc;
}

int sidecar_handle(struct sidecar *s, int shard, const uint8_t *msg,
		   size_t len, struct err *e)
{
	struct link *lk = &s->links[shard];
	struct wire_syncer_msg m;
	int rc = 0;

	if (wire_syncer_decode(msg, len, &m, e))
		return err_wrap(e, "sidecar: from the syncer");
	switch (m.kind) {
	case WIRE_WELCOME:
		rc = handle_welcome(s, lk, &m.welcome, e) ? -2 : 0;
		break;
	case WIRE_PULL:
		rc = handle_pull(s, lk, &m.pull, e);
		break;
	case WIRE_UPDATE:
		rc = update_parts(s, lk, &m.update, e);
		if (rc == 0)
			break;   /* more parts to come */
		SC_ADD(s, updates_received, 1);
		rc = rc < 0 ? -1 : handle_update(s, lk, &m.update, e);
		if (rc)
			SC_ADD(s, updates_rejected, 1);
		wire_parts_done(&lk->parts);
		break;
	default:
		rc = err_set(e, "sidecar: message from the syncer of no kind "
			     "this sidecar knows");
	}
	wire_syncer_release(&m);
	return rc;
}

static double rel_error(const float *x, const float *y, size_t n)
{
	double d = 0, t = 0;

	for (size_t i = 0; i < n; i++) {
		double a = x[i], b = y[i];

		d += (a - b) * (a - b);
		t += a * a;
	}
	return t > 0 ? sqrt(d / t) : 0;
}

/* f32 on a little-endian host is the floats as they are: the answer is
 * taken straight into the payload, with no encoding pass. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define F32_IS_NATIVE 1
#else
#define F32_IS_NATIVE 0
#endif

/*
 * Error feedback (docs/protocol.md): the residuals hold what the encoder
 * lost of this learner's answers. They are dropped when the answers'
 * encoding changes or a new learner process answers: its progress starts
 * from the global model, not from the answers of the one before. A
 * sidecar that restarts starts with none.
 */
static void residual_check(struct sidecar *s, enum payload_enc enc)
{
	struct exchange_stats st;
	uint64_t inc = s->resid_incarnation;
	int had = 0;

	if (!exchange_read_stats(s->x, &st))
		inc = st.incarnation;
	if (enc == s->resid_enc && inc == s->resid_incarnation)
		return;
	for (int p = 0; p < s->nfrags; p++)
		if (s->resid[p]) {
			memset(s->resid[p], 0,
			       exchange_frag_numel(s->x, p) * sizeof(float));
			had = 1;
		}
	if (had)
		SC_ADD(s, residual_resets, 1);
	s->resid_gen++;
	s->resid_enc = enc;
	s->resid_incarnation = inc;
}

/* Fragment p's residual for an answer in enc; NULL for none (f32, feedback
 * off, or out of memory: the answer is then encoded without it). */
static float *residual(struct sidecar *s, int p, size_t n,
		       enum payload_enc enc)
{
	if (s->o.no_feedback || !enc_lossy(enc))
		return NULL;
	if (!s->resid[p])
		s->resid[p] = calloc(n, sizeof(float));
	return s->resid[p];
}

/* An answer that never leaves (replaced in the queue, or for a stream
 * that is gone) gives back the residual it had moved. */
static void residual_undo(struct sidecar *s, int p, const struct qanswer *q)
{
	if (q->used && q->r_before && s->resid[p] && q->r_gen == s->resid_gen)
		memcpy(s->resid[p], q->r_before,
		       exchange_frag_numel(s->x, p) * sizeof(float));
}

/* Takes fragment p's unsent answer out of the queue before a newer one is
 * encoded, when it moved the residual: the newer answer is encoded from
 * the residual as it was before it. */
static void unqueue_replaced(struct sidecar *s, int p)
{
	struct qanswer old = { 0 };

	pthread_mutex_lock(&s->mu);
	if (s->queue[p].used && s->queue[p].r_before) {
		old = s->queue[p];
		memset(&s->queue[p], 0, sizeof(old));
		s->m.answers_replaced++;
	}
	pthread_mutex_unlock(&s->mu);
	residual_undo(s, p, &old);
	sidecar_queue_free_entry(&old);
}

/* The test knob of sidecar_opts.poison: the answer just taken, its
 * values v[0..n), set to ±value when its number is in a range. */
static void poison(struct sidecar *s, float *v, size_t n)
{
	uint64_t k = ++s->answers_taken;

	for (int i = 0; i < SIDECAR_MAX_POISON; i++) {
		const struct sidecar_poison *q = &s->o.poison[i];

		if (!q->count || k < q->from || k - q->from >= q->count)
			continue;
		for (size_t j = 0; j < n; j++)
			v[j] = v[j] < 0 ? -q->value : q->value;
		log_warn("test knob DDILOCO_TEST_POISON_ANSWERS: answer %" PRIu64
			 " sent with every value ±%g", k, (double)q->value);
		return;
	}
}

/*
 * Encodes one taken answer (values in s->take_buf, or already the f32
 * payload in raw) and queues it, replacing an older one for p. With a
 * residual, take_buf becomes Δ + r and check_vals its decoding.
 */
static void queue_answer(struct sidecar *s, int p,
			 const struct exchange_answer *a, uint64_t epoch,
			 enum payload_enc enc, double pulled_at, uint8_t *raw,
			 struct exchange_hold *hold)
{
	size_t n = a->steps ? exchange_frag_numel(s->x, p) : 0;
	size_t plen = enc_size(enc, n);
	uint8_t *payload = raw ? raw : malloc(plen ? plen : 1);
	float *r = raw || !n ? NULL : residual(s, p, n, enc);
	struct qanswer q = { 0 };
	struct err e;
	int rc;

	if (!payload) {
		SC_ADD(s, answers_dropped, 1);
		return;
	}
	unqueue_replaced(s, p);
	if (r && (q.r_before = malloc(n * sizeof(float)))) {
		memcpy(q.r_before, r, n * sizeof(float));
		q.r_gen = s->resid_gen;
	}
	rc = raw || !n ? 0 :
	     r ? enc_encode_feedback(enc, s->take_buf, r, n, payload,
				     s->check_vals, &e) :
	     enc_encode(enc, s->take_buf, n, payload, &e);
	if (rc) {
		/* int8 and int4 refuse non-finite values: the syncer would
		 * reject them anyway, send them as f32 and let it count them */
		free(payload);
		log_warn("%s; sending fragment %d as f32", e.msg, p);
		enc = ENC_F32;
		plen = enc_size(enc, n);
		payload = malloc(plen);
		if (!payload || enc_encode(enc, s->take_buf, n, payload, &e)) {
			free(payload);
			free(q.r_before);
			SC_ADD(s, answers_dropped, 1);
			return;
		}
	}
	if (n && enc_lossy(enc) &&
	    (r || !enc_decode(enc, payload, plen, s->check_vals, n, NULL))) {
		double rel = rel_error(s->take_buf, s->check_vals, n);

		pthread_mutex_lock(&s->mu);
		s->m.encoding_error_last = rel;
		if (rel > s->m.encoding_error_max)
			s->m.encoding_error_max = rel;
		pthread_mutex_unlock(&s->mu);
	}
	q.used = 1;
	q.epoch = epoch;
	q.round = a->round;
	q.a = (struct wire_answer){
		.fragment = (uint32_t)p, .round = a->round,
		.base_version = a->base_version, .steps = a->steps,
		.tokens = a->tokens * (s->o.inflate_tokens > 1
				       ? s->o.inflate_tokens : 1),
		.encoding = (int)enc, .payload_len = plen,
		.step = a->step,
	};
	q.hlen = wire_answer_header(q.hdr, &q.a);
	q.payload = payload;
	q.hold = hold;
	q.plen = plen;
	q.pulled_at = pulled_at;
	pthread_mutex_lock(&s->mu);
	if (epoch != sidecar_link(s, p)->epoch) {
		s->m.answers_dropped++;
		pthread_mutex_unlock(&s->mu);
		residual_undo(s, p, &q);
		sidecar_queue_free_entry(&q);
		return;
	}
	if (s->queue[p].used) {
		s->m.answers_replaced++;
		sidecar_queue_free_entry(&s->queue[p]);
	}
	s->queue[p] = q;
	s->m.answers_queued++;
	pthread_mutex_unlock(&s->mu);
}

int sidecar_collect(struct sidecar *s)
{
	int n = 0;

	for (int p = 0; p < s->nfrags; p++) {
		struct link *lk = sidecar_link(s, p);
		struct exchange_answer a;
		uint64_t epoch;
		enum payload_enc enc;
		uint8_t *raw = NULL;
		struct exchange_hold *hold = NULL;
		double at;
		int ok, rc = -1;

		if (!exchange_answer_ready(s->x, p))
			continue;
		pthread_mutex_lock(&s->mu);
		enc = lk->enc;
		pthread_mutex_unlock(&s->mu);
		if (enc == ENC_F32 && F32_IS_NATIVE && !s->o.poison[0].count) {
			/* sent straight from the outbox slot, no copy
			 * (docs/exchange.md, Answers sent from the region) */
			const float *v;

			rc = exchange_hold_answer(s->x, p, &a, &v, &hold);
			if (rc == 0)
				continue;
			raw = (uint8_t *)v;
		}
		if (rc < 0) {
			if (enc == ENC_F32 && F32_IS_NATIVE)
				raw = malloc(exchange_frag_numel(s->x, p) *
					     sizeof(float));
			if (!exchange_take_answer(s->x, p, &a,
						  raw ? (float *)raw
						      : s->take_buf)) {
				free(raw);
				continue;
			}
		}
		pthread_mutex_lock(&s->mu);
		/* only an answer to the Pull of this stream is worth sending,
		 * in the encoding it was taken for */
		ok = lk->connected && lk->welcomed && lk->enc == enc &&
		     s->pulls[p].epoch == lk->epoch && s->pulls[p].round == a.round;
		epoch = lk->epoch;
		at = s->pulls[p].at;
		if (!ok)
			s->m.answers_dropped++;
		pthread_mutex_unlock(&s->mu);
		if (!ok) {
			payload_free(raw, hold);
			continue;
		}
		if (a.steps)
			poison(s, raw ? (float *)raw : s->take_buf,
			       exchange_frag_numel(s->x, p));
		residual_check(s, enc);
		queue_answer(s, p, &a, epoch, enc, at, raw, hold);
		n++;
	}
	return n;
}

void sidecar_learner_stats(struct sidecar *s, struct exchange_stats *st)
{
	struct exchange_stats got;
	int fresh = exchange_read_stats(s->x, &got) == 0;

	pthread_mutex_lock(&s->mu);
	if (!fresh) {
		/* the learner was writing them (preempted, or killed in the
		 * middle): the last read stands. Zeros here put incarnation
		 * 0 in a Hello, as if no learner were attached: the syncer
		 * then takes no Beat for it (docs/sidecar.md). */
		*st = s->stats;
		pthread_mutex_unlock(&s->mu);
		return;
	}
	s->stats = got;
	*st = got;
	if (st->incarnation && st->incarnation != s->incarnation) {
		struct link *first = NULL;   /* the first welcomed */

		for (int k = 0; k < s->nshards; k++)
			if (s->links[k].welcomed) {
				first = first ? first : &s->links[k];
				/* the syncer chooses where it resumes: it
				 * must see the new learner join, on a new
				 * stream (each shard) */
				s->links[k].rehello = s->incarnation != 0;
			}
		if (s->incarnation && first) {
			/* the new streams' Welcomes give the resume step */
		} else if (s->incarnation) {
			/* the syncer is away: the step the learner had
			 * reached; the Welcome of the next stream may move
			 * it further */
			exchange_set_resume(s->x, s->learner_step,
					    st->incarnation);
		} else if (first && !first->hello_incarnation) {
			/* the first learner, and the Welcome came first */
			exchange_set_resume(s->x, first->resume_step,
					    st->incarnation);
		}
		if (s->incarnation) {
			s->m.learner_restarts++;
			log_info("learner restarted (pid %llu) after step %llu",
				 (unsigned long long)st->pid,
				 (unsigned long long)s->learner_step);
		}
		s->incarnation = st->incarnation;
	}
	if (st->incarnation)
		s->learner_step = st->step;
	pthread_mutex_unlock(&s->mu);
}

void sidecar_get_metrics(struct sidecar *s, struct sidecar_metrics *m)
{
	pthread_mutex_lock(&s->mu);
	*m = s->m;
	/* 1 when every shard's stream is (open, welcomed) */
	m->connected = m->welcomed = 1;
	m->shards = s->nshards;
	m->shards_welcomed = 0;
	for (int k = 0; k < s->nshards; k++) {
		m->connected &= s->links[k].connected;
		m->welcomed &= s->links[k].welcomed;
		m->shards_welcomed += s->links[k].welcomed;
	}
	m->encoding = (int)s->links[0].enc;
	m->queue_answers = m->queue_bytes = 0;
	for (int p = 0; p < s->nfrags; p++)
		if (s->queue[p].used) {
			m->queue_answers++;
			m->queue_bytes += s->queue[p].plen + s->queue[p].hlen;
		}
	pthread_mutex_unlock(&s->mu);
	exchange_counters(s->x, &m->x);
}

/* Long because it is the list of metrics, one call each, in the order
 * /metrics prints them. */
void sidecar_metrics_text(struct sidecar *s, struct buf *b)
{
	struct sidecar_metrics m;
	struct exchange_stats st;

	sidecar_learner_stats(s, &st);
	sidecar_get_metrics(s, &m);
#define S(name) "ddiloco_sidecar_" name
	prom_counter(b, S("bytes_sent_total"),
		     "gRPC message bytes sent to the syncer", m.bytes_sent);
	prom_counter(b, S("bytes_received_total"), "gRPC message bytes received",
		     m.bytes_received);
	prom_counter(b, S("messages_sent_total"), "messages sent", m.messages_sent);
	prom_counter(b, S("messages_received_total"), "messages received",
		     m.messages_received);
	prom_counter(b, S("connects_total"), "streams opened (Welcome received)",
		     m.welcomes);
	prom_counter(b, S("reconnects_total"), "connection attempts after the first",
		     m.reconnect_attempts ? m.reconnect_attempts - 1 : 0);
	prom_counter(b, S("disconnects_total"), "streams that ended without job done",
		     m.disconnects);
	prom_counter(b, S("round_trips_total"), "pulls answered on the same stream",
		     m.round_trips);
	prom_gauge(b, S("round_trip_seconds"), "last Pull-to-Answer time",
		   m.round_trip_last);
	prom_counter(b, S("updates_received_total"), "updates received",
		     m.updates_received);
	prom_counter(b, S("updates_rejected_total"),
		     "updates that could not be decoded", m.updates_rejected);
	prom_counter(b, S("updates_delta_total"), "updates applied as a delta "
		     "(docs/protocol.md, Updates as deltas)", m.updates_delta);
	prom_counter(b, S("updates_delta_refused_total"), "deltas from a "
		     "version not held or with a checksum that did not match: "
		     "the stream joined again", m.updates_delta_refused);
	prom_counter(b, S("updates_superseded_total"),
		     "updates replaced before the learner applied them",
		     m.x.updates_superseded);
	prom_counter(b, S("parts_sent_total"), "parts of answers and seeds "
		     "sent: payloads larger than a message (docs/protocol.md)",
		     m.parts_sent);
	prom_counter(b, S("parts_received_total"), "parts of updates received",
		     m.parts_received);
	prom_counter(b, S("pulls_received_total"), "pulls received",
		     m.pulls_received);
	prom_counter(b, S("pulls_superseded_total"),
		     "pulls replaced before the learner served them",
		     m.x.pulls_superseded);
	prom_counter(b, S("answers_sent_total"), "answers sent", m.answers_sent);
	prom_counter(b, S("answers_replaced_total"),
		     "queued answers replaced by a newer one", m.answers_replaced);
	prom_counter(b, S("answers_held_total"),
		     "f32 answers sent straight from the shared region, "
		     "without a copy", m.x.answers_held);
	prom_counter(b, S("exchange_slots_released_total"),
		     "superseded inbox slots whose pages the sidecar gave back "
		     "(docs/exchange.md, Pages given back)",
		     m.x.slots_released);
	prom_counter(b, S("answers_dropped_total"),
		     "answers for a stream that is gone", m.answers_dropped);
	prom_counter(b, S("heartbeats_sent_total"), "heartbeats sent",
		     m.heartbeats_sent);
	prom_counter(b, S("beat_heartbeats_sent_total"),
		     "heartbeats sent on the Beat call, a connection of their "
		     "own (docs/sidecar.md)", m.beat_heartbeats_sent);
	prom_counter(b, S("evaluations_sent_total"),
		     "an evaluator's reports sent (docs/syncer.md, Evaluators)",
		     m.evaluations_sent);
	prom_counter(b, S("learner_restarts_total"),
		     "learner restarts seen in the exchange", m.learner_restarts);
	prom_gauge(b, S("encoding_error"),
		   "relative L2 error of the last encoded answer",
		   m.encoding_error_last);
	prom_gauge(b, S("encoding_error_max"),
		   "largest relative L2 error of an answer", m.encoding_error_max);
	prom_counter(b, S("residual_resets_total"),
		     "error-feedback residuals dropped (new learner or encoding)",
		     m.residual_resets);
	prom_gauge(b, S("queue_answers"), "answers waiting to be sent",
		   (double)m.queue_answers);
	prom_gauge(b, S("queue_bytes"), "bytes waiting to be sent",
		   (double)m.queue_bytes);
	prom_counter(b, S("exchange_corrupt_headers_total"),
		     "exchange header or table words found corrupted and "
		     "rewritten", m.x.corrupt_headers);
	prom_counter(b, S("exchange_corrupt_boxes_total"),
		     "exchange boxes found corrupted and ignored",
		     m.x.corrupt_boxes);
	prom_gauge(b, S("inbox_pending"), "updates the learner has not applied yet",
		   (double)m.x.inbox_pending);
	prom_gauge(b, S("pulls_pending"), "pulls the learner has not served yet",
		   (double)m.x.pulls_pending);
	prom_gauge(b, S("connected"), "1 while the stream (every syncer "
		   "shard's) is open and welcomed", m.connected && m.welcomed);
	prom_gauge(b, S("shards_welcomed"), "syncer shards whose stream is "
		   "welcomed, of the job's shards", m.shards_welcomed);
	prom_gauge(b, S("learner_step"), "the learner's step", (double)st.step);
	prom_gauge(b, S("learner_seconds_since_poll"),
		   "time since the learner last polled",
		   st.wall > 0 ? clock_wall() - st.wall : -1.0);
#undef S
}
