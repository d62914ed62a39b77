/*
 * queue: a job in a Kueue queue, the label kueue.x-k8s.io/queue-name on
 * it (docs/operator.md, Kueue). The operator does for it what Kueue's
 * job framework does for the kinds it knows:
 *
 *   - it makes the job's Workload, <job>-ddjob (kueue.x-k8s.io/v1beta2,
 *     owned by the job), with pod sets learners (count M, minCount K:
 *     Kueue may admit part of them), syncer (count S) and evaluator, each
 *     with the template of the pods it would make, and the priority of
 *     the label kueue.x-k8s.io/priority-class (a WorkloadPriorityClass);
 *   - the job is held, as if suspended, until the Workload is admitted;
 *     then its pods take the admitted flavors' node labels and
 *     tolerations (each ResourceFlavor read) and only the admitted
 *     learner count is made;
 *   - when Kueue evicts the Workload (a preemption, a stopped queue) the
 *     job is held again: the syncer checkpoints as it stops and the pods
 *     go; once they are gone the Workload's reservation is given back
 *     (status.admission cleared, QuotaReserved False), as Kueue expects
 *     of the job's owner, and it is admitted again later;
 *   - a finished job marks its Workload Finished, which frees the quota;
 *   - the job's condition Admitted says where it stands, with Kueue's
 *     reason and message.
 *
 * Step 1b of a pass (queue_observe, after pass_observe) and step 5
 * (queue_after, after the status is written).
 */
#ifndef DDILOCO_QUEUE_H
#define DDILOCO_QUEUE_H

#include "operator/pass.h"

#define QUEUE_LABEL "kueue.x-k8s.io/queue-name"
#define QUEUE_PRIORITY_LABEL "kueue.x-k8s.io/priority-class"
#define QUEUE_WORKLOAD_SUFFIX "-ddjob"
/* seconds between passes while the Workload waits or runs: its changes
 * are read, not watched */
#define QUEUE_POLL 2.0

/* 0, or -1 when the API answered in a way the pass must retry. */
int queue_observe(const struct pass_env *env, struct pass *p);
int queue_after(const struct pass_env *env, struct pass *p);

#endif
