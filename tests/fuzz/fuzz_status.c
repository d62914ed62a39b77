/*
 * fuzz_status: the operator's reading of a syncer's /status (common/
 * syncer_status.c, syncer_status_parse: the document comes from the
 * job's own image, docs/security.md), the job's status from its shards'
 * (common/shard_status.c, syncer_status_shards) and the progress the
 * operator writes from it (operator/status.c,
 * status_progress_from_syncer).
 *
 * Input: the first byte's low 4 bits say which shards answered (bit i:
 * shard i is up); the rest is up to 4 documents separated by NUL bytes,
 * each parsed from a buffer of exactly its size (a read past it is
 * caught by the sanitizers). The documents that parse are the shards, in
 * order. Checks: each count of the aggregate is the sum of the shards'
 * (at most UINT64_MAX: a sum does not wrap), tokens and learners_total
 * the largest, learners_connected the fewest, done when every shard is,
 * the shards up counted and the first down named; a share every shard
 * gives in [0, 1] stays in it; the progress has no negative count and a
 * checkpoint error that is valid UTF-8 (it goes into the status JSON).
 */
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/syncer_status.h"
#include "operator/status.h"
#include "tests/fuzz/fuzz_init.h"

const char fuzz_name[] = "status";

#define NSHARDS 4

/* The counts syncer_status_shards adds up (shard_status.c, add_counts). */
static const size_t count_at[] = {
	offsetof(struct syncer_status, round),
	offsetof(struct syncer_status, tokens_merged),
	offsetof(struct syncer_status, merged),
	offsetof(struct syncer_status, late),
	offsetof(struct syncer_status, rejected),
	offsetof(struct syncer_status, empty),
	offsetof(struct syncer_status, stale),
	offsetof(struct syncer_status, clipped),
	offsetof(struct syncer_status, refused_bounds),
	offsetof(struct syncer_status, capped),
	offsetof(struct syncer_status, refused_history),
	offsetof(struct syncer_status, refused_size),
	offsetof(struct syncer_status, steps_undone),
	offsetof(struct syncer_status, heartbeats),
	offsetof(struct syncer_status, heartbeats_refused),
	offsetof(struct syncer_status, merged_steps),
	offsetof(struct syncer_status, double_merged_steps),
	offsetof(struct syncer_status, repeat_base),
	offsetof(struct syncer_status, stale_held),
	offsetof(struct syncer_status, stale_merged),
	offsetof(struct syncer_status, bytes_in),
	offsetof(struct syncer_status, bytes_out),
	offsetof(struct syncer_status, ckpt.failures),
};

static uint64_t count(const struct syncer_status *s, size_t at)
{
	uint64_t v;

	memcpy(&v, (const char *)s + at, sizeof(v));
	return v;
}

static int share_ok(double x)
{
	return isnan(x) || (x >= 0 && x <= 1);
}

/* What one parsed document holds, and the progress made of it. */
static void check_one(const struct syncer_status *s)
{
	struct obs_progress p;
	json_t *j;

	memset(&p, 0, sizeof(p));
	if (s->nevals > SYNCER_STATUS_MAX_EVALS || (s->nevals && !s->evals) ||
	    s->ckpt.fits < -1 || s->ckpt.fits > 1 || s->learners_connected < 0 ||
	    s->learners_total < 0 || s->owned < 0 ||
	    memchr(s->ckpt.error, 0, sizeof(s->ckpt.error)) == NULL ||
	    memchr(s->ckpt.resumed_from, 0, sizeof(s->ckpt.resumed_from)) == NULL)
		abort();
	status_progress_from_syncer(s, &p);
	if (!p.have || p.round < 0 || p.tokens < 0 || p.ckpt_failures < 0 ||
	    p.ckpt_last_ok_round < -1 ||
	    memchr(p.ckpt_error, 0, sizeof(p.ckpt_error)) == NULL)
		abort();
	/* jansson takes valid UTF-8 only: the status PUT carries it */
	if (!(j = json_string(p.ckpt_error)))
		abort();
	json_decref(j);
}

static void check_counts(const struct syncer_status *agg,
			 const struct syncer_status *st, int n)
{
	for (size_t k = 0; k < sizeof(count_at) / sizeof(count_at[0]); k++) {
		uint64_t sum = 0;

		for (int i = 0; i < n; i++)
			if (__builtin_add_overflow(sum, count(&st[i], count_at[k]),
						   &sum))
				sum = UINT64_MAX;
		if (count(agg, count_at[k]) != sum)
			abort();
	}
}

static void check_aggregate(const struct syncer_status *agg,
			    const struct syncer_status *st, const int *up, int n)
{
	uint64_t tokens = 0;
	int conn = INT_MAX, total = 0, done = 1, nup = 0, down = -1, owned = 0;
	int shares = 1;

	for (int i = 0; i < n; i++) {
		if (st[i].tokens > tokens)
			tokens = st[i].tokens;
		if (st[i].learners_connected < conn)
			conn = st[i].learners_connected;
		if (st[i].learners_total > total)
			total = st[i].learners_total;
		done &= st[i].done;
		nup += up[i];
		if (!up[i] && down < 0)
			down = i;
		owned += st[i].owned;
		shares &= share_ok(st[i].goodput) && share_ok(st[i].gpb.merged);
	}
	check_counts(agg, st, n);
	if (agg->tokens != tokens || agg->learners_connected != conn ||
	    agg->learners_total != total || agg->done != done ||
	    agg->shards != n || agg->shards_up != nup || agg->shard_down != down ||
	    agg->owned != owned || agg->nevals != st[0].nevals ||
	    (agg->nevals && memcmp(agg->evals, st[0].evals,
				   agg->nevals * sizeof(*agg->evals))))
		abort();
	if (shares && (!share_ok(agg->goodput) || !share_ok(agg->gpb.merged)))
		abort();
	check_one(agg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct syncer_status st[NSHARDS], agg;
	int up[NSHARDS], n = 0;
	size_t at = 1;

	if (size < 1 || size > (1 << 16))
		return 0;
	for (int d = 0; d < NSHARDS && at <= size; d++) {
		const uint8_t *end = memchr(data + at, 0, size - at);
		size_t len = end ? (size_t)(end - (data + at)) : size - at;
		char *doc = malloc(len ? len : 1);
		struct err e;

		if (!doc)
			break;
		memcpy(doc, data + at, len);
		if (!syncer_status_parse(doc, len, &st[n], &e)) {
			check_one(&st[n]);
			up[n] = data[0] >> n & 1;
			n++;
		}
		free(doc);
		at += len + 1;
	}
	if (n) {
		syncer_status_init(&agg);
		syncer_status_shards(&agg, st, up, n);
		check_aggregate(&agg, st, up, n);
		syncer_status_release(&agg);
	}
	for (int i = 0; i < n; i++)
		syncer_status_release(&st[i]);
	return 0;
}
