/*
 * syncerproc: the syncer as a real process, driven from outside the way
 * learners and the operator drive it, for the tests that do so
 * (test_syncer_grpc, test_tls). It holds
 *   - free loopback ports, the job's training text, `$BUILD/ddiloco
 *     syncer` started (syncerproc_spawn) and waited for on /readyz, and
 *     killed with its folder removed at the end (kept with KEEP set);
 *   - GET on the syncer's HTTP port (/readyz, /status);
 *   - struct tl, a test learner's Train stream (docs/protocol.md) on a
 *     raw gRPC call, plaintext or mutual TLS, or its Beat call (its
 *     heartbeats on a connection of their own, tl_open_beat). Its messages are packed and
 *     read with the generated protobuf-c code directly, not through
 *     common/wire.h: a second implementation, as a learner of another
 *     version or language would be.
 *
 * Header only, all `static inline`, like testlib.h: each test binary is
 * one file (Makefile), and not every test uses every helper. Include it
 * after <cmocka.h>.
 */
#ifndef DDILOCO_TEST_SYNCERPROC_H
#define DDILOCO_TEST_SYNCERPROC_H

#include <arpa/inet.h>
#include <curl/curl.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fragment.h"
#include "common/pki.h"
#include "common/util.h"
#include "ddiloco/v1/syncer.pb-c.h"
#include "tests/unit/testlib.h"

/* seconds any one wait may take: generous, the machine is shared */
#define WAIT (getenv("WAIT") ? atof(getenv("WAIT")) : 20.0)

/* ---- the process ------------------------------------------------------- */

/* A loopback TCP port free at the time of asking. */
static inline int syncerproc_free_port(void)
{
	struct sockaddr_in a;
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	port = ntohs(a.sin_port);
	close(fd);
	return port;
}

/* DIR/data.txt: 400 short lines, the text the tests' jobs train on. */
static inline void syncerproc_write_text(const char *dir)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/data.txt", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	for (int i = 0; i < 400; i++)
		fprintf(f, "the quick brown fox %d jumps over the lazy dog.\n", i);
	fclose(f);
}

/*
 * Starts `$BUILD/ddiloco syncer --job JOB --listen 127.0.0.1:GRPC_PORT
 * --http 127.0.0.1:HTTP_PORT --checkpoint-dir CKPT [FLAG ARG]` with its
 * stderr into log, opened with log_mode ("w" or "a"); flag NULL: no more
 * arguments. Returns its pid at once.
 */
static inline pid_t syncerproc_spawn(const char *job, int grpc_port,
				     int http_port, const char *ckpt,
				     const char *log, const char *log_mode,
				     const char *flag, const char *arg)
{
	const char *build = getenv("BUILD") ? getenv("BUILD") : "build";
	char bin[256], listen[64], http[64];
	pid_t pid;

	snprintf(bin, sizeof(bin), "%s/ddiloco", build);
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", grpc_port);
	snprintf(http, sizeof(http), "127.0.0.1:%d", http_port);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		FILE *lf = freopen(log, log_mode, stderr);

		(void)lf;
		execl(bin, "ddiloco", "syncer", "--job", job, "--listen", listen,
		      "--http", http, "--checkpoint-dir", ckpt, flag, arg,
		      (char *)NULL);
		_exit(127);
	}
	return pid;
}

static inline long syncerproc_http_get(int port, const char *path, json_t **json);

/* Waits until pid answers 200 on /readyz; fails if it exits first or
 * WAIT passes. */
static inline void syncerproc_wait_ready(pid_t pid, int http_port)
{
	double t0 = clock_mono();

	while (syncerproc_http_get(http_port, "/readyz", NULL) != 200) {
		int st;

		assert_int_equal(waitpid(pid, &st, WNOHANG), 0);
		assert_true(clock_mono() - t0 < WAIT);
		sleep_seconds(0.05);
	}
}

/* The end of a test, passed or not: the process killed if it still runs
 * (*pid > 0; then 0), its folder removed (kept and named when KEEP is
 * set). */
static inline void syncerproc_end(pid_t *pid, const char *dir)
{
	if (*pid > 0) {
		kill(*pid, SIGKILL);
		waitpid(*pid, NULL, 0);
		*pid = 0;
	}
	if (getenv("KEEP"))
		fprintf(stderr, "kept %s\n", dir);
	else
		testlib_rmtree(dir);
}

/* cmocka group setup and teardown: gRPC and libcurl for the whole
 * binary, and no SIGPIPE from a syncer that went away. */
static inline int syncerproc_group_setup(void **state)
{
	(void)state;
	pki_process_init();
	grpc_init();
	curl_global_init(CURL_GLOBAL_DEFAULT);
	signal(SIGPIPE, SIG_IGN);
	return 0;
}

static inline int syncerproc_group_teardown(void **state)
{
	(void)state;
	curl_global_cleanup();
	grpc_shutdown();
	return 0;
}

/* ---- its HTTP port ----------------------------------------------------- */

struct syncerproc_body {
	char *d;
	size_t len;
};

static inline size_t syncerproc_collect(char *ptr, size_t size, size_t n, void *ud)
{
	struct syncerproc_body *b = ud;
	char *nd = realloc(b->d, b->len + size * n + 1);

	if (!nd)
		return 0;
	memcpy(nd + b->len, ptr, size * n);
	b->d = nd;
	b->len += size * n;
	b->d[b->len] = 0;
	return size * n;
}

/* GET http://127.0.0.1:PORT/PATH as text: the status code, the body in
 * *body (the caller frees it; "" when none). */
static inline long syncerproc_http_text(int port, const char *path, char **body)
{
	struct syncerproc_body b = { NULL, 0 };
	char url[128];
	long code = 0;
	CURL *c = curl_easy_init();

	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, syncerproc_collect);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 5L);
	if (curl_easy_perform(c) == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	curl_easy_cleanup(c);
	*body = b.d ? b.d : strdup("");
	return code;
}

/* GET http://127.0.0.1:PORT/PATH: the status code (0: no answer); with
 * json, the body parsed into *json (it must be JSON). */
static inline long syncerproc_http_get(int port, const char *path, json_t **json)
{
	char *body;
	long code = syncerproc_http_text(port, path, &body);

	if (json) {
		*json = json_loads(body, 0, NULL);
		assert_non_null(*json);
	}
	free(body);
	return code;
}

/* The value of an unlabelled metric on PORT's /metrics; fails when
 * absent. */
static inline double syncerproc_metric(int port, const char *name)
{
	char *body, *at, key[128];
	double v;

	assert_int_equal(syncerproc_http_text(port, "/metrics", &body), 200);
	snprintf(key, sizeof(key), "\n%s ", name);
	at = strstr(body, key);
	if (!at)
		fail_msg("%s is not on /metrics", name);
	v = atof(at + strlen(key));
	free(body);
	return v;
}

/* ---- a test learner's Train stream ------------------------------------- */

struct tl {
	grpc_channel *ch;
	grpc_completion_queue *cq;
	grpc_call *call;
	grpc_metadata_array md, trailing;
	grpc_status_code code;
	grpc_slice details;
	grpc_byte_buffer *rbuf;
	int recv_pending, md_sent, md_recv, status_done;
	int tag_status, tag_recv;     /* their addresses are the tags */
};

/* A deadline s seconds from now. */
static inline gpr_timespec tl_in(double s)
{
	return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
			    gpr_time_from_millis((int64_t)(s * 1000), GPR_TIMESPAN));
}

/*
 * Opens a Train call to 127.0.0.1:port and starts waiting for its status.
 * ca NULL: plaintext; else TLS trusting ca, with cert (key and
 * certificate) as the client certificate, or none when cert is NULL.
 * The initial metadata goes with the first message (tl_send_raw), or at
 * once with tl_send_metadata.
 */
static inline void tl_open_method(struct tl *t, int port, const char *name,
				  const char *ca, const struct pki_pem *cert)
{
	char target[64];
	grpc_channel_credentials *cred;
	grpc_slice method = grpc_slice_from_static_string(name);
	/* a connection of its own, as the sidecar's Beat channel has */
	grpc_arg own = { GRPC_ARG_INTEGER,
			 (char *)GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, { .integer = 1 } };
	grpc_channel_args ca_own = { 1, &own };
	grpc_op op;

	memset(t, 0, sizeof(*t));
	if (!ca) {
		cred = grpc_insecure_credentials_create();
	} else {
		grpc_ssl_pem_key_cert_pair pair = { cert ? cert->key : NULL,
						    cert ? cert->cert : NULL };

		cred = grpc_ssl_credentials_create_ex(ca, cert ? &pair : NULL,
						      NULL, NULL);
	}
	snprintf(target, sizeof(target), "127.0.0.1:%d", port);
	t->ch = grpc_channel_create(target, cred,
				    strstr(name, "/Beat") ? &ca_own : NULL);
	grpc_channel_credentials_release(cred);
	t->cq = grpc_completion_queue_create_for_pluck(NULL);
	t->call = grpc_channel_create_call(t->ch, NULL, GRPC_PROPAGATE_DEFAULTS,
					   t->cq, method, NULL,
					   gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
	grpc_metadata_array_init(&t->md);
	grpc_metadata_array_init(&t->trailing);
	t->details = grpc_empty_slice();
	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
	op.data.recv_status_on_client.trailing_metadata = &t->trailing;
	op.data.recv_status_on_client.status = &t->code;
	op.data.recv_status_on_client.status_details = &t->details;
	assert_int_equal(grpc_call_start_batch(t->call, &op, 1, &t->tag_status, NULL),
			 GRPC_CALL_OK);
}

static inline void tl_open(struct tl *t, int port, const char *ca,
			   const struct pki_pem *cert)
{
	tl_open_method(t, port, "/ddiloco.v1.Syncer/Train", ca, cert);
}

/* A Beat call (proto/ddiloco/v1/syncer.proto) on a connection of its own. */
static inline void tl_open_beat(struct tl *t, int port, const char *ca,
				const struct pki_pem *cert)
{
	tl_open_method(t, port, "/ddiloco.v1.Syncer/Beat", ca, cert);
}

/* Sends the initial metadata now and waits until it is sent. */
static inline void tl_send_metadata(struct tl *t)
{
	grpc_op op;
	int tag;

	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_SEND_INITIAL_METADATA;
	assert_int_equal(grpc_call_start_batch(t->call, &op, 1, &tag, NULL), GRPC_CALL_OK);
	assert_int_equal(grpc_completion_queue_pluck(t->cq, &tag,
		gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type, GRPC_OP_COMPLETE);
	t->md_sent = 1;
}

/* Sends len bytes as one message (the initial metadata with the first);
 * 0 when sent, -1 when the call could not take it. */
static inline int tl_send_raw(struct tl *t, const void *data, size_t len)
{
	grpc_slice sl = grpc_slice_from_copied_buffer(data, len);
	grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
	grpc_op ops[2];
	grpc_event ev;
	int tag, n = 0;

	grpc_slice_unref(sl);
	memset(ops, 0, sizeof(ops));
	if (!t->md_sent) {
		ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
		t->md_sent = 1;
	}
	ops[n].op = GRPC_OP_SEND_MESSAGE;
	ops[n++].data.send_message.send_message = bb;
	assert_int_equal(grpc_call_start_batch(t->call, ops, (size_t)n, &tag, NULL),
			 GRPC_CALL_OK);
	ev = grpc_completion_queue_pluck(t->cq, &tag, tl_in(WAIT), NULL);
	grpc_byte_buffer_destroy(bb);
	return ev.type == GRPC_OP_COMPLETE && ev.success ? 0 : -1;
}

static inline int tl_send(struct tl *t, Ddiloco__V1__LearnerMessage *m)
{
	size_t len = ddiloco__v1__learner_message__get_packed_size(m);
	uint8_t *buf = malloc(len + 1);
	int rc;

	ddiloco__v1__learner_message__pack(m, buf);
	rc = tl_send_raw(t, buf, len);
	free(buf);
	return rc;
}

/* Next message within timeout, or NULL (timeout or end of stream). A
 * receive that timed out stays armed (recv_pending) for the next call. */
static inline Ddiloco__V1__SyncerMessage *tl_recv(struct tl *t, double timeout)
{
	Ddiloco__V1__SyncerMessage *m;
	grpc_byte_buffer_reader r;
	grpc_event ev;
	grpc_slice sl;

	if (!t->recv_pending) {
		grpc_op ops[2];
		int n = 0;

		memset(ops, 0, sizeof(ops));
		if (!t->md_recv) {
			ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
			ops[n++].data.recv_initial_metadata.recv_initial_metadata = &t->md;
			t->md_recv = 1;
		}
		ops[n].op = GRPC_OP_RECV_MESSAGE;
		ops[n++].data.recv_message.recv_message = &t->rbuf;
		assert_int_equal(grpc_call_start_batch(t->call, ops, (size_t)n,
						       &t->tag_recv, NULL), GRPC_CALL_OK);
		t->recv_pending = 1;
	}
	ev = grpc_completion_queue_pluck(t->cq, &t->tag_recv, tl_in(timeout), NULL);
	if (ev.type != GRPC_OP_COMPLETE)
		return NULL;
	t->recv_pending = 0;
	if (!ev.success || !t->rbuf)
		return NULL;
	grpc_byte_buffer_reader_init(&r, t->rbuf);
	sl = grpc_byte_buffer_reader_readall(&r);
	grpc_byte_buffer_reader_destroy(&r);
	grpc_byte_buffer_destroy(t->rbuf);
	t->rbuf = NULL;
	m = ddiloco__v1__syncer_message__unpack(NULL, GRPC_SLICE_LENGTH(sl),
						GRPC_SLICE_START_PTR(sl));
	grpc_slice_unref(sl);
	assert_non_null(m);
	return m;
}

/* The call's final status, its details copied into msg[len] (msg may be
 * NULL). The messages still to come are read first, as the status needs;
 * with messages set, *messages is raised by their number. */
static inline grpc_status_code tl_status(struct tl *t, char *msg, size_t len,
					 int *messages)
{
	if (!t->status_done) {
		Ddiloco__V1__SyncerMessage *m;
		grpc_event ev;

		while ((m = tl_recv(t, WAIT))) {
			if (messages)
				(*messages)++;
			ddiloco__v1__syncer_message__free_unpacked(m, NULL);
		}
		ev = grpc_completion_queue_pluck(t->cq, &t->tag_status, tl_in(WAIT), NULL);
		assert_int_equal(ev.type, GRPC_OP_COMPLETE);
		t->status_done = 1;
	}
	if (msg) {
		size_t n = GRPC_SLICE_LENGTH(t->details);

		n = n < len - 1 ? n : len - 1;
		memcpy(msg, GRPC_SLICE_START_PTR(t->details), n);
		msg[n] = 0;
	}
	return t->code;
}

/* Cancels the call (a learner leaving) and frees all of it. */
static inline void tl_close(struct tl *t)
{
	grpc_event ev;

	grpc_call_cancel(t->call, NULL);
	tl_status(t, NULL, 0, NULL);
	grpc_slice_unref(t->details);
	grpc_metadata_array_destroy(&t->md);
	grpc_metadata_array_destroy(&t->trailing);
	grpc_call_unref(t->call);
	grpc_channel_destroy(t->ch);
	grpc_completion_queue_shutdown(t->cq);
	do
		ev = grpc_completion_queue_pluck(t->cq, NULL, tl_in(1), NULL);
	while (ev.type != GRPC_QUEUE_SHUTDOWN && ev.type != GRPC_QUEUE_TIMEOUT);
	grpc_completion_queue_destroy(t->cq);
}

/* ---- the learner's messages -------------------------------------------- */

/* Hello as learner id of job, for the fragments of ft, of process
 * `incarnation` (0: none attached yet); returns tl_send's result. */
static inline int tl_hello_as(struct tl *t, const struct frag_table *ft,
			      const char *job, uint32_t id,
			      uint64_t fingerprint, uint64_t incarnation)
{
	Ddiloco__V1__LearnerMessage m = DDILOCO__V1__LEARNER_MESSAGE__INIT;
	Ddiloco__V1__Hello h = DDILOCO__V1__HELLO__INIT;
	uint64_t sizes[64];

	assert_true(ft->nfrags <= 64);
	for (int q = 0; q < ft->nfrags; q++)
		sizes[q] = ft->frags[q].numel;
	h.learner_id = id;
	h.fingerprint = fingerprint;
	h.fragments = (uint32_t)ft->nfrags;
	h.n_fragment_sizes = (size_t)ft->nfrags;
	h.fragment_sizes = sizes;
	h.incarnation = incarnation;
	h.job = (char *)job;
	m.kind_case = DDILOCO__V1__LEARNER_MESSAGE__KIND_HELLO;
	m.hello = &h;
	return tl_send(t, &m);
}

/* tl_hello_as of incarnation 1000 + id. */
static inline int tl_hello(struct tl *t, const struct frag_table *ft,
			   const char *job, uint32_t id, uint64_t fingerprint)
{
	return tl_hello_as(t, ft, job, id, fingerprint, 1000 + id);
}

/* A Beat's Hello: learner id of job, process `incarnation`. */
static inline int tl_beat_hello(struct tl *t, const char *job, uint32_t id,
				uint64_t incarnation)
{
	Ddiloco__V1__LearnerMessage m = DDILOCO__V1__LEARNER_MESSAGE__INIT;
	Ddiloco__V1__Hello h = DDILOCO__V1__HELLO__INIT;

	h.learner_id = id;
	h.incarnation = incarnation;
	h.job = (char *)job;
	m.kind_case = DDILOCO__V1__LEARNER_MESSAGE__KIND_HELLO;
	m.hello = &h;
	return tl_send(t, &m);
}

/* 1 when the syncer's initial metadata came within timeout with the
 * mark of a Beat it took ("ddiloco-beat: taken"; common/wire.h). */
static inline int tl_beat_taken(struct tl *t, double timeout)
{
	grpc_op op;
	grpc_event ev;
	int tag, taken = 0;

	assert_false(t->md_recv);
	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_RECV_INITIAL_METADATA;
	op.data.recv_initial_metadata.recv_initial_metadata = &t->md;
	assert_int_equal(grpc_call_start_batch(t->call, &op, 1, &tag, NULL),
			 GRPC_CALL_OK);
	t->md_recv = 1;
	ev = grpc_completion_queue_pluck(t->cq, &tag, tl_in(timeout), NULL);
	if (ev.type != GRPC_OP_COMPLETE || !ev.success)
		return 0;
	for (size_t i = 0; i < t->md.count; i++)
		if (!grpc_slice_str_cmp(t->md.metadata[i].key, "ddiloco-beat") &&
		    !grpc_slice_str_cmp(t->md.metadata[i].value, "taken"))
			taken = 1;
	return taken;
}

/* A heartbeat at step with tokens trained, 0.05 s a step, loss 5. */
static inline void tl_heartbeat(struct tl *t, uint64_t step, uint64_t tokens)
{
	Ddiloco__V1__LearnerMessage m = DDILOCO__V1__LEARNER_MESSAGE__INIT;
	Ddiloco__V1__Heartbeat hb = DDILOCO__V1__HEARTBEAT__INIT;

	hb.step = step;
	hb.tokens = tokens;
	hb.step_time = 0.05;
	hb.train_loss = 5.0;
	m.kind_case = DDILOCO__V1__LEARNER_MESSAGE__KIND_HEARTBEAT;
	m.heartbeat = &hb;
	assert_int_equal(tl_send(t, &m), 0);
}

/* An f32 answer to the Pull (round, frag): delta[n] (NULL: an empty
 * payload) trained from fragment version base over `steps` steps of 32
 * tokens, the learner at step `step`. */
static inline void tl_answer(struct tl *t, uint64_t round, int frag, uint64_t base,
			     uint64_t steps, uint64_t step, const float *delta,
			     size_t n)
{
	Ddiloco__V1__LearnerMessage m = DDILOCO__V1__LEARNER_MESSAGE__INIT;
	Ddiloco__V1__Answer a = DDILOCO__V1__ANSWER__INIT;

	a.fragment = (uint32_t)frag;
	a.round = round;
	a.base_version = base;
	a.steps = steps;
	a.tokens = steps * 32;
	a.step = step;
	a.encoding = DDILOCO__V1__ENCODING__ENCODING_F32;
	a.payload.data = (uint8_t *)delta;
	a.payload.len = delta ? 4 * n : 0;
	m.kind_case = DDILOCO__V1__LEARNER_MESSAGE__KIND_ANSWER;
	m.answer = &a;
	assert_int_equal(tl_send(t, &m), 0);
}

#endif
