/*
 * model: a GPT-style decoder on OpenBLAS (the reference learner's model).
 *
 * Dimension legend: B batch, T sequence length (≤ maxT), C channels,
 * NH heads, hs = C/NH head size, L layers, V vocabulary, 4C MLP width.
 *
 * Parameters live in one float array carved by the tensor table below, in
 * this order (each tensor a separate entry so fragmentation can balance):
 *   wte (V, C)        token embedding  [is_embedding]
 *   wpe (maxT, C)     position embedding
 *   per layer l: ln1w (C), ln1b (C), qkvw (3C, C), qkvb (3C),
 *                attprojw (C, C), attprojb (C), ln2w (C), ln2b (C),
 *                fcw (4C, C), fcb (4C), fcprojw (C, 4C), fcprojb (C)
 *   lnfw (C), lnfb (C)
 *   lm_head (V, C)    only when not tied to wte
 *
 * model_init_params is a pure function of (config, seed): the syncer and
 * `ddiloco train` build the same initial model from the same job.
 */
#ifndef DDILOCO_MODEL_H
#define DDILOCO_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/fragment.h"
#include "common/jobspec.h"

struct model_config {
	int V, maxT, L, NH, C;
	int tied;
};

struct model_tensor {
	char name[32];
	size_t offset, numel;   /* in floats */
	size_t rows, cols;      /* shape: rows × cols, or rows when cols = 0 */
	int is_embedding;
	int is_matrix;          /* 2-D weight: AdamW decays it */
};

#define MODEL_MAX_TENSORS 1024

int model_config_from_job(const struct job_model *jm, struct model_config *out,
			  struct err *e);
/* Fills out (room for max entries) and returns the number of tensors. */
int model_tensors(const struct model_config *c, struct model_tensor *out,
		  int max);
size_t model_num_params(const struct model_config *c);
void model_init_params(const struct model_config *c, float *params,
		       uint64_t seed);
/*
 * The same values, written only at the flat offsets in the n ranges
 * [rg[i][0], rg[i][1]), sorted and disjoint; the rest of params is never
 * touched, so a syncer shard that allocates the whole model but owns a
 * quarter of it makes a quarter of its pages resident (docs/syncer.md,
 * Shards). Every value is still drawn: the stream is the whole model's.
 */
void model_init_params_part(const struct model_config *c, float *params,
			    uint64_t seed, const size_t (*rg)[2], int n);
/* The fragment table both learner and syncer use for P fragments. */
int model_frag_table(const struct model_config *c, int nfrags,
		     struct frag_table *out, struct err *e);
/* Model FLOPs (forward + backward) per trained token at length T. */
double model_flops_per_token(const struct model_config *c, int T);

struct model;

/* Parameters, gradients and activations for batches of B × T. */
struct model *model_new(const struct model_config *c, int B, int T,
			struct err *e);
void model_free(struct model *m);
float *model_params(struct model *m);
float *model_grads(struct model *m);
size_t model_size(const struct model *m);      /* parameters, in floats */
/*
 * Forward over inputs (B × T token ids). With targets, returns the mean
 * cross-entropy loss (nats/token); without, returns 0.
 */
float model_forward(struct model *m, const int *inputs, const int *targets);
/* Backward of the last forward (which must have had targets); sets grads. */
void model_backward(struct model *m);

/*
 * Threads for the model's products and loops (default 1). Each product is
 * split over them into OpenBLAS calls, so OpenBLAS itself should run one
 * thread (trainer_new and evaluator_new set it so).
 */
int model_set_threads(struct model *m, int threads, struct err *e);
/* The model's thread pool (NULL with one thread). */
struct pool *model_pool(struct model *m);
/* The batch shape the model was made for. */
int model_batch(const struct model *m, int *B, int *T);
/* The model's tensor table (n entries), in parameter order. */
const struct model_tensor *model_tensor_table(const struct model *m, int *n);
/* Per-position losses (B × T) of the last forward with targets. */
const float *model_losses(const struct model *m);

#endif
