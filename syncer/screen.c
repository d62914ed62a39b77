/*
 * screen: the size and history screens of the merge (screen.h). Norms
 * are in double; the history is a ring of SCREEN_HISTORY per fragment,
 * its median taken over a sorted copy (16 values).
 */
#include "syncer/screen.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/prom.h"

int screen_init(struct screen *sc, int P, const size_t *numel,
		size_t nparams)
{
	*sc = (struct screen){ .P = P, .nparams = nparams };
	sc->numel = malloc((size_t)P * sizeof(*sc->numel));
	sc->hist = calloc((size_t)P * SCREEN_HISTORY, sizeof(*sc->hist));
	sc->hist_n = calloc((size_t)P, sizeof(int));
	sc->hist_next = calloc((size_t)P, sizeof(int));
	sc->theta_norm = calloc((size_t)P, sizeof(double));
	if (!sc->numel || !sc->hist || !sc->hist_n || !sc->hist_next ||
	    !sc->theta_norm)
		return -1;
	memcpy(sc->numel, numel, (size_t)P * sizeof(*numel));
	return 0;
}

void screen_release(struct screen *sc)
{
	free(sc->numel);
	free(sc->hist);
	free(sc->hist_n);
	free(sc->hist_next);
	free(sc->theta_norm);
	memset(sc, 0, sizeof(*sc));
}

void screen_theta(struct screen *sc, int p, const float *theta)
{
	double sum = 0;

	for (size_t i = 0; i < sc->numel[p]; i++)
		sum += (double)theta[i] * (double)theta[i];
	sc->theta_norm[p] = sqrt(sum);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double screen_median(const struct screen *sc, int p)
{
	double v[SCREEN_HISTORY];
	int n = sc->hist_n[p];

	if (n < SCREEN_HISTORY_MIN)
		return -1;
	memcpy(v, sc->hist + (size_t)p * SCREEN_HISTORY, (size_t)n * sizeof(*v));
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void screen_merged(struct screen *sc, int p, double norm_step)
{
	int *next = &sc->hist_next[p];

	sc->hist[(size_t)p * SCREEN_HISTORY + (size_t)*next] = norm_step;
	*next = (*next + 1) % SCREEN_HISTORY;
	if (sc->hist_n[p] < SCREEN_HISTORY)
		sc->hist_n[p]++;
}

/* What the size screen holds an answer for fragment p to (screen.h);
 * 0 only for a model of zeros: then there is no screen. */
static double size_ref(const struct screen *sc, int p)
{
	double all = 0;

	for (int q = 0; q < sc->P; q++)
		all += sc->theta_norm[q] * sc->theta_norm[q];
	return fmax(sc->theta_norm[p],
		    sqrt(all / (double)sc->nparams * (double)sc->numel[p]));
}

enum screen_verdict screen_answer(struct screen *sc, int learner, int p,
				  uint64_t round, double norm, uint64_t steps,
				  double outlier)
{
	double per_step = norm / (double)steps;
	double med = screen_median(sc, p), ref = size_ref(sc, p);

	if (ref > 0 && per_step > SCREEN_SIZE_RATIO * ref) {
		sc->size_refused++;
		log_warn("round %" PRIu64 ": answer of learner %d for fragment "
			 "%d rejected: norm per step %.4g is more than %g times "
			 "the fragment's own size %.4g", round, learner,
			 sc->gid ? sc->gid[p] : p,
			 per_step, SCREEN_SIZE_RATIO, ref);
		return SCREEN_SIZE;
	}
	if (!(med > 0) || !(per_step > outlier * med))
		return SCREEN_PASS;
	sc->history_refused++;
	log_warn("round %" PRIu64 ": answer of learner %d for fragment %d "
		 "rejected: norm per step %.4g is more than %g times the "
		 "median %.4g of its recent merged ones", round, learner,
		 sc->gid ? sc->gid[p] : p,
		 per_step, outlier, med);
	return SCREEN_HISTORY_OUTLIER;
}

void screen_metrics(const struct screen *sc, struct buf *b)
{
	prom_counter(b, "ddiloco_syncer_answers_norm_history_refused_total",
		     "Answers refused: norm beyond normOutlier times the median "
		     "of recently merged norms (also in rejected).",
		     sc->history_refused);
	prom_counter(b, "ddiloco_syncer_answers_size_refused_total",
		     "Answers refused: norm per step beyond 100 times their "
		     "fragment of the model (also in rejected).",
		     sc->size_refused);
}
