/* Job spec: good files read field by field, bad input refused by name. */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/jobspec.h"
#include "tests/unit/testlib.h"

#define HEAD "apiVersion: ddiloco.io/v1alpha1\nkind: DecoupledTrainingJob\n" \
	     "metadata: {name: t}\n"
#define DATA "  data: {path: /tmp/d.txt}\n"

static int parse(const char *text, struct job_spec *js, struct err *e)
{
	return jobspec_parse(text, strlen(text), "job", js, e);
}

/* The message of a refused text, which must leave *js untouched. */
static void refused(const char *text, const char *msg)
{
	struct job_spec js;
	struct err e = { "" };

	memset(&js, 0x5a, sizeof(js));
	assert_int_equal(parse(text, &js, &e), -1);
	assert_string_equal(e.msg, msg);
	assert_int_equal(((unsigned char *)&js)[0], 0x5a);
	assert_int_equal(js.learners.replicas, 0x5a5a5a5a);
}

static void full_yaml_file(void **state)
{
	struct job_spec js;
	struct err e = { "" };

	(void)state;
	assert_int_equal(jobspec_load("tests/data/jobspec/full.yaml", &js, &e), 0);
	assert_string_equal(js.name, "full-job");
	assert_string_equal(js.namespace_, "research");
	assert_int_equal(js.suspend, 0);
	assert_int_equal(js.ttl_seconds_after_finished, 600);
	assert_int_equal(js.learners.replicas, 8);
	assert_string_equal(js.learners.image, "ddiloco:0.1.0");
	assert_int_equal(js.learners.threads, 2);
	assert_string_equal(js.learners.cpu, "2");
	assert_string_equal(js.learners.memory, "4Gi");
	assert_string_equal(js.learners.gpu, "0");
	assert_int_equal(js.model.vocab_size, 512);
	assert_int_equal(js.model.context, 128);
	assert_int_equal(js.model.layers, 4);
	assert_int_equal(js.model.heads, 8);
	assert_int_equal(js.model.channels, 256);
	assert_int_equal(js.model.tied, 0);
	assert_int_equal(js.model.seed, 7);
	assert_string_equal(js.data.path, "/data/train.txt");
	assert_string_equal(js.data.val_path, "/data/val.txt");
	assert_int_equal(js.data.format, DATA_TEXT);
	assert_exactly(js.data.val_fraction, 0.05);
	assert_string_equal(js.data.shard_pattern, "/data/shard-{learner}.txt");
	assert_exactly(js.optimizer.lr, 3e-4);
	assert_exactly(js.optimizer.beta1, 0.85);
	assert_exactly(js.optimizer.beta2, 0.99);
	assert_exactly(js.optimizer.eps, 1e-6);
	assert_exactly(js.optimizer.weight_decay, 0.0);
	assert_int_equal(js.optimizer.warmup_steps, 50);
	assert_int_equal(js.optimizer.cosine_steps, 5000);
	assert_exactly(js.optimizer.min_lr_ratio, 0.2);
	assert_exactly(js.optimizer.grad_clip, 0.5);
	assert_int_equal(js.optimizer.batch_size, 16);
	assert_int_equal(js.optimizer.seq_len, 64);
	assert_int_equal(js.syncer.min_quorum, 6);
	assert_exactly(js.syncer.grace, 0.25);
	assert_int_equal(js.syncer.fragments, 6);
	assert_int_equal(js.syncer.sync_every, 12);
	assert_int_equal(jobspec_sync_every(&js), 12);
	assert_int_equal(js.syncer.overlap, 3);
	assert_exactly(js.syncer.alpha, 0.1);
	assert_exactly(js.syncer.outer_lr, 0.5);
	assert_exactly(js.syncer.outer_momentum, 0.8);
	assert_int_equal(js.syncer.nesterov, 0);
	assert_int_equal(js.syncer.merge, MERGE_MEAN);
	assert_int_equal(js.syncer.encoding, ENC_INT8);
	assert_int_equal(js.syncer.update_encoding, ENC_INT4);
	assert_int_equal(js.syncer.error_feedback, 0);
	assert_int_equal(js.syncer.insecure, 1);
	assert_int_equal(js.syncer.checkpoint_every, 10);
	assert_int_equal(js.syncer.eval_every, 5);
	assert_int_equal(js.syncer.eval_tokens, 4096);
	assert_exactly(js.syncer.norm_outlier, 20);
	assert_int_equal(js.syncer.stale_versions, 6);
	assert_exactly(js.syncer.clip_steps, 2.5);
	assert_exactly(js.syncer.max_share, 0.4);
	assert_exactly(js.syncer.min_step_time, 0.002);
	assert_exactly(js.syncer.max_step_time, 30);
	assert_int_equal(js.syncer.max_claim_cuts, 3);
	assert_exactly(js.syncer.stall_seconds, 90);
	assert_exactly(js.syncer.hello_timeout, 2.5);
	assert_int_equal(js.syncer.max_parameters, 300000000);
	assert_int_equal(js.syncer.port, 9000);
	assert_int_equal(js.syncer.http_port, 9001);
	assert_int_equal(js.budget.tokens, 10000000);
	assert_int_equal(js.budget.outer_steps, 1000);
	assert_int_equal(js.chaos.enabled, 1);
	assert_int_equal(js.chaos.schedule, CHAOS_INTERVAL);
	assert_exactly(js.chaos.mtbf_seconds, 30);
	assert_exactly(js.chaos.interval_seconds, 15.5);
	assert_int_equal(js.chaos.targets, CHAOS_TARGET_LEARNERS |
			 CHAOS_TARGET_SYNCER | CHAOS_TARGET_SIDECARS);
	assert_int_equal(js.chaos.max_down, 2);
	assert_exactly(js.chaos.start_after_seconds, 5);
	assert_exactly(js.chaos.stop_after_seconds, 100);
	assert_exactly(js.chaos.recovery_seconds, 1.5);
	assert_int_equal(js.chaos.seed, 42);
}

static void apiserver_json_object(void **state)
{
	struct job_spec js;
	struct err e = { "" };

	(void)state;
	assert_int_equal(jobspec_load("tests/data/jobspec/from-apiserver.json", &js, &e), 0);
	assert_string_equal(js.name, "web-job");
	assert_string_equal(js.namespace_, "team-a");
	assert_int_equal(js.learners.replicas, 6);
	assert_string_equal(js.learners.cpu, "500m");
	assert_string_equal(js.learners.memory, "1Gi");
	assert_int_equal(js.syncer.min_quorum, 4);
	assert_exactly(js.syncer.grace, 0);
	assert_int_equal(js.budget.outer_steps, 200);
	assert_int_equal(js.budget.tokens, 0);
	assert_int_equal(js.chaos.targets, CHAOS_TARGET_SYNCER);
	/* untouched fields keep their defaults */
	assert_int_equal(js.model.layers, 2);
	assert_exactly(js.syncer.outer_lr, 0.7);
}

static void minimal_gets_defaults(void **state)
{
	struct job_spec js, def;
	struct err e = { "" };

	(void)state;
	assert_int_equal(parse(HEAD "spec:\n" DATA "  model: {layers: ~}\n", &js, &e), 0);
	jobspec_defaults(&def);
	snprintf(def.name, sizeof(def.name), "t");
	snprintf(def.data.path, sizeof(def.data.path), "/tmp/d.txt");
	assert_memory_equal(&js, &def, sizeof(js));
	assert_int_equal(js.syncer.error_feedback, 1);
	assert_int_equal(js.syncer.insecure, 0);
	assert_int_equal(js.syncer.max_parameters, 4000000000ULL);
	assert_int_equal(jobspec_seq_len(&js), 64);
	/* the quality study's choices (docs/syncer.md, Defaults) */
	assert_int_equal(jobspec_sync_every(&js), 16);
	assert_int_equal(js.syncer.encoding, ENC_INT8);
	assert_int_equal(js.syncer.update_encoding, ENC_BF16);
	assert_int_equal(js.syncer.update_delta, 0);
	assert_int_equal(js.model.kind, MODEL_GPT);
	assert_int_equal(parse(HEAD "spec:\n" DATA "  model: {kind: external}\n",
			       &js, &e), 0);
	assert_int_equal(js.model.kind, MODEL_EXTERNAL);
	/* an external model's P has no bound: 4P saturates, not overflows */
	js.syncer.fragments = 5;
	assert_int_equal(jobspec_sync_every(&js), 20);
	js.syncer.fragments = INT_MAX;
	assert_int_equal(jobspec_sync_every(&js), INT_MAX);
	assert_int_equal(parse(HEAD "spec:\n" DATA "  model: {kind: gpt}\n",
			       &js, &e), 0);
	assert_int_equal(js.model.kind, MODEL_GPT);
}

static void examples_load(void **state)
{
	struct job_spec js;
	struct err e = { "" };

	(void)state;
	assert_int_equal(jobspec_load("examples/quickstart.yaml", &js, &e), 0);
	assert_string_equal(js.name, "quickstart");
	assert_int_equal(js.learners.replicas, 4);
	assert_int_equal(js.syncer.min_quorum, 3);
	assert_int_equal(js.chaos.enabled, 1);
	assert_exactly(js.chaos.mtbf_seconds, 20);
	assert_int_equal(jobspec_load("examples/quickstart-nochaos.yaml", &js, &e), 0);
	assert_string_equal(js.name, "quickstart-nochaos");
	assert_int_equal(js.learners.replicas, 4);
	assert_int_equal(js.chaos.enabled, 0);
	assert_int_equal(jobspec_load("examples/study.yaml", &js, &e), 0);
	assert_int_equal(js.data.split, SPLIT_FILES);
	assert_int_equal(js.learners.replicas, 8);
	assert_exactly(jobspec_slowdown(&js, 7), 2.0);
	assert_int_equal(jobspec_load("examples/big.yaml", &js, &e), 0);
	assert_int_equal(js.learners.synthetic.enabled, 1);
	assert_int_equal(js.syncer.fragments, 32);
	assert_int_equal(js.syncer.encoding, ENC_INT8);
	assert_int_equal(js.syncer.update_encoding, ENC_BF16);
}

static void file_errors(void **state)
{
	struct job_spec js;
	struct err e = { "" };
	char path[] = "/tmp/test_jobspec_XXXXXX";
	int fd;

	(void)state;
	assert_int_equal(jobspec_load("tests/data/jobspec/bad-quorum.yaml", &js, &e), -1);
	assert_string_equal(e.msg, "tests/data/jobspec/bad-quorum.yaml: "
			    "spec.syncer.minQuorum: 5 is more than spec.learners.replicas (4)");
	assert_int_equal(jobspec_load("/nonexistent/job.yaml", &js, &e), -1);
	assert_string_equal(e.msg, "job file: cannot open '/nonexistent/job.yaml': "
			    "No such file or directory");

	/* a file past the size limit is refused before it is read */
	fd = mkstemp(path);
	assert_at_least(fd, 0);
	assert_int_equal(ftruncate(fd, (1 << 20) + 1), 0);
	close(fd);
	assert_int_equal(jobspec_load(path, &js, &e), -1);
	assert_non_null(strstr(e.msg, "is 1048577 bytes, more than the limit 1048576"));
	unlink(path);
}

static void type_errors(void **state)
{
	(void)state;
	refused(HEAD "spec:\n" DATA "  model: {layers: two}\n",
		"job: spec.model.layers: expected an integer, got 'two'");
	refused(HEAD "spec:\n" DATA "  model: {layers: 2.5}\n",
		"job: spec.model.layers: expected an integer, got 2.5");
	refused(HEAD "spec:\n" DATA "  model: {layers: \"2\"}\n",
		"job: spec.model.layers: expected an integer, got '2'");
	refused(HEAD "spec:\n" DATA "  model: {layers: 99999999999}\n",
		"job: spec.model.layers: 99999999999 is out of range");
	refused(HEAD "spec:\n" DATA "  model: {tied: yes}\n",
		"job: spec.model.tied: expected true or false, got 'yes'");
	refused(HEAD "spec:\n" DATA "  optimizer: {lr: fast}\n",
		"job: spec.optimizer.lr: expected a number, got 'fast'");
	refused(HEAD "spec:\n" DATA "  optimizer: {lr: .nan}\n",
		"job: spec.optimizer.lr: expected a number, got '.nan'");
	refused(HEAD "spec:\n" DATA "  optimizer: {lr: 1e999}\n",
		"job: spec.optimizer.lr: expected a number, got '1e999'");
	refused(HEAD "spec:\n" DATA "  budget: {tokens: -5}\n",
		"job: spec.budget.tokens: expected a non-negative integer, got -5");
	refused(HEAD "spec:\n" DATA "  syncer: {merge: median}\n",
		"job: spec.syncer.merge: expected rda or mean, got 'median'");
	refused(HEAD "spec:\n" DATA "  syncer: {encoding: fp8}\n",
		"job: spec.syncer.encoding: expected f32, bf16, int8 or int4, got 'fp8'");
	refused(HEAD "spec:\n  data: {path: /x, format: csv}\n",
		"job: spec.data.format: expected auto, text or tokens, got 'csv'");
	refused(HEAD "spec:\n" DATA "  model: {kind: mlp}\n",
		"job: spec.model.kind: expected gpt or external, got 'mlp'");
	refused(HEAD "spec:\n" DATA "  chaos: {schedule: weibull}\n",
		"job: spec.chaos.schedule: expected poisson or interval, got 'weibull'");
	refused(HEAD "spec:\n" DATA "  chaos: {targets: [learners, pods]}\n",
		"job: spec.chaos.targets[1]: expected learners, syncer or sidecars, got 'pods'");
	refused(HEAD "spec:\n" DATA "  chaos: {targets: 3}\n",
		"job: spec.chaos.targets: expected a list of learners, syncer, sidecars, got 3");
	refused(HEAD "spec:\n" DATA "  syncer: {maxShare: 0}\n",
		"job: spec.syncer.maxShare: 0 is not in (0, 1]");
	refused(HEAD "spec:\n" DATA "  syncer: {maxShare: 1.5}\n",
		"job: spec.syncer.maxShare: 1.5 is not in (0, 1]");
	refused(HEAD "spec:\n" DATA "  syncer: {maxClaimCuts: -1}\n",
		"job: spec.syncer.maxClaimCuts: -1 is not in [0, 1000000]");
	refused(HEAD "spec:\n" DATA "  syncer: {minStepTime: 0}\n",
		"job: spec.syncer.minStepTime: 0 is not in (0, 1]");
	refused(HEAD "spec:\n" DATA "  syncer: {minStepTime: 0.5, maxStepTime: 0.5}\n",
		"job: spec.syncer.maxStepTime: 0.5 is not in (minStepTime, 86400]");
	refused(HEAD "spec:\n" DATA "  syncer: {stallSeconds: 0.5}\n",
		"job: spec.syncer.stallSeconds: 0.5 is not in [1, 86400]");
	refused(HEAD "spec:\n" DATA "  syncer: {maxParameters: 0}\n",
		"job: spec.syncer.maxParameters: 0 is less than 1");
	refused(HEAD "spec:\n" DATA "  syncer: {helloTimeout: 0}\n",
		"job: spec.syncer.helloTimeout: 0 is not in [0.1, 3600]");
	refused(HEAD "spec:\n" DATA "  learners: 4\n",
		"job: spec.learners: expected a mapping, got 4");
	refused(HEAD "spec:\n" DATA "  learners: {image: [a]}\n",
		"job: spec.learners.image: expected a string, got a list");
	refused(HEAD "spec:\n" DATA "  learners: {resources: {cpu: {n: 1}}}\n",
		"job: spec.learners.resources.cpu: expected a quantity such as 2 or 500m, got a mapping");
}

static void structure_errors(void **state)
{
	char big[700];

	(void)state;
	refused(HEAD "spec:\n" DATA "  model: {layer: 2}\n",
		"job: spec.model.layer: unknown field (expected one of vocabSize, "
		"context, layers, heads, channels, tied, seed, kind, tensors)");
	refused(HEAD "spec:\n" DATA "  replicas: 2\n",
		"job: spec.replicas: unknown field (expected one of suspend, "
		"ttlSecondsAfterFinished, learners, model, evaluator, data, optimizer, "
		"syncer, budget, chaos)");
	refused(HEAD "spec:\n" DATA "extra: 1\n",
		"job: extra: unknown field (expected apiVersion, kind, metadata, spec)");
	refused(HEAD "spec:\n" DATA "metadata2: {}\n",
		"job: metadata2: unknown field (expected apiVersion, kind, metadata, spec)");
	refused("apiVersion: ddiloco.io/v1\nkind: DecoupledTrainingJob\nspec:\n" DATA,
		"job: apiVersion: expected 'ddiloco.io/v1alpha1', got 'ddiloco.io/v1'");
	refused("apiVersion: ddiloco.io/v1alpha1\nkind: Job\nspec:\n" DATA,
		"job: kind: expected 'DecoupledTrainingJob', got 'Job'");
	refused("kind: DecoupledTrainingJob\nspec:\n" DATA,
		"job: apiVersion: missing; expected 'ddiloco.io/v1alpha1'");
	refused("apiVersion: ddiloco.io/v1alpha1\nspec:\n" DATA,
		"job: kind: missing; expected 'DecoupledTrainingJob'");
	refused(HEAD, "job: spec: missing");
	refused(HEAD "spec:\n  model: {layers: 2}\n",
		"job: spec.data.path: missing; expected a text file, a folder of "
		"text files or a token shard");
	refused("- a\n- b\n", "job: expected a DecoupledTrainingJob mapping, got a list");
	refused("", "job: empty document");
	memset(big, 'a', sizeof(big));
	memcpy(big, HEAD "spec:\n  data: {path: ", strlen(HEAD "spec:\n  data: {path: "));
	memcpy(big + sizeof(big) - 3, "}\n", 3);
	refused(big, "job: spec.data.path: longer than 511 characters");
}

static void yaml_errors(void **state)
{
	(void)state;
	refused(HEAD "spec:\n" DATA "  model: {layers: 2, layers: 3}\n",
		"job: line 6: duplicate key 'layers'");
	refused(HEAD "spec:\n" DATA "  model: &m {layers: 2}\n  syncer: *m\n",
		"job: line 7: YAML aliases are not supported");
	refused(HEAD "spec:\n" DATA "---\nfoo: 1\n",
		"job: line 6: more than one YAML document");
	refused(HEAD "spec:\n  model: {layers: 2\n",
		"job: line 6: did not find expected ',' or '}'");
	refused(HEAD "spec:\n" DATA "  ? [a, b]\n  : 1\n",
		"job: line 6: keys must be plain strings");
	refused(HEAD "spec:\n" DATA "  model: [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]\n",
		"job: line 6: nested deeper than 32");
}

static void json_errors(void **state)
{
	struct job_spec js;
	struct err e = { "" };
	const char *ok = "{\"apiVersion\":\"ddiloco.io/v1alpha1\",\"kind\":\"DecoupledTrainingJob\","
			 "\"spec\":{\"data\":{\"path\":\"/d\"},\"budget\":{\"tokens\":1e6}}}";
	char *big;

	(void)state;
	assert_int_equal(parse(ok, &js, &e), 0);
	assert_int_equal(js.budget.tokens, 1000000);
	assert_string_equal(js.name, "ddjob");
	refused("{\"apiVersion\":\"ddiloco.io/v1alpha1\",\"kind\":\"DecoupledTrainingJob\","
		"\"spec\":{\"data\":{\"path\":\"/d\"},\"model\":{\"layers\":\"two\"}}}",
		"job: spec.model.layers: expected an integer, got 'two'");
	refused("{\"apiVersion\":\"ddiloco.io/v1alpha1\",\"kind\":\"DecoupledTrainingJob\","
		"\"spec\":{\"data\":{\"path\":\"/d\"},\"chaos\":{\"enabled\":1}}}",
		"job: spec.chaos.enabled: expected true or false, got 1");
	refused("{\"apiVersion\": \"ddiloco.io/v1alpha1\",\n \"kind\": ",
		"job: line 2: unexpected token near end of file");
	refused("{\"kind\": 1, \"kind\": 2}", "job: line 1: duplicate object key near '\"kind\"'");

	big = malloc((1 << 20) + 2);
	assert_non_null(big);
	memset(big, ' ', (1 << 20) + 1);
	big[(1 << 20) + 1] = 0;
	assert_int_equal(jobspec_parse(big, (1 << 20) + 1, "big", &js, &e), -1);
	assert_string_equal(e.msg, "big: 1048577 bytes, more than the limit 1048576");
	free(big);
}

static void validation_errors(void **state)
{
	(void)state;
	refused(HEAD "spec:\n" DATA "  learners: {replicas: 4}\n  syncer: {minQuorum: 5}\n",
		"job: spec.syncer.minQuorum: 5 is more than spec.learners.replicas (4)");
	refused("apiVersion: ddiloco.io/v1alpha1\nkind: DecoupledTrainingJob\n"
		"metadata: {name: My_Job}\nspec:\n" DATA,
		"job: metadata.name: 'My_Job' is not a DNS-1035 label of at most 45 characters "
		"(a lower-case letter, then lower-case letters, digits or '-', ending in a letter or digit)");
	refused(HEAD "spec:\n" DATA "  model: {channels: 100, heads: 3}\n",
		"job: spec.model.channels: 100 is not a multiple of spec.model.heads (3)");
	refused(HEAD "spec:\n" DATA "  chaos: {enabled: true, maxDown: 9}\n",
		"job: spec.chaos.maxDown: 9 is more than spec.learners.replicas (4)");
	refused(HEAD "spec:\n" DATA "  chaos: {enabled: true, targets: []}\n",
		"job: spec.chaos.targets: empty; expected learners, syncer or sidecars");
	refused(HEAD "spec:\n" DATA "  syncer: {shards: 2, fragments: 4}\n"
		"  chaos: {enabled: true, targets: [syncer], syncerShard: 2}\n",
		"job: spec.chaos.syncerShard: 2 is not a shard of spec.syncer.shards (2)");
	{
		struct job_spec js;
		struct err e;
		const char *ok = HEAD "spec:\n" DATA "  syncer: {shards: 2, fragments: 4}\n"
				 "  chaos: {enabled: true, targets: [syncer], syncerShard: 1}\n";

		assert_int_equal(jobspec_parse(ok, strlen(ok), "job", &js, &e), 0);
		assert_int_equal(js.chaos.syncer_shard, 1);
		jobspec_defaults(&js);
		assert_int_equal(js.chaos.syncer_shard, -1);   /* in turn */
	}
}

/* spec.evaluator: an external model's own evaluator (docs/syncer.md,
 * Evaluators). */
static void evaluator_command(void **state)
{
	struct job_spec js;
	struct err e = { "" };
	const char *w[JOB_ARGV_MAX];

	(void)state;
	assert_int_equal(parse(HEAD "spec:\n" DATA, &js, &e), 0);
	assert_int_equal(js.evaluator.command.n, 0);
	assert_int_equal(parse(HEAD "spec:\n" DATA "  model: {kind: external}\n"
			       "  evaluator:\n    command: [python3, ev.py]\n"
			       "    args: [--evaluate]\n", &js, &e), 0);
	assert_int_equal(job_argv_words(&js.evaluator.command, w), 2);
	assert_string_equal(w[1], "ev.py");
	assert_int_equal(job_argv_words(&js.evaluator.args, w), 1);
	assert_string_equal(w[0], "--evaluate");
	refused(HEAD "spec:\n" DATA "  evaluator: {command: [x]}\n",
		"job: spec.evaluator: only for spec.model.kind external (the "
		"syncer evaluates the reference GPT itself)");
	refused(HEAD "spec:\n" DATA "  model: {kind: external}\n"
		"  evaluator: {args: [a]}\n",
		"job: spec.evaluator.args: given without a command");
	refused(HEAD "spec:\n" DATA "  model: {kind: external}\n"
		"  evaluator: {command: [x], image: y}\n",
		"job: spec.evaluator.image: unknown field (expected one of command, args)");
}

/* spec.learners.slowdown (docs/run.md, Slow learners): a factor per
 * learner number, 1 for the rest; bad numbers and factors refused. */
static void slow_learners(void **state)
{
	struct job_spec js;
	struct err e = { "" };

	(void)state;
	assert_int_equal(parse(HEAD "spec:\n" DATA, &js, &e), 0);
	assert_exactly(jobspec_slowdown(&js, 0), 1.0);
	assert_int_equal(parse(HEAD "spec:\n" DATA "  learners:\n"
			       "    replicas: 4\n"
			       "    slowdown: {\"3\": 2.5, 0: 1}\n", &js, &e), 0);
	assert_int_equal(js.learners.nslow, 2);
	assert_exactly(jobspec_slowdown(&js, 3), 2.5);
	assert_exactly(jobspec_slowdown(&js, 0), 1.0);
	assert_exactly(jobspec_slowdown(&js, 1), 1.0);
	refused(HEAD "spec:\n" DATA "  learners: {replicas: 4, slowdown: {4: 2}}\n",
		"job: spec.learners.slowdown: learner 4 is not one of the job's 4 (0 to 3)");
	refused(HEAD "spec:\n" DATA "  learners: {slowdown: {1: 0.5}}\n",
		"job: spec.learners.slowdown.1: 0.5 is not in [1, 100]");
	refused(HEAD "spec:\n" DATA "  learners: {slowdown: {x: 2}}\n",
		"job: spec.learners.slowdown: 'x' is not a learner number");
	refused(HEAD "spec:\n" DATA "  learners: {slowdown: {1: fast}}\n",
		"job: spec.learners.slowdown.1: expected a number, got 'fast'");
	refused(HEAD "spec:\n" DATA "  learners: {slowdown: [2]}\n",
		"job: spec.learners.slowdown: expected a mapping of learner numbers to factors, got a list");
}

/* spec.data.split (docs/trainer.md, Split): tail by default; files takes
 * a folder's valFraction of files, with no valPath or shardPattern.
 * spec.data.order: stream by default, or spread. */
static void data_split_by_files(void **state)
{
	struct job_spec js;
	struct err e = { "" };

	(void)state;
	assert_int_equal(parse(HEAD "spec:\n" DATA, &js, &e), 0);
	assert_int_equal(js.data.split, SPLIT_TAIL);
	assert_int_equal(js.data.order, ORDER_STREAM);
	assert_int_equal(parse(HEAD "spec:\n  data: {path: /docs, split: files, "
			       "order: spread}\n", &js, &e), 0);
	assert_int_equal(js.data.split, SPLIT_FILES);
	assert_int_equal(js.data.order, ORDER_SPREAD);
	refused(HEAD "spec:\n  data: {path: /docs, order: shuffled}\n",
		"job: spec.data.order: expected stream or spread, got 'shuffled'");
	refused(HEAD "spec:\n  data: {path: /docs, split: halves}\n",
		"job: spec.data.split: expected tail or files, got 'halves'");
	refused(HEAD "spec:\n  data: {path: /docs, split: files, valPath: /v}\n",
		"job: spec.data.split files: holds valFraction of the files of "
		"spec.data.path out (a folder), so it takes neither valPath nor "
		"shardPattern, and a valFraction above 0");
	refused(HEAD "spec:\n  data: {path: /docs, split: files, valFraction: 0}\n",
		"job: spec.data.split files: holds valFraction of the files of "
		"spec.data.path out (a folder), so it takes neither valPath nor "
		"shardPattern, and a valFraction above 0");
}

/* spec.learners.synthetic (docs/run.md, Synthetic learners): present
 * means on, its fields checked, an external model's table given. */
static void synthetic_learners(void **state)
{
	struct job_spec js;
	struct err e = { "" };

	(void)state;
	assert_int_equal(parse(HEAD "spec:\n" DATA, &js, &e), 0);
	assert_int_equal(js.learners.synthetic.enabled, 0);
	assert_int_equal(parse(HEAD "spec:\n" DATA "  learners:\n"
			       "    synthetic: {}\n", &js, &e), 0);
	assert_int_equal(js.learners.synthetic.enabled, 1);
	assert_exactly(js.learners.synthetic.step_time, 0.05);
	assert_exactly(js.learners.synthetic.scale, 1e-3);
	assert_int_equal(js.learners.synthetic.seed, 1);
	assert_int_equal(js.learners.synthetic.ntensors, 0);
	assert_int_equal(parse(HEAD "spec:\n" DATA "  learners:\n"
			       "    synthetic: ~\n", &js, &e), 0);
	assert_int_equal(js.learners.synthetic.enabled, 0);
	assert_int_equal(parse(HEAD "spec:\n" DATA "  model: {kind: external}\n"
			       "  syncer: {fragments: 3}\n"
			       "  learners:\n    synthetic:\n      stepTime: 0.5\n"
			       "      scale: 0.25\n      seed: 9\n"
			       "      tensors: [16777216, 4096, 1e6]\n", &js, &e), 0);
	assert_exactly(js.learners.synthetic.step_time, 0.5);
	assert_exactly(js.learners.synthetic.scale, 0.25);
	assert_int_equal(js.learners.synthetic.seed, 9);
	assert_int_equal(js.learners.synthetic.ntensors, 3);
	assert_int_equal(js.learners.synthetic.tensors[0], 16777216);
	assert_int_equal(js.learners.synthetic.tensors[2], 1000000);
	/* the reference GPT's fragments are bounded by its tensors, an
	 * external model's by its own table */
	assert_int_equal(parse(HEAD "spec:\n" DATA "  model: {kind: external}\n"
			       "  syncer: {fragments: 32}\n  learners:\n"
			       "    synthetic: {tensors: [" "1, 1, 1, 1, 1, 1, 1, 1, "
			       "1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, "
			       "1, 1, 1, 1, 1, 1, 1, 1]}\n", &js, &e), 0);
	refused(HEAD "spec:\n" DATA "  learners:\n    synthetic: {stepTime: 0}\n",
		"job: spec.learners.synthetic.stepTime: 0 is not in [0.001, 3600]");
	refused(HEAD "spec:\n" DATA "  learners:\n    synthetic: {scale: 2}\n",
		"job: spec.learners.synthetic.scale: 2 is not in (0, 1]");
	refused(HEAD "spec:\n" DATA "  learners:\n    synthetic: {speed: 2}\n",
		"job: spec.learners.synthetic.speed: unknown field (expected "
		"one of stepTime, scale, seed, tensors)");
	refused(HEAD "spec:\n" DATA "  learners:\n    synthetic: true\n",
		"job: spec.learners.synthetic: expected a mapping of stepTime, "
		"scale, seed, tensors, got true");
	refused(HEAD "spec:\n" DATA "  learners:\n    synthetic: {stepTime: fast}\n",
		"job: spec.learners.synthetic.stepTime: expected a number, got 'fast'");
	refused(HEAD "spec:\n" DATA "  learners:\n    synthetic: {seed: -1}\n",
		"job: spec.learners.synthetic.seed: expected a non-negative "
		"integer, got -1");
	refused(HEAD "spec:\n" DATA "  model: {kind: external}\n"
		"  learners:\n    synthetic: {tensors: [4, 0]}\n",
		"job: spec.learners.synthetic.tensors[1]: expected a tensor size "
		"in [1, 2^34], got 0");
	refused(HEAD "spec:\n" DATA "  model: {kind: external}\n"
		"  learners:\n    synthetic: {tensors: [4, 2.5]}\n",
		"job: spec.learners.synthetic.tensors[1]: expected a tensor size "
		"in [1, 2^34], got 2.5");
	refused(HEAD "spec:\n" DATA "  model: {kind: external}\n"
		"  learners:\n    synthetic: {tensors: []}\n",
		"job: spec.learners.synthetic.tensors: 0 tensors, expected 1 to 1024");
	refused(HEAD "spec:\n" DATA "  model: {kind: external}\n"
		"  learners:\n    synthetic: {tensors: 4}\n",
		"job: spec.learners.synthetic.tensors: expected a list of tensor "
		"sizes, got 4");
	refused(HEAD "spec:\n" DATA "  learners:\n    synthetic: {tensors: [4]}\n",
		"job: spec.learners.synthetic.tensors: only for spec.model.kind "
		"external (the reference GPT's table comes from spec.model)");
	refused(HEAD "spec:\n" DATA "  model: {kind: external}\n"
		"  learners:\n    synthetic: {}\n",
		"job: spec.learners.synthetic.tensors: missing; a synthetic "
		"learner of spec.model.kind external needs the model's table "
		"(here or in spec.model.tensors)");
	refused(HEAD "spec:\n" DATA "  model: {kind: external}\n"
		"  learners:\n    synthetic: {tensors: [4, 4]}\n",
		"job: spec.syncer.fragments: 4 is more than the 2 tensors of "
		"spec.learners.synthetic.tensors");
}

/*
 * spec.model.tensors: an external model's table declared (docs/syncer.md,
 * A declared table), which a synthetic learner takes when it has none of
 * its own; the table must cut into the fragments and fit the shards.
 */
static void declared_table(void **state)
{
	struct job_spec js;
	struct err e = { "" };

	(void)state;
	assert_int_equal(parse(HEAD "spec:\n" DATA "  model: {kind: external, "
			       "tensors: [3000, 2000, 1500, 1000]}\n"
			       "  learners:\n    synthetic: {}\n", &js, &e), 0);
	assert_int_equal(js.model.ntensors, 4);
	assert_int_equal(js.model.tensors[0], 3000);
	assert_int_equal(js.model.tensors[3], 1000);
	assert_int_equal(js.learners.synthetic.ntensors, 0);
	/* the same table twice is the same table */
	assert_int_equal(parse(HEAD "spec:\n" DATA "  model: {kind: external, "
			       "tensors: [5, 6, 7, 8]}\n  learners:\n"
			       "    synthetic: {tensors: [5, 6, 7, 8]}\n", &js, &e), 0);
	refused(HEAD "spec:\n" DATA "  model: {kind: external, tensors: [5, 6, 7, 8]}\n"
		"  learners:\n    synthetic: {tensors: [5, 6, 7, 9]}\n",
		"job: spec.learners.synthetic.tensors: not the table "
		"spec.model.tensors declares (leave it out: a synthetic learner "
		"takes the declared one)");
	refused(HEAD "spec:\n" DATA "  model: {tensors: [5, 6, 7, 8]}\n",
		"job: spec.model.tensors: only for spec.model.kind external (the "
		"reference GPT's table comes from its dimensions)");
	refused(HEAD "spec:\n" DATA "  model: {kind: external, tensors: [5, 0]}\n",
		"job: spec.model.tensors[1]: expected a tensor size in [1, 2^34], "
		"got 0");
	/* 3 values cannot be cut into 4 fragments */
	assert_int_not_equal(parse(HEAD "spec:\n" DATA "  model: {kind: external, "
				   "tensors: [1, 2]}\n", &js, &e), 0);
	assert_non_null(strstr(e.msg, "job: spec.model.tensors: "));
	/* cut into 4 fragments of 1875 (tensors cut where they must be):
	 * each of two shards holds two of them */
	refused(HEAD "spec:\n" DATA "  model: {kind: external, "
		"tensors: [3000, 2000, 1500, 1000]}\n"
		"  syncer: {shards: 2, maxParameters: 3749}\n",
		"job: spec.model.tensors: 7500 values, 3750 of them for one "
		"syncer shard: more than spec.syncer.maxParameters 3749");
	assert_int_equal(parse(HEAD "spec:\n" DATA "  model: {kind: external, "
			       "tensors: [3000, 2000, 1500, 1000]}\n"
			       "  syncer: {shards: 2, maxParameters: 3750}\n",
			       &js, &e), 0);
}

/* spec.learners.command, args and groups, and what each learner runs. */
static void learner_commands(void **state)
{
	struct job_spec js;
	struct err e = { "" };
	const char *cmd[JOB_ARGV_MAX], *args[JOB_ARGV_MAX];
	int nc, na;

	(void)state;
	/* none: every learner runs ddiloco learner */
	assert_int_equal(parse(HEAD "spec:\n" DATA, &js, &e), 0);
	jobspec_learner_command(&js, 3, cmd, &nc, args, &na);
	assert_int_equal(nc, 0);
	assert_int_equal(na, 0);

	assert_int_equal(parse(HEAD "spec:\n" DATA
			       "  learners:\n    replicas: 5\n"
			       "    command: [python3, -m, mine]\n"
			       "    args: ['--x', '']\n"
			       "    groups:\n"
			       "      - {replicas: 2}\n"
			       "      - {replicas: 1, command: [/bin/own], args: [a, b, c]}\n"
			       "      - {replicas: 2, command: [sh]}\n", &js, &e), 0);
	assert_int_equal(js.learners.ngroups, 3);
	/* learners 0, 1: spec.learners' command and args */
	jobspec_learner_command(&js, 1, cmd, &nc, args, &na);
	assert_int_equal(nc, 3);
	assert_string_equal(cmd[0], "python3");
	assert_string_equal(cmd[2], "mine");
	assert_int_equal(na, 2);
	assert_string_equal(args[0], "--x");
	assert_string_equal(args[1], "");
	/* learner 2: its group's */
	jobspec_learner_command(&js, 2, cmd, &nc, args, &na);
	assert_int_equal(nc, 1);
	assert_string_equal(cmd[0], "/bin/own");
	assert_int_equal(na, 3);
	assert_string_equal(args[2], "c");
	/* learners 3, 4: a command without args */
	jobspec_learner_command(&js, 4, cmd, &nc, args, &na);
	assert_int_equal(nc, 1);
	assert_string_equal(cmd[0], "sh");
	assert_int_equal(na, 0);

	/* a group with no command and no spec.learners.command: ddiloco learner */
	assert_int_equal(parse(HEAD "spec:\n" DATA "  learners:\n    replicas: 2\n"
			       "    groups: [{replicas: 1}, {replicas: 1, command: [x]}]\n",
			       &js, &e), 0);
	jobspec_learner_command(&js, 0, cmd, &nc, args, &na);
	assert_int_equal(nc, 0);
	jobspec_learner_command(&js, 1, cmd, &nc, args, &na);
	assert_int_equal(nc, 1);

	refused(HEAD "spec:\n" DATA "  learners: {command: python3}\n",
		"job: spec.learners.command: expected a list of strings, got 'python3'");
	refused(HEAD "spec:\n" DATA "  learners: {args: [a, 3]}\n",
		"job: spec.learners.args[1]: expected a string, got 3");
	refused(HEAD "spec:\n" DATA "  learners: {replicas: 3, groups: [{replicas: 2}]}\n",
		"job: spec.learners.groups: the groups have 2 learners, spec.learners.replicas is 3");
	refused(HEAD "spec:\n" DATA "  learners: {groups: [{command: [x]}]}\n",
		"job: spec.learners.groups[0].replicas: missing");
	refused(HEAD "spec:\n" DATA "  learners: {groups: [{replicas: 0}]}\n",
		"job: spec.learners.groups[0].replicas: expected an integer in [1, 4096], got 0");
	refused(HEAD "spec:\n" DATA "  learners: {groups: [{replicas: 4, image: x}]}\n",
		"job: spec.learners.groups[0].image: unknown field (expected one of replicas, command, args)");
	refused(HEAD "spec:\n" DATA "  learners: {groups: [{replicas: 4, args: [a]}]}\n",
		"job: spec.learners.groups[0].args: given without a command");
	refused(HEAD "spec:\n" DATA "  learners: {groups: {replicas: 4}}\n",
		"job: spec.learners.groups: expected a list of {replicas, command, args}, got a mapping");
	{
		/* 33 words; then one word of 2048 characters */
		char text[4096], *p = text;

		p += sprintf(p, HEAD "spec:\n" DATA "  learners: {command: [");
		for (int i = 0; i < 33; i++)
			p += sprintf(p, "%sw", i ? ", " : "");
		sprintf(p, "]}\n");
		refused(text, "job: spec.learners.command: 33 words, at most 32");
		p = text + sprintf(text, HEAD "spec:\n" DATA "  learners: {command: [");
		memset(p, 'a', 2048);
		sprintf(p + 2048, "]}\n");
		refused(text, "job: spec.learners.command: longer than 2047 characters in all");
	}
	assert_int_equal(jobspec_load("examples/pytorch/mixed.yaml", &js, &e), 0);
	assert_int_equal(js.learners.ngroups, 2);
	jobspec_learner_command(&js, 2, cmd, &nc, args, &na);
	assert_int_equal(nc, 2);
	assert_string_equal(cmd[1], "examples/pytorch/train.py");
}

/* Named as the CRD's rules on metadata.name name it (docs/operator.md,
 * "Names"): a DNS-1035 label of at most JOB_NAME_LEN_MAX (45). */
static void name_rules(void **state)
{
	static const char *const bad[] = {
		"7up", "-a", "a-", "A", "a_b", "a.b", "",
		/* 46 characters */
		"a123456789012345678901234567890123456789012345",
	};
	static const char *const good[] = {
		"a", "a-1", "job-7", "z9",
		/* 45 characters: the longest */
		"a12345678901234567890123456789012345678901234",
	};
	char text[512], msg[512];
	struct job_spec js;
	struct err e = { "" };

	(void)state;
	assert_int_equal(JOB_NAME_LEN_MAX, 45);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(text, sizeof(text), "apiVersion: ddiloco.io/v1alpha1\n"
			 "kind: DecoupledTrainingJob\nmetadata: {name: '%s'}\nspec:\n" DATA,
			 bad[i]);
		snprintf(msg, sizeof(msg), "job: metadata.name: '%s' is not a DNS-1035 "
			 "label of at most 45 characters (a lower-case letter, then "
			 "lower-case letters, digits or '-', ending in a letter or digit)",
			 bad[i]);
		if (!bad[i][0])   /* an empty name is refused by the reader */
			continue;
		refused(text, msg);
	}
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		snprintf(text, sizeof(text), "apiVersion: ddiloco.io/v1alpha1\n"
			 "kind: DecoupledTrainingJob\nmetadata: {name: '%s'}\nspec:\n" DATA,
			 good[i]);
		assert_int_equal(parse(text, &js, &e), 0);
		assert_string_equal(js.name, good[i]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(full_yaml_file),
		cmocka_unit_test(apiserver_json_object),
		cmocka_unit_test(minimal_gets_defaults),
		cmocka_unit_test(examples_load),
		cmocka_unit_test(file_errors),
		cmocka_unit_test(type_errors),
		cmocka_unit_test(structure_errors),
		cmocka_unit_test(yaml_errors),
		cmocka_unit_test(json_errors),
		cmocka_unit_test(validation_errors),
		cmocka_unit_test(learner_commands),
		cmocka_unit_test(synthetic_learners),
		cmocka_unit_test(declared_table),
		cmocka_unit_test(slow_learners),
		cmocka_unit_test(data_split_by_files),
		cmocka_unit_test(evaluator_command),
		cmocka_unit_test(name_rules),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
