/*
 * The syncer as a real process ($BUILD/ddiloco syncer on free loopback
 * ports) driven by real gRPC test clients: quorum with a silent learner,
 * a learner leaving mid-stream, garbage and truncated messages, a wrong
 * fingerprint, a NaN answer, the end of a job, and kill -9 then restart
 * with the state restored exactly from the checkpoint.
 *
 * The test clients are written against docs/protocol.md with the same
 * model code a learner uses (model_frag_table), so the fingerprint and
 * fragment sizes are the real ones. They pack and read messages with the
 * generated protobuf-c code directly, not through common/wire.h: a second
 * implementation, as a learner of another version or language would be.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fragment.h"
#include "common/jobspec.h"
#include "common/util.h"
#include "ddiloco/v1/syncer.pb-c.h"
#include "trainer/model.h"
#include "tests/unit/testlib.h"

#define WAIT (getenv("WAIT") ? atof(getenv("WAIT")) : 20.0)   /* generous: the machine is shared */

/* ---- the syncer process ---------------------------------------------- */

struct proc {
	pid_t pid;
	int grpc_port, http_port;
	char dir[128], job[256], ckpt[256], log[256];
	struct frag_table ft;
	size_t nparams;
};

static int free_port(void)
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

static const char *job_fmt =
	"apiVersion: ddiloco.io/v1alpha1\n"
	"kind: DecoupledTrainingJob\n"
	"metadata:\n  name: grpctest\n"
	"spec:\n"
	"  learners:\n    replicas: 3\n"
	"  model:\n    vocabSize: 256\n    context: 16\n    layers: 1\n"
	"    heads: 2\n    channels: 16\n"
	"  data:\n    path: %s/data.txt\n"
	"  optimizer:\n    batchSize: 2\n"
	/* plaintext: these clients test the protocol; identities are
	 * test_tls.c's */
	"  syncer:\n    insecure: true\n    minQuorum: 2\n    fragments: 4\n    overlap: 2\n"
	"    grace: 0.5\n    checkpointEvery: 1\n    evalEvery: %d\n"
	"    evalTokens: 256\n    merge: rda\n"
	"  budget:\n    outerSteps: %d\n";

static void proc_setup(struct proc *p, int eval_every, int outer_steps)
{
	struct job_spec js;
	struct model_config cfg;
	char text[8192];
	FILE *f;

	memset(p, 0, sizeof(*p));
	snprintf(p->dir, sizeof(p->dir), "/tmp/ddiloco-grpc-XXXXXX");
	assert_non_null(mkdtemp(p->dir));
	snprintf(p->job, sizeof(p->job), "%s/job.yaml", p->dir);
	snprintf(p->ckpt, sizeof(p->ckpt), "%s/ckpt", p->dir);
	snprintf(p->log, sizeof(p->log), "%s/syncer.log", p->dir);
	f = fopen(p->job, "w");
	assert_non_null(f);
	fprintf(f, job_fmt, p->dir, eval_every, outer_steps);
	fclose(f);
	snprintf(text, sizeof(text), "%s/data.txt", p->dir);
	f = fopen(text, "w");
	assert_non_null(f);
	for (int i = 0; i < 400; i++)
		fprintf(f, "the quick brown fox %d jumps over the lazy dog.\n", i);
	fclose(f);
	assert_int_equal(jobspec_load(p->job, &js, NULL), 0);
	assert_int_equal(model_config_from_job(&js.model, &cfg, NULL), 0);
	assert_int_equal(model_frag_table(&cfg, 4, &p->ft, NULL), 0);
	p->nparams = model_num_params(&cfg);
	p->grpc_port = free_port();
	p->http_port = free_port();
}

static long http_get(struct proc *p, const char *path, json_t **json);

static void proc_start(struct proc *p)
{
	const char *build = getenv("BUILD") ? getenv("BUILD") : "build";
	char bin[256], listen[64], http[64];
	double t0 = clock_mono();

	snprintf(bin, sizeof(bin), "%s/ddiloco", build);
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", p->grpc_port);
	snprintf(http, sizeof(http), "127.0.0.1:%d", p->http_port);
	p->pid = fork();
	assert_true(p->pid >= 0);
	if (p->pid == 0) {
		FILE *lf = freopen(p->log, "a", stderr);

		(void)lf;
		execl(bin, "ddiloco", "syncer", "--job", p->job, "--listen",
		      listen, "--http", http, "--checkpoint-dir", p->ckpt,
		      (char *)NULL);
		_exit(127);
	}
	while (http_get(p, "/readyz", NULL) != 200) {
		int st;

		assert_int_equal(waitpid(p->pid, &st, WNOHANG), 0);
		assert_true(clock_mono() - t0 < WAIT);
		sleep_seconds(0.05);
	}
}

/* Waits for the process to exit; returns its exit code (-1: signal). */
static int proc_wait(struct proc *p, double timeout)
{
	double t0 = clock_mono();
	int st;

	for (;;) {
		pid_t r = waitpid(p->pid, &st, WNOHANG);

		if (r == p->pid)
			break;
		if (clock_mono() - t0 > timeout) {
			kill(p->pid, SIGKILL);
			waitpid(p->pid, &st, 0);
			p->pid = 0;
			fail_msg("syncer did not exit within %.0f s", timeout);
		}
		sleep_seconds(0.05);
	}
	p->pid = 0;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void proc_teardown(struct proc *p)
{
	if (p->pid > 0) {
		kill(p->pid, SIGKILL);
		waitpid(p->pid, NULL, 0);
		p->pid = 0;
	}
	frag_table_release(&p->ft);
	if (getenv("KEEP"))
		fprintf(stderr, "kept %s\n", p->dir);
	else
		testlib_rmtree(p->dir);
}

/* cmocka setup/teardown: the process is killed even when a test fails */
static int setup(void **state)
{
	*state = calloc(1, sizeof(struct proc));
	return *state ? 0 : -1;
}

static int teardown(void **state)
{
	struct proc *p = *state;

	if (p->dir[0])
		proc_teardown(p);
	free(p);
	return 0;
}

static size_t collect(char *ptr, size_t size, size_t n, void *ud)
{
	struct { char *d; size_t len; } *b = ud;
	char *nd = realloc(b->d, b->len + size * n + 1);

	if (!nd)
		return 0;
	memcpy(nd + b->len, ptr, size * n);
	b->d = nd;
	b->len += size * n;
	b->d[b->len] = 0;
	return size * n;
}

static long http_get(struct proc *p, const char *path, json_t **json)
{
	struct { char *d; size_t len; } b = { NULL, 0 };
	char url[128];
	long code = 0;
	CURL *c = curl_easy_init();

	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", p->http_port, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 5L);
	if (curl_easy_perform(c) == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	curl_easy_cleanup(c);
	if (json) {
		*json = b.d ? json_loads(b.d, 0, NULL) : NULL;
		assert_non_null(*json);
	}
	free(b.d);
	return code;
}

static json_t *status(struct proc *p)
{
	json_t *j;

	assert_int_equal(http_get(p, "/status", &j), 200);
	return j;
}

static long long jint(json_t *j, const char *path)
{
	char buf[128], *save = NULL, *tok;
	json_t *v = j;

	snprintf(buf, sizeof(buf), "%s", path);
	for (tok = strtok_r(buf, ".", &save); tok; tok = strtok_r(NULL, ".", &save)) {
		if (json_is_array(v))
			v = json_array_get(v, (size_t)atoi(tok));
		else
			v = json_object_get(v, tok);
		assert_non_null(v);
	}
	return json_is_integer(v) ? (long long)json_integer_value(v)
				  : (long long)json_number_value(v);
}

/* ---- a test learner ----------------------------------------------------- */

struct tl {
	grpc_channel *ch;
	grpc_completion_queue *cq;
	grpc_call *call;
	grpc_metadata_array md, trailing;
	grpc_status_code code;
	grpc_slice details;
	grpc_byte_buffer *rbuf;
	int recv_pending, got_md, status_done;
	int tag_status, tag_recv;
	/* Pulls seen while waiting for an Update, for expect_pull */
	int npulls;
	uint64_t pull_round[8];
	int pull_frag[8];
};

static void tl_open(struct tl *t, struct proc *p)
{
	char target[64];
	grpc_channel_credentials *cred = grpc_insecure_credentials_create();
	grpc_op ops[2];
	grpc_slice method = grpc_slice_from_static_string("/ddiloco.v1.Syncer/Train");
	int tag;

	memset(t, 0, sizeof(*t));
	snprintf(target, sizeof(target), "127.0.0.1:%d", p->grpc_port);
	t->ch = grpc_channel_create(target, cred, NULL);
	grpc_channel_credentials_release(cred);
	t->cq = grpc_completion_queue_create_for_pluck(NULL);
	t->call = grpc_channel_create_call(t->ch, NULL, GRPC_PROPAGATE_DEFAULTS,
					   t->cq, method, NULL,
					   gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
	grpc_metadata_array_init(&t->md);
	grpc_metadata_array_init(&t->trailing);
	memset(ops, 0, sizeof(ops));
	ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
	assert_int_equal(grpc_call_start_batch(t->call, ops, 1, &tag, NULL), GRPC_CALL_OK);
	assert_int_equal(grpc_completion_queue_pluck(t->cq, &tag,
		gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type, GRPC_OP_COMPLETE);
	ops[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
	ops[0].data.recv_status_on_client.trailing_metadata = &t->trailing;
	ops[0].data.recv_status_on_client.status = &t->code;
	ops[0].data.recv_status_on_client.status_details = &t->details;
	assert_int_equal(grpc_call_start_batch(t->call, ops, 1, &t->tag_status, NULL),
			 GRPC_CALL_OK);
}

static gpr_timespec in(double s)
{
	return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
			    gpr_time_from_millis((int64_t)(s * 1000), GPR_TIMESPAN));
}

static int tl_send_raw(struct tl *t, const void *data, size_t len)
{
	grpc_slice sl = grpc_slice_from_copied_buffer(data, len);
	grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
	grpc_op op;
	grpc_event ev;
	int tag;

	grpc_slice_unref(sl);
	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_SEND_MESSAGE;
	op.data.send_message.send_message = bb;
	assert_int_equal(grpc_call_start_batch(t->call, &op, 1, &tag, NULL), GRPC_CALL_OK);
	ev = grpc_completion_queue_pluck(t->cq, &tag, in(WAIT), NULL);
	grpc_byte_buffer_destroy(bb);
	return ev.type == GRPC_OP_COMPLETE && ev.success ? 0 : -1;
}

static int tl_send(struct tl *t, Ddiloco__V1__LearnerMessage *m)
{
	size_t len = ddiloco__v1__learner_message__get_packed_size(m);
	uint8_t *buf = malloc(len + 1);
	int rc;

	ddiloco__v1__learner_message__pack(m, buf);
	rc = tl_send_raw(t, buf, len);
	free(buf);
	return rc;
}

/* Next message within timeout, or NULL (timeout or end of stream). */
static Ddiloco__V1__SyncerMessage *tl_recv(struct tl *t, double timeout)
{
	Ddiloco__V1__SyncerMessage *m;
	grpc_byte_buffer_reader r;
	grpc_event ev;
	grpc_slice sl;

	if (!t->recv_pending) {
		grpc_op ops[2];
		int n = 0;

		memset(ops, 0, sizeof(ops));
		if (!t->got_md) {
			ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
			ops[n].data.recv_initial_metadata.recv_initial_metadata = &t->md;
			n++;
			t->got_md = 1;
		}
		ops[n].op = GRPC_OP_RECV_MESSAGE;
		ops[n].data.recv_message.recv_message = &t->rbuf;
		n++;
		assert_int_equal(grpc_call_start_batch(t->call, ops, (size_t)n,
						       &t->tag_recv, NULL), GRPC_CALL_OK);
		t->recv_pending = 1;
	}
	ev = grpc_completion_queue_pluck(t->cq, &t->tag_recv, in(timeout), NULL);
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

/* The stream's final status; details copied into msg. */
static grpc_status_code tl_status(struct tl *t, char *msg, size_t len)
{
	grpc_event ev;

	if (!t->status_done) {
		/* the status needs the initial metadata received and every
		 * message read first */
		while (!t->recv_pending || t->got_md) {
			Ddiloco__V1__SyncerMessage *m = tl_recv(t, WAIT);

			if (!m)
				break;
			ddiloco__v1__syncer_message__free_unpacked(m, NULL);
		}
		ev = grpc_completion_queue_pluck(t->cq, &t->tag_status, in(WAIT), NULL);
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

static void tl_close(struct tl *t)
{
	grpc_event ev;

	grpc_call_cancel(t->call, NULL);
	if (t->recv_pending) {
		grpc_completion_queue_pluck(t->cq, &t->tag_recv, in(WAIT), NULL);
		if (t->rbuf)
			grpc_byte_buffer_destroy(t->rbuf);
	}
	tl_status(t, NULL, 0);
	grpc_slice_unref(t->details);
	grpc_metadata_array_destroy(&t->md);
	grpc_metadata_array_destroy(&t->trailing);
	grpc_call_unref(t->call);
	grpc_channel_destroy(t->ch);
	grpc_completion_queue_shutdown(t->cq);
	do
		ev = grpc_completion_queue_pluck(t->cq, NULL, in(1), NULL);
	while (ev.type != GRPC_QUEUE_SHUTDOWN && ev.type != GRPC_QUEUE_TIMEOUT);
	grpc_completion_queue_destroy(t->cq);
}

static void hello(struct tl *t, struct proc *p, uint32_t id, uint64_t fp_delta)
{
	Ddiloco__V1__LearnerMessage m = DDILOCO__V1__LEARNER_MESSAGE__INIT;
	Ddiloco__V1__Hello h = DDILOCO__V1__HELLO__INIT;
	uint64_t sizes[4];

	for (int q = 0; q < 4; q++)
		sizes[q] = p->ft.frags[q].numel;
	h.learner_id = id;
	h.fingerprint = p->ft.fingerprint + fp_delta;
	h.fragments = 4;
	h.n_fragment_sizes = 4;
	h.fragment_sizes = sizes;
	h.incarnation = 1000 + id;
	h.job = (char *)"grpctest";
	m.kind_case = DDILOCO__V1__LEARNER_MESSAGE__KIND_HELLO;
	m.hello = &h;
	assert_int_equal(tl_send(t, &m), 0);
}

/* Hello, then Welcome and one Update per fragment into theta[q]. */
static void join(struct tl *t, struct proc *p, uint32_t id, float **theta,
		 uint64_t *versions)
{
	Ddiloco__V1__SyncerMessage *m;

	tl_open(t, p);
	hello(t, p, id, 0);
	m = tl_recv(t, WAIT);
	assert_non_null(m);
	assert_int_equal(m->kind_case, DDILOCO__V1__SYNCER_MESSAGE__KIND_WELCOME);
	assert_int_equal(m->welcome->fragments, 4);
	if (versions)
		memcpy(versions, m->welcome->versions, 4 * sizeof(uint64_t));
	ddiloco__v1__syncer_message__free_unpacked(m, NULL);
	for (int q = 0; q < 4; q++) {
		m = tl_recv(t, WAIT);
		assert_non_null(m);
		assert_int_equal(m->kind_case, DDILOCO__V1__SYNCER_MESSAGE__KIND_UPDATE);
		assert_int_equal(m->update->fragment, (uint32_t)q);
		assert_int_equal(m->update->round, 0);
		assert_int_equal(m->update->payload.len, 4 * p->ft.frags[q].numel);
		if (theta)
			memcpy(theta[q], m->update->payload.data, m->update->payload.len);
		ddiloco__v1__syncer_message__free_unpacked(m, NULL);
	}
}

static void heartbeat(struct tl *t, uint64_t step, uint64_t tokens)
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

/* Waits for a Pull (skipping Updates); returns its round and fragment. */
static void expect_pull(struct tl *t, uint64_t *round, int *frag)
{
	Ddiloco__V1__SyncerMessage *m;

	if (t->npulls > 0) {
		*round = t->pull_round[0];
		*frag = t->pull_frag[0];
		t->npulls--;
		memmove(t->pull_round, t->pull_round + 1,
			(size_t)t->npulls * sizeof(*t->pull_round));
		memmove(t->pull_frag, t->pull_frag + 1,
			(size_t)t->npulls * sizeof(*t->pull_frag));
		return;
	}
	for (;;) {
		m = tl_recv(t, WAIT);
		assert_non_null(m);
		if (m->kind_case != DDILOCO__V1__SYNCER_MESSAGE__KIND_UPDATE)
			break;
		ddiloco__v1__syncer_message__free_unpacked(m, NULL);
	}
	assert_int_equal(m->kind_case, DDILOCO__V1__SYNCER_MESSAGE__KIND_PULL);
	*round = m->pull->round;
	*frag = (int)m->pull->fragment;
	ddiloco__v1__syncer_message__free_unpacked(m, NULL);
}

/* An answer trained from fragment version `base`. */
static void answer_from(struct tl *t, uint64_t round, int frag,
			const float *delta, size_t n, uint64_t steps,
			uint64_t base)
{
	Ddiloco__V1__LearnerMessage m = DDILOCO__V1__LEARNER_MESSAGE__INIT;
	Ddiloco__V1__Answer a = DDILOCO__V1__ANSWER__INIT;

	a.fragment = (uint32_t)frag;
	a.round = round;
	a.base_version = base;
	a.steps = steps;
	a.tokens = steps * 32;
	a.step = 1;
	a.encoding = DDILOCO__V1__ENCODING__ENCODING_F32;
	a.payload.data = (uint8_t *)delta;
	a.payload.len = delta ? 4 * n : 0;
	m.kind_case = DDILOCO__V1__LEARNER_MESSAGE__KIND_ANSWER;
	m.answer = &a;
	assert_int_equal(tl_send(t, &m), 0);
}

static void answer(struct tl *t, uint64_t round, int frag, const float *delta,
		   size_t n, uint64_t steps)
{
	answer_from(t, round, frag, delta, n, steps, 0);
}

/* Next Update; Pulls before it are kept for expect_pull (the next round
 * may be pulled before this one's update: the first starts at once). */
static Ddiloco__V1__SyncerMessage *expect_update(struct tl *t)
{
	for (;;) {
		Ddiloco__V1__SyncerMessage *m = tl_recv(t, WAIT);

		assert_non_null(m);
		if (m->kind_case == DDILOCO__V1__SYNCER_MESSAGE__KIND_UPDATE)
			return m;
		if (m->kind_case == DDILOCO__V1__SYNCER_MESSAGE__KIND_PULL) {
			assert_true(t->npulls < 8);
			t->pull_round[t->npulls] = m->pull->round;
			t->pull_frag[t->npulls++] = (int)m->pull->fragment;
		}
		ddiloco__v1__syncer_message__free_unpacked(m, NULL);
	}
}

static float **alloc_theta(struct proc *p)
{
	float **th = calloc(4, sizeof(*th));

	for (int q = 0; q < 4; q++)
		th[q] = calloc(p->ft.frags[q].numel, sizeof(float));
	return th;
}

static void free_theta(float **th)
{
	for (int q = 0; q < 4; q++)
		free(th[q]);
	free(th);
}

static float *make_delta(size_t n, float scale)
{
	float *d = malloc(n * sizeof(float));

	for (size_t i = 0; i < n; i++)
		d[i] = scale * (float)((int)(i % 7) - 3);
	return d;
}

/* Θ' = Θ − η(Δ + μ·Δ) for the first merge of a fragment (momentum 0),
 * with the job's defaults η and μ (common/jobspec.c). */
static void assert_stepped(const float *theta0, const float *delta,
			   const uint8_t *payload, size_t n)
{
	const float *got = (const float *)payload;
	struct job_spec d;
	float k;

	jobspec_defaults(&d);
	k = (float)(d.syncer.outer_lr * (1 + d.syncer.outer_momentum));
	assert_true(d.syncer.nesterov);
	for (size_t i = 0; i < n; i++)
		assert_true(fabsf(got[i] - (theta0[i] - k * delta[i])) < 1e-5f);
}

/* ---- tests --------------------------------------------------------------- */

static void quorum_with_silent_learner_and_a_leaver(void **state)
{
	struct tl a, b, c;
	float **th = NULL;
	uint64_t ra, rb, v[4];
	int fa, fb;
	json_t *st;

	struct proc *p = *state;

	proc_setup(p, 0, 0);
	proc_start(p);
	th = alloc_theta(p);
	join(&a, p, 0, th, NULL);
	join(&b, p, 1, NULL, NULL);
	join(&c, p, 2, NULL, NULL);       /* c never answers */
	heartbeat(&a, 1, 32);
	heartbeat(&b, 1, 32);
	heartbeat(&c, 1, 32);
	expect_pull(&a, &ra, &fa);
	expect_pull(&b, &rb, &fb);
	assert_int_equal(ra, rb);
	assert_int_equal(fa, fb);
	assert_int_equal(fa, (int)(ra % 4));
	size_t n = p->ft.frags[fa].numel;
	float *d = make_delta(n, 0.01f);
	answer(&a, ra, fa, d, n, 2);
	answer(&b, rb, fb, d, n, 2);
	/* quorum 2 of 3, grace expires without c: the update comes */
	Ddiloco__V1__SyncerMessage *m = expect_update(&a);
	assert_int_equal(m->update->fragment, (uint32_t)fa);
	assert_int_equal(m->update->version, 1);
	assert_int_equal(m->update->round, ra);
	assert_stepped(th[fa], d, m->update->payload.data, n);
	ddiloco__v1__syncer_message__free_unpacked(m, NULL);
	/* c answers now: late */
	answer(&c, ra, fa, d, n, 2);
	sleep_seconds(0.3);
	st = status(p);
	assert_int_equal(jint(st, "answers.merged"), 2);
	assert_int_equal(jint(st, "answers.late"), 1);
	assert_int_equal(jint(st, "learners_connected"), 3);
	assert_true(jint(st, "round") >= 1);
	assert_int_equal(jint(st, "tokens"), 96);
	/* goodput: 2 answers × 1 step × 0.05 s × the fragment's share, over
	 * 3 learners × elapsed (each answer claims 2 steps at step 1: only
	 * step 1 was trained since the join at 0, syncer/goodput.h); uptime
	 * counted from the first quorum */
	double share = (double)n / (double)p->nparams;
	double el = json_real_value(json_object_get(st, "elapsed"));
	double gp = json_real_value(json_object_get(st, "goodput"));
	double up = json_real_value(json_object_get(st, "uptime"));
	assert_true(el > 0);
	assert_true(fabs(gp - 0.1 * share / (3 * el)) < 0.05 * gp);
	assert_true(up > 0 && up <= 1.0);
	/* tokens_merged: 2 answers × 64 tokens × the share */
	assert_int_equal(jint(st, "tokens_merged"), llround(128 * share));
	json_decref(st);

	/* a leaves mid-stream; the syncer notices and keeps serving */
	tl_close(&a);
	double t0 = clock_mono();
	for (;;) {
		st = status(p);
		long long conn = jint(st, "learners_connected");
		json_decref(st);
		if (conn == 2)
			break;
		assert_true(clock_mono() - t0 < WAIT);
		sleep_seconds(0.05);
	}
	/* and a comes back with the merged version */
	join(&a, p, 0, NULL, v);
	assert_int_equal(v[fa], 1);
	st = status(p);
	assert_int_equal(jint(st, "learners_connected"), 3);
	json_decref(st);

	tl_close(&a);
	tl_close(&b);
	tl_close(&c);
	free(d);
	free_theta(th);
	kill(p->pid, SIGTERM);
	assert_int_equal(proc_wait(p, WAIT), 0);
}

static void garbage_truncated_and_wrong_fingerprint(void **state)
{
	struct tl t;
	char msg[512];
	uint8_t buf[256];
	size_t len;
	json_t *st;

	struct proc *p = *state;

	proc_setup(p, 0, 0);
	proc_start(p);

	tl_open(&t, p);
	assert_int_equal(tl_send_raw(&t, "\xff\xff\xff\xff garbage", 12), 0);
	assert_int_equal(tl_status(&t, msg, sizeof(msg)), GRPC_STATUS_INVALID_ARGUMENT);
	assert_non_null(strstr(msg, "cannot parse"));
	tl_close(&t);

	/* a hello cut short by three bytes */
	{
		Ddiloco__V1__LearnerMessage m = DDILOCO__V1__LEARNER_MESSAGE__INIT;
		Ddiloco__V1__Hello h = DDILOCO__V1__HELLO__INIT;
		uint64_t sizes[4] = { 1, 2, 3, 4 };

		h.fingerprint = p->ft.fingerprint;
		h.fragments = 4;
		h.n_fragment_sizes = 4;
		h.fragment_sizes = sizes;
		h.job = (char *)"grpctest";
		m.kind_case = DDILOCO__V1__LEARNER_MESSAGE__KIND_HELLO;
		m.hello = &h;
		len = ddiloco__v1__learner_message__pack(&m, buf);
	}
	tl_open(&t, p);
	assert_int_equal(tl_send_raw(&t, buf, len - 3), 0);
	assert_int_equal(tl_status(&t, msg, sizeof(msg)), GRPC_STATUS_INVALID_ARGUMENT);
	assert_non_null(strstr(msg, "cannot parse"));
	assert_non_null(strstr(msg, "truncated"));   /* and says where */
	tl_close(&t);

	/* an answer before any hello */
	tl_open(&t, p);
	answer(&t, 1, 0, NULL, 0, 0);
	assert_int_equal(tl_status(&t, msg, sizeof(msg)), GRPC_STATUS_FAILED_PRECONDITION);
	assert_non_null(strstr(msg, "hello"));
	tl_close(&t);

	/* a wrong fingerprint: refused, both named */
	tl_open(&t, p);
	hello(&t, p, 1, 1);
	assert_int_equal(tl_status(&t, msg, sizeof(msg)), GRPC_STATUS_FAILED_PRECONDITION);
	assert_non_null(strstr(msg, "fingerprint mismatch"));
	{
		char fp[32];

		snprintf(fp, sizeof(fp), "%016llx", (unsigned long long)p->ft.fingerprint);
		assert_non_null(strstr(msg, fp));
	}
	tl_close(&t);

	/* an id outside the job */
	tl_open(&t, p);
	hello(&t, p, 7, 0);
	assert_int_equal(tl_status(&t, msg, sizeof(msg)), GRPC_STATUS_INVALID_ARGUMENT);
	assert_non_null(strstr(msg, "out of range"));
	tl_close(&t);

	/* none of it counted as a learner; a good one still joins */
	join(&t, p, 0, NULL, NULL);
	st = status(p);
	assert_int_equal(jint(st, "learners_connected"), 1);
	assert_int_equal(jint(st, "round"), 0);
	json_decref(st);
	tl_close(&t);
	kill(p->pid, SIGTERM);
	assert_int_equal(proc_wait(p, WAIT), 0);
}

static void nan_answer_is_rejected(void **state)
{
	struct tl t[3];
	float **th;
	uint64_t r[3];
	int f[3];
	json_t *st;

	struct proc *p = *state;

	proc_setup(p, 0, 0);
	proc_start(p);
	th = alloc_theta(p);
	for (int i = 0; i < 3; i++)
		join(&t[i], p, (uint32_t)i, i == 0 ? th : NULL, NULL);
	for (int i = 0; i < 3; i++)
		heartbeat(&t[i], 1, 32);
	for (int i = 0; i < 3; i++)
		expect_pull(&t[i], &r[i], &f[i]);
	size_t n = p->ft.frags[f[0]].numel;
	float *d = make_delta(n, 0.02f), *bad = make_delta(n, 1.0f);
	bad[n / 2] = NAN;
	answer(&t[0], r[0], f[0], bad, n, 2);
	/* one refused answer is no quorum: nothing merges */
	sleep_seconds(0.5);
	st = status(p);
	assert_int_equal(jint(st, "answers.rejected"), 1);
	assert_int_equal(jint(st, "round"), 0);
	assert_int_equal(jint(st, "versions.0") + jint(st, "versions.1") +
			 jint(st, "versions.2") + jint(st, "versions.3"), 0);
	json_decref(st);
	/* an answer with the wrong size is refused too */
	answer(&t[1], r[1], f[1], d, n - 1, 2);
	answer(&t[2], r[2], f[2], d, n, 2);
	/* one good answer, two refused, nobody left to wait for: no quorum
	 * can come, so the round merges the good answer alone (the learner
	 * that sent NaN gets the fragment back through this update) */
	for (int i = 0; i < 3; i++) {
		Ddiloco__V1__SyncerMessage *u = expect_update(&t[i]);

		assert_int_equal(u->update->fragment, (uint32_t)f[2]);
		assert_int_equal(u->update->version, 1);
		if (i == 0)
			assert_stepped(th[f[2]], d, u->update->payload.data, n);
		ddiloco__v1__syncer_message__free_unpacked(u, NULL);
	}
	st = status(p);
	assert_int_equal(jint(st, "answers.rejected"), 2);
	assert_int_equal(jint(st, "answers.merged"), 1);
	assert_int_equal(jint(st, "round"), 1);
	json_decref(st);
	/* a fresh round from the two good learners merges only good values */
	for (int i = 0; i < 3; i++)
		heartbeat(&t[i], 2, 64);
	uint64_t r2[3];
	int f2[3];
	for (int i = 1; i < 3; i++)
		expect_pull(&t[i], &r2[i], &f2[i]);
	assert_int_equal(r2[1], r[1] + 1);
	size_t n2 = p->ft.frags[f2[1]].numel;
	float *d2 = make_delta(n2, 0.03f);
	answer(&t[1], r2[1], f2[1], d2, n2, 2);
	answer(&t[2], r2[2], f2[2], d2, n2, 2);
	Ddiloco__V1__SyncerMessage *m = expect_update(&t[1]);
	assert_int_equal(m->update->fragment, (uint32_t)f2[1]);
	assert_stepped(th[f2[1]], d2, m->update->payload.data, n2);
	ddiloco__v1__syncer_message__free_unpacked(m, NULL);
	st = status(p);
	assert_int_equal(jint(st, "answers.merged"), 3);
	assert_int_equal(jint(st, "answers.rejected"), 2);
	json_decref(st);
	for (int i = 0; i < 3; i++)
		tl_close(&t[i]);
	free(d);
	free(d2);
	free(bad);
	free_theta(th);
	kill(p->pid, SIGTERM);
	assert_int_equal(proc_wait(p, WAIT), 0);
}

/* Runs one round with learners a and b answering delta·scale, trained
 * from the fragment's version in ver_out (updated with the new one). */
static void one_round(struct proc *p, struct tl *a, struct tl *b,
		      uint64_t step, float **theta_out, uint64_t *ver_out)
{
	uint64_t ra, rb;
	int fa, fb;

	heartbeat(a, step, step * 32);
	heartbeat(b, step, step * 32);
	expect_pull(a, &ra, &fa);
	expect_pull(b, &rb, &fb);
	size_t n = p->ft.frags[fa].numel;
	float *d = make_delta(n, 0.01f * (float)step);
	answer_from(a, ra, fa, d, n, 2, ver_out[fa]);
	answer_from(b, rb, fb, d, n, 2, ver_out[fa]);
	Ddiloco__V1__SyncerMessage *m = expect_update(a);
	assert_int_equal(m->update->fragment, (uint32_t)fa);
	assert_int_equal(m->update->version, ver_out[fa] + 1);
	memcpy(theta_out[fa], m->update->payload.data, m->update->payload.len);
	ver_out[fa] = m->update->version;
	ddiloco__v1__syncer_message__free_unpacked(m, NULL);
	free(d);
}

static void kill9_and_restart_restores_state(void **state)
{
	struct tl a, b;
	float **th, **th2;
	uint64_t v[4], v2[4];
	json_t *before, *after;

	struct proc *p = *state;

	proc_setup(p, 0, 0);
	proc_start(p);
	th = alloc_theta(p);
	th2 = alloc_theta(p);
	join(&a, p, 0, th, v);
	join(&b, p, 1, NULL, NULL);
	for (uint64_t s = 1; s <= 5; s++)
		one_round(p, &a, &b, s, th, v);
	sleep_seconds(0.2);
	before = status(p);
	assert_int_equal(jint(before, "round"), 5);
	kill(p->pid, SIGKILL);
	assert_int_equal(proc_wait(p, WAIT), -1);
	tl_close(&a);
	tl_close(&b);

	proc_start(p);
	after = status(p);
	assert_int_equal(jint(after, "round"), 5);
	/* versions go on past any the lost rounds could have sent: τ 2 +
	 * checkpointEvery 1, so no learner takes a new Update for one it has */
	for (int q = 0; q < 4; q++) {
		char key[32];

		snprintf(key, sizeof(key), "versions.%d", q);
		assert_int_equal(jint(after, key), jint(before, key) + 3);
	}
	assert_int_equal(jint(after, "answers.merged"), jint(before, "answers.merged"));
	assert_int_equal(jint(after, "tokens_merged"), jint(before, "tokens_merged"));
	assert_true(jint(after, "elapsed") >= jint(before, "elapsed"));
	/* Θ as the learners last saw it, to the bit */
	join(&a, p, 0, th2, v2);
	for (int q = 0; q < 4; q++) {
		assert_int_equal(v2[q], v[q] + 3);
		assert_memory_equal(th2[q], th[q], 4 * p->ft.frags[q].numel);
	}
	/* the learners were training all along: the first round is pulled
	 * as soon as both are joined, before any heartbeat */
	join(&b, p, 1, NULL, NULL);
	uint64_t ra, rb;
	int fa, fb;
	expect_pull(&a, &ra, &fa);
	expect_pull(&b, &rb, &fb);
	assert_int_equal(ra, rb);
	assert_true(ra > 5 + 3);   /* round numbers are never reused */
	/* answers trained from versions before the restart span the outage:
	 * they count for the quorum, empty; Θ and versions stay */
	size_t n = p->ft.frags[fa].numel;
	float *big = make_delta(n, 5.0f);
	answer_from(&a, ra, fa, big, n, 400, v[fa]);
	answer_from(&b, rb, fb, big, n, 400, v[fa] + 2);
	free(big);
	sleep_seconds(0.3);
	json_decref(after);
	after = status(p);
	assert_int_equal(jint(after, "round"), 6);
	assert_int_equal(jint(after, "answers.merged"), jint(before, "answers.merged"));
	assert_int_equal(jint(after, "answers.empty"), jint(before, "answers.empty") + 2);
	{
		char key[32];

		snprintf(key, sizeof(key), "versions.%d", fa);
		assert_int_equal(jint(after, key), (long long)v2[fa]);
	}
	/* and it goes on from the Welcome's versions: momentum was restored
	 * too, so the next round continues the same trajectory */
	one_round(p, &a, &b, 6, th, v2);
	after = (json_decref(after), status(p));
	assert_int_equal(jint(after, "round"), 7);
	json_decref(after);
	json_decref(before);
	tl_close(&a);
	tl_close(&b);
	free_theta(th);
	free_theta(th2);
	kill(p->pid, SIGTERM);
	assert_int_equal(proc_wait(p, WAIT), 0);
}

static void budget_ends_the_job(void **state)
{
	struct tl a, b;
	float **th;
	uint64_t v[4];
	char msg[256];
	json_t *st;

	struct proc *p = *state;

	proc_setup(p, 1, 2);   /* eval every round, 2 outer steps */
	proc_start(p);
	th = alloc_theta(p);
	join(&a, p, 0, th, v);
	join(&b, p, 1, NULL, NULL);
	one_round(p, &a, &b, 1, th, v);
	/* the second round reaches the budget: its update, then `job done` */
	heartbeat(&a, 2, 64);
	heartbeat(&b, 2, 64);
	uint64_t r;
	int f;
	expect_pull(&a, &r, &f);
	size_t n = p->ft.frags[f].numel;
	float *d = make_delta(n, 0.01f);
	answer(&a, r, f, d, n, 2);
	answer(&b, r, f, d, n, 2);
	for (Ddiloco__V1__SyncerMessage *m; (m = tl_recv(&a, WAIT));)
		ddiloco__v1__syncer_message__free_unpacked(m, NULL);
	assert_int_equal(tl_status(&a, msg, sizeof(msg)), GRPC_STATUS_OK);
	assert_string_equal(msg, "job done");
	st = status(p);
	assert_true(json_is_true(json_object_get(st, "done")));
	assert_int_equal(jint(st, "round"), 2);
	/* evaluated after rounds 1 and 2 (the last one at the end) */
	assert_true(json_array_size(json_object_get(st, "eval_history")) >= 2);
	assert_true(json_is_real(json_object_get(st, "eval_loss")));
	double loss = json_real_value(json_object_get(st, "eval_loss"));
	assert_true(loss > 1.0 && loss < 10.0);   /* ~ln 256 for a fresh model */
	json_decref(st);
	/* a learner arriving now is told the same */
	struct tl c;
	tl_open(&c, p);
	hello(&c, p, 2, 0);
	assert_int_equal(tl_status(&c, msg, sizeof(msg)), GRPC_STATUS_OK);
	assert_string_equal(msg, "job done");
	tl_close(&c);
	assert_int_equal(proc_wait(p, WAIT), 0);
	tl_close(&a);
	tl_close(&b);
	free(d);
	free_theta(th);
}

static int init_all(void **state)
{
	(void)state;
	grpc_init();
	curl_global_init(CURL_GLOBAL_DEFAULT);
	signal(SIGPIPE, SIG_IGN);
	return 0;
}

static int fini_all(void **state)
{
	(void)state;
	curl_global_cleanup();
	grpc_shutdown();
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(quorum_with_silent_learner_and_a_leaver, setup, teardown),
		cmocka_unit_test_setup_teardown(garbage_truncated_and_wrong_fingerprint, setup, teardown),
		cmocka_unit_test_setup_teardown(nan_answer_is_rejected, setup, teardown),
		cmocka_unit_test_setup_teardown(kill9_and_restart_restores_state, setup, teardown),
		cmocka_unit_test_setup_teardown(budget_ends_the_job, setup, teardown),
	};
	if (getenv("FILTER"))
		cmocka_set_test_filter(getenv("FILTER"));
	return cmocka_run_group_tests(tests, init_all, fini_all);
}
