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
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "common/jobspec.h"
#include "common/util.h"
#include "trainer/trainer.h"

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ddiloco train JOB.yaml [options]\n"
		"\n"
		"Trains one learner with no syncer (the data-parallel baseline) on the\n"
		"model, data and optimizer of the job; the last line on stdout is\n"
		"  final eval_loss=<x> tokens=<n> tokens_per_s=<r>\n"
		"\n"
		"  --batch-mult M     M times the job's batch size per step (default 1)\n"
		"  --tokens N         token budget (default spec.budget.tokens)\n"
		"  --steps N          step budget (overrides the token budget)\n"
		"  --threads N        trainer threads (default spec.learners.threads)\n"
		"  --eval-every N     evaluate every N steps (default 0: at the end only)\n"
		"  --log-every N      progress line every N steps (default: about 20 lines)\n"
		"  --checkpoint PATH  save parameters and optimizer state there at every\n"
		"                     evaluation and at the end\n"
		"  --resume PATH      start from a checkpoint of the same model\n"
		"  --help             this text\n");
}

static int parse_u64(const char *opt, const char *s, uint64_t max,
		     uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v > max) {
		fprintf(stderr, "ddiloco train: %s: '%s' is not an integer in [0, %llu]\n",
			opt, s, (unsigned long long)max);
		return -1;
	}
	*out = v;
	return 0;
}

struct opts {
	const char *job, *checkpoint, *resume;
	uint64_t batch_mult, tokens, steps, threads, eval_every, log_every;
	int threads_set;
};

/* Returns 0 to go on, 1 after --help, 2 on a usage error. */
static int parse_args(int argc, char **argv, struct opts *o)
{
	memset(o, 0, sizeof(*o));
	o->batch_mult = 1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		uint64_t *num = NULL, max = UINT64_MAX >> 1;
		const char **str = NULL;

		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 1;
		}
		if (!strcmp(a, "--batch-mult"))
			num = &o->batch_mult, max = 4096;
		else if (!strcmp(a, "--tokens"))
			num = &o->tokens;
		else if (!strcmp(a, "--steps"))
			num = &o->steps;
		else if (!strcmp(a, "--threads"))
			num = &o->threads, max = 256, o->threads_set = 1;
		else if (!strcmp(a, "--eval-every"))
			num = &o->eval_every;
		else if (!strcmp(a, "--log-every"))
			num = &o->log_every;
		else if (!strcmp(a, "--checkpoint"))
			str = &o->checkpoint;
		else if (!strcmp(a, "--resume"))
			str = &o->resume;
		else if (a[0] == '-' && a[1]) {
			fprintf(stderr, "ddiloco train: unknown option '%s'\n", a);
			usage(stderr);
			return 2;
		} else if (!o->job) {
			o->job = a;
			continue;
		} else {
			fprintf(stderr, "ddiloco train: one job file only ('%s' and '%s')\n",
				o->job, a);
			return 2;
		}
		if (i + 1 >= argc) {
			fprintf(stderr, "ddiloco train: %s needs a value\n", a);
			return 2;
		}
		if (str)
			*str = argv[++i];
		else if (parse_u64(a, argv[++i], max, num))
			return 2;
	}
	if (!o->job) {
		usage(stderr);
		return 2;
	}
	if (o->batch_mult < 1) {
		fprintf(stderr, "ddiloco train: --batch-mult must be at least 1\n");
		return 2;
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

int cmd_train(int argc, char **argv)
{
	struct opts o;
	struct job_spec js;
	struct trainer *t = NULL;
	struct err e;
	uint64_t steps, step_tokens;
	double eval_loss = 0, train_seconds = 0, window_seconds = 0;
	uint64_t run_tokens = 0, window_tokens = 0;
	size_t eval_tokens;
	int rc = 1, B, T;

	rc = parse_args(argc, argv, &o);
	if (rc)
		return rc == 1 ? 0 : 2;
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
	printf("train job=%s params=%zu B=%d T=%d steps=%llu start=%llu threads=%d\n",
	       js.name, model_num_params(trainer_config(t)), B, T,
	       (unsigned long long)steps, (unsigned long long)trainer_steps(t),
	       js.learners.threads);
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
	if (trainer_eval(t, eval_tokens, &eval_loss, &e)) {
		fprintf(stderr, "ddiloco train: %s\n", e.msg);
		goto out;
	}
	printf("final eval_loss=%.4f tokens=%llu tokens_per_s=%.0f\n", eval_loss,
	       (unsigned long long)trainer_tokens(t),
	       train_seconds > 0 ? (double)run_tokens / train_seconds : 0.0);
	fflush(stdout);
	rc = stop_requested ? 130 : 0;
out:
	trainer_free(t);
	return rc;
}
