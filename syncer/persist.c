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
#include <sys/statvfs.h>

#include "common/log.h"
#include "common/prom.h"
#include "common/util.h"

int persist_room(const char *dir, uint64_t fingerprint, uint32_t P,
		 uint64_t N, uint32_t M, uint64_t *needed, int64_t *free_bytes)
{
	struct statvfs v;
	uint64_t size = syncer_ckpt_file_size(P, N, M), avail;

	*needed = size > UINT64_MAX / PERSIST_FILES
		  ? UINT64_MAX : size * PERSIST_FILES;
	*free_bytes = -1;
	if (mkdir_p(dir, NULL) || statvfs(dir, &v))
		return 1;
	avail = (uint64_t)v.f_bavail * (uint64_t)v.f_frsize;
	avail += syncer_ckpt_model_bytes(dir, fingerprint);
	*free_bytes = avail > INT64_MAX ? INT64_MAX : (int64_t)avail;
	return avail >= *needed;
}

int persist_init(struct persist *ps, const char *dir, uint64_t fingerprint,
		 uint32_t P, uint32_t M, const size_t *off, const float *theta,
		 const float *mom, struct err *e)
{
	*ps = (struct persist){ .dir = dir, .fingerprint = fingerprint,
				.P = P, .nparams = off[P], .M = M,
				.mark_span = PERSIST_HWM_ROUNDS };
	syncer_ckpt_remove_tmp(dir, fingerprint);
	ps->fits = persist_room(dir, fingerprint, P, ps->nparams, M,
				&ps->needed_bytes, &ps->free_bytes);
	if (!ps->fits)
		log_error("the checkpoint volume '%s' is too small: %d "
			  "checkpoints of this model need %" PRIu64 " bytes, "
			  "%" PRId64 " are free; no learner is let in until it "
			  "is larger (spec.syncer.storage)", dir, PERSIST_FILES,
			  ps->needed_bytes, ps->free_bytes);
	return ckptw_start(&ps->w, dir, PERSIST_KEEP, P, off, theta, mom, M,
			   e);
}

int persist_room_again(struct persist *ps, double now)
{
	if (ps->fits || !ps->dir || now < ps->room_next)
		return 0;
	ps->room_next = now + PERSIST_ROOM_EVERY;
	ps->fits = persist_room(ps->dir, ps->fingerprint, ps->P, ps->nparams,
				ps->M, &ps->needed_bytes, &ps->free_bytes);
	if (ps->fits)
		log_info("the checkpoint volume '%s' has room now: %d checkpoints "
			 "of this model need %" PRIu64 " bytes, %" PRId64 " are "
			 "free; learners are let in", ps->dir, PERSIST_FILES,
			 ps->needed_bytes, ps->free_bytes);
	return ps->fits;
}

void persist_release(struct persist *ps)
{
	markw_stop(&ps->mw);
	ckptw_stop(&ps->w);
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
	ps->loaded = 1;
	ps->loaded_round = c->rounds_completed;
	ps->loaded_wall = c->wall_time;
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
	/* the rounds an earlier mark covers are taken already: the next
	 * round is past them, and waits for a mark of this process */
	if (markw_start(&ps->mw, ps->dir, ps->fingerprint, ps->P,
			ps->hwm_rounds, &e)) {
		log_error("%s", e.msg);
		return -1;
	}
	return rc == 1;
}

uint64_t persist_mark(struct persist *ps, uint64_t next,
		      const uint64_t *versions, int overlap, double now)
{
	uint64_t span;

	if (next + ps->mark_span / 2 <= markw_wanted(&ps->mw))
		return markw_covered(&ps->mw);
	/* the pace since the last ask sets the span */
	if (ps->mark_t > 0 && now > ps->mark_t && next > ps->mark_next) {
		double want = (double)(next - ps->mark_next) /
			      (now - ps->mark_t) * PERSIST_MARK_SECONDS;

		span = want > PERSIST_MARK_MAX ? PERSIST_MARK_MAX
					       : (uint64_t)want;
		ps->mark_span = span > PERSIST_HWM_ROUNDS ? span
							  : PERSIST_HWM_ROUNDS;
	}
	ps->mark_t = now;
	ps->mark_next = next;
	/* a version goes up once per merge: the rounds from next to the
	 * mark and the τ in flight now at most, and the mark is the next
	 * one */
	markw_want(&ps->mw, next - 1 + ps->mark_span, versions,
		   ps->mark_span + (uint64_t)overlap + 1);
	return markw_covered(&ps->mw);
}

void persist_mark_held(struct persist *ps, int held, double now)
{
	if (held && !ps->holding) {
		ps->holding = 1;
		ps->hold_since = now;
		ps->holds++;
	} else if (!held && ps->holding) {
		ps->holding = 0;
		ps->held_seconds += now - ps->hold_since;
	}
}

int persist_save(struct persist *ps, const struct syncer_ckpt *c, int wait,
		 struct err *e)
{
	return ckptw_submit(&ps->w, c, wait, e);
}

void persist_touch(struct persist *ps, uint32_t p)
{
	ckptw_touch(&ps->w, p);
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

json_t *persist_json(struct persist *ps)
{
	struct ckptw_outcome o;
	json_t *err = json_null();
	int have_ok;
	uint64_t ok_round;
	double ok_wall;

	ckptw_outcome(&ps->w, &o);
	have_ok = o.have_ok || ps->loaded;
	ok_round = o.have_ok ? o.last_ok_round : ps->loaded_round;
	ok_wall = o.have_ok ? o.last_ok_wall : ps->loaded_wall;
	/* a path that is not UTF-8 must not cost the whole /status */
	if (o.failing && !(err = json_string(o.error)))
		err = json_string("cannot save checkpoint (message not UTF-8)");
	return json_pack("{sb so sI so so so ss sb so sI sI sf sI so sb}",
		"failing", o.failing,
		"error", err,
		"failures", (json_int_t)o.failures,
		"last_ok_round", have_ok ? json_integer((json_int_t)ok_round)
					 : json_null(),
		"last_ok_time", have_ok && ok_wall > 0 ? json_real(ok_wall)
						       : json_null(),
		"last_good_round", ps->good_have
			? json_integer((json_int_t)ps->good_round)
			: json_null(),
		"resumed_from", ps->resumed_from ? ps->resumed_from : "new",
		"writing", o.writing,
		"writing_round", o.writing
			? json_integer((json_int_t)o.writing_round) : json_null(),
		"written", (json_int_t)o.written,
		"skipped", (json_int_t)o.skipped,
		"last_write_seconds", o.last_seconds,
		"needed_bytes", (json_int_t)ps->needed_bytes,
		"volume_free_bytes", ps->free_bytes >= 0
			? json_integer((json_int_t)ps->free_bytes) : json_null(),
		"fits", ps->fits);
}

json_t *persist_mark_json(struct persist *ps, double now)
{
	struct markw_outcome o;
	json_t *err = json_null();

	markw_outcome(&ps->mw, &o);
	if (o.failing && !(err = json_string(o.error)))
		err = json_string("cannot write high-water mark (message not "
				  "UTF-8)");
	return json_pack("{sI sI sb so sI sI sb sf sI sb sf}",
		"covered_round", (json_int_t)o.covered,
		"wanted_round", (json_int_t)o.wanted,
		"failing", o.failing,
		"error", err,
		"failures", (json_int_t)o.failures,
		"written", (json_int_t)o.written,
		"writing", o.writing,
		"writing_seconds", o.writing_seconds,
		"holds", (json_int_t)ps->holds,
		"holding", ps->holding,
		"held_seconds", ps->held_seconds +
			(ps->holding ? now - ps->hold_since : 0));
}

static void persist_mark_metrics(struct persist *ps, struct buf *b)
{
	struct markw_outcome o;

	markw_outcome(&ps->mw, &o);
	prom_gauge(b, "ddiloco_syncer_mark_covered_round",
		   "Round numbers up to this are covered by the high-water mark "
		   "on disk; rounds past it wait for the next mark.", o.covered);
	prom_counter(b, "ddiloco_syncer_mark_failures_total",
		     "High-water mark writes that failed, since this process "
		     "started.", o.failures);
	prom_gauge(b, "ddiloco_syncer_mark_failing",
		   "1 while the last high-water mark write failed.", o.failing);
	prom_counter(b, "ddiloco_syncer_mark_holds_total",
		     "Times a due pull waited for the high-water mark, since "
		     "this process started.", ps->holds);
	prom_gauge(b, "ddiloco_syncer_mark_holding",
		   "1 while a due pull waits for the high-water mark.",
		   ps->holding);
}

void persist_metrics(struct persist *ps, struct buf *b)
{
	struct ckptw_outcome o;

	ckptw_outcome(&ps->w, &o);
	prom_counter(b, "ddiloco_syncer_checkpoint_failures_total",
		     "Checkpoints that could not be written, since this process "
		     "started.", o.failures);
	prom_gauge(b, "ddiloco_syncer_checkpoint_failing",
		   "1 while the last checkpoint write failed.", o.failing);
	prom_counter(b, "ddiloco_syncer_checkpoints_written_total",
		     "Checkpoints written, since this process started.",
		     o.written);
	prom_counter(b, "ddiloco_syncer_checkpoints_skipped_total",
		     "Checkpoints not taken because the one before was still "
		     "being written, since this process started.", o.skipped);
	prom_gauge(b, "ddiloco_syncer_checkpoint_writing",
		   "1 while a checkpoint is being written (off the run loop).",
		   o.writing);
	prom_gauge(b, "ddiloco_syncer_checkpoint_write_seconds",
		   "How long the last checkpoint written took.",
		   o.last_seconds);
	prom_gauge(b, "ddiloco_syncer_checkpoint_fits",
		   "0 when the checkpoint volume cannot hold this model's "
		   "checkpoints (no learner is let in).", ps->fits);
	persist_mark_metrics(ps, b);
	prom_gauge(b, "ddiloco_syncer_checkpoint_started_over",
		   "1 when no checkpoint loaded at start although the "
		   "high-water mark says rounds were handed out before.",
		   ps->resumed_from && !strcmp(ps->resumed_from, "seed"));
}
