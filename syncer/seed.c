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
	if (sd->have_decl)
		frag_table_release(&sd->decl);
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

int seed_declare(struct seed *sd, const struct job_spec *js, struct err *e)
{
	const struct job_model *m = &js->model;

	if (m->kind != MODEL_EXTERNAL || !m->ntensors)
		return 0;
	if (frag_table_of_numels(&sd->decl, m->tensors, m->ntensors,
				 js->syncer.fragments, &sd->decl_values, e))
		return err_wrap(e, "spec.model.tensors");
	sd->have_decl = 1;
	log_info("the job declares its model's table (spec.model.tensors): "
		 "%zu values in %d tensors, %d fragments, fingerprint %016"
		 PRIx64, sd->decl_values, m->ntensors, sd->decl.nfrags,
		 sd->decl.fingerprint);
	return 0;
}

int seed_check_declared(const struct seed *sd, const struct wire_hello *h,
			struct err *e)
{
	const struct frag_table *d = &sd->decl;
	int same;
	uint64_t n = 0;

	if (!sd->have_decl)
		return 0;
	same = h->fingerprint == d->fingerprint &&
	       h->fragments == (uint32_t)d->nfrags && h->nsizes == h->fragments;
	for (size_t p = 0; p < h->nsizes; p++) {
		if (__builtin_add_overflow(n, h->fragment_sizes[p], &n))
			n = UINT64_MAX;
		if (same && h->fragment_sizes[p] != d->frags[p].numel)
			same = 0;
	}
	if (same)
		return 0;
	return err_set(e, "learner %u's model table (%u fragments, %llu "
		       "values, fingerprint %016" PRIx64 ") is not the one "
		       "spec.model.tensors declares (%d fragments, %zu values, "
		       "fingerprint %016" PRIx64 ")", h->learner_id, h->fragments,
		       (unsigned long long)n, h->fingerprint, d->nfrags,
		       sd->decl_values, d->fingerprint);
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
