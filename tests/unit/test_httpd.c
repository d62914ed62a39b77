/* httpd: the listener's limits (docs/security.md, Listeners) on a real
 * server over loopback: probes answer while 500 slow clients from the
 * same address hold connections (and are cut and dial again), a request
 * not whole by HTTPD_REQUEST_DEADLINE is cut, and the connection limit
 * follows the descriptor limit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/httpd.h"
#include "common/util.h"

#define SLOW 500
#define PROBES 60     /* one every 0.1 s: past the slow clients' deadline */
#define PROBE_DEADLINE 2.0   /* seconds for one probe, generous */

/* The beginning of a request that is never finished. */
static const char dribble[] = "GET /healthz HTTP/1.1\r\nHost: t\r\nX-Slow: ";

static int handler(void *ctx, const char *path, struct buf *body,
		   const char **ctype)
{
	(void)ctx;
	(void)ctype;
	if (strcmp(path, "/healthz"))
		return 404;
	buf_printf(body, "ok\n");
	return 200;
}

static int dial(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Reads what comes on fd until the server closes it or `until` passes:
 * 1 closed, 0 not by then; what came is in got (NUL-terminated). */
static int read_until_closed(int fd, double until, char *got, size_t cap)
{
	size_t n = 0;

	got[0] = '\0';
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		double left = until - clock_mono();
		ssize_t r;

		if (left <= 0)
			return 0;
		if (poll(&p, 1, (int)(left * 1000) + 1) <= 0)
			continue;
		r = recv(fd, got + n, cap - 1 - n, 0);
		if (r <= 0)
			return 1;
		n += (size_t)r;
		got[n] = '\0';
		if (n == cap - 1)
			return 0;
	}
}

/* One GET of /healthz as the kubelet makes it: its status, or -1 when
 * no whole answer came within PROBE_DEADLINE. */
static int probe(int port, char *body, size_t cap)
{
	static const char req[] = "GET /healthz HTTP/1.0\r\n\r\n";
	double until = clock_mono() + PROBE_DEADLINE;
	int fd = dial(port), status = -1;
	char *b;

	if (fd < 0)
		return -1;
	if (send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) == sizeof(req) - 1 &&
	    read_until_closed(fd, until, body, cap) &&
	    sscanf(body, "HTTP/1.%*d %d", &status) == 1 &&
	    (b = strstr(body, "\r\n\r\n")))
		memmove(body, b + 4, strlen(b + 4) + 1);
	close(fd);
	return status;
}

/* SLOW clients: the even ones send nothing, the odd ones one byte of a
 * request that never ends every 100 ms; each one the server closes is
 * dialled again. */
struct slow {
	int port;
	int fd[SLOW];
	size_t sent[SLOW];
	int stop;               /* atomic */
	pthread_t t;
};

static void slow_turn(struct slow *s)
{
	char c;

	for (int i = 0; i < SLOW; i++) {
		if (s->fd[i] >= 0 && recv(s->fd[i], &c, 1, MSG_DONTWAIT) == 0) {
			close(s->fd[i]);
			s->fd[i] = -1;
		} else if (s->fd[i] >= 0 && errno != EAGAIN &&
			   errno != EWOULDBLOCK) {
			close(s->fd[i]);
			s->fd[i] = -1;
		}
		if (s->fd[i] < 0) {
			s->fd[i] = dial(s->port);
			s->sent[i] = 0;
		}
		if (s->fd[i] < 0 || !(i & 1))
			continue;
		c = s->sent[i] < sizeof(dribble) - 1 ? dribble[s->sent[i]] : 'a';
		if (send(s->fd[i], &c, 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1)
			s->sent[i]++;
	}
}

static void *slow_run(void *arg)
{
	struct slow *s = arg;

	while (!__atomic_load_n(&s->stop, __ATOMIC_RELAXED)) {
		errno = 0;
		slow_turn(s);
		sleep_seconds(0.1);
	}
	for (int i = 0; i < SLOW; i++)
		if (s->fd[i] >= 0)
			close(s->fd[i]);
	return NULL;
}

static unsigned connections(struct httpd *h)
{
	struct httpd_counts n;

	httpd_counts(h, &n);
	return n.connections;
}

static unsigned long cut(struct httpd *h)
{
	struct httpd_counts n;

	httpd_counts(h, &n);
	return n.cut;
}

static void probes_answer_through_500_slow_clients(void **state)
{
	struct slow *s = calloc(1, sizeof(*s));
	struct err e;
	struct httpd *h = httpd_start("127.0.0.1", 0, handler, NULL, &e);
	char body[4096];
	double until;
	int under_load = 0;

	(void)state;
	assert_non_null(s);
	assert_non_null(h);
	s->port = httpd_port(h);
	for (int i = 0; i < SLOW; i++)
		s->fd[i] = -1;
	assert_int_equal(pthread_create(&s->t, NULL, slow_run, s), 0);
	until = clock_mono() + 20;
	while (connections(h) < SLOW && clock_mono() < until)
		sleep_seconds(0.01);
	assert_true(connections(h) >= SLOW);
	for (int i = 0; i < PROBES; i++) {
		/* the slow clients cut at the deadline dial again at once:
		 * most probes find every one of them connected */
		under_load += connections(h) >= SLOW;
		if (probe(s->port, body, sizeof(body)) != 200)
			fail_msg("probe %d of %d: no 200 within %.0f s", i + 1,
				 PROBES, PROBE_DEADLINE);
		assert_string_equal(body, "ok\n");
		sleep_seconds(0.1);
	}
	assert_true(under_load >= PROBES / 2);
	/* and every slow client was cut at its deadline, once at least */
	until = clock_mono() + HTTPD_REQUEST_DEADLINE + 5;
	while (cut(h) < SLOW && clock_mono() < until)
		sleep_seconds(0.05);
	assert_true(cut(h) >= SLOW);
	__atomic_store_n(&s->stop, 1, __ATOMIC_RELAXED);
	pthread_join(s->t, NULL);
	httpd_stop(h);
	free(s);
}

/* Four clients in one loop: (0) silent, (1) a request dribbled for ever,
 * (2) one dribbled and finished before the deadline, (3) a whole request
 * at once. The server must close 0 and 1 within [deadline, deadline +
 * 2.5 s] of their start, and answer 2 and 3 (each answer ends its
 * connection: a response queued as the headers arrive is libmicrohttpd's
 * `Connection: close`). */
struct four {
	int fd[4], closed[4], finished;
	double start[4], end[4], t0;
	char got[4][1024];
	size_t have[4], sent[3];
};

/* 1 and 2 send a byte every 50 ms; 2 ends its request 1.5 s before the
 * deadline. */
static void four_send(struct four *f, double now)
{
	for (int i = 1; i <= 2; i++) {
		size_t due = (size_t)((now - f->t0) * 20);
		char c;

		if (f->closed[i] || f->sent[i] >= due || (i == 2 && f->finished))
			continue;
		if (i == 2 && now - f->t0 > HTTPD_REQUEST_DEADLINE - 1.5) {
			assert_int_equal(send(f->fd[2], "\r\n\r\n", 4,
					      MSG_NOSIGNAL), 4);
			f->finished = 1;
			continue;
		}
		c = f->sent[i] < sizeof(dribble) - 1 ? dribble[f->sent[i]] : 'a';
		if (send(f->fd[i], &c, 1, MSG_NOSIGNAL) == 1)
			f->sent[i]++;
	}
}

static void four_read(struct four *f)
{
	for (int i = 0; i < 4; i++) {
		struct pollfd p = { .fd = f->fd[i], .events = POLLIN };
		ssize_t r;

		if (f->closed[i] || poll(&p, 1, 0) <= 0)
			continue;
		r = recv(f->fd[i], f->got[i] + f->have[i],
			 sizeof(f->got[i]) - 1 - f->have[i], 0);
		if (r <= 0) {
			f->closed[i] = 1;
			f->end[i] = clock_mono();
			continue;
		}
		f->have[i] += (size_t)r;
		f->got[i][f->have[i]] = '\0';
	}
}

static void a_slow_request_is_cut_at_the_deadline(void **state)
{
	static const char whole[] = "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n";
	struct err e;
	struct httpd *h = httpd_start("127.0.0.1", 0, handler, NULL, &e);
	struct httpd_counts n;
	struct four f = { 0 };
	double until;

	(void)state;
	assert_non_null(h);
	for (int i = 0; i < 4; i++) {
		f.fd[i] = dial(httpd_port(h));
		assert_true(f.fd[i] >= 0);
		f.start[i] = clock_mono();
	}
	assert_int_equal(send(f.fd[3], whole, sizeof(whole) - 1, 0),
			 sizeof(whole) - 1);
	f.t0 = clock_mono();
	until = f.t0 + HTTPD_REQUEST_DEADLINE + 6;
	while ((!f.closed[0] || !f.closed[1]) && clock_mono() < until) {
		four_send(&f, clock_mono());
		four_read(&f);
		sleep_seconds(0.01);
	}
	for (int i = 0; i < 2; i++) {
		double took = f.end[i] - f.start[i];

		if (!f.closed[i])
			fail_msg("client %d not closed by the deadline", i);
		if (took < HTTPD_REQUEST_DEADLINE - 0.05 ||
		    took > HTTPD_REQUEST_DEADLINE + 2.5)
			fail_msg("client %d closed after %.2f s, the deadline is "
				 "%.1f s", i, took, HTTPD_REQUEST_DEADLINE);
	}
	assert_true(f.closed[3] && f.end[3] - f.start[3] < 1.0);
	assert_non_null(strstr(f.got[3], "HTTP/1.1 200"));
	assert_non_null(strstr(f.got[3], "\r\n\r\nok\n"));
	/* 2 finished in time: answered */
	assert_int_equal(read_until_closed(f.fd[2], clock_mono() + 10,
					   f.got[2] + f.have[2],
					   sizeof(f.got[2]) - f.have[2]), 1);
	assert_non_null(strstr(f.got[2], " 200 "));
	httpd_counts(h, &n);
	assert_int_equal(n.cut, 2);   /* 0 and 1 */
	for (int i = 0; i < 4; i++)
		close(f.fd[i]);
	httpd_stop(h);
}

static void the_limit_follows_the_descriptors(void **state)
{
	struct rlimit rl, low;
	struct httpd_counts n;
	struct err e;
	struct httpd *h;

	(void)state;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	low = rl;
	low.rlim_cur = 200;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	h = httpd_start("127.0.0.1", 0, handler, NULL, &e);
	assert_non_null(h);
	httpd_counts(h, &n);
	assert_int_equal(n.limit, 100);
	httpd_stop(h);
	/* raised back to the hard limit, and the limit is the whole one */
	assert_int_equal(nofile_raise(), (unsigned long)rl.rlim_max);
	h = httpd_start("127.0.0.1", 0, handler, NULL, &e);
	assert_non_null(h);
	httpd_counts(h, &n);
	if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max / 2 >= HTTPD_MAX_CONNS)
		assert_int_equal(n.limit, HTTPD_MAX_CONNS);
	httpd_stop(h);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
}

static void a_bad_address_is_refused(void **state)
{
	struct err e;

	(void)state;
	assert_null(httpd_start("not-an-address", 0, handler, NULL, &e));
	assert_string_equal(e.msg, "httpd: bad listen address 'not-an-address'");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(probes_answer_through_500_slow_clients),
		cmocka_unit_test(a_slow_request_is_cut_at_the_deadline),
		cmocka_unit_test(the_limit_follows_the_descriptors),
		cmocka_unit_test(a_bad_address_is_refused),
	};

	nofile_raise();   /* SLOW clients and their server in one process */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
