/*
 * fragment: greedy largest-first bin packing of tensors into fragments and
 * the gather/scatter between a fragment payload and the flat parameters.
 */
#include "common/fragment.h"

#include <stdlib.h>
#include <string.h>

#include "common/util.h"

static const struct frag_tensor *sort_base;

static int by_size_desc(const void *a, const void *b)
{
	int i = *(const int *)a, j = *(const int *)b;
	size_t si = sort_base[i].numel, sj = sort_base[j].numel;

	if (si != sj)
		return si > sj ? -1 : 1;
	return i - j;
}

int frag_table_init(struct frag_table *ft, const struct frag_tensor *t,
		    int ntensors, int nfrags, struct err *e)
{
	int *order = NULL, *fill = NULL;
	uint64_t h = FNV64_INIT;

	memset(ft, 0, sizeof(*ft));
	if (nfrags < 1)
		return err_set(e, "fragment: fragments must be at least 1, not %d",
			       nfrags);
	if (nfrags > ntensors)
		return err_set(e, "fragment: %d fragments for only %d tensors",
			       nfrags, ntensors);
	ft->nfrags = nfrags;
	ft->ntensors = ntensors;
	ft->frags = calloc((size_t)nfrags, sizeof(*ft->frags));
	ft->tensors = malloc((size_t)ntensors * sizeof(*ft->tensors));
	ft->owner = malloc((size_t)ntensors * sizeof(int));
	order = malloc((size_t)ntensors * sizeof(int));
	fill = calloc((size_t)nfrags, sizeof(int));
	if (!ft->frags || !ft->tensors || !ft->owner || !order || !fill) {
		free(order);
		free(fill);
		frag_table_release(ft);
		return err_set(e, "fragment: out of memory");
	}
	memcpy(ft->tensors, t, (size_t)ntensors * sizeof(*t));
	for (int i = 0; i < ntensors; i++)
		order[i] = i;
	/* qsort has no context argument; the table is only read here */
	sort_base = t;
	qsort(order, (size_t)ntensors, sizeof(int), by_size_desc);
	for (int k = 0; k < ntensors; k++) {
		int best = 0;
		for (int p = 1; p < nfrags; p++)
			if (ft->frags[p].numel < ft->frags[best].numel)
				best = p;
		ft->owner[order[k]] = best;
		ft->frags[best].numel += t[order[k]].numel;
		ft->frags[best].ntensors++;
	}
	for (int p = 0; p < nfrags; p++) {
		ft->frags[p].tensors = malloc((size_t)ft->frags[p].ntensors *
					      sizeof(int) + 1);
		if (!ft->frags[p].tensors) {
			free(order);
			free(fill);
			frag_table_release(ft);
			return err_set(e, "fragment: out of memory");
		}
	}
	for (int i = 0; i < ntensors; i++) {
		int p = ft->owner[i];
		ft->frags[p].tensors[fill[p]++] = i;
	}
	h = fnv64_update(h, &nfrags, sizeof(nfrags));
	for (int i = 0; i < ntensors; i++) {
		uint64_t n = t[i].numel;
		int32_t emb = t[i].is_embedding, own = ft->owner[i];
		h = fnv64_update(h, &n, sizeof(n));
		h = fnv64_update(h, &emb, sizeof(emb));
		h = fnv64_update(h, &own, sizeof(own));
	}
	ft->fingerprint = h;
	free(order);
	free(fill);
	return 0;
}

int frag_table_from_sizes(struct frag_table *ft, const uint64_t *sizes,
			  int nfrags, uint64_t fingerprint, struct err *e)
{
	size_t off = 0;

	memset(ft, 0, sizeof(*ft));
	if (nfrags < 1)
		return err_set(e, "fragment: fragments must be at least 1, not %d",
			       nfrags);
	ft->nfrags = ft->ntensors = nfrags;
	ft->frags = calloc((size_t)nfrags, sizeof(*ft->frags));
	ft->tensors = calloc((size_t)nfrags, sizeof(*ft->tensors));
	ft->owner = malloc((size_t)nfrags * sizeof(int));
	if (!ft->frags || !ft->tensors || !ft->owner) {
		frag_table_release(ft);
		return err_set(e, "fragment: out of memory");
	}
	for (int p = 0; p < nfrags; p++) {
		if (sizes[p] < 1) {
			frag_table_release(ft);
			return err_set(e, "fragment: fragment %d has no values", p);
		}
		ft->frags[p].tensors = malloc(sizeof(int));
		if (!ft->frags[p].tensors) {
			frag_table_release(ft);
			return err_set(e, "fragment: out of memory");
		}
		ft->frags[p].tensors[0] = p;
		ft->frags[p].ntensors = 1;
		ft->frags[p].numel = (size_t)sizes[p];
		ft->tensors[p] = (struct frag_tensor){ .offset = off,
						       .numel = (size_t)sizes[p] };
		ft->owner[p] = p;
		off += (size_t)sizes[p];
	}
	ft->fingerprint = fingerprint;
	return 0;
}

void frag_table_release(struct frag_table *ft)
{
	if (ft->frags)
		for (int p = 0; p < ft->nfrags; p++)
			free(ft->frags[p].tensors);
	free(ft->frags);
	free(ft->tensors);
	free(ft->owner);
	memset(ft, 0, sizeof(*ft));
}

void frag_gather(const struct frag_table *ft, int p, const float *params,
		 float *out)
{
	const struct fragment *f = &ft->frags[p];

	for (int k = 0; k < f->ntensors; k++) {
		const struct frag_tensor *t = &ft->tensors[f->tensors[k]];
		memcpy(out, params + t->offset, t->numel * sizeof(float));
		out += t->numel;
	}
}

void frag_scatter(const struct frag_table *ft, int p, const float *in,
		  float *params)
{
	const struct fragment *f = &ft->frags[p];

	for (int k = 0; k < f->ntensors; k++) {
		const struct frag_tensor *t = &ft->tensors[f->tensors[k]];
		memcpy(params + t->offset, in, t->numel * sizeof(float));
		in += t->numel;
	}
}

double frag_table_imbalance(const struct frag_table *ft)
{
	size_t lo = (size_t)-1, hi = 0;

	for (int p = 0; p < ft->nfrags; p++) {
		if (ft->frags[p].numel < lo)
			lo = ft->frags[p].numel;
		if (ft->frags[p].numel > hi)
			hi = ft->frags[p].numel;
	}
	return lo ? (double)hi / (double)lo : 0.0;
}
