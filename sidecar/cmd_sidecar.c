/*
 * `ddiloco sidecar`: the command line around sidecar/ — reads the job,
 * builds the same fragment table as the learner (for spec.model.kind
 * external: reads the learner's from the exchange it made, and answers a
 * seed request from its seed file; docs/syncer.md), attaches the exchange,
 * serves /healthz /readyz /metrics, and runs the client until the syncer
 * says the job is done. gRPC is mutual TLS with the certificate files
 * (common/tls.h), whose identity must be this job's learner I; plaintext
 * only when the job says spec.syncer.insecure (docs/security.md).
 */
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <malloc.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmds.h"
#include "common/cli.h"
#include "common/httpd.h"
#include "common/jobspec.h"
#include "common/log.h"
#include "common/pki.h"
#include "common/tls.h"
#include "common/util.h"
#include "common/wire.h"
#include "sidecar/sidecar.h"
#include "trainer/model.h"

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
	(void)sig;
	stop_flag = 1;
}

static int http_handler(void *ctx, const char *path, struct buf *body,
			const char **content_type)
{
	struct sidecar *s = ctx;
	struct sidecar_metrics m;

	*content_type = "text/plain; charset=utf-8";
	if (!strcmp(path, "/healthz")) {
		double stuck = sidecar_stuck(s, clock_mono());

		if (stuck > SIDECAR_STUCK_SECONDS) {
			buf_printf(body, "stuck: a loop has not turned for %.0f s\n",
				   stuck);
			return 503;
		}
		buf_printf(body, "ok\n");
		return 200;
	}
	if (!strcmp(path, "/readyz")) {
		sidecar_get_metrics(s, &m);
		buf_printf(body, "%s\n", m.connected && m.welcomed ? "ready"
								 : "not connected");
		return m.connected && m.welcomed ? 200 : 503;
	}
	if (!strcmp(path, "/metrics")) {
		*content_type = "text/plain; version=0.0.4";
		sidecar_metrics_text(s, body);
		return 200;
	}
	buf_printf(body, "not found\n");
	return 404;
}

/*
 * The test knob DDILOCO_TEST_INFLATE_TOKENS=LEARNER:FACTOR (docs/sidecar.md):
 * the sidecar of learner LEARNER reports FACTOR times the tokens trained,
 * so a real run can show the syncer refusing a learner that lies. 0 with
 * *factor set (1 when unset or for another learner); -1 when malformed.
 */
static int inflate_knob(int learner, uint64_t *factor)
{
	const char *v = getenv("DDILOCO_TEST_INFLATE_TOKENS");
	unsigned long long id, f;
	int used = 0;

	*factor = 1;
	if (!v || !*v)
		return 0;
	if (sscanf(v, "%llu:%llu%n", &id, &f, &used) != 2 || v[used] || f < 1)
		return -1;
	if (id == (unsigned long long)learner)
		*factor = f;
	return 0;
}

/*
 * The test knob DDILOCO_TEST_POISON_ANSWERS=LEARNER:FROM:COUNT:VALUE[,...]
 * (docs/sidecar.md): the sidecar of learner LEARNER sends its answers
 * FROM to FROM + COUNT − 1 (1: the first answer this process sends) with
 * every value ±VALUE, a finite float, so a real run can show the syncer
 * refusing or undoing a huge update. At most SIDECAR_MAX_POISON ranges
 * for this learner; 0, or -1 when malformed.
 */
static int poison_knob(int learner, struct sidecar_poison *out)
{
	const char *v = getenv("DDILOCO_TEST_POISON_ANSWERS");
	int n = 0;

	memset(out, 0, SIDECAR_MAX_POISON * sizeof(*out));
	if (!v || !*v)
		return 0;
	for (;;) {
		unsigned long long id, from, count;
		double value;
		int used = 0;

		if (sscanf(v, "%llu:%llu:%llu:%lf%n", &id, &from, &count, &value,
			   &used) != 4 || from < 1 || count < 1 ||
		    !isfinite(value) || fabs(value) > FLT_MAX ||
		    (v[used] && v[used] != ','))
			return -1;
		/* the bound is on this learner's ranges, not the whole list */
		if (id == (unsigned long long)learner && n == SIDECAR_MAX_POISON)
			return -1;
		if (id == (unsigned long long)learner)
			out[n++] = (struct sidecar_poison){
				.from = from, .count = count,
				.value = (float)fabs(value),
			};
		if (!v[used])
			return 0;
		v += used + 1;
	}
}

/*
 * spec.model.kind external: the table is the learner's, read from the
 * exchange it made (docs/syncer.md, Model-agnostic jobs); waits for it
 * until a signal.
 */
static int external_table(const char *dir, struct frag_table *ft,
			  struct err *e)
{
	uint64_t fp, *sizes;
	double said = clock_mono();
	int P, rc;

	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	log_info("spec.model.kind external: waiting for the learner's "
		 "exchange in '%s'", dir);
	while ((rc = exchange_peek(dir, &P, &fp, &sizes, e)) == 1) {
		if (stop_flag)
			return err_set(e, "stopped before the learner made "
				       "its exchange");
		if (clock_mono() - said > 30) {
			log_info("still no exchange from the learner in '%s'",
				 dir);
			said = clock_mono();
		}
		usleep(100 * 1000);
	}
	if (rc)
		return rc < 0 ? rc : -1;   /* a mismatch says so */
	rc = frag_table_from_sizes(ft, sizes, P, fp, e);
	free(sizes);
	if (!rc)
		log_info("the learner's table: %d fragments, fingerprint "
			 "%016llx", P, (unsigned long long)fp);
	return rc;
}

/*
 * The test knobs, parsed into o and said aloud when they are set; 2 (the
 * exit code) when one is malformed.
 */
static int test_knobs(int learner, struct sidecar_opts *o)
{
	struct err e;

	if (inflate_knob(learner, &o->inflate_tokens)) {
		log_error("DDILOCO_TEST_INFLATE_TOKENS: '%s' is not LEARNER:FACTOR "
			  "(FACTOR a whole number >= 1)",
			  getenv("DDILOCO_TEST_INFLATE_TOKENS"));
		return 2;
	}
	if (poison_knob(learner, o->poison)) {
		log_error("DDILOCO_TEST_POISON_ANSWERS: '%s' is not "
			  "LEARNER:FROM:COUNT:VALUE[,...] (FROM and COUNT >= 1, "
			  "VALUE a finite float, at most %d ranges a learner)",
			  getenv("DDILOCO_TEST_POISON_ANSWERS"), SIDECAR_MAX_POISON);
		return 2;
	}
	if (wire_test_cap(getenv("DDILOCO_TEST_MAX_MESSAGE"), &o->max_message,
			  &e)) {
		log_error("%s", e.msg);
		return 2;
	}
	if (o->max_message)
		log_warn("test knob DDILOCO_TEST_MAX_MESSAGE: messages of at most "
			 "%zu bytes", o->max_message);
	if (o->poison[0].count)
		log_warn("test knob DDILOCO_TEST_POISON_ANSWERS: this sidecar "
			 "sends poisoned answers");
	if (o->inflate_tokens > 1)
		log_warn("test knob DDILOCO_TEST_INFLATE_TOKENS: this sidecar "
			 "reports %llu times the tokens its learner trained",
			 (unsigned long long)o->inflate_tokens);
	return 0;
}

/* 1 (said) when --learner I is not one of the job's learners, or for an
 * evaluator not one of the 4 an external model may have. */
static int check_index(const struct job_spec *js, int learner, int evaluator)
{
	if (evaluator && (js->model.kind != MODEL_EXTERNAL ||
			  learner >= SIDECAR_MAX_EVALUATORS)) {
		log_error("evaluator %d: %s", learner, js->model.kind != MODEL_EXTERNAL
			  ? "evaluators are for spec.model.kind external (the "
			    "syncer evaluates the reference GPT itself)"
			  : "at most 4 evaluators (0 to 3)");
		return 1;
	}
	if (!evaluator && learner >= js->learners.replicas) {
		log_error("learner %d: the job has %d learners (0 to %d)", learner,
			  js->learners.replicas, js->learners.replicas - 1);
		return 1;
	}
	return 0;
}

/* The fragment table: the learner's for an external model (waits for it
 * until a signal), else the reference GPT's. */
static int job_table(const struct job_spec *js, const char *dir,
		     struct frag_table *ft, struct err *e)
{
	struct model_config mc;

	if (js->model.kind == MODEL_EXTERNAL)
		return external_table(dir, ft, e);
	if (model_config_from_job(&js->model, &mc, e) ||
	    model_frag_table(&mc, js->syncer.fragments, ft, e))
		return -1;
	return 0;
}

/*
 * Reuse big buffers instead of fresh mmaps (docs/design.md §7), and one
 * arena: gRPC's threads allocate read buffers in arenas of their own,
 * which glibc trims whatever M_TRIM_THRESHOLD says, so every answer
 * faulted its pages in again (docs/sidecar.md, levers).
 */
static void tune_malloc(void)
{
	mallopt(M_ARENA_MAX, 1);
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 1 << 30);
	mallopt(M_TOP_PAD, 64 << 20);
}

/*
 * A learner of another release (docs/abi.md, Versions): said in the log
 * and as the container's termination message, for the operator, which
 * stops recreating the pod; CLI_EXIT_MISMATCH.
 */
static int versions_refused(const char *termlog, const struct err *e)
{
	log_error("%s", e->msg);
	if (cli_termination_message(termlog, e->msg) && termlog &&
	    strcmp(termlog, CLI_TERMINATION_LOG))
		log_warn("cannot write the termination message to '%s': %s",
			 termlog, strerror(errno));
	return CLI_EXIT_MISMATCH;
}

/*
 * Runs the sidecar, serving HTTP on host:port when host is not NULL, until
 * the job is done (0) or a signal (1); -1 on an error,
 * EXCHANGE_VERSION_MISMATCH when the learner's versions do not match.
 */
static int serve(const struct sidecar_opts *o, struct exchange *x,
		 const struct frag_table *ft, const char *host, int port,
		 struct err *e)
{
	struct sidecar *s;
	struct httpd *h = NULL;
	int rc = -1;

	s = sidecar_new(o, x, ft, e);
	if (!s)
		return -1;
	if (host) {
		h = httpd_start(host, port, http_handler, s, e);
		if (!h)
			goto out;
		log_info("http on %s:%d", host, httpd_port(h));
	}
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	signal(SIGPIPE, SIG_IGN);
	rc = sidecar_run(s, &stop_flag, e);
	if (rc == 0)
		log_info("job done: exchange marked done");
	else if (rc == 1)
		log_info("stopped");
out:
	httpd_stop(h);
	sidecar_free(s);
	return rc;
}

/* As many syncer addresses as the job has shards: 0, else 1 with the
 * message logged. */
static int check_shards(const struct job_spec *js, const char *target)
{
	int n = 1;

	for (const char *t = target; *t; t++)
		n += *t == ',';
	if (n == js->syncer.shards)
		return 0;
	log_error("--syncer has %d address%s, job '%s' has %d syncer "
		  "shard%s (spec.syncer.shards): one address each", n,
		  n == 1 ? "" : "es", js->name, js->syncer.shards,
		  js->syncer.shards == 1 ? "" : "s");
	return 1;
}

/* Long because the option table is declared here, beside the variables it
 * fills; after it, the setup runs in order and unwinds at one label. */
int cmd_sidecar(int argc, char **argv)
{
	const char *job = NULL, *dir = NULL, *target = NULL, *http = NULL;
	const char *termlog = CLI_TERMINATION_LOG;
	struct tls_paths tp = { 0 };
	int learner = -1, rc = 1, ft_ok = 0, n, evaluator = 0;
	const struct cli_option opts[] = {
		CLI_TEXT("usage: ddiloco sidecar --job JOB.yaml --learner I --exchange DIR\n"
			 "                       --syncer HOST:PORT [--http HOST:PORT] [--tls-dir DIR]\n"
			 "                       [--evaluator]\n\n"
			 "Moves fragments between learner I (through the exchange folder DIR,\n"
			 "shared with `ddiloco learner`) and the syncer (gRPC; HOST is a DNS\n"
			 "name or an address). Reconnects with backoff when the syncer goes\n"
			 "away; exits 0 when the syncer says the job is done. With --evaluator\n"
			 "the process on the other side is evaluator I (0 to 3) of an external\n"
			 "model: it gets the global model and its losses go to the syncer.\n"),
		CLI_STRING("job", 0, &job, "JOB.yaml", "the DecoupledTrainingJob"),
		CLI_INT("learner", 0, &learner, "I", 0, INT_MAX,
			"this learner's index in the job"),
		CLI_STRING("exchange", 0, &dir, "DIR",
			   "the exchange folder shared with the learner"),
		CLI_STRING("syncer", 0, &target, "HOST:PORT[,...]",
			   "the syncer's gRPC address; a job of spec.syncer.shards\n"
			   "S: each shard's, shard 0 first"),
		CLI_STRING("http", 0, &http, "HOST:PORT",
			   "serve /healthz, /readyz and /metrics"),
		CLI_FLAG("evaluator", 0, &evaluator,
			 "the other side is an evaluator (spec.model.kind external)"),
		CLI_STRING("termination-log", 0, &termlog, "PATH",
			   "where a version mismatch with the learner is left\n"
			   "before exit code 78 (default /dev/termination-log,\n"
			   "when it exists)"),
		TLS_CLI_OPTIONS(tp, "learner's"),
		LOG_CLI_OPTION(),
		CLI_END(),
	};
	struct job_spec js;
	struct frag_table ft;
	struct exchange *x = NULL;
	struct sidecar_opts o = { 0 };
	struct tls_files tls = { 0 };
	struct pki_id id = { .role = PKI_ROLE_LEARNER };
	int use_tls;
	struct err e;
	char comp[32], host[256];
	int port = 0;

	n = cli_parse(opts, argc, argv, &e);
	if (n < 0)
		return cli_exit_code(opts, "ddiloco sidecar", n, &e);
	if (!job || learner < 0 || !dir || !target || n > 0) {
		fprintf(stderr, "ddiloco sidecar: --job, --learner, --exchange and "
			"--syncer are required\n");
		cli_usage(opts, stderr);
		return 2;
	}
	snprintf(comp, sizeof(comp), evaluator ? "sidecar-evaluator-%d"
						: "sidecar-%d", learner);
	log_init(comp);
	if (http && cli_split_hostport(http, host, sizeof(host), &port)) {
		fprintf(stderr, "ddiloco sidecar: --http: '%s' is not HOST:PORT\n",
			http);
		return 2;
	}
	if (test_knobs(learner, &o))
		return 2;
	if (jobspec_load(job, &js, &e)) {
		log_error("%s", e.msg);
		return 1;
	}
	if (check_index(&js, learner, evaluator) ||
	    check_shards(&js, target))
		return 1;
	snprintf(id.job, sizeof(id.job), "%s", js.name);
	id.learner = (unsigned)learner;
	if (evaluator)
		id.role = PKI_ROLE_EVALUATOR;
	if ((use_tls = tls_files_for_job(&tp, js.syncer.insecure, &tls, &e)) < 0 ||
	    (use_tls && pki_cert_is(tls.cert, &id, &e))) {
		log_error("%s", e.msg);
		tls_files_release(&tls);
		return 2;
	}
	if ((n = job_table(&js, dir, &ft, &e))) {
		tls_files_release(&tls);
		if (n == EXCHANGE_VERSION_MISMATCH)
			return versions_refused(termlog, &e);
		/* only an external job's wait for its table sees a signal */
		if (stop_flag)
			log_info("stopped");
		else
			log_error("%s", e.msg);
		return stop_flag ? 0 : 1;
	}
	ft_ok = 1;
	tune_malloc();
	if ((n = exchange_open(dir, EXCHANGE_SIDECAR, &ft, &x, &e))) {
		if (n == EXCHANGE_VERSION_MISMATCH) {
			rc = versions_refused(termlog, &e);
			e.msg[0] = '\0';
		}
		goto out;
	}
	/* a large model's region gives its pages back, applied updates'
	 * too: a restarted learner gets Θ from the Welcome
	 * (docs/exchange.md, Pages given back) */
	if (exchange_gives_back(x))
		log_info("a large model: the exchange gives back the pages of "
			 "slots no one needs, applied updates' too");
	o.target = target;
	o.learner_id = (unsigned)learner;
	o.job = js.name;
	o.no_feedback = !js.syncer.error_feedback;
	/* an evaluator is never asked for the job's initial weights */
	o.seed_dir = js.model.kind == MODEL_EXTERNAL && !evaluator ? dir : NULL;
	o.evaluator = evaluator;
	o.tls = use_tls ? &tls : NULL;
	n = serve(&o, x, &ft, http ? host : NULL, port, &e);
	rc = n == EXCHANGE_VERSION_MISMATCH ? versions_refused(termlog, &e) :
	     n < 0 ? 1 : 0;
	if (n == EXCHANGE_VERSION_MISMATCH)
		e.msg[0] = '\0';
out:
	if (rc && e.msg[0])
		log_error("%s", e.msg);
	exchange_close(x);
	if (ft_ok)
		frag_table_release(&ft);
	tls_files_release(&tls);
	return rc;
}
