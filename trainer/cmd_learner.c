/*
 * `ddiloco learner`: the reference trainer driven through the exchange.
 *
 * At start it waits (bounded by --init-timeout) until its sidecar has put
 * every fragment of the global model in the exchange, takes them as its
 * parameters, then trains: one trainer_step, one exchange_poll, again.
 * It never waits for the network; it exits 0 when the sidecar marks the
 * exchange done (the syncer said "job done").
 *
 * Resuming (docs/sidecar.md): a learner process that starts while the job
 * is under way takes the job's step from the syncer's Welcome, which its
 * sidecar leaves in the exchange for this process. At start it waits for
 * that step a little (RESUME_WAIT; the sidecar answers in milliseconds
 * when it is up), and whenever a larger one arrives later it moves its
 * schedule step there. AdamW's t is the trainer's own count: the moments
 * of a new process are zero and are corrected from t = 1.
 *
 * With --synthetic or spec.learners.synthetic it trains nothing: the
 * same waits, then trainer/synthetic.c's steps (docs/run.md, Synthetic
 * learners).
 */
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "common/cli.h"
#include "common/exchange.h"
#include "common/jobspec.h"
#include "common/slowdown.h"
#include "common/log.h"
#include "common/util.h"
#include "trainer/model.h"
#include "trainer/synthetic.h"
#include "trainer/trainer.h"

#define RESUME_WAIT 5.0   /* seconds, at start, for the resume step */

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

/* Waits until the sidecar delivered every fragment. 0 = started, 1 = the
 * job is already done, -1 = timed out, EXCHANGE_VERSION_MISMATCH (e
 * filled) = a sidecar of another release (docs/abi.md, Versions). */
static int wait_for_model(struct exchange *x, float *params, double timeout,
			  const struct exchange_step *st, struct err *e)
{
	double start = clock_mono(), next_note = start + 10;

	exchange_put_stats(x, st);   /* the sidecar sees this process at once */
	for (;;) {
		if (exchange_versions(x, e))
			return EXCHANGE_VERSION_MISMATCH;
		if (exchange_learner_start(x, params))
			return 0;
		if (exchange_is_done(x))
			return 1;
		if (stop_requested || clock_mono() - start > timeout)
			return -1;
		if (clock_mono() > next_note) {
			log_info("waiting for the global model from the sidecar "
				 "(%.0f s so far)", clock_mono() - start);
			next_note += 10;
		}
		exchange_put_stats(x, st);
		exchange_wait(x, 0.2);
	}
}

/* wait_for_model, told: 0 = train, 1 = the job is already done or a
 * signal came (exit 0), -1 = no model within timeout. */
static int await_model(struct exchange *x, struct trainer *t, int learner,
		       double timeout, const char *dir,
		       const struct exchange_step *st, struct err *e)
{
	switch (wait_for_model(x, trainer_params(t), timeout, st, e)) {
	case EXCHANGE_VERSION_MISMATCH:
		return EXCHANGE_VERSION_MISMATCH;
	case 1:
		log_info("the job is already done");
		return 1;
	case -1:
		if (stop_requested)
			return 1;
		err_set(e, "learner %d: no global model from the sidecar within "
			"%.0f s (exchange '%s'): is `ddiloco sidecar` running "
			"and connected to the syncer?", learner, timeout, dir);
		return -1;
	}
	return 0;
}

/* Moves the schedule step to the resume step when that is larger. */
static void resume(struct trainer *t, uint64_t step)
{
	uint64_t own = trainer_steps(t);

	if (trainer_resume_at(t, step))
		log_info("resuming at step %llu (job step; was %llu, AdamW t "
			 "from %llu)", (unsigned long long)step,
			 (unsigned long long)own,
			 (unsigned long long)trainer_adam_t(t) + 1);
}

/* Waits at most RESUME_WAIT for the resume step meant for this process;
 * 1 with *step when it came. */
static int wait_for_resume(struct exchange *x, uint64_t *step)
{
	double start = clock_mono();

	while (!exchange_resume(x, step)) {
		if (stop_requested || exchange_is_done(x))
			return 0;
		if (clock_mono() - start > RESUME_WAIT) {
			log_info("no resume step from the sidecar within %.0f s: "
				 "training from step 0", RESUME_WAIT);
			return 0;
		}
		exchange_wait(x, 0.05);
	}
	return 1;
}

/*
 * Trains until the sidecar marks the exchange done or a signal: a step,
 * then a poll of the exchange; every 5 s a line of the step and poll
 * times. st is what the sidecar reads of this process. -1 on an error,
 * EXCHANGE_VERSION_MISMATCH when a sidecar of another release replaced
 * ours (docs/abi.md, Versions).
 */
static int train(struct trainer *t, struct exchange *x,
		 const struct job_spec *js, double slow,
		 struct exchange_step *st, struct err *e)
{
	double t0, next_log, poll_time = 0, step_time = 0, ema = 0;
	uint64_t polls = 0, rstep, jt;

	t0 = clock_mono();
	next_log = t0 + 5;
	while (!stop_requested) {
		struct trainer_stats ts;
		struct exchange_poll_result res;
		double a;

		if (trainer_step(t, &ts, e))
			return -1;
		ts.seconds = slowdown_step(slow, ts.seconds);
		ema = ema > 0 ? 0.9 * ema + 0.1 * ts.seconds : ts.seconds;
		st->step = ts.step;
		st->tokens = ts.tokens;
		st->tokens_total = ts.tokens_total;
		st->loss = ts.loss;
		st->step_time = ema;
		a = clock_mono();
		if (exchange_versions(x, e))   /* a sidecar replaced */
			return EXCHANGE_VERSION_MISMATCH;
		exchange_poll(x, trainer_params(t), st, &res);
		if (res.repaired)
			log_warn("%s", exchange_last_error(x));
		if (exchange_resume(x, &rstep))
			resume(t, rstep);
		/* the lr schedule follows the job's tokens (docs/design.md §3,
		 * Learner): the syncer's count when it sent the newest update */
		jt = exchange_job_tokens(x);
		if (jt && ts.tokens)
			trainer_set_schedule_step(t, jt / ((uint64_t)
				js->learners.replicas * ts.tokens));
		poll_time += clock_mono() - a;
		step_time += ts.seconds;
		polls++;
		if (res.done) {
			log_info("job done at step %llu, schedule step %llu of "
				 "%llu", (unsigned long long)ts.step,
				 (unsigned long long)trainer_schedule_step(t),
				 (unsigned long long)trainer_decay_steps(t));
			break;
		}
		if (clock_mono() > next_log) {
			log_info("step %llu loss %.4f step %.1f ms poll %.3f ms",
				 (unsigned long long)ts.step, ts.loss, ema * 1e3,
				 poll_time / (double)polls * 1e3);
			next_log += 5;
		}
	}
	log_info("%llu steps; exchange_poll took %.4f of step time",
		 (unsigned long long)polls,
		 step_time > 0 ? poll_time / step_time : 0.0);
	return 0;
}

/*
 * The synthetic learner (docs/run.md, Synthetic learners): the job's
 * table without a trainer, the seed of an external model left for the
 * syncer as ddiloco_start leaves it (docs/syncer.md, Model-agnostic
 * jobs), then the waits of a real learner and synthetic_train.
 */
static int run_synthetic(const struct job_spec *js, int learner,
			 const char *dir, double timeout, struct err *e)
{
	struct synthetic_run r = { .js = js, .learner = learner,
				   .stop = &stop_requested };
	struct exchange_step st = { .loss = NAN };
	struct frag_table ft;
	int rc = -1, n;

	if (synthetic_table(js, &ft, &r.n, e))
		return -1;
	r.params = malloc((r.n ? r.n : 1) * sizeof(float));
	if (!r.params) {
		err_set(e, "learner %d: out of memory for %zu parameters",
			learner, r.n);
		goto out;
	}
	if (js->model.kind == MODEL_EXTERNAL) {
		synthetic_init(r.params, r.n, js->model.seed);
		if (exchange_write_seed(dir, &ft, r.params, e))
			goto out;
	}
	if ((n = exchange_open(dir, EXCHANGE_LEARNER, &ft, &r.x, e))) {
		rc = n;
		goto out;
	}
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	switch (wait_for_model(r.x, r.params, timeout, &st, e)) {
	case EXCHANGE_VERSION_MISMATCH:
		rc = EXCHANGE_VERSION_MISMATCH;
		goto out;
	case 1:
		log_info("the job is already done");
		rc = 0;
		goto out;
	case -1:
		if (stop_requested) {
			rc = 0;
			goto out;
		}
		err_set(e, "learner %d: no global model from the sidecar within "
			"%.0f s (exchange '%s'): is `ddiloco sidecar` running "
			"and connected to the syncer?", learner, timeout, dir);
		goto out;
	}
	log_info("got the global model (%d fragments, %zu values); synthetic "
		 "steps", ft.nfrags, r.n);
	if (wait_for_resume(r.x, &r.step))
		log_info("resuming at step %llu (job step)",
			 (unsigned long long)r.step);
	n = synthetic_train(&r);
	rc = n;
out:
	exchange_close(r.x);
	free(r.params);
	frag_table_release(&ft);
	return rc;
}

/* Long because the option table is declared here, beside the variables
 * it fills; after it, the setup runs in order and unwinds at one label. */
int cmd_learner(int argc, char **argv)
{
	const char *job = NULL, *dir = NULL;
	int learner = -1, rc = 1, ft_ok = 0, n, synthetic = 0;
	double init_timeout = 300, step_time = 0, slow;
	const struct cli_option opts[] = {
		CLI_TEXT("usage: ddiloco learner --job JOB.yaml --learner I --exchange DIR\n"
			 "                       [--init-timeout SECONDS]\n"
			 "                       [--synthetic [--step-time SECONDS]]\n\n"
			 "Trains learner I of the job. Its sidecar (`ddiloco sidecar` with the\n"
			 "same --exchange DIR) brings the global model and carries fragments\n"
			 "to and from the syncer; the learner never waits for it.\n"
			 "--synthetic (or spec.learners.synthetic) trains nothing: each step\n"
			 "moves the weights by a small deterministic pseudo-random delta.\n"),
		CLI_STRING("job", 0, &job, "JOB.yaml", "the DecoupledTrainingJob"),
		CLI_INT("learner", 0, &learner, "I", 0, INT_MAX,
			"this learner's index in the job"),
		CLI_STRING("exchange", 0, &dir, "DIR",
			   "the exchange folder shared with the sidecar"),
		CLI_DOUBLE("init-timeout", 0, &init_timeout, "S", 0, INFINITY,
			   "how long to wait for the global model (default 300)",
			   .flags = CLI_ABOVE_MIN),
		CLI_FLAG("synthetic", 0, &synthetic,
			 "train nothing: synthetic steps (docs/run.md)"),
		CLI_DOUBLE("step-time", 0, &step_time, "S", 0, 3600,
			   "with --synthetic: seconds per step (default "
			   "spec.learners.synthetic.stepTime, else 0.05)",
			   .flags = CLI_ABOVE_MIN),
		LOG_CLI_OPTION(),
		CLI_END(),
	};
	struct job_spec js;
	struct trainer *t = NULL;
	struct frag_table ft;
	struct exchange *x = NULL;
	struct exchange_step st = { 0 };
	struct err e;
	char comp[32];
	uint64_t rstep;

	n = cli_parse(opts, argc, argv, &e);
	if (n < 0)
		return cli_exit_code(opts, "ddiloco learner", n, &e);
	if (!job || learner < 0 || !dir || n > 0) {
		fprintf(stderr, "ddiloco learner: --job, --learner and --exchange "
			"are required\n");
		cli_usage(opts, stderr);
		return 2;
	}
	snprintf(comp, sizeof(comp), "learner-%d", learner);
	log_init(comp);
	if (jobspec_load(job, &js, &e))
		goto out;
	if (learner >= js.learners.replicas) {
		err_set(&e, "learner %d: the job has %d learners (0 to %d)",
			learner, js.learners.replicas, js.learners.replicas - 1);
		goto out;
	}
	if (synthetic || step_time > 0 || js.learners.synthetic.enabled) {
		js.learners.synthetic.enabled = 1;
		if (step_time > 0)
			js.learners.synthetic.step_time = step_time;
		if (jobspec_validate(&js, &e))
			goto out;
		n = run_synthetic(&js, learner, dir, init_timeout, &e);
		rc = n == EXCHANGE_VERSION_MISMATCH ? CLI_EXIT_MISMATCH : n ? 1 : 0;
		goto out;
	}
	t = trainer_new(&js, learner, js.learners.replicas, &e);
	if (!t)
		goto out;
	if (model_frag_table(trainer_config(t), js.syncer.fragments, &ft, &e))
		goto out;
	ft_ok = 1;
	if ((n = exchange_open(dir, EXCHANGE_LEARNER, &ft, &x, &e))) {
		rc = n == EXCHANGE_VERSION_MISMATCH ? CLI_EXIT_MISMATCH : 1;
		goto out;
	}
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);

	n = await_model(x, t, learner, init_timeout, dir, &st, &e);
	if (n) {
		rc = n == EXCHANGE_VERSION_MISMATCH ? CLI_EXIT_MISMATCH :
		     n > 0 ? 0 : 1;
		goto out;
	}
	log_info("got the global model (%d fragments); training", ft.nfrags);
	if (wait_for_resume(x, &rstep))
		resume(t, rstep);
	slow = jobspec_slowdown(&js, learner);
	if (slow > 1)
		log_info("learner %d: %.2f times slower (spec.learners.slowdown)",
			 learner, slow);
	n = train(t, x, &js, slow, &st, &e);
	rc = n == EXCHANGE_VERSION_MISMATCH ? CLI_EXIT_MISMATCH : n ? 1 : 0;
out:
	if (rc)
		log_error("%s", e.msg);
	/* for the operator, as the sidecar leaves it (docs/abi.md, Versions) */
	if (rc == CLI_EXIT_MISMATCH)
		cli_termination_message(CLI_TERMINATION_LOG, e.msg);
	exchange_close(x);
	if (ft_ok)
		frag_table_release(&ft);
	trainer_free(t);
	return rc;
}
