/*
 * budgetw: the job's budget as it is now (docs/syncer.md, The budget).
 * spec.budget may change while a job runs: the operator writes the new
 * spec into the job's ConfigMap and the kubelet swaps the mounted file;
 * `ddiloco run` users edit their job file. The syncer reads the budget
 * again from its --job file when the file's identity (device, inode,
 * size, mtime) changed, at most once in BUDGETW_EVERY seconds. Only the
 * budget is taken: every other field of a running job waits for the
 * next start. A file that no longer loads keeps the budget in force and
 * is said once. Nothing here knows the core.
 */
#ifndef DDILOCO_SYNCER_BUDGETW_H
#define DDILOCO_SYNCER_BUDGETW_H

#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "common/jobspec.h"

struct buf;

#define BUDGETW_EVERY 2.0

struct budgetw {
	const char *path;            /* NULL: nothing to watch */
	struct job_budget budget;    /* in force */
	double next;                 /* monotonic: the next look */
	/* the file last read */
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
	uint64_t changes;            /* budgets taken after the start */
	int failing;                 /* the file last seen did not load */
};

/* Starts with the budget the syncer started with, b, read from path. */
void budgetw_init(struct budgetw *w, const char *path,
		  const struct job_budget *b, double now);
/* Looks again when due: 1 when another budget is in force now. */
int budgetw_poll(struct budgetw *w, double now);
void budgetw_metrics(const struct budgetw *w, struct buf *b);

#endif
