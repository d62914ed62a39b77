/*
 * children: builds each child with json_pack. The learner pod's restart
 * policy is Never: the operator recreates a failed learner itself, with
 * per-learner backoff and a restart count in the job's status, and no
 * other pod is touched. The sidecar is an init container with
 * restartPolicy Always (a native sidecar): it starts before the learner
 * and ends when the learner ends, so a finished pod finishes. The syncer's
 * pod has fsGroup set to the image's user, who writes the checkpoints.
 * Placement is per part: the learners' nodeSelector and tolerations go to
 * the learner pods only (their accelerator pool); the syncer has its own
 * and requests of its own (syncer_resources), so it is Burstable.
 *
 * Security (docs/operator.md, "Security"): every pod and container gets
 * the same restricted security context (pod_security, container_security)
 * and no service-account token; the processes write only to their volumes
 * (checkpoints, the exchange), so the root file system is read-only. The
 * NetworkPolicy admits the job's learners and evaluator to the syncer's
 * gRPC port and the operator's pods to its HTTP port (/status), nothing
 * else. The evaluator's pod (spec.evaluator, external models) is a
 * learner's pod with the user's evaluator in place of the learner: the
 * same image, resources, placement and spec.learners.template (it runs
 * the learners' code), and a sidecar with --evaluator. The
 * Secret <job>-tls is made here with fresh keys (common/pki) and each
 * pod mounts its own certificate and key from it by item.
 */
#include "operator/children.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/pki.h"
#include "common/util.h"
#include "operator/podtemplate.h"
#include "trainer/model.h"

int child_name(const char *job, enum child_kind kind, int index, char *out,
	       size_t n)
{
	static const char *const suffix[] = {
		[CHILD_SPEC] = "spec", [CHILD_SYNCER] = "syncer",
		[CHILD_CHECKPOINTS] = "checkpoints", [CHILD_LEARNER] = "learner",
		[CHILD_SYNCER_POD] = "syncer", [CHILD_TLS] = "tls",
		[CHILD_EVALUATOR] = "evaluator",
	};
	int k;

	if (kind == CHILD_LEARNER || kind == CHILD_EVALUATOR ||
	    kind == CHILD_SYNCER_POD)
		k = snprintf(out, n, "%s-%s-%d", job, suffix[kind], index);
	else
		k = snprintf(out, n, "%s-%s", job, suffix[kind]);
	if (k < 0 || (size_t)k >= n) {
		if (n)
			out[0] = '\0';
		return -1;
	}
	return 0;
}

static const char *sget(json_t *o, const char *a, const char *b)
{
	return json_string_value(json_object_get(json_object_get(o, a), b));
}

json_t *job_core(json_t *obj)
{
	json_t *meta = json_object_get(obj, "metadata");
	json_t *spec = json_deep_copy(json_object_get(obj, "spec"));
	json_t *o;

	if (!spec)
		spec = json_object();
	json_object_del(spec, "backoffLimit");
	json_object_del(spec, "activeDeadlineSeconds");
	json_object_del(spec, "failurePolicy");
	json_object_del(spec, "managedBy");
	json_object_del(json_object_get(spec, "learners"), "imagePullPolicy");
	json_object_del(json_object_get(spec, "learners"), "nodeSelector");
	json_object_del(json_object_get(spec, "learners"), "tolerations");
	json_object_del(json_object_get(spec, "data"), "claimName");
	json_object_del(json_object_get(spec, "data"), "mountPath");
	json_object_del(json_object_get(spec, "syncer"), "storage");
	json_object_del(json_object_get(spec, "syncer"), "storageClassName");
	json_object_del(json_object_get(spec, "syncer"), "nodeSelector");
	json_object_del(json_object_get(spec, "syncer"), "tolerations");
	json_object_del(json_object_get(spec, "syncer"), "resources");
	json_object_del(json_object_get(spec, "syncer"), "template");
	json_object_del(json_object_get(spec, "syncer"), "checkpoints");
	json_object_del(json_object_get(spec, "learners"), "template");
	json_object_del(json_object_get(spec, "learners"), "sidecar");
	json_object_del(spec, "qosClass");
	json_object_del(json_object_get(spec, "learners"), "command");
	json_object_del(json_object_get(spec, "learners"), "args");
	o = json_pack("{s:s, s:s, s:{s:O?, s:O?}, s:o}",
		      "apiVersion", JOB_API_VERSION,
		      "kind", JOB_KIND,
		      "metadata",
		      "name", json_object_get(meta, "name"),
		      "namespace", json_object_get(meta, "namespace"),
		      "spec", spec);
	return o;
}

int job_managed_elsewhere(json_t *job)
{
	const char *m = sget(job, "spec", "managedBy");

	return m && strcmp(m, MANAGED_BY) != 0;
}

/*
 * The job's own labels (a queue's, e.g. kueue.x-k8s.io/queue-name) on a
 * pod's metadata, under those the operator and the template set.
 */
static void job_labels(const struct child_ctx *c, json_t *meta)
{
	json_t *l = json_object_get(meta, "labels");
	const char *k;
	json_t *v;

	if (!json_is_object(c->labels))
		return;
	json_object_foreach(c->labels, k, v)
		if (json_is_string(v) && !json_object_get(l, k))
			json_object_set(l, k, v);
}

static json_t *labels(const struct child_ctx *c, const char *role)
{
	return json_pack("{s:s, s:s, s:s, s:s}",
			 "app.kubernetes.io/name", "ddiloco",
			 "app.kubernetes.io/managed-by", FIELD_MANAGER,
			 LABEL_JOB, c->name, LABEL_ROLE, role);
}

static json_t *meta(const struct child_ctx *c, const char *name,
		    const char *role)
{
	return json_pack("{s:s, s:s, s:o, s:[{s:s, s:s, s:s, s:s, s:b, s:b}]}",
			 "name", name, "namespace", c->ns,
			 "labels", labels(c, role),
			 "ownerReferences",
			 "apiVersion", JOB_API_VERSION,
			 "kind", JOB_KIND,
			 "name", c->name, "uid", c->uid,
			 "controller", 1, "blockOwnerDeletion", 1);
}

/*
 * The Pod Security Standard "restricted", at the pod's level: the image's
 * non-root user and group, the runtime's default seccomp profile.
 */
static json_t *pod_security(void)
{
	return json_pack("{s:b, s:i, s:i, s:{s:s}}", "runAsNonRoot", 1,
			 "runAsUser", IMAGE_UID, "runAsGroup", IMAGE_UID,
			 "seccompProfile", "type", "RuntimeDefault");
}

/* ... and at each container's: no way to gain privileges, no capability,
 * nothing written outside the volumes. */
static json_t *container_security(void)
{
	return json_pack("{s:b, s:b, s:{s:[s]}}", "allowPrivilegeEscalation", 0,
			 "readOnlyRootFilesystem", 1,
			 "capabilities", "drop", "ALL");
}

/* No job pod calls the API (the chaos controller runs in the operator):
 * no token is mounted, and no Service's address is put in the env. */
static void pod_hardening(json_t *podspec)
{
	json_object_set_new(podspec, "automountServiceAccountToken", json_false());
	json_object_set_new(podspec, "enableServiceLinks", json_false());
}

/* Each of our containers logs one JSON object a line, with the time
 * and a severity that Cloud Logging and other collectors read
 * (docs/run.md, "Logs"): DDILOCO_LOG_FORMAT after the operator's own
 * env, before a template's (which cannot replace it, podtemplate.h). */
static void log_json(json_t *podspec)
{
	static const char *const lists[] = { "initContainers", "containers" };
	json_t *ctr, *env;
	size_t i;

	for (int k = 0; k < 2; k++)
		json_array_foreach(json_object_get(podspec, lists[k]), i, ctr) {
			if (!json_is_array(env = json_object_get(ctr, "env"))) {
				env = json_array();
				json_object_set_new(ctr, "env", env);
			}
			json_array_append_new(env, json_pack("{s:s, s:s}", "name",
					      "DDILOCO_LOG_FORMAT", "value", "json"));
		}
}

static json_t *object(const char *api, const char *kind, json_t *m, json_t *spec)
{
	return json_pack("{s:s, s:s, s:o, s:o}", "apiVersion", api, "kind", kind,
			 "metadata", m, "spec", spec);
}

json_t *child_configmap(const struct child_ctx *c)
{
	char name[CHILD_NAME_MAX];

	if (child_name(c->name, CHILD_SPEC, 0, name, sizeof(name)))
		return NULL;
	return json_pack("{s:s, s:s, s:o, s:{s:s}}", "apiVersion", "v1",
			 "kind", "ConfigMap", "metadata", meta(c, name, "spec"),
			 "data", "job.json", c->job_json);
}

json_t *child_service(const struct child_ctx *c)
{
	char name[CHILD_NAME_MAX];

	if (child_name(c->name, CHILD_SYNCER, 0, name, sizeof(name)))
		return NULL;
	return object("v1", "Service", meta(c, name, "syncer"),
		      json_pack("{s:s, s:b, s:{s:s, s:s}, s:[{s:s, s:i, s:i}, {s:s, s:i, s:i}]}",
				"clusterIP", "None",
				"publishNotReadyAddresses", 1,
				"selector", LABEL_JOB, c->name, LABEL_ROLE, "syncer",
				"ports",
				"name", "grpc", "port", c->js->syncer.port,
				"targetPort", c->js->syncer.port,
				"name", "http", "port", c->js->syncer.http_port,
				"targetPort", c->js->syncer.http_port));
}

/* The model's parameters, when the operator can know them: the reference
 * GPT's, or an external model's declared table (an external model's GPT
 * settings are defaults it does not use); 0 when not. */
static unsigned long long known_params(const struct job_spec *js)
{
	struct model_config cfg;
	unsigned long long n = 0;

	if (js->model.kind == MODEL_EXTERNAL) {
		for (int i = 0; i < js->model.ntensors; i++)
			n += js->model.tensors[i];
		return n;
	}
	return model_config_from_job(&js->model, &cfg, NULL) ? 0
	       : (unsigned long long)model_num_params(&cfg);
}

double checkpoint_shard_bytes(const struct job_spec *js)
{
	int S = js->syncer.shards > 1 ? js->syncer.shards : 1;
	double n = (double)known_params(js);

	if (n == 0)
		return 0;
	/* Θ and momentum in f32 of the shard's part, per file */
	return (double)CKPT_FILES * CKPT_HEADROOM *
	       (8.0 * n / S + CKPT_FILE_EXTRA);
}

void checkpoint_claim_size(const struct child_ctx *c, char *out, size_t n)
{
	const char *s = sget(c->spec, "syncer", "storage");
	double gib;

	if (s) {
		snprintf(out, n, "%s", s);
		return;
	}
	if (c->js->model.kind == MODEL_EXTERNAL && !c->js->model.ntensors) {
		snprintf(out, n, "%s", c->external_storage ? c->external_storage
							     : CKPT_EXTERNAL_DEFAULT);
		return;
	}
	gib = ceil(checkpoint_shard_bytes(c->js) / (double)(1ULL << 30));
	snprintf(out, n, "%.0fGi", gib < 1 ? 1 : gib);
}

int quantity_bytes(const char *q, double *out)
{
	static const struct {
		const char *sfx;
		double mul;
	} u[] = {
		{ "", 1 }, { "Ki", 0x1p10 }, { "Mi", 0x1p20 }, { "Gi", 0x1p30 },
		{ "Ti", 0x1p40 }, { "Pi", 0x1p50 }, { "Ei", 0x1p60 }, { "k", 1e3 },
		{ "M", 1e6 }, { "G", 1e9 }, { "T", 1e12 }, { "P", 1e15 }, { "E", 1e18 },
	};
	char *end;
	double v;

	if (!q || !((q[0] >= '0' && q[0] <= '9') || q[0] == '.'))
		return -1;
	errno = 0;
	v = strtod(q, &end);
	if (errno || !(v >= 0) || !isfinite(v))
		return -1;
	for (size_t i = 0; i < sizeof(u) / sizeof(u[0]); i++)
		if (!strcmp(end, u[i].sfx)) {
			*out = v * u[i].mul;
			return 0;
		}
	return -1;
}

int shard_claim_name(const char *job, int shard, char *out, size_t n)
{
	int k = snprintf(out, n, "%s-%s-syncer-%d", CKPT_CLAIM_TEMPLATE, job, shard);

	if (k < 0 || (size_t)k >= n) {
		if (n)
			out[0] = '\0';
		return -1;
	}
	return 0;
}

int own_claim_name(const char *job, int shards, int i, char *out, size_t n)
{
	return shards > 1 ? shard_claim_name(job, i, out, n)
			  : child_name(job, CHILD_CHECKPOINTS, 0, out, n);
}

int checkpoint_claim_name(const struct child_ctx *c, char *out, size_t n)
{
	const char *own = sget(json_object_get(c->spec, "syncer"), "checkpoints",
			       "claimName");
	int k;

	if (!own)
		return child_name(c->name, CHILD_CHECKPOINTS, 0, out, n);
	k = snprintf(out, n, "%s", own);
	return k < 0 || (size_t)k >= n ? -1 : 0;
}

json_t *child_pvc(const struct child_ctx *c, int shard)
{
	char name[CHILD_NAME_MAX], size[32];
	json_t *spec, *m;
	const char *cls = sget(c->spec, "syncer", "storageClassName");

	if ((c->js->syncer.shards > 1 &&
	     (shard < 0 || shard >= c->js->syncer.shards)) ||
	    own_claim_name(c->name, c->js->syncer.shards, shard, name, sizeof(name)))
		return NULL;
	checkpoint_claim_size(c, size, sizeof(size));
	spec = json_pack("{s:[s], s:{s:{s:s}}}", "accessModes", "ReadWriteOnce",
			 "resources", "requests", "storage", size);
	if (cls)
		json_object_set_new(spec, "storageClassName", json_string(cls));
	m = meta(c, name, "checkpoints");
	/* kept past the job: server-side apply without the field drops the
	 * owner reference this manager set, so the garbage collector leaves
	 * the claim when the job goes */
	if (c->retain_claim)
		json_object_del(m, "ownerReferences");
	return object("v1", "PersistentVolumeClaim", m, spec);
}

/* Volumes and mounts every container of the job has: spec, data. */
static int common_volumes(const struct child_ctx *c, json_t *volumes,
			  json_t *mounts)
{
	const char *claim = sget(c->spec, "data", "claimName");
	const char *mount = sget(c->spec, "data", "mountPath");
	char cm[CHILD_NAME_MAX];

	if (child_name(c->name, CHILD_SPEC, 0, cm, sizeof(cm)))
		return -1;
	json_array_append_new(volumes, json_pack("{s:s, s:{s:s}}", "name", "spec",
						 "configMap", "name", cm));
	json_array_append_new(mounts, json_pack("{s:s, s:s, s:b}", "name", "spec",
						"mountPath", SPEC_DIR, "readOnly", 1));
	if (claim) {
		json_array_append_new(volumes, json_pack(
			"{s:s, s:{s:s, s:b}}", "name", "data",
			"persistentVolumeClaim", "claimName", claim, "readOnly", 1));
		json_array_append_new(mounts, json_pack(
			"{s:s, s:s, s:b}", "name", "data",
			"mountPath", mount ? mount : "/data", "readOnly", 1));
	}
	return 0;
}

/*
 * The pod's own part of <job>-tls (`who`: "syncer" or "learner-<i>"), at
 * TLS_DIR as ca.crt, tls.crt, tls.key: a projection by item, so a
 * learner's pod holds its own key and no other. Mode 0440 and the pod's
 * fsGroup (the image's group) as the files' group: the pod's user reads
 * them, and no one else writes them.
 */
static int tls_volume(const struct child_ctx *c, const char *who,
		      json_t *volumes, json_t *mounts)
{
	char secret[CHILD_NAME_MAX], crt[64], key[64];

	if (child_name(c->name, CHILD_TLS, 0, secret, sizeof(secret)))
		return -1;
	snprintf(crt, sizeof(crt), "%s.crt", who);
	snprintf(key, sizeof(key), "%s.key", who);
	json_array_append_new(volumes, json_pack(
		"{s:s, s:{s:s, s:i, s:[{s:s, s:s}, {s:s, s:s}, {s:s, s:s}]}}",
		"name", "tls", "secret", "secretName", secret, "defaultMode", 0440,
		"items", "key", "ca.crt", "path", "ca.crt", "key", crt, "path", "tls.crt",
		"key", key, "path", "tls.key"));
	json_array_append_new(mounts, json_pack("{s:s, s:s, s:b}", "name", "tls",
						"mountPath", TLS_DIR, "readOnly", 1));
	return 0;
}

/* The process reads its part of <job>-tls from TLS_DIR (docs/security.md). */
static void tls_args(json_t *container)
{
	json_t *cmd = json_object_get(container, "command");

	json_array_append_new(cmd, json_string("--tls-dir"));
	json_array_append_new(cmd, json_string(TLS_DIR));
}

static const char *pull_policy(const struct child_ctx *c)
{
	const char *p = sget(c->spec, "learners", "imagePullPolicy");

	return p ? p : "IfNotPresent";
}

/* The runtime image and its pull policy (children.h): the syncer's, the
 * sidecars' and the library's copy */
static const char *runtime_image(const struct child_ctx *c)
{
	return c->runtime && c->runtime->image ? c->runtime->image
					       : RUNTIME_IMAGE_DEFAULT;
}

static const char *runtime_pull(const struct child_ctx *c)
{
	return c->runtime && c->runtime->pull_policy ? c->runtime->pull_policy
						     : "IfNotPresent";
}

/* The learner container's image: spec.learners.image, or the runtime
 * image, whose `ddiloco learner` trains the built-in model */
static const char *learner_image(const struct child_ctx *c)
{
	const char *img = sget(c->spec, "learners", "image");

	return img && img[0] ? img : runtime_image(c);
}

/*
 * Pod-level placement from spec.<part> ("learners" or "syncer"), each
 * part its own: nodeSelector and tolerations passed through. The syncer
 * needs no accelerator, so it does not follow the learners to their pool.
 */
static void placement(const struct child_ctx *c, const char *part,
		      json_t *podspec)
{
	json_t *l = json_object_get(c->spec, part);
	json_t *ns = json_object_get(l, "nodeSelector");
	json_t *tol = json_object_get(l, "tolerations");

	if (json_is_object(ns) && json_object_size(ns))
		json_object_set(podspec, "nodeSelector", ns);
	if (json_is_array(tol) && json_array_size(tol))
		json_object_set(podspec, "tolerations", tol);
}

/* A quantity of spec.syncer.resources as the API server stores it: a
 * string, or an integer (x-kubernetes-int-or-string); NULL when unset. */
static json_t *quantity(json_t *v)
{
	if (json_is_string(v) && json_string_length(v))
		return json_copy(v);
	if (json_is_integer(v))
		return json_sprintf("%" JSON_INTEGER_FORMAT, json_integer_value(v));
	return NULL;
}

/* spec.qosClass Guaranteed: every container's limits are its requests */
static int guaranteed(const struct child_ctx *c)
{
	const char *q = json_string_value(json_object_get(c->spec, "qosClass"));

	return q && !strcmp(q, "Guaranteed");
}

/* {requests: {cpu, memory}}, and the same as limits when guaranteed;
 * takes cpu and mem */
static json_t *requests_of(const struct child_ctx *c, json_t *cpu, json_t *mem)
{
	json_t *r = json_pack("{s:{s:o, s:o}}", "requests", "cpu", cpu,
			      "memory", mem);

	if (r && guaranteed(c))
		json_object_set(r, "limits", json_object_get(r, "requests"));
	return r;
}

/*
 * The sidecar's requests (docs/operator.md, Resources and probes): SIDECAR_CPU, and
 * SIDECAR_MEMORY_BASE_MIB plus SIDECAR_BYTES_PER_PARAM a parameter in
 * whole MiB (SIDECAR_MEMORY_UNKNOWN_MIB when the model's size is not
 * known); spec.learners.sidecar.resources.{cpu, memory} replace either.
 * Every pod then asks for all of its containers, so a namespace whose
 * ResourceQuota counts cpu and memory admits it.
 */
static json_t *sidecar_resources(const struct child_ctx *c)
{
	json_t *r = json_object_get(json_object_get(json_object_get(c->spec,
			"learners"), "sidecar"), "resources");
	json_t *cpu = quantity(json_object_get(r, "cpu"));
	json_t *mem = quantity(json_object_get(r, "memory"));
	unsigned long long n = known_params(c->js);

	if (!cpu)
		cpu = json_string(SIDECAR_CPU);
	if (!mem)
		mem = n ? json_sprintf("%lluMi", SIDECAR_MEMORY_BASE_MIB +
				       (SIDECAR_BYTES_PER_PARAM * n + (1ULL << 20) - 1) / (1ULL << 20))
			: json_sprintf("%dMi", SIDECAR_MEMORY_UNKNOWN_MIB);
	return requests_of(c, cpu, mem);
}

/*
 * The sidecar's probes (docs/operator.md, Resources and probes): a
 * liveness probe on its /healthz, which answers 503 once one of its loops
 * is stuck SIDECAR_STUCK_SECONDS (sidecar/sidecar.h); three failures
 * 10 s apart restart the sidecar alone, and the learner trains on.
 * spec.learners.sidecar.{livenessProbe, readinessProbe, startupProbe}
 * replace or add any of them. No readiness probe unless asked for: the
 * sidecar's /readyz says whether the syncer is reached, and a syncer away
 * is no reason for a learner's pod to leave a Service or the quorum.
 */
static void sidecar_probes(const struct child_ctx *c, json_t *ctr)
{
	static const char *const kinds[] = { "livenessProbe", "readinessProbe",
					     "startupProbe" };
	json_t *sc = json_object_get(json_object_get(c->spec, "learners"), "sidecar");

	json_object_set_new(ctr, "livenessProbe", json_pack(
		"{s:{s:s, s:i}, s:i, s:i, s:i}", "httpGet", "path", "/healthz",
		"port", SIDECAR_HTTP_PORT, "periodSeconds", 10,
		"timeoutSeconds", 5, "failureThreshold", 3));
	for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
		json_t *p = json_object_get(sc, kinds[k]);

		if (json_is_object(p))
			json_object_set(ctr, kinds[k], p);
	}
}

/*
 * The syncer's requests (docs/operator.md, "The syncer's placement and
 * requests"): SYNCER_CPU, and SYNCER_MEMORY_BASE_MIB plus
 * SYNCER_BYTES_PER_PARAM for each of the model's parameters, in whole MiB;
 * spec.syncer.resources.{cpu, memory} replace either. Requests without
 * limits (the pod is Burstable, never BestEffort, never capped), or
 * limits the same with spec.qosClass Guaranteed.
 */
static json_t *syncer_resources(const struct child_ctx *c)
{
	json_t *r = json_object_get(json_object_get(c->spec, "syncer"), "resources");
	json_t *cpu = quantity(json_object_get(r, "cpu"));
	json_t *mem = quantity(json_object_get(r, "memory"));

	if (!cpu)
		cpu = json_string(SYNCER_CPU);
	if (!mem) {
		unsigned long long b = (unsigned long long)SYNCER_MEMORY_BASE_MIB << 20;

		/* a shard holds its 1/S of the state (docs/syncer.md, Shards) */
		b += (unsigned long long)SYNCER_BYTES_PER_PARAM *
		     known_params(c->js) /
		     (unsigned long long)(c->js->syncer.shards > 1 ?
					  c->js->syncer.shards : 1);
		mem = json_sprintf("%lluMi", (b + (1ULL << 20) - 1) >> 20);
	}
	return requests_of(c, cpu, mem);
}

/*
 * The syncer's checkpoints (a claim of the user's, or one of ours unless
 * storage is "", else an emptyDir) and, unless spec.syncer.insecure, its
 * part of <job>-tls, into volumes and mounts; -1 on failure.
 */
static int syncer_volumes(const struct child_ctx *c, const char *claim,
			  const char *size, json_t *volumes, json_t *mounts)
{
	int sharded = c->js->syncer.shards > 1;

	/* a sharded job's claims come from the StatefulSet's template
	 * (claim_template), mounted by its name: no volume here */
	if (!sharded && (size[0] || sget(json_object_get(c->spec, "syncer"),
					 "checkpoints", "claimName")))
		json_array_append_new(volumes, json_pack(
			"{s:s, s:{s:s}}", "name", "checkpoints",
			"persistentVolumeClaim", "claimName", claim));
	else if (!sharded || !size[0])
		json_array_append_new(volumes, json_pack(
			"{s:s, s:{}}", "name", "checkpoints", "emptyDir"));
	json_array_append_new(mounts, json_pack("{s:s, s:s}", "name", "checkpoints",
						"mountPath", CHECKPOINT_DIR));
	/* spec.syncer.insecure: plaintext gRPC, no certificates at all */
	if (!c->js->syncer.insecure && tls_volume(c, "syncer", volumes, mounts))
		return -1;
	return 0;
}

/*
 * Liveness (docs/operator.md, "Model lifecycle"): /healthz answers 503
 * once the run loop is stuck 10 s (syncer/status.c); three failures
 * 10 s apart restart the container. The startup probe holds it back
 * until the model and checkpoint are loaded (/readyz), for up to
 * SYNCER_STARTUP_SECONDS; asked every second, as the readiness probe
 * waits for it (a restarted syncer is not Ready later than it was).
 */
static void syncer_probes(const struct child_ctx *c, json_t *ctr)
{
	json_object_set_new(ctr, "livenessProbe", json_pack(
		"{s:{s:s, s:i}, s:i, s:i, s:i}", "httpGet", "path", "/healthz",
		"port", c->js->syncer.http_port, "periodSeconds", 10,
		"timeoutSeconds", 5, "failureThreshold", 3));
	json_object_set_new(ctr, "startupProbe", json_pack(
		"{s:{s:s, s:i}, s:i, s:i}", "httpGet", "path", "/readyz",
		"port", c->js->syncer.http_port, "periodSeconds", 1,
		"failureThreshold", SYNCER_STARTUP_SECONDS));
}

/* The syncer pod's spec, volumes and mounts taken. */
static json_t *syncer_podspec(const struct child_ctx *c, json_t *volumes,
			      json_t *mounts)
{
	json_t *podspec, *ctr;

	podspec = json_pack(
		"{s:[{s:s, s:s, s:s, s:[s,s,s,s,s,s], s:[{s:s, s:i}, {s:s, s:i}],"
		" s:{s:{s:s, s:i}, s:i}, s:o, s:o}], s:o, s:o}",
		"containers",
		"name", "syncer", "image", runtime_image(c),
		"imagePullPolicy", runtime_pull(c),
		"command", "ddiloco", "syncer", "--job", SPEC_DIR "/job.json",
		"--checkpoint-dir", CHECKPOINT_DIR,
		"ports", "name", "grpc", "containerPort", c->js->syncer.port,
		"name", "http", "containerPort", c->js->syncer.http_port,
		"readinessProbe", "httpGet", "path", "/readyz",
		"port", c->js->syncer.http_port, "periodSeconds", 5,
		"volumeMounts", mounts,
		"securityContext", container_security(),
		"volumes", volumes,
		"securityContext", pod_security());
	/* the image runs as a non-root user: a new claim's root folder is
	 * root's, so the pod's group owns the volume (set once, when the
	 * root does not match) */
	json_object_set_new(json_object_get(podspec, "securityContext"), "fsGroup",
			    json_integer(IMAGE_UID));
	json_object_set_new(json_object_get(podspec, "securityContext"),
			    "fsGroupChangePolicy", json_string("OnRootMismatch"));
	if (!c->js->syncer.insecure)
		tls_args(json_array_get(json_object_get(podspec, "containers"), 0));
	pod_hardening(podspec);
	placement(c, "syncer", podspec);
	ctr = json_array_get(json_object_get(podspec, "containers"), 0);
	/* each replica is the shard its ordinal says ($HOSTNAME is the pod's
	 * name, <job>-syncer-<i>: docs/syncer.md, Shards) */
	if (c->js->syncer.shards > 1) {
		json_array_append_new(json_object_get(ctr, "command"), json_string("--shard"));
		json_array_append_new(json_object_get(ctr, "command"), json_string("auto"));
	}
	json_object_set_new(ctr, "resources", syncer_resources(c));
	syncer_probes(c, ctr);
	log_json(podspec);
	return podspec;
}

/*
 * A sharded job's claims (docs/operator.md, Shards): one template, so each
 * replica mounts checkpoints-<job>-syncer-<i>. The operator makes those
 * claims itself first (child_pvc, owned by the job or retained as the
 * one claim of an unsharded job is), and the StatefulSet controller uses
 * a claim that exists; the retention policy Retain keeps that controller
 * from ever owning or deleting them (a suspend deletes the StatefulSet,
 * never the checkpoints).
 */
static void claim_template(const struct child_ctx *c, const char *size,
			   json_t *sts_spec)
{
	const char *cls = sget(c->spec, "syncer", "storageClassName");
	json_t *spec, *m;

	spec = json_pack("{s:[s], s:{s:{s:s}}}", "accessModes", "ReadWriteOnce",
			 "resources", "requests", "storage", size);
	if (cls)
		json_object_set_new(spec, "storageClassName", json_string(cls));
	m = json_pack("{s:s, s:o}", "name", CKPT_CLAIM_TEMPLATE,
		      "labels", labels(c, "checkpoints"));
	json_object_set_new(sts_spec, "volumeClaimTemplates",
			    json_pack("[{s:o, s:o}]", "metadata", m, "spec", spec));
	json_object_set_new(sts_spec, "persistentVolumeClaimRetentionPolicy",
			    json_pack("{s:s, s:s}", "whenDeleted", "Retain",
				      "whenScaled", "Retain"));
}

/* LABEL_POD_SPEC (children.h) on metadata m */
static void spec_label(json_t *m, json_t *podspec)
{
	char *text = json_dumps(podspec, JSON_COMPACT | JSON_SORT_KEYS), hex[17];

	if (!text)
		return;
	snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)
		 fnv64_update(FNV64_INIT, text, strlen(text)));
	free(text);
	json_object_set_new(json_object_get(m, "labels"), LABEL_POD_SPEC,
			    json_string(hex));
}

json_t *child_syncer(const struct child_ctx *c)
{
	char name[CHILD_NAME_MAX], claim[CHILD_NAME_MAX], st[32];
	json_t *volumes = json_array(), *mounts = json_array(), *podspec, *sel;
	json_t *tmeta, *spec;

	checkpoint_claim_size(c, st, sizeof(st));
	if (child_name(c->name, CHILD_SYNCER, 0, name, sizeof(name)) ||
	    checkpoint_claim_name(c, claim, sizeof(claim)) ||
	    common_volumes(c, volumes, mounts) ||
	    syncer_volumes(c, claim, st, volumes, mounts)) {
		json_decref(volumes);
		json_decref(mounts);
		return NULL;
	}
	podspec = syncer_podspec(c, volumes, mounts);
	tmeta = json_pack("{s:o}", "labels", labels(c, "syncer"));
	pod_template_apply(tmeta, podspec, json_object_get(json_object_get(c->spec,
			   "syncer"), "template"), "syncer");
	job_labels(c, tmeta);
	sel = json_pack("{s:s, s:s}", LABEL_JOB, c->name, LABEL_ROLE, "syncer");
	spec = json_pack("{s:i, s:s, s:s, s:{s:o}, s:{s:o, s:o}}",
			 "replicas", c->js->syncer.shards > 1 ? c->js->syncer.shards : 1,
			 "serviceName", name,
			 "podManagementPolicy", "Parallel",
			 "selector", "matchLabels", sel,
			 "template", "metadata", tmeta, "spec", podspec);
	if (c->js->syncer.shards > 1 && st[0])
		claim_template(c, st, spec);
	tmeta = meta(c, name, "syncer");
	spec_label(tmeta, json_object_get(spec, "template"));
	return object("apps/v1", "StatefulSet", tmeta, spec);
}

/*
 * The syncer pod's ingress (policyTypes Ingress: what is not listed is
 * refused, where the network plugin enforces NetworkPolicy):
 *   gRPC port  from the job's learner pods and its evaluator's pod (their
 *              sidecars dial it): two peers of one rule
 *   HTTP port  from the operator's pods in operator_ns (/status)
 * Ports are numbers: the policy means what the job file says.
 */
json_t *child_networkpolicy(const struct child_ctx *c)
{
	char name[CHILD_NAME_MAX];

	if (!c->operator_ns || !c->operator_ns[0] ||
	    child_name(c->name, CHILD_SYNCER, 0, name, sizeof(name)))
		return NULL;
	return object("networking.k8s.io/v1", "NetworkPolicy",
		      meta(c, name, "syncer"), json_pack(
		"{s:{s:{s:s, s:s}}, s:[s],"
		" s:[{s:[{s:{s:{s:s, s:s}}}, {s:{s:{s:s, s:s}}}], s:[{s:s, s:i}]},"
		"    {s:[{s:{s:{s:s}}, s:{s:{s:s, s:s}}}], s:[{s:s, s:i}]}]}",
		"podSelector", "matchLabels", LABEL_JOB, c->name, LABEL_ROLE, "syncer",
		"policyTypes", "Ingress",
		"ingress",
		"from", "podSelector", "matchLabels", LABEL_JOB, c->name,
		LABEL_ROLE, "learner",
		"podSelector", "matchLabels", LABEL_JOB, c->name,
		LABEL_ROLE, "evaluator",
		"ports", "protocol", "TCP", "port", c->js->syncer.port,
		"from", "namespaceSelector", "matchLabels",
		"kubernetes.io/metadata.name", c->operator_ns,
		"podSelector", "matchLabels", OPERATOR_NAME_LABEL, OPERATOR_NAME,
		OPERATOR_COMPONENT_LABEL, OPERATOR_COMPONENT,
		"ports", "protocol", "TCP", "port", c->js->syncer.http_port));
}

/* Adds PEM text under key; -1 when the Secret would pass its limit. */
static int tls_put(json_t *data, const char *key, const char *pem, size_t *total)
{
	*total += strlen(key) + strlen(pem);
	if (*total > SECRET_MAX_BYTES)
		return -1;
	json_object_set_new(data, key, json_string(pem));
	return 0;
}

/* One leaf: issued by ca for id, stored as <key>.crt and <key>.key. */
static int tls_leaf(const struct pki_pem *ca, const struct pki_id *id,
		    const char *const *dns, const char *key, json_t *data,
		    size_t *total, struct err *e)
{
	char uri[PKI_JOB_MAX + 64], k[64];
	const char *uris[] = { uri, NULL };
	struct pki_leaf_req req = { key, dns, NULL, uris,
				    id->role == PKI_ROLE_SYNCER,
				    id->role != PKI_ROLE_SYNCER, 0 };
	struct pki_pem leaf = { NULL, NULL };
	int rc = -1;

	if (pki_id_uri(id, uri, sizeof(uri), e) || pki_issue(ca, &req, &leaf, e))
		goto out;
	snprintf(k, sizeof(k), "%s.crt", key);
	if (tls_put(data, k, leaf.cert, total))
		goto too_big;
	snprintf(k, sizeof(k), "%s.key", key);
	if (tls_put(data, k, leaf.key, total))
		goto too_big;
	rc = 0;
	goto out;
too_big:
	err_set(e, "the certificates of job '%s' do not fit in one Secret "
		"(more than %d bytes)", id->job, SECRET_MAX_BYTES);
out:
	pki_pem_release(&leaf);
	return rc;
}

/* One name of shard i's pod, or the Service's (i < 0): dns[k] of
 * SYNCER_DNS_MAX bytes. */
#define SYNCER_DNS_MAX (3 * CHILD_NAME_MAX + 32)

json_t *child_tls_secret(const struct child_ctx *c, struct err *e)
{
	char name[CHILD_NAME_MAX], pod[CHILD_NAME_MAX], svc[CHILD_NAME_MAX];
	char (*dns)[SYNCER_DNS_MAX] = NULL, key[32];
	const char **dnsp = NULL;
	struct pki_pem ca = { NULL, NULL };
	struct pki_id id;
	json_t *data = json_object(), *out = NULL;
	size_t total = 0;
	int S = c->js->syncer.shards > 1 ? c->js->syncer.shards : 1, nd = 0;

	if (child_name(c->name, CHILD_TLS, 0, name, sizeof(name)) ||
	    child_name(c->name, CHILD_SYNCER, 0, svc, sizeof(svc))) {
		err_set(e, "the name of a child of '%s' is too long", c->name);
		goto out;
	}
	/* four names of each shard's pod, then the Service's */
	dns = calloc((size_t)(4 * S + 1), sizeof(*dns));
	dnsp = calloc((size_t)(4 * S + 2), sizeof(*dnsp));
	if (!dns || !dnsp) {
		err_set(e, "out of memory for the certificates of '%s'", c->name);
		goto out;
	}
	memset(&id, 0, sizeof(id));
	if (strlen(c->name) >= sizeof(id.job)) {
		err_set(e, "job name '%s' is too long for its certificates", c->name);
		goto out;
	}
	snprintf(id.job, sizeof(id.job), "%s", c->name);
	/* the names the sidecars may dial each shard's pod by: one
	 * certificate that every shard serves */
	for (int i = 0; i < S; i++) {
		if (child_name(c->name, CHILD_SYNCER_POD, i, pod, sizeof(pod))) {
			err_set(e, "the name of a child of '%s' is too long", c->name);
			goto out;
		}
		snprintf(dns[nd++], SYNCER_DNS_MAX, "%s.%s.%s.svc", pod, svc, c->ns);
		snprintf(dns[nd++], SYNCER_DNS_MAX, "%s.%s.%s.svc.cluster.local",
			 pod, svc, c->ns);
		snprintf(dns[nd++], SYNCER_DNS_MAX, "%s.%s.%s", pod, svc, c->ns);
		snprintf(dns[nd++], SYNCER_DNS_MAX, "%s.%s", pod, svc);
	}
	snprintf(dns[nd++], SYNCER_DNS_MAX, "%s.%s.svc", svc, c->ns);
	for (int k = 0; k < nd; k++)
		dnsp[k] = dns[k];
	dnsp[nd] = NULL;
	if (!data || pki_ca_new(c->name, 0, &ca, e))
		goto out;
	if (tls_put(data, "ca.crt", ca.cert, &total)) {
		err_set(e, "the CA certificate of job '%s' does not fit in a Secret", c->name);
		goto out;
	}
	id.role = PKI_ROLE_SYNCER;
	if (tls_leaf(&ca, &id, dnsp, "syncer", data, &total, e))
		goto out;
	id.role = PKI_ROLE_LEARNER;
	for (int i = 0; i < c->js->learners.replicas; i++) {
		id.learner = (unsigned)i;
		snprintf(key, sizeof(key), "learner-%d", i);
		if (tls_leaf(&ca, &id, NULL, key, data, &total, e))
			goto out;
	}
	/* the evaluator's, for any external job: spec.evaluator may come later */
	id.role = PKI_ROLE_EVALUATOR;
	id.learner = 0;
	if (c->js->model.kind == MODEL_EXTERNAL &&
	    tls_leaf(&ca, &id, NULL, "evaluator-0", data, &total, e))
		goto out;
	out = json_pack("{s:s, s:s, s:o, s:s, s:b, s:O}", "apiVersion", "v1",
			"kind", "Secret", "metadata", meta(c, name, "tls"),
			"type", "Opaque", "immutable", 1, "stringData", data);
	if (!out)
		err_set(e, "cannot build Secret '%s'", name);
out:
	/* the CA's key ends here: nothing can sign for this job again */
	pki_pem_release(&ca);
	json_decref(data);
	free(dns);
	free(dnsp);
	return out;
}

static json_t *resources(const struct child_ctx *c)
{
	const struct job_learners *l = &c->js->learners;
	json_t *req = json_object(), *lim = json_object();

	if (l->cpu[0]) {
		json_object_set_new(req, "cpu", json_string(l->cpu));
		if (guaranteed(c))
			json_object_set_new(lim, "cpu", json_string(l->cpu));
	}
	if (l->memory[0]) {
		json_object_set_new(req, "memory", json_string(l->memory));
		json_object_set_new(lim, "memory", json_string(l->memory));
	}
	if (l->gpu[0] && strcmp(l->gpu, "0")) {
		json_object_set_new(req, "nvidia.com/gpu", json_string(l->gpu));
		json_object_set_new(lim, "nvidia.com/gpu", json_string(l->gpu));
	}
	return json_pack("{s:o, s:o}", "requests", req, "limits", lim);
}

int syncer_address(const char *job, const char *ns, int port, int shard,
		   char *out, size_t n)
{
	char pod[CHILD_NAME_MAX], svc[CHILD_NAME_MAX];
	int k;

	if (child_name(job, CHILD_SYNCER_POD, shard, pod, sizeof(pod)) ||
	    child_name(job, CHILD_SYNCER, 0, svc, sizeof(svc)))
		return -1;
	k = snprintf(out, n, "%s.%s.%s.svc:%d", pod, svc, ns, port);
	return k < 0 || (size_t)k >= n ? -1 : 0;
}

char *syncer_targets(const char *job, const char *ns, int port, int shards)
{
	size_t one = 3 * CHILD_NAME_MAX + 32, len = 0;
	char *out;

	if (shards < 1)
		shards = 1;
	if (!(out = malloc((size_t)shards * one)))
		return NULL;
	for (int i = 0; i < shards; i++) {
		if (i)
			out[len++] = ',';
		if (syncer_address(job, ns, port, i, out + len, one - 1)) {
			free(out);
			return NULL;
		}
		len += strlen(out + len);
	}
	return out;
}

/*
 * spec.learners.command and .args: a learner image of the user's own runs
 * its own program in the learner container (the sidecar stays ours). It
 * finds its index, the job file and the exchange in the environment. 1
 * when the command is the user's.
 */
static int learner_command(const struct child_ctx *c, json_t *container)
{
	json_t *l = json_object_get(c->spec, "learners");
	json_t *cmd = json_object_get(l, "command"), *args = json_object_get(l, "args");
	int own = json_is_array(cmd) && json_array_size(cmd);

	if (own)
		json_object_set(container, "command", cmd);
	if (json_is_array(args) && json_array_size(args))
		json_object_set(container, "args", args);
	return own;
}

/* 1 when spec.learners.template's "learner" container sets env `name` */
static int template_sets_env(const struct child_ctx *c, const char *name)
{
	json_t *tmpl = json_object_get(json_object_get(c->spec, "learners"),
				       "template");
	json_t *ctr, *env;
	size_t i, j;

	json_array_foreach(json_object_get(json_object_get(tmpl, "spec"),
					   "containers"), i, ctr) {
		const char *n = json_string_value(json_object_get(ctr, "name"));

		if (!n || strcmp(n, "learner"))
			continue;
		json_array_foreach(json_object_get(ctr, "env"), j, env) {
			const char *e = json_string_value(json_object_get(env, "name"));

			if (e && !strcmp(e, name))
				return 1;
		}
	}
	return 0;
}

/*
 * A learner's or the evaluator's container `ctr` that runs a command of
 * the user's, from an image that need not hold ddiloco: an init container
 * of the runtime image copies libddiloco.so, the libraries it needs and
 * the Python package (`ddiloco copy-runtime`) into an emptyDir, mounted
 * read-only into ctr, with DDILOCO_LIB and PYTHONPATH naming them unless
 * the template sets either (a library of the image's own, e.g. the
 * wheel: docs/abi.md, The library in your image).
 */
static void inject_runtime(const struct child_ctx *c, json_t *podspec,
			   json_t *ctr)
{
	json_t *env = json_object_get(ctr, "env");

	json_array_append_new(json_object_get(podspec, "volumes"), json_pack(
		"{s:s, s:{s:s}}", "name", "ddiloco-runtime", "emptyDir",
		"sizeLimit", "512Mi"));
	json_array_append_new(json_object_get(podspec, "initContainers"), json_pack(
		"{s:s, s:s, s:s, s:[s,s,s,s], s:o, s:[{s:s, s:s}], s:o}",
		"name", "runtime", "image", runtime_image(c),
		"imagePullPolicy", runtime_pull(c),
		"command", "ddiloco", "copy-runtime", "--to", RUNTIME_DIR,
		"resources", sidecar_resources(c),
		"volumeMounts", "name", "ddiloco-runtime", "mountPath", RUNTIME_DIR,
		"securityContext", container_security()));
	json_array_append_new(json_object_get(ctr, "volumeMounts"), json_pack(
		"{s:s, s:s, s:b}", "name", "ddiloco-runtime", "mountPath",
		RUNTIME_DIR, "readOnly", 1));
	if (!template_sets_env(c, "DDILOCO_LIB"))
		json_array_append_new(env, json_pack("{s:s, s:s}", "name",
			"DDILOCO_LIB", "value", RUNTIME_DIR "/lib/libddiloco.so"));
	if (!template_sets_env(c, "PYTHONPATH"))
		json_array_append_new(env, json_pack("{s:s, s:s}", "name",
			"PYTHONPATH", "value", RUNTIME_DIR "/python"));
}

/*
 * The volumes of a pod with a sidecar (a learner's or the evaluator's):
 * the exchange (memory), the spec and data for both containers, and the
 * certificates of `who` for the sidecar alone (the other never dials).
 */
static int sidecar_pod_volumes(const struct child_ctx *c, const char *who,
			       json_t **volumes, json_t **mounts,
			       json_t **side_mounts)
{
	*volumes = json_array();
	*mounts = json_array();
	*side_mounts = NULL;
	json_array_append_new(*volumes, json_pack(
		"{s:s, s:{s:s}}", "name", "exchange", "emptyDir", "medium", "Memory"));
	json_array_append_new(*mounts, json_pack("{s:s, s:s}", "name", "exchange",
						 "mountPath", EXCHANGE_DIR));
	if (common_volumes(c, *volumes, *mounts))
		goto fail;
	*side_mounts = json_deep_copy(*mounts);
	if (!c->js->syncer.insecure && tls_volume(c, who, *volumes, *side_mounts))
		goto fail;
	return 0;
fail:
	json_decref(*volumes);
	json_decref(*mounts);
	json_decref(*side_mounts);
	return -1;
}

json_t *child_learner(const struct child_ctx *c, int index)
{
	char name[CHILD_NAME_MAX], idx[16], who[32], *addr = NULL;
	json_t *volumes, *mounts, *side_mounts, *m, *podspec, *ctr;

	snprintf(idx, sizeof(idx), "%d", index);
	snprintf(who, sizeof(who), "learner-%d", index);
	if (child_name(c->name, CHILD_LEARNER, index, name, sizeof(name)) ||
	    !(addr = syncer_targets(c->name, c->ns, c->js->syncer.port,
				    c->js->syncer.shards)) ||
	    sidecar_pod_volumes(c, who, &volumes, &mounts, &side_mounts)) {
		free(addr);
		return NULL;
	}
	podspec = json_pack(
		"{s:s, s:i, s:[{s:s, s:s, s:s, s:s,"
		"  s:[s,s,s,s,s,s,s,s,s,s,s,s], s:o, s:o, s:o}],"
		" s:[{s:s, s:s, s:s, s:[s,s,s,s,s,s,s,s],"
		"  s:[{s:s, s:s}, {s:s, s:s}, {s:s, s:s}], s:o, s:o, s:o}],"
		" s:o, s:o}",
		"restartPolicy", "Never",
		"terminationGracePeriodSeconds", 10,
		"initContainers",
		"name", "sidecar", "image", runtime_image(c),
		"imagePullPolicy", runtime_pull(c), "restartPolicy", "Always",
		"command", "ddiloco", "sidecar", "--job", SPEC_DIR "/job.json",
		"--learner", idx, "--exchange", EXCHANGE_DIR, "--syncer", addr,
		"--http", SIDECAR_HTTP,
		"resources", sidecar_resources(c),
		"volumeMounts", side_mounts,
		"securityContext", container_security(),
		"containers",
		"name", "learner", "image", learner_image(c),
		"imagePullPolicy", pull_policy(c),
		"command", "ddiloco", "learner", "--job", SPEC_DIR "/job.json",
		"--learner", idx, "--exchange", EXCHANGE_DIR,
		"env", "name", "DDILOCO_LEARNER_ID", "value", idx,
		"name", "DDILOCO_JOB_FILE", "value", SPEC_DIR "/job.json",
		"name", "DDILOCO_EXCHANGE", "value", EXCHANGE_DIR,
		"resources", resources(c),
		"volumeMounts", mounts,
		"securityContext", container_security(),
		"volumes", volumes,
		"securityContext", pod_security());
	free(addr);
	/* the certificates' group (tls_volume) */
	json_object_set_new(json_object_get(podspec, "securityContext"), "fsGroup",
			    json_integer(IMAGE_UID));
	if (!c->js->syncer.insecure)
		tls_args(json_array_get(json_object_get(podspec, "initContainers"), 0));
	sidecar_probes(c, json_array_get(json_object_get(podspec, "initContainers"), 0));
	pod_hardening(podspec);
	placement(c, "learners", podspec);
	ctr = json_array_get(json_object_get(podspec, "containers"), 0);
	if (learner_command(c, ctr))   /* the user's program: the library */
		inject_runtime(c, podspec, ctr);
	log_json(podspec);
	m = meta(c, name, "learner");
	json_object_set_new(json_object_get(m, "labels"), LABEL_INDEX, json_string(idx));
	pod_template_apply(m, podspec, json_object_get(json_object_get(c->spec,
			   "learners"), "template"), "learner");
	job_labels(c, m);
	spec_label(m, podspec);
	return object("v1", "Pod", m, podspec);
}

/*
 * The evaluator's pod (docs/operator.md, "What the operator creates"): a
 * learner's pod (child_learner) whose sidecar says Hello as evaluator 0
 * with its own certificate, and whose main container, "evaluator", runs
 * spec.evaluator.command and args with DDILOCO_EVALUATOR_ID in place of
 * DDILOCO_LEARNER_ID. spec.learners.template applies as to a learner:
 * its container named "learner" merges into the evaluator's.
 */
json_t *child_evaluator(const struct child_ctx *c)
{
	char name[CHILD_NAME_MAX], *addr = NULL;
	json_t *ev = json_object_get(c->spec, "evaluator");
	json_t *cmd = json_object_get(ev, "command"), *args = json_object_get(ev, "args");
	json_t *volumes, *mounts, *side_mounts, *m, *podspec, *tmpl, *ctr;
	size_t i;

	if (!json_is_array(cmd) || !json_array_size(cmd) ||
	    child_name(c->name, CHILD_EVALUATOR, 0, name, sizeof(name)) ||
	    !(addr = syncer_targets(c->name, c->ns, c->js->syncer.port,
				    c->js->syncer.shards)) ||
	    sidecar_pod_volumes(c, "evaluator-0", &volumes, &mounts, &side_mounts)) {
		free(addr);
		return NULL;
	}
	podspec = json_pack(
		"{s:s, s:i, s:[{s:s, s:s, s:s, s:s,"
		"  s:[s,s,s,s,s,s,s,s,s,s,s,s,s], s:o, s:o, s:o}],"
		" s:[{s:s, s:s, s:s, s:O, s:[{s:s, s:s}, {s:s, s:s}, {s:s, s:s}],"
		"  s:o, s:o, s:o}],"
		" s:o, s:o}",
		"restartPolicy", "Never",
		"terminationGracePeriodSeconds", 10,
		"initContainers",
		"name", "sidecar", "image", runtime_image(c),
		"imagePullPolicy", runtime_pull(c), "restartPolicy", "Always",
		"command", "ddiloco", "sidecar", "--job", SPEC_DIR "/job.json",
		"--evaluator", "--learner", "0", "--exchange", EXCHANGE_DIR,
		"--syncer", addr, "--http", SIDECAR_HTTP,
		"resources", sidecar_resources(c),
		"volumeMounts", side_mounts,
		"securityContext", container_security(),
		"containers",
		"name", "evaluator", "image", learner_image(c),
		"imagePullPolicy", pull_policy(c),
		"command", cmd,
		"env", "name", "DDILOCO_EVALUATOR_ID", "value", "0",
		"name", "DDILOCO_JOB_FILE", "value", SPEC_DIR "/job.json",
		"name", "DDILOCO_EXCHANGE", "value", EXCHANGE_DIR,
		"resources", resources(c),
		"volumeMounts", mounts,
		"securityContext", container_security(),
		"volumes", volumes,
		"securityContext", pod_security());
	free(addr);
	if (!podspec)
		return NULL;
	json_object_set_new(json_object_get(podspec, "securityContext"), "fsGroup",
			    json_integer(IMAGE_UID));
	if (!c->js->syncer.insecure)
		tls_args(json_array_get(json_object_get(podspec, "initContainers"), 0));
	sidecar_probes(c, json_array_get(json_object_get(podspec, "initContainers"), 0));
	pod_hardening(podspec);
	placement(c, "learners", podspec);
	ctr = json_array_get(json_object_get(podspec, "containers"), 0);
	if (json_is_array(args) && json_array_size(args))
		json_object_set(ctr, "args", args);
	inject_runtime(c, podspec, ctr);
	log_json(podspec);
	m = meta(c, name, "evaluator");
	/* the learners' template, its "learner" container as the evaluator's */
	tmpl = json_deep_copy(json_object_get(json_object_get(c->spec, "learners"),
					      "template"));
	json_array_foreach(json_object_get(json_object_get(tmpl, "spec"), "containers"),
			   i, ctr) {
		const char *n = json_string_value(json_object_get(ctr, "name"));

		if (n && !strcmp(n, "learner"))
			json_object_set_new(ctr, "name", json_string("evaluator"));
		else if (n && !strcmp(n, "evaluator"))
			json_object_set_new(ctr, "name", json_string(""));
	}
	pod_template_apply(m, podspec, tmpl, "evaluator");
	json_decref(tmpl);
	job_labels(c, m);
	spec_label(m, podspec);
	return object("v1", "Pod", m, podspec);
}

/* "<job><infix><i>" → i (no leading zero, at most max); -1 else. */
static int name_index(const char *job, const char *infix, const char *pod,
		      long max)
{
	size_t n = strlen(job), k = strlen(infix);
	const char *p;
	char *end;
	long v;

	if (!pod || strncmp(pod, job, n) || strncmp(pod + n, infix, k))
		return -1;
	p = pod + n + k;
	if (*p < '0' || *p > '9' || (*p == '0' && p[1]))
		return -1;
	v = strtol(p, &end, 10);
	if (*end || v > max)
		return -1;
	return (int)v;
}

int learner_index(const char *job, const char *pod)
{
	return name_index(job, "-learner-", pod, 1000000);
}

int syncer_shard_index(const char *job, const char *pod)
{
	return name_index(job, "-syncer-", pod, JOB_MAX_SHARDS - 1);
}
