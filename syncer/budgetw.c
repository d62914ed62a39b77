/*
 * budgetw: the budget read again from the job file (budgetw.h).
 */
#include "syncer/budgetw.h"

#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>

#include "common/err.h"
#include "common/log.h"
#include "common/prom.h"

/* Whether st is the file last read; it becomes it. */
static int same_file(struct budgetw *w, const struct stat *st)
{
	int same = st->st_dev == w->dev && st->st_ino == w->ino &&
		   st->st_size == w->size &&
		   st->st_mtim.tv_sec == w->mtime.tv_sec &&
		   st->st_mtim.tv_nsec == w->mtime.tv_nsec;

	w->dev = st->st_dev;
	w->ino = st->st_ino;
	w->size = st->st_size;
	w->mtime = st->st_mtim;
	return same;
}

void budgetw_init(struct budgetw *w, const char *path,
		  const struct job_budget *b, double now)
{
	struct stat st;

	memset(w, 0, sizeof(*w));
	w->path = path;
	w->budget = *b;
	w->next = now + BUDGETW_EVERY;
	if (path && !stat(path, &st))
		same_file(w, &st);
}

int budgetw_poll(struct budgetw *w, double now)
{
	struct job_spec js;
	struct stat st;
	struct err e;

	if (!w->path || now < w->next)
		return 0;
	w->next = now + BUDGETW_EVERY;
	/* gone for a moment while it is swapped: looked at next time */
	if (stat(w->path, &st) || same_file(w, &st))
		return 0;
	if (jobspec_load(w->path, &js, &e)) {
		if (!w->failing)
			log_warn("the job file changed but does not load; the "
				 "budget stays tokens %" PRIu64 ", outer steps %"
				 PRIu64 ": %s", w->budget.tokens,
				 w->budget.outer_steps, e.msg);
		w->failing = 1;
		return 0;
	}
	w->failing = 0;
	if (js.budget.tokens == w->budget.tokens &&
	    js.budget.outer_steps == w->budget.outer_steps)
		return 0;
	log_info("budget changed: tokens %" PRIu64 " -> %" PRIu64 ", outer steps %"
		 PRIu64 " -> %" PRIu64 " (0: no limit)", w->budget.tokens,
		 js.budget.tokens, w->budget.outer_steps, js.budget.outer_steps);
	w->budget = js.budget;
	w->changes++;
	return 1;
}

void budgetw_metrics(const struct budgetw *w, struct buf *b)
{
	prom_gauge(b, "ddiloco_syncer_budget_tokens",
		   "The budget in tokens in force (0: no limit).",
		   (double)w->budget.tokens);
	prom_gauge(b, "ddiloco_syncer_budget_outer_steps",
		   "The budget in outer steps in force (0: no limit).",
		   (double)w->budget.outer_steps);
	prom_counter(b, "ddiloco_syncer_budget_changes_total",
		     "Budgets read again from the job file after the start.",
		     w->changes);
}
