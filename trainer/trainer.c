/*
 * trainer: one learner's inner loop, its checkpoint, and the evaluator.
 *
 * A trainer owns a model (parameters, gradients, activations), the AdamW
 * moments m and v (same layout as the parameters), and its data streams.
 * Step s trains on batch window s·stride + offset of its data (data.h), so
 * the whole run — data order included — is a function of the job, the
 * learner index and the step count: a checkpoint holds the step and
 * nothing else about the data.
 *
 * The step (schedule and data) and AdamW's bias-correction count t are
 * kept apart: a learner that resumes at the job's step (trainer_resume_at)
 * takes the schedule and data from there, while its moments, zero when it
 * restarted, are corrected from t = 1 as any fresh moments must be, and
 * its learning rate warms up again over warmupSteps (trainer_step).
 *
 * spec.learners.threads threads run the model and the optimizer pass (the
 * model's pool); OpenBLAS is set to one thread since the pool splits each
 * product itself. The gradient norm is summed per chunk of the pool, so
 * results are exact for a given thread count.
 *
 * The evaluator owns a model of at most B rows and scores a parameter
 * vector (copied in) on the first rows of the validation stream: the same
 * rows every time, so successive evaluations are comparable.
 */
#include "trainer/trainer.h"

#include <cblas.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "trainer/data.h"
#include "trainer/optim.h"
#include "trainer/pool.h"

struct evaluator {
	struct data own;              /* loaded by evaluator_new */
	const struct data *d;         /* own, or the trainer's */
	struct model_config cfg;
	struct model *m;
	int B, T;
	int *inputs, *targets;
};

/* The optimizer pass, split over the flat parameter array. */
struct opt_arg {
	const struct model_tensor *tab;
	int ntab;
	float *P, *G, *m, *v;
	struct adamw_step s;
	float weight_decay;
	double partial[POOL_MAX_THREADS];          /* per chunk: Σg², for the norm */
};

struct trainer {
	struct job_spec js;
	int learner, learners;
	struct model_config cfg;
	struct model *model;
	int B, T;
	float *m, *v;                 /* AdamW moments, parameter layout */
	struct data data;
	int *inputs, *targets;        /* (B,T) */
	uint64_t step, tokens_total, decay_steps;
	uint64_t adam_t;              /* AdamW updates since m, v were zero */
	uint64_t sched_step;          /* the lr schedule's step; 0: step's */
	struct evaluator *ev;         /* made at the first trainer_eval */
	struct data tune;             /* data's tuning split as validation */
	struct evaluator *ev_tune;    /* made at the first trainer_eval_tune */
	struct opt_arg opt;
};

static struct evaluator *evaluator_make(const struct model_config *cfg,
					const struct data *d, int B, int T,
					int threads, struct err *e);

struct trainer *trainer_new(const struct job_spec *js, int learner,
			    int learners, struct err *e)
{
	struct trainer *t;
	size_t n;

	if (learners < 1 || learner < 0 || learner >= learners)
		return err_set(e, "trainer: learner %d of %d does not exist",
			       learner, learners), NULL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return err_set(e, "trainer: out of memory"), NULL;
	t->js = *js;
	t->learner = learner;
	t->learners = learners;
	t->B = js->optimizer.batch_size;
	t->T = jobspec_seq_len(js);
	if (model_config_from_job(&js->model, &t->cfg, e))
		goto fail;
	openblas_set_num_threads(1);   /* the pool splits the products */
	if (data_open(&t->data, &js->data, t->cfg.V, learner, learners, e))
		goto fail;
	if (data_windows(&t->data, t->B, t->T) == 0) {
		err_set(e, "data: '%s' holds %zu training tokens, fewer than one batch (%d × %d + 1)",
			t->data.train_name, t->data.ntrain, t->B, t->T);
		goto fail;
	}
	t->model = model_new(&t->cfg, t->B, t->T, e);
	if (!t->model || model_set_threads(t->model, js->learners.threads, e))
		goto fail;
	n = model_size(t->model);
	t->m = calloc(n, sizeof(float));
	t->v = calloc(n, sizeof(float));
	t->inputs = calloc((size_t)t->B * t->T, sizeof(int));
	t->targets = calloc((size_t)t->B * t->T, sizeof(int));
	if (!t->m || !t->v || !t->inputs || !t->targets) {
		err_set(e, "trainer: out of memory for %zu parameters", n);
		goto fail;
	}
	model_init_params(&t->cfg, model_params(t->model), js->model.seed);
	t->decay_steps = schedule_decay_steps(js, learners, t->B, t->T);
	return t;
fail:
	trainer_free(t);
	return NULL;
}

void trainer_free(struct trainer *t)
{
	if (!t)
		return;
	evaluator_free(t->ev);
	evaluator_free(t->ev_tune);
	model_free(t->model);
	data_close(&t->data);
	free(t->m);
	free(t->v);
	free(t->inputs);
	free(t->targets);
	free(t);
}

static void norm_chunk(void *a, size_t lo, size_t hi, int chunk)
{
	struct opt_arg *o = a;

	o->partial[chunk] = grad_norm(o->G + lo, hi - lo);
	o->partial[chunk] *= o->partial[chunk];
}

/* AdamW over [lo, hi), tensor by tensor: weight decay on matrices only. */
static void adamw_chunk(void *a, size_t lo, size_t hi, int chunk)
{
	struct opt_arg *o = a;

	(void)chunk;
	for (int i = 0; i < o->ntab; i++) {
		size_t b = o->tab[i].offset, e = b + o->tab[i].numel;
		struct adamw_step s = o->s;

		b = b > lo ? b : lo;
		e = e < hi ? e : hi;
		if (b >= e)
			continue;
		s.weight_decay = o->tab[i].is_matrix ? o->weight_decay : 0.0f;
		adamw_update(o->P + b, o->G + b, o->m + b, o->v + b, e - b, &s);
	}
}

int trainer_step(struct trainer *t, struct trainer_stats *out, struct err *e)
{
	const struct job_optimizer *o = &t->js.optimizer;
	struct pool *pool = model_pool(t->model);
	size_t n = model_size(t->model);
	double t0 = clock_mono(), lr, norm = 0;
	uint64_t sched;
	struct opt_arg *oa;
	float loss;

	data_batch(&t->data, t->step, t->B, t->T, t->inputs, t->targets);
	loss = model_forward(t->model, t->inputs, t->targets);
	if (!isfinite(loss))
		return err_set(e, "trainer: loss is not finite at step %llu",
			       (unsigned long long)t->step);
	model_backward(t->model);

	oa = &t->opt;
	oa->tab = model_tensor_table(t->model, &oa->ntab);
	oa->P = model_params(t->model);
	oa->G = model_grads(t->model);
	oa->m = t->m;
	oa->v = t->v;
	/* the norm: partial sums per chunk, added in chunk order */
	pool_run(pool, norm_chunk, oa, n);
	for (int c = 0; c < pool_threads(pool); c++)
		norm += oa->partial[c];
	norm = sqrt(norm);
	if (!isfinite(norm))
		return err_set(e, "trainer: gradient is not finite at step %llu",
			       (unsigned long long)t->step);
	sched = trainer_schedule_step(t);
	lr = schedule_lr(o, sched, t->decay_steps);
	/*
	 * Resumed with fresh moments (a restarted learner): AdamW's first
	 * steps are about lr·sign(g) whatever the gradient's size, so the
	 * rate warms up again over warmupSteps, as at step 0.
	 */
	if (sched > t->adam_t && t->adam_t < (uint64_t)o->warmup_steps)
		lr *= (double)(t->adam_t + 1) / (double)o->warmup_steps;
	oa->s = (struct adamw_step){
		.lr = (float)lr, .beta1 = (float)o->beta1,
		.beta2 = (float)o->beta2, .eps = (float)o->eps,
		.grad_scale = clip_scale(norm, o->grad_clip), .t = t->adam_t + 1,
	};
	oa->weight_decay = (float)o->weight_decay;
	pool_run(pool, adamw_chunk, oa, n);

	t->step++;
	t->adam_t++;
	t->tokens_total += (uint64_t)t->B * t->T;
	if (out) {
		out->step = t->step;
		out->tokens = (uint64_t)t->B * t->T;
		out->tokens_total = t->tokens_total;
		out->loss = loss;
		out->lr = lr;
		out->seconds = clock_mono() - t0;
	}
	return 0;
}

float *trainer_params(struct trainer *t)
{
	return model_params(t->model);
}

const struct model_config *trainer_config(const struct trainer *t)
{
	return &t->cfg;
}

uint64_t trainer_steps(const struct trainer *t)
{
	return t->step;
}

int trainer_resume_at(struct trainer *t, uint64_t step)
{
	if (step <= t->step)
		return 0;
	t->step = step;
	return 1;
}

uint64_t trainer_adam_t(const struct trainer *t)
{
	return t->adam_t;
}

uint64_t trainer_tokens(const struct trainer *t)
{
	return t->tokens_total;
}

void trainer_batch(const struct trainer *t, int *B, int *T)
{
	*B = t->B;
	*T = t->T;
}

uint64_t trainer_decay_steps(const struct trainer *t)
{
	return t->decay_steps;
}

void trainer_set_schedule_step(struct trainer *t, uint64_t step)
{
	t->sched_step = step;
}

uint64_t trainer_schedule_step(const struct trainer *t)
{
	return t->sched_step ? t->sched_step : t->step;
}

int trainer_eval(struct trainer *t, size_t max_tokens, double *loss,
		 struct err *e)
{
	if (!t->ev) {
		t->ev = evaluator_make(&t->cfg, &t->data, t->B, t->T,
					t->js.learners.threads, e);
		if (!t->ev)
			return -1;
	}
	return evaluator_loss(t->ev, model_params(t->model), max_tokens, loss, e);
}

int trainer_eval_tune(struct trainer *t, size_t max_tokens, double *loss,
		      struct err *e)
{
	*loss = NAN;
	if (!t->data.ntune)
		return 0;
	if (!t->ev_tune) {
		data_tune_view(&t->data, &t->tune);
		t->ev_tune = evaluator_make(&t->cfg, &t->tune, t->B, t->T,
					    t->js.learners.threads, e);
		if (!t->ev_tune)
			return -1;
	}
	return evaluator_loss(t->ev_tune, model_params(t->model), max_tokens,
			      loss, e);
}

/* ---- checkpoint ---- */

static void put32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

static void put64(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, 8);
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

static void put_shapes(uint8_t *p, const struct model_config *c)
{
	int32_t s[6] = { c->V, c->maxT, c->L, c->NH, c->C, c->tied };

	memcpy(p, s, sizeof(s));
}

int trainer_save(struct trainer *t, const char *path, struct err *e)
{
	size_t n = model_size(t->model), len = TRAINER_CKPT_HEADER + 12 * n + 4;
	uint8_t *buf = malloc(len);
	int rc;

	if (!buf)
		return err_set(e, "trainer: cannot save checkpoint '%s': out of memory",
			       path);
	memcpy(buf, TRAINER_CKPT_MAGIC, 4);
	put32(buf + 4, TRAINER_CKPT_VERSION);
	put_shapes(buf + 8, &t->cfg);
	put64(buf + 32, t->step);
	put64(buf + 40, t->tokens_total);
	put64(buf + 48, n);
	memcpy(buf + TRAINER_CKPT_HEADER, model_params(t->model), 4 * n);
	memcpy(buf + TRAINER_CKPT_HEADER + 4 * n, t->m, 4 * n);
	memcpy(buf + TRAINER_CKPT_HEADER + 8 * n, t->v, 4 * n);
	put32(buf + len - 4, crc32_update(0, buf, len - 4));
	rc = file_write_atomic(path, buf, len, e);
	free(buf);
	if (rc)
		return err_wrap(e, "trainer: cannot save checkpoint '%s'", path);
	return 0;
}

static void describe(char *out, size_t cap, const int32_t *s)
{
	snprintf(out, cap, "V=%d maxT=%d L=%d NH=%d C=%d tied=%d",
		 s[0], s[1], s[2], s[3], s[4], s[5]);
}

int trainer_load(struct trainer *t, const char *path, struct err *e)
{
	size_t n = model_size(t->model), want = TRAINER_CKPT_HEADER + 12 * n + 4;
	uint8_t hdr[TRAINER_CKPT_HEADER], *buf = NULL;
	int32_t theirs[6], ours[6];
	char a[128], b[128];
	struct stat st;
	size_t len;
	ssize_t got;
	int fd, rc = -1;

	fd = open(path, O_RDONLY);
	if (fd < 0)
		return err_set(e, "trainer: cannot load checkpoint '%s': %s", path,
			       strerror(errno));
	if (fstat(fd, &st)) {
		close(fd);
		return err_set(e, "trainer: cannot load checkpoint '%s': %s", path,
			       strerror(errno));
	}
	got = read(fd, hdr, sizeof(hdr));
	close(fd);
	if (got < (ssize_t)sizeof(hdr))
		return err_set(e, "trainer: cannot load checkpoint '%s': truncated (%lld bytes, shorter than the %d-byte header)",
			       path, (long long)st.st_size, TRAINER_CKPT_HEADER);
	if (memcmp(hdr, TRAINER_CKPT_MAGIC, 4))
		return err_set(e, "trainer: cannot load checkpoint '%s': not a trainer checkpoint (bad magic)",
			       path);
	if (get32(hdr + 4) != TRAINER_CKPT_VERSION)
		return err_set(e, "trainer: cannot load checkpoint '%s': unsupported version %u (expected %u)",
			       path, get32(hdr + 4), TRAINER_CKPT_VERSION);
	memcpy(theirs, hdr + 8, sizeof(theirs));
	put_shapes((uint8_t *)ours, &t->cfg);
	describe(a, sizeof(a), theirs);
	describe(b, sizeof(b), ours);
	if ((size_t)st.st_size != want) {
		if (memcmp(theirs, ours, sizeof(ours)))
			return err_set(e, "trainer: cannot load checkpoint '%s': shape mismatch: the checkpoint has %s, the job has %s",
				       path, a, b);
		return err_set(e, "trainer: cannot load checkpoint '%s': truncated (%lld bytes, expected %zu)",
			       path, (long long)st.st_size, want);
	}
	if (file_read_all(path, want, (void **)&buf, &len, e))
		return err_wrap(e, "trainer: cannot load checkpoint '%s'", path);
	if (len != want) {
		err_set(e, "trainer: cannot load checkpoint '%s': truncated (%zu bytes, expected %zu)",
			path, len, want);
		goto out;
	}
	if (crc32_update(0, buf, len - 4) != get32(buf + len - 4)) {
		err_set(e, "trainer: cannot load checkpoint '%s': checksum mismatch",
			path);
		goto out;
	}
	if (memcmp(theirs, ours, sizeof(ours)) || get64(buf + 48) != n) {
		err_set(e, "trainer: cannot load checkpoint '%s': shape mismatch: the checkpoint has %s, the job has %s",
			path, a, b);
		goto out;
	}
	t->step = get64(buf + 32);
	/* t is not in the file: the step, which is exact for `ddiloco
	 * train`; past a few hundred updates the correction is 1 either way */
	t->adam_t = t->step;
	t->tokens_total = get64(buf + 40);
	memcpy(model_params(t->model), buf + TRAINER_CKPT_HEADER, 4 * n);
	memcpy(t->m, buf + TRAINER_CKPT_HEADER + 4 * n, 4 * n);
	memcpy(t->v, buf + TRAINER_CKPT_HEADER + 8 * n, 4 * n);
	rc = 0;
out:
	free(buf);
	return rc;
}

/* ---- evaluator ---- */

static struct evaluator *evaluator_make(const struct model_config *cfg,
					const struct data *d, int B, int T,
					int threads, struct err *e)
{
	struct evaluator *ev;
	size_t rows = data_val_rows(d, T);

	if (rows == 0)
		return err_set(e, "data: the validation split of '%s' holds %zu tokens, fewer than one row (%d + 1)",
			       d->train_name[0] ? d->train_name : "valPath",
			       d->nval, T), NULL;
	ev = calloc(1, sizeof(*ev));
	if (!ev)
		return err_set(e, "evaluator: out of memory"), NULL;
	ev->d = d;
	ev->cfg = *cfg;
	ev->B = rows < (size_t)B ? (int)rows : B;
	ev->T = T;
	ev->inputs = calloc((size_t)ev->B * T, sizeof(int));
	ev->targets = calloc((size_t)ev->B * T, sizeof(int));
	ev->m = model_new(cfg, ev->B, T, e);
	if (ev->m && model_set_threads(ev->m, threads, e)) {
		model_free(ev->m);
		ev->m = NULL;
	}
	if (!ev->inputs || !ev->targets || !ev->m) {
		if (ev->m)
			err_set(e, "evaluator: out of memory");
		evaluator_free(ev);
		return NULL;
	}
	return ev;
}

struct evaluator *evaluator_new(const struct job_spec *js, struct err *e)
{
	struct model_config cfg;
	struct data *d;
	struct evaluator *ev;

	if (model_config_from_job(&js->model, &cfg, e))
		return NULL;
	d = calloc(1, sizeof(*d));
	if (!d)
		return err_set(e, "evaluator: out of memory"), NULL;
	openblas_set_num_threads(1);   /* the pool splits the products */
	if (data_open_val(d, &js->data, cfg.V, e)) {
		free(d);
		return NULL;
	}
	ev = evaluator_make(&cfg, d, js->optimizer.batch_size,
			    jobspec_seq_len(js), js->learners.threads, e);
	if (ev) {
		ev->own = *d;      /* the evaluator now owns the streams */
		ev->d = &ev->own;
	} else {
		data_close(d);
	}
	free(d);
	return ev;
}

void evaluator_free(struct evaluator *ev)
{
	if (!ev)
		return;
	data_close(&ev->own);
	model_free(ev->m);
	free(ev->inputs);
	free(ev->targets);
	free(ev);
}

int evaluator_loss(struct evaluator *ev, const float *params,
		   size_t max_tokens, double *loss, struct err *e)
{
	size_t rows = data_val_rows(ev->d, ev->T), want, batches;
	double total = 0;

	want = max_tokens ? max_tokens / (size_t)ev->T : rows;
	if (want > rows)
		want = rows;
	batches = want / (size_t)ev->B;
	if (batches == 0)
		batches = 1;          /* at least one batch, even past max_tokens */
	memcpy(model_params(ev->m), params, model_size(ev->m) * sizeof(float));
	for (size_t k = 0; k < batches; k++) {
		float l;

		/* the rows spread evenly over the split, not its first ones
		 * (docs/trainer.md, Evaluation) */
		for (int b = 0; b < ev->B; b++)
			data_val_row(ev->d, data_val_pick(k * (size_t)ev->B + (size_t)b,
							  batches * (size_t)ev->B, rows),
				     ev->T, ev->inputs + (size_t)b * ev->T,
				     ev->targets + (size_t)b * ev->T);
		l = model_forward(ev->m, ev->inputs, ev->targets);
		if (!isfinite(l))
			return err_set(e, "evaluator: validation loss is not finite");
		total += l;
	}
	*loss = total / (double)batches;
	return 0;
}
