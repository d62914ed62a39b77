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

struct buf;

/* The high-water mark is written when a round starts past it, to cover
 * this many rounds. */
#define PERSIST_HWM_ROUNDS 16
/* An evaluation loss at most this fraction above the best one so far
 * marks its round's checkpoint the last good one. */
#define PERSIST_GOOD_MARGIN 0.10

struct persist {
	const char *dir;
	uint64_t fingerprint;
	uint32_t P, M;
	uint64_t nparams;
	/* checkpoint writes of this process: failing until one succeeds
	 * again; error is the last failure's */
	int failing;
	uint64_t failures;
	int have_ok;                 /* a checkpoint was written or loaded */
	uint64_t last_ok_round;
	char error[sizeof(((struct err *)0)->msg)];
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
	/* the high-water mark on disk: rounds up to it are covered */
	uint64_t hwm_rounds;
};

/* The checkpoints of this model in dir; temporary files left by a
 * process killed mid-write are removed. */
void persist_init(struct persist *ps, const char *dir, uint64_t fingerprint,
		  uint32_t P, uint64_t nparams, uint32_t M);
/*
 * The newest rolling checkpoint that loads, else the last good one:
 * 1 with *c filled (the caller releases it), 0 when none loads, -1 on
 * an error that must stop the start (e says it).
 */
int persist_load(struct persist *ps, struct syncer_ckpt *c, struct err *e);
/*
 * The high-water mark of an earlier process: rounds and versions it may
 * have handed out raise *started and versions[] (P of them). 1 when a
 * mark was read, 0 none, -1 out of memory.
 */
int persist_read_hwm(struct persist *ps, uint64_t *started,
		     uint64_t *versions);
/* Round `round` is about to be pulled: the mark is written first when
 * the round is past it (versions: now; overlap: τ). */
void persist_round_started(struct persist *ps, uint64_t round,
			   const uint64_t *versions, int overlap);
/* Writes c; its outcome is kept for /status. */
int persist_save(struct persist *ps, const struct syncer_ckpt *c,
		 struct err *e);
/*
 * An evaluation of round came back with loss: when it is finite and not
 * worse than the best of evals[0..n) by more than PERSIST_GOOD_MARGIN,
 * the checkpoint of that round becomes the last good one.
 */
void persist_eval(struct persist *ps, uint64_t round, double loss,
		  const struct ckpt_eval *evals, uint32_t n);
/* "checkpoint" of /status, and its Prometheus lines. */
json_t *persist_json(const struct persist *ps);
void persist_metrics(const struct persist *ps, struct buf *b);

#endif
