/*
 * outer: the syncer's arithmetic on one fragment — answer weights, the
 * screening that keeps bad answers out, the merge (RDA or weighted mean,
 * per tensor) and the Nesterov outer step. Pure functions on float arrays;
 * nothing here knows about rounds, streams or files.
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

/* Why an answer was kept out of the merge. */
enum outer_verdict { OUTER_OK = 0, OUTER_NONFINITE = 1, OUTER_OUTLIER = 2 };

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
 * Squared norm of each segment of x into sq[nseg] (in double); returns 0
 * when every value is finite, -1 otherwise (sq is then meaningless).
 */
int outer_seg_sqnorms(const float *x, const struct outer_seg *seg, int nseg,
		      double *sq);

/*
 * Outlier screening over n answers whose whole-fragment norms are norm[i]:
 * answer i is an outlier when norm[i] > k · (median of the other answers'
 * norms) and that median is above zero. With one answer nothing is an
 * outlier. Writes OUTER_OK or OUTER_OUTLIER into verdict[i]; returns the
 * number of outliers.
 */
int outer_screen(const double *norm, int n, double k, int *verdict);

/*
 * Merges n answers x[i] (each `numel` floats, the fragment's layout) with
 * weights w[i] > 0 into out. sq[i*nseg + s] are the squared segment norms
 * from outer_seg_sqnorms. With Σ w = 0 out is all zeros. Returns -1 only
 * when memory is out (more than 64 answers need a small allocation).
 */
int outer_merge(enum outer_rule rule, const float *const *x, const double *w,
		const double *sq, int n, const struct outer_seg *seg, int nseg,
		float *out);

/* One outer step on n values: theta and mom are updated in place. */
void outer_step(float *theta, float *mom, const float *delta, size_t n,
		double lr, double momentum, int nesterov);

#endif
