/*
 * buf: growable bounded byte buffer with a sticky error; see buf.h. The
 * capacity doubles from 256 bytes; one byte past len is kept for the NUL.
 */
#include "common/buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void buf_init(struct buf *b, size_t max)
{
	b->data = NULL;
	b->len = b->cap = 0;
	b->max = max;
	b->err = BUF_OK;
}

void buf_release(struct buf *b)
{
	free(b->data);
	buf_init(b, b->max);
}

void buf_reset(struct buf *b)
{
	b->len = 0;
	b->err = BUF_OK;
	if (b->data)
		b->data[0] = 0;
}

enum buf_err buf_error(const struct buf *b)
{
	return b->err;
}

const char *buf_strerror(enum buf_err err)
{
	switch (err) {
	case BUF_OK: return "no error";
	case BUF_TOO_LARGE: return "larger than the limit";
	case BUF_NOMEM: return "out of memory";
	}
	return "unknown error";
}

/* Room for extra more bytes and the NUL; on failure records why. */
static int reserve(struct buf *b, size_t extra)
{
	size_t need, cap;
	char *p;

	if (b->err)
		return -1;
	if (b->len > b->max || extra > b->max - b->len) {
		b->err = BUF_TOO_LARGE;
		return -1;
	}
	if (b->len + extra == SIZE_MAX) {   /* no room for the NUL */
		b->err = BUF_NOMEM;
		return -1;
	}
	need = b->len + extra + 1;
	if (need <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 256;
	while (cap < need && cap <= SIZE_MAX / 2)
		cap *= 2;
	if (cap < need)
		cap = need;
	p = realloc(b->data, cap);
	if (!p) {
		b->err = BUF_NOMEM;
		return -1;
	}
	b->data = p;
	b->cap = cap;
	return 0;
}

int buf_append(struct buf *b, const void *p, size_t n)
{
	if (reserve(b, n))
		return -1;
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = 0;
	return 0;
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->err)
		return -1;
	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0) {
		/* only an encoding error or a length past INT_MAX: too large */
		b->err = BUF_TOO_LARGE;
		return -1;
	}
	if (reserve(b, (size_t)n))
		return -1;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

char *buf_detach(struct buf *b, size_t *len)
{
	char *d = b->data;

	if (len)
		*len = b->len;
	buf_init(b, b->max);
	return d;
}
