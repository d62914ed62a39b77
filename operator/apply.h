/*
 * apply: what one pass writes to the API server, steps 3 and 4 of a pass
 * (pass.h, operator.c's sync_job).
 *
 *   apply_actions  reconcile's actions in order: server-side apply of
 *                  each child (children.c builds them), deletes with a
 *                  uid precondition, <job>-tls created when missing, Events
 *                  (the same one at most once in JOBMEM_EVENT_DEDUPE s)
 *   apply_status   status_build() (status.c), PUT through the status
 *                  subresource with the resourceVersion the pass read,
 *                  when status_should_write says it moved enough
 *
 * The job's memory learns what the writes did: the uid a created pod got,
 * <job>-tls made (this job's), a create that failed not expected nor
 * counted.
 */
#ifndef DDILOCO_APPLY_H
#define DDILOCO_APPLY_H

#include "operator/pass.h"

/* a status whose only change is progress ticking is written at most this
 * often (status_should_write; docs/operator.md, Status) */
#define APPLY_STATUS_PROGRESS_EVERY 15.0

/*
 * Step 3: the actions in order, up to the first that fails; -1 then
 * (the Created condition in p->out and an Event say why), or that stops
 * the pass (<job>-tls answered 409: read again before any pod).
 */
int apply_actions(const struct pass_env *env, struct pass *p);

/* Step 4: the status, written when it changed (beyond progress ticking
 * faster than APPLY_STATUS_PROGRESS_EVERY); -1 to retry (a 409 too: the
 * cache is behind). */
int apply_status(const struct pass_env *env, struct pass *p);

#endif
