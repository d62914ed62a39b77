/*
 * seed: the model of an external job (spec.model.kind external;
 * docs/syncer.md, Model-agnostic jobs) before the core exists. The
 * table minQuorum learners' Hellos agree on is adopted (the transport
 * counts them, stream_msg.c); one learner at a time, the
 * seeder, is asked for its weights with a Pull of round 0 per fragment,
 * and its answers fill the seed until it is whole. Then (or when a
 * checkpoint of the table is on the volume) the job's parameters are
 * made from it and the core starts on them.
 *
 * Its state is its own: which stream is the seeder, and the streams
 * that wait, are the transport's (stream.c).
 */
#ifndef DDILOCO_SYNCER_SEED_H
#define DDILOCO_SYNCER_SEED_H

#include <stddef.h>

#include "common/err.h"
#include "common/fragment.h"
#include "syncer/syncer.h"

struct wire_answer;
struct wire_hello;

struct seed {
	struct frag_table ft;        /* the first hello's table */
	int have_ft;
	float *values;               /* the seed, fragment after fragment */
	size_t *off;                 /* where fragment p starts in it */
	unsigned char *got;          /* fragments received */
	int left;                    /* fragments still to come */
	double moved;                /* mono time the seeder was asked or
				      * its last fragment came */
	int failed;                  /* learner id of the last seeder
				      * dropped; -1: none */
	struct syncer_params prm;    /* the job's, with this table */
	float *flat;                 /* prm.init_params once made */
	struct frag_table decl;      /* spec.model.tensors' cut, when */
	int have_decl;               /* the job declares its table */
	size_t decl_values;
};

void seed_init(struct seed *sd);
void seed_release(struct seed *sd);
/*
 * Whether h's table fits this shard's memory budget (docs/syncer.md,
 * Memory budget): the parameters of the fragments it owns at most
 * spec.syncer.maxParameters, every sum overflow-checked. -1 with e
 * saying how far over when not.
 */
int seed_check_budget(const struct wire_hello *h,
		      const struct syncer_params *base, struct err *e);
/*
 * The table spec.model.tensors declares, cut as the learner library cuts
 * it (docs/syncer.md, A declared table); nothing when none is declared.
 */
int seed_declare(struct seed *sd, const struct job_spec *js, struct err *e);
/* 0 when h carries the declared table or none is declared; else -1, e
 * saying both tables. */
int seed_check_declared(const struct seed *sd, const struct wire_hello *h,
			struct err *e);
/* h's table becomes the job's: prm is base with it. */
int seed_adopt(struct seed *sd, const struct wire_hello *h,
	       const struct syncer_params *base, struct err *e);
/* A new seeder is asked at now: what an earlier one sent is dropped. */
int seed_begin(struct seed *sd, double now, struct err *e);
/* Whether fragment p (the job's number) is this syncer's: a shard asks
 * for and keeps only its own (docs/syncer.md, Shards). */
int seed_owns(const struct seed *sd, int p);
/* The core holds Θ: the seed's values and layout copy are freed. */
void seed_started(struct seed *sd);
/* Whether a is an answer the seed still waits for (round 0, a fragment
 * not received yet). */
int seed_wants(const struct seed *sd, const struct wire_answer *a);
/* Its values into the seed: 1 when the seed is whole, 0 when more are
 * to come, -1 when they do not decode or are not finite (e says). */
int seed_put(struct seed *sd, const struct wire_answer *a, double now,
	     struct err *e);
/* The job's parameters, in the model's layout: from the seed when it is
 * whole (use_seed), else zeros that a checkpoint replaces. NULL: out of
 * memory. */
const struct syncer_params *seed_params(struct seed *sd, int use_seed);

#endif
