/*
 * jobspec: defaults and cross-field validation of a job spec. The file
 * readers (YAML, JSON) live in jobspec_parse.c and end by calling
 * jobspec_validate, so every way into a job_spec passes the same checks.
 */
#include "common/jobspec.h"

#include "common/fragment.h"
#include "common/shard.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

void jobspec_defaults(struct job_spec *js)
{
	memset(js, 0, sizeof(*js));
	snprintf(js->name, sizeof(js->name), "ddjob");
	snprintf(js->namespace_, sizeof(js->namespace_), "default");
	js->ttl_seconds_after_finished = -1;

	js->learners.replicas = 4;
	js->learners.threads = 1;
	snprintf(js->learners.image, sizeof(js->learners.image), "ddiloco:latest");
	js->learners.synthetic.step_time = 0.05;
	js->learners.synthetic.scale = 1e-3;
	js->learners.synthetic.seed = 1;

	js->model.vocab_size = 256;
	js->model.context = 64;
	js->model.layers = 2;
	js->model.heads = 4;
	js->model.channels = 128;
	js->model.tied = 1;
	js->model.seed = 1337;

	js->data.format = DATA_AUTO;
	js->data.val_fraction = 0.1;

	js->optimizer.lr = 4e-4;
	js->optimizer.beta1 = 0.9;
	js->optimizer.beta2 = 0.95;
	js->optimizer.eps = 1e-8;
	js->optimizer.weight_decay = 0.1;
	js->optimizer.warmup_steps = 100;
	js->optimizer.cosine_steps = 0;
	js->optimizer.min_lr_ratio = 0.1;
	js->optimizer.grad_clip = 1.0;
	js->optimizer.batch_size = 8;
	js->optimizer.seq_len = 0;          /* 0 = model.context */

	js->syncer.min_quorum = 1;
	js->syncer.grace = 0.5;
	js->syncer.fragments = 4;
	js->syncer.sync_every = 0;          /* 0 = 4 × fragments (jobspec_sync_every) */
	js->syncer.overlap = 2;
	js->syncer.shards = 1;
	js->syncer.alpha = 0.0;
	js->syncer.outer_lr = 0.7;
	js->syncer.outer_momentum = 0.5;   /* docs/syncer.md, the outer step at long H */
	js->syncer.nesterov = 1;
	js->syncer.merge = MERGE_RDA;
	js->syncer.encoding = ENC_INT8;     /* docs/syncer.md, Defaults */
	js->syncer.update_encoding = ENC_BF16;
	js->syncer.error_feedback = 1;
	js->syncer.checkpoint_every = 50;
	js->syncer.eval_every = 20;
	js->syncer.eval_tokens = 8192;
	js->syncer.norm_outlier = 10.0;
	js->syncer.stale_versions = 4;
	js->syncer.clip_steps = 4.0;
	js->syncer.max_share = 0.5;        /* docs/syncer.md, Bounds */
	js->syncer.min_step_time = 1e-4;
	js->syncer.max_step_time = 600;
	js->syncer.max_claim_cuts = 10;    /* docs/syncer.md, Bounds */
	js->syncer.stall_seconds = 300;    /* docs/syncer.md, Stale learners */
	js->syncer.hello_timeout = 10;     /* docs/syncer.md, gRPC details */
	js->syncer.max_parameters = 4000000000ULL;   /* Memory budget */
	js->syncer.port = 7070;
	js->syncer.http_port = 7071;

	js->chaos.enabled = 0;
	js->chaos.schedule = CHAOS_POISSON;
	js->chaos.mtbf_seconds = 20;
	js->chaos.interval_seconds = 20;
	js->chaos.targets = CHAOS_TARGET_LEARNERS;
	js->chaos.max_down = 1;
	js->chaos.start_after_seconds = 10;
	js->chaos.stop_after_seconds = 0;
	js->chaos.recovery_seconds = 3;
	js->chaos.seed = 1;
	js->chaos.syncer_shard = -1;
}

#define CHECK(cond, ...) do { if (!(cond)) return err_set(e, __VA_ARGS__); } while (0)

/* A DNS-1035 label (the job's Service is named after it) no longer than
 * JOB_NAME_LEN_MAX: the CRD's rules on metadata.name, in C. */
static int valid_name(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > JOB_NAME_LEN_MAX || s[0] < 'a' || s[0] > 'z')
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		int ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
			 (c == '-' && i < n - 1);
		if (!ok)
			return 0;
	}
	return 1;
}

/* spec.model.tensors: a table the learner library can cut into
 * spec.syncer.fragments, within spec.syncer.maxParameters a shard at
 * most (docs/syncer.md, A declared table) */
static int check_declared(const struct job_spec *js, struct err *e)
{
	const struct job_model *m = &js->model;
	struct frag_table ft;
	uint64_t most = 0;
	size_t n;
	struct err why;

	if (frag_table_of_numels(&ft, m->tensors, m->ntensors,
				 js->syncer.fragments, &n, &why))
		return err_set(e, "spec.model.tensors: %s", why.msg);
	for (int s = 0; s < js->syncer.shards; s++) {
		uint64_t mine = 0;

		for (int p = 0; p < ft.nfrags; p++)
			if (shard_owner(p, js->syncer.shards) == s)
				mine += ft.frags[p].numel;
		most = mine > most ? mine : most;
	}
	frag_table_release(&ft);
	CHECK(most <= js->syncer.max_parameters,
	      "spec.model.tensors: %zu values, %llu of them for one syncer "
	      "shard: more than spec.syncer.maxParameters %llu", n,
	      (unsigned long long)most,
	      (unsigned long long)js->syncer.max_parameters);
	return 0;
}

/* spec.learners.synthetic (docs/run.md, Synthetic learners) */
static int check_synthetic(const struct job_spec *js, struct err *e)
{
	const struct job_synthetic *y = &js->learners.synthetic;
	int external = js->model.kind == MODEL_EXTERNAL;

	if (!y->enabled)
		return 0;
	CHECK(y->step_time >= 1e-3 && y->step_time <= 3600,
	      "spec.learners.synthetic.stepTime: %g is not in [0.001, 3600]",
	      y->step_time);
	CHECK(y->scale > 0 && y->scale <= 1,
	      "spec.learners.synthetic.scale: %g is not in (0, 1]", y->scale);
	CHECK(!y->ntensors || external,
	      "spec.learners.synthetic.tensors: only for spec.model.kind "
	      "external (the reference GPT's table comes from spec.model)");
	CHECK(y->ntensors || js->model.ntensors || !external,
	      "spec.learners.synthetic.tensors: missing; a synthetic learner of "
	      "spec.model.kind external needs the model's table (here or in "
	      "spec.model.tensors)");
	CHECK(!external || !y->ntensors || js->syncer.fragments <= y->ntensors,
	      "spec.syncer.fragments: %d is more than the %d tensors of "
	      "spec.learners.synthetic.tensors", js->syncer.fragments,
	      y->ntensors);
	CHECK(!y->ntensors || !js->model.ntensors ||
	      (y->ntensors == js->model.ntensors &&
	       !memcmp(y->tensors, js->model.tensors,
		       (size_t)y->ntensors * sizeof(y->tensors[0]))),
	      "spec.learners.synthetic.tensors: not the table spec.model.tensors "
	      "declares (leave it out: a synthetic learner takes the declared one)");
	return 0;
}

/*
 * One function a part of the spec, each a flat list of checks, one per
 * field in the spec's order; jobspec_validate calls them in that order.
 */
static int check_learners(const struct job_spec *js, struct err *e)
{
	int M = js->learners.replicas;

	CHECK(valid_name(js->name),
	      "metadata.name: '%s' is not a DNS-1035 label of at most %d characters "
	      "(a lower-case letter, then lower-case letters, digits or '-', "
	      "ending in a letter or digit)", js->name, JOB_NAME_LEN_MAX);
	CHECK(M >= 1 && M <= 4096, "spec.learners.replicas: %d is not in [1, 4096]", M);
	CHECK(js->learners.threads >= 1 && js->learners.threads <= 256,
	      "spec.learners.threads: %d is not in [1, 256]", js->learners.threads);
	if (js->learners.ngroups) {
		int sum = 0;

		for (int g = 0; g < js->learners.ngroups; g++) {
			const struct job_group *gr = &js->learners.groups[g];

			CHECK(gr->replicas >= 1 && gr->replicas <= 4096,
			      "spec.learners.groups[%d].replicas: %d is not in [1, 4096]",
			      g, gr->replicas);
			CHECK(gr->command.n || !gr->args.n,
			      "spec.learners.groups[%d].args: given without a command", g);
			sum += gr->replicas;
		}
		CHECK(sum == M,
		      "spec.learners.groups: the groups have %d learners, spec.learners.replicas is %d",
		      sum, M);
	}
	for (int k = 0; k < js->learners.nslow; k++) {
		const struct job_slow *w = &js->learners.slow[k];

		CHECK(w->learner >= 0 && w->learner < M,
		      "spec.learners.slowdown: learner %d is not one of the job's "
		      "%d (0 to %d)", w->learner, M, M - 1);
		CHECK(w->factor >= 1 && w->factor <= 100,
		      "spec.learners.slowdown.%d: %g is not in [1, 100]",
		      w->learner, w->factor);
	}
	return check_synthetic(js, e);
}

static int check_model(const struct job_spec *js, struct err *e)
{
	const struct job_model *m = &js->model;

	CHECK(m->vocab_size >= 2 && m->vocab_size <= 1 << 20,
	      "spec.model.vocabSize: %d is not in [2, 1048576]", m->vocab_size);
	CHECK(m->context >= 2 && m->context <= 8192,
	      "spec.model.context: %d is not in [2, 8192]", m->context);
	CHECK(m->layers >= 1 && m->layers <= 256,
	      "spec.model.layers: %d is not in [1, 256]", m->layers);
	CHECK(m->heads >= 1, "spec.model.heads: %d is less than 1", m->heads);
	CHECK(m->channels >= 1 && m->channels <= 65536,
	      "spec.model.channels: %d is not in [1, 65536]", m->channels);
	CHECK(m->channels % m->heads == 0,
	      "spec.model.channels: %d is not a multiple of spec.model.heads (%d)",
	      m->channels, m->heads);
	CHECK(!m->ntensors || m->kind == MODEL_EXTERNAL,
	      "spec.model.tensors: only for spec.model.kind external (the "
	      "reference GPT's table comes from its dimensions)");
	return 0;
}

/* spec.evaluator and spec.data */
static int check_evaluator_data(const struct job_spec *js, struct err *e)
{
	const struct job_model *m = &js->model;

	CHECK(js->evaluator.command.n || !js->evaluator.args.n,
	      "spec.evaluator.args: given without a command");
	/* the syncer evaluates the reference GPT itself (docs/syncer.md) */
	CHECK(!js->evaluator.command.n || m->kind == MODEL_EXTERNAL,
	      "spec.evaluator: only for spec.model.kind external (the syncer "
	      "evaluates the reference GPT itself)");

	CHECK(js->data.val_fraction >= 0 && js->data.val_fraction < 1,
	      "spec.data.valFraction: %g is not in [0, 1)", js->data.val_fraction);
	CHECK(js->data.tune_fraction >= 0 && js->data.tune_fraction < 1,
	      "spec.data.tuneFraction: %g is not in [0, 1)", js->data.tune_fraction);
	CHECK(js->data.split != SPLIT_FILES ||
	      (!js->data.val_path[0] && !js->data.shard_pattern[0] &&
	       js->data.val_fraction > 0),
	      "spec.data.split files: holds valFraction of the files of "
	      "spec.data.path out (a folder), so it takes neither valPath nor "
	      "shardPattern, and a valFraction above 0");
	return 0;
}

static int check_optimizer(const struct job_spec *js, struct err *e)
{
	const struct job_model *m = &js->model;
	const struct job_optimizer *o = &js->optimizer;

	CHECK(o->lr > 0 && isfinite(o->lr), "spec.optimizer.lr: %g is not a positive number", o->lr);
	CHECK(o->beta1 >= 0 && o->beta1 < 1, "spec.optimizer.beta1: %g is not in [0, 1)", o->beta1);
	CHECK(o->beta2 >= 0 && o->beta2 < 1, "spec.optimizer.beta2: %g is not in [0, 1)", o->beta2);
	CHECK(o->eps > 0, "spec.optimizer.eps: %g is not positive", o->eps);
	CHECK(o->weight_decay >= 0, "spec.optimizer.weightDecay: %g is negative", o->weight_decay);
	CHECK(o->warmup_steps >= 0, "spec.optimizer.warmupSteps: %d is negative", o->warmup_steps);
	CHECK(o->cosine_steps >= 0, "spec.optimizer.cosineSteps: %d is negative", o->cosine_steps);
	CHECK(o->min_lr_ratio >= 0 && o->min_lr_ratio <= 1,
	      "spec.optimizer.minLrRatio: %g is not in [0, 1]", o->min_lr_ratio);
	CHECK(o->grad_clip >= 0, "spec.optimizer.gradClip: %g is negative", o->grad_clip);
	CHECK(o->batch_size >= 1 && o->batch_size <= 65536,
	      "spec.optimizer.batchSize: %d is not in [1, 65536]", o->batch_size);
	CHECK(o->seq_len >= 0 && o->seq_len <= m->context,
	      "spec.optimizer.seqLen: %d is more than spec.model.context (%d)",
	      o->seq_len, m->context);
	return 0;
}

static int check_syncer(const struct job_spec *js, struct err *e)
{
	const struct job_model *m = &js->model;
	const struct job_syncer *s = &js->syncer;
	int M = js->learners.replicas;

	CHECK(s->min_quorum >= 1, "spec.syncer.minQuorum: %d is less than 1", s->min_quorum);
	CHECK(s->min_quorum <= M,
	      "spec.syncer.minQuorum: %d is more than spec.learners.replicas (%d)",
	      s->min_quorum, M);
	CHECK(s->grace >= 0 && s->grace <= 1, "spec.syncer.grace: %g is not in [0, 1]", s->grace);
	CHECK(s->fragments >= 1, "spec.syncer.fragments: %d is less than 1", s->fragments);
	/* an external model's table is its learners' (docs/syncer.md) */
	CHECK(m->kind == MODEL_EXTERNAL || s->fragments <= 2 + 12 * m->layers + 2,
	      "spec.syncer.fragments: %d is more than the model's %d tensors",
	      s->fragments, 2 + 12 * m->layers + 2);
	CHECK(s->sync_every >= 0, "spec.syncer.syncEvery: %d is negative", s->sync_every);
	CHECK(s->overlap >= 1 && s->overlap <= 64,
	      "spec.syncer.overlap: %d is not in [1, 64]", s->overlap);
	CHECK(s->shards >= 1 && s->shards <= JOB_MAX_SHARDS,
	      "spec.syncer.shards: %d is not in [1, %d]", s->shards,
	      JOB_MAX_SHARDS);
	CHECK(s->shards <= s->fragments,
	      "spec.syncer.shards: %d is more than spec.syncer.fragments (%d): "
	      "a shard owns at least one fragment", s->shards, s->fragments);
	CHECK(s->alpha >= 0 && s->alpha < 1, "spec.syncer.alpha: %g is not in [0, 1)", s->alpha);
	CHECK(s->outer_lr > 0 && s->outer_lr <= 10,
	      "spec.syncer.outerLr: %g is not in (0, 10]", s->outer_lr);
	CHECK(s->outer_momentum >= 0 && s->outer_momentum < 1,
	      "spec.syncer.outerMomentum: %g is not in [0, 1)", s->outer_momentum);
	CHECK(s->checkpoint_every >= 0,
	      "spec.syncer.checkpointEvery: %d is negative", s->checkpoint_every);
	CHECK(s->eval_every >= 0, "spec.syncer.evalEvery: %d is negative", s->eval_every);
	CHECK(s->eval_tokens >= 0, "spec.syncer.evalTokens: %d is negative", s->eval_tokens);
	CHECK(s->norm_outlier > 1, "spec.syncer.normOutlier: %g is not more than 1",
	      s->norm_outlier);
	CHECK(s->stale_versions >= 1,
	      "spec.syncer.staleVersions: %d is less than 1", s->stale_versions);
	CHECK(s->clip_steps >= 1 && s->clip_steps <= 1e6,
	      "spec.syncer.clipSteps: %g is not in [1, 1e6]", s->clip_steps);
	CHECK(s->max_share > 0 && s->max_share <= 1,
	      "spec.syncer.maxShare: %g is not in (0, 1]", s->max_share);
	CHECK(s->stall_seconds >= 1 && s->stall_seconds <= 86400,
	      "spec.syncer.stallSeconds: %g is not in [1, 86400]",
	      s->stall_seconds);
	CHECK(s->max_parameters >= 1,
	      "spec.syncer.maxParameters: 0 is less than 1");
	CHECK(s->hello_timeout >= 0.1 && s->hello_timeout <= 3600,
	      "spec.syncer.helloTimeout: %g is not in [0.1, 3600]",
	      s->hello_timeout);
	CHECK(s->min_step_time > 0 && s->min_step_time <= 1,
	      "spec.syncer.minStepTime: %g is not in (0, 1]", s->min_step_time);
	CHECK(s->max_step_time > s->min_step_time && s->max_step_time <= 86400,
	      "spec.syncer.maxStepTime: %g is not in (minStepTime, 86400]",
	      s->max_step_time);
	CHECK(s->max_claim_cuts >= 0 && s->max_claim_cuts <= 1000000,
	      "spec.syncer.maxClaimCuts: %d is not in [0, 1000000]",
	      s->max_claim_cuts);
	CHECK(s->port > 0 && s->port < 65536, "spec.syncer.port: %d is not a port", s->port);
	CHECK(s->http_port > 0 && s->http_port < 65536 && s->http_port != s->port,
	      "spec.syncer.httpPort: %d is not a port distinct from spec.syncer.port",
	      s->http_port);
	return m->ntensors ? check_declared(js, e) : 0;
}

static int check_chaos(const struct job_spec *js, struct err *e)
{
	const struct job_chaos *c = &js->chaos;
	int M = js->learners.replicas;

	if (c->enabled) {
		CHECK(c->mtbf_seconds > 0, "spec.chaos.mtbfSeconds: %g is not positive",
		      c->mtbf_seconds);
		CHECK(c->interval_seconds > 0,
		      "spec.chaos.intervalSeconds: %g is not positive", c->interval_seconds);
		CHECK(c->targets != 0, "spec.chaos.targets: empty; expected learners, syncer or sidecars");
		CHECK(c->max_down >= 1, "spec.chaos.maxDown: %d is less than 1", c->max_down);
		CHECK(c->max_down <= M,
		      "spec.chaos.maxDown: %d is more than spec.learners.replicas (%d)",
		      c->max_down, M);
		CHECK(c->start_after_seconds >= 0,
		      "spec.chaos.startAfterSeconds: %g is negative", c->start_after_seconds);
		CHECK(c->stop_after_seconds >= 0,
		      "spec.chaos.stopAfterSeconds: %g is negative", c->stop_after_seconds);
		CHECK(c->recovery_seconds >= 0,
		      "spec.chaos.recoverySeconds: %g is negative", c->recovery_seconds);
		CHECK(c->syncer_shard >= -1 && c->syncer_shard < js->syncer.shards,
		      "spec.chaos.syncerShard: %d is not a shard of spec.syncer.shards (%d)",
		      c->syncer_shard, js->syncer.shards);
	}
	return 0;
}

int jobspec_validate(const struct job_spec *js, struct err *e)
{
	if (check_learners(js, e) || check_model(js, e) ||
	    check_evaluator_data(js, e) || check_optimizer(js, e) ||
	    check_syncer(js, e) || check_chaos(js, e))
		return -1;
	return 0;
}

int job_argv_words(const struct job_argv *a, const char **out)
{
	const char *p = a->buf;

	for (int i = 0; i < a->n && i < JOB_ARGV_MAX; i++) {
		out[i] = p;
		p += strlen(p) + 1;
	}
	return a->n < JOB_ARGV_MAX ? a->n : JOB_ARGV_MAX;
}

void jobspec_learner_command(const struct job_spec *js, int i,
			     const char **cmd, int *ncmd,
			     const char **args, int *nargs)
{
	const struct job_argv *c = &js->learners.command, *a = &js->learners.args;
	int first = 0;

	for (int g = 0; g < js->learners.ngroups; g++) {
		const struct job_group *gr = &js->learners.groups[g];

		if (i >= first && i < first + gr->replicas && gr->command.n) {
			c = &gr->command;
			a = &gr->args;
		}
		first += gr->replicas;
	}
	*ncmd = job_argv_words(c, cmd);
	*nargs = c->n ? job_argv_words(a, args) : 0;
}

int jobspec_seq_len(const struct job_spec *js)
{
	return js->optimizer.seq_len ? js->optimizer.seq_len : js->model.context;
}

double jobspec_slowdown(const struct job_spec *js, int learner)
{
	for (int k = 0; k < js->learners.nslow; k++)
		if (js->learners.slow[k].learner == learner)
			return js->learners.slow[k].factor;
	return 1.0;
}

/* H; unset, 4 × P (a round every 4 learner steps): the quality study's
 * best (docs/syncer.md, Defaults) */
int jobspec_sync_every(const struct job_spec *js)
{
	int p = js->syncer.fragments;

	if (js->syncer.sync_every)
		return js->syncer.sync_every;
	return p > INT_MAX / 4 ? INT_MAX : 4 * p;   /* an external model's P is unbounded */
}
