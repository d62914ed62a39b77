/*
 * podcheck: why a pod cannot start, in the pod's own words.
 *
 * Read from the pod's status, in this order:
 *   PodScheduled False            its reason (Unschedulable) and message
 *   a container waiting           its reason (ImagePullBackOff,
 *                                 ErrImagePull, CreateContainerConfigError,
 *                                 CrashLoopBackOff, ...) and message;
 *                                 ContainerCreating and PodInitializing
 *                                 are a start under way, not a problem
 * Init containers (the native sidecar) come before the others. A pod
 * being deleted has no problem to report.
 *
 * A pod still starting (Pending, not blocked) says what it waits for:
 *   a container waiting           ContainerCreating or PodInitializing,
 *                                 its message when it has one
 *   no container status yet       status.reason, else "Pending": "on node
 *                                 N, no container started" (a node whose
 *                                 kubelet does not report) or "not
 *                                 scheduled to a node" (no scheduler took
 *                                 it, e.g. a schedulerName that none has)
 * The operator reports it only once it lasted longer than
 * spec.failurePolicy.pendingTimeoutSeconds (reconcile.h).
 *
 * And how a pod ended (docs/operator.md, "Failure policy"): disrupted
 * when the cluster ended it, not its program: a DisruptionTarget
 * condition True (preemption, eviction through the API, a taint, node
 * shutdown, garbage collection; Kubernetes 1.26+), or status.reason
 * Evicted, Preempting, Shutdown, NodeShutdown or Terminated (older
 * clusters and the kubelet's own eviction).
 */
#ifndef DDILOCO_PODCHECK_H
#define DDILOCO_PODCHECK_H

#include <stddef.h>

#include <jansson.h>

/* 1 and reason/message set when pod cannot start; else 0 and both "". */
int podcheck_blocked(json_t *pod, char *reason, size_t rn, char *message,
		     size_t mn);

/* 1 and reason/message set when pod is Pending and starting (above);
 * else 0 and both "". */
int podcheck_starting(json_t *pod, char *reason, size_t rn, char *message,
		      size_t mn);

/* 1 when the pod was ended by a disruption (above), else 0. */
int podcheck_disrupted(json_t *pod);

/* The exit code of the container `name` once terminated, else -1; with
 * reason (n bytes, may be NULL) its terminated reason ("OOMKilled",
 * "Error", ...; "" none). */
int podcheck_exit_reason(json_t *pod, const char *name, char *reason, size_t n);

/*
 * 1 when the container `name` (an init container, as the native sidecar
 * is, or another) ended with exit code `code`, now (state) or before the
 * kubelet restarted it (lastState), with its termination message in msg
 * (n bytes; trailing white space cut; "container NAME exited with code
 * CODE" when it left none); else 0 and msg "". The sidecar's version
 * mismatch (docs/operator.md, Failure policy).
 */
int podcheck_ended_with(json_t *pod, const char *name, int code, char *msg,
			size_t n);

#endif
