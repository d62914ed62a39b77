/*
 * stream_msg: what each message on a syncer stream does (stream_int.h).
 * A Train stream's first message is a Hello: its identity is held to
 * the client certificate (with TLS; docs/security.md), its job and
 * model to the core's, and it joins as a learner (core_join) or an
 * evaluator (core_evaluator_join); then Answers and Heartbeats go to
 * the core, Evaluations of an evaluator to core_evaluation. A Beat
 * call's Hello names a learner whose Train stream is live, and only
 * heartbeats follow. While an external job's model is not known yet
 * (s->adopting) Hellos wait, and one learner is asked for the seed
 * (seed.h). An Answer in parts (docs/protocol.md, Messages in parts) is
 * put together first (conn.parts, at most the table's largest answer),
 * and goes on as one whole answer; a wrong part ends the stream.
 */
#include "syncer/stream_int.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>

#include "common/log.h"
#include "common/shard.h"
#include "common/pki.h"
#include "common/util.h"
#include "common/wire.h"
#include "syncer/beat.h"

/* Where a stream comes from, for log lines ("ipv4:10.0.0.7:41234"). */
static void peer_name(struct conn *c, char *out, size_t n)
{
	char *p = grpc_call_get_peer(c->call);

	snprintf(out, n, "%s", p ? p : "an unknown peer");
	gpr_free(p);
}

int stream_cert_learner(struct conn *c, struct err *e)
{
	const char *job = c->sv->s->js->name;
	grpc_auth_context *ctx = grpc_call_auth_context(c->call);
	grpc_auth_property_iterator it;
	const grpc_auth_property *prop;
	char *pem = NULL;
	struct pki_id id;
	int rc = -1;

	if (!ctx)
		return err_set(e, "no client certificate");
	it = grpc_auth_context_find_properties_by_name(ctx,
		GRPC_X509_PEM_CERT_PROPERTY_NAME);
	prop = grpc_auth_property_iterator_next(&it);
	if (!prop || !prop->value_length) {
		err_set(e, "no client certificate");
	} else if (!(pem = strndup(prop->value, prop->value_length))) {
		err_set(e, "out of memory");
	} else if (pki_cert_id(pem, &id, e)) {
		/* the message says what the certificate lacks */
	} else if (strcmp(id.job, job)) {
		err_set(e, "the client certificate is for job '%s', not '%s'",
			id.job, job);
	} else if (id.role != PKI_ROLE_LEARNER &&
		   id.role != PKI_ROLE_EVALUATOR) {
		err_set(e, "the client certificate of job '%s' is not a learner's",
			job);
	} else {
		c->cert_evaluator = id.role == PKI_ROLE_EVALUATOR;
		rc = (int)id.learner;
	}
	free(pem);
	grpc_auth_context_release(ctx);
	return rc;
}

void stream_refuse(struct conn *c, const char *why)
{
	char peer[128];

	peer_name(c, peer, sizeof(peer));
	c->sv->s->tr.streams_refused++;
	log_warn("stream from %s refused: %s", peer, why);
	conn_close(c, GRPC_STATUS_PERMISSION_DENIED, "%s", why);
}

static const grpc_status_code refusal_code[] = {
	[CORE_JOIN_INVALID] = GRPC_STATUS_INVALID_ARGUMENT,
	[CORE_JOIN_MISMATCH] = GRPC_STATUS_FAILED_PRECONDITION,
	[CORE_JOIN_DONE] = GRPC_STATUS_OK,
	[CORE_JOIN_FULL] = GRPC_STATUS_RESOURCE_EXHAUSTED,
	[CORE_JOIN_NOROOM] = GRPC_STATUS_RESOURCE_EXHAUSTED,  /* retried */
	/* retried too: a restarted syncer forgets the cuts (bounds.h), and
	 * a sidecar that ended would only be restarted as a failed pod */
	[CORE_JOIN_EXCLUDED] = GRPC_STATUS_RESOURCE_EXHAUSTED,
};

/* Whether a hello's learner id is one of the job's; the call is closed
 * when not. */
static int learner_in_range(struct conn *c, const struct wire_hello *h)
{
	struct syncer *s = c->sv->s;

	if (h->learner_id < (uint32_t)s->M)
		return 1;
	conn_close(c, GRPC_STATUS_INVALID_ARGUMENT, "learner id %u is out of "
		   "range: job '%s' has %d learners", h->learner_id,
		   s->js->name, s->M);
	return 0;
}

/* Whether the certificate fits a hello as learner or evaluator `id`;
 * refused (counted) when not. */
static int cert_fits(struct conn *c, const struct wire_hello *h)
{
	const char *role = c->cert_evaluator ? "evaluator" : "learner";
	char why[160];

	if (!c->sv->s->prm->tls ||
	    (h->learner_id == (uint32_t)c->cert_learner &&
	     !h->evaluator == !c->cert_evaluator))
		return 1;
	snprintf(why, sizeof(why), "the client certificate is %s %d's: it "
		 "cannot say hello as %s %" PRIu32, role, c->cert_learner,
		 h->evaluator ? "evaluator" : "learner", h->learner_id);
	stream_refuse(c, why);
	return 0;
}

/* An evaluator's hello: the Welcome and every fragment, no Pulls. */
static void on_evaluator_hello(struct conn *c, const struct wire_hello *h)
{
	struct syncer *s = c->sv->s;
	enum core_refusal r;
	struct err e;

	if (!cert_fits(c, h))
		return;
	if ((r = core_evaluator_join(s, h, &e)) != CORE_JOIN_OK) {
		conn_close(c, refusal_code[r], "%s", e.msg);
		return;
	}
	c->evaluator = (int)h->learner_id;
	conn_send_welcome(c, 0, NULL, 0);
}

static void on_hello(struct conn *c, const struct wire_hello *h, double now)
{
	const grpc_status_code *code = refusal_code;
	struct syncer *s = c->sv->s;
	struct round_action pulls[64];
	enum core_refusal r;
	struct learner *l;
	uint64_t resume;
	struct err e;
	int npull;

	if (c->learner >= 0 || c->evaluator >= 0) {
		conn_close(c, GRPC_STATUS_INVALID_ARGUMENT, "second hello on one stream");
		return;
	}
	c->takes_delta = h->takes_delta;
	if (h->evaluator) {
		on_evaluator_hello(c, h);
		return;
	}
	if (!cert_fits(c, h))
		return;
	if ((r = core_hello_check(s, h, &e)) != CORE_JOIN_OK) {
		conn_close(c, code[r], "%s", e.msg);
		return;
	}
	l = &s->learners[h->learner_id];
	if (l->conn)
		conn_close(l->conn, GRPC_STATUS_ABORTED,
			   "replaced by a newer stream for learner %u", h->learner_id);
	l->conn = c;
	c->learner = (int)h->learner_id;
	c->incarnation = h->incarnation;
	npull = core_join(s, h, now, &resume, pulls, 64);
	conn_send_welcome(c, resume, pulls, npull);
}

/* ---- adopting a learner's model (spec.model.kind external) ------------ */

static void pending_release(struct conn *c)
{
	free(c->sizes);
	c->sizes = NULL;
	c->hello.fragment_sizes = NULL;
	c->pending = 0;
}

/* Asks c's learner for its weights: a Pull of round 0 per fragment. */
static int ask_seed(struct stream_server *sv, struct conn *c, struct err *e)
{
	if (seed_begin(&sv->seed, clock_mono(), e))
		return -1;
	sv->seeder = c;
	for (int p = 0; p < sv->seed.ft.nfrags; p++)
		if (seed_owns(&sv->seed, p))
			conn_send_pull(c, 0, p);
	log_info("learner %u: asking for its weights (the job's initial "
		 "model)", c->hello.learner_id);
	return 0;
}

static void on_hello(struct conn *c, const struct wire_hello *h, double now);

/* Θ is known: the core starts, and every waiting hello is answered. */
static void adopt_done(struct stream_server *sv, int use_seed, double now)
{
	const struct syncer_params *prm = seed_params(&sv->seed, use_seed);
	struct syncer *s = sv->s;
	struct conn *c, *next;
	struct err e;

	if (!prm || core_init(s, prm, now, &e) ||
	    stream_cache_init(sv, s->P, &e)) {
		log_error("cannot start on the adopted model: %s",
			  prm ? e.msg : "out of memory");
		s->stopping = 1;
		return;
	}
	seed_started(&sv->seed);
	s->adopting = 0;
	s->ready = 1;
	for (c = sv->conns; c; c = next) {
		next = c->next;
		if (!c->pending || c->closing)
			continue;
		struct wire_hello h = c->hello;

		c->pending = 0;
		on_hello(c, &h, now);
		pending_release(c);
	}
}

/* Whether a checkpoint of the table of this fingerprint is on the
 * volume: the job agreed on that table before this syncer started, and Θ
 * is the checkpoint's (no seed is needed). */
static int checkpoint_of(struct stream_server *sv, uint64_t fingerprint)
{
	uint64_t round;

	const struct syncer_params *p = sv->s->prm;

	return syncer_ckpt_newest_name(p->ckpt_dir,
				       shard_fingerprint(fingerprint, p->shard,
							 p->nshards),
				       &round) == 1;
}

static int have_checkpoint(struct stream_server *sv)
{
	return checkpoint_of(sv, sv->seed.ft.fingerprint);
}

/* Whether a and b carry the same table: fingerprint, cut and sizes. */
static int same_table(const struct wire_hello *a, const struct wire_hello *b)
{
	return a->fingerprint == b->fingerprint &&
	       a->fragments == b->fragments && a->nsizes == b->nsizes &&
	       (!a->nsizes || !memcmp(a->fragment_sizes, b->fragment_sizes,
				      a->nsizes * sizeof(uint64_t)));
}

/* The learners (distinct ids) whose waiting Hello carries h's table. */
static int agreeing(struct stream_server *sv, const struct wire_hello *h)
{
	int M = sv->s->M, n = 0;
	unsigned char *seen = calloc((size_t)M, 1);

	if (!seen)
		return 0;
	for (struct conn *c = sv->conns; c; c = c->next) {
		uint32_t id = c->hello.learner_id;

		if (c->pending && !c->closing && !c->hello.evaluator &&
		    id < (uint32_t)M && !seen[id] && same_table(&c->hello, h)) {
			seen[id] = 1;
			n++;
		}
	}
	free(seen);
	return n;
}

/* Keeps c's hello (job name left out) until Θ is known; 0 when out of
 * memory (the stream is closed). */
static int keep_pending(struct conn *c, const struct wire_hello *h)
{
	c->hello = *h;
	c->hello.job = NULL;
	c->sizes = malloc(h->nsizes * sizeof(uint64_t) + 1);
	if (!c->sizes) {
		conn_close(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
		return 0;
	}
	memcpy(c->sizes, h->fragment_sizes, h->nsizes * sizeof(uint64_t));
	c->hello.fragment_sizes = c->sizes;
	c->pending = 1;
	return 1;
}

/* An evaluator's hello while adopting: it waits for Θ like a learner,
 * but neither fixes the table nor gives the seed; on_hello judges it
 * then. */
static void adopt_evaluator(struct conn *c, const struct wire_hello *h)
{
	if (h->learner_id >= EVAL_REMOTE_MAX) {
		conn_close(c, GRPC_STATUS_INVALID_ARGUMENT, "evaluator id "
			   "%u is out of range (0 to %d)", h->learner_id,
			   EVAL_REMOTE_MAX - 1);
		return;
	}
	if (cert_fits(c, h))
		keep_pending(c, h);
}

/* Whether h runs the adopted model; the stream is closed when not. */
static int fits_table(struct conn *c, const struct wire_hello *h)
{
	const struct frag_table *ft = &c->sv->seed.ft;

	if (h->fingerprint == ft->fingerprint &&
	    h->fragments == (uint32_t)ft->nfrags)
		return 1;
	log_warn("learner %u refused: model fingerprint mismatch: learner %016"
		 PRIx64 ", syncer %016" PRIx64, h->learner_id, h->fingerprint,
		 ft->fingerprint);
	conn_close(c, GRPC_STATUS_FAILED_PRECONDITION, "model fingerprint "
		   "mismatch: learner %016" PRIx64 ", syncer %016" PRIx64
		   " (the job's table is %s)", h->fingerprint, ft->fingerprint,
		   c->sv->seed.have_decl ? "the one spec.model.tensors declares"
					 : "the one minQuorum learners agreed on");
	return 0;
}

/* The waiting learner of the lowest id (the seed's first choice). */
static struct conn *first_waiting(struct stream_server *sv)
{
	struct conn *pick = NULL;

	for (struct conn *c = sv->conns; c; c = c->next)
		if (c->pending && !c->closing && !c->hello.evaluator &&
		    (!pick || c->hello.learner_id < pick->hello.learner_id))
			pick = c;
	return pick;
}

/*
 * h's table becomes the job's once minQuorum learners (K distinct ids)
 * said Hello with it, or at once when a checkpoint of it is on the
 * volume or the job declares it (spec.model.tensors, checked before):
 * one learner alone cannot fix a table that locks the others out
 * (docs/syncer.md, Model-agnostic jobs). Every waiting learner of
 * another table is then refused. 1 when fixed, 0 when h waits, -1 when
 * c was closed.
 */
static int fix_table(struct conn *c, const struct wire_hello *h)
{
	struct stream_server *sv = c->sv;
	int K = sv->s->js->syncer.min_quorum, n, ckpt;
	struct err e;

	ckpt = checkpoint_of(sv, h->fingerprint);
	n = agreeing(sv, h);
	if (!ckpt && !sv->seed.have_decl && n < K) {
		log_info("learner %u waits: %d of the %d learners (minQuorum) "
			 "that fix an external model's table say Hello with "
			 "its table (fingerprint %016" PRIx64 ")",
			 h->learner_id, n, K, h->fingerprint);
		return 0;
	}
	if (seed_adopt(&sv->seed, h, sv->s->prm, &e)) {
		pending_release(c);
		conn_close(c, GRPC_STATUS_INVALID_ARGUMENT, "%s", e.msg);
		return -1;
	}
	log_info("the job's table is fixed: %s", ckpt
		 ? "a checkpoint of it is on the volume"
		 : sv->seed.have_decl ? "spec.model.tensors declares it"
		 : "minQuorum learners agree on it");
	for (struct conn *o = sv->conns, *next; o; o = next) {
		next = o->next;
		if (o->pending && !o->closing && !o->hello.evaluator &&
		    !fits_table(o, &o->hello)) {
			pending_release(o);
			conn_maybe_free(o);
		}
	}
	return 1;
}

static void adopt_hello(struct conn *c, const struct wire_hello *h,
			double now)
{
	struct stream_server *sv = c->sv;
	struct err e;

	if (c->pending || c->learner >= 0) {
		conn_close(c, GRPC_STATUS_INVALID_ARGUMENT, "second hello on one stream");
		return;
	}
	if (h->evaluator) {
		adopt_evaluator(c, h);
		return;
	}
	if (!learner_in_range(c, h) || !cert_fits(c, h))
		return;
	/* a model this syncer cannot hold: refused for good, not retried */
	if (!sv->seed.have_ft && h->nsizes == h->fragments &&
	    seed_check_budget(h, sv->s->prm, &e)) {
		log_error("learner %u refused: %s", h->learner_id, e.msg);
		conn_close(c, GRPC_STATUS_FAILED_PRECONDITION, "%s", e.msg);
		return;
	}
	/* a table the job does not declare: refused, the others go on */
	if (seed_check_declared(&sv->seed, h, &e)) {
		log_warn("learner %u refused: %s", h->learner_id, e.msg);
		conn_close(c, GRPC_STATUS_FAILED_PRECONDITION, "%s", e.msg);
		return;
	}
	if (!sv->seed.have_ft) {
		if (!keep_pending(c, h) || fix_table(c, h) != 1)
			return;
	} else if (!fits_table(c, h) || !keep_pending(c, h)) {
		return;
	}
	if (!sv->seeder && have_checkpoint(sv)) {
		log_info("a checkpoint of the adopted model is in '%s': Θ is its",
			 sv->s->prm->ckpt_dir);
		adopt_done(sv, 0, now);
		return;
	}
	if (!sv->seeder && ask_seed(sv, (c = first_waiting(sv)), &e)) {
		log_error("%s", e.msg);
		pending_release(c);
		conn_close(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "%s", e.msg);
	}
}

/* A seed answer: round 0, the learner's own θ of one fragment. */
static void adopt_answer(struct conn *c, const struct wire_answer *a,
			 double now)
{
	struct stream_server *sv = c->sv;
	struct err e;
	int rc;

	if (c != sv->seeder || !seed_wants(&sv->seed, a)) {
		log_warn("learner %u: answer for round %" PRIu64 " fragment %u "
			 "ignored: the syncer waits for a seed", c->hello.learner_id,
			 a->round, a->fragment);
		return;
	}
	if ((rc = seed_put(&sv->seed, a, now, &e)) < 0) {
		conn_close(c, GRPC_STATUS_INVALID_ARGUMENT, "%s", e.msg);
		return;
	}
	if (rc == 1) {
		log_info("learner %u's weights are the job's initial model",
			 c->hello.learner_id);
		sv->seeder = NULL;
		adopt_done(sv, 1, now);
	}
}

/*
 * The learner asked for the seed went away: ask another waiting one,
 * one of another learner than the last dropped if there is one.
 */
static void reseed(struct stream_server *sv)
{
	struct conn *pick = NULL;
	struct err e;

	for (struct conn *c = sv->conns; c; c = c->next)
		if (c->pending && !c->closing && !c->hello.evaluator &&
		    (!pick || (int)pick->hello.learner_id == sv->seed.failed))
			pick = c;
	if (pick && ask_seed(sv, pick, &e)) {
		log_error("%s", e.msg);
		sv->s->stopping = 1;
	}
}

/*
 * A seeder that sends nothing for SEED_WAIT seconds (or helloTimeout if
 * longer) is dropped, so that another learner is asked (docs/syncer.md,
 * Model-agnostic jobs): its sidecar may have no seed to send.
 */
#define SEED_WAIT 60.0
void stream_seed_check(struct stream_server *sv, double now)
{
	double limit = fmax(SEED_WAIT, sv->s->js->syncer.hello_timeout);
	struct conn *c = sv->seeder;

	if (!sv->seed.have_ft)
		return;
	if (c && !c->closing && now - sv->seed.moved > limit) {
		log_warn("learner %u sent no seed within %g s: asking another",
			 c->hello.learner_id, limit);
		sv->seed.failed = (int)c->hello.learner_id;
		pending_release(c);
		conn_close(c, GRPC_STATUS_UNAVAILABLE, "no seed within %g s",
			   limit);
		conn_maybe_free(c);
	}
	if (!sv->seeder)
		reseed(sv);
}

/* A stream's message while no table is known. */
static void adopt_message(struct conn *c, const struct wire_learner_msg *m,
			  double now)
{
	if (m->kind == WIRE_HELLO)
		adopt_hello(c, &m->hello, now);
	else if (!c->pending)
		conn_close(c, GRPC_STATUS_FAILED_PRECONDITION,
			   "the first message must be a hello");
	else if (m->kind == WIRE_ANSWER)
		adopt_answer(c, &m->answer, now);
	/* heartbeats wait for the core */
}

/* A message on an evaluator's stream after its hello. */
static void evaluator_message(struct conn *c, const struct wire_learner_msg *m,
			      double now)
{
	struct err e;

	switch (m->kind) {
	case WIRE_EVALUATION:
		core_evaluation(c->sv->s, c->evaluator, &m->evaluation, now,
				&e);
		break;
	case WIRE_HEARTBEAT:
		break;   /* it trains nothing: nothing to count */
	case WIRE_ANSWER:
		conn_close(c, GRPC_STATUS_INVALID_ARGUMENT, "evaluator %d sent "
			   "an answer: an evaluator is never pulled", c->evaluator);
		break;
	default:
		conn_close(c, GRPC_STATUS_INVALID_ARGUMENT, "empty message");
	}
}

/* ---- Beat calls --------------------------------------------------------- */

/* Whether learner id has a live Train stream, and its incarnation
 * (beat.h). */
static int train_of(void *ctx, uint32_t id, uint64_t *incarnation)
{
	struct syncer *s = ((struct conn *)ctx)->sv->s;
	struct conn *t = s->adopting || id >= (uint32_t)s->M
			 ? NULL : s->learners[id].conn;

	if (!t || t->closing)
		return 0;
	*incarnation = t->incarnation;
	return 1;
}

static int identity_of(void *ctx, const struct wire_hello *h)
{
	return cert_fits(ctx, h);
}

/* A Beat's Hello taken: the initial metadata with the mark, which moves
 * the sidecar's heartbeats here (a refusal's status comes without it). */
static void beat_taken(struct conn *c)
{
	static grpc_metadata taken;   /* read only by gRPC */
	grpc_op op;

	taken.key = grpc_slice_from_static_string(WIRE_BEAT_MARK_KEY);
	taken.value = grpc_slice_from_static_string(WIRE_BEAT_MARK_VALUE);
	c->sv->s->tr.beat_streams++;
	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_SEND_INITIAL_METADATA;
	op.data.send_initial_metadata.count = 1;
	op.data.send_initial_metadata.metadata = &taken;
	c->md_sent = 1;
	if (grpc_call_start_batch(c->call, &op, 1, &c->t_send, NULL) ==
	    GRPC_CALL_OK)
		c->send_pending = 1;
	log_debug("learner %d: heartbeats on a Beat", c->beat_learner);
}

/* A message on a Beat call: its rules are beat.c's, run here. */
static void beat_message(struct conn *c, const struct wire_learner_msg *m,
			 double now)
{
	struct syncer *s = c->sv->s;
	struct beat_call b = { c->beat_learner, c->incarnation };
	const struct beat_env env = { s->js->name, s->M, train_of,
				      identity_of, c };
	struct beat_outcome out;

	beat_take(&b, m, &env, &out);
	c->beat_learner = b.learner;
	c->incarnation = b.incarnation;
	switch (out.v) {
	case BEAT_CLOSE:
		conn_close(c, (grpc_status_code)out.code, "%s", out.msg);
		break;
	case BEAT_REFUSED:
		break;
	case BEAT_TAKEN:
		beat_taken(c);
		break;
	case BEAT_HEARTBEAT:
		core_heartbeat(s, c->beat_learner, &m->heartbeat, now);
		s->tr.beat_heartbeats++;
		/* its Train stream ends; this Beat with it (train_of) */
		if (core_excluded(s, c->beat_learner))
			conn_close(s->learners[c->beat_learner].conn,
				   GRPC_STATUS_RESOURCE_EXHAUSTED, "learner %d "
				   "is excluded: its claims were cut in spec."
				   "syncer.maxClaimCuts strikes", c->beat_learner);
		break;
	}
}

/* The most bytes an answer's payload may have: the table's largest
 * fragment in its largest encoding (an adopted table once known). */
static size_t answer_max(struct stream_server *sv)
{
	if (!sv->payload_max && sv->s->adopting && sv->seed.have_ft)
		for (int p = 0; p < sv->seed.ft.nfrags; p++) {
			size_t n = wire_payload_max(sv->seed.ft.frags[p].numel);

			sv->payload_max = n > sv->payload_max ? n : sv->payload_max;
		}
	return sv->payload_max;
}

/* An answer's part into c->parts: 1 when m holds a whole answer now, 0
 * when more parts are to come, -1 when the stream was closed. */
static int answer_parts(struct conn *c, struct wire_learner_msg *m)
{
	struct syncer *s = c->sv->s;
	struct err e;
	int part = m->answer.payload_total != 0;
	int rc = wire_parts_answer(&c->parts, &m->answer, answer_max(c->sv), &e);

	if (rc < 0) {
		s->tr.parts_refused++;
		log_warn("stream of learner %d: %s", c->learner, e.msg);
		conn_close(c, GRPC_STATUS_INVALID_ARGUMENT, "%s", e.msg);
		return rc;
	}
	s->tr.answer_parts += part;
	if (rc == 1 && part && !c->said_parts) {
		c->said_parts = 1;
		log_info("learner %d: answers in parts (%zu bytes for fragment "
			 "%u)", c->learner, m->answer.payload_len,
			 m->answer.fragment);
	}
	return rc;
}

void stream_on_message(struct conn *c, const uint8_t *data, size_t len,
		       double now)
{
	struct syncer *s = c->sv->s;
	struct wire_learner_msg m;
	struct err e;

	if (wire_learner_decode(data, len, &m, &e)) {
		log_warn("stream of learner %d: %s", c->learner, e.msg);
		conn_close(c, GRPC_STATUS_INVALID_ARGUMENT, "%s", e.msg);
		return;
	}
	if (m.kind == WIRE_HELLO && !c->beat)
		c->peer_max = m.hello.max_message;   /* what it takes */
	if (m.kind == WIRE_ANSWER && !c->beat && answer_parts(c, &m) != 1) {
		wire_learner_release(&m);
		return;
	}
	if (c->beat) {
		beat_message(c, &m, now);
	} else if (s->adopting) {
		adopt_message(c, &m, now);
	} else if (m.kind != WIRE_HELLO && c->learner < 0 && c->evaluator < 0) {
		conn_close(c, GRPC_STATUS_FAILED_PRECONDITION,
			   "the first message must be a hello");
	} else if (c->evaluator >= 0 && m.kind != WIRE_HELLO) {
		evaluator_message(c, &m, now);
	} else if (m.kind == WIRE_EVALUATION) {
		conn_close(c, GRPC_STATUS_INVALID_ARGUMENT, "learner %d sent an "
			   "evaluation: only an evaluator does", c->learner);
	} else {
		switch (m.kind) {
		case WIRE_HELLO:
			on_hello(c, &m.hello, now);
			break;
		case WIRE_ANSWER:
			core_answer(s, c->learner, &m.answer, now);
			break;
		case WIRE_HEARTBEAT:
			core_heartbeat(s, c->learner, &m.heartbeat, now);
			break;
		default:
			conn_close(c, GRPC_STATUS_INVALID_ARGUMENT,
				   "empty message");
		}
		if (c->learner >= 0 && !c->closing &&
		    core_excluded(s, c->learner))
			conn_close(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "learner %d "
				   "is excluded: its claims were cut in spec."
				   "syncer.maxClaimCuts strikes", c->learner);
	}
	if (m.kind == WIRE_ANSWER)
		wire_parts_done(&c->parts);
	wire_learner_release(&m);
}

/* Streams that have not said Hello within spec.syncer.helloTimeout are
 * closed: each holds memory and a slot of the connection's streams. */
void stream_close_silent(struct stream_server *sv, double now)
{
	double limit = sv->s->js->syncer.hello_timeout;
	struct conn *c = sv->conns, *next;
	char peer[128];

	for (; c; c = next) {
		next = c->next;
		if (c->learner >= 0 || c->evaluator >= 0 || c->pending ||
		    c->beat_learner >= 0 || c->closing ||
		    now - c->t_accept <= limit)
			continue;
		peer_name(c, peer, sizeof(peer));
		sv->s->tr.streams_no_hello++;
		log_warn("stream from %s closed: no hello within %g s", peer, limit);
		conn_close(c, GRPC_STATUS_DEADLINE_EXCEEDED,
			   "no hello within %g s", limit);
		conn_maybe_free(c);
	}
}

