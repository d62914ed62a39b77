/*
 * An external job's model before the core (syncer/seed.h): the first
 * hello's table adopted, a seed taken fragment by fragment (each once,
 * round 0 only), a payload that does not decode or is not finite
 * refused with the fragment named, a new seeder starting over, and the
 * job's parameters made from the whole seed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "common/encoding.h"
#include "common/jobspec.h"
#include "common/wire.h"
#include "syncer/seed.h"
#include "tests/unit/testlib.h"

static const uint64_t sizes[2] = { 3, 2 };

static void hello(struct wire_hello *h)
{
	memset(h, 0, sizeof(*h));
	h->learner_id = 1;
	h->fingerprint = 0xfeed;
	h->fragments = 2;
	h->nsizes = 2;
	h->fragment_sizes = sizes;
}

/* Fragment p's answer of round `round`, every value v (n values). */
static struct wire_answer answer(uint8_t *buf, int p, uint64_t round,
				 float v, size_t n)
{
	float x[8];

	for (size_t i = 0; i < n; i++)
		x[i] = v;
	assert_int_equal(enc_encode(ENC_F32, x, n, buf, NULL), 0);
	return (struct wire_answer){ .fragment = (uint32_t)p, .round = round,
				     .encoding = ENC_F32, .payload = buf,
				     .payload_len = n * sizeof(float) };
}

static void a_seed_is_taken_whole_and_once(void **state)
{
	struct syncer_params base = { .nparams = 0 };
	const struct syncer_params *prm;
	struct wire_answer a;
	struct wire_hello h;
	uint8_t buf[64];
	struct seed sd;
	struct err e;

	(void)state;
	seed_init(&sd);
	assert_int_equal(sd.failed, -1);
	hello(&h);
	h.nsizes = 1;   /* sizes missing */
	assert_int_equal(seed_adopt(&sd, &h, &base, &e), -1);
	assert_string_equal(e.msg, "fragment sizes missing: learner sent 1 "
			    "sizes for 2 fragments");
	hello(&h);
	assert_int_equal(seed_adopt(&sd, &h, &base, &e), 0);
	assert_int_equal(sd.ft.nfrags, 2);
	assert_ptr_equal(sd.prm.ft, &sd.ft);
	a = answer(buf, 0, 0, 1.0f, 3);
	assert_int_equal(seed_wants(&sd, &a), 0);   /* nobody asked yet */
	assert_int_equal(seed_begin(&sd, 5.0, &e), 0);
	assert_int_equal(sd.left, 2);
	assert_int_equal(seed_wants(&sd, &a), 1);
	a.round = 3;
	assert_int_equal(seed_wants(&sd, &a), 0);   /* not round 0 */
	a.round = 0;
	assert_int_equal(seed_put(&sd, &a, 6.0, &e), 0);
	assert_int_equal(seed_wants(&sd, &a), 0);   /* once */
	assert_near(sd.moved, 6.0, 1e-12);

	a = answer(buf, 1, 0, NAN, 2);
	assert_int_equal(seed_put(&sd, &a, 7.0, &e), -1);
	assert_string_equal(e.msg, "seed of fragment 1: value 0 is not finite");
	a = answer(buf, 1, 0, 2.0f, 2);
	a.payload_len = 5;   /* truncated */
	assert_int_equal(seed_put(&sd, &a, 7.0, &e), -1);
	assert_non_null(strstr(e.msg, "seed of fragment 1: "));
	assert_int_equal(seed_wants(&sd, &a), 1);   /* still wanted */

	/* another seeder: what the first sent is gone */
	assert_int_equal(seed_begin(&sd, 8.0, &e), 0);
	a = answer(buf, 0, 0, 1.0f, 3);
	assert_int_equal(seed_wants(&sd, &a), 1);
	assert_int_equal(seed_put(&sd, &a, 9.0, &e), 0);
	a = answer(buf, 1, 0, 2.0f, 2);
	assert_int_equal(seed_put(&sd, &a, 9.0, &e), 1);   /* whole */

	assert_non_null(prm = seed_params(&sd, 1));
	assert_int_equal(prm->nparams, 5);
	assert_near(prm->init_params[0], 1.0, 1e-12);
	assert_near(prm->init_params[2], 1.0, 1e-12);
	assert_near(prm->init_params[3], 2.0, 1e-12);
	assert_near(prm->init_params[4], 2.0, 1e-12);
	/* from a checkpoint: zeros the checkpoint replaces */
	assert_non_null(prm = seed_params(&sd, 0));
	assert_near(prm->init_params[3], 0.0, 1e-12);
	seed_release(&sd);
}

/*
 * A first Hello whose table is over spec.syncer.maxParameters (for this
 * shard's fragments) is refused, and so is one whose sizes overflow.
 */
static void a_table_over_the_budget_is_refused(void **state)
{
	const uint64_t big[4] = { 600, 500, 400, 300 };
	const uint64_t huge[2] = { UINT64_MAX, 2 }, edge[2] = { 1ull << 63, 1 };
	struct job_spec js = { .syncer = { .max_parameters = 1000 } };
	struct syncer_params base = { .js = &js };
	struct wire_hello h;
	struct err e;

	(void)state;
	hello(&h);
	h.fragments = 4;
	h.nsizes = 4;
	h.fragment_sizes = big;
	assert_int_equal(seed_check_budget(&h, &base, &e), -1);
	assert_string_equal(e.msg, "the learner's table has 1800 parameters "
			    "for this syncer (1800 in the job): more than "
			    "spec.syncer.maxParameters 1000");
	/* shard 1 of 2 holds fragments 1 and 3: 800 */
	base.shard = 1;
	base.nshards = 2;
	assert_int_equal(seed_check_budget(&h, &base, &e), 0);
	base.shard = 0;   /* 0 and 2: 1000, the most it may */
	assert_int_equal(seed_check_budget(&h, &base, &e), 0);
	js.syncer.max_parameters = 999;
	assert_int_equal(seed_check_budget(&h, &base, &e), -1);
	assert_string_equal(e.msg, "the learner's table has 1000 parameters "
			    "for this syncer shard (1800 in the job): more than "
			    "spec.syncer.maxParameters 999");
	js.syncer.max_parameters = UINT64_MAX;
	h.fragments = 2;
	h.nsizes = 2;
	h.fragment_sizes = huge;
	assert_int_equal(seed_check_budget(&h, &base, &e), -1);
	assert_string_equal(e.msg, "the learner's table has more parameters "
			    "than 64 bits count (fragment 1 of 2)");
	/* 2^63 + 1 values: no overflow, more than memory can address (and
	 * over the default budget) */
	h.fragment_sizes = edge;
	assert_int_equal(seed_check_budget(&h, &base, &e), -1);
	assert_string_equal(e.msg, "the learner's table has 9223372036854775809 "
			    "parameters: more than this machine can address");
	jobspec_defaults(&js);
	assert_int_equal(seed_check_budget(&h, &base, &e), -1);
	assert_non_null(strstr(e.msg, "more than spec.syncer.maxParameters"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(a_seed_is_taken_whole_and_once),
		cmocka_unit_test(a_table_over_the_budget_is_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
