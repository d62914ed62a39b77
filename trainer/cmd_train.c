/*
 * `ddiloco train`: one learner alone, no syncer — the data-parallel
 * baseline. It reads the model, data and optimizer sections of a job file,
 * trains learner 0 of 1 for the budget, and prints progress on stdout:
 *
 *   step 20/488 loss=2.9113 lr=2.00e-03 tokens=10240 tokens_per_s=41210
 *   eval step=100 eval_loss=2.4012
 *   final eval_loss=<x> tokens=<n> tokens_per_s=<r>      (always last)
 *
 * --batch-mult M trains on M·B rows per step, which is what M synchronous
 * data-parallel learners of B rows each would average: `ddiloco run
 * --baseline` uses it to compare Decoupled DiLoCo with the same tokens.
 * SIGINT/SIGTERM stop after the current step (with a checkpoint if asked).
 */
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "common/cli.h"
#include "common/jobspec.h"
#include "common/util.h"
#include "trainer/trainer.h"

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

struct opts {
	const char *job, *checkpoint, *resume;
	uint64_t batch_mult, tokens, steps, threads, eval_every, log_every;
	uint64_t warmup;                /* UINT64_MAX: the job's */
	double lr;                      /* 0: the job's */
	int threads_set;
};

/* Returns 0 to go on, else the exit code (0 after --help, 2 on a usage error). */
static int parse_args(int argc, char **argv, struct opts *o, int *code)
{
	const uint64_t big = UINT64_MAX >> 1;
	const struct cli_option opts[] = {
		CLI_TEXT("usage: ddiloco train JOB.yaml [options]\n\n"
			 "Trains one learner with no syncer (the data-parallel baseline) on the\n"
			 "model, data and optimizer of the job; the last line on stdout is\n"
			 "  final eval_loss=<x> tokens=<n> tokens_per_s=<r>\n"),
		CLI_UINT64("batch-mult", 0, &o->batch_mult, "M", 4096,
			   "M times the job's batch size per step (default 1)"),
		CLI_UINT64("tokens", 0, &o->tokens, "N", big,
			   "token budget (default spec.budget.tokens)"),
		CLI_UINT64("steps", 0, &o->steps, "N", big,
			   "step budget (overrides the token budget)"),
		CLI_DOUBLE("lr", 0, &o->lr, "X", 0, 1,
			   "peak learning rate (default spec.optimizer.lr)",
			   .flags = CLI_ABOVE_MIN),
		CLI_UINT64("warmup", 0, &o->warmup, "N", INT32_MAX,
			   "warmup steps (default spec.optimizer.warmupSteps)"),
		CLI_UINT64("threads", 0, &o->threads, "N", 256,
			   "trainer threads (default spec.learners.threads)"),
		CLI_UINT64("eval-every", 0, &o->eval_every, "N", big,
			   "evaluate every N steps (default 0: at the end only)"),
		CLI_UINT64("log-every", 0, &o->log_every, "N", big,
			   "progress line every N steps (default: about 20 lines)"),
		CLI_STRING("checkpoint", 0, &o->checkpoint, "PATH",
			   "save parameters and optimizer state there at every\n"
			   "evaluation and at the end"),
		CLI_STRING("resume", 0, &o->resume, "PATH",
			   "start from a checkpoint of the same model"),
		CLI_END(),
	};
	struct err e;
	int n;

	memset(o, 0, sizeof(*o));
	o->batch_mult = 1;
	o->threads = UINT64_MAX;        /* not given */
	o->warmup = UINT64_MAX;
	n = cli_parse(opts, argc, argv, &e);
	if (n < 0) {
		*code = cli_exit_code(opts, "ddiloco train", n, &e);
		return -1;
	}
	*code = 2;
	if (n == 0) {
		cli_usage(opts, stderr);
		return -1;
	}
	if (n > 1) {
		fprintf(stderr, "ddiloco train: one job file only ('%s' and '%s')\n",
			argv[0], argv[1]);
		return -1;
	}
	o->job = argv[0];
	o->threads_set = o->threads != UINT64_MAX;
	if (o->batch_mult < 1) {
		fprintf(stderr, "ddiloco train: --batch-mult must be at least 1\n");
		return -1;
	}
	return 0;
}

static int save(struct trainer *t, const char *path)
{
	struct err e;

	if (!path)
		return 0;
	if (trainer_save(t, path, &e)) {
		fprintf(stderr, "ddiloco train: %s\n", e.msg);
		return -1;
	}
	return 0;
}

/* Long because it reads in the order it runs: the options over the job,
 * the budget in steps, the loop with its log, eval and checkpoint lines,
 * the final eval. */
int cmd_train(int argc, char **argv)
{
	struct opts o;
	struct job_spec js;
	struct trainer *t = NULL;
	struct err e;
	uint64_t steps, step_tokens;
	double eval_loss = 0, tune_loss = NAN, train_seconds = 0, window_seconds = 0;
	uint64_t run_tokens = 0, window_tokens = 0;
	size_t eval_tokens;
	int rc = 1, B, T;

	if (parse_args(argc, argv, &o, &rc))
		return rc;
	rc = 1;
	if (jobspec_load(o.job, &js, &e)) {
		fprintf(stderr, "ddiloco train: %s\n", e.msg);
		return 1;
	}
	if (o.threads_set)
		js.learners.threads = (int)o.threads;   /* 0 is refused below */
	if ((uint64_t)js.optimizer.batch_size * o.batch_mult > 65536) {
		fprintf(stderr, "ddiloco train: batch %d × --batch-mult %llu is more than 65536 rows\n",
			js.optimizer.batch_size, (unsigned long long)o.batch_mult);
		return 2;
	}
	js.optimizer.batch_size *= (int)o.batch_mult;
	if (o.lr > 0)
		js.optimizer.lr = o.lr;
	if (o.warmup != UINT64_MAX)
		js.optimizer.warmup_steps = (int)o.warmup;
	if (o.tokens)
		js.budget.tokens = o.tokens;
	step_tokens = (uint64_t)js.optimizer.batch_size * (uint64_t)jobspec_seq_len(&js);
	if (o.steps)
		steps = o.steps;
	else if (js.budget.tokens)
		steps = (js.budget.tokens + step_tokens - 1) / step_tokens;
	else if (js.budget.outer_steps)
		steps = js.budget.outer_steps;
	else {
		fprintf(stderr, "ddiloco train: no budget: set spec.budget.tokens or pass --tokens or --steps\n");
		return 2;
	}
	/* with only a step budget, the cosine decays over those steps */
	if (!js.optimizer.cosine_steps && !js.budget.tokens)
		js.optimizer.cosine_steps = steps > (uint64_t)INT32_MAX ? INT32_MAX : (int)steps;
	if (jobspec_validate(&js, &e)) {
		fprintf(stderr, "ddiloco train: %s\n", e.msg);
		return 2;
	}
	t = trainer_new(&js, 0, 1, &e);
	if (!t) {
		fprintf(stderr, "ddiloco train: %s\n", e.msg);
		return 1;
	}
	if (o.resume && trainer_load(t, o.resume, &e)) {
		fprintf(stderr, "ddiloco train: %s\n", e.msg);
		goto out;
	}
	trainer_batch(t, &B, &T);
	eval_tokens = js.syncer.eval_tokens > 0 ? (size_t)js.syncer.eval_tokens : 0;
	if (!o.log_every)
		o.log_every = steps / 20 ? steps / 20 : 1;
	printf("train job=%s params=%zu B=%d T=%d steps=%llu start=%llu threads=%d lr=%g warmup=%d\n",
	       js.name, model_num_params(trainer_config(t)), B, T,
	       (unsigned long long)steps, (unsigned long long)trainer_steps(t),
	       js.learners.threads, js.optimizer.lr, js.optimizer.warmup_steps);
	fflush(stdout);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);

	while (trainer_steps(t) < steps && !stop_requested) {
		struct trainer_stats st;

		if (trainer_step(t, &st, &e)) {
			fprintf(stderr, "ddiloco train: %s\n", e.msg);
			goto out;
		}
		train_seconds += st.seconds;
		window_seconds += st.seconds;
		run_tokens += st.tokens;
		window_tokens += st.tokens;
		if (st.step % o.log_every == 0 || st.step == steps) {
			printf("step %llu/%llu loss=%.4f lr=%.2e tokens=%llu tokens_per_s=%.0f\n",
			       (unsigned long long)st.step, (unsigned long long)steps,
			       st.loss, st.lr, (unsigned long long)st.tokens_total,
			       window_seconds > 0 ? (double)window_tokens / window_seconds : 0.0);
			fflush(stdout);
			window_seconds = 0;
			window_tokens = 0;
		}
		if (o.eval_every && st.step % o.eval_every == 0 && st.step < steps) {
			if (trainer_eval(t, eval_tokens, &eval_loss, &e)) {
				fprintf(stderr, "ddiloco train: %s\n", e.msg);
				goto out;
			}
			printf("eval step=%llu eval_loss=%.4f\n",
			       (unsigned long long)st.step, eval_loss);
			fflush(stdout);
			if (save(t, o.checkpoint))
				goto out;
		}
	}
	if (stop_requested)
		fprintf(stderr, "ddiloco train: stopped at step %llu\n",
			(unsigned long long)trainer_steps(t));
	if (save(t, o.checkpoint))
		goto out;
	if (trainer_eval(t, eval_tokens, &eval_loss, &e) ||
	    trainer_eval_tune(t, eval_tokens, &tune_loss, &e)) {
		fprintf(stderr, "ddiloco train: %s\n", e.msg);
		goto out;
	}
	printf("final eval_loss=%.4f tokens=%llu tokens_per_s=%.0f", eval_loss,
	       (unsigned long long)trainer_tokens(t),
	       train_seconds > 0 ? (double)run_tokens / train_seconds : 0.0);
	/* what a baseline's sweep chooses by (runner/baseline.c) */
	if (isfinite(tune_loss))
		printf(" tune_loss=%.4f", tune_loss);
	printf("\n");
	fflush(stdout);
	rc = stop_requested ? 130 : 0;
out:
	trainer_free(t);
	return rc;
}
