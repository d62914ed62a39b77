/*
 * syncer: the Decoupled DiLoCo outer loop as a service — the global model
 * Θ and its momentum, quorum rounds (round.h), merges (outer.h),
 * checkpoints (ckpt.h), the gRPC stream per learner (docs/protocol.md)
 * and HTTP /healthz /readyz /metrics /status (docs/status.md).
 *
 * syncer_run owns one thread of the caller (the gRPC completion queue and
 * every state change), starts the HTTP server's thread and, when an
 * evaluator is given, one evaluation thread. It returns when the job's
 * budget is reached (after a last evaluation, a checkpoint, `job done` on
 * every stream and a short drain) or when *stop becomes non-zero (the
 * round in flight is abandoned, a checkpoint is written, every stream is
 * closed with UNAVAILABLE so sidecars reconnect to the next syncer).
 */
#ifndef DDILOCO_SYNCER_H
#define DDILOCO_SYNCER_H

#include <signal.h>
#include <stddef.h>

#include "common/err.h"
#include "common/fragment.h"
#include "common/jobspec.h"
#include "common/tls.h"

/* Scores a flat parameter vector (model order); 0 on success. */
typedef int (*syncer_eval_fn)(void *ctx, const float *params, size_t max_tokens,
			      double *loss, struct err *e);

struct syncer_params {
	const struct job_spec *js;
	/* the file js was read from, its budget read again while the job
	 * runs (budgetw.h); NULL: js's budget throughout */
	const char *job_path;
	const struct frag_table *ft;     /* the job's: model_frag_table(config, P) */
	const float *init_params;        /* flat, model order, ft's size */
	size_t nparams;
	int init_owned;                  /* 1: syncer_run frees init_params once
					  * Θ holds them (a model of size is
					  * not kept twice) */
	/* shard of nshards (spec.syncer.shards; common/shard.h): the
	 * fragments this syncer owns. 0 and 0 or 1: all of them. */
	int shard, nshards;
	const char *listen;              /* "host:port" for gRPC */
	const char *http_addr;           /* host for HTTP */
	int http_port;
	const char *ckpt_dir;
	syncer_eval_fn eval;             /* NULL: no evaluation */
	void *eval_ctx;
	double drain_seconds;            /* after `job done`, before return */
	/* the syncer's certificate and key and the job's CA: mutual TLS,
	 * each stream's learner id from its client certificate; NULL:
	 * plaintext, no identities (spec.syncer.insecure, docs/security.md) */
	const struct tls_files *tls;
	/* the most bytes a message may have either way: the test knob
	 * DDILOCO_TEST_MAX_MESSAGE, so that payloads go in parts
	 * (docs/protocol.md, Messages in parts); 0: WIRE_MAX_MESSAGE */
	size_t max_message;
};

/*
 * Seconds a new gRPC connection has to finish its TLS handshake and send
 * HTTP/2's preface and SETTINGS; past them the server closes it
 * (docs/security.md, Listeners).
 */
#define SYNCER_HANDSHAKE_TIMEOUT 10
/*
 * Calls open at once, at most: 4 a learner (its Train and Beat calls, and
 * one of each still closing after a reconnect) and an evaluator, and 16
 * more; a call past them is refused at once with RESOURCE_EXHAUSTED. A
 * connection that holds no call is closed after SYNCER_IDLE_SECONDS
 * (docs/security.md, Listeners).
 */
#define SYNCER_CALLS_MAX(M) (4 * ((M) + 4) + 16)
#define SYNCER_IDLE_SECONDS 60

/* Runs until the budget is reached or *stop is set (a signal handler). */
int syncer_run(const struct syncer_params *p,
	       const volatile sig_atomic_t *stop, struct err *e);

#endif
