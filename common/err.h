/*
 * err: the error message a failing function leaves for its caller.
 *
 * Functions that can fail return int (0 = ok, -1 = error) and take a
 * `struct err *` as their last argument; on error they fill it with one
 * lower-case line that names what failed first and quotes the subject:
 *   "syncer: cannot load checkpoint 'ckpt-000042': checksum mismatch".
 * A NULL err is allowed and means the caller does not want the text.
 */
#ifndef DDILOCO_ERR_H
#define DDILOCO_ERR_H

#include <stddef.h>

struct err {
	char msg[512];
};

/* Formats the message into e (if not NULL) and returns -1. */
int err_set(struct err *e, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Prepends "prefix: " to the message already in e; returns -1. */
int err_wrap(struct err *e, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif
