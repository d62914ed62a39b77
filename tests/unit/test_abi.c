/*
 * The learner ABI (include/ddiloco.h) driven against a sidecar-side
 * exchange: the parameter table, start, poll (stats, answers, updates,
 * done), the resume step, bad input, and what libddiloco.so exports.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/exchange.h"
#include "common/util.h"
#include "include/ddiloco.h"
#include "trainer/model.h"
#include "tests/unit/testlib.h"

/* V 16, context 8, 1 layer, 2 heads, 8 channels, tied; 3 fragments */
static const struct model_config cfg = { 16, 8, 1, 2, 8, 1 };
#define NFRAGS 3

struct fx {
	char dir[64];
	char job[128];
	struct frag_table ft;   /* the sidecar's own, from trainer/model.c */
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	FILE *fp;

	assert_int_equal(testlib_tmpdir(f->dir, sizeof(f->dir), "ddabi-test"), 0);
	assert_int_equal(model_frag_table(&cfg, NFRAGS, &f->ft, NULL), 0);
	snprintf(f->job, sizeof(f->job), "%s/job.yaml", f->dir);
	fp = fopen(f->job, "w");
	assert_non_null(fp);
	fprintf(fp, "apiVersion: ddiloco.io/v1alpha1\n"
		"kind: DecoupledTrainingJob\n"
		"metadata: {name: abi}\n"
		"spec:\n"
		"  learners: {replicas: 2}\n"
		"  model: {vocabSize: 16, context: 8, layers: 1, heads: 2, channels: 8, seed: 7}\n"
		"  data: {path: /nonexistent}\n"
		"  optimizer: {batchSize: 4, lr: 0.001, warmupSteps: 3}\n"
		"  syncer: {fragments: %d}\n"
		"  budget: {tokens: 6400}\n", NFRAGS);
	fclose(fp);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	assert_int_equal(testlib_rmtree(f->dir), 0);
	frag_table_release(&f->ft);
	free(f);
	return 0;
}

static void publish_const(struct exchange *sc, int p, uint64_t version,
			  float v)
{
	float *d = exchange_inbox_begin(sc, p);

	for (size_t i = 0; i < exchange_frag_numel(sc, p); i++)
		d[i] = v + (float)i;
	exchange_inbox_commit(sc, p, version);
}

/* The table is the C learner's, with shapes; the fingerprint is its
 * fragment table's. */
static void parameter_table(void **state)
{
	struct fx *f = *state;
	struct model_tensor t[MODEL_MAX_TENSORS];
	int n = model_tensors(&cfg, t, MODEL_MAX_TENSORS);
	ddiloco_learner *h = ddiloco_open_job(f->job, NULL);
	uint64_t next = 0;

	assert_non_null(h);
	assert_int_equal(ddiloco_abi_version(), DDILOCO_ABI_VERSION);
	assert_string_equal(ddiloco_version(), DDILOCO_VERSION);
	assert_int_equal(ddiloco_num_params(h), model_num_params(&cfg));
	assert_int_equal(ddiloco_num_tensors(h), n);
	assert_int_equal(n, 2 + 12 + 2);
	assert_int_equal(ddiloco_num_fragments(h), NFRAGS);
	assert_true(ddiloco_fingerprint(h) == f->ft.fingerprint);
	for (int i = 0; i < n; i++) {
		const char *name;
		int ndim, decayed, emb;
		int64_t shape[DDILOCO_MAX_DIMS];
		uint64_t off, numel, prod = 1;

		assert_int_equal(ddiloco_tensor(h, i, &name, &ndim, shape, &off,
						&numel, &decayed, &emb), 0);
		assert_string_equal(name, t[i].name);
		assert_int_equal(off, next);
		assert_int_equal(numel, t[i].numel);
		for (int d = 0; d < ndim; d++)
			prod *= (uint64_t)shape[d];
		assert_int_equal(prod, numel);
		assert_int_equal(decayed, t[i].is_matrix);
		assert_int_equal(emb, t[i].is_embedding);
		next += numel;
	}
	/* spot checks of shapes: wte (V, C), h0.fcprojw (C, 4C), h0.ln1w (C) */
	{
		int64_t s[DDILOCO_MAX_DIMS];
		int nd;

		ddiloco_tensor(h, 0, NULL, &nd, s, NULL, NULL, NULL, NULL);
		assert_int_equal(nd, 2);
		assert_int_equal(s[0], 16);
		assert_int_equal(s[1], 8);
		ddiloco_tensor(h, 2 + 10, NULL, &nd, s, NULL, NULL, NULL, NULL);
		assert_int_equal(s[0], 8);
		assert_int_equal(s[1], 32);
		ddiloco_tensor(h, 2, NULL, &nd, s, NULL, NULL, NULL, NULL);
		assert_int_equal(nd, 1);
		assert_int_equal(s[0], 8);
	}
	assert_int_equal(next, model_num_params(&cfg));
	assert_int_equal(ddiloco_tensor(h, n, NULL, NULL, NULL, NULL, NULL,
					NULL, NULL), -1);
	assert_non_null(strstr(ddiloco_error(), "tensor 16"));
	assert_int_equal(ddiloco_tensor(h, -1, NULL, NULL, NULL, NULL, NULL,
					NULL, NULL), -1);
	ddiloco_close(h);
}

/* The job as the C learner reads it, the schedule horizon and the init. */
static void job_and_init(void **state)
{
	struct fx *f = *state;
	ddiloco_learner *h = ddiloco_open_job(f->job, NULL);
	size_t n = model_num_params(&cfg);
	float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
	const char *j;

	assert_non_null(h);
	j = ddiloco_job_json(h);
	assert_non_null(strstr(j, "\"seqLen\":8"));         /* 0 = context */
	assert_non_null(strstr(j, "\"batchSize\":4"));
	assert_non_null(strstr(j, "\"seed\":7"));
	assert_non_null(strstr(j, "\"replicas\":2"));
	assert_non_null(strstr(j, "\"beta2\":0.94999999999999996"));
	/* 6400 tokens over 2 learners of 4 × 8: 100 steps; one learner: 200 */
	assert_int_equal(ddiloco_decay_steps(h, 2), 100);
	assert_int_equal(ddiloco_decay_steps(h, 1), 200);
	assert_int_equal(ddiloco_decay_steps(h, 0), 0);
	ddiloco_init_params(h, a, 7);
	model_init_params(&cfg, b, 7);
	assert_memory_equal(a, b, n * sizeof(float));
	ddiloco_close(h);
	free(a);
	free(b);
}

static void bad_input(void **state)
{
	struct fx *f = *state;
	char path[128];
	float p[4];

	snprintf(path, sizeof(path), "%s/missing.yaml", f->dir);
	assert_null(ddiloco_open_job(path, NULL));
	assert_non_null(strstr(ddiloco_error(), "missing.yaml"));
	assert_null(ddiloco_open_job(NULL, NULL));
	assert_non_null(strstr(ddiloco_error(), "no job file"));
	assert_null(ddiloco_open_model(NULL, 16, 8, 1, 3, 8, 1, 2));
	assert_non_null(strstr(ddiloco_error(), "not a multiple"));
	assert_null(ddiloco_open_model(NULL, 16, 8, 1, 2, 8, 1, 0));
	assert_non_null(strstr(ddiloco_error(), "0 fragments"));
	/* no exchange: start and poll refuse */
	{
		ddiloco_learner *h = ddiloco_open_model(NULL, 16, 8, 1, 2, 8, 1, 2);

		assert_non_null(h);
		assert_string_equal(ddiloco_job_json(h), "{}");
		assert_int_equal(ddiloco_start(h, p, 0), -1);
		assert_non_null(strstr(ddiloco_error(), "without an exchange"));
		assert_int_equal(ddiloco_poll(h, p, 1, 1, 1.0), -1);
		assert_int_equal(ddiloco_done(h), 0);
		ddiloco_close(h);
	}
}

/*
 * A sidecar of another release (docs/abi.md, Versions): one there first
 * fails the open, one that comes while the library waits fails start
 * at once (not at its timeout) and then every poll, with the message
 * naming both.
 */
static void versions_refused(void **state)
{
	struct fx *f = *state;
	struct exchange_version abi3 = { .abi = 3, .exchange = EXCHANGE_VERSION,
					 .release = "0.4.0" };
	struct exchange_version ex4 = { .abi = DDILOCO_ABI_VERSION, .exchange = 4,
					.release = "0.4.0" };
	struct exchange *sc = NULL;
	ddiloco_learner *h;
	char want[256];
	float *p;
	double t0;

	assert_int_equal(exchange_open_version(f->dir, EXCHANGE_SIDECAR, &f->ft,
					       &abi3, &sc, NULL), 0);
	assert_null(ddiloco_open_job(f->job, f->dir));
	snprintf(want, sizeof(want), "learner library %s (ABI %d, exchange %d) "
		 "and sidecar 0.4.0 (ABI 3, exchange %d) do not match",
		 ddiloco_version(), ddiloco_abi_version(), EXCHANGE_VERSION,
		 EXCHANGE_VERSION);
	assert_string_equal(ddiloco_error(), want);
	exchange_close(sc);
	snprintf(want, sizeof(want), "%s/exchange", f->dir);
	assert_int_equal(unlink(want), 0);   /* a new pod's exchange */

	/* the library first, a sidecar of another exchange after it */
	snprintf(want, sizeof(want), "learner library %s (ABI %d, exchange %d) "
		 "and sidecar 0.4.0 (ABI %d, exchange 4) do not match",
		 ddiloco_version(), ddiloco_abi_version(), EXCHANGE_VERSION,
		 DDILOCO_ABI_VERSION);
	h = ddiloco_open_job(f->job, f->dir);
	assert_non_null(h);
	p = calloc(ddiloco_num_params(h), sizeof(float));
	assert_int_equal(exchange_open_version(f->dir, EXCHANGE_SIDECAR, &f->ft,
					       &ex4, &sc, NULL),
			 EXCHANGE_VERSION_MISMATCH);
	t0 = clock_mono();
	assert_int_equal(ddiloco_start(h, p, 30), -1);
	assert_true(clock_mono() - t0 < 5);
	assert_string_equal(ddiloco_error(), want);
	assert_int_equal(ddiloco_poll(h, p, 1, 32, 1.0), -1);
	assert_string_equal(ddiloco_error(), want);
	ddiloco_close(h);
	free(p);
}

/* A region made for another model is refused, naming both fingerprints. */
static void wrong_model_is_refused(void **state)
{
	struct fx *f = *state;
	struct exchange *sc;
	ddiloco_learner *h;

	assert_int_equal(exchange_open(f->dir, EXCHANGE_SIDECAR, &f->ft, &sc,
				       NULL), 0);
	/* same model, other P */
	h = ddiloco_open_model(f->dir, 16, 8, 1, 2, 8, 1, NFRAGS + 1);
	assert_null(h);
	assert_non_null(strstr(ddiloco_error(), "fingerprint"));
	h = ddiloco_open_model(f->dir, 16, 8, 1, 2, 8, 1, NFRAGS);
	assert_non_null(h);
	ddiloco_close(h);
	exchange_close(sc);
}

/* start, stats, a pull answered, an update applied, resume, done. */
static void conversation(void **state)
{
	struct fx *f = *state;
	struct exchange *sc;
	struct exchange_stats stats;
	struct exchange_answer a;
	size_t n = model_num_params(&cfg);
	float *params = calloc(n, sizeof(float)), *buf, *theta;
	const struct fragment *fr;
	ddiloco_learner *h;
	int applied, served, repaired, p = 1;
	uint64_t rs;
	double poll_s, step_s;

	assert_int_equal(exchange_open(f->dir, EXCHANGE_SIDECAR, &f->ft, &sc,
				       NULL), 0);
	h = ddiloco_open_job(f->job, f->dir);
	assert_non_null(h);

	/* nothing delivered: not within the timeout, with a message */
	assert_int_equal(ddiloco_start(h, params, 0.1), -1);
	assert_non_null(strstr(ddiloco_error(), "no global model"));
	/* the learner was seen while it waited */
	assert_int_equal(exchange_read_stats(sc, &stats), 0);
	assert_true(stats.incarnation > 0);

	for (int q = 0; q < NFRAGS; q++)
		publish_const(sc, q, 5, 10.0f * (float)(q + 1));
	assert_int_equal(ddiloco_start(h, params, 1.0), 0);
	/* every value came from its fragment's inbox */
	theta = malloc(n * sizeof(float));
	buf = malloc(n * sizeof(float));
	for (int q = 0; q < NFRAGS; q++) {
		frag_gather(&f->ft, q, params, buf);
		for (size_t i = 0; i < f->ft.frags[q].numel; i++)
			assert_true(buf[i] == 10.0f * (float)(q + 1) + (float)i);
	}

	/* two steps: the trainer moves every value by 0.5 in all */
	for (size_t i = 0; i < n; i++)
		params[i] += 0.25f;
	assert_int_equal(ddiloco_poll(h, params, 1, 32, 2.5), 0);
	for (size_t i = 0; i < n; i++)
		params[i] += 0.25f;
	exchange_post_pull(sc, p, 9);
	assert_int_equal(ddiloco_poll(h, params, 2, 32, 2.25), 0);
	ddiloco_last_poll(h, &applied, &served, &repaired);
	assert_int_equal(served, 1);
	assert_int_equal(applied, 0);
	assert_int_equal(repaired, 0);
	assert_int_equal(exchange_read_stats(sc, &stats), 0);
	assert_int_equal(stats.step, 2);
	assert_int_equal(stats.tokens_total, 64);
	assert_true(stats.loss == 2.25);
	assert_true(stats.step_time >= 0);

	/* the answer: Δ = base − θ = −0.5 everywhere, 2 steps, 64 tokens */
	assert_int_equal(exchange_take_answer(sc, p, &a, buf), 1);
	assert_int_equal(a.round, 9);
	assert_int_equal(a.base_version, 5);
	assert_int_equal(a.steps, 2);
	assert_int_equal(a.tokens, 64);
	assert_int_equal(a.step, 2);
	fr = &f->ft.frags[p];
	for (size_t i = 0; i < fr->numel; i++)
		assert_true(buf[i] == -0.5f);

	/* an update of fragment 0 overwrites θ there (α = 0), in place */
	publish_const(sc, 0, 6, -3.0f);
	assert_int_equal(ddiloco_poll(h, params, 3, 32, 2.0), 0);
	ddiloco_last_poll(h, &applied, &served, NULL);
	assert_int_equal(applied, 1);
	assert_int_equal(served, 0);
	frag_gather(&f->ft, 0, params, theta);
	for (size_t i = 0; i < f->ft.frags[0].numel; i++)
		assert_true(theta[i] == -3.0f + (float)i);

	/* the resume step left for this process */
	assert_int_equal(ddiloco_resume_step(h, &rs), 0);
	exchange_set_resume(sc, 40, stats.incarnation);
	assert_int_equal(ddiloco_resume_step(h, &rs), 1);
	assert_int_equal(rs, 40);

	/* done */
	assert_int_equal(ddiloco_done(h), 0);
	exchange_set_done(sc, 1);
	assert_int_equal(ddiloco_done(h), 1);
	assert_int_equal(ddiloco_poll(h, params, 4, 32, 1.9), 1);
	ddiloco_times(h, &poll_s, &step_s);
	assert_true(poll_s > 0 && step_s > 0);

	/* a new process on a done job: start says so */
	ddiloco_close(h);
	h = ddiloco_open_job(f->job, f->dir);
	assert_non_null(h);
	assert_int_equal(ddiloco_start(h, params, 1.0), 1);
	ddiloco_close(h);
	exchange_close(sc);
	free(params);
	free(buf);
	free(theta);
}

/*
 * A model on another device (docs/abi.md, GPUs): ddiloco_pending names
 * the fragments a poll would read (a pull) and write (an update);
 * ddiloco_poll_fragments touches only those marked, says which it wrote,
 * and leaves the others for a later poll; the pieces of every fragment
 * cover the flat buffer once.
 */
static void device_poll(void **state)
{
	struct fx *f = *state;
	struct exchange *sc;
	struct exchange_answer a;
	size_t n = model_num_params(&cfg);
	float *params = calloc(n, sizeof(float)), *buf = malloc(n * sizeof(float));
	uint8_t reads[NFRAGS], writes[NFRAGS], wrote[NFRAGS], none[NFRAGS] = { 0 };
	uint64_t off[64], len[64], covered = 0;
	ddiloco_learner *h;
	int applied, served;

	assert_int_equal(exchange_open(f->dir, EXCHANGE_SIDECAR, &f->ft, &sc,
				       NULL), 0);
	assert_non_null(h = ddiloco_open_job(f->job, f->dir));
	for (int q = 0; q < NFRAGS; q++) {
		int k = ddiloco_fragment_pieces(h, q, off, len, 64);

		assert_true(k > 0 && k <= 64);
		for (int j = 0; j < k; j++) {
			assert_true(off[j] + len[j] <= n);
			covered += len[j];
		}
	}
	assert_int_equal(covered, n);
	assert_int_equal(ddiloco_fragment_pieces(h, NFRAGS, off, len, 64), -1);
	for (int q = 0; q < NFRAGS; q++)
		publish_const(sc, q, 5, 1.0f);
	assert_int_equal(ddiloco_start(h, params, 1.0), 0);

	/* nothing waits */
	assert_int_equal(ddiloco_pending(h, reads, writes), 0);
	for (int q = 0; q < NFRAGS; q++)
		assert_true(!reads[q] && !writes[q]);
	/* a pull of 1 and an update of 2 wait: both named */
	exchange_post_pull(sc, 1, 7);
	publish_const(sc, 2, 6, -2.0f);
	assert_int_equal(ddiloco_pending(h, reads, writes), 0);
	for (int q = 0; q < NFRAGS; q++) {
		assert_int_equal(reads[q], q == 1);
		assert_int_equal(writes[q], q == 2);
	}
	/* a poll that may touch nothing leaves both waiting */
	assert_int_equal(ddiloco_poll_fragments(h, params, 1, 8, 1.0, none, none,
						wrote), 0);
	ddiloco_last_poll(h, &applied, &served, NULL);
	assert_int_equal(applied + served, 0);
	for (int q = 0; q < NFRAGS; q++)
		assert_int_equal(wrote[q], 0);
	/* the marked poll answers 1, applies 2, and says it wrote 2 only */
	assert_int_equal(ddiloco_poll_fragments(h, params, 2, 8, 1.0, reads, writes,
						wrote), 0);
	ddiloco_last_poll(h, &applied, &served, NULL);
	assert_int_equal(applied, 1);
	assert_int_equal(served, 1);
	for (int q = 0; q < NFRAGS; q++)
		assert_int_equal(wrote[q], q == 2);
	assert_int_equal(exchange_take_answer(sc, 1, &a, buf), 1);
	assert_int_equal(a.round, 7);
	assert_int_equal(a.steps, 2);
	frag_gather(&f->ft, 2, params, buf);
	for (size_t i = 0; i < f->ft.frags[2].numel; i++)
		assert_true(buf[i] == -2.0f + (float)i);
	assert_int_equal(ddiloco_pending(h, reads, writes), 0);
	for (int q = 0; q < NFRAGS; q++)
		assert_true(!reads[q] && !writes[q]);
	ddiloco_close(h);
	exchange_close(sc);
	free(params);
	free(buf);
}

/*
 * spec.model.kind external: the caller's table, the exchange made for
 * it (what the sidecar peeks), and the seed start leaves; a GPT job file
 * and an external one are not mixed up.
 */
static void external_table(void **state)
{
	struct fx *f = *state;
	const char *names[4] = { "l1.w", "l1.b", "l2.w", NULL };
	const uint64_t numels[4] = { 50, 30, 20, 10 }, zero[2] = { 5, 0 };
	const uint64_t ones[2] = { 1, 1 };
	struct frag_tensor ft_in[4];
	struct frag_table ft, mine;
	char job[160];
	const char *name;
	uint64_t off, numel, fp, *sizes;
	float params[110], got[60], want[60];
	int P;
	ddiloco_learner *h;
	FILE *fp_;

	snprintf(job, sizeof(job), "%s/ext.yaml", f->dir);
	fp_ = fopen(job, "w");
	assert_non_null(fp_);
	fprintf(fp_, "apiVersion: ddiloco.io/v1alpha1\n"
		"kind: DecoupledTrainingJob\nmetadata: {name: ext}\nspec:\n"
		"  learners: {replicas: 2}\n  model: {kind: external}\n"
		"  data: {path: /nonexistent}\n  syncer: {fragments: 3}\n");
	fclose(fp_);
	assert_null(ddiloco_open_job(job, NULL));
	assert_non_null(strstr(ddiloco_error(), "ddiloco_open_external"));
	assert_null(ddiloco_open_external(f->job, NULL, 4, names, numels));
	assert_non_null(strstr(ddiloco_error(), "spec.model.kind external"));
	assert_null(ddiloco_open_external(job, NULL, 2, names, zero));
	assert_string_equal(ddiloco_error(),
			    "ddiloco: tensor 1 ('l1.b') has no values");
	/* two values cannot make three fragments, cut or not */
	assert_null(ddiloco_open_external(job, NULL, 2, NULL, ones));
	assert_non_null(strstr(ddiloco_error(), "3 fragments for only 2"));

	h = ddiloco_open_external(job, f->dir, 4, names, numels);
	assert_non_null(h);
	assert_int_equal(ddiloco_num_params(h), 110);
	assert_int_equal(ddiloco_num_tensors(h), 4);
	assert_int_equal(ddiloco_num_fragments(h), 3);
	assert_int_equal(ddiloco_tensor(h, 2, &name, NULL, NULL, &off, &numel,
					NULL, NULL), 0);
	assert_string_equal(name, "l2.w");
	assert_int_equal(off, 80);
	assert_int_equal(numel, 20);
	assert_int_equal(ddiloco_tensor(h, 3, &name, NULL, NULL, NULL, NULL,
					NULL, NULL), 0);
	assert_string_equal(name, "t3");
	/* the fingerprint is the bin packing's, as for the C model */
	for (int i = 0, o = 0; i < 4; o += (int)numels[i], i++)
		ft_in[i] = (struct frag_tensor){ .offset = (size_t)o,
						 .numel = numels[i] };
	assert_int_equal(frag_table_init(&mine, ft_in, 4, 3, NULL), 0);
	assert_true(ddiloco_fingerprint(h) == mine.fingerprint);
	/* what the sidecar of an external job reads */
	assert_int_equal(exchange_peek(f->dir, &P, &fp, &sizes, NULL), 0);
	assert_int_equal(P, 3);
	assert_true(fp == mine.fingerprint);
	for (int p = 0; p < 3; p++)
		assert_int_equal(sizes[p], mine.frags[p].numel);
	assert_int_equal(frag_table_from_sizes(&ft, sizes, P, fp, NULL), 0);
	free(sizes);
	/* start leaves the seed even when no global model comes */
	for (int i = 0; i < 110; i++)
		params[i] = (float)i * 0.5f;
	assert_int_equal(ddiloco_start(h, params, 0), -1);
	for (int p = 0; p < 3; p++) {
		frag_gather(&mine, p, params, want);
		assert_int_equal(exchange_read_seed(f->dir, &ft, p, got, NULL), 0);
		assert_memory_equal(got, want, mine.frags[p].numel * sizeof(float));
	}
	ddiloco_close(h);
	frag_table_release(&ft);
	/* a seed of another table is refused */
	assert_int_equal(model_frag_table(&cfg, NFRAGS, &ft, NULL), 0);
	assert_int_equal(exchange_read_seed(f->dir, &ft, 0, got, NULL), -1);
	frag_table_release(&ft);
	frag_table_release(&mine);
}

/*
 * A job that declares its table (spec.model.tensors): the library refuses
 * a model of another one at open, naming the first difference, and cuts
 * the declared one as the syncer does (frag_table_of_numels): the same
 * fingerprint.
 */
static void declared_table_checked(void **state)
{
	struct fx *f = *state;
	const uint64_t numels[4] = { 50, 30, 20, 10 }, off_by_one[4] = { 50, 30, 20, 11 };
	struct frag_table decl;
	ddiloco_learner *h;
	char job[160];
	size_t n;
	FILE *fp_;

	snprintf(job, sizeof(job), "%s/decl.yaml", f->dir);
	fp_ = fopen(job, "w");
	assert_non_null(fp_);
	fprintf(fp_, "apiVersion: ddiloco.io/v1alpha1\n"
		"kind: DecoupledTrainingJob\nmetadata: {name: decl}\nspec:\n"
		"  learners: {replicas: 2}\n"
		"  model: {kind: external, tensors: [50, 30, 20, 10]}\n"
		"  data: {path: /nonexistent}\n  syncer: {fragments: 3}\n");
	fclose(fp_);
	assert_null(ddiloco_open_external(job, NULL, 4, NULL, off_by_one));
	assert_string_equal(ddiloco_error(), "ddiloco: tensor 3 has 11 values, "
			    "the job declares 10 (spec.model.tensors)");
	assert_null(ddiloco_open_external(job, NULL, 3, NULL, numels));
	assert_string_equal(ddiloco_error(), "ddiloco: the model has 3 tensors, "
			    "the job declares 4 (spec.model.tensors)");
	h = ddiloco_open_external(job, NULL, 4, NULL, numels);
	assert_non_null(h);
	assert_int_equal(frag_table_of_numels(&decl, numels, 4, 3, &n, NULL), 0);
	assert_int_equal(n, 110);
	assert_true(ddiloco_fingerprint(h) == decl.fingerprint);
	frag_table_release(&decl);
	ddiloco_close(h);
}

/*
 * An evaluator's handle (docs/abi.md, Evaluators): no seed, the round of
 * the Θ it holds, and its reports in the region for the sidecar.
 */
static void evaluator_handle(void **state)
{
	struct fx *f = *state;
	const char *names[2] = { "w", "b" };
	const uint64_t numels[2] = { 40, 20 };
	struct frag_table ft;
	struct exchange *sc;
	struct exchange_eval ev;
	uint64_t fp, *sizes;
	float params[60];
	char job[160], seed[200];
	ddiloco_learner *h, *plain;
	int P;
	FILE *fp_;

	snprintf(job, sizeof(job), "%s/ext.yaml", f->dir);
	fp_ = fopen(job, "w");
	assert_non_null(fp_);
	fprintf(fp_, "apiVersion: ddiloco.io/v1alpha1\n"
		"kind: DecoupledTrainingJob\nmetadata: {name: ext}\nspec:\n"
		"  learners: {replicas: 2}\n  model: {kind: external}\n"
		"  data: {path: /nonexistent}\n  syncer: {fragments: 2}\n");
	fclose(fp_);
	h = ddiloco_open_external(job, f->dir, 2, names, numels);
	assert_non_null(h);
	/* a learner's handle reports nothing */
	assert_int_equal(ddiloco_report_eval(h, 1, 0.5, 0), -1);
	assert_non_null(strstr(ddiloco_error(), "not an evaluator's handle"));
	assert_int_equal(ddiloco_set_evaluator(h), 0);
	assert_int_equal(ddiloco_round(h), 0);
	/* the sidecar's side: Θ of round 5 (fragment 0) and 3 (fragment 1) */
	assert_int_equal(exchange_peek(f->dir, &P, &fp, &sizes, NULL), 0);
	assert_int_equal(frag_table_from_sizes(&ft, sizes, P, fp, NULL), 0);
	free(sizes);
	assert_int_equal(exchange_open(f->dir, EXCHANGE_SIDECAR, &ft, &sc, NULL), 0);
	for (int p = 0; p < 2; p++) {
		float *d = exchange_inbox_begin(sc, p);

		for (size_t i = 0; i < exchange_frag_numel(sc, p); i++)
			d[i] = (float)(p + 1);
		exchange_inbox_commit_round(sc, p, 1, p ? 3 : 5, p ? 800 : 1000);
	}
	assert_int_equal(ddiloco_start(h, params, 1), 0);
	/* no seed: an evaluator's weights never become Θ */
	snprintf(seed, sizeof(seed), "%s/seed", f->dir);
	assert_int_equal(access(seed, F_OK), -1);
	assert_int_equal(ddiloco_round(h), 5);
	assert_int_equal(ddiloco_job_tokens(h), 1000);
	assert_int_equal(ddiloco_set_evaluator(h), -1);
	/* round 7 of fragment 1 arrives: the next poll applies it */
	{
		float *d = exchange_inbox_begin(sc, 1);

		for (size_t i = 0; i < exchange_frag_numel(sc, 1); i++)
			d[i] = 9.0f;
		exchange_inbox_commit_round(sc, 1, 2, 7, 2500);
	}
	assert_int_equal(ddiloco_round(h), 5);
	assert_int_equal(ddiloco_job_tokens(h), 1000);
	assert_int_equal(ddiloco_poll(h, params, 1, 0, 0), 0);
	assert_int_equal(ddiloco_round(h), 7);
	assert_int_equal(ddiloco_job_tokens(h), 2500);
	assert_int_equal(exchange_read_eval(sc, &ev), 0);
	assert_int_equal(ev.count, 0);
	assert_int_equal(ddiloco_report_eval(h, 7, 0.25, 4096), 0);
	assert_int_equal(exchange_read_eval(sc, &ev), 0);
	assert_int_equal(ev.count, 1);
	assert_int_equal(ev.round, 7);
	assert_float_equal(ev.loss, 0.25, 0);
	assert_int_equal(ev.tokens, 4096);
	ddiloco_close(h);
	/* a restarted evaluator's first report is new to the sidecar */
	plain = ddiloco_open_external(job, f->dir, 2, names, numels);
	assert_non_null(plain);
	assert_int_equal(ddiloco_set_evaluator(plain), 0);
	assert_int_equal(ddiloco_report_eval(plain, 8, 0.2, 0), 0);
	assert_int_equal(exchange_read_eval(sc, &ev), 0);
	assert_int_equal(ev.count, 2);
	assert_int_equal(ev.round, 8);
	ddiloco_close(plain);
	exchange_close(sc);
	frag_table_release(&ft);
}

/* libddiloco.so exports the ABI and nothing of the project's insides. */
static void shared_library_exports(void **state)
{
	static const char *const api[] = {
		"ddiloco_abi_version", "ddiloco_version", "ddiloco_error",
		"ddiloco_open_job", "ddiloco_open_model", "ddiloco_close",
		"ddiloco_num_params", "ddiloco_num_tensors", "ddiloco_tensor",
		"ddiloco_num_fragments", "ddiloco_fingerprint",
		"ddiloco_job_json", "ddiloco_decay_steps", "ddiloco_init_params",
		"ddiloco_start", "ddiloco_poll", "ddiloco_last_poll",
		"ddiloco_resume_step", "ddiloco_done", "ddiloco_times",
		"ddiloco_job_tokens",
		"ddiloco_open_external", "ddiloco_set_evaluator",
		"ddiloco_round", "ddiloco_report_eval", "ddiloco_pending",
		"ddiloco_poll_fragments", "ddiloco_fragment_pieces",
	};
	const char *b = getenv("BUILD");
	char path[512];
	void *so;
	int (*version)(void);

	(void)state;
	snprintf(path, sizeof(path), "%s/libddiloco.so", b ? b : "build");
	so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!so)
		fail_msg("cannot load '%s': %s", path, dlerror());
	for (size_t i = 0; i < sizeof(api) / sizeof(api[0]); i++)
		if (!dlsym(so, api[i]))
			fail_msg("'%s' is not exported", api[i]);
	*(void **)&version = dlsym(so, "ddiloco_abi_version");
	assert_int_equal(version(), DDILOCO_ABI_VERSION);
	assert_null(dlsym(so, "exchange_open"));
	assert_null(dlsym(so, "model_init_params"));
	assert_null(dlsym(so, "adamw_update"));
	dlclose(so);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(parameter_table, setup, teardown),
		cmocka_unit_test_setup_teardown(job_and_init, setup, teardown),
		cmocka_unit_test_setup_teardown(bad_input, setup, teardown),
		cmocka_unit_test_setup_teardown(evaluator_handle, setup,
						teardown),
		cmocka_unit_test_setup_teardown(wrong_model_is_refused, setup,
						teardown),
		cmocka_unit_test_setup_teardown(conversation, setup, teardown),
		cmocka_unit_test_setup_teardown(versions_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(device_poll, setup, teardown),
		cmocka_unit_test_setup_teardown(external_table, setup, teardown),
		cmocka_unit_test_setup_teardown(declared_table_checked, setup, teardown),
		cmocka_unit_test(shared_library_exports),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
