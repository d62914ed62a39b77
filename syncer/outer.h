/*
 * outer: the syncer's arithmetic on one fragment — answer weights and
 * their cap, norms (which prove an answer finite), the merge (RDA or
 * weighted mean, per tensor; streamed answer by answer in struct
 * outer_acc) and the Nesterov outer step. Pure functions on float arrays
 * and one accumulator; nothing here knows about rounds, streams or files.
 *
 * A fragment payload is its tensors' values concatenated (fragment.h); a
 * `struct outer_seg` names one tensor inside it.
 *
 *   weight    w_m = tokens_m² / steps_m            (0 when steps_m = 0)
 *   mean      Δ = Σ w_m Δ_m / Σ w_m
 *   RDA       Δ = (Σ w_m ‖Δ_m‖ / Σ w_m) · φ(Σ w_m φ(Δ_m) / Σ w_m),
 *             φ(x) = x / ‖x‖, norms per tensor; the embedding tensor is
 *             always merged by the weighted mean. A tensor whose answers
 *             all have norm 0, or whose direction sum is 0, gets Δ = 0.
 *   Nesterov  u ← μ u + Δ;  Θ ← Θ − η (Δ + μ u)      (plain: Θ ← Θ − η u)
 */
#ifndef DDILOCO_SYNCER_OUTER_H
#define DDILOCO_SYNCER_OUTER_H

#include <stddef.h>
#include <stdint.h>

struct outer_seg {
	size_t offset, numel;   /* inside the fragment payload, in floats */
	int is_embedding;
};

enum outer_rule { OUTER_RDA = 0, OUTER_MEAN = 1 };

double outer_weight(uint64_t steps, uint64_t tokens);

/*
 * The weight of an answer of `steps` steps and `tokens` tokens bounded by
 * the job (docs/syncer.md, bounds): steps above max_steps count as
 * max_steps, with the tokens scaled alike and *scale = max_steps / steps
 * (the factor for Δ; else 1), and tokens at most tokens_per_step per step
 * counted (tokens_per_step 0: no such bound). Whatever the answer claims,
 * the weight is at most tokens_per_step² · max_steps.
 */
double outer_bounded_weight(uint64_t steps, uint64_t tokens, uint64_t max_steps,
			    uint64_t tokens_per_step, double *scale);

/*
 * Caps each of n weights w[i] > 0 at `cap` of their sum (docs/syncer.md,
 * Bounds: maxShare): the capped ones get exactly that share, the others
 * share the rest in proportion to their weights, so no capped weight
 * pushes another over. A cap below 1/n cannot hold: it is taken as 1/n
 * (every answer the same share). The weights are rewritten as shares
 * (summing to 1) when anything was capped; returns how many were.
 */
int outer_cap_shares(double *w, int n, double cap);

/*
 * The same over n weights w[] and nfolded more answers of total weight
 * folded, each of them no heavier than any of w[] (so never capped; the
 * caller sees to it, see struct outer_acc): w[] becomes shares summing,
 * with the folded ones', to 1 (all 0 when there is no weight), and
 * *fold_share is a folded answer's share per unit of its weight.
 * capped[] (n bytes, the caller's) says which were capped; returns how
 * many.
 */
int outer_cap_shares_folded(double *w, int n, double folded, int nfolded,
			    double cap, unsigned char *capped,
			    double *fold_share);

/*
 * Squared norm of each segment of x into sq[nseg] (in double); returns 0
 * when every value is finite, -1 otherwise (sq is then meaningless).
 */
int outer_seg_sqnorms(const float *x, const struct outer_seg *seg, int nseg,
		      double *sq);

/*
 * The batch merge: n answers x[i] (each `numel` floats, the fragment's
 * layout) with weights w[i] > 0 merged into out, every answer held at
 * once. The syncer merges with struct outer_acc (below); this one is the
 * reference it is tested against (tests/unit/test_outer.c). sq[i*nseg + s] are the squared segment norms
 * from outer_seg_sqnorms. With Σ w = 0 out is all zeros. Returns -1 only
 * when memory is out (more than 64 answers need a small allocation).
 */
int outer_merge(enum outer_rule rule, const float *const *x, const double *w,
		const double *sq, int n, const struct outer_seg *seg, int nseg,
		float *out);

/*
 * The streaming merge (docs/syncer.md, Merge): answers are added one at a
 * time as they arrive, and what is held does not grow with their number.
 *
 *   kept     copies of the k heaviest answers so far, k = ⌈1/cap⌉ − 1
 *            (outer_acc_k): only they can be capped (below)
 *   folded   every other answer, added (OUTER_ACC_PENDING + 1 at a
 *            time, in one pass over sum) into
 *              sum[j]  = Σ (w/wref)·Δ[j]           mean tensors
 *                        Σ (w/wref)·Δ[j]/‖Δ_s‖     RDA tensors (φ)
 *              mag[s]  = Σ w·‖Δ_s‖,  W_f = Σ w,  n_f
 *            (wref: the first folded weight, so sum stays near the
 *            size of one answer)
 *   merge    water filling (outer_cap_shares_folded) over the kept
 *            weights and W_f: every folded answer is uncapped, so all of
 *            them share one factor f per unit weight; then per tensor
 *            out = f·wref·sum + Σ_kept share_i·Δ_i  (RDA: with φ, and
 *            rescaled to f·mag + Σ_kept share_i‖Δ_i‖), equal to the
 *            batch merge of every answer with capped shares.
 *
 * Why k copies suffice: the water filling caps the heaviest answers
 * first (shares of the uncapped are in proportion to weight), and at most
 * k of them can be capped: ncap capped answers take ncap·cap of a total
 * of 1 and the last one capped needed a rest above cap, so ncap·cap < 1,
 * ncap ≤ ⌈1/cap⌉ − 1. A folded answer is no heavier than any kept one:
 * were it capped, every kept one would be too, k + 1 in all. (A cap
 * below 1/n of n answers gives equal shares: then n ≤ k, all are kept.)
 * Memory: (k + OUTER_ACC_PENDING + 2)·numel floats (sum, input, kept,
 * pending) + about (k + 6)·nseg doubles, fixed by outer_acc_init
 * whatever the number of answers (`bytes` says how much).
 */
#define OUTER_ACC_PENDING 3         /* folded answers summed in one pass */
struct outer_acc {
	size_t max_numel;       /* sizes fixed by outer_acc_init */
	int max_nseg, k;
	size_t bytes;           /* allocated by outer_acc_init */
	/* the round's fragment (outer_acc_begin) */
	enum outer_rule rule;
	const struct outer_seg *seg;
	int nseg;
	size_t numel;
	/* folded answers: summed, or pending (counted in mag, wsum and
	 * nfolded, summed with the next ones in one pass over sum) */
	float *sum;             /* max_numel; valid when `summed` */
	double *mag;            /* max_nseg */
	double wsum, wref;
	int nfolded, summed;
	float *pend[OUTER_ACC_PENDING];
	double *pend_sq;        /* (OUTER_ACC_PENDING + 1) · max_nseg */
	double pend_w[OUTER_ACC_PENDING + 1];
	int npend;
	float *in;              /* where the next answer is decoded */
	/* kept answers: copies, their squared segment norms and weights */
	float **keep;           /* k of max_numel (buffers trade places
				 * with `in` and `pend`: no copy) */
	double *keep_sq;        /* k + 1 rows of max_nseg (one spare) */
	double *keep_w;         /* k */
	int nkept;
	/* merge scratch: k + 1 coefficients, pointers, shares, flags */
	const float **mx;
	float *mc;
	double *share;
	unsigned char *capped;
};

/* How many answers to keep as copies for a share cap: ⌈1/cap⌉ − 1, at
 * most max_answers (no round has more); 0 without a cap (cap ≥ 1). */
int outer_acc_k(double cap, int max_answers);

/* Buffers for fragments of up to max_numel floats in max_nseg tensors,
 * keeping k copies; -1 when out of memory. */
int outer_acc_init(struct outer_acc *a, size_t max_numel, int max_nseg, int k);
void outer_acc_release(struct outer_acc *a);

/* Empties a and starts a round on a fragment laid out as seg[nseg]
 * (numel floats, at most the sizes of outer_acc_init); seg must stay
 * valid until the merge. */
void outer_acc_begin(struct outer_acc *a, enum outer_rule rule,
		     const struct outer_seg *seg, int nseg, size_t numel);

/* Drops every answer added; the fragment stays (a round abandoned). */
void outer_acc_clear(struct outer_acc *a);

/*
 * Adds answer x (numel floats) of weight w with squared segment norms sq
 * (outer_seg_sqnorms): kept as a copy when it is among the k heaviest so
 * far (the lightest kept one, if displaced, is folded), folded
 * otherwise; x is not held (it is copied, unless it is
 * outer_acc_input's, which then changes). -1 and nothing changes when
 * w is not a positive finite number or a norm is not finite.
 */
int outer_acc_add(struct outer_acc *a, const float *x, const double *sq,
		  double w);

/* The buffer (max_numel floats) to decode the next answer into: adding
 * it then copies nothing. */
float *outer_acc_input(struct outer_acc *a);

/* Answers added since outer_acc_begin. */
int outer_acc_count(const struct outer_acc *a);

/*
 * The merge of every answer added, each share at most cap of the whole
 * (outer_cap_shares), into out (numel floats); returns how many answers
 * were capped. With no answer, out is all zeros. Allocates nothing.
 */
int outer_acc_merge(struct outer_acc *a, double cap, float *out);

/* One outer step on n values: theta and mom are updated in place. */
void outer_step(float *theta, float *mom, const float *delta, size_t n,
		double lr, double momentum, int nesterov);

#endif
