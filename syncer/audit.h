/*
 * audit: what the syncer counts to prove its accounting (docs/design.md
 * §3, Invariants; docs/syncer.md). Nothing here changes a merge.
 *
 * An answer of learner m for fragment p carries the learner's step at the
 * answer and the steps since its base: it covers the learner's steps
 * (step − steps, step], in the learner's own numbers (the bounds may
 * credit it fewer steps and a lower step, bounds.h: the credit weighs
 * the answer, the claim says which steps it holds). Per learner and
 * fragment the audit keeps the highest step merged so far (the mark);
 * the part of a merged answer at or below the mark was merged before,
 * and adds to double_merged_steps. The
 * learner's rule (an answer moves its base, docs/design.md §3) keeps that
 * at 0, as long as a learner's answers for a fragment are merged in the
 * order it gave them: the syncer pulls it for a fragment's rounds and
 * merges them in round order (round.h; docs/syncer.md, Quorum and
 * grace). A learner process that starts over (a new incarnation) numbers its
 * steps again from its resume step: its marks go back to 0, and answers
 * of the earlier process merged after that (accepted before it) count in
 * merged_steps only: a new process cannot send their steps again.
 *
 * steps is merged_steps per learner; max_steps, the most steps one merged
 * answer of it held (both as credited). A learner cut off from the
 * syncer trains alone. When it is back, the answers it gives before the Welcome's Θ reaches it hold
 * that lone stretch, from a base many versions old: they are emptied as
 * stale (docs/syncer.md, Bounds). The Welcome overwrites θ and starts its
 * count again (docs/design.md §3, Learner, α = 0). With both rules kept
 * max_steps stays near the steps between two pulls of a fragment however
 * long the cut (tests/integration/test_partition.sh).
 *
 * stale_merged counts merged answers that hold progress more than
 * staleVersions versions old, which the staleVersions rule is there to
 * empty: an invariant, 0. The syncer cannot see an answer's base, only
 * the version it reports, so the audit bounds it from what it sent: a
 * learner that left had at most the fragment's version of then until
 * its next Hello, and an answer whose first step is at or below the
 * step of that Hello holds progress trained from that base or older.
 * When that version is more than staleVersions behind the fragment's
 * version at the answer, the answer must be emptied as stale; merged,
 * its learner reported a newer version than its oldest progress (the
 * kept share of α > 0 labelled with the update it was kept across,
 * docs/exchange.md, The learner side). A new learner process starts
 * from what it is sent after its start, so its marks of what was sent
 * start again. Only answers after a rejoin to this process are judged;
 * stale_held counts those found that old, emptied or merged, so a run
 * where it is 0 did not test the rule.
 *
 * repeat_base counts merged answers trained from the same base version as
 * the learner's previous merged answer for that fragment: it answered
 * again before it applied the update of the one before, the case in which
 * a learner that kept its base would send those steps a second time. A
 * run where it is 0 did not test the rule.
 *
 * The counts live in memory, from the syncer process's start: a restarted
 * syncer starts them (and the marks) again.
 */
#ifndef DDILOCO_SYNCER_AUDIT_H
#define DDILOCO_SYNCER_AUDIT_H

#include <stdint.h>

struct audit {
	int M, P;
	const int *gid;          /* fragment p's number in logs (NULL: p) */
	uint64_t *mark;          /* M × P: highest learner step merged */
	uint64_t *base;          /* M × P: base version + 1 of the last
				  * merged answer (0: none) */
	uint64_t *incarnation;   /* per learner: the process the marks are of */
	uint64_t *max_steps;     /* per learner: most steps in one merged answer */
	uint64_t *steps;         /* per learner: Σ steps of its merged answers */
	uint64_t *left;          /* M × P: version + 1 of fragment p when the
				  * learner last left (0: not known) */
	uint64_t *hello_step;    /* per learner: its step in its last Hello */
	uint64_t double_merged_steps;   /* of those, merged before */
	uint64_t repeat_base;           /* merged answers on a repeated base */
	uint64_t stale_held;     /* answers in a merge with progress older
				  * than staleVersions (audit_predates) */
	uint64_t stale_merged;   /* of those, merged (an invariant: 0) */
	uint64_t stale;          /* answers taken as empty: base too old */
	uint64_t clipped;        /* answers whose weight the bounds cut */
	uint64_t capped;         /* merged answers held to maxShare */
};

int audit_init(struct audit *a, int M, int P);
void audit_release(struct audit *a);
/* Σ steps of merged answers, every learner's (`merged_steps`) */
uint64_t audit_merged_steps(const struct audit *a);
/* Learner m is process `incarnation` (0: unknown, ignored); a new one
 * starts its marks again. */
void audit_incarnation(struct audit *a, int m, uint64_t incarnation);
/* An answer of learner m for fragment p, sent by process `incarnation`
 * (0: unknown), was merged: its steps (step − steps, step] as the learner
 * numbered them, `credited` of them counted (the bounds may credit fewer,
 * and a lower step, than it claims: the learner's own numbers are what
 * tell whether a step came twice). */
void audit_merged(struct audit *a, int m, int p, uint64_t incarnation,
		  uint64_t step, uint64_t steps, uint64_t credited,
		  uint64_t base_version);
/* Learner m left with the fragments at versions[] (P of them). */
void audit_left(struct audit *a, int m, const uint64_t *versions);
/* Learner m said Hello at its step `step`. */
void audit_hello(struct audit *a, int m, uint64_t step);
/*
 * 1 when an answer of learner m for fragment p covering its steps
 * (step − steps, step] holds progress trained from a base more than
 * stale_versions behind `version`, the fragment's version now, as far
 * as the versions sent to m show (stale_merged, above); the merge
 * counts it in stale_held, and in stale_merged if it is merged.
 */
int audit_predates(const struct audit *a, int m, int p, uint64_t step,
		   uint64_t steps, uint64_t version, int stale_versions);

struct buf;
/* Its Prometheus lines: the merged steps and the invariants, the
 * answers clipped, capped or taken as stale. */
void audit_metrics(const struct audit *a, struct buf *b);

#endif
