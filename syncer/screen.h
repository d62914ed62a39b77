/*
 * screen: the answer screens of the merge (docs/syncer.md, Merge), per
 * fragment. An answer of `steps` steps whose whole-fragment norm is
 * `norm` is refused when its norm per step is
 *   - beyond SCREEN_SIZE_RATIO times the fragment's own size: ‖Θ_p‖, or,
 *     when larger, the RMS value of all of Θ times √n_p (so a fragment
 *     of zeros, biases at the start, is not open to any answer); or
 *   - beyond normOutlier times the median of the norms per step of the
 *     fragment's last SCREEN_HISTORY merged answers, once it holds
 *     SCREEN_HISTORY_MIN of them.
 * Per step, since an answer's norm grows with the steps it holds, which
 * vary tenfold at long H. The state is its own: the core tells it ‖Θ_p‖
 * after every outer step and the norms it merged.
 */
#ifndef DDILOCO_SYNCER_SCREEN_H
#define DDILOCO_SYNCER_SCREEN_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct buf;

#define SCREEN_HISTORY 16
#define SCREEN_HISTORY_MIN 4
/* no optimizer step moves parameters by a hundred times their size */
#define SCREEN_SIZE_RATIO 100.0

struct screen {
	int P;
	const int *gid;              /* fragment p's number in logs (NULL: p) */
	size_t nparams;
	size_t *numel;               /* P: each fragment's size */
	double *hist;                /* P × SCREEN_HISTORY, a ring each */
	int *hist_n, *hist_next;     /* entries held; where the next goes */
	double *theta_norm;          /* P: ‖Θ_p‖, in double */
	uint64_t size_refused, history_refused;
};

enum screen_verdict { SCREEN_PASS, SCREEN_SIZE, SCREEN_HISTORY_OUTLIER };

int screen_init(struct screen *sc, int P, const size_t *numel,
		size_t nparams);
void screen_release(struct screen *sc);
/* Fragment p of Θ is now theta (numel[p] values): its norm is kept. */
void screen_theta(struct screen *sc, int p, const float *theta);
/*
 * The screens for an answer to fragment p (outlier: normOutlier).
 * A refusal is counted and logged, naming the learner and round.
 */
enum screen_verdict screen_answer(struct screen *sc, int learner, int p,
				  uint64_t round, double norm, uint64_t steps,
				  double outlier);
/* A merged answer's norm per step joins fragment p's history. */
void screen_merged(struct screen *sc, int p, double norm_step);
/* The median of fragment p's history; -1 while it holds too few. */
double screen_median(const struct screen *sc, int p);
/* Its Prometheus lines. */
void screen_metrics(const struct screen *sc, struct buf *b);

#endif
