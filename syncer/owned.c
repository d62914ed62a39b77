/*
 * owned: the fragments this syncer owns (docs/syncer.md, Shards). An
 * unsharded syncer owns the job's whole table; shard i of S owns the
 * fragments p with p mod S == i (common/shard.h) and works on its part
 * of the table, numbered 0 .. P-1; every fragment number that crosses
 * the wire or reaches a log line or /status is the job's (gid).
 */
#include "syncer/syncer_int.h"

#include <stdlib.h>

#include "common/shard.h"

int core_owned_init(struct syncer *s, const struct syncer_params *p,
		    struct err *e)
{
	int S = p->nshards > 1 ? p->nshards : 1;

	if (S > 1 && p->eval)
		return err_set(e, "syncer: shard %d of %d holds part of Θ and "
			       "cannot evaluate it (docs/syncer.md, Shards)",
			       p->shard, S);
	s->gft = p->ft;
	s->gP = p->ft->nfrags;
	s->shard = S > 1 ? p->shard : 0;
	s->nshards = S;
	s->gid = malloc((size_t)s->gP * sizeof(int));
	s->lid = malloc((size_t)s->gP * sizeof(int));
	if (!s->gid || !s->lid)
		return err_set(e, "syncer: out of memory");
	if (S == 1) {
		s->ft = p->ft;
		for (int g = 0; g < s->gP; g++)
			s->gid[g] = g;
	} else if (shard_table(&s->part, s->gid, p->ft, s->shard, S, e)) {
		return -1;
	} else {
		s->ft = &s->part;
	}
	s->P = s->ft->nfrags;
	for (int g = 0; g < s->gP; g++)
		s->lid[g] = -1;
	s->nparams = 0;
	for (int q = 0; q < s->P; q++) {
		s->lid[s->gid[q]] = q;
		s->nparams += s->ft->frags[q].numel;
	}
	return 0;
}

void core_owned_release(struct syncer *s)
{
	if (s->ft == &s->part)
		frag_table_release(&s->part);
	free(s->gid);
	free(s->lid);
	s->gid = s->lid = NULL;
}

int core_local(const struct syncer *s, uint32_t gfrag)
{
	return gfrag < (uint32_t)s->gP ? s->lid[gfrag] : -1;
}
