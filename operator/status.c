/*
 * status: the JSON of status.h. Times are RFC 3339 seconds; a loss that
 * is not finite (no evaluation yet) is left out rather than written as
 * null, and every condition carries the generation it was decided for.
 */
#include "operator/status.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "operator/kube.h"

void status_read_conditions(json_t *status, struct condition *conds)
{
	json_t *c;
	size_t i;

	memset(conds, 0, sizeof(struct condition) * COND_N);
	json_array_foreach(json_object_get(status, "conditions"), i, c) {
		const char *t = json_string_value(json_object_get(c, "type"));

		/* a status written before Complete was named so */
		if (t && !strcmp(t, "Succeeded"))
			t = cond_type_name(COND_COMPLETE);
		for (int k = 0; t && k < COND_N; k++) {
			const char *s, *r, *m, *tm;

			if (strcmp(t, cond_type_name((enum cond_type)k)))
				continue;
			s = json_string_value(json_object_get(c, "status"));
			r = json_string_value(json_object_get(c, "reason"));
			m = json_string_value(json_object_get(c, "message"));
			tm = json_string_value(json_object_get(c, "lastTransitionTime"));
			conds[k].set = 1;
			conds[k].status = s && !strcmp(s, "True");
			snprintf(conds[k].reason, sizeof(conds[k].reason), "%s", r ? r : "");
			snprintf(conds[k].message, sizeof(conds[k].message), "%s", m ? m : "");
			snprintf(conds[k].time, sizeof(conds[k].time), "%s", tm ? tm : "");
		}
	}
}

/* An RFC 3339 time in seconds since the epoch; 0 when absent or bad. */
static double time_of(json_t *v)
{
	double t = json_is_string(v) ? kube_time_parse(json_string_value(v)) : -1;

	return t > 0 ? t : 0;
}

void status_read_progress(json_t *j, struct obs_progress *p)
{
	json_t *loss = json_object_get(j, "eval_loss");

	if (!loss)
		loss = json_object_get(j, "loss");
	p->have = 1;
	p->round = json_integer_value(json_object_get(j, "round"));
	p->tokens = json_integer_value(json_object_get(j, "tokens"));
	p->loss = json_is_number(loss) ? json_number_value(loss) : NAN;
	p->goodput = json_number_value(json_object_get(j, "goodput"));
	p->uptime = json_number_value(json_object_get(j, "uptime"));
	p->elapsed = json_number_value(json_object_get(j, "elapsed"));
	p->done = json_is_true(json_object_get(j, "done"));
	p->update_time = time_of(json_object_get(j, "updateTime"));
	p->bytes_in = json_integer_value(json_object_get(j, "bytesIn"));
	p->bytes_out = json_integer_value(json_object_get(j, "bytesOut"));
	p->ckpt_time = time_of(json_object_get(j, "lastCheckpointTime"));
	p->excluded = -1;   /* not in the job's status: the syncer's to say */
}

/* At most n − 1 bytes of src, cut before a UTF-8 sequence it would split:
 * the condition's message must stay valid JSON text. */
static void copy_utf8(char *dst, size_t n, const char *src)
{
	size_t len = strlen(src);

	if (len >= n)
		for (len = n - 1; len > 0 && (src[len] & 0xc0) == 0x80; len--)
			;
	memcpy(dst, src, len);
	dst[len] = '\0';
}

/* A count of the syncer's as the status holds it (an int64 in JSON):
 * one past LLONG_MAX reads LLONG_MAX, never a negative number. */
static long long count_of(uint64_t v)
{
	return v > (uint64_t)LLONG_MAX ? LLONG_MAX : (long long)v;
}

static double or_zero(double v)
{
	return isnan(v) ? 0 : v;
}

/* The learners the syncer excluded, as a count and "1, 4" (the ids it
 * kept; "…" when there are more than it kept or than fit). */
static void excluded_from_syncer(const struct syncer_status *s,
				 struct obs_progress *p)
{
	size_t n = 0, cap = sizeof(p->excluded_ids);
	int kept = s->nexcluded < SYNCER_STATUS_MAX_EXCLUDED
		   ? s->nexcluded : SYNCER_STATUS_MAX_EXCLUDED, i;

	p->excluded = s->have_claims ? s->nexcluded : -1;
	p->excluded_ids[0] = '\0';
	/* an id is at most 10 digits: with ", " and ", …" 19 bytes */
	for (i = 0; i < kept && n + 19 < cap; i++)
		n += (size_t)snprintf(p->excluded_ids + n, cap - n, "%s%d",
				      i ? ", " : "", s->excluded[i]);
	if (i < s->nexcluded)
		snprintf(p->excluded_ids + n, cap - n, ", …");
}

void status_progress_from_syncer(const struct syncer_status *s,
				 struct obs_progress *p)
{
	p->have = 1;
	p->round = count_of(s->round);
	p->tokens = count_of(s->tokens);
	p->loss = s->eval_loss;       /* NAN while there is none */
	p->goodput = or_zero(s->goodput);
	p->uptime = or_zero(s->uptime);
	p->elapsed = or_zero(s->elapsed);
	p->done = s->done;
	p->bytes_in = count_of(s->bytes_in);
	p->bytes_out = count_of(s->bytes_out);
	p->ckpt_time = isfinite(s->ckpt.last_ok_time) && s->ckpt.last_ok_time > 0
		       ? s->ckpt.last_ok_time : 0;
	p->ckpt_have = s->ckpt.have;
	p->ckpt_failing = s->ckpt.failing;
	p->ckpt_failures = count_of(s->ckpt.failures);
	p->ckpt_last_ok_round = s->ckpt.have_last_ok
				? count_of(s->ckpt.last_ok_round) : -1;
	copy_utf8(p->ckpt_error, sizeof(p->ckpt_error), s->ckpt.error);
	p->mark_failing = s->ckpt.mark_failing;
	p->mark_covered_round = count_of(s->ckpt.mark_covered_round);
	copy_utf8(p->mark_error, sizeof(p->mark_error), s->ckpt.mark_error);
	p->started_over = !s->ckpt.resumed_from[0] ? -1 :
			  !strcmp(s->ckpt.resumed_from, "seed");
	excluded_from_syncer(s, p);
}

static json_t *cond_json(const struct condition *c, enum cond_type t,
			 long long gen)
{
	return json_pack("{s:s, s:s, s:s, s:s, s:s, s:I}",
			 "type", cond_type_name(t), "status", c->status ? "True" : "False",
			 "reason", c->reason, "message", c->message,
			 "lastTransitionTime", c->time, "observedGeneration", (json_int_t)gen);
}

static json_t *progress_json(const struct obs_progress *p)
{
	json_t *j = json_pack("{s:I, s:I, s:f, s:f, s:f, s:b, s:I, s:I}",
			      "round", (json_int_t)p->round,
			      "tokens", (json_int_t)p->tokens,
			      "goodput", p->goodput, "uptime", p->uptime,
			      "elapsed", p->elapsed, "done", p->done,
			      "bytesIn", (json_int_t)p->bytes_in,
			      "bytesOut", (json_int_t)p->bytes_out);

	char buf[48];

	if (j && isfinite(p->loss))
		json_object_set_new(j, "loss", json_real(p->loss));
	if (j && p->update_time > 0) {
		kube_time_format(p->update_time, buf, sizeof(buf));
		json_object_set_new(j, "updateTime", json_string(buf));
	}
	if (j && p->ckpt_time > 0) {
		kube_time_format(p->ckpt_time, buf, sizeof(buf));
		json_object_set_new(j, "lastCheckpointTime", json_string(buf));
	}
	return j;
}

json_t *status_build(const struct status_input *in)
{
	const struct rc_output *out = in->out;
	json_t *st = json_object(), *restarts = json_array(), *conds = json_array();
	json_t *failures = json_array();
	char buf[48];

	json_object_set_new(st, "observedGeneration", json_integer(in->generation));
	json_object_set_new(st, "phase", json_string(job_phase_name(out->phase)));
	if (out->start_time > 0) {
		kube_time_format(out->start_time, buf, sizeof(buf));
		json_object_set_new(st, "startTime", json_string(buf));
	}
	if (out->completion_time > 0 &&
	    (out->phase == PHASE_SUCCEEDED || out->phase == PHASE_FAILED)) {
		kube_time_format(out->completion_time, buf, sizeof(buf));
		json_object_set_new(st, "completionTime", json_string(buf));
	}
	snprintf(buf, sizeof(buf), "%d/%d", out->ready, out->total);
	json_object_set_new(st, "learnersReady", json_string(buf));
	for (int i = 0; i < in->nlearners; i++) {
		json_array_append_new(restarts, json_integer(in->learners[i].restarts));
		json_array_append_new(failures, json_integer(in->learners[i].failures));
	}
	json_object_set_new(st, "learners", json_pack("{s:i, s:i, s:i, s:o, s:o}",
		"total", out->total, "ready", out->ready, "outdated", out->outdated,
		"restarts", restarts, "failures", failures));
	json_object_set_new(st, "syncerReady", json_boolean(in->syncer_ready));
	if (in->shards >= 1) {
		json_t *sh = json_pack("{s:i, s:i}", "total", in->shards,
				       "up", in->shards_up);

		if (in->shard_down >= 0)
			json_object_set_new(sh, "down", json_integer(in->shard_down));
		json_object_set_new(st, "shards", sh);
		snprintf(buf, sizeof(buf), "%d/%d", in->shards_up, in->shards);
		json_object_set_new(st, "shardsReady", json_string(buf));
	}
	if (in->progress->have)
		json_object_set_new(st, "progress", progress_json(in->progress));
	if (in->chaos)
		json_object_set_new(st, "chaos", in->chaos);
	else if (json_object_get(in->old, "chaos"))
		json_object_set(st, "chaos", json_object_get(in->old, "chaos"));
	for (int k = 0; k < COND_N; k++)
		if (out->conds[k].set)
			json_array_append_new(conds, cond_json(&out->conds[k],
							       (enum cond_type)k,
							       in->generation));
	json_object_set_new(st, "conditions", conds);
	return st;
}

int status_should_write(json_t *old, json_t *built, double progress_every)
{
	json_t *a = json_object_get(old, "progress");
	json_t *b = json_object_get(built, "progress");
	json_t *rest_a, *rest_b;
	double ta, tb;
	int same;

	if (!json_is_object(old))
		return 1;
	rest_a = json_copy(old);
	rest_b = json_copy(built);
	json_object_del(rest_a, "progress");
	json_object_del(rest_b, "progress");
	same = json_equal(rest_a, rest_b);
	json_decref(rest_a);
	json_decref(rest_b);
	if (!same)
		return 1;
	if (json_equal(a, b) || (!a && !b))
		return 0;
	if (!a || !b)
		return 1;
	if (json_is_true(json_object_get(a, "done")) != json_is_true(json_object_get(b, "done")) ||
	    (!json_object_get(a, "loss") && json_object_get(b, "loss")))
		return 1;
	ta = time_of(json_object_get(a, "updateTime"));
	tb = time_of(json_object_get(b, "updateTime"));
	return !ta || !tb || tb - ta >= progress_every;
}
