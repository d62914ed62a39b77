/*
 * exchange: where a learner and its sidecar meet (docs/design.md §2).
 *
 * One file, DIR/exchange, mapped shared by both processes, and one Unix
 * datagram socket per side (DIR/learner.sock, DIR/sidecar.sock) for small
 * wake-up notifications. Whoever comes first creates the file (fully built
 * under a temporary name, then linked into place); the other attaches and
 * checks that it was made for the same fragment table. Either side may
 * restart and attach again: everything the other needs is in the file.
 *
 * The region (all integers little-endian, offsets in bytes):
 *
 *   | offset           | size          | what                                   |
 *   |------------------|---------------|----------------------------------------|
 *   | 0                | 4096          | header (struct xhdr)                   |
 *   | 4096             | 128 · P       | fragment table (struct xfrag each)     |
 *   | data_off         | per fragment: | 4 slots: inbox[0], inbox[1],           |
 *   |                  | 4 · slot      |          outbox[0], outbox[1]          |
 *   | slot             | 64 + 4·numel  | slot header (struct xslot) + floats    |
 *   |                  | (64-aligned)  |                                        |
 *
 *   header:   magic "DDXCHG01", layout version, P, region size, fragment
 *             table fingerprint, data_off; done flag and α (written by the
 *             sidecar); learner stats under their own sequence counter
 *             (incarnation, pid, step, tokens, loss, step time, wall time);
 *             sidecar pid; the resume step under its own sequence counter
 *             (step, and the learner incarnation it is meant for; sidecar);
 *             an evaluator's last report under its own sequence counter
 *             (count, round, loss, tokens; learner side); the
 *             incarnation of a learner that keeps off held outbox slots;
 *             at offset 3840, in every layout, each side's version block
 *             (common/exchange_version.c).
 *   fragment: numel; inbox generation (sidecar) and applied generation
 *             (learner); pull round (sidecar) and served round (learner);
 *             outbox generation (learner); per outbox slot, the
 *             generation the sidecar sends from it (sidecar); the newest
 *             outbox generation the sidecar is done with (sidecar).
 *   slot:     sequence counter (odd while being written), generation,
 *             version or round, base_version, steps, tokens (inbox: the
 *             job's tokens trained when the update was sent), step
 *             (inbox: the round the update came from), flags.
 *
 * Each box (inbox: sidecar → learner, the global fragment and its
 * version; outbox: learner → sidecar, Δ = base − θ and its counters) is
 * double-buffered: generation g lives in slot g mod 2, and the box's
 * generation is advanced only after the slot is complete. A writer killed
 * in the middle of a copy leaves that slot's sequence counter odd and the
 * generation pointing at the other, complete slot; a reader that races a
 * writer reusing its slot sees the sequence counter move and retries (a
 * few times, then gives up until the next poll: the learner never waits).
 *
 * A slot no longer needed gives its pages back (docs/exchange.md, Pages
 * given back): the sidecar the older inbox slot once it published a
 * newer one, the learner an outbox slot the sidecar is done with. The
 * writer does it under the slot's sequence counter and clears the slot's
 * generation word, so a racing reader retries as it would for a write.
 *
 * Learner side: exchange_learner_start once (takes every fragment from the
 * inbox), then exchange_poll once per step. Sidecar side: inbox
 * begin/commit for updates, exchange_post_pull, exchange_take_answer or
 * exchange_hold_answer, exchange_read_stats, exchange_set_done. The
 * exchange knows nothing of the network or the trainer: params is a flat
 * float array cut by the fragment table.
 */
#ifndef DDILOCO_EXCHANGE_H
#define DDILOCO_EXCHANGE_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/fragment.h"

#define EXCHANGE_FILE         "exchange"
#define EXCHANGE_LEARNER_SOCK "learner.sock"
#define EXCHANGE_SIDECAR_SOCK "sidecar.sock"
#define EXCHANGE_MAX_FRAGS    4096

enum exchange_role { EXCHANGE_LEARNER = 0, EXCHANGE_SIDECAR = 1 };

struct exchange;

/*
 * Creates or attaches DIR/exchange for this fragment table and binds this
 * side's socket. Fails with a clear message when the file exists but was
 * made for another table, and with EXCHANGE_VERSION_MISMATCH when the
 * other side's versions do not match this build's (below).
 */
int exchange_open(const char *dir, enum exchange_role role,
		  const struct frag_table *ft, struct exchange **out,
		  struct err *e);
void exchange_close(struct exchange *x);

/*
 * Versions (docs/exchange.md, Versions; docs/abi.md, Versions): where the
 * learner side (libddiloco.so, `ddiloco learner`) and the sidecar first
 * meet. Each side writes what it speaks into its own block of the header,
 * at a place no layout moves, and compares the other side's once there is
 * one: at exchange_open (and exchange_peek), then with exchange_versions
 * while it waits and runs. They match when the ABI and exchange versions
 * are the same; the releases may differ. Otherwise both sides say
 *
 *   learner library 0.3.0 (ABI 2, exchange 3) and sidecar 0.4.0 (ABI 3,
 *   exchange 4) do not match
 *
 * and the call returns EXCHANGE_VERSION_MISMATCH.
 */
#define EXCHANGE_VERSION 1       /* the region's layout and rules */
#define EXCHANGE_ABI_VERSION 1   /* DDILOCO_ABI_VERSION of include/ddiloco.h
				  * (asserted equal in abi/ddiloco.c) */
#define EXCHANGE_VERSION_MISMATCH (-2)
#define EXCHANGE_RELEASE_MAX 32

struct exchange_version {
	uint32_t abi, exchange;
	char release[EXCHANGE_RELEASE_MAX];   /* DDILOCO_VERSION, e.g. "0.4.0" */
};

/* This build's versions. */
void exchange_version_self(struct exchange_version *v);
/* 1 when a learner side of versions l and a sidecar of s work together;
 * else 0 with the message above in msg (n bytes). */
int exchange_versions_match(const struct exchange_version *l,
			    const struct exchange_version *s, char *msg,
			    size_t n);
/* exchange_open speaking the versions self instead of this build's (a
 * test standing in for another release). */
int exchange_open_version(const char *dir, enum exchange_role role,
			  const struct frag_table *ft,
			  const struct exchange_version *self,
			  struct exchange **out, struct err *e);
/* 0 while the other side has written no versions or they match;
 * EXCHANGE_VERSION_MISMATCH with e filled. Rewrites this side's block
 * when it is not what this side wrote (docs/exchange.md, Trust). */
int exchange_versions(struct exchange *x, struct err *e);
/* The other side's versions: 1 with *v written, 0 when it wrote none. */
int exchange_peer_version(struct exchange *x, struct exchange_version *v);

/*
 * The fragment table of DIR/exchange as the learner that made it wrote
 * it (docs/syncer.md, Model-agnostic jobs): 0 with *nfrags,
 * *fingerprint and *sizes (malloc'd, the caller frees) written; 1 when
 * there is no exchange file yet; -1 with e filled when the file is not
 * a whole exchange region; EXCHANGE_VERSION_MISMATCH when the learner's
 * versions do not match this build's. It leaves the sidecar's versions
 * in the region (its one write), so the learner can say it too.
 */
int exchange_peek(const char *dir, int *nfrags, uint64_t *fingerprint,
		  uint64_t **sizes, struct err *e);

/*
 * The seed: a learner's own initial weights, every fragment's payload in
 * fragment order, in DIR/seed (written whole under a temporary name,
 * then renamed), for a syncer that adopts them as Θ:
 *
 *   | offset | size   | what                                  |
 *   |--------|--------|---------------------------------------|
 *   | 0      | 8      | magic "DDSEED01"                      |
 *   | 8      | 8      | fragment table fingerprint            |
 *   | 16     | 4      | P                                     |
 *   | 20     | 4      | 0                                     |
 *   | 24     | 4·numel| float32 payloads, fragment 0 … P−1    |
 *
 * exchange_read_seed copies fragment p's payload (ft's size) into out;
 * it fails when the file is missing, short, or for another table.
 */
#define EXCHANGE_SEED_FILE "seed"
int exchange_write_seed(const char *dir, const struct frag_table *ft,
			const float *params, struct err *e);
int exchange_read_seed(const char *dir, const struct frag_table *ft, int p,
		       float *out, struct err *e);

/* Waits at most timeout seconds for a notification from the other side;
 * 1 if one came, 0 if not. */
int exchange_wait(struct exchange *x, double timeout);

/* ---- learner side ---- */

struct exchange_step {
	uint64_t step;          /* learner steps done */
	uint64_t tokens;        /* tokens in the step just done */
	uint64_t tokens_total;  /* tokens since the learner started */
	double loss;            /* train loss of the step */
	double step_time;       /* seconds per step (EMA) */
};

/*
 * When every inbox holds a fragment, copies them all into params
 * (overwrite), records them as bases and returns 1; else returns 0 and
 * changes nothing.
 */
int exchange_learner_start(struct exchange *x, float *params);

struct exchange_poll_result {
	int applied;            /* updates applied this poll */
	int served;             /* pulls answered this poll */
	int done;               /* the sidecar marked the job done */
	int repaired;           /* corrupted words found (exchange_last_error) */
};

/*
 * Once per step, after the step: counts the step into every fragment,
 * publishes stats, answers pending pulls with Δ = base − θ and then moves
 * that fragment's base to θ with its counters reset (no step is in two
 * answers), then applies arrived updates (θ ← α·θ + (1−α)·Θ and
 * base ← α·base + (1−α)·Θ; with α = 0 the counters reset, with α > 0
 * they are kept, as α·(θ − base) of their progress is still to answer).
 * An answer's base_version is the version its oldest progress was
 * trained from (docs/exchange.md, The learner side).
 * An update whose version equals the fragment's base version is already
 * applied and is skipped. Never waits.
 */
void exchange_poll(struct exchange *x, float *params,
		   const struct exchange_step *st,
		   struct exchange_poll_result *res);
/*
 * What the next poll would touch, for a learner whose model lives on
 * another device and is copied to params by fragment (docs/abi.md,
 * GPUs): reads[p] = 1 when a pull of fragment p waits (the poll reads
 * its θ), writes[p] = 1 when an update of it waits (the poll writes it,
 * and reads it when α > 0). Either may be NULL.
 */
void exchange_pending(struct exchange *x, uint8_t *reads, uint8_t *writes);
/*
 * exchange_poll touching only the fragments marked: pulls answered only
 * where reads[p], updates applied only where writes[p] (the others wait
 * for a later poll; NULL: all); wrote[p] (when not NULL) says which
 * fragments it wrote.
 */
void exchange_poll_only(struct exchange *x, float *params,
			const struct exchange_step *st,
			struct exchange_poll_result *res, const uint8_t *reads,
			const uint8_t *writes, uint8_t *wrote);
/*
 * The round Θ is from as this learner holds it: the newest round of the
 * updates it applied (an update sent at a join counts as the round of
 * its Welcome; docs/syncer.md, Evaluators). 0 before the start.
 */
uint64_t exchange_theta_round(const struct exchange *x);
/*
 * The job's tokens trained, as of the newest update this learner read
 * (Update.tokens; docs/abi.md, The job's schedule): what its lr
 * schedule follows. 0 before the start or when the syncer sent none.
 */
uint64_t exchange_job_tokens(const struct exchange *x);
/* An evaluator's report of its loss on Θ of `round`, for its sidecar to
 * send (the newest replaces an unsent one); wakes the sidecar. */
void exchange_put_eval(struct exchange *x, uint64_t round, double loss,
		       uint64_t tokens);
/* Publishes stats only (e.g. while waiting at start). */
void exchange_put_stats(struct exchange *x, const struct exchange_step *st);
/*
 * The step this learner should train on from (docs/sidecar.md): 1 with
 * *step written when the sidecar left one meant for this learner process
 * (its incarnation, published by exchange_put_stats or exchange_poll);
 * 0 when there is none yet, or it was meant for an earlier process.
 */
int exchange_resume(struct exchange *x, uint64_t *step);

/* ---- sidecar side ---- */

int exchange_nfrags(const struct exchange *x);
size_t exchange_frag_numel(const struct exchange *x, int p);

/* Inbox writes: begin returns the slot to fill with numel floats, commit
 * publishes it. A begin without commit publishes nothing. */
float *exchange_inbox_begin(struct exchange *x, int p);
void exchange_inbox_commit(struct exchange *x, int p, uint64_t version);
/* The same with the round the update came from (the learner's
 * exchange_theta_round) and the job's tokens trained when it was sent
 * (exchange_job_tokens); exchange_inbox_commit says 0 for both. */
void exchange_inbox_commit_round(struct exchange *x, int p, uint64_t version,
				 uint64_t round, uint64_t tokens);
/*
 * Pages given back (docs/exchange.md): the region of a model of at least
 * EXCHANGE_GIVE_BACK_BYTES in float32 (both sides decide alike from the
 * table) is not populated, and its slots give their pages back when no one needs
 * them: the superseded inbox slot (sidecar, at commit), an answer taken
 * (learner, at its poll), and an applied update (sidecar,
 * exchange_release_applied, once per loop), so a restarted learner
 * starts from the updates of its sidecar's next Welcome, not from the
 * region. exchange_set_give_back turns it on or off for this side
 * (tests). exchange_release_applied returns the slots it released.
 */
#define EXCHANGE_GIVE_BACK_BYTES ((size_t)256 << 20)
void exchange_set_give_back(struct exchange *x, int on);
int exchange_gives_back(const struct exchange *x);
int exchange_release_applied(struct exchange *x);
/* Newest version in the inbox of p (0: none). */
uint64_t exchange_inbox_version(struct exchange *x, int p);

/* Asks the learner to answer round on fragment p at its next step, and
 * wakes a learner waiting in exchange_wait. */
void exchange_post_pull(struct exchange *x, int p, uint64_t round);

struct exchange_answer {
	uint64_t round, base_version, steps, tokens, step;
};

/*
 * If fragment p has an answer not taken yet, copies it (numel floats into
 * buf; nothing when steps = 0) and returns 1; 0 when there is none, or
 * the learner is rewriting it right now (try again later).
 */
int exchange_take_answer(struct exchange *x, int p, struct exchange_answer *a,
			 float *buf);
/*
 * The same without the copy (docs/exchange.md, Answers sent from the
 * region): 1 with *vals pointing at the answer's numel floats in the
 * outbox slot, which the learner keeps off until exchange_release(*hold)
 * (from any thread; the region stays mapped until then, even after
 * exchange_close); *vals and *hold are NULL when the answer has no
 * steps. 0 as exchange_take_answer; -1 when the learner is of a build
 * that does not keep off a held slot: take a copy instead.
 */
struct exchange_hold;
int exchange_hold_answer(struct exchange *x, int p, struct exchange_answer *a,
			 const float **vals, struct exchange_hold **hold);
void exchange_release(struct exchange_hold *hold);
/* 1 when fragment p has an answer not taken yet (a cheap look). */
int exchange_answer_ready(struct exchange *x, int p);

struct exchange_stats {
	uint64_t incarnation;   /* 0: no learner attached yet */
	uint64_t pid;
	uint64_t step, tokens_total;
	double loss, step_time;
	double wall;            /* clock_wall of the last poll */
};
/* 0 with a consistent copy; -1 if it kept changing under us. */
int exchange_read_stats(struct exchange *x, struct exchange_stats *out);

/* An evaluator's last report (exchange_put_eval); count is how many it
 * made (0: none yet). 0 with a consistent copy, -1 if it kept changing. */
struct exchange_eval {
	uint64_t count, round, tokens;
	double loss;
};
int exchange_read_eval(struct exchange *x, struct exchange_eval *out);

/* Leaves the step the learner process `incarnation` resumes from, and
 * wakes the learner. */
void exchange_set_resume(struct exchange *x, uint64_t step,
			 uint64_t incarnation);
void exchange_set_done(struct exchange *x, int done);
int exchange_is_done(struct exchange *x);
void exchange_set_alpha(struct exchange *x, double alpha);

/* Counters of this process's side, for /metrics. */
struct exchange_counters {
	uint64_t updates_published;    /* sidecar */
	uint64_t updates_superseded;   /* sidecar: overwritten before applied */
	uint64_t pulls_posted;         /* sidecar */
	uint64_t pulls_superseded;     /* sidecar: replaced before served */
	uint64_t answers_taken;        /* sidecar */
	uint64_t answers_lost;         /* sidecar: overwritten before taken */
	uint64_t torn_reads;           /* both: a read raced a writer, retried */
	uint64_t updates_applied;      /* learner */
	uint64_t updates_skipped;      /* learner: version already applied */
	uint64_t pulls_served;         /* learner */
	uint64_t pulls_before_update;  /* learner: a fragment answered again
					* before an update was applied */
	uint64_t pulls_held;           /* learner: a pull left for a later
					* poll, its slot still being sent */
	uint64_t answers_held;         /* sidecar: answers sent straight
					* from the region */
	uint64_t slots_released;       /* both: slots whose pages this side
					* gave back (docs/exchange.md,
					* Pages given back) */
	uint64_t corrupt_headers;      /* both: a header or table word that
					* was not what it must be: rewritten */
	uint64_t corrupt_boxes;        /* both: a box whose generation or
					* counts were impossible: ignored */
	uint64_t inbox_pending;        /* now: updates not yet applied */
	uint64_t pulls_pending;        /* now: pulls not yet served */
};
void exchange_counters(struct exchange *x, struct exchange_counters *out);

/*
 * The region is not trusted (docs/exchange.md, Trust): checks its header,
 * fragment table and this side's own words against what this process
 * knows, rewrites what is wrong and counts it (corrupt_headers). Returns
 * how many words it rewrote; exchange_last_error then says the last one.
 * exchange_poll and exchange_learner_start call it; the sidecar calls it
 * once per loop.
 */
int exchange_check(struct exchange *x);
/* The last corruption found, "" when none. */
const char *exchange_last_error(const struct exchange *x);

#endif
