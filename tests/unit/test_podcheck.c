/*
 * podcheck: what a pod's status says of it — starting, blocked (with the
 * reason a person should see), or disrupted rather than failed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "operator/podcheck.h"

static void check_starting(const char *pod_json, int want, const char *reason,
			   const char *message)
{
	json_t *pod = json_loads(pod_json, 0, NULL);
	char r[64], m[256];

	assert_non_null(pod);
	assert_int_equal(podcheck_starting(pod, r, sizeof(r), m, sizeof(m)), want);
	assert_string_equal(r, reason);
	assert_string_equal(m, message);
	json_decref(pod);
}

static void test_podcheck_starting(void **state)
{
	(void)state;
	check_starting("{\"status\":{\"phase\":\"Pending\",\"initContainerStatuses\":["
		       "{\"name\":\"sidecar\",\"state\":{\"waiting\":{\"reason\":"
		       "\"PodInitializing\"}}}],\"containerStatuses\":[{\"name\":\"learner\","
		       "\"state\":{\"waiting\":{\"reason\":\"ContainerCreating\"}}}]}}",
		       1, "PodInitializing", "container sidecar: PodInitializing");
	check_starting("{\"status\":{\"phase\":\"Pending\",\"containerStatuses\":[{\"name\":"
		       "\"syncer\",\"state\":{\"waiting\":{\"reason\":\"ContainerCreating\","
		       "\"message\":\"pulling image\"}}}]}}",
		       1, "ContainerCreating", "container syncer: pulling image");
	check_starting("{\"spec\":{\"nodeName\":\"n1\"},\"status\":{\"phase\":\"Pending\","
		       "\"conditions\":[{\"type\":\"PodScheduled\",\"status\":\"True\"}]}}",
		       1, "Pending", "on node n1, no container started");
	check_starting("{\"spec\":{\"schedulerName\":\"none\"},\"status\":{\"phase\":\"Pending\"}}",
		       1, "Pending", "not scheduled to a node");
	check_starting("{}", 1, "Pending", "not scheduled to a node");
	/* a problem is podcheck_blocked's, not a start */
	check_starting("{\"status\":{\"phase\":\"Pending\",\"containerStatuses\":[{\"name\":"
		       "\"learner\",\"state\":{\"waiting\":{\"reason\":\"ErrImagePull\"}}}]}}",
		       0, "", "");
	check_starting("{\"status\":{\"phase\":\"Pending\",\"conditions\":[{\"type\":"
		       "\"PodScheduled\",\"status\":\"False\",\"reason\":\"Unschedulable\"}]}}",
		       0, "", "");
	check_starting("{\"status\":{\"phase\":\"Running\"}}", 0, "", "");
	check_starting("{\"metadata\":{\"deletionTimestamp\":\"2026-01-01T00:00:00Z\"},"
		       "\"status\":{\"phase\":\"Pending\"}}", 0, "", "");
}

static void check_blocked(const char *pod_json, int want, const char *reason,
			  const char *message)
{
	json_t *pod = json_loads(pod_json, 0, NULL);
	char r[64], m[256];

	assert_non_null(pod);
	assert_int_equal(podcheck_blocked(pod, r, sizeof(r), m, sizeof(m)), want);
	assert_string_equal(r, reason);
	assert_string_equal(m, message);
	json_decref(pod);
}

static void test_podcheck_reasons(void **state)
{
	(void)state;
	check_blocked("{\"status\":{\"phase\":\"Pending\",\"conditions\":[{\"type\":"
		      "\"PodScheduled\",\"status\":\"False\",\"reason\":\"Unschedulable\","
		      "\"message\":\"0/3 nodes are available\"}]}}",
		      1, "Unschedulable", "0/3 nodes are available");
	/* the sidecar still being made, the learner's image missing */
	check_blocked("{\"status\":{\"conditions\":[{\"type\":\"PodScheduled\",\"status\":\"True\"}],"
		      "\"initContainerStatuses\":[{\"name\":\"sidecar\",\"state\":{\"waiting\":"
		      "{\"reason\":\"PodInitializing\"}}}],"
		      "\"containerStatuses\":[{\"name\":\"learner\",\"state\":{\"waiting\":"
		      "{\"reason\":\"ErrImageNeverPull\",\"message\":\"image \\\"x:1\\\" is not present\"}}}]}}",
		      1, "ErrImageNeverPull", "container learner: image \"x:1\" is not present");
	check_blocked("{\"status\":{\"containerStatuses\":[{\"name\":\"learner\",\"state\":"
		      "{\"waiting\":{\"reason\":\"CrashLoopBackOff\"}}}]}}",
		      1, "CrashLoopBackOff", "container learner: CrashLoopBackOff");
	check_blocked("{\"status\":{\"containerStatuses\":[{\"name\":\"learner\",\"state\":"
		      "{\"waiting\":{\"reason\":\"ContainerCreating\"}}}]}}", 0, "", "");
	check_blocked("{\"status\":{\"phase\":\"Running\",\"containerStatuses\":[{\"name\":"
		      "\"learner\",\"state\":{\"running\":{}}}]}}", 0, "", "");
	check_blocked("{\"metadata\":{\"deletionTimestamp\":\"2026-01-01T00:00:00Z\"},"
		      "\"status\":{\"conditions\":[{\"type\":\"PodScheduled\",\"status\":\"False\"}]}}",
		      0, "", "");
	check_blocked("{}", 0, "", "");
}

/* How a pod ended: the cluster (a disruption) or its program (exit code). */
static void test_podcheck_disruptions(void **state)
{
	static const struct { const char *json; int disrupted, exit_code;
			      const char *reason; } t[] = {
		{ "{\"status\":{\"phase\":\"Failed\",\"conditions\":[{\"type\":"
		  "\"DisruptionTarget\",\"status\":\"True\",\"reason\":"
		  "\"PreemptionByScheduler\"}]}}", 1, -1, "" },
		{ "{\"status\":{\"conditions\":[{\"type\":\"DisruptionTarget\","
		  "\"status\":\"False\"}]}}", 0, -1, "" },
		{ "{\"status\":{\"phase\":\"Failed\",\"reason\":\"Evicted\","
		  "\"message\":\"The node was low on resource: memory.\"}}", 1, -1, "" },
		{ "{\"status\":{\"phase\":\"Failed\",\"reason\":\"NodeShutdown\"}}", 1, -1, "" },
		{ "{\"status\":{\"phase\":\"Failed\",\"containerStatuses\":["
		  "{\"name\":\"sidecar\",\"state\":{\"terminated\":{\"exitCode\":0}}},"
		  "{\"name\":\"learner\",\"state\":{\"terminated\":{\"exitCode\":2,"
		  "\"reason\":\"Error\"}}}]}}", 0, 2, "Error" },
		{ "{\"status\":{\"phase\":\"Failed\",\"reason\":\"OOMKilled\"}}", 0, -1, "" },
		/* killed by the kernel for its memory limit: its program's end */
		{ "{\"status\":{\"phase\":\"Failed\",\"containerStatuses\":["
		  "{\"name\":\"learner\",\"state\":{\"terminated\":{\"exitCode\":137,"
		  "\"reason\":\"OOMKilled\"}}}]}}", 0, 137, "OOMKilled" },
		{ "{}", 0, -1, "" },
	};
	char reason[32];

	(void)state;
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		json_t *pod = json_loads(t[i].json, 0, NULL);

		assert_non_null(pod);
		if (podcheck_disrupted(pod) != t[i].disrupted ||
		    podcheck_exit_reason(pod, "learner", NULL, 0) != t[i].exit_code ||
		    podcheck_exit_reason(pod, "learner", reason, sizeof(reason)) !=
		    t[i].exit_code || strcmp(reason, t[i].reason))
			fail_msg("pod %zu: disrupted %d exit %d, expected %d %d", i,
				 podcheck_disrupted(pod), podcheck_exit_reason(pod, "learner", NULL, 0),
				 t[i].disrupted, t[i].exit_code);
		json_decref(pod);
	}
}

/* A container that ended with one exit code, now or before its restart,
 * and its termination message (the sidecar's version mismatch). */
static void test_podcheck_ended_with(void **state)
{
	static const struct { const char *json; int want; const char *msg; } t[] = {
		/* the native sidecar restarted: its last state */
		{ "{\"status\":{\"phase\":\"Running\",\"initContainerStatuses\":["
		  "{\"name\":\"sidecar\",\"state\":{\"waiting\":{\"reason\":"
		  "\"CrashLoopBackOff\"}},\"lastState\":{\"terminated\":"
		  "{\"exitCode\":78,\"reason\":\"Error\",\"message\":\"learner "
		  "library 0.3.0 (ABI 2, exchange 3) and sidecar 0.4.0 (ABI 3, "
		  "exchange 4) do not match\\n\"}}}]}}", 1,
		  "learner library 0.3.0 (ABI 2, exchange 3) and sidecar 0.4.0 "
		  "(ABI 3, exchange 4) do not match" },
		/* ended now, no message left */
		{ "{\"status\":{\"initContainerStatuses\":[{\"name\":\"sidecar\","
		  "\"state\":{\"terminated\":{\"exitCode\":78}}}]}}", 1,
		  "container sidecar exited with code 78" },
		/* another code, another container */
		{ "{\"status\":{\"initContainerStatuses\":[{\"name\":\"sidecar\","
		  "\"lastState\":{\"terminated\":{\"exitCode\":1}}}],"
		  "\"containerStatuses\":[{\"name\":\"learner\",\"state\":"
		  "{\"terminated\":{\"exitCode\":78,\"message\":\"x\"}}}]}}", 0, "" },
		{ "{\"status\":{\"initContainerStatuses\":[{\"name\":\"sidecar\","
		  "\"state\":{\"terminated\":{\"exitCode\":\"78\"}}}]}}", 0, "" },
		{ "{}", 0, "" },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		json_t *pod = json_loads(t[i].json, 0, NULL);
		char msg[256] = "junk";

		assert_non_null(pod);
		assert_int_equal(podcheck_ended_with(pod, "sidecar", 78, msg,
						     sizeof(msg)), t[i].want);
		assert_string_equal(msg, t[i].msg);
		json_decref(pod);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_podcheck_reasons),
		cmocka_unit_test(test_podcheck_starting),
		cmocka_unit_test(test_podcheck_disruptions),
		cmocka_unit_test(test_podcheck_ended_with),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
