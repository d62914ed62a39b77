/* Syncer shards: which fragments a shard owns, its checkpoints' identity,
 * and the job's status from its shards' (common/shard.h,
 * common/syncer_status.h syncer_status_shards). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "common/shard.h"
#include "common/syncer_status.h"
#include "tests/unit/testlib.h"

/* 7 tensors into 5 fragments, the way every table is cut. */
static void job_table(struct frag_table *ft)
{
	struct frag_tensor t[7] = {
		{ .offset = 0, .numel = 40, .is_embedding = 1 },
		{ .offset = 40, .numel = 30, .is_embedding = 0 },
		{ .offset = 70, .numel = 25, .is_embedding = 0 },
		{ .offset = 95, .numel = 20, .is_embedding = 0 },
		{ .offset = 115, .numel = 15, .is_embedding = 0 },
		{ .offset = 130, .numel = 10, .is_embedding = 0 },
		{ .offset = 140, .numel = 5, .is_embedding = 0 },
	};

	assert_int_equal(frag_table_init(ft, t, 7, 5, NULL), 0);
}

static void every_fragment_has_one_owner(void **state)
{
	struct frag_table g, part[3];
	int gid[3][5], seen[5] = { 0 };
	size_t total = 0;

	(void)state;
	job_table(&g);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(shard_table(&part[i], gid[i], &g, i, 3, NULL), 0);
		assert_int_equal(part[i].nfrags, shard_count(5, i, 3));
		/* the job's fingerprint: what learners compare */
		assert_true(part[i].fingerprint == g.fingerprint);
		for (int q = 0; q < part[i].nfrags; q++) {
			int p = gid[i][q];

			assert_int_equal(shard_owner(p, 3), i);
			assert_true(q == 0 || gid[i][q - 1] < p);   /* job's order */
			assert_int_equal(part[i].frags[q].numel, g.frags[p].numel);
			assert_int_equal(part[i].frags[q].ntensors, g.frags[p].ntensors);
			for (int k = 0; k < g.frags[p].ntensors; k++)
				assert_int_equal(part[i].frags[q].tensors[k],
						 g.frags[p].tensors[k]);
			seen[p]++;
			total += part[i].frags[q].numel;
		}
	}
	for (int p = 0; p < 5; p++)
		assert_int_equal(seen[p], 1);
	assert_int_equal(total, 145);
	/* shard 0 of 3 owns fragments 0 and 3 */
	assert_int_equal(gid[0][0], 0);
	assert_int_equal(gid[0][1], 3);
	assert_int_equal(gid[2][0], 2);
	for (int i = 0; i < 3; i++)
		frag_table_release(&part[i]);
	frag_table_release(&g);
}

static void bad_shards_are_refused(void **state)
{
	struct frag_table g, part;
	int gid[5];
	struct err e;

	(void)state;
	job_table(&g);
	assert_int_equal(shard_table(&part, gid, &g, 0, 6, &e), -1);
	assert_string_equal(e.msg, "shard 0 of 6: a job of 5 fragments has shards "
			    "0 .. S-1 with 1 <= S <= 5");
	assert_int_equal(shard_table(&part, gid, &g, 2, 2, &e), -1);
	assert_int_equal(shard_table(&part, gid, &g, -1, 2, &e), -1);
	/* one shard: the whole table */
	assert_int_equal(shard_table(&part, gid, &g, 0, 1, NULL), 0);
	assert_int_equal(part.nfrags, 5);
	frag_table_release(&part);
	frag_table_release(&g);
}

static void checkpoints_are_each_shards_own(void **state)
{
	uint64_t fp = 0x1234abcdULL, seen[4];

	(void)state;
	/* unsharded: the fingerprint itself, so older checkpoints load */
	assert_true(shard_fingerprint(fp, 0, 1) == fp);
	for (int i = 0; i < 4; i++) {
		seen[i] = shard_fingerprint(fp, i, 4);
		assert_true(seen[i] != fp);
		assert_true(seen[i] != shard_fingerprint(fp, i, 3));
		for (int j = 0; j < i; j++)
			assert_true(seen[i] != seen[j]);
	}
}

static void shard_status(struct syncer_status *s, uint64_t round, int owned,
			 double uptime, int done)
{
	syncer_status_init(s);
	s->round = round;
	s->owned = owned;
	s->uptime = uptime;
	s->goodput = uptime / 2;
	s->done = done;
	s->tokens = 1000 + round;
	s->merged = round;
	s->double_merged_steps = round == 30 ? 2 : 0;
	s->have_invariants = 1;
	s->learners_connected = owned == 1 ? 3 : 4;
	s->learners_total = 4;
}

static void job_status_from_shards(void **state)
{
	struct syncer_status st[3], all;
	int up[3] = { 1, 0, 1 };

	(void)state;
	shard_status(&st[0], 10, 2, 1.0, 1);
	shard_status(&st[1], 30, 2, 0.5, 1);
	shard_status(&st[2], 20, 1, NAN, 0);
	syncer_status_init(&all);
	syncer_status_shards(&all, st, up, 3);
	assert_int_equal(all.round, 60);             /* rounds add up */
	assert_int_equal(all.merged, 60);
	assert_int_equal(all.double_merged_steps, 2);
	assert_int_equal(all.tokens, 1030);          /* the largest */
	assert_int_equal(all.owned, 5);
	/* weighted by owned fragments, over the shards that say */
	assert_near(all.uptime, (2 * 1.0 + 2 * 0.5) / 4, 1e-12);
	assert_near(all.goodput, (2 * 0.5 + 2 * 0.25) / 4, 1e-12);
	assert_int_equal(all.done, 0);               /* shard 2 is not */
	assert_int_equal(all.learners_connected, 3); /* the fewest */
	assert_int_equal(all.shards, 3);
	assert_int_equal(all.shards_up, 2);
	assert_int_equal(all.shard_down, 1);
	assert_int_equal(all.have_invariants, 1);
	assert_int_equal(all.ckpt.fits, -1);        /* no shard says */
	st[2].done = 1;
	up[1] = 1;
	/* a checkpoint fits when every shard's that says does */
	st[0].ckpt.fits = 1;
	st[2].ckpt.fits = 0;
	st[2].ckpt.needed_bytes = 300;
	st[2].ckpt.volume_free_bytes = 100;
	syncer_status_shards(&all, st, up, 3);
	assert_int_equal(all.done, 1);
	assert_int_equal(all.shard_down, -1);
	assert_int_equal(all.ckpt.fits, 0);
	assert_int_equal(all.ckpt.needed_bytes, 300);
	assert_int_equal(all.ckpt.volume_free_bytes, 100);
	st[2].ckpt.fits = 1;
	/* the job's last checkpoint is its oldest shard's; shard 1 says none */
	st[0].ckpt.last_ok_time = 2000.5;
	st[2].ckpt.last_ok_time = 1500.25;
	syncer_status_shards(&all, st, up, 3);
	assert_int_equal(all.ckpt.fits, 1);
	assert_true(all.ckpt.last_ok_time == 1500.25);
	assert_int_equal(all.have_claims, 0);       /* no shard says */
	/* each shard excludes on its own cuts: the job's are all of them */
	st[0].have_claims = st[2].have_claims = 1;
	st[0].claims_cut = 5;
	st[2].claims_cut = 7;
	st[0].nexcluded = 2;
	st[0].excluded[0] = 1;
	st[0].excluded[1] = 3;
	st[2].nexcluded = 2;
	st[2].excluded[0] = 0;
	st[2].excluded[1] = 3;
	syncer_status_shards(&all, st, up, 3);
	assert_int_equal(all.have_claims, 1);
	assert_int_equal(all.claims_cut, 12);
	assert_int_equal(all.nexcluded, 3);
	assert_int_equal(all.excluded[0], 0);
	assert_int_equal(all.excluded[1], 1);
	assert_int_equal(all.excluded[2], 3);
	syncer_status_release(&all);
	for (int i = 0; i < 3; i++)
		syncer_status_release(&st[i]);
}

/* Counts past 2^64 − 1 in all are held there, not wrapped round to a
 * small number (regress/status/counts-sum-past-2-64). */
static void a_sum_of_counts_does_not_wrap(void **state)
{
	struct syncer_status st[2], all;
	int up[2] = { 1, 1 };

	(void)state;
	shard_status(&st[0], 10, 1, 1.0, 0);
	shard_status(&st[1], 30, 1, 1.0, 0);
	st[0].bytes_in = st[1].bytes_in = UINT64_MAX / 2 + 7;
	st[0].ckpt.failures = UINT64_MAX;
	st[1].ckpt.failures = 1;
	syncer_status_init(&all);
	syncer_status_shards(&all, st, up, 2);
	assert_true(all.bytes_in == UINT64_MAX);
	assert_true(all.ckpt.failures == UINT64_MAX);
	assert_int_equal(all.round, 40);           /* the others still add */
	syncer_status_release(&all);
	for (int i = 0; i < 2; i++)
		syncer_status_release(&st[i]);
}

/*
 * Uptime per fragment: a shard that stops answering counts the time since
 * its last /status as down for its fragments, while the shards that
 * answer say their own.
 */
static void a_shard_down_counts_its_fragments_down(void **state)
{
	struct syncer_status st[2], all;
	int up[2] = { 1, 0 };

	(void)state;
	shard_status(&st[0], 10, 2, 1.0, 0);
	shard_status(&st[1], 30, 2, 0.5, 0);
	st[0].elapsed = 150;
	st[0].uptime_span = 140;
	st[1].elapsed = 100;     /* its last answer, 50 s ago */
	st[1].uptime_span = 100; /* 50 s down in it */
	syncer_status_init(&all);
	syncer_status_shards(&all, st, up, 2);
	/* shard 1: (50 + 50) s down of 150 */
	assert_near(all.uptime, (2 * 1.0 + 2 * (1 - 100.0 / 150)) / 4, 1e-12);
	assert_near(all.elapsed, 150, 1e-12);
	/* answering again, its own figure */
	up[1] = 1;
	syncer_status_shards(&all, st, up, 2);
	assert_near(all.uptime, (2 * 1.0 + 2 * 0.5) / 4, 1e-12);
	/* a shard that never said its span keeps its figure */
	up[1] = 0;
	st[1].uptime_span = NAN;
	syncer_status_shards(&all, st, up, 2);
	assert_near(all.uptime, (2 * 1.0 + 2 * 0.5) / 4, 1e-12);
	syncer_status_release(&all);
	for (int i = 0; i < 2; i++)
		syncer_status_release(&st[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(every_fragment_has_one_owner),
		cmocka_unit_test(bad_shards_are_refused),
		cmocka_unit_test(a_shard_down_counts_its_fragments_down),
		cmocka_unit_test(checkpoints_are_each_shards_own),
		cmocka_unit_test(job_status_from_shards),
		cmocka_unit_test(a_sum_of_counts_does_not_wrap),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
