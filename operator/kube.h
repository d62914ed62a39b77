/*
 * kube: a narrow Kubernetes API client on libcurl + jansson.
 *
 * A `struct kube` is one connection (one CURL easy handle, kept alive and
 * reused) and belongs to one thread; make one per thread from the same
 * `struct kube_config`. Every body read from the server has a maximum
 * (KUBE_MAX_BODY, KUBE_MAX_LINE for one watch event); going past it is its
 * own error. Errors from the server come back as a decoded Status
 * (code, reason, message), so callers can tell 404, 409 and 410 apart.
 *
 * Authentication is a bearer token, read from the config or from a token
 * file that is re-read when it changes (projected service-account tokens
 * rotate); the server's CA is a file or the bytes of a kubeconfig's
 * certificate-authority-data.
 */
#ifndef DDILOCO_KUBE_H
#define DDILOCO_KUBE_H

#include <jansson.h>
#include <pthread.h>
#include <stddef.h>

#include "common/err.h"

struct buf;

#define KUBE_MAX_BODY (64u << 20)   /* one list page or object */
#define KUBE_MAX_LINE (16u << 20)   /* one watch event */

/*
 * Requests answered, by method and HTTP code (0: no answer), for
 * /metrics; shared by every struct kube made from one config, so it has
 * its own lock. At most KUBE_STATS_MAX pairs; later ones are counted under
 * code -1.
 */
#define KUBE_STATS_MAX 48
struct kube_stats {
	pthread_mutex_t mu;
	int n;
	struct { char method[8]; int code; unsigned long long count; } e[KUBE_STATS_MAX];
};

void kube_stats_init(struct kube_stats *s);
void kube_stats_release(struct kube_stats *s);
/* A copy of the counts, taken under the lock. */
void kube_stats_copy(struct kube_stats *s, struct kube_stats *out_no_lock);

struct kube_config {
	char server[256];             /* https://host:port, no trailing '/' */
	char token[4096];             /* bearer token, or "" */
	char token_file[512];         /* re-read on change when set */
	char ca_file[512];            /* PEM file, or "" */
	char *ca_pem;                 /* PEM bytes (kubeconfig data), owned */
	size_t ca_pem_len;
	int insecure;                 /* skip TLS verification (tests only) */
	char namespace_[64];          /* the kubeconfig's or pod's namespace */
	struct kube_stats *stats;     /* counts every answer, or NULL */
};

/* Reads a kubeconfig file (its current context). */
int kube_config_load(const char *path, struct kube_config *out,
		     struct err *e);
/* In a pod: KUBERNETES_SERVICE_HOST/PORT and the service account files. */
int kube_config_in_cluster(struct kube_config *out, struct err *e);
void kube_config_release(struct kube_config *c);

/* What the server said when it did not say 2xx. code 0 = no answer. */
struct kube_status {
	int code;
	char reason[64];              /* e.g. "Conflict", "Expired" */
	char message[512];
};

/*
 * Decodes a body answered with HTTP code `http_code`: a metav1.Status
 * when it is one, else the first bytes of the body as the message.
 */
void kube_status_decode(const char *body, size_t len, int http_code,
			struct kube_status *out);

struct kube;

struct kube *kube_new(const struct kube_config *cfg, struct err *e);
void kube_free(struct kube *k);

/*
 * One request. path starts with '/'; body may be NULL; ctype is the
 * body's Content-Type (NULL: application/json). On 2xx returns 0 and sets
 * *out to the decoded JSON (NULL when out is NULL or the body is empty).
 * Otherwise returns -1 with *st filled (code 0 for a transport error) and
 * a message in e.
 */
int kube_request(struct kube *k, const char *method, const char *path,
		 const char *ctype, const char *body, json_t **out,
		 struct kube_status *st, struct err *e);

/*
 * A GET of one object's metadata only (a meta.k8s.io/v1
 * PartialObjectMetadata: no data, no spec), as kube_request answers: what
 * the operator reads of a Secret, so that its keys never reach it.
 */
#define KUBE_ACCEPT_METADATA \
	"application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
int kube_get_metadata(struct kube *k, const char *path, json_t **out,
		      struct kube_status *st, struct err *e);

/* One event of a watch stream. */
enum kube_event { KUBE_ADDED, KUBE_MODIFIED, KUBE_DELETED, KUBE_BOOKMARK,
		  KUBE_ERROR };

/*
 * Parses one watch line `{"type":...,"object":...}`: *type and *obj (a
 * new reference) on success. An ERROR event's object is a Status, decoded
 * into *st as well.
 */
int kube_watch_parse(const char *line, size_t len, enum kube_event *type,
		     json_t **obj, struct kube_status *st, struct err *e);

/*
 * Called for each watch event; returns 0 to go on, non-zero to stop the
 * watch (that value is then returned by kube_watch).
 */
typedef int (*kube_watch_fn)(void *ctx, enum kube_event type, json_t *obj);

/*
 * Calls fn for each complete line of a watch body received so far (lines
 * that do not parse are skipped) and keeps the incomplete tail in body;
 * returns 0, or the first non-zero fn returned (the lines after it are
 * dropped). kube_watch feeds it each chunk the server sends.
 */
int kube_watch_lines(struct buf *body, kube_watch_fn fn, void *ctx);

/*
 * Streams a watch (path with its query, `watch=1` included) until the
 * server ends it (returns 0), fn returns non-zero (returns that value),
 * *stop becomes non-zero (returns 0) or an error (-1 with *st: a 410 is
 * st->code == 410; a cut stream is code 0).
 */
int kube_watch(struct kube *k, const char *path, kube_watch_fn fn,
	       void *ctx, const volatile int *stop, struct kube_status *st,
	       struct err *e);

/*
 * An Event about obj (its metadata.name, namespace and uid are read), an
 * object of api_version/kind, reported by component: type Warning when
 * warning, else Normal. Logs the outcome; 0 when the server took it.
 */
struct kube_event_post {
	const char *component;
	const char *api_version, *kind;
	json_t *about;
	int warning;
	const char *reason, *message;
};

int kube_post_event(struct kube *k, const struct kube_event_post *ev);

/* Percent-encodes s for a query value into out (size n). */
int kube_escape(const char *s, char *out, size_t n);   /* -1 (out ""): too long */

/* RFC 3339 UTC time of the wall clock, seconds ("...Z") or micro. */
void kube_time_now(char *out, size_t n, int micro);
/* t (seconds since the epoch) as RFC 3339 UTC, seconds ("...Z"). */
void kube_time_format(double t, char *out, size_t n);
/* Parses an RFC 3339 UTC time into seconds since the epoch; -1 if bad. */
double kube_time_parse(const char *s);

#endif
