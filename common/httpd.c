/*
 * httpd: libmicrohttpd in internal-thread mode. Only GET and HEAD are
 * answered; request bodies are refused. Responses are built in a bounded
 * buf (16 MiB) and copied into the response.
 */
#include "common/httpd.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#define HTTPD_MAX_BODY (16u << 20)

struct httpd {
	struct MHD_Daemon *d;
	httpd_handler fn;
	void *ctx;
	int port;
};

static enum MHD_Result answer(void *cls, struct MHD_Connection *c,
			      const char *url, const char *method,
			      const char *version, const char *upload,
			      size_t *upload_size, void **con_cls)
{
	struct httpd *h = cls;
	const char *ctype = "text/plain; charset=utf-8";
	struct MHD_Response *r;
	struct buf body;
	enum MHD_Result ret;
	int status;

	(void)version;
	(void)upload;
	(void)con_cls;
	if (*upload_size)
		return MHD_NO;
	buf_init(&body, HTTPD_MAX_BODY);
	if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
		status = 405;
		buf_printf(&body, "method not allowed\n");
	} else {
		status = h->fn(h->ctx, url, &body, &ctype);
	}
	/* the handler's appends are checked here, once (buf's error is sticky) */
	if (buf_error(&body)) {
		enum buf_err be = buf_error(&body);

		status = 500;
		ctype = "text/plain; charset=utf-8";
		buf_reset(&body);
		buf_printf(&body, "response %s\n", buf_strerror(be));
	}
	if (buf_append(&body, "", 0)) /* makes data non-NULL */
		status = 500;
	r = MHD_create_response_from_buffer(body.len, body.data,
					    MHD_RESPMEM_MUST_COPY);
	buf_release(&body);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, "Content-Type", ctype);
	ret = MHD_queue_response(c, (unsigned)status, r);
	MHD_destroy_response(r);
	return ret;
}

struct httpd *httpd_start(const char *addr, int port, httpd_handler fn,
			  void *ctx, struct err *e)
{
	struct sockaddr_in sa;
	const union MHD_DaemonInfo *info;
	struct httpd *h = calloc(1, sizeof(*h));

	if (!h) {
		err_set(e, "httpd: out of memory");
		return NULL;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, addr ? addr : "0.0.0.0", &sa.sin_addr) != 1) {
		err_set(e, "httpd: bad listen address '%s'", addr);
		free(h);
		return NULL;
	}
	h->fn = fn;
	h->ctx = ctx;
	h->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD |
				MHD_USE_ERROR_LOG, (uint16_t)port, NULL, NULL,
				answer, h, MHD_OPTION_SOCK_ADDR, &sa,
				MHD_OPTION_CONNECTION_LIMIT, 64u,
				MHD_OPTION_CONNECTION_TIMEOUT, 10u,
				MHD_OPTION_END);
	if (!h->d) {
		err_set(e, "httpd: cannot listen on %s:%d", addr ? addr : "0.0.0.0",
			port);
		free(h);
		return NULL;
	}
	info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
	h->port = info ? info->port : port;
	return h;
}

int httpd_port(const struct httpd *h)
{
	return h->port;
}

void httpd_stop(struct httpd *h)
{
	if (!h)
		return;
	MHD_stop_daemon(h->d);
	free(h);
}
