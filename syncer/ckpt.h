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
 * learner count) are left alone and never push out the new one.
 */
int syncer_ckpt_save(const char *dir, const struct syncer_ckpt *c, int keep,
		     char *path_out, size_t path_len, struct err *e);
/*
 * Loads the newest valid checkpoint in dir into c. Each unreadable or
 * corrupt file is skipped with an error line on the log. Returns 1 when
 * one was loaded (its name in path_out), 0 when none was, -1 on error.
 */
int syncer_ckpt_load_newest(const char *dir, uint64_t fingerprint,
			    uint32_t nfrags, uint64_t nparams,
			    uint32_t nlearners, struct syncer_ckpt *c,
			    char *path_out, size_t path_len, struct err *e);

#endif
