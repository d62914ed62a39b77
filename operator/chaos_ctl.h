/*
 * chaos_ctl: the chaos controller on Kubernetes. For every job whose
 * spec.chaos is enabled and whose phase is Running or Restarting, it runs
 * the job's common/chaos schedule (the same one `ddiloco run` uses) on
 * the clock of status.startTime, and executes each kill by deleting the
 * chosen pod with a grace period of CHAOS_GRACE_SECONDS (SIGTERM, then
 * SIGKILL: close to a crash, but the object stays until its containers
 * are stopped, so no replacement ever runs beside them):
 *
 *   learner-<i>   pod <job>-learner-<i>
 *   sidecar-<i>   pod <job>-learner-<i> too: the API cannot kill one
 *                 container of a pod, so a sidecar kill takes its learner
 *   syncer        pod <job>-syncer-0 (the StatefulSet brings it back,
 *                 and the syncer recovers from its checkpoint)
 *
 * What is "down" for maxDown is read from the pod cache: a learner slot
 * whose pod is missing, deleting or not ready, a syncer pod likewise.
 * Each kill is an Event on the job (reason ChaosKill) and is counted in
 * status.chaos, which the workers write from chaos_ctl_status. The
 * operator's normal reconcile brings killed learners back.
 *
 * Jobs without chaos are never looked at beyond their spec. The schedule
 * stops when the job ends, is suspended or chaos is disabled; enabling it
 * again (or a new operator leader) resumes the seeded stream at "now",
 * skipping the kills planned in the past.
 */
#ifndef DDILOCO_CHAOS_CTL_H
#define DDILOCO_CHAOS_CTL_H

#include <jansson.h>

#include "operator/informer.h"
#include "operator/kube.h"

#define CHAOS_GRACE_SECONDS 1

struct chaos_ctl;

/* touched(ctx, key): a job's status.chaos changed (the worker rewrites it). */
typedef void (*chaos_touched_fn)(void *ctx, const char *key);

struct chaos_ctl *chaos_ctl_new(struct informer *jobs, struct informer *pods,
				chaos_touched_fn touched, void *ctx);
void chaos_ctl_free(struct chaos_ctl *c);

/* One pass over every job: at most one kill per job. */
void chaos_ctl_tick(struct chaos_ctl *c, struct kube *k);

/* status.chaos for a job (new reference), or NULL when it has none. */
json_t *chaos_ctl_status(struct chaos_ctl *c, const char *key, const char *uid);
long chaos_ctl_kills(struct chaos_ctl *c);

#endif
