/*
 * abi: include/ddiloco.h, the learner side of the exchange for trainers
 * that are not ours (docs/abi.md).
 *
 * A handle holds the job (when opened from a job file), the reference
 * model's tensor table, the fragment table cut from it exactly as
 * `ddiloco learner` cuts it (model_frag_table), and the exchange. The
 * caller owns the flat float32 parameter buffer; start and poll work on
 * it in place, as exchange_learner_start / exchange_poll do for the C
 * learner. The step time the sidecar reports is measured here, as the
 * time between the end of one poll and the start of the next.
 *
 * Errors go to a per-thread buffer (ddiloco_error), so a caller in any
 * language reads them the same way. libddiloco.so exports only the
 * functions of include/ddiloco.h (built with -fvisibility=hidden): the
 * rest of the project's code inside it is invisible to the process that
 * loads it.
 *
 * An evaluator's handle (ddiloco_set_evaluator) is a learner's that
 * leaves no seed and reports losses (exchange_put_eval) instead of
 * training; its sidecar is never pulled, so its polls only apply Θ.
 */
#include "include/ddiloco.h"

#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/exchange.h"
#include "common/jobspec.h"
#include "common/slowdown.h"
#include "common/util.h"
#include "trainer/model.h"
#include "trainer/optim.h"

#define API __attribute__((visibility("default")))

/* the sidecar learns the ABI from the exchange's word (docs/abi.md,
 * Versions) */
_Static_assert(DDILOCO_ABI_VERSION == EXCHANGE_ABI_VERSION,
	       "the exchange speaks this ABI version");
#define STEP_EMA 0.9

struct ddiloco_learner {
	int have_job;
	struct job_spec js;
	struct model_config cfg;
	int ntensors;
	struct model_tensor *tensors;
	char **names;                 /* external: the caller's names */
	char *dir;                    /* external: the exchange folder */
	int seeded;                   /* external: the seed is written */
	int evaluator;                /* ddiloco_set_evaluator: no seed */
	int started;                  /* ddiloco_start returned 0 once */
	uint64_t nparams;
	struct frag_table ft;
	struct exchange *x;
	char *job_json;
	struct exchange_step st;
	struct exchange_poll_result last;
	double last_end;              /* clock_mono at the end of the last poll */
	double poll_seconds, step_seconds;
	double slow;                  /* spec.learners.slowdown's factor for
				       * DDILOCO_LEARNER_ID, 1 for none */
};

static _Thread_local char last_error[512];

static void set_error(const char *msg)
{
	snprintf(last_error, sizeof(last_error), "%s", msg);
}

API int ddiloco_abi_version(void)
{
	return DDILOCO_ABI_VERSION;
}

API const char *ddiloco_version(void)
{
	return DDILOCO_VERSION;
}

API const char *ddiloco_error(void)
{
	return last_error;
}

static char *job_json(const struct job_spec *js)
{
	static const char *const fmt[] = { "auto", "text", "tokens" };
	const struct job_optimizer *o = &js->optimizer;
	json_t *j;
	char *s;

	j = json_pack("{s:s, s:{s:i, s:i}, s:{s:i, s:i, s:i, s:i, s:i, s:b, s:I},"
		      " s:{s:s, s:s, s:s, s:f, s:s},"
		      " s:{s:f, s:f, s:f, s:f, s:f, s:i, s:i, s:f, s:f, s:i, s:i},"
		      " s:{s:i}, s:{s:I, s:I}}",
		      "name", js->name,
		      "learners", "replicas", js->learners.replicas,
		      "threads", js->learners.threads,
		      "model", "vocabSize", js->model.vocab_size,
		      "context", js->model.context, "layers", js->model.layers,
		      "heads", js->model.heads, "channels", js->model.channels,
		      "tied", js->model.tied, "seed", (json_int_t)js->model.seed,
		      "data", "path", js->data.path, "valPath", js->data.val_path,
		      "format", fmt[js->data.format],
		      "valFraction", js->data.val_fraction,
		      "shardPattern", js->data.shard_pattern,
		      "optimizer", "lr", o->lr, "beta1", o->beta1,
		      "beta2", o->beta2, "eps", o->eps,
		      "weightDecay", o->weight_decay,
		      "warmupSteps", o->warmup_steps,
		      "cosineSteps", o->cosine_steps,
		      "minLrRatio", o->min_lr_ratio, "gradClip", o->grad_clip,
		      "batchSize", o->batch_size, "seqLen", jobspec_seq_len(js),
		      "syncer", "fragments", js->syncer.fragments,
		      "budget", "tokens", (json_int_t)js->budget.tokens,
		      "outerSteps", (json_int_t)js->budget.outer_steps);
	if (!j)
		return NULL;
	s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(17));
	json_decref(j);
	return s;
}

/* spec.learners.slowdown's factor for this process: DDILOCO_LEARNER_ID's
 * (docs/abi.md), 1 for a handle without a job (an evaluator's is reset
 * by ddiloco_set_evaluator). */
static double own_slowdown(const ddiloco_learner *h)
{
	const char *id = getenv("DDILOCO_LEARNER_ID");
	char *end;
	long i;

	if (!h->have_job || !id || !*id)
		return 1.0;
	i = strtol(id, &end, 10);
	return *end || i < 0 || i > INT_MAX ? 1.0 : jobspec_slowdown(&h->js, (int)i);
}

/* The tables and the exchange for h->cfg; frees h on failure. */
static ddiloco_learner *finish_open(ddiloco_learner *h, const char *dir,
				    int fragments)
{
	struct err e = { "" };
	int ft_ok = 0;

	h->tensors = calloc(MODEL_MAX_TENSORS, sizeof(*h->tensors));
	if (!h->tensors) {
		err_set(&e, "ddiloco: out of memory");
		goto fail;
	}
	h->ntensors = model_tensors(&h->cfg, h->tensors, MODEL_MAX_TENSORS);
	h->nparams = model_num_params(&h->cfg);
	if (model_frag_table(&h->cfg, fragments, &h->ft, &e))
		goto fail;
	ft_ok = 1;
	h->job_json = h->have_job ? job_json(&h->js) : strdup("{}");
	if (!h->job_json) {
		err_set(&e, "ddiloco: out of memory");
		goto fail;
	}
	if (dir && exchange_open(dir, EXCHANGE_LEARNER, &h->ft, &h->x, &e))
		goto fail;
	return h;
fail:
	set_error(e.msg);
	if (ft_ok)
		frag_table_release(&h->ft);
	free(h->job_json);
	free(h->tensors);
	free(h);
	return NULL;
}

API ddiloco_learner *ddiloco_open_job(const char *job_path, const char *dir)
{
	ddiloco_learner *h;
	struct err e = { "" };

	if (!job_path) {
		set_error("ddiloco: no job file given");
		return NULL;
	}
	h = calloc(1, sizeof(*h));
	if (!h) {
		set_error("ddiloco: out of memory");
		return NULL;
	}
	if (jobspec_load(job_path, &h->js, &e) ||
	    model_config_from_job(&h->js.model, &h->cfg, &e)) {
		set_error(e.msg);
		free(h);
		return NULL;
	}
	if (h->js.model.kind == MODEL_EXTERNAL) {
		snprintf(last_error, sizeof(last_error),
			 "ddiloco: '%s' has spec.model.kind external: open it with "
			 "ddiloco_open_external and the model's own table",
			 job_path);
		free(h);
		return NULL;
	}
	h->have_job = 1;
	h->slow = own_slowdown(h);
	return finish_open(h, dir, h->js.syncer.fragments);
}

static void free_names(char **names, int n)
{
	for (int i = 0; names && i < n; i++)
		free(names[i]);
	free(names);
}

/* The caller's table against the one the job declares
 * (spec.model.tensors), when it declares one: the first difference. */
static int declared_differs(const struct job_spec *js, int n,
			    const uint64_t *numels, struct err *e)
{
	const struct job_model *m = &js->model;

	if (!m->ntensors)
		return 0;
	if (m->ntensors != n)
		return err_set(e, "ddiloco: the model has %d tensors, the job "
			       "declares %d (spec.model.tensors)", n,
			       m->ntensors);
	for (int i = 0; i < n; i++)
		if (numels[i] != m->tensors[i])
			return err_set(e, "ddiloco: tensor %d has %llu values, "
				       "the job declares %llu (spec.model.tensors)",
				       i, (unsigned long long)numels[i],
				       (unsigned long long)m->tensors[i]);
	return 0;
}

/* Long because the caller's table is checked and copied in one pass, and
 * every step before the exchange unwinds at one of two labels. */
API ddiloco_learner *ddiloco_open_external(const char *job_path,
					   const char *dir, int ntensors,
					   const char *const *names,
					   const uint64_t *numels)
{
	struct frag_tensor *ft_in = NULL;
	ddiloco_learner *h;
	struct err e = { "" };
	uint64_t off = 0;

	if (!job_path || ntensors < 1 || ntensors > MODEL_MAX_TENSORS ||
	    !numels) {
		snprintf(last_error, sizeof(last_error),
			 "ddiloco: open_external needs a job file and 1 to %d "
			 "tensors, not %d", MODEL_MAX_TENSORS, ntensors);
		return NULL;
	}
	h = calloc(1, sizeof(*h));
	if (!h) {
		set_error("ddiloco: out of memory");
		return NULL;
	}
	if (jobspec_load(job_path, &h->js, &e)) {
		set_error(e.msg);
		free(h);
		return NULL;
	}
	if (h->js.model.kind != MODEL_EXTERNAL) {
		snprintf(last_error, sizeof(last_error),
			 "ddiloco: '%s' is a job of the reference GPT: a model's "
			 "own table needs spec.model.kind external", job_path);
		free(h);
		return NULL;
	}
	if (declared_differs(&h->js, ntensors, numels, &e)) {
		set_error(e.msg);
		free(h);
		return NULL;
	}
	h->have_job = 1;
	h->slow = own_slowdown(h);
	h->ntensors = ntensors;
	h->tensors = calloc((size_t)ntensors, sizeof(*h->tensors));
	h->names = calloc((size_t)ntensors, sizeof(*h->names));
	ft_in = calloc((size_t)ntensors, sizeof(*ft_in));
	if (!h->tensors || !h->names || !ft_in) {
		err_set(&e, "ddiloco: out of memory");
		goto fail;
	}
	for (int i = 0; i < ntensors; i++) {
		char num[32];

		if (numels[i] < 1) {
			err_set(&e, "ddiloco: tensor %d ('%s') has no values", i,
				names && names[i] ? names[i] : "");
			goto fail;
		}
		snprintf(num, sizeof(num), "t%d", i);
		h->names[i] = strdup(names && names[i] ? names[i] : num);
		if (!h->names[i]) {
			err_set(&e, "ddiloco: out of memory");
			goto fail;
		}
		h->tensors[i] = (struct model_tensor){ .offset = off,
			.numel = numels[i], .rows = numels[i] };
		ft_in[i] = (struct frag_tensor){ .offset = off,
						 .numel = numels[i] };
		off += numels[i];
	}
	h->nparams = off;
	if (frag_table_init(&h->ft, ft_in, ntensors, h->js.syncer.fragments,
			    &e))
		goto fail;
	free(ft_in);
	ft_in = NULL;
	h->job_json = job_json(&h->js);
	if (!h->job_json) {
		err_set(&e, "ddiloco: out of memory");
		goto fail_ft;
	}
	if (dir && (!(h->dir = strdup(dir)) ||
		    exchange_open(dir, EXCHANGE_LEARNER, &h->ft, &h->x, &e))) {
		if (!h->dir)
			err_set(&e, "ddiloco: out of memory");
		free(h->dir);
		goto fail_ft;
	}
	return h;
fail_ft:
	frag_table_release(&h->ft);
fail:
	set_error(e.msg);
	free(ft_in);
	free(h->job_json);
	free_names(h->names, ntensors);
	free(h->tensors);
	free(h);
	return NULL;
}

API ddiloco_learner *ddiloco_open_model(const char *dir, int vocab_size,
					int context, int layers, int heads,
					int channels, int tied, int fragments)
{
	struct job_model jm = { .vocab_size = vocab_size, .context = context,
				.layers = layers, .heads = heads,
				.channels = channels, .tied = tied };
	ddiloco_learner *h;
	struct err e = { "" };

	if (fragments < 1) {
		snprintf(last_error, sizeof(last_error),
			 "ddiloco: %d fragments: at least 1 is needed", fragments);
		return NULL;
	}
	h = calloc(1, sizeof(*h));
	if (!h) {
		set_error("ddiloco: out of memory");
		return NULL;
	}
	if (model_config_from_job(&jm, &h->cfg, &e)) {
		set_error(e.msg);
		free(h);
		return NULL;
	}
	return finish_open(h, dir, fragments);
}

API void ddiloco_close(ddiloco_learner *h)
{
	if (!h)
		return;
	exchange_close(h->x);
	frag_table_release(&h->ft);
	free(h->job_json);
	free_names(h->names, h->ntensors);
	free(h->dir);
	free(h->tensors);
	free(h);
}

API uint64_t ddiloco_num_params(const ddiloco_learner *h)
{
	return h->nparams;
}

API int ddiloco_num_tensors(const ddiloco_learner *h)
{
	return h->ntensors;
}

API int ddiloco_tensor(const ddiloco_learner *h, int i, const char **name,
		       int *ndim, int64_t *shape, uint64_t *offset,
		       uint64_t *numel, int *decayed, int *embedding)
{
	const struct model_tensor *t;

	if (i < 0 || i >= h->ntensors) {
		snprintf(last_error, sizeof(last_error),
			 "ddiloco: tensor %d: the model has %d (0 to %d)", i,
			 h->ntensors, h->ntensors - 1);
		return -1;
	}
	t = &h->tensors[i];
	if (name)
		*name = h->names ? h->names[i] : t->name;
	if (ndim)
		*ndim = t->cols ? 2 : 1;
	if (shape) {
		memset(shape, 0, DDILOCO_MAX_DIMS * sizeof(*shape));
		shape[0] = (int64_t)t->rows;
		shape[1] = (int64_t)t->cols;
	}
	if (offset)
		*offset = t->offset;
	if (numel)
		*numel = t->numel;
	if (decayed)
		*decayed = t->is_matrix;
	if (embedding)
		*embedding = t->is_embedding;
	return 0;
}

API int ddiloco_num_fragments(const ddiloco_learner *h)
{
	return h->ft.nfrags;
}

API uint64_t ddiloco_fingerprint(const ddiloco_learner *h)
{
	return h->ft.fingerprint;
}

API const char *ddiloco_job_json(const ddiloco_learner *h)
{
	return h->job_json;
}

API uint64_t ddiloco_decay_steps(const ddiloco_learner *h, int learners)
{
	if (!h->have_job || learners < 1)
		return 0;
	return schedule_decay_steps(&h->js, learners,
				    h->js.optimizer.batch_size,
				    jobspec_seq_len(&h->js));
}

API void ddiloco_init_params(const ddiloco_learner *h, float *params,
			     uint64_t seed)
{
	if (!h->names)   /* an external model's weights are its own */
		model_init_params(&h->cfg, params, seed);
}

static int need_exchange(const ddiloco_learner *h, const char *what)
{
	if (h->x)
		return 0;
	snprintf(last_error, sizeof(last_error),
		 "ddiloco: %s: the handle was opened without an exchange folder",
		 what);
	return -1;
}

API int ddiloco_start(ddiloco_learner *h, float *params, double timeout)
{
	double t0 = clock_mono();

	if (need_exchange(h, "start"))
		return -1;
	if (h->names && !h->seeded && !h->evaluator &&
	    !exchange_is_done(h->x)) {
		/* the syncer may adopt these weights as Θ (docs/syncer.md,
		 * Model-agnostic jobs) */
		struct err e = { "" };

		if (exchange_write_seed(h->dir,
					&h->ft, params, &e)) {
			set_error(e.msg);
			return -1;
		}
		h->seeded = 1;   /* once: the weights this process began with */
	}
	exchange_put_stats(h->x, &h->st);   /* the sidecar sees us at once */
	for (;;) {
		struct err e = { "" };

		/* a sidecar of another release that came after us
		 * (docs/abi.md, Versions) */
		if (exchange_versions(h->x, &e)) {
			set_error(e.msg);
			return -1;
		}
		if (exchange_is_done(h->x))
			return 1;
		if (exchange_learner_start(h->x, params)) {
			h->started = 1;
			h->last_end = clock_mono();
			return 0;
		}
		if (clock_mono() - t0 >= timeout)
			break;
		exchange_put_stats(h->x, &h->st);
		exchange_wait(h->x, 0.2);
	}
	snprintf(last_error, sizeof(last_error),
		 "ddiloco: no global model from the sidecar within %.0f s: is "
		 "`ddiloco sidecar` running on this exchange and connected to "
		 "the syncer?", timeout);
	return -1;
}

API int ddiloco_poll(ddiloco_learner *h, float *params, uint64_t step,
		     uint64_t tokens, double loss)
{
	return ddiloco_poll_fragments(h, params, step, tokens, loss, NULL, NULL,
				      NULL);
}

API int ddiloco_fragment_pieces(const ddiloco_learner *h, int p,
				uint64_t *offsets, uint64_t *numels, int max)
{
	const struct fragment *fr;

	if (p < 0 || p >= h->ft.nfrags) {
		snprintf(last_error, sizeof(last_error),
			 "ddiloco: fragment %d: the job has %d (0 to %d)", p,
			 h->ft.nfrags, h->ft.nfrags - 1);
		return -1;
	}
	fr = &h->ft.frags[p];
	for (int j = 0; j < fr->ntensors && j < max; j++) {
		const struct frag_tensor *t = &h->ft.tensors[fr->tensors[j]];

		if (offsets)
			offsets[j] = t->offset;
		if (numels)
			numels[j] = t->numel;
	}
	return fr->ntensors;
}

API int ddiloco_pending(ddiloco_learner *h, uint8_t *reads, uint8_t *writes)
{
	if (need_exchange(h, "pending"))
		return -1;
	exchange_pending(h->x, reads, writes);
	return 0;
}

API int ddiloco_poll_fragments(ddiloco_learner *h, float *params,
			       uint64_t step, uint64_t tokens, double loss,
			       const uint8_t *reads, const uint8_t *writes,
			       uint8_t *wrote)
{
	double t0 = clock_mono(), dt;
	struct err e = { "" };

	if (need_exchange(h, "poll"))
		return -1;
	dt = slowdown_step(h->slow, h->last_end > 0 ? t0 - h->last_end : 0);
	t0 = clock_mono();
	h->step_seconds += dt;
	h->st.step_time = h->st.step_time > 0 ?
		STEP_EMA * h->st.step_time + (1 - STEP_EMA) * dt : dt;
	h->st.step = step;
	h->st.tokens = tokens;
	h->st.tokens_total += tokens;
	h->st.loss = loss;
	if (exchange_versions(h->x, &e)) {
		set_error(e.msg);
		return -1;
	}
	exchange_poll_only(h->x, params, &h->st, &h->last, reads, writes, wrote);
	if (h->last.repaired)
		set_error(exchange_last_error(h->x));
	h->last_end = clock_mono();
	h->poll_seconds += h->last_end - t0;
	return h->last.done ? 1 : 0;
}

API int ddiloco_last_poll(const ddiloco_learner *h, int *applied, int *served,
			  int *repaired)
{
	if (applied)
		*applied = h->last.applied;
	if (served)
		*served = h->last.served;
	if (repaired)
		*repaired = h->last.repaired;
	return 0;
}

API int ddiloco_resume_step(ddiloco_learner *h, uint64_t *step)
{
	return h->x ? exchange_resume(h->x, step) : 0;
}

API int ddiloco_done(ddiloco_learner *h)
{
	return h->x ? exchange_is_done(h->x) : 0;
}

API void ddiloco_times(const ddiloco_learner *h, double *poll_seconds,
		       double *step_seconds)
{
	if (poll_seconds)
		*poll_seconds = h->poll_seconds;
	if (step_seconds)
		*step_seconds = h->step_seconds;
}

API int ddiloco_set_evaluator(ddiloco_learner *h)
{
	if (h->started || h->seeded) {
		set_error("ddiloco: set_evaluator: the handle has started "
			  "already: mark it before ddiloco_start");
		return -1;
	}
	h->evaluator = 1;
	h->slow = 1.0;   /* an evaluator is never slowed */
	return 0;
}

API uint64_t ddiloco_round(const ddiloco_learner *h)
{
	return h->x ? exchange_theta_round(h->x) : 0;
}

API uint64_t ddiloco_job_tokens(const ddiloco_learner *h)
{
	return h->x ? exchange_job_tokens(h->x) : 0;
}

API int ddiloco_report_eval(ddiloco_learner *h, uint64_t round, double loss,
			    uint64_t tokens)
{
	if (need_exchange(h, "report_eval"))
		return -1;
	if (!h->evaluator) {
		set_error("ddiloco: report_eval: not an evaluator's handle "
			  "(ddiloco_set_evaluator)");
		return -1;
	}
	exchange_put_eval(h->x, round, loss, tokens);
	return 0;
}
