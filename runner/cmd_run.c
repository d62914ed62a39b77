/*
 * `ddiloco run JOB.yaml`: the job on this machine (runner/run.c), then
 * optionally its no-chaos twin and its data-parallel baseline, then the
 * report; --baseline-only trains the baseline's sweep alone. Exit 0 only
 * when the job (and every comparison asked for) ran to its end; 130/143
 * after Ctrl-C/SIGTERM, with everything stopped.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cmds.h"
#include "common/cli.h"
#include "common/log.h"
#include "common/util.h"
#include "runner/proc.h"
#include "runner/run.h"

/* The signal that asked to stop (SIGINT, SIGTERM); 0 while none did. */
static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
}

static int default_dir(const struct job_spec *js, char *out, size_t n)
{
	char stamp[32];
	time_t t = time(NULL);
	struct tm tm;
	struct stat st;

	gmtime_r(&t, &tm);
	strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
	snprintf(out, n, "runs/%s-%s", js->name, stamp);
	for (int i = 2; !stat(out, &st) && i < 100; i++)
		snprintf(out, n, "runs/%s-%s-%d", js->name, stamp, i);
	return 0;
}

static int run_twin(const struct job_spec *js, const struct run_opts *o,
		    const char *dir, struct run_record *r, struct err *e)
{
	struct run_record tr;
	struct run_opts to = *o;
	struct job_spec tj = *js;
	char tdir[sizeof(r->twin.log)];
	int rc;

	if (snprintf(tdir, sizeof(tdir), "%s/twin", dir) >= (int)sizeof(tdir))
		return err_set(e, "run: twin folder path too long: '%s/twin'", dir);
	tj.chaos.enabled = 0;
	to.no_chaos = 1;
	printf("twin: the same job without chaos, in %s\n", tdir);
	fflush(stdout);
	rc = run_job(&tj, &to, tdir, &tr, &stop_signal, e);
	{
		struct err we;
		if (run_report_write(&tr, &we))
			fprintf(stderr, "ddiloco run: twin: %s\n", we.msg);
	}
	r->twin.ran = 1;
	r->twin.ok = rc == 0;
	r->twin.loss = tr.final.eval_loss;
	r->twin.tokens = tr.final.tokens;
	r->twin.seconds = tr.seconds;
	snprintf(r->twin.log, sizeof(r->twin.log), "%s", tdir);
	r->twin.evals = tr.final.evals;
	r->twin.nevals = tr.final.nevals;
	tr.final.evals = NULL;
	tr.final.nevals = 0;
	run_record_release(&tr);
	return rc;
}

/* Long because the option table is declared here, beside the variables it
 * fills; after it, the steps of the command run in order. */
int cmd_run(int argc, char **argv)
{
	struct run_opts o = { 0 };
	const struct cli_option opts[] = {
		CLI_TEXT("usage: ddiloco run JOB.yaml [options]\n\n"
			 "Runs a DecoupledTrainingJob on this machine: the syncer, then M learner +\n"
			 "sidecar pairs as processes, kills and restarts them as spec.chaos says,\n"
			 "shows progress, and writes report.json and report.html in the run folder.\n"),
		CLI_STRING("run-dir", 0, &o.run_dir, "DIR",
			   "run folder (default runs/<name>-<UTC time>)"),
		CLI_FLAG("baseline", 0, &o.baseline,
			 "also run `ddiloco train` on the same tokens with an M times\n"
			 "larger batch (data parallel as one learner), its learning rate\n"
			 "tuned by a sweep (runner/baseline.c), and compare losses"),
		CLI_STRING("baseline-lr", 0, &o.baseline_lrs, "LR[,LR...]",
			   "the baseline's learning rates to try (implies --baseline;\n"
			   "one value: no sweep). Default: the job's lr times 0.5, 1, 2"),
		CLI_INT("baseline-widen", 0, &o.baseline_widen, "N", 0, RUN_SWEEP_MAX,
			"when the sweep's best rate is at its edge, try up to N rates\n"
			"past it, each by the edge's step (default 0)"),
		CLI_FLAG("baseline-only", 0, &o.baseline_only,
			 "train the baseline's sweep alone, not the job (implies\n"
			 "--baseline; the job must set spec.budget.tokens)"),
		CLI_FLAG("baseline-fresh", 0, &o.baseline_fresh,
			 "train the baseline's runs even when the cache has them"),
		CLI_FLAG("twin", 0, &o.twin,
			 "also run the same job without chaos and compare losses"),
		CLI_FLAG("no-chaos", 0, &o.no_chaos, "ignore spec.chaos"),
		CLI_DOUBLE("timeout", 0, &o.timeout, "S", 0, INFINITY,
			   "give up after S seconds (exit 1)", .flags = CLI_ABOVE_MIN),
		LOG_CLI_OPTION(),
		CLI_TEXT("\n"
			 "Exit status: 0 when the job reached its budget (and every comparison asked\n"
			 "for ran), 1 on failure, 130 / 143 after Ctrl-C / SIGTERM."),
		CLI_END(),
	};
	struct job_spec js;
	struct run_record r;
	struct err e = { "" }, re;
	char dir[4096], exe[4096];
	struct buf sum;
	int rc, ok, npos;
	ssize_t n;

	log_init("run");
	npos = cli_parse(opts, argc, argv, &e);
	if (npos < 0)
		return cli_exit_code(opts, "ddiloco run", npos, &e);
	if (npos != 1) {
		cli_usage(opts, stderr);
		return 2;
	}
	o.job_file = argv[0];
	if (jobspec_load(o.job_file, &js, &e)) {
		fprintf(stderr, "ddiloco run: %s\n", e.msg);
		return 2;
	}
	if (o.baseline_only && (o.twin || !js.budget.tokens)) {
		/* without the job's run, only its budget says how far to train */
		fprintf(stderr, "ddiloco run: --baseline-only: %s\n", o.twin ?
			"--twin runs the job, which --baseline-only leaves out" :
			"the job sets no spec.budget.tokens, and without the job's "
			"run the baseline has no token count to train to");
		return 2;
	}
	o.baseline |= o.baseline_only;
	if (js.model.kind == MODEL_EXTERNAL && (o.baseline || o.baseline_lrs)) {
		/* the baseline is `ddiloco train`, the reference GPT's */
		fprintf(stderr, "ddiloco run: --baseline: '%s' has spec.model.kind "
			"external, and the baseline can only train the reference "
			"GPT\n", o.job_file);
		return 2;
	}
	if (o.baseline_lrs) {
		double lrs[RUN_SWEEP_MAX];
		size_t n;
		if (run_baseline_lrs(&js, o.baseline_lrs, lrs, &n, &e)) {
			fprintf(stderr, "ddiloco run: %s\n", e.msg);
			return 2;
		}
	}
	/* the children are this same binary, unless DDILOCO_EXE says otherwise */
	if (getenv("DDILOCO_EXE")) {
		snprintf(exe, sizeof(exe), "%s", getenv("DDILOCO_EXE"));
	} else {
		n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
		if (n <= 0) {
			fprintf(stderr, "ddiloco run: cannot find this binary: %s\n", strerror(errno));
			return 1;
		}
		exe[n] = 0;
	}
	o.exe = exe;
	if (o.run_dir)
		snprintf(dir, sizeof(dir), "%s", o.run_dir);
	else
		default_dir(&js, dir, sizeof(dir));
	if (mkdir_p(dir, &e)) {
		fprintf(stderr, "ddiloco run: %s\n", e.msg);
		return 1;
	}
	{
		/* a copy of the job beside its results */
		void *text;
		size_t len;
		char copy[4200];
		snprintf(copy, sizeof(copy), "%s/job.yaml", dir);
		if (!file_read_all(o.job_file, 1 << 20, &text, &len, NULL)) {
			file_write_atomic(copy, text, len, NULL);
			free(text);
		}
	}

	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGPIPE, SIG_IGN);
	if (o.baseline_only)
		printf("ddiloco run %s: the data-parallel baseline alone (%d times the "
		       "batch), not the job; run folder %s\n", js.name,
		       js.learners.replicas, dir);
	else
		printf("ddiloco run %s: %d learners, quorum %d, chaos %s; run folder %s\n",
		       js.name, js.learners.replicas, js.syncer.min_quorum,
		       js.chaos.enabled && !o.no_chaos ? "on" : "off", dir);
	fflush(stdout);

	if (!o.baseline_only)
		rc = run_job(&js, &o, dir, &r, &stop_signal, &e);
	else if (!(rc = run_record_init(&r, &js, o.job_file, dir, &e)))
		snprintf(r.outcome, sizeof(r.outcome), "not run (--baseline-only)");
	ok = rc == 0;
	if (!ok)
		fprintf(stderr, "ddiloco run: %s\n", e.msg);
	if (ok && o.twin && !stop_signal && run_twin(&js, &o, dir, &r, &e)) {
		fprintf(stderr, "ddiloco run: twin: %s\n", e.msg);
		ok = 0;
	}
	if (ok && (o.baseline || o.baseline_lrs) && !stop_signal &&
	    run_baseline(&js, &o, dir, &r, &stop_signal, &e)) {
		fprintf(stderr, "ddiloco run: %s\n", e.msg);
		ok = 0;
	}
	if (run_report_write(&r, &re))
		fprintf(stderr, "ddiloco run: %s\n", re.msg);
	buf_init(&sum, 1 << 16);
	run_summary(&r, &sum);
	if (sum.data)
		fputs(sum.data, stdout);
	buf_release(&sum);
	fflush(stdout);
	run_record_release(&r);
	if (stop_signal)
		return 128 + stop_signal;
	return ok ? 0 : 1;
}
