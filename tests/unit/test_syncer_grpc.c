/*
 * The syncer as a real process ($BUILD/ddiloco syncer on free loopback
 * ports) driven by real gRPC test clients: quorum with a silent learner,
 * a learner leaving mid-stream, garbage and truncated messages, a wrong
 * fingerprint, a NaN answer, the end of a job, kill -9 then restart
 * with the state restored exactly from the checkpoint, a stream that
 * never says Hello closed at the deadline, a silent TCP connection
 * closed, the receive limit from the table, an external model's
 * evaluator (Θ without Pulls, its reports in /status, its refusals), and
 * Beat calls: their refusals, their heartbeats counted, and a heartbeat
 * on a Beat passing a large answer on Train through a slow proxy.
 *
 * The test clients are written against docs/protocol.md with the same
 * model code a learner uses (model_frag_table), so the fingerprint and
 * fragment sizes are the real ones; the process and the clients' streams
 * are tests/unit/syncerproc.h's, shared with test_tls.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <grpc/grpc.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fragment.h"
#include "common/jobspec.h"
#include "common/util.h"
#include "common/wire.h"
#include "ddiloco/v1/syncer.pb-c.h"
#include "syncer/syncer.h"
#include "trainer/model.h"
#include "tests/unit/slowlink.h"
#include "tests/unit/syncerproc.h"
#include "tests/unit/testlib.h"

/* ---- the syncer process ---------------------------------------------- */

struct proc {
	pid_t pid;
	int grpc_port, http_port;
	char dir[128], job[256], ckpt[256], log[256];
	struct frag_table ft;
	size_t nparams;
	int dial_port;     /* learner_open's port when not 0 (a proxy) */
};

static const char *job_fmt =
	"apiVersion: ddiloco.io/v1alpha1\n"
	"kind: DecoupledTrainingJob\n"
	"metadata:\n  name: grpctest\n"
	"spec:\n"
	"  learners:\n    replicas: 3\n"
	"  model:\n    kind: %s\n    vocabSize: 256\n    context: 16\n    layers: %d\n"
	"    heads: 2\n    channels: %d\n%s"
	"  data:\n    path: %s/data.txt\n"
	"  optimizer:\n    batchSize: 2\n"
	/* plaintext: these clients test the protocol; identities are
	 * test_tls.c's. H = P and whole f32 payloads: the tests check
	 * values and rounds */
	"  syncer:\n    insecure: true\n    minQuorum: 2\n    fragments: 4\n    overlap: 2\n"
	"    syncEvery: 4\n    encoding: f32\n    updateEncoding: f32\n"
	"    grace: 0.5\n    checkpointEvery: 1\n    evalEvery: %d\n"
	"    evalTokens: 256\n    merge: rda\n    helloTimeout: %g\n"
	"  budget:\n    outerSteps: %d\n";

/* spec.syncer.helloTimeout, spec.model.kind and its size of the next
 * proc_setup */
static double hello_timeout = 10;
static int external_model;
static const char *declared = "";   /* spec.model lines: tensors */
static int model_layers = 1, model_channels = 16;

static void proc_setup(struct proc *p, int eval_every, int outer_steps)
{
	struct job_spec js;
	struct model_config cfg;
	FILE *f;

	memset(p, 0, sizeof(*p));
	assert_int_equal(testlib_tmpdir(p->dir, sizeof(p->dir), "ddiloco-grpc"), 0);
	snprintf(p->job, sizeof(p->job), "%s/job.yaml", p->dir);
	snprintf(p->ckpt, sizeof(p->ckpt), "%s/ckpt", p->dir);
	snprintf(p->log, sizeof(p->log), "%s/syncer.log", p->dir);
	f = fopen(p->job, "w");
	assert_non_null(f);
	fprintf(f, job_fmt, external_model ? "external" : "gpt", model_layers,
		model_channels, declared, p->dir, eval_every, hello_timeout,
		outer_steps);
	fclose(f);
	syncerproc_write_text(p->dir);
	assert_int_equal(jobspec_load(p->job, &js, NULL), 0);
	assert_int_equal(model_config_from_job(&js.model, &cfg, NULL), 0);
	assert_int_equal(model_frag_table(&cfg, 4, &p->ft, NULL), 0);
	p->nparams = model_num_params(&cfg);
	p->grpc_port = syncerproc_free_port();
	p->http_port = syncerproc_free_port();
}

/* Starts the syncer (its log appended to) and waits until it is ready. */
static void proc_start(struct proc *p)
{
	p->pid = syncerproc_spawn(p->job, p->grpc_port, p->http_port, p->ckpt,
				  p->log, "a", NULL, NULL);
	syncerproc_wait_ready(p->pid, p->http_port);
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
	syncerproc_end(&p->pid, p->dir);
	frag_table_release(&p->ft);
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

static json_t *status(struct proc *p)
{
	json_t *j;

	assert_int_equal(syncerproc_http_get(p->http_port, "/status", &j), 200);
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

/* /status once its field at path (jint's) is want; fails when WAIT
 * seconds pass first. The tests wait for the state they assert on
 * through it, never for a duration. */
static json_t *status_when(struct proc *p, const char *key, long long want)
{
	double t0 = clock_mono();

	for (;;) {
		json_t *st = status(p);

		if (jint(st, key) == want)
			return st;
		json_decref(st);
		if (clock_mono() - t0 > WAIT)
			fail_msg("%s never became %lld", key, want);
		sleep_seconds(0.02);
	}
}

/* ---- a test learner ----------------------------------------------------- */

/* A test learner: its Train stream (tests/unit/syncerproc.h) and the
 * Pulls seen while waiting for an Update, for expect_pull. */
struct learner {
	struct tl tl;
	int npulls;
	uint64_t pull_round[8];
	int pull_frag[8];
};

/* Opens the stream, plaintext, its initial metadata sent at once. */
static void learner_open(struct learner *l, struct proc *p)
{
	memset(l, 0, sizeof(*l));
	tl_open(&l->tl, p->dial_port ? p->dial_port : p->grpc_port, NULL, NULL);
	tl_send_metadata(&l->tl);
}

static void hello(struct learner *l, struct proc *p, uint32_t id, uint64_t fp_delta)
{
	assert_int_equal(tl_hello(&l->tl, &p->ft, "grpctest", id,
				  p->ft.fingerprint + fp_delta), 0);
}

/* The Welcome and the 4 Updates a learner that said Hello gets: one
 * Update per fragment into theta[q]. */
static void welcomed(struct learner *l, struct proc *p, float **theta,
		     uint64_t *versions)
{
	Ddiloco__V1__SyncerMessage *m;

	m = tl_recv(&l->tl, WAIT);
	assert_non_null(m);
	assert_int_equal(m->kind_case, DDILOCO__V1__SYNCER_MESSAGE__KIND_WELCOME);
	assert_int_equal(m->welcome->fragments, 4);
	if (versions)
		memcpy(versions, m->welcome->versions, 4 * sizeof(uint64_t));
	ddiloco__v1__syncer_message__free_unpacked(m, NULL);
	for (int q = 0; q < 4; q++) {
		m = tl_recv(&l->tl, WAIT);
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

/* Whether the syncer's log holds `text` (the file read whole). */
static int log_has(const struct proc *p, const char *text)
{
	void *txt = NULL;
	size_t n;
	int has;

	if (file_read_all(p->log, 64 << 20, &txt, &n, NULL))
		return 0;
	has = strstr(txt, text) != NULL;
	free(txt);
	return has;
}

/* Hello, then the Welcome and the Updates. */
static void join(struct learner *l, struct proc *p, uint32_t id, float **theta,
		 uint64_t *versions)
{
	learner_open(l, p);
	hello(l, p, id, 0);
	welcomed(l, p, theta, versions);
}

static void heartbeat(struct learner *l, uint64_t step, uint64_t tokens)
{
	tl_heartbeat(&l->tl, step, tokens);
}

/* Waits for a Pull (skipping Updates); returns its round and fragment. */
static void expect_pull(struct learner *l, uint64_t *round, int *frag)
{
	Ddiloco__V1__SyncerMessage *m;

	if (l->npulls > 0) {
		*round = l->pull_round[0];
		*frag = l->pull_frag[0];
		l->npulls--;
		memmove(l->pull_round, l->pull_round + 1,
			(size_t)l->npulls * sizeof(*l->pull_round));
		memmove(l->pull_frag, l->pull_frag + 1,
			(size_t)l->npulls * sizeof(*l->pull_frag));
		return;
	}
	for (;;) {
		m = tl_recv(&l->tl, WAIT);
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
static void answer_from(struct learner *l, uint64_t round, int frag,
			const float *delta, size_t n, uint64_t steps,
			uint64_t base)
{
	tl_answer(&l->tl, round, frag, base, steps, 1, delta, n);
}

static void answer(struct learner *l, uint64_t round, int frag, const float *delta,
		   size_t n, uint64_t steps)
{
	answer_from(l, round, frag, delta, n, steps, 0);
}

/* Bytes [off, off + len) of an f32 answer of n values in a part
 * (docs/protocol.md, Messages in parts). */
static void answer_part(struct learner *l, uint64_t round, int frag,
			const float *delta, size_t n, size_t off, size_t len)
{
	Ddiloco__V1__LearnerMessage m = DDILOCO__V1__LEARNER_MESSAGE__INIT;
	Ddiloco__V1__Answer a = DDILOCO__V1__ANSWER__INIT;

	a.fragment = (uint32_t)frag;
	a.round = round;
	a.steps = 2;
	a.tokens = 64;
	a.step = 1;
	a.encoding = DDILOCO__V1__ENCODING__ENCODING_F32;
	a.payload.data = (uint8_t *)delta + off;
	a.payload.len = len;
	a.part_offset = off;
	a.payload_total = 4 * n;
	m.kind_case = DDILOCO__V1__LEARNER_MESSAGE__KIND_ANSWER;
	m.answer = &a;
	assert_int_equal(tl_send(&l->tl, &m), 0);
}

/* Next Update; Pulls before it are kept for expect_pull (the next round
 * may be pulled before this one's update: the first starts at once). */
static Ddiloco__V1__SyncerMessage *expect_update(struct learner *l)
{
	for (;;) {
		Ddiloco__V1__SyncerMessage *m = tl_recv(&l->tl, WAIT);

		assert_non_null(m);
		if (m->kind_case == DDILOCO__V1__SYNCER_MESSAGE__KIND_UPDATE)
			return m;
		if (m->kind_case == DDILOCO__V1__SYNCER_MESSAGE__KIND_PULL) {
			assert_true(l->npulls < 8);
			l->pull_round[l->npulls] = m->pull->round;
			l->pull_frag[l->npulls++] = (int)m->pull->fragment;
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
	struct learner a, b, c;
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
	st = status_when(p, "answers.late", 1);
	assert_int_equal(jint(st, "answers.merged"), 2);
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
	tl_close(&a.tl);
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

	tl_close(&a.tl);
	tl_close(&b.tl);
	tl_close(&c.tl);
	free(d);
	free_theta(th);
	kill(p->pid, SIGTERM);
	assert_int_equal(proc_wait(p, WAIT), 0);
}

static void garbage_truncated_and_wrong_fingerprint(void **state)
{
	struct learner t;
	char msg[512];
	uint8_t buf[256];
	size_t len;
	json_t *st;

	struct proc *p = *state;

	proc_setup(p, 0, 0);
	proc_start(p);

	learner_open(&t, p);
	assert_int_equal(tl_send_raw(&t.tl, "\xff\xff\xff\xff garbage", 12), 0);
	assert_int_equal(tl_status(&t.tl, msg, sizeof(msg), NULL), GRPC_STATUS_INVALID_ARGUMENT);
	assert_non_null(strstr(msg, "cannot parse"));
	tl_close(&t.tl);

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
	learner_open(&t, p);
	assert_int_equal(tl_send_raw(&t.tl, buf, len - 3), 0);
	assert_int_equal(tl_status(&t.tl, msg, sizeof(msg), NULL), GRPC_STATUS_INVALID_ARGUMENT);
	assert_non_null(strstr(msg, "cannot parse"));
	assert_non_null(strstr(msg, "truncated"));   /* and says where */
	tl_close(&t.tl);

	/* an answer before any hello */
	learner_open(&t, p);
	answer(&t, 1, 0, NULL, 0, 0);
	assert_int_equal(tl_status(&t.tl, msg, sizeof(msg), NULL), GRPC_STATUS_FAILED_PRECONDITION);
	assert_non_null(strstr(msg, "hello"));
	tl_close(&t.tl);

	/* a wrong fingerprint: refused, both named */
	learner_open(&t, p);
	hello(&t, p, 1, 1);
	assert_int_equal(tl_status(&t.tl, msg, sizeof(msg), NULL), GRPC_STATUS_FAILED_PRECONDITION);
	assert_non_null(strstr(msg, "fingerprint mismatch"));
	{
		char fp[32];

		snprintf(fp, sizeof(fp), "%016llx", (unsigned long long)p->ft.fingerprint);
		assert_non_null(strstr(msg, fp));
	}
	tl_close(&t.tl);

	/* an id outside the job */
	learner_open(&t, p);
	hello(&t, p, 7, 0);
	assert_int_equal(tl_status(&t.tl, msg, sizeof(msg), NULL), GRPC_STATUS_INVALID_ARGUMENT);
	assert_non_null(strstr(msg, "out of range"));
	tl_close(&t.tl);

	/* none of it counted as a learner; a good one still joins */
	join(&t, p, 0, NULL, NULL);
	st = status(p);
	assert_int_equal(jint(st, "learners_connected"), 1);
	assert_int_equal(jint(st, "round"), 0);
	json_decref(st);
	tl_close(&t.tl);
	kill(p->pid, SIGTERM);
	assert_int_equal(proc_wait(p, WAIT), 0);
}

static void nan_answer_is_rejected(void **state)
{
	struct learner t[3];
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
	/* one refused answer is no quorum: nothing merges. Once it is
	 * counted, nothing but another answer can close round 0 (two
	 * learners still to answer, quorum 2), so reading round 0 here is
	 * no race; answers.merged 1 after the next round says the NaN was
	 * never merged later either */
	st = status_when(p, "answers.rejected", 1);
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
		tl_close(&t[i].tl);
	free(d);
	free(d2);
	free(bad);
	free_theta(th);
	kill(p->pid, SIGTERM);
	assert_int_equal(proc_wait(p, WAIT), 0);
}

/* Runs one round with learners a and b answering delta·scale, trained
 * from the fragment's version in ver_out (updated with the new one). */
static void one_round(struct proc *p, struct learner *a, struct learner *b,
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
	struct learner a, b;
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
	/* round 5 is in a checkpoint before its update is sent
	 * (checkpointEvery 1); waited for, not assumed */
	before = status_when(p, "checkpoint.last_ok_round", 5);
	assert_int_equal(jint(before, "round"), 5);
	kill(p->pid, SIGKILL);
	assert_int_equal(proc_wait(p, WAIT), -1);
	tl_close(&a.tl);
	tl_close(&b.tl);

	proc_start(p);
	after = status(p);
	assert_int_equal(jint(after, "round"), 5);
	/* versions go on past any the lost rounds could have sent, so no
	 * learner takes a new Update for one it has: past τ 2 +
	 * checkpointEvery 1 from the checkpoint, and past the high-water
	 * mark written when round 1 started, 16 + τ 2 + 1 = 19, which is
	 * more */
	for (int q = 0; q < 4; q++) {
		char key[32];

		snprintf(key, sizeof(key), "versions.%d", q);
		assert_true(jint(before, key) + 3 < 19);
		assert_int_equal(jint(after, key), 19);
	}
	assert_int_equal(jint(after, "answers.merged"), jint(before, "answers.merged"));
	assert_int_equal(jint(after, "tokens_merged"), jint(before, "tokens_merged"));
	assert_true(jint(after, "elapsed") >= jint(before, "elapsed"));
	/* Θ as the learners last saw it, to the bit */
	join(&a, p, 0, th2, v2);
	for (int q = 0; q < 4; q++) {
		assert_int_equal(v2[q], 19);
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
	assert_int_equal(ra, 17);   /* past the high-water mark, 16 */
	/* answers trained from versions before the restart span the outage:
	 * they count for the quorum, empty; Θ and versions stay */
	size_t n = p->ft.frags[fa].numel;
	float *big = make_delta(n, 5.0f);
	answer_from(&a, ra, fa, big, n, 400, v[fa]);
	answer_from(&b, rb, fb, big, n, 400, v[fa] + 2);
	free(big);
	json_decref(after);
	after = status_when(p, "round", 6);
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
	tl_close(&a.tl);
	tl_close(&b.tl);
	free_theta(th);
	free_theta(th2);
	kill(p->pid, SIGTERM);
	assert_int_equal(proc_wait(p, WAIT), 0);
}

static void budget_ends_the_job(void **state)
{
	struct learner a, b;
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
	for (Ddiloco__V1__SyncerMessage *m; (m = tl_recv(&a.tl, WAIT));)
		ddiloco__v1__syncer_message__free_unpacked(m, NULL);
	assert_int_equal(tl_status(&a.tl, msg, sizeof(msg), NULL), GRPC_STATUS_OK);
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
	struct learner c;
	learner_open(&c, p);
	hello(&c, p, 2, 0);
	assert_int_equal(tl_status(&c.tl, msg, sizeof(msg), NULL), GRPC_STATUS_OK);
	assert_string_equal(msg, "job done");
	tl_close(&c.tl);
	assert_int_equal(proc_wait(p, WAIT), 0);
	tl_close(&a.tl);
	tl_close(&b.tl);
	free(d);
	free_theta(th);
}

/*
 * helloTimeout 3: a stream that opens and says nothing is closed with
 * DEADLINE_EXCEEDED and counted; a learner that said Hello at the same
 * time stays joined (3 s, not 1: its join must fit in the timeout too,
 * under ASan on a loaded machine).
 */
static void a_stream_without_hello_is_closed(void **state)
{
	struct learner quiet, good;
	char msg[256];
	json_t *st;

	struct proc *p = *state;

	hello_timeout = 3;
	proc_setup(p, 0, 0);
	hello_timeout = 10;
	proc_start(p);
	learner_open(&quiet, p);
	join(&good, p, 0, NULL, NULL);
	assert_int_equal(tl_status(&quiet.tl, msg, sizeof(msg), NULL),
			 GRPC_STATUS_DEADLINE_EXCEEDED);
	assert_string_equal(msg, "no hello within 3 s");
	tl_close(&quiet.tl);
	heartbeat(&good, 1, 0);
	st = status(p);
	assert_int_equal(jint(st, "streams_no_hello"), 1);
	assert_int_equal(jint(st, "learners_connected"), 1);
	json_decref(st);
	tl_close(&good.tl);
	kill(p->pid, SIGTERM);
	assert_int_equal(proc_wait(p, WAIT), 0);
}

/*
 * In plaintext there is no TLS handshake to wait for: HTTP/2 starts at
 * once and the keepalive (a ping after 2 s, 4 s for its answer; gRPC
 * details) closes a TCP connection that sends nothing or half the
 * preface, within the handshake deadline (docs/security.md, Listeners).
 */
static void a_silent_plaintext_connection_is_closed(void **state)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct proc *p = *state;
	double t0, until;
	char buf[256];
	int fd[2];

	proc_setup(p, 0, 0);
	proc_start(p);
	sa.sin_port = htons((uint16_t)p->grpc_port);
	for (int i = 0; i < 2; i++) {
		fd[i] = socket(AF_INET, SOCK_STREAM, 0);
		assert_int_equal(connect(fd[i], (struct sockaddr *)&sa,
					 sizeof(sa)), 0);
	}
	assert_int_equal(send(fd[1], "PRI * HTTP/2.0\r\n", 16, 0), 16);
	t0 = clock_mono();
	until = t0 + SYNCER_HANDSHAKE_TIMEOUT + 1;
	for (int i = 0; i < 2; i++) {
		int closed = 0;

		while (!closed && clock_mono() < until) {
			struct pollfd pf = { .fd = fd[i], .events = POLLIN };

			closed = poll(&pf, 1, 100) > 0 &&
				 recv(fd[i], buf, sizeof(buf), 0) <= 0;
		}
		if (!closed)
			fail_msg("connection %d still open after %d s", i,
				 SYNCER_HANDSHAKE_TIMEOUT + 1);
		close(fd[i]);
	}
	kill(p->pid, SIGTERM);
	assert_int_equal(proc_wait(p, WAIT), 0);
}

/* The receive limit for this table (the syncer's set_limits). */
static size_t recv_limit(const struct proc *p)
{
	size_t big = 0;

	for (int q = 0; q < p->ft.nfrags; q++) {
		size_t n = wire_payload_max(p->ft.frags[q].numel);

		big = n > big ? n : big;
	}
	return wire_message_limit(big, 0);
}

/* A message of `limit` bytes reaches the syncer (which cannot parse
 * them), one byte more is refused by gRPC naming both sizes. */
static void limit_is(struct proc *p, size_t limit)
{
	uint8_t *junk = malloc(limit + 1);
	struct learner t;
	char msg[512], want[64];

	assert_non_null(junk);
	memset(junk, 0xff, limit + 1);
	learner_open(&t, p);
	assert_int_equal(tl_send_raw(&t.tl, junk, limit), 0);
	assert_int_equal(tl_status(&t.tl, msg, sizeof(msg), NULL),
			 GRPC_STATUS_INVALID_ARGUMENT);
	assert_non_null(strstr(msg, "cannot parse"));
	tl_close(&t.tl);
	learner_open(&t, p);
	tl_send_raw(&t.tl, junk, limit + 1);   /* may fail: the call ends */
	assert_int_equal(tl_status(&t.tl, msg, sizeof(msg), NULL),
			 GRPC_STATUS_RESOURCE_EXHAUSTED);
	snprintf(want, sizeof(want), "(%zu vs. %zu)", limit + 1, limit);
	if (!strstr(msg, want))
		fail_msg("'%s' does not say %s", msg, want);
	tl_close(&t.tl);
	free(junk);
}

/*
 * The receive limit comes from the table (docs/protocol.md, Messages in
 * parts): WIRE_LIMIT_FLOOR for a tiny model, the largest fragment's
 * payload and its framing for one whose fragments are larger.
 */
static void messages_are_bounded_by_the_table(void **state)
{
	struct proc *p = *state;
	size_t limit;

	proc_setup(p, 0, 0);
	limit = recv_limit(p);
	assert_int_equal(limit, WIRE_LIMIT_FLOOR);
	proc_start(p);
	limit_is(p, limit);
	kill(p->pid, SIGTERM);
	assert_int_equal(proc_wait(p, WAIT), 0);
	proc_teardown(p);

	model_layers = 4;
	model_channels = 512;
	proc_setup(p, 0, 0);
	model_layers = 1;
	model_channels = 16;
	limit = recv_limit(p);
	assert_true(limit > WIRE_LIMIT_FLOOR && limit < WIRE_MAX_MESSAGE);
	proc_start(p);
	limit_is(p, limit);
	kill(p->pid, SIGTERM);
	assert_int_equal(proc_wait(p, WAIT), 0);
}

/* An evaluator's Hello (docs/syncer.md, Evaluators). */
static void evaluator_hello(struct learner *l, struct proc *p, uint32_t id)
{
	Ddiloco__V1__LearnerMessage m = DDILOCO__V1__LEARNER_MESSAGE__INIT;
	Ddiloco__V1__Hello h = DDILOCO__V1__HELLO__INIT;
	uint64_t sizes[4];

	for (int q = 0; q < 4; q++)
		sizes[q] = p->ft.frags[q].numel;
	h.learner_id = id;
	h.fingerprint = p->ft.fingerprint;
	h.fragments = 4;
	h.n_fragment_sizes = 4;
	h.fragment_sizes = sizes;
	h.incarnation = 77;
	h.job = (char *)"grpctest";
	h.evaluator = 1;
	m.kind_case = DDILOCO__V1__LEARNER_MESSAGE__KIND_HELLO;
	m.hello = &h;
	assert_int_equal(tl_send(&l->tl, &m), 0);
}

static void evaluation(struct learner *l, uint64_t round, double loss)
{
	Ddiloco__V1__LearnerMessage m = DDILOCO__V1__LEARNER_MESSAGE__INIT;
	Ddiloco__V1__Evaluation ev = DDILOCO__V1__EVALUATION__INIT;

	ev.round = round;
	ev.loss = loss;
	ev.tokens = 4096;
	m.kind_case = DDILOCO__V1__LEARNER_MESSAGE__KIND_EVALUATION;
	m.evaluation = &ev;
	assert_int_equal(tl_send(&l->tl, &m), 0);
}

/*
 * An external job's evaluator: it waits for the seed with the learners,
 * gets Θ and every merged Update but never a Pull, is not one of the
 * learners, and its reports are the eval loss; bad ones are refused.
 * The table is fixed once minQuorum (2) learners said Hello with it: the
 * first alone waits (the syncer says so) and is not asked for its
 * weights, and once the second said Hello the lowest id of the two is.
 */
static void an_evaluator_gets_theta_and_reports(void **state)
{
	struct learner a, b, ev, ev2;
	Ddiloco__V1__SyncerMessage *m;
	float **theta0, **theta;
	uint64_t ver[4] = { 0 };
	char msg[256];
	json_t *st;
	struct proc *p = *state;

	external_model = 1;
	proc_setup(p, 0, 0);
	external_model = 0;
	proc_start(p);
	theta0 = alloc_theta(p);
	theta = alloc_theta(p);
	for (int q = 0; q < 4; q++)
		for (size_t i = 0; i < p->ft.frags[q].numel; i++)
			theta0[q][i] = 0.001f * (float)(i % 100) - 0.05f * (float)q;
	/* the evaluator says hello first: it waits, and never gives the seed */
	learner_open(&ev, p);
	evaluator_hello(&ev, p, 0);
	learner_open(&a, p);
	hello(&a, p, 0, 0);
	assert_eventually(log_has(p, "learner 0 waits: 1 of the 2 learners "
				  "(minQuorum)"), WAIT);
	learner_open(&b, p);
	hello(&b, p, 1, 0);
	for (int q = 0; q < 4; q++) {
		uint64_t r;
		int frag;

		expect_pull(&a, &r, &frag);
		assert_int_equal(r, 0);
		tl_answer(&a.tl, 0, frag, 0, 0, 0, theta0[frag],
			  p->ft.frags[frag].numel);
	}
	m = tl_recv(&a.tl, WAIT);
	assert_non_null(m);
	assert_int_equal(m->kind_case, DDILOCO__V1__SYNCER_MESSAGE__KIND_WELCOME);
	ddiloco__v1__syncer_message__free_unpacked(m, NULL);
	/* the evaluator: Welcome, then Θ = the seed */
	m = tl_recv(&ev.tl, WAIT);
	assert_non_null(m);
	assert_int_equal(m->kind_case, DDILOCO__V1__SYNCER_MESSAGE__KIND_WELCOME);
	ddiloco__v1__syncer_message__free_unpacked(m, NULL);
	for (int q = 0; q < 4; q++) {
		m = tl_recv(&ev.tl, WAIT);
		assert_non_null(m);
		assert_int_equal(m->kind_case, DDILOCO__V1__SYNCER_MESSAGE__KIND_UPDATE);
		assert_int_equal(m->update->round, 0);
		assert_memory_equal(m->update->payload.data,
				    theta0[m->update->fragment],
				    4 * p->ft.frags[m->update->fragment].numel);
		ddiloco__v1__syncer_message__free_unpacked(m, NULL);
	}
	for (int q = 0; q < 4; q++)
		ddiloco__v1__syncer_message__free_unpacked(expect_update(&a), NULL);
	welcomed(&b, p, NULL, NULL);
	st = status(p);
	assert_int_equal(jint(st, "learners_connected"), 2);
	assert_int_equal(jint(st, "evaluators.connected"), 1);
	json_decref(st);
	/* a round of the two learners: the evaluator gets its Update */
	for (int q = 0; q < 4; q++)
		memcpy(theta[q], theta0[q], 4 * p->ft.frags[q].numel);
	one_round(p, &a, &b, 1, theta, ver);
	m = tl_recv(&ev.tl, WAIT);
	assert_non_null(m);
	assert_int_equal(m->kind_case, DDILOCO__V1__SYNCER_MESSAGE__KIND_UPDATE);
	assert_int_equal(m->update->round, 1);
	assert_int_equal(m->update->version, 1);
	ddiloco__v1__syncer_message__free_unpacked(m, NULL);
	/* its reports: one taken, one of a round to come, one NaN */
	evaluation(&ev, 1, 0.25);
	st = status_when(p, "evaluators.evaluations", 1);
	assert_float_equal(json_real_value(json_object_get(st, "eval_loss")),
			   0.25, 0);
	assert_int_equal(jint(st, "eval_history.0.round"), 1);
	json_decref(st);
	evaluation(&ev, 9, 0.2);
	evaluation(&ev, 1, NAN);
	st = status_when(p, "evaluators.refused", 2);
	assert_int_equal(jint(st, "evaluators.evaluations"), 1);
	json_decref(st);
	/* an id out of range; a learner's evaluation; an evaluator's answer */
	learner_open(&ev2, p);
	evaluator_hello(&ev2, p, 9);
	assert_int_equal(tl_status(&ev2.tl, msg, sizeof(msg), NULL),
			 GRPC_STATUS_INVALID_ARGUMENT);
	assert_string_equal(msg, "evaluator id 9 is out of range (0 to 3)");
	tl_close(&ev2.tl);
	evaluation(&b, 1, 0.3);
	assert_int_equal(tl_status(&b.tl, msg, sizeof(msg), NULL),
			 GRPC_STATUS_INVALID_ARGUMENT);
	assert_string_equal(msg, "learner 1 sent an evaluation: only an "
			    "evaluator does");
	tl_close(&b.tl);
	tl_answer(&ev.tl, 1, 0, 0, 1, 1, theta0[0], p->ft.frags[0].numel);
	assert_int_equal(tl_status(&ev.tl, msg, sizeof(msg), NULL),
			 GRPC_STATUS_INVALID_ARGUMENT);
	assert_string_equal(msg, "evaluator 0 sent an answer: an evaluator "
			    "is never pulled");
	tl_close(&ev.tl);
	st = status_when(p, "evaluators.connected", 0);
	json_decref(st);
	tl_close(&a.tl);
	free_theta(theta0);
	free_theta(theta);
	kill(p->pid, SIGTERM);
	assert_int_equal(proc_wait(p, WAIT), 0);
}

/* ---- Beat: heartbeats on a connection of their own ---------------------- */

/*
 * An external job's first Hello does not fix its table: learner 1 with a
 * table of its own waits, as does learner 0 with the job's; when learner
 * 2 agrees with learner 0 (minQuorum 2) that table is the job's, learner
 * 1 is refused naming both fingerprints, and learner 0 gives the seed.
 */
static void one_learner_cannot_fix_the_table(void **state)
{
	struct learner a, c, x;
	char msg[256];
	struct proc *p = *state;

	external_model = 1;
	proc_setup(p, 0, 0);
	external_model = 0;
	proc_start(p);
	learner_open(&x, p);
	hello(&x, p, 1, 7);
	assert_eventually(log_has(p, "learner 1 waits: 1 of the 2 learners"),
			  WAIT);
	learner_open(&a, p);
	hello(&a, p, 0, 0);
	assert_eventually(log_has(p, "learner 0 waits: 1 of the 2 learners"),
			  WAIT);
	learner_open(&c, p);
	hello(&c, p, 2, 0);
	assert_int_equal(tl_status(&x.tl, msg, sizeof(msg), NULL),
			 GRPC_STATUS_FAILED_PRECONDITION);
	assert_non_null(strstr(msg, "fingerprint mismatch"));
	assert_non_null(strstr(msg, "minQuorum learners agreed on"));
	for (int q = 0; q < 4; q++) {
		uint64_t r;
		int frag;

		expect_pull(&a, &r, &frag);
		assert_int_equal(r, 0);
	}
	assert_true(log_has(p, "the job's table is fixed: minQuorum learners "
			    "agree on it"));
	assert_true(log_has(p, "learner 0: asking for its weights"));
	tl_close(&x.tl);
	tl_close(&c.tl);
	tl_close(&a.tl);
}

/*
 * spec.model.tensors: a learner of another table is refused at once,
 * naming both; one of the declared table fixes it alone (minQuorum 2).
 */
static void a_declared_table_is_the_jobs(void **state)
{
	static const uint64_t numel[4] = { 3000, 2000, 1500, 1000 };
	struct learner a, x;
	char msg[512];
	struct proc *p = *state;

	external_model = 1;
	declared = "    tensors: [3000, 2000, 1500, 1000]\n";
	proc_setup(p, 0, 0);
	external_model = 0;
	declared = "";
	frag_table_release(&p->ft);   /* the learners' table: the declared cut */
	assert_int_equal(frag_table_of_numels(&p->ft, numel, 4, 4, &p->nparams,
					      NULL), 0);
	proc_start(p);
	learner_open(&x, p);
	hello(&x, p, 1, 7);
	assert_int_equal(tl_status(&x.tl, msg, sizeof(msg), NULL),
			 GRPC_STATUS_FAILED_PRECONDITION);
	assert_non_null(strstr(msg, "learner 1's model table (4 fragments, 7500 "
			       "values, fingerprint "));
	assert_non_null(strstr(msg, ") is not the one spec.model.tensors "
			       "declares (4 fragments, 7500 values, fingerprint "));
	learner_open(&a, p);
	hello(&a, p, 0, 0);
	for (int q = 0; q < 4; q++) {
		uint64_t r;
		int frag;

		expect_pull(&a, &r, &frag);
		assert_int_equal(r, 0);   /* the seed asked of learner 0 */
	}
	assert_true(log_has(p, "the job's table is fixed: spec.model.tensors "
			    "declares it"));
	tl_close(&x.tl);
	tl_close(&a.tl);
}

/*
 * A Beat refused without a live Train stream (FAILED_PRECONDITION), with
 * another incarnation (ABORTED), without a hello first; a good one taken,
 * its heartbeats handled as Train's and counted; closed at its next
 * heartbeat once the Train stream is gone. One of incarnation 0 taken
 * when the Train stream's Hello was (its learner not attached yet).
 */
static void beat_refusals_and_counts(void **state)
{
	struct proc *p = *state;
	struct learner a, c;
	struct tl b;
	char msg[256];
	json_t *st;

	proc_setup(p, 0, 0);
	proc_start(p);

	tl_open_beat(&b, p->grpc_port, NULL, NULL);
	assert_int_equal(tl_beat_hello(&b, "grpctest", 1, 1001), 0);
	assert_int_equal(tl_status(&b, msg, sizeof(msg), NULL),
			 GRPC_STATUS_FAILED_PRECONDITION);
	assert_string_equal(msg, "learner 1 has no live Train stream: a Beat "
			    "follows its Welcome");
	tl_close(&b);

	join(&a, p, 0, NULL, NULL);   /* incarnation 1000 */
	tl_open_beat(&b, p->grpc_port, NULL, NULL);
	assert_int_equal(tl_beat_hello(&b, "grpctest", 0, 999), 0);
	assert_false(tl_beat_taken(&b, WAIT));
	assert_int_equal(tl_status(&b, msg, sizeof(msg), NULL), GRPC_STATUS_ABORTED);
	assert_string_equal(msg, "incarnation 999 is not that of learner 0's "
			    "Train stream (1000)");
	tl_close(&b);

	tl_open_beat(&b, p->grpc_port, NULL, NULL);
	tl_heartbeat(&b, 3, 3 * 32);
	assert_int_equal(tl_status(&b, msg, sizeof(msg), NULL),
			 GRPC_STATUS_FAILED_PRECONDITION);
	assert_string_equal(msg, "the first message must be a hello");
	tl_close(&b);
	assert_int_equal(jint(st = status(p), "learners.0.step"), 0);
	assert_int_equal(jint(st, "beat_streams"), 0);
	json_decref(st);

	/* the right learner and incarnation: taken, its heartbeat moves
	 * the learner as one on Train does */
	tl_open_beat(&b, p->grpc_port, NULL, NULL);
	assert_int_equal(tl_beat_hello(&b, "grpctest", 0, 1000), 0);
	assert_true(tl_beat_taken(&b, WAIT));
	tl_heartbeat(&b, 7, 7 * 32);
	st = status_when(p, "learners.0.step", 7);
	assert_int_equal(jint(st, "beat_streams"), 1);
	assert_int_equal(jint(st, "beat_heartbeats"), 1);
	assert_int_equal(jint(st, "heartbeats.received"), 1);
	assert_int_equal(jint(st, "learners.0.tokens"), 7 * 32);
	json_decref(st);
	assert_true(syncerproc_metric(p->http_port, "ddiloco_syncer_beat_streams_total") == 1);
	assert_true(syncerproc_metric(p->http_port, "ddiloco_syncer_beat_heartbeats_total") == 1);

	/* heartbeats on Train still count, not as the Beat's */
	heartbeat(&a, 8, 8 * 32);
	st = status_when(p, "learners.0.step", 8);
	assert_int_equal(jint(st, "beat_heartbeats"), 1);
	assert_int_equal(jint(st, "heartbeats.received"), 2);
	json_decref(st);
	tl_heartbeat(&b, 9, 9 * 32);
	st = status_when(p, "learners.0.step", 9);
	assert_int_equal(jint(st, "beat_heartbeats"), 2);
	json_decref(st);

	/* the Train stream ends: the Beat's next heartbeat is refused */
	tl_close(&a.tl);
	json_decref(status_when(p, "learners.0.connected", 0));
	tl_heartbeat(&b, 10, 10 * 32);
	assert_int_equal(tl_status(&b, msg, sizeof(msg), NULL),
			 GRPC_STATUS_FAILED_PRECONDITION);
	assert_string_equal(msg, "learner 0 has no live Train stream: a Beat "
			    "follows its Welcome");
	tl_close(&b);
	assert_int_equal(jint(st = status(p), "learners.0.step"), 9);
	assert_int_equal(jint(st, "beat_heartbeats"), 2);
	json_decref(st);

	learner_open(&c, p);   /* incarnation 0: no learner attached */
	assert_int_equal(tl_hello_as(&c.tl, &p->ft, "grpctest", 1,
				     p->ft.fingerprint, 0), 0);
	welcomed(&c, p, NULL, NULL);
	tl_open_beat(&b, p->grpc_port, NULL, NULL);
	assert_int_equal(tl_beat_hello(&b, "grpctest", 1, 0), 0);
	assert_true(tl_beat_taken(&b, WAIT));
	tl_heartbeat(&b, 5, 5 * 32);
	json_decref(status_when(p, "learners.1.step", 5));
	assert_true(syncerproc_metric(p->http_port, "ddiloco_syncer_beat_streams_total") == 2);
	tl_close(&b);
	tl_close(&c.tl);
	kill(p->pid, SIGTERM);
	assert_int_equal(proc_wait(p, WAIT), 0);
}

/* Starts sending an answer of `bytes` payload for fragment 99 (none of
 * the job's: refused, its bytes counted in bytes_in) without waiting;
 * *bb and tag are tl_send_end's. */
static void answer_start(struct learner *l, size_t bytes,
			 grpc_byte_buffer **bb, int *tag)
{
	Ddiloco__V1__LearnerMessage m = DDILOCO__V1__LEARNER_MESSAGE__INIT;
	Ddiloco__V1__Answer a = DDILOCO__V1__ANSWER__INIT;
	grpc_slice sl;
	grpc_op op;

	a.fragment = 99;
	a.round = 1;
	a.encoding = DDILOCO__V1__ENCODING__ENCODING_F32;
	a.payload.data = calloc(bytes, 1);
	a.payload.len = bytes;
	assert_non_null(a.payload.data);
	m.kind_case = DDILOCO__V1__LEARNER_MESSAGE__KIND_ANSWER;
	m.answer = &a;
	sl = grpc_slice_malloc(ddiloco__v1__learner_message__get_packed_size(&m));
	ddiloco__v1__learner_message__pack(&m, GRPC_SLICE_START_PTR(sl));
	free(a.payload.data);
	*bb = grpc_raw_byte_buffer_create(&sl, 1);
	grpc_slice_unref(sl);
	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_SEND_MESSAGE;
	op.data.send_message.send_message = *bb;
	assert_int_equal(grpc_call_start_batch(l->tl.call, &op, 1, tag, NULL),
			 GRPC_CALL_OK);
}

/*
 * Answers in parts (docs/protocol.md, Messages in parts): one in three
 * parts, a heartbeat between two of them, is merged as the whole one;
 * one whose first part is missing ends its stream with
 * INVALID_ARGUMENT and is never merged; Welcome says the limit.
 */
static void answers_in_parts(void **state)
{
	struct proc *p = *state;
	struct learner t[3];
	float **th;
	uint64_t r[3];
	int f[3];
	char msg[256];
	json_t *st;

	proc_setup(p, 0, 0);
	proc_start(p);
	th = alloc_theta(p);
	for (int i = 0; i < 3; i++)
		join(&t[i], p, (uint32_t)i, i == 0 ? th : NULL, NULL);
	for (int i = 0; i < 3; i++)
		heartbeat(&t[i], 1, 32);
	for (int i = 0; i < 3; i++)
		expect_pull(&t[i], &r[i], &f[i]);
	size_t n = p->ft.frags[f[0]].numel, b = 4 * n;
	float *d = make_delta(n, 0.02f);

	/* learner 2: its first part missing */
	answer_part(&t[2], r[2], f[2], d, n, 8, b - 8);
	assert_int_equal(tl_status(&t[2].tl, msg, sizeof(msg), NULL),
			 GRPC_STATUS_INVALID_ARGUMENT);
	assert_string_equal(msg, "answer part at offset 8 of a payload not "
			    "begun: its first part is missing");
	/* learner 0: three parts, a heartbeat between; learner 1 whole */
	answer_part(&t[0], r[0], f[0], d, n, 0, 8);
	heartbeat(&t[0], 1, 32);
	answer_part(&t[0], r[0], f[0], d, n, 8, b / 2 - 8);
	answer_part(&t[0], r[0], f[0], d, n, b / 2, b - b / 2);
	answer(&t[1], r[1], f[1], d, n, 2);
	for (int i = 0; i < 2; i++) {
		Ddiloco__V1__SyncerMessage *u = expect_update(&t[i]);

		assert_int_equal(u->update->fragment, (uint32_t)f[0]);
		assert_int_equal(u->update->version, 1);
		assert_int_equal(u->update->payload_total, 0);   /* fits */
		if (i == 0)
			assert_stepped(th[f[0]], d, u->update->payload.data, n);
		ddiloco__v1__syncer_message__free_unpacked(u, NULL);
	}
	st = status(p);
	assert_int_equal(jint(st, "answers.merged"), 2);
	assert_int_equal(jint(st, "answer_parts"), 3);
	assert_int_equal(jint(st, "parts_refused"), 1);
	json_decref(st);
	free(d);
	for (int q = 0; q < 4; q++)
		free(th[q]);
	free(th);
	for (int i = 0; i < 3; i++)
		tl_close(&t[i].tl);
}

/*
 * On a thin link a heartbeat on the Train stream comes after
 * the answer queued before it; on a Beat (a connection of its own) it
 * comes while the answer is still on its way. Both streams go through
 * a proxy at 2 MB/s toward the syncer; the answer is 6 MB (3 s there).
 */
static void beat_heartbeat_passes_a_large_answer(void **state)
{
	struct proc *p = *state;
	const size_t big = 6u << 20;
	struct slowlink px;
	struct learner a;
	struct tl b;
	grpc_byte_buffer *bb;
	grpc_event ev;
	json_t *st;
	int tag;

	proc_setup(p, 0, 0);
	proc_start(p);
	/* toward the syncer at 2 MB/s, each connection a link of its own */
	assert_int_equal(slowlink_start(&px, p->grpc_port, 0, 2e6), 0);
	p->dial_port = px.port;
	join(&a, p, 0, NULL, NULL);
	tl_open_beat(&b, px.port, NULL, NULL);
	assert_int_equal(tl_beat_hello(&b, "grpctest", 0, 1000), 0);
	assert_true(tl_beat_taken(&b, WAIT));

	/* the heartbeat on the Beat: here before the answer is */
	answer_start(&a, big, &bb, &tag);
	tl_heartbeat(&b, 5, 5 * 32);
	st = status_when(p, "learners.0.step", 5);
	assert_int_equal(jint(st, "bytes_in"), 0);
	assert_int_equal(jint(st, "answers.rejected"), 0);
	json_decref(st);

	/* the heartbeat on Train: behind the answer */
	ev = grpc_completion_queue_pluck(a.tl.cq, &tag, tl_in(WAIT), NULL);
	assert_int_equal(ev.type, GRPC_OP_COMPLETE);
	assert_true(ev.success);
	grpc_byte_buffer_destroy(bb);
	heartbeat(&a, 6, 6 * 32);
	st = status_when(p, "learners.0.step", 6);
	assert_int_equal(jint(st, "bytes_in"), (long long)big);
	assert_int_equal(jint(st, "answers.rejected"), 1);
	assert_int_equal(jint(st, "beat_heartbeats"), 1);
	json_decref(st);

	tl_close(&b);
	tl_close(&a.tl);
	slowlink_stop(&px);
	kill(p->pid, SIGTERM);
	assert_int_equal(proc_wait(p, WAIT), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(quorum_with_silent_learner_and_a_leaver, setup, teardown),
		cmocka_unit_test_setup_teardown(garbage_truncated_and_wrong_fingerprint, setup, teardown),
		cmocka_unit_test_setup_teardown(nan_answer_is_rejected, setup, teardown),
		cmocka_unit_test_setup_teardown(kill9_and_restart_restores_state, setup, teardown),
		cmocka_unit_test_setup_teardown(budget_ends_the_job, setup, teardown),
		cmocka_unit_test_setup_teardown(a_stream_without_hello_is_closed, setup, teardown),
		cmocka_unit_test_setup_teardown(messages_are_bounded_by_the_table, setup, teardown),
		cmocka_unit_test_setup_teardown(a_silent_plaintext_connection_is_closed, setup, teardown),
		cmocka_unit_test_setup_teardown(an_evaluator_gets_theta_and_reports, setup, teardown),
		cmocka_unit_test_setup_teardown(one_learner_cannot_fix_the_table, setup, teardown),
		cmocka_unit_test_setup_teardown(a_declared_table_is_the_jobs, setup, teardown),
		cmocka_unit_test_setup_teardown(beat_refusals_and_counts, setup, teardown),
		cmocka_unit_test_setup_teardown(beat_heartbeat_passes_a_large_answer, setup, teardown),
		cmocka_unit_test_setup_teardown(answers_in_parts, setup, teardown),
	};
	if (getenv("FILTER"))
		cmocka_set_test_filter(getenv("FILTER"));
	return cmocka_run_group_tests(tests, syncerproc_group_setup,
				      syncerproc_group_teardown);
}
