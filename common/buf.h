/*
 * buf: a growable byte buffer with a hard maximum (for HTTP bodies, JSON,
 * metrics text). Always NUL-terminated once it holds data.
 *
 * Errors are sticky: the first append that fails records why in b->err
 * (BUF_TOO_LARGE when the maximum would be passed, BUF_NOMEM when memory
 * is out) and leaves the contents as they were; every later append does
 * nothing and fails too, until buf_reset. A writer can therefore make any
 * number of appends and check once, at the end, with buf_error.
 */
#ifndef DDILOCO_BUF_H
#define DDILOCO_BUF_H

#include <stddef.h>

enum buf_err {
	BUF_OK = 0,
	BUF_TOO_LARGE,          /* the maximum would have been passed */
	BUF_NOMEM,              /* memory is out */
};

struct buf {
	char *data;
	size_t len, cap, max;
	enum buf_err err;       /* the first failure; BUF_OK until one */
};

void buf_init(struct buf *b, size_t max);
void buf_release(struct buf *b);
/* Empties b and clears its error; keeps the memory. */
void buf_reset(struct buf *b);
/* 0 on success; -1 when this append or an earlier one failed. */
int buf_append(struct buf *b, const void *p, size_t n);
int buf_printf(struct buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Why an append failed since buf_init or buf_reset; BUF_OK if none did. */
enum buf_err buf_error(const struct buf *b);
/* "larger than the limit", "out of memory" (for messages). */
const char *buf_strerror(enum buf_err err);
/* Hands the data to the caller (who frees it) and resets b. */
char *buf_detach(struct buf *b, size_t *len);

#endif
