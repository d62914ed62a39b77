/*
 * corefix: the syncer core's fixture its unit tests share (test_core.c
 * and test_merge.c through coretest.h, test_eval_remote.c): M = 3
 * learners, K = 2, a model of 24 parameters in three tensors cut into
 * two fragments, a plain mean merged with outer rate 1 and no momentum
 * (Θ ← Θ − Δ, easy to check), a fake clock at 100 s, and the HTTP side
 * read as text. Header only, like testlib.h;
 * include it after <cmocka.h>.
 */
#ifndef DDILOCO_COREFIX_H
#define DDILOCO_COREFIX_H

#include <string.h>

#include "common/buf.h"
#include "common/wire.h"
#include "syncer/syncer_int.h"
#include "tests/unit/testlib.h"

#define M 3          /* learners */
#define NPARAM 24

/* fragment sizes come from frag_table_init's balancing */
static const struct frag_tensor corefix_tensors[3] = {
	{ .offset = 0, .numel = 8, .is_embedding = 0 },
	{ .offset = 8, .numel = 12, .is_embedding = 0 },
	{ .offset = 20, .numel = 4, .is_embedding = 0 },
};

struct fx {
	char dir[64];
	struct job_spec js;
	struct frag_table ft;
	struct syncer_params prm;
	float init[NPARAM];
	struct syncer *s;
	double now;
};

/* A new fixture for job name, its checkpoints in a new /tmp folder; the
 * core is not started (f->s is NULL). */
static inline struct fx *corefix_new(const char *name)
{
	struct fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	assert_int_equal(testlib_tmpdir(f->dir, sizeof(f->dir), "ddcore-test"),
			 0);
	jobspec_defaults(&f->js);
	snprintf(f->js.name, sizeof(f->js.name), "%s", name);
	f->js.learners.replicas = M;
	f->js.syncer.min_quorum = 2;
	f->js.syncer.fragments = 2;
	/* H = P and whole f32 payloads: a round per learner step, the values
	 * sent as given (the tests count both) */
	f->js.syncer.sync_every = 2;
	f->js.syncer.encoding = ENC_F32;
	f->js.syncer.update_encoding = ENC_F32;
	f->js.syncer.overlap = 2;
	f->js.syncer.merge = MERGE_MEAN;
	f->js.syncer.outer_lr = 1.0;
	f->js.syncer.outer_momentum = 0.0;
	f->js.syncer.nesterov = 0;
	f->js.syncer.eval_every = 0;
	assert_int_equal(frag_table_init(&f->ft, corefix_tensors, 3, 2, NULL),
			 0);
	for (int i = 0; i < NPARAM; i++)
		f->init[i] = 0.01f * (float)i;
	f->prm = (struct syncer_params){
		.js = &f->js, .ft = &f->ft, .init_params = f->init,
		.nparams = NPARAM, .ckpt_dir = f->dir,
	};
	f->now = 100.0;
	return f;
}

/* Releases the core if started, the table, the folder and f. */
static inline void corefix_free(struct fx *f)
{
	if (f->s) {
		core_release(f->s);
		free(f->s);
	}
	frag_table_release(&f->ft);
	assert_int_equal(testlib_rmtree(f->dir), 0);
	free(f);
}

/* Learner (or evaluator) id's hello for this job's table. */
static inline struct wire_hello corefix_hello(struct fx *f, uint32_t id,
					      int evaluator, uint64_t *sizes)
{
	for (int p = 0; p < f->ft.nfrags; p++)
		sizes[p] = f->ft.frags[p].numel;
	return (struct wire_hello){
		.learner_id = id, .fingerprint = f->ft.fingerprint,
		.fragments = (uint32_t)f->ft.nfrags, .nsizes = (size_t)f->ft.nfrags,
		.fragment_sizes = sizes, .incarnation = 1 + id, .job = f->js.name,
		.evaluator = evaluator,
	};
}

/* GET path of the syncer's HTTP side, as text. */
static inline char *http_get(struct fx *f, const char *path)
{
	const char *ct = "text/plain";
	struct buf b;
	char *txt;

	buf_init(&b, 1 << 20);
	assert_int_equal(status_http(f->s, path, &b, &ct), 200);
	txt = buf_detach(&b, NULL);
	assert_non_null(txt);
	return txt;
}

#endif
