/*
 * The small job the syncer harnesses run (tests/fuzz/fuzz_wire.c,
 * fuzz_ckpt.c) and their seeds are made for: M = 3 learners, 24
 * parameters in three tensors, P = 2 fragments, quorum 2, no periodic
 * checkpoint, no evaluation (the shape of tests/unit/test_core.c).
 */
#ifndef DDILOCO_FUZZ_MODEL_H
#define DDILOCO_FUZZ_MODEL_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fragment.h"
#include "common/jobspec.h"
#include "syncer/syncer.h"

#define FM_M 3
#define FM_N 24
#define FM_P 2
/* the fingerprint of the high-water mark seeds (tests/fuzz/fuzz_hwm.c) */
#define FM_HWM_FP 0x3c481866ea90b922ull

struct fuzz_model {
	char dir[256];               /* the checkpoint folder */
	struct job_spec js;
	struct frag_table ft;
	struct syncer_params prm;
	float init[FM_N];
};

/* TMPDIR, else /dev/shm (files written each run, fsynced: memory is
 * much faster than a disk), else /tmp. */
static inline const char *fuzz_tmpdir(void)
{
	const char *t = getenv("TMPDIR");

	if (t && t[0])
		return t;
	return access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
}

static inline int fuzz_model_init(struct fuzz_model *fm, const char *name)
{
	static const struct frag_tensor tens[3] = {
		{ .offset = 0, .numel = 8, .is_embedding = 0 },
		{ .offset = 8, .numel = 12, .is_embedding = 0 },
		{ .offset = 20, .numel = 4, .is_embedding = 0 },
	};
	const char *tmp = fuzz_tmpdir();

	snprintf(fm->dir, sizeof(fm->dir), "%s/%s-XXXXXX", tmp, name);
	if (!mkdtemp(fm->dir))
		return -1;
	jobspec_defaults(&fm->js);
	strcpy(fm->js.name, "fuzz");
	fm->js.learners.replicas = FM_M;
	fm->js.syncer.min_quorum = 2;
	fm->js.syncer.fragments = FM_P;
	fm->js.syncer.overlap = 2;
	fm->js.syncer.grace = 0.5;
	fm->js.syncer.checkpoint_every = 0;
	fm->js.syncer.eval_every = 0;
	if (frag_table_init(&fm->ft, tens, 3, FM_P, NULL))
		return -1;
	for (int i = 0; i < FM_N; i++)
		fm->init[i] = 0.01f * (float)i;
	fm->prm = (struct syncer_params){
		.js = &fm->js, .ft = &fm->ft, .init_params = fm->init,
		.nparams = FM_N, .ckpt_dir = fm->dir,
	};
	return 0;
}

/* Empties the checkpoint folder: every input starts from the same state. */
static inline void fuzz_model_clean(struct fuzz_model *fm)
{
	DIR *d = opendir(fm->dir);
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		char p[600];

		if (de->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%s/%s", fm->dir, de->d_name);
		unlink(p);
	}
	closedir(d);
}

#endif
