/*
 * Evaluators (syncer/eval_remote.c; docs/syncer.md, Evaluators) on the
 * syncer's core without gRPC, on a fake clock: an evaluator's hello is
 * checked like a learner's (and refused for a job of the reference GPT)
 * but joins none of the M learners and never
 * counts for a quorum; at most EVAL_REMOTE_MAX are connected; its
 * reports fill the eval history /status and /metrics show, and a loss
 * that is not finite, a round not merged yet, a round not newer than the
 * last evaluation and a round too old to know its tokens are refused and
 * counted.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/encoding.h"
#include "common/wire.h"
#include "syncer/syncer_int.h"
#include "tests/unit/corefix.h"

static int setup(void **state)
{
	struct fx *f = corefix_new("evr");

	f->js.model.kind = MODEL_EXTERNAL;
	f->js.syncer.checkpoint_every = 0;
	f->s = calloc(1, sizeof(*f->s));
	assert_non_null(f->s);
	assert_int_equal(core_init(f->s, &f->prm, f->now, NULL), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	corefix_free(*state);
	return 0;
}

static struct wire_hello hello_of(struct fx *f, uint32_t id, int evaluator,
				  uint64_t *sizes)
{
	return corefix_hello(f, id, evaluator, sizes);
}

static void join_learner(struct fx *f, uint32_t id)
{
	struct round_action pulls[8];
	uint64_t sizes[2], resume;
	struct wire_hello h = hello_of(f, id, 0, sizes);

	assert_int_equal(core_hello_check(f->s, &h, NULL), CORE_JOIN_OK);
	core_join(f->s, &h, f->now, &resume, pulls, 8);
}

static int join_evaluator(struct fx *f, uint32_t id, uint64_t fingerprint)
{
	uint64_t sizes[2];
	struct wire_hello h = hello_of(f, id, 1, sizes);
	struct err e;

	h.fingerprint = fingerprint;
	return core_evaluator_join(f->s, &h, &e);
}

/* Learner id answers round/frag with every value v, one step of tokens. */
static void answer(struct fx *f, int id, uint64_t round, int frag, float v,
		   uint64_t tokens)
{
	size_t n = f->ft.frags[frag].numel;
	float x[16];
	uint8_t buf[64];
	struct wire_answer a = {
		.fragment = (uint32_t)frag, .round = round, .base_version = 0,
		.steps = 1, .tokens = tokens, .encoding = ENC_F32, .payload = buf,
		.payload_len = n * sizeof(float), .step = 1,
	};

	for (size_t i = 0; i < n; i++)
		x[i] = v;
	assert_int_equal(enc_encode(ENC_F32, x, n, buf, NULL), 0);
	assert_int_equal(core_answer(f->s, id, &a, f->now), CORE_QUEUED);
}

static int report(struct fx *f, uint64_t round, double loss)
{
	struct wire_evaluation ev = { .round = round, .loss = loss,
				      .tokens = 1000 };
	struct err e;

	return core_evaluation(f->s, 0, &ev, f->now, &e);
}

/* Evaluators join apart from the M learners: no quorum, no pacing. */
static void evaluators_are_not_learners(void **state)
{
	struct fx *f = *state;
	struct round_action a;
	uint64_t sizes[2];
	struct wire_hello h;
	struct err e;

	for (uint32_t id = 0; id < EVAL_REMOTE_MAX; id++)
		assert_int_equal(join_evaluator(f, id, f->ft.fingerprint),
				 CORE_JOIN_OK);
	assert_int_equal(f->s->evr.connected, EVAL_REMOTE_MAX);
	assert_int_equal(f->s->learners_connected, 0);
	/* one more is one too many; an id out of range, another model */
	assert_int_equal(join_evaluator(f, 0, f->ft.fingerprint), CORE_JOIN_FULL);
	eval_remote_leave(&f->s->evr, 3, "test");
	assert_int_equal(join_evaluator(f, EVAL_REMOTE_MAX, f->ft.fingerprint),
			 CORE_JOIN_INVALID);
	assert_int_equal(join_evaluator(f, 3, f->ft.fingerprint ^ 1),
			 CORE_JOIN_MISMATCH);
	h = hello_of(f, 3, 1, sizes);
	h.job = "other";
	assert_int_equal(core_evaluator_join(f->s, &h, &e), CORE_JOIN_MISMATCH);
	assert_string_equal(e.msg, "evaluator 3 belongs to job 'other', this "
			    "syncer to 'evr'");
	/* the reference GPT is the syncer's to evaluate */
	f->js.model.kind = MODEL_GPT;
	assert_int_equal(join_evaluator(f, 3, f->ft.fingerprint),
			 CORE_JOIN_INVALID);
	f->js.model.kind = MODEL_EXTERNAL;
	assert_int_equal(f->s->evr.connected, EVAL_REMOTE_MAX - 1);
	/* K = 2: three evaluators and one learner start no round */
	join_learner(f, 0);
	syncer_round_poll(&f->s->rs, f->now, &a);
	assert_int_equal(a.kind, ROUND_NONE);
	assert_int_equal(f->s->learners_connected, 1);
	join_learner(f, 1);
	syncer_round_poll(&f->s->rs, f->now, &a);
	assert_int_equal(a.kind, ROUND_PULL);
	assert_int_equal(a.round, 1);
}

/* Reports go into the eval history; bad ones are refused and counted. */
static void reports_fill_the_history(void **state)
{
	struct fx *f = *state;
	struct round_action a;
	struct core_merged mg;
	const struct syncer_ckpt *c = &f->s->acc;
	char *txt;
	json_t *o, *ev;

	assert_int_equal(join_evaluator(f, 0, f->ft.fingerprint), CORE_JOIN_OK);
	join_learner(f, 0);
	join_learner(f, 1);
	/* Θ as it started: round 0 */
	assert_int_equal(report(f, 0, 0.9), 0);
	assert_int_equal(c->nevals, 1);
	assert_int_equal(c->evals[0].round, 0);
	assert_int_equal(c->evals[0].tokens, 0);
	/* round 1 is not merged yet */
	assert_int_equal(report(f, 1, 0.5), -1);
	syncer_round_poll(&f->s->rs, f->now, &a);
	assert_int_equal(a.kind, ROUND_PULL);
	f->now += 0.2;
	core_heartbeat(f->s, 0, &(struct wire_heartbeat){ .step = 1,
		.tokens = 300, .incarnation = 1 }, f->now);
	core_heartbeat(f->s, 1, &(struct wire_heartbeat){ .step = 1,
		.tokens = 200, .incarnation = 2 }, f->now);
	answer(f, 0, a.round, a.frag, 0.1f, 300);
	answer(f, 1, a.round, a.frag, 0.3f, 200);
	syncer_round_poll(&f->s->rs, f->now, &a);
	assert_int_equal(a.kind, ROUND_MERGE);
	core_merge(f->s, a.slot, f->now, &mg);
	assert_int_equal(mg.round, 1);
	assert_int_equal(f->s->evr.merged_max, 1);
	assert_int_equal(report(f, 1, 0.5), 0);
	assert_int_equal(c->nevals, 2);
	assert_int_equal(c->evals[1].round, 1);
	assert_int_equal(c->evals[1].tokens, 500);   /* trained by then */
	assert_float_equal(c->evals[1].loss, 0.5, 0);
	/* not newer than the last; not finite */
	assert_int_equal(report(f, 1, 0.4), -1);
	assert_int_equal(report(f, 0, 0.4), -1);
	assert_int_equal(report(f, 1, NAN), -1);
	assert_int_equal(report(f, 1, INFINITY), -1);
	assert_int_equal(c->nevals, 2);
	assert_int_equal(f->s->evr.evaluations, 2);
	assert_int_equal(f->s->evr.refused, 5);

	txt = http_get(f, "/status");
	o = json_loads(txt, 0, NULL);
	free(txt);
	assert_non_null(o);
	assert_float_equal(json_real_value(json_object_get(o, "eval_loss")),
			   0.5, 0);
	assert_int_equal(json_array_size(json_object_get(o, "eval_history")), 2);
	ev = json_object_get(o, "evaluators");
	assert_int_equal(json_integer_value(json_object_get(ev, "connected")), 1);
	assert_int_equal(json_integer_value(json_object_get(ev, "evaluations")), 2);
	assert_int_equal(json_integer_value(json_object_get(ev, "refused")), 5);
	assert_int_equal(json_integer_value(json_object_get(o,
		"learners_connected")), 2);
	json_decref(o);
	txt = http_get(f, "/metrics");
	assert_non_null(strstr(txt, "# TYPE ddiloco_syncer_evaluators_connected "
				    "gauge\nddiloco_syncer_evaluators_connected 1\n"));
	assert_non_null(strstr(txt, "# TYPE ddiloco_syncer_evaluations_total "
				    "counter\nddiloco_syncer_evaluations_total 2\n"));
	assert_non_null(strstr(txt, "# HELP ddiloco_syncer_evaluations_refused_total "));
	assert_non_null(strstr(txt, "ddiloco_syncer_evaluations_refused_total 5\n"));
	assert_non_null(strstr(txt, "ddiloco_syncer_eval_loss 0.5"));
	free(txt);
}

/* A round older than every round whose tokens are kept is refused; the
 * newest known round before a reported one gives its tokens. */
static void old_rounds_are_refused(void **state)
{
	struct fx *f = *state;
	const struct syncer_ckpt *c = &f->s->acc;

	/* rounds 2, 4, ..., 2·RING + 10: rounds 12 and on are kept */
	for (uint64_t r = 2; r <= 2 * EVAL_REMOTE_RING + 10; r += 2) {
		f->s->acc.tokens_trained = 100 * r;
		eval_remote_merged(&f->s->evr, r, f->s->acc.tokens_trained);
	}
	assert_int_equal(report(f, 1, 0.7), -1);
	assert_int_equal(f->s->evr.refused, 1);
	/* round 241 was not merged (odd): round 240's tokens */
	assert_int_equal(report(f, 241, 0.7), 0);
	assert_int_equal(c->evals[c->nevals - 1].tokens, 24000);
	assert_int_equal(report(f, 2 * EVAL_REMOTE_RING + 10, 0.6), 0);
	assert_int_equal(c->evals[c->nevals - 1].tokens,
			 100 * (2 * EVAL_REMOTE_RING + 10));
	assert_int_equal(report(f, 2 * EVAL_REMOTE_RING + 11, 0.6), -1);
	assert_int_equal(f->s->evr.refused, 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(evaluators_are_not_learners, setup, teardown),
		cmocka_unit_test_setup_teardown(reports_fill_the_history, setup, teardown),
		cmocka_unit_test_setup_teardown(old_rounds_are_refused, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
