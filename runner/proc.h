/*
 * proc: one supervised child process of `ddiloco run`.
 *
 * Each child is the leader of its own process group (so a kill reaches
 * whatever it started), has SIGKILL as its parent-death signal (so it
 * cannot outlive a runner that was killed itself), reads /dev/null and
 * appends stdout and stderr to its log file. argv[0] without a '/' is
 * looked up in PATH; proc_setenv adds variables to the runner's own. Nothing here blocks except
 * proc_stop, which waits at most its grace period plus a short reap.
 */
#ifndef DDILOCO_PROC_H
#define DDILOCO_PROC_H

#include <sys/types.h>

#include "common/err.h"

#define PROC_MAX_ARGS 80
#define PROC_MAX_ENV  8

struct proc {
	char name[32];          /* "syncer", "learner-2", ... */
	char log[4096];         /* log file, appended across restarts */
	char *argv[PROC_MAX_ARGS + 1];   /* owned copies, NULL-terminated */
	char *env[PROC_MAX_ENV + 1];     /* "NAME=value" over the runner's
					  * environment; NULL-terminated */
	pid_t pid;              /* 0 when not running */
	int status;             /* wait status of the last exit */
	double started;         /* clock_mono of the last start */
	int starts;             /* times started */
};

/* Sets name, log and a copy of argv (at most PROC_MAX_ARGS); not started. */
int proc_init(struct proc *p, const char *name, const char *log,
	      char *const argv[], struct err *e);
void proc_release(struct proc *p);
/* Adds NAME=value to the child's environment (at most PROC_MAX_ENV). */
int proc_setenv(struct proc *p, const char *name, const char *value,
		struct err *e);

/* Starts the child (p must not be running). */
int proc_start(struct proc *p, struct err *e);
/* Sends sig to the child's process group; 0 if it was running. */
int proc_signal(struct proc *p, int sig);
/*
 * Non-blocking: if the child has exited, reaps it, kills what is left of
 * its group, records the status, sets pid to 0 and returns 1; else 0.
 */
int proc_reap(struct proc *p);
/* SIGTERM to the group, up to grace seconds for it to exit, then SIGKILL. */
void proc_stop(struct proc *p, double grace);
/* Stops many at once: SIGTERM to all, one shared grace, SIGKILL to the rest. */
void proc_stop_all(struct proc **ps, int n, double grace);

/* "exit 0", "exit 3", "killed by SIGKILL". */
const char *proc_describe_status(int status, char *buf, int n);

#endif
