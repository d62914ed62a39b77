/*
 * status: the runner's view of the syncer's /status (docs/status.md):
 * one GET with libcurl into a bounded buffer, parsed with jansson. Fields
 * the runner does not use are ignored; fields missing keep zero or NAN,
 * so an older or newer syncer still shows what it has.
 */
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner/run.h"

static uint64_t get_u64(const json_t *o, const char *k)
{
	const json_t *v = json_object_get(o, k);

	if (json_is_integer(v) && json_integer_value(v) >= 0)
		return (uint64_t)json_integer_value(v);
	if (json_is_real(v) && json_real_value(v) >= 0)
		return (uint64_t)json_real_value(v);
	return 0;
}

static double get_num(const json_t *o, const char *k, double dflt)
{
	const json_t *v = json_object_get(o, k);

	return json_is_number(v) ? json_number_value(v) : dflt;
}

int run_status_parse(const char *text, size_t len, struct run_status *out,
		     struct err *e)
{
	struct run_status s;
	json_error_t je;
	json_t *root, *a, *h;

	root = json_loadb(text, len, 0, &je);
	if (!root)
		return err_set(e, "status: not JSON: line %d: %s", je.line, je.text);
	if (!json_is_object(root)) {
		json_decref(root);
		return err_set(e, "status: expected a JSON object");
	}
	memset(&s, 0, sizeof(s));
	s.round = get_u64(root, "round");
	s.tokens = get_u64(root, "tokens");
	s.tokens_merged = get_u64(root, "tokens_merged");
	s.done = json_is_true(json_object_get(root, "done"));
	s.eval_loss = get_num(root, "eval_loss", NAN);
	s.connected = (int)get_u64(root, "learners_connected");
	s.total = (int)get_u64(root, "learners_total");
	a = json_object_get(root, "answers");
	s.merged = get_u64(a, "merged");
	s.late = get_u64(a, "late");
	s.rejected = get_u64(a, "rejected");
	s.empty = get_u64(a, "empty");
	s.bytes_in = get_u64(root, "bytes_in");
	s.bytes_out = get_u64(root, "bytes_out");
	s.uptime = get_num(root, "uptime", NAN);
	s.goodput = get_num(root, "goodput", NAN);
	s.elapsed = get_num(root, "elapsed", NAN);
	h = json_object_get(root, "eval_history");
	if (json_is_array(h) && json_array_size(h) > 0) {
		size_t n = json_array_size(h);

		if (n > RUN_MAX_EVALS)
			n = RUN_MAX_EVALS;   /* the newest are dropped: keep the start */
		s.evals = calloc(n, sizeof(*s.evals));
		if (!s.evals) {
			json_decref(root);
			return err_set(e, "status: out of memory");
		}
		for (size_t i = 0; i < n; i++) {
			const json_t *ev = json_array_get(h, i);

			s.evals[s.nevals].round = get_u64(ev, "round");
			s.evals[s.nevals].tokens = get_u64(ev, "tokens");
			s.evals[s.nevals].loss = get_num(ev, "loss", NAN);
			s.evals[s.nevals].time = get_num(ev, "time", NAN);
			s.nevals++;
		}
	}
	json_decref(root);
	*out = s;
	return 0;
}

void run_status_release(struct run_status *s)
{
	free(s->evals);
	s->evals = NULL;
	s->nevals = 0;
}

void run_status_move(struct run_status *dst, struct run_status *src)
{
	run_status_release(dst);
	*dst = *src;
	src->evals = NULL;
	src->nevals = 0;
}

static size_t on_body(char *p, size_t size, size_t n, void *ctx)
{
	struct buf *b = ctx;

	if (buf_append(b, p, size * n))
		return 0;   /* over the maximum: curl stops with an error */
	return size * n;
}

int run_status_fetch(const char *addr, double timeout, struct run_status *out,
		     struct err *e)
{
	char url[300], cerr[CURL_ERROR_SIZE] = "";
	struct buf body;
	long code = 0;
	CURLcode rc;
	CURL *c;
	int ret = -1;

	snprintf(url, sizeof(url), "http://%s/status", addr);
	c = curl_easy_init();
	if (!c)
		return err_set(e, "status: cannot start curl");
	buf_init(&body, RUN_STATUS_MAX);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(timeout * 1000));
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)(timeout * 1000));
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
	rc = curl_easy_perform(c);
	if (rc != CURLE_OK) {
		if (rc == CURLE_WRITE_ERROR)
			err_set(e, "status: '%s': body larger than %u bytes", url,
				RUN_STATUS_MAX);
		else
			err_set(e, "status: '%s': %s", url,
				cerr[0] ? cerr : curl_easy_strerror(rc));
		goto out;
	}
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	if (code != 200) {
		err_set(e, "status: '%s': HTTP %ld", url, code);
		goto out;
	}
	ret = run_status_parse(body.data ? body.data : "", body.len, out, e);
out:
	buf_release(&body);
	curl_easy_cleanup(c);
	return ret;
}
