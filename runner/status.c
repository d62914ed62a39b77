/*
 * status: the runner's GET of the syncer's /status. The request and the
 * parse are common/syncer_status (shared with the operator); the runner
 * only knows the syncer by its HTTP host:port.
 */
#include <stdio.h>

#include "runner/run.h"

int run_status_fetch(const char *addr, double timeout,
		     struct syncer_status *out, struct err *e)
{
	char url[300];

	snprintf(url, sizeof(url), "http://%s/status", addr);
	return syncer_status_fetch(NULL, url, timeout, out, e);
}
