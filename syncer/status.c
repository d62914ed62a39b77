/*
 * status: the syncer's HTTP answers, read under the state lock.
 *   /healthz  200 while the run loop keeps turning (503 after 10 s stuck)
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

#include "common/util.h"

static json_t *real_or_null(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

static json_t *status_json(struct syncer *s, double now)
{
	json_t *o = json_object(), *a;
	const struct syncer_ckpt *c = &s->acc;

	json_object_set_new(o, "job", json_string(s->js->name));
	json_object_set_new(o, "round", json_integer((json_int_t)s->rs.completed));
	a = json_array();
	for (int p = 0; p < s->P; p++)
		json_array_append_new(a, json_integer((json_int_t)s->versions[p]));
	json_object_set_new(o, "versions", a);
	json_object_set_new(o, "done", json_boolean(s->done));
	json_object_set_new(o, "tokens", json_integer((json_int_t)c->tokens_trained));
	json_object_set_new(o, "tokens_merged",
			    json_integer((json_int_t)llround(c->tokens_merged)));
	json_object_set_new(o, "eval_loss", c->nevals
			    ? real_or_null(c->evals[c->nevals - 1].loss) : json_null());
	a = json_array();
	for (uint32_t i = 0; i < c->nevals; i++)
		json_array_append_new(a, json_pack("{sI sI so sf}",
			"round", (json_int_t)c->evals[i].round,
			"tokens", (json_int_t)c->evals[i].tokens,
			"loss", real_or_null(c->evals[i].loss),
			"time", c->evals[i].time));
	json_object_set_new(o, "eval_history", a);
	json_object_set_new(o, "learners_connected",
			    json_integer(s->learners_connected));
	json_object_set_new(o, "learners_total", json_integer(s->M));
	a = json_array();
	for (int i = 0; i < s->M; i++) {
		const struct learner *l = &s->learners[i];

		json_array_append_new(a, json_pack("{si sb sI sI so so so}",
			"id", i, "connected", l->conn != NULL,
			"step", (json_int_t)l->step,
			"tokens", (json_int_t)l->tokens,
			"train_loss", l->seen ? real_or_null(l->train_loss) : json_null(),
			"step_time", l->seen ? real_or_null(l->step_time) : json_null(),
			"last_seen", l->seen ? json_real(now - l->last_seen) : json_null()));
	}
	json_object_set_new(o, "learners", a);
	json_object_set_new(o, "answers", json_pack("{sI sI sI sI}",
		"merged", (json_int_t)c->merged, "late", (json_int_t)c->late,
		"rejected", (json_int_t)c->rejected, "empty", (json_int_t)c->empty));
	json_object_set_new(o, "bytes_in", json_integer((json_int_t)c->bytes_in));
	json_object_set_new(o, "bytes_out", json_integer((json_int_t)c->bytes_out));
	json_object_set_new(o, "uptime", json_real(core_uptime(s, now)));
	json_object_set_new(o, "goodput", json_real(core_goodput(s, now)));
	json_object_set_new(o, "elapsed", json_real(core_elapsed(s, now)));
	/* beyond the contract */
	json_object_set_new(o, "fragments", json_integer(s->P));
	json_object_set_new(o, "rounds_in_flight",
			    json_integer(syncer_round_in_flight(&s->rs)));
	json_object_set_new(o, "step_time", json_real(syncer_round_step_time(&s->rs)));
	json_object_set_new(o, "last_quorum_wait", json_real(s->rs.last_quorum_wait));
	json_object_set_new(o, "last_grace", json_real(s->rs.last_grace));
	{
		char fp[20];

		snprintf(fp, sizeof(fp), "%016" PRIx64, s->ft->fingerprint);
		json_object_set_new(o, "fingerprint", json_string(fp));
	}
	return o;
}

static void metric(struct buf *b, const char *name, const char *type,
		   const char *help)
{
	buf_printf(b, "# HELP ddiloco_syncer_%s %s\n# TYPE ddiloco_syncer_%s %s\n",
		   name, help, name, type);
}

static void metrics_text(struct syncer *s, double now, struct buf *b)
{
	const struct syncer_ckpt *c = &s->acc;

	metric(b, "rounds_total", "counter", "Rounds completed (merged or empty).");
	buf_printf(b, "ddiloco_syncer_rounds_total %" PRIu64 "\n", s->rs.completed);
	metric(b, "rounds_in_flight", "gauge", "Rounds pulled and not yet merged.");
	buf_printf(b, "ddiloco_syncer_rounds_in_flight %d\n",
		   syncer_round_in_flight(&s->rs));
	metric(b, "answers_total", "counter", "Answers by outcome.");
	buf_printf(b, "ddiloco_syncer_answers_total{result=\"merged\"} %" PRIu64 "\n"
		   "ddiloco_syncer_answers_total{result=\"late\"} %" PRIu64 "\n"
		   "ddiloco_syncer_answers_total{result=\"rejected\"} %" PRIu64 "\n"
		   "ddiloco_syncer_answers_total{result=\"empty\"} %" PRIu64 "\n",
		   c->merged, c->late, c->rejected, c->empty);
	metric(b, "quorum_wait_seconds", "summary", "Time from pull to quorum.");
	buf_printf(b, "ddiloco_syncer_quorum_wait_seconds_sum %.6f\n"
		   "ddiloco_syncer_quorum_wait_seconds_count %" PRIu64 "\n",
		   s->quorum_wait_sum, s->quorum_count);
	metric(b, "grace_seconds", "summary", "Time from quorum to merge.");
	buf_printf(b, "ddiloco_syncer_grace_seconds_sum %.6f\n"
		   "ddiloco_syncer_grace_seconds_count %" PRIu64 "\n",
		   s->grace_sum, s->quorum_count);
	metric(b, "merge_seconds", "summary", "Merge and outer step time.");
	buf_printf(b, "ddiloco_syncer_merge_seconds_sum %.6f\n"
		   "ddiloco_syncer_merge_seconds_count %" PRIu64 "\n",
		   s->merge_sum, s->merge_count);
	metric(b, "bytes_in_total", "counter", "Answer payload bytes received.");
	buf_printf(b, "ddiloco_syncer_bytes_in_total %" PRIu64 "\n", c->bytes_in);
	metric(b, "bytes_out_total", "counter", "Update payload bytes sent.");
	buf_printf(b, "ddiloco_syncer_bytes_out_total %" PRIu64 "\n", c->bytes_out);
	metric(b, "tokens_trained_total", "counter", "Tokens trained, as reported.");
	buf_printf(b, "ddiloco_syncer_tokens_trained_total %" PRIu64 "\n",
		   c->tokens_trained);
	metric(b, "tokens_merged_total", "counter", "Tokens in merged answers.");
	buf_printf(b, "ddiloco_syncer_tokens_merged_total %.0f\n", c->tokens_merged);
	metric(b, "learners_connected", "gauge", "Learners with an open stream.");
	buf_printf(b, "ddiloco_syncer_learners_connected %d\n", s->learners_connected);
	metric(b, "learner_last_seen_seconds", "gauge",
	       "Seconds since each learner's last message.");
	for (int i = 0; i < s->M; i++)
		if (s->learners[i].seen)
			buf_printf(b, "ddiloco_syncer_learner_last_seen_seconds"
				   "{learner=\"%d\"} %.3f\n", i,
				   now - s->learners[i].last_seen);
	metric(b, "learner_step", "gauge", "Each learner's last reported step.");
	for (int i = 0; i < s->M; i++)
		if (s->learners[i].seen)
			buf_printf(b, "ddiloco_syncer_learner_step{learner=\"%d\"} %"
				   PRIu64 "\n", i, s->learners[i].step);
	metric(b, "fragment_version", "gauge", "Version of each global fragment.");
	for (int p = 0; p < s->P; p++)
		buf_printf(b, "ddiloco_syncer_fragment_version{fragment=\"%d\"} %"
			   PRIu64 "\n", p, s->versions[p]);
	if (c->nevals) {
		metric(b, "eval_loss", "gauge", "Latest validation loss of Θ.");
		buf_printf(b, "ddiloco_syncer_eval_loss %.6f\n",
			   c->evals[c->nevals - 1].loss);
	}
	metric(b, "uptime_ratio", "gauge", "Share of wall time at round cadence.");
	buf_printf(b, "ddiloco_syncer_uptime_ratio %.6f\n", core_uptime(s, now));
	metric(b, "goodput_ratio", "gauge",
	       "Share of learner compute that ended in a merge.");
	buf_printf(b, "ddiloco_syncer_goodput_ratio %.6f\n", core_goodput(s, now));
	metric(b, "elapsed_seconds", "gauge", "Seconds since the first start.");
	buf_printf(b, "ddiloco_syncer_elapsed_seconds %.3f\n", core_elapsed(s, now));
	metric(b, "done", "gauge", "1 once the budget is reached.");
	buf_printf(b, "ddiloco_syncer_done %d\n", s->done);
}

int status_http(void *ctx, const char *path, struct buf *body,
		const char **content_type)
{
	struct syncer *s = ctx;
	double now = clock_mono();
	int code = 200;

	pthread_mutex_lock(&s->mu);
	if (!strcmp(path, "/healthz")) {
		if (now - s->last_loop > 10.0)
			code = 503;
		buf_printf(body, code == 200 ? "ok\n" : "run loop stuck\n");
	} else if (!strcmp(path, "/readyz")) {
		code = s->ready && !s->stopping ? 200 : 503;
		buf_printf(body, code == 200 ? "ready\n" : "not ready\n");
	} else if (!strcmp(path, "/metrics")) {
		*content_type = "text/plain; version=0.0.4; charset=utf-8";
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
