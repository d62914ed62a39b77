/*
 * queue: a job in a Kueue queue, its Workload made, read and answered
 * (queue.h; docs/operator.md, Kueue).
 */
#include "operator/queue.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "operator/children.h"
#include "operator/reconcile.h"

#define KUEUE_API "/apis/kueue.x-k8s.io/v1beta2"

static const char *label(json_t *obj, const char *key)
{
	return json_string_value(json_object_get(json_object_get(json_object_get(
		obj, "metadata"), "labels"), key));
}

static json_t *wl_cond(json_t *wl, const char *type)
{
	json_t *c;
	size_t i;

	json_array_foreach(json_object_get(json_object_get(wl, "status"),
					   "conditions"), i, c) {
		const char *t = json_string_value(json_object_get(c, "type"));

		if (t && !strcmp(t, type))
			return c;
	}
	return NULL;
}

static int wl_true(json_t *wl, const char *type)
{
	const char *s = json_string_value(json_object_get(wl_cond(wl, type), "status"));

	return s && !strcmp(s, "True");
}

static const char *cond_str(json_t *c, const char *key, const char *def)
{
	const char *s = json_string_value(json_object_get(c, key));

	return s && s[0] ? s : def;
}

static void wl_path(const struct pass *p, const char *sub, char *out, size_t n)
{
	snprintf(out, n, KUEUE_API "/namespaces/%s/workloads/%s" QUEUE_WORKLOAD_SUFFIX "%s",
		 p->ns, p->name, sub);
}

/* A pod set: `count` pods like `podspec` (taken); minCount when below. */
static json_t *pod_set(const char *name, int count, int min, json_t *podspec)
{
	json_t *s = json_pack("{s:s, s:i, s:{s:o}}", "name", name, "count", count,
			      "template", "spec", podspec ? podspec : json_object());

	if (min > 0 && min < count)
		json_object_set_new(s, "minCount", json_integer(min));
	return s;
}

/* spec.podSets: the learners (K of M may be admitted), the syncer's
 * shards and the evaluator, each from the pod the operator would make */
static json_t *pod_sets(const struct pass_env *env, struct pass *p)
{
	struct child_ctx c;
	json_t *sets = json_array(), *pod, *sts;
	int M = p->js.learners.replicas, S = p->js.syncer.shards;

	pass_child_ctx(env, p, 0, &c);
	pod = child_learner(&c, 0);
	json_array_append_new(sets, pod_set("learners", M, p->js.syncer.min_quorum,
					    json_incref(json_object_get(pod, "spec"))));
	json_decref(pod);
	sts = child_syncer(&c);
	json_array_append_new(sets, pod_set("syncer", S > 0 ? S : 1, 0, json_incref(
		json_object_get(json_object_get(json_object_get(sts, "spec"),
						"template"), "spec"))));
	json_decref(sts);
	if (p->in.want_evaluator && (pod = child_evaluator(&c))) {
		json_array_append_new(sets, pod_set("evaluator", 1, 0, json_incref(
			json_object_get(pod, "spec"))));
		json_decref(pod);
	}
	return sets;
}

/* The label kueue.x-k8s.io/priority-class: its WorkloadPriorityClass's
 * reference and value into spec; 0, or -1 when it cannot be read. */
static int priority(const struct pass_env *env, struct pass *p, json_t *spec,
		    struct err *e)
{
	const char *name = label(p->job, QUEUE_PRIORITY_LABEL);
	struct kube_status st;
	char path[512];
	json_t *wpc = NULL;

	if (!name || !name[0])
		return 0;
	snprintf(path, sizeof(path), KUEUE_API "/workloadpriorityclasses/%s", name);
	if (kube_request(env->k, "GET", path, NULL, NULL, &wpc, &st, e))
		return err_wrap(e, "WorkloadPriorityClass '%s'", name);
	json_object_set_new(spec, "priorityClassRef", json_pack(
		"{s:s, s:s, s:s}", "group", "kueue.x-k8s.io", "kind",
		"WorkloadPriorityClass", "name", name));
	json_object_set_new(spec, "priority", json_integer(json_integer_value(
		json_object_get(wpc, "value"))));
	json_decref(wpc);
	return 0;
}

/* The job's Workload, made: 0 (or it was there), -1 with e. */
static int create(const struct pass_env *env, struct pass *p, const char *queue,
		  struct err *e)
{
	char path[512], name[CHILD_NAME_MAX];
	struct kube_status st;
	json_t *wl, *spec;
	char *body;
	int rc;

	snprintf(name, sizeof(name), "%s" QUEUE_WORKLOAD_SUFFIX, p->name);
	spec = json_pack("{s:s, s:o}", "queueName", queue, "podSets", pod_sets(env, p));
	if (priority(env, p, spec, e)) {
		json_decref(spec);
		return -1;
	}
	wl = json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s}, s:[{s:s, s:s, s:s, s:s,"
		       " s:b, s:b}]}, s:o}",
		       "apiVersion", "kueue.x-k8s.io/v1beta2", "kind", "Workload",
		       "metadata", "name", name, "namespace", p->ns,
		       "labels", "ddiloco.io/job", p->name,
		       "ownerReferences", "apiVersion", "ddiloco.io/v1alpha1",
		       "kind", "DecoupledTrainingJob", "name", p->name, "uid", p->uid,
		       "controller", 1, "blockOwnerDeletion", 1, "spec", spec);
	body = json_dumps(wl, JSON_COMPACT);
	json_decref(wl);
	snprintf(path, sizeof(path), KUEUE_API "/namespaces/%s/workloads", p->ns);
	rc = kube_request(env->k, "POST", path, NULL, body, NULL, &st, e);
	free(body);
	if (rc && st.code == 409)
		return 0;
	if (!rc)
		log_info("%s: Workload %s made in queue %s", p->key, name, queue);
	return rc;
}

/* A flavor's node labels into nodeSelector and its tolerations onto
 * tolerations, of spec.<part> of the pass's own copy of the job. */
static int flavor_place(const struct pass_env *env, struct pass *p,
			const char *part, const char *flavor, struct err *e)
{
	json_t *spec = json_object_get(json_object_get(p->job, "spec"), part);
	json_t *rf = NULL, *ns, *tol, *v;
	struct kube_status st;
	const char *k;
	char path[512];
	size_t i;

	snprintf(path, sizeof(path), KUEUE_API "/resourceflavors/%s", flavor);
	if (kube_request(env->k, "GET", path, NULL, NULL, &rf, &st, e))
		return err_wrap(e, "ResourceFlavor '%s'", flavor);
	if (!json_is_object(ns = json_object_get(spec, "nodeSelector"))) {
		ns = json_object();
		json_object_set_new(spec, "nodeSelector", ns);
	}
	json_object_foreach(json_object_get(json_object_get(rf, "spec"), "nodeLabels"), k, v)
		json_object_set(ns, k, v);
	if (!json_is_array(tol = json_object_get(spec, "tolerations"))) {
		tol = json_array();
		json_object_set_new(spec, "tolerations", tol);
	}
	json_array_foreach(json_object_get(json_object_get(rf, "spec"), "tolerations"), i, v)
		json_array_append(tol, v);
	json_decref(rf);
	return 0;
}

/* The admission's pod sets: the learners' count, and every set's flavors
 * placed (a flavor once a part). */
static int admitted(const struct pass_env *env, struct pass *p, json_t *adm,
		    struct err *e)
{
	json_t *a, *f;
	size_t i;
	const char *res;

	json_array_foreach(json_object_get(adm, "podSetAssignments"), i, a) {
		const char *set = json_string_value(json_object_get(a, "name"));
		const char *part = set && !strcmp(set, "syncer") ? "syncer" : "learners";
		char done[8][64];
		int nd = 0;

		if (set && !strcmp(set, "learners") && json_is_integer(json_object_get(a, "count")))
			p->in.queue.learners = (int)json_integer_value(json_object_get(a, "count"));
		json_object_foreach(json_object_get(a, "flavors"), res, f) {
			const char *fl = json_string_value(f);
			int seen = 0;

			for (int d = 0; d < nd; d++)
				seen |= !strcmp(done[d], fl);
			if (!fl || seen || nd == 8)
				continue;
			snprintf(done[nd++], sizeof(done[0]), "%s", fl);
			if (flavor_place(env, p, part, fl, e))
				return -1;
		}
	}
	return 0;
}

int queue_observe(const struct pass_env *env, struct pass *p)
{
	const char *queue = label(p->job, QUEUE_LABEL);
	struct rc_queue *q = &p->in.queue;
	char path[512];
	struct kube_status st;
	json_t *wl = NULL, *c;
	struct err e;

	if (!queue || !queue[0] || p->in.deleting || p->spec_error)
		return 0;
	q->queued = 1;
	wl_path(p, "", path, sizeof(path));
	if (kube_request(env->k, "GET", path, NULL, NULL, &wl, &st, &e)) {
		if (st.code != 404)
			return -1;
		if (p->in.phase == PHASE_SUCCEEDED || p->in.phase == PHASE_FAILED)
			return 0;
		q->held = 1;
		snprintf(q->reason, sizeof(q->reason), "WorkloadCreated");
		if (create(env, p, queue, &e)) {
			snprintf(q->reason, sizeof(q->reason), "WorkloadNotCreated");
			snprintf(q->message, sizeof(q->message), "the job's Workload "
				 "cannot be made (is Kueue installed?): %.400s", e.msg);
			log_warn("%s: %s", p->key, q->message);
		} else {
			snprintf(q->message, sizeof(q->message), "waiting for queue "
				 "%s to admit Workload %s" QUEUE_WORKLOAD_SUFFIX, queue,
				 p->name);
		}
		return 0;
	}
	p->workload = wl;
	if (json_is_object(json_object_get(json_object_get(wl, "status"), "admission")) &&
	    wl_true(wl, "QuotaReserved") && !wl_true(wl, "Evicted")) {
		q->admitted = 1;
		snprintf(q->reason, sizeof(q->reason), "Admitted");
		if (admitted(env, p, json_object_get(json_object_get(wl, "status"),
						     "admission"), &e)) {
			log_warn("%s: %s", p->key, e.msg);
			return -1;
		}
		snprintf(q->message, sizeof(q->message), "admitted by ClusterQueue %s: "
			 "%d of %d learners",
			 cond_str(json_object_get(json_object_get(wl, "status"), "admission"),
				  "clusterQueue", "?"),
			 q->learners > 0 ? q->learners : p->js.learners.replicas,
			 p->js.learners.replicas);
		return 0;
	}
	q->held = 1;
	c = wl_true(wl, "Evicted") ? wl_cond(wl, "Evicted") : wl_cond(wl, "QuotaReserved");
	snprintf(q->reason, sizeof(q->reason), "%s", wl_true(wl, "Evicted") ?
		 "Evicted" : cond_str(c, "reason", "Pending"));
	snprintf(q->message, sizeof(q->message), "queue %s: %s", queue,
		 cond_str(c, "message", "waiting for the Workload's admission"));
	return 0;
}

/* status.conditions of wl with `type` set (added or replaced) */
static void put_cond(json_t *conds, const char *type, int status,
		     const char *reason, const char *message, const char *now)
{
	json_t *c, *n = json_pack("{s:s, s:s, s:s, s:s, s:s}", "type", type,
				  "status", status ? "True" : "False", "reason", reason,
				  "message", message, "lastTransitionTime", now);
	size_t i;

	json_array_foreach(conds, i, c) {
		const char *t = json_string_value(json_object_get(c, "type"));

		if (t && !strcmp(t, type)) {
			const char *s = json_string_value(json_object_get(c, "status"));

			/* the time moves only with the status */
			if (s && !strcmp(s, status ? "True" : "False"))
				json_object_set(n, "lastTransitionTime",
						json_object_get(c, "lastTransitionTime"));
			json_array_set_new(conds, i, n);
			return;
		}
	}
	json_array_append_new(conds, n);
}

/* The Workload's status written back: a merge patch at the version read
 * (a 409 retries the pass). */
static int write_status(const struct pass_env *env, struct pass *p,
			json_t *status)
{
	json_t *body = json_pack("{s:{s:O}, s:o}", "metadata", "resourceVersion",
				 json_object_get(json_object_get(p->workload, "metadata"),
						 "resourceVersion"), "status", status);
	struct kube_status st;
	char path[512], *text;
	struct err e;
	int rc;

	wl_path(p, "/status", path, sizeof(path));
	text = json_dumps(body, JSON_COMPACT);
	json_decref(body);
	rc = kube_request(env->k, "PATCH", path, "application/merge-patch+json", text,
			  NULL, &st, &e);
	free(text);
	if (rc)
		log_warn("%s: Workload %s" QUEUE_WORKLOAD_SUFFIX " status: %s", p->key,
			 p->name, e.msg);
	return rc;
}

/* no pod of the job left: its learners', syncer's, evaluator's */
static int all_gone(const struct pass *p)
{
	return p->in.npods == 0 && p->nsyncer_pods == 0 && !p->in.evaluator &&
	       !p->in.statefulset;
}

int queue_after(const struct pass_env *env, struct pass *p)
{
	json_t *wl = p->workload, *conds, *ev;
	enum job_phase ph = p->out.phase;
	char now[40];

	if (!p->in.queue.queued)
		return 0;
	if (ph != PHASE_SUCCEEDED && ph != PHASE_FAILED &&
	    (!p->out.requeue_after || p->out.requeue_after > QUEUE_POLL))
		p->out.requeue_after = QUEUE_POLL;
	if (!wl || wl_true(wl, "Finished"))
		return 0;
	kube_time_now(now, sizeof(now), 0);
	conds = json_deep_copy(json_object_get(json_object_get(wl, "status"), "conditions"));
	if (!json_is_array(conds)) {
		json_decref(conds);
		conds = json_array();
	}
	if (ph == PHASE_SUCCEEDED || ph == PHASE_FAILED) {
		/* the quota is free again */
		put_cond(conds, "Finished", 1, ph == PHASE_SUCCEEDED ? "Succeeded" : "Failed",
			 ph == PHASE_SUCCEEDED ? "the job succeeded" : "the job failed", now);
		log_info("%s: job finished: Workload marked Finished", p->key);
		return write_status(env, p, json_pack("{s:o}", "conditions", conds));
	}
	ev = wl_cond(wl, "Evicted");
	if (wl_true(wl, "Evicted") &&
	    json_is_object(json_object_get(json_object_get(wl, "status"), "admission")) &&
	    all_gone(p)) {
		const char *why = cond_str(ev, "reason", "Evicted");
		const char *msg = cond_str(ev, "message", "evicted");

		/* what the job framework writes once an evicted job stopped:
		 * the reservation given back, queued again after a preemption */
		put_cond(conds, "QuotaReserved", 0, "Pending", msg, now);
		put_cond(conds, "Admitted", 0, "NoReservation", "The workload has no reservation", now);
		put_cond(conds, "Requeued", !strcmp(why, "Preempted") || !strcmp(why, "NodeFailures"),
			 why, msg, now);
		log_info("%s: evicted (%s) and stopped: the Workload's reservation given back",
			 p->key, why);
		return write_status(env, p, json_pack("{s:n, s:o}", "admission",
						      "conditions", conds));
	}
	json_decref(conds);
	return 0;
}
