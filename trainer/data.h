/*
 * data: token streams for training and validation.
 *
 * Two formats, detected from the first four bytes unless spec.data.format
 * says which:
 *   text    any file, read as bytes: token = byte (vocabulary 256)
 *   tokens  the llm.c token shard, little-endian:
 *
 *     | offset | size      | field                               |
 *     |--------|-----------|-------------------------------------|
 *     | 0      | 4         | int32 magic 20240520                |
 *     | 4      | 4         | int32 version 1                     |
 *     | 8      | 4         | int32 token count n                 |
 *     | 12     | 1012      | int32 × 253, unused (zero)          |
 *     | 1024   | 2·n       | uint16 tokens                       |
 *
 * A path may be a file or a folder; a folder means all regular files of
 * its tree (at most DATA_MAX_FILES, DATA_MAX_DEPTH folders deep; symbolic
 * links and names starting with '.' or ending in ".dat" are skipped),
 * concatenated in the order of their paths. A shard whose size disagrees
 * with its header, or holding a token outside the vocabulary, is an error
 * that names the file.
 *
 * Split: validation is spec.data.valPath when given; with spec.data.split
 * files, the files of the folder whose path below it hashes under
 * valFraction (data_file_in_val: the same files wherever the folder is,
 * none on both sides); else the last valFraction of the data.
 * Tuning (spec.data.tuneFraction tf, default 0): of what is held out, a
 * share tf that no evaluation reports, for a baseline's learning rate
 * to be chosen on (runner/baseline.c; docs/run.md, The baseline): the
 * first tf of the tail or of valPath, or with split files held-out
 * files dealt folder by folder so that tuning holds tf of each first-level
 * folder's held-out bytes, within one file. Validation is the rest.
 * Learner m of M trains on its own shard when
 * spec.data.shardPattern is set ("{learner}" replaced by m), else on every
 * M-th batch window of the common data starting at window m.
 * A batch window is B·T + 1 consecutive tokens; window w starts at w·B·T.
 */
#ifndef DDILOCO_DATA_H
#define DDILOCO_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/jobspec.h"

#define DATA_SHARD_MAGIC   20240520
#define DATA_SHARD_VERSION 1
#define DATA_SHARD_HEADER  1024            /* bytes */
#define DATA_MAX_BYTES     ((size_t)4 << 30)   /* per path, all files */
#define DATA_MAX_FILES     100000
#define DATA_MAX_DEPTH     16

struct dataset {
	uint16_t *tok;
	size_t n;
	enum data_format format;     /* as found: DATA_TEXT or DATA_TOKENS */
};

/* Loads a file or folder; vocab bounds the tokens. */
int dataset_load(struct dataset *d, const char *path, enum data_format fmt,
		 int vocab, struct err *e);
void dataset_release(struct dataset *d);
/* Appends the tokens of one file's bytes (named path in errors) to d:
 * what dataset_load does with each file it reads. */
int dataset_add(struct dataset *d, const char *path, const uint8_t *buf,
		size_t len, enum data_format fmt, int vocab, struct err *e);

/* Writes tokens as an llm.c shard (atomically). */
int data_write_shard(const char *path, const uint16_t *tok, size_t n,
		     struct err *e);

struct data {
	struct dataset src, valsrc;  /* valsrc: valPath, or split files */
	struct dataset tunesrc;      /* split files: the tuning files */
	const uint16_t *train, *val, *tune;
	size_t ntrain, nval, ntune;
	int offset, stride;          /* window w of step s: s·stride + offset */
	int spread;                  /* spec.data.order spread (data_batch) */
	char train_name[JOB_PATH_MAX + 64];  /* for messages; holds any path */
};

/* Whether the file at path rel (below the data folder) is validation
 * under spec.data.split files: FNV-1a of rel with a 64-bit finisher, as
 * a fraction of 2^64, below val_fraction. */
int data_file_in_val(const char *rel, double val_fraction);
/* That hash as a fraction of 2^64, in [0, 1). */
double data_file_hash(const char *rel);
/* A view of d whose validation split is d's tuning split (no data of
 * its own: never closed; valid while d is open). */
void data_tune_view(const struct data *d, struct data *view);

/* Training and validation streams of learner `learner` of `learners`. */
int data_open(struct data *d, const struct job_data *jd, int vocab,
	      int learner, int learners, struct err *e);
/* Only the validation stream (what the syncer's evaluator reads). */
int data_open_val(struct data *d, const struct job_data *jd, int vocab,
		  struct err *e);
void data_close(struct data *d);

/* Number of B × T training windows; 0 when the data holds less than one. */
size_t data_windows(const struct data *d, int B, int T);
/*
 * inputs/targets (B·T) of the batch for this learner's step `step`.
 * Stream order: window s·stride + offset (mod the windows), B rows of one
 * stretch of text. Spread order (spec.data.order spread): row r is the
 * stream's row g = (s·stride + offset)·B + r, taken at place
 * data_spread_row(g mod R, R) of the R rows of T + 1 tokens: each batch's
 * rows lie far apart, every row once before any twice, and M learners'
 * step s read the same rows as one process at M × B (the baseline).
 */
void data_batch(const struct data *d, uint64_t step, int B, int T,
		int *inputs, int *targets);
/* Row x of R in spread order: a·x mod R, a the integer nearest R/φ made
 * prime to R (a bijection of [0, R); consecutive rows about 0.38 R apart,
 * one way round or the other). */
uint64_t data_spread_row(uint64_t x, uint64_t R);
/* The i-th of n validation rows an evaluation reads, of rows in all:
 * spread evenly over the split (i · rows / n; every row when n = rows). */
size_t data_val_pick(size_t i, size_t n, size_t rows);
/* Row r (T + 1 tokens at r·T) of the validation stream. */
size_t data_val_rows(const struct data *d, int T);
void data_val_row(const struct data *d, size_t r, int T, int *inputs,
		  int *targets);

#endif
