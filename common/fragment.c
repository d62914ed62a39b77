/*
 * fragment: greedy largest-first bin packing of tensors into fragments,
 * the row cut of tensors larger than a fragment's share (fragment.h), and
 * the gather/scatter between a fragment payload and the flat parameters.
 *
 * The table is built in three steps: the pieces (whole tensors, or the
 * row ranges of a cut one), each piece's fragment (owner), then each
 * fragment's list of pieces in model order and the fingerprint.
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

static size_t row_of(const struct frag_tensor *t)
{
	return t->row ? t->row : 1;
}

/* A tensor the cut splits: larger than the share, with rows to split. */
static int is_big(const struct frag_tensor *t, size_t share, int cutting)
{
	return cutting && t->numel > share && t->numel / row_of(t) > 1;
}

/*
 * Greedy packing of the tensors not cut into fill[] (fragment sizes so
 * far); own[i] gets tensor i's fragment (-1 for a cut one).
 */
static int pack_whole(const struct frag_tensor *t, int n, int nfrags,
		      size_t share, int cutting, size_t *fill, int *own)
{
	int *order = malloc((size_t)n * sizeof(int));

	if (!order)
		return -1;
	for (int i = 0; i < n; i++)
		order[i] = i;
	/* qsort has no context argument; the table is only read here */
	sort_base = t;
	qsort(order, (size_t)n, sizeof(int), by_size_desc);
	for (int k = 0; k < n; k++) {
		int i = order[k], best = 0;

		own[i] = -1;
		if (is_big(&t[i], share, cutting))
			continue;
		for (int p = 1; p < nfrags; p++)
			if (fill[p] < fill[best])
				best = p;
		own[i] = best;
		fill[best] += t[i].numel;
	}
	free(order);
	return 0;
}

/* The lowest level L with Σ max(0, L − fill[p]) ≥ need. */
static size_t water_level(const size_t *fill, int nfrags, size_t need,
			  size_t total)
{
	size_t lo = 0, hi = total;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2, room = 0;

		for (int p = 0; p < nfrags && room < need; p++)
			room += mid > fill[p] ? mid - fill[p] : 0;
		if (room >= need)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

/*
 * The pieces: a whole tensor for each not cut (its fragment from
 * pack_whole), the row ranges of each cut one as the water-filling gives
 * them. pieces has room for n + nfrags entries (each fragment boundary
 * adds at most one piece). Returns the number of pieces.
 */
static int make_pieces(const struct frag_tensor *t, int n, int nfrags,
		       const size_t *fill, const int *own, size_t big,
		       size_t total, struct frag_tensor *pieces, int *powner)
{
	size_t level = water_level(fill, nfrags, big, total);
	size_t at = 0, end = 0;   /* in the stream of the cut tensors' values */
	int np = 0, p = -1, next = 0;

	for (int i = 0; i < n; i++) {
		size_t row = row_of(&t[i]), rows = t[i].numel / row, r = 0;

		if (own[i] >= 0) {
			pieces[np] = t[i];
			pieces[np].tensor = i;
			pieces[np].row0 = 0;
			powner[np++] = own[i];
			continue;
		}
		while (r < rows) {
			size_t take;

			if (p < nfrags - 1 && (p < 0 || at >= end || next)) {
				p++;
				next = 0;
				end += level > fill[p] ? level - fill[p] : 0;
				if (p == nfrags - 1 || end > big)
					end = big;
				continue;
			}
			/* up to the boundary, rounded to the nearest row; the
			 * last fragment takes what is left */
			take = end >= at + (rows - r) * row ? rows - r
				: (end - at + row / 2) / row;
			if (take == 0 && p == nfrags - 1)
				take = rows - r;
			if (take == 0) {
				next = 1;   /* the boundary is nearer this row's start */
				continue;
			}
			pieces[np] = t[i];
			pieces[np].offset = t[i].offset + r * row;
			pieces[np].numel = take * row;
			pieces[np].tensor = i;
			pieces[np].row0 = r;
			powner[np++] = p;
			r += take;
			at += take * row;
		}
	}
	return np;
}

static uint64_t fingerprint(const struct frag_table *ft,
			    const struct frag_tensor *t, const int *own)
{
	uint64_t h = FNV64_INIT;
	int32_t nfrags = ft->nfrags;

	h = fnv64_update(h, &nfrags, sizeof(nfrags));
	for (int i = 0; i < ft->nmodel; i++) {
		uint64_t n = t[i].numel;
		int32_t emb = t[i].is_embedding, o = own[i];

		h = fnv64_update(h, &n, sizeof(n));
		h = fnv64_update(h, &emb, sizeof(emb));
		h = fnv64_update(h, &o, sizeof(o));
	}
	if (!ft->ncut)   /* the table of every model before the cut */
		return h;
	for (int k = 0; k < ft->ntensors; k++) {
		const struct frag_tensor *pc = &ft->tensors[k];
		uint64_t w[4] = { (uint64_t)pc->tensor, pc->row0, pc->numel,
				  (uint64_t)ft->owner[k] };

		h = fnv64_update(h, w, sizeof(w));
	}
	return h;
}

static int check_input(const struct frag_tensor *t, int ntensors,
		       int nfrags, size_t *total, struct err *e)
{
	*total = 0;
	if (nfrags < 1)
		return err_set(e, "fragment: fragments must be at least 1, not %d",
			       nfrags);
	if (ntensors < 1)
		return err_set(e, "fragment: a model of no tensors");
	for (int i = 0; i < ntensors; i++) {
		if (t[i].numel < 1)
			return err_set(e, "fragment: tensor %d has no values", i);
		if (t[i].numel % row_of(&t[i]))
			return err_set(e, "fragment: tensor %d has %zu values, "
				       "not rows of %zu", i, t[i].numel,
				       row_of(&t[i]));
		if (__builtin_add_overflow(*total, t[i].numel, total) ||
		    *total > SIZE_MAX / sizeof(float))
			return err_set(e, "fragment: the tensors' sizes overflow");
	}
	return 0;
}

/* Each fragment's pieces, ascending (model order), and its size. */
static int list_pieces(struct frag_table *ft)
{
	int *fill = calloc((size_t)ft->nfrags, sizeof(int));

	if (!fill)
		return -1;
	for (int k = 0; k < ft->ntensors; k++) {
		ft->frags[ft->owner[k]].ntensors++;
		ft->frags[ft->owner[k]].numel += ft->tensors[k].numel;
	}
	for (int p = 0; p < ft->nfrags; p++) {
		ft->frags[p].tensors = malloc((size_t)ft->frags[p].ntensors *
					      sizeof(int) + 1);
		if (!ft->frags[p].tensors) {
			free(fill);
			return -1;
		}
	}
	for (int k = 0; k < ft->ntensors; k++) {
		int p = ft->owner[k];

		ft->frags[p].tensors[fill[p]++] = k;
	}
	free(fill);
	return 0;
}

int frag_table_init(struct frag_table *ft, const struct frag_tensor *t,
		    int ntensors, int nfrags, struct err *e)
{
	size_t total, share, big = 0, *fill = NULL;
	int *own = NULL, cutting = 0, rc = -1;

	memset(ft, 0, sizeof(*ft));
	if (check_input(t, ntensors, nfrags, &total, e))
		return -1;
	share = total / (size_t)nfrags + (total % (size_t)nfrags != 0);
	for (int i = 0; i < ntensors; i++)
		if (is_big(&t[i], share, 1)) {
			cutting = 1;
			big += t[i].numel;
			ft->ncut++;
		}
	if (!cutting && nfrags > ntensors)
		return err_set(e, "fragment: %d fragments for only %d tensors",
			       nfrags, ntensors);
	ft->nfrags = nfrags;
	ft->nmodel = ntensors;
	ft->frags = calloc((size_t)nfrags, sizeof(*ft->frags));
	/* a cut adds at most one piece per fragment boundary */
	ft->tensors = malloc(((size_t)ntensors + (size_t)nfrags) *
			     sizeof(*ft->tensors));
	ft->owner = malloc(((size_t)ntensors + (size_t)nfrags) * sizeof(int));
	own = malloc((size_t)ntensors * sizeof(int));
	fill = calloc((size_t)nfrags, sizeof(size_t));
	if (!ft->frags || !ft->tensors || !ft->owner || !own || !fill ||
	    pack_whole(t, ntensors, nfrags, share, cutting, fill, own)) {
		err_set(e, "fragment: out of memory");
		goto out;
	}
	ft->ntensors = make_pieces(t, ntensors, nfrags, fill, own, big, total,
				   ft->tensors, ft->owner);
	if (list_pieces(ft)) {
		err_set(e, "fragment: out of memory");
		goto out;
	}
	for (int p = 0; p < nfrags; p++)
		if (!ft->frags[p].numel) {
			err_set(e, "fragment: %d fragments for only %d tensors "
				"(%d of them cut at rows): fragment %d would be "
				"empty", nfrags, ntensors, ft->ncut, p);
			goto out;
		}
	ft->fingerprint = fingerprint(ft, t, own);
	rc = 0;
out:
	free(own);
	free(fill);
	if (rc)
		frag_table_release(ft);
	return rc;
}

int frag_table_of_numels(struct frag_table *ft, const uint64_t *numel,
			 int n, int nfrags, size_t *total, struct err *e)
{
	struct frag_tensor *t;
	size_t off = 0;
	int rc;

	if (n < 1)
		return err_set(e, "fragment: no tensors");
	t = calloc((size_t)n, sizeof(*t));
	if (!t)
		return err_set(e, "fragment: out of memory for %d tensors", n);
	for (int i = 0; i < n; i++) {
		t[i] = (struct frag_tensor){ .offset = off, .numel = numel[i] };
		if (numel[i] > SIZE_MAX - off) {
			free(t);
			return err_set(e, "fragment: the tensors' sizes overflow "
				       "at tensor %d", i);
		}
		off += numel[i];
	}
	rc = frag_table_init(ft, t, n, nfrags, e);
	free(t);
	if (!rc && total)
		*total = off;
	return rc;
}

int frag_table_from_sizes(struct frag_table *ft, const uint64_t *sizes,
			  int nfrags, uint64_t fingerprint, struct err *e)
{
	size_t off = 0;

	memset(ft, 0, sizeof(*ft));
	if (nfrags < 1)
		return err_set(e, "fragment: fragments must be at least 1, not %d",
			       nfrags);
	ft->nfrags = ft->ntensors = ft->nmodel = nfrags;
	ft->frags = calloc((size_t)nfrags, sizeof(*ft->frags));
	ft->tensors = calloc((size_t)nfrags, sizeof(*ft->tensors));
	ft->owner = malloc((size_t)nfrags * sizeof(int));
	if (!ft->frags || !ft->tensors || !ft->owner) {
		frag_table_release(ft);
		return err_set(e, "fragment: out of memory");
	}
	for (int p = 0; p < nfrags; p++) {
		size_t next;

		if (sizes[p] < 1) {
			frag_table_release(ft);
			return err_set(e, "fragment: fragment %d has no values", p);
		}
		/* sizes from the wire: their sum and its bytes must fit */
		if (sizes[p] > SIZE_MAX ||
		    __builtin_add_overflow(off, (size_t)sizes[p], &next) ||
		    next > SIZE_MAX / sizeof(float)) {
			frag_table_release(ft);
			return err_set(e, "fragment: fragment sizes overflow at "
				       "fragment %d (%llu values)", p,
				       (unsigned long long)sizes[p]);
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
			.numel = (size_t)sizes[p], .row = 1, .tensor = p };
		ft->owner[p] = p;
		off = next;
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
