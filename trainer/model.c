/*
 * model: the GPT-style decoder, its parameter table and its buffers.
 *
 * A model owns three allocations: the parameters (carved by the tensor
 * table of model.h), their gradients (same layout), and the activations of
 * one B × T batch (carved below, per layer, as llm.c does). The forward
 * keeps what the backward needs; the backward reuses a handful of scratch
 * buffers for the activation gradients instead of keeping one per layer.
 *
 *   encoded (B,T,C) → per layer: ln1 → qkv (B,T,3C) → attention → atty
 *   → attproj + residual = res2 → ln2 → fch (B,T,4C) → gelu → fcproj
 *   + res2 = res3 → … → lnf → logits (B,T,V) → softmax → loss
 *
 * The output projection is wte when tied (gradients of both uses add up
 * in dwte), lm_head otherwise.
 */
#include "trainer/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "trainer/layers.h"
#include "trainer/pool.h"

/* per-layer tensors, in table order */
enum {
	LN1W, LN1B, QKVW, QKVB, ATTPROJW, ATTPROJB,
	LN2W, LN2B, FCW, FCB, FCPROJW, FCPROJB, NLAYER_TENSORS
};

struct layer_acts {
	float *ln1, *ln1_mean, *ln1_rstd;   /* (B,T,C) (B,T) (B,T) */
	float *qkv;                         /* (B,T,3C) */
	float *att;                         /* (B,NH,T,T) */
	float *atty;                        /* (B,T,C) */
	float *res2;                        /* (B,T,C) */
	float *ln2, *ln2_mean, *ln2_rstd;   /* (B,T,C) (B,T) (B,T) */
	float *fch, *fch_gelu;              /* (B,T,4C) */
	float *res3;                        /* (B,T,C) */
};

struct model {
	struct model_config c;
	int B, T;
	int ntensors;
	struct model_tensor *tensors;
	size_t nparams;
	float *params, *grads;
	float *acts;                  /* the one activation allocation */
	float *encoded;               /* (B,T,C) */
	struct layer_acts *layer;     /* L of them */
	float *lnf, *lnf_mean, *lnf_rstd;   /* (B,T,C) (B,T) (B,T) */
	float *probs;                 /* (B,T,V): logits, then probs, then dlogits */
	float *losses;                /* (B,T) */
	/* backward scratch */
	float *dres;                  /* (B,T,C) residual-stream grad */
	float *dln;                   /* (B,T,C) */
	float *dqkv;                  /* (B,T,3C) */
	float *dfch;                  /* (B,T,4C) */
	float *datt;                  /* (B,NH,T,T) */
	float *proj;                  /* (B,T,C) forward scratch */
	int *inputs, *targets;        /* (B,T) copies of the last batch */
	int have_targets;
	struct pool *pool;            /* NULL: one thread */
};

int model_config_from_job(const struct job_model *jm, struct model_config *out,
			  struct err *e)
{
	if (jm->vocab_size < 2)
		return err_set(e, "model: spec.model.vocabSize %d is less than 2",
			       jm->vocab_size);
	if (jm->context < 1)
		return err_set(e, "model: spec.model.context %d is less than 1",
			       jm->context);
	if (jm->layers < 1 || jm->heads < 1 || jm->channels < 1)
		return err_set(e, "model: layers (%d), heads (%d) and channels (%d) must be positive",
			       jm->layers, jm->heads, jm->channels);
	if (jm->channels % jm->heads)
		return err_set(e, "model: spec.model.channels %d is not a multiple of spec.model.heads %d",
			       jm->channels, jm->heads);
	if (2 + 12 * jm->layers + 3 > MODEL_MAX_TENSORS)
		return err_set(e, "model: %d layers is more than the tensor table holds",
			       jm->layers);
	out->V = jm->vocab_size;
	out->maxT = jm->context;
	out->L = jm->layers;
	out->NH = jm->heads;
	out->C = jm->channels;
	out->tied = jm->tied ? 1 : 0;
	return 0;
}

/* rows × cols for a matrix, rows values (cols 0) for a vector */
static void add_tensor(struct model_tensor *out, int max, int *n,
		       size_t *off, const char *name, size_t rows, size_t cols,
		       int is_embedding)
{
	size_t numel = cols ? rows * cols : rows;

	if (*n < max) {
		struct model_tensor *t = &out[*n];

		memset(t, 0, sizeof(*t));
		snprintf(t->name, sizeof(t->name), "%s", name);
		t->offset = *off;
		t->numel = numel;
		t->rows = rows;
		t->cols = cols;
		t->is_embedding = is_embedding;
		t->is_matrix = cols != 0;
	}
	(*n)++;
	*off += numel;
}

int model_tensors(const struct model_config *c, struct model_tensor *out,
		  int max)
{
	static const char *const lname[NLAYER_TENSORS] = {
		"ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
		"ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb",
	};
	size_t C = (size_t)c->C, off = 0;
	/* rows, and cols for the matrices (0: a vector) */
	size_t lrows[NLAYER_TENSORS] = {
		C, C, 3 * C, 3 * C, C, C, C, C, 4 * C, 4 * C, C, C,
	};
	size_t lcols[NLAYER_TENSORS] = {
		0, 0, C, 0, C, 0, 0, 0, C, 0, 4 * C, 0,
	};
	int n = 0;

	add_tensor(out, max, &n, &off, "wte", (size_t)c->V, C, 1);
	add_tensor(out, max, &n, &off, "wpe", (size_t)c->maxT, C, 0);
	for (int l = 0; l < c->L; l++)
		for (int k = 0; k < NLAYER_TENSORS; k++) {
			char name[32];

			snprintf(name, sizeof(name), "h%d.%s", l, lname[k]);
			add_tensor(out, max, &n, &off, name, lrows[k], lcols[k], 0);
		}
	add_tensor(out, max, &n, &off, "lnfw", C, 0, 0);
	add_tensor(out, max, &n, &off, "lnfb", C, 0, 0);
	if (!c->tied)
		add_tensor(out, max, &n, &off, "lm_head", (size_t)c->V, C, 0);
	return n;
}

size_t model_num_params(const struct model_config *c)
{
	size_t C = (size_t)c->C;
	size_t n = (size_t)c->V * C + (size_t)c->maxT * C +
		   (size_t)c->L * (12 * C * C + 13 * C) + 2 * C;

	return c->tied ? n : n + (size_t)c->V * C;
}

void model_init_params_part(const struct model_config *c, float *params,
			    uint64_t seed, const size_t (*rg)[2], int n)
{
	struct model_tensor *t = calloc(MODEL_MAX_TENSORS, sizeof(*t));
	int nt = model_tensors(c, t, MODEL_MAX_TENSORS), r = 0;
	float resid_sd = 0.02f / sqrtf(2.0f * (float)c->L);
	struct rng g;

	rng_seed(&g, seed);
	for (int i = 0; i < nt; i++) {
		const char *dot = strchr(t[i].name, '.');
		const char *base = dot ? dot + 1 : t[i].name;
		float sd = 0.02f, v = 0.0f;

		/* layernorm weights 1, every bias and layernorm bias 0;
		 * GPT-2's residual projections scaled */
		if (!t[i].is_matrix)
			v = base[strlen(base) - 1] == 'w' ? 1.0f : 0.0f;
		else if (!strcmp(base, "attprojw") || !strcmp(base, "fcprojw"))
			sd = resid_sd;
		for (size_t j = 0; j < t[i].numel; j++) {
			size_t o = t[i].offset + j;

			if (t[i].is_matrix)
				v = sd * (float)rng_normal(&g);
			while (r < n && o >= rg[r][1])
				r++;
			if (r < n && o >= rg[r][0])
				params[o] = v;
		}
	}
	free(t);
}

void model_init_params(const struct model_config *c, float *params,
		       uint64_t seed)
{
	const size_t all[1][2] = { { 0, model_num_params(c) } };

	model_init_params_part(c, params, seed, all, 1);
}

int model_frag_table(const struct model_config *c, int nfrags,
		     struct frag_table *out, struct err *e)
{
	struct model_tensor *t = calloc(MODEL_MAX_TENSORS, sizeof(*t));
	struct frag_tensor *ft = calloc(MODEL_MAX_TENSORS, sizeof(*ft));
	int n, rc;

	if (!t || !ft) {
		free(t);
		free(ft);
		return err_set(e, "model: out of memory for the fragment table");
	}
	n = model_tensors(c, t, MODEL_MAX_TENSORS);
	for (int i = 0; i < n; i++) {
		ft[i].offset = t[i].offset;
		ft[i].numel = t[i].numel;
		ft[i].is_embedding = t[i].is_embedding;
		ft[i].row = t[i].cols ? t[i].cols : 1;   /* cut between rows */
	}
	rc = frag_table_init(out, ft, n, nfrags, e);
	free(t);
	free(ft);
	return rc;
}

double model_flops_per_token(const struct model_config *c, int T)
{
	double C = c->C, L = c->L;
	/* weights that multiply: 12C² per layer, and the V × C output head */
	double matmul_params = L * 12.0 * C * C + (double)c->V * C;

	/* 2 FLOPs per weight forward, 4 backward; attention q·kᵀ and a·v
	 * are 2·T·C each forward per layer, twice that backward */
	return 6.0 * matmul_params + 12.0 * L * (double)T * C;
}

static float *carve(float **p, size_t n)
{
	float *r = *p;

	*p += (n + 15) & ~(size_t)15;   /* keep every buffer 64-byte aligned */
	return r;
}

static void *alloc_floats(size_t n)
{
	void *p = NULL;

	if (posix_memalign(&p, 64, (n ? n : 1) * sizeof(float)))
		return NULL;
	return p;
}

struct model *model_new(const struct model_config *c, int B, int T,
			struct err *e)
{
	struct model *m;
	size_t BT = (size_t)B * T, C = (size_t)c->C, NH = (size_t)c->NH;
	size_t per_layer, total;
	float *p;

	if (B < 1 || T < 1 || T > c->maxT)
		return err_set(e, "model: batch %d × %d does not fit context %d",
			       B, T, c->maxT), NULL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return err_set(e, "model: out of memory"), NULL;
	m->c = *c;
	m->B = B;
	m->T = T;
	m->tensors = calloc(MODEL_MAX_TENSORS, sizeof(*m->tensors));
	m->layer = calloc((size_t)c->L, sizeof(*m->layer));
	m->inputs = calloc(BT, sizeof(int));
	m->targets = calloc(BT, sizeof(int));
	if (!m->tensors || !m->layer || !m->inputs || !m->targets)
		goto oom;
	m->ntensors = model_tensors(c, m->tensors, MODEL_MAX_TENSORS);
	m->nparams = model_num_params(c);
	m->params = alloc_floats(m->nparams);
	m->grads = alloc_floats(m->nparams);
	if (!m->params || !m->grads)
		goto oom;
	memset(m->params, 0, m->nparams * sizeof(float));
	memset(m->grads, 0, m->nparams * sizeof(float));

	/* 16 floats of slack per buffer for the alignment in carve() */
	per_layer = 16 * BT * C + NH * BT * T + 4 * BT + 13 * 16;
	total = BT * C + (size_t)c->L * per_layer + BT * C + 2 * BT +
		BT * (size_t)c->V + BT + 3 * BT * C + 3 * BT * C + 4 * BT * C +
		NH * BT * T + 20 * 16;
	/* not cleared: every activation is written before it is read */
	m->acts = alloc_floats(total);
	if (!m->acts)
		goto oom;
	p = m->acts;
	m->encoded = carve(&p, BT * C);
	for (int l = 0; l < c->L; l++) {
		struct layer_acts *a = &m->layer[l];

		a->ln1 = carve(&p, BT * C);
		a->ln1_mean = carve(&p, BT);
		a->ln1_rstd = carve(&p, BT);
		a->qkv = carve(&p, 3 * BT * C);
		a->att = carve(&p, NH * BT * T);
		a->atty = carve(&p, BT * C);
		a->res2 = carve(&p, BT * C);
		a->ln2 = carve(&p, BT * C);
		a->ln2_mean = carve(&p, BT);
		a->ln2_rstd = carve(&p, BT);
		a->fch = carve(&p, 4 * BT * C);
		a->fch_gelu = carve(&p, 4 * BT * C);
		a->res3 = carve(&p, BT * C);
	}
	m->lnf = carve(&p, BT * C);
	m->lnf_mean = carve(&p, BT);
	m->lnf_rstd = carve(&p, BT);
	m->probs = carve(&p, BT * (size_t)c->V);
	m->losses = carve(&p, BT);
	m->dres = carve(&p, BT * C);
	m->dln = carve(&p, BT * C);
	m->proj = carve(&p, BT * C);
	m->dqkv = carve(&p, 3 * BT * C);
	m->dfch = carve(&p, 4 * BT * C);
	m->datt = carve(&p, NH * BT * T);
	if ((size_t)(p - m->acts) > total) {
		/* the sum above and the carving disagree: a bug, not input */
		model_free(m);
		return err_set(e, "model: activation layout overflow"), NULL;
	}
	return m;
oom:
	model_free(m);
	return err_set(e, "model: out of memory for %zu parameters at batch %d × %d",
		       model_num_params(c), B, T), NULL;
}

void model_free(struct model *m)
{
	if (!m)
		return;
	pool_free(m->pool);
	free(m->tensors);
	free(m->layer);
	free(m->inputs);
	free(m->targets);
	free(m->params);
	free(m->grads);
	free(m->acts);
	free(m);
}

float *model_params(struct model *m)
{
	return m->params;
}

float *model_grads(struct model *m)
{
	return m->grads;
}

size_t model_size(const struct model *m)
{
	return m->nparams;
}

int model_set_threads(struct model *m, int threads, struct err *e)
{
	struct pool *p = NULL;

	if (threads > 1) {
		p = pool_new(threads);
		if (!p)
			return err_set(e, "model: cannot start %d threads", threads);
	}
	pool_free(m->pool);
	m->pool = p;
	return 0;
}

struct pool *model_pool(struct model *m)
{
	return m->pool;
}

int model_batch(const struct model *m, int *B, int *T)
{
	*B = m->B;
	*T = m->T;
	return 0;
}

const struct model_tensor *model_tensor_table(const struct model *m, int *n)
{
	*n = m->ntensors;
	return m->tensors;
}

/* Pointer to tensor k of layer l in base (params or grads). */
static float *lt(const struct model *m, float *base, int l, int k)
{
	return base + m->tensors[2 + l * NLAYER_TENSORS + k].offset;
}

static float *tensor(const struct model *m, float *base, int index)
{
	return base + m->tensors[index].offset;
}

static int lnf_index(const struct model *m)
{
	return 2 + m->c.L * NLAYER_TENSORS;
}

float model_forward(struct model *m, const int *inputs, const int *targets)
{
	int B = m->B, T = m->T, C = m->c.C, NH = m->c.NH, V = m->c.V;
	int BT = B * T;
	float *P = m->params, *residual, *head;
	float loss;

	memcpy(m->inputs, inputs, (size_t)BT * sizeof(int));
	if (targets)
		memcpy(m->targets, targets, (size_t)BT * sizeof(int));
	m->have_targets = targets != NULL;

	encoder_forward(m->pool, m->encoded, inputs, tensor(m, P, 0), tensor(m, P, 1),
			B, T, C);
	residual = m->encoded;
	for (int l = 0; l < m->c.L; l++) {
		struct layer_acts *a = &m->layer[l];

		layernorm_forward(m->pool, a->ln1, a->ln1_mean, a->ln1_rstd, residual,
				  lt(m, P, l, LN1W), lt(m, P, l, LN1B), BT, C);
		matmul_forward(m->pool, a->qkv, a->ln1, lt(m, P, l, QKVW),
			       lt(m, P, l, QKVB), BT, C, 3 * C);
		attention_forward(m->pool, a->atty, a->att, a->qkv, B, T, C, NH);
		/* the projections' and fc's biases are added in the pass
		 * that follows them (layers.h) */
		matmul_forward(m->pool, m->proj, a->atty, lt(m, P, l, ATTPROJW),
			       NULL, BT, C, C);
		residual_forward(m->pool, a->res2, residual, m->proj,
				 lt(m, P, l, ATTPROJB), BT, C);
		layernorm_forward(m->pool, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2,
				  lt(m, P, l, LN2W), lt(m, P, l, LN2B), BT, C);
		matmul_forward(m->pool, a->fch, a->ln2, lt(m, P, l, FCW),
			       NULL, BT, C, 4 * C);
		gelu_forward(m->pool, a->fch_gelu, a->fch, lt(m, P, l, FCB),
			     BT, 4 * C);
		matmul_forward(m->pool, m->proj, a->fch_gelu, lt(m, P, l, FCPROJW),
			       NULL, BT, 4 * C, C);
		residual_forward(m->pool, a->res3, a->res2, m->proj,
				 lt(m, P, l, FCPROJB), BT, C);
		residual = a->res3;
	}
	layernorm_forward(m->pool, m->lnf, m->lnf_mean, m->lnf_rstd, residual,
			  tensor(m, P, lnf_index(m)),
			  tensor(m, P, lnf_index(m) + 1), BT, C);
	head = m->c.tied ? tensor(m, P, 0) : tensor(m, P, lnf_index(m) + 2);
	matmul_forward(m->pool, m->probs, m->lnf, head, NULL, BT, C, V);
	loss = crossentropy_forward(m->pool, m->probs, m->losses, m->probs,
				    targets ? m->targets : NULL, BT, V);
	return loss;
}

const float *model_losses(const struct model *m)
{
	return m->losses;
}

static void zero_chunk(void *a, size_t lo, size_t hi, int chunk)
{
	(void)chunk;
	memset((float *)a + lo, 0, (hi - lo) * sizeof(float));
}

void model_backward(struct model *m)
{
	int B = m->B, T = m->T, C = m->c.C, NH = m->c.NH, V = m->c.V;
	int BT = B * T, L = m->c.L, fi = lnf_index(m);
	float *P = m->params, *G = m->grads;
	float *head, *dhead;

	if (!m->have_targets)
		return;
	pool_run(m->pool, zero_chunk, G, m->nparams);
	memset(m->dres, 0, (size_t)BT * C * sizeof(float));

	/* the loss is the mean over B·T positions */
	crossentropy_backward(m->pool, m->probs, m->probs, m->targets,
			      1.0f / (float)BT, BT, V);
	head = m->c.tied ? tensor(m, P, 0) : tensor(m, P, fi + 2);
	dhead = m->c.tied ? tensor(m, G, 0) : tensor(m, G, fi + 2);
	matmul_backward(m->pool, m->dln, dhead, NULL, m->probs, m->lnf, head, BT, C, V);
	layernorm_backward(m->pool, m->dres, tensor(m, G, fi), tensor(m, G, fi + 1),
			   m->dln, L ? m->layer[L - 1].res3 : m->encoded,
			   tensor(m, P, fi), m->lnf_mean, m->lnf_rstd, BT, C);

	for (int l = L - 1; l >= 0; l--) {
		struct layer_acts *a = &m->layer[l];
		float *residual = l ? m->layer[l - 1].res3 : m->encoded;

		/* dres is the grad of res3 here */
		matmul_backward(m->pool, m->dfch, lt(m, G, l, FCPROJW), lt(m, G, l, FCPROJB),
				m->dres, a->fch_gelu, lt(m, P, l, FCPROJW),
				BT, 4 * C, C);
		gelu_backward(m->pool, m->dfch, a->fch, m->dfch, (size_t)BT * 4 * C);
		matmul_backward(m->pool, m->dln, lt(m, G, l, FCW), lt(m, G, l, FCB),
				m->dfch, a->ln2, lt(m, P, l, FCW), BT, C, 4 * C);
		layernorm_backward(m->pool, m->dres, lt(m, G, l, LN2W), lt(m, G, l, LN2B),
				   m->dln, a->res2, lt(m, P, l, LN2W),
				   a->ln2_mean, a->ln2_rstd, BT, C);
		/* now the grad of res2 */
		matmul_backward(m->pool, m->dln, lt(m, G, l, ATTPROJW), lt(m, G, l, ATTPROJB),
				m->dres, a->atty, lt(m, P, l, ATTPROJW), BT, C, C);
		attention_backward(m->pool, m->dqkv, m->datt, m->dln, a->qkv, a->att,
				   B, T, C, NH);
		matmul_backward(m->pool, m->dln, lt(m, G, l, QKVW), lt(m, G, l, QKVB),
				m->dqkv, a->ln1, lt(m, P, l, QKVW), BT, C, 3 * C);
		layernorm_backward(m->pool, m->dres, lt(m, G, l, LN1W), lt(m, G, l, LN1B),
				   m->dln, residual, lt(m, P, l, LN1W),
				   a->ln1_mean, a->ln1_rstd, BT, C);
		/* now the grad of this layer's input */
	}
	encoder_backward(m->pool, tensor(m, G, 0), tensor(m, G, 1), m->dres, m->inputs,
			 B, T, C);
}
