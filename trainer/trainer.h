/*
 * trainer: one learner's inner loop — model, its data shard, AdamW with
 * warmup then cosine decay and gradient clipping — and the evaluator the
 * syncer uses to score the global model on the validation split.
 *
 * Learner `learner` of `learners` reads its own shard (spec.data
 * shardPattern) or an offset/stride share of the common data; `ddiloco
 * train` is learner 0 of 1.
 *
 * Checkpoint file (trainer_save / trainer_load), little-endian, n floats
 * of parameters:
 *
 *   | offset  | size | field                                         |
 *   |---------|------|-----------------------------------------------|
 *   | 0       | 4    | magic "DDTC"                                  |
 *   | 4       | 4    | uint32 version (1)                            |
 *   | 8       | 24   | int32 V, maxT, L, NH, C, tied (the shapes)    |
 *   | 32      | 8    | uint64 step (steps done)                      |
 *   | 40      | 8    | uint64 tokens trained                         |
 *   | 48      | 8    | uint64 n (parameter count)                    |
 *   | 56      | 4·n  | float32 parameters (tensor table order)       |
 *   | 56+4n   | 4·n  | float32 AdamW first moments m                 |
 *   | 56+8n   | 4·n  | float32 AdamW second moments v                |
 *   | 56+12n  | 4    | uint32 CRC-32 of every byte before it         |
 *
 * It is written atomically (temporary file, fsync, rename). Loading
 * refuses, naming the file: a short file, a bad magic or version, a size
 * or shape that is not the job's model, and a checksum mismatch.
 */
#ifndef DDILOCO_TRAINER_H
#define DDILOCO_TRAINER_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/jobspec.h"
#include "trainer/model.h"

struct trainer_stats {
	uint64_t step;          /* steps done, after this one */
	uint64_t tokens;        /* tokens in this step (B × T) */
	uint64_t tokens_total;  /* tokens since start */
	float loss;             /* train loss of this step */
	double lr;              /* learning rate used */
	double seconds;         /* wall time of this step */
};

struct trainer;

struct trainer *trainer_new(const struct job_spec *js, int learner,
			    int learners, struct err *e);
void trainer_free(struct trainer *t);
/* One AdamW step on the next batch. */
int trainer_step(struct trainer *t, struct trainer_stats *out, struct err *e);
float *trainer_params(struct trainer *t);
const struct model_config *trainer_config(const struct trainer *t);
/* Mean validation loss over at most max_tokens tokens. */
int trainer_eval(struct trainer *t, size_t max_tokens, double *loss,
		 struct err *e);
/* The same on the tuning split (spec.data.tuneFraction; trainer/data.h):
 * NAN when there is none. */
int trainer_eval_tune(struct trainer *t, size_t max_tokens, double *loss,
		      struct err *e);
/* Parameters + optimizer state + step, with magic, shapes and checksum. */
int trainer_save(struct trainer *t, const char *path, struct err *e);
int trainer_load(struct trainer *t, const char *path, struct err *e);

#define TRAINER_CKPT_MAGIC   "DDTC"
#define TRAINER_CKPT_VERSION 1u
#define TRAINER_CKPT_HEADER  56

/* Steps done and tokens trained so far. */
uint64_t trainer_steps(const struct trainer *t);
/*
 * Moves the step (lr schedule and data window) to `step` when that is
 * larger than the current one; returns 1 if it moved. AdamW's t is not
 * touched: it counts updates since the moments were zero.
 */
int trainer_resume_at(struct trainer *t, uint64_t step);
/* AdamW updates since the moments were zero (the next update uses t + 1). */
uint64_t trainer_adam_t(const struct trainer *t);
uint64_t trainer_tokens(const struct trainer *t);
/* The batch shape: B rows of T tokens. */
void trainer_batch(const struct trainer *t, int *B, int *T);
/* The schedule's decay horizon in steps (0 = constant after warmup). */
uint64_t trainer_decay_steps(const struct trainer *t);
/*
 * The step the lr schedule is at from now on, when it is not the
 * trainer's own: the job's (its tokens trained over what one step of
 * every learner trains; docs/design.md §3, Learner). 0: the own step
 * again. The data window stays at the own step.
 */
void trainer_set_schedule_step(struct trainer *t, uint64_t step);
uint64_t trainer_schedule_step(const struct trainer *t);

/* Scores any parameter vector of the job's model on the validation split. */
struct evaluator;
struct evaluator *evaluator_new(const struct job_spec *js, struct err *e);
void evaluator_free(struct evaluator *ev);
int evaluator_loss(struct evaluator *ev, const float *params,
		   size_t max_tokens, double *loss, struct err *e);

#endif
