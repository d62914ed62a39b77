/*
 * fragment: balanced tensor fragmentation, shared by learner and syncer so
 * both cut the model the same way.
 *
 * Whole tensors are bin-packed greedily into P fragments of near-equal
 * size: largest tensor first (ties: lower index first), each into the
 * currently smallest fragment (ties: lower fragment index). Inside a
 * fragment, tensors keep their model order, and a fragment's payload is
 * its tensors' values concatenated in that order.
 *
 * The fingerprint hashes P, every tensor's size and embedding flag, and
 * the fragment assignment: two sides with equal fingerprints agree on
 * every payload layout.
 */
#ifndef DDILOCO_FRAGMENT_H
#define DDILOCO_FRAGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

struct frag_tensor {
	size_t offset;      /* into the flat parameter array, in floats */
	size_t numel;
	int is_embedding;   /* merged by plain weighted mean */
};

struct fragment {
	int ntensors;
	int *tensors;       /* indices into the tensor table, ascending */
	size_t numel;       /* payload length in floats */
};

struct frag_table {
	int nfrags;
	struct fragment *frags;
	int ntensors;
	struct frag_tensor *tensors;   /* a copy of the input table */
	int *owner;                    /* tensor index -> fragment */
	uint64_t fingerprint;
};

int frag_table_init(struct frag_table *ft, const struct frag_tensor *t,
		    int ntensors, int nfrags, struct err *e);
/*
 * The table of a model the syncer knows only by its learners' Hello
 * (docs/syncer.md, Model-agnostic jobs): P fragments of the given sizes,
 * one tensor each (none an embedding), laid out one after the other, and
 * the fingerprint the learners computed for their own cut.
 */
int frag_table_from_sizes(struct frag_table *ft, const uint64_t *sizes,
			  int nfrags, uint64_t fingerprint, struct err *e);
void frag_table_release(struct frag_table *ft);

/* Copies fragment p out of / into the flat parameter array. */
void frag_gather(const struct frag_table *ft, int p, const float *params,
		 float *out);
void frag_scatter(const struct frag_table *ft, int p, const float *in,
		  float *params);

/* Largest fragment size over smallest (1.0 = perfectly balanced). */
double frag_table_imbalance(const struct frag_table *ft);

#endif
