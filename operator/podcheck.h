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
 */
#ifndef DDILOCO_PODCHECK_H
#define DDILOCO_PODCHECK_H

#include <stddef.h>

#include <jansson.h>

/* 1 and reason/message set when pod cannot start; else 0 and both "". */
int podcheck_blocked(json_t *pod, char *reason, size_t rn, char *message,
		     size_t mn);

#endif
