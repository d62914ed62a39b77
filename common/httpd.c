/*
 * httpd: libmicrohttpd with a pool of HTTPD_POOL threads on epoll. Only
 * GET and HEAD are answered; request bodies are refused. Responses are
 * built in a bounded buf (16 MiB) and copied into the response.
 *
 * Limits (docs/security.md, Listeners): at most HTTPD_MAX_CONNS
 * connections (fewer when the descriptor limit is low), none per
 * address, HTTPD_IDLE_TIMEOUT seconds of silence, and HTTPD_REQUEST_DEADLINE
 * seconds from the accept, or from the last answer on a kept-alive
 * connection, to a whole request. libmicrohttpd's own timeout counts
 * silence only, so a client sending one byte a second would hold its
 * connection for ever; the deadline is kept here: every connection has a
 * record (its socket context) on a list, and a watchdog thread shuts
 * down the socket of one that is waiting past its deadline, which the
 * pool thread then closes. A record leaves the list in the CLOSED
 * notification, which libmicrohttpd sends before it closes the socket,
 * so the watchdog never touches a descriptor that was reused.
 */
#include "common/httpd.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>

#include "common/log.h"
#include "common/util.h"

#define HTTPD_MAX_BODY (16u << 20)
#define WATCH_PERIOD 0.2   /* seconds between the watchdog's looks */

struct conn_rec {
	struct conn_rec *prev, *next;
	int fd;
	int waiting;       /* no whole request since `since` */
	int cut;           /* its socket was shut down by the watchdog */
	double since;
};

struct httpd {
	struct MHD_Daemon *d;
	httpd_handler fn;
	void *ctx;
	int port;
	unsigned limit;
	pthread_mutex_t mu;   /* guards everything below */
	pthread_cond_t wake;
	pthread_t watchdog;
	int watching, stop;
	struct conn_rec *conns;
	unsigned nconns;
	unsigned long ncut;
};

static struct conn_rec *rec_of(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	return ci ? ci->socket_context : NULL;
}

/* A whole request came (waiting 0) or an answer went out (waiting 1). */
static void set_waiting(struct httpd *h, struct MHD_Connection *c, int waiting)
{
	struct conn_rec *r = rec_of(c);

	if (!r)
		return;
	pthread_mutex_lock(&h->mu);
	r->waiting = waiting;
	r->since = clock_mono();
	pthread_mutex_unlock(&h->mu);
}

static void on_conn(void *cls, struct MHD_Connection *c, void **socket_ctx,
		    enum MHD_ConnectionNotificationCode code)
{
	struct httpd *h = cls;
	struct conn_rec *r = *socket_ctx;
	const union MHD_ConnectionInfo *ci;

	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
		r = calloc(1, sizeof(*r));
		if (!r || !ci) {   /* served, without a deadline */
			free(r);
			return;
		}
		r->fd = ci->connect_fd;
		r->waiting = 1;
		r->since = clock_mono();
		pthread_mutex_lock(&h->mu);
		r->next = h->conns;
		if (h->conns)
			h->conns->prev = r;
		h->conns = r;
		h->nconns++;
		pthread_mutex_unlock(&h->mu);
		*socket_ctx = r;
		return;
	}
	if (!r)
		return;
	pthread_mutex_lock(&h->mu);
	if (r->prev)
		r->prev->next = r->next;
	else
		h->conns = r->next;
	if (r->next)
		r->next->prev = r->prev;
	h->nconns--;
	pthread_mutex_unlock(&h->mu);
	free(r);
	*socket_ctx = NULL;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	(void)con_cls;
	(void)toe;
	set_waiting(cls, c, 1);
}

static void *watch(void *arg)
{
	struct httpd *h = arg;
	struct timespec ts;

	pthread_mutex_lock(&h->mu);
	while (!h->stop) {
		double now = clock_mono();

		for (struct conn_rec *r = h->conns; r; r = r->next)
			if (r->waiting && !r->cut &&
			    now - r->since > HTTPD_REQUEST_DEADLINE) {
				shutdown(r->fd, SHUT_RDWR);
				r->cut = 1;
				h->ncut++;
			}
		ts = clock_wall_after(WATCH_PERIOD);
		pthread_cond_timedwait(&h->wake, &h->mu, &ts);
	}
	pthread_mutex_unlock(&h->mu);
	return NULL;
}

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
	set_waiting(h, c, 0);
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

/* HTTPD_MAX_CONNS, or half the descriptors this process may open when
 * that is fewer: the other half is for its files and gRPC. */
static unsigned conn_limit(void)
{
	struct rlimit rl;
	unsigned n = HTTPD_MAX_CONNS;

	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur / 2 < n) {
		n = (unsigned)(rl.rlim_cur / 2);
		n = n < 4 * HTTPD_POOL ? 4 * HTTPD_POOL : n;
		log_warn("httpd: at most %u connections (RLIMIT_NOFILE %llu)",
			 n, (unsigned long long)rl.rlim_cur);
	}
	return n;
}

/* libmicrohttpd's messages (a client gone with half a request, ...) at
 * debug: a flood of slow clients must not flood the log. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char line[256];
	size_t n;

	(void)cls;
	vsnprintf(line, sizeof(line), fmt, ap);
	n = strlen(line);
	while (n && line[n - 1] == '\n')
		line[--n] = '\0';
	log_debug("httpd: %s", line);
}

static struct MHD_Daemon *daemon_start(struct httpd *h,
				       const struct sockaddr_in *sa)
{
	return MHD_start_daemon(
		MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
		MHD_USE_ERROR_LOG, ntohs(sa->sin_port), NULL, NULL, answer, h,
		MHD_OPTION_SOCK_ADDR, sa,
		MHD_OPTION_THREAD_POOL_SIZE, (unsigned)HTTPD_POOL,
		MHD_OPTION_CONNECTION_LIMIT, h->limit,
		MHD_OPTION_PER_IP_CONNECTION_LIMIT, 0u,   /* none: see the top */
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTPD_IDLE_TIMEOUT,
		MHD_OPTION_NOTIFY_CONNECTION, on_conn, h,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
		MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
		MHD_OPTION_END);
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
	h->limit = conn_limit();
	pthread_mutex_init(&h->mu, NULL);
	pthread_cond_init(&h->wake, NULL);
	h->d = daemon_start(h, &sa);
	if (!h->d) {
		err_set(e, "httpd: cannot listen on %s:%d", addr ? addr : "0.0.0.0",
			port);
		httpd_stop(h);
		return NULL;
	}
	info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
	h->port = info ? info->port : port;
	if (pthread_create(&h->watchdog, NULL, watch, h)) {
		err_set(e, "httpd: cannot start the request deadline's thread");
		httpd_stop(h);
		return NULL;
	}
	h->watching = 1;
	return h;
}

int httpd_port(const struct httpd *h)
{
	return h->port;
}

void httpd_counts(struct httpd *h, struct httpd_counts *out)
{
	pthread_mutex_lock(&h->mu);
	out->connections = h->nconns;
	out->limit = h->limit;
	out->cut = h->ncut;
	pthread_mutex_unlock(&h->mu);
}

void httpd_stop(struct httpd *h)
{
	if (!h)
		return;
	if (h->watching) {
		pthread_mutex_lock(&h->mu);
		h->stop = 1;
		pthread_cond_signal(&h->wake);
		pthread_mutex_unlock(&h->mu);
		pthread_join(h->watchdog, NULL);
	}
	if (h->d)
		MHD_stop_daemon(h->d);   /* sends every CLOSED: the list empties */
	pthread_cond_destroy(&h->wake);
	pthread_mutex_destroy(&h->mu);
	free(h);
}
