/*
 * The sidecar's bridge without the network: syncer messages packed by
 * protobuf-c (an encoder independent of common/wire.c) applied to a real
 * exchange, bad payloads (truncated, oversize, wrong fragment, wrong
 * model) refused and counted, queued answers read back by protobuf-c,
 * bounded answer queue, the resume step handed to the right learner, the
 * learner's last stats kept while it is writing them,
 * error feedback over many sent answers and when its residual is dropped,
 * updates in parts put together or refused. And over loopback gRPC,
 * against a fake syncer: the heartbeats on a Beat call once it is taken,
 * on Train while the Beat is refused (tried again) or unknown to the
 * syncer (not tried again); a seed larger than a message sent in parts.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cmds.h"
#include "common/cli.h"
#include "common/exchange.h"
#include "common/exchange_layout.h"
#include "common/util.h"
#include "ddiloco/v1/syncer.pb-c.h"
#include "sidecar/sidecar_int.h"
#include "syncer/updelta.h"
#include "tests/unit/slowlink.h"
#include "tests/unit/testlib.h"

/* fragment 0: tensor 1 (600 values); fragment 1: tensors 0 and 2 (500 + 200) */
static const struct frag_tensor tens[3] = {
	{ .offset = 0, .numel = 500, .is_embedding = 1 },
	{ .offset = 500, .numel = 600, .is_embedding = 0 },
	{ .offset = 1100, .numel = 200, .is_embedding = 0 },
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
	struct sidecar_opts o = { .target = "127.0.0.1:1", .learner_id = 2,
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
	rc = sidecar_handle(f->s, 0, b, len, e);
	free(b);
	return rc;
}

/* An Update of payload bytes as they are: whole or a delta from `from`,
 * with a checksum (docs/protocol.md, Updates as deltas). */
static int send_update_bytes(struct fx *f, uint32_t p, uint64_t version,
			     enum payload_enc enc, const uint8_t *pay,
			     size_t plen, int delta, uint64_t from,
			     uint64_t sum, struct err *e)
{
	Ddiloco__V1__SyncerMessage m = DDILOCO__V1__SYNCER_MESSAGE__INIT;
	Ddiloco__V1__Update u = DDILOCO__V1__UPDATE__INIT;
	size_t len;
	uint8_t *b;
	int rc;

	u.fragment = p;
	u.version = version;
	u.tokens = version * 1000;      /* the job's tokens trained */
	u.encoding = (Ddiloco__V1__Encoding)enc;
	u.payload.data = (uint8_t *)pay;
	u.payload.len = plen;
	u.delta = delta != 0;
	u.delta_from = from;
	u.checksum = sum;
	m.kind_case = DDILOCO__V1__SYNCER_MESSAGE__KIND_UPDATE;
	m.update = &u;
	b = pack(&m, &len);
	rc = sidecar_handle(f->s, 0, b, len, e);
	free(b);
	return rc;
}

static int send_update(struct fx *f, uint32_t p, uint64_t version,
		       enum payload_enc enc, const float *v, size_t n,
		       long len_delta, struct err *e)
{
	size_t plen = enc_size(enc, n);
	uint8_t *payload = calloc(plen + 16, 1);
	int rc;

	assert_int_equal(enc_encode(enc, v, n, payload, NULL), 0);
	rc = send_update_bytes(f, p, version, enc, payload,
			       (size_t)((long)plen + len_delta), 0, 0, 0, e);
	free(payload);
	return rc;
}

/* Bytes [off, off + len) of fragment p's f32 Update of n values v, as a
 * part (docs/protocol.md, Messages in parts). */
static int send_update_part(struct fx *f, uint32_t p, uint64_t version,
			    const float *v, size_t n, size_t off, size_t len,
			    struct err *e)
{
	Ddiloco__V1__SyncerMessage m = DDILOCO__V1__SYNCER_MESSAGE__INIT;
	Ddiloco__V1__Update u = DDILOCO__V1__UPDATE__INIT;
	size_t blen;
	uint8_t *b;
	int rc;

	u.fragment = p;
	u.version = version;
	u.encoding = DDILOCO__V1__ENCODING__ENCODING_F32;
	u.payload.data = (uint8_t *)v + off;
	u.payload.len = len;
	u.part_offset = off;
	u.payload_total = 4 * n;
	m.kind_case = DDILOCO__V1__SYNCER_MESSAGE__KIND_UPDATE;
	m.update = &u;
	b = pack(&m, &blen);
	rc = sidecar_handle(f->s, 0, b, blen, e);
	free(b);
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
	rc = sidecar_handle(f->s, 0, b, len, NULL);
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
	assert_int_equal(f->s->links[0].enc, ENC_BF16);
	assert_int_equal(f->s->links[0].welcomed, 1);
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
	assert_int_equal(sidecar_handle(f->s, 0, junk, sizeof(junk), &e), -1);
	assert_non_null(strstr(e.msg, "cannot parse"));
	assert_int_equal(exchange_inbox_version(f->sx, 0), 0);
	assert_int_equal(exchange_learner_start(f->lx, f->params), 0);

	assert_int_equal(send_update(f, 0, 4, ENC_F32, v0, 600, 0, &e), 0);
	assert_int_equal(send_update(f, 1, 6, ENC_BF16, v1, 700, 0, &e), 0);
	/* a bad update after a good one leaves the good one in place */
	assert_int_equal(send_update(f, 0, 5, ENC_F32, v0, 600, -8, &e), -1);
	assert_int_equal(exchange_inbox_version(f->sx, 0), 4);
	assert_int_equal(exchange_learner_start(f->lx, f->params), 1);
	/* Update.tokens reaches the learner: the newest of its updates' */
	assert_int_equal(exchange_job_tokens(f->lx), 6000);
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

/*
 * An update in parts is put together and applied whole; a duplicated
 * part, or a stream that ends between parts, leaves the learner on the
 * version it had (never a torn fragment).
 */
static void updates_in_parts(void **state)
{
	struct fx *f = *state;
	float v[600], w[700];
	struct sidecar_metrics m;
	struct err e;

	for (int i = 0; i < 700; i++)
		w[i] = -1.0f;
	for (int i = 0; i < 600; i++)
		v[i] = (float)i * 0.25f;
	assert_int_equal(send_update(f, 1, 1, ENC_F32, w, 700, 0, NULL), 0);
	assert_int_equal(send_update(f, 0, 1, ENC_F32, w, 600, 0, NULL), 0);
	assert_int_equal(send_update_part(f, 0, 2, v, 600, 0, 1000, &e), 0);
	assert_int_equal(exchange_inbox_version(f->sx, 0), 1);   /* not yet */
	assert_int_equal(send_pull(f, 1, 3), 0);   /* other kinds may come */
	assert_int_equal(send_update_part(f, 0, 2, v, 600, 1000, 1400, &e), 0);
	assert_int_equal(exchange_inbox_version(f->sx, 0), 2);
	assert_int_equal(exchange_learner_start(f->lx, f->params), 1);
	for (int i = 0; i < 600; i++)
		assert_true(f->params[500 + i] == v[i]);
	/* a part sent twice: refused, version 2 stays */
	assert_int_equal(send_update_part(f, 0, 3, w, 600, 0, 1000, &e), 0);
	assert_int_equal(send_update_part(f, 0, 3, w, 600, 0, 1000, &e), -1);
	assert_non_null(strstr(e.msg, "update part at offset 0, expected 1000: "
			       "duplicated or out of order"));
	assert_int_equal(send_update_part(f, 0, 3, w, 600, 1000, 1400, &e), -1);
	assert_non_null(strstr(e.msg, "its first part is missing"));
	/* the stream ends between two parts: the first is dropped */
	assert_int_equal(send_update_part(f, 0, 4, w, 600, 0, 1000, &e), 0);
	sidecar_stream_begin(f->s, 0);
	assert_int_equal(send_update_part(f, 0, 4, w, 600, 1000, 1400, &e), -1);
	assert_int_equal(exchange_inbox_version(f->sx, 0), 2);
	/* more than the fragment's largest payload, before any allocation */
	assert_int_equal(send_update_part(f, 0, 5, w, 100000, 0, 8, &e), -1);
	assert_non_null(strstr(e.msg, "more than the 2400 its fragment can have"));
	sidecar_get_metrics(f->s, &m);
	assert_int_equal(m.parts_received, 4);
	assert_int_equal(m.updates_rejected, 4);
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
	sidecar_stream_begin(f->s, 0);
	f->s->links[0].connected = 1;
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
	sidecar_stream_begin(f->s, 0);
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
	assert_int_equal(f->s->links[0].rehello, 0);
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
	assert_int_equal(f->s->links[0].rehello, 1);           /* a new stream, please */
	assert_int_equal(exchange_resume(lx2, &rs), 0);   /* the syncer says */
	/* the new stream's Hello spoke for lx2 (client.c send_hello) */
	f->s->links[0].hello_incarnation = st.incarnation;
	f->s->links[0].rehello = 0;
	assert_int_equal(send_welcome(f, 2, 0, 0.0, 320, NULL), 0);
	assert_int_equal(exchange_resume(lx2, &rs), 1);
	assert_int_equal(rs, 320);

	/* the syncer is away when lx2, at 400, is killed: 400 at once */
	learner_at(lx2, 400);
	sidecar_learner_stats(f->s, &st);
	sidecar_stream_begin(f->s, 0);                   /* the stream ended */
	assert_int_equal(exchange_open(f->dir, EXCHANGE_LEARNER, &f->ft, &lx3,
				       NULL), 0);
	learner_at(lx3, 0);
	sidecar_learner_stats(f->s, &st);
	assert_int_equal(f->s->m.learner_restarts, 2);
	assert_int_equal(f->s->links[0].rehello, 0);
	assert_int_equal(exchange_resume(lx3, &rs), 1);
	assert_int_equal(rs, 400);
	assert_int_equal(exchange_resume(lx2, &rs), 0);
	exchange_close(lx3);
	exchange_close(lx2);
}

/* The stats' seqlock word, as the learner's writer leaves it. */
static void stats_seq(struct fx *f, uint64_t seq)
{
	char path[128];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", f->dir, EXCHANGE_FILE);
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, &seq, sizeof(seq), offsetof(struct xhdr, st_seq)),
			 sizeof(seq));
	close(fd);
}

/*
 * A learner preempted (or killed) between the two stores of its stats'
 * seqlock leaves them unreadable for a while: the sidecar's reads give
 * the last consistent stats, not zeros, whose incarnation 0 in a Hello
 * would say no learner is attached (and the syncer would take no Beat).
 */
static void stats_being_written_keep_the_last(void **state)
{
	struct fx *f = *state;
	struct exchange_stats st, mid;
	uint64_t inc;

	learner_at(f->lx, 300);
	sidecar_learner_stats(f->s, &st);
	inc = st.incarnation;
	assert_true(inc != 0);
	assert_int_equal(st.step, 300);
	stats_seq(f, 7);   /* odd: a write begun, not ended */
	sidecar_learner_stats(f->s, &mid);
	assert_int_equal(mid.incarnation, inc);
	assert_int_equal(mid.step, 300);
	assert_int_equal(f->s->m.learner_restarts, 0);
	assert_int_equal(f->s->links[0].rehello, 0);
	stats_seq(f, 8);   /* the writer is back */
	learner_at(f->lx, 310);
	sidecar_learner_stats(f->s, &st);
	assert_int_equal(st.incarnation, inc);
	assert_int_equal(st.step, 310);
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

/* One learner step that applies what the inbox holds. */
static void learner_applies(struct fx *f)
{
	struct exchange_step st = { .step = 1, .tokens = 1, .step_time = 0.01 };
	struct exchange_poll_result r;

	exchange_poll(f->lx, f->params, &st, &r);
}

/*
 * Updates as deltas, made by the syncer's own part (syncer/updelta.h):
 * the keyframes, then a delta in int8, reach the learner as the values
 * the syncer keeps as the learners' (bit for bit); a delta from a
 * version the sidecar does not hold, or whose sum does not match, is
 * refused with -2 (the stream joins again) and the learner keeps what
 * it had.
 */
static void updates_as_deltas(void **state)
{
	struct fx *f = *state;
	size_t numel[2] = { 600, 700 };
	float t0[600], t1[700], kf[700];
	const uint8_t *pay;
	struct updelta u;
	uint64_t sum;
	size_t plen;
	struct err e;

	for (int i = 0; i < 600; i++)
		t0[i] = 0.01f * (float)(i % 37) - 0.2f;
	for (int i = 0; i < 700; i++)
		t1[i] = 0.5f - 0.001f * (float)i;
	assert_int_equal(updelta_init(&u, 2, numel, ENC_INT8, NULL), 0);
	for (int p = 0; p < 2; p++) {
		const float *hat = updelta_keyframe(&u, p, p ? t1 : t0, 3, &sum);

		memcpy(kf, hat, numel[p] * sizeof(float));
		assert_int_equal(send_update_bytes(f, (uint32_t)p, 3, ENC_F32,
						   (const uint8_t *)kf,
						   4 * numel[p], 0, 0, sum, &e), 0);
	}
	assert_int_equal(exchange_learner_start(f->lx, f->params), 1);
	for (int i = 0; i < 600; i++)
		t0[i] += 0.003f * (float)((i % 7) - 3);
	assert_int_equal(updelta_step(&u, 0, t0, 4, NULL), 0);
	assert_int_equal(updelta_get(&u, 0, 4, &pay, &plen, &sum), 1);
	assert_int_equal(plen, enc_size(ENC_INT8, 600));
	/* from a version not held: refused, the learner keeps version 3 */
	assert_int_equal(send_update_bytes(f, 0, 4, ENC_INT8, pay, plen, 1, 2,
					   sum, &e), -2);
	assert_non_null(strstr(e.msg, "does not hold"));
	/* its sum wrong: refused */
	assert_int_equal(send_update_bytes(f, 0, 4, ENC_INT8, pay, plen, 1, 3,
					   sum ^ 1, &e), -2);
	assert_non_null(strstr(e.msg, "checksum"));
	assert_int_equal(exchange_inbox_version(f->sx, 0), 3);
	assert_int_equal(f->s->m.updates_delta_refused, 2);
	/* the sum refused dropped what it held: a keyframe first */
	updelta_keyframe(&u, 0, t0, 4, &sum);
	assert_int_equal(send_update_bytes(f, 0, 4, ENC_F32,
					   (const uint8_t *)(u.hat + u.off[0]),
					   4 * 600, 0, 0, sum, &e), 0);
	for (int i = 0; i < 600; i++)
		t0[i] -= 0.002f * (float)((i % 5) - 2);
	assert_int_equal(updelta_step(&u, 0, t0, 5, NULL), 0);
	assert_int_equal(updelta_get(&u, 0, 5, &pay, &plen, &sum), 1);
	assert_int_equal(send_update_bytes(f, 0, 5, ENC_INT8, pay, plen, 1, 4,
					   sum, &e), 0);
	learner_applies(f);
	assert_int_equal(exchange_inbox_version(f->sx, 0), 5);
	for (int i = 0; i < 600; i++) {
		assert_true(f->params[500 + i] == u.hat[u.off[0] + (size_t)i]);
		assert_float_equal(f->params[500 + i], t0[i], 0.2f / 127);
	}
	for (int i = 0; i < 500; i++)   /* fragment 1 as its keyframe */
		assert_true(f->params[i] == t1[i]);
	assert_int_equal(f->s->m.updates_delta, 1);
	updelta_release(&u);
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
	sidecar_stream_begin(f->s, 0);
	f->s->links[0].connected = 1;
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

/* ---- the Beat call against a fake syncer ------------------------------- */

/*
 * A plaintext server that welcomes every Train stream and keeps it open,
 * and answers a Beat as `beat` says; it counts the heartbeats on each.
 * Calls are kept until the end (a test's handful). Tags: kind | slot << 3.
 */
enum { F_NEW = 1, F_START, F_RECV, F_CLOSE, F_SHUT };
enum fake_beat { BEAT_UNIMPLEMENTED, BEAT_REFUSED, BEAT_TAKEN };
#define FAKE_CALLS 256

struct fake_call {
	grpc_call *call;
	grpc_call_details det;
	grpc_metadata_array md;
	grpc_byte_buffer *rb, *wb;
	int beat, cancelled;
};

struct fake {
	grpc_server *srv;
	grpc_completion_queue *cq;
	int port, n, pending;
	enum fake_beat beat;
	volatile int stop;
	/* counted on the fake's thread (atomics: the stopper reads them
	 * while it runs), read plainly by the test after the join */
	int beat_calls, train_heartbeats, beat_heartbeats;
	/* seed: a Train stream is asked for fragment 0's seed (a Pull of
	 * round 0, no Welcome: an adopting syncer) and the parts of the
	 * answer are kept: their offsets and lengths, the bytes put
	 * together in got (total bytes), got_bytes of them so far */
	int seed, nparts;
	uint64_t part_off[8], part_len[8], total;
	uint8_t *got;
	int got_bytes;
	struct fake_call c[FAKE_CALLS];
	pthread_t th;
};

static void count(int *n)
{
	__atomic_fetch_add(n, 1, __ATOMIC_RELAXED);
}

static int seen(int *n)
{
	return __atomic_load_n(n, __ATOMIC_RELAXED);
}

static gpr_timespec in_s(double s)
{
	return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
			    gpr_time_from_millis((int64_t)(s * 1000), GPR_TIMESPAN));
}

static void *fake_tag(int kind, int i)
{
	return (void *)(intptr_t)(kind | i << 3);
}

static void fake_batch(struct fake *f, int i, grpc_op *ops, size_t n, int kind)
{
	assert_int_equal(grpc_call_start_batch(f->c[i].call, ops, n,
					       fake_tag(kind, i), NULL), GRPC_CALL_OK);
	f->pending++;
}

static void fake_request(struct fake *f)
{
	struct fake_call *c = &f->c[f->n];

	assert_true(f->n < FAKE_CALLS);
	grpc_call_details_init(&c->det);
	grpc_metadata_array_init(&c->md);
	assert_int_equal(grpc_server_request_call(f->srv, &c->call, &c->det, &c->md,
						  f->cq, f->cq, fake_tag(F_NEW, f->n)),
			 GRPC_CALL_OK);
	f->pending++;
}

static void fake_recv(struct fake *f, int i)
{
	grpc_op op;

	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_RECV_MESSAGE;
	op.data.recv_message.recv_message = &f->c[i].rb;
	fake_batch(f, i, &op, 1, F_RECV);
}

/* A new call i: Train is welcomed, a Beat taken or ended. */
static void fake_accept(struct fake *f, int i)
{
	static grpc_metadata mark;
	static grpc_slice details;
	struct fake_call *c = &f->c[i];
	Ddiloco__V1__SyncerMessage m = DDILOCO__V1__SYNCER_MESSAGE__INIT;
	Ddiloco__V1__Welcome w = DDILOCO__V1__WELCOME__INIT;
	grpc_op ops[3];
	grpc_slice sl;

	memset(ops, 0, sizeof(ops));
	ops[0].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
	ops[0].data.recv_close_on_server.cancelled = &c->cancelled;
	fake_batch(f, i, ops, 1, F_CLOSE);
	c->beat = !grpc_slice_str_cmp(c->det.method, "/ddiloco.v1.Syncer/Beat");
	memset(ops, 0, sizeof(ops));
	ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
	if (c->beat) {
		count(&f->beat_calls);
		if (f->beat == BEAT_TAKEN) {
			mark.key = grpc_slice_from_static_string("ddiloco-beat");
			mark.value = grpc_slice_from_static_string("taken");
			ops[0].data.send_initial_metadata.count = 1;
			ops[0].data.send_initial_metadata.metadata = &mark;
			fake_batch(f, i, ops, 1, F_START);
			fake_recv(f, i);
			return;
		}
		details = grpc_slice_from_static_string("no Beat here");
		ops[1].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
		ops[1].data.send_status_from_server.status =
			f->beat == BEAT_REFUSED ? GRPC_STATUS_FAILED_PRECONDITION
						: GRPC_STATUS_UNIMPLEMENTED;
		ops[1].data.send_status_from_server.status_details = &details;
		fake_batch(f, i, ops, 2, F_START);
		return;
	}
	w.fragments = 2;
	m.kind_case = DDILOCO__V1__SYNCER_MESSAGE__KIND_WELCOME;
	m.welcome = &w;
	if (f->seed) {
		static Ddiloco__V1__Pull pl = DDILOCO__V1__PULL__INIT;

		m.kind_case = DDILOCO__V1__SYNCER_MESSAGE__KIND_PULL;
		m.pull = &pl;
	}
	sl = grpc_slice_malloc(ddiloco__v1__syncer_message__get_packed_size(&m));
	ddiloco__v1__syncer_message__pack(&m, GRPC_SLICE_START_PTR(sl));
	c->wb = grpc_raw_byte_buffer_create(&sl, 1);
	grpc_slice_unref(sl);
	ops[1].op = GRPC_OP_SEND_MESSAGE;
	ops[1].data.send_message.send_message = c->wb;
	fake_batch(f, i, ops, 2, F_START);
	fake_recv(f, i);
}

/* A message on call i: its heartbeats counted; the next receive armed. */
static void fake_message(struct fake *f, int i)
{
	struct fake_call *c = &f->c[i];
	Ddiloco__V1__LearnerMessage *m;
	grpc_byte_buffer_reader r;
	grpc_slice sl;

	assert_true(grpc_byte_buffer_reader_init(&r, c->rb));
	sl = grpc_byte_buffer_reader_readall(&r);
	grpc_byte_buffer_reader_destroy(&r);
	grpc_byte_buffer_destroy(c->rb);
	c->rb = NULL;
	m = ddiloco__v1__learner_message__unpack(NULL, GRPC_SLICE_LENGTH(sl),
						 GRPC_SLICE_START_PTR(sl));
	grpc_slice_unref(sl);
	assert_non_null(m);
	if (m->kind_case == DDILOCO__V1__LEARNER_MESSAGE__KIND_HEARTBEAT) {
		if (c->beat)
			count(&f->beat_heartbeats);
		else
			count(&f->train_heartbeats);
	}
	if (m->kind_case == DDILOCO__V1__LEARNER_MESSAGE__KIND_ANSWER &&
	    f->nparts < 8) {
		const Ddiloco__V1__Answer *a = m->answer;

		f->part_off[f->nparts] = a->part_offset;
		f->part_len[f->nparts++] = a->payload.len;
		if (!f->got && a->payload_total <= (1u << 20)) {
			f->total = a->payload_total;
			f->got = calloc(f->total + 1, 1);
		}
		if (f->got && a->payload_total == f->total &&
		    a->part_offset + a->payload.len <= f->total) {
			memcpy(f->got + a->part_offset, a->payload.data,
			       a->payload.len);
			__atomic_fetch_add(&f->got_bytes, (int)a->payload.len,
					   __ATOMIC_RELAXED);
		}
	}
	ddiloco__v1__learner_message__free_unpacked(m, NULL);
	fake_recv(f, i);
}

static void *fake_main(void *arg)
{
	struct fake *f = arg;
	int notified = 0;

	fake_request(f);
	while (f->pending > 0) {
		grpc_event ev = grpc_completion_queue_next(f->cq, in_s(0.02), NULL);

		if (f->stop && !notified) {
			grpc_server_shutdown_and_notify(f->srv, f->cq,
							fake_tag(F_SHUT, 0));
			grpc_server_cancel_all_calls(f->srv);
			notified = 1;
			f->pending++;
		}
		if (ev.type != GRPC_OP_COMPLETE)
			continue;
		f->pending--;
		int kind = (int)((intptr_t)ev.tag & 7), i = (int)((intptr_t)ev.tag >> 3);

		if (kind == F_NEW && ev.success) {
			f->n++;
			if (!notified)
				fake_request(f);
			fake_accept(f, i);
		} else if (kind == F_NEW) {
			grpc_call_details_destroy(&f->c[i].det);
			grpc_metadata_array_destroy(&f->c[i].md);
		} else if (kind == F_RECV && ev.success && f->c[i].rb) {
			fake_message(f, i);
		}
	}
	return NULL;
}

static void fake_start(struct fake *f, enum fake_beat beat)
{
	memset(f, 0, sizeof(*f));
	f->beat = beat;
	/* the sidecar pings every second, as the syncer allows */
	grpc_arg args[] = {
		{ GRPC_ARG_INTEGER,
		  (char *)GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
		  { .integer = 500 } },
		{ GRPC_ARG_INTEGER, (char *)GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS,
		  { .integer = 1 } },
	};
	grpc_channel_args ca = { 2, args };

	f->cq = grpc_completion_queue_create_for_next(NULL);
	f->srv = grpc_server_create(&ca, NULL);
	grpc_server_register_completion_queue(f->srv, f->cq, NULL);
	grpc_server_credentials *cred = grpc_insecure_server_credentials_create();

	f->port = grpc_server_add_http2_port(f->srv, "127.0.0.1:0", cred);
	grpc_server_credentials_release(cred);
	assert_true(f->port > 0);
	grpc_server_start(f->srv);
	assert_int_equal(pthread_create(&f->th, NULL, fake_main, f), 0);
}

static void fake_stop(struct fake *f)
{
	f->stop = 1;
	pthread_join(f->th, NULL);
	grpc_server_destroy(f->srv);
	grpc_completion_queue_shutdown(f->cq);
	while (grpc_completion_queue_next(f->cq, gpr_inf_future(GPR_CLOCK_REALTIME),
					  NULL).type != GRPC_QUEUE_SHUTDOWN)
		;
	grpc_completion_queue_destroy(f->cq);
	for (int i = 0; i < f->n; i++) {
		grpc_call_unref(f->c[i].call);
		grpc_call_details_destroy(&f->c[i].det);
		grpc_metadata_array_destroy(&f->c[i].md);
		if (f->c[i].wb)
			grpc_byte_buffer_destroy(f->c[i].wb);
		if (f->c[i].rb)
			grpc_byte_buffer_destroy(f->c[i].rb);
	}
}

/* What a run against the fake waits for: true when the fake's counts
 * say it is over. */
typedef int (*fake_until)(struct fake *f);

struct stopper {
	volatile sig_atomic_t stop;
	struct fake *f;
	fake_until until;
	double seconds;
	int freeze_after;
	struct slowlink *link;
};

/* Stops the sidecar once st->until holds, or `seconds` after the start
 * (after the freeze, with a link); with a link, freezes every connection
 * through it but the first (Train's) once the fake has `freeze_after`
 * heartbeats on the Beat. */
static void *stopper_main(void *arg)
{
	struct stopper *st = arg;
	double end = clock_mono() + st->seconds;
	int frozen = !st->link;

	for (;;) {
		if (!frozen && seen(&st->f->beat_heartbeats) >= st->freeze_after) {
			for (int i = 1; i < st->link->n; i++)
				st->link->c[i].frozen = 1;
			frozen = 1;
			end = clock_mono() + st->seconds;
		}
		if ((frozen && st->until(st->f)) || clock_mono() > end)
			break;
		sleep_seconds(0.01);
	}
	st->stop = 1;
	return NULL;
}

/* The fixture's sidecar, pointed at a fake syncer answering Beat as
 * `beat`, run until `until` holds or `seconds` pass (the test's asserts
 * say which it had to be); its metrics in *m, the fake's counts in *f.
 * freeze_after > 0: through a slowlink.h proxy whose Beat connection goes
 * silent once the fake has that many heartbeats on it. */
static void run_against_fake(struct fx *fx, enum fake_beat beat,
			     fake_until until, double seconds, int freeze_after,
			     struct fake *f, struct sidecar_metrics *m)
{
	struct stopper st = { 0, f, until, seconds, freeze_after, NULL };
	struct sidecar_opts o = { .learner_id = 2, .job = "t",
				  .backoff_min = 0.05, .backoff_max = 0.1 };
	struct slowlink link;
	char target[64];
	pthread_t th;
	struct err e;

	grpc_init();
	fake_start(f, beat);
	snprintf(target, sizeof(target), "127.0.0.1:%d", f->port);
	if (freeze_after > 0) {
		assert_int_equal(slowlink_start(&link, f->port, 0, 0), 0);
		snprintf(target, sizeof(target), "127.0.0.1:%d", link.port);
		st.link = &link;
	}
	o.target = target;
	sidecar_free(fx->s);
	fx->s = sidecar_new(&o, fx->sx, &fx->ft, &e);
	assert_non_null(fx->s);
	assert_int_equal(pthread_create(&th, NULL, stopper_main, &st), 0);
	/* 1: stopped, neither done nor refused (a Beat's refusal is not the
	 * learner's) */
	assert_int_equal(sidecar_run(fx->s, &st.stop, &e), 1);
	pthread_join(th, NULL);
	/* both loops turned to the end: /healthz would have said ok */
	assert_true(fx->s->turned_ms[0] > 0 && fx->s->turned_ms[1] > 0);
	assert_true(sidecar_stuck(fx->s, clock_mono()) < 1.0);
	sidecar_get_metrics(fx->s, m);
	if (st.link)
		slowlink_stop(&link);
	fake_stop(f);
	grpc_shutdown();
}

/* sidecar_stuck: 0 before the loops start; then the older of their
 * last turns. */
static void a_stuck_loop_is_seen(void **state)
{
	struct fx *f = *state;
	double now = clock_mono();

	assert_true(sidecar_stuck(f->s, now) == 0);
	f->s->turned_ms[0] = (uint64_t)((now - 1) * 1e3);
	assert_true(sidecar_stuck(f->s, now) == 0);   /* the bridge not yet */
	f->s->turned_ms[1] = (uint64_t)((now - 12) * 1e3);
	assert_true(fabs(sidecar_stuck(f->s, now) - 12) < 0.01);
	assert_true(sidecar_stuck(f->s, now) > SIDECAR_STUCK_SECONDS);
	f->s->turned_ms[1] = f->s->turned_ms[0];
	assert_true(fabs(sidecar_stuck(f->s, now) - 1) < 0.01);
}

static int ten_on_the_beat(struct fake *f)
{
	return seen(&f->beat_heartbeats) >= 10;
}

static int ten_on_train(struct fake *f)
{
	return seen(&f->train_heartbeats) >= 10;
}

static int refused_thrice(struct fake *f)
{
	return seen(&f->beat_calls) >= 3 && ten_on_train(f);
}

static int a_second_beat(struct fake *f)
{
	return seen(&f->beat_calls) >= 2;
}

static int seed_whole(struct fake *f)
{
	return f->total && seen(&f->got_bytes) >= (int)f->total;
}

/*
 * A payload larger than a message goes in parts (docs/protocol.md,
 * Messages in parts), here an adopting syncer's seed request: with the
 * sidecar's messages held to 64 KiB (the test knob), fragment 0's seed
 * of 80000 bytes goes as a part of 65280 bytes and one of 14720, which
 * put together are the seed.
 */
static void a_seed_goes_in_parts(void **state)
{
	static const struct frag_tensor big[2] = {
		{ .offset = 0, .numel = 20000 }, { .offset = 20000, .numel = 20000 },
	};
	struct fake *f = calloc(1, sizeof(*f));
	struct stopper st = { 0, f, seed_whole, 20, 0, NULL };
	struct sidecar_opts o = { .learner_id = 2, .job = "t",
				  .backoff_min = 0.05, .backoff_max = 0.1,
				  .max_message = 65536 };
	char dir[] = "/tmp/ddsc-seed-XXXXXX", target[64];
	struct sidecar_metrics m;
	struct frag_table ft;
	struct exchange *sx;
	struct sidecar *s;
	float *params = malloc(40000 * sizeof(float));
	pthread_t th;
	struct err e;

	(void)state;
	assert_non_null(f);
	assert_non_null(params);
	assert_non_null(mkdtemp(dir));
	for (int i = 0; i < 40000; i++)
		params[i] = (float)i * 0.001f;
	assert_int_equal(frag_table_init(&ft, big, 2, 2, NULL), 0);
	assert_int_equal(exchange_open(dir, EXCHANGE_SIDECAR, &ft, &sx, NULL), 0);
	assert_int_equal(exchange_write_seed(dir, &ft, params, NULL), 0);
	grpc_init();
	fake_start(f, BEAT_TAKEN);
	f->seed = 1;   /* read once the sidecar's call arrives */
	snprintf(target, sizeof(target), "127.0.0.1:%d", f->port);
	o.target = target;
	o.seed_dir = dir;
	s = sidecar_new(&o, sx, &ft, &e);
	assert_non_null(s);
	assert_int_equal(s->send_cap, 65536);
	assert_int_equal(pthread_create(&th, NULL, stopper_main, &st), 0);
	assert_int_equal(sidecar_run(s, &st.stop, &e), 1);
	pthread_join(th, NULL);
	sidecar_get_metrics(s, &m);
	fake_stop(f);
	grpc_shutdown();
	assert_int_equal(f->total, 80000);
	assert_int_equal(f->nparts, 2);
	assert_int_equal(f->part_off[0], 0);
	assert_int_equal(f->part_len[0], 65536 - WIRE_PART_SLACK);
	assert_int_equal(f->part_off[1], 65536 - WIRE_PART_SLACK);
	assert_int_equal(f->part_len[1], 80000 - (65536 - WIRE_PART_SLACK));
	assert_memory_equal(f->got, params, 80000);   /* fragment 0: tensor 0 */
	assert_int_equal(m.parts_sent, 2);
	sidecar_free(s);
	exchange_close(sx);
	frag_table_release(&ft);
	assert_int_equal(testlib_rmtree(dir), 0);
	free(f->got);
	free(f);
	free(params);
}

/*
 * docs/sidecar.md, Heartbeats on their own connection: taken, the Beat
 * carries the heartbeats; refused, they go on Train and the Beat is tried
 * again; a syncer without the method is not asked again.
 */
static void heartbeats_go_on_the_beat_or_fall_back(void **state)
{
	struct fx *fx = *state;
	struct sidecar_metrics m;
	struct fake *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	/* heartbeats 50 ms apart (the first 40 of a stream), until ten came
	 * on the Beat */
	run_against_fake(fx, BEAT_TAKEN, ten_on_the_beat, 20, 0, f, &m);
	assert_int_equal(m.welcomes, 1);
	assert_int_equal(f->beat_calls, 1);
	assert_true(f->beat_heartbeats >= 10);
	assert_true(f->train_heartbeats <= 5);   /* before the Beat was taken */
	/* sent, less the one a call may have had in flight at the stop */
	assert_in_range(m.beat_heartbeats_sent, (uint64_t)f->beat_heartbeats,
			(uint64_t)f->beat_heartbeats + 1);
	assert_in_range(m.heartbeats_sent,
			(uint64_t)(f->beat_heartbeats + f->train_heartbeats),
			(uint64_t)(f->beat_heartbeats + f->train_heartbeats) + 2);

	run_against_fake(fx, BEAT_REFUSED, refused_thrice, 20, 0, f, &m);
	assert_int_equal(m.welcomes, 1);
	assert_true(f->beat_calls >= 3);         /* again after 50-100 ms */
	assert_int_equal(f->beat_heartbeats, 0);
	assert_int_equal(m.beat_heartbeats_sent, 0);
	assert_true(f->train_heartbeats >= 10);
	assert_in_range(m.heartbeats_sent, (uint64_t)f->train_heartbeats,
			(uint64_t)f->train_heartbeats + 1);

	/* not asked again: ten heartbeats on Train (about 0.5 s) is the
	 * window, where a Beat tried again after 50-100 ms would have come
	 * several times */
	run_against_fake(fx, BEAT_UNIMPLEMENTED, ten_on_train, 20, 0, f, &m);
	assert_int_equal(m.welcomes, 1);
	assert_int_equal(f->beat_calls, 1);
	assert_int_equal(m.beat_heartbeats_sent, 0);
	assert_true(f->train_heartbeats >= 10);
	free(f);
}

/*
 * A Beat whose connection goes silent (a link that carries nothing more
 * and closes nothing): the Beat's keepalive (1 s pings, 4 s timeout:
 * BEAT_KEEPALIVE_TIMEOUT_MS) ends it within about 5 s, and a new Beat is
 * opened on a new connection. With the Train stream's 20 s timeout the
 * heartbeats sent on the dead Beat would be lost for 21 s and no second
 * Beat would come within the test's 7 s after the freeze.
 */
static void a_silent_beat_is_replaced(void **state)
{
	struct fx *fx = *state;
	struct sidecar_metrics m;
	struct fake *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	run_against_fake(fx, BEAT_TAKEN, a_second_beat, 7, 10, f, &m);
	assert_int_equal(m.welcomes, 1);
	assert_true(f->beat_heartbeats >= 10);   /* before the freeze */
	assert_int_equal(f->beat_calls, 2);
	free(f);
}

/* Sets *stop after `seconds` unless told to end first. */
struct watchdog {
	volatile sig_atomic_t stop;
	volatile int end;
	double seconds;
};

static void *watchdog_main(void *arg)
{
	struct watchdog *w = arg;
	double until = clock_mono() + w->seconds;

	while (!w->end && clock_mono() < until)
		sleep_seconds(0.01);
	w->stop = 1;
	return NULL;
}

/* The job file of the command-line test: the sidecar's table is its
 * reference GPT's. */
static void write_job(const char *path)
{
	FILE *fp = fopen(path, "w");

	assert_non_null(fp);
	fprintf(fp, "apiVersion: ddiloco.io/v1alpha1\n"
		"kind: DecoupledTrainingJob\n"
		"metadata: {name: ver}\n"
		"spec:\n"
		"  learners: {replicas: 2}\n"
		"  model: {vocabSize: 16, context: 8, layers: 1, heads: 2, "
		"channels: 8, seed: 7}\n"
		"  data: {path: /nonexistent}\n"
		"  optimizer: {batchSize: 4}\n"
		"  syncer: {fragments: 3, insecure: true}\n"
		"  budget: {tokens: 6400}\n");
	fclose(fp);
}

/*
 * A learner of another release (docs/abi.md, Versions): one that comes
 * while the sidecar runs ends sidecar_run within its loop, with the
 * message; `ddiloco sidecar` that finds one at its start exits
 * CLI_EXIT_MISMATCH with the message as its termination message.
 */
static void a_learner_of_another_release_ends_the_sidecar(void **state)
{
	struct fx *f = *state;
	struct exchange_version old = { .abi = 2, .exchange = 3,
					.release = "0.3.0" };
	struct watchdog w = { .seconds = 20 };
	char want[256], job[128], log[128], got[256] = "";
	struct exchange *x = NULL;
	pthread_t th;
	struct err e = { "" };
	double t0 = clock_mono();
	pid_t pid;
	int status = -1;
	FILE *fp;

	snprintf(want, sizeof(want), "learner library 0.3.0 (ABI 2, exchange 3) "
		 "and sidecar %s (ABI %d, exchange %d) do not match",
		 DDILOCO_VERSION, EXCHANGE_ABI_VERSION, EXCHANGE_VERSION);
	exchange_close(f->lx);
	f->lx = NULL;
	assert_int_equal(exchange_open_version(f->dir, EXCHANGE_LEARNER, &f->ft,
					       &old, &x, NULL),
			 EXCHANGE_VERSION_MISMATCH);
	assert_int_equal(pthread_create(&th, NULL, watchdog_main, &w), 0);
	assert_int_equal(sidecar_run(f->s, &w.stop, &e), EXCHANGE_VERSION_MISMATCH);
	w.end = 1;
	pthread_join(th, NULL);
	assert_true(clock_mono() - t0 < 20);
	assert_string_equal(e.msg, want);

	/* the command: refused at its open, exit 78, the message left */
	snprintf(job, sizeof(job), "%s/job.yaml", f->dir);
	snprintf(log, sizeof(log), "%s/termination-log", f->dir);
	write_job(job);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char args[] = "sidecar\0--job\0\0--learner\0" "1\0--exchange\0\0"
			      "--syncer\0" "127.0.0.1:1\0--termination-log\0";
		char *argv[12], *a = args;

		/* cmd_sidecar takes argv as main has it: writable strings */
		for (int i = 0; i < 11; i++) {
			argv[i] = a;
			a += strlen(a) + 1;
		}
		argv[2] = job;
		argv[6] = f->dir;
		argv[10] = log;
		argv[11] = NULL;
		_exit(cmd_sidecar(11, argv));
	}
	assert_eventually(waitpid(pid, &status, WNOHANG) == pid, 20);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), CLI_EXIT_MISMATCH);
	assert_int_equal(CLI_EXIT_MISMATCH, 78);
	fp = fopen(log, "r");
	assert_non_null(fp);
	assert_non_null(fgets(got, sizeof(got), fp));
	fclose(fp);
	assert_string_equal(got, want);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(welcome_checks_the_model, setup,
						teardown),
		cmocka_unit_test_setup_teardown(updates_in_parts, setup, teardown),
		cmocka_unit_test(a_seed_goes_in_parts),
		cmocka_unit_test_setup_teardown(a_stuck_loop_is_seen, setup, teardown),
		cmocka_unit_test_setup_teardown(updates_reach_the_learner_or_are_refused,
						setup, teardown),
		cmocka_unit_test_setup_teardown(answers_queue_bounded, setup,
						teardown),
		cmocka_unit_test_setup_teardown(resume_step_reaches_the_learner,
						setup, teardown),
		cmocka_unit_test_setup_teardown(int4_updates_reach_the_learner,
						setup, teardown),
		cmocka_unit_test_setup_teardown(stats_being_written_keep_the_last,
						setup, teardown),
		cmocka_unit_test_setup_teardown(updates_as_deltas, setup,
						teardown),
		cmocka_unit_test_setup_teardown(feedback_keeps_the_sum, setup,
						teardown),
		cmocka_unit_test_setup_teardown(no_feedback_drifts, setup,
						teardown),
		cmocka_unit_test_setup_teardown(residual_dropped_on_restart,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			heartbeats_go_on_the_beat_or_fall_back, setup, teardown),
		cmocka_unit_test_setup_teardown(
			a_learner_of_another_release_ends_the_sidecar, setup,
			teardown),
		cmocka_unit_test_setup_teardown(a_silent_beat_is_replaced, setup,
						teardown),
		cmocka_unit_test_setup_teardown(
			heartbeats_come_early_on_a_new_stream,
			setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
