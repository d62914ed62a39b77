/*
 * fakeapi: a tiny HTTP server on libmicrohttpd that answers like the
 * Kubernetes API server, for the operator's unit tests (kube, informer,
 * chaos_ctl): the code under test talks to it through its real client
 * (struct kube on libcurl) over loopback, so nothing in operator/ needs
 * a seam of its own.
 *
 * A test gives one function that answers each request: a code and a
 * body, or a stream (a watch) whose body is sent and then held open for
 * `hold` seconds before it ends, as the server ends a watch. Every
 * request is logged (method, path with query, Accept, body) for asserts.
 *
 * Header-only, all `static inline`: each test binary is one file
 * (Makefile), and not every test uses every helper.
 */
#ifndef DDILOCO_TEST_FAKEAPI_H
#define DDILOCO_TEST_FAKEAPI_H

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "operator/kube.h"

#define FAKE_LOG_MAX 512

struct fake_req {
	char method[8];
	char url[1024];               /* path and query */
	char accept[128];             /* the Accept header, "" when none */
	char *body;                   /* "" when none */
};

struct fake_reply {
	int code;                     /* 200 when left 0 */
	char *body;                   /* malloc'd; NULL: empty */
	double hold;                  /* > 0: a stream held open this long */
};

typedef void (*fake_fn)(void *ctx, const struct fake_req *rq,
			struct fake_reply *rp);

struct fakeapi {
	struct MHD_Daemon *d;
	struct kube_config cfg;       /* server http://127.0.0.1:port */
	fake_fn fn;
	void *ctx;
	pthread_mutex_t mu;           /* log, and fn is called under it */
	struct fake_req log[FAKE_LOG_MAX];
	int nlog;
	volatile int stopping;
};

/* ---- replies ---------------------------------------------------------- */

static inline void fake_text(struct fake_reply *rp, int code, const char *text)
{
	rp->code = code;
	free(rp->body);
	rp->body = strdup(text);
}

/* Takes j. */
static inline void fake_json(struct fake_reply *rp, int code, json_t *j)
{
	rp->code = code;
	free(rp->body);
	rp->body = json_dumps(j, JSON_COMPACT);
	json_decref(j);
}

/* A metav1.Status, as the server answers errors. */
static inline void fake_status(struct fake_reply *rp, int code,
			       const char *reason, const char *message)
{
	fake_json(rp, code, json_pack("{s:s, s:s, s:s, s:s, s:s, s:i}",
				      "kind", "Status", "apiVersion", "v1",
				      "status", "Failure", "reason", reason,
				      "message", message, "code", code));
}

/* A list: items (taken) at resourceVersion rv, with a continue token. */
static inline void fake_list(struct fake_reply *rp, json_t *items,
			     const char *rv, const char *cont)
{
	fake_json(rp, 200, json_pack("{s:s, s:s, s:{s:s, s:s}, s:o}",
				     "kind", "List", "apiVersion", "v1",
				     "metadata", "resourceVersion", rv,
				     "continue", cont ? cont : "", "items", items));
}

/* A watch stream of `lines` (one event each, "\n"-joined), held open. */
static inline void fake_watch(struct fake_reply *rp, const char *lines,
			      double hold)
{
	fake_text(rp, 200, lines);
	rp->hold = hold;
}

/* One watch line: {"type":type,"object":obj} (obj taken). */
static inline char *fake_event(const char *type, json_t *obj)
{
	json_t *ev = json_pack("{s:s, s:o}", "type", type, "object", obj);
	char *s = json_dumps(ev, JSON_COMPACT);

	json_decref(ev);
	return s;
}

/* A namespaced object with name, uid and resourceVersion. */
static inline json_t *fake_obj(const char *ns, const char *name,
			       const char *uid, const char *rv)
{
	return json_pack("{s:{s:s, s:s, s:s, s:s}}", "metadata", "namespace", ns,
			 "name", name, "uid", uid, "resourceVersion", rv);
}

/* ---- the server --------------------------------------------------------- */

struct fake_stream {
	struct fakeapi *f;
	char *body;
	size_t len;
	double until;                 /* monotonic end of the hold */
};

static inline ssize_t fake_stream_read(void *arg, uint64_t pos, char *out,
				       size_t max)
{
	struct fake_stream *s = arg;

	if (pos < s->len) {
		size_t n = s->len - (size_t)pos < max ? s->len - (size_t)pos : max;

		memcpy(out, s->body + pos, n);
		return (ssize_t)n;
	}
	/* thread per connection: waiting here holds only this stream */
	while (!s->f->stopping && clock_mono() < s->until)
		sleep_seconds(0.01);
	return MHD_CONTENT_READER_END_OF_STREAM;
}

static inline void fake_stream_free(void *arg)
{
	struct fake_stream *s = arg;

	free(s->body);
	free(s);
}

struct fake_upload {
	char *data;
	size_t len;
};

static inline enum MHD_Result
fake_query(void *arg, enum MHD_ValueKind kind, const char *key,
	   const char *value)
{
	char *url = arg;
	size_t n = strlen(url);

	(void)kind;
	snprintf(url + n, 1024 - n, "%s%s=%s", strchr(url, '?') ? "&" : "?", key,
		 value ? value : "");
	return MHD_YES;
}

static inline enum MHD_Result
fake_handle(void *arg, struct MHD_Connection *conn, const char *url,
	    const char *method, const char *version, const char *data,
	    size_t *data_size, void **con_cls)
{
	struct fakeapi *f = arg;
	struct fake_upload *up = *con_cls;
	struct fake_reply rp = { 0, NULL, 0 };
	struct fake_req *rq, tmp;
	struct MHD_Response *r;
	enum MHD_Result ret;

	(void)version;
	if (!up) {
		*con_cls = calloc(1, sizeof(*up));
		return *con_cls ? MHD_YES : MHD_NO;
	}
	if (*data_size) {
		char *d = realloc(up->data, up->len + *data_size + 1);

		if (!d)
			return MHD_NO;
		memcpy(d + up->len, data, *data_size);
		up->data = d;
		up->len += *data_size;
		up->data[up->len] = '\0';
		*data_size = 0;
		return MHD_YES;
	}
	memset(&tmp, 0, sizeof(tmp));
	snprintf(tmp.method, sizeof(tmp.method), "%s", method);
	snprintf(tmp.url, sizeof(tmp.url), "%s", url);
	MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, fake_query, tmp.url);
	{
		const char *acc = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
							      "Accept");

		snprintf(tmp.accept, sizeof(tmp.accept), "%s", acc ? acc : "");
	}
	tmp.body = strdup(up->data ? up->data : "");
	free(up->data);
	free(up);
	*con_cls = NULL;

	pthread_mutex_lock(&f->mu);
	rq = f->nlog < FAKE_LOG_MAX ? &f->log[f->nlog++] : &tmp;
	if (rq != &tmp)
		*rq = tmp;
	f->fn(f->ctx, rq, &rp);
	pthread_mutex_unlock(&f->mu);
	if (rq == &tmp)
		free(tmp.body);

	if (rp.hold > 0) {
		struct fake_stream *s = calloc(1, sizeof(*s));

		if (!s) {
			free(rp.body);
			return MHD_NO;
		}
		s->f = f;
		s->body = rp.body ? rp.body : strdup("");
		s->len = strlen(s->body);
		s->until = clock_mono() + rp.hold;
		r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096,
						      fake_stream_read, s,
						      fake_stream_free);
	} else {
		const char *b = rp.body ? rp.body : "";

		r = MHD_create_response_from_buffer(strlen(b), (void *)b,
						    MHD_RESPMEM_MUST_COPY);
		free(rp.body);
	}
	MHD_add_response_header(r, "Content-Type", "application/json");
	ret = MHD_queue_response(conn, (unsigned)(rp.code ? rp.code : 200), r);
	MHD_destroy_response(r);
	return ret;
}

static inline void fake_done(void *arg, struct MHD_Connection *conn,
			     void **con_cls, enum MHD_RequestTerminationCode t)
{
	struct fake_upload *up = *con_cls;

	(void)arg, (void)conn, (void)t;
	if (up) {
		free(up->data);
		free(up);
		*con_cls = NULL;
	}
}

/* Listens on a free loopback port; 0 when it runs. */
static inline int fakeapi_start(struct fakeapi *f, fake_fn fn, void *ctx)
{
	const union MHD_DaemonInfo *info;

	memset(f, 0, sizeof(*f));
	f->fn = fn;
	f->ctx = ctx;
	pthread_mutex_init(&f->mu, NULL);
	f->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION |
				MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG,
				0, NULL, NULL, fake_handle, f,
				MHD_OPTION_NOTIFY_COMPLETED, fake_done, NULL,
				MHD_OPTION_END);
	if (!f->d)
		return -1;
	info = MHD_get_daemon_info(f->d, MHD_DAEMON_INFO_BIND_PORT);
	snprintf(f->cfg.server, sizeof(f->cfg.server), "http://127.0.0.1:%u",
		 (unsigned)info->port);
	return 0;
}

static inline void fakeapi_stop(struct fakeapi *f)
{
	f->stopping = 1;
	if (f->d)
		MHD_stop_daemon(f->d);
	for (int i = 0; i < f->nlog; i++)
		free(f->log[i].body);
	pthread_mutex_destroy(&f->mu);
}

/* Requests so far whose method is `method` (NULL: any) and whose path
 * with query contains `part`. */
static inline int fakeapi_count(struct fakeapi *f, const char *method,
				const char *part)
{
	int n = 0;

	pthread_mutex_lock(&f->mu);
	for (int i = 0; i < f->nlog; i++)
		if ((!method || !strcmp(f->log[i].method, method)) &&
		    strstr(f->log[i].url, part))
			n++;
	pthread_mutex_unlock(&f->mu);
	return n;
}

/* Waits up to timeout seconds for n such requests; their count. */
static inline int fakeapi_wait(struct fakeapi *f, const char *method,
			       const char *part, int n, double timeout)
{
	double until = clock_mono() + timeout;
	int got;

	while ((got = fakeapi_count(f, method, part)) < n && clock_mono() < until)
		sleep_seconds(0.01);
	return got;
}

/* The body of the i-th (from 0) such request as JSON (new), or NULL. */
static inline json_t *fakeapi_body(struct fakeapi *f, const char *method,
				   const char *part, int i)
{
	json_t *j = NULL;

	pthread_mutex_lock(&f->mu);
	for (int k = 0; k < f->nlog; k++)
		if (!strcmp(f->log[k].method, method) && strstr(f->log[k].url, part) &&
		    i-- == 0) {
			j = json_loads(f->log[k].body, 0, NULL);
			break;
		}
	pthread_mutex_unlock(&f->mu);
	return j;
}

#endif
