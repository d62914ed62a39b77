/*
 * client: the sidecar's gRPC side on the C core (docs/design.md §7).
 *
 * One channel per syncer shard (one for an unsharded job; docs/syncer.md,
 * Shards), one call (the Train stream) at a time on each, one completion
 * queue for all of them, polled by the client thread with a short
 * deadline as its clock. Each shard's client keeps its own stream,
 * retries and Beat; fragment p's answers go on the stream of its owner,
 * and the sidecar is done when every shard said "job done". Per call: a start batch (send + receive initial metadata),
 * the status batch, one receive and at most one send in flight. A call's
 * context is freed only when all its batches have completed.
 *
 * Send order: Hello first, then a due heartbeat, then the queued answer of
 * the oldest round. Hello and heartbeats are packed by common/wire.h when
 * sent; an answer goes out as two slices — the framing bridge.c made and
 * the encoded payload — so its bytes are not copied again. A payload
 * larger than the syncer takes in one message (its Welcome's
 * max_message) goes in parts (docs/protocol.md, Messages in parts): the
 * call's `out` keeps it, and each send takes the next part, a framing
 * and a slice of the payload, until it is all out; heartbeats may go
 * between parts, nothing else does. What arrives goes to sidecar_handle
 * (bridge.c).
 *
 * Heartbeats (docs/sidecar.md, Heartbeats on their own connection): after
 * the Train stream's Welcome a Beat call is opened on a second channel,
 * which gRPC gives a TCP connection of its own (a local subchannel pool),
 * so that a heartbeat does not wait behind an answer of many MB. It sends
 * a Hello naming the learner and its incarnation; once the syncer's
 * initial metadata says it was taken, the heartbeats go there. Until
 * then, and whenever it failed, they go on Train, and the Beat is tried
 * again after a backoff (not again for this Train stream when the syncer
 * does not know the method). It ends with the Train stream.
 *
 * With TLS (sidecar_opts.tls) the channel trusts the job's CA only and
 * shows this learner's certificate; on top of the chain, the server's
 * certificate must carry the identity ddiloco://<job>/syncer (common/pki.h),
 * checked once per call before its first message or its status is used
 * (docs/security.md).
 */
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/pki.h"
#include "common/util.h"
#include "sidecar/sidecar_int.h"

#define TICK_MS 1

/*
 * A keepalive ping goes out behind what is already written (the
 * transport's write buffer, the socket's send buffer: Linux grows it to
 * 4 MiB) and its ack comes back behind the syncer's own writes, each about
 * 2 s at 20 Mbit/s. With 52 MB fragments on 20 Mbit/s links the 2 s this
 * timeout was ended streams again and again, and every answer cut off
 * that way was sent again from the start (docs/sidecar.md, Thin links).
 * A hung syncer is found 20 s later instead.
 */
#define KEEPALIVE_TIMEOUT_MS 20000
/*
 * The Beat's connection carries heartbeats only: nothing of ours is
 * written ahead of its pings. A Beat whose connection died without a
 * word (a link that drops everything, a middlebox that forgot it) is
 * found after 1 + 4 s, and its heartbeats go back on Train, instead of
 * being held for the 20 s above. On a link the Train connection fills,
 * the Beat's pings can still queue behind those bytes; a Beat ended
 * falsely costs only heartbeats on Train until it is opened again.
 */
#define BEAT_KEEPALIVE_TIMEOUT_MS 4000
/* one attempt to connect: TCP and the TLS handshake; a handshake takes a
 * few round trips, and an address that no longer answers costs this much
 * before the next try */
#define CONNECT_TIMEOUT_MS 2000
/* a Beat neither taken nor refused this long after its start is stuck on
 * its way (a connection that never came up for it): it is cancelled and
 * tried again, its heartbeats on Train meanwhile */
#define BEAT_TAKE_S 10.0
/* bytes the transport takes per write; more is not faster on loopback
 * (docs/sidecar.md, levers) and waits in front of every ping */
#define WRITE_BUFFER (1 << 20)
/* the receive window: how much of an update the syncer may have written
 * ahead, all of it in front of the ack of our next ping */
#define LOOKAHEAD (8 << 20)

enum tag_kind { T_START, T_RECV, T_SEND, T_STATUS };

struct call;

struct tag {
	struct call *c;
	enum tag_kind kind;
};

struct client;

struct call {
	struct client *cl;       /* whose call */
	grpc_call *call;
	int pending;             /* batches not completed yet */
	int ended;               /* status received */
	int recv_armed, send_busy, hello_sent;
	int welcomed_here;       /* a Welcome came on this call */
	int early_heartbeats;    /* left (sidecar_heartbeat_gap) */
	int peer;                /* 0 unchecked, 1 the job's syncer, -1 not */
	int beat;                /* a Beat call, not the Train stream */
	int taken;               /* Beat: the syncer sent its metadata */
	double begun;            /* Beat: when it was started */
	grpc_metadata_array md_initial, md_trailing;
	grpc_status_code status;
	grpc_slice details;
	grpc_byte_buffer *recv_buf, *send_buf;
	size_t send_len;
	int send_frag;           /* -1: not an answer */
	double send_pulled_at;
	struct {                 /* an answer (or seed) going out in parts */
		int active;
		struct wire_answer a;   /* its fields, no payload */
		grpc_slice payload;
		size_t sent;
		int frag;               /* -1: a seed */
		double pulled_at;
	} out;
	struct tag t_start, t_recv, t_send, t_status;
};

struct client {
	struct sidecar *s;
	int shard;               /* of the syncer: its link (sidecar_int.h) */
	struct link *lk;
	grpc_completion_queue *cq;   /* every shard's client shares it */
	grpc_channel *ch;
	struct call *live;       /* the current stream, if any */
	grpc_channel *beat_ch;   /* the Beat calls', on a connection of
				  * their own; made when first needed */
	struct call *beat;       /* the current Beat call, if any */
	double beat_backoff, beat_next;   /* its retries */
	int beat_off;            /* the syncer has no Beat: not again for
				  * this Train stream */
	int draining;            /* ended streams whose batches drain */
	double backoff, next_attempt, next_heartbeat, next_warn;
	double next_peer_warn;   /* a wrong server: one line every 30 s */
	int done, refused;
	struct err refusal;
	struct rng rng;
};

/* The client thread: one client per syncer shard, one queue. */
struct clients {
	int n;
	struct client *cl;
	grpc_completion_queue *cq;
	char kick;               /* its address: the tag that only wakes
				  * the loop (kick) */
};

static gpr_timespec after_ms(int ms)
{
	return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
			    gpr_time_from_millis(ms, GPR_TIMESPAN));
}

static grpc_arg int_arg(const char *key, int v)
{
	grpc_arg a;

	a.type = GRPC_ARG_INTEGER;
	a.key = (char *)key;   /* grpc_arg has no const; it is only read */
	a.value.integer = v;
	return a;
}

/* beat: the Beat's channel, on a connection of its own (not shared with
 * the Train channel to the same target) and a shorter keepalive */
static grpc_channel *make_channel(const struct sidecar *s, const char *target,
				  const struct tls_files *tls, int beat)
{
	grpc_arg args[] = {
		int_arg(GRPC_ARG_KEEPALIVE_TIME_MS, 1000),
		int_arg(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, beat ? BEAT_KEEPALIVE_TIMEOUT_MS
							  : KEEPALIVE_TIMEOUT_MS),
		int_arg(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1),
		int_arg(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0),
		/* what the table's largest update needs, and what we send:
		 * larger payloads go in parts (docs/protocol.md) */
		int_arg(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, (int)s->recv_limit),
		int_arg(GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, (int)s->send_cap),
		int_arg(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100),
		int_arg(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500),
		/*
		 * gRPC takes this as the shortest time it gives one attempt
		 * to connect, TLS handshake included: at 100 ms a handshake
		 * slower than the backoff (a long link, a loaded machine)
		 * was cut off every time and the sidecar never connected
		 */
		int_arg(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, CONNECT_TIMEOUT_MS),
		/*
		 * a restarted syncer pod comes back at a new address under the
		 * same name: re-resolve within a second, not gRPC's 30 s
		 */
		int_arg(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 1000),
		int_arg(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, (16 << 20) - 1),
		int_arg(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, LOOKAHEAD),
		int_arg(GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE, WRITE_BUFFER),
		int_arg(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1),   /* last */
	};
	grpc_channel_args ca = { sizeof(args) / sizeof(args[0]) - !beat, args };
	grpc_channel_credentials *cred;
	grpc_channel *ch;

	if (tls) {
		grpc_ssl_pem_key_cert_pair pair = { tls->key, tls->cert };

		cred = grpc_ssl_credentials_create_ex(tls->ca, &pair, NULL, NULL);
	} else {
		cred = grpc_insecure_credentials_create();
	}
	ch = grpc_channel_create(target, cred, &ca);

	grpc_channel_credentials_release(cred);
	return ch;
}

static void call_free(struct call *c)
{
	grpc_metadata_array_destroy(&c->md_initial);
	grpc_metadata_array_destroy(&c->md_trailing);
	grpc_slice_unref(c->details);
	if (c->recv_buf)
		grpc_byte_buffer_destroy(c->recv_buf);
	if (c->send_buf)
		grpc_byte_buffer_destroy(c->send_buf);
	if (c->out.active)
		grpc_slice_unref(c->out.payload);
	if (c->call)
		grpc_call_unref(c->call);
	free(c);
}

static void end_beat(struct client *cl);

/* When to try again after *backoff (±20 % jitter); *backoff doubles up
 * to backoff_max. The stream's retries and the Beat's each have one. */
static double backoff_next(struct client *cl, double *backoff)
{
	double at = clock_mono() + *backoff * (0.8 + 0.4 * rng_uniform(&cl->rng));

	*backoff *= 2;
	if (*backoff > cl->s->o.backoff_max)
		*backoff = cl->s->o.backoff_max;
	return at;
}

static void schedule_retry(struct client *cl)
{
	cl->next_attempt = backoff_next(cl, &cl->backoff);
}

/* The live stream is over (or failed to start): keep its context until
 * its batches drain, and plan the next attempt. */
static void end_live(struct client *cl)
{
	struct sidecar *s = cl->s;
	struct call *c = cl->live;

	if (!c)
		return;
	cl->live = NULL;
	grpc_call_cancel(c->call, NULL);
	cl->draining++;   /* freed by reap when its last batch completed */
	end_beat(cl);     /* the next Train stream opens its own */
	cl->beat_off = 0;
	cl->beat_backoff = s->o.backoff_min;
	cl->beat_next = 0;
	pthread_mutex_lock(&s->mu);
	cl->lk->connected = 0;
	cl->lk->welcomed = 0;
	pthread_mutex_unlock(&s->mu);
	sidecar_stream_begin(s, cl->shard);   /* drop answers meant for it */
	if (!cl->done && !cl->refused)
		schedule_retry(cl);
}

/* Frees an ended call once none of its batches is pending. */
static void reap(struct client *cl, struct call *c)
{
	if (c != cl->live && c != cl->beat && c->pending == 0) {
		cl->draining--;
		call_free(c);
	}
}

static int start_batch(struct call *c, const grpc_op *ops, size_t n,
		       struct tag *t)
{
	grpc_call_error rc = grpc_call_start_batch(c->call, ops, n, t, NULL);

	if (rc != GRPC_CALL_OK) {
		log_error("grpc: start_batch failed (%d)", (int)rc);
		return -1;
	}
	c->pending++;
	return 0;
}

static void arm_recv(struct call *c)
{
	grpc_op op = { 0 };

	op.op = GRPC_OP_RECV_MESSAGE;
	op.data.recv_message.recv_message = &c->recv_buf;
	if (!start_batch(c, &op, 1, &c->t_recv))
		c->recv_armed = 1;
}

/* A new call of method on ch, its tags and metadata set up. */
static struct call *call_new(struct client *cl, grpc_channel *ch,
			     const char *method)
{
	struct call *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->cl = cl;
	c->t_start = (struct tag){ c, T_START };
	c->t_recv = (struct tag){ c, T_RECV };
	c->t_send = (struct tag){ c, T_SEND };
	c->t_status = (struct tag){ c, T_STATUS };
	c->send_frag = -1;
	c->details = grpc_empty_slice();
	grpc_metadata_array_init(&c->md_initial);
	grpc_metadata_array_init(&c->md_trailing);
	c->call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS,
					   cl->cq, grpc_slice_from_static_string(method),
					   NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
	return c;
}

/* The batches every call opens with: metadata both ways, and its status. */
static int call_begin(struct call *c)
{
	grpc_op ops[2];

	memset(ops, 0, sizeof(ops));
	ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
	ops[1].op = GRPC_OP_RECV_INITIAL_METADATA;
	ops[1].data.recv_initial_metadata.recv_initial_metadata = &c->md_initial;
	if (start_batch(c, ops, 2, &c->t_start))
		return -1;
	memset(ops, 0, sizeof(ops));
	ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
	ops[0].data.recv_status_on_client.trailing_metadata = &c->md_trailing;
	ops[0].data.recv_status_on_client.status = &c->status;
	ops[0].data.recv_status_on_client.status_details = &c->details;
	return start_batch(c, ops, 1, &c->t_status);
}

static void start_call(struct client *cl)
{
	struct sidecar *s = cl->s;
	struct call *c;

	SC_ADD(s, reconnect_attempts, 1);
	grpc_channel_reset_connect_backoff(cl->ch);
	c = call_new(cl, cl->ch, "/ddiloco.v1.Syncer/Train");
	if (!c) {
		schedule_retry(cl);
		return;
	}
	c->early_heartbeats = SIDECAR_EARLY_HEARTBEATS;
	cl->live = c;
	sidecar_stream_begin(s, cl->shard);
	pthread_mutex_lock(&s->mu);
	cl->lk->connected = 1;
	pthread_mutex_unlock(&s->mu);
	if (call_begin(c)) {
		end_live(cl);
		reap(cl, c);
		return;
	}
	arm_recv(c);
}

/* The Beat call is over: drained like a stream (freed by reap), tried
 * again after a backoff; its heartbeats go on Train meanwhile. */
static void end_beat(struct client *cl)
{
	struct call *c = cl->beat;

	if (!c)
		return;
	cl->beat = NULL;
	grpc_call_cancel(c->call, NULL);
	cl->draining++;
	cl->beat_next = backoff_next(cl, &cl->beat_backoff);
}

static void start_beat(struct client *cl)
{
	struct sidecar *s = cl->s;
	struct call *c = NULL;

	if (!cl->beat_ch)
		cl->beat_ch = make_channel(s, cl->lk->target, s->o.tls, 1);
	if (cl->beat_ch)
		c = call_new(cl, cl->beat_ch, "/ddiloco.v1.Syncer/Beat");
	if (!c) {
		cl->beat_next = clock_mono() + cl->beat_backoff;
		return;
	}
	c->beat = 1;
	c->begun = clock_mono();
	cl->beat = c;
	if (call_begin(c)) {
		end_beat(cl);
		reap(cl, c);
	}
}

static int send_bytes(struct call *c, grpc_slice *slices, size_t n,
		      size_t len)
{
	grpc_op op = { 0 };

	c->send_buf = grpc_raw_byte_buffer_create(slices, n);
	for (size_t i = 0; i < n; i++)
		grpc_slice_unref(slices[i]);
	op.op = GRPC_OP_SEND_MESSAGE;
	op.data.send_message.send_message = c->send_buf;
	if (start_batch(c, &op, 1, &c->t_send)) {
		grpc_byte_buffer_destroy(c->send_buf);
		c->send_buf = NULL;
		return -1;
	}
	c->send_busy = 1;
	c->send_len = len;
	return 0;
}

static int send_packed(struct call *c, const struct wire_learner_msg *m)
{
	size_t n = wire_learner_size(m);
	grpc_slice sl = grpc_slice_malloc(n);

	wire_learner_pack(m, GRPC_SLICE_START_PTR(sl));
	c->send_frag = -1;
	return send_bytes(c, &sl, 1, n);
}

static int send_hello(struct client *cl, struct call *c)
{
	struct sidecar *s = cl->s;
	struct wire_learner_msg m = { .kind = WIRE_HELLO };
	struct exchange_stats st;
	uint64_t *sizes = malloc((size_t)s->nfrags * sizeof(uint64_t));
	int rc;

	if (!sizes)
		return -1;
	sidecar_learner_stats(s, &st);
	for (int p = 0; p < s->nfrags; p++)
		sizes[p] = s->ft->frags[p].numel;
	m.hello = (struct wire_hello){
		.learner_id = s->o.learner_id, .fingerprint = s->ft->fingerprint,
		.fragments = (uint32_t)s->nfrags, .nsizes = (size_t)s->nfrags,
		.fragment_sizes = sizes, .incarnation = st.incarnation,
		.step = st.step, .job = s->o.job ? s->o.job : "",
		.evaluator = s->o.evaluator, .max_message = s->recv_limit,
		.takes_delta = 1,
	};
	pthread_mutex_lock(&s->mu);
	cl->lk->hello_incarnation = st.incarnation;
	cl->lk->rehello = 0;   /* this Hello speaks for the learner as it is */
	pthread_mutex_unlock(&s->mu);
	rc = send_packed(c, &m);
	free(sizes);
	return rc;
}

/* The Hello that opens a Beat: the learner and the incarnation of the
 * Hello on Train. */
static int send_beat_hello(struct client *cl, struct call *c)
{
	struct sidecar *s = cl->s;
	struct wire_learner_msg m = { .kind = WIRE_HELLO };

	m.hello = (struct wire_hello){
		.learner_id = s->o.learner_id, .fingerprint = s->ft->fingerprint,
		.fragments = (uint32_t)s->nfrags,
		.job = s->o.job ? s->o.job : "",
	};
	pthread_mutex_lock(&s->mu);
	m.hello.incarnation = cl->lk->hello_incarnation;
	pthread_mutex_unlock(&s->mu);
	return send_packed(c, &m);
}

/* Sends a heartbeat on call c (the Train stream or the Beat) and dates
 * the next one (sidecar_heartbeat_gap, counted per Train stream). */
static int send_heartbeat(struct client *cl, struct call *c, double now)
{
	struct wire_learner_msg m = { .kind = WIRE_HEARTBEAT };
	struct exchange_stats st;

	sidecar_learner_stats(cl->s, &st);
	if (cl->s->o.inflate_tokens > 1)   /* a test knob (sidecar.h) */
		st.tokens_total *= cl->s->o.inflate_tokens;
	m.heartbeat = (struct wire_heartbeat){
		.step = st.step, .tokens = st.tokens_total,
		.step_time = st.step_time, .train_loss = st.loss,
		.incarnation = st.incarnation,
	};
	cl->next_heartbeat = now + sidecar_heartbeat_gap(cl->s,
							 &cl->live->early_heartbeats);
	if (send_packed(c, &m))
		return -1;
	SC_ADD(cl->s, heartbeats_sent, 1);
	if (c->beat)
		SC_ADD(cl->s, beat_heartbeats_sent, 1);
	return 0;
}

/* An evaluator's newest report, when it made one not sent yet
 * (docs/syncer.md, Evaluators). 1 = sent one. */
static int send_evaluation(struct client *cl, struct call *c)
{
	struct sidecar *s = cl->s;
	struct wire_learner_msg m = { .kind = WIRE_EVALUATION };
	struct exchange_eval ev;

	if (exchange_read_eval(s->x, &ev) || ev.count == s->eval_sent)
		return 0;
	m.evaluation = (struct wire_evaluation){
		.round = ev.round, .loss = ev.loss, .tokens = ev.tokens,
	};
	if (send_packed(c, &m))
		return -1;
	s->eval_sent = ev.count;
	SC_ADD(s, evaluations_sent, 1);
	log_debug("evaluation of round %llu sent: loss %.6g",
		 (unsigned long long)ev.round, ev.loss);
	return 1;
}

/* An answer (or seed) with fields a and payload (ours now) to go out
 * in parts, as many as the syncer's limit needs (one when it fits). */
static void out_begin(struct call *c, const struct wire_answer *a,
		      grpc_slice payload, int frag, double pulled_at)
{
	c->out.active = 1;
	c->out.a = *a;
	c->out.payload = payload;
	c->out.sent = 0;
	c->out.frag = frag;
	c->out.pulled_at = pulled_at;
}

/* The next part of c->out: whole when the payload fits in one message,
 * else bytes [sent, sent + room) with part_offset and payload_total. */
static int send_part(struct client *cl, struct call *c)
{
	size_t total = GRPC_SLICE_LENGTH(c->out.payload), room, len, hlen;
	struct wire_answer a = c->out.a;
	uint8_t hdr[WIRE_ANSWER_HDR_MAX];
	grpc_slice sl[2];
	uint64_t peer;
	int last;

	pthread_mutex_lock(&cl->s->mu);
	peer = cl->lk->peer_max;
	pthread_mutex_unlock(&cl->s->mu);
	room = wire_peer_limit(peer);
	if (room > cl->s->send_cap)
		room = cl->s->send_cap;
	room -= WIRE_PART_SLACK;
	len = total - c->out.sent < room ? total - c->out.sent : room;
	a.payload_len = len;
	if (c->out.sent || len < total) {
		a.part_offset = c->out.sent;
		a.payload_total = total;
		SC_ADD(cl->s, parts_sent, 1);
	}
	hlen = wire_answer_header(hdr, &a);
	sl[0] = grpc_slice_from_copied_buffer((const char *)hdr, hlen);
	sl[1] = grpc_slice_sub(c->out.payload, c->out.sent, c->out.sent + len);
	c->out.sent += len;
	last = c->out.sent == total;
	/* an answer counts as sent with its last part (on_send) */
	c->send_frag = last ? c->out.frag : -1;
	c->send_pulled_at = c->out.pulled_at;
	if (last) {
		grpc_slice_unref(c->out.payload);
		c->out.active = 0;
	}
	return send_bytes(c, sl, 2, hlen + len);
}

/* Sends the seed of one fragment an adopting syncer asked for, if any
 * (docs/syncer.md, Model-agnostic jobs). 1 = sent one. */
static int send_seed(struct client *cl, struct call *c)
{
	struct sidecar *s = cl->s;
	size_t n, plen;
	uint8_t *payload;
	float *vals;
	struct err e;
	int p = -1;

	pthread_mutex_lock(&s->mu);
	for (int q = 0; q < s->nfrags && cl->lk->seed_epoch == cl->lk->epoch; q++)
		if (s->seed_wanted[q] && sidecar_link(s, q) == cl->lk) {
			s->seed_wanted[q] = 0;
			p = q;
			break;
		}
	pthread_mutex_unlock(&s->mu);
	if (p < 0)
		return 0;
	n = s->ft->frags[p].numel;
	plen = enc_size(ENC_F32, n);
	vals = malloc(n * sizeof(float));
	payload = malloc(plen);
	if (!vals || !payload ||
	    exchange_read_seed(s->o.seed_dir, s->ft, p, vals, &e) ||
	    enc_encode(ENC_F32, vals, n, payload, &e)) {
		log_error("seed of fragment %d: %s", p,
			  vals && payload ? e.msg : "out of memory");
		free(vals);
		free(payload);
		return 0;
	}
	free(vals);
	out_begin(c, &(struct wire_answer){ .fragment = (uint32_t)p,
		  .round = 0, .encoding = ENC_F32, .payload_len = plen },
		  grpc_slice_new(payload, plen, free), -1, 0);
	log_info("sending the seed of fragment %d (%zu values)", p, n);
	return send_part(cl, c) ? -1 : 1;
}

static void release_hold(void *hold)
{
	exchange_release(hold);
}

/* Sends the queued answer of the oldest round, if any. 1 = sent one. */
static int send_answer(struct client *cl, struct call *c)
{
	struct sidecar *s = cl->s;
	struct qanswer q;
	grpc_slice sl;
	int best = -1;

	pthread_mutex_lock(&s->mu);
	for (int p = 0; p < s->nfrags; p++)
		if (s->queue[p].used && sidecar_link(s, p) == cl->lk &&
		    (best < 0 || s->queue[p].round < s->queue[best].round))
			best = p;
	if (best >= 0) {
		q = s->queue[best];
		memset(&s->queue[best], 0, sizeof(s->queue[best]));
	}
	pthread_mutex_unlock(&s->mu);
	if (best < 0)
		return 0;
	free(q.r_before);   /* it leaves: its residual step stands */
	if (q.hold) {   /* gRPC lets go of the outbox slot when it is sent */
		sl = grpc_slice_new_with_user_data(q.payload, q.plen,
						   release_hold, q.hold);
	} else if (q.plen) {
		sl = grpc_slice_new(q.payload, q.plen, free);
	} else {
		sl = grpc_empty_slice();
		free(q.payload);
	}
	out_begin(c, &q.a, sl, best, q.pulled_at);
	return send_part(cl, c) ? -1 : 1;
}

/* 1 when heartbeats go on the Beat call. */
static int beat_ready(const struct client *cl)
{
	return cl->beat && cl->beat->taken && !cl->beat->ended;
}

/* The Beat call after the Welcome: opened, its Hello, due heartbeats. */
static void pump_beat(struct client *cl, double now)
{
	struct call *b = cl->beat;

	if (cl->s->o.evaluator || !cl->live->welcomed_here || cl->beat_off)
		return;
	if (!b) {
		if (now >= cl->beat_next)
			start_beat(cl);
		return;
	}
	if (!b->taken && !b->ended && now - b->begun > BEAT_TAKE_S) {
		log_info("the Beat was not taken in %.0f s: tried again",
			 BEAT_TAKE_S);
		end_beat(cl);
		return;
	}
	if (b->ended || b->send_busy)
		return;
	if (!b->hello_sent) {
		if (send_beat_hello(cl, b) == 0)
			b->hello_sent = 1;
		return;
	}
	if (beat_ready(cl) && now >= cl->next_heartbeat)
		send_heartbeat(cl, b, now);
}

static void pump_send(struct client *cl)
{
	struct call *c = cl->live;
	double now = clock_mono();
	int welcomed, rehello;

	if (!c || c->ended)
		return;
	pump_beat(cl, now);
	if (c->send_busy)
		return;
	if (!c->hello_sent) {
		if (send_hello(cl, c) == 0)
			c->hello_sent = 1;
		return;
	}
	pthread_mutex_lock(&cl->s->mu);
	welcomed = cl->lk->welcomed;
	rehello = cl->lk->rehello;
	cl->lk->rehello = 0;
	pthread_mutex_unlock(&cl->s->mu);
	if (rehello) {
		/* the learner restarted: a new Hello, so the syncer tells it
		 * where to resume; at once, this is no outage */
		log_info("learner restarted: a new stream to the syncer at '%s'",
			 cl->lk->target);
		end_live(cl);
		cl->backoff = cl->s->o.backoff_min;
		cl->next_attempt = now;
		return;
	}
	if (!welcomed) {
		if (c->out.active)
			send_part(cl, c);
		else
			send_seed(cl, c);
		return;
	}
	if (now >= cl->next_heartbeat && !beat_ready(cl)) {
		send_heartbeat(cl, c, now);
		return;
	}
	if (c->out.active) {   /* the parts of one payload, in a row */
		send_part(cl, c);
		return;
	}
	if (cl->s->o.evaluator && send_evaluation(cl, c))
		return;
	send_answer(cl, c);
}

/* 1 when the call's server showed this job's syncer certificate (or the
 * channel is plaintext); checked once per call, a failure logged once. */
static int peer_ok(struct client *cl, struct call *c)
{
	const struct sidecar_opts *o = &cl->s->o;
	grpc_auth_context *ctx;
	grpc_auth_property_iterator it;
	const grpc_auth_property *prop;
	struct pki_id want = { .role = PKI_ROLE_SYNCER };
	struct err e = { "no server certificate" };
	char *pem = NULL;

	if (!o->tls)
		return 1;
	if (c->peer)
		return c->peer > 0;
	snprintf(want.job, sizeof(want.job), "%s", o->job ? o->job : "");
	c->peer = -1;
	if ((ctx = grpc_call_auth_context(c->call))) {
		it = grpc_auth_context_find_properties_by_name(ctx,
			GRPC_X509_PEM_CERT_PROPERTY_NAME);
		prop = grpc_auth_property_iterator_next(&it);
		if (prop && prop->value_length &&
		    (pem = strndup(prop->value, prop->value_length)) &&
		    !pki_cert_is(pem, &want, &e))
			c->peer = 1;
		free(pem);
		grpc_auth_context_release(ctx);
	}
	if (c->peer < 0 && clock_mono() >= cl->next_peer_warn) {
		log_error("the server at '%s' is not this job's syncer, its "
			  "messages are ignored: %s", cl->lk->target, e.msg);
		cl->next_peer_warn = clock_mono() + 30;
	}
	return c->peer > 0;
}

static void on_recv(struct client *cl, struct call *c, int ok)
{
	struct sidecar *s = cl->s;
	grpc_byte_buffer_reader r;
	grpc_slice all;
	struct err e;
	int rc;

	c->recv_armed = 0;
	if (!ok || !c->recv_buf)
		return;   /* the syncer half-closed; the status follows */
	if (!grpc_byte_buffer_reader_init(&r, c->recv_buf)) {
		grpc_byte_buffer_destroy(c->recv_buf);
		c->recv_buf = NULL;
		return;
	}
	all = grpc_byte_buffer_reader_readall(&r);
	grpc_byte_buffer_reader_destroy(&r);
	grpc_byte_buffer_destroy(c->recv_buf);
	c->recv_buf = NULL;
	if (!peer_ok(cl, c)) {
		grpc_slice_unref(all);
		if (c == cl->live)
			end_live(cl);
		return;
	}
	SC_ADD(s, messages_received, 1);
	SC_ADD(s, bytes_received, GRPC_SLICE_LENGTH(all));
	rc = c == cl->live ? sidecar_handle(s, cl->shard,
					    GRPC_SLICE_START_PTR(all),
					    GRPC_SLICE_LENGTH(all), &e) : 0;
	grpc_slice_unref(all);
	if (rc)
		log_warn("%s", e.msg);
	if (rc == -2) {
		/* a Welcome we cannot work with: retry later, with backoff */
		end_live(cl);
		return;
	}
	pthread_mutex_lock(&s->mu);
	if (cl->lk->welcomed && c == cl->live) {
		if (!c->welcomed_here)
			log_info("connected to the syncer at '%s'", cl->lk->target);
		c->welcomed_here = 1;
		cl->backoff = s->o.backoff_min;
		cl->next_warn = 0;
	}
	pthread_mutex_unlock(&s->mu);
	if (c == cl->live && !c->ended)
		arm_recv(c);
}

static void on_send(struct client *cl, struct call *c, int ok)
{
	struct sidecar *s = cl->s;

	c->send_busy = 0;
	grpc_byte_buffer_destroy(c->send_buf);
	c->send_buf = NULL;
	if (!ok)
		return;
	SC_ADD(s, messages_sent, 1);
	SC_ADD(s, bytes_sent, c->send_len);
	if (c->send_frag >= 0) {
		double rt = clock_mono() - c->send_pulled_at;

		pthread_mutex_lock(&s->mu);
		s->m.answers_sent++;
		s->m.round_trips++;
		s->m.round_trip_last = rt;
		pthread_mutex_unlock(&s->mu);
	}
}

/* A Beat's end: heartbeats back on Train, the Beat tried again later. */
static void on_beat_status(struct client *cl, struct call *c)
{
	char *details = grpc_slice_to_c_string(c->details);

	c->ended = 1;
	if (c == cl->beat) {
		if (c->status == GRPC_STATUS_UNIMPLEMENTED) {
			log_info("the syncer takes no Beat: heartbeats go on the "
				 "Train stream");
			cl->beat_off = 1;
		} else if (c->taken) {
			/* it carried the heartbeats: a broken or silent
			 * connection, a syncer that went away */
			log_warn("Beat ended: status %d '%s'; heartbeats on "
				 "Train until a new one is taken", (int)c->status,
				 details);
		} else {
			log_debug("Beat ended: status %d '%s'; heartbeats on "
				  "Train meanwhile", (int)c->status, details);
		}
		end_beat(cl);
	}
	gpr_free(details);
}

/* The Beat's initial metadata: the syncer took it when it is the
 * syncer and the mark is there (WIRE_BEAT_MARK_KEY). */
static void on_beat_start(struct client *cl, struct call *c, int ok)
{
	if (!ok || c != cl->beat || c->ended)
		return;
	if (!peer_ok(cl, c)) {
		end_beat(cl);
		return;
	}
	for (size_t i = 0; i < c->md_initial.count; i++)
		if (grpc_slice_str_cmp(c->md_initial.metadata[i].key,
				       WIRE_BEAT_MARK_KEY) == 0 &&
		    grpc_slice_str_cmp(c->md_initial.metadata[i].value,
				       WIRE_BEAT_MARK_VALUE) == 0)
			c->taken = 1;
	if (!c->taken)
		return;   /* a refusal: its status follows */
	cl->beat_backoff = cl->s->o.backoff_min;
	log_debug("heartbeats on a connection of their own (Beat)");
}

static void on_status(struct client *cl, struct call *c)
{
	char *details;

	if (c->beat) {
		on_beat_status(cl, c);
		return;
	}
	details = grpc_slice_to_c_string(c->details);

	/* the statuses that end the sidecar are taken from this job's
	 * syncer only; any other is a disconnect */
	int final = (c->status == GRPC_STATUS_OK && strstr(details, "job done")) ||
		    c->status == GRPC_STATUS_FAILED_PRECONDITION ||
		    c->status == GRPC_STATUS_PERMISSION_DENIED;

	c->ended = 1;
	if (final && !c->welcomed_here && !peer_ok(cl, c))
		final = 0;
	if (final && c->status == GRPC_STATUS_OK) {
		log_info("syncer: job done");
		cl->done = 1;
	} else if (final) {
		err_set(&cl->refusal, "sidecar: the syncer refused learner %u: %s",
			cl->s->o.learner_id, details);
		cl->refused = 1;
	} else if (c == cl->live) {
		SC_ADD(cl->s, disconnects, 1);
		/* one line per outage, then one every 30 s while it lasts */
		if (c->hello_sent && (c->welcomed_here ||
				      clock_mono() > cl->next_warn)) {
			log_warn("syncer stream ended: status %d '%s'; "
				 "reconnecting", (int)c->status, details);
			cl->next_warn = clock_mono() + 30;
		} else {
			log_debug("syncer still away: status %d '%s'",
				  (int)c->status, details);
		}
	}
	gpr_free(details);
	if (c == cl->live)
		end_live(cl);
}

static void on_event(struct clients *all, grpc_event ev)
{
	struct tag *t = ev.tag;
	struct client *cl;
	struct call *c;

	if (ev.tag == &all->kick)
		return;   /* only woke the loop */
	c = t->c;
	cl = c->cl;
	c->pending--;
	switch (t->kind) {
	case T_START:
		if (c->beat)
			on_beat_start(cl, c, ev.success);
		break;
	case T_RECV:
		on_recv(cl, c, ev.success);
		break;
	case T_SEND:
		on_send(cl, c, ev.success);
		break;
	case T_STATUS:
		on_status(cl, c);
		break;
	}
	reap(cl, c);
}

/*
 * Wakes the loop in grpc_completion_queue_next now rather than at its
 * next tick: a watch of the channel's state whose deadline is already
 * past completes on the queue at once. From the bridge, when it queued
 * an answer, so the answer goes out as soon as the stream is free
 * (docs/sidecar.md, As fast as the wire).
 */
static void kick(struct clients *all)
{
	grpc_channel *ch = all->cl[0].ch;

	grpc_channel_watch_connectivity_state(
		ch, grpc_channel_check_connectivity_state(ch, 0),
		gpr_inf_past(GPR_CLOCK_MONOTONIC), all->cq, &all->kick);
}

/*
 * The learner's versions (docs/abi.md, Versions), once a loop: said once
 * when first seen; 1 when they do not match, and the loop ends.
 */
static int learner_versions(struct sidecar *s)
{
	struct exchange_version v;

	if (!s->learner_versions && exchange_peer_version(s->x, &v) == 1) {
		log_info("learner library %s (ABI %u, exchange %u)", v.release,
			 v.abi, v.exchange);
		s->learner_versions = 1;
	}
	if (!exchange_versions(s->x, &s->mismatch_err))
		return 0;
	__atomic_store_n(&s->mismatch, 1, __ATOMIC_RELEASE);
	return 1;
}

/* Loop k (0 the client's, 1 the bridge's) turns now (sidecar_stuck). */
static void turned(struct sidecar *s, int k)
{
	__atomic_store_n(&s->turned_ms[k], (uint64_t)(clock_mono() * 1e3),
			 __ATOMIC_RELAXED);
}

double sidecar_stuck(struct sidecar *s, double now)
{
	uint64_t a = __atomic_load_n(&s->turned_ms[0], __ATOMIC_RELAXED);
	uint64_t b = __atomic_load_n(&s->turned_ms[1], __ATOMIC_RELAXED);
	double last = (double)(a < b ? a : b) / 1e3;

	return a && b && now > last ? now - last : 0;
}

static void *bridge_main(void *arg)
{
	struct clients *all = arg;
	struct sidecar *s = all->cl[0].s;
	struct exchange_stats st;

	while (!s->stop) {
		turned(s, 1);
		exchange_wait(s->x, 0.05);
		if (learner_versions(s)) {
			kick(all);   /* the client loop sees it now */
			break;
		}
		/* the region is not trusted: a corrupted word is rewritten
		 * and counted (docs/exchange.md, Trust) */
		if (exchange_check(s->x))
			log_warn("%s", exchange_last_error(s->x));
		exchange_release_applied(s->x);
		if (sidecar_collect(s) > 0)
			kick(all);
		/* a restarted learner is noticed here within 50 ms */
		sidecar_learner_stats(s, &st);
	}
	return NULL;
}

/* One client per shard, on the shared queue; -1 when out of memory. */
static int clients_init(struct clients *all, struct sidecar *s)
{
	uint64_t seed = (uint64_t)getpid() ^ (uint64_t)(clock_wall() * 1e6);

	all->cq = grpc_completion_queue_create_for_next(NULL);
	if (!(all->cl = calloc((size_t)s->nshards, sizeof(*all->cl))))
		return -1;
	all->n = s->nshards;
	for (int k = 0; k < all->n; k++) {
		struct client *cl = &all->cl[k];

		cl->s = s;
		cl->shard = k;
		cl->lk = &s->links[k];
		cl->cq = all->cq;
		cl->backoff = s->o.backoff_min;
		cl->beat_backoff = s->o.backoff_min;
		rng_seed(&cl->rng, seed + (uint64_t)k);
		cl->ch = make_channel(s, cl->lk->target, s->o.tls, 0);
		if (s->o.tls)
			log_info("syncer at '%s', mutual TLS", cl->lk->target);
		else
			log_warn("syncer at '%s' in PLAINTEXT "
				 "(spec.syncer.insecure): whoever answers there "
				 "is taken for the syncer", cl->lk->target);
	}
	return 0;
}

/* Every stream open or retried, every due send, one event handled. The
 * job is done when every shard said so; refused when any refused. */
static int clients_turn(struct clients *all, int *done, int *refused)
{
	grpc_event ev;
	int d = 1;

	turned(all->cl[0].s, 0);
	for (int k = 0; k < all->n; k++) {
		struct client *cl = &all->cl[k];

		if (cl->done)
			continue;
		d = 0;
		if (cl->refused) {
			*refused = k + 1;
			return 0;
		}
		if (!cl->live && clock_mono() >= cl->next_attempt)
			start_call(cl);
		pump_send(cl);
	}
	if ((*done = d))
		return 0;
	ev = grpc_completion_queue_next(all->cq, after_ms(TICK_MS), NULL);
	if (ev.type == GRPC_OP_COMPLETE)
		on_event(all, ev);
	return 1;
}

/* The end: cancel what is open, drain, tear down in order. */
static void clients_end(struct clients *all)
{
	int draining = 0;

	for (int k = 0; k < all->n; k++) {
		struct client *cl = &all->cl[k];
		struct call *c = cl->live;

		if (c) {
			end_live(cl);
			reap(cl, c);
		}
	}
	for (int k = 0; k < all->n; k++)
		draining += all->cl[k].draining;
	while (draining > 0) {
		grpc_event ev = grpc_completion_queue_next(all->cq, after_ms(1000),
							   NULL);

		if (ev.type == GRPC_QUEUE_TIMEOUT)
			break;
		if (ev.type != GRPC_OP_COMPLETE)
			continue;
		on_event(all, ev);
		draining = 0;
		for (int k = 0; k < all->n; k++)
			draining += all->cl[k].draining;
	}
	for (int k = 0; k < all->n; k++) {
		if (all->cl[k].ch)
			grpc_channel_destroy(all->cl[k].ch);
		if (all->cl[k].beat_ch)
			grpc_channel_destroy(all->cl[k].beat_ch);
	}
	grpc_completion_queue_shutdown(all->cq);
	while (grpc_completion_queue_next(all->cq, gpr_inf_future(GPR_CLOCK_REALTIME),
					  NULL).type != GRPC_QUEUE_SHUTDOWN)
		;
	grpc_completion_queue_destroy(all->cq);
	free(all->cl);
}

int sidecar_run(struct sidecar *s, const volatile sig_atomic_t *stop,
		struct err *e)
{
	struct clients all = { 0 };
	pthread_t bridge;
	int done = 0, refused = 0, rc;

	/* the system resolver (getaddrinfo: /etc/hosts, search domains, as
	 * any program) unless the environment says otherwise; this gRPC's
	 * c-ares path also leaks a few bytes per lookup */
	setenv("GRPC_DNS_RESOLVER", "native", 0);
	grpc_init();
	s->stop = 0;
	s->mismatch = 0;
	/* the channels and the queue outlive the bridge (joined first) */
	if (clients_init(&all, s) ||
	    pthread_create(&bridge, NULL, bridge_main, &all)) {
		s->stop = 1;
		clients_end(&all);
		grpc_shutdown();
		return err_set(e, "sidecar: cannot start the bridge thread");
	}
	while (!*stop && !__atomic_load_n(&s->mismatch, __ATOMIC_ACQUIRE) &&
	       clients_turn(&all, &done, &refused))
		;
	s->stop = 1;
	pthread_join(bridge, NULL);
	/* stopped by a signal: a learner that just refused may be why its
	 * pod ends, so the versions are looked at once more */
	if (!s->mismatch && !done)
		learner_versions(s);
	if (refused)
		*e = all.cl[refused - 1].refusal;
	clients_end(&all);
	grpc_shutdown_blocking();
	if (s->mismatch) {
		*e = s->mismatch_err;
		rc = EXCHANGE_VERSION_MISMATCH;
	} else if (done) {
		exchange_set_done(s->x, 1);
		rc = 0;
	} else if (refused) {
		rc = -1;
	} else {
		rc = 1;
	}
	return rc;
}
