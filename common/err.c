/* err: formatting of error messages; see err.h. */
#include "common/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int err_set(struct err *e, const char *fmt, ...)
{
	va_list ap;

	if (!e)
		return -1;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	return -1;
}

int err_wrap(struct err *e, const char *fmt, ...)
{
	char prefix[256], old[sizeof(e->msg)];
	va_list ap;

	if (!e)
		return -1;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	memcpy(old, e->msg, sizeof(old));
	/* the message is a fixed field: a wrapped message too long for it
	 * loses its end */
	snprintf(e->msg, sizeof(e->msg), "%s: %.*s", prefix,
		 (int)(sizeof(e->msg) - 3 - strlen(prefix)), old);
	return -1;
}
