/*
 * kube: requests and watches over one reused CURL easy handle.
 *
 * Each request resets the handle's options (curl_easy_reset keeps live
 * connections and TLS sessions) and sets them again, so a PATCH never
 * leaks its body into the next GET. Bodies are collected into a bounded
 * buf; watch streams are cut into lines, each line bounded, and handed
 * one event at a time to the caller's function.
 */
#include "operator/kube.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/buf.h"
#include "common/log.h"
#include "common/util.h"
#include "operator/yamljson.h"

struct kube {
	CURL *curl;
	const struct kube_config *cfg;
	char token[4096];
	struct timespec token_mtime;
	long long token_size;
	char errbuf[CURL_ERROR_SIZE];
};

/* ---- config -------------------------------------------------------- */

static int b64val(int c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+' || c == '-')
		return 62;
	if (c == '/' || c == '_')
		return 63;
	return -1;
}

/* Decodes base64 (whitespace ignored) into a new buffer. */
static int b64_decode(const char *s, char **out, size_t *outlen)
{
	size_t n = strlen(s), k = 0;
	char *o = malloc(n / 4 * 3 + 4);
	unsigned acc = 0;
	int bits = 0;

	if (!o)
		return -1;
	for (size_t i = 0; i < n; i++) {
		int v;

		if (s[i] == '=' )
			break;
		if (s[i] == '\n' || s[i] == '\r' || s[i] == ' ')
			continue;
		if ((v = b64val((unsigned char)s[i])) < 0) {
			free(o);
			return -1;
		}
		acc = (acc << 6) | (unsigned)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			o[k++] = (char)((acc >> bits) & 0xff);
		}
	}
	o[k] = '\0';
	*out = o;
	*outlen = k;
	return 0;
}

static json_t *named(json_t *list, const char *name, const char *field)
{
	size_t i;
	json_t *it;

	json_array_foreach(list, i, it) {
		const char *n = json_string_value(json_object_get(it, "name"));
		if (n && !strcmp(n, name))
			return json_object_get(it, field);
	}
	return NULL;
}

static const char *str(json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

/* s into dst[n] whole: a value that does not fit is an error naming it,
 * never a shorter server, token or path (docs/operator.md, Install). */
static int put(char *dst, size_t n, const char *s, const char *what,
	       const char *path, struct err *e)
{
	size_t len = strlen(s);

	if (len >= n)
		return err_set(e, "kubeconfig '%s': %s is %zu bytes (at most %zu)",
			       path, what, len, n - 1);
	memcpy(dst, s, len + 1);
	return 0;
}

int kube_config_load(const char *path, struct kube_config *out,
		     struct err *e)
{
	void *text = NULL;
	size_t len;
	json_t *root = NULL, *ctx, *cluster, *user;
	const char *cur, *s;
	struct kube_config c;
	int rc = -1;

	memset(&c, 0, sizeof(c));
	if (file_read_all(path, 1u << 20, &text, &len, e))
		return err_wrap(e, "kubeconfig");
	if (!(root = yaml_to_json(text, len, e))) {
		err_wrap(e, "kubeconfig '%s'", path);
		goto out;
	}
	cur = str(root, "current-context");
	if (!cur) {
		err_set(e, "kubeconfig '%s': no current-context", path);
		goto out;
	}
	ctx = named(json_object_get(root, "contexts"), cur, "context");
	if (!ctx) {
		err_set(e, "kubeconfig '%s': context '%s' not found", path, cur);
		goto out;
	}
	cluster = str(ctx, "cluster") ?
		named(json_object_get(root, "clusters"), str(ctx, "cluster"), "cluster") : NULL;
	user = str(ctx, "user") ?
		named(json_object_get(root, "users"), str(ctx, "user"), "user") : NULL;
	if (!cluster || !(s = str(cluster, "server"))) {
		err_set(e, "kubeconfig '%s': context '%s' has no cluster server", path, cur);
		goto out;
	}
	for (len = strlen(s); len && s[len - 1] == '/'; len--)
		;
	if (!len) {
		err_set(e, "kubeconfig '%s': context '%s' has an empty cluster server",
			path, cur);
		goto out;
	}
	if (len >= sizeof(c.server)) {
		err_set(e, "kubeconfig '%s': cluster server is %zu bytes (at most %zu)",
			path, len, sizeof(c.server) - 1);
		goto out;
	}
	memcpy(c.server, s, len);
	if (put(c.namespace_, sizeof(c.namespace_), str(ctx, "namespace") ?
		str(ctx, "namespace") : "default", "namespace", path, e) ||
	    ((s = str(cluster, "certificate-authority")) &&
	     put(c.ca_file, sizeof(c.ca_file), s, "certificate-authority", path, e)))
		goto out;
	if ((s = str(cluster, "certificate-authority-data")) &&
	    b64_decode(s, &c.ca_pem, &c.ca_pem_len)) {
		err_set(e, "kubeconfig '%s': certificate-authority-data is not base64", path);
		goto out;
	}
	c.insecure = json_is_true(json_object_get(cluster, "insecure-skip-tls-verify"));
	if ((user && (s = str(user, "token")) &&
	     put(c.token, sizeof(c.token), s, "token", path, e)) ||
	    (user && (s = str(user, "tokenFile")) &&
	     put(c.token_file, sizeof(c.token_file), s, "tokenFile", path, e)))
		goto out;
	if (!c.token[0] && !c.token_file[0]) {
		err_set(e, "kubeconfig '%s': user of context '%s' has no token or tokenFile "
			"(only bearer tokens are supported)", path, cur);
		goto out;
	}
	*out = c;
	c.ca_pem = NULL;
	rc = 0;
out:
	free(c.ca_pem);
	json_decref(root);
	free(text);
	return rc;
}

#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

int kube_config_in_cluster(struct kube_config *out, struct err *e)
{
	const char *host = getenv("KUBERNETES_SERVICE_HOST");
	const char *port = getenv("KUBERNETES_SERVICE_PORT");
	struct kube_config c;
	void *ns = NULL;
	size_t len;

	memset(&c, 0, sizeof(c));
	if (!host || !port)
		return err_set(e, "in-cluster config: KUBERNETES_SERVICE_HOST/PORT are not set "
			       "(not in a pod? use --kubeconfig)");
	snprintf(c.server, sizeof(c.server), strchr(host, ':') ?
		 "https://[%s]:%s" : "https://%s:%s", host, port);
	snprintf(c.token_file, sizeof(c.token_file), SA_DIR "/token");
	snprintf(c.ca_file, sizeof(c.ca_file), SA_DIR "/ca.crt");
	snprintf(c.namespace_, sizeof(c.namespace_), "default");
	if (!file_read_all(SA_DIR "/namespace", 256, &ns, &len, NULL)) {
		snprintf(c.namespace_, sizeof(c.namespace_), "%.*s", (int)len, (char *)ns);
		c.namespace_[strcspn(c.namespace_, "\r\n ")] = '\0';
		free(ns);
	}
	*out = c;
	return 0;
}

void kube_config_release(struct kube_config *c)
{
	free(c->ca_pem);
	c->ca_pem = NULL;
}

/* ---- status -------------------------------------------------------- */

void kube_status_decode(const char *body, size_t len, int http_code,
			struct kube_status *out)
{
	json_t *j = body && len ? json_loadb(body, len, 0, NULL) : NULL;
	const char *kind = json_string_value(json_object_get(j, "kind"));

	memset(out, 0, sizeof(*out));
	out->code = http_code;
	if (kind && !strcmp(kind, "Status")) {
		json_int_t code = json_integer_value(json_object_get(j, "code"));
		const char *r = str(j, "reason"), *m = str(j, "message");

		if (code)
			out->code = (int)code;
		snprintf(out->reason, sizeof(out->reason), "%s", r ? r : "");
		snprintf(out->message, sizeof(out->message), "%s", m ? m : "");
	} else if (body && len) {
		snprintf(out->message, sizeof(out->message), "%.*s",
			 (int)(len < 200 ? len : 200), body);
		out->message[strcspn(out->message, "\r\n")] = '\0';
	}
	json_decref(j);
}

/* ---- client -------------------------------------------------------- */

struct kube *kube_new(const struct kube_config *cfg, struct err *e)
{
	struct kube *k = calloc(1, sizeof(*k));

	if (!k || !(k->curl = curl_easy_init())) {
		free(k);
		err_set(e, "kube: cannot make a curl handle");
		return NULL;
	}
	k->cfg = cfg;
	snprintf(k->token, sizeof(k->token), "%s", cfg->token);
	return k;
}

void kube_free(struct kube *k)
{
	if (!k)
		return;
	curl_easy_cleanup(k->curl);
	free(k);
}

/* Re-reads the token file when its mtime or size changed. */
static void refresh_token(struct kube *k)
{
	struct stat st;
	void *data;
	size_t len;

	if (!k->cfg->token_file[0] || stat(k->cfg->token_file, &st))
		return;
	if (st.st_mtim.tv_sec == k->token_mtime.tv_sec &&
	    st.st_mtim.tv_nsec == k->token_mtime.tv_nsec &&
	    st.st_size == k->token_size && k->token[0])
		return;
	if (file_read_all(k->cfg->token_file, sizeof(k->token) - 1, &data, &len, NULL))
		return;
	snprintf(k->token, sizeof(k->token), "%.*s", (int)len, (char *)data);
	k->token[strcspn(k->token, "\r\n ")] = '\0';
	k->token_mtime = st.st_mtim;
	k->token_size = st.st_size;
	free(data);
}

struct sink {
	struct buf body;              /* its sticky error says why it stopped */
	/* watch mode */
	struct kube *k;
	kube_watch_fn fn;
	void *ctx;
	int fn_ret;
	int is_watch;
	const volatile int *stop;
};

static size_t on_body(char *p, size_t sz, size_t n, void *arg)
{
	struct sink *s = arg;
	size_t len = sz * n;

	if (buf_append(&s->body, p, len))
		return 0;
	return len;
}

int kube_watch_lines(struct buf *body, kube_watch_fn fn, void *ctx)
{
	char *start = body->data, *nl;
	size_t left = body->len;
	int r = 0;

	while (left && (nl = memchr(start, '\n', left))) {
		size_t n = (size_t)(nl - start);
		enum kube_event type;
		json_t *obj;
		struct kube_status st;
		struct err e;

		left -= n + 1;
		start = nl + 1;
		if (n && !kube_watch_parse(nl - n, n, &type, &obj, &st, &e)) {
			r = fn(ctx, type, obj);
			json_decref(obj);
			if (r)
				break;
		}
	}
	if (left && start != body->data)
		memmove(body->data, start, left);
	body->len = left;
	if (body->data)
		body->data[left] = '\0';
	return r;
}

static int watch_lines(struct sink *s)
{
	int r = kube_watch_lines(&s->body, s->fn, s->ctx);

	if (r) {
		s->fn_ret = r;
		return -1;
	}
	return 0;
}

static size_t on_watch(char *p, size_t sz, size_t n, void *arg)
{
	struct sink *s = arg;
	size_t len = sz * n;
	long code = 0;

	curl_easy_getinfo(s->k->curl, CURLINFO_RESPONSE_CODE, &code);
	if (buf_append(&s->body, p, len))
		return 0;
	if (code < 200 || code >= 300)
		return len;   /* a Status: decoded at the end */
	return watch_lines(s) ? 0 : len;
}

static int on_progress(void *arg, curl_off_t a, curl_off_t b, curl_off_t c,
		       curl_off_t d)
{
	struct sink *s = arg;

	(void)a, (void)b, (void)c, (void)d;
	return s->stop && *s->stop;
}

static struct curl_slist *setup(struct kube *k, const char *method,
				const char *path, const char *ctype,
				const char *accept, const char *body,
				struct sink *s, int watch)
{
	char url[4096], auth[4200], ct[128], acc[160];
	struct curl_slist *h = NULL;
	CURL *c = k->curl;

	refresh_token(k);
	curl_easy_reset(c);
	snprintf(url, sizeof(url), "%s%s", k->cfg->server, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, k->errbuf);
	curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "https,http");
	if (k->cfg->insecure) {
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
	} else if (k->cfg->ca_pem) {
		struct curl_blob blob = { k->cfg->ca_pem, k->cfg->ca_pem_len,
					  CURL_BLOB_COPY };
		curl_easy_setopt(c, CURLOPT_CAINFO_BLOB, &blob);
	} else if (k->cfg->ca_file[0]) {
		curl_easy_setopt(c, CURLOPT_CAINFO, k->cfg->ca_file);
	}
	if (k->token[0]) {
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s", k->token);
		h = curl_slist_append(h, auth);
	}
	snprintf(acc, sizeof(acc), "Accept: %s", accept ? accept : "application/json");
	h = curl_slist_append(h, acc);
	h = curl_slist_append(h, "User-Agent: ddiloco-operator/" DDILOCO_VERSION);
	if (body) {
		snprintf(ct, sizeof(ct), "Content-Type: %s",
			 ctype ? ctype : "application/json");
		h = curl_slist_append(h, ct);
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	}
	if (strcmp(method, "GET"))
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, s);
	if (watch) {
		curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_watch);
		/* a dead stream: no byte for 2 minutes (bookmarks come sooner) */
		curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
		curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 120L);
		curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
		curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
		curl_easy_setopt(c, CURLOPT_XFERINFODATA, s);
	} else {
		curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
		curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
	}
	return h;
}

void kube_stats_init(struct kube_stats *s)
{
	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->mu, NULL);
}

void kube_stats_release(struct kube_stats *s)
{
	pthread_mutex_destroy(&s->mu);
}

void kube_stats_copy(struct kube_stats *s, struct kube_stats *out)
{
	pthread_mutex_lock(&s->mu);
	out->n = s->n;
	memcpy(out->e, s->e, sizeof(out->e));
	pthread_mutex_unlock(&s->mu);
}

static void count_answer(struct kube *k, const char *method, long code)
{
	struct kube_stats *s = k->cfg->stats;
	int i;

	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	for (i = 0; i < s->n; i++)
		if (s->e[i].code == (int)code && !strcmp(s->e[i].method, method))
			break;
	if (i == s->n && s->n < KUBE_STATS_MAX) {
		snprintf(s->e[i].method, sizeof(s->e[i].method), "%s", method);
		s->e[i].code = (int)code;
		s->n++;
	} else if (i == s->n) {
		/* the table is full: the last slot takes the rest */
		i = KUBE_STATS_MAX - 1;
		s->e[i].code = -1;
	}
	s->e[i].count++;
	pthread_mutex_unlock(&s->mu);
}

static int request(struct kube *k, const char *method, const char *path,
		   const char *ctype, const char *accept, const char *body,
		   json_t **out, struct kube_status *st, struct err *e)
{
	struct sink s;
	struct curl_slist *h;
	CURLcode cc;
	long code = 0;
	int rc = -1;

	memset(&s, 0, sizeof(s));
	memset(st, 0, sizeof(*st));
	buf_init(&s.body, KUBE_MAX_BODY);
	k->errbuf[0] = '\0';
	h = setup(k, method, path, ctype, accept, body, &s, 0);
	cc = curl_easy_perform(k->curl);
	curl_slist_free_all(h);
	if (cc == CURLE_OK)
		curl_easy_getinfo(k->curl, CURLINFO_RESPONSE_CODE, &code);
	count_answer(k, method, cc == CURLE_OK ? code : 0);
	if (buf_error(&s.body)) {
		err_set(e, "kube: %s %s: answer %s (%u bytes)", method, path,
			buf_strerror(buf_error(&s.body)), KUBE_MAX_BODY);
		goto out;
	}
	if (cc != CURLE_OK) {
		err_set(e, "kube: %s %s: %s", method, path,
			k->errbuf[0] ? k->errbuf : curl_easy_strerror(cc));
		snprintf(st->message, sizeof(st->message), "%s", curl_easy_strerror(cc));
		goto out;
	}
	curl_easy_getinfo(k->curl, CURLINFO_RESPONSE_CODE, &code);
	if (code < 200 || code >= 300) {
		kube_status_decode(s.body.data, s.body.len, (int)code, st);
		err_set(e, "kube: %s %s: %d %s: %s", method, path, st->code,
			st->reason, st->message);
		goto out;
	}
	if (out) {
		*out = NULL;
		if (s.body.len) {
			json_error_t je;

			*out = json_loadb(s.body.data, s.body.len, 0, &je);
			if (!*out) {
				err_set(e, "kube: %s %s: bad JSON: %s", method, path, je.text);
				st->code = (int)code;
				goto out;
			}
		}
	}
	rc = 0;
out:
	buf_release(&s.body);
	return rc;
}

int kube_request(struct kube *k, const char *method, const char *path,
		 const char *ctype, const char *body, json_t **out,
		 struct kube_status *st, struct err *e)
{
	return request(k, method, path, ctype, NULL, body, out, st, e);
}

int kube_get_metadata(struct kube *k, const char *path, json_t **out,
		      struct kube_status *st, struct err *e)
{
	return request(k, "GET", path, NULL, KUBE_ACCEPT_METADATA, NULL, out, st, e);
}

int kube_watch_parse(const char *line, size_t len, enum kube_event *type,
		     json_t **obj, struct kube_status *st, struct err *e)
{
	json_error_t je;
	json_t *j = json_loadb(line, len, 0, &je), *o;
	const char *t;
	enum kube_event ty;

	memset(st, 0, sizeof(*st));
	if (!j)
		return err_set(e, "kube: watch event is not JSON: %s", je.text);
	t = str(j, "type");
	o = json_object_get(j, "object");
	if (!t || !json_is_object(o)) {
		json_decref(j);
		return err_set(e, "kube: watch event without type or object");
	}
	if (!strcmp(t, "ADDED"))
		ty = KUBE_ADDED;
	else if (!strcmp(t, "MODIFIED"))
		ty = KUBE_MODIFIED;
	else if (!strcmp(t, "DELETED"))
		ty = KUBE_DELETED;
	else if (!strcmp(t, "BOOKMARK"))
		ty = KUBE_BOOKMARK;
	else if (!strcmp(t, "ERROR"))
		ty = KUBE_ERROR;
	else {
		err_set(e, "kube: unknown watch event type '%s'", t);
		json_decref(j);
		return -1;
	}
	if (ty == KUBE_ERROR) {
		char *txt = json_dumps(o, JSON_COMPACT);
		kube_status_decode(txt, txt ? strlen(txt) : 0, 500, st);
		free(txt);
	}
	*type = ty;
	*obj = json_incref(o);
	json_decref(j);
	return 0;
}

int kube_watch(struct kube *k, const char *path, kube_watch_fn fn,
	       void *ctx, const volatile int *stop, struct kube_status *st,
	       struct err *e)
{
	struct sink s;
	struct curl_slist *h;
	CURLcode cc;
	long code = 0;
	int rc = -1;

	memset(&s, 0, sizeof(s));
	memset(st, 0, sizeof(*st));
	buf_init(&s.body, KUBE_MAX_LINE);
	s.k = k;
	s.fn = fn;
	s.ctx = ctx;
	s.is_watch = 1;
	s.stop = stop;
	k->errbuf[0] = '\0';
	h = setup(k, "GET", path, NULL, NULL, NULL, &s, 1);
	cc = curl_easy_perform(k->curl);
	curl_slist_free_all(h);
	curl_easy_getinfo(k->curl, CURLINFO_RESPONSE_CODE, &code);
	count_answer(k, "WATCH", code);
	if (s.fn_ret) {
		rc = s.fn_ret;
		goto out;
	}
	if (stop && *stop) {
		rc = 0;
		goto out;
	}
	if (buf_error(&s.body)) {
		err_set(e, "kube: watch %s: one event %s (%u bytes)", path,
			buf_strerror(buf_error(&s.body)), KUBE_MAX_LINE);
		goto out;
	}
	if (code && (code < 200 || code >= 300)) {
		kube_status_decode(s.body.data, s.body.len, (int)code, st);
		err_set(e, "kube: watch %s: %d %s: %s", path, st->code, st->reason,
			st->message);
		goto out;
	}
	if (cc != CURLE_OK) {
		err_set(e, "kube: watch %s: %s", path,
			k->errbuf[0] ? k->errbuf : curl_easy_strerror(cc));
		snprintf(st->message, sizeof(st->message), "%s", curl_easy_strerror(cc));
		goto out;
	}
	rc = 0;
out:
	buf_release(&s.body);
	return rc;
}

/* ---- events -------------------------------------------------------- */

static const char *meta_str(json_t *obj, const char *field)
{
	return json_string_value(json_object_get(json_object_get(obj, "metadata"), field));
}

int kube_post_event(struct kube *k, const struct kube_event_post *ev)
{
	const char *ns = meta_str(ev->about, "namespace");
	const char *name = meta_str(ev->about, "name");
	char path[320], now[48], gen[288];
	struct kube_status st;
	struct err e;
	json_t *obj;
	char *body = NULL;
	int rc = -1;

	if (!ns || !name) {
		log_warn("event %s: the object has no namespace or name", ev->reason);
		return -1;
	}
	kube_time_now(now, sizeof(now), 0);
	if ((size_t)snprintf(path, sizeof(path), "/api/v1/namespaces/%s/events", ns) >= sizeof(path) ||
	    (size_t)snprintf(gen, sizeof(gen), "%s.", name) >= sizeof(gen)) {
		log_warn("event %s on %s/%s: name too long", ev->reason, ns, name);
		return -1;
	}
	obj = json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:s, s:s, s:s, s:s, s:s?},"
			" s:s, s:s, s:s, s:{s:s}, s:s, s:s, s:i, s:s}",
			"apiVersion", "v1", "kind", "Event",
			"metadata", "generateName", gen, "namespace", ns,
			"involvedObject", "apiVersion", ev->api_version,
			"kind", ev->kind, "name", name, "namespace", ns,
			"uid", meta_str(ev->about, "uid"),
			"reason", ev->reason, "message", ev->message,
			"type", ev->warning ? "Warning" : "Normal",
			"source", "component", ev->component,
			"firstTimestamp", now, "lastTimestamp", now, "count", 1,
			"reportingComponent", ev->component);
	if (obj && (body = json_dumps(obj, JSON_COMPACT)))
		rc = kube_request(k, "POST", path, NULL, body, NULL, &st, &e);
	else
		err_set(&e, "cannot build the Event");
	free(body);
	json_decref(obj);
	if (rc)
		log_warn("event %s on %s/%s: %s", ev->reason, ns, name, e.msg);
	else
		log_info("%s/%s: %s: %s", ns, name, ev->reason, ev->message);
	return rc;
}

/* ---- small helpers ------------------------------------------------- */

int kube_escape(const char *s, char *out, size_t n)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t k = 0;

	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		int plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			    (c >= '0' && c <= '9') || c == '-' || c == '_' ||
			    c == '.' || c == '~';

		if (k + (plain ? 1 : 3) >= n) {
			if (n)
				out[0] = '\0';   /* never a part of s */
			return -1;
		}
		if (plain) {
			out[k++] = (char)c;
		} else {
			out[k++] = '%';
			out[k++] = hex[c >> 4];
			out[k++] = hex[c & 15];
		}
	}
	out[k] = '\0';
	return 0;
}

void kube_time_now(char *out, size_t n, int micro)
{
	struct timespec ts;
	struct tm tm;
	char base[32];

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
	if (micro)
		snprintf(out, n, "%s.%06ldZ", base, ts.tv_nsec / 1000);
	else
		snprintf(out, n, "%sZ", base);
}

void kube_time_format(double t, char *out, size_t n)
{
	time_t s = (time_t)t;
	struct tm tm;

	gmtime_r(&s, &tm);
	strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

double kube_time_parse(const char *s)
{
	struct tm tm;
	const char *p;
	double frac = 0;

	if (!s)
		return -1;
	memset(&tm, 0, sizeof(tm));
	p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!p)
		return -1;
	if (*p == '.') {
		char *end;
		frac = strtod(p, &end);
		p = end;
	}
	if (strcmp(p, "Z"))
		return -1;
	return (double)timegm(&tm) + frac;
}
