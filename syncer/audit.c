/*
 * audit: the merged-steps ledger and its counters (see audit.h).
 */
#include "syncer/audit.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/prom.h"

int audit_init(struct audit *a, int M, int P)
{
	size_t n = (size_t)M * (size_t)P;

	memset(a, 0, sizeof(*a));
	a->M = M;
	a->P = P;
	a->mark = calloc(n ? n : 1, sizeof(*a->mark));
	a->base = calloc(n ? n : 1, sizeof(*a->base));
	a->incarnation = calloc(M > 0 ? (size_t)M : 1, sizeof(*a->incarnation));
	a->max_steps = calloc(M > 0 ? (size_t)M : 1, sizeof(*a->max_steps));
	a->steps = calloc(M > 0 ? (size_t)M : 1, sizeof(*a->steps));
	a->left = calloc(n ? n : 1, sizeof(*a->left));
	a->hello_step = calloc(M > 0 ? (size_t)M : 1, sizeof(*a->hello_step));
	return a->mark && a->base && a->incarnation && a->max_steps &&
	       a->steps && a->left && a->hello_step ? 0 : -1;
}

void audit_release(struct audit *a)
{
	free(a->mark);
	free(a->base);
	free(a->incarnation);
	free(a->max_steps);
	free(a->steps);
	free(a->left);
	free(a->hello_step);
	a->mark = a->base = a->incarnation = a->max_steps = a->steps = NULL;
	a->left = a->hello_step = NULL;
}

uint64_t audit_merged_steps(const struct audit *a)
{
	uint64_t n = 0;

	for (int m = 0; m < a->M; m++)
		n += a->steps[m];
	return n;
}

void audit_incarnation(struct audit *a, int m, uint64_t incarnation)
{
	if (m < 0 || m >= a->M || !incarnation ||
	    a->incarnation[m] == incarnation)
		return;
	a->incarnation[m] = incarnation;
	memset(a->mark + (size_t)m * a->P, 0, (size_t)a->P * sizeof(*a->mark));
	memset(a->base + (size_t)m * a->P, 0, (size_t)a->P * sizeof(*a->base));
	memset(a->left + (size_t)m * a->P, 0, (size_t)a->P * sizeof(*a->left));
}

void audit_left(struct audit *a, int m, const uint64_t *versions)
{
	if (m < 0 || m >= a->M)
		return;
	for (int p = 0; p < a->P; p++)
		a->left[(size_t)m * a->P + (size_t)p] = versions[p] + 1;
}

void audit_hello(struct audit *a, int m, uint64_t step)
{
	if (m >= 0 && m < a->M)
		a->hello_step[m] = step;
}

int audit_predates(const struct audit *a, int m, int p, uint64_t step,
		   uint64_t steps, uint64_t version, int stale_versions)
{
	uint64_t lo = step > steps ? step - steps : 0, left;

	if (m < 0 || m >= a->M || p < 0 || p >= a->P || !steps)
		return 0;
	left = a->left[(size_t)m * a->P + (size_t)p];
	/* its step lo + 1 was done by the Hello, from a base of at most
	 * the version of when it left */
	return left && lo < a->hello_step[m] && version + 1 > left &&
	       version + 1 - left > (uint64_t)stale_versions;
}

void audit_merged(struct audit *a, int m, int p, uint64_t incarnation,
		  uint64_t step, uint64_t steps, uint64_t credited,
		  uint64_t base_version)
{
	size_t k = (size_t)m * a->P + (size_t)p;
	uint64_t lo = step > steps ? step - steps : 0;

	if (m < 0 || m >= a->M || p < 0 || p >= a->P)
		return;
	a->steps[m] += credited;
	if (credited > a->max_steps[m])
		a->max_steps[m] = credited;
	if (incarnation && a->incarnation[m] &&
	    incarnation != a->incarnation[m])
		return;   /* an earlier process's: outside the new marks */
	if (lo < a->mark[k]) {
		uint64_t twice = a->mark[k] - lo;

		twice = twice < steps ? twice : steps;
		a->double_merged_steps += twice;
		/* the invariant broken: what the next look needs */
		log_warn("audit: learner %d fragment %d: answer of steps (%" PRIu64
			 ", %" PRIu64 "] from base %" PRIu64 " (incarnation %" PRIu64
			 ") merged below the mark %" PRIu64 ": %" PRIu64 " step(s) "
			 "merged twice", m, a->gid ? a->gid[p] : p, lo, step,
			 base_version, incarnation,
			 a->mark[k], twice);
	}
	if (a->base[k] == base_version + 1)
		a->repeat_base++;
	a->base[k] = base_version + 1;
	if (step > a->mark[k])
		a->mark[k] = step;
}

void audit_metrics(const struct audit *a, struct buf *b)
{
	prom_counter(b, "ddiloco_syncer_answers_stale_total",
		     "Answers taken as empty: base more than staleVersions behind.",
		     a->stale);
	prom_counter(b, "ddiloco_syncer_answers_clipped_total",
		     "Answers whose weight the step and token bounds cut.",
		     a->clipped);
	prom_counter(b, "ddiloco_syncer_answers_capped_total",
		     "Merged answers whose share was held to maxShare.",
		     a->capped);
	prom_counter(b, "ddiloco_syncer_merged_steps_total",
		     "Learner steps in merged answers, since this process started.",
		     audit_merged_steps(a));
	prom_counter(b, "ddiloco_syncer_double_merged_steps_total",
		     "Learner steps merged a second time (an invariant: 0).",
		     a->double_merged_steps);
	prom_counter(b, "ddiloco_syncer_stale_held_total",
		     "Answers in a merge with progress older than staleVersions.",
		     a->stale_held);
	prom_counter(b, "ddiloco_syncer_stale_merged_total",
		     "Merged answers with progress older than staleVersions "
		     "(an invariant: 0).", a->stale_merged);
	prom_counter(b, "ddiloco_syncer_repeat_base_total",
		     "Merged answers on the base of the learner's previous one.",
		     a->repeat_base);
}
