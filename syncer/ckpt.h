/*
 * ckpt: the syncer's checkpoint file — everything needed to resume the
 * outer loop exactly: Θ, outer momentum, fragment versions, round
 * counters, and the accounting behind /status.
 *
 * One file per checkpoint,
 * `syncer-<model fingerprint, 16 hex digits>-<rounds completed, 12
 * digits>.ckpt`, written with file_write_atomic (temporary file, fsync,
 * rename, folder fsync). Files of the older name `syncer-<rounds
 * completed>.ckpt` are still loaded (their header says the model).
 * All numbers little-endian; P fragments, N parameters, L learners, E
 * evaluations:
 *
 *   offset        size   field
 *   0             8      magic "DDLSYNC1"
 *   8             4      format version (1)
 *   12            4      P
 *   16            8      N
 *   24            8      model fingerprint (fragment.h)
 *   32            4      L
 *   36            4      E
 *   40            4      done (budget reached)
 *   44            4      zero
 *   48            9×8    u64: rounds started, rounds completed, tokens
 *                        trained, answers merged, late, rejected, empty,
 *                        bytes in, bytes out
 *   120           7×8    f64: tokens merged, elapsed seconds, down seconds,
 *                        merged learner compute seconds, wall clock at
 *                        write, elapsed at the last completed round,
 *                        elapsed when K learners were first joined (−1:
 *                        not yet; uptime is measured from there)
 *   176           P×8    u64 version of each fragment
 *   ..            L×16   per learner: u64 incarnation, u64 tokens reported
 *   ..            E×32   per evaluation: u64 round, u64 tokens, f64 loss,
 *                        f64 time (elapsed seconds)
 *   ..            N×4    f32 Θ, fragment after fragment (payload layout)
 *   ..            N×4    f32 outer momentum, same layout
 *   end − 4       4      CRC-32 of every byte before it
 *
 * A file whose size, magic, version, CRC, P, N or fingerprint is not what
 * the caller expects is refused with an error naming the file and why.
 */
#ifndef DDILOCO_SYNCER_CKPT_H
#define DDILOCO_SYNCER_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/util.h"

#define CKPT_MAX_EVALS 4096

struct ckpt_learner {
	uint64_t incarnation, tokens;
};

struct ckpt_eval {
	uint64_t round, tokens;
	double loss, time;
};

struct syncer_ckpt {
	uint64_t fingerprint;
	uint32_t nfrags;
	uint64_t nparams;
	uint32_t done;
	uint64_t rounds_started, rounds_completed, tokens_trained;
	uint64_t merged, late, rejected, empty, bytes_in, bytes_out;
	double tokens_merged, elapsed, down, compute_merged, wall_time;
	double last_round_elapsed, uptime_start;
	uint64_t *versions;            /* nfrags */
	uint32_t nlearners;
	struct ckpt_learner *learners; /* nlearners */
	uint32_t nevals;
	struct ckpt_eval *evals;       /* nevals (≤ CKPT_MAX_EVALS) */
	float *theta, *momentum;       /* nparams each */
};

/* Allocates the arrays for the given shape, all zero. */
int syncer_ckpt_init(struct syncer_ckpt *c, uint32_t nfrags, uint64_t nparams,
		     uint32_t nlearners, struct err *e);
void syncer_ckpt_release(struct syncer_ckpt *c);

/* Serialises c into a new buffer (caller frees). */
int syncer_ckpt_encode(const struct syncer_ckpt *c, void **out, size_t *len,
		       struct err *e);
/*
 * Parses a buffer into c (which must be released after). `name` names the
 * source in errors. Expected P, N, L and fingerprint must match.
 */
int syncer_ckpt_decode(const void *buf, size_t len, const char *name,
		       uint64_t fingerprint, uint32_t nfrags, uint64_t nparams,
		       uint32_t nlearners, struct syncer_ckpt *c, struct err *e);

/*
 * Writes dir/syncer-<fingerprint>-<rounds completed>.ckpt, then prunes:
 * the file just written and the newest keep − 1 other checkpoints that
 * this model and learner count would load are kept, the other loadable
 * ones removed. Files that do not load (damaged, another model or
 * learner count) are left alone and never push out the new one. Whether
 * another file would load is its header, its size and its CRC; a writer
 * with a struct ckpt_known (ckpt_out) reads each file's CRC once in its
 * life, and never the ones it wrote.
 */
int syncer_ckpt_save(const char *dir, const struct syncer_ckpt *c, int keep,
		     char *path_out, size_t path_len, struct err *e);

/* The size of a checkpoint file with the most evaluations it holds. */
size_t syncer_ckpt_file_size(uint32_t P, uint64_t N, uint32_t L);
/* What the checkpoint files of this model in dir hold, in bytes (the
 * rolling ones and the last good one). */
uint64_t syncer_ckpt_model_bytes(const char *dir, uint64_t fingerprint);

/* The bytes of c's file before Θ: header, versions, learners, evals. */
size_t syncer_ckpt_head_size(const struct syncer_ckpt *c);

/*
 * The same write in parts, for a writer that gathers Θ and the momentum
 * piece by piece (ckptw.h): ckpt_out_open writes the header of c (its
 * theta and momentum are not read) to the temporary file; then Θ, then
 * the momentum, N floats each in the payload layout, through
 * ckpt_out_write in pieces of any size; ckpt_out_commit adds the CRC,
 * renames the file into place and prunes. A failed call has removed the
 * temporary file; ckpt_out_abort removes it before the end. `write`
 * (fd_write_all when NULL) is the one place bytes go to disk, so a test
 * can make the disk slow or fail.
 */
struct ckpt_known {
	size_t n, cap;
	struct { uint64_t num; int old, ok; } *v;
};
void ckpt_known_release(struct ckpt_known *k);

struct ckpt_out {
	int (*write)(void *ctx, int fd, const void *buf, size_t n);
	void *write_ctx;
	/* what the writer learnt of the files in the folder: each read
	 * whole once (NULL: on every save) */
	struct ckpt_known *known;
	struct afile f;
	uint32_t crc;
};
int ckpt_out_open(struct ckpt_out *o, const char *dir,
		  const struct syncer_ckpt *c, struct err *e);
int ckpt_out_write(struct ckpt_out *o, const void *buf, size_t n,
		   struct err *e);
int ckpt_out_commit(struct ckpt_out *o, const char *dir,
		    const struct syncer_ckpt *c, int keep, struct err *e);
void ckpt_out_abort(struct ckpt_out *o);

/*
 * Loads the newest valid checkpoint in dir into c. Each unreadable or
 * corrupt file is skipped with an error line on the log. Returns 1 when
 * one was loaded (its name in path_out), 0 when none was, -1 on error.
 */
int syncer_ckpt_load_newest(const char *dir, uint64_t fingerprint,
			    uint32_t nfrags, uint64_t nparams,
			    uint32_t nlearners, struct syncer_ckpt *c,
			    char *path_out, size_t path_len, struct err *e);

/*
 * Removes the temporary files (file_write_atomic's `NAME.tmp.PID`, the
 * last good link's `NAME.tmp`) that a syncer of this model killed in the
 * middle of a write left in dir: each is up to a checkpoint's size, and
 * nothing else would ever remove them. Called at start, before this
 * process writes anything; returns how many it removed.
 */
int syncer_ckpt_remove_tmp(const char *dir, uint64_t fingerprint);

/*
 * The highest round in the name of a checkpoint file of this model in
 * dir, whether it loads or not: 1 with it in *round, 0 when there is none.
 */
int syncer_ckpt_newest_name(const char *dir, uint64_t fingerprint,
			    uint64_t *round);

/*
 * The last good checkpoint (docs/syncer.md, Checkpoints): a second name,
 * `syncer-<fingerprint>-last-good.ckpt`, for the checkpoint of `round`
 * (a hard link, or a copy where links fail), replacing the one before.
 * Its name is not a rolling checkpoint's, so pruning never removes it.
 * Returns 1 when kept, 0 when that round's checkpoint is not in dir
 * (never written, or pruned already), -1 on error.
 */
int syncer_ckpt_mark_good(const char *dir, uint64_t fingerprint,
			  uint64_t round, struct err *e);
/*
 * Loads the last good checkpoint into c: 1 when loaded (its name in
 * path_out), 0 when there is none or it does not load (logged).
 */
int syncer_ckpt_load_good(const char *dir, uint64_t fingerprint,
			  uint32_t nfrags, uint64_t nparams, uint32_t nlearners,
			  struct syncer_ckpt *c, char *path_out, size_t path_len);

/*
 * The high-water mark (docs/syncer.md, Checkpoints): no round number
 * above `rounds` and no version of fragment p at or above versions[p]
 * has been handed out. `DIR/syncer-<fingerprint>-hwm`, text, written
 * with file_write_atomic:
 *
 *   line   content
 *   1      ddiloco-syncer-hwm 1
 *   2      fingerprint <16 hex digits>
 *   3      rounds <decimal>
 *   4      versions <decimal> × P, one space before each
 */
#define HWM_MAGIC "ddiloco-syncer-hwm 1"
#define HWM_MAX_FRAGS 65536

struct syncer_hwm {
	uint64_t rounds;
	uint32_t nfrags;
	uint64_t *versions;       /* nfrags, the caller's */
};

int syncer_hwm_write(const char *dir, uint64_t fingerprint,
		     const struct syncer_hwm *h, struct err *e);
/* 1 when read into h (h->versions must hold nfrags), 0 when there is no
 * file, -1 when it does not read (another model, another fragment
 * count, damaged) with the reason in e. */
int syncer_hwm_read(const char *dir, uint64_t fingerprint, uint32_t nfrags,
		    struct syncer_hwm *h, struct err *e);

#endif
