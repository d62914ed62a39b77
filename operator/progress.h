/*
 * progress: the syncers' /status read off the workers (docs/operator.md,
 * Progress). A pass says which job's shards it wants read
 * (progress_want, with their URLs) and takes what was read since it last
 * took (progress_take): a worker never waits on a syncer, however many
 * shards are unreachable. One thread reads each job asked for every
 * `every` seconds, its shards one after the other with `timeout` each;
 * a job no pass asked for in PROGRESS_FORGET_S is forgotten. The reads
 * are counted in the metrics' progress_reads and progress_errors.
 */
#ifndef DDILOCO_PROGRESS_H
#define DDILOCO_PROGRESS_H

#include <curl/curl.h>
#include <pthread.h>
#include <stdint.h>

#include "common/syncer_status.h"
#include "operator/metrics.h"
#include "operator/workqueue.h"

#define PROGRESS_FORGET_S 60.0
#define PROGRESS_URL_MAX 512

struct progress_job;

struct progress {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct progress_job *head;
	int stop, started;
	pthread_t thread;
	CURL *http;
	struct op_metrics *metrics;   /* or NULL */
	uint64_t reads;               /* reads stored, of every job: a read's
				       * number is above any before it */
	double every, timeout;
};

/* Starts the reader thread; -1 when it cannot. */
int progress_start(struct progress *r, struct op_metrics *m, double every,
		   double timeout);
/* Stops it (a read under way ends within its timeout) and frees all. */
void progress_stop(struct progress *r);

/* Job key's S shards (at most JOB_MAX_SHARDS) are wanted at url[0..S);
 * a new S or URL starts the job's reads over. Never waits on a read. */
void progress_want(struct progress *r, const char *key, int S,
		   const char (*url)[PROGRESS_URL_MAX]);

/*
 * What was read of job key since the read numbered *seen: 1 with st[i]
 * (written over, not released first: the caller releases them), up[i]
 * whether shard i
 * answered, and the first error (why, n bytes) of a shard that did not,
 * *seen the read's number; 0 when nothing newer came (st untouched).
 */
int progress_take(struct progress *r, const char *key, int S,
		  struct syncer_status *st, int *up, uint64_t *seen,
		  char *why, size_t n);

#endif
