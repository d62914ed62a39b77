/*
 * What the benches that start a real `ddiloco syncer` share: a free
 * loopback port for it, and a plain HTTP GET of its /status, /metrics or
 * /readyz (no libcurl: one request, HTTP/1.0, the body NUL-ended).
 */
#ifndef DDILOCO_BENCH_BENCHLIB_H
#define DDILOCO_BENCH_BENCHLIB_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A port on 127.0.0.1 free a moment ago; -1 when none. */
static inline int bench_free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && !bind(fd, (struct sockaddr *)&sa, sizeof(sa)) &&
	    !getsockname(fd, (struct sockaddr *)&sa, &len))
		port = ntohs(sa.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/* GET path on 127.0.0.1:port into buf (the body, NUL-ended); -1: none. */
static inline int bench_http_get(int port, const char *path, char *buf,
				 size_t cap)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	size_t n = 0;
	ssize_t k;
	char req[256], *body;

	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: x\r\n\r\n", path);
	if (write(fd, req, strlen(req)) < 0) {
		close(fd);
		return -1;
	}
	while (n + 1 < cap && (k = read(fd, buf + n, cap - 1 - n)) > 0)
		n += (size_t)k;
	close(fd);
	buf[n] = 0;
	if (!(body = strstr(buf, "\r\n\r\n")))
		return -1;
	memmove(buf, body + 4, strlen(body + 4) + 1);
	return 0;
}

#endif
