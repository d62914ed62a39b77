/*
 * server: the syncer's gRPC server made and started — its limits (the
 * largest message of the fragment table, the memory quota for the
 * calls), its two methods (Train and Beat), plaintext or mutual TLS, and
 * the calls it waits for (docs/syncer.md, gRPC details). What happens on
 * those calls is stream.c's; its stop is stream.c's too, as it drains
 * the calls' events.
 */
#include "syncer/stream_int.h"

#include <stdlib.h>

#include <grpc/grpc_security.h>
#include <grpc/support/time.h>

#include "common/encoding.h"
#include "common/log.h"
#include "common/wire.h"

/* gRPC limits (docs/syncer.md, gRPC details): a sidecar needs one stream
 * at a time, two while a new one replaces the old */
#define MAX_STREAMS_PER_CONN 4
#define STREAM_SPARE 8
#define QUOTA_MIN_BYTES ((size_t)256 << 20)

gpr_timespec stream_deadline(double seconds)
{
	if (seconds < 0)
		seconds = 0;
	return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
			    gpr_time_from_micros((int64_t)(seconds * 1e6),
						 GPR_TIMESPAN));
}

void stream_request_call(struct stream_server *sv, int beat)
{
	struct conn *c = calloc(1, sizeof(*c));
	grpc_call_error rc;

	if (!c) {
		log_error("out of memory for a new stream");
		return;
	}
	c->sv = sv;
	c->learner = -1;
	c->evaluator = -1;
	c->cert_learner = -1;
	c->beat = beat;
	c->beat_learner = -1;
	c->t_new = (struct tag){ T_NEW, c };
	c->t_recv = (struct tag){ T_RECV, c };
	c->t_send = (struct tag){ T_SEND, c };
	c->t_status = (struct tag){ T_STATUS, c };
	c->t_close = (struct tag){ T_CLOSE, c };
	grpc_metadata_array_init(&c->md);
	rc = grpc_server_request_registered_call(sv->srv,
						 beat ? sv->beat_method : sv->method,
						 &c->call,
						 &c->deadline, &c->md, NULL,
						 sv->cq, sv->cq, &c->t_new);
	if (rc != GRPC_CALL_OK) {
		log_error("cannot wait for streams: gRPC error %d", rc);
		grpc_metadata_array_destroy(&c->md);
		free(c);
		return;
	}
	if (beat)
		sv->waiting_beat = c;
	else
		sv->waiting = c;
}

/*
 * The memory gRPC may use for the syncer's calls (docs/syncer.md, gRPC
 * details): room for two of the largest fragment message (one in, one
 * out) per learner and per STREAM_SPARE streams more, at least
 * QUOTA_MIN_BYTES.
 */
static size_t quota_bytes(const struct syncer *s)
{
	size_t big = 0, n;

	for (int p = 0; p < s->P; p++) {
		n = enc_size(ENC_F32, s->ft->frags[p].numel) + 1024;
		big = n > big ? n : big;
	}
	n = 2 * big * (size_t)(s->M + STREAM_SPARE);
	return n > QUOTA_MIN_BYTES ? n : QUOTA_MIN_BYTES;
}

/*
 * The message limits (docs/protocol.md, Messages in parts): the largest
 * answer payload of the table and its framing, at most the cap
 * (WIRE_MAX_MESSAGE, or the test knob). An external job's table is not
 * known yet: the cap.
 */
void stream_set_limits(struct stream_server *sv, size_t cap)
{
	struct syncer *s = sv->s;
	size_t big = 0;

	for (int p = 0; !s->adopting && p < s->P; p++) {
		size_t n = wire_payload_max(s->ft->frags[p].numel);

		big = n > big ? n : big;
	}
	sv->payload_max = big;
	sv->send_cap = wire_message_limit(SIZE_MAX, cap);
	sv->recv_limit = s->adopting ? sv->send_cap : wire_message_limit(big, cap);
}

int stream_start(struct stream_server *sv, const char *listen,
		 const struct tls_files *tls, struct err *e)
{
	grpc_resource_quota *quota = grpc_resource_quota_create("ddiloco-syncer");
	grpc_arg args[] = {
		{ GRPC_ARG_INTEGER, (char *)GRPC_ARG_ALLOW_REUSEPORT, { .integer = 0 } },
		{ GRPC_ARG_INTEGER, (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
		  { .integer = (int)sv->recv_limit } },
		{ GRPC_ARG_INTEGER, (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH,
		  { .integer = (int)sv->send_cap } },
		{ GRPC_ARG_INTEGER,
		  (char *)GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
		  { .integer = 500 } },
		{ GRPC_ARG_INTEGER, (char *)GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS,
		  { .integer = 1 } },
		{ GRPC_ARG_INTEGER, (char *)GRPC_ARG_KEEPALIVE_TIME_MS,
		  { .integer = 2000 } },
		{ GRPC_ARG_INTEGER, (char *)GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
		  { .integer = 4000 } },
		{ GRPC_ARG_INTEGER, (char *)GRPC_ARG_MAX_CONCURRENT_STREAMS,
		  { .integer = MAX_STREAMS_PER_CONN } },
		{ GRPC_ARG_INTEGER, (char *)GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
		  { .integer = SYNCER_HANDSHAKE_TIMEOUT * 1000 } },
		{ GRPC_ARG_INTEGER, (char *)GRPC_ARG_MAX_CONNECTION_IDLE_MS,
		  { .integer = SYNCER_IDLE_SECONDS * 1000 } },
		{ .type = GRPC_ARG_POINTER, .key = (char *)GRPC_ARG_RESOURCE_QUOTA,
		  .value.pointer = { quota, grpc_resource_quota_arg_vtable() } },
	};
	grpc_channel_args ca = { sizeof(args) / sizeof(args[0]), args };
	grpc_server_credentials *cred;
	int port;

	size_t qb = quota_bytes(sv->s);

	grpc_resource_quota_resize(quota, qb);
	sv->cq = grpc_completion_queue_create_for_next(NULL);
	sv->srv = grpc_server_create(&ca, NULL);
	grpc_resource_quota_unref(quota);   /* the server holds its own */
	log_debug("gRPC limits: %d streams a connection, %zu MiB of buffers, "
		  "messages of %zu bytes in, %zu out (larger payloads in parts), "
		  "%d s to handshake", MAX_STREAMS_PER_CONN, qb >> 20,
		  sv->recv_limit, sv->send_cap, SYNCER_HANDSHAKE_TIMEOUT);
	grpc_server_register_completion_queue(sv->srv, sv->cq, NULL);
	sv->method = grpc_server_register_method(sv->srv,
						 "/ddiloco.v1.Syncer/Train", NULL,
						 GRPC_SRM_PAYLOAD_NONE, 0);
	sv->beat_method = grpc_server_register_method(sv->srv,
						 "/ddiloco.v1.Syncer/Beat", NULL,
						 GRPC_SRM_PAYLOAD_NONE, 0);
	if (tls) {
		grpc_ssl_pem_key_cert_pair pair = { tls->key, tls->cert };

		cred = grpc_ssl_server_credentials_create_ex(tls->ca, &pair, 1,
			GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY, NULL);
	} else {
		cred = grpc_insecure_server_credentials_create();
	}
	port = grpc_server_add_http2_port(sv->srv, listen, cred);
	grpc_server_credentials_release(cred);
	if (!port) {
		grpc_event ev;

		grpc_server_destroy(sv->srv);
		sv->srv = NULL;
		grpc_completion_queue_shutdown(sv->cq);
		do
			ev = grpc_completion_queue_next(sv->cq, stream_deadline(1.0), NULL);
		while (ev.type != GRPC_QUEUE_SHUTDOWN);
		grpc_completion_queue_destroy(sv->cq);
		sv->cq = NULL;
		return err_set(e, "syncer: cannot listen on '%s' for gRPC", listen);
	}
	grpc_server_start(sv->srv);
	stream_request_call(sv, 0);
	stream_request_call(sv, 1);
	if (tls)
		log_info("gRPC on %s: mutual TLS, learners known by their "
			 "certificates", listen);
	else
		log_warn("gRPC on %s in PLAINTEXT (spec.syncer.insecure): any "
			 "process that reaches this port can join as any learner",
			 listen);
	return 0;
}
