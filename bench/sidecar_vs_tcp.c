/*
 * sidecar_vs_tcp: how fast the sidecar moves answers to a syncer, against
 * raw loopback TCP in the same run (target ≥ 0.7).
 *
 * Sidecar path: a learner thread polls the exchange (4 fragments of 1 Mi
 * floats, f32 answers of 4 MiB); the real sidecar (sidecar_run) carries
 * them over gRPC to a sink server in this process that keeps one Pull per
 * fragment outstanding and counts the answer bytes it receives.
 * TCP path: one thread writes 4 MiB buffers into a loopback socket, another
 * reads them. Both run for SECONDS; prints bytes/s of each and the ratio.
 * The sidecar path runs twice: plaintext, then mutual TLS with a job CA
 * and certificates made by common/pki.h, as `ddiloco run` uses them
 * (docs/security.md); prints the TLS rate and its ratio to plaintext.
 *
 * The two paths run one after the other, so on a shared machine the
 * ratio of their rates also measures how the load changed in between.
 * Beside it, each path's bytes per CPU second of this process (all its
 * threads, gRPC's included) and their ratio, sidecar_vs_tcp_cpu: what
 * each byte costs, which the load changes much less.
 * SIDECAR_BENCH_ONLY=plain or tls runs that path alone, for a profile
 * (docs/sidecar.md, Mutual TLS).
 */
#include <arpa/inet.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <malloc.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/exchange.h"
#include "common/log.h"
#include "common/pki.h"
#include "common/tls.h"
#include "common/util.h"
#include "ddiloco/v1/syncer.pb-c.h"
#include "sidecar/sidecar.h"

#define P 4
#define N (1 << 20)
#define SECONDS 3.0
#define CHUNK (4u << 20)

/* CPU seconds of this process, every thread */
static double cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* a path's figures */
struct rate {
	double bytes_per_s, bytes_per_cpu_s;
};

/* ---- the sink server ---- */

struct sink {
	grpc_server *srv;
	grpc_completion_queue *cq;
	int port;
	volatile sig_atomic_t *stop_sidecar;   /* sidecar_run's stop */
	double t0, t1, cpu0, cpu1;
	uint64_t bytes, answers;
	volatile int shutdown;   /* set by main once the sidecar is done */
};

static grpc_byte_buffer *pack_syncer(const Ddiloco__V1__SyncerMessage *m)
{
	size_t n = ddiloco__v1__syncer_message__get_packed_size(m);
	grpc_slice sl = grpc_slice_malloc(n);
	grpc_byte_buffer *bb;

	ddiloco__v1__syncer_message__pack(m, GRPC_SLICE_START_PTR(sl));
	bb = grpc_raw_byte_buffer_create(&sl, 1);
	grpc_slice_unref(sl);
	return bb;
}

static grpc_byte_buffer *welcome_msg(void)
{
	Ddiloco__V1__SyncerMessage m = DDILOCO__V1__SYNCER_MESSAGE__INIT;
	Ddiloco__V1__Welcome w = DDILOCO__V1__WELCOME__INIT;

	w.fragments = P;
	m.kind_case = DDILOCO__V1__SYNCER_MESSAGE__KIND_WELCOME;
	m.welcome = &w;
	return pack_syncer(&m);
}

static grpc_byte_buffer *pull_msg(uint32_t p, uint64_t round)
{
	Ddiloco__V1__SyncerMessage m = DDILOCO__V1__SYNCER_MESSAGE__INIT;
	Ddiloco__V1__Pull pl = DDILOCO__V1__PULL__INIT;

	pl.fragment = p;
	pl.round = round;
	m.kind_case = DDILOCO__V1__SYNCER_MESSAGE__KIND_PULL;
	m.pull = &pl;
	return pack_syncer(&m);
}

/* Runs one call: Welcome, P pulls, then a new pull per answer. */
static void *sink_main(void *arg)
{
	struct sink *k = arg;
	grpc_call *call = NULL;
	grpc_call_details det;
	grpc_metadata_array md;
	grpc_byte_buffer *rbuf = NULL, *sq[P + 2];
	int nq = 0, sending = 0, cancelled = 0, pending = 0;
	uint64_t round = 0;
	grpc_op op;
	void *t_new = (void *)1, *t_recv = (void *)2, *t_send = (void *)3,
	     *t_close = (void *)4;
	int stop = 0, notified = 0;

	grpc_call_details_init(&det);
	grpc_metadata_array_init(&md);
	grpc_server_request_call(k->srv, &call, &det, &md, k->cq, k->cq, t_new);
	pending++;
	while (pending > 0 || !notified) {
		gpr_timespec dl = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
					       gpr_time_from_millis(20, GPR_TIMESPAN));
		grpc_event ev = grpc_completion_queue_next(k->cq, dl, NULL);

		if (!stop && k->t0 > 0 && clock_mono() - k->t0 > SECONDS) {
			stop = 1;
			k->t1 = clock_mono();
			k->cpu1 = cpu_now();
			*k->stop_sidecar = 1;
		}
		if (k->shutdown && !notified) {
			/* the shutdown order of docs/design.md §7 */
			grpc_server_shutdown_and_notify(k->srv, k->cq, (void *)9);
			grpc_server_cancel_all_calls(k->srv);
			notified = 1;
			pending++;
		}
		if (ev.type != GRPC_OP_COMPLETE)
			goto pump;
		pending--;
		if (ev.tag == t_new) {
			if (!ev.success)
				continue;
			memset(&op, 0, sizeof(op));
			op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
			op.data.recv_close_on_server.cancelled = &cancelled;
			grpc_call_start_batch(call, &op, 1, t_close, NULL);
			pending++;
			memset(&op, 0, sizeof(op));
			op.op = GRPC_OP_SEND_INITIAL_METADATA;
			grpc_call_start_batch(call, &op, 1, (void *)5, NULL);
			pending++;
			sq[nq++] = welcome_msg();
			for (uint32_t p = 0; p < P; p++)
				sq[nq++] = pull_msg(p, ++round);
			memset(&op, 0, sizeof(op));
			op.op = GRPC_OP_RECV_MESSAGE;
			op.data.recv_message.recv_message = &rbuf;
			grpc_call_start_batch(call, &op, 1, t_recv, NULL);
			pending++;
		} else if (ev.tag == t_recv) {
			if (!ev.success || !rbuf)
				continue;
			{
				size_t len = grpc_byte_buffer_length(rbuf);
				uint8_t b0 = 0;
				grpc_byte_buffer_reader r;
				grpc_slice *s;

				/* LearnerMessage field 2 (answer): check the first
				 * byte, never unpack the payload */
				grpc_byte_buffer_reader_init(&r, rbuf);
				if (grpc_byte_buffer_reader_peek(&r, &s) &&
				    GRPC_SLICE_LENGTH(*s) > 0)
					b0 = GRPC_SLICE_START_PTR(*s)[0];
				grpc_byte_buffer_reader_destroy(&r);
				if (b0 == 0x12 && len > 1000) {
					if (k->t0 == 0) {
						k->t0 = clock_mono();
						k->cpu0 = cpu_now();
					}
					else
						k->bytes += len;
					k->answers++;
					if (!stop && nq < P + 2)
						sq[nq++] = pull_msg((uint32_t)(round % P),
								    round + 1),
						round++;
				}
			}
			grpc_byte_buffer_destroy(rbuf);
			rbuf = NULL;
			memset(&op, 0, sizeof(op));
			op.op = GRPC_OP_RECV_MESSAGE;
			op.data.recv_message.recv_message = &rbuf;
			grpc_call_start_batch(call, &op, 1, t_recv, NULL);
			pending++;
		} else if (ev.tag == t_send) {
			sending = 0;
			grpc_byte_buffer_destroy(sq[0]);
			memmove(sq, sq + 1, (size_t)(nq - 1) * sizeof(sq[0]));
			nq--;
		}
pump:
		if (call && !sending && nq > 0 && !cancelled) {
			memset(&op, 0, sizeof(op));
			op.op = GRPC_OP_SEND_MESSAGE;
			op.data.send_message.send_message = sq[0];
			if (grpc_call_start_batch(call, &op, 1, t_send, NULL) ==
			    GRPC_CALL_OK) {
				sending = 1;
				pending++;
			}
		}
	}
	for (int i = 0; i < nq; i++)
		grpc_byte_buffer_destroy(sq[i]);
	if (rbuf)
		grpc_byte_buffer_destroy(rbuf);
	if (call)
		grpc_call_unref(call);
	grpc_call_details_destroy(&det);
	grpc_metadata_array_destroy(&md);
	return NULL;
}

/* ---- the learner ---- */

struct learner {
	struct exchange *x;
	float *params;
	volatile int stop;
};

static void *learner_main(void *arg)
{
	struct learner *l = arg;

	while (!exchange_learner_start(l->x, l->params) && !l->stop)
		exchange_wait(l->x, 0.01);
	for (uint64_t step = 1; !l->stop; step++) {
		struct exchange_step st = { .step = step, .tokens = 1 };
		struct exchange_poll_result res;

		l->params[step % ((size_t)P * N)] += 1e-3f;
		exchange_poll(l->x, l->params, &st, &res);
		if (!res.served)
			exchange_wait(l->x, 0.0005);
	}
	return NULL;
}

/* A job CA, the sink's certificate and learner 0's, for the TLS run. */
struct bench_pki {
	struct pki_pem ca, srv, learner;
};

static void bench_pki_make(struct bench_pki *b)
{
	const char *ips[] = { "127.0.0.1", NULL };
	const char *srv_uri[] = { "ddiloco://bench/syncer", NULL };
	const char *l_uri[] = { "ddiloco://bench/learner/0", NULL };
	struct pki_leaf_req srv = { .common_name = "bench syncer", .ips = ips,
				    .uris = srv_uri, .server = 1 };
	struct pki_leaf_req l = { .common_name = "bench learner 0", .uris = l_uri,
				  .client = 1 };
	struct err e;

	if (pki_ca_new("bench", 0, &b->ca, &e) || pki_issue(&b->ca, &srv, &b->srv, &e) ||
	    pki_issue(&b->ca, &l, &b->learner, &e)) {
		fprintf(stderr, "sidecar_vs_tcp: %s\n", e.msg);
		exit(1);
	}
}

static void bench_pki_release(struct bench_pki *b)
{
	pki_pem_release(&b->ca);
	pki_pem_release(&b->srv);
	pki_pem_release(&b->learner);
}

/* pki NULL: plaintext. */
static struct rate sidecar_rate(const struct bench_pki *pki)
{
	struct rate r = { 0 };
	struct frag_tensor t[P];
	struct frag_table ft;
	struct exchange *sx, *lx;
	struct sink k = { 0 };
	struct learner l = { 0 };
	struct sidecar *sc;
	volatile sig_atomic_t stop_sidecar = 0;
	struct sidecar_opts o = { 0 };
	struct tls_files tf;
	pthread_t th_sink, th_learner;
	char dir[] = "/dev/shm/ddsc-bench-XXXXXX", target[64], cmd[64];
	grpc_server_credentials *cred;
	grpc_arg args[3];
	grpc_channel_args ca = { 3, args };
	struct err e;

	for (int p = 0; p < P; p++)
		t[p] = (struct frag_tensor){ .offset = (size_t)p * N, .numel = N };
	if (frag_table_init(&ft, t, P, P, &e) || !mkdtemp(dir) ||
	    exchange_open(dir, EXCHANGE_SIDECAR, &ft, &sx, &e) ||
	    exchange_open(dir, EXCHANGE_LEARNER, &ft, &lx, &e)) {
		fprintf(stderr, "sidecar_vs_tcp: %s\n", e.msg);
		exit(1);
	}
	for (int p = 0; p < P; p++) {
		memset(exchange_inbox_begin(sx, p), 0, N * sizeof(float));
		exchange_inbox_commit(sx, p, 1);
	}
	grpc_init();
	args[0].type = GRPC_ARG_INTEGER;
	args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
	args[0].value.integer = 64 << 20;
	args[1].type = GRPC_ARG_INTEGER;
	args[1].key = (char *)GRPC_ARG_HTTP2_MAX_FRAME_SIZE;
	args[1].value.integer = (16 << 20) - 1;
	args[2].type = GRPC_ARG_INTEGER;
	args[2].key = (char *)GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES;
	args[2].value.integer = 64 << 20;
	k.cq = grpc_completion_queue_create_for_next(NULL);
	k.srv = grpc_server_create(&ca, NULL);
	grpc_server_register_completion_queue(k.srv, k.cq, NULL);
	if (pki) {
		grpc_ssl_pem_key_cert_pair pair = { pki->srv.key, pki->srv.cert };

		cred = grpc_ssl_server_credentials_create_ex(pki->ca.cert, &pair, 1,
			GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY, NULL);
		tf = (struct tls_files){ pki->learner.cert, pki->learner.key,
					 pki->ca.cert };
		o.tls = &tf;
	} else {
		cred = grpc_insecure_server_credentials_create();
	}
	k.port = grpc_server_add_http2_port(k.srv, "127.0.0.1:0", cred);
	grpc_server_credentials_release(cred);
	grpc_server_start(k.srv);

	snprintf(target, sizeof(target), "127.0.0.1:%d", k.port);
	o.target = target;
	o.job = "bench";
	sc = sidecar_new(&o, sx, &ft, &e);
	k.stop_sidecar = &stop_sidecar;
	l.x = lx;
	l.params = calloc((size_t)P * N, sizeof(float));
	pthread_create(&th_sink, NULL, sink_main, &k);
	pthread_create(&th_learner, NULL, learner_main, &l);
	if (sidecar_run(sc, &stop_sidecar, &e) < 0)
		fprintf(stderr, "sidecar_vs_tcp: %s\n", e.msg);
	l.stop = 1;
	pthread_join(th_learner, NULL);
	k.shutdown = 1;
	pthread_join(th_sink, NULL);
	grpc_server_destroy(k.srv);
	grpc_completion_queue_shutdown(k.cq);
	while (grpc_completion_queue_next(k.cq, gpr_inf_future(GPR_CLOCK_REALTIME),
					  NULL).type != GRPC_QUEUE_SHUTDOWN)
		;
	grpc_completion_queue_destroy(k.cq);
	grpc_shutdown();
	printf("sidecar%s_answers=%llu\n", pki ? "_tls" : "",
	       (unsigned long long)k.answers);
	sidecar_free(sc);
	exchange_close(lx);
	exchange_close(sx);
	frag_table_release(&ft);
	free(l.params);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) || !(k.t1 > k.t0 && k.t0 > 0 && k.cpu1 > k.cpu0))
		return r;
	r.bytes_per_s = (double)k.bytes / (k.t1 - k.t0);
	r.bytes_per_cpu_s = (double)k.bytes / (k.cpu1 - k.cpu0);
	return r;
}

/* ---- raw TCP ---- */

struct tcp_reader {
	int fd;
	uint64_t bytes;
};

static void *tcp_read_main(void *arg)
{
	struct tcp_reader *r = arg;
	char *b = malloc(CHUNK);
	ssize_t n;

	while ((n = read(r->fd, b, CHUNK)) > 0)
		r->bytes += (uint64_t)n;
	free(b);
	return NULL;
}

static struct rate tcp_rate(void)
{
	struct rate rt = { 0 };
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t al = sizeof(a);
	int ls = socket(AF_INET, SOCK_STREAM, 0), cs, ss;
	struct tcp_reader r = { 0 };
	pthread_t th;
	char *b = calloc(1, CHUNK);
	double t0, t1, cpu0;
	uint64_t sent = 0;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, 1) ||
	    getsockname(ls, (struct sockaddr *)&a, &al))
		return rt;
	cs = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(cs, (struct sockaddr *)&a, sizeof(a)))
		return rt;
	ss = accept(ls, NULL, NULL);
	r.fd = ss;
	pthread_create(&th, NULL, tcp_read_main, &r);
	t0 = clock_mono();
	cpu0 = cpu_now();
	while ((t1 = clock_mono()) - t0 < SECONDS) {
		/* fresh contents each time, as a learner's Δ would be */
		b[sent % CHUNK] ^= 1;
		for (size_t off = 0; off < CHUNK;) {
			ssize_t n = write(cs, b + off, CHUNK - off);

			if (n <= 0)
				return rt;
			off += (size_t)n;
		}
		sent += CHUNK;
	}
	shutdown(cs, SHUT_WR);
	pthread_join(th, NULL);
	t1 = clock_mono();
	rt.bytes_per_s = (double)r.bytes / (t1 - t0);
	rt.bytes_per_cpu_s = (double)r.bytes / (cpu_now() - cpu0);
	close(cs);
	close(ss);
	close(ls);
	free(b);
	return rt;
}

int main(void)
{
	struct bench_pki pki;
	struct rate s, t, st;
	const char *only = getenv("SIDECAR_BENCH_ONLY");

	log_init("bench");
	/* as cmd_sidecar.c */
	mallopt(M_ARENA_MAX, 1);
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 1 << 30);
	mallopt(M_TOP_PAD, 64 << 20);
	/* SIDECAR_BENCH_ONLY=plain|tls: that path alone (a profile's; the
	 * ratios are then not printed) */
	if (only && strcmp(only, "plain") && strcmp(only, "tls")) {
		fprintf(stderr, "SIDECAR_BENCH_ONLY: '%s' is not plain or tls\n", only);
		return 2;
	}
	if (only) {
		if (!strcmp(only, "tls"))
			bench_pki_make(&pki);
		s = sidecar_rate(!strcmp(only, "tls") ? &pki : NULL);
		if (!strcmp(only, "tls"))
			bench_pki_release(&pki);
		printf("sidecar_%s_bytes_per_s=%.0f\nsidecar_%s_bytes_per_cpu_s=%.0f\n",
		       only, s.bytes_per_s, only, s.bytes_per_cpu_s);
		return s.bytes_per_s > 0 ? 0 : 1;
	}
	t = tcp_rate();
	s = sidecar_rate(NULL);
	bench_pki_make(&pki);
	st = sidecar_rate(&pki);
	bench_pki_release(&pki);
	printf("tcp_bytes_per_s=%.0f\nsidecar_bytes_per_s=%.0f\n",
	       t.bytes_per_s, s.bytes_per_s);
	printf("sidecar_vs_tcp=%.3f\n",
	       t.bytes_per_s > 0 ? s.bytes_per_s / t.bytes_per_s : 0.0);
	printf("sidecar_tls_bytes_per_s=%.0f\n", st.bytes_per_s);
	printf("sidecar_tls_vs_tcp=%.3f\n",
	       t.bytes_per_s > 0 ? st.bytes_per_s / t.bytes_per_s : 0.0);
	printf("sidecar_tls_vs_plaintext=%.3f\n",
	       s.bytes_per_s > 0 ? st.bytes_per_s / s.bytes_per_s : 0.0);
	printf("tcp_bytes_per_cpu_s=%.0f\nsidecar_bytes_per_cpu_s=%.0f\n"
	       "sidecar_tls_bytes_per_cpu_s=%.0f\n", t.bytes_per_cpu_s,
	       s.bytes_per_cpu_s, st.bytes_per_cpu_s);
	printf("sidecar_vs_tcp_cpu=%.3f\nsidecar_tls_vs_tcp_cpu=%.3f\n",
	       t.bytes_per_cpu_s > 0 ? s.bytes_per_cpu_s / t.bytes_per_cpu_s : 0.0,
	       t.bytes_per_cpu_s > 0 ? st.bytes_per_cpu_s / t.bytes_per_cpu_s : 0.0);
	return s.bytes_per_s > 0 && t.bytes_per_s > 0 && st.bytes_per_s > 0 ? 0 : 1;
}
