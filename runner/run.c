/*
 * run: one job as local processes (see run.h).
 *
 *   syncer   ddiloco syncer --job J --listen 127.0.0.1:P --http 127.0.0.1:Q
 *                           --checkpoint-dir RUN/checkpoints
 *                           --tls-dir RUN/tls/syncer
 *   pair i   ddiloco learner --job J --learner i --exchange X_i
 *            ddiloco sidecar --job J --learner i --exchange X_i
 *                            --syncer 127.0.0.1:P --http 127.0.0.1:R_i
 *                            --tls-dir RUN/tls/learner-i
 *
 *   evaluator  spec.evaluator.command + args, and
 *            ddiloco sidecar --job J --evaluator --learner 0 --exchange X_e
 *                            --syncer 127.0.0.1:P --http 127.0.0.1:R_e
 *                            --tls-dir RUN/tls/evaluator-0
 *            (spec.model.kind external only; docs/syncer.md, Evaluators):
 *            no chaos; a pair that exits unasked restarts after 1 s
 *
 * A learner of the user's own (spec.learners.command, or a group's) runs
 * instead of `ddiloco learner`, with DDILOCO_JOB_FILE, DDILOCO_EXCHANGE,
 * DDILOCO_LEARNER_ID and DDILOCO_LIB in its environment (docs/abi.md).
 * RUN/tls holds the job's CA and certificates (certs.c), made at the start
 * of every run; with spec.syncer.insecure none are made and the --tls-dir
 * flags are left out (plaintext gRPC, docs/security.md).
 * X_i is a folder under /dev/shm (the pod's memory emptyDir), removed at
 * the end. Ports are free ones chosen here. Every child logs to RUN/<name>.log.
 *
 * The loop, ten times a second: reap exits; restart what is due; let the
 * chaos schedule kill (SIGKILL to the process group); poll /status twice
 * a second; record a sample every second; redraw the view.
 *
 * What an exit means:
 *   learner  the pod is gone: its sidecar is killed too, the exchange
 *            folder emptied, and the pair started again after
 *            recoverySeconds (chaos) or 1 s (a crash);
 *   sidecar  only the sidecar restarts (the learner keeps training);
 *   syncer   restarted from its newest checkpoint in RUN/checkpoints;
 *   exit 0   the part finished its job: never restarted.
 * A part that fails within 10 s of its start 5 times in a row ends the run
 * (it will not get better by itself), and so does one exit 78 (a version
 * mismatch between a learner and its sidecar: docs/abi.md, Versions). When /status says done, the parts
 * get 10 s to finish on their own, then are stopped.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cli.h"
#include "common/util.h"
#include "runner/proc.h"
#include "runner/run.h"

#define TICK            0.1
#define POLL_EVERY      0.5
#define SAMPLE_EVERY    1.0
#define CRASH_DELAY     1.0     /* restart delay after an unasked-for exit */
#define FAST_FAIL       10.0    /* an exit this soon after a start is "fast" */
#define FAST_FAILS_MAX  5
#define READY_TIMEOUT   60.0
#define DONE_GRACE      10.0
/* after done, how long the syncer's last evaluation is waited for
 * (done_waited) */
#define DONE_EVAL_WAIT  900.0
#define STOP_GRACE      5.0

struct slot {
	struct proc learner, sidecar;
	char xdir[4096];
	int http_port;
	int down;                       /* 1 = pair to restart, 2 = sidecar only */
	double restart_at;              /* run time of the restart */
	int killed;                     /* the current down was chaos */
	int finished;                   /* both exited 0 */
	int fast_fails;
};

/* A /status's invariants (docs/status.md), counted per syncer process. */
struct inv_counts {
	uint64_t merged_steps, double_merged_steps, repeat_base;
	uint64_t stale_held, stale_merged;
};

struct runner {
	const struct job_spec *js;
	const struct run_opts *o;
	const volatile sig_atomic_t *stop;   /* set by a signal handler */
	struct run_record *r;
	char job[4096];                 /* absolute job file */
	char shm[4096];                 /* parent of the exchange folders */
	/* the syncer, or its shards (spec.syncer.shards; docs/syncer.md,
	 * Shards): shard i listens on sy[i].addr */
	struct shard_proc {
		struct proc p;
		char addr[64], http[64];
		int down, killed, fast_fails, finished;
		double restart_at;
		struct syncer_status st;        /* its last /status */
		int up;                         /* its last fetch answered */
		/* the invariants' counts of its process's last /status, and
		 * those of its processes before (a /status counts from its
		 * process's start: docs/status.md) */
		struct inv_counts last, past;
	} sy[JOB_MAX_SHARDS];
	int S;
	uint64_t syncer_kills;          /* the chaos's, each the next shard's */
	int down_shard;                 /* the last poll's first shard down */
	uint64_t down_others;           /* the others' rounds then */
	double down_t;
	char targets[64 * JOB_MAX_SHARDS];   /* every shard's addr, commas */
	struct slot *slots;
	int M;
	struct slot ev;                 /* the evaluator pair */
	int have_ev;
	struct chaos chaos;
	int chaos_on;
	double t0;                      /* clock_mono at start */
	struct run_view view;
	FILE *events;
	int done;                       /* /status said done */
	int said_eval_wait;             /* done_waited's event was logged */
	int said_start;                 /* the first /status was read */
	double done_at;
	double last_poll, last_sample;
	uint64_t rate_tokens;           /* tokens at rate_t, for tokens/s */
	double rate_t;
	char fatal[4608];    /* a proc's name, status, log tail and path, whole */
};

static double now_of(const struct runner *R)
{
	return clock_mono() - R->t0;
}

static void event(struct runner *R, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void event(struct runner *R, const char *fmt, ...)
{
	char line[600];
	double t = now_of(R);
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (R->events) {
		fprintf(R->events, "%.3f %s\n", t, line);
		fflush(R->events);
	}
	if (!R->o->quiet)
		run_view_event(&R->view, t, "%s", line);
}

/* ---- setup ---- */

/* n distinct free loopback ports: all bound at once, then released. */
static int free_ports(int *ports, int n, struct err *e)
{
	int fds[64], rc = 0;

	if (n > 64)
		return err_set(e, "run: too many ports");
	for (int i = 0; i < n; i++)
		fds[i] = -1;
	for (int i = 0; i < n && !rc; i++) {
		struct sockaddr_in a = { .sin_family = AF_INET,
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t len = sizeof(a);

		fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fds[i] < 0 || bind(fds[i], (struct sockaddr *)&a, sizeof(a)) ||
		    getsockname(fds[i], (struct sockaddr *)&a, &len))
			rc = err_set(e, "run: cannot find a free port: %s", strerror(errno));
		else
			ports[i] = ntohs(a.sin_port);
	}
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	return rc;
}

static int rm_tree(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;
	char sub[4400];

	if (!d)
		return unlink(path) && errno != ENOENT ? -1 : 0;
	while ((de = readdir(d))) {
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name);
		if (!lstat(sub, &st) && S_ISDIR(st.st_mode))
			rm_tree(sub);
		else
			unlink(sub);
	}
	closedir(d);
	return rmdir(path);
}

static int empty_dir(const char *path, struct err *e)
{
	rm_tree(path);
	if (mkdir(path, 0700) && errno != EEXIST)
		return err_set(e, "run: cannot create '%s': %s", path, strerror(errno));
	return 0;
}

/*
 * Learner i: `ddiloco learner`, or the command of the job file
 * (spec.learners.command and args, or its group's), with the job, the
 * exchange, the index and libddiloco.so in its environment
 * (docs/abi.md, Environment).
 */
static int init_learner(struct runner *R, int i, struct proc *p,
			const char *name, const char *log, char *xdir,
			struct err *e)
{
	const char *cmd[JOB_ARGV_MAX], *args[JOB_ARGV_MAX];
	char *argv[2 * JOB_ARGV_MAX + 1], id[16], lib[4200];
	const char *slash = strrchr(R->o->exe, '/');
	int nc, na, n = 0;

	snprintf(id, sizeof(id), "%d", i);
	jobspec_learner_command(R->js, i, cmd, &nc, args, &na);
	if (!nc && R->js->learners.args.n)
		return err_set(e, "run: spec.learners.args without spec.learners.command: "
			       "`ddiloco learner` takes no arguments from the job");
	if (nc) {
		for (int k = 0; k < nc; k++)
			argv[n++] = (char *)cmd[k];
		for (int k = 0; k < na; k++)
			argv[n++] = (char *)args[k];
		argv[n] = NULL;
	} else {
		char *own[] = { (char *)R->o->exe, (char *)"learner", (char *)"--job",
				R->job, (char *)"--learner", id, (char *)"--exchange",
				xdir, NULL };

		memcpy(argv, own, sizeof(own));
	}
	snprintf(lib, sizeof(lib), "%.*slibddiloco.so",
		 slash ? (int)(slash - R->o->exe + 1) : 0, R->o->exe);
	if (proc_init(p, name, log, argv, e) ||
	    proc_setenv(p, "DDILOCO_JOB_FILE", R->job, e) ||
	    proc_setenv(p, "DDILOCO_EXCHANGE", xdir, e) ||
	    proc_setenv(p, "DDILOCO_LEARNER_ID", id, e) ||
	    proc_setenv(p, "DDILOCO_LIB", lib, e))
		return -1;
	return 0;
}

/*
 * The evaluator: spec.evaluator.command and args, with the job, its
 * exchange, DDILOCO_EVALUATOR_ID=0 and libddiloco.so in its environment
 * (docs/abi.md, Environment).
 */
static int init_evaluator(struct runner *R, struct proc *p, const char *log,
			  const char *xdir, struct err *e)
{
	char *argv[2 * JOB_ARGV_MAX + 1], lib[4200];
	const char *w[JOB_ARGV_MAX];
	const char *slash = strrchr(R->o->exe, '/');
	int n = 0, k;

	k = job_argv_words(&R->js->evaluator.command, w);
	for (int i = 0; i < k; i++)
		argv[n++] = (char *)w[i];
	k = job_argv_words(&R->js->evaluator.args, w);
	for (int i = 0; i < k; i++)
		argv[n++] = (char *)w[i];
	argv[n] = NULL;
	snprintf(lib, sizeof(lib), "%.*slibddiloco.so",
		 slash ? (int)(slash - R->o->exe + 1) : 0, R->o->exe);
	if (proc_init(p, "evaluator", log, argv, e) ||
	    proc_setenv(p, "DDILOCO_JOB_FILE", R->job, e) ||
	    proc_setenv(p, "DDILOCO_EXCHANGE", xdir, e) ||
	    proc_setenv(p, "DDILOCO_EVALUATOR_ID", "0", e) ||
	    proc_setenv(p, "DDILOCO_LIB", lib, e))
		return -1;
	return 0;
}

/* The syncer, or each shard (--shard i), on two of ports each; every
 * shard's address into R->targets for the sidecars. A shard writes its
 * checkpoints to DIR/checkpoints/shard-<i>, its log to syncer-<i>.log. */
static int init_syncers(struct runner *R, const char *dir, const int *ports,
			const char *tls, struct err *e)
{
	char ckpt[4200], log[4200], tdir[4300], shard[16], name[32];
	int secure = !R->js->syncer.insecure;
	size_t n = 0;

	snprintf(tdir, sizeof(tdir), "%s/syncer", tls);
	for (int k = 0; k < R->S; k++) {
		struct shard_proc *y = &R->sy[k];

		snprintf(y->addr, sizeof(y->addr), "127.0.0.1:%d", ports[2 * k]);
		snprintf(y->http, sizeof(y->http), "127.0.0.1:%d", ports[2 * k + 1]);
		n += (size_t)snprintf(R->targets + n, sizeof(R->targets) - n,
				      "%s%s", k ? "," : "", y->addr);
		snprintf(shard, sizeof(shard), "%d", k);
		if (R->S == 1) {
			snprintf(ckpt, sizeof(ckpt), "%s/checkpoints", dir);
			snprintf(name, sizeof(name), "syncer");
		} else {
			snprintf(ckpt, sizeof(ckpt), "%s/checkpoints/shard-%d", dir, k);
			snprintf(name, sizeof(name), "syncer-%d", k);
		}
		snprintf(log, sizeof(log), "%s/%s.log", dir, name);
		if (mkdir_p(ckpt, e))
			return -1;
		char *argv[] = { (char *)R->o->exe, (char *)"syncer", (char *)"--job",
				 R->job, (char *)"--listen", y->addr,
				 (char *)"--http", y->http, (char *)"--checkpoint-dir",
				 ckpt, (char *)"--shard", shard,
				 secure ? (char *)"--tls-dir" : NULL, tdir, NULL };
		if (proc_init(&y->p, name, log, argv, e))
			return -1;
	}
	return 0;
}

static int all_shards_finished(const struct runner *R)
{
	for (int k = 0; k < R->S; k++)
		if (!R->sy[k].finished)
			return 0;
	return 1;
}

/* Long because each process's argv is declared beside the buffers it
 * points into: each pair's, then the evaluator's. */
static int init_procs(struct runner *R, const char *dir, struct err *e)
{
	char log[4200], id[16], xarg[4200];
	char tls[4200], tdir[4300];
	char *listen = R->targets;
	int secure = !R->js->syncer.insecure;
	int ports[66 + 2 * JOB_MAX_SHARDS];
	int M = R->M;
	const char *exe = R->o->exe;

	if (free_ports(ports, M + 1 + 2 * R->S, e))
		return -1;
	snprintf(tls, sizeof(tls), "%s/tls", dir);
	if (secure && run_certs_make(tls, R->js->name, M, R->have_ev, NULL, NULL,
				     e))
		return -1;
	if (init_syncers(R, dir, ports + M + 1, tls, e))
		return -1;
	for (int i = 0; i < M; i++) {
		struct slot *s = &R->slots[i];
		char name[32], sh[64];

		s->http_port = ports[i];
		if (snprintf(s->xdir, sizeof(s->xdir), "%s/learner-%d", R->shm, i) >=
		    (int)sizeof(s->xdir))
			return err_set(e, "run: exchange folder path too long: '%s/learner-%d'",
				       R->shm, i);
		snprintf(xarg, sizeof(xarg), "%s", s->xdir);
		snprintf(id, sizeof(id), "%d", i);
		snprintf(sh, sizeof(sh), "127.0.0.1:%d", s->http_port);
		snprintf(name, sizeof(name), "learner-%d", i);
		snprintf(log, sizeof(log), "%s/%s.log", dir, name);
		if (init_learner(R, i, &s->learner, name, log, xarg, e))
			return -1;
		snprintf(name, sizeof(name), "sidecar-%d", i);
		snprintf(log, sizeof(log), "%s/%s.log", dir, name);
		snprintf(tdir, sizeof(tdir), "%s/learner-%d", tls, i);
		{
			char *argv[] = { (char *)exe, (char *)"sidecar", (char *)"--job", R->job,
					 (char *)"--learner", id, (char *)"--exchange", xarg,
					 (char *)"--syncer", listen, (char *)"--http", sh,
					 secure ? (char *)"--tls-dir" : NULL, tdir, NULL };
			if (proc_init(&s->sidecar, name, log, argv, e))
				return -1;
		}
	}
	if (R->have_ev) {
		struct slot *s = &R->ev;
		char sh[64];

		s->http_port = ports[M];
		if (snprintf(s->xdir, sizeof(s->xdir), "%s/evaluator", R->shm) >=
		    (int)sizeof(s->xdir))
			return err_set(e, "run: exchange folder path too long: "
				       "'%s/evaluator'", R->shm);
		snprintf(log, sizeof(log), "%s/evaluator.log", dir);
		if (init_evaluator(R, &s->learner, log, s->xdir, e))
			return -1;
		snprintf(xarg, sizeof(xarg), "%s", s->xdir);
		snprintf(sh, sizeof(sh), "127.0.0.1:%d", s->http_port);
		snprintf(log, sizeof(log), "%s/sidecar-evaluator.log", dir);
		snprintf(tdir, sizeof(tdir), "%s/evaluator-0", tls);
		{
			char *argv[] = { (char *)exe, (char *)"sidecar", (char *)"--job", R->job,
					 (char *)"--evaluator", (char *)"--learner",
					 (char *)"0", (char *)"--exchange", xarg,
					 (char *)"--syncer", listen, (char *)"--http", sh,
					 secure ? (char *)"--tls-dir" : NULL, tdir, NULL };
			if (proc_init(&s->sidecar, "sidecar-evaluator", log, argv, e))
				return -1;
		}
	}
	return 0;
}

/* ---- starting and stopping ---- */

static int start_slot(struct slot *s, struct err *e)
{
	if (empty_dir(s->xdir, e))
		return -1;
	if (proc_start(&s->learner, e) || proc_start(&s->sidecar, e))
		return -1;
	s->down = 0;
	return 0;
}

static int start_pair(struct runner *R, int i, struct err *e)
{
	return start_slot(&R->slots[i], e);
}

static void stop_everything(struct runner *R)
{
	struct proc *ps[2 * 4096 + 2 + JOB_MAX_SHARDS];
	int n = 0;

	if (R->have_ev) {
		ps[n++] = &R->ev.learner;
		ps[n++] = &R->ev.sidecar;
	}
	/* all at once: one shared grace, the syncer checkpoints meanwhile */
	for (int i = 0; i < R->M; i++) {
		ps[n++] = &R->slots[i].learner;
		ps[n++] = &R->slots[i].sidecar;
	}
	for (int k = 0; k < R->S; k++)
		ps[n++] = &R->sy[k].p;
	proc_stop_all(ps, n, STOP_GRACE);
}

/* The last line of a log, for errors that point at it. */
static void log_tail(const char *path, char *out, size_t n)
{
	char buf[1024];
	int fd = open(path, O_RDONLY);
	off_t end;
	ssize_t got;
	char *p;

	out[0] = 0;
	if (fd < 0)
		return;
	end = lseek(fd, 0, SEEK_END);
	got = pread(fd, buf, sizeof(buf) - 1, end > (off_t)sizeof(buf) - 1
					      ? end - (off_t)sizeof(buf) + 1 : 0);
	close(fd);
	if (got <= 0)
		return;
	buf[got] = 0;
	while (got > 0 && (buf[got - 1] == '\n' || buf[got - 1] == '\r'))
		buf[--got] = 0;
	p = strrchr(buf, '\n');
	/* a glimpse for the failure message: a longer line is cut to fit */
	snprintf(out, n, "%.*s", (int)n - 1, p ? p + 1 : buf);
}

static void fail(struct runner *R, struct proc *p, const char *why)
{
	char st[64], tail[300];

	log_tail(p->log, tail, sizeof(tail));
	snprintf(R->fatal, sizeof(R->fatal), "%s %s (%s): %s [%s]",
		 p->name, why, proc_describe_status(p->status, st, sizeof(st)),
		 tail[0] ? tail : "no output", p->log);
}

/* An exit nobody asked for: counts fast failures; 1 = give up, at once
 * for a version mismatch, which a restart cannot fix (docs/abi.md,
 * Versions). */
static int crashed(struct runner *R, struct proc *p, int *fast)
{
	char st[64];

	if (WIFEXITED(p->status) && WEXITSTATUS(p->status) == CLI_EXIT_MISMATCH) {
		fail(R, p, "refused the other side's versions");
		return 1;
	}

	if (clock_mono() - p->started < FAST_FAIL)
		(*fast)++;
	else
		*fast = 0;
	event(R, "%s exited (%s), restarting", p->name,
	      proc_describe_status(p->status, st, sizeof(st)));
	if (*fast >= FAST_FAILS_MAX) {
		fail(R, p, "keeps failing");
		return 1;
	}
	return 0;
}

static int exited_ok(const struct proc *p)
{
	return WIFEXITED(p->status) && WEXITSTATUS(p->status) == 0;
}

/* ---- the loop's steps ---- */

/* The evaluator pair: either exiting unasked takes the other down, and
 * both start again after CRASH_DELAY (no chaos, no restart counts). */
static void reap_evaluator(struct runner *R, double t)
{
	struct slot *s = &R->ev;
	int l = proc_reap(&s->learner), c = proc_reap(&s->sidecar);
	struct proc *gone = l ? &s->learner : &s->sidecar;

	if (!(l || c) || R->done || s->down || exited_ok(gone))
		return;
	if (crashed(R, gone, &s->fast_fails))
		return;
	proc_signal(l ? &s->sidecar : &s->learner, SIGKILL);
	s->down = 1;
	s->restart_at = t + CRASH_DELAY;
}

static void reap(struct runner *R)
{
	double t = now_of(R);

	for (int k = 0; k < R->S; k++) {
		struct shard_proc *y = &R->sy[k];

		if (!proc_reap(&y->p))
			continue;
		if (R->done || exited_ok(&y->p)) {
			y->finished = 1;
		} else if (y->killed) {
			y->killed = 0;
			y->down = 1;
			y->restart_at = t + R->js->chaos.recovery_seconds;
		} else {
			R->r->syncer_crashes++;
			if (crashed(R, &y->p, &y->fast_fails))
				return;
			y->down = 1;
			y->restart_at = t + CRASH_DELAY;
		}
	}
	for (int i = 0; i < R->M; i++) {
		struct slot *s = &R->slots[i];
		int l = proc_reap(&s->learner), c = proc_reap(&s->sidecar);

		if (l && !(R->done || exited_ok(&s->learner))) {
			/* the pod is gone, whatever the sidecar was doing */
			if (!s->killed && !s->down) {
				R->r->crashes[i]++;
				if (crashed(R, &s->learner, &s->fast_fails))
					return;
			}
			proc_signal(&s->sidecar, SIGKILL);
			if (s->down != 1)
				s->restart_at = t + (s->killed ? R->js->chaos.recovery_seconds
							       : CRASH_DELAY);
			s->down = 1;
		}
		if (c && !s->down) {
			if (R->done || exited_ok(&s->sidecar)) {
				/* finished */
			} else {
				if (!s->killed) {
					R->r->crashes[i]++;
					if (crashed(R, &s->sidecar, &s->fast_fails))
						return;
				}
				s->down = 2;
				s->restart_at = t + (s->killed ? R->js->chaos.recovery_seconds
							       : CRASH_DELAY);
			}
		}
		if (!s->learner.pid && !s->sidecar.pid && !s->down &&
		    exited_ok(&s->learner) && exited_ok(&s->sidecar))
			s->finished = 1;
	}
	if (R->have_ev)
		reap_evaluator(R, t);
}

/* The invariants of a /status, and a sum of them. */
static struct inv_counts inv_of(const struct syncer_status *s)
{
	return (struct inv_counts){ s->merged_steps, s->double_merged_steps,
				    s->repeat_base, s->stale_held, s->stale_merged };
}

static void inv_add(struct inv_counts *a, const struct inv_counts *b)
{
	a->merged_steps += b->merged_steps;
	a->double_merged_steps += b->double_merged_steps;
	a->repeat_base += b->repeat_base;
	a->stale_held += b->stale_held;
	a->stale_merged += b->stale_merged;
}

static void inv_set(struct syncer_status *st, const struct inv_counts *c)
{
	st->merged_steps = c->merged_steps;
	st->double_merged_steps = c->double_merged_steps;
	st->repeat_base = c->repeat_base;
	st->stale_held = c->stale_held;
	st->stale_merged = c->stale_merged;
}

/* The job's invariants over every syncer process it ran, into st. */
static void inv_over_processes(const struct runner *R, struct syncer_status *st)
{
	struct inv_counts c = inv_of(st);

	for (int k = 0; k < R->S; k++)
		inv_add(&c, &R->sy[k].past);
	inv_set(st, &c);
}

static int restart_due(struct runner *R, struct err *e)
{
	double t = now_of(R);

	if (R->done)
		return 0;
	for (int k = 0; k < R->S; k++) {
		struct shard_proc *y = &R->sy[k];

		if (!y->down || t < y->restart_at)
			continue;
		if (proc_start(&y->p, e))
			return -1;
		/* what the last process counted stays counted */
		inv_add(&y->past, &y->last);
		y->last = (struct inv_counts){ 0 };
		inv_set(&y->st, &y->last);
		y->down = 0;
		R->r->syncer_restarts++;
		event(R, "%s restarted (from its newest checkpoint)", y->p.name);
	}
	for (int i = 0; i < R->M; i++) {
		struct slot *s = &R->slots[i];

		if (!s->down || t < s->restart_at)
			continue;
		/* a pair restarts only once both are gone */
		if (s->down == 1 && (s->learner.pid || s->sidecar.pid))
			continue;
		int pair = s->down == 1;

		if (pair ? start_pair(R, i, e) : proc_start(&s->sidecar, e))
			return -1;
		event(R, "%s restarted", pair ? s->learner.name : s->sidecar.name);
		s->down = 0;
		s->killed = 0;
		R->r->restarts[i]++;
	}
	if (R->have_ev && R->ev.down && t >= R->ev.restart_at &&
	    !R->ev.learner.pid && !R->ev.sidecar.pid) {
		if (start_slot(&R->ev, e))
			return -1;
		event(R, "evaluator restarted");
	}
	return 0;
}

static int chaos_kill(void *ctx, const struct chaos_kill *k, struct err *e)
{
	struct runner *R = ctx;
	char name[32];

	(void)e;
	if (k->kind == CHAOS_SYNCER) {
		/* a shard at a time, in turn, or spec.chaos.syncerShard's
		 * (docs/syncer.md, Shards) */
		int sh = R->js->chaos.syncer_shard;
		struct shard_proc *y = &R->sy[sh >= 0 && sh < R->S ? (uint64_t)sh :
					      R->syncer_kills % (uint64_t)R->S];

		R->syncer_kills++;

		y->killed = 1;
		proc_signal(&y->p, SIGKILL);
		if (R->S > 1)
			event(R, "chaos: the kill below is of %s", y->p.name);
	} else {
		struct slot *s = &R->slots[k->index];

		s->killed = 1;
		if (k->kind == CHAOS_LEARNER) {
			/* the pod: learner and sidecar together */
			proc_signal(&s->learner, SIGKILL);
			proc_signal(&s->sidecar, SIGKILL);
		} else {
			proc_signal(&s->sidecar, SIGKILL);
		}
	}
	run_record_kill(R->r, now_of(R), k);
	event(R, "chaos: killed %s (kill %llu)", chaos_kill_name(k, name, sizeof(name)),
	      (unsigned long long)k->seq);
	return 0;
}

static int slot_down(const struct slot *s)
{
	return s->down || !s->learner.pid || !s->sidecar.pid;
}

static void do_chaos(struct runner *R)
{
	unsigned char down[4096];
	struct chaos_view v = { R->M, down, 0 };
	struct chaos_executor x = { chaos_kill, R };

	if (!R->chaos_on || R->done)
		return;
	for (int k = 0; k < R->S; k++)
		v.syncer_down |= R->sy[k].down || !R->sy[k].p.pid;
	for (int i = 0; i < R->M; i++)
		down[i] = (unsigned char)slot_down(&R->slots[i]);
	chaos_run_due(&R->chaos, now_of(R), &v, &x, NULL);
	R->r->kills_skipped = R->chaos.skipped;
}

/* Every shard's /status: how many answered (sy[k].up, .st); -1 when
 * none runs. */
static int poll_shards(struct runner *R)
{
	int n = 0, running = 0;

	for (int k = 0; k < R->S; k++) {
		struct shard_proc *y = &R->sy[k];
		struct syncer_status st;

		y->up = 0;
		if (!y->p.pid)
			continue;
		running++;
		if (run_status_fetch(y->http, 2.0, &st, NULL))
			continue;
		y->last = inv_of(&st);
		syncer_status_move(&y->st, &st);
		y->up = 1;
		n++;
	}
	return running ? n : -1;
}

/* While a shard is down, what the others merged (run.h): the rounds
 * between two polls that both saw the same shard down. */
static void shard_down_rounds(struct runner *R, const struct syncer_status *st,
			      double t)
{
	uint64_t others = st->round - R->sy[st->shard_down < 0 ? 0
						: st->shard_down].st.round;

	if (st->shard_down >= 0 && st->shard_down == R->down_shard &&
	    others >= R->down_others) {
		R->r->rounds_while_shard_down += others - R->down_others;
		R->r->shard_down_seconds += t - R->down_t;
	}
	if (st->shard_down != R->down_shard && st->shard_down >= 0)
		event(R, "%s not answering /status: its fragments wait, the "
		      "other shards' merge on", R->sy[st->shard_down].p.name);
	else if (st->shard_down != R->down_shard)
		event(R, "every syncer shard answering");
	R->down_shard = st->shard_down;
	R->down_others = others;
	R->down_t = t;
}

static void poll_status(struct runner *R)
{
	struct syncer_status st;
	double t = now_of(R);

	if (t - R->last_poll < POLL_EVERY)
		return;
	R->last_poll = t;
	if (poll_shards(R) <= 0)
		return;
	if (R->S == 1) {
		syncer_status_move(&R->r->final, &R->sy[0].st);
		syncer_status_init(&R->sy[0].st);
		inv_over_processes(R, &R->r->final);
	} else {
		struct syncer_status all[JOB_MAX_SHARDS];
		int up[JOB_MAX_SHARDS];

		for (int k = 0; k < R->S; k++) {
			all[k] = R->sy[k].st;
			up[k] = R->sy[k].up;
		}
		syncer_status_init(&st);
		syncer_status_shards(&st, all, up, R->S);
		inv_over_processes(R, &st);
		shard_down_rounds(R, &st, t);
		syncer_status_move(&R->r->final, &st);
	}
	R->r->have_final = 1;
	/* the syncer's own word on where it started: a run folder holding
	 * an earlier run's checkpoints goes on from them (docs/run.md) */
	if (!R->said_start) {
		const char *from = R->r->final.ckpt.resumed_from;

		R->said_start = 1;
		if (!strcmp(from, "checkpoint") || !strcmp(from, "last_good"))
			event(R, "syncer: resumed from its checkpoint of round %llu "
			      "in the run folder (remove its checkpoints/ to start over)",
			      (unsigned long long)R->r->final.ckpt.last_ok_round);
	}
	if (R->r->final.done && !R->done) {
		R->done = 1;
		R->done_at = t;
		R->r->done_at = t;
		event(R, "syncer: job done");
	}
}

static void sample(struct runner *R)
{
	double t = now_of(R);
	struct run_sample s;
	int up = 0;

	if (t - R->last_sample < SAMPLE_EVERY)
		return;
	R->last_sample = t;
	for (int i = 0; i < R->M; i++)
		up += !slot_down(&R->slots[i]);
	s.t = t;
	s.round = R->r->final.round;
	s.tokens = R->r->final.tokens;
	s.eval_loss = R->r->final.eval_loss;
	s.up = up;
	s.connected = R->r->final.learners_connected;
	s.tokens_per_s = NAN;
	if (t - R->rate_t >= 5 || R->rate_t == 0) {
		if (R->rate_t > 0)
			s.tokens_per_s = (double)(s.tokens - R->rate_tokens) / (t - R->rate_t);
		R->rate_t = t;
		R->rate_tokens = s.tokens;
	} else if (R->r->nsamples) {
		s.tokens_per_s = R->r->samples[R->r->nsamples - 1].tokens_per_s;
	}
	run_record_sample(R->r, &s);
}

static int all_finished(const struct runner *R)
{
	for (int i = 0; i < R->M; i++)
		if (R->slots[i].learner.pid || R->slots[i].sidecar.pid)
			return 0;
	return !R->have_ev || (!R->ev.learner.pid && !R->ev.sidecar.pid);
}

/* After done, every shard exited, or is down: one killed as the job
 * ended is not started again (restart_due) and gives no evaluation. */
static int all_shards_ended(const struct runner *R)
{
	for (int k = 0; k < R->S; k++)
		if (!R->sy[k].finished && !R->sy[k].down)
			return 0;
	return 1;
}

/* The syncer's /status holds an evaluation of the last round. */
static int final_eval_in(const struct runner *R)
{
	const struct syncer_status *f = &R->r->final;

	return f->nevals && f->evals[f->nevals - 1].round >= f->round;
}

/*
 * After done the learners and sidecars end at once, and the syncer makes
 * its last evaluation, then exits (its rounds are over; a large
 * evalTokens makes it take a while: a run stopped before it reported the
 * loss of an earlier round as the final one). Waits for the learners at
 * most DONE_GRACE, for that evaluation (or the syncer's exit) at most
 * DONE_EVAL_WAIT.
 */
static int done_waited(struct runner *R, double t)
{
	double waited = t - R->done_at;

	if (!all_finished(R) && waited <= DONE_GRACE)
		return 0;
	if (all_shards_ended(R) || final_eval_in(R) || waited > DONE_EVAL_WAIT)
		return 1;
	if (!R->said_eval_wait) {
		R->said_eval_wait = 1;
		event(R, "syncer: waiting for its last evaluation");
	}
	return 0;
}

static int wait_ready(struct runner *R, struct err *e)
{
	double end = clock_mono() + READY_TIMEOUT;
	struct err fe = { "" };

	for (int k = 0; k < R->S; k++) {
		struct shard_proc *y = &R->sy[k];

		for (;;) {
			struct syncer_status st;

			if (*R->stop)
				return err_set(e, "interrupted");
			if (proc_reap(&y->p)) {
				char tail[300], s[64];
				log_tail(y->p.log, tail, sizeof(tail));
				return err_set(e, "%s exited at start (%s): %s [%s]",
					       y->p.name,
					       proc_describe_status(y->p.status, s,
								    sizeof(s)),
					       tail, y->p.log);
			}
			if (!run_status_fetch(y->http, 1.0, &st, &fe)) {
				syncer_status_move(&y->st, &st);
				break;
			}
			if (clock_mono() > end)
				return err_set(e, "%s not answering /status within "
					       "%.0f s: %s", y->p.name,
					       READY_TIMEOUT, fe.msg);
			sleep_seconds(0.1);
		}
	}
	R->last_poll = -1;
	poll_status(R);
	return 0;
}

/* After the syncer: its ready answer, the pairs, the evaluator, and the
 * events that say so. */
static int start_job(struct runner *R, const char *dir, struct err *e)
{
	const struct job_spec *js = R->js;

	for (int k = 0; k < R->S; k++)
		event(R, "%s started on %s (http %s), log %s", R->sy[k].p.name,
		      R->sy[k].addr, R->sy[k].http, R->sy[k].p.log);
	if (js->syncer.insecure)
		event(R, "warning: spec.syncer.insecure: plaintext gRPC, no certificates");
	else
		event(R, "mutual TLS: the job's CA and certificates in %s/tls", dir);
	if (wait_ready(R, e))
		return -1;
	for (int i = 0; i < R->M; i++)
		if (start_pair(R, i, e))
			return -1;
	event(R, "%d learner + sidecar pairs started; exchange folders in %s", R->M, R->shm);
	if (R->have_ev) {
		if (start_slot(&R->ev, e))
			return -1;
		event(R, "evaluator + sidecar started, log %s", R->ev.learner.log);
	}
	if (R->chaos_on)
		event(R, "chaos on: %s every %.0f s on average, from %.0f s, at most %d down",
		      js->chaos.schedule == CHAOS_POISSON ? "poisson" : "interval",
		      js->chaos.schedule == CHAOS_POISSON ? js->chaos.mtbf_seconds
							  : js->chaos.interval_seconds,
		      js->chaos.start_after_seconds, js->chaos.max_down);
	return 0;
}

/* Each tick: reap, restarts, chaos, /status, the view; until the job is
 * done (0), or a signal, a failure or the timeout (-1; *e and the
 * record's outcome say which). */
static int supervise(struct runner *R, struct err *e)
{
	const struct run_opts *o = R->o;
	struct run_record *r = R->r;
	int rc = -1;

	for (;;) {
		double t;

		if (*R->stop) {
			snprintf(r->outcome, sizeof(r->outcome), "interrupted");
			err_set(e, "interrupted");
			break;
		}
		reap(R);
		if (R->fatal[0]) {
			/* the outcome and the error are message fields: cut to fit */
			snprintf(r->outcome, sizeof(r->outcome), "failed: %.*s",
				 (int)sizeof(r->outcome) - 9, R->fatal);
			err_set(e, "%.*s", (int)sizeof(e->msg) - 1, R->fatal);
			break;
		}
		if (restart_due(R, e)) {
			snprintf(r->outcome, sizeof(r->outcome), "failed: %.*s",
				 (int)sizeof(r->outcome) - 9, e->msg);
			break;
		}
		do_chaos(R);
		poll_status(R);
		sample(R);
		if (!o->quiet)
			run_view_update(&R->view, r, now_of(R), 10);
		t = now_of(R);
		if (R->done && done_waited(R, t)) {
			snprintf(r->outcome, sizeof(r->outcome), "done");
			rc = 0;
			break;
		}
		if (!R->done && all_shards_finished(R)) {
			snprintf(r->outcome, sizeof(r->outcome), "done (syncer exited 0)");
			rc = 0;
			break;
		}
		if (o->timeout > 0 && t > o->timeout) {
			snprintf(r->outcome, sizeof(r->outcome), "timed out after %.0f s",
				 o->timeout);
			err_set(e, "timed out after %.0f s", o->timeout);
			break;
		}
		sleep_seconds(TICK);
	}
	return rc;
}

/* ---- the whole job ---- */

static void runner_release(struct runner *R)
{
	for (int k = 0; k < R->S; k++) {
		proc_release(&R->sy[k].p);
		syncer_status_release(&R->sy[k].st);
	}
	if (R->have_ev) {
		proc_release(&R->ev.learner);
		proc_release(&R->ev.sidecar);
	}
	for (int i = 0; i < R->M; i++) {
		proc_release(&R->slots[i].learner);
		proc_release(&R->slots[i].sidecar);
	}
	free(R->slots);
	if (R->events)
		fclose(R->events);
}

/* The job's life in order: set up, start the syncer and the pairs,
 * supervise, then stop, report and clean up at one label. */
int run_job(const struct job_spec *js, const struct run_opts *o,
	    const char *dir, struct run_record *r,
	    const volatile sig_atomic_t *stop, struct err *e)
{
	struct runner R;
	char path[4200];
	int rc = -1;

	memset(&R, 0, sizeof(R));
	R.js = js;
	R.S = js->syncer.shards;
	R.down_shard = -1;
	for (int k = 0; k < R.S; k++)
		syncer_status_init(&R.sy[k].st);
	R.o = o;
	R.stop = stop;
	R.r = r;
	R.M = js->learners.replicas;
	R.have_ev = js->evaluator.command.n > 0;
	R.view.tty = isatty(1);
	if (R.M > 4096)
		return err_set(e, "run: at most 4096 learners locally");
	if (run_record_init(r, js, o->job_file, dir, e))
		return -1;
	if (!realpath(o->job_file, R.job)) {
		err_set(e, "run: cannot resolve '%s': %s", o->job_file, strerror(errno));
		return -1;
	}
	R.slots = calloc((size_t)R.M, sizeof(*R.slots));
	if (!R.slots)
		return err_set(e, "run: out of memory");
	snprintf(R.shm, sizeof(R.shm), "%s/ddiloco-%s-%d",
		 access("/dev/shm", W_OK) ? "/tmp" : "/dev/shm", js->name, (int)getpid());
	if (mkdir_p(dir, e) || empty_dir(R.shm, e) || init_procs(&R, dir, e))
		goto out;
	snprintf(path, sizeof(path), "%s/events.log", dir);
	R.events = fopen(path, "a");

	R.chaos_on = js->chaos.enabled && !o->no_chaos;
	chaos_init(&R.chaos, &js->chaos, R.M);
	if (!R.chaos_on)
		chaos_init(&R.chaos, &(struct job_chaos){ .enabled = 0 }, R.M);

	R.t0 = clock_mono();
	for (int k = 0; k < R.S; k++)
		if (proc_start(&R.sy[k].p, e))
			goto stop;
	if (start_job(&R, dir, e))
		goto stop;
	rc = supervise(&R, e);
stop:
	if (!r->outcome[0] && *stop)
		snprintf(r->outcome, sizeof(r->outcome), "%.*s",
			 (int)sizeof(r->outcome) - 1, e->msg);
	else if (!r->outcome[0])
		snprintf(r->outcome, sizeof(r->outcome), "failed: %.*s",
			 (int)sizeof(r->outcome) - 9, e->msg);
	stop_everything(&R);
	/* one last look at /status is gone with the syncer; keep the last poll */
	sample(&R);
	if (!o->quiet) {
		run_view_update(&R.view, r, now_of(&R), 0);
		run_view_end(&R.view);
	}
	r->success = rc == 0;
out:
	r->seconds = R.t0 > 0 ? now_of(&R) : 0;
	if (R.shm[0])
		rm_tree(R.shm);
	runner_release(&R);
	return rc;
}
