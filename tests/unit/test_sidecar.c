/*
 * The sidecar's bridge without the network: syncer messages packed by
 * protobuf-c (an encoder independent of common/wire.c) applied to a real
 * exchange, bad payloads (truncated, oversize, wrong fragment, wrong
 * model) refused and counted, queued answers read back by protobuf-c,
 * bounded answer queue, the resume step handed to the right learner,
 * error feedback over many sent answers and when its residual is dropped.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/exchange.h"
#include "common/util.h"
#include "ddiloco/v1/syncer.pb-c.h"
#include "sidecar/sidecar_int.h"
#include "tests/unit/testlib.h"

/* fragment 0: tensor 1 (600 values); fragment 1: tensors 0 and 2 (500 + 200) */
static const struct frag_tensor tens[3] = {
	{ 0, 500, 1 }, { 500, 600, 0 }, { 1100, 200, 0 },
};
#define NPARAM 1300

struct fx {
	char dir[64];
	struct frag_table ft;
	struct exchange *sx, *lx;
	struct sidecar *s;
	float params[NPARAM];
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct sidecar_opts o = { .target = "localhost:1", .learner_id = 2,
				  .job = "t" };

	strcpy(f->dir, "/tmp/ddsc-test-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	assert_int_equal(frag_table_init(&f->ft, tens, 3, 2, NULL), 0);
	assert_int_equal(exchange_open(f->dir, EXCHANGE_SIDECAR, &f->ft, &f->sx,
				       NULL), 0);
	assert_int_equal(exchange_open(f->dir, EXCHANGE_LEARNER, &f->ft, &f->lx,
				       NULL), 0);
	f->s = sidecar_new(&o, f->sx, &f->ft, NULL);
	assert_non_null(f->s);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	sidecar_free(f->s);
	exchange_close(f->lx);
	exchange_close(f->sx);
	frag_table_release(&f->ft);
	assert_int_equal(testlib_rmtree(f->dir), 0);
	free(f);
	return 0;
}

/* Packs a SyncerMessage into a new buffer. */
static uint8_t *pack(const Ddiloco__V1__SyncerMessage *m, size_t *len)
{
	uint8_t *b;

	*len = ddiloco__v1__syncer_message__get_packed_size(m);
	b = malloc(*len ? *len : 1);
	ddiloco__v1__syncer_message__pack(m, b);
	return b;
}

static int send_welcome(struct fx *f, uint32_t frags, int enc, double alpha,
			uint64_t resume, struct err *e)
{
	Ddiloco__V1__SyncerMessage m = DDILOCO__V1__SYNCER_MESSAGE__INIT;
	Ddiloco__V1__Welcome w = DDILOCO__V1__WELCOME__INIT;
	size_t len;
	uint8_t *b;
	int rc;

	w.fragments = frags;
	w.answer_encoding = (Ddiloco__V1__Encoding)enc;
	w.alpha = alpha;
	w.resume_step = resume;
	m.kind_case = DDILOCO__V1__SYNCER_MESSAGE__KIND_WELCOME;
	m.welcome = &w;
	b = pack(&m, &len);
	rc = sidecar_handle(f->s, b, len, e);
	free(b);
	return rc;
}

static int send_update(struct fx *f, uint32_t p, uint64_t version,
		       enum payload_enc enc, const float *v, size_t n,
		       long len_delta, struct err *e)
{
	Ddiloco__V1__SyncerMessage m = DDILOCO__V1__SYNCER_MESSAGE__INIT;
	Ddiloco__V1__Update u = DDILOCO__V1__UPDATE__INIT;
	size_t plen = enc_size(enc, n), len;
	uint8_t *payload = calloc(plen + 16, 1), *b;
	int rc;

	assert_int_equal(enc_encode(enc, v, n, payload, NULL), 0);
	u.fragment = p;
	u.version = version;
	u.encoding = (Ddiloco__V1__Encoding)enc;
	u.payload.data = payload;
	u.payload.len = (size_t)((long)plen + len_delta);
	m.kind_case = DDILOCO__V1__SYNCER_MESSAGE__KIND_UPDATE;
	m.update = &u;
	b = pack(&m, &len);
	rc = sidecar_handle(f->s, b, len, e);
	free(b);
	free(payload);
	return rc;
}

static int send_pull(struct fx *f, uint32_t p, uint64_t round)
{
	Ddiloco__V1__SyncerMessage m = DDILOCO__V1__SYNCER_MESSAGE__INIT;
	Ddiloco__V1__Pull pl = DDILOCO__V1__PULL__INIT;
	size_t len;
	uint8_t *b;
	int rc;

	pl.fragment = p;
	pl.round = round;
	m.kind_case = DDILOCO__V1__SYNCER_MESSAGE__KIND_PULL;
	m.pull = &pl;
	b = pack(&m, &len);
	rc = sidecar_handle(f->s, b, len, NULL);
	free(b);
	return rc;
}

static void welcome_checks_the_model(void **state)
{
	struct fx *f = *state;
	struct err e;

	assert_int_equal(send_welcome(f, 3, 0, 0.0, 0, &e), -2);
	assert_non_null(strstr(e.msg, "3 fragments"));
	assert_int_equal(send_welcome(f, 2, 7, 0.0, 0, &e), -2);
	assert_non_null(strstr(e.msg, "encoding"));
	assert_int_equal(send_welcome(f, 2, 0, 1.5, 0, &e), -2);
	assert_non_null(strstr(e.msg, "alpha"));
	assert_int_equal(send_welcome(f, 2, ENC_BF16, 0.0, 0, &e), 0);
	assert_int_equal(f->s->enc, ENC_BF16);
	assert_int_equal(f->s->welcomed, 1);
}

static void updates_reach_the_learner_or_are_refused(void **state)
{
	struct fx *f = *state;
	float v0[600], v1[700];
	struct sidecar_metrics m;
	struct err e;
	uint8_t junk[5] = { 0xff, 0xff, 0xff, 0xff, 0xff };

	for (int i = 0; i < 600; i++)
		v0[i] = (float)i * 0.5f;
	for (int i = 0; i < 700; i++)
		v1[i] = -(float)i;
	/* truncated, oversize, wrong fragment: nothing reaches the inbox */
	assert_int_equal(send_update(f, 0, 1, ENC_F32, v0, 600, -4, &e), -1);
	assert_non_null(strstr(e.msg, "fragment 0 version 1"));
	assert_int_equal(send_update(f, 0, 1, ENC_F32, v0, 600, +4, &e), -1);
	assert_int_equal(send_update(f, 0, 1, ENC_INT8, v0, 600, -1, &e), -1);
	assert_int_equal(send_update(f, 5, 1, ENC_F32, v0, 600, 0, &e), -1);
	assert_non_null(strstr(e.msg, "fragment 5"));
	assert_int_equal(sidecar_handle(f->s, junk, sizeof(junk), &e), -1);
	assert_non_null(strstr(e.msg, "cannot parse"));
	assert_int_equal(exchange_inbox_version(f->sx, 0), 0);
	assert_int_equal(exchange_learner_start(f->lx, f->params), 0);

	assert_int_equal(send_update(f, 0, 4, ENC_F32, v0, 600, 0, &e), 0);
	assert_int_equal(send_update(f, 1, 6, ENC_BF16, v1, 700, 0, &e), 0);
	/* a bad update after a good one leaves the good one in place */
	assert_int_equal(send_update(f, 0, 5, ENC_F32, v0, 600, -8, &e), -1);
	assert_int_equal(exchange_inbox_version(f->sx, 0), 4);
	assert_int_equal(exchange_learner_start(f->lx, f->params), 1);
	for (int i = 0; i < 600; i++)
		assert_true(f->params[500 + i] == v0[i]);
	for (int i = 0; i < 500; i++)   /* bf16: within 2^-8 relative */
		assert_float_equal(f->params[i], v1[i], fabsf(v1[i]) / 256.0f);
	assert_true(f->params[100] == v1[100]);   /* small integers are exact */
	for (int i = 0; i < 200; i++)
		assert_float_equal(f->params[1100 + i], v1[500 + i],
				   fabsf(v1[500 + i]) / 256.0f);
	sidecar_get_metrics(f->s, &m);
	assert_int_equal(m.updates_received, 7);
	assert_int_equal(m.updates_rejected, 5);
}

static void answers_queue_bounded(void **state)
{
	struct fx *f = *state;
	float v0[600], v1[700];
	struct exchange_step st = { .step = 1, .tokens = 32, .tokens_total = 32,
				    .loss = 3.0, .step_time = 0.1 };
	struct exchange_poll_result res;
	struct sidecar_metrics m;
	struct qanswer *q;
	Ddiloco__V1__LearnerMessage *lm;
	uint8_t *msg;

	for (int i = 0; i < 600; i++)
		v0[i] = 1.0f;
	for (int i = 0; i < 700; i++)
		v1[i] = 2.0f;
	assert_int_equal(send_update(f, 0, 1, ENC_F32, v0, 600, 0, NULL), 0);
	assert_int_equal(send_update(f, 1, 1, ENC_F32, v1, 700, 0, NULL), 0);
	assert_int_equal(exchange_learner_start(f->lx, f->params), 1);

	/* an answer while no stream is open is dropped */
	assert_int_equal(send_pull(f, 0, 10), 0);
	exchange_poll(f->lx, f->params, &st, &res);
	assert_int_equal(sidecar_collect(f->s), 0);
	sidecar_get_metrics(f->s, &m);
	assert_int_equal(m.answers_dropped, 1);

	/* a welcomed stream: int8 answers, queued one per fragment */
	sidecar_stream_begin(f->s);
	f->s->connected = 1;
	assert_int_equal(send_welcome(f, 2, ENC_INT8, 0.0, 0, NULL), 0);
	assert_int_equal(send_pull(f, 0, 11), 0);
	st.step = 2;
	exchange_poll(f->lx, f->params, &st, &res);
	assert_int_equal(sidecar_collect(f->s), 1);
	for (int i = 0; i < 600; i++)
		f->params[500 + i] = 1.0f - 0.001f * (float)(i % 37);
	assert_int_equal(send_pull(f, 0, 13), 0);
	st.step = 3;
	exchange_poll(f->lx, f->params, &st, &res);
	assert_int_equal(sidecar_collect(f->s), 1);
	sidecar_get_metrics(f->s, &m);
	assert_int_equal(m.answers_replaced, 1);
	assert_int_equal(m.queue_answers, 1);
	assert_int_equal(m.queue_bytes, f->s->queue[0].hlen + 4 * 3 + 600);
	assert_true(m.encoding_error_last > 0 && m.encoding_error_last < 0.01);

	/* the queued message is a valid Answer with the learner's Δ */
	q = &f->s->queue[0];
	msg = malloc(q->hlen + q->plen);
	memcpy(msg, q->hdr, q->hlen);
	memcpy(msg + q->hlen, q->payload, q->plen);
	lm = ddiloco__v1__learner_message__unpack(NULL, q->hlen + q->plen, msg);
	assert_non_null(lm);
	assert_int_equal(lm->answer->round, 13);
	/* since the answer before: it moved the base (docs/exchange.md) */
	assert_int_equal(lm->answer->steps, 1);
	assert_int_equal(lm->answer->tokens, 32);
	assert_int_equal(lm->answer->base_version, 1);
	{
		float d[600];

		assert_int_equal(enc_decode(ENC_INT8, lm->answer->payload.data,
					    lm->answer->payload.len, d, 600, NULL), 0);
		for (int i = 0; i < 600; i++)
			assert_float_equal(d[i], 0.001f * (float)(i % 37), 0.04 / 254);
	}
	ddiloco__v1__learner_message__free_unpacked(lm, NULL);
	free(msg);

	/* a new stream drops what was queued for the old one */
	sidecar_stream_begin(f->s);
	sidecar_get_metrics(f->s, &m);
	assert_int_equal(m.queue_answers, 0);
	assert_int_equal(m.answers_dropped, 2);
}

/* A learner process at `step`, as the exchange shows it to the sidecar. */
static void learner_at(struct exchange *lx, uint64_t step)
{
	struct exchange_step st = { .step = step };

	exchange_put_stats(lx, &st);
}

/*
 * Welcome.resume_step reaches the learner process it was meant for; a
 * learner restart asks for a new stream while the syncer is there, and
 * gets the step it had reached while the syncer is away.
 */
static void resume_step_reaches_the_learner(void **state)
{
	struct fx *f = *state;
	struct exchange *lx2, *lx3;
	struct exchange_stats st;
	uint64_t rs = 0;

	/* the Welcome came before the learner attached: it is for the first */
	learner_at(f->lx, 0);
	assert_int_equal(send_welcome(f, 2, 0, 0.0, 250, NULL), 0);
	assert_int_equal(exchange_resume(f->lx, &rs), 0);
	sidecar_learner_stats(f->s, &st);
	assert_int_equal(exchange_resume(f->lx, &rs), 1);
	assert_int_equal(rs, 250);
	assert_int_equal(f->s->rehello, 0);
	assert_int_equal(f->s->m.learner_restarts, 0);

	/* it trains to 300 and is killed; the new process is not told 250 */
	learner_at(f->lx, 300);
	sidecar_learner_stats(f->s, &st);
	assert_int_equal(exchange_open(f->dir, EXCHANGE_LEARNER, &f->ft, &lx2,
				       NULL), 0);
	learner_at(lx2, 0);
	assert_int_equal(exchange_resume(lx2, &rs), 0);
	sidecar_learner_stats(f->s, &st);
	assert_int_equal(f->s->m.learner_restarts, 1);
	assert_int_equal(f->s->rehello, 1);           /* a new stream, please */
	assert_int_equal(exchange_resume(lx2, &rs), 0);   /* the syncer says */
	/* the new stream's Hello spoke for lx2 (client.c send_hello) */
	f->s->hello_incarnation = st.incarnation;
	f->s->rehello = 0;
	assert_int_equal(send_welcome(f, 2, 0, 0.0, 320, NULL), 0);
	assert_int_equal(exchange_resume(lx2, &rs), 1);
	assert_int_equal(rs, 320);

	/* the syncer is away when lx2, at 400, is killed: 400 at once */
	learner_at(lx2, 400);
	sidecar_learner_stats(f->s, &st);
	sidecar_stream_begin(f->s);                   /* the stream ended */
	assert_int_equal(exchange_open(f->dir, EXCHANGE_LEARNER, &f->ft, &lx3,
				       NULL), 0);
	learner_at(lx3, 0);
	sidecar_learner_stats(f->s, &st);
	assert_int_equal(f->s->m.learner_restarts, 2);
	assert_int_equal(f->s->rehello, 0);
	assert_int_equal(exchange_resume(lx3, &rs), 1);
	assert_int_equal(rs, 400);
	assert_int_equal(exchange_resume(lx2, &rs), 0);
	exchange_close(lx3);
	exchange_close(lx2);
}

/* int4 updates: a truncated one is refused, a good one reaches the
 * learner within half a block scale. */
static void int4_updates_reach_the_learner(void **state)
{
	struct fx *f = *state;
	float v0[600], v1[700];
	struct err e;

	for (int i = 0; i < 600; i++)
		v0[i] = 0.01f * (float)(i % 15) - 0.07f;
	for (int i = 0; i < 700; i++)
		v1[i] = 1.0f;
	assert_int_equal(send_update(f, 0, 2, ENC_INT4, v0, 600, -1, &e), -1);
	assert_non_null(strstr(e.msg, "int4 payload of 375 bytes"));
	assert_int_equal(send_update(f, 0, 2, ENC_INT4, v0, 600, 0, NULL), 0);
	assert_int_equal(send_update(f, 1, 2, ENC_INT4, v1, 700, 0, NULL), 0);
	assert_int_equal(exchange_learner_start(f->lx, f->params), 1);
	for (int i = 0; i < 600; i++)   /* block max 0.07: scale 0.01 */
		assert_float_equal(f->params[500 + i], v0[i], 0.005f * 1.0001f);
	for (int i = 0; i < 500; i++)
		assert_true(f->params[i] == 1.0f);
	assert_int_equal(f->s->m.updates_rejected, 1);
}

/* Takes fragment p's queued answer as the client thread sends it
 * (client.c send_answer) and decodes its payload into d. */
static void answer_sent(struct fx *f, int p, enum payload_enc enc, float *d,
			size_t n, uint8_t *bytes)
{
	struct qanswer q;

	pthread_mutex_lock(&f->s->mu);
	q = f->s->queue[p];
	memset(&f->s->queue[p], 0, sizeof(q));
	pthread_mutex_unlock(&f->s->mu);
	assert_true(q.used);
	assert_int_equal(q.plen, enc_size(enc, n));
	assert_int_equal(enc_decode(enc, q.payload, q.plen, d, n, NULL), 0);
	if (bytes)
		memcpy(bytes, q.payload, q.plen);
	sidecar_queue_free_entry(&q);
}

#define FB_ROUNDS 60

/*
 * FB_ROUNDS int4 answers of fragment 0 with the same Δ, each sent: the
 * largest |Σ decoded − Σ Δ| over the fragment, in int4 steps of Δ's
 * block. Leaves the learner answering with lx.
 */
static double feedback_drift(struct fx *f, int feedback)
{
	struct exchange_step st = { .tokens = 32, .tokens_total = 32 };
	struct exchange_poll_result res;
	float v0[600], v1[700], d[600], delta[600];
	double sum[600] = { 0 }, truth[600] = { 0 }, worst = 0;

	for (int i = 0; i < 600; i++)
		v0[i] = 1.0f;
	for (int i = 0; i < 700; i++)
		v1[i] = 2.0f;
	f->s->o.no_feedback = !feedback;
	assert_int_equal(send_update(f, 0, 1, ENC_F32, v0, 600, 0, NULL), 0);
	assert_int_equal(send_update(f, 1, 1, ENC_F32, v1, 700, 0, NULL), 0);
	assert_int_equal(exchange_learner_start(f->lx, f->params), 1);
	sidecar_stream_begin(f->s);
	f->s->connected = 1;
	assert_int_equal(send_welcome(f, 2, ENC_INT4, 0.0, 0, NULL), 0);
	for (int i = 0; i < 600; i++) {
		f->params[500 + i] = 1.0f - 0.003f * (float)(i % 29 + 1) / 29.0f;
		delta[i] = 1.0f - f->params[500 + i];
	}
	/* each answer moves the base to θ (docs/exchange.md), so the learner
	 * moves θ by the same Δ before each: the progress answered is the
	 * float difference base − θ, summed in truth[] */
	for (int t = 1; t <= FB_ROUNDS; t++) {
		for (int i = 0; t > 1 && i < 600; i++) {
			float prev = f->params[500 + i];
			f->params[500 + i] = prev - delta[i];
			truth[i] += (double)(prev - f->params[500 + i]);
		}
		if (t == 1)
			for (int i = 0; i < 600; i++)
				truth[i] += (double)delta[i];
		assert_int_equal(send_pull(f, 0, 10 + (uint64_t)t), 0);
		st.step = (uint64_t)t;
		exchange_poll(f->lx, f->params, &st, &res);
		assert_int_equal(sidecar_collect(f->s), 1);
		answer_sent(f, 0, ENC_INT4, d, 600, NULL);
		for (int i = 0; i < 600; i++)
			sum[i] += d[i];
	}
	for (int b = 0; b < 600; b += ENC_INT4_BLOCK) {
		float amax = 0;

		for (int i = b; i < b + ENC_INT4_BLOCK && i < 600; i++)
			amax = fmaxf(amax, fabsf(delta[i]));
		for (int i = b; i < b + ENC_INT4_BLOCK && i < 600; i++)
			worst = fmax(worst, fabs(sum[i] - truth[i]) / (amax / 7.0));
	}
	return worst;
}

/* docs/protocol.md, error feedback: the sidecar's residual keeps the sum
 * of what the syncer decodes within a step of the learner's progress. */
static void feedback_keeps_the_sum(void **state)
{
	double with = feedback_drift(*state, 1);

	print_message("int4 answers: drift %.3f steps with feedback\n", with);
	assert_at_most(with, 1.0);
}

static void no_feedback_drifts(void **state)
{
	double without = feedback_drift(*state, 0);

	print_message("int4 answers: drift %.1f steps without feedback\n", without);
	assert_greater(without, 10.0);
}

/* A new learner process and a new encoding drop the residual: the next
 * answer is the plain encoding of its Δ. */
static void residual_dropped_on_restart(void **state)
{
	struct fx *f = *state;
	struct exchange_step st = { .step = 100, .tokens = 32 };
	struct exchange_poll_result res;
	struct exchange *lx2;
	float d[600], delta[600], p2[NPARAM];
	uint8_t got[640], plain[640];

	assert_at_most(feedback_drift(f, 1), 1.0);
	assert_int_equal(f->s->m.residual_resets, 0);
	for (int i = 0; i < 600; i++)
		delta[i] = 1.0f - f->params[500 + i];
	/* the learner restarts: a new process, the same Δ */
	assert_int_equal(exchange_open(f->dir, EXCHANGE_LEARNER, &f->ft, &lx2,
				       NULL), 0);
	assert_int_equal(exchange_learner_start(lx2, p2), 1);
	memcpy(p2, f->params, sizeof(p2));
	assert_int_equal(send_pull(f, 0, 500), 0);
	exchange_poll(lx2, p2, &st, &res);
	assert_int_equal(sidecar_collect(f->s), 1);
	answer_sent(f, 0, ENC_INT4, d, 600, got);
	assert_int_equal(f->s->m.residual_resets, 1);
	assert_int_equal(enc_encode(ENC_INT4, delta, 600, plain, NULL), 0);
	assert_memory_equal(got, plain, enc_size(ENC_INT4, 600));
	/* a second answer has a residual again: not the plain bytes */
	assert_int_equal(send_pull(f, 0, 501), 0);
	st.step++;
	exchange_poll(lx2, p2, &st, &res);
	assert_int_equal(sidecar_collect(f->s), 1);
	answer_sent(f, 0, ENC_INT4, d, 600, got);
	assert_memory_not_equal(got, plain, enc_size(ENC_INT4, 600));
	/* the syncer asks for int8 now: dropped again; the learner moved on,
	 * and that answer is the plain encoding of what it did since */
	assert_int_equal(send_welcome(f, 2, ENC_INT8, 0.0, 0, NULL), 0);
	for (int i = 0; i < 600; i++) {
		float prev = p2[500 + i];
		p2[500 + i] = prev - 0.002f;
		delta[i] = prev - p2[500 + i];
	}
	assert_int_equal(send_pull(f, 0, 502), 0);
	st.step++;
	exchange_poll(lx2, p2, &st, &res);
	assert_int_equal(sidecar_collect(f->s), 1);
	answer_sent(f, 0, ENC_INT8, d, 600, got);
	assert_int_equal(f->s->m.residual_resets, 2);
	assert_int_equal(enc_encode(ENC_INT8, delta, 600, plain, NULL), 0);
	assert_memory_equal(got, plain, enc_size(ENC_INT8, 600));
	exchange_close(lx2);
}

/*
 * Early heartbeats (docs/sidecar.md, Heartbeats): a learner's first
 * SIDECAR_EARLY_HEARTBEATS heartbeats of a stream follow each other after
 * SIDECAR_EARLY_HEARTBEAT_S, whether or not they carried a step time,
 * then after heartbeat_every (1 s). Before, the syncer learnt a
 * learner's step time a second after its start and could not pace the
 * rounds meanwhile: a job of 1 ms steps trained 300 to 500 steps a
 * learner before its second round. An evaluator makes no steps: its
 * heartbeats keep heartbeat_every.
 */
static void heartbeats_come_early_on_a_new_stream(void **state)
{
	struct fx *f = *state;
	int early = SIDECAR_EARLY_HEARTBEATS;

	assert_true(f->s->o.heartbeat_every == 1.0);
	for (int i = 0; i < SIDECAR_EARLY_HEARTBEATS; i++)
		assert_true(sidecar_heartbeat_gap(f->s, &early) ==
			    SIDECAR_EARLY_HEARTBEAT_S);
	assert_int_equal(early, 0);
	assert_true(sidecar_heartbeat_gap(f->s, &early) == 1.0);
	assert_int_equal(early, 0);
	/* an evaluator */
	early = 3;
	f->s->o.evaluator = 1;
	assert_true(sidecar_heartbeat_gap(f->s, &early) == 1.0);
	assert_int_equal(early, 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(welcome_checks_the_model, setup,
						teardown),
		cmocka_unit_test_setup_teardown(updates_reach_the_learner_or_are_refused,
						setup, teardown),
		cmocka_unit_test_setup_teardown(answers_queue_bounded, setup,
						teardown),
		cmocka_unit_test_setup_teardown(resume_step_reaches_the_learner,
						setup, teardown),
		cmocka_unit_test_setup_teardown(int4_updates_reach_the_learner,
						setup, teardown),
		cmocka_unit_test_setup_teardown(feedback_keeps_the_sum, setup,
						teardown),
		cmocka_unit_test_setup_teardown(no_feedback_drifts, setup,
						teardown),
		cmocka_unit_test_setup_teardown(residual_dropped_on_restart,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			heartbeats_come_early_on_a_new_stream,
			setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
