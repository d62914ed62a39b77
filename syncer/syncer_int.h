/*
 * syncer_int: the syncer's state and its core (core.c), as the files
 * around it see it. Nothing outside syncer/ includes it.
 *
 *   stream.c  gRPC: decodes each message (common/wire.h), hands it to the
 *             core, and sends what the core's answer calls for (Welcome,
 *             the Updates of a merge, Pulls); the run loop
 *   core.c    the round driver: state, joins, heartbeats, the rounds
 *             (core_poll), accounting, the budget, the evaluations. No
 *             gRPC, no sending: each call says what changed and the
 *             caller acts on it, so tests drive the core with a fake
 *             clock (tests/unit/test_core.c)
 *   merge.c   an answer's way into its round, and the round's merge
 *
 * and the parts the core owns, each with its own state, knowing nothing
 * of struct syncer:
 *   screen.c  the answer screens (size, norm history)
 *   persist.c checkpoints, the last good one, the high-water mark
 *   evalthr.c the evaluation thread
 *   goodput.c where the learners' time goes
 *   eval_remote.c  evaluators of an external model
 *   budgetw.c the budget, read again from the job file while it runs
 *   round.c, bounds.c, audit.c, gaplog.c, outer.c (their headers)
 *   status.c  HTTP /healthz /readyz /metrics /status, read under `mu`;
 *             each part writes its own lines
 *
 * Calls go one way: stream.c and status.c call core_*, the core calls
 * its parts, and no part calls back.
 *
 * Threads: the run loop (stream.c) owns every change and takes `mu` while
 * it makes one; the HTTP thread takes `mu` to read; the evaluation thread
 * works on its own copy of Θ and hands the loss back under `mu`.
 */
#ifndef DDILOCO_SYNCER_INT_H
#define DDILOCO_SYNCER_INT_H

#include <pthread.h>
#include <stdint.h>

#include "common/httpd.h"
#include "syncer/audit.h"
#include "syncer/bounds.h"
#include "syncer/budgetw.h"
#include "syncer/ckpt.h"
#include "syncer/eval_remote.h"
#include "syncer/evalthr.h"
#include "syncer/goodput.h"
#include "syncer/gaplog.h"
#include "syncer/outer.h"
#include "syncer/persist.h"
#include "syncer/round.h"
#include "syncer/screen.h"
#include "syncer/syncer.h"
#include "syncer/transport.h"
#include "syncer/updelta.h"

struct conn;
struct wire_answer;
struct wire_evaluation;
struct wire_heartbeat;
struct wire_hello;

/*
 * One accepted answer waiting for its round's merge: what is known of it,
 * not its values — those are folded into the slot's accumulator (or kept
 * among its few copies, outer.h struct outer_acc) when it is accepted.
 */
enum answer_fate {
	ANSWER_EMPTY,      /* no steps, no weight, or taken as empty */
	ANSWER_FOLDED,     /* in the slot's accumulator: merged with it */
	ANSWER_SCREENED,   /* refused by the history screen when it came */
};
struct answer {
	struct answer *next;
	int learner;
	enum answer_fate fate;
	uint64_t steps, tokens;
	uint64_t step, base_version;   /* the learner's step; its base */
	uint64_t claim_step, claim_steps;   /* step and steps as the learner
					     * said them, before the bounds'
					     * cut: the audit's interval */
	uint64_t incarnation;          /* the learner process that sent it */
	int predates;        /* progress older than staleVersions in it, as
			      * the versions sent show (audit_predates) */
	double weight;
	double norm_step;    /* whole-fragment norm per step (folded ones) */
};

struct learner {
	struct conn *conn;   /* its open stream (stream.c's; NULL: none);
			      * the core never looks at it */
	int joined;          /* Welcome + every fragment queued */
	int seen;            /* ever said hello */
	uint64_t step, tokens, incarnation;
	uint64_t step_max;   /* highest step it reported since we started,
			      * over its restarts too: where a restart resumes */
	double step_time, train_loss, last_seen;   /* last_seen: mono clock */
	double step_moved;   /* mono time its reported step last changed */
	uint64_t hb_step;    /* the step of its last heartbeat, whose tokens
			      * acc.tokens_trained holds */
	double tokens_per_step;   /* between its last two heartbeats (0:
				   * not known) */
	int stale;           /* its step stands still while it reports
			      * (core_check_stale) */
	int excluded;        /* maxClaimCuts of its claims cut (bounds.h):
			      * rounds no longer wait for it */
};

struct syncer {
	const struct syncer_params *prm;
	const struct job_spec *js;
	/* the fragments this syncer owns (all, or its shard's: common/shard.h),
	 * numbered 0 .. P-1; gid[p] is fragment p's number in the job's
	 * table gft (of gP fragments), the number on the wire, and
	 * lid[g] the other way (-1: another shard's) */
	const struct frag_table *ft, *gft;
	struct frag_table part;      /* ft of a shard (nshards > 1) */
	int *gid, *lid;
	int gP, shard, nshards;
	int P, M;
	size_t nparams;              /* Σ of the owned fragments' sizes */
	size_t *frag_off;            /* fragment p starts at theta + frag_off[p] */
	double *frag_share;          /* fragment p's share of the parameters */
	struct outer_seg **segs;     /* per fragment, its tensors */
	float *theta, *mom, *flat;
	/* merge buffers, sized to the largest fragment (max_numel floats,
	 * max_nseg tensors) and shared: merges and answers are handled one
	 * at a time, on the run loop. An answer is decoded into its round
	 * slot's accumulator (accs), or into `in` when it has no round in
	 * flight; `in_sq` gets its norms; `delta` is a merge's Δ, `undo` Θ
	 * and momentum before its step (docs/syncer.md, Merge). */
	size_t max_numel;
	int max_nseg;
	float *in, *delta, *undo;
	double *in_sq;
	uint64_t *versions;
	/* per fragment, the version this process resumed at: an answer
	 * trained from an older base predates it (0 when started afresh) */
	uint64_t *resumed_at;
	struct syncer_round rs;
	struct answer **answers;     /* per round slot, what is known of them */
	struct outer_acc *accs;      /* per round slot, their merge so far */
	struct learner *learners;

	/* accounting; the checkpointed part mirrors struct syncer_ckpt */
	struct syncer_ckpt acc;      /* counters, evals; theta/momentum unused */
	struct audit audit;          /* merged steps, bounds (audit.h) */
	struct updelta upd;          /* Θ̂ and its deltas, with updateDelta */
	int upd_on;                  /* spec.syncer.updateDelta */
	struct bounds bounds;        /* what learners may claim (bounds.h) */
	double t0, elapsed_base, done_elapsed;
	double quorum_wait_sum, grace_sum, merge_sum;
	uint64_t quorum_count, merge_count;
	int done, ready, stopping;
	int adopting;                /* spec.model.kind external, no table
				      * yet: only streams and HTTP run
				      * (stream.c; docs/syncer.md) */
	double last_loop;            /* mono time of the last loop turn */
	int final_eval;              /* the run loop is in the last evaluation,
				      * `mu` released (core_eval_sync) */
	int learners_connected;
	uint64_t stale_marked;       /* learners found stale, since start */
	double next_tick;            /* mono time core_tick works again */
	uint64_t stale_scans;        /* core_check_stale calls (tests) */
	uint64_t steps_undone;       /* outer steps undone: Θ non-finite */
	int ckpt_due;                /* a checkpoint was not taken: busy */
	struct transport_stats tr;   /* the streams' counters (transport.h) */
	struct goodput gp;           /* where learner time goes (goodput.h) */
	struct gap_log gaps;         /* down gaps between rounds (gaplog.h) */
	struct screen scr;           /* the answer screens (screen.h) */
	struct persist ps;           /* checkpoints (persist.h) */
	struct budgetw bw;           /* the budget in force (budgetw.h) */
	struct eval_remote evr;      /* evaluators (eval_remote.h) */

	pthread_mutex_t mu;
	struct eval_thread ev;       /* the evaluation thread (evalthr.h) */
	struct httpd *http;
};

/* A joined learner is stale when its reported step has not changed for
 * the larger of spec.syncer.stallSeconds and CORE_STALL_STEPS of its step
 * times while it was heard from in the last CORE_STALL_HEARD_S. */
#define CORE_STALL_STEPS 10
#define CORE_STALL_HEARD_S 10.0
/* The per-tick work (core_tick) runs at most once in this many seconds,
 * however many events the run loop handles meanwhile. */
#define CORE_TICK_S 0.05

/* owned.c: the fragments this syncer owns (s->ft, gid, lid, nparams
 * from p's table and shard); core_local is a wire fragment's number
 * here, -1 for another shard's or none. */
int core_owned_init(struct syncer *s, const struct syncer_params *p,
		    struct err *e);
void core_owned_release(struct syncer *s);
int core_local(const struct syncer *s, uint32_t gfrag);

/* core.c; `now` is the monotonic clock (a fake one in tests) */
int core_init(struct syncer *s, const struct syncer_params *p, double now,
	      struct err *e);
void core_release(struct syncer *s);
double core_elapsed(const struct syncer *s, double now);
double core_uptime(const struct syncer *s, double now);
/* the seconds uptime is measured over (0 before its window opens) */
double core_uptime_span(const struct syncer *s, double now);
double core_goodput(const struct syncer *s, double now);
/*
 * The run loop's scans of every learner (stale learners, until the job
 * is done) at most once per CORE_TICK_S: 1 when this call did them (and
 * the caller's own scans, of the streams, are due too), 0 when they ran
 * less than CORE_TICK_S ago. The loop turns once per gRPC event, so with M
 * learners answering a round, scanning on every turn was O(M²) a round.
 */
int core_tick(struct syncer *s, double now);
/* Hands a checkpoint to the writer thread (wait: and waits until it is
 * written); its outcome is kept for /status (persist.h). */
int core_checkpoint(struct syncer *s, double now, int wait, struct err *e);
/* The checkpoint due when the writer was busy, taken now if it is idle
 * (run loop, each turn); with wait, after the write under way. */
void core_checkpoint_due(struct syncer *s, double now, int wait);

/* admit.c */
/* Why a Hello cannot join; the stream ends with the matching status. */
enum core_refusal {
	CORE_JOIN_OK,
	CORE_JOIN_INVALID,       /* learner id out of range */
	CORE_JOIN_MISMATCH,      /* another job, another model */
	CORE_JOIN_DONE,          /* the job is over: not an error */
	CORE_JOIN_FULL,          /* evaluators: as many as allowed already */
	CORE_JOIN_NOROOM,        /* the checkpoint volume cannot hold them */
	CORE_JOIN_EXCLUDED,      /* its claims were cut maxClaimCuts times */
};
/* The job name and model of a Hello against the syncer's (learners and
 * evaluators alike); CORE_JOIN_DONE once the job is over. */
enum core_refusal core_model_check(const struct syncer *s,
				   const struct wire_hello *h, struct err *e);
enum core_refusal core_hello_check(const struct syncer *s,
				   const struct wire_hello *h, struct err *e);
/* An evaluator's Hello (eval_remote.h): the job's kind, its index, job
 * and model checked as a learner's; CORE_JOIN_OK counts it connected. */
enum core_refusal core_evaluator_join(struct syncer *s,
				     const struct wire_hello *h, struct err *e);
/* An evaluator's report: 0 taken into the history, -1 refused (e, if not
 * NULL, says why). */
int core_evaluation(struct syncer *s, int id, const struct wire_evaluation *ev,
		    double now, struct err *e);

/* core.c, again */
/*
 * Joins learner h->learner_id (checked): its record, the step it resumes
 * at (*resume) and the Pulls of rounds in flight it must get, at most
 * max of them in pulls; returns how many. The caller sends the Welcome,
 * every fragment, then those Pulls.
 */
int core_join(struct syncer *s, const struct wire_hello *h, double now,
	      uint64_t *resume, struct round_action *pulls, int max);
/* The learner's stream ended: it leaves every round it was in. */
void core_leave(struct syncer *s, int learner, const char *why);
/* A heartbeat: its step, tokens and step time counted, or, when they
 * are beyond the bounds (bounds.h), refused and counted: -1. */
int core_heartbeat(struct syncer *s, int learner,
		   const struct wire_heartbeat *hb, double now);

/* Learner id's claims were cut: excluded once maxClaimCuts are. */
void core_claims_cut(struct syncer *s, int id);
/* Whether learner id is excluded (bounds.h): the transport ends its
 * stream after the report that excluded it, and its Hello is refused
 * (CORE_JOIN_EXCLUDED) until the syncer process restarts. */
int core_excluded(const struct syncer *s, int id);

/* Marks the learners that became stale (rounds stop waiting for them);
 * a report with a new step clears it. Called by core_tick. */
void core_check_stale(struct syncer *s, double now);


/* What became of an answer (counters and log lines say the same). */
enum core_verdict {
	CORE_QUEUED,     /* in its round: folded into the merge, or empty,
			  * or refused by the norm history (counted) */
	CORE_LATE,       /* its round is merged already */
	CORE_REFUSED,    /* no such fragment or round, or answered already */
	CORE_INVALID,    /* counts for the quorum, not merged: bad payload,
			  * or claims beyond the bounds (bounds.h) */
};
enum core_verdict core_answer(struct syncer *s, int learner,
			      const struct wire_answer *a, double now);

/* What a merge changed: the caller sends fragment `frag` to every joined
 * learner when `updated`. */
struct core_merged {
	int frag;
	uint64_t round, version;
	int merged;              /* answers merged */
	int updated;             /* Θ of frag moved, version went up */
	int done;                /* the budget is reached: the job ends */
};
/* Merges round slot (a ROUND_MERGE of syncer_round_poll); then the
 * budget, a checkpoint and an evaluation as the job asks. */
void core_merge(struct syncer *s, int slot, double now,
		struct core_merged *out);
/* What the transport must do after a turn of the rounds. */
enum core_step_kind { CORE_STEP_PULL = 1, CORE_STEP_MERGED };
struct core_step {
	enum core_step_kind kind;
	uint64_t round;              /* CORE_STEP_PULL: pull (frag, round) */
	int frag;                    /* from every joined learner */
	struct core_merged merged;   /* CORE_STEP_MERGED: what changed */
};
/*
 * Drives the rounds: 1 with the next step in *out (a round to pull, its
 * high-water mark written first; or a round merged, with its
 * checkpoint and evaluation as the job asks), 0 when nothing is due.
 * Called until it returns 0 (or a bound the caller keeps).
 */
int core_poll(struct syncer *s, double now, struct core_step *out);
/* Fragment p's Θ as an Update payload (malloc'd, *len bytes) in the
 * job's update encoding, or f32 when that cannot hold it (*enc says). */
uint8_t *core_update_payload(const struct syncer *s, int p, int *enc,
			     size_t *len);
/*
 * The job's tokens trained at `now`, for Update.tokens (the learners' lr
 * schedule; docs/abi.md, The job's schedule): the heartbeats' count
 * plus, for each joined learner, the steps the pacing estimates it made
 * since its last heartbeat at its tokens per step. A heartbeat comes
 * about once a second; without the estimate the count trailed the job
 * by that much.
 */
uint64_t core_job_tokens(const struct syncer *s, double now);
/* Whether the budget is reached (sets s->done the first time). */
int core_check_budget(struct syncer *s, double now);
/* The job is done: rounds abandoned, last checkpoint and evaluation
 * (called with `mu` held, released during the evaluation). */
void core_finish(struct syncer *s, double now);
/* A stop request: rounds abandoned, a checkpoint unless done. */
void core_stop(struct syncer *s, double now);

/* An evaluation of round's Θ into the history (and the last good
 * checkpoint marked when it is good); the evaluation thread's and an
 * evaluator's (eval_remote.c) alike. */
void core_eval_add(struct syncer *s, uint64_t round, uint64_t tokens,
		   double loss, double time);
/* Evaluation: start one (if the thread is idle), collect a finished one. */
void core_eval_start(struct syncer *s, double now);
void core_eval_collect(struct syncer *s);
/* The last evaluation, on the caller's thread: called with `mu` held, it
 * releases `mu` while the model is evaluated (final_eval set). */
int core_eval_sync(struct syncer *s, double now);

/* Between the round driver and the merge (core.c, merge.c). */
void core_step_seen(struct syncer *s, int id, uint64_t old, uint64_t step,
		    double now);
void core_log_refusal(int id, const char *what, uint64_t n, const char *why);
void core_log_cut(int id, const char *what, uint64_t n, const char *why);
/* Slot's answers merged into Θ_p: how many moved it (0: none, or the
 * step was undone); the audit, goodput and screens told. */
int merge_round(struct syncer *s, int slot, int p, uint64_t round);
/* The round of slot is over (merged or abandoned): what it held goes. */
void merge_free_answers(struct syncer *s, int slot);

/* status.c */
int status_http(void *ctx, const char *path, struct buf *body,
		const char **content_type);

#endif
