/*
 * fuzz_seed: an external job's seeding (syncer/seed.c; docs/syncer.md,
 * Model-agnostic jobs) as syncer/stream_msg.c drives it: the first
 * learner's Hello gives the table (seed_check_budget, seed_adopt), the
 * seeder is asked (seed_begin) and its round-0 Answers fill the seed
 * (seed_wants, seed_put) until it is whole; then the job's parameters
 * are made from it (seed_params). Messages are decoded by common/wire.c;
 * an answer in parts is fuzz_wire's, and is skipped here.
 *
 * Input: byte 0: the syncer is shard (b >> 2) % S of S = 1 + (b & 3);
 * then records of tests/fuzz/fuzz_wire.c's shape: a flag byte (bit 0: a
 * new seeder is asked first, as when one goes away), a length (2 bytes,
 * little-endian), a LearnerMessage. An answer that does not decode
 * drops the seeder, and a new one is asked.
 *
 * Checks: the seed is whole exactly when every fragment this shard owns
 * came from the present seeder, once each (seed_wants refuses one again);
 * the parameters have the table's size, each owned fragment holds the
 * values its answer carried (decoded here again) and are finite, and the
 * fragments of other shards are zeros.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/encoding.h"
#include "common/shard.h"
#include "common/wire.h"
#include "syncer/seed.h"
#include "tests/fuzz/fuzz_init.h"

const char fuzz_name[] = "seed";

#define MAX_PARAMS 4096   /* spec.syncer.maxParameters here */
#define MAX_TABLE  16384  /* the most parameters of a table taken */

struct run {
	struct seed sd;
	struct job_spec js;
	struct syncer_params base;
	int begun, whole, owned, got;
	float *ref;            /* what each owned fragment's answer carried */
	size_t *at;            /* where fragment p is in ref */
	unsigned char *have;   /* fragments put since the seeder was asked */
};

static void ask(struct run *u)
{
	struct err e;

	if (seed_begin(&u->sd, 1.0, &e))
		abort();   /* at most MAX_PARAMS values */
	u->begun = 1;
	u->got = 0;
	memset(u->have, 0, (size_t)u->sd.ft.nfrags);
}

static void hello(struct run *u, const struct wire_hello *h)
{
	size_t n = 0;
	struct err e;

	/* a shard holds the others' fragments as zero pages: the whole
	 * model is kept small here, not by the budget */
	for (size_t p = 0; p < h->nsizes; p++)
		if (h->fragment_sizes[p] > MAX_TABLE ||
		    (n += h->fragment_sizes[p]) > MAX_TABLE)
			return;
	n = 0;
	if (u->sd.have_ft || seed_check_budget(h, &u->base, &e) ||
	    seed_adopt(&u->sd, h, &u->base, &e))
		return;
	u->at = calloc((size_t)u->sd.ft.nfrags, sizeof(size_t));
	u->have = calloc((size_t)u->sd.ft.nfrags, 1);
	for (int p = 0; u->at && p < u->sd.ft.nfrags; p++) {
		u->at[p] = n;
		n += u->sd.ft.frags[p].numel;
		u->owned += seed_owns(&u->sd, p);
	}
	if (!u->at || !u->have || !(u->ref = calloc(n + 1, sizeof(float))))
		abort();
	ask(u);
}

static void answer(struct run *u, const struct wire_answer *a)
{
	int p = (int)a->fragment, rc;
	struct err e;

	if (!u->begun || u->whole || a->payload_total)
		return;
	if (!seed_wants(&u->sd, a)) {
		if (a->round == 0 && p >= 0 && p < u->sd.ft.nfrags &&
		    seed_owns(&u->sd, p) && !u->have[p])
			abort();   /* one it waits for, refused */
		return;
	}
	if (u->have[p] || !seed_owns(&u->sd, p))
		abort();   /* wanted again, or another shard's */
	rc = seed_put(&u->sd, a, 2.0, &e);
	if (rc < 0) {
		ask(u);    /* the stream is closed: another seeder */
		return;
	}
	if (enc_decode((enum payload_enc)a->encoding, a->payload,
		       a->payload_len, u->ref + u->at[p],
		       u->sd.ft.frags[p].numel, &e))
		abort();   /* seed_put decoded it */
	u->have[p] = 1;
	u->whole = rc == 1;
	if (u->whole != (++u->got == u->owned))
		abort();
}

static void check_params(struct run *u)
{
	const struct syncer_params *prm = seed_params(&u->sd, 1);
	size_t n = 0;
	float *x;

	if (!prm)
		abort();
	for (int p = 0; p < u->sd.ft.nfrags; p++)
		n += u->sd.ft.frags[p].numel;
	if (prm->nparams != n || prm->ft != &u->sd.ft ||
	    !(x = malloc((n + 1) * sizeof(float))))
		abort();
	for (int p = 0; p < u->sd.ft.nfrags; p++) {
		size_t k = u->sd.ft.frags[p].numel;
		int mine = seed_owns(&u->sd, p);

		frag_gather(&u->sd.ft, p, prm->init_params, x);
		for (size_t i = 0; i < k; i++)
			if (mine ? (!isfinite(x[i]) ||
				    memcmp(&x[i], &u->ref[u->at[p] + i], 4))
				 : x[i] != 0)
				abort();
	}
	free(x);
	seed_started(&u->sd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct run u;
	size_t at = 1;

	if (size < 1 || size > (1 << 16))
		return 0;
	memset(&u, 0, sizeof(u));
	seed_init(&u.sd);
	jobspec_defaults(&u.js);
	u.js.syncer.max_parameters = MAX_PARAMS;
	u.base.js = &u.js;
	u.base.nshards = 1 + (data[0] & 3);
	u.base.shard = (data[0] >> 2) % u.base.nshards;
	while (at + 3 <= size && !u.whole) {
		size_t len = (size_t)data[at + 1] | (size_t)data[at + 2] << 8;
		struct wire_learner_msg m;
		struct err e;

		if (data[at] & 1 && u.begun)
			ask(&u);
		at += 3;
		if (len > size - at)
			len = size - at;
		if (!wire_learner_decode(data + at, len, &m, &e)) {
			if (m.kind == WIRE_HELLO)
				hello(&u, &m.hello);
			else if (m.kind == WIRE_ANSWER)
				answer(&u, &m.answer);
			wire_learner_release(&m);
		}
		at += len;
	}
	if (u.whole)
		check_params(&u);
	free(u.ref);
	free(u.at);
	free(u.have);
	seed_release(&u.sd);
	return 0;
}
