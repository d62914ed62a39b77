/*
 * syncer_int: what the syncer's own files share (core.c: state, merges,
 * accounting, checkpoints, evaluation; stream.c: gRPC streams; status.c:
 * HTTP). Nothing outside syncer/ includes it.
 *
 * Threads: the run loop (stream.c) owns every change and takes `mu` while
 * it makes one; the HTTP thread takes `mu` to read; the evaluation thread
 * works on its own copy of Θ and hands the loss back under `mu`.
 */
#ifndef DDILOCO_SYNCER_INT_H
#define DDILOCO_SYNCER_INT_H

#include <pthread.h>
#include <stdint.h>

#include <grpc/grpc.h>

#include "common/httpd.h"
#include "syncer/ckpt.h"
#include "syncer/outer.h"
#include "syncer/round.h"
#include "syncer/syncer.h"

#define SYNCER_MAX_MSG (64u << 20)   /* gRPC message limit, both ways */

struct conn;

/* One accepted answer waiting for its round's merge. */
struct answer {
	struct answer *next;
	int learner;
	uint64_t steps, tokens;
	double weight;
	float *delta;        /* NULL for an empty answer (steps = 0) */
	double *sq;          /* squared norm per segment */
};

struct learner {
	struct conn *conn;   /* NULL: no open stream */
	int joined;          /* Welcome + every fragment queued */
	int seen;            /* ever said hello */
	uint64_t step, tokens, incarnation;
	uint64_t step_max;   /* highest step it reported since we started,
			      * over its restarts too: where a restart resumes */
	double step_time, train_loss, last_seen;   /* last_seen: mono clock */
};

struct eval_job {
	pthread_t thread;
	int started, busy, quit, have_result;
	pthread_cond_t cv;
	float *params;               /* flat copy of Θ */
	uint64_t round, tokens;
	double time, loss;
	char error[256];
};

struct syncer {
	const struct syncer_params *prm;
	const struct job_spec *js;
	const struct frag_table *ft;
	int P, M;
	size_t nparams;
	size_t *frag_off;            /* fragment p starts at theta + frag_off[p] */
	struct outer_seg **segs;     /* per fragment, its tensors */
	float *theta, *mom, *scratch, *flat;
	uint64_t *versions;
	/* per fragment, the version this process resumed at: an answer
	 * trained from an older base predates it (0 when started afresh) */
	uint64_t *resumed_at;
	grpc_slice *upd;             /* packed Update per fragment, current */
	int *upd_valid;
	struct syncer_round rs;
	struct answer **answers;     /* per round slot */
	struct learner *learners;

	/* accounting; the checkpointed part mirrors struct syncer_ckpt */
	struct syncer_ckpt acc;      /* counters, evals; theta/momentum unused */
	double t0, elapsed_base, done_elapsed;
	double quorum_wait_sum, grace_sum, merge_sum;
	uint64_t quorum_count, merge_count;
	int done, ready, stopping;
	double last_loop;            /* mono time of the last loop turn */
	int learners_connected;

	pthread_mutex_t mu;
	struct eval_job ev;
	struct httpd *http;
};

/* core.c */
int core_init(struct syncer *s, const struct syncer_params *p, struct err *e);
void core_release(struct syncer *s);
double core_elapsed(const struct syncer *s, double now);
double core_uptime(const struct syncer *s, double now);
void core_note_joined(struct syncer *s, double now);
double core_goodput(const struct syncer *s, double now);
int core_checkpoint(struct syncer *s, double now, struct err *e);
/* Runs the merge of round slot; broadcasts through stream_broadcast_update. */
void core_merge(struct syncer *s, int slot, double now);
void core_free_answers(struct syncer *s, int slot);
/* Evaluation: start one (if the thread is idle), collect a finished one. */
void core_eval_start(struct syncer *s, double now);
void core_eval_collect(struct syncer *s);
int core_eval_sync(struct syncer *s, double now);
void core_eval_stop(struct syncer *s);
/* Whether the budget is reached (sets s->done the first time). */
int core_check_budget(struct syncer *s, double now);
/* A packed Update for fragment p at its current version (cached). */
grpc_slice core_update_slice(struct syncer *s, int p, uint64_t round);

/* stream.c */
void stream_broadcast_update(struct syncer *s, int p, grpc_slice msg,
			     size_t payload_bytes);

/* status.c */
int status_http(void *ctx, const char *path, struct buf *body,
		const char **content_type);

#endif
