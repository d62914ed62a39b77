/*
 * apply: each action becomes one request on the worker's connection
 * (env->k). Where an action's object lives (API group path, resource,
 * child name) is the table `targets`; its manifest comes from children.c.
 * Applies are server-side (fieldManager ddiloco-operator, force), deletes
 * propagate in the background and 404 or 409 (gone already, or a newer
 * object under the name) count as done. The status PUT carries the
 * resourceVersion of the job the pass read, so a write never lands on a
 * job that changed since.
 */
#include "operator/apply.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "operator/children.h"
#include "operator/status.h"

static const char *jget(json_t *o, const char *a, const char *b)
{
	return json_string_value(json_object_get(json_object_get(o, a), b));
}

static void object_path(const char *api, const char *res, const char *ns,
			const char *name, char *out, size_t n)
{
	snprintf(out, n, "%s/namespaces/%s/%s/%s", api, ns, res, name);
}

/* Server-side apply of obj (taken); *resp (when not NULL) gets the
 * object as written. */
static int apply_resp(struct kube *k, const char *api, const char *res,
		      const char *ns, const char *name, json_t *obj,
		      json_t **resp, struct err *e)
{
	char path[512], full[640];
	struct kube_status st;
	char *body;
	int rc;

	if (!obj)
		return err_set(e, "cannot build %s '%s'", res, name);
	object_path(api, res, ns, name, path, sizeof(path));
	snprintf(full, sizeof(full), "%s?fieldManager=" FIELD_MANAGER "&force=true", path);
	body = json_dumps(obj, JSON_COMPACT);
	json_decref(obj);
	rc = kube_request(k, "PATCH", full, "application/apply-patch+yaml", body,
			  resp, &st, e);
	free(body);
	return rc;
}

static int delete_obj(struct kube *k, const char *api, const char *res,
		      const char *ns, const char *name, const char *uid,
		      int grace, struct err *e)
{
	char path[512], body[256];
	struct kube_status st;
	int n;

	object_path(api, res, ns, name, path, sizeof(path));
	n = snprintf(body, sizeof(body),
		     "{\"apiVersion\":\"v1\",\"kind\":\"DeleteOptions\","
		     "\"propagationPolicy\":\"Background\"");
	if (uid && uid[0])
		n += snprintf(body + n, sizeof(body) - (size_t)n,
			      ",\"preconditions\":{\"uid\":\"%s\"}", uid);
	if (grace >= 0)
		n += snprintf(body + n, sizeof(body) - (size_t)n,
			      ",\"gracePeriodSeconds\":%d", grace);
	snprintf(body + n, sizeof(body) - (size_t)n, "}");
	if (!kube_request(k, "DELETE", path, NULL, body, NULL, &st, e))
		return 0;
	if (st.code == 404 || st.code == 409)
		return 0;   /* gone already, or a newer pod under that name */
	return -1;
}

/*
 * <job>-tls: created (POST), never applied or replaced; the operator reads
 * its metadata only (pass.c). A 409 means one appeared since that read:
 * 1, the pass stops there (no pod is made) and the next one reads whose
 * it is.
 */
static int create_tls(struct kube *k, struct pass *p, const struct child_ctx *c,
		      struct err *e)
{
	char path[512];
	struct kube_status st;
	json_t *obj = child_tls_secret(c, e);
	char *body;
	int rc;

	if (!obj)
		return -1;
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/secrets", p->ns);
	body = json_dumps(obj, JSON_COMPACT);
	json_decref(obj);
	if (!body)
		return err_set(e, "cannot encode Secret '%s-tls'", p->name);
	rc = kube_request(k, "POST", path, NULL, body, NULL, &st, e);
	/* the keys were in this text: wipe it before it goes */
	memset(body, 0, strlen(body));
	free(body);
	if (rc && st.code == 409) {
		log_info("%s: Secret '%s-tls' appeared since it was read: reading "
			 "it again before any pod", p->key, p->name);
		p->m->tls_known = 0;
		return 1;
	}
	if (!rc) {
		p->m->tls = 1;
		p->m->tls_known = 1;
		p->m->tls_at = clock_mono();
	}
	return rc;
}

static void job_event(struct kube *k, json_t *job, int warning,
		      const char *reason, const char *message)
{
	kube_post_event(k, &(struct kube_event_post){
		FIELD_MANAGER, JOB_API_VERSION, JOB_KIND, job, warning,
		reason, message });
}

/* A learner's or the evaluator's pod: its apply keeps the uid it got
 * back in lm; if that pod is seen deleted before the cache ever showed
 * it, it counts as gone. */
static int apply_pod(struct kube *k, struct pass *p, struct learner_mem *lm,
		     const char *name, json_t *obj, struct err *e)
{
	json_t *pod = NULL;
	const char *uid;

	if (apply_resp(k, "/api/v1", "pods", p->ns, name, obj, &pod, e))
		return -1;
	uid = jget(pod, "metadata", "uid");
	snprintf(lm->create_uid, sizeof(lm->create_uid), "%s", uid ? uid : "");
	json_decref(pod);
	return 0;
}

/* Where each action's object lives: API group path, resource, child. */
static const struct {
	const char *api, *res;
	enum child_kind child;
} targets[] = {
	[ACT_APPLY_CONFIGMAP] = { "/api/v1", "configmaps", CHILD_SPEC },
	[ACT_APPLY_SERVICE] = { "/api/v1", "services", CHILD_SYNCER },
	[ACT_APPLY_NETPOL] = { "/apis/networking.k8s.io/v1", "networkpolicies",
			       CHILD_SYNCER },
	[ACT_CREATE_TLS] = { "/api/v1", "secrets", CHILD_TLS },
	[ACT_APPLY_PVC] = { "/api/v1", "persistentvolumeclaims", CHILD_CHECKPOINTS },
	[ACT_RESIZE_PVC] = { "/api/v1", "persistentvolumeclaims", CHILD_CHECKPOINTS },
	[ACT_APPLY_SYNCER] = { "/apis/apps/v1", "statefulsets", CHILD_SYNCER },
	[ACT_DELETE_SYNCER] = { "/apis/apps/v1", "statefulsets", CHILD_SYNCER },
	[ACT_DELETE_SYNCER_POD] = { "/api/v1", "pods", CHILD_SYNCER_POD },
	[ACT_APPLY_LEARNER] = { "/api/v1", "pods", CHILD_LEARNER },
	[ACT_DELETE_LEARNER] = { "/api/v1", "pods", CHILD_LEARNER },
	[ACT_APPLY_EVALUATOR] = { "/api/v1", "pods", CHILD_EVALUATOR },
	[ACT_DELETE_EVALUATOR] = { "/api/v1", "pods", CHILD_EVALUATOR },
};

static json_t *build_child(const struct child_ctx *c, const struct rc_action *a)
{
	switch (a->kind) {
	case ACT_APPLY_CONFIGMAP:
		return child_configmap(c);
	case ACT_APPLY_SERVICE:
		return child_service(c);
	case ACT_APPLY_NETPOL:
		return child_networkpolicy(c);
	case ACT_APPLY_PVC:
		return child_pvc(c, a->index);
	case ACT_APPLY_SYNCER:
		return child_syncer(c);
	case ACT_APPLY_LEARNER:
		return child_learner(c, a->index);
	case ACT_APPLY_EVALUATOR:
		return child_evaluator(c);
	default:
		return NULL;
	}
}

/*
 * A claim asked to grow (reconcile.h, CheckpointStorage): a merge patch
 * of its requested storage, and the action's Event when it is taken. A
 * refusal (a StorageClass that does not
 * allow expansion, a claim not bound) is remembered for the condition
 * and sent as an Event, not a failed pass: the job runs on.
 */
static int resize_claim(struct kube *k, struct pass *p, const struct rc_action *a)
{
	char name[CHILD_NAME_MAX], path[512], body[160];
	struct kube_status st;
	struct jobmem *m = p->m;
	struct err e;

	if (own_claim_name(p->name, p->js.syncer.shards, a->index, name, sizeof(name)))
		return 0;
	object_path("/api/v1", "persistentvolumeclaims", p->ns, name, path,
		    sizeof(path));
	snprintf(body, sizeof(body), "{\"spec\":{\"resources\":{\"requests\":"
		 "{\"storage\":\"%.0fGi\"}}}}", a->bytes / 0x1p30);
	if (!kube_request(k, "PATCH", path, "application/merge-patch+json", body,
			  NULL, &st, &e)) {
		log_info("%s: claim %s resized to %.0fGi", p->key, name, a->bytes / 0x1p30);
		m->resize_refused[0] = '\0';
		job_event(k, p->job, 0, a->reason, a->message);
		return 0;
	}
	log_warn("%s: claim %s: %s", p->key, name, e.msg);
	/* the condition says the API server's own words when it gave some */
	if (st.code && st.message[0])
		snprintf(m->resize_refused, sizeof(m->resize_refused),
			 "%d %.*s: %.*s", st.code, (int)sizeof(st.reason) - 1,
			 st.reason, (int)sizeof(m->resize_refused) - 80,
			 st.message);
	else
		snprintf(m->resize_refused, sizeof(m->resize_refused), "%.*s",
			 (int)sizeof(m->resize_refused) - 1, e.msg);
	m->resize_refused_shard = a->index;
	m->resize_refused_bytes = a->bytes;
	job_event(k, p->job, 1, "CheckpointClaimResizeRefused", e.msg);
	return 0;
}

/* The children kept as the job asks (docs/operator.md, Drift), by enum
 * drift_kind: the apply that makes each. */
static const enum rc_kind kept[DRIFT_N] = {
	[DRIFT_CONFIGMAP] = ACT_APPLY_CONFIGMAP, [DRIFT_SERVICE] = ACT_APPLY_SERVICE,
	[DRIFT_NETPOL] = ACT_APPLY_NETPOL, [DRIFT_SYNCER] = ACT_APPLY_SYNCER,
};

/* A child applied; for one kept as the job asks, what it asks for, as
 * written, is remembered (docs/operator.md, Drift). */
static int apply_kept(struct kube *k, struct pass *p, const struct rc_action *a,
		      const char *name, json_t *obj, struct err *e)
{
	json_t *resp = NULL;
	int d = 0, rc;

	while (d < DRIFT_N && kept[d] != a->kind)
		d++;
	rc = apply_resp(k, targets[a->kind].api, targets[a->kind].res, p->ns,
			name, obj, d < DRIFT_N ? &resp : NULL, e);
	if (!rc && resp)
		p->m->written_hash[d] = caches_spec_hash(resp);
	json_decref(resp);
	return rc;
}

/*
 * A drifted child written whole, as the job asks (docs/operator.md,
 * Drift): a PUT at the version it was seen at, so a change made since
 * is not overwritten blind (a 409 is put right at the next pass). What it
 * asks for, as written, is remembered: the next drift is told from it.
 */
static int replace_child(struct kube *k, struct pass *p, const struct child_ctx *c,
			 int d, struct err *e)
{
	const struct rc_action as = { .kind = kept[d] };
	json_t *obj = build_child(c, &as), *resp = NULL;
	char name[CHILD_NAME_MAX], path[512], full[600];
	struct kube_status st;
	char *body;
	int rc;

	if (!obj || child_name(p->name, targets[as.kind].child, 0, name, sizeof(name))) {
		json_decref(obj);
		return err_set(e, "cannot build the %s of '%s'", targets[as.kind].res,
			       p->name);
	}
	json_object_set_new(json_object_get(obj, "metadata"), "resourceVersion",
			    json_string(p->drift_rv[d]));
	object_path(targets[as.kind].api, targets[as.kind].res, p->ns, name, path,
		    sizeof(path));
	snprintf(full, sizeof(full), "%s?fieldManager=" FIELD_MANAGER, path);
	body = json_dumps(obj, JSON_COMPACT);
	json_decref(obj);
	rc = kube_request(k, "PUT", full, "application/json", body, &resp, &st, e);
	free(body);
	if (!rc && resp)
		p->m->written_hash[d] = caches_spec_hash(resp);
	if (rc && st.code == 409) {   /* changed since it was seen: a next pass */
		log_debug("%s: %s %s changed since it was read: %s", p->key,
			  targets[as.kind].res, name, e->msg);
		rc = 0;
	}
	json_decref(resp);
	return rc;
}

static int act(const struct pass_env *env, struct pass *p,
	       const struct rc_action *a, struct err *e)
{
	struct kube *k = env->k;
	struct child_ctx c;
	char name[CHILD_NAME_MAX];

	pass_child_ctx(env, p, a->retain, &c);
	switch (a->kind) {
	case ACT_DELETE_JOB:
		log_info("%s/%s: ttlSecondsAfterFinished passed: deleting the job",
			 p->ns, p->name);
		return delete_obj(k, CRD_PATH, "decoupledtrainingjobs", p->ns, p->name,
				  p->uid, -1, e);
	case ACT_EVENT:
		if (!jobmem_event_repeated(p->m, a->reason, a->message, clock_mono()))
			job_event(k, p->job, a->warning, a->reason, a->message);
		return 0;
	case ACT_RESIZE_PVC:
		return resize_claim(k, p, a);
	case ACT_REPLACE_CHILD:
		return replace_child(k, p, &c, a->index, e);
	default:
		break;
	}
	if (child_name(p->name, targets[a->kind].child, a->index, name, sizeof(name)))
		return err_set(e, "the name of a child of '%s' is too long", p->name);
	if (a->kind == ACT_DELETE_SYNCER)
		return delete_obj(k, targets[a->kind].api, targets[a->kind].res, p->ns,
				  name, NULL, -1, e);
	if (a->kind == ACT_DELETE_LEARNER || a->kind == ACT_DELETE_EVALUATOR ||
	    a->kind == ACT_DELETE_SYNCER_POD)
		return delete_obj(k, targets[a->kind].api, targets[a->kind].res, p->ns,
				  name, a->uid, a->force ? 0 : -1, e);
	if (a->kind == ACT_APPLY_LEARNER)
		return apply_pod(k, p, &p->m->learners[a->index], name,
				 build_child(&c, a), e);
	if (a->kind == ACT_APPLY_EVALUATOR)
		return apply_pod(k, p, &p->m->evaluator, name, build_child(&c, a), e);
	if (a->kind == ACT_CREATE_TLS)
		return create_tls(k, p, &c, e);
	/* a sharded job's claims: each shard's, in turn (children.h) */
	if (a->kind == ACT_APPLY_PVC && p->js.syncer.shards > 1) {
		for (int i = 0; i < p->js.syncer.shards; i++) {
			struct rc_action one = *a;

			one.index = i;
			if (shard_claim_name(p->name, i, name, sizeof(name)))
				return err_set(e, "the name of a child of '%s' is too long",
					       p->name);
			if (apply_resp(k, targets[a->kind].api, targets[a->kind].res,
				       p->ns, name, build_child(&c, &one), NULL, e))
				return -1;
		}
		return 0;
	}
	return apply_kept(k, p, a, name, build_child(&c, a), e);
}

/* A create that failed: the Created condition says so, and an Event. */
static void undo_failed(struct kube *k, struct pass *p,
			const struct rc_action *a, const char *why)
{
	char msg[300];

	snprintf(msg, sizeof(msg), "%.*s", (int)sizeof(msg) - 1, why);
	if (a->kind != ACT_DELETE_JOB && a->kind != ACT_EVENT &&
	    a->kind != ACT_REPLACE_CHILD &&
	    a->kind != ACT_DELETE_LEARNER && a->kind != ACT_DELETE_SYNCER &&
	    a->kind != ACT_DELETE_EVALUATOR && a->kind != ACT_DELETE_SYNCER_POD) {
		char now[48];

		kube_time_now(now, sizeof(now), 0);
		cond_set(&p->out.conds[COND_CREATED], 0, "CreateFailed", msg, now);
		job_event(k, p->job, 1, "CreateFailed", msg);
	}
	/* an apply that failed made nothing: neither expect it nor count it
	 * as a restart (its event is not sent) */
	if (a->kind == ACT_APPLY_LEARNER) {
		p->m->learners[a->index].create_sent = 0;
		if (a->recreate)
			p->m->learners[a->index].restarts--;
	}
	if (a->kind == ACT_APPLY_EVALUATOR) {
		p->m->evaluator.create_sent = 0;
		if (a->recreate)
			p->m->evaluator.restarts--;
	}
}

int apply_actions(const struct pass_env *env, struct pass *p)
{
	struct err e;

	for (int k = 0; k < p->out.nacts; k++) {
		const struct rc_action *a = &p->out.acts[k];

		int r = act(env, p, a, &e);

		if (r > 0)
			return -1;   /* stopped, not failed: a pass again soon */
		if (r) {
			log_warn("%s: %s", p->key, e.msg);
			undo_failed(env->k, p, a, e.msg);
			return -1;
		}
		op_metrics_count(env->metrics, &env->metrics->actions[a->kind]);
	}
	return 0;
}

/* PUT the status with the resourceVersion we read; 1 on a 409. */
static int put_status(struct kube *k, json_t *job, json_t *status,
		      struct err *e)
{
	char path[512];
	struct kube_status st;
	json_t *obj = json_pack("{s:s, s:s, s:{s:O, s:O, s:O}, s:O}",
				"apiVersion", JOB_API_VERSION,
				"kind", JOB_KIND, "metadata",
				"name", json_object_get(json_object_get(job, "metadata"), "name"),
				"namespace", json_object_get(json_object_get(job, "metadata"), "namespace"),
				"resourceVersion", json_object_get(json_object_get(job, "metadata"), "resourceVersion"),
				"status", status);
	char *body;
	int rc;

	if (!obj)
		return err_set(e, "status: cannot build the object");
	object_path(CRD_PATH, "decoupledtrainingjobs", jget(job, "metadata", "namespace"),
		    jget(job, "metadata", "name"), path, sizeof(path));
	strncat(path, "/status", sizeof(path) - strlen(path) - 1);
	body = json_dumps(obj, JSON_COMPACT);
	json_decref(obj);
	rc = kube_request(k, "PUT", path, NULL, body, NULL, &st, e);
	free(body);
	if (rc && st.code == 409)
		return 1;
	return rc;
}

int apply_status(const struct pass_env *env, struct pass *p)
{
	struct op_metrics *mx = env->metrics;
	struct status_input si = {
		&p->out, p->in.generation, p->m->learners, p->m->n, &p->m->progress,
		p->in.syncer_ready, NULL, p->status,
		p->js.syncer.shards > 1 ? p->js.syncer.shards : 1, 0, -1,
	};
	json_t *st;
	struct err e;
	int r = 0;

	if (p->in.deleting)
		return 0;   /* the job goes; its status with it */
	if (env->chaos)
		si.chaos = chaos_ctl_status(env->chaos, p->m->key, p->m->uid);
	/* the shards that answered the last reads while a syncer pod is
	 * ready; else the StatefulSet's ready replicas (docs/operator.md,
	 * Shards) */
	if (p->in.syncer_ready && p->m->progress.shards == si.shards) {
		si.shards_up = p->m->progress.shards_up;
		si.shard_down = p->m->progress.shard_down;
	} else {
		si.shards_up = p->syncer_ready_replicas < si.shards ?
			       p->syncer_ready_replicas : si.shards;
	}
	st = status_build(&si);
	if (status_should_write(p->status, st, APPLY_STATUS_PROGRESS_EVERY)) {
		r = put_status(env->k, p->job, st, &e);
		if (r == 1) {
			op_metrics_count(mx, &mx->conflicts);
			log_debug("%s: status conflict; retrying from a newer read", p->key);
		} else if (r) {
			log_warn("%s: %s", p->key, e.msg);
		} else {
			op_metrics_count(mx, &mx->status_writes);
		}
	}
	json_decref(st);
	return r ? -1 : 0;
}
