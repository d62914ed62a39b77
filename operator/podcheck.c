/*
 * podcheck: the checks of podcheck.h over a pod's JSON, no I/O.
 */
#include "operator/podcheck.h"

#include <stdio.h>
#include <string.h>

static const char *str(json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

static int starting(const char *reason)
{
	return !strcmp(reason, "ContainerCreating") ||
	       !strcmp(reason, "PodInitializing");
}

/* The first waiting container of `list` with a reason that is a problem. */
static int waiting(json_t *list, char *reason, size_t rn, char *message,
		   size_t mn)
{
	json_t *cs;
	size_t i;

	json_array_foreach(list, i, cs) {
		json_t *w = json_object_get(json_object_get(cs, "state"), "waiting");
		const char *r = str(w, "reason"), *m = str(w, "message");

		if (!r || !r[0] || starting(r))
			continue;
		snprintf(reason, rn, "%s", r);
		snprintf(message, mn, "container %s: %s",
			 str(cs, "name") ? str(cs, "name") : "?", m && m[0] ? m : r);
		return 1;
	}
	return 0;
}

int podcheck_blocked(json_t *pod, char *reason, size_t rn, char *message,
		     size_t mn)
{
	json_t *status = json_object_get(pod, "status"), *c;
	size_t i;

	reason[0] = message[0] = '\0';
	if (json_object_get(json_object_get(pod, "metadata"), "deletionTimestamp"))
		return 0;
	json_array_foreach(json_object_get(status, "conditions"), i, c) {
		const char *t = str(c, "type"), *s = str(c, "status");
		const char *r = str(c, "reason"), *m = str(c, "message");

		if (!t || strcmp(t, "PodScheduled") || !s || strcmp(s, "False"))
			continue;
		snprintf(reason, rn, "%s", r && r[0] ? r : "Unschedulable");
		snprintf(message, mn, "%s", m ? m : "");
		return 1;
	}
	return waiting(json_object_get(status, "initContainerStatuses"),
		       reason, rn, message, mn) ||
	       waiting(json_object_get(status, "containerStatuses"),
		       reason, rn, message, mn);
}
