/*
 * ckptw: the checkpoint writer thread (docs/syncer.md, Checkpoints). The
 * run loop hands it a checkpoint and goes on; the thread writes the file
 * while the rounds, /healthz and /status go on, so a write as long as the
 * disk makes it never stops the syncer.
 *
 * The checkpoint is the state at the moment it was handed over. The
 * small part (counters, versions, learners, evaluations) is copied then;
 * Θ and the momentum are not: the thread copies one fragment at a time
 * into a buffer of its own and writes that, and the run loop, before it
 * changes fragment p, calls ckptw_touch — which copies θ_p and its
 * momentum aside first when the thread has not taken them yet
 * (copy-on-write). The extra memory is one fragment plus the fragments
 * merged during a write, not a second model.
 *
 * One checkpoint is written at a time: one handed over while another is
 * being written is not taken (ckptw_submit says so), and the next one is
 * the retry.
 */
#ifndef DDILOCO_SYNCER_CKPTW_H
#define DDILOCO_SYNCER_CKPTW_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "syncer/ckpt.h"

/* What the writes of this process came to (ckptw_outcome). */
struct ckptw_outcome {
	int writing;                 /* a write is under way */
	uint64_t writing_round;      /* its round */
	uint64_t written, failures, skipped;
	int failing;                 /* the last write failed */
	int have_ok;
	uint64_t last_ok_round;
	double last_seconds;         /* the last good write took */
	double last_ok_wall;         /* and ended at (wall clock, s) */
	char error[sizeof(((struct err *)0)->msg)];
};

struct ckpt_writer {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int running, stop;
	const char *dir;
	int keep;
	/* the live state, the run loop's: P fragments, fragment p's floats
	 * at off[p] .. off[p + 1] of theta and mom */
	uint32_t P;
	const size_t *off;
	const float *theta, *mom;
	/* the checkpoint in hand (busy): everything but Θ and momentum */
	int busy;
	uint64_t seq;                /* checkpoints taken so far */
	struct syncer_ckpt head;
	uint8_t *taken;              /* per fragment: 0, 1 θ_p taken, 2 both */
	float **aside;               /* per fragment: θ_p then m_p, or NULL */
	float *buf;                  /* the thread's copy of one fragment */
	struct ckptw_outcome out;
	uint64_t seq_done;           /* checkpoints finished (ok or not) */
	int last_rc;
	/* where bytes go to disk (ckpt.h, struct ckpt_out) */
	int (*write)(void *ctx, int fd, const void *buf, size_t n);
	void *write_ctx;
	struct ckpt_known known;     /* the thread's only */
};

/* Starts the thread over the live state; head's shape (P, N, learners)
 * is the checkpoints'. */
int ckptw_start(struct ckpt_writer *w, const char *dir, int keep,
		uint32_t P, const size_t *off, const float *theta,
		const float *mom, uint32_t nlearners, struct err *e);
/* Waits for a write under way, then stops the thread. */
void ckptw_stop(struct ckpt_writer *w);

/*
 * Hands over the checkpoint of c (its theta and momentum are not read:
 * the live state is). Returns 1 when taken, 0 when a write is under way
 * (counted skipped). With wait, waits for a write under way first and
 * then for this one: returns its outcome, 0 written or -1 with e.
 */
int ckptw_submit(struct ckpt_writer *w, const struct syncer_ckpt *c,
		 int wait, struct err *e);
/* Until no write is under way. */
void ckptw_wait(struct ckpt_writer *w);
/* Whether a write is under way. */
int ckptw_busy(struct ckpt_writer *w);
/* Fragment p of the live state is about to change (run loop). */
void ckptw_touch(struct ckpt_writer *w, uint32_t p);
/* A copy of the outcome so far. */
void ckptw_outcome(struct ckpt_writer *w, struct ckptw_outcome *o);

#endif
