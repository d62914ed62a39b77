/*
 * persist: what the syncer keeps on its volume and what it knows of it
 * (docs/syncer.md, Checkpoints) — the rolling checkpoints, the last good
 * one, the high-water mark of round numbers and versions handed out.
 * The file formats are ckpt.h's; this part holds the state around them:
 * whether writes fail, what this process resumed from, the rounds the
 * mark covers. The core builds each struct syncer_ckpt it saves and
 * copies a loaded one into its state; nothing here knows the core.
 */
#ifndef DDILOCO_SYNCER_PERSIST_H
#define DDILOCO_SYNCER_PERSIST_H

#include <jansson.h>
#include <stdint.h>

#include "common/err.h"
#include "syncer/ckpt.h"
#include "syncer/ckptw.h"
#include "syncer/markw.h"

struct buf;

/* The high-water mark covers at least this many rounds from the one
 * that asks for it, or the rounds of PERSIST_MARK_SECONDS at the pace
 * the rounds start (at most PERSIST_MARK_MAX), and is asked for again
 * when half of them are left (persist_mark): one write every few
 * seconds however fast rounds go. */
#define PERSIST_HWM_ROUNDS 16
#define PERSIST_MARK_SECONDS 4.0
#define PERSIST_MARK_MAX 65536
/* An evaluation loss at most this fraction above the best one so far
 * marks its round's checkpoint the last good one. */
#define PERSIST_GOOD_MARGIN 0.10

struct persist {
	const char *dir;
	uint64_t fingerprint;
	uint32_t P, M;
	uint64_t nparams;
	/* the writes of this process, by a thread of their own (ckptw.h) */
	struct ckpt_writer w;
	int loaded;                  /* a checkpoint was loaded at start */
	uint64_t loaded_round;
	double loaded_wall;          /* when it was written (wall clock, s) */
	/* the volume: a checkpoint's size × PERSIST_FILES against what is
	 * free plus what this model's files hold; fits = 0 when it cannot
	 * hold them (then no learner is let in: docs/syncer.md,
	 * Checkpoints). free_bytes −1: the volume could not be asked. */
	uint64_t needed_bytes;
	int64_t free_bytes;
	int fits;
	double room_next;            /* when not: the next look (persist_room_again) */
	/* what this process started from: "new", "checkpoint",
	 * "last_good", or "seed" when none loaded although the
	 * high-water mark says rounds were handed out before */
	const char *resumed_from;
	/* the last good checkpoint kept by this process */
	int good_have;
	uint64_t good_round;
	double good_loss;
	/* resumed from the last good checkpoint: the rounds from it to the
	 * newest checkpoint file's name, skipped on top of the usual margin */
	uint64_t skip_extra;
	/* the high-water mark an earlier process left: rounds up to it may
	 * have been handed out */
	uint64_t hwm_rounds;
	/* the mark's writer (started by persist_read_hwm), and the pulls it
	 * held: how often, for how long, and since when (holding) */
	struct markw mw;
	uint64_t mark_span;          /* rounds the next mark covers */
	uint64_t mark_next;          /* the round that asked last, and when */
	double mark_t;
	uint64_t holds;
	double held_seconds, hold_since;
	int holding;
};

/* Checkpoints kept (the rolling ones), and the files a volume must hold
 * for them: those, the last good one, the one being written. */
#define PERSIST_KEEP 3
#define PERSIST_FILES (PERSIST_KEEP + 2)

/*
 * The checkpoints of this model in dir, of the live state: P fragments,
 * fragment p's floats at off[p] .. off[p + 1] of theta and mom.
 * Temporary files left by a process killed mid-write are removed, the
 * volume's room is measured, and the writer thread started.
 */
int persist_init(struct persist *ps, const char *dir, uint64_t fingerprint,
		 uint32_t P, uint32_t M, const size_t *off, const float *theta,
		 const float *mom, struct err *e);
/* Stops the writer, after the write under way. */
void persist_release(struct persist *ps);
/*
 * Bytes needed and free on the volume of dir for PERSIST_FILES
 * checkpoints of a model of N parameters in P fragments, M learners (the
 * files of this model already there count as free); 1 when they fit or
 * the volume cannot be asked (*free_bytes −1).
 */
int persist_room(const char *dir, uint64_t fingerprint, uint32_t P,
		 uint64_t N, uint32_t M, uint64_t *needed, int64_t *free_bytes);
/*
 * The volume asked again, at most every PERSIST_ROOM_EVERY seconds,
 * while a checkpoint did not fit at the last look: a claim resized
 * under a running syncer grows its volume in place (docs/syncer.md,
 * Checkpoints). 1 when it fits from now on.
 */
#define PERSIST_ROOM_EVERY 5.0
int persist_room_again(struct persist *ps, double now);
/*
 * The newest rolling checkpoint that loads, else the last good one:
 * 1 with *c filled (the caller releases it), 0 when none loads, -1 on
 * an error that must stop the start (e says it).
 */
int persist_load(struct persist *ps, struct syncer_ckpt *c, struct err *e);
/*
 * The high-water mark of an earlier process: rounds and versions it may
 * have handed out raise *started and versions[] (P of them). 1 when a
 * mark was read, 0 none, -1 out of memory or no writer thread. Starts
 * the mark's writer.
 */
int persist_read_hwm(struct persist *ps, uint64_t *started,
		     uint64_t *versions);
/*
 * Round `next` is the next to be pulled at now (versions: now;
 * overlap: τ): a new mark is asked for when fewer than half the mark's
 * span from it are covered. Returns the rounds covered on disk: a round
 * past them must not be pulled yet.
 */
uint64_t persist_mark(struct persist *ps, uint64_t next,
		      const uint64_t *versions, int overlap, double now);
/* A pull was held for the mark (held 1) or went out (held 0) at now. */
void persist_mark_held(struct persist *ps, int held, double now);
/*
 * Hands c (counters, versions, learners; Θ and the momentum are the live
 * state's) to the writer; its outcome is kept for /status. Without wait
 * it returns at once: 1 taken, 0 not (a write is under way). With wait:
 * 0 once written, −1 with e.
 */
int persist_save(struct persist *ps, const struct syncer_ckpt *c, int wait,
		 struct err *e);
/* Fragment p of the live state is about to change. */
void persist_touch(struct persist *ps, uint32_t p);
/*
 * An evaluation of round came back with loss: when it is finite and not
 * worse than the best of evals[0..n) by more than PERSIST_GOOD_MARGIN,
 * the checkpoint of that round becomes the last good one.
 */
void persist_eval(struct persist *ps, uint64_t round, double loss,
		  const struct ckpt_eval *evals, uint32_t n);
/* "checkpoint" of /status, and its Prometheus lines. */
json_t *persist_json(struct persist *ps);
void persist_metrics(struct persist *ps, struct buf *b);
/* The mark's part of /status ("checkpoint": {"mark": ...}). */
json_t *persist_mark_json(struct persist *ps, double now);

#endif
