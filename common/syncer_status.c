/*
 * syncer_status: GET and parse the syncer's /status; see syncer_status.h.
 * The parse fills a local struct field by field and hands it over only
 * when every field read well; eval_history is its one allocation.
 */
#include "common/syncer_status.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"

void syncer_status_init(struct syncer_status *s)
{
	memset(s, 0, sizeof(*s));
	s->eval_loss = s->uptime = s->goodput = s->elapsed = NAN;
	s->uptime_span = NAN;
	s->ckpt.last_ok_time = NAN;
	s->pace.h = s->pace.h_effective = s->pace.steps_per_round = NAN;
	s->pace.steps_per_round_effective = s->pace.kth_steps = NAN;
	s->pace.steps_skipped = NAN;
	s->gpb.learner_seconds = s->gpb.merged = s->gpb.late = NAN;
	s->gpb.refused = s->gpb.overwritten = s->gpb.restarts = NAN;
	s->gpb.in_flight = s->gpb.not_training = s->gpb.merged_again = NAN;
	s->ckpt.fits = -1;
}

void syncer_status_release(struct syncer_status *s)
{
	free(s->evals);
	s->evals = NULL;
	s->nevals = 0;
}

void syncer_status_move(struct syncer_status *dst, struct syncer_status *src)
{
	syncer_status_release(dst);
	*dst = *src;
	src->evals = NULL;
	src->nevals = 0;
}

/* o.k (or k alone when at is NULL) for messages. */
static const char *field(const char *at, const char *k, char *b, size_t n)
{
	if (!at)
		return k;
	snprintf(b, n, "%s.%s", at, k);
	return b;
}

/* A count: 0 when absent or null; a whole number >= 0 otherwise. */
static int get_count(const json_t *o, const char *at, const char *k,
		     uint64_t *out, struct err *e)
{
	const json_t *v = json_object_get(o, k);
	char name[64];
	double d;

	*out = 0;
	if (!v || json_is_null(v))
		return 0;
	if (json_is_integer(v) && json_integer_value(v) >= 0) {
		*out = (uint64_t)json_integer_value(v);
		return 0;
	}
	/* 2^64 is exactly representable; every whole double below it fits */
	d = json_is_real(v) ? json_real_value(v) : -1;
	if (d >= 0 && d < 18446744073709551616.0 && floor(d) == d) {
		*out = (uint64_t)d;
		return 0;
	}
	return err_set(e, "status: field '%s': not a count",
		       field(at, k, name, sizeof(name)));
}

static int get_int(const json_t *o, const char *k, int *out, struct err *e)
{
	uint64_t v;

	if (get_count(o, NULL, k, &v, e))
		return -1;
	if (v > INT_MAX)
		return err_set(e, "status: field '%s': %llu is too large", k,
			       (unsigned long long)v);
	*out = (int)v;
	return 0;
}

/* A figure: NAN when absent or null; any JSON number otherwise. */
static int get_figure(const json_t *o, const char *at, const char *k,
		      double *out, struct err *e)
{
	const json_t *v = json_object_get(o, k);
	char name[64];

	*out = NAN;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_number(v))
		return err_set(e, "status: field '%s': not a number",
			       field(at, k, name, sizeof(name)));
	*out = json_number_value(v);
	return 0;
}

static int get_history(const json_t *h, struct syncer_status *s, struct err *e)
{
	size_t n;

	if (!h || json_is_null(h))
		return 0;
	if (!json_is_array(h))
		return err_set(e, "status: field 'eval_history': not an array");
	n = json_array_size(h);
	if (n > SYNCER_STATUS_MAX_EVALS)
		n = SYNCER_STATUS_MAX_EVALS;   /* the newest are dropped: keep the start */
	if (!n)
		return 0;
	s->evals = calloc(n, sizeof(*s->evals));
	if (!s->evals)
		return err_set(e, "status: out of memory");
	for (size_t i = 0; i < n; i++) {
		const json_t *ev = json_array_get(h, i);
		struct syncer_eval *x = &s->evals[i];
		char at[48];

		snprintf(at, sizeof(at), "eval_history[%zu]", i);
		if (!json_is_object(ev))
			return err_set(e, "status: field '%s': not an object", at);
		if (get_count(ev, at, "round", &x->round, e) ||
		    get_count(ev, at, "tokens", &x->tokens, e) ||
		    get_figure(ev, at, "loss", &x->loss, e) ||
		    get_figure(ev, at, "time", &x->time, e))
			return -1;
		s->nevals = i + 1;
	}
	return 0;
}

/* "pace" and "goodput_breakdown": objects of figures (docs/status.md). */
static int get_pace(const json_t *root, struct syncer_status *s, struct err *e)
{
	const json_t *o = json_object_get(root, "pace");
	const json_t *g = json_object_get(root, "goodput_breakdown");
	const char *P = "pace", *G = "goodput_breakdown";

	if ((o && !json_is_object(o) && !json_is_null(o)) ||
	    (g && !json_is_object(g) && !json_is_null(g)))
		return err_set(e, "status: field '%s': not an object",
			       o && !json_is_object(o) && !json_is_null(o) ? P : G);
	return get_figure(o, P, "h", &s->pace.h, e) ||
	       get_figure(o, P, "h_effective", &s->pace.h_effective, e) ||
	       get_figure(o, P, "steps_per_round", &s->pace.steps_per_round, e) ||
	       get_figure(o, P, "steps_per_round_effective",
			  &s->pace.steps_per_round_effective, e) ||
	       get_figure(o, P, "kth_steps", &s->pace.kth_steps, e) ||
	       get_figure(o, P, "steps_skipped", &s->pace.steps_skipped, e) ||
	       get_count(o, P, "rounds", &s->pace.rounds, e) ||
	       get_figure(g, G, "learner_seconds", &s->gpb.learner_seconds, e) ||
	       get_figure(g, G, "merged", &s->gpb.merged, e) ||
	       get_figure(g, G, "late", &s->gpb.late, e) ||
	       get_figure(g, G, "refused", &s->gpb.refused, e) ||
	       get_figure(g, G, "overwritten", &s->gpb.overwritten, e) ||
	       get_figure(g, G, "restarts", &s->gpb.restarts, e) ||
	       get_figure(g, G, "in_flight", &s->gpb.in_flight, e) ||
	       get_figure(g, G, "not_training", &s->gpb.not_training, e) ||
	       get_figure(g, G, "merged_again", &s->gpb.merged_again, e) ? -1 : 0;
}

/* "checkpoint.mark": {failing, error, failures, covered_round, holding}
 * (docs/status.md); absent or null from an older syncer. */
static int get_mark(const json_t *ck, struct syncer_status *s, struct err *e)
{
	const json_t *o = json_object_get(ck, "mark"), *f, *m, *h;
	const char *C = "checkpoint.mark";

	if (!o || json_is_null(o))
		return 0;
	if (!json_is_object(o))
		return err_set(e, "status: field 'checkpoint.mark': not an "
			       "object");
	f = json_object_get(o, "failing");
	m = json_object_get(o, "error");
	h = json_object_get(o, "holding");
	if ((f && !json_is_boolean(f) && !json_is_null(f)) ||
	    (h && !json_is_boolean(h) && !json_is_null(h)))
		return err_set(e, "status: field 'checkpoint.mark.%s': not a "
			       "boolean", f && !json_is_boolean(f) &&
			       !json_is_null(f) ? "failing" : "holding");
	if (m && !json_is_string(m) && !json_is_null(m))
		return err_set(e, "status: field 'checkpoint.mark.error': not a "
			       "string");
	if (get_count(o, C, "failures", &s->ckpt.mark_failures, e) ||
	    get_count(o, C, "covered_round", &s->ckpt.mark_covered_round, e))
		return -1;
	s->ckpt.mark_failing = json_is_true(f);
	s->ckpt.mark_holding = json_is_true(h);
	snprintf(s->ckpt.mark_error, sizeof(s->ckpt.mark_error), "%s",
		 json_is_string(m) ? json_string_value(m) : "");
	return 0;
}

/* "checkpoint": {failing, error, failures, last_ok_round, resumed_from,
 * needed_bytes, volume_free_bytes, fits, mark} (docs/status.md). */
static int get_ckpt(const json_t *root, struct syncer_status *s, struct err *e)
{
	const json_t *o = json_object_get(root, "checkpoint");
	const json_t *f, *m, *r, *from, *fits;
	const char *C = "checkpoint";

	if (!o || json_is_null(o))
		return 0;
	if (!json_is_object(o))
		return err_set(e, "status: field 'checkpoint': not an object");
	f = json_object_get(o, "failing");
	m = json_object_get(o, "error");
	r = json_object_get(o, "last_ok_round");
	from = json_object_get(o, "resumed_from");
	fits = json_object_get(o, "fits");
	if (fits && !json_is_boolean(fits) && !json_is_null(fits))
		return err_set(e, "status: field 'checkpoint.fits': not a boolean");
	if (f && !json_is_boolean(f) && !json_is_null(f))
		return err_set(e, "status: field 'checkpoint.failing': not a boolean");
	if (m && !json_is_string(m) && !json_is_null(m))
		return err_set(e, "status: field 'checkpoint.error': not a string");
	if (from && !json_is_string(from) && !json_is_null(from))
		return err_set(e, "status: field 'checkpoint.resumed_from': not a "
			       "string");
	if (get_count(o, C, "failures", &s->ckpt.failures, e) ||
	    get_count(o, C, "last_ok_round", &s->ckpt.last_ok_round, e) ||
	    get_figure(o, C, "last_ok_time", &s->ckpt.last_ok_time, e) ||
	    get_count(o, C, "needed_bytes", &s->ckpt.needed_bytes, e) ||
	    get_count(o, C, "volume_free_bytes", &s->ckpt.volume_free_bytes, e) ||
	    get_mark(o, s, e))
		return -1;
	s->ckpt.have = 1;
	s->ckpt.fits = json_is_boolean(fits) ? json_is_true(fits) : -1;
	s->ckpt.failing = json_is_true(f);
	s->ckpt.have_last_ok = r && !json_is_null(r);
	snprintf(s->ckpt.error, sizeof(s->ckpt.error), "%s",
		 json_is_string(m) ? json_string_value(m) : "");
	snprintf(s->ckpt.resumed_from, sizeof(s->ckpt.resumed_from), "%s",
		 json_is_string(from) ? json_string_value(from) : "");
	return 0;
}

/* "claims": {cut, excluded: [learner ids]}; absent or null from an older
 * syncer (have_claims 0). */
static int get_claims(const json_t *root, struct syncer_status *s,
		      struct err *e)
{
	const json_t *o = json_object_get(root, "claims"), *ex, *v;
	size_t i;
	int last = -1;

	if (!o || json_is_null(o))
		return 0;
	if (!json_is_object(o))
		return err_set(e, "status: field 'claims': not an object");
	if (get_count(o, "claims", "cut", &s->claims_cut, e))
		return -1;
	ex = json_object_get(o, "excluded");
	if (ex && !json_is_null(ex) && !json_is_array(ex))
		return err_set(e, "status: field 'claims.excluded': not a list");
	json_array_foreach(ex, i, v) {
		json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;

		if (id < 0 || id > INT_MAX || id <= last)
			return err_set(e, "status: field 'claims.excluded': "
				       "item %zu is not a learner id above the "
				       "one before it", i);
		last = (int)id;
		if (s->nexcluded < SYNCER_STATUS_MAX_EXCLUDED)
			s->excluded[s->nexcluded] = (int)id;
		s->nexcluded++;
	}
	s->have_claims = 1;
	return 0;
}

static int get_fields(const json_t *root, struct syncer_status *s,
		      struct err *e)
{
	const json_t *a = json_object_get(root, "answers");
	const json_t *inv = json_object_get(root, "invariants");
	const json_t *hb = json_object_get(root, "heartbeats");
	const json_t *done = json_object_get(root, "done");

	if (done && !json_is_boolean(done) && !json_is_null(done))
		return err_set(e, "status: field 'done': not a boolean");
	s->done = json_is_true(done);
	if (a && !json_is_object(a) && !json_is_null(a))
		return err_set(e, "status: field 'answers': not an object");
	if (inv && !json_is_object(inv) && !json_is_null(inv))
		return err_set(e, "status: field 'invariants': not an object");
	if (hb && !json_is_object(hb) && !json_is_null(hb))
		return err_set(e, "status: field 'heartbeats': not an object");
	s->have_invariants = json_is_object(inv);
	if (get_count(root, NULL, "round", &s->round, e) ||
	    get_count(root, NULL, "tokens", &s->tokens, e) ||
	    get_count(root, NULL, "tokens_merged", &s->tokens_merged, e) ||
	    get_figure(root, NULL, "eval_loss", &s->eval_loss, e) ||
	    get_int(root, "learners_connected", &s->learners_connected, e) ||
	    get_int(root, "learners_total", &s->learners_total, e) ||
	    get_count(a, "answers", "merged", &s->merged, e) ||
	    get_count(a, "answers", "late", &s->late, e) ||
	    get_count(a, "answers", "rejected", &s->rejected, e) ||
	    get_count(a, "answers", "empty", &s->empty, e) ||
	    get_count(a, "answers", "stale", &s->stale, e) ||
	    get_count(a, "answers", "clipped", &s->clipped, e) ||
	    get_count(a, "answers", "refused_bounds", &s->refused_bounds, e) ||
	    get_count(a, "answers", "capped", &s->capped, e) ||
	    get_count(a, "answers", "refused_history", &s->refused_history, e) ||
	    get_count(a, "answers", "refused_size", &s->refused_size, e) ||
	    get_count(root, NULL, "steps_undone", &s->steps_undone, e) ||
	    get_count(hb, "heartbeats", "received", &s->heartbeats, e) ||
	    get_count(hb, "heartbeats", "refused", &s->heartbeats_refused, e) ||
	    get_count(inv, "invariants", "merged_steps", &s->merged_steps, e) ||
	    get_count(inv, "invariants", "double_merged_steps",
		      &s->double_merged_steps, e) ||
	    get_count(inv, "invariants", "repeat_base", &s->repeat_base, e) ||
	    get_count(inv, "invariants", "stale_held", &s->stale_held, e) ||
	    get_count(inv, "invariants", "stale_merged", &s->stale_merged, e) ||
	    get_count(root, NULL, "bytes_in", &s->bytes_in, e) ||
	    get_count(root, NULL, "bytes_out", &s->bytes_out, e) ||
	    get_figure(root, NULL, "uptime", &s->uptime, e) ||
	    get_figure(root, NULL, "uptime_span", &s->uptime_span, e) ||
	    get_figure(root, NULL, "goodput", &s->goodput, e) ||
	    get_figure(root, NULL, "elapsed", &s->elapsed, e) ||
	    get_pace(root, s, e) || get_ckpt(root, s, e) ||
	    get_claims(root, s, e) ||
	    get_int(root, "shard", &s->shard, e) ||
	    get_int(root, "shards", &s->shards, e))
		return -1;
	{
		const json_t *own = json_object_get(root, "owned");

		s->owned = json_is_array(own) ? (int)json_array_size(own) : 0;
	}
	s->shards_up = 1;
	s->shard_down = -1;
	return get_history(json_object_get(root, "eval_history"), s, e);
}

int syncer_status_parse(const char *text, size_t len, struct syncer_status *out,
			struct err *e)
{
	struct syncer_status s;
	json_error_t je;
	json_t *root;
	int rc;

	root = json_loadb(text ? text : "", text ? len : 0, 0, &je);
	if (!root)
		return err_set(e, "status: not JSON: line %d column %d: %s",
			       je.line, je.column, je.text);
	if (!json_is_object(root)) {
		json_decref(root);
		return err_set(e, "status: not a JSON object");
	}
	syncer_status_init(&s);
	rc = get_fields(root, &s, e);
	json_decref(root);
	if (rc) {
		syncer_status_release(&s);
		return -1;
	}
	*out = s;
	return 0;
}

static size_t on_body(char *p, size_t size, size_t n, void *ctx)
{
	/* a failed append (over the maximum, or out of memory) stops curl with
	 * CURLE_WRITE_ERROR; the buf keeps which it was */
	return buf_append(ctx, p, size * n) ? 0 : size * n;
}

int syncer_status_fetch(CURL *c, const char *url, double timeout,
			struct syncer_status *out, struct err *e)
{
	char cerr[CURL_ERROR_SIZE] = "";
	long ms = (long)(timeout * 1000), code = 0;
	CURL *own = NULL;
	struct buf body;
	CURLcode rc;
	struct err pe;
	int ret = -1;

	if (!c && !(c = own = curl_easy_init()))
		return err_set(e, "status: '%s': cannot start curl", url);
	curl_easy_reset(c);
	buf_init(&body, SYNCER_STATUS_MAX_BODY);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, ms > 0 ? ms : 1L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, ms > 0 ? ms : 1L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
	rc = curl_easy_perform(c);
	if (rc == CURLE_WRITE_ERROR && buf_error(&body) == BUF_TOO_LARGE) {
		err_set(e, "status: '%s': body larger than %u bytes", url,
			SYNCER_STATUS_MAX_BODY);
		goto out;
	}
	if (rc == CURLE_WRITE_ERROR && buf_error(&body)) {
		err_set(e, "status: '%s': %s", url, buf_strerror(buf_error(&body)));
		goto out;
	}
	if (rc != CURLE_OK) {
		err_set(e, "status: '%s': %s", url,
			cerr[0] ? cerr : curl_easy_strerror(rc));
		goto out;
	}
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	if (code != 200) {
		err_set(e, "status: '%s': HTTP %ld", url, code);
		goto out;
	}
	if (syncer_status_parse(body.data, body.len, out, &pe)) {
		/* "status: not JSON: ..." becomes "status: 'URL': not JSON: ..." */
		err_set(e, "status: '%s': %s", url,
			strncmp(pe.msg, "status: ", 8) ? pe.msg : pe.msg + 8);
		goto out;
	}
	ret = 0;
out:
	/* the handle must not keep pointers into this stack frame */
	curl_easy_reset(c);
	buf_release(&body);
	curl_easy_cleanup(own);
	return ret;
}
