/*
 * httpd: a small HTTP server on libmicrohttpd for /healthz, /readyz,
 * /metrics and /status. It knows nothing of its users: each GET is handed
 * to one handler that fills a buf and returns a status code.
 *
 * The handler runs on the server's own thread; it must lock whatever
 * state it reads.
 */
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
void httpd_stop(struct httpd *h);

#endif
