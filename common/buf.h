/*
 * buf: a growable byte buffer with a hard maximum (for HTTP bodies, JSON,
 * metrics text). Going past the maximum is its own error and leaves the
 * contents as they were. Always NUL-terminated after a successful append.
 */
#ifndef DDILOCO_BUF_H
#define DDILOCO_BUF_H

#include <stddef.h>

struct buf {
	char *data;
	size_t len, cap, max;
};

void buf_init(struct buf *b, size_t max);
void buf_release(struct buf *b);
void buf_reset(struct buf *b);
/* 0 on success, -1 when the maximum would be passed or memory is out. */
int buf_append(struct buf *b, const void *p, size_t n);
int buf_printf(struct buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Hands the data to the caller (who frees it) and resets b. */
char *buf_detach(struct buf *b, size_t *len);

#endif
