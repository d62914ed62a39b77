/*
 * caches: the operator's seven informers (informer.h) and what their
 * events become. DecoupledTrainingJobs, and the pods, StatefulSets,
 * Services, ConfigMaps, PersistentVolumeClaims and NetworkPolicies
 * labelled app.kubernetes.io/managed-by=ddiloco-operator, in the
 * operator's namespace or every namespace; every event adds the key
 * "ns/name" of the job concerned to the work queue (a child's job: its
 * controller owner reference). Children are trimmed to the fields the
 * operator decides by before they are cached.
 */
#ifndef DDILOCO_CACHES_H
#define DDILOCO_CACHES_H

#include <jansson.h>
#include <stdint.h>

#include "common/err.h"
#include "operator/informer.h"
#include "operator/kube.h"
#include "operator/workqueue.h"

#define CACHES_N 7             /* the fields of struct caches */
/* In a cached child's metadata only (never sent): the first manager
 * other than this operator that wrote its spec or data, from its
 * managedFields (docs/operator.md, Drift). */
#define CACHES_DRIFT_BY "x-ddiloco-drift-by"
/* In a cached ConfigMap's, Service's, NetworkPolicy's or StatefulSet's
 * metadata only: caches_spec_hash of the object as the API server holds
 * it, in hex. */
#define CACHES_SPEC_HASH "x-ddiloco-spec-hash"

/* A hash of what an object asks for: its spec and data (never 0). */
uint64_t caches_spec_hash(json_t *obj);

struct caches {
	struct informer *jobs, *pods, *sts, *svcs, *cms, *pvcs, *netpols;
};

/*
 * Starts the seven informers on namespace_ ("" = every namespace), their
 * events into q. On failure the ones started stay in c for
 * caches_release.
 */
int caches_start(struct caches *c, const struct kube_config *cfg,
		 const char *namespace_, struct workqueue *q, struct err *e);
/* Stops and frees every informer started (c zeroed before start). */
void caches_release(struct caches *c);

/* The seven in the order of struct caches. */
void caches_list(const struct caches *c, struct informer *out[CACHES_N]);
/* The first informer whose first list has not filled it, or NULL. */
struct informer *caches_unsynced(const struct caches *c);
/* Every cached job's key into q (the periodic resync). */
void caches_resync(const struct caches *c, struct workqueue *q);

/* The uid of obj's controller owner reference, or NULL. */
const char *caches_owner_uid(json_t *obj);

#endif
