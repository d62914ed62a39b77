/*
 * status: the syncer's HTTP answers, read under the state lock.
 *   /healthz  200 while the run loop keeps turning or is in the last
 *             evaluation (503 after 10 s stuck); read without the lock,
 *             so a merge or a checkpoint that holds it never delays the
 *             liveness probe
 *   /readyz   200 once the model is loaded and gRPC listens, until a stop
 *   /metrics  Prometheus text, names ddiloco_syncer_*
 *   /status   the JSON object of docs/status.md
 */
#include "syncer/syncer_int.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/prom.h"
#include "common/util.h"

static json_t *real_or_null(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

/* Rounds against the learners' steps (round.h, pacing). */
static json_t *pace_json(const struct syncer *s)
{
	const struct syncer_round *rs = &s->rs;
	double spr = rs->cfg.steps_per_round;
	double eff = syncer_round_steps_per_round(rs);

	return json_pack("{sf sf so so sf sI sf}",
		"h", spr * s->P, "steps_per_round", spr,
		"h_effective", eff > 0 ? json_real(eff * s->P) : json_null(),
		"steps_per_round_effective", eff > 0 ? json_real(eff) : json_null(),
		"kth_steps", syncer_round_kth_trained(rs),
		"rounds", (json_int_t)rs->paced_rounds,
		"steps_skipped", rs->steps_skipped);
}

/* "gaps": the down gaps between rounds of this process (gaplog.h). */
static json_t *gaps_json(const struct syncer *s, double now)
{
	const struct gap_log *g = &s->gaps;
	json_t *o = json_object(), *a = json_array();
	const struct gap *c;

	for (uint64_t i = GAPLOG_KEEP; i-- > 0;)
		if ((c = gaplog_get(g, i)))
			json_array_append_new(a, json_pack(
				"{sf sf sf sI sf so si si si si}",
				"at", c->at, "length", c->length, "down", c->down,
				"round", (json_int_t)c->round, "pulled", c->pulled,
				"quorum", c->quorum > -1e9 ? json_real(c->quorum)
							   : json_null(),
				"joined_start", c->joined_start,
				"joined_min", c->joined_min, "left", c->left,
				"joined", c->joins));
	json_object_set_new(o, "count", json_integer((json_int_t)g->n));
	json_object_set_new(o, "down", json_real(g->down));
	json_object_set_new(o, "longest_absent", json_real(g->longest_absent));
	json_object_set_new(o, "longest_absent_round",
			    json_integer((json_int_t)g->longest_absent_round));
	json_object_set_new(o, "open", json_real(g->open && !s->done
		? core_elapsed(s, now) - g->cur.at : 0));
	json_object_set_new(o, "last", a);
	return o;
}

static int stale_count(const struct syncer *s)
{
	int n = 0;

	for (int i = 0; i < s->M; i++)
		n += s->learners[i].stale;
	return n;
}

/* "learners": each learner as the syncer knows it. */
static json_t *learners_json(const struct syncer *s, double now)
{
	json_t *a = json_array();

	for (int i = 0; i < s->M; i++) {
		const struct learner *l = &s->learners[i];
		const struct bounds_learner *bl = &s->bounds.l[i];

		json_array_append_new(a, json_pack("{si sb sb sb sI sI sI sI sI so so so s{sI sI} so}",
			"id", i, "connected", l->conn != NULL,
			"stale", l->stale, "excluded", bl->excluded,
			"claims_cut", (json_int_t)bl->cuts,
			"step", (json_int_t)l->step,
			"tokens", (json_int_t)l->tokens,
			"merged_steps", (json_int_t)s->audit.steps[i],
			"max_answer_steps", (json_int_t)s->audit.max_steps[i],
			"train_loss", l->seen ? real_or_null(l->train_loss) : json_null(),
			"step_time", l->seen ? real_or_null(l->step_time) : json_null(),
			"last_seen", l->seen ? json_real(now - l->last_seen) : json_null(),
			"refused", "answers", (json_int_t)bl->refused_answers,
			"heartbeats", (json_int_t)bl->refused_heartbeats,
			"fates", goodput_learner_json(&s->gp, i)));
	}
	return a;
}

/* "invariants": the audit's counts (audit.h). */
static json_t *invariants_json(const struct syncer *s)
{
	return json_pack("{sI sI sI sI sI}",
		"merged_steps", (json_int_t)audit_merged_steps(&s->audit),
		"double_merged_steps", (json_int_t)s->audit.double_merged_steps,
		"repeat_base", (json_int_t)s->audit.repeat_base,
		"stale_held", (json_int_t)s->audit.stale_held,
		"stale_merged", (json_int_t)s->audit.stale_merged);
}

/* "claims": the learners' claims cut and who is excluded (bounds.h). */
static json_t *claims_json(const struct syncer *s)
{
	json_t *ids = json_array();

	for (int i = 0; i < s->M; i++)
		if (s->bounds.l[i].excluded)
			json_array_append_new(ids, json_integer(i));
	return json_pack("{sI so}", "cut", (json_int_t)s->bounds.cuts,
			 "excluded", ids);
}

/* "answers": every answer by what became of it. */
static json_t *answers_json(const struct syncer *s)
{
	const struct syncer_ckpt *c = &s->acc;

	return json_pack("{sI sI sI sI sI sI sI sI sI sI}",
		"merged", (json_int_t)c->merged, "late", (json_int_t)c->late,
		"rejected", (json_int_t)c->rejected, "empty", (json_int_t)c->empty,
		"stale", (json_int_t)s->audit.stale,
		"clipped", (json_int_t)s->audit.clipped,
		"refused_bounds", (json_int_t)s->bounds.answers_refused,
		"capped", (json_int_t)s->audit.capped,
		"refused_history", (json_int_t)s->scr.history_refused,
		"refused_size", (json_int_t)s->scr.size_refused);
}

static json_t *evals_json(const struct syncer_ckpt *c)
{
	json_t *a = json_array();

	for (uint32_t i = 0; i < c->nevals; i++)
		json_array_append_new(a, json_pack("{sI sI so sf}",
			"round", (json_int_t)c->evals[i].round,
			"tokens", (json_int_t)c->evals[i].tokens,
			"loss", real_or_null(c->evals[i].loss),
			"time", c->evals[i].time));
	return a;
}

static json_t *status_json(struct syncer *s, double now)
{
	json_t *o = json_object(), *a;
	const struct syncer_ckpt *c = &s->acc;

	json_object_set_new(o, "job", json_string(s->js->name));
	/* plaintext gRPC, no identities (docs/security.md) */
	json_object_set_new(o, "insecure", json_boolean(s->prm->tls == NULL));
	transport_json(&s->tr, o);
	json_object_set_new(o, "round", json_integer((json_int_t)s->rs.completed));
	a = json_array();
	for (int p = 0; p < s->P; p++)
		json_array_append_new(a, json_integer((json_int_t)s->versions[p]));
	json_object_set_new(o, "versions", a);
	/* which fragments those are: all, or this shard's (docs/syncer.md,
	 * Shards) */
	a = json_array();
	for (int p = 0; p < s->P; p++)
		json_array_append_new(a, json_integer(s->gid[p]));
	json_object_set_new(o, "owned", a);
	json_object_set_new(o, "shard", json_integer(s->shard));
	json_object_set_new(o, "shards", json_integer(s->nshards));
	json_object_set_new(o, "done", json_boolean(s->done));
	json_object_set_new(o, "budget", json_pack("{sI sI sI}",
		"tokens", (json_int_t)s->bw.budget.tokens,
		"outer_steps", (json_int_t)s->bw.budget.outer_steps,
		"changes", (json_int_t)s->bw.changes));
	json_object_set_new(o, "tokens", json_integer((json_int_t)c->tokens_trained));
	json_object_set_new(o, "tokens_merged",
			    json_integer((json_int_t)llround(c->tokens_merged)));
	json_object_set_new(o, "eval_loss", c->nevals
			    ? real_or_null(c->evals[c->nevals - 1].loss) : json_null());
	json_object_set_new(o, "eval_history", evals_json(c));
	json_object_set_new(o, "learners_connected",
			    json_integer(s->learners_connected));
	/* evaluators of an external model (docs/syncer.md, Evaluators) */
	json_object_set_new(o, "evaluators", eval_remote_json(&s->evr));
	json_object_set_new(o, "learners_total", json_integer(s->M));
	json_object_set_new(o, "learners_stale", json_integer(stale_count(s)));
	json_object_set_new(o, "learners", learners_json(s, now));
	json_object_set_new(o, "answers", answers_json(s));
	json_object_set_new(o, "claims", claims_json(s));
	json_object_set_new(o, "heartbeats", json_pack("{sI sI}",
		"received", (json_int_t)s->bounds.heartbeats,
		"refused", (json_int_t)s->bounds.heartbeats_refused));
	json_object_set_new(o, "invariants", invariants_json(s));
	json_object_set_new(o, "bytes_in", json_integer((json_int_t)c->bytes_in));
	json_object_set_new(o, "bytes_out", json_integer((json_int_t)c->bytes_out));
	json_object_set_new(o, "uptime", json_real(core_uptime(s, now)));
	json_object_set_new(o, "uptime_span", json_real(core_uptime_span(s, now)));
	json_object_set_new(o, "goodput", json_real(core_goodput(s, now)));
	json_object_set_new(o, "elapsed", json_real(core_elapsed(s, now)));
	json_object_set_new(o, "goodput_breakdown",
			    goodput_json(&s->gp, core_elapsed(s, now),
					 syncer_round_step_time(&s->rs)));
	json_object_set_new(o, "pace", pace_json(s));
	{
		json_t *ck = persist_json(&s->ps);

		json_object_set_new(ck, "mark", persist_mark_json(&s->ps, now));
		json_object_set_new(o, "checkpoint", ck);
	}
	json_object_set_new(o, "steps_undone",
			    json_integer((json_int_t)s->steps_undone));
	/* beyond the contract */
	json_object_set_new(o, "fragments", json_integer(s->P));
	json_object_set_new(o, "rounds_started",
			    json_integer((json_int_t)s->rs.started));
	json_object_set_new(o, "rounds_in_flight",
			    json_integer(syncer_round_in_flight(&s->rs)));
	json_object_set_new(o, "step_time", json_real(syncer_round_step_time(&s->rs)));
	json_object_set_new(o, "last_quorum_wait", json_real(s->rs.last_quorum_wait));
	json_object_set_new(o, "last_grace", json_real(s->rs.last_grace));
	json_object_set_new(o, "gaps", gaps_json(s, now));
	{
		char fp[20];

		snprintf(fp, sizeof(fp), "%016" PRIx64, s->ft->fingerprint);
		json_object_set_new(o, "fingerprint", json_string(fp));
	}
	return o;
}

#define M(name) "ddiloco_syncer_" name

/* Each learner's families: last seen, last step. */
static void learner_metrics(const struct syncer *s, double now, struct buf *b)
{
	char id[16];

	prom_family(b, M("learner_last_seen_seconds"), PROM_GAUGE,
		    "Seconds since each learner's last message.");
	for (int i = 0; i < s->M; i++)
		if (s->learners[i].seen) {
			snprintf(id, sizeof(id), "%d", i);
			prom_double(b, M("learner_last_seen_seconds"),
				    PROM_LABELS("learner", id),
				    now - s->learners[i].last_seen);
		}
	prom_family(b, M("learner_step"), PROM_GAUGE,
		    "Each learner's last reported step.");
	for (int i = 0; i < s->M; i++)
		if (s->learners[i].seen) {
			snprintf(id, sizeof(id), "%d", i);
			prom_u64(b, M("learner_step"), PROM_LABELS("learner", id),
				 s->learners[i].step);
		}
}

static void metrics_text(struct syncer *s, double now, struct buf *b)
{
	const struct syncer_ckpt *c = &s->acc;
	char id[16];

	prom_counter(b, M("rounds_total"), "Rounds completed (merged or empty).",
		     s->rs.completed);
	prom_gauge(b, M("rounds_in_flight"), "Rounds pulled and not yet merged.",
		   syncer_round_in_flight(&s->rs));
	prom_family(b, M("answers_total"), PROM_COUNTER, "Answers by outcome.");
	prom_u64(b, M("answers_total"), PROM_LABELS("result", "merged"), c->merged);
	prom_u64(b, M("answers_total"), PROM_LABELS("result", "late"), c->late);
	prom_u64(b, M("answers_total"), PROM_LABELS("result", "rejected"), c->rejected);
	prom_u64(b, M("answers_total"), PROM_LABELS("result", "empty"), c->empty);
	transport_metrics(&s->tr, b);
	audit_metrics(&s->audit, b);
	if (s->upd_on)
		updelta_metrics(&s->upd, b);
	bounds_metrics(&s->bounds, b);
	budgetw_metrics(&s->bw, b);
	screen_metrics(&s->scr, b);
	prom_family(b, M("quorum_wait_seconds"), PROM_SUMMARY, "Time from pull to quorum.");
	prom_double(b, M("quorum_wait_seconds_sum"), NULL, s->quorum_wait_sum);
	prom_u64(b, M("quorum_wait_seconds_count"), NULL, s->quorum_count);
	prom_family(b, M("grace_seconds"), PROM_SUMMARY, "Time from quorum to merge.");
	prom_double(b, M("grace_seconds_sum"), NULL, s->grace_sum);
	prom_u64(b, M("grace_seconds_count"), NULL, s->quorum_count);
	prom_family(b, M("merge_seconds"), PROM_SUMMARY, "Merge and outer step time.");
	prom_double(b, M("merge_seconds_sum"), NULL, s->merge_sum);
	prom_u64(b, M("merge_seconds_count"), NULL, s->merge_count);
	prom_counter(b, M("bytes_in_total"), "Answer payload bytes received.",
		     c->bytes_in);
	prom_counter(b, M("bytes_out_total"), "Update payload bytes sent.",
		     c->bytes_out);
	prom_counter(b, M("tokens_trained_total"), "Tokens trained, as reported.",
		     c->tokens_trained);
	prom_counter(b, M("tokens_merged_total"), "Tokens in merged answers.",
		     (uint64_t)llround(c->tokens_merged));
	prom_gauge(b, M("learners_connected"), "Learners with an open stream.",
		   s->learners_connected);
	prom_gauge(b, M("learners_stale"), "Joined learners whose step stands "
		   "still while they report: rounds do not wait for them.",
		   stale_count(s));
	eval_remote_metrics(&s->evr, b);
	prom_counter(b, M("learners_stale_total"), "Times a learner was found "
		     "stale, since the syncer process started.", s->stale_marked);
	learner_metrics(s, now, b);
	prom_family(b, M("fragment_version"), PROM_GAUGE,
		    "Version of each global fragment.");
	for (int p = 0; p < s->P; p++) {
		snprintf(id, sizeof(id), "%d", s->gid[p]);
		prom_u64(b, M("fragment_version"), PROM_LABELS("fragment", id),
			 s->versions[p]);
	}
	if (c->nevals)
		prom_gauge(b, M("eval_loss"), "Latest validation loss of Θ.",
			   c->evals[c->nevals - 1].loss);
	prom_gauge(b, M("uptime_ratio"), "Share of wall time at round cadence.",
		   core_uptime(s, now));
	prom_gauge(b, M("goodput_ratio"),
		   "Share of learner time whose training reached the global model.",
		   core_goodput(s, now));
	prom_gauge(b, M("elapsed_seconds"), "Seconds since the first start.",
		   core_elapsed(s, now));
	prom_gauge(b, M("h_effective"),
		   "P times the K-th learner's steps per round started.",
		   syncer_round_steps_per_round(&s->rs) * s->P);
	prom_gauge(b, M("done"), "1 once the budget is reached.", s->done);
	persist_metrics(&s->ps, b);
	prom_counter(b, M("steps_undone_total"),
		     "Outer steps undone because they made Θ or its momentum "
		     "non-finite, since this process started.", s->steps_undone);
}

#undef M

int status_http(void *ctx, const char *path, struct buf *body,
		const char **content_type)
{
	struct syncer *s = ctx;
	double now = clock_mono(), last;
	int code = 200, final;

	if (!strcmp(path, "/healthz")) {
		/* the last evaluation is the run loop at work, not stuck */
		__atomic_load(&s->last_loop, &last, __ATOMIC_RELAXED);
		final = __atomic_load_n(&s->final_eval, __ATOMIC_RELAXED);
		if (!final && now - last > 10.0)
			code = 503;
		buf_printf(body, final ? "ok (final evaluation)\n" : code == 200
			   ? "ok\n" : "run loop stuck\n");
		return code;
	}
	pthread_mutex_lock(&s->mu);
	if (s->adopting && !strcmp(path, "/metrics")) {
		*content_type = PROM_CONTENT_TYPE;   /* nothing to count yet */
	} else if (s->adopting && !strcmp(path, "/status")) {
		/* no model yet (docs/syncer.md, Model-agnostic jobs) */
		*content_type = "application/json";
		buf_printf(body, "{\"job\":\"%s\",\"adopting\":true,"
			   "\"round\":0,\"done\":false,\"learners_total\":%d}\n",
			   s->js->name, s->M);
	} else if (!strcmp(path, "/readyz")) {
		code = s->ready && !s->stopping ? 200 : 503;
		buf_printf(body, code == 200 ? "ready\n" : "not ready\n");
	} else if (!strcmp(path, "/metrics")) {
		*content_type = PROM_CONTENT_TYPE;
		metrics_text(s, now, body);
	} else if (!strcmp(path, "/status")) {
		json_t *o = status_json(s, now);
		char *txt = json_dumps(o, JSON_COMPACT);

		*content_type = "application/json";
		if (!txt || buf_printf(body, "%s\n", txt))
			code = 500;
		free(txt);
		json_decref(o);
	} else {
		code = 404;
		buf_printf(body, "not found\n");
	}
	pthread_mutex_unlock(&s->mu);
	return code;
}
