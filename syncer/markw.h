/*
 * markw: the high-water mark's writer thread (docs/syncer.md, The
 * high-water mark). The mark says which round numbers and versions may
 * have been handed out; a round may be pulled only once a mark covering
 * it is on disk. The run loop asks for the next mark ahead of need
 * (markw_want) and goes on; this thread writes it, so a slow or failing
 * disk never stops the loop, /healthz or /status: rounds past the mark
 * on disk wait for it (round.h, covered) while the learners train on.
 *
 * A failed write is kept (error, failures) and tried again every
 * MARKW_RETRY seconds until one succeeds; the newest mark asked for is
 * the one written.
 */
#ifndef DDILOCO_SYNCER_MARKW_H
#define DDILOCO_SYNCER_MARKW_H

#include <pthread.h>
#include <stdint.h>

#include "common/err.h"
#include "syncer/ckpt.h"

#define MARKW_RETRY 1.0

/* What the writes of this process came to (markw_outcome). */
struct markw_outcome {
	uint64_t covered;            /* rounds up to this are on disk */
	uint64_t wanted;             /* the newest mark asked for */
	uint64_t written, failures;
	int failing;                 /* the last write failed */
	int writing;                 /* a write is under way */
	double writing_seconds;      /* how long it has taken so far */
	char error[sizeof(((struct err *)0)->msg)];
};

struct markw {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int running, stop;
	const char *dir;
	uint64_t fingerprint;
	uint32_t P;
	uint64_t *want_versions;     /* P, the mark asked for */
	uint64_t *buf;               /* P, the thread's copy */
	double writing_since;        /* clock_mono() */
	struct markw_outcome out;
	/* how a mark reaches disk: syncer_hwm_write, or a test's, set after
	 * markw_start and before the first markw_want */
	int (*write)(const char *dir, uint64_t fingerprint,
		     const struct syncer_hwm *h, struct err *e);
};

/* Starts the thread for P fragments; `covered` is the mark already on
 * disk (0: none). */
int markw_start(struct markw *w, const char *dir, uint64_t fingerprint,
		uint32_t P, uint64_t covered, struct err *e);
/* Waits for a write under way, then stops the thread. */
void markw_stop(struct markw *w);
/* Asks for a mark of `rounds` and versions[q] + add (P of them); one
 * asked for before and not yet written is replaced. Never waits. */
void markw_want(struct markw *w, uint64_t rounds, const uint64_t *versions,
		uint64_t add);
/* Rounds up to this may be pulled. */
uint64_t markw_covered(struct markw *w);
/* The newest mark asked for (covered when none is pending). */
uint64_t markw_wanted(struct markw *w);
void markw_outcome(struct markw *w, struct markw_outcome *o);

#endif
