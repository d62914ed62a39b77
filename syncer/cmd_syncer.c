/*
 * `ddiloco syncer --job JOB.yaml [--listen HOST:PORT] [--http HOST:PORT]
 *                 [--checkpoint-dir DIR] [--tls-dir DIR] [--tls-cert FILE]
 *                 [--tls-key FILE] [--tls-ca FILE] [--shard I|auto]`
 *
 * Reads the job, builds the model's fragment table and its seeded initial
 * parameters (the same as `ddiloco train` builds), an evaluator on the
 * validation split (for spec.model.kind external none of these: the
 * model is the first learner's, docs/syncer.md), and runs the syncer
 * until the budget is reached (exit 0) or SIGTERM/SIGINT (checkpoint, exit 0). Exit 1 on a runtime
 * error, 2 on bad usage, a bad job file or bad certificate files.
 *
 * gRPC is mutual TLS with the certificate files (common/tls.h), whose
 * identity must be this job's syncer; plaintext only when the job says
 * spec.syncer.insecure (docs/security.md).
 */
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "common/cli.h"
#include "common/jobspec.h"
#include "common/log.h"
#include "common/pki.h"
#include "common/util.h"
#include "common/shard.h"
#include "common/tls.h"
#include "common/wire.h"
#include "syncer/syncer.h"
#include "trainer/model.h"
#include "trainer/trainer.h"

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
	(void)sig;
	stop_flag = 1;
}

/* The test knob DDILOCO_TEST_EVAL_SECONDS=S: each evaluation takes S
 * seconds more, as a large evalTokens does (tests/integration/test_run.sh,
 * the last evaluation waited for). */
static int eval_cb(void *ctx, const float *params, size_t max_tokens,
		   double *loss, struct err *e)
{
	const char *slow = getenv("DDILOCO_TEST_EVAL_SECONDS");

	if (slow && atof(slow) > 0)
		sleep_seconds(atof(slow));
	return evaluator_loss(ctx, params, max_tokens, loss, e);
}

/*
 * The gRPC and HTTP addresses: --listen or 0.0.0.0:spec.syncer.port
 * (into lbuf), --http or 0.0.0.0:spec.syncer.httpPort. 2 (the exit
 * code) on a malformed one, with the message printed.
 */
static int addresses(const struct job_spec *js, const char **listen,
		     char *lbuf, size_t lsize, const char *http, char *host,
		     size_t hsize, int *port)
{
	int lp;

	if (!*listen) {
		snprintf(lbuf, lsize, "0.0.0.0:%d", js->syncer.port);
		*listen = lbuf;
	} else if (cli_split_hostport(*listen, host, hsize, &lp)) {
		fprintf(stderr, "ddiloco syncer: --listen '%s': expected "
			"HOST:PORT\n", *listen);
		return 2;
	}
	snprintf(host, hsize, "0.0.0.0");
	*port = js->syncer.http_port;
	if (http && cli_split_hostport(http, host, hsize, port)) {
		fprintf(stderr, "ddiloco syncer: --http '%s': expected "
			"HOST:PORT\n", http);
		return 2;
	}
	if (!host[0])
		snprintf(host, hsize, "0.0.0.0");
	return 0;
}

/* Memory and signals as a long-running syncer needs them. */
static void process_setup(void)
{
	struct sigaction sa;

	/* large fragments: keep freed buffers instead of paying page faults
	 * on every message (docs/design.md §7) */
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 1 << 30);
	mallopt(M_TOP_PAD, 64 << 20);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	/* past a file size limit (RLIMIT_FSIZE) a write fails with EFBIG,
	 * a checkpoint that cannot be written like on a full disk, instead
	 * of the signal ending the process (docs/syncer.md, Checkpoints) */
	signal(SIGXFSZ, SIG_IGN);
}

/* What the syncer of a reference GPT holds before it starts. */
struct reference {
	struct model_config cfg;
	struct frag_table ft;
	float *params;
	struct evaluator *ev;
};

static void reference_release(struct reference *r)
{
	if (r->ev)
		evaluator_free(r->ev);
	free(r->params);
	frag_table_release(&r->ft);
}

/* 1 (said) when this shard's fragments of ft hold more parameters than
 * spec.syncer.maxParameters (docs/syncer.md, Memory budget). */
static int over_budget(const struct job_spec *js, const struct frag_table *ft,
		       int shard)
{
	uint64_t mine = 0;

	for (int p = 0; p < ft->nfrags; p++)
		if (shard_owner(p, js->syncer.shards) == shard)
			mine += ft->frags[p].numel;
	if (mine <= js->syncer.max_parameters)
		return 0;
	fprintf(stderr, "ddiloco syncer: the model has %llu parameters for this "
		"syncer%s: more than spec.syncer.maxParameters %llu\n",
		(unsigned long long)mine, js->syncer.shards > 1 ? " shard" : "",
		(unsigned long long)js->syncer.max_parameters);
	return 1;
}

static int by_lo(const void *a, const void *b)
{
	size_t x = ((const size_t *)a)[0], y = ((const size_t *)b)[0];

	return (x > y) - (x < y);
}

/*
 * The initial model into r->params (all of the model's size), at this
 * shard's pieces only (every piece for a job of one shard), so the rest
 * of the array is never made resident (docs/syncer.md, Shards).
 */
static int seed_params(const struct job_spec *js, struct reference *r,
		       int shard)
{
	const struct frag_table *ft = &r->ft;
	size_t (*rg)[2];
	int n = 0;

	if (!(rg = calloc((size_t)ft->ntensors, sizeof(*rg))))
		return -1;
	for (int k = 0; k < ft->ntensors; k++)
		if (shard_owner(ft->owner[k], js->syncer.shards) == shard) {
			rg[n][0] = ft->tensors[k].offset;
			rg[n][1] = ft->tensors[k].offset + ft->tensors[k].numel;
			n++;
		}
	qsort(rg, (size_t)n, sizeof(*rg), by_lo);
	model_init_params_part(&r->cfg, r->params, js->model.seed,
			       (const size_t (*)[2])rg, n);
	free(rg);
	return 0;
}

/*
 * The reference GPT's table, seeded parameters and evaluator into prm
 * (an external model has none of them: the learners' are adopted,
 * docs/syncer.md, Model-agnostic jobs). 2 for a model the job cannot
 * have, 1 for a runtime failure, each with its message printed.
 */
static int reference_model(const struct job_spec *js, struct reference *r,
			   struct syncer_params *prm)
{
	size_t nparams;
	struct err e;

	if (model_config_from_job(&js->model, &r->cfg, &e) ||
	    model_frag_table(&r->cfg, js->syncer.fragments, &r->ft, &e)) {
		fprintf(stderr, "ddiloco syncer: %s\n", e.msg);
		return 2;
	}
	nparams = model_num_params(&r->cfg);
	if (over_budget(js, &r->ft, prm->shard))
		return 2;
	if (!(r->params = malloc(nparams * sizeof(float)))) {
		log_error("out of memory for %zu parameters", nparams);
		return 1;
	}
	if (seed_params(js, r, prm->shard)) {
		log_error("out of memory for the initial model");
		return 1;
	}
	/* a shard holds part of Θ: the job's evaluations are an
	 * evaluator's, never a shard's (docs/syncer.md, Shards) */
	if (js->syncer.shards == 1 && js->syncer.eval_every > 0 &&
	    js->syncer.eval_tokens > 0 && !(r->ev = evaluator_new(js, &e))) {
		log_error("cannot evaluate: %s", e.msg);
		return 1;
	}
	prm->ft = &r->ft;
	prm->init_params = r->params;   /* syncer_run frees them */
	prm->init_owned = 1;
	r->params = NULL;
	prm->nparams = nparams;
	prm->eval = r->ev ? eval_cb : NULL;
	prm->eval_ctx = r->ev;
	log_info("job '%s': %zu parameters in %d fragments (imbalance %.3f, "
		 "tensors cut at rows: %d), %d learners, quorum %d, overlap %d",
		 js->name, nparams, r->ft.nfrags, frag_table_imbalance(&r->ft),
		 r->ft.ncut,
		 js->learners.replicas, js->syncer.min_quorum,
		 js->syncer.overlap);
	return 0;
}

/* The job's certificate files, whose identity must be its syncer's:
 * 1 with TLS, 0 plaintext (spec.syncer.insecure), -1 with the message
 * printed. */
static int syncer_tls(const struct tls_paths *tp, const struct job_spec *js,
		      struct tls_files *tls)
{
	struct pki_id id = { .role = PKI_ROLE_SYNCER };
	struct err e;
	int use_tls = tls_files_for_job(tp, js->syncer.insecure, tls, &e);

	snprintf(id.job, sizeof(id.job), "%s", js->name);
	if (use_tls > 0 && pki_cert_is(tls->cert, &id, &e)) {
		tls_files_release(tls);
		use_tls = -1;
	}
	if (use_tls < 0)
		fprintf(stderr, "ddiloco syncer: %s\n", e.msg);
	return use_tls;
}

/*
 * --shard: a number, or "auto", the ordinal a StatefulSet's pod name
 * ends with (<job>-syncer-<i>, in $HOSTNAME). 2 (the exit code) when it
 * is neither or not a shard of the job, with the message printed.
 */
static int shard_arg(const char *arg, const struct job_spec *js, int *shard)
{
	const char *v = arg, *h = getenv("HOSTNAME"), *dash;
	char *end;
	long n;

	*shard = 0;
	if (!arg)
		return 0;
	if (!strcmp(arg, "auto")) {
		if (!h || !(dash = strrchr(h, '-'))) {
			fprintf(stderr, "ddiloco syncer: --shard auto: HOSTNAME "
				"'%s' does not end with -<ordinal>\n",
				h ? h : "");
			return 2;
		}
		v = dash + 1;
	}
	n = strtol(v, &end, 10);
	if (!*v || *end || n < 0 || n >= js->syncer.shards) {
		fprintf(stderr, "ddiloco syncer: --shard '%s': job '%s' has "
			"shards 0 to %d (spec.syncer.shards)\n", v, js->name,
			js->syncer.shards - 1);
		return 2;
	}
	*shard = (int)n;
	return 0;
}

int cmd_syncer(int argc, char **argv)
{
	const char *job = NULL, *listen = NULL, *http = NULL;
	const char *ckpt_dir = "checkpoints", *shard_s = NULL;
	struct tls_paths tp = { 0 };
	const struct cli_option opts[] = {
		CLI_TEXT("usage: ddiloco syncer --job JOB.yaml [--listen HOST:PORT] [--http HOST:PORT]\n"
			 "                      [--checkpoint-dir DIR] [--tls-dir DIR]\n"),
		CLI_STRING("job", 0, &job, "FILE",
			   "the DecoupledTrainingJob (YAML or JSON)"),
		CLI_STRING("listen", 0, &listen, "HOST:PORT",
			   "gRPC address (default 0.0.0.0:spec.syncer.port)"),
		CLI_STRING("http", 0, &http, "HOST:PORT",
			   "HTTP address for /healthz /readyz /metrics /status\n"
			   "(default 0.0.0.0:spec.syncer.httpPort)"),
		CLI_STRING("checkpoint-dir", 0, &ckpt_dir, "DIR",
			   "where checkpoints are written and resumed from\n"
			   "(default ./checkpoints)"),
		CLI_STRING("shard", 0, &shard_s, "I|auto",
			   "the shard of spec.syncer.shards this syncer is\n"
			   "(auto: the ordinal $HOSTNAME ends with; default 0)"),
		TLS_CLI_OPTIONS(tp, "syncer's"),
		LOG_CLI_OPTION(),
		CLI_END(),
	};
	char listen_buf[300], http_host[256];
	struct reference ref = { 0 };
	struct tls_files tls = { 0 };
	struct syncer_params prm;
	struct job_spec js;
	int http_port, n, use_tls, rc, shard;
	struct err e;

	log_init("syncer");
	n = cli_parse(opts, argc, argv, &e);
	if (n < 0)
		return cli_exit_code(opts, "ddiloco syncer", n, &e);
	if (!job || n > 0) {
		cli_usage(opts, stderr);
		return 2;
	}
	if (jobspec_load(job, &js, &e)) {
		fprintf(stderr, "ddiloco syncer: %s\n", e.msg);
		return 2;
	}
	if (shard_arg(shard_s, &js, &shard) ||
	    (use_tls = syncer_tls(&tp, &js, &tls)) < 0)
		return 2;
	if ((rc = addresses(&js, &listen, listen_buf, sizeof(listen_buf), http,
			    http_host, sizeof(http_host), &http_port)))
		goto out;
	process_setup();
	prm = (struct syncer_params){
		.js = &js, .job_path = job, .listen = listen, .http_addr = http_host,
		.http_port = http_port, .ckpt_dir = ckpt_dir,
		.drain_seconds = 2.0, .tls = use_tls ? &tls : NULL,
		.shard = shard, .nshards = js.syncer.shards,
	};
	if (wire_test_cap(getenv("DDILOCO_TEST_MAX_MESSAGE"), &prm.max_message,
			  &e)) {
		fprintf(stderr, "ddiloco syncer: %s\n", e.msg);
		rc = 2;
		goto out;
	}
	if (prm.max_message)
		log_warn("test knob DDILOCO_TEST_MAX_MESSAGE: messages of at most "
			 "%zu bytes", prm.max_message);
	if (js.syncer.shards > 1)
		log_info("shard %d of %d: fragments p with p mod %d = %d",
			 shard, js.syncer.shards, js.syncer.shards, shard);
	if (js.model.kind != MODEL_EXTERNAL &&
	    (rc = reference_model(&js, &ref, &prm)))
		goto out;
	rc = 0;
	if (syncer_run(&prm, &stop_flag, &e)) {
		log_error("%s", e.msg);
		rc = 1;
	}
out:
	reference_release(&ref);
	tls_files_release(&tls);
	return rc;
}
