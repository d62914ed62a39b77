/*
 * persist: the checkpoints, the last good one and the high-water mark,
 * and what this process knows of them (persist.h).
 */
#include "syncer/persist.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/prom.h"
#include "common/util.h"

void persist_init(struct persist *ps, const char *dir, uint64_t fingerprint,
		  uint32_t P, uint64_t nparams, uint32_t M)
{
	*ps = (struct persist){ .dir = dir, .fingerprint = fingerprint,
				.P = P, .nparams = nparams, .M = M };
	syncer_ckpt_remove_tmp(dir, fingerprint);
}

int persist_load(struct persist *ps, struct syncer_ckpt *c, struct err *e)
{
	char path[4096];
	uint64_t newest;
	int rc;

	rc = syncer_ckpt_load_newest(ps->dir, ps->fingerprint, ps->P,
				     ps->nparams, ps->M, c, path, sizeof(path),
				     e);
	if (rc == 1)
		ps->resumed_from = "checkpoint";
	if (rc == 0) {
		/* no rolling checkpoint loads: the last good one, if any */
		rc = syncer_ckpt_load_good(ps->dir, ps->fingerprint, ps->P,
					   ps->nparams, ps->M, c, path,
					   sizeof(path));
		if (rc == 1 && syncer_ckpt_newest_name(ps->dir, ps->fingerprint,
						       &newest) &&
		    newest > c->rounds_completed)
			ps->skip_extra = newest - c->rounds_completed;
		if (rc == 1) {
			ps->resumed_from = "last_good";
			log_warn("no rolling checkpoint loads; resuming from the "
				 "last good one, %" PRIu64 " round(s) older than "
				 "the newest checkpoint's name", ps->skip_extra);
		}
	}
	if (rc <= 0)
		return rc;
	ps->have_ok = 1;
	ps->last_ok_round = c->rounds_completed;
	log_info("resumed from '%s': round %" PRIu64 ", %" PRIu64
		 " tokens trained, %.1f s elapsed", path, c->rounds_completed,
		 c->tokens_trained, c->elapsed);
	return 1;
}

int persist_read_hwm(struct persist *ps, uint64_t *started,
		     uint64_t *versions)
{
	struct syncer_hwm h = { 0 };
	struct err e;
	int rc;

	if (!(h.versions = calloc(ps->P, sizeof(*h.versions))))
		return -1;
	rc = syncer_hwm_read(ps->dir, ps->fingerprint, ps->P, &h, &e);
	if (rc < 0)
		log_error("%s; round numbers and versions rest on the "
			  "checkpoint alone", e.msg);
	if (rc == 1) {
		if (h.rounds > *started)
			*started = h.rounds;
		for (uint32_t q = 0; q < ps->P; q++)
			if (h.versions[q] > versions[q])
				versions[q] = h.versions[q];
		ps->hwm_rounds = h.rounds;
		log_info("high-water mark: rounds up to %" PRIu64 " may have "
			 "been handed out before", h.rounds);
	}
	free(h.versions);
	return rc == 1;
}

void persist_round_started(struct persist *ps, uint64_t round,
			   const uint64_t *versions, int overlap)
{
	struct syncer_hwm h = { 0 };
	struct err e;

	if (round <= ps->hwm_rounds)
		return;
	h.rounds = round - 1 + PERSIST_HWM_ROUNDS;
	h.nfrags = ps->P;
	if (!(h.versions = calloc(ps->P, sizeof(*h.versions)))) {
		log_error("cannot write high-water mark: out of memory");
		return;
	}
	/* a version goes up once per merge: the rounds up to h.rounds and
	 * the τ in flight now at most, and the mark is the next one */
	for (uint32_t q = 0; q < ps->P; q++)
		h.versions[q] = versions[q] + PERSIST_HWM_ROUNDS +
				(uint64_t)overlap + 1;
	if (syncer_hwm_write(ps->dir, ps->fingerprint, &h, &e))
		log_error("%s", e.msg);
	else
		ps->hwm_rounds = h.rounds;
	free(h.versions);
}

int persist_save(struct persist *ps, const struct syncer_ckpt *c,
		 struct err *e)
{
	char path[4096];
	double t = clock_mono();
	struct err le;

	if (syncer_ckpt_save(ps->dir, c, 3, path, sizeof(path), &le)) {
		/* the run goes on; the next checkpoint is the retry */
		ps->failing = 1;
		ps->failures++;
		snprintf(ps->error, sizeof(ps->error), "%s", le.msg);
		return err_set(e, "%s", le.msg);
	}
	if (ps->failing)
		log_info("checkpoint '%s' written again after %" PRIu64
			 " failure(s)", path, ps->failures);
	ps->failing = 0;
	ps->have_ok = 1;
	ps->last_ok_round = c->rounds_completed;
	log_debug("checkpoint '%s' written in %.3f s", path, clock_mono() - t);
	return 0;
}

void persist_eval(struct persist *ps, uint64_t round, double loss,
		  const struct ckpt_eval *evals, uint32_t n)
{
	double best = INFINITY;
	struct err e;
	int rc;

	for (uint32_t i = 0; i < n; i++)
		if (isfinite(evals[i].loss))
			best = fmin(best, evals[i].loss);
	if (!isfinite(loss) ||
	    (isfinite(best) && loss > best + PERSIST_GOOD_MARGIN * fabs(best))) {
		log_warn("eval: round %" PRIu64 " loss %.4f is not good (best "
			 "%.4f); the last good checkpoint stays at round %" PRIu64,
			 round, loss, best, ps->good_round);
		return;
	}
	rc = syncer_ckpt_mark_good(ps->dir, ps->fingerprint, round, &e);
	if (rc < 0)
		log_error("%s", e.msg);
	else if (rc == 0)
		log_debug("eval: no checkpoint of round %" PRIu64 " to keep as "
			  "the last good one", round);
	else {
		ps->good_have = 1;
		ps->good_round = round;
		ps->good_loss = loss;
	}
}

json_t *persist_json(const struct persist *ps)
{
	json_t *err = json_null();

	/* a path that is not UTF-8 must not cost the whole /status */
	if (ps->failing && !(err = json_string(ps->error)))
		err = json_string("cannot save checkpoint (message not UTF-8)");
	return json_pack("{sb so sI so so ss}",
		"failing", ps->failing,
		"error", err,
		"failures", (json_int_t)ps->failures,
		"last_ok_round", ps->have_ok
			? json_integer((json_int_t)ps->last_ok_round)
			: json_null(),
		"last_good_round", ps->good_have
			? json_integer((json_int_t)ps->good_round)
			: json_null(),
		"resumed_from", ps->resumed_from ? ps->resumed_from : "new");
}

void persist_metrics(const struct persist *ps, struct buf *b)
{
	prom_counter(b, "ddiloco_syncer_checkpoint_failures_total",
		     "Checkpoints that could not be written, since this process "
		     "started.", ps->failures);
	prom_gauge(b, "ddiloco_syncer_checkpoint_failing",
		   "1 while the last checkpoint write failed.", ps->failing);
	prom_gauge(b, "ddiloco_syncer_checkpoint_started_over",
		   "1 when no checkpoint loaded at start although the "
		   "high-water mark says rounds were handed out before.",
		   ps->resumed_from && !strcmp(ps->resumed_from, "seed"));
}
