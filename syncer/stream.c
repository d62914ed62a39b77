/*
 * stream: the gRPC side of the syncer and its run loop, on the C core's
 * completion-queue API (docs/design.md §7). One thread, one queue; every
 * learner stream is a `struct conn` with at most one operation of each
 * kind in flight:
 *
 *   accepted ─► RECV_CLOSE_ON_SERVER armed (tells us the call ended)
 *            ─► RECV_MESSAGE, re-armed after each message
 *            ─► SEND_MESSAGE, one at a time from the conn's queue
 *   closing  ─► SEND_STATUS_FROM_SERVER once no send is in flight
 *   freed    when nothing is in flight any more
 *
 * The queue is bounded as docs/protocol.md says: one unsent Update per
 * fragment (a newer one replaces it), one Pull per round, one Welcome.
 * Outgoing messages are packed once (common/wire.h) into a slice and
 * shared by reference; the Update of each fragment's current version is
 * kept for the learners that join. An Update is kept as its payload and
 * fields, and framed when sent: whole, or in parts of what that
 * learner's Hello said it takes (docs/protocol.md, Messages in parts),
 * each a framing and a slice of the shared payload. An Update begun in
 * parts is never replaced: its parts go out one after the other.
 *
 * What a message does is stream_msg.c's (hellos, identities, Beats,
 * evaluators, an external model's adoption), and what it does to the
 * syncer's state the core's (core.c); the server is made in server.c;
 * this file keeps the calls, sends
 * what the core's results ask for, and turns the run loop, whose rounds
 * core_poll drives.
 *
 * With TLS (syncer_params.tls) every client shows a certificate of the
 * job's CA; the identity in it (common/pki.h, ddiloco://<job>/learner/<id>)
 * is read when the call arrives, and a stream whose certificate names
 * another job, no learner, or another learner than its Hello is refused
 * with PERMISSION_DENIED before it touches any state (docs/security.md).
 *
 * A Beat call (docs/sidecar.md, Heartbeats on their own connection) is
 * a conn too (conn.beat): a Hello naming a learner whose Train stream is
 * live, with that stream's incarnation, then heartbeats, each handed to
 * core_heartbeat as one on Train would be. It is never learners[].conn
 * and sends no message: its initial metadata says it was taken.
 *
 * An evaluator (Hello.evaluator; eval_remote.h) is a stream like a
 * learner's that gets the Welcome and every Update but no Pull, and
 * sends Evaluations; it is none of the learners (conn.evaluator, never
 * conn.learner) and its certificate names an evaluator.
 *
 * spec.model.kind external (docs/syncer.md, Model-agnostic jobs): the
 * core is made only once the model is known. Until then the loop only
 * takes streams: the table minQuorum learners' Hellos agree on is
 * adopted (stream_msg.c), one of them is asked for its weights with
 * Pulls of round 0 (or Θ comes from a checkpoint of that table), every
 * Hello that matches waits, and when Θ
 * is whole the core starts and they are all answered as if they had just
 * said Hello.
 *
 * The loop wakes at least every 50 ms (cq_next's deadline is the only
 * timer) to pace rounds, end grace windows and notice a stop request, and
 * sooner when a grace window ends or the learners' pace makes a pull due
 * (syncer_round_next_pull).
 */
#include "syncer/stream_int.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "common/encoding.h"
#include "common/log.h"
#include "common/pki.h"
#include "common/util.h"
#include "common/wire.h"

#define TICK 0.05
#define EVENT_BATCH 64   /* events handled before the rounds are polled */
#define STOP_GRACE 3.0   /* seconds for streams to close on a stop */

/* ---- calls ------------------------------------------------------------ */

static void drop_queue(struct conn *c)
{
	while (c->qhead) {
		struct out_msg *m = c->qhead;

		c->qhead = m->next;
		grpc_slice_unref(m->msg);
		free(m);
	}
}

void conn_maybe_free(struct conn *c)
{
	struct stream_server *sv = c->sv;

	if (!c->closing || c->recv_pending || c->send_pending ||
	    c->status_pending || c->close_pending)
		return;
	if (c->prev)
		c->prev->next = c->next;
	else
		sv->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	sv->s->tr.calls_open--;
	/* closed while a send was in flight, then cancelled before the send
	 * ended: the status was never sent and its details are still ours */
	if (!c->status_sent)
		grpc_slice_unref(c->details);
	if (sv->seeder == c)   /* another waiting learner is asked (loop) */
		sv->seeder = NULL;
	free(c->sizes);
	free(c->have1);
	drop_queue(c);
	wire_parts_release(&c->parts);
	grpc_metadata_array_destroy(&c->md);
	grpc_call_unref(c->call);
	free(c);
}

static void start_recv(struct conn *c)
{
	grpc_op op;

	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_RECV_MESSAGE;
	op.data.recv_message.recv_message = &c->rbuf;
	c->rbuf = NULL;
	if (grpc_call_start_batch(c->call, &op, 1, &c->t_recv, NULL) ==
	    GRPC_CALL_OK)
		c->recv_pending = 1;
}

static void send_status(struct conn *c)
{
	grpc_op ops[2];
	int n = 0;

	memset(ops, 0, sizeof(ops));
	if (!c->md_sent) {
		ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
		n++;
		c->md_sent = 1;
	}
	ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
	ops[n].data.send_status_from_server.status = c->code;
	ops[n].data.send_status_from_server.status_details = &c->details;
	n++;
	c->status_sent = 1;
	grpc_call_error rc = grpc_call_start_batch(c->call, ops, (size_t)n,
						   &c->t_status, NULL);
	if (rc == GRPC_CALL_OK) {
		c->status_pending = 1;
	} else {
		log_warn("stream of learner %d: cannot send its status: gRPC error %d",
			 c->learner, rc);
		grpc_slice_unref(c->details);
	}
}

/* The payload bytes an Update's part to c may carry. */
static size_t part_bytes(const struct conn *c)
{
	size_t lim = wire_peer_limit(c->peer_max);

	if (lim > c->sv->send_cap)
		lim = c->sv->send_cap;
	return lim - WIRE_PART_SLACK;
}

/*
 * The next message of m into sl[0..*n): all of it, or for an Update its
 * next part (framing, then a slice of the payload). Returns the payload
 * bytes it carries; *last when m is all out after it.
 */
static size_t next_slices(struct conn *c, struct out_msg *m, grpc_slice *sl,
			  int *n, int *last)
{
	size_t total = GRPC_SLICE_LENGTH(m->msg), room = part_bytes(c), len;
	struct wire_update u = m->u;
	uint8_t hdr[WIRE_UPDATE_HDR_MAX];

	*last = 1;
	if (m->kind != OUT_UPDATE) {
		sl[0] = grpc_slice_ref(m->msg);
		*n = 1;
		return m->payload;
	}
	len = total - m->sent < room ? total - m->sent : room;
	u.payload_len = len;
	if (m->sent || len < total) {   /* in parts */
		u.part_offset = m->sent;
		u.payload_total = total;
		c->sv->s->tr.update_parts++;
	}
	sl[0] = grpc_slice_from_copied_buffer((const char *)hdr,
					      wire_update_header(hdr, &u));
	sl[1] = grpc_slice_sub(m->msg, m->sent, m->sent + len);
	*n = 2;
	m->sent += len;
	*last = m->sent == total;
	return len;
}

static void pump(struct conn *c)
{
	struct out_msg *m;
	grpc_op ops[2];
	grpc_slice sl[2];
	int n = 0, ns, last;

	if (c->send_pending)
		return;
	if (c->closing) {
		if (!c->status_sent && !c->ended)
			send_status(c);
		return;
	}
	if (!(m = c->qhead))
		return;
	memset(ops, 0, sizeof(ops));
	if (!c->md_sent) {
		ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
		n++;
		c->md_sent = 1;
	}
	c->send_payload = next_slices(c, m, sl, &ns, &last);
	c->sbuf = grpc_raw_byte_buffer_create(sl, (size_t)ns);
	for (int i = 0; i < ns; i++)
		grpc_slice_unref(sl[i]);
	ops[n].op = GRPC_OP_SEND_MESSAGE;
	ops[n].data.send_message.send_message = c->sbuf;
	n++;
	if (last) {
		c->qhead = m->next;
		grpc_slice_unref(m->msg);
		free(m);
	}
	if (grpc_call_start_batch(c->call, ops, (size_t)n, &c->t_send, NULL) ==
	    GRPC_CALL_OK) {
		c->send_pending = 1;
	} else {
		grpc_byte_buffer_destroy(c->sbuf);
		c->sbuf = NULL;
		conn_close(c, GRPC_STATUS_INTERNAL, "cannot send");
	}
}

/* What c's learner holds of fragment p once its queue is out: the
 * version + 1 of the last Update queued (0: none yet; updelta.h). */
static void conn_holds_set(struct conn *c, int p, uint64_t version)
{
	if (!c->have1)
		c->have1 = calloc((size_t)c->sv->s->P, sizeof(*c->have1));
	if (c->have1)
		c->have1[p] = version + 1;
}

/* 1 when an Update of fragment p waits in c's queue, not begun */
static int update_queued(const struct conn *c, int p)
{
	for (const struct out_msg *m = c->qhead; m; m = m->next)
		if (m->kind == OUT_UPDATE && m->frag == p && !m->sent)
			return 1;
	return 0;
}

/* Queues msg (a reference is taken); an unsent Update of frag is
 * replaced (one begun in parts is not). u: an Update's fields. */
static void push(struct conn *c, enum out_kind kind, int frag, grpc_slice msg,
		 size_t payload, const struct wire_update *u)
{
	struct out_msg *m, **tail = &c->qhead;

	if (c->closing)
		return;
	if (kind == OUT_UPDATE && frag >= 0 && u)
		conn_holds_set(c, frag, u->version);
	for (m = c->qhead; m; m = m->next) {
		if (kind == OUT_UPDATE && m->kind == OUT_UPDATE && m->frag == frag &&
		    !m->sent) {
			grpc_slice_unref(m->msg);
			m->msg = grpc_slice_ref(msg);
			m->payload = payload;
			m->u = *u;
			return;
		}
		tail = &m->next;
	}
	if (!(m = calloc(1, sizeof(*m)))) {
		conn_close(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	m->kind = kind;
	m->frag = frag;
	m->msg = grpc_slice_ref(msg);
	m->payload = payload;
	if (u)
		m->u = *u;
	*tail = m;
	pump(c);
}

static void detach_learner(struct conn *c, const char *why)
{
	struct syncer *s = c->sv->s;
	struct learner *l;

	if (c->evaluator >= 0) {
		eval_remote_leave(&s->evr, c->evaluator, why);
		c->evaluator = -1;
	}
	if (c->learner < 0)
		return;
	l = &s->learners[c->learner];
	if (l->conn == c) {
		l->conn = NULL;
		core_leave(s, c->learner, why);
	}
	c->learner = -1;
}

void conn_close(struct conn *c, grpc_status_code code, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	if (c->closing)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	c->closing = 1;
	c->code = code;
	c->details = grpc_slice_from_copied_string(msg);
	detach_learner(c, msg);
	drop_queue(c);
	if (c->ended) {
		grpc_slice_unref(c->details);
		c->status_sent = 1;
	}
	pump(c);
}

/* ---- messages ---------------------------------------------------------- */

static grpc_slice pack(const struct wire_syncer_msg *m)
{
	size_t len = wire_syncer_size(m);
	grpc_slice sl = grpc_slice_malloc(len);

	wire_syncer_pack(m, GRPC_SLICE_START_PTR(sl));
	return sl;
}

void conn_send_pull(struct conn *c, uint64_t round, int frag)
{
	struct wire_syncer_msg m = { .kind = WIRE_PULL };
	grpc_slice sl;

	m.pull = (struct wire_pull){ .fragment = (uint32_t)frag, .round = round };
	sl = pack(&m);
	push(c, OUT_PULL, frag, sl, 0, NULL);
	grpc_slice_unref(sl);
}

/* Fragment p's Update at its current version: its payload as a slice,
 * its fields in *u (no payload; framed when sent). */
static grpc_slice pack_update(struct syncer *s, int p, uint64_t round,
			      struct wire_update *u)
{
	int enc = ENC_F32;
	size_t len, n = s->ft->frags[p].numel;
	uint64_t sum = 0;
	uint8_t *buf;

	if (s->upd_on) {   /* a keyframe: Θ̂_p, whole, in f32 (updelta.h) */
		const float *hat = updelta_keyframe(&s->upd, p,
						    s->theta + s->frag_off[p],
						    s->versions[p], &sum);

		len = enc_size(ENC_F32, n);
		if ((buf = malloc(len + 1)))
			enc_encode(ENC_F32, hat, n, buf, NULL);
	} else {
		buf = core_update_payload(s, p, &enc, &len);
	}
	*u = (struct wire_update){
		.fragment = (uint32_t)s->gid[p], .version = s->versions[p],
		.encoding = enc, .round = round,
		.tokens = core_job_tokens(s, clock_mono()), .checksum = sum,
	};
	return buf ? grpc_slice_new(buf, len, free) : grpc_empty_slice();
}

/* The Update a joining learner gets for fragment p (a new reference;
 * its fields in *u). */
static grpc_slice join_update(struct stream_server *sv, int p,
			      struct wire_update *u)
{
	struct syncer *s = sv->s;

	if (sv->upd_valid[p] && sv->upd_version[p] != s->versions[p]) {
		grpc_slice_unref(sv->upd[p]);
		sv->upd_valid[p] = 0;
	}
	if (!sv->upd_valid[p]) {
		sv->upd[p] = pack_update(s, p, 0, &sv->upd_hdr[p]);
		sv->upd_version[p] = s->versions[p];
		sv->upd_valid[p] = 1;
	}
	*u = sv->upd_hdr[p];
	return grpc_slice_ref(sv->upd[p]);
}

/* A merged fragment's Update, as a delta and, only once a stream needs
 * it, whole (updelta.h): with updateDelta most streams take the delta,
 * and the whole fragment is a copy of 4 bytes a value */
struct merged_msg {
	struct stream_server *sv;
	const struct core_merged *mg;
	grpc_slice whole, delta;
	struct wire_update u, du;
	int has_whole, has_delta;
};

static void merged_msg_make(struct stream_server *sv,
			    const struct core_merged *mg, struct merged_msg *mm)
{
	struct syncer *s = sv->s;
	int p = mg->frag;
	const uint8_t *pay;
	size_t len;
	uint64_t sum;

	memset(mm, 0, sizeof(*mm));
	mm->sv = sv;
	mm->mg = mg;
	if (!s->upd_on ||
	    !updelta_get(&s->upd, p, s->versions[p], &pay, &len, &sum))
		return;
	mm->has_delta = 1;
	mm->delta = grpc_slice_from_copied_buffer((const char *)pay, len);
	mm->du = (struct wire_update){
		.fragment = (uint32_t)s->gid[p], .version = s->versions[p],
		.encoding = (int)s->upd.enc, .round = mg->round,
		.tokens = core_job_tokens(s, clock_mono()), .delta = 1,
		.delta_from = s->versions[p] - 1, .checksum = sum,
	};
}

/* The whole fragment: Θ_p in updateEncoding, or with updateDelta the
 * keyframe join_update caches */
static void merged_msg_whole(struct merged_msg *mm)
{
	if (mm->has_whole)
		return;
	mm->has_whole = 1;
	if (!mm->sv->s->upd_on) {
		mm->whole = pack_update(mm->sv->s, mm->mg->frag, mm->mg->round,
					&mm->u);
		return;
	}
	mm->whole = join_update(mm->sv, mm->mg->frag, &mm->u);
	mm->u.round = mm->mg->round;
}

/* To c: the delta when its learner will hold the version before, with
 * nothing of this fragment still queued; else the whole fragment. */
static void merged_msg_push(struct conn *c, int p, struct merged_msg *mm)
{
	struct transport_stats *tr = &c->sv->s->tr;

	if (mm->has_delta && c->takes_delta && c->have1 &&
	    c->have1[p] == mm->du.delta_from + 1 && !update_queued(c, p)) {
		push(c, OUT_UPDATE, p, mm->delta, GRPC_SLICE_LENGTH(mm->delta),
		     &mm->du);
		tr->updates_delta++;
		tr->update_bytes_delta += GRPC_SLICE_LENGTH(mm->delta);
		return;
	}
	merged_msg_whole(mm);
	push(c, OUT_UPDATE, p, mm->whole, GRPC_SLICE_LENGTH(mm->whole), &mm->u);
	tr->updates_whole++;
	tr->update_bytes_whole += GRPC_SLICE_LENGTH(mm->whole);
}

/* What a merge changed, to every joined learner. */
static void send_merged(struct stream_server *sv, const struct core_merged *mg)
{
	struct syncer *s = sv->s;
	struct merged_msg mm;

	if (!mg->updated)
		return;
	merged_msg_make(sv, mg, &mm);
	for (int i = 0; i < s->M; i++)
		if (s->learners[i].conn && s->learners[i].joined)
			merged_msg_push(s->learners[i].conn, mg->frag, &mm);
	if (s->evr.connected)   /* evaluators get Θ too (eval_remote.h) */
		for (struct conn *c = sv->conns; c; c = c->next)
			if (c->evaluator >= 0 && !c->closing)
				merged_msg_push(c, mg->frag, &mm);
	if (mm.has_whole)
		grpc_slice_unref(mm.whole);
	if (mm.has_delta)
		grpc_slice_unref(mm.delta);
}

void conn_send_welcome(struct conn *c, uint64_t resume,
		       const struct round_action *pulls, int npull)
{
	struct syncer *s = c->sv->s;
	struct wire_syncer_msg m = { .kind = WIRE_WELCOME };
	/* the job's fragments: a shard's own versions, 0 for the others' */
	uint64_t *v = s->nshards > 1 ? calloc((size_t)s->gP, sizeof(*v))
				     : s->versions;
	grpc_slice sl;

	if (!v) {
		conn_close(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	for (int p = 0; v != s->versions && p < s->P; p++)
		v[s->gid[p]] = s->versions[p];
	m.welcome = (struct wire_welcome){
		.fragments = (uint32_t)s->gP, .nversions = (size_t)s->gP,
		.versions = v,
		/* an evaluator's: the newest round merged, the round of the
		 * Θ that follows (rounds handed out before a restart and
		 * never merged put round numbers ahead of the count) */
		.round = c->evaluator >= 0 ? s->evr.merged_max
					   : s->rs.completed,
		.alpha = s->js->syncer.alpha,
		.answer_encoding = (int)s->js->syncer.encoding,
		.resume_step = resume,
		.max_message = c->sv->recv_limit,
	};
	sl = pack(&m);
	if (v != s->versions)
		free(v);
	push(c, OUT_WELCOME, -1, sl, 0, NULL);
	grpc_slice_unref(sl);
	for (int p = 0; p < s->P; p++) {
		struct wire_update u;

		sl = join_update(c->sv, p, &u);
		push(c, OUT_UPDATE, p, sl, GRPC_SLICE_LENGTH(sl), &u);
		grpc_slice_unref(sl);
	}
	for (int i = 0; i < npull; i++)
		conn_send_pull(c, pulls[i].round, s->gid[pulls[i].frag]);
}

/* ---- events ------------------------------------------------------------ */

/* A new call: watch for its end, wait for the next one, start reading. */
static void on_new(struct stream_server *sv, struct conn *c, int ok,
		   double now)
{
	struct err e;
	grpc_op op;

	if (c->beat)
		sv->waiting_beat = NULL;
	else
		sv->waiting = NULL;
	if (!ok) {   /* the server is shutting down */
		grpc_metadata_array_destroy(&c->md);
		free(c);
		return;
	}
	c->t_accept = now;
	c->next = sv->conns;
	if (sv->conns)
		sv->conns->prev = c;
	sv->conns = c;
	sv->s->tr.calls_open++;
	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
	op.data.recv_close_on_server.cancelled = &c->cancelled;
	if (grpc_call_start_batch(c->call, &op, 1, &c->t_close, NULL) ==
	    GRPC_CALL_OK)
		c->close_pending = 1;
	if (!sv->s->stopping)
		stream_request_call(sv, c->beat);
	if (sv->s->stopping) {
		conn_close(c, GRPC_STATUS_UNAVAILABLE, "syncer shutting down");
	} else if (sv->s->tr.calls_open > SYNCER_CALLS_MAX(sv->s->M)) {
		sv->s->tr.streams_over_cap++;
		conn_close(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "the syncer has "
			   "%d calls open, at most %d", sv->s->tr.calls_open - 1,
			   SYNCER_CALLS_MAX(sv->s->M));
	} else if (sv->s->prm->tls && (c->cert_learner = stream_cert_learner(c, &e)) < 0) {
		stream_refuse(c, e.msg);
	} else {
		start_recv(c);
	}
	conn_maybe_free(c);
}

static void on_recv(struct conn *c, int ok, double now)
{
	grpc_byte_buffer *bb = c->rbuf;   /* ours now */

	c->rbuf = NULL;
	c->recv_pending = 0;
	if (!ok || !bb) {
		conn_close(c, GRPC_STATUS_OK, "stream closed by the learner");
	} else if (!c->closing) {
		grpc_byte_buffer_reader r;
		grpc_slice sl;

		if (grpc_byte_buffer_reader_init(&r, bb)) {
			sl = grpc_byte_buffer_reader_readall(&r);
			grpc_byte_buffer_reader_destroy(&r);
			stream_on_message(c, GRPC_SLICE_START_PTR(sl),
				   GRPC_SLICE_LENGTH(sl), now);
			grpc_slice_unref(sl);
		} else {
			conn_close(c, GRPC_STATUS_INVALID_ARGUMENT,
				   "unreadable message");
		}
		/* the next receive may fill c->rbuf at once: bb is a
		 * separate pointer, freed below */
		if (!c->closing)
			start_recv(c);
	}
	if (bb)
		grpc_byte_buffer_destroy(bb);
}

static void on_event(struct stream_server *sv, struct tag *t, int ok,
		     double now)
{
	struct conn *c = t->c;

	switch (t->kind) {
	case T_SHUTDOWN:
		sv->shut = 1;
		return;
	case T_NEW:
		on_new(sv, c, ok, now);   /* frees c itself when the server stops */
		return;
	case T_RECV:
		on_recv(c, ok, now);
		break;
	case T_SEND:
		c->send_pending = 0;
		grpc_byte_buffer_destroy(c->sbuf);
		c->sbuf = NULL;
		if (ok)
			sv->s->acc.bytes_out += c->send_payload;
		else
			conn_close(c, GRPC_STATUS_UNAVAILABLE, "send failed");
		pump(c);
		break;
	case T_STATUS:
		c->status_pending = 0;
		grpc_slice_unref(c->details);
		break;
	case T_CLOSE:
		c->close_pending = 0;
		c->ended = 1;
		if (!c->closing)
			conn_close(c, GRPC_STATUS_CANCELLED, "cancelled");
		break;
	}
	conn_maybe_free(c);
}

static void run_rounds(struct stream_server *sv, double now)
{
	struct syncer *s = sv->s;
	struct core_step st;

	/* bounded: the events waiting are handled between two batches */
	for (int guard = 0; guard < 64 && core_poll(s, now, &st); guard++) {
		if (st.kind == CORE_STEP_MERGED) {
			send_merged(sv, &st.merged);
			continue;
		}
		for (int i = 0; i < s->M; i++)
			if (s->learners[i].conn && s->learners[i].joined)
				conn_send_pull(s->learners[i].conn, st.round,
					       s->gid[st.frag]);
	}
}

static void close_all(struct stream_server *sv, grpc_status_code code,
		      const char *msg)
{
	struct conn *c = sv->conns, *next;

	for (; c; c = next) {
		next = c->next;
		conn_close(c, code, "%s", msg);
		conn_maybe_free(c);
	}
}

/* Shutdown order of docs/design.md §7. */
static void stop_server(struct stream_server *sv)
{
	grpc_event ev;

	if (!sv->srv) {
		if (sv->cq)
			grpc_completion_queue_destroy(sv->cq);
		return;
	}
	sv->t_shutdown = (struct tag){ T_SHUTDOWN, NULL };
	grpc_server_shutdown_and_notify(sv->srv, sv->cq, &sv->t_shutdown);
	grpc_server_cancel_all_calls(sv->srv);
	double give_up = clock_mono() + 5.0;

	/* a call the core never finishes is left behind, not freed early */
	while ((!sv->shut || sv->conns || sv->waiting || sv->waiting_beat) &&
	       clock_mono() < give_up) {
		ev = grpc_completion_queue_next(sv->cq, stream_deadline(1.0), NULL);
		if (ev.type == GRPC_OP_COMPLETE) {
			pthread_mutex_lock(&sv->s->mu);
			on_event(sv, ev.tag, ev.success, clock_mono());
			pthread_mutex_unlock(&sv->s->mu);
		}
	}
	grpc_server_destroy(sv->srv);
	grpc_completion_queue_shutdown(sv->cq);
	do
		ev = grpc_completion_queue_next(sv->cq, stream_deadline(1.0), NULL);
	while (ev.type != GRPC_QUEUE_SHUTDOWN);
	grpc_completion_queue_destroy(sv->cq);
}

/* The job is done: last eval, last checkpoint, `job done` everywhere. */
static void finish_job(struct stream_server *sv, double now)
{
	struct syncer *s = sv->s;

	core_finish(s, now);
	close_all(sv, GRPC_STATUS_OK, "job done");
	log_info("job done: round %" PRIu64 ", uptime %.3f, goodput %.3f",
		 s->rs.completed, core_uptime(s, now), core_goodput(s, now));
	for (int i = 0; i < s->M; i++) {
		const struct gp_learner *l = &s->gp.l[i];
		double q = l->trained > 0 ? 1 / l->trained : 0;

		log_info("learner %d: %" PRIu64 " steps merged, at most %" PRIu64
			 " in one answer; of its %.0f steps trained: merged %.3f, "
			 "late %.3f, refused %.3f, overwritten %.3f, lost to "
			 "restarts %.3f", i,
			 s->audit.steps[i], s->audit.max_steps[i], l->trained,
			 l->merged * q, l->late * q, l->refused * q,
			 l->overwritten * q, l->restarts * q);
	}
}

static void stop_job(struct stream_server *sv, double now)
{
	core_stop(sv->s, now);
	close_all(sv, GRPC_STATUS_UNAVAILABLE, "syncer shutting down");
}

int stream_cache_init(struct stream_server *sv, int P, struct err *e)
{
	sv->upd = calloc((size_t)P, sizeof(*sv->upd));
	sv->upd_hdr = calloc((size_t)P, sizeof(*sv->upd_hdr));
	sv->upd_version = calloc((size_t)P, sizeof(*sv->upd_version));
	sv->upd_valid = calloc((size_t)P, sizeof(*sv->upd_valid));
	if (!sv->upd || !sv->upd_hdr || !sv->upd_version || !sv->upd_valid)
		return err_set(e, "syncer: out of memory");
	return 0;
}

static void cache_release(struct stream_server *sv, int P)
{
	for (int p = 0; sv->upd_valid && p < P; p++)
		if (sv->upd_valid[p])
			grpc_slice_unref(sv->upd[p]);
	free(sv->upd);
	free(sv->upd_hdr);
	free(sv->upd_version);
	free(sv->upd_valid);
}

/* Waits for the next events (at most until a round is due) and handles
 * up to EVENT_BATCH of them, each under `mu`. */
static void handle_events(struct stream_server *sv)
{
	struct syncer *s = sv->s;
	double now = clock_mono(), wait = TICK;
	grpc_event ev;

	pthread_mutex_lock(&s->mu);
	if (!s->adopting) {
		wait = fmin(wait, syncer_round_next_deadline(&s->rs) - now);
		/* the next pull when the learners' pace makes it due (round.h) */
		wait = fmin(wait, fmax(0.001, syncer_round_next_pull(&s->rs, now) -
					      now));
	}
	pthread_mutex_unlock(&s->mu);
	ev = grpc_completion_queue_next(sv->cq, stream_deadline(wait), NULL);
	/* the events already there, up to EVENT_BATCH, before the rounds are
	 * looked at: that costs O(M) (the pacing's K-th step), an event O(1) */
	for (int n = 0; ev.type == GRPC_OP_COMPLETE;) {
		pthread_mutex_lock(&s->mu);
		on_event(sv, ev.tag, ev.success, clock_mono());
		pthread_mutex_unlock(&s->mu);
		if (++n == EVENT_BATCH)
			break;
		ev = grpc_completion_queue_next(sv->cq,
			gpr_inf_past(GPR_CLOCK_MONOTONIC), NULL);
	}
}

/* Where the run loop is: running, or ending at finish_at (≥ 0). */
struct run_state {
	int finishing;               /* the job is done: `job done` answered */
	double finish_at;
};

/* One turn of the run loop after the events, with `mu` held: the
 * evaluations, the scans, the rounds, the end. 1 when the loop ends. */
static int loop_turn(struct stream_server *sv, const struct syncer_params *p,
		     const volatile sig_atomic_t *stop, struct run_state *st)
{
	struct syncer *s = sv->s;
	double now = clock_mono();

	__atomic_store(&s->last_loop, &now, __ATOMIC_RELAXED);   /* /healthz */
	if (!s->adopting)
		core_eval_collect(s);
	/* the scans of every stream and learner: once per tick, not once
	 * per event (core_tick) */
	if (!s->stopping && core_tick(s, now))
		stream_close_silent(sv, now);
	if (s->adopting) {
		stream_seed_check(sv, now);
		if ((*stop || s->stopping) && st->finish_at < 0) {
			log_info("stopped before a learner gave the model");
			s->stopping = 1;
			close_all(sv, GRPC_STATUS_UNAVAILABLE,
				  "syncer shutting down");
			st->finish_at = now + STOP_GRACE;
		}
	} else if (!st->finishing && !s->stopping) {
		run_rounds(sv, now);
		core_check_budget(s, now);
		if (s->done) {
			finish_job(sv, now);
			st->finishing = 1;
			/* from the end of the last evaluation, which takes a
			 * while: /status shows it to its readers meanwhile */
			st->finish_at = clock_mono() + p->drain_seconds;
		}
	}
	if (*stop && !s->stopping && !s->adopting) {
		stop_job(sv, now);
		st->finish_at = now + STOP_GRACE;
	}
	return st->finish_at >= 0 &&
	       (now >= st->finish_at || (s->stopping && !sv->conns));
}

/* An external job's syncer before its model is known: streams and HTTP
 * only (docs/syncer.md). */
static void adopt_start(struct syncer *s, const struct syncer_params *p)
{
	pthread_mutex_init(&s->mu, NULL);
	s->adopting = 1;
	s->prm = p;
	s->js = p->js;
	s->M = p->js->learners.replicas;
	s->t0 = s->last_loop = clock_mono();
	log_info("spec.model.kind external: the model is the one minQuorum "
		 "learners agree on");
}

int syncer_run(const struct syncer_params *p,
	       const volatile sig_atomic_t *stop, struct err *e)
{
	struct syncer *s = calloc(1, sizeof(*s));
	struct stream_server sv;
	struct run_state st = { .finish_at = -1 };
	int rc = -1, leave;

	memset(&sv, 0, sizeof(sv));
	if (!s)
		return err_set(e, "syncer: out of memory");
	grpc_init();
	sv.s = s;
	seed_init(&sv.seed);
	if (seed_declare(&sv.seed, p->js, e)) {   /* nothing started yet */
		free(s);
		grpc_shutdown();
		return -1;
	}
	if (p->js->model.kind == MODEL_EXTERNAL && !p->ft) {
		adopt_start(s, p);
	} else {
		int failed = core_init(s, p, clock_mono(), e) ||
			     stream_cache_init(&sv, s->P, e);

		if (p->init_owned)   /* Θ holds them now */
			free((void *)p->init_params);
		if (failed)
			goto out;
	}
	s->http = httpd_start(p->http_addr, p->http_port, status_http, s, e);
	if (!s->http)
		goto out;
	log_info("HTTP on %s:%d", p->http_addr ? p->http_addr : "0.0.0.0",
		 httpd_port(s->http));
	stream_set_limits(&sv, p->max_message);
	if (stream_start(&sv, p->listen, p->tls, e))
		goto out;
	pthread_mutex_lock(&s->mu);
	s->ready = 1;
	if (s->done) {   /* resumed a finished job: answer `job done` briefly */
		st.finishing = 1;
		st.finish_at = clock_mono() + p->drain_seconds;
	}
	pthread_mutex_unlock(&s->mu);
	do {
		handle_events(&sv);
		pthread_mutex_lock(&s->mu);
		leave = loop_turn(&sv, p, stop, &st);
		pthread_mutex_unlock(&s->mu);
	} while (!leave);
	rc = 0;
out:
	pthread_mutex_lock(&s->mu);
	s->ready = 0;
	s->stopping = 1;
	pthread_mutex_unlock(&s->mu);
	stop_server(&sv);
	if (s->http)
		httpd_stop(s->http);
	cache_release(&sv, s->P);
	if (!s->adopting)
		core_release(s);
	seed_release(&sv.seed);
	free(s);
	grpc_shutdown();
	return rc;
}
