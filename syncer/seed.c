/*
 * seed: an external job's table and initial weights, before the core
 * (seed.h). The seed is held fragment after fragment, as it comes.
 */
#include "syncer/seed.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/encoding.h"
#include "common/log.h"
#include "common/shard.h"
#include "common/wire.h"

void seed_init(struct seed *sd)
{
	memset(sd, 0, sizeof(*sd));
	sd->failed = -1;
}

static void drop_values(struct seed *sd)
{
	free(sd->values);
	free(sd->off);
	free(sd->got);
	sd->values = NULL;
	sd->off = NULL;
	sd->got = NULL;
}

void seed_release(struct seed *sd)
{
	drop_values(sd);
	if (sd->have_ft)
		frag_table_release(&sd->ft);
	free(sd->flat);
	seed_init(sd);
}

int seed_check_budget(const struct wire_hello *h,
		      const struct syncer_params *base, struct err *e)
{
	uint64_t mine = 0, all = 0, max = base->js->syncer.max_parameters;
	int nshards = base->nshards > 1 ? base->nshards : 1;
	int shard = nshards > 1 ? base->shard : 0;

	for (size_t p = 0; p < h->nsizes; p++) {
		uint64_t n = h->fragment_sizes[p];

		if (__builtin_add_overflow(all, n, &all))
			return err_set(e, "the learner's table has more "
				       "parameters than 64 bits count (fragment "
				       "%zu of %llu)", p, (unsigned long long)n);
		if (shard_owner((int)p, nshards) == shard)
			mine += n;   /* ≤ all: cannot overflow */
	}
	if (mine > max)
		return err_set(e, "the learner's table has %llu parameters for "
			       "this syncer%s (%llu in the job): more than "
			       "spec.syncer.maxParameters %llu", (unsigned long long)
			       mine, nshards > 1 ? " shard" : "",
			       (unsigned long long)all, (unsigned long long)max);
	if (all > SIZE_MAX / (4 * sizeof(float)))
		return err_set(e, "the learner's table has %llu parameters: "
			       "more than this machine can address",
			       (unsigned long long)all);
	return 0;
}

int seed_adopt(struct seed *sd, const struct wire_hello *h,
	       const struct syncer_params *base, struct err *e)
{
	if (h->fragments < 1 || h->nsizes != h->fragments)
		return err_set(e, "fragment sizes missing: learner sent %zu sizes "
			       "for %u fragments", h->nsizes, h->fragments);
	if (frag_table_from_sizes(&sd->ft, h->fragment_sizes,
				  (int)h->fragments, h->fingerprint, e))
		return -1;
	sd->have_ft = 1;
	sd->prm = *base;
	sd->prm.ft = &sd->ft;
	log_info("learner %u's model is the job's: %u fragments, fingerprint "
		 "%016" PRIx64, h->learner_id, h->fragments, h->fingerprint);
	return 0;
}

int seed_begin(struct seed *sd, double now, struct err *e)
{
	size_t off = 0;

	drop_values(sd);
	sd->off = calloc((size_t)sd->ft.nfrags, sizeof(size_t));
	sd->got = calloc((size_t)sd->ft.nfrags, 1);
	sd->left = 0;
	/* a shard waits for its own fragments only (seed_owns) */
	for (int p = 0; sd->off && sd->got && p < sd->ft.nfrags; p++) {
		sd->off[p] = off;
		if (!seed_owns(sd, p)) {
			sd->got[p] = 1;
			continue;
		}
		off += sd->ft.frags[p].numel;
		sd->left++;
	}
	sd->values = malloc(off * sizeof(float) + 1);
	if (!sd->off || !sd->got || !sd->values)
		return err_set(e, "syncer: out of memory for a %zu-value seed",
			       off);
	sd->moved = now;
	return 0;
}

int seed_owns(const struct seed *sd, int p)
{
	return shard_owner(p, sd->prm.nshards) == sd->prm.shard;
}

void seed_started(struct seed *sd)
{
	drop_values(sd);
	free(sd->flat);
	sd->flat = NULL;
	sd->prm.init_params = NULL;
}

int seed_wants(const struct seed *sd, const struct wire_answer *a)
{
	return sd->got && a->round == 0 && a->fragment < (uint32_t)sd->ft.nfrags &&
	       !sd->got[a->fragment];
}

int seed_put(struct seed *sd, const struct wire_answer *a, double now,
	     struct err *e)
{
	int p = (int)a->fragment;
	float *x = sd->values + sd->off[p];
	size_t n = sd->ft.frags[p].numel;
	struct err de;

	if (enc_decode((enum payload_enc)a->encoding, a->payload, a->payload_len,
		       x, n, &de))
		return err_set(e, "seed of fragment %d: %s", p, de.msg);
	for (size_t i = 0; i < n; i++)
		if (!isfinite(x[i]))
			return err_set(e, "seed of fragment %d: value %zu is not "
				       "finite", p, i);
	sd->got[p] = 1;
	sd->moved = now;
	return --sd->left == 0;
}

const struct syncer_params *seed_params(struct seed *sd, int use_seed)
{
	size_t n = 0;

	for (int p = 0; p < sd->ft.nfrags; p++)
		n += sd->ft.frags[p].numel;
	free(sd->flat);
	/* zeros that a checkpoint replaces, or the seed, which is in
	 * fragment order: scattered; a shard's others stay zero pages,
	 * never touched (core_init gathers its own) */
	sd->flat = calloc(n, sizeof(float));
	for (int p = 0; use_seed && sd->flat && p < sd->ft.nfrags; p++)
		if (seed_owns(sd, p))
			frag_scatter(&sd->ft, p, sd->values + sd->off[p],
				     sd->flat);
	drop_values(sd);
	sd->prm.init_params = sd->flat;
	sd->prm.nparams = n;
	return sd->flat ? &sd->prm : NULL;
}
