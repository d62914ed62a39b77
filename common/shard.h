/*
 * shard: which syncer shard owns which fragment (docs/syncer.md, Shards).
 *
 * A job of S shards (spec.syncer.shards) runs S syncer processes; shard
 * i owns the fragments p with p mod S == i, their Θ, momentum, rounds and
 * checkpoints. Fragments are balanced (common/fragment.h), so each shard
 * holds about 1/S of the state. Fragment numbers on the wire are always
 * the job's (global); a shard's syncer works on its own part of the
 * table, numbered 0 .. P_i − 1 in global order, and translates at the
 * wire.
 */
#ifndef DDILOCO_SHARD_H
#define DDILOCO_SHARD_H

#include <stdint.h>

#include "common/err.h"
#include "common/fragment.h"

static inline int shard_owner(int frag, int nshards)
{
	return nshards > 1 ? frag % nshards : 0;
}

/* How many of nfrags fragments shard i owns. */
static inline int shard_count(int nfrags, int shard, int nshards)
{
	return nshards > 1 ? (nfrags - shard + nshards - 1) / nshards : nfrags;
}

/*
 * Shard i's part of the job's table g into *out: its fragments in global
 * order, their tensors as in g (every tensor of g is kept, so a tensor
 * index means the same in both), g's fingerprint (what learners compare).
 * gid (room for shard_count entries) gets each local fragment's global
 * number. -1 with e filled when i is not in [0, S) or S not in [1, P].
 */
int shard_table(struct frag_table *out, int *gid, const struct frag_table *g,
		int shard, int nshards, struct err *e);

/* The identity of shard i's checkpoints: the table's fingerprint for an
 * unsharded job (its checkpoints stay loadable), else mixed with i and S
 * so that no shard ever loads another's. */
uint64_t shard_fingerprint(uint64_t fingerprint, int shard, int nshards);

#endif
