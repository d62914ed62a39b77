/*
 * caches: each informer's handler gets the work queue as its context and
 * only queues a key: a job's own "ns/name", or the one of the job named
 * by a child's controller owner reference (a child without one is
 * nobody's and queues nothing). The children's informers trim every
 * object before caching it (trim_child), which keeps the pods, most of
 * the operator's memory, small.
 */
#include "operator/caches.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "operator/children.h"

static const char *jget(json_t *o, const char *a, const char *b)
{
	return json_string_value(json_object_get(json_object_get(o, a), b));
}

static void collection(const char *namespace_, const char *api, const char *res,
		       char *out, size_t n)
{
	if (namespace_[0])
		snprintf(out, n, "%s/namespaces/%s/%s", api, namespace_, res);
	else
		snprintf(out, n, "%s/%s", api, res);
}

/* The job a child belongs to: its controller owner reference. */
static int owner_key(json_t *obj, char *key, size_t n)
{
	json_t *refs = json_object_get(json_object_get(obj, "metadata"), "ownerReferences");
	const char *ns = jget(obj, "metadata", "namespace");
	json_t *r;
	size_t i;

	json_array_foreach(refs, i, r) {
		const char *kind = json_string_value(json_object_get(r, "kind"));
		const char *name = json_string_value(json_object_get(r, "name"));

		if (kind && name && !strcmp(kind, JOB_KIND) &&
		    json_is_true(json_object_get(r, "controller"))) {
			snprintf(key, n, "%s/%s", ns ? ns : "", name);
			return 0;
		}
	}
	return -1;
}

const char *caches_owner_uid(json_t *obj)
{
	json_t *refs = json_object_get(json_object_get(obj, "metadata"), "ownerReferences");
	json_t *r;
	size_t i;

	json_array_foreach(refs, i, r)
		if (json_is_true(json_object_get(r, "controller")))
			return json_string_value(json_object_get(r, "uid"));
	return NULL;
}

static void on_job(void *ctx, enum kube_event type, json_t *obj)
{
	struct workqueue *q = ctx;
	char key[WQ_KEY_MAX];

	(void)type;
	snprintf(key, sizeof(key), "%s/%s", jget(obj, "metadata", "namespace"),
		 jget(obj, "metadata", "name"));
	wq_add(q, key);
}

static void on_child(void *ctx, enum kube_event type, json_t *obj)
{
	struct workqueue *q = ctx;
	char key[WQ_KEY_MAX];

	(void)type;
	if (!owner_key(obj, key, sizeof(key)))
		wq_add(q, key);
}

/*
 * A container's status as podcheck reads it: its name, restarts, and the
 * reason, message and exit code of its state and last state.
 */
static json_t *slim_container_statuses(json_t *list)
{
	static const char *const states[] = { "state", "lastState" };
	json_t *out = json_array(), *cs;
	size_t i;

	json_array_foreach(list, i, cs) {
		json_t *c = json_pack("{s:O?, s:O?}", "name", json_object_get(cs, "name"),
				      "restartCount", json_object_get(cs, "restartCount"));

		for (int k = 0; c && k < 2; k++) {
			json_t *st = json_object_get(cs, states[k]), *slim = json_object();
			const char *kind;
			json_t *v;

			json_object_foreach(st, kind, v)
				json_object_set_new(slim, kind, json_pack("{s:O?, s:O?, s:O?}",
					"reason", json_object_get(v, "reason"),
					"message", json_object_get(v, "message"),
					"exitCode", json_object_get(v, "exitCode")));
			json_object_set_new(c, states[k], slim);
		}
		if (c)
			json_array_append_new(out, c);
	}
	return out;
}

/* Another manager that wrote the child's spec or data (a kubectl edit,
 * patch, apply or scale; the status subresource, the controllers', is
 * not counted): its name under CACHES_DRIFT_BY, before managedFields are
 * dropped. */
static void note_drift(json_t *obj)
{
	json_t *meta = json_object_get(obj, "metadata"), *m;
	size_t i;

	json_array_foreach(json_object_get(meta, "managedFields"), i, m) {
		const char *who = json_string_value(json_object_get(m, "manager"));
		const char *sub = json_string_value(json_object_get(m, "subresource"));
		json_t *f = json_object_get(m, "fieldsV1");

		if (!who || !strcmp(who, FIELD_MANAGER) || (sub && !strcmp(sub, "status")))
			continue;
		if (json_object_get(f, "f:spec") || json_object_get(f, "f:data")) {
			json_object_set_new(meta, CACHES_DRIFT_BY, json_string(who));
			return;
		}
	}
}

uint64_t caches_spec_hash(json_t *obj)
{
	json_t *what = json_pack("{s:O?, s:O?}", "spec", json_object_get(obj, "spec"),
				 "data", json_object_get(obj, "data"));
	char *text = what ? json_dumps(what, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	uint64_t h = text ? fnv64_update(FNV64_INIT, text, strlen(text)) : 1;

	free(text);
	json_decref(what);
	return h ? h : 1;
}

/*
 * Children are read for their metadata (owner, labels, deletion) and the
 * status fields the operator decides by (phase, conditions, ready
 * replicas, the pod's reason such as Evicted, and its containers' states
 * and exit codes, slimmed), and a claim's requested storage (which a
 * resize compares: reconcile.h, CheckpointStorage); the rest is dropped
 * before caching.
 */
static void trim_child(json_t *obj)
{
	static const char *const keep[] = { "phase", "conditions", "readyReplicas",
					    "reason" };
	static const char *const lists[] = { "containerStatuses",
					     "initContainerStatuses" };
	json_t *st = json_object_get(obj, "status"), *kept = json_object();
	json_t *storage = json_object_get(json_object_get(json_object_get(
		json_object_get(obj, "spec"), "resources"), "requests"), "storage");
	const char *key;
	json_t *v;
	void *tmp;

	note_drift(obj);
	json_incref(storage);
	json_object_foreach_safe(obj, tmp, key, v)
		if (strcmp(key, "metadata") && strcmp(key, "status"))
			json_object_del(obj, key);
	if (json_is_string(storage))
		json_object_set_new(obj, "spec", json_pack("{s:{s:{s:O}}}",
			"resources", "requests", "storage", storage));
	json_decref(storage);
	for (size_t i = 0; kept && i < sizeof(keep) / sizeof(keep[0]); i++)
		if ((v = json_object_get(st, keep[i])))
			json_object_set(kept, keep[i], v);
	for (size_t i = 0; kept && i < sizeof(lists) / sizeof(lists[0]); i++)
		if (json_is_array(v = json_object_get(st, lists[i])))
			json_object_set_new(kept, lists[i], slim_container_statuses(v));
	if (st && kept)
		json_object_set(obj, "status", kept);
	json_decref(kept);
}

/* A child the operator keeps as the job asks (docs/operator.md, Drift):
 * trimmed, with caches_spec_hash of what it was before. */
static void trim_hashed(json_t *obj)
{
	char hex[24];

	snprintf(hex, sizeof(hex), "%016" PRIx64, caches_spec_hash(obj));
	trim_child(obj);
	json_object_set_new(json_object_get(obj, "metadata"), CACHES_SPEC_HASH,
			    json_string(hex));
}

/* What start_informer needs besides the resource. */
struct start {
	const struct kube_config *cfg;
	const char *namespace_;
	struct workqueue *q;
};

static struct informer *start_informer(const struct start *s, const char *name,
				       const char *api, const char *res,
				       const char *selector, informer_fn fn,
				       informer_trim_fn trim, struct err *e)
{
	char path[256];
	struct informer *inf;

	collection(s->namespace_, api, res, path, sizeof(path));
	inf = informer_new(s->cfg, name, path, selector, fn, s->q);
	if (inf && trim)
		informer_set_trim(inf, trim);
	if (!inf || informer_start(inf, e)) {
		informer_free(inf);
		return NULL;
	}
	return inf;
}

/* The seven informers: jobs, and the children by the managed-by label. */
int caches_start(struct caches *c, const struct kube_config *cfg,
		 const char *namespace_, struct workqueue *q, struct err *e)
{
	const char *sel = "app.kubernetes.io/managed-by=" FIELD_MANAGER;
	const struct start s = { cfg, namespace_, q };

	/* pods and claims trimmed; the children kept as the job asks
	 * (docs/operator.md, Drift) hashed too */
	if (!(c->jobs = start_informer(&s, "decoupledtrainingjobs", CRD_PATH,
				       "decoupledtrainingjobs", NULL, on_job, NULL, e)) ||
	    !(c->pods = start_informer(&s, "pods", "/api/v1", "pods", sel, on_child,
				       trim_child, e)) ||
	    !(c->sts = start_informer(&s, "statefulsets", "/apis/apps/v1",
				      "statefulsets", sel, on_child, trim_hashed, e)) ||
	    !(c->svcs = start_informer(&s, "services", "/api/v1", "services", sel,
				       on_child, trim_hashed, e)) ||
	    !(c->cms = start_informer(&s, "configmaps", "/api/v1", "configmaps", sel,
				      on_child, trim_hashed, e)) ||
	    !(c->pvcs = start_informer(&s, "persistentvolumeclaims", "/api/v1",
				       "persistentvolumeclaims", sel, on_child,
				       trim_child, e)) ||
	    !(c->netpols = start_informer(&s, "networkpolicies",
					  "/apis/networking.k8s.io/v1",
					  "networkpolicies", sel, on_child,
					  trim_hashed, e)))
		return -1;
	return 0;
}

void caches_release(struct caches *c)
{
	struct informer *all[CACHES_N];

	caches_list(c, all);
	for (int i = 0; i < CACHES_N; i++)
		informer_free(all[i]);
	memset(c, 0, sizeof(*c));
}

void caches_list(const struct caches *c, struct informer *out[CACHES_N])
{
	struct informer *all[CACHES_N] = { c->jobs, c->pods, c->sts, c->svcs,
					   c->cms, c->pvcs, c->netpols };

	memcpy(out, all, sizeof(all));
}

struct informer *caches_unsynced(const struct caches *c)
{
	struct informer *all[CACHES_N];

	caches_list(c, all);
	for (int i = 0; i < CACHES_N; i++)
		if (!informer_synced(all[i]))
			return all[i];
	return NULL;
}

void caches_resync(const struct caches *c, struct workqueue *q)
{
	json_t *keys = informer_keys(c->jobs), *k;
	size_t i;

	json_array_foreach(keys, i, k)
		wq_add(q, json_string_value(k));
	json_decref(keys);
}
