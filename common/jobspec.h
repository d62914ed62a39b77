/*
 * jobspec: a DecoupledTrainingJob (YAML or JSON) read into one struct.
 *
 * The same code serves `ddiloco run` and the operator, so nothing here is
 * about local processes or pods: it is the job's meaning. Every field has
 * the default of docs/design.md §3; every error names the field path and what
 * was expected, e.g.
 *   "spec.syncer.minQuorum: 5 is more than spec.learners.replicas (4)".
 *
 * Field paths (camelCase in the file, snake_case here):
 *   metadata.name, metadata.namespace
 *   spec.suspend, spec.ttlSecondsAfterFinished
 *   spec.learners.{replicas, image, resources.{cpu, memory, gpu},
 *                  threads, command [..], args [..],
 *                  groups [{replicas, command [..], args [..]}],
 *                  synthetic {stepTime, scale, seed, tensors [..]},
 *                  slowdown {learner: factor}}
 *   spec.model.{kind (gpt|external), vocabSize, context, layers, heads,
 *               channels, tied, seed}
 *   spec.evaluator.{command [..], args [..]}
 *   spec.data.{path, valPath, format (auto|text|tokens), valFraction, tuneFraction,
 *              shardPattern, split (tail|files), order (stream|spread)}
 *   spec.optimizer.{lr, beta1, beta2, eps, weightDecay, warmupSteps,
 *                   cosineSteps, minLrRatio, gradClip, batchSize, seqLen}
 *   spec.syncer.{minQuorum, grace, fragments, syncEvery, overlap, shards, alpha,
 *                outerLr, outerMomentum, nesterov, merge (rda|mean),
 *                encoding, updateEncoding, updateDelta, errorFeedback, checkpointEvery,
 *                evalEvery, evalTokens, normOutlier, staleVersions,
 *                clipSteps, maxShare, minStepTime, maxStepTime,
 *                maxClaimCuts, stallSeconds, helloTimeout, port, httpPort, insecure,
 *                maxParameters}
 *   spec.budget.{tokens, outerSteps}
 *   spec.chaos.{enabled, schedule (poisson|interval), mtbfSeconds,
 *               intervalSeconds, targets [learners|syncer|sidecars],
 *               maxDown, startAfterSeconds, stopAfterSeconds,
 *               recoverySeconds, seed, syncerShard}
 */
#ifndef DDILOCO_JOBSPEC_H
#define DDILOCO_JOBSPEC_H

#include <stdint.h>

#include "common/encoding.h"
#include "common/err.h"

enum merge_rule { MERGE_RDA = 0, MERGE_MEAN = 1 };
enum data_format { DATA_AUTO = 0, DATA_TEXT = 1, DATA_TOKENS = 2 };
/* how validation is held out (trainer/data.h, Split) */
enum data_split { SPLIT_TAIL = 0, SPLIT_FILES = 1 };
enum data_order { ORDER_STREAM = 0, ORDER_SPREAD = 1 };
enum chaos_schedule { CHAOS_POISSON = 0, CHAOS_INTERVAL = 1 };

#define CHAOS_TARGET_LEARNERS 1
#define CHAOS_TARGET_SYNCER   2
#define CHAOS_TARGET_SIDECARS 4

#define JOB_NAME_MAX 64
/*
 * The longest job name whose children can all be created
 * (docs/operator.md, "Names"): the StatefulSet <job>-syncer labels its pods
 * controller-revision-hash=<job>-syncer-<hash>, a label value of at most 63
 * bytes with a hash of up to 10, so 63 - 10 - strlen("-syncer-") = 45.
 */
#define JOB_NAME_LEN_MAX 45
#define JOB_PATH_MAX 512

#define JOB_ARGV_MAX   32            /* words in a command or its args */
#define JOB_ARGV_BYTES 2048          /* their characters, NULs included */
#define JOB_GROUPS_MAX 8
#define JOB_MAX_SHARDS 64            /* spec.syncer.shards at most */
#define JOB_SYNTH_TENSORS_MAX 1024   /* spec.learners.synthetic.tensors */
#define JOB_SLOW_MAX   64            /* spec.learners.slowdown entries */

/* A list of strings: n words, each NUL-terminated, one after another. */
struct job_argv {
	int n;
	char buf[JOB_ARGV_BYTES];
};

/* spec.learners.slowdown: learner `learner` takes `factor` times its
 * own step time (docs/run.md, Slow learners). */
struct job_slow {
	int learner;
	double factor;                /* in [1, 100] */
};

/* Learners of one kind: `replicas` of them run command + args. */
struct job_group {
	int replicas;
	struct job_argv command, args;   /* command empty: spec.learners' */
};

/*
 * spec.learners.synthetic: learners that train nothing (docs/run.md,
 * Synthetic learners): each step moves θ by a small deterministic
 * pseudo-random Δ at a fixed step time, through the real exchange,
 * sidecar and syncer. Present in the file: enabled.
 */
struct job_synthetic {
	int enabled;
	double step_time;             /* s per step, default 0.05 */
	double scale;                 /* |Δ| of a moved value at most,
				       * default 1e-3 */
	uint64_t seed;                /* Δ's seed, default 1 */
	int ntensors;                 /* external model: its table, */
	uint64_t tensors[JOB_SYNTH_TENSORS_MAX];   /* values per tensor */
};

struct job_learners {
	int replicas;                 /* M, default 4 */
	int threads;                  /* trainer threads per learner, default 1 */
	char image[256];              /* container image (operator only) */
	char cpu[32], memory[32], gpu[32];   /* resource requests, as written */
	struct job_argv command, args;   /* a learner of the user's own; empty:
					  * `ddiloco learner` (docs/abi.md) */
	int ngroups;                  /* 0: all learners alike */
	struct job_group groups[JOB_GROUPS_MAX];   /* in learner order; their
						    * replicas add up to M */
	struct job_synthetic synthetic;
	int nslow;
	struct job_slow slow[JOB_SLOW_MAX];
};

/* spec.model.kind: the reference GPT (trainer/), or a model of the
 * learners' own whose table the first learner gives (docs/syncer.md,
 * Model-agnostic jobs). */
enum model_kind { MODEL_GPT = 0, MODEL_EXTERNAL = 1 };

struct job_model {
	enum model_kind kind;         /* default gpt */
	int vocab_size;               /* default 256 (bytes) */
	int context;                  /* max sequence length, default 64 */
	int layers, heads, channels;  /* default 2, 4, 128 */
	int tied;                     /* output projection = embedding, default 1 */
	uint64_t seed;                /* initial model, default 1337 */
	/* external: the table declared (spec.model.tensors), values per
	 * tensor; 0 tensors: none, the learners' agreed Hello gives it */
	int ntensors;
	uint64_t tensors[JOB_SYNTH_TENSORS_MAX];
};

struct job_data {
	char path[JOB_PATH_MAX];      /* text file or token shard */
	char val_path[JOB_PATH_MAX];  /* optional; else the tail of path */
	enum data_format format;
	double val_fraction;          /* default 0.1 */
	double tune_fraction;         /* of the held-out data, the share kept
				       * for tuning, not reported (default 0;
				       * trainer/data.h) */
	char shard_pattern[JOB_PATH_MAX];  /* optional, "{learner}" replaced */
	enum data_split split;        /* tail (default) or files */
	enum data_order order;        /* the training rows' order: stream
				       * (default) or spread (trainer/data.h) */
};

struct job_optimizer {
	double lr, beta1, beta2, eps, weight_decay;  /* 4e-4, .9, .95, 1e-8, .1 */
	int warmup_steps;             /* default 100 */
	int cosine_steps;             /* decay horizon; 0 = from the budget */
	double min_lr_ratio;          /* default 0.1 */
	double grad_clip;             /* default 1.0; 0 = off */
	int batch_size, seq_len;      /* B, T; default 8, 0 = context */
};

struct job_syncer {
	int min_quorum;               /* K, default 1 */
	double grace;                 /* γ, default 0.5 */
	int fragments;                /* P, default 4 */
	int sync_every;               /* H, default 0 = P */
	int overlap;                  /* τ, default 2 */
	int shards;                   /* S syncer processes, fragment p owned
				       * by shard p mod S; default 1
				       * (docs/syncer.md, Shards) */
	double alpha;                 /* update mixing, default 0 (overwrite) */
	double outer_lr, outer_momentum;  /* η 0.7, μ 0.5 */
	int nesterov;                 /* default 1 */
	enum merge_rule merge;        /* default rda */
	enum payload_enc encoding;    /* answers, default int8 */
	enum payload_enc update_encoding;  /* updates, default bf16 */
	int update_delta;             /* updates as deltas from the learners' last
				       * version, default 0 (docs/protocol.md) */
	int error_feedback;           /* answers' residual kept, default 1 */
	int checkpoint_every;         /* rounds, default 50 */
	int eval_every;               /* rounds, default 20 */
	int eval_tokens;              /* validation tokens per eval, default 8192 */
	double norm_outlier;          /* reject ‖Δ‖ > k·median, default 10 */
	int stale_versions;           /* answers from a base more than this many
				       * versions behind are empty, default 4 */
	double clip_steps;            /* answers over clip_steps·H steps are
				       * scaled down to it, default 4 */
	double max_share;             /* one answer's share of a merge at most,
				       * default 0.5 (1: no cap) */
	double min_step_time;         /* s: reported step times below are
				       * refused, default 1e-4 */
	double max_step_time;         /* s: and above, default 600 */
	int max_claim_cuts;           /* a learner's claims cut this many times
				       * excludes it, default 10 (0: never) */
	double stall_seconds;         /* s: a learner heartbeating with its step
				       * still this long is stale, default 300 */
	double hello_timeout;         /* s: a stream without a Hello this long
				       * is closed, default 10 */
	int port, http_port;          /* default 7070, 7071 */
	int insecure;                 /* 1: plaintext gRPC, no identities;
				       * default 0 (docs/security.md) */
	uint64_t max_parameters;      /* a shard holds at most this many
				       * (docs/syncer.md, Memory budget);
				       * default 4e9 */
};

struct job_budget {
	uint64_t tokens;              /* total over all learners; 0 = none */
	uint64_t outer_steps;         /* rounds; 0 = none */
};

struct job_chaos {
	int enabled;
	enum chaos_schedule schedule; /* default poisson */
	double mtbf_seconds;          /* mean time between kills, default 20 */
	double interval_seconds;      /* fixed interval, default 20 */
	int targets;                  /* CHAOS_TARGET_*, default learners */
	int max_down;                 /* at most this many down, default 1 */
	double start_after_seconds;   /* default 10 */
	double stop_after_seconds;    /* 0 = until the job ends */
	double recovery_seconds;      /* local restart delay, default 3 */
	uint64_t seed;                /* default 1 */
	int syncer_shard;             /* the one shard syncer kills hit; -1
				       * (default): the shards in turn */
};

/* spec.evaluator: an evaluator of the user's own for an external model
 * (docs/syncer.md, Evaluators); command empty: none. */
struct job_evaluator {
	struct job_argv command, args;
};

struct job_spec {
	char name[JOB_NAME_MAX];
	char namespace_[JOB_NAME_MAX];
	int suspend;
	int ttl_seconds_after_finished;   /* -1 = keep */
	struct job_learners learners;
	struct job_model model;
	struct job_evaluator evaluator;
	struct job_data data;
	struct job_optimizer optimizer;
	struct job_syncer syncer;
	struct job_budget budget;
	struct job_chaos chaos;
};

/* Fills every field with its default (no data path). */
void jobspec_defaults(struct job_spec *js);
/* Reads a file (YAML or JSON by content), applies defaults, validates. */
int jobspec_load(const char *path, struct job_spec *out, struct err *e);
/* Same from a string in memory; `what` names it in errors. */
int jobspec_parse(const char *text, size_t len, const char *what,
		  struct job_spec *out, struct err *e);
/* Cross-field checks; called by load/parse, callable after edits. */
int jobspec_validate(const struct job_spec *js, struct err *e);

/*
 * The command and args learner i runs (group's, else spec.learners'),
 * as pointers into js; *ncmd = 0 means `ddiloco learner`.
 */
void jobspec_learner_command(const struct job_spec *js, int i,
			     const char **cmd, int *ncmd,
			     const char **args, int *nargs);
/* The words of a list into out (room for JOB_ARGV_MAX); returns n. */
int job_argv_words(const struct job_argv *a, const char **out);

/* The values behind the "0 = derived" defaults. */
int jobspec_seq_len(const struct job_spec *js);     /* T: seqLen or context */
int jobspec_sync_every(const struct job_spec *js);  /* H: syncEvery or 4 × P */
/* Learner i's spec.learners.slowdown factor, 1 when it has none. */
double jobspec_slowdown(const struct job_spec *js, int learner);

#endif
