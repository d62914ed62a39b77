/*
 * podcheck: the checks of podcheck.h over a pod's JSON, no I/O.
 */
#include "operator/podcheck.h"

#include <ctype.h>
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

int podcheck_starting(json_t *pod, char *reason, size_t rn, char *message,
		      size_t mn)
{
	json_t *status = json_object_get(pod, "status"), *cs;
	const char *phase = str(status, "phase"), *node;
	const char *lists[] = { "initContainerStatuses", "containerStatuses" };
	size_t i;

	reason[0] = message[0] = '\0';
	if (json_object_get(json_object_get(pod, "metadata"), "deletionTimestamp") ||
	    (phase && strcmp(phase, "Pending")) ||
	    podcheck_blocked(pod, reason, rn, message, mn)) {
		reason[0] = message[0] = '\0';
		return 0;
	}
	for (int l = 0; l < 2; l++)
		json_array_foreach(json_object_get(status, lists[l]), i, cs) {
			json_t *w = json_object_get(json_object_get(cs, "state"), "waiting");
			const char *r = str(w, "reason"), *m = str(w, "message");

			if (!r || !starting(r))
				continue;
			snprintf(reason, rn, "%s", r);
			snprintf(message, mn, "container %s: %s",
				 str(cs, "name") ? str(cs, "name") : "?", m && m[0] ? m : r);
			return 1;
		}
	node = str(json_object_get(pod, "spec"), "nodeName");
	snprintf(reason, rn, "%s", str(status, "reason") && str(status, "reason")[0] ?
		 str(status, "reason") : "Pending");
	if (node && node[0])
		snprintf(message, mn, "on node %s, no container started", node);
	else
		snprintf(message, mn, "not scheduled to a node");
	return 1;
}

int podcheck_disrupted(json_t *pod)
{
	static const char *const reasons[] = {
		"Evicted", "Preempting", "Shutdown", "NodeShutdown", "Terminated",
		NULL,
	};
	json_t *status = json_object_get(pod, "status"), *c;
	const char *r = str(status, "reason");
	size_t i;

	json_array_foreach(json_object_get(status, "conditions"), i, c) {
		const char *t = str(c, "type"), *s = str(c, "status");

		if (t && !strcmp(t, "DisruptionTarget") && s && !strcmp(s, "True"))
			return 1;
	}
	for (i = 0; r && reasons[i]; i++)
		if (!strcmp(r, reasons[i]))
			return 1;
	return 0;
}

int podcheck_exit_reason(json_t *pod, const char *name, char *reason, size_t n)
{
	json_t *cs;
	size_t i;

	if (reason && n)
		reason[0] = '\0';
	json_array_foreach(json_object_get(json_object_get(pod, "status"),
					   "containerStatuses"), i, cs) {
		json_t *t = json_object_get(json_object_get(cs, "state"), "terminated");
		const char *c = str(cs, "name"), *r = str(t, "reason");

		if (!c || strcmp(c, name) || !json_is_integer(json_object_get(t, "exitCode")))
			continue;
		if (reason && n)
			snprintf(reason, n, "%s", r ? r : "");
		return (int)json_integer_value(json_object_get(t, "exitCode"));
	}
	return -1;
}

/* The termination message, trailing white space cut, or "" */
static void term_message(json_t *t, char *msg, size_t n)
{
	const char *m = str(t, "message");
	size_t k;

	snprintf(msg, n, "%s", m ? m : "");
	for (k = strlen(msg); k > 0 && isspace((unsigned char)msg[k - 1]); k--)
		msg[k - 1] = '\0';
}

int podcheck_ended_with(json_t *pod, const char *name, int code, char *msg,
			size_t n)
{
	static const char *const lists[] = { "initContainerStatuses",
					     "containerStatuses" };
	static const char *const when[] = { "state", "lastState" };
	json_t *status = json_object_get(pod, "status"), *cs;
	size_t i;

	for (int l = 0; l < 2; l++)
		json_array_foreach(json_object_get(status, lists[l]), i, cs) {
			const char *nm = str(cs, "name");

			if (!nm || strcmp(nm, name))
				continue;
			for (int w = 0; w < 2; w++) {
				json_t *t = json_object_get(json_object_get(
					cs, when[w]), "terminated");
				json_t *c = json_object_get(t, "exitCode");

				if (!json_is_integer(c) || json_integer_value(c) != code)
					continue;
				term_message(t, msg, n);
				if (!msg[0])
					snprintf(msg, n, "container %s exited with "
						 "code %d", name, code);
				return 1;
			}
		}
	if (n)
		msg[0] = '\0';
	return 0;
}
