/*
 * pass: observe, one function per source, in this order:
 *
 *   read_job              the job from the cache through jobspec, its
 *                         memory, the restarts and failures status kept
 *                         (they survive an operator restart)
 *   observe_learners      the job's pods: learners, the evaluator, and the
 *                         syncer's pods (why one cannot start, its
 *                         restarts, whether it is stuck terminating)
 *   observe_children      which other children exist; the syncer's readiness
 *   observe_templates     the templates against the operator's pod policy
 *   observe_tls           <job>-tls's owner, from its metadata (one GET)
 *   observe_progress      the syncer's /status as the progress reader
 *                         last read it (never waited for)
 *   observe_job           the job's own fields into rc_input
 *   observe_replacements  created pods the informer saw deleted
 *
 * Everything comes from the caches, the job's memory and the progress
 * reader, but for one read of the Secret's metadata; no write to the API
 * server happens here, and nothing waits but that read.
 */
#include "operator/pass.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"
#include "common/log.h"
#include "common/syncer_status.h"
#include "common/util.h"
#include "operator/children.h"
#include "operator/informer.h"
#include "operator/podcheck.h"
#include "operator/status.h"

/* failurePolicy defaults (the CRD's too) */
#define DEFAULT_BACKOFF_RESET 600
#define DEFAULT_SYNCER_RESTART_LIMIT 5
#define DEFAULT_SYNCER_RESTART_WINDOW 600
#define DEFAULT_PENDING_TIMEOUT 300

static const char *jget(json_t *o, const char *a, const char *b)
{
	return json_string_value(json_object_get(json_object_get(o, a), b));
}

void pass_release(struct pass *p)
{
	rc_output_release(&p->out);
	free(p->pods);
	json_decref(p->job);
	json_decref(p->core);
	free(p->core_text);
	json_decref(p->workload);
}

static int cond_true(json_t *obj, const char *type, double *since)
{
	json_t *c;
	size_t i;

	json_array_foreach(json_object_get(json_object_get(obj, "status"), "conditions"), i, c) {
		const char *t = json_string_value(json_object_get(c, "type"));
		const char *s = json_string_value(json_object_get(c, "status"));

		if (t && !strcmp(t, type)) {
			if (since)
				*since = kube_time_parse(json_string_value(
					json_object_get(c, "lastTransitionTime")));
			return s && !strcmp(s, "True");
		}
	}
	return 0;
}

/* A pod of the job's learners, its evaluator or its syncer; `ctr` names
 * the main container, whose exit code is read. */
static void observe_pod(const char *job, json_t *pod, const char *ctr,
			struct obs_pod *p)
{
	const char *phase = jget(pod, "status", "phase");
	const char *uid = jget(pod, "metadata", "uid"), *h;

	memset(p, 0, sizeof(*p));
	p->index = learner_index(job, jget(pod, "metadata", "name"));
	snprintf(p->uid, sizeof(p->uid), "%s", uid ? uid : "");
	p->state = !phase ? POD_PENDING :
		   !strcmp(phase, "Running") ? POD_RUNNING :
		   !strcmp(phase, "Succeeded") ? POD_SUCCEEDED :
		   !strcmp(phase, "Failed") ? POD_FAILED : POD_PENDING;
	p->ready = cond_true(pod, "Ready", &p->ready_since);
	if (!p->ready)
		p->ready_since = 0;
	p->deleting = json_object_get(json_object_get(pod, "metadata"),
				      "deletionTimestamp") != NULL;
	p->delete_at = p->deleting ? fmax(0, kube_time_parse(jget(pod, "metadata",
							  "deletionTimestamp"))) : 0;
	p->disrupted = podcheck_disrupted(pod);
	p->exit_code = podcheck_exit_reason(pod, ctr, p->exit_reason,
					    sizeof(p->exit_reason));
	/* a learner side of another release: the sidecar's exit says it
	 * (docs/abi.md, Versions) */
	p->version_mismatch = podcheck_ended_with(pod, "sidecar", CLI_EXIT_MISMATCH,
						  p->mismatch, sizeof(p->mismatch));
	if (!podcheck_blocked(pod, p->reason, sizeof(p->reason), p->message,
			      sizeof(p->message)))
		p->starting = podcheck_starting(pod, p->reason, sizeof(p->reason),
						p->message, sizeof(p->message));
	p->created = fmax(0, kube_time_parse(jget(pod, "metadata",
						  "creationTimestamp")));
	h = json_string_value(json_object_get(json_object_get(json_object_get(
		pod, "metadata"), "labels"), LABEL_POD_SPEC));
	snprintf(p->spec_hash, sizeof(p->spec_hash), "%s", h ? h : "");
}

/*
 * The syncer container's restarts by the kubelet (a crash, an OOM kill, a
 * failed liveness probe) on the pod it runs in, into the job's memory
 * (jobmem_syncer_seen), with why it last ended.
 */
static void observe_syncer_pod(struct jobmem *m, const char *job, json_t *pod,
			       double now)
{
	int shard = syncer_shard_index(job, jget(pod, "metadata", "name"));
	const char *uid = jget(pod, "metadata", "uid");
	json_t *cs;
	size_t i;
	long n = -1;
	char why[128] = "";

	json_array_foreach(json_object_get(json_object_get(pod, "status"),
					   "containerStatuses"), i, cs) {
		json_t *t = json_object_get(json_object_get(cs, "lastState"), "terminated");

		if (!json_is_string(json_object_get(cs, "name")) ||
		    strcmp(json_string_value(json_object_get(cs, "name")), "syncer"))
			continue;
		n = (long)json_integer_value(json_object_get(cs, "restartCount"));
		if (t)
			snprintf(why, sizeof(why), "%s, exit code %d",
				 json_is_string(json_object_get(t, "reason")) ?
				 json_string_value(json_object_get(t, "reason")) : "ended",
				 (int)json_integer_value(json_object_get(t, "exitCode")));
	}
	if (!uid || n < 0)
		return;
	jobmem_syncer_seen(m, shard, uid, n, why, now);
}

/* The template with {job}, {namespace}, {port} and {shard} replaced,
 * cut to n. */
static void status_url(const char *t, const char *job, const char *ns,
		       int port, int shard, char *out, size_t n)
{
	size_t k = 0;

	while (*t && k + 1 < n) {
		const char *v = NULL;
		char num[16];

		if (!strncmp(t, "{job}", 5))
			v = job, t += 5;
		else if (!strncmp(t, "{namespace}", 11))
			v = ns, t += 11;
		else if (!strncmp(t, "{port}", 6)) {
			snprintf(num, sizeof(num), "%d", port);
			v = num, t += 6;
		} else if (!strncmp(t, "{shard}", 7)) {
			snprintf(num, sizeof(num), "%d", shard);
			v = num, t += 7;
		}
		if (v) {
			k += (size_t)snprintf(out + k, n - k, "%s", v);
			if (k >= n)
				k = n - 1;
		} else {
			out[k++] = *t++;
		}
	}
	out[k] = '\0';
}

/* The learners' restarts and failures status kept: they survive an
 * operator restart. */
static void read_learner_counts(struct pass *p)
{
	json_t *restarts, *failures;

	restarts = json_object_get(json_object_get(p->status, "learners"), "restarts");
	failures = json_object_get(json_object_get(p->status, "learners"), "failures");
	for (int k = 0; k < p->js.learners.replicas; k++) {
		int r = (int)json_integer_value(json_array_get(restarts, (size_t)k));
		int f = (int)json_integer_value(json_array_get(failures, (size_t)k));

		if (r > p->m->learners[k].restarts)
			p->m->learners[k].restarts = r;
		/* after an operator restart only: the memory is newer */
		if (!p->m->learners[k].seen && f > p->m->learners[k].failures)
			p->m->learners[k].failures = f;
	}
}

/*
 * The job from the cache, its meaning through the one parser (jobspec,
 * as `ddiloco run` reads it) and the operator's memory of it. 1 when the
 * job is gone (its memory is dropped), -1 on failure.
 */
static int read_job(const struct pass_env *env, const char *key, struct pass *p)
{
	const char *slash = strchr(key, '/');

	/* a name that does not fit is no job of ours: a label value, the
	 * job's name is at most 63 bytes */
	if (!slash || slash - key >= (long)sizeof(p->ns) ||
	    strlen(slash + 1) >= sizeof(p->name))
		return 1;
	snprintf(p->ns, sizeof(p->ns), "%.*s", (int)(slash - key), key);
	snprintf(p->name, sizeof(p->name), "%s", slash + 1);
	if (!(p->job = informer_get(env->caches->jobs, p->ns, p->name))) {
		jobmem_drop(env->mems, key);
		return 1;
	}
	/* spec.managedBy another controller (e.g. MultiKueue): not ours */
	if (job_managed_elsewhere(p->job)) {
		jobmem_drop(env->mems, key);
		return 1;
	}
	p->uid = jget(p->job, "metadata", "uid");
	p->status = json_object_get(p->job, "status");
	p->core = job_core(p->job);
	p->core_text = json_dumps(p->core, JSON_COMPACT | JSON_SORT_KEYS);
	if (!p->core_text || jobspec_parse(p->core_text, strlen(p->core_text), key,
					   &p->js, &p->spec_err)) {
		p->spec_error = 1;
		jobspec_defaults(&p->js);
		snprintf(p->js.name, sizeof(p->js.name), "%s", p->name);
	}
	if (!(p->m = jobmem_get(env->mems, key, p->uid ? p->uid : "",
				p->js.learners.replicas)))
		return -1;
	read_learner_counts(p);
	return 0;
}

/* The syncer's pod: why it cannot start (the first such pod's), when it
 * was made, and its container's restarts. */
static void observe_syncer(struct pass *p, json_t *pod)
{
	if (!p->syncer_reason[0] &&
	    !podcheck_blocked(pod, p->syncer_reason, sizeof(p->syncer_reason),
			      p->syncer_message, sizeof(p->syncer_message)) &&
	    (p->in.syncer_starting = podcheck_starting(pod,
			p->syncer_reason, sizeof(p->syncer_reason),
			p->syncer_message, sizeof(p->syncer_message))))
		p->in.syncer_created = fmax(0, kube_time_parse(jget(pod,
				"metadata", "creationTimestamp")));
	/* owned by the StatefulSet: the job's name picks it */
	observe_syncer_pod(p->m, p->name, pod, clock_wall());
	/* for its deletion when it is lost with its node */
	if (p->nsyncer_pods < JOB_MAX_SHARDS) {
		struct obs_pod *sp = &p->syncer_pods[p->nsyncer_pods++];

		observe_pod(p->name, pod, "syncer", sp);
		sp->index = syncer_shard_index(p->name, jget(pod, "metadata", "name"));
	}
}

/* The job's learner pods (its own uid's, not an older job's) -> in.pods,
 * its evaluator's pod -> in.evaluator, and its syncer's pod. */
static int observe_learners(const struct pass_env *env, struct pass *p)
{
	json_t *pods = informer_select(env->caches->pods, p->ns, LABEL_JOB, p->name), *pod;
	size_t i, npods = json_array_size(pods);
	char ev[CHILD_NAME_MAX];

	if (child_name(p->name, CHILD_EVALUATOR, 0, ev, sizeof(ev)))
		ev[0] = '\0';
	p->in.want_evaluator = !p->spec_error && p->js.evaluator.command.n > 0 &&
			       p->js.model.kind == MODEL_EXTERNAL;
	p->in.evaluator_mem = &p->m->evaluator;

	if (!(p->pods = calloc(npods ? npods : 1, sizeof(*p->pods)))) {
		json_decref(pods);
		return -1;
	}
	json_array_foreach(pods, i, pod) {
		const char *ou = caches_owner_uid(pod);
		const char *role = json_string_value(json_object_get(json_object_get(
			json_object_get(pod, "metadata"), "labels"), LABEL_ROLE));
		const char *name = jget(pod, "metadata", "name");

		if (role && !strcmp(role, "syncer"))
			observe_syncer(p, pod);
		if (!ou || !p->uid || strcmp(ou, p->uid))
			continue;   /* an older job's pod, or the syncer's */
		if (role && !strcmp(role, "evaluator") && !strcmp(ev, name ? name : "")) {
			observe_pod(p->name, pod, "evaluator", &p->evaluator);
			p->evaluator.index = 0;
			p->in.evaluator = &p->evaluator;
			continue;
		}
		if (!role || strcmp(role, "learner"))
			continue;
		observe_pod(p->name, pod, "learner", &p->pods[p->in.npods++]);
	}
	json_decref(pods);
	p->in.pods = p->pods;
	p->in.syncer_pods = p->syncer_pods;
	p->in.nsyncer_pods = p->nsyncer_pods;
	p->in.syncer_reason = p->syncer_reason;
	p->in.syncer_message = p->syncer_message;
	return 0;
}

/* A learner pod we created and the pod informer has since seen deleted
 * (maybe before the cache ever showed it) is gone: reconcile recreates it. */
static void observe_replacements(const struct pass_env *env, struct pass *p)
{
	struct informer *pods = env->caches->pods;

	for (int k = 0; k < p->js.learners.replicas; k++) {
		struct learner_mem *lm = &p->m->learners[k];

		if (lm->create_sent > 0 && lm->create_uid[0])
			lm->create_gone = informer_deleted(pods, lm->create_uid);
	}
	if (p->m->evaluator.create_sent > 0 && p->m->evaluator.create_uid[0])
		p->m->evaluator.create_gone = informer_deleted(pods,
						p->m->evaluator.create_uid);
}

/*
 * Whether the job's child of `kind` is in the cache. When what it asks
 * for (CACHES_SPEC_HASH) is not what this operator last wrote or first
 * found (jobmem written_hash; at the first look, another manager in its
 * managedFields), it drifted (docs/operator.md, Drift): who
 * changed it (CACHES_DRIFT_BY, else "another manager") into in.drift[d],
 * its version into p->drift_rv[d]. The cached copy into *keep (the
 * caller's) when keep is not NULL.
 */
static int cached(struct informer *inf, struct pass *p, enum child_kind kind,
		  enum drift_kind d, json_t **keep)
{
	char name[CHILD_NAME_MAX];
	json_t *x, *meta;
	const char *by, *rv, *hex;
	uint64_t h;

	if (child_name(p->name, kind, 0, name, sizeof(name)))
		return 0;
	x = informer_get(inf, p->ns, name);
	meta = json_object_get(x, "metadata");
	by = json_string_value(json_object_get(meta, CACHES_DRIFT_BY));
	rv = json_string_value(json_object_get(meta, "resourceVersion"));
	hex = json_string_value(json_object_get(meta, CACHES_SPEC_HASH));
	h = hex ? strtoull(hex, NULL, 16) : 0;
	/* this process's first look: as found, unless another manager's
	 * write shows in its managedFields */
	if (h && !p->m->written_hash[d] && !by)
		p->m->written_hash[d] = h;
	else if (h && rv && h != p->m->written_hash[d]) {
		snprintf(p->in.drift[d], sizeof(p->in.drift[d]), "%s",
			 by ? by : "another manager");
		snprintf(p->drift_rv[d], sizeof(p->drift_rv[d]), "%s", rv);
	}
	if (keep)
		*keep = x;
	else
		json_decref(x);
	return x != NULL;
}

/*
 * The checkpoint claims: <job>-checkpoints, or each shard's of a sharded
 * job (children.h). in.pvc when every one exists; in.pvc_owned 1 when
 * every one has the job as owner, 0 when none has, -1 when some have
 * (reconcile then applies them all again, each as it must be); each
 * one's requested storage in in.claim_bytes.
 */
static void observe_claims(const struct caches *c, struct pass *p)
{
	int S = p->js.syncer.shards > 1 ? p->js.syncer.shards : 1;
	int have = 0, owned = 0;
	char name[CHILD_NAME_MAX];
	json_t *pvc;

	for (int i = 0; i < S; i++) {
		const char *ou;

		if (own_claim_name(p->name, S, i, name, sizeof(name)))
			return;
		if (!(pvc = informer_get(c->pvcs, p->ns, name)))
			continue;
		ou = caches_owner_uid(pvc);
		if (quantity_bytes(jget(json_object_get(json_object_get(pvc, "spec"),
					"resources"), "requests", "storage"),
				   &p->in.claim_bytes[i]))
			p->in.claim_bytes[i] = 0;
		have++;
		owned += ou && p->uid && !strcmp(ou, p->uid);
		json_decref(pvc);
	}
	p->in.pvc = have == S;
	p->in.pvc_owned = owned == have ? 1 : owned == 0 ? 0 : -1;
}

/* The StatefulSet's LABEL_POD_SPEC and version, for syncer_outdated. */
static void keep_syncer_spec(struct pass *p, json_t *sts)
{
	json_t *meta = json_object_get(sts, "metadata");
	const char *have = json_string_value(json_object_get(json_object_get(meta,
						"labels"), LABEL_POD_SPEC));
	const char *rv = json_string_value(json_object_get(meta, "resourceVersion"));

	snprintf(p->syncer_spec, sizeof(p->syncer_spec), "%s", have ? have : "");
	snprintf(p->syncer_rv, sizeof(p->syncer_rv), "%s", rv ? rv : "");
}

/* in.syncer_outdated: the StatefulSet's LABEL_POD_SPEC (kept) is not the
 * one the job asks for now (children.h); its version into p->drift_rv
 * for the write. One without the label (an older operator's) is left as
 * it is. */
static void syncer_outdated(const struct pass_env *env, struct pass *p)
{
	json_t *want;
	const char *h;
	struct child_ctx c;

	if (!p->syncer_spec[0] || !p->syncer_rv[0] || p->spec_error ||
	    p->in.drift[DRIFT_SYNCER][0])
		return;
	pass_child_ctx(env, p, 0, &c);
	if (!(want = child_syncer(&c)))
		return;
	h = json_string_value(json_object_get(json_object_get(json_object_get(
		want, "metadata"), "labels"), LABEL_POD_SPEC));
	p->in.syncer_outdated = h && strcmp(h, p->syncer_spec);
	if (p->in.syncer_outdated)
		snprintf(p->drift_rv[DRIFT_SYNCER], sizeof(p->drift_rv[DRIFT_SYNCER]),
			 "%s", p->syncer_rv);
	json_decref(want);
}

/*
 * <job>-spec: in the cache (cached), and in.configmap_outdated when the
 * job now asks for other data (its spec changed: the budget, say) and no
 * other manager's change is in the way (that is a drift, put right as
 * such). Its version into p->drift_rv for the write (ACT_REPLACE_CHILD).
 */
static void observe_configmap(const struct pass_env *env, struct pass *p)
{
	json_t *cm = NULL, *want;
	struct child_ctx c;
	const char *hex, *rv;

	p->in.configmap = cached(env->caches->cms, p, CHILD_SPEC, DRIFT_CONFIGMAP, &cm);
	hex = json_string_value(json_object_get(json_object_get(cm, "metadata"),
						CACHES_SPEC_HASH));
	rv = json_string_value(json_object_get(json_object_get(cm, "metadata"),
					       "resourceVersion"));
	pass_child_ctx(env, p, 0, &c);
	if (hex && rv && !p->spec_error && !p->in.drift[DRIFT_CONFIGMAP][0] &&
	    (want = child_configmap(&c))) {
		p->in.configmap_outdated = strtoull(hex, NULL, 16) != caches_spec_hash(want);
		if (p->in.configmap_outdated)
			snprintf(p->drift_rv[DRIFT_CONFIGMAP],
				 sizeof(p->drift_rv[DRIFT_CONFIGMAP]), "%s", rv);
		json_decref(want);
	}
	json_decref(cm);
}

/* Which of the other children exist, and whether the syncer is ready. */
static void observe_children(const struct pass_env *env, struct pass *p)
{
	const struct caches *c = env->caches;
	const char *stg = jget(json_object_get(p->job, "spec"), "syncer", "storage");
	json_t *sts = NULL, *retain;

	p->in.statefulset = cached(c->sts, p, CHILD_SYNCER, DRIFT_SYNCER, &sts);
	p->syncer_spec[0] = '\0';
	p->syncer_rv[0] = '\0';
	if (sts)
		keep_syncer_spec(p, sts);
	p->syncer_ready_replicas = sts ? (int)json_integer_value(json_object_get(
		json_object_get(sts, "status"), "readyReplicas")) : 0;
	p->in.syncer_ready = p->syncer_ready_replicas >= 1;
	p->in.syncer_pods_ready = p->syncer_ready_replicas;
	json_decref(sts);
	observe_configmap(env, p);
	p->in.service = cached(c->svcs, p, CHILD_SYNCER, DRIFT_SERVICE, NULL);
	observe_claims(c, p);
	retain = json_object_get(json_object_get(json_object_get(json_object_get(
		p->job, "spec"), "syncer"), "checkpoints"), "retain");
	p->in.retain = json_is_boolean(retain) ? json_is_true(retain) : -1;
	p->in.netpol = cached(c->netpols, p, CHILD_SYNCER, DRIFT_NETPOL, NULL);
	p->in.storage_given = stg != NULL;
	p->in.resize_refused = p->m->resize_refused[0] ? p->m->resize_refused : NULL;
	p->in.resize_refused_shard = p->m->resize_refused_shard;
	p->in.resize_refused_bytes = p->m->resize_refused_bytes;
	p->in.want_tls = !p->js.syncer.insecure;
	p->in.want_pvc = (!stg || stg[0]) && !jget(json_object_get(json_object_get(
		p->job, "spec"), "syncer"), "checkpoints", "claimName");
}

static const char *str_or(json_t *o, const char *key)
{
	const char *v = json_string_value(json_object_get(o, key));

	return v ? v : "?";
}

/* Whose <job>-tls (name) is, from its metadata, into the job's memory. */
static void tls_owner(struct pass *p, const char *name, json_t *secret)
{
	json_t *refs = json_object_get(json_object_get(secret, "metadata"),
				       "ownerReferences"), *r, *other = NULL;
	struct jobmem *m = p->m;
	size_t i;

	json_array_foreach(refs, i, r) {
		const char *uid = json_string_value(json_object_get(r, "uid"));

		if (uid && p->uid && !strcmp(uid, p->uid)) {
			m->tls = 1;
			return;
		}
		if (!other)
			other = r;
	}
	m->tls = -1;
	if (other) {
		snprintf(m->tls_reason, sizeof(m->tls_reason), "OwnedByAnother");
		snprintf(m->tls_message, sizeof(m->tls_message), "Secret '%.64s' is "
			 "not this job's: it belongs to %.32s '%.48s' uid %.40s, not "
			 "uid %.40s; no pod is made with it (delete it: the operator "
			 "makes a new one)", name, str_or(other, "kind"),
			 str_or(other, "name"), str_or(other, "uid"),
			 p->uid ? p->uid : "?");
		return;
	}
	snprintf(m->tls_reason, sizeof(m->tls_reason), "NoOwner");
	snprintf(m->tls_message, sizeof(m->tls_message), "Secret '%.64s' has no "
		 "owner: it was not made for this job (uid %.40s); no pod is made "
		 "with it (delete it: the operator makes a new one)", name,
		 p->uid ? p->uid : "?");
}

/*
 * <job>-tls (docs/operator.md, Security): its metadata only, read before
 * a pod is to be made (one is missing) and while the last read did not
 * find it this job's, else at most every PASS_TLS_EVERY s; not for a job
 * that makes no pod (insecure, refused by jobspec or the pod policy,
 * suspended, finished, being deleted). 0 done, -1 the read failed (the pass is retried).
 */
static int observe_tls(const struct pass_env *env, struct pass *p)
{
	struct jobmem *m = p->m;
	enum job_phase ph = job_phase_parse(json_string_value(json_object_get(
		p->status, "phase")));
	int make = p->in.npods < p->js.learners.replicas || !p->in.statefulset ||
		   (p->in.want_evaluator && !p->in.evaluator);
	char name[CHILD_NAME_MAX], path[512];
	struct kube_status st;
	json_t *obj = NULL;
	struct err e;

	if (!p->in.want_tls || p->spec_error || p->js.suspend ||
	    p->in.template_reason ||
	    ph == PHASE_SUCCEEDED || ph == PHASE_FAILED ||
	    json_object_get(json_object_get(p->job, "metadata"), "deletionTimestamp") ||
	    (m->tls_known && m->tls == 1 && !make &&
	     clock_mono() - m->tls_at < PASS_TLS_EVERY))
		goto out;
	if (child_name(p->name, CHILD_TLS, 0, name, sizeof(name)))
		return -1;
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/secrets/%s", p->ns, name);
	if (kube_get_metadata(env->k, path, &obj, &st, &e)) {
		if (st.code != 404) {
			log_warn("%s: %s", p->key, e.msg);
			return -1;
		}
		m->tls = 0;
	} else {
		tls_owner(p, name, obj);
		json_decref(obj);
	}
	m->tls_known = 1;
	m->tls_at = clock_mono();
out:
	p->in.tls = m->tls;
	p->in.tls_reason = m->tls_reason;
	p->in.tls_message = m->tls_message;
	return 0;
}

/* The templates against the operator's pod policy (podtemplate.h): the
 * learners' (the evaluator's pod takes it too), then the syncer's. */
static void observe_templates(const struct pass_env *env, struct pass *p)
{
	static const char *const parts[] = { "learners", "syncer" };
	static const struct pod_policy none;
	const struct pod_policy *pol = env->policy ? env->policy : &none;
	json_t *spec = json_object_get(p->job, "spec");
	char where[64];

	for (int i = 0; i < 2; i++) {
		snprintf(where, sizeof(where), "spec.%s.template", parts[i]);
		if (pod_template_check(pol, json_object_get(json_object_get(spec,
				       parts[i]), "template"), where,
				       p->template_reason, sizeof(p->template_reason),
				       p->template_message, sizeof(p->template_message))) {
			p->in.template_reason = p->template_reason;
			p->in.template_message = p->template_message;
			return;
		}
	}
}

/*
 * Whether a checkpoint fits on each shard's volume, into the progress
 * (reconcile.h, CheckpointStorage): -1 for the first shard that says it
 * does not, else 1 when any says it does, else 0.
 */
static void shard_fits(const struct syncer_status *st, const int *up, int S,
		       struct obs_progress *pr)
{
	pr->ckpt_room = 0;
	for (int i = 0; i < S; i++) {
		if (!up[i] || st[i].ckpt.fits < 0)
			continue;
		if (!st[i].ckpt.fits) {
			pr->ckpt_room = -1;
			pr->ckpt_room_shard = i;
			pr->ckpt_needed = st[i].ckpt.needed_bytes;
			pr->ckpt_free = st[i].ckpt.volume_free_bytes;
			return;
		}
		pr->ckpt_room = 1;
	}
}

/*
 * Each shard's /status (one for an unsharded job) while a syncer pod is
 * ready, as the progress reader last read it (operator/progress.h: every
 * PASS_PROGRESS_EVERY s, never waited for here), else what status last
 * said. The job's progress is the shards' aggregate (syncer_status_shards,
 * docs/syncer.md, Shards), of what each shard last said (jobmem_shards);
 * which did not answer is kept beside it. Nothing answering keeps the
 * last progress.
 */
static void observe_progress(const struct pass_env *env, struct pass *p)
{
	struct jobmem *m = p->m;
	int S = p->js.syncer.shards > 1 ? p->js.syncer.shards : 1, nup = 0;
	struct syncer_status st[JOB_MAX_SHARDS], agg;
	int up[JOB_MAX_SHARDS], down = -1;
	char url[JOB_MAX_SHARDS][PROGRESS_URL_MAX], why[128] = "";

	if (!m->progress.have && json_object_get(p->status, "progress"))
		status_read_progress(json_object_get(p->status, "progress"), &m->progress);
	if (!p->in.syncer_ready || !env->progress)
		return;   /* no reader (a test of the pass): the last progress */
	for (int i = 0; i < S; i++)
		status_url(env->status_url, p->name, p->ns, p->js.syncer.http_port,
			   i, url[i], sizeof(url[i]));
	progress_want(env->progress, p->key, S, (const char (*)[PROGRESS_URL_MAX])url);
	if (!progress_take(env->progress, p->key, S, st, up, &m->progress_seen,
			   why, sizeof(why)))
		return;
	for (int i = 0; i < S; i++) {
		nup += up[i];
		if (!up[i] && down < 0)
			down = i;
	}
	if (nup) {
		struct syncer_status *last = S > 1 ? jobmem_shards(m, S) : NULL;

		if (last) {
			/* a shard that did not answer: its last status */
			for (int i = 0; i < S; i++)
				if (up[i])
					syncer_status_move(&last[i], &st[i]);
			syncer_status_shards(&agg, last, up, S);
			status_progress_from_syncer(&agg, &m->progress);
			syncer_status_release(&agg);
		} else {
			status_progress_from_syncer(&st[0], &m->progress);
		}
		m->progress.update_time = clock_wall();
		shard_fits(last ? last : st, up, S, &m->progress);
	}
	m->progress.shards = S;
	m->progress.shards_up = nup;
	m->progress.shard_down = down;
	snprintf(m->progress.shard_down_error, sizeof(m->progress.shard_down_error),
		 "%s", why);
	for (int i = 0; i < S; i++)
		syncer_status_release(&st[i]);
}

/* spec.failurePolicy.rules into out (RC_MAX_EXIT_RULES): how many. The
 * CRD has checked the shape; rules past the bounds are left out. */
static int exit_rules_read(json_t *rules, struct exit_rule *out)
{
	size_t i;
	json_t *r;
	int n = 0;

	json_array_foreach(rules, i, r) {
		json_t *on = json_object_get(r, "onExitCodes"), *v;
		const char *act = json_string_value(json_object_get(r, "action"));
		const char *op = json_string_value(json_object_get(on, "operator"));
		size_t k;

		if (n == RC_MAX_EXIT_RULES || !act || !op)
			break;
		memset(&out[n], 0, sizeof(out[n]));
		out[n].action = !strcmp(act, "FailJob") ? EXIT_FAIL_JOB :
				!strcmp(act, "Ignore") ? EXIT_IGNORE : EXIT_COUNT;
		out[n].not_in = !strcmp(op, "NotIn");
		json_array_foreach(json_object_get(on, "values"), k, v)
			if (out[n].ncodes < RC_MAX_EXIT_CODES && json_is_integer(v))
				out[n].codes[out[n].ncodes++] = (int)json_integer_value(v);
		n++;
	}
	return n;
}

/* An integer field of o (the API server has checked its range), or def. */
static int spec_int(json_t *o, const char *key, int def)
{
	json_t *v = json_object_get(o, key);

	return json_is_integer(v) ? (int)json_integer_value(v) : def;
}

/* The job's own fields reconcile reads: spec, metadata, the last status. */
static void observe_job(struct pass *p)
{
	struct rc_input *in = &p->in;
	json_t *meta = json_object_get(p->job, "metadata");
	json_t *spec = json_object_get(p->job, "spec");
	json_t *bl = json_object_get(spec, "backoffLimit");
	json_t *fp = json_object_get(spec, "failurePolicy");

	in->spec = &p->js;
	in->now = clock_wall();
	in->deleting = json_object_get(meta, "deletionTimestamp") != NULL;
	in->generation = json_integer_value(json_object_get(meta, "generation"));
	in->backoff_limit = json_is_integer(bl) ? (int)json_integer_value(bl) : -1;
	in->backoff_reset = spec_int(fp, "backoffResetSeconds", DEFAULT_BACKOFF_RESET);
	in->active_deadline = spec_int(spec, "activeDeadlineSeconds", -1);
	in->created_time = fmax(0, kube_time_parse(jget(p->job, "metadata",
							"creationTimestamp")));
	in->syncer_restart_limit = spec_int(fp, "syncerRestartLimit",
					    DEFAULT_SYNCER_RESTART_LIMIT);
	in->syncer_restart_window = spec_int(fp, "syncerRestartWindowSeconds",
					     DEFAULT_SYNCER_RESTART_WINDOW);
	in->pending_timeout = spec_int(fp, "pendingTimeoutSeconds",
				       DEFAULT_PENDING_TIMEOUT);
	in->syncer_restarts = jobmem_syncer_restarts(p->m, clock_wall(),
						     in->syncer_restart_window);
	in->syncer_last_exit = p->m->syncer_last_exit[0] ? p->m->syncer_last_exit : NULL;
	in->nexit_rules = exit_rules_read(json_object_get(fp, "rules"), p->exit_rules);
	in->exit_rules = p->exit_rules;
	in->spec_error = p->spec_error;
	in->spec_error_msg = p->spec_err.msg;
	in->phase = job_phase_parse(json_string_value(json_object_get(p->status, "phase")));
	in->start_time = fmax(0, kube_time_parse(json_string_value(
		json_object_get(p->status, "startTime"))));
	in->completion_time = fmax(0, kube_time_parse(json_string_value(
		json_object_get(p->status, "completionTime"))));
	status_read_conditions(p->status, in->conds);
	in->progress = p->m->progress;
}

void pass_child_ctx(const struct pass_env *env, const struct pass *p, int retain,
		    struct child_ctx *c)
{
	*c = (struct child_ctx){ p->name, p->ns, p->uid, &p->js,
				 json_object_get(p->job, "spec"), p->core_text,
				 env->operator_ns, retain,
				 json_object_get(json_object_get(p->job, "metadata"), "labels"),
				 env->external_storage, env->runtime };
}

/* Whether the pod the job asks for now (want, released here) carries
 * another LABEL_POD_SPEC than the pod's own, have. */
static int spec_differs(json_t *want, const char *have)
{
	const char *h = json_string_value(json_object_get(json_object_get(
		json_object_get(want, "metadata"), "labels"), LABEL_POD_SPEC));
	int r = h && strcmp(h, have);

	json_decref(want);
	return r;
}

void pass_outdated(const struct pass_env *env, struct pass *p)
{
	struct child_ctx c;
	json_t *want;

	if (p->spec_error)
		return;
	syncer_outdated(env, p);
	pass_child_ctx(env, p, 0, &c);
	for (int i = 0; i < p->in.npods; i++) {
		struct obs_pod *o = &p->pods[i];

		if (o->spec_hash[0] && o->index >= 0 &&
		    (want = child_learner(&c, o->index)))
			o->outdated = spec_differs(want, o->spec_hash);
	}
	if (p->in.evaluator && p->evaluator.spec_hash[0] &&
	    (want = child_evaluator(&c)))
		p->evaluator.outdated = spec_differs(want, p->evaluator.spec_hash);
}

int pass_observe(const struct pass_env *env, const char *key, struct pass *p)
{
	int r;

	memset(p, 0, sizeof(*p));
	p->key = key;
	if ((r = read_job(env, key, p)))
		return r;
	if (observe_learners(env, p))
		return -1;
	observe_children(env, p);
	observe_templates(env, p);
	if (observe_tls(env, p))
		return -1;
	observe_progress(env, p);
	observe_job(p);
	observe_replacements(env, p);
	return 0;
}
