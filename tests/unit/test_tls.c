/*
 * Mutual TLS between learners and the syncer (docs/security.md): the
 * syncer as a real process ($BUILD/ddiloco syncer with --tls-dir) and
 * real gRPC test clients with certificates made by common/pki.h.
 *
 * One learner with its own certificate joins and keeps answering rounds
 * while others try to get in: a certificate from another CA, another
 * job's certificate (its own CA, and this job's CA naming another job),
 * no certificate, plaintext, a learner's certificate saying hello as
 * another learner (as a free id and as the connected learner's id), and
 * the syncer's own identity. Each is refused; after each the legit
 * learner's rounds go on, and /status counts the refusals. Then the
 * command lines: missing or mismatched certificate files are refused at
 * start with the reason, and `ddiloco run`'s certificate folders.
 *
 * The other way round, a real sidecar (sidecar_run, in this process)
 * takes a Welcome and "job done" only from a server whose certificate
 * chains to the job's CA and names the job's syncer: a server showing a
 * learner's certificate of the same CA, or the syncer's identity from
 * another CA, never gets it to finish.
 *
 * A connection that never finishes its TLS handshake is closed at the
 * handshake deadline.
 *
 * The syncer process and the test clients' streams are
 * tests/unit/syncerproc.h's, shared with test_syncer_grpc.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fragment.h"
#include "common/jobspec.h"
#include "common/pki.h"
#include "common/tls.h"
#include "common/util.h"
#include "ddiloco/v1/syncer.pb-c.h"
#include "common/exchange.h"
#include "runner/run.h"
#include "sidecar/sidecar.h"
#include "syncer/syncer.h"
#include "trainer/model.h"
#include "tests/unit/slowlink.h"
#include "tests/unit/syncerproc.h"
#include "tests/unit/testlib.h"

#define JOB "tlsjob"
#define P 2

/* ---- the syncer and its certificates ------------------------------------ */

struct env {
	pid_t pid;
	int grpc_port, http_port;
	char dir[128], job[256], log[256], tlsdir[256];
	struct frag_table ft;
	struct pki_pem ca, other_ca;    /* this job's CA; another job's */
};

static void write_job(const char *path, const char *dir, int insecure)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fprintf(f, "apiVersion: ddiloco.io/v1alpha1\n"
		"kind: DecoupledTrainingJob\n"
		"metadata:\n  name: " JOB "\n"
		"spec:\n"
		"  learners:\n    replicas: 3\n"
		"  model:\n    vocabSize: 256\n    context: 16\n    layers: 1\n"
		"    heads: 2\n    channels: 16\n"
		"  data:\n    path: %s/data.txt\n"
		"  optimizer:\n    batchSize: 2\n"
		"  syncer:\n    minQuorum: 1\n    fragments: %d\n"
		"    checkpointEvery: 0\n    evalEvery: 0\n    insecure: %s\n",
		dir, P, insecure ? "true" : "false");
	fclose(f);
}

/* A leaf of ca with one URI identity, for a client (or a server). */
static void leaf(const struct pki_pem *ca, const char *uri, int server,
		 struct pki_pem *out)
{
	const char *uris[] = { uri, NULL };
	const char *ips[] = { "127.0.0.1", NULL };
	struct pki_leaf_req req = { .common_name = uri, .uris = uris,
				    .ips = server ? ips : NULL,
				    .server = server, .client = !server };
	struct err e;

	if (pki_issue(ca, &req, out, &e))
		fail_msg("%s", e.msg);
}

static void env_setup(struct env *v, int insecure)
{
	struct job_spec js;
	struct model_config cfg;
	struct pki_pem srv;
	struct err e;
	char path[300];

	memset(v, 0, sizeof(*v));
	assert_int_equal(testlib_tmpdir(v->dir, sizeof(v->dir), "ddiloco-tls"), 0);
	snprintf(v->job, sizeof(v->job), "%s/job.yaml", v->dir);
	snprintf(v->log, sizeof(v->log), "%s/syncer.log", v->dir);
	snprintf(v->tlsdir, sizeof(v->tlsdir), "%s/syncer-tls", v->dir);
	write_job(v->job, v->dir, insecure);
	syncerproc_write_text(v->dir);
	assert_int_equal(jobspec_load(v->job, &js, NULL), 0);
	assert_int_equal(model_config_from_job(&js.model, &cfg, NULL), 0);
	assert_int_equal(model_frag_table(&cfg, P, &v->ft, NULL), 0);
	v->grpc_port = syncerproc_free_port();
	v->http_port = syncerproc_free_port();

	assert_int_equal(pki_ca_new(JOB, 0, &v->ca, &e), 0);
	assert_int_equal(pki_ca_new("otherjob", 0, &v->other_ca, &e), 0);
	leaf(&v->ca, "ddiloco://" JOB "/syncer", 1, &srv);
	assert_int_equal(mkdir(v->tlsdir, 0700), 0);
	snprintf(path, sizeof(path), "%s/ca.crt", v->tlsdir);
	assert_int_equal(tls_write_pem(path, v->ca.cert, 0, &e), 0);
	snprintf(path, sizeof(path), "%s/tls.crt", v->tlsdir);
	assert_int_equal(tls_write_pem(path, srv.cert, 0, &e), 0);
	snprintf(path, sizeof(path), "%s/tls.key", v->tlsdir);
	assert_int_equal(tls_write_pem(path, srv.key, 1, &e), 0);
	pki_pem_release(&srv);
}

/* Runs `ddiloco syncer` with tls_flag tls_arg (NULL: none); returns at
 * once when it is ready, or, when ready is not set, its exit code once it
 * ends, with its stderr in log. */
static int syncer_exec(struct env *v, int ready, const char *tls_flag,
		       const char *tls_arg)
{
	int st;

	v->pid = syncerproc_spawn(v->job, v->grpc_port, v->http_port, v->dir,
				  v->log, "w", tls_flag, tls_arg);
	if (!ready) {
		assert_int_equal(waitpid(v->pid, &st, 0), v->pid);
		v->pid = 0;
		return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	}
	syncerproc_wait_ready(v->pid, v->http_port);
	return 0;
}

/* SIGTERM: a clean stop exits 0 (under the sanitizers: nothing leaked). */
static void syncer_stop(struct env *v)
{
	int st;

	kill(v->pid, SIGTERM);
	assert_int_equal(waitpid(v->pid, &st, 0), v->pid);
	v->pid = 0;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		void *data;
		size_t len;

		/* what the syncer said, e.g. a sanitizer's report */
		if (file_read_all(v->log, 1 << 20, &data, &len, NULL) == 0) {
			fprintf(stderr, "%.*s", (int)(len < 8192 ? len : 8192),
				(char *)data + (len < 8192 ? 0 : len - 8192));
			free(data);
		}
	}
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

static void env_teardown(struct env *v)
{
	syncerproc_end(&v->pid, v->dir);
	frag_table_release(&v->ft);
	pki_pem_release(&v->ca);
	pki_pem_release(&v->other_ca);
}

static int setup(void **state)
{
	*state = calloc(1, sizeof(struct env));
	return *state ? 0 : -1;
}

static int teardown(void **state)
{
	struct env *v = *state;

	if (v->dir[0])
		env_teardown(v);
	free(v);
	return 0;
}

static long long status_int(struct env *v, const char *field)
{
	json_t *j, *f;
	long long n;

	assert_int_equal(syncerproc_http_get(v->http_port, "/status", &j), 200);
	f = json_object_get(j, field);
	assert_non_null(f);
	n = json_is_boolean(f) ? json_is_true(f) : (long long)json_integer_value(f);
	json_decref(j);
	return n;
}

/* ---- a test learner ----------------------------------------------------- */

/* The legit learner: its Train stream (tests/unit/syncerproc.h) and its
 * view of the job. */
struct learner {
	struct tl tl;
	uint64_t versions[P], step, merged_updates, last_round;
};

static int hello(struct tl *t, struct env *v, uint32_t id)
{
	return tl_hello(t, &v->ft, JOB, id, v->ft.fingerprint);
}

/* A heartbeat a step, 32 tokens a step. */
static void heartbeat(struct learner *l)
{
	l->step++;
	tl_heartbeat(&l->tl, l->step, l->step * 32);
}

/* The Pull's answer: one step's small delta from the version it has. */
static void answer(struct learner *l, struct env *v, uint64_t round, int frag)
{
	size_t n = v->ft.frags[frag].numel;
	float *d = malloc(n * sizeof(float));

	for (size_t i = 0; i < n; i++)
		d[i] = 0.001f * (float)((int)(i % 5) - 2);
	tl_answer(&l->tl, round, frag, l->versions[frag], 1, l->step, d, n);
	free(d);
}

/* The learner with this job's certificate for id joins: Welcome, then
 * one Update per fragment. */
static void join(struct learner *l, struct env *v, const struct pki_pem *cert,
		 uint32_t id)
{
	Ddiloco__V1__SyncerMessage *m;

	memset(l, 0, sizeof(*l));
	tl_open(&l->tl, v->grpc_port, v->ca.cert, cert);
	assert_int_equal(hello(&l->tl, v, id), 0);
	m = tl_recv(&l->tl, WAIT);
	assert_non_null(m);
	assert_int_equal(m->kind_case, DDILOCO__V1__SYNCER_MESSAGE__KIND_WELCOME);
	ddiloco__v1__syncer_message__free_unpacked(m, NULL);
	for (int q = 0; q < P; q++) {
		m = tl_recv(&l->tl, WAIT);
		assert_non_null(m);
		assert_int_equal(m->kind_case, DDILOCO__V1__SYNCER_MESSAGE__KIND_UPDATE);
		l->versions[m->update->fragment] = m->update->version;
		ddiloco__v1__syncer_message__free_unpacked(m, NULL);
	}
}

/*
 * The legit learner trains on: a heartbeat a step, every Pull answered,
 * until n more merged Updates (round > 0) have come. Its stream must stay
 * open all along.
 */
static void train(struct learner *l, struct env *v, int n)
{
	uint64_t want = l->merged_updates + (uint64_t)n;
	double t0 = clock_mono();

	while (l->merged_updates < want) {
		Ddiloco__V1__SyncerMessage *m;

		assert_true(clock_mono() - t0 < WAIT);
		heartbeat(l);
		while ((m = tl_recv(&l->tl, 0.02))) {
			if (m->kind_case == DDILOCO__V1__SYNCER_MESSAGE__KIND_PULL) {
				answer(l, v, m->pull->round, (int)m->pull->fragment);
			} else {
				assert_int_equal(m->kind_case,
						 DDILOCO__V1__SYNCER_MESSAGE__KIND_UPDATE);
				assert_true(m->update->round > l->last_round);
				l->last_round = m->update->round;
				l->versions[m->update->fragment] = m->update->version;
				l->merged_updates++;
			}
			ddiloco__v1__syncer_message__free_unpacked(m, NULL);
		}
		/* a receive that timed out stays armed: the stream is open */
		assert_true(l->tl.recv_pending);
	}
}

/*
 * A client that must not get in: it says hello as id and gets no message,
 * only a status; returns it with the details in msg.
 */
static grpc_status_code intruder(struct env *v, const char *ca,
				 const struct pki_pem *cert, uint32_t id,
				 char *msg, size_t len)
{
	struct tl t;
	grpc_status_code code;
	int messages = 0;

	tl_open(&t, v->grpc_port, ca, cert);
	hello(&t, v, id);   /* may fail: the connection never came up */
	code = tl_status(&t, msg, len, &messages);
	assert_int_equal(messages, 0);
	tl_close(&t);
	return code;
}

/* ---- tests --------------------------------------------------------------- */

static void only_the_jobs_learners_get_in(void **state)
{
	struct env *v = *state;
	struct pki_pem l0, l1, wrong_ca, other_job, other_name, syncer_id, no_id;
	struct pki_pem ev0;
	struct learner a;
	char msg[512];
	long long refused = 0;

	env_setup(v, 0);
	syncer_exec(v, 1, "--tls-dir", v->tlsdir);
	assert_int_equal(status_int(v, "insecure"), 0);
	leaf(&v->ca, "ddiloco://" JOB "/learner/0", 0, &l0);
	leaf(&v->ca, "ddiloco://" JOB "/learner/1", 0, &l1);
	/* the same identity as learner 0, from a CA of the same name */
	{
		struct pki_pem ca2;
		struct err e;

		assert_int_equal(pki_ca_new(JOB, 0, &ca2, &e), 0);
		leaf(&ca2, "ddiloco://" JOB "/learner/0", 0, &wrong_ca);
		pki_pem_release(&ca2);
	}
	leaf(&v->other_ca, "ddiloco://otherjob/learner/0", 0, &other_job);
	leaf(&v->ca, "ddiloco://otherjob/learner/2", 0, &other_name);
	/* the syncer's identity, but a client certificate */
	leaf(&v->ca, "ddiloco://" JOB "/syncer", 0, &syncer_id);
	leaf(&v->ca, "spiffe://example.org/learner", 0, &no_id);
	/* an evaluator's (docs/syncer.md, Evaluators) */
	leaf(&v->ca, "ddiloco://" JOB "/evaluator/0", 0, &ev0);

	/* learner 0 with its certificate joins and trains */
	join(&a, v, &l0, 0);
	train(&a, v, 2);
	assert_int_equal(status_int(v, "learners_connected"), 1);

	/* TLS handshakes that fail: the syncer never sees a call */
	assert_int_equal(intruder(v, v->ca.cert, &wrong_ca, 0, msg, sizeof(msg)),
			 GRPC_STATUS_UNAVAILABLE);
	train(&a, v, 1);
	assert_int_equal(intruder(v, v->ca.cert, &other_job, 2, msg, sizeof(msg)),
			 GRPC_STATUS_UNAVAILABLE);
	train(&a, v, 1);
	assert_int_equal(intruder(v, v->ca.cert, NULL, 2, msg, sizeof(msg)),
			 GRPC_STATUS_UNAVAILABLE);
	assert_int_equal(intruder(v, NULL, NULL, 2, msg, sizeof(msg)),
			 GRPC_STATUS_UNAVAILABLE);
	train(&a, v, 1);
	assert_int_equal(status_int(v, "streams_refused"), 0);

	/* learner 1's certificate saying hello as learner 2, then as the
	 * connected learner 0: refused, learner 0 keeps its stream */
	assert_int_equal(intruder(v, v->ca.cert, &l1, 2, msg, sizeof(msg)),
			 GRPC_STATUS_PERMISSION_DENIED);
	assert_string_equal(msg, "the client certificate is learner 1's: "
			    "it cannot say hello as learner 2");
	refused++;
	train(&a, v, 1);
	assert_int_equal(intruder(v, v->ca.cert, &l1, 0, msg, sizeof(msg)),
			 GRPC_STATUS_PERMISSION_DENIED);
	assert_string_equal(msg, "the client certificate is learner 1's: "
			    "it cannot say hello as learner 0");
	refused++;
	train(&a, v, 1);
	/* an evaluator's certificate cannot say a learner's hello */
	assert_int_equal(intruder(v, v->ca.cert, &ev0, 1, msg, sizeof(msg)),
			 GRPC_STATUS_PERMISSION_DENIED);
	assert_string_equal(msg, "the client certificate is evaluator 0's: "
			    "it cannot say hello as learner 1");
	refused++;
	train(&a, v, 1);

	/* a Beat (heartbeats on a connection of their own) is checked as
	 * Train is: learner 1's certificate cannot beat for learner 0,
	 * learner 0's can */
	{
		struct tl bt;

		tl_open_beat(&bt, v->grpc_port, v->ca.cert, &l1);
		assert_int_equal(tl_beat_hello(&bt, JOB, 0, 1000), 0);
		assert_false(tl_beat_taken(&bt, WAIT));
		assert_int_equal(tl_status(&bt, msg, sizeof(msg), NULL),
				 GRPC_STATUS_PERMISSION_DENIED);
		assert_string_equal(msg, "the client certificate is learner 1's: "
				    "it cannot say hello as learner 0");
		tl_close(&bt);
		refused++;
		tl_open_beat(&bt, v->grpc_port, v->ca.cert, &l0);
		assert_int_equal(tl_beat_hello(&bt, JOB, 0, 1000), 0);
		assert_true(tl_beat_taken(&bt, WAIT));
		tl_close(&bt);
		assert_int_equal(status_int(v, "beat_streams"), 1);
	}
	train(&a, v, 1);

	/* this job's CA, identities that are not this job's learners */
	assert_int_equal(intruder(v, v->ca.cert, &other_name, 2, msg, sizeof(msg)),
			 GRPC_STATUS_PERMISSION_DENIED);
	assert_string_equal(msg, "the client certificate is for job 'otherjob', "
			    "not '" JOB "'");
	refused++;
	assert_int_equal(intruder(v, v->ca.cert, &syncer_id, 2, msg, sizeof(msg)),
			 GRPC_STATUS_PERMISSION_DENIED);
	assert_string_equal(msg, "the client certificate of job '" JOB "' is not "
			    "a learner's");
	refused++;
	assert_int_equal(intruder(v, v->ca.cert, &no_id, 2, msg, sizeof(msg)),
			 GRPC_STATUS_PERMISSION_DENIED);
	assert_non_null(strstr(msg, "no ddiloco:// identity"));
	refused++;
	train(&a, v, 2);

	/* none of it touched learner 0 or the count of learners */
	assert_int_equal(status_int(v, "learners_connected"), 1);
	assert_int_equal(status_int(v, "streams_refused"), refused);
	assert_true(a.merged_updates >= 9);   /* the train() calls above */

	/* learner 1 with its own certificate joins beside it */
	{
		struct learner b;

		join(&b, v, &l1, 1);
		assert_int_equal(status_int(v, "learners_connected"), 2);
		tl_close(&b.tl);
	}
	train(&a, v, 1);
	tl_close(&a.tl);
	pki_pem_release(&l0);
	pki_pem_release(&l1);
	pki_pem_release(&wrong_ca);
	pki_pem_release(&other_job);
	pki_pem_release(&other_name);
	pki_pem_release(&syncer_id);
	pki_pem_release(&no_id);
	pki_pem_release(&ev0);
	syncer_stop(v);
}

/* The last line of the syncer's log. */
static void last_line(struct env *v, char *out, size_t n)
{
	void *data;
	size_t len;
	char *s, *nl;

	assert_int_equal(file_read_all(v->log, 1 << 20, &data, &len, NULL), 0);
	s = data;
	while (len > 0 && s[len - 1] == '\n')
		s[--len] = 0;
	nl = strrchr(s, '\n');
	snprintf(out, n, "%s", nl ? nl + 1 : s);
	free(data);
}

static void command_lines_refuse_bad_files(void **state)
{
	struct env *v = *state;
	char line[1024], path[300];
	struct pki_pem l0;
	struct err e;

	env_setup(v, 0);
	/* no certificate and not insecure */
	assert_int_equal(syncer_exec(v, 0, NULL, NULL), 2);
	last_line(v, line, sizeof(line));
	assert_string_equal(line, "ddiloco syncer: tls: no certificate: give "
			    "--tls-dir DIR (with ca.crt, tls.crt, tls.key) or "
			    "--tls-cert, --tls-key and --tls-ca; or set "
			    "spec.syncer.insecure: true for plaintext gRPC");
	/* a folder without the key */
	snprintf(path, sizeof(path), "%s/tls.key", v->tlsdir);
	{
		char moved[300];

		snprintf(moved, sizeof(moved), "%s/moved.key", v->dir);
		assert_int_equal(rename(path, moved), 0);
		assert_int_equal(syncer_exec(v, 0, "--tls-dir", v->tlsdir), 2);
		last_line(v, line, sizeof(line));
		assert_non_null(strstr(line, "tls: cannot open '"));
		assert_non_null(strstr(line, "/tls.key': No such file"));
		assert_int_equal(rename(moved, path), 0);
	}
	/* a learner's certificate for the syncer */
	leaf(&v->ca, "ddiloco://" JOB "/learner/0", 0, &l0);
	snprintf(path, sizeof(path), "%s/tls.crt", v->tlsdir);
	assert_int_equal(tls_write_pem(path, l0.cert, 0, &e), 0);
	snprintf(path, sizeof(path), "%s/tls.key", v->tlsdir);
	assert_int_equal(tls_write_pem(path, l0.key, 1, &e), 0);
	assert_int_equal(syncer_exec(v, 0, "--tls-dir", v->tlsdir), 2);
	last_line(v, line, sizeof(line));
	assert_string_equal(line, "ddiloco syncer: pki: the certificate is "
			    "ddiloco://" JOB "/learner/0, not ddiloco://" JOB "/syncer");
	/* a key that is not the certificate's */
	{
		struct pki_pem srv;

		leaf(&v->ca, "ddiloco://" JOB "/syncer", 1, &srv);
		assert_int_equal(tls_write_pem(path, srv.key, 1, &e), 0);
		assert_int_equal(syncer_exec(v, 0, "--tls-dir", v->tlsdir), 2);
		last_line(v, line, sizeof(line));
		assert_non_null(strstr(line, "the key does not belong to the certificate"));
		pki_pem_release(&srv);
	}
	/* a CA that did not sign it */
	snprintf(path, sizeof(path), "%s/ca.crt", v->tlsdir);
	assert_int_equal(tls_write_pem(path, v->other_ca.cert, 0, &e), 0);
	snprintf(path, sizeof(path), "%s/tls.key", v->tlsdir);
	assert_int_equal(tls_write_pem(path, l0.key, 1, &e), 0);
	assert_int_equal(syncer_exec(v, 0, "--tls-dir", v->tlsdir), 2);
	last_line(v, line, sizeof(line));
	assert_non_null(strstr(line, "does not verify against the CA"));
	pki_pem_release(&l0);

	/* insecure: plaintext, said in the log and in /status */
	write_job(v->job, v->dir, 1);
	syncer_exec(v, 1, NULL, NULL);
	assert_int_equal(status_int(v, "insecure"), 1);
	{
		struct tl t;

		tl_open(&t, v->grpc_port, NULL, NULL);
		assert_int_equal(hello(&t, v, 2), 0);
		Ddiloco__V1__SyncerMessage *m = tl_recv(&t, WAIT);

		assert_non_null(m);
		assert_int_equal(m->kind_case, DDILOCO__V1__SYNCER_MESSAGE__KIND_WELCOME);
		ddiloco__v1__syncer_message__free_unpacked(m, NULL);
		tl_close(&t);
	}
	syncer_stop(v);
	{
		void *data;
		size_t len;

		assert_int_equal(file_read_all(v->log, 1 << 20, &data, &len, NULL), 0);
		assert_non_null(strstr(data, "in PLAINTEXT (spec.syncer.insecure)"));
		free(data);
	}
}

/* `ddiloco run`'s folders: keys 0600, each certificate its process's. */
static void run_certificate_folders(void **state)
{
	struct env *v = *state;
	char dir[300], path[400];
	struct tls_paths tp = { .dir = path };
	struct tls_files f;
	struct pki_id id = { .job = JOB, .role = PKI_ROLE_SYNCER };
	struct pki_names n;
	struct stat st;
	struct err e;

	assert_int_equal(testlib_tmpdir(v->dir, sizeof(v->dir), "ddiloco-tls"), 0);
	snprintf(dir, sizeof(dir), "%s/tls", v->dir);
	assert_int_equal(run_certs_make(dir, JOB, 2, 1,
					(const char *[]){ "tlsjob-syncer-0.tlsjob-syncer.ml.svc", NULL },
					NULL, &e), 0);
	snprintf(path, sizeof(path), "%s/syncer", dir);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	assert_int_equal(tls_files_load(&tp, &f, &e), 0);
	assert_int_equal(pki_cert_is(f.cert, &id, &e), 0);
	assert_int_equal(pki_cert_names(f.cert, &n, &e), 0);
	assert_int_equal(n.ndns, 2);
	assert_string_equal(n.dns[0], "localhost");
	assert_string_equal(n.dns[1], "tlsjob-syncer-0.tlsjob-syncer.ml.svc");
	assert_int_equal(n.nips, 1);
	assert_string_equal(n.ips[0], "127.0.0.1");
	pki_names_release(&n);
	tls_files_release(&f);
	id.role = PKI_ROLE_LEARNER;
	for (unsigned i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/learner-%u/tls.key", dir, i);
		assert_int_equal(stat(path, &st), 0);
		assert_int_equal(st.st_mode & 0777, 0600);
		snprintf(path, sizeof(path), "%s/learner-%u", dir, i);
		assert_int_equal(tls_files_load(&tp, &f, &e), 0);
		id.learner = i;
		assert_int_equal(pki_cert_is(f.cert, &id, &e), 0);
		id.learner = i + 1;
		assert_int_equal(pki_cert_is(f.cert, &id, &e), -1);
		tls_files_release(&f);
	}
	/* the evaluator's (docs/syncer.md, Evaluators) */
	snprintf(path, sizeof(path), "%s/evaluator-0", dir);
	assert_int_equal(tls_files_load(&tp, &f, &e), 0);
	id.role = PKI_ROLE_EVALUATOR;
	id.learner = 0;
	assert_int_equal(pki_cert_is(f.cert, &id, &e), 0);
	id.role = PKI_ROLE_LEARNER;
	assert_int_equal(pki_cert_is(f.cert, &id, &e), -1);
	tls_files_release(&f);
	snprintf(path, sizeof(path), "%s/evaluator-1", dir);
	assert_int_equal(stat(path, &st), -1);
	/* no CA key is left behind */
	snprintf(path, sizeof(path), "%s/ca.key", dir);
	assert_int_equal(stat(path, &st), -1);
	testlib_rmtree(v->dir);
	v->dir[0] = 0;
}

/* ---- a server that says Welcome then "job done" to every call ---------- */

struct fake {
	grpc_server *srv;
	grpc_completion_queue *cq;
	int port;
	volatile int stop;
	grpc_call *call;
	grpc_call_details det;
	grpc_metadata_array md;
	grpc_byte_buffer *bb;
	int cancelled;
};

static void fake_request(struct fake *f)
{
	grpc_call_details_init(&f->det);
	grpc_metadata_array_init(&f->md);
	assert_int_equal(grpc_server_request_call(f->srv, &f->call, &f->det, &f->md,
						  f->cq, f->cq, (void *)1), GRPC_CALL_OK);
}

/* Welcome, then OK "job done", in one batch. */
static void fake_answer(struct fake *f)
{
	Ddiloco__V1__SyncerMessage m = DDILOCO__V1__SYNCER_MESSAGE__INIT;
	Ddiloco__V1__Welcome w = DDILOCO__V1__WELCOME__INIT;
	static grpc_slice details;
	grpc_slice sl;
	grpc_op ops[4];

	details = grpc_slice_from_static_string("job done");
	w.fragments = P;
	m.kind_case = DDILOCO__V1__SYNCER_MESSAGE__KIND_WELCOME;
	m.welcome = &w;
	sl = grpc_slice_malloc(ddiloco__v1__syncer_message__get_packed_size(&m));
	ddiloco__v1__syncer_message__pack(&m, GRPC_SLICE_START_PTR(sl));
	f->bb = grpc_raw_byte_buffer_create(&sl, 1);
	grpc_slice_unref(sl);
	memset(ops, 0, sizeof(ops));
	ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
	ops[1].op = GRPC_OP_SEND_MESSAGE;
	ops[1].data.send_message.send_message = f->bb;
	ops[2].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
	ops[2].data.send_status_from_server.status = GRPC_STATUS_OK;
	ops[2].data.send_status_from_server.status_details = &details;
	ops[3].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
	ops[3].data.recv_close_on_server.cancelled = &f->cancelled;
	assert_int_equal(grpc_call_start_batch(f->call, ops, 4, (void *)2, NULL),
			 GRPC_CALL_OK);
}

static void *fake_main(void *arg)
{
	struct fake *f = arg;
	int pending = 1, notified = 0;

	fake_request(f);
	while (pending > 0) {
		grpc_event ev = grpc_completion_queue_next(f->cq, tl_in(0.02), NULL);

		if (f->stop && !notified) {
			grpc_server_shutdown_and_notify(f->srv, f->cq, (void *)9);
			grpc_server_cancel_all_calls(f->srv);
			notified = 1;
			pending++;
		}
		if (ev.type != GRPC_OP_COMPLETE)
			continue;
		pending--;
		if (ev.tag == (void *)1) {
			if (ev.success) {
				fake_answer(f);
				pending++;
			} else {
				grpc_call_details_destroy(&f->det);
				grpc_metadata_array_destroy(&f->md);
			}
		} else if (ev.tag == (void *)2) {
			grpc_byte_buffer_destroy(f->bb);
			grpc_call_unref(f->call);
			grpc_call_details_destroy(&f->det);
			grpc_metadata_array_destroy(&f->md);
			if (!notified) {
				fake_request(f);
				pending++;
			}
		}
	}
	return NULL;
}

struct watch {
	volatile sig_atomic_t *stop;
	double until;
	volatile int over;
};

static void *watch_main(void *arg)
{
	struct watch *w = arg;

	while (!w->over && clock_mono() < w->until)
		sleep_seconds(0.01);
	*w->stop = 1;
	return NULL;
}

/*
 * A real sidecar with learner 0's certificate against a server showing
 * srv (a leaf of srv_ca), through a link that holds each chunk `delay`
 * seconds (0: straight); stopped after `patience` seconds unless it is
 * done first. Returns sidecar_run's result; *done: the exchange marked
 * done; *welcomes: the Welcomes it took.
 */
static int sidecar_against(struct env *v, const struct pki_pem *srv,
			   const char *srv_ca, double delay, double patience,
			   int *done, uint64_t *welcomes)
{
	struct slowlink link;
	struct fake f;
	struct pki_pem l0;
	struct tls_files tf;
	struct sidecar_opts o = { 0 };
	struct sidecar_metrics m;
	struct exchange *sx, *lx;
	struct sidecar *sc;
	struct err e;
	volatile sig_atomic_t stop = 0;
	struct watch w = { &stop, 0, 0 };
	grpc_server_credentials *cred;
	grpc_ssl_pem_key_cert_pair pair = { srv->key, srv->cert };
	pthread_t th, wt;
	char target[64], xdir[200];
	int rc;

	memset(&f, 0, sizeof(f));
	leaf(&v->ca, "ddiloco://" JOB "/learner/0", 0, &l0);
	tf = (struct tls_files){ l0.cert, l0.key, v->ca.cert };
	f.cq = grpc_completion_queue_create_for_next(NULL);
	f.srv = grpc_server_create(NULL, NULL);
	grpc_server_register_completion_queue(f.srv, f.cq, NULL);
	cred = grpc_ssl_server_credentials_create_ex(srv_ca, &pair, 1,
		GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY, NULL);
	f.port = grpc_server_add_http2_port(f.srv, "127.0.0.1:0", cred);
	grpc_server_credentials_release(cred);
	assert_true(f.port > 0);
	grpc_server_start(f.srv);

	snprintf(xdir, sizeof(xdir), "%s/x", v->dir);
	testlib_rmtree(xdir);
	assert_int_equal(mkdir(xdir, 0700), 0);
	assert_int_equal(exchange_open(xdir, EXCHANGE_SIDECAR, &v->ft, &sx, &e), 0);
	assert_int_equal(exchange_open(xdir, EXCHANGE_LEARNER, &v->ft, &lx, &e), 0);
	if (delay > 0)
		assert_int_equal(slowlink_start(&link, f.port, delay, 0), 0);
	snprintf(target, sizeof(target), "127.0.0.1:%d",
		 delay > 0 ? link.port : f.port);
	o.target = target;
	o.job = JOB;
	o.tls = &tf;
	o.backoff_min = 0.05;
	o.backoff_max = 0.1;
	sc = sidecar_new(&o, sx, &v->ft, &e);
	assert_non_null(sc);
	assert_int_equal(pthread_create(&th, NULL, fake_main, &f), 0);
	/* patience counts from here: making the keys above is slow under
	 * the sanitizers */
	w.until = clock_mono() + patience;
	assert_int_equal(pthread_create(&wt, NULL, watch_main, &w), 0);
	rc = sidecar_run(sc, &stop, &e);
	w.over = 1;
	pthread_join(wt, NULL);
	sidecar_get_metrics(sc, &m);
	*welcomes = m.welcomes;
	*done = exchange_is_done(lx);
	if (delay > 0)
		slowlink_stop(&link);
	f.stop = 1;
	pthread_join(th, NULL);
	grpc_server_destroy(f.srv);
	grpc_completion_queue_shutdown(f.cq);
	while (grpc_completion_queue_next(f.cq, gpr_inf_future(GPR_CLOCK_REALTIME),
					  NULL).type != GRPC_QUEUE_SHUTDOWN)
		;
	grpc_completion_queue_destroy(f.cq);
	sidecar_free(sc);
	exchange_close(lx);
	exchange_close(sx);
	pki_pem_release(&l0);
	return rc;
}

static void sidecar_trusts_only_the_jobs_syncer(void **state)
{
	struct env *v = *state;
	struct pki_pem good, learner_srv, foreign, ca2;
	uint64_t welcomes;
	int done;
	struct err e;

	env_setup(v, 0);
	leaf(&v->ca, "ddiloco://" JOB "/syncer", 1, &good);
	leaf(&v->ca, "ddiloco://" JOB "/learner/1", 1, &learner_srv);
	assert_int_equal(pki_ca_new(JOB, 0, &ca2, &e), 0);
	leaf(&ca2, "ddiloco://" JOB "/syncer", 1, &foreign);

	/* the job's syncer: welcomed, then done */
	assert_int_equal(sidecar_against(v, &good, v->ca.cert, 0, WAIT, &done,
					 &welcomes), 0);
	assert_int_equal(done, 1);
	assert_int_equal(welcomes, 1);
	/* a learner's certificate of the same CA: nothing taken */
	assert_int_equal(sidecar_against(v, &learner_srv, v->ca.cert, 0, 1.5, &done,
					 &welcomes), 1);
	assert_int_equal(done, 0);
	assert_int_equal(welcomes, 0);
	/* the syncer's name from another CA: the handshake fails */
	assert_int_equal(sidecar_against(v, &foreign, ca2.cert, 0, 1.5, &done,
					 &welcomes), 1);
	assert_int_equal(done, 0);
	assert_int_equal(welcomes, 0);
	pki_pem_release(&good);
	pki_pem_release(&learner_srv);
	pki_pem_release(&foreign);
	pki_pem_release(&ca2);
}

/*
 * A link whose every chunk takes 0.3 s: the TLS handshake alone takes
 * about 1 s, longer than the sidecar's reconnect backoff (0.1-0.5 s).
 * gRPC gives one attempt to connect the longer of that backoff and
 * GRPC_ARG_MIN_RECONNECT_BACKOFF_MS; when that was 100 ms too, every
 * attempt was cut off in its handshake and the sidecar never connected.
 */
static void a_slow_handshake_still_connects(void **state)
{
	struct env *v = *state;
	struct pki_pem good;
	uint64_t welcomes;
	int done;

	env_setup(v, 0);
	leaf(&v->ca, "ddiloco://" JOB "/syncer", 1, &good);
	assert_int_equal(sidecar_against(v, &good, v->ca.cert, 0.3, WAIT, &done,
					 &welcomes), 0);
	assert_int_equal(done, 1);
	assert_int_equal(welcomes, 1);
	pki_pem_release(&good);
}

/* Reads fd until the server closes it; the seconds since t0 that took,
 * or -1 when `until` passed first. */
static double closed_after(int fd, double t0, double until)
{
	char buf[4096];

	while (clock_mono() < until) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };

		if (poll(&pf, 1, 100) > 0 && recv(fd, buf, sizeof(buf), 0) <= 0)
			return clock_mono() - t0;
	}
	return -1;
}

/*
 * The handshake deadline (docs/security.md, Listeners): a TCP connection
 * that sends nothing, and one that sends the first bytes of a TLS
 * ClientHello and no more, are closed by the syncer
 * SYNCER_HANDSHAKE_TIMEOUT seconds after they connect, not before
 * (gRPC's default was 120 s), while learner 0 joins and trains.
 */
static void a_silent_connection_is_closed_at_the_handshake_deadline(void **state)
{
	struct env *v = *state;
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct pki_pem l0;
	struct learner a;
	double t0, took;
	int fd[2];

	env_setup(v, 0);
	syncer_exec(v, 1, "--tls-dir", v->tlsdir);
	leaf(&v->ca, "ddiloco://" JOB "/learner/0", 0, &l0);
	sa.sin_port = htons((uint16_t)v->grpc_port);
	t0 = clock_mono();
	for (int i = 0; i < 2; i++) {
		fd[i] = socket(AF_INET, SOCK_STREAM, 0);
		assert_int_equal(connect(fd[i], (struct sockaddr *)&sa,
					 sizeof(sa)), 0);
	}
	/* a handshake record of 512 bytes, of which 5 come */
	assert_int_equal(send(fd[1], "\x16\x03\x01\x02\x00", 5, 0), 5);
	join(&a, v, &l0, 0);
	train(&a, v, 2);
	for (int i = 0; i < 2; i++) {
		took = closed_after(fd[i], t0, t0 + SYNCER_HANDSHAKE_TIMEOUT + 10);
		if (took < 0)
			fail_msg("connection %d still open %d s after the "
				 "deadline", i, 10);
		if (took < SYNCER_HANDSHAKE_TIMEOUT - 0.5)
			fail_msg("connection %d closed after %.2f s, the "
				 "deadline is %d s", i, took,
				 SYNCER_HANDSHAKE_TIMEOUT);
		close(fd[i]);
	}
	train(&a, v, 1);   /* its stream stayed open */
	tl_close(&a.tl);
	pki_pem_release(&l0);
	syncer_stop(v);
}

/*
 * The call cap (docs/security.md, Listeners): with SYNCER_CALLS_MAX(3)
 * calls open (Beats that say nothing, each on a connection of its own),
 * one more is refused at once with RESOURCE_EXHAUSTED and counted; once
 * they are gone learner 0 joins and trains.
 */
static void calls_past_the_cap_are_refused(void **state)
{
	enum { CAP = SYNCER_CALLS_MAX(3) };
	struct env *v = *state;
	struct tl *t = calloc(CAP + 1, sizeof(*t));
	struct pki_pem l0;
	struct learner a;
	char msg[256], want[96];

	assert_non_null(t);
	env_setup(v, 0);
	syncer_exec(v, 1, "--tls-dir", v->tlsdir);
	leaf(&v->ca, "ddiloco://" JOB "/learner/0", 0, &l0);
	for (int i = 0; i < CAP; i++) {
		tl_open_beat(&t[i], v->grpc_port, v->ca.cert, &l0);
		tl_send_metadata(&t[i]);
	}
	assert_eventually(status_int(v, "calls_open") == CAP, 20);
	tl_open_beat(&t[CAP], v->grpc_port, v->ca.cert, &l0);
	tl_send_metadata(&t[CAP]);
	assert_int_equal(tl_status(&t[CAP], msg, sizeof(msg), NULL),
			 GRPC_STATUS_RESOURCE_EXHAUSTED);
	snprintf(want, sizeof(want), "the syncer has %d calls open, at most %d",
		 CAP, CAP);
	assert_string_equal(msg, want);
	assert_int_equal(status_int(v, "streams_over_cap"), 1);
	for (int i = 0; i <= CAP; i++)
		tl_close(&t[i]);
	free(t);
	assert_eventually(status_int(v, "calls_open") == 0, 20);
	join(&a, v, &l0, 0);
	train(&a, v, 1);
	tl_close(&a.tl);
	pki_pem_release(&l0);
	syncer_stop(v);
}

static int init_all(void **state)
{
	/* the failed handshakes here are on purpose: keep gRPC's own error
	 * lines about them out of the test's output */
	setenv("GRPC_VERBOSITY", "NONE", 0);
	return syncerproc_group_setup(state);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(only_the_jobs_learners_get_in, setup, teardown),
		cmocka_unit_test_setup_teardown(command_lines_refuse_bad_files, setup, teardown),
		cmocka_unit_test_setup_teardown(run_certificate_folders, setup, teardown),
		cmocka_unit_test_setup_teardown(sidecar_trusts_only_the_jobs_syncer, setup, teardown),
		cmocka_unit_test_setup_teardown(a_slow_handshake_still_connects, setup, teardown),
		cmocka_unit_test_setup_teardown(a_silent_connection_is_closed_at_the_handshake_deadline, setup, teardown),
		cmocka_unit_test_setup_teardown(calls_past_the_cap_are_refused, setup, teardown),
	};
	if (getenv("FILTER"))
		cmocka_set_test_filter(getenv("FILTER"));
	return cmocka_run_group_tests(tests, init_all, syncerproc_group_teardown);
}
