/*
 * A slow link on loopback for tests and benches: a TCP proxy on 127.0.0.1
 * that holds every chunk it forwards, either way, for `delay` seconds,
 * and forwards toward the target at `rate` bytes a second (0: at once;
 * the other way is never limited). Each connection is a link of its own.
 * No root and no tc: what a long or thin link does to a handshake, or to
 * a heartbeat behind a large answer.
 *
 * slowlink_start(&l, port, delay, rate) listens on l.port and forwards to
 * 127.0.0.1:port; slowlink_stop ends every connection and joins its
 * threads. Setting l.c[i].frozen makes connection i (in the order they
 * came) a link that carries nothing and closes nothing: its sockets stay
 * open and nothing more goes through, as when a link dies without a word.
 */
#ifndef DDILOCO_TEST_SLOWLINK_H
#define DDILOCO_TEST_SLOWLINK_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/util.h"

#define SLOWLINK_CONNS 16

struct slowlink_conn {
	struct slowlink *l;
	int fd[2];              /* the client's, the target's */
	volatile int frozen;    /* nothing goes through while set */
	pthread_t th;
};

struct slowlink {
	int port, target_port, lfd;
	double delay, rate;
	volatile int stop;
	pthread_t th;
	int n;
	struct slowlink_conn c[SLOWLINK_CONNS];
};

static inline int slowlink_send_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static inline void *slowlink_conn_main(void *arg)
{
	struct slowlink_conn *c = arg;
	struct slowlink *l = c->l;
	double due = clock_mono();   /* when the way to the target is free */
	char *buf = malloc(16384);

	while (buf && !l->stop) {
		struct pollfd p[2] = { { c->fd[0], POLLIN, 0 }, { c->fd[1], POLLIN, 0 } };

		if (c->frozen) {
			sleep_seconds(0.02);
			continue;
		}
		if (poll(p, 2, 20) <= 0)
			continue;
		for (int i = 0; i < 2; i++) {
			ssize_t r;

			if (!p[i].revents)
				continue;
			r = recv(c->fd[i], buf, 16384, 0);
			if (r <= 0)
				goto out;
			sleep_seconds(l->delay);
			if (slowlink_send_all(c->fd[1 - i], buf, (size_t)r))
				goto out;
			if (i == 0 && l->rate > 0) {
				due = (due > clock_mono() ? due : clock_mono()) +
				      (double)r / l->rate;
				sleep_seconds(due - clock_mono());
			}
		}
	}
out:
	free(buf);
	shutdown(c->fd[0], SHUT_RDWR);
	shutdown(c->fd[1], SHUT_RDWR);
	return NULL;
}

static inline int slowlink_dial(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		close(fd);
		fd = -1;
	}
	return fd;
}

static inline void *slowlink_main(void *arg)
{
	struct slowlink *l = arg;

	while (!l->stop) {
		struct pollfd p = { l->lfd, POLLIN, 0 };
		struct slowlink_conn *c;
		int fd, up;

		if (poll(&p, 1, 50) <= 0)
			continue;
		fd = accept(l->lfd, NULL, NULL);
		if (fd < 0)
			continue;
		up = slowlink_dial(l->target_port);
		if (up < 0 || l->n == SLOWLINK_CONNS) {
			close(fd);
			if (up >= 0)
				close(up);
			continue;
		}
		c = &l->c[l->n];
		c->l = l;
		c->fd[0] = fd;
		c->fd[1] = up;
		if (pthread_create(&c->th, NULL, slowlink_conn_main, c)) {
			close(fd);
			close(up);
			continue;
		}
		l->n++;
	}
	return NULL;
}

static inline int slowlink_start(struct slowlink *l, int target_port,
				 double delay, double rate)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);

	memset(l, 0, sizeof(*l));
	l->target_port = target_port;
	l->delay = delay;
	l->rate = rate;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	l->lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (l->lfd < 0 || bind(l->lfd, (struct sockaddr *)&a, sizeof(a)) ||
	    listen(l->lfd, 16) ||
	    getsockname(l->lfd, (struct sockaddr *)&a, &len))
		goto fail;
	l->port = ntohs(a.sin_port);
	if (pthread_create(&l->th, NULL, slowlink_main, l))
		goto fail;
	return 0;
fail:
	if (l->lfd >= 0)
		close(l->lfd);
	return -1;
}

static inline void slowlink_stop(struct slowlink *l)
{
	l->stop = 1;
	pthread_join(l->th, NULL);
	for (int i = 0; i < l->n; i++) {
		pthread_join(l->c[i].th, NULL);
		close(l->c[i].fd[0]);
		close(l->c[i].fd[1]);
	}
	close(l->lfd);
}

#endif
