/*
 * fragment: balanced tensor fragmentation, shared by learner and syncer so
 * both cut the model the same way (docs/design.md, Fragments).
 *
 * A fragment's share is ⌈N / P⌉ of the model's N values. When no tensor
 * is larger than the share, whole tensors are bin-packed greedily into P
 * fragments of near-equal size: largest tensor first (ties: lower index
 * first), each into the currently smallest fragment (ties: lower
 * fragment index). That is the table of every model before tensors were
 * cut, fingerprint included.
 *
 * When a tensor is larger than the share (and has more than one row), it
 * is cut: the tensors no larger than the share are packed as above, then
 * the rows of the larger ones, in model order, fill the fragments up to
 * one level (water-filling, fragment 0 first), each boundary at the
 * nearest row of the tensor it falls in. A tensor's rows thus go to
 * consecutive fragments, a fragment holding a range of rows of it.
 *
 * The table lists pieces (frag_table.tensors): a whole tensor, or a row
 * range of one. A fragment is a list of pieces in model order, and its
 * payload their values concatenated in that order. Without a cut the
 * pieces are the input tensors, one for one.
 *
 *   piece field   meaning
 *   offset        first value in the flat parameter array
 *   numel         values (rows × row)
 *   is_embedding  the tensor's flag
 *   row           values per row of the tensor (1: a vector, or a
 *                 tensor known by its size only)
 *   tensor        index of the tensor in the model's table
 *   row0          first row of the piece in that tensor
 *
 * The fingerprint hashes P, every tensor's size and embedding flag, and
 * the fragment assignment; a cut table hashes every piece too (tensor,
 * first row, values, fragment): two sides with equal fingerprints agree
 * on every payload layout, and a table cut differently is another model.
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
	size_t row;         /* values per row, the unit of a cut (0: 1) */
	/* a piece's (frag_table.tensors); not read from the input */
	int tensor;         /* the model's tensor it is (of) */
	size_t row0;        /* its first row there */
};

struct fragment {
	int ntensors;
	int *tensors;       /* indices into the tensor table, ascending */
	size_t numel;       /* payload length in floats */
};

struct frag_table {
	int nfrags;
	struct fragment *frags;
	int ntensors;                  /* pieces */
	struct frag_tensor *tensors;   /* the pieces: without a cut, a copy
					* of the input table */
	int *owner;                    /* piece index -> fragment */
	int nmodel;                    /* tensors of the model */
	int ncut;                      /* of them, cut into pieces */
	uint64_t fingerprint;
};

/*
 * ntensors tensors, one after the other or not, into nfrags fragments.
 * Refused: no tensor, a tensor of no values or whose values are not a
 * whole number of rows, sizes that overflow, and more fragments than
 * the rows allow pieces.
 */
int frag_table_init(struct frag_table *ft, const struct frag_tensor *t,
		    int ntensors, int nfrags, struct err *e);
/*
 * The table of an external model from its tensors' value counts, one
 * after the other, as the learner library cuts one (docs/abi.md): numel
 * of n tensors into nfrags fragments; *total its values (or NULL).
 */
int frag_table_of_numels(struct frag_table *ft, const uint64_t *numel,
			 int n, int nfrags, size_t *total, struct err *e);
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
