/*
 * `ddiloco syncer --job JOB.yaml [--listen HOST:PORT] [--http HOST:PORT]
 *                 [--checkpoint-dir DIR] [--tls-dir DIR] [--tls-cert FILE]
 *                 [--tls-key FILE] [--tls-ca FILE]`
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
#include "common/tls.h"
#include "syncer/syncer.h"
#include "trainer/model.h"
#include "trainer/trainer.h"

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
	(void)sig;
	stop_flag = 1;
}

static int eval_cb(void *ctx, const float *params, size_t max_tokens,
		   double *loss, struct err *e)
{
	return evaluator_loss(ctx, params, max_tokens, loss, e);
}

/* Long because the option table is declared here, beside the variables it
 * fills; after it, the setup runs in order and unwinds at one label. */
int cmd_syncer(int argc, char **argv)
{
	const char *job = NULL, *listen = NULL, *http = NULL;
	const char *ckpt_dir = "checkpoints";
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
		TLS_CLI_OPTIONS(tp, "syncer's"),
		CLI_END(),
	};
	char listen_buf[300], http_host[256];
	int http_port, n, rc = 1;
	struct job_spec js;
	struct model_config cfg;
	struct frag_table ft = { 0 };
	struct evaluator *ev = NULL;
	struct syncer_params prm;
	struct tls_files tls = { 0 };
	struct pki_id id = { 0 };
	int use_tls;
	struct sigaction sa;
	float *params = NULL;
	size_t nparams;
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
	if ((use_tls = tls_files_for_job(&tp, js.syncer.insecure, &tls, &e)) < 0) {
		fprintf(stderr, "ddiloco syncer: %s\n", e.msg);
		return 2;
	}
	snprintf(id.job, sizeof(id.job), "%s", js.name);
	id.role = PKI_ROLE_SYNCER;
	if (use_tls && pki_cert_is(tls.cert, &id, &e)) {
		fprintf(stderr, "ddiloco syncer: %s\n", e.msg);
		tls_files_release(&tls);
		return 2;
	}
	if (!listen) {
		snprintf(listen_buf, sizeof(listen_buf), "0.0.0.0:%d", js.syncer.port);
		listen = listen_buf;
	} else {
		int lp;

		if (cli_split_hostport(listen, http_host, sizeof(http_host), &lp)) {
			fprintf(stderr, "ddiloco syncer: --listen '%s': expected HOST:PORT\n",
				listen);
			rc = 2;
			goto out;
		}
	}
	snprintf(http_host, sizeof(http_host), "0.0.0.0");
	http_port = js.syncer.http_port;
	if (http && cli_split_hostport(http, http_host, sizeof(http_host), &http_port)) {
		fprintf(stderr, "ddiloco syncer: --http '%s': expected HOST:PORT\n", http);
		rc = 2;
		goto out;
	}
	if (!http_host[0])
		snprintf(http_host, sizeof(http_host), "0.0.0.0");
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

	memset(&prm, 0, sizeof(prm));
	prm.js = &js;
	prm.listen = listen;
	prm.http_addr = http_host;
	prm.http_port = http_port;
	prm.ckpt_dir = ckpt_dir;
	prm.drain_seconds = 2.0;
	prm.tls = use_tls ? &tls : NULL;
	/* external: the table, Θ and (not yet) the evaluation are the
	 * learners' (docs/syncer.md, Model-agnostic jobs) */
	if (js.model.kind != MODEL_EXTERNAL) {
		if (model_config_from_job(&js.model, &cfg, &e) ||
		    model_frag_table(&cfg, js.syncer.fragments, &ft, &e)) {
			fprintf(stderr, "ddiloco syncer: %s\n", e.msg);
			tls_files_release(&tls);
			return 2;
		}
		nparams = model_num_params(&cfg);
		params = malloc(nparams * sizeof(float));
		if (!params) {
			log_error("out of memory for %zu parameters", nparams);
			goto out;
		}
		model_init_params(&cfg, params, js.model.seed);
		if (js.syncer.eval_every > 0 && js.syncer.eval_tokens > 0 &&
		    !(ev = evaluator_new(&js, &e))) {
			log_error("cannot evaluate: %s", e.msg);
			goto out;
		}
		prm.ft = &ft;
		prm.init_params = params;
		prm.nparams = nparams;
		prm.eval = ev ? eval_cb : NULL;
		prm.eval_ctx = ev;
		log_info("job '%s': %zu parameters in %d fragments (imbalance "
			 "%.3f), %d learners, quorum %d, overlap %d", js.name,
			 nparams, ft.nfrags, frag_table_imbalance(&ft),
			 js.learners.replicas, js.syncer.min_quorum,
			 js.syncer.overlap);
	}
	if (syncer_run(&prm, &stop_flag, &e)) {
		log_error("%s", e.msg);
		goto out;
	}
	rc = 0;
out:
	if (ev)
		evaluator_free(ev);
	free(params);
	frag_table_release(&ft);
	tls_files_release(&tls);
	return rc;
}
