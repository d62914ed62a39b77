/*
 * httpd: a small HTTP server on libmicrohttpd for /healthz, /readyz,
 * /metrics and /status. It knows nothing of its users: each GET is handed
 * to one handler that fills a buf and returns a status code.
 *
 * The handler runs on any of the server's HTTPD_POOL threads, several at
 * once; it must lock whatever state it reads.
 *
 * The limits (docs/security.md, Listeners):
 */
#define HTTPD_POOL 4               /* threads, each serving its share */
#define HTTPD_MAX_CONNS 2048u      /* in all, from any addresses */
#define HTTPD_IDLE_TIMEOUT 10      /* seconds of silence */
#define HTTPD_REQUEST_DEADLINE 5.0 /* seconds to send a whole request */
#ifndef DDILOCO_HTTPD_H
#define DDILOCO_HTTPD_H

#include "common/buf.h"
#include "common/err.h"

struct httpd;

/*
 * Fills body (and *content_type, a static string) for a GET of path;
 * returns the HTTP status (200, 404, 503, ...).
 */
typedef int (*httpd_handler)(void *ctx, const char *path, struct buf *body,
			     const char **content_type);

/* Listens on addr:port (port 0: any free port, see httpd_port). */
struct httpd *httpd_start(const char *addr, int port, httpd_handler fn,
			  void *ctx, struct err *e);
int httpd_port(const struct httpd *h);

/* What the server holds now and has done since it started. */
struct httpd_counts {
	unsigned connections;   /* open now */
	unsigned limit;         /* at most */
	unsigned long cut;      /* closed at HTTPD_REQUEST_DEADLINE */
};
void httpd_counts(struct httpd *h, struct httpd_counts *out);
void httpd_stop(struct httpd *h);

#endif
