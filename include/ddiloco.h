/*
 * ddiloco.h: the learner side of the exchange as a stable C ABI
 * (libddiloco.so, built next to build/ddiloco; docs/abi.md).
 *
 * A trainer of any kind (PyTorch through python/ddiloco, JAX, C) keeps
 * its model's parameters in one flat float32 buffer that it owns, laid
 * out by the parameter table this library gives, and calls:
 *
 *   h = ddiloco_open_job("job.yaml", getenv("DDILOCO_EXCHANGE"));
 *   ddiloco_start(h, params, 300);          // the global model, in place
 *   for (;;) {
 *           ... one optimizer step on params ...
 *           if (ddiloco_poll(h, params, step, tokens, loss) != 0)
 *                   break;                  // 1: the job is done
 *   }
 *   ddiloco_close(h);
 *
 * The handle is opaque; no struct crosses the boundary. Functions that
 * can fail return -1 (or NULL) and leave a message for the calling
 * thread in ddiloco_error(). Integers are fixed-width, sizes are counts
 * of float32 values. One handle is used by one thread at a time.
 *
 * Compatibility: DDILOCO_ABI_VERSION changes only when a function is
 * removed or changes meaning; functions are only ever added. A caller
 * checks ddiloco_abi_version() == the version it was written for.
 *
 * The library and its sidecar may come from different releases: they
 * exchange their ABI and exchange versions where they first meet, and
 * a mismatch fails ddiloco_open_*, ddiloco_start or ddiloco_poll with
 * "learner library 0.3.0 (ABI 2, exchange 3) and sidecar 0.4.0 (ABI 3,
 * exchange 4) do not match" (docs/abi.md, Versions).
 */
#ifndef DDILOCO_H
#define DDILOCO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DDILOCO_ABI_VERSION 1

/* At most this many dimensions in a tensor's shape. */
#define DDILOCO_MAX_DIMS 4

typedef struct ddiloco_learner ddiloco_learner;

/* The ABI version of the loaded library (DDILOCO_ABI_VERSION it was
 * built with) and the ddiloco release it came from. */
int ddiloco_abi_version(void);
const char *ddiloco_version(void);

/* The calling thread's last error message ("" when none). */
const char *ddiloco_error(void);

/*
 * Opens the exchange folder dir (shared with `ddiloco sidecar`) for the
 * reference model of the job file job_path, cut into
 * spec.syncer.fragments fragments exactly as `ddiloco learner` cuts it.
 * dir NULL opens no exchange: the handle then only describes the model
 * (parameter table, job, initial weights), and start/poll fail.
 */
ddiloco_learner *ddiloco_open_job(const char *job_path, const char *dir);
/* The same from the model's dimensions (spec.model) and P fragments. */
ddiloco_learner *ddiloco_open_model(const char *dir, int vocab_size,
				    int context, int layers, int heads,
				    int channels, int tied, int fragments);
/*
 * A model of the caller's own (spec.model.kind external; docs/syncer.md,
 * Model-agnostic jobs): ntensors tensors of numels[i] float32 values
 * each, one after the other in the flat buffer in this order, named
 * names[i] (NULL: "t<i>"), cut into spec.syncer.fragments fragments.
 * ddiloco_start then leaves params in the exchange folder as the seed:
 * the first learner's weights become the job's initial Θ.
 */
ddiloco_learner *ddiloco_open_external(const char *job_path, const char *dir,
				       int ntensors, const char *const *names,
				       const uint64_t *numels);
void ddiloco_close(ddiloco_learner *h);

/* ---- the parameter table ---- */

/* Values in the flat float32 buffer. */
uint64_t ddiloco_num_params(const ddiloco_learner *h);
int ddiloco_num_tensors(const ddiloco_learner *h);
/*
 * Tensor i in model order: its name ("wte", "h0.qkvw", ...), dims and
 * shape (row-major, at most DDILOCO_MAX_DIMS), offset in the flat buffer
 * and number of values, whether AdamW decays it (2-D weights) and
 * whether the syncer merges it as an embedding. Any out pointer may be
 * NULL. -1 when i is out of range.
 */
int ddiloco_tensor(const ddiloco_learner *h, int i, const char **name,
		   int *ndim, int64_t *shape, uint64_t *offset,
		   uint64_t *numel, int *decayed, int *embedding);
int ddiloco_num_fragments(const ddiloco_learner *h);
/* The fragment table's fingerprint: equal on both sides of a job. */
uint64_t ddiloco_fingerprint(const ddiloco_learner *h);

/*
 * The job as the C learner reads it, defaults applied, as one JSON
 * object (spec.model, spec.data, spec.optimizer with seqLen resolved,
 * spec.learners, spec.syncer.fragments, spec.budget); "{}" for a handle
 * opened with ddiloco_open_model. Valid until ddiloco_close.
 */
const char *ddiloco_job_json(const ddiloco_learner *h);
/*
 * The LR schedule's decay horizon for a learner of a job with
 * `learners` learners and batch B × T (trainer/optim.h): what the C
 * learner uses. 0 = constant after warmup.
 */
uint64_t ddiloco_decay_steps(const ddiloco_learner *h, int learners);
/* Writes the reference model's initial weights for seed (the C
 * learner's and the syncer's initial model when seed is spec.model.seed)
 * into params (ddiloco_num_params values). */
void ddiloco_init_params(const ddiloco_learner *h, float *params,
			 uint64_t seed);

/* ---- the learner side of the exchange ---- */

/*
 * Waits at most timeout seconds (0: one look) for the sidecar to put
 * every fragment of the global model in the exchange, and copies them
 * into params. 0 = started, 1 = the job is already done, -1 = not within
 * timeout, no exchange, or a sidecar whose versions do not match
 * (message).
 */
int ddiloco_start(ddiloco_learner *h, float *params, double timeout);

/*
 * Once per step, right after the optimizer step: publishes the stats
 * (steps done, tokens of this step, its train loss; the step time is
 * measured here between polls), answers the sidecar's pulls and applies
 * arrived updates to params in place. Never waits. 0 = train on,
 * 1 = the job is done, -1 = no exchange, or a sidecar whose versions do
 * not match (message).
 */
int ddiloco_poll(ddiloco_learner *h, float *params, uint64_t step,
		 uint64_t tokens, double loss);
/*
 * A model on another device (a GPU) keeps a host copy of params and
 * moves only what a poll touches (docs/abi.md, GPUs):
 *
 *   ddiloco_pending(h, reads, writes);       // one byte a fragment each
 *   copy device -> host: every fragment p with reads[p] or writes[p]
 *   ddiloco_poll_fragments(h, host, step, tokens, loss, reads, writes, wrote);
 *   copy host -> device: every fragment p with wrote[p]
 *
 * ddiloco_pending: reads[p] = 1 when a pull of fragment p waits (the poll
 * reads its values), writes[p] = 1 when an update of it waits (the poll
 * writes it, and reads it first when spec.syncer.alpha > 0); either may
 * be NULL. ddiloco_poll_fragments is ddiloco_poll answering pulls only
 * where reads[p] and applying updates only where writes[p] (the others
 * wait for a later poll; NULL: all), and setting wrote[p] (when not NULL)
 * for each fragment it wrote. ddiloco_fragment_pieces: fragment p's
 * pieces in the flat buffer, their offsets and lengths (at most max
 * written); returns how many it has, -1 when p is out of range.
 */
int ddiloco_pending(ddiloco_learner *h, uint8_t *reads, uint8_t *writes);
int ddiloco_poll_fragments(ddiloco_learner *h, float *params, uint64_t step,
			   uint64_t tokens, double loss, const uint8_t *reads,
			   const uint8_t *writes, uint8_t *wrote);
int ddiloco_fragment_pieces(const ddiloco_learner *h, int p,
			    uint64_t *offsets, uint64_t *numels, int max);
/* What the last poll did: updates applied, pulls served; and whether a
 * corrupted word of the region was repaired (ddiloco_error says which). */
int ddiloco_last_poll(const ddiloco_learner *h, int *applied, int *served,
		      int *repaired);
/*
 * The job's step this learner process should train on from (a learner
 * restarted while the job runs; docs/sidecar.md): 1 with *step written
 * when the sidecar left one for this process, 0 when none (yet). Worth
 * asking after start (waiting a few seconds at most) and at every step.
 */
int ddiloco_resume_step(ddiloco_learner *h, uint64_t *step);
/* 1 when the sidecar marked the job done. */
int ddiloco_done(ddiloco_learner *h);
/* Seconds spent in ddiloco_poll and between polls (training) so far. */
void ddiloco_times(const ddiloco_learner *h, double *poll_seconds,
		   double *step_seconds);

/* ---- evaluators (spec.model.kind external; docs/abi.md, Evaluators) ----
 *
 * An evaluator opens the job as a learner does (ddiloco_open_external,
 * the same table), marks its handle with ddiloco_set_evaluator before
 * ddiloco_start, and meets a sidecar started with --evaluator. It polls
 * (step counting its polls, tokens 0) to apply Θ as the syncer sends it,
 * evaluates between polls, and reports each loss with the round
 * ddiloco_round gave for the Θ it evaluated:
 *
 *   ddiloco_set_evaluator(h);
 *   ddiloco_start(h, params, 300);
 *   for (uint64_t n = 1; ddiloco_poll(h, params, n, 0, 0) == 0; n++) {
 *           uint64_t r = ddiloco_round(h);
 *           if (r is newer than the last one evaluated)
 *                   ddiloco_report_eval(h, r, loss_of(params), tokens);
 *           ... sleep a little ...
 *   }
 *
 * These came after the first functions of ABI version 1 (functions are
 * only added): a caller that may load an older library looks them up
 * (dlsym; the Python package does) before it relies on them.
 */

/* This handle is an evaluator's: ddiloco_start leaves no seed (an
 * evaluator's weights never become Θ). 0, or -1 after ddiloco_start. */
int ddiloco_set_evaluator(ddiloco_learner *h);
/*
 * The round Θ in params is from: the newest round of the updates the
 * polls applied (the fragments sent when the sidecar joined count as the
 * round the syncer had then). 0 before the start or without an exchange.
 */
uint64_t ddiloco_round(const ddiloco_learner *h);
/*
 * The tokens the whole job had trained when the syncer sent the newest
 * update the polls read (0 before the start, or from a syncer that does
 * not send them). A learner's lr schedule follows it, not its own step:
 * a learner that gets more of the machine than the others would
 * otherwise run past the schedule's end and train at the floor rate
 * (docs/abi.md, The job's schedule):
 *
 *   uint64_t t = ddiloco_job_tokens(h);
 *   schedule_step = t ? t / (replicas * batch) : own_step;
 */
uint64_t ddiloco_job_tokens(const ddiloco_learner *h);
/*
 * An evaluator's loss on Θ of `round` (tokens: how many it evaluated on,
 * in the syncer's log), for the sidecar to send to the syncer; a newer report
 * replaces one not sent yet. The syncer refuses (and counts) a loss that
 * is not finite, a round not merged yet or not newer than its last
 * evaluation. 0, or -1 (no exchange, not an evaluator's handle).
 */
int ddiloco_report_eval(ddiloco_learner *h, uint64_t round, double loss,
			uint64_t tokens);

#ifdef __cplusplus
}
#endif

#endif
