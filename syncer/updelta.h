/*
 * updelta: Updates sent as deltas (docs/protocol.md, Updates as deltas;
 * spec.syncer.updateDelta).
 *
 * The syncer keeps Θ̂, the model as the learners hold it: every fragment
 * at its version, as the Updates sent so far rebuild it. After the merge
 * that makes version v of fragment p, the delta is the change Θ_p − Θ̂_p,
 * encoded (updateEncoding), and Θ̂_p moves by what that encoding carries,
 * so what it loses stays in Θ − Θ̂ and goes with the next delta (error
 * feedback). A learner that holds Θ̂_p at v − 1 gets the delta; one that
 * does not (it joined, its queue skipped a version) gets a keyframe:
 * Θ̂_p in f32. Each carries a hash of Θ̂_p at v (hash_floats), which the
 * sidecar checks after it adds the delta.
 *
 * Θ̂ is one more copy of the model in the syncer (4 bytes a parameter),
 * and the newest delta of each fragment is kept until the next
 * (enc_size of the fragment). Θ̂_p is made from Θ_p the first time a
 * keyframe of p is asked for, and again whenever a merge finds it not at
 * the version before (a restarted syncer: every learner joins anew).
 */
#ifndef DDILOCO_SYNCER_UPDELTA_H
#define DDILOCO_SYNCER_UPDELTA_H

#include <stddef.h>
#include <stdint.h>

#include "common/encoding.h"
#include "common/err.h"

struct buf;

struct updelta {
	int P;
	enum payload_enc enc;    /* the deltas' encoding */
	size_t *numel, *off;     /* fragment p: numel[p] values at off[p] */
	float *hat;              /* Θ̂, every fragment */
	float *scratch;          /* the largest fragment's values */
	uint64_t *ver1;          /* Θ̂_p's version + 1; 0: not made */
	uint64_t *sum;           /* hash_floats of Θ̂_p */
	uint8_t **pay;           /* the delta to version ver1 − 1 when len > 0 */
	size_t *len;
	uint64_t deltas;         /* deltas made */
	uint64_t remade;         /* Θ̂_p made again from Θ_p */
};

int updelta_init(struct updelta *u, int P, const size_t *numel,
		 enum payload_enc enc, struct err *e);
void updelta_release(struct updelta *u);

/* Θ̂_p at `version` (made from theta, Θ_p, when it is not there): its
 * values, and their hash in *sum. A keyframe's payload. */
const float *updelta_keyframe(struct updelta *u, int p, const float *theta,
			      uint64_t version, uint64_t *sum);
/* The merge made `version` of fragment p, theta: the delta from version
 * − 1 when Θ̂_p was there, else Θ̂_p made again. 0, or -1 with e filled
 * when memory ran out (Θ̂_p is then not made: keyframes follow). */
int updelta_step(struct updelta *u, int p, const float *theta,
		 uint64_t version, struct err *e);
/* The delta to `version` of fragment p: 1 with its payload, length and
 * the hash of Θ̂_p after it; 0 when there is none. */
int updelta_get(const struct updelta *u, int p, uint64_t version,
		const uint8_t **pay, size_t *len, uint64_t *sum);
/* Its Prometheus lines. */
void updelta_metrics(const struct updelta *u, struct buf *b);

#endif
