/*
 * run: `ddiloco run` — one job as local processes, watched and reported.
 *
 * run_job starts the syncer and M learner + sidecar pairs (runner/proc),
 * kills and restarts them by spec.chaos (common/chaos), polls the syncer's
 * /status (docs/status.md) and records what it sees in a run_record, from
 * which report.c writes report.json and report.html and progress.c draws
 * the live view. The record is plain data: the report and the progress
 * view can be tested without processes.
 */
#ifndef DDILOCO_RUN_H
#define DDILOCO_RUN_H

#include <stddef.h>
#include <signal.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/chaos.h"
#include "common/err.h"
#include "common/jobspec.h"
#include "common/syncer_status.h"

/* ---- the syncer's /status (common/syncer_status.h) ---- */

#define RUN_MAX_EVALS  100000           /* a comparison's loss curve */

/* GET http://addr/status within timeout seconds. */
int run_status_fetch(const char *addr, double timeout,
		     struct syncer_status *out, struct err *e);

/* ---- what a run records ---- */

#define RUN_MAX_SAMPLES 200000
#define RUN_MAX_KILLS   100000

struct run_sample {
	double t;                       /* seconds since the run started */
	uint64_t round, tokens;
	double eval_loss;               /* NAN while none */
	int up;                         /* learner slots up (runner's view) */
	int connected;                  /* learners connected (syncer's view) */
	double tokens_per_s;
};

struct run_kill {
	double t;
	struct chaos_kill k;
};

/* One `ddiloco train` of the baseline's sweep. */
struct run_trial {
	double lr;
	int warmup;                     /* steps */
	int ok;
	double loss;                    /* final eval loss, NAN if unknown */
	double tune;                    /* on the tuning split; NAN: none */
	double seconds;
	char log[4096];
};

#define RUN_SWEEP_MAX 8

/* A second run beside the job: the data-parallel baseline or the no-chaos twin. */
struct run_compare {
	int ran, ok;
	struct run_trial sweep[RUN_SWEEP_MAX];  /* the baseline's; the best is `best` */
	size_t nsweep, best;
	double loss;                    /* final eval loss, NAN if unknown */
	uint64_t tokens;
	double seconds;
	char log[4096];
	struct syncer_eval *evals;      /* its loss curve, owned */
	size_t nevals;
};

struct run_record {
	char job[JOB_NAME_MAX];
	char job_file[JOB_PATH_MAX];
	char dir[4096];
	int learners, quorum, chaos;
	double started_wall;            /* epoch seconds */
	double seconds;                 /* wall time of the run */
	uint64_t params;                /* model parameters N */
	uint64_t tokens_per_step;       /* B × T of one learner */

	struct run_sample *samples;
	size_t nsamples, cap_samples;
	struct run_kill *kills;
	size_t nkills, cap_kills;
	uint64_t kills_skipped;
	int *restarts;                  /* per learner slot: pair or sidecar restarts */
	int *crashes;                   /* per slot: exits nobody asked for */
	int syncer_restarts, syncer_crashes;
	/* a sharded syncer (docs/syncer.md, Shards): its shards, and while
	 * one of them was down (not answering /status), the rounds the
	 * others merged and for how long, as the polls saw it */
	int shards;
	uint64_t rounds_while_shard_down;
	double shard_down_seconds;

	struct syncer_status final;     /* the last /status read */
	int have_final;                 /* a /status was read (not with --baseline-only) */
	double done_at;                 /* run time /status first said done; NAN */
	int success;
	char outcome[256];              /* "done", "interrupted", the error */

	struct run_compare baseline, twin;
};

int run_record_init(struct run_record *r, const struct job_spec *js,
		    const char *job_file, const char *dir, struct err *e);
void run_record_release(struct run_record *r);
int run_record_sample(struct run_record *r, const struct run_sample *s);
int run_record_kill(struct run_record *r, double t, const struct chaos_kill *k);

/* Model parameters of the job's model (the tensor table of trainer/model.h). */
uint64_t run_param_count(const struct job_model *m);
/*
 * Bytes data parallel would move for the same tokens: every step each of
 * M workers sends and receives 2·(M−1)/M of the f32 gradient in a ring
 * all-reduce, so M·2·(M−1)/M·4N = 8N(M−1) bytes per step, over
 * tokens / (M·B·T) steps.
 */
double run_dp_bytes(uint64_t params, int learners, uint64_t tokens,
		    uint64_t tokens_per_step);

/* ---- the report ---- */

int run_report_json(const struct run_record *r, struct buf *out, struct err *e);
int run_report_html(const struct run_record *r, struct buf *out, struct err *e);
/* Writes DIR/report.json and DIR/report.html. */
int run_report_write(const struct run_record *r, struct err *e);
/* The final summary lines, printed after a run; -1 when out has an error
 * (buf_error). */
int run_summary(const struct run_record *r, struct buf *out);

/* ---- the live view ---- */

struct run_view {
	int tty;
	int lines;                      /* table lines drawn last time */
	double last;                    /* when the last line was printed */
};

/* Redraws the table (tty) or prints a line every `every` seconds. */
void run_view_update(struct run_view *v, const struct run_record *r,
		     double now, double every);
/* An event line ("killed learner-2"), above the table on a terminal. */
void run_view_event(struct run_view *v, double t, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Leaves the last table on screen and moves below it. */
void run_view_end(struct run_view *v);

/* ---- certificates (runner/certs.c) ---- */

/*
 * The job's CA and a certificate per process in dir, one folder each:
 * dir/syncer, dir/learner-<i> and dir/evaluator-<i> (evaluators of them;
 * docs/syncer.md, Evaluators) with ca.crt, tls.crt, tls.key (keys
 * 0600), as `--tls-dir` reads them (docs/security.md). The syncer's
 * names are localhost and 127.0.0.1, then dns and ips (NULL-terminated
 * lists, or NULL).
 */
int run_certs_make(const char *dir, const char *job, int learners,
		   int evaluators, const char *const *dns, const char *const *ips,
		   struct err *e);

/* ---- the whole job ---- */

struct run_opts {
	const char *job_file;
	const char *run_dir;            /* NULL = runs/<name>-<UTC time> */
	const char *exe;                /* the ddiloco binary for the children */
	int no_chaos;
	int baseline;
	const char *baseline_lrs;       /* "LR,LR,..." or NULL: the default sweep */
	int baseline_fresh;             /* train even when the cache has the trial */
	int baseline_widen;             /* trials past the sweep's edge at most */
	int baseline_only;              /* the baseline's sweep alone, not the job */
	int twin;
	double timeout;                 /* give up after this many seconds; 0 = never */
	int quiet;                      /* no live view */
};

/*
 * Runs the job to its end (done, interrupted, failed or timed out),
 * recording into r (initialized here). Returns 0 when the syncer
 * reported done and every part stopped cleanly. It stops everything and
 * returns once *stop is set (by a signal handler).
 */
int run_job(const struct job_spec *js, const struct run_opts *o,
	    const char *dir, struct run_record *r,
	    const volatile sig_atomic_t *stop, struct err *e);

/*
 * The data-parallel baseline (runner/baseline.c): `ddiloco train` with an
 * M times larger batch on the job's tokens, once per learning rate of the
 * sweep; the best final eval loss is the baseline. Fills r->baseline.
 */
int run_baseline(const struct job_spec *js, const struct run_opts *o,
		 const char *dir, struct run_record *r,
		 const volatile sig_atomic_t *stop, struct err *e);
/*
 * The sweep's learning rates into lr[RUN_SWEEP_MAX]: the comma-separated
 * list, each in (0, 1], or with list NULL the job's lr times 0.5, 1 and 2.
 */
int run_baseline_lrs(const struct job_spec *js, const char *list, double *lr,
		     size_t *n, struct err *e);

#endif
