/*
 * jobspec_parse: a DecoupledTrainingJob file (YAML or JSON) into a job_spec.
 *
 * Both formats become one jansson tree first, then one table-driven walker
 * fills the struct, so YAML and JSON give the same errors:
 *
 *   text --(first non-blank char '{')--> json_loadb ------------+
 *        \--(otherwise)--> libyaml events -> yaml_tree --------+--> walk
 *
 * YAML scalars are typed by the YAML 1.2 core schema: a plain `4` is an
 * integer, `4.0` or `1e6` a number, `true`/`false` booleans, `~`/`null`/
 * empty a null (null means "not set": the default stays). Quoted scalars
 * are strings, and so are .inf, .nan and numbers too large for a double:
 * no field takes a non-finite value. Aliases, several documents and non-scalar keys are refused.
 *
 * The input is bounded (JOBSPEC_MAX_BYTES, depth YAML_MAX_DEPTH). The whole
 * Kubernetes object is accepted: apiVersion and kind must name our CRD,
 * ObjectMeta fields beyond name/namespace and the status are ignored;
 * any other unknown field is an error naming its path.
 */
#include "common/jobspec.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "common/util.h"

#define JOBSPEC_MAX_BYTES (1u << 20)
#define YAML_MAX_DEPTH 32
#define JOBSPEC_API_VERSION "ddiloco.io/v1alpha1"
#define JOBSPEC_KIND "DecoupledTrainingJob"

/* ---- YAML to a jansson tree ---------------------------------------- */

static int match_int(const char *s)
{
	if (*s == '-' || *s == '+')
		s++;
	if (!*s)
		return 0;
	for (; *s; s++)
		if (*s < '0' || *s > '9')
			return 0;
	return 1;
}

static int match_float(const char *s)
{
	int digits = 0;

	if (*s == '-' || *s == '+')
		s++;
	for (; *s >= '0' && *s <= '9'; s++)
		digits++;
	if (*s == '.')
		for (s++; *s >= '0' && *s <= '9'; s++)
			digits++;
	if (!digits)
		return 0;
	if (*s == 'e' || *s == 'E') {
		s++;
		if (*s == '-' || *s == '+')
			s++;
		if (*s < '0' || *s > '9')
			return 0;
		while (*s >= '0' && *s <= '9')
			s++;
	}
	return *s == 0;
}

/* A plain scalar typed by the YAML 1.2 core schema. */
static json_t *plain_scalar(const char *s)
{
	if (!*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") ||
	    !strcmp(s, "NULL"))
		return json_null();
	if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE"))
		return json_true();
	if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE"))
		return json_false();
	if (match_int(s)) {
		char *end;
		long long v;

		errno = 0;
		v = strtoll(s, &end, 10);
		if (!errno)
			return json_integer(v);
		if (isfinite(strtod(s, NULL)))
			return json_real(strtod(s, NULL));   /* too big for int */
	}
	if (match_float(s) && isfinite(strtod(s, NULL)))
		return json_real(strtod(s, NULL));
	return json_string(s);
}

struct frame {
	json_t *node;
	char *key;      /* a mapping's key waiting for its value */
};

/* Attaches v (reference stolen) to the open container or makes it the root. */
static int attach(struct frame *st, int depth, json_t **root, json_t *v,
		  size_t line, struct err *e)
{
	if (!v)
		return err_set(e, "line %zu: out of memory", line);
	if (depth == 0) {
		*root = v;
		return 0;
	}
	struct frame *f = &st[depth - 1];
	if (json_is_array(f->node)) {
		json_array_append_new(f->node, v);
		return 0;
	}
	if (json_object_get(f->node, f->key)) {
		err_set(e, "line %zu: duplicate key '%s'", line, f->key);
		json_decref(v);
		return -1;
	}
	json_object_set_new(f->node, f->key, v);
	free(f->key);
	f->key = NULL;
	return 0;
}

/* Long because it is one switch over libyaml's events with a stack of
 * open nodes; each case is short and they share that stack. */
static json_t *yaml_tree(const char *text, size_t len, struct err *e)
{
	yaml_parser_t p;
	yaml_event_t ev;
	struct frame st[YAML_MAX_DEPTH];
	int depth = 0, docs = 0, done = 0, rc = -1;
	json_t *root = NULL;

	if (!yaml_parser_initialize(&p)) {
		err_set(e, "out of memory");
		return NULL;
	}
	yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
	while (!done) {
		if (!yaml_parser_parse(&p, &ev)) {
			err_set(e, "line %zu: %s", p.problem_mark.line + 1,
				p.problem ? p.problem : "invalid YAML");
			goto out;
		}
		size_t line = ev.start_mark.line + 1;
		struct frame *top = depth ? &st[depth - 1] : NULL;
		int is_key = top && json_is_object(top->node) && !top->key;

		switch (ev.type) {
		case YAML_STREAM_END_EVENT:
			done = 1;
			break;
		case YAML_DOCUMENT_START_EVENT:
			if (++docs > 1) {
				err_set(e, "line %zu: more than one YAML document", line);
				goto fail_ev;
			}
			break;
		case YAML_ALIAS_EVENT:
			err_set(e, "line %zu: YAML aliases are not supported", line);
			goto fail_ev;
		case YAML_SCALAR_EVENT: {
			const char *s = (const char *)ev.data.scalar.value;

			if (is_key) {
				top->key = strdup(s);
				if (!top->key) {
					err_set(e, "out of memory");
					goto fail_ev;
				}
				break;
			}
			json_t *v = ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE
					    ? plain_scalar(s) : json_string(s);
			if (!v) {   /* json_string refuses invalid UTF-8 */
				err_set(e, "line %zu: scalar is not valid UTF-8", line);
				goto fail_ev;
			}
			if (attach(st, depth, &root, v, line, e))
				goto fail_ev;
			break;
		}
		case YAML_MAPPING_START_EVENT:
		case YAML_SEQUENCE_START_EVENT: {
			if (is_key) {
				err_set(e, "line %zu: keys must be plain strings", line);
				goto fail_ev;
			}
			if (depth == YAML_MAX_DEPTH) {
				err_set(e, "line %zu: nested deeper than %d", line,
					YAML_MAX_DEPTH);
				goto fail_ev;
			}
			json_t *v = ev.type == YAML_MAPPING_START_EVENT ? json_object()
									: json_array();
			if (attach(st, depth, &root, json_incref(v), line, e)) {
				json_decref(v);
				goto fail_ev;
			}
			st[depth].node = v;
			st[depth].key = NULL;
			depth++;
			break;
		}
		case YAML_MAPPING_END_EVENT:
		case YAML_SEQUENCE_END_EVENT:
			depth--;
			json_decref(st[depth].node);
			free(st[depth].key);
			break;
		default:
			break;
		}
		yaml_event_delete(&ev);
	}
	rc = 0;
	goto out;
fail_ev:
	yaml_event_delete(&ev);
out:
	while (depth > 0) {
		depth--;
		json_decref(st[depth].node);
		free(st[depth].key);
	}
	yaml_parser_delete(&p);
	if (rc) {
		json_decref(root);
		return NULL;
	}
	if (!root) {
		err_set(e, "empty document");
		return NULL;
	}
	return root;
}

/* ---- the walker ---------------------------------------------------- */

enum ftype {
	F_INT, F_U64, F_DOUBLE, F_BOOL, F_STR, F_QTY,
	F_MERGE, F_FORMAT, F_SCHED, F_MKIND, F_ENC, F_TARGETS, F_ARGV, F_GROUPS,
	F_SYNTH, F_TENSORS,
	F_SLOW, F_SPLIT, F_ORDER,
	F_SECTION, F_IGNORE,
};

struct section;

struct field {
	const char *key;
	enum ftype type;
	size_t off;             /* into struct job_spec */
	size_t size;            /* F_STR, F_QTY: buffer size */
	const struct section *sub;
};

struct section {
	const struct field *fields;
	size_t n;
};

#define FLD(k, t, m) { k, t, offsetof(struct job_spec, m), 0, NULL }
#define STR(k, m) { k, F_STR, offsetof(struct job_spec, m), \
		    sizeof(((struct job_spec *)0)->m), NULL }
#define QTY(k, m) { k, F_QTY, offsetof(struct job_spec, m), \
		    sizeof(((struct job_spec *)0)->m), NULL }
#define SUB(k, s) { k, F_SECTION, 0, 0, &s }
#define IGN(k) { k, F_IGNORE, 0, 0, NULL }
#define SECTION(name, ...) \
	static const struct field name##_fields[] = { __VA_ARGS__ }; \
	static const struct section name = { name##_fields, \
		sizeof(name##_fields) / sizeof(name##_fields[0]) }

SECTION(s_resources,
	QTY("cpu", learners.cpu), QTY("memory", learners.memory),
	QTY("gpu", learners.gpu));

SECTION(s_learners,
	FLD("replicas", F_INT, learners.replicas),
	STR("image", learners.image),
	SUB("resources", s_resources),
	FLD("threads", F_INT, learners.threads),
	FLD("command", F_ARGV, learners.command),
	FLD("args", F_ARGV, learners.args),
	FLD("groups", F_GROUPS, learners),
	FLD("synthetic", F_SYNTH, learners.synthetic),
	FLD("slowdown", F_SLOW, learners));

SECTION(s_model,
	FLD("vocabSize", F_INT, model.vocab_size),
	FLD("context", F_INT, model.context),
	FLD("layers", F_INT, model.layers),
	FLD("heads", F_INT, model.heads),
	FLD("channels", F_INT, model.channels),
	FLD("tied", F_BOOL, model.tied),
	FLD("seed", F_U64, model.seed),
	FLD("kind", F_MKIND, model.kind),
	FLD("tensors", F_TENSORS, model));

SECTION(s_evaluator,
	FLD("command", F_ARGV, evaluator.command),
	FLD("args", F_ARGV, evaluator.args));

SECTION(s_data,
	STR("path", data.path), STR("valPath", data.val_path),
	FLD("format", F_FORMAT, data.format),
	FLD("valFraction", F_DOUBLE, data.val_fraction),
	FLD("tuneFraction", F_DOUBLE, data.tune_fraction),
	STR("shardPattern", data.shard_pattern),
	FLD("split", F_SPLIT, data.split),
	FLD("order", F_ORDER, data.order));

SECTION(s_optimizer,
	FLD("lr", F_DOUBLE, optimizer.lr),
	FLD("beta1", F_DOUBLE, optimizer.beta1),
	FLD("beta2", F_DOUBLE, optimizer.beta2),
	FLD("eps", F_DOUBLE, optimizer.eps),
	FLD("weightDecay", F_DOUBLE, optimizer.weight_decay),
	FLD("warmupSteps", F_INT, optimizer.warmup_steps),
	FLD("cosineSteps", F_INT, optimizer.cosine_steps),
	FLD("minLrRatio", F_DOUBLE, optimizer.min_lr_ratio),
	FLD("gradClip", F_DOUBLE, optimizer.grad_clip),
	FLD("batchSize", F_INT, optimizer.batch_size),
	FLD("seqLen", F_INT, optimizer.seq_len));

SECTION(s_syncer,
	FLD("minQuorum", F_INT, syncer.min_quorum),
	FLD("grace", F_DOUBLE, syncer.grace),
	FLD("fragments", F_INT, syncer.fragments),
	FLD("syncEvery", F_INT, syncer.sync_every),
	FLD("overlap", F_INT, syncer.overlap),
	FLD("shards", F_INT, syncer.shards),
	FLD("alpha", F_DOUBLE, syncer.alpha),
	FLD("outerLr", F_DOUBLE, syncer.outer_lr),
	FLD("outerMomentum", F_DOUBLE, syncer.outer_momentum),
	FLD("nesterov", F_BOOL, syncer.nesterov),
	FLD("merge", F_MERGE, syncer.merge),
	FLD("encoding", F_ENC, syncer.encoding),
	FLD("updateEncoding", F_ENC, syncer.update_encoding),
	FLD("errorFeedback", F_BOOL, syncer.error_feedback),
	FLD("updateDelta", F_BOOL, syncer.update_delta),
	FLD("checkpointEvery", F_INT, syncer.checkpoint_every),
	FLD("evalEvery", F_INT, syncer.eval_every),
	FLD("evalTokens", F_INT, syncer.eval_tokens),
	FLD("normOutlier", F_DOUBLE, syncer.norm_outlier),
	FLD("staleVersions", F_INT, syncer.stale_versions),
	FLD("clipSteps", F_DOUBLE, syncer.clip_steps),
	FLD("maxShare", F_DOUBLE, syncer.max_share),
	FLD("minStepTime", F_DOUBLE, syncer.min_step_time),
	FLD("maxStepTime", F_DOUBLE, syncer.max_step_time),
	FLD("maxClaimCuts", F_INT, syncer.max_claim_cuts),
	FLD("stallSeconds", F_DOUBLE, syncer.stall_seconds),
	FLD("helloTimeout", F_DOUBLE, syncer.hello_timeout),
	FLD("port", F_INT, syncer.port),
	FLD("httpPort", F_INT, syncer.http_port),
	FLD("insecure", F_BOOL, syncer.insecure),
	FLD("maxParameters", F_U64, syncer.max_parameters));

SECTION(s_budget,
	FLD("tokens", F_U64, budget.tokens),
	FLD("outerSteps", F_U64, budget.outer_steps));

SECTION(s_chaos,
	FLD("enabled", F_BOOL, chaos.enabled),
	FLD("schedule", F_SCHED, chaos.schedule),
	FLD("mtbfSeconds", F_DOUBLE, chaos.mtbf_seconds),
	FLD("intervalSeconds", F_DOUBLE, chaos.interval_seconds),
	FLD("targets", F_TARGETS, chaos.targets),
	FLD("maxDown", F_INT, chaos.max_down),
	FLD("startAfterSeconds", F_DOUBLE, chaos.start_after_seconds),
	FLD("stopAfterSeconds", F_DOUBLE, chaos.stop_after_seconds),
	FLD("recoverySeconds", F_DOUBLE, chaos.recovery_seconds),
	FLD("seed", F_U64, chaos.seed),
	FLD("syncerShard", F_INT, chaos.syncer_shard));

SECTION(s_spec,
	FLD("suspend", F_BOOL, suspend),
	FLD("ttlSecondsAfterFinished", F_INT, ttl_seconds_after_finished),
	SUB("learners", s_learners), SUB("model", s_model),
	SUB("evaluator", s_evaluator), SUB("data", s_data), SUB("optimizer", s_optimizer),
	SUB("syncer", s_syncer), SUB("budget", s_budget),
	SUB("chaos", s_chaos));

/* ObjectMeta: what the API server adds is read past, not refused. */
SECTION(s_metadata,
	STR("name", name), STR("namespace", namespace_),
	IGN("uid"), IGN("resourceVersion"), IGN("generation"),
	IGN("creationTimestamp"), IGN("deletionTimestamp"),
	IGN("deletionGracePeriodSeconds"), IGN("labels"), IGN("annotations"),
	IGN("ownerReferences"), IGN("finalizers"), IGN("managedFields"),
	IGN("generateName"), IGN("selfLink"));

/* What a value is, for "expected X, got Y". */
static const char *describe(const json_t *v, char *buf, size_t n)
{
	switch (json_typeof(v)) {
	case JSON_STRING: {
		const char *s = json_string_value(v);
		if (strlen(s) > 40)
			snprintf(buf, n, "'%.40s...'", s);
		else
			snprintf(buf, n, "'%s'", s);
		break;
	}
	case JSON_INTEGER:
		snprintf(buf, n, "%lld", (long long)json_integer_value(v));
		break;
	case JSON_REAL:
		snprintf(buf, n, "%g", json_real_value(v));
		break;
	case JSON_TRUE:
		snprintf(buf, n, "true");
		break;
	case JSON_FALSE:
		snprintf(buf, n, "false");
		break;
	case JSON_NULL:
		snprintf(buf, n, "null");
		break;
	case JSON_OBJECT:
		snprintf(buf, n, "a mapping");
		break;
	case JSON_ARRAY:
		snprintf(buf, n, "a list");
		break;
	}
	return buf;
}

#define EXPECTED(what) \
	err_set(e, "%s: expected " what ", got %s", path, describe(v, got, sizeof(got)))

/* An integer, or a number with an integral value (1e6 tokens). */
static int get_integer(const json_t *v, double *out)
{
	if (json_is_integer(v)) {
		*out = (double)json_integer_value(v);
		return 0;
	}
	if (json_is_real(v)) {
		double d = json_real_value(v);
		if (isfinite(d) && d == floor(d)) {
			*out = d;
			return 0;
		}
	}
	return -1;
}

static int set_targets(const json_t *v, const char *path, int *out,
		       struct err *e)
{
	char got[64];
	int mask = 0;
	size_t i, n = json_is_array(v) ? json_array_size(v) : 1;

	if (!json_is_array(v) && !json_is_string(v))
		return EXPECTED("a list of learners, syncer, sidecars");
	for (i = 0; i < n; i++) {
		const json_t *t = json_is_array(v) ? json_array_get(v, i) : v;
		const char *s = json_string_value(t);

		if (s && !strcmp(s, "learners"))
			mask |= CHAOS_TARGET_LEARNERS;
		else if (s && !strcmp(s, "syncer"))
			mask |= CHAOS_TARGET_SYNCER;
		else if (s && !strcmp(s, "sidecars"))
			mask |= CHAOS_TARGET_SIDECARS;
		else
			return err_set(e, "%s[%zu]: expected learners, syncer or sidecars, got %s",
				       path, i, describe(t, got, sizeof(got)));
	}
	*out = mask;
	return 0;
}

/* A list of strings into a job_argv. */
static int set_argv(const json_t *v, const char *path, struct job_argv *out,
		    struct err *e)
{
	char got[64];
	size_t used = 0, n;

	if (!json_is_array(v))
		return EXPECTED("a list of strings");
	n = json_array_size(v);
	if (n > JOB_ARGV_MAX)
		return err_set(e, "%s: %zu words, at most %d", path, n, JOB_ARGV_MAX);
	for (size_t i = 0; i < n; i++) {
		const json_t *w = json_array_get(v, i);
		const char *s = json_string_value(w);
		size_t len;

		if (!s)
			return err_set(e, "%s[%zu]: expected a string, got %s", path,
				       i, describe(w, got, sizeof(got)));
		len = strlen(s) + 1;
		if (used + len > JOB_ARGV_BYTES)
			return err_set(e, "%s: longer than %d characters in all",
				       path, JOB_ARGV_BYTES - 1);
		memcpy(out->buf + used, s, len);
		used += len;
	}
	out->n = (int)n;
	return 0;
}

/* spec.learners.groups: [{replicas, command, args}] */
static int set_groups(const json_t *v, const char *path,
		      struct job_learners *l, struct err *e)
{
	char got[64], sub[300];
	size_t n;

	if (!json_is_array(v))
		return EXPECTED("a list of {replicas, command, args}");
	n = json_array_size(v);
	if (n > JOB_GROUPS_MAX)
		return err_set(e, "%s: %zu groups, at most %d", path, n,
			       JOB_GROUPS_MAX);
	memset(l->groups, 0, sizeof(l->groups));
	for (size_t i = 0; i < n; i++) {
		const json_t *g = json_array_get(v, i), *r;
		struct job_group *gr = &l->groups[i];
		const char *key;
		json_t *f;
		double d;

		if (!json_is_object(g))
			return err_set(e, "%s[%zu]: expected a mapping, got %s",
				       path, i, describe(g, got, sizeof(got)));
		json_object_foreach((json_t *)g, key, f) {
			snprintf(sub, sizeof(sub), "%s[%zu].%s", path, i, key);
			if (!strcmp(key, "command")) {
				if (set_argv(f, sub, &gr->command, e))
					return -1;
			} else if (!strcmp(key, "args")) {
				if (set_argv(f, sub, &gr->args, e))
					return -1;
			} else if (strcmp(key, "replicas")) {
				return err_set(e, "%s: unknown field (expected one of replicas, command, args)",
					       sub);
			}
		}
		r = json_object_get(g, "replicas");
		if (!r)
			return err_set(e, "%s[%zu].replicas: missing", path, i);
		if (get_integer(r, &d) || d < 1 || d > 4096)
			return err_set(e, "%s[%zu].replicas: expected an integer in [1, 4096], got %s",
				       path, i, describe(r, got, sizeof(got)));
		gr->replicas = (int)d;
	}
	l->ngroups = (int)n;
	return 0;
}

/* spec.model.tensors, spec.learners.synthetic.tensors: a list of
 * positive integers into t, *nt of them. */
static int set_tensors(const json_t *v, const char *path, int *nt,
		       uint64_t *t, struct err *e)
{
	char got[64];
	size_t n;

	if (!json_is_array(v))
		return EXPECTED("a list of tensor sizes");
	n = json_array_size(v);
	if (n < 1 || n > JOB_SYNTH_TENSORS_MAX)
		return err_set(e, "%s: %zu tensors, expected 1 to %d", path, n,
			       JOB_SYNTH_TENSORS_MAX);
	for (size_t i = 0; i < n; i++) {
		const json_t *x = json_array_get(v, i);
		double d;

		/* 2^34 values: what one exchange fragment holds at most */
		if (get_integer(x, &d) || d < 1 || d > 17179869184.0)
			return err_set(e, "%s[%zu]: expected a tensor size in "
				       "[1, 2^34], got %s", path, i,
				       describe(x, got, sizeof(got)));
		t[i] = (uint64_t)d;
	}
	*nt = (int)n;
	return 0;
}

/* spec.learners.slowdown: {"<learner>": factor}, learners by number. */
static int set_slowdown(const json_t *v, const char *path,
			struct job_learners *l, struct err *e)
{
	char got[64], *end;
	const char *key;
	json_t *f;

	if (!json_is_object(v))
		return EXPECTED("a mapping of learner numbers to factors");
	if (json_object_size(v) > JOB_SLOW_MAX)
		return err_set(e, "%s: %zu learners, at most %d", path,
			       json_object_size(v), JOB_SLOW_MAX);
	l->nslow = 0;
	json_object_foreach((json_t *)v, key, f) {
		long n = strtol(key, &end, 10);

		if (!*key || *end || n < 0 || n > 1 << 20)
			return err_set(e, "%s: '%s' is not a learner number",
				       path, key);
		if (!json_is_number(f) || !isfinite(json_number_value(f)))
			return err_set(e, "%s.%s: expected a number, got %s",
				       path, key, describe(f, got, sizeof(got)));
		l->slow[l->nslow].learner = (int)n;
		l->slow[l->nslow].factor = json_number_value(f);
		l->nslow++;
	}
	return 0;
}

/* spec.learners.synthetic: {stepTime, scale, seed, tensors}; present
 * (even empty) means enabled. */
static int set_synthetic(const json_t *v, const char *path,
			 struct job_synthetic *y, struct err *e)
{
	char got[64], sub[300];
	const char *key;
	json_t *f;

	if (!json_is_object(v))
		return EXPECTED("a mapping of stepTime, scale, seed, tensors");
	json_object_foreach((json_t *)v, key, f) {
		double d;

		snprintf(sub, sizeof(sub), "%s.%s", path, key);
		if (json_is_null(f))
			continue;
		if (!strcmp(key, "tensors")) {
			if (set_tensors(f, sub, &y->ntensors, y->tensors, e))
				return -1;
		} else if (!strcmp(key, "seed")) {
			if (get_integer(f, &d) || d < 0 ||
			    d >= 18446744073709551616.0)
				return err_set(e, "%s: expected a non-negative "
					       "integer, got %s", sub,
					       describe(f, got, sizeof(got)));
			y->seed = json_is_integer(f) ?
				(uint64_t)json_integer_value(f) : (uint64_t)d;
		} else if (!strcmp(key, "stepTime") || !strcmp(key, "scale")) {
			if (!json_is_number(f) || !isfinite(json_number_value(f)))
				return err_set(e, "%s: expected a number, got %s",
					       sub, describe(f, got, sizeof(got)));
			if (!strcmp(key, "stepTime"))
				y->step_time = json_number_value(f);
			else
				y->scale = json_number_value(f);
		} else {
			return err_set(e, "%s: unknown field (expected one of "
				       "stepTime, scale, seed, tensors)", sub);
		}
	}
	y->enabled = 1;
	return 0;
}

/* Long because it is one switch over the field kinds of the table, each
 * case a conversion with its own range check. */
static int set_field(const struct field *f, const json_t *v, const char *path,
		     struct job_spec *js, struct err *e)
{
	char *p = (char *)js + f->off;
	char got[64];
	double d;

	switch (f->type) {
	case F_INT:
		if (get_integer(v, &d))
			return EXPECTED("an integer");
		if (d < INT_MIN || d > INT_MAX)
			return err_set(e, "%s: %s is out of range", path,
				       describe(v, got, sizeof(got)));
		*(int *)p = (int)d;
		return 0;
	case F_U64:
		if (get_integer(v, &d) || d < 0)
			return EXPECTED("a non-negative integer");
		if (d >= 18446744073709551616.0)
			return err_set(e, "%s: %s is out of range", path,
				       describe(v, got, sizeof(got)));
		*(uint64_t *)p = json_is_integer(v) ? (uint64_t)json_integer_value(v)
						    : (uint64_t)d;
		return 0;
	case F_DOUBLE:
		if (!json_is_number(v))
			return EXPECTED("a number");
		d = json_number_value(v);
		if (!isfinite(d))
			return EXPECTED("a finite number");
		*(double *)p = d;
		return 0;
	case F_BOOL:
		if (!json_is_boolean(v))
			return EXPECTED("true or false");
		*(int *)p = json_is_true(v);
		return 0;
	case F_STR:
	case F_QTY: {
		char num[64];
		const char *s = json_string_value(v);

		if (!s && f->type == F_QTY && json_is_number(v))
			s = describe(v, num, sizeof(num));
		if (!s)
			return f->type == F_QTY ? EXPECTED("a quantity such as 2 or 500m")
						: EXPECTED("a string");
		if (strlen(s) >= f->size)
			return err_set(e, "%s: longer than %zu characters", path,
				       f->size - 1);
		snprintf(p, f->size, "%s", s);
		return 0;
	}
	case F_MERGE: {
		const char *s = json_string_value(v);
		if (s && !strcmp(s, "rda"))
			*(enum merge_rule *)p = MERGE_RDA;
		else if (s && !strcmp(s, "mean"))
			*(enum merge_rule *)p = MERGE_MEAN;
		else
			return EXPECTED("rda or mean");
		return 0;
	}
	case F_FORMAT: {
		const char *s = json_string_value(v);
		if (s && !strcmp(s, "auto"))
			*(enum data_format *)p = DATA_AUTO;
		else if (s && !strcmp(s, "text"))
			*(enum data_format *)p = DATA_TEXT;
		else if (s && !strcmp(s, "tokens"))
			*(enum data_format *)p = DATA_TOKENS;
		else
			return EXPECTED("auto, text or tokens");
		return 0;
	}
	case F_SPLIT: {
		const char *s = json_string_value(v);
		if (s && !strcmp(s, "tail"))
			*(enum data_split *)p = SPLIT_TAIL;
		else if (s && !strcmp(s, "files"))
			*(enum data_split *)p = SPLIT_FILES;
		else
			return EXPECTED("tail or files");
		return 0;
	}
	case F_ORDER: {
		const char *s = json_string_value(v);
		if (s && !strcmp(s, "stream"))
			*(enum data_order *)p = ORDER_STREAM;
		else if (s && !strcmp(s, "spread"))
			*(enum data_order *)p = ORDER_SPREAD;
		else
			return EXPECTED("stream or spread");
		return 0;
	}
	case F_MKIND: {
		const char *s = json_string_value(v);
		if (s && !strcmp(s, "gpt"))
			*(enum model_kind *)p = MODEL_GPT;
		else if (s && !strcmp(s, "external"))
			*(enum model_kind *)p = MODEL_EXTERNAL;
		else
			return EXPECTED("gpt or external");
		return 0;
	}
	case F_SCHED: {
		const char *s = json_string_value(v);
		if (s && !strcmp(s, "poisson"))
			*(enum chaos_schedule *)p = CHAOS_POISSON;
		else if (s && !strcmp(s, "interval"))
			*(enum chaos_schedule *)p = CHAOS_INTERVAL;
		else
			return EXPECTED("poisson or interval");
		return 0;
	}
	case F_ENC: {
		const char *s = json_string_value(v);
		enum payload_enc enc;
		if (!s || enc_parse(s, &enc))
			return EXPECTED("f32, bf16, int8 or int4");
		*(enum payload_enc *)p = enc;
		return 0;
	}
	case F_TARGETS:
		return set_targets(v, path, (int *)p, e);
	case F_ARGV:
		return set_argv(v, path, (struct job_argv *)p, e);
	case F_GROUPS:
		return set_groups(v, path, (struct job_learners *)p, e);
	case F_SYNTH:
		return set_synthetic(v, path, (struct job_synthetic *)p, e);
	case F_TENSORS:
		return set_tensors(v, path, &((struct job_model *)p)->ntensors,
				   ((struct job_model *)p)->tensors, e);
	case F_SLOW:
		return set_slowdown(v, path, (struct job_learners *)p, e);
	case F_SECTION:
	case F_IGNORE:
		break;
	}
	return 0;
}

static int walk(const struct section *sec, const json_t *obj, const char *path,
		struct job_spec *js, struct err *e)
{
	const char *key;
	json_t *v;
	char got[64];

	if (!json_is_object(obj))
		return err_set(e, "%s: expected a mapping, got %s", path,
			       describe(obj, got, sizeof(got)));
	json_object_foreach((json_t *)obj, key, v) {
		char sub[256], names[512];
		const struct field *f = NULL;
		size_t i, n = 0;

		snprintf(sub, sizeof(sub), "%s.%s", path, key);
		for (i = 0; i < sec->n && !f; i++)
			if (!strcmp(sec->fields[i].key, key))
				f = &sec->fields[i];
		if (!f) {
			names[0] = 0;
			for (i = 0; i < sec->n; i++)
				if (sec->fields[i].type != F_IGNORE)
					n += (size_t)snprintf(names + n, sizeof(names) - n,
						"%s%s", n ? ", " : "", sec->fields[i].key);
			return err_set(e, "%s: unknown field (expected one of %s)",
				       sub, names);
		}
		if (f->type == F_IGNORE || json_is_null(v))
			continue;
		if (f->type == F_SECTION) {
			if (walk(f->sub, v, sub, js, e))
				return -1;
		} else if (set_field(f, v, sub, js, e)) {
			return -1;
		}
	}
	return 0;
}

static int fill(const json_t *root, struct job_spec *js, struct err *e)
{
	const char *key, *s;
	json_t *v;
	char got[64];

	if (!json_is_object(root))
		return err_set(e, "expected a DecoupledTrainingJob mapping, got %s",
			       describe(root, got, sizeof(got)));
	json_object_foreach((json_t *)root, key, v) {
		if (strcmp(key, "apiVersion") && strcmp(key, "kind") &&
		    strcmp(key, "metadata") && strcmp(key, "spec") &&
		    strcmp(key, "status"))
			return err_set(e, "%s: unknown field (expected apiVersion, kind, metadata, spec)",
				       key);
	}
	v = json_object_get(root, "apiVersion");
	s = json_string_value(v);
	if (!v)
		return err_set(e, "apiVersion: missing; expected '%s'", JOBSPEC_API_VERSION);
	if (!s || strcmp(s, JOBSPEC_API_VERSION))
		return err_set(e, "apiVersion: expected '%s', got %s",
			       JOBSPEC_API_VERSION, describe(v, got, sizeof(got)));
	v = json_object_get(root, "kind");
	s = json_string_value(v);
	if (!v)
		return err_set(e, "kind: missing; expected '%s'", JOBSPEC_KIND);
	if (!s || strcmp(s, JOBSPEC_KIND))
		return err_set(e, "kind: expected '%s', got %s", JOBSPEC_KIND,
			       describe(v, got, sizeof(got)));
	v = json_object_get(root, "metadata");
	if (v && !json_is_null(v) && walk(&s_metadata, v, "metadata", js, e))
		return -1;
	v = json_object_get(root, "spec");
	if (!v || json_is_null(v))
		return err_set(e, "spec: missing");
	if (walk(&s_spec, v, "spec", js, e))
		return -1;
	if (!js->data.path[0])
		return err_set(e, "spec.data.path: missing; expected a text file, a folder of text files or a token shard");
	return jobspec_validate(js, e);
}

int jobspec_parse(const char *text, size_t len, const char *what,
		  struct job_spec *out, struct err *e)
{
	struct job_spec js;
	json_t *root;
	size_t i = 0;

	if (len > JOBSPEC_MAX_BYTES)
		return err_set(e, "%s: %zu bytes, more than the limit %u", what, len,
			       JOBSPEC_MAX_BYTES);
	if (memchr(text, 0, len))
		return err_set(e, "%s: contains a NUL byte", what);
	while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' ||
			   text[i] == '\r'))
		i++;
	if (i < len && text[i] == '{') {
		json_error_t je;

		root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
		if (!root)
			return err_set(e, "%s: line %d: %s", what, je.line, je.text);
	} else {
		root = yaml_tree(text, len, e);
		if (!root)
			return err_wrap(e, "%s", what);
	}
	jobspec_defaults(&js);
	if (fill(root, &js, e)) {
		json_decref(root);
		return err_wrap(e, "%s", what);
	}
	json_decref(root);
	*out = js;
	return 0;
}

int jobspec_load(const char *path, struct job_spec *out, struct err *e)
{
	void *text;
	size_t len;
	int rc;

	if (file_read_all(path, JOBSPEC_MAX_BYTES, &text, &len, e))
		return err_wrap(e, "job file");
	rc = jobspec_parse(text, len, path, out, e);
	free(text);
	return rc;
}
