/*
 * The operator's progress reader (operator/progress.h) against a real
 * HTTP server and a listener that takes a connection and never answers:
 * the reads arrive, a shard that does not answer is named, a pass's
 * want and take return while the reader is held by the silent one, and
 * a new set of URLs starts the job over.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/httpd.h"
#include "common/util.h"
#include "operator/progress.h"

static int serve(void *ctx, const char *path, struct buf *b, const char **ct)
{
	(void)ctx;
	*ct = "application/json";
	if (strcmp(path, "/status"))
		return 404;
	buf_printf(b, "{\"round\": 5, \"uptime\": 1.0, \"done\": false}");
	return 200;
}

/* A listener that accepts one connection and holds it, silent, until
 * the peer closes it: held is 1 while it does, closed 1 after. */
struct silent {
	int fd, port, c;
	volatile int held, closed;
	pthread_t t;
};

static void *hold(void *arg)
{
	struct silent *s = arg;
	char buf[4096];
	int c = accept(s->fd, NULL, NULL);

	if (c < 0)
		return NULL;
	s->c = c;
	s->held = 1;
	while (read(c, buf, sizeof(buf)) > 0)
		;                      /* the request, never answered */
	s->closed = 1;
	close(c);
	return NULL;
}

static void silent_start(struct silent *s)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t n = sizeof(a);

	memset(s, 0, sizeof(*s));
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	s->fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(s->fd >= 0);
	assert_int_equal(bind(s->fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(s->fd, 4), 0);
	assert_int_equal(getsockname(s->fd, (struct sockaddr *)&a, &n), 0);
	s->port = ntohs(a.sin_port);
	assert_int_equal(pthread_create(&s->t, NULL, hold, s), 0);
}

/* Takes until a read of key comes, for at most 20 s. */
static void take_one(struct progress *r, const char *key, int S,
		     struct syncer_status *st, int *up, uint64_t *seen,
		     char *why, size_t n)
{
	double until = clock_mono() + 20;

	while (!progress_take(r, key, S, st, up, seen, why, n)) {
		assert_true(clock_mono() < until);
		sleep_seconds(0.01);
	}
}

static void reads_come_without_waiting(void **state)
{
	struct progress r;
	struct httpd *h;
	struct silent q;
	struct syncer_status st[2];
	char url[2][PROGRESS_URL_MAX], why[256];
	int up[2];
	uint64_t seen = 0;
	struct err e;
	double until;

	(void)state;
	h = httpd_start("127.0.0.1", 0, serve, NULL, &e);
	assert_non_null(h);
	silent_start(&q);
	snprintf(url[0], sizeof(url[0]), "http://127.0.0.1:%d/status", httpd_port(h));
	snprintf(url[1], sizeof(url[1]), "http://127.0.0.1:%d/status", q.port);
	/* reads every 50 ms; 30 s before a silent shard counts as down */
	assert_int_equal(progress_start(&r, NULL, 0.05, 30), 0);
	progress_want(&r, "ns/a", 2, (const char (*)[PROGRESS_URL_MAX])url);
	/* the reader is held by shard 1: a pass still asks and takes */
	until = clock_mono() + 20;
	while (!q.held) {
		assert_true(clock_mono() < until);
		sleep_seconds(0.01);
	}
	progress_want(&r, "ns/a", 2, (const char (*)[PROGRESS_URL_MAX])url);
	assert_int_equal(progress_take(&r, "ns/a", 2, st, up, &seen, why,
				       sizeof(why)), 0);
	assert_int_equal(q.closed, 0);   /* returned before the read ended */
	shutdown(q.c, SHUT_RDWR);        /* the read fails now: stop waits not */
	pthread_join(q.t, NULL);
	progress_stop(&r);

	/* with a short timeout: shard 0 read, shard 1 named as down */
	close(q.fd);
	silent_start(&q);
	snprintf(url[1], sizeof(url[1]), "http://127.0.0.1:%d/status", q.port);
	assert_int_equal(progress_start(&r, NULL, 0.05, 0.3), 0);
	progress_want(&r, "ns/a", 2, (const char (*)[PROGRESS_URL_MAX])url);
	take_one(&r, "ns/a", 2, st, up, &seen, why, sizeof(why));
	assert_true(seen > 0);
	assert_int_equal(up[0], 1);
	assert_int_equal(st[0].round, 5);
	assert_int_equal(up[1], 0);
	assert_non_null(strstr(why, url[1]));
	for (int i = 0; i < 2; i++)
		syncer_status_release(&st[i]);
	/* nothing newer until the next read */
	assert_int_equal(progress_take(&r, "ns/a", 2, st, up, &seen, why,
				       sizeof(why)), 0);
	/* another job, and the same job with one shard: its own reads */
	progress_want(&r, "ns/b", 1, (const char (*)[PROGRESS_URL_MAX])url);
	progress_want(&r, "ns/a", 1, (const char (*)[PROGRESS_URL_MAX])url);
	take_one(&r, "ns/a", 1, st, up, &seen, why, sizeof(why));
	assert_int_equal(up[0], 1);
	assert_string_equal(why, "");
	syncer_status_release(&st[0]);
	assert_int_equal(progress_take(&r, "ns/a", 2, st, up, &seen, why,
				       sizeof(why)), 0);   /* not its S now */
	progress_stop(&r);
	pthread_join(q.t, NULL);
	close(q.fd);
	httpd_stop(h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(reads_come_without_waiting),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
