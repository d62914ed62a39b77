/*
 * jobmem: what the operator remembers of each job between passes, in a
 * table keyed by the job key "ns/name" and the job's uid: each learner's
 * and the evaluator's backoff, restarts and expectations (struct
 * learner_mem, reconcile's), the last progress read (and a sharded
 * job's last /status of each shard), what <job>-tls was last seen to
 * be, the syncer container's restarts and the Events sent lately.
 *
 * The table's lock guards its list only. An entry is used by the one
 * worker that holds its key (the work queue hands a key to one worker at
 * a time) and needs no lock of its own.
 */
#ifndef DDILOCO_JOBMEM_H
#define DDILOCO_JOBMEM_H

#include <pthread.h>

#include "common/syncer_status.h"
#include "operator/reconcile.h"
#include "operator/workqueue.h"

/* the syncer restarts remembered: more than any sane syncerRestartLimit */
#define JOBMEM_RESTARTS_KEPT 64
#define JOBMEM_EVENTS_KEPT 8
/* "reason: message" of an Event reconcile asked for */
#define JOBMEM_EVENT_TEXT (sizeof(((struct rc_action *)0)->reason) + 2 + \
			   sizeof(((struct rc_action *)0)->message))
/*
 * A pass whose status write lost a race (409) decides again from the same
 * cache and would say the same thing twice: an Event identical to one
 * sent in the last JOBMEM_EVENT_DEDUPE seconds is dropped.
 */
#define JOBMEM_EVENT_DEDUPE 30.0

struct jobmem {
	char key[WQ_KEY_MAX];
	char uid[64];
	int n;
	struct learner_mem *learners;
	struct learner_mem evaluator; /* <job>-evaluator-0 (spec.evaluator) */
	struct obs_progress progress;
	uint64_t progress_seen;       /* the last read taken (progress.h) */
	/* a sharded job's last /status of each shard that answered
	 * (shard_last_n of them, or NULL): one that stops answering is
	 * aggregated from it (docs/syncer.md, Shards) */
	struct syncer_status *shard_last;
	int shard_last_n;
	/* the last claim resize the API refused: why ("" none), which
	 * shard's, the bytes asked (reconcile.h, CheckpointStorage) */
	char resize_refused[256];
	/* caches_spec_hash of each child kept as the job asks, as this
	 * operator last wrote it or first found it (0: not yet): another
	 * one is a drift (docs/operator.md, Drift) */
	uint64_t written_hash[DRIFT_N];
	int resize_refused_shard;
	double resize_refused_bytes;
	/* <job>-tls as last read or created (rc_input.tls), when (monotonic),
	 * and whose it is when not this job's; tls_known 0: read it */
	int tls, tls_known;
	double tls_at;
	char tls_reason[64], tls_message[512];   /* cut to a condition's 255 */
	/* the syncer container's restarts (docs/operator.md, Failure
	 * policy): for each shard's pod, the pod they were counted on and
	 * its last restartCount; when each new one was seen, any shard's
	 * (a ring, newest at restart_n - 1) */
	char syncer_uid[JOB_MAX_SHARDS][64];
	long syncer_restart_count[JOB_MAX_SHARDS];
	double restart_at[JOBMEM_RESTARTS_KEPT];
	int restart_n;
	char syncer_last_exit[128];
	struct {
		char text[JOBMEM_EVENT_TEXT];
		double at;
	} sent[JOBMEM_EVENTS_KEPT];   /* recent Events */
	int nsent;
	struct jobmem *next;
};

struct jobmem_table {
	pthread_mutex_t mu;
	struct jobmem *head;
};

void jobmem_table_init(struct jobmem_table *t);
/* Frees every entry. */
void jobmem_table_release(struct jobmem_table *t);

/*
 * The memory of job key with n learners: found, made, or started over
 * when uid or n changed (a new job under an old name, or another size).
 * NULL when out of memory.
 */
struct jobmem *jobmem_get(struct jobmem_table *t, const char *key,
			  const char *uid, int n);
/* The job is gone: its memory with it. */
void jobmem_drop(struct jobmem_table *t, const char *key);
/* The last /status of each of S shards (kept across passes, started
 * over when S changes); NULL when out of memory. */
struct syncer_status *jobmem_shards(struct jobmem *m, int S);

/*
 * The syncer container's restartCount on pod uid of shard (0 when
 * unsharded; one out of [0, JOB_MAX_SHARDS) is ignored), seen at now
 * (wall seconds), with why it last ended ("" when it did not). On a pod
 * of another uid (deleted, evicted, a chaos kill: a disruption) the
 * count is taken as the base, not counted; on the same pod each restart
 * past the last count is remembered with now. The shards' restarts
 * count together.
 */
void jobmem_syncer_seen(struct jobmem *m, int shard, const char *uid,
			long restarts, const char *why, double now);
/* The syncer restarts seen in the last window seconds. */
int jobmem_syncer_restarts(const struct jobmem *m, double now, int window);

/*
 * 1 when the Event "reason: msg" was sent less than JOBMEM_EVENT_DEDUPE
 * seconds ago (now: monotonic seconds); else 0, and it is remembered as
 * sent now.
 */
int jobmem_event_repeated(struct jobmem *m, const char *reason,
			  const char *msg, double now);

#endif
