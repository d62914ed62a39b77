/*
 * status: a DecoupledTrainingJob's status subresource, read back into
 * reconcile's types and built again from its decisions. Pure functions of
 * their arguments; the PUT is the operator's (apply.c).
 *
 *   status.conditions  <->  struct condition[COND_N]
 *   status.progress    <--  struct obs_progress (also from the syncer's
 *                           /status, read by common/syncer_status)
 *   status.learners    <--  reconcile's counts, each learner's restarts
 *   status.shards,     <--  the syncer's shards, up and total, the first
 *   status.shardsReady      down (docs/operator.md, Shards)
 *   status.chaos       <--  chaos_ctl_status, else kept as it was
 */
#ifndef DDILOCO_STATUS_H
#define DDILOCO_STATUS_H

#include <jansson.h>

#include "common/syncer_status.h"
#include "operator/reconcile.h"

/* status.conditions into conds (COND_N entries; unknown types skipped). */
void status_read_conditions(json_t *status, struct condition *conds);

/*
 * Progress from status.progress as written before (round, tokens, loss,
 * goodput, uptime, elapsed, done; eval_loss is read too, ahead of loss):
 * *p filled and p->have set.
 */
void status_read_progress(json_t *j, struct obs_progress *p);

/* Progress from the syncer's /status; a figure it did not give reads 0. */
void status_progress_from_syncer(const struct syncer_status *s,
				 struct obs_progress *p);

struct status_input {
	const struct rc_output *out;  /* reconcile's decisions */
	long long generation;         /* written as observedGeneration */
	const struct learner_mem *learners;
	int nlearners;
	const struct obs_progress *progress;
	int syncer_ready;
	json_t *chaos;                /* status.chaos to write (taken), or NULL */
	json_t *old;                  /* the status read: its chaos is kept
				       * when chaos is NULL */
	/* the syncer's shards: how many, how many are up, the first down
	 * (-1: none); status.shards and status.shardsReady "up/total" */
	int shards, shards_up, shard_down;
};

/* The status to write (a new reference). */
json_t *status_build(const struct status_input *in);

/*
 * Whether a built status is worth a write over the one read (docs/
 * operator.md, Status): 1 when anything but status.progress differs, or
 * progress appears, ends (done) or gets its first loss, or its updateTime
 * moved by progress_every seconds or more; 0 else (an unchanged status,
 * or progress that only ticked since the last write).
 */
int status_should_write(json_t *old, json_t *built, double progress_every);

#endif
