/*
 * `ddiloco run JOB.yaml`: the job on this machine (runner/run.c), then
 * optionally its no-chaos twin and its data-parallel baseline, then the
 * report. Exit 0 only when the job (and every comparison asked for) ran
 * to its end; 130/143 after Ctrl-C/SIGTERM, with everything stopped.
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

/*
 * The baseline's log: `key=value` lines from `ddiloco train`. Every line
 * with eval_loss= is a point of its curve, at tokens= when present, else
 * at step= times the tokens of one step; the last is its final loss.
 */
static void parse_train_log(struct run_compare *c, uint64_t tokens_per_step)
{
	FILE *f = fopen(c->log, "r");
	char line[1024];
	size_t cap = 0;

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *l = strstr(line, "eval_loss=");
		char *tk = strstr(line, " tokens="), *st = strstr(line, "step=");
		double loss;

		if (!l)
			continue;
		loss = strtod(l + 10, NULL);
		if (!isfinite(loss))
			continue;
		c->loss = loss;
		if (c->nevals == cap) {
			size_t want = cap ? cap * 2 : 64;
			struct syncer_eval *p;
			if (want > RUN_MAX_EVALS)
				continue;
			p = realloc(c->evals, want * sizeof(*p));
			if (!p)
				continue;
			c->evals = p;
			cap = want;
		}
		memset(&c->evals[c->nevals], 0, sizeof(c->evals[0]));
		c->evals[c->nevals].loss = loss;
		c->evals[c->nevals].tokens = tk ? strtoull(tk + 8, NULL, 10)
					    : st ? strtoull(st + 5, NULL, 10) * tokens_per_step : 0;
		c->evals[c->nevals].time = NAN;
		c->nevals++;
	}
	fclose(f);
}

static int run_baseline(const struct job_spec *js, const char *exe,
			const char *job_file, const char *dir,
			struct run_record *r, struct err *e)
{
	struct run_compare *c = &r->baseline;
	char mult[16], tokens[32], every[32], threads[16];
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	uint64_t per_step = (uint64_t)js->optimizer.batch_size *
			    (uint64_t)jobspec_seq_len(js) * (uint64_t)js->learners.replicas;
	struct proc p;
	double t0 = clock_mono(), last = t0;
	uint64_t tok = js->budget.tokens ? js->budget.tokens : r->final.tokens;

	c->ran = 1;
	c->tokens = tok;
	if (snprintf(c->log, sizeof(c->log), "%s/baseline.log", dir) >=
	    (int)sizeof(c->log))
		return err_set(e, "run: log path too long: '%s/baseline.log'", dir);
	snprintf(mult, sizeof(mult), "%d", js->learners.replicas);
	snprintf(tokens, sizeof(tokens), "%llu", (unsigned long long)tok);
	/* it runs alone after the job: all the cores (the loss does not depend on it) */
	snprintf(threads, sizeof(threads), "%ld", ncpu > 0 ? (ncpu < 8 ? ncpu : 8) : 1);
	/* about 15 points on its loss curve */
	snprintf(every, sizeof(every), "%llu",
		 (unsigned long long)(tok / per_step / 15 > 0 ? tok / per_step / 15 : 1));
	{
		char *argv[] = { (char *)exe, (char *)"train", (char *)job_file,
				 (char *)"--batch-mult", mult, (char *)"--tokens", tokens,
				 (char *)"--eval-every", every, (char *)"--threads", threads, NULL };
		if (proc_init(&p, "baseline", c->log, argv, e))
			return -1;
	}
	printf("baseline: ddiloco train %s --batch-mult %s --tokens %s (log %s)\n",
	       job_file, mult, tokens, c->log);
	fflush(stdout);
	if (proc_start(&p, e)) {
		proc_release(&p);
		return -1;
	}
	while (!proc_reap(&p)) {
		if (stop_signal) {
			proc_stop(&p, 5);
			proc_release(&p);
			return err_set(e, "interrupted");
		}
		if (clock_mono() - last >= 15) {
			last = clock_mono();
			printf("baseline: %.0f s\n", last - t0);
			fflush(stdout);
		}
		sleep_seconds(0.1);
	}
	c->seconds = clock_mono() - t0;
	parse_train_log(c, per_step);
	c->ok = WIFEXITED(p.status) && WEXITSTATUS(p.status) == 0 && isfinite(c->loss);
	if (!c->ok) {
		char st[64];
		err_set(e, "baseline: ddiloco train ended with %s%s; see %s",
			proc_describe_status(p.status, st, sizeof(st)),
			isfinite(c->loss) ? "" : " and no eval_loss", c->log);
	}
	proc_release(&p);
	return c->ok ? 0 : -1;
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
			 "larger batch (data parallel as one learner) and compare losses"),
		CLI_FLAG("twin", 0, &o.twin,
			 "also run the same job without chaos and compare losses"),
		CLI_FLAG("no-chaos", 0, &o.no_chaos, "ignore spec.chaos"),
		CLI_DOUBLE("timeout", 0, &o.timeout, "S", 0, INFINITY,
			   "give up after S seconds (exit 1)", .flags = CLI_ABOVE_MIN),
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
	printf("ddiloco run %s: %d learners, quorum %d, chaos %s; run folder %s\n",
	       js.name, js.learners.replicas, js.syncer.min_quorum,
	       js.chaos.enabled && !o.no_chaos ? "on" : "off", dir);
	fflush(stdout);

	rc = run_job(&js, &o, dir, &r, &stop_signal, &e);
	ok = rc == 0;
	if (!ok)
		fprintf(stderr, "ddiloco run: %s\n", e.msg);
	if (ok && o.twin && !stop_signal && run_twin(&js, &o, dir, &r, &e)) {
		fprintf(stderr, "ddiloco run: twin: %s\n", e.msg);
		ok = 0;
	}
	if (ok && o.baseline && !stop_signal &&
	    run_baseline(&js, exe, o.job_file, dir, &r, &e)) {
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
