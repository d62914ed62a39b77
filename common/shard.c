/* Which shard owns which fragment: common/shard.h. */
#include <stdlib.h>
#include <string.h>

#include "common/shard.h"
#include "common/util.h"

int shard_table(struct frag_table *out, int *gid, const struct frag_table *g,
		int shard, int nshards, struct err *e)
{
	int n = 0;

	memset(out, 0, sizeof(*out));
	if (nshards < 1 || nshards > g->nfrags || shard < 0 || shard >= nshards)
		return err_set(e, "shard %d of %d: a job of %d fragments has "
			       "shards 0 .. S-1 with 1 <= S <= %d", shard,
			       nshards, g->nfrags, g->nfrags);
	out->nfrags = shard_count(g->nfrags, shard, nshards);
	out->ntensors = g->ntensors;
	out->frags = calloc((size_t)out->nfrags, sizeof(*out->frags));
	out->tensors = malloc((size_t)g->ntensors * sizeof(*out->tensors) + 1);
	out->owner = malloc((size_t)g->ntensors * sizeof(int) + 1);
	if (!out->frags || !out->tensors || !out->owner)
		goto oom;
	memcpy(out->tensors, g->tensors, (size_t)g->ntensors * sizeof(*g->tensors));
	for (int i = 0; i < g->ntensors; i++)
		out->owner[i] = -1;   /* another shard's */
	for (int p = 0; p < g->nfrags; p++) {
		const struct fragment *f = &g->frags[p];
		struct fragment *o = &out->frags[n];

		if (shard_owner(p, nshards) != shard)
			continue;
		o->tensors = malloc((size_t)f->ntensors * sizeof(int) + 1);
		if (!o->tensors)
			goto oom;
		memcpy(o->tensors, f->tensors, (size_t)f->ntensors * sizeof(int));
		o->ntensors = f->ntensors;
		o->numel = f->numel;
		for (int k = 0; k < f->ntensors; k++)
			out->owner[f->tensors[k]] = n;
		gid[n++] = p;
	}
	out->fingerprint = g->fingerprint;
	return 0;
oom:
	frag_table_release(out);
	return err_set(e, "shard: out of memory");
}

uint64_t shard_fingerprint(uint64_t fingerprint, int shard, int nshards)
{
	uint32_t w[2] = { (uint32_t)shard, (uint32_t)nshards };

	return nshards <= 1 ? fingerprint
			    : fnv64_update(fingerprint, w, sizeof(w));
}
