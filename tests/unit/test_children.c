/*
 * children: the manifests the operator applies for a job — the job's
 * core without operator fields, learner and syncer pods (native
 * sidecar, placement, requests, templates, restricted security), the
 * checkpoint claim, labels, the NetworkPolicy, the TLS Secret and its
 * mounts, the evaluator's pod, names and indexes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/pki.h"
#include "operator/children.h"
#include "operator/reconcile.h"

/* ---- children ------------------------------------------------------- */

static json_t *sample_job(void)
{
	return json_loads(
		"{\"apiVersion\":\"ddiloco.io/v1alpha1\",\"kind\":\"DecoupledTrainingJob\","
		"\"metadata\":{\"name\":\"demo\",\"namespace\":\"team\",\"uid\":\"u-1\","
		" \"resourceVersion\":\"42\",\"managedFields\":[]},"
		"\"spec\":{\"backoffLimit\":5,"
		" \"learners\":{\"replicas\":2,\"image\":\"ddiloco:test\","
		"  \"imagePullPolicy\":\"Never\",\"nodeSelector\":{\"pool\":\"a\"},"
		"  \"tolerations\":[{\"key\":\"kwok\",\"operator\":\"Exists\"}],"
		"  \"resources\":{\"cpu\":\"2\",\"memory\":\"1Gi\"}},"
		" \"data\":{\"path\":\"/data/x.txt\",\"claimName\":\"corpus\",\"mountPath\":\"/data\"},"
		" \"syncer\":{\"storage\":\"2Gi\",\"port\":7070,\"httpPort\":7071}},"
		"\"status\":{\"phase\":\"Running\"}}", 0, NULL);
}

/*
 * The sample job as the reconciler builds children from it: the object,
 * its core and the core's text (the ConfigMap's job.json), the spec parsed
 * from that text, and a child_ctx over them with the operator in
 * operator_ns. c points into the struct: keep it where it was opened.
 */
struct sample {
	json_t *job, *core;
	char *txt;
	struct job_spec js;
	struct child_ctx c;
};

/* the operator's --runtime-image and its pull policy */
static const struct runtime_image test_runtime = { "ddiloco-runtime:test", "Always" };

static void sample_open(struct sample *s, const char *operator_ns)
{
	struct err e;

	s->job = sample_job();
	s->core = job_core(s->job);
	s->txt = json_dumps(s->core, JSON_COMPACT);
	assert_int_equal(jobspec_parse(s->txt, strlen(s->txt), "demo", &s->js, &e), 0);
	s->c = (struct child_ctx){ "demo", "team", "u-1", &s->js,
				   json_object_get(s->job, "spec"), s->txt, operator_ns, 0,
				   json_object_get(json_object_get(s->job, "metadata"), "labels"),
				   NULL, &test_runtime };
}

static void sample_close(struct sample *s)
{
	free(s->txt);
	json_decref(s->core);
	json_decref(s->job);
}

static const char *path_str(json_t *o, const char *path)
{
	char buf[256], *save, *tok;
	json_t *cur = o;

	snprintf(buf, sizeof(buf), "%s", path);
	for (tok = strtok_r(buf, ".", &save); tok && cur; tok = strtok_r(NULL, ".", &save)) {
		if (*tok >= '0' && *tok <= '9')
			cur = json_array_get(cur, (size_t)atoi(tok));
		else
			cur = json_object_get(cur, tok);
	}
	return json_string_value(cur);
}

static const char *spec_hash(json_t *pod)
{
	return json_string_value(json_object_get(json_object_get(json_object_get(
		pod, "metadata"), "labels"), LABEL_POD_SPEC));
}

static void test_job_core_strips_operator_fields(void **state)
{
	json_t *job = sample_job(), *core = job_core(job);
	struct job_spec js;
	struct err e;
	char *txt = json_dumps(core, JSON_COMPACT);

	(void)state;
	assert_null(json_object_get(json_object_get(core, "spec"), "backoffLimit"));
	assert_null(json_object_get(json_object_get(json_object_get(core, "spec"),
						    "learners"), "nodeSelector"));
	assert_null(json_object_get(core, "status"));
	assert_null(strstr(txt, "uid"));
	/* the one parser accepts what is left */
	assert_int_equal(jobspec_parse(txt, strlen(txt), "demo", &js, &e), 0);
	assert_string_equal(js.name, "demo");
	assert_string_equal(js.namespace_, "team");
	assert_int_equal(js.learners.replicas, 2);
	assert_string_equal(js.learners.image, "ddiloco:test");
	free(txt);
	json_decref(core);
	json_decref(job);
}

static void test_learner_pod_manifest(void **state)
{
	struct sample s;
	json_t *pod, *ref, *init;

	(void)state;
	sample_open(&s, "ddiloco-system");
	pod = child_learner(&s.c, 1);
	assert_non_null(pod);
	assert_string_equal(path_str(pod, "metadata.name"), "demo-learner-1");
	assert_string_equal(json_string_value(json_object_get(json_object_get(
		json_object_get(pod, "metadata"), "labels"), LABEL_INDEX)), "1");
	ref = json_array_get(json_object_get(json_object_get(pod, "metadata"),
					     "ownerReferences"), 0);
	assert_string_equal(json_string_value(json_object_get(ref, "uid")), "u-1");
	assert_string_equal(json_string_value(json_object_get(ref, "kind")),
			    "DecoupledTrainingJob");
	assert_true(json_is_true(json_object_get(ref, "controller")));
	assert_true(json_is_true(json_object_get(ref, "blockOwnerDeletion")));
	assert_string_equal(path_str(pod, "spec.restartPolicy"), "Never");
	init = json_array_get(json_object_get(json_object_get(pod, "spec"),
					      "initContainers"), 0);
	assert_string_equal(json_string_value(json_object_get(init, "name")), "sidecar");
	assert_string_equal(json_string_value(json_object_get(init, "restartPolicy")),
			    "Always");
	assert_string_equal(json_string_value(json_array_get(json_object_get(init, "command"), 9)),
			    "demo-syncer-0.demo-syncer.team.svc:7070");
	assert_string_equal(path_str(pod, "spec.containers.0.name"), "learner");
	assert_string_equal(path_str(pod, "spec.containers.0.image"), "ddiloco:test");
	assert_string_equal(path_str(pod, "spec.containers.0.imagePullPolicy"), "Never");
	assert_string_equal(path_str(pod, "spec.containers.0.resources.requests.cpu"), "2");
	assert_string_equal(path_str(pod, "spec.containers.0.resources.limits.memory"), "1Gi");
	assert_string_equal(path_str(pod, "spec.volumes.0.emptyDir.medium"), "Memory");
	assert_string_equal(path_str(pod, "spec.volumes.2.persistentVolumeClaim.claimName"),
			    "corpus");
	assert_string_equal(path_str(pod, "spec.nodeSelector.pool"), "a");
	assert_string_equal(path_str(pod, "spec.tolerations.0.key"), "kwok");
	json_decref(pod);

	pod = child_syncer(&s.c);
	assert_non_null(pod);
	assert_string_equal(path_str(pod, "kind"), "StatefulSet");
	assert_string_equal(path_str(pod, "spec.serviceName"), "demo-syncer");
	assert_string_equal(path_str(pod, "spec.template.spec.volumes.2.persistentVolumeClaim.claimName"),
			    "demo-checkpoints");
	/* the image's user can write to a new claim */
	assert_int_equal(json_integer_value(json_object_get(json_object_get(
		json_object_get(json_object_get(json_object_get(pod, "spec"),
			"template"), "spec"), "securityContext"), "fsGroup")), 65532);
	assert_string_equal(path_str(pod, "spec.template.spec.securityContext.fsGroupChangePolicy"),
			    "OnRootMismatch");
	json_decref(pod);
	pod = child_pvc(&s.c, -1);
	assert_string_equal(path_str(pod, "spec.resources.requests.storage"), "2Gi");
	json_decref(pod);
	pod = child_service(&s.c);
	assert_string_equal(path_str(pod, "spec.clusterIP"), "None");
	json_decref(pod);
	pod = child_configmap(&s.c);
	assert_string_equal(json_string_value(json_object_get(json_object_get(pod, "data"),
							      "job.json")), s.txt);
	json_decref(pod);
	sample_close(&s);
}

/*
 * The syncer's pod (docs/operator.md, "The syncer's placement and
 * requests"): not the learners' accelerator pool; requests of its own so
 * it is Burstable; spec.syncer.{nodeSelector, tolerations, resources}.
 */
/*
 * Resources (docs/operator.md): the sidecar asks for SIDECAR_CPU and 64 MiB
 * + 8 B a parameter, or spec.learners.sidecar.resources; spec.qosClass
 * Guaranteed makes every container's limits its requests (learner, its
 * sidecar, the syncer), and neither field reaches the job's core.
 */
static void test_resources_and_qos(void **state)
{
	struct sample s;
	json_t *pod, *sts, *spec, *core;

	(void)state;
	sample_open(&s, "ddiloco-system");
	pod = child_learner(&s.c, 0);
	/* 64 MiB + 8 B x 437760 parameters = 67.34 MiB, rounded up */
	assert_string_equal(path_str(pod, "spec.initContainers.0.resources.requests.cpu"), "100m");
	assert_string_equal(path_str(pod, "spec.initContainers.0.resources.requests.memory"), "68Mi");
	assert_null(json_object_get(json_object_get(json_array_get(json_object_get(
		json_object_get(pod, "spec"), "initContainers"), 0), "resources"), "limits"));
	assert_null(json_object_get(json_object_get(json_object_get(json_array_get(
		json_object_get(json_object_get(pod, "spec"), "containers"), 0),
		"resources"), "limits"), "cpu"));
	json_decref(pod);

	json_object_set_new(s.c.spec, "qosClass", json_string("Guaranteed"));
	json_object_set_new(json_object_get(s.c.spec, "learners"), "sidecar",
			    json_pack("{s:{s:s, s:i}}", "resources", "cpu", "250m",
				      "memory", 314572800));
	pod = child_learner(&s.c, 0);
	assert_string_equal(path_str(pod, "spec.initContainers.0.resources.requests.cpu"), "250m");
	assert_string_equal(path_str(pod, "spec.initContainers.0.resources.limits.cpu"), "250m");
	assert_string_equal(path_str(pod, "spec.initContainers.0.resources.limits.memory"), "314572800");
	assert_string_equal(path_str(pod, "spec.containers.0.resources.limits.cpu"), "2");
	assert_string_equal(path_str(pod, "spec.containers.0.resources.limits.memory"), "1Gi");
	json_decref(pod);
	sts = child_syncer(&s.c);
	spec = json_object_get(json_object_get(json_object_get(sts, "spec"), "template"), "spec");
	assert_string_equal(path_str(spec, "containers.0.resources.limits.cpu"), "500m");
	assert_string_equal(path_str(spec, "containers.0.resources.limits.memory"), "95Mi");
	json_decref(sts);
	core = job_core(s.job);
	assert_null(json_object_get(json_object_get(core, "spec"), "qosClass"));
	assert_null(json_object_get(json_object_get(json_object_get(core, "spec"),
						    "learners"), "sidecar"));
	json_decref(core);
	sample_close(&s);
}

/*
 * Probes (docs/operator.md, Resources and probes): the sidecar of a
 * learner and of the evaluator has a liveness probe on its /healthz and no
 * readiness probe; spec.learners.sidecar's probes replace or add theirs,
 * and change the pod's spec hash.
 */
static void test_sidecar_probes(void **state)
{
	struct sample s;
	json_t *pod, *ev;
	char h[20];

	(void)state;
	sample_open(&s, "ddiloco-system");
	pod = child_learner(&s.c, 0);
	assert_string_equal(path_str(pod, "spec.initContainers.0.livenessProbe.httpGet.path"), "/healthz");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(json_object_get(
		json_array_get(json_object_get(json_object_get(pod, "spec"), "initContainers"), 0),
		"livenessProbe"), "httpGet"), "port")), 9090);
	assert_null(json_object_get(json_array_get(json_object_get(json_object_get(pod,
		"spec"), "initContainers"), 0), "readinessProbe"));
	snprintf(h, sizeof(h), "%s", spec_hash(pod));
	json_decref(pod);

	json_object_set_new(json_object_get(s.c.spec, "learners"), "sidecar", json_pack(
		"{s:{s:{s:s, s:i}, s:i}, s:{s:{s:s, s:i}}}",
		"livenessProbe", "httpGet", "path", "/healthz", "port", 9090,
		"failureThreshold", 9,
		"readinessProbe", "httpGet", "path", "/readyz", "port", 9090));
	pod = child_learner(&s.c, 0);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(json_array_get(
		json_object_get(json_object_get(pod, "spec"), "initContainers"), 0),
		"livenessProbe"), "failureThreshold")), 9);
	assert_string_equal(path_str(pod, "spec.initContainers.0.readinessProbe.httpGet.path"), "/readyz");
	assert_string_not_equal(spec_hash(pod), h);
	json_decref(pod);
	/* the evaluator's sidecar too */
	json_object_set_new(s.c.spec, "evaluator", json_pack("{s:[s]}", "command", "eval"));
	ev = child_evaluator(&s.c);
	assert_non_null(ev);
	assert_string_equal(path_str(ev, "spec.initContainers.0.readinessProbe.httpGet.path"), "/readyz");
	json_decref(ev);
	sample_close(&s);
}

static void test_syncer_placement_and_requests(void **state)
{
	struct sample s;
	json_t *sts, *spec, *syncer, *core;
	char *txt;
	struct job_spec js;
	struct err e;

	(void)state;
	sample_open(&s, "ddiloco-system");
	sts = child_syncer(&s.c);
	spec = json_object_get(json_object_get(json_object_get(sts, "spec"), "template"), "spec");
	/* the learners' nodeSelector (pool: a) and tolerations stay theirs */
	assert_null(json_object_get(spec, "nodeSelector"));
	assert_null(json_object_get(spec, "tolerations"));
	assert_string_equal(path_str(spec, "containers.0.resources.requests.cpu"), "500m");
	/* 64 MiB + 72 B x 437760 parameters (V 256, T 64, L 2, C 128, tied)
	 * = 94.06 MiB, rounded up */
	assert_string_equal(path_str(spec, "containers.0.resources.requests.memory"), "95Mi");
	assert_null(json_object_get(json_object_get(json_array_get(json_object_get(spec,
		"containers"), 0), "resources"), "limits"));
	json_decref(sts);
	sample_close(&s);

	/* a bigger model asks for more: C 1024, L 8, V 256, T 64 */
	sample_open(&s, "ddiloco-system");
	s.js.model.channels = 1024;
	s.js.model.layers = 8;
	sts = child_syncer(&s.c);
	spec = json_object_get(json_object_get(json_object_get(sts, "spec"), "template"), "spec");
	/* 256*1024 + 64*1024 + 8*(12*1024^2 + 13*1024) + 2*1024 = 101,099,520
	 * parameters: 64 MiB + 72 B each = 7,006 MiB rounded up */
	assert_string_equal(path_str(spec, "containers.0.resources.requests.memory"), "7006Mi");
	json_decref(sts);
	sample_close(&s);

	/* the syncer's own placement and requests */
	sample_open(&s, "ddiloco-system");
	syncer = json_object_get(json_object_get(s.job, "spec"), "syncer");
	json_object_set_new(syncer, "nodeSelector", json_pack("{s:s}", "pool", "cpu"));
	json_object_set_new(syncer, "tolerations",
			    json_pack("[{s:s, s:s}]", "key", "dedicated", "operator", "Exists"));
	json_object_set_new(syncer, "resources", json_pack("{s:i, s:s}", "cpu", 2,
							   "memory", "4Gi"));
	sts = child_syncer(&s.c);
	spec = json_object_get(json_object_get(json_object_get(sts, "spec"), "template"), "spec");
	assert_string_equal(path_str(spec, "nodeSelector.pool"), "cpu");
	assert_int_equal(json_object_size(json_object_get(spec, "nodeSelector")), 1);
	assert_string_equal(path_str(spec, "tolerations.0.key"), "dedicated");
	assert_int_equal(json_array_size(json_object_get(spec, "tolerations")), 1);
	assert_string_equal(path_str(spec, "containers.0.resources.requests.cpu"), "2");
	assert_string_equal(path_str(spec, "containers.0.resources.requests.memory"), "4Gi");
	json_decref(sts);
	/* ... and the learners keep theirs */
	sts = child_learner(&s.c, 0);
	assert_string_equal(path_str(sts, "spec.nodeSelector.pool"), "a");
	assert_string_equal(path_str(sts, "spec.tolerations.0.key"), "kwok");
	json_decref(sts);
	/* none of it reaches job.json, which the one parser still reads */
	core = job_core(s.job);
	syncer = json_object_get(json_object_get(core, "spec"), "syncer");
	assert_null(json_object_get(syncer, "nodeSelector"));
	assert_null(json_object_get(syncer, "tolerations"));
	assert_null(json_object_get(syncer, "resources"));
	txt = json_dumps(core, JSON_COMPACT);
	assert_int_equal(jobspec_parse(txt, strlen(txt), "demo", &js, &e), 0);
	free(txt);
	json_decref(core);
	sample_close(&s);
}

/*
 * spec.learners.template / spec.syncer.template (operator/podtemplate.c
 * has the merge's own tests): each reaches its own pods only, the
 * operator's container and volumes stay; spec.learners.command/args
 * replace the learner's program, never the sidecar's; none of it reaches
 * job.json.
 */
static void test_templates_and_learner_command(void **state)
{
	struct sample s;
	json_t *l, *sy, *pod, *c, *core;
	char *txt;
	struct job_spec js;
	struct err e;
	json_error_t je;

	(void)state;
	sample_open(&s, "ddiloco-system");
	l = json_object_get(json_object_get(s.job, "spec"), "learners");
	sy = json_object_get(json_object_get(s.job, "spec"), "syncer");
	json_object_set_new(l, "template", json_loads(
		"{\"metadata\":{\"labels\":{\"team\":\"nlp\"}},"
		" \"spec\":{\"priorityClassName\":\"training\","
		"  \"nodeSelector\":{\"accel\":\"tpu\"},"
		"  \"containers\":[{\"name\":\"learner\","
		"   \"resources\":{\"limits\":{\"google.com/tpu\":\"4\"}}}]}}", 0, &je));
	json_object_set_new(l, "command", json_pack("[s]", "python3"));
	json_object_set_new(l, "args", json_pack("[s, s]", "train.py", "--fast"));
	json_object_set_new(sy, "template", json_loads(
		"{\"metadata\":{\"annotations\":{\"note\":\"cpu\"}},"
		" \"spec\":{\"priorityClassName\":\"critical\"}}", 0, &je));
	pod = child_learner(&s.c, 0);
	assert_string_equal(path_str(pod, "metadata.labels.team"), "nlp");
	assert_string_equal(path_str(pod, "spec.priorityClassName"), "training");
	/* the template's nodeSelector added to spec.learners.nodeSelector */
	assert_string_equal(path_str(pod, "spec.nodeSelector.pool"), "a");
	assert_string_equal(path_str(pod, "spec.nodeSelector.accel"), "tpu");
	c = json_array_get(json_object_get(json_object_get(pod, "spec"), "containers"), 0);
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(c,
		"resources"), "limits"), "google.com/tpu")), "4");
	assert_string_equal(path_str(c, "resources.requests.cpu"), "2");
	assert_string_equal(path_str(c, "command.0"), "python3");
	assert_int_equal(json_array_size(json_object_get(c, "command")), 1);
	assert_string_equal(path_str(c, "args.1"), "--fast");
	/* what a learner of the user's own needs to find */
	assert_string_equal(path_str(c, "env.1.name"), "DDILOCO_JOB_FILE");
	assert_string_equal(path_str(c, "env.1.value"), "/etc/ddiloco/job.json");
	assert_string_equal(path_str(c, "env.2.value"), "/run/ddiloco");
	/* the sidecar stays ours */
	assert_string_equal(path_str(pod, "spec.initContainers.0.command.1"), "sidecar");
	/* the syncer's template is not the learners' */
	assert_null(json_object_get(json_object_get(pod, "metadata"), "annotations"));
	json_decref(pod);
	pod = child_syncer(&s.c);
	assert_string_equal(path_str(pod, "spec.template.metadata.annotations.note"), "cpu");
	assert_string_equal(path_str(pod, "spec.template.spec.priorityClassName"), "critical");
	assert_null(json_object_get(json_object_get(json_object_get(json_object_get(
		json_object_get(pod, "spec"), "template"), "metadata"), "labels"), "team"));
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(
		json_object_get(json_object_get(pod, "spec"), "template"), "metadata"),
		"labels"), LABEL_ROLE)), "syncer");
	assert_string_equal(path_str(pod, "spec.template.spec.containers.0.command.1"), "syncer");
	json_decref(pod);
	core = job_core(s.job);
	txt = json_dumps(core, JSON_COMPACT);
	assert_null(strstr(txt, "template"));
	assert_null(strstr(txt, "python3"));
	assert_int_equal(jobspec_parse(txt, strlen(txt), "demo", &js, &e), 0);
	free(txt);
	json_decref(core);
	sample_close(&s);
}

static const char *label_of(json_t *meta, const char *key)
{
	return json_string_value(json_object_get(json_object_get(meta, "labels"), key));
}

/*
 * Kueue (docs/operator.md, "Kueue"): the job's labels reach its pods
 * (learners and the syncer's template), under the operator's and the
 * template's; spec.managedBy another controller leaves the job alone.
 */
static void test_job_labels_and_managed_by(void **state)
{
	struct sample s;
	json_t *meta, *pod, *job;
	json_error_t je;

	(void)state;
	sample_open(&s, "ddiloco-system");
	meta = json_object_get(s.job, "metadata");
	json_object_set_new(meta, "labels", json_pack("{s:s, s:s, s:s}",
		"kueue.x-k8s.io/queue-name", "team-a", LABEL_JOB, "spoof",
		"team", "from-job"));
	s.c.labels = json_object_get(meta, "labels");
	json_object_set_new(json_object_get(json_object_get(s.job, "spec"), "learners"),
			    "template", json_pack("{s:{s:{s:s}}}", "metadata", "labels",
						  "team", "from-template"));
	pod = child_learner(&s.c, 0);
	assert_string_equal(label_of(json_object_get(pod, "metadata"),
				     "kueue.x-k8s.io/queue-name"), "team-a");
	assert_string_equal(label_of(json_object_get(pod, "metadata"), LABEL_JOB), "demo");
	assert_string_equal(label_of(json_object_get(pod, "metadata"), "team"), "from-template");
	json_decref(pod);
	pod = child_syncer(&s.c);
	meta = json_object_get(json_object_get(json_object_get(pod, "spec"), "template"),
			       "metadata");
	assert_string_equal(label_of(meta, "kueue.x-k8s.io/queue-name"), "team-a");
	assert_string_equal(label_of(meta, LABEL_ROLE), "syncer");
	/* the StatefulSet's selector is the operator's alone */
	assert_int_equal(json_object_size(json_object_get(json_object_get(json_object_get(pod,
		"spec"), "selector"), "matchLabels")), 2);
	json_decref(pod);
	sample_close(&s);

	job = json_loads("{\"spec\":{}}", 0, &je);
	assert_false(job_managed_elsewhere(job));
	json_object_set_new(json_object_get(job, "spec"), "managedBy", json_string(MANAGED_BY));
	assert_false(job_managed_elsewhere(job));
	json_object_set_new(json_object_get(job, "spec"), "managedBy",
			    json_string("kueue.x-k8s.io/multikueue"));
	assert_true(job_managed_elsewhere(job));
	json_decref(job);
}

/*
 * The checkpoint claim: its size from the model unless spec.syncer.storage
 * says (5 files of 8 B a parameter + 1 MiB, times 1.5, whole GiB, at least
 * 1Gi); no owner reference when retained; a claim of the user's mounted
 * by name. The syncer's liveness and startup probes.
 */
static void test_checkpoint_claim(void **state)
{
	struct sample s;
	json_t *o, *ctr;
	char size[32];

	(void)state;
	sample_open(&s, "ddiloco-system");
	checkpoint_claim_size(&s.c, size, sizeof(size));
	assert_string_equal(size, "2Gi");   /* spec.syncer.storage */
	json_object_del(json_object_get(json_object_get(s.job, "spec"), "syncer"), "storage");
	checkpoint_claim_size(&s.c, size, sizeof(size));
	assert_string_equal(size, "1Gi");   /* 437,760 parameters: 26 MB */
	/* 101,099,520 parameters: 5 x 1.5 x (808.8 MB + 1 MiB) = 5.66 GiB */
	s.js.model.channels = 1024;
	s.js.model.layers = 8;
	checkpoint_claim_size(&s.c, size, sizeof(size));
	assert_string_equal(size, "6Gi");
	o = child_pvc(&s.c, -1);
	assert_string_equal(path_str(o, "spec.resources.requests.storage"), "6Gi");
	assert_non_null(json_object_get(json_object_get(o, "metadata"), "ownerReferences"));
	json_decref(o);
	s.c.retain_claim = 1;
	o = child_pvc(&s.c, -1);
	assert_null(json_object_get(json_object_get(o, "metadata"), "ownerReferences"));
	assert_string_equal(path_str(o, "metadata.name"), "demo-checkpoints");
	json_decref(o);

	/* the syncer: probes, and a claim of the user's */
	o = child_syncer(&s.c);
	ctr = json_array_get(json_object_get(json_object_get(json_object_get(json_object_get(o,
		"spec"), "template"), "spec"), "containers"), 0);
	assert_string_equal(path_str(ctr, "livenessProbe.httpGet.path"), "/healthz");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(ctr,
		"livenessProbe"), "failureThreshold")), 3);
	assert_string_equal(path_str(ctr, "startupProbe.httpGet.path"), "/readyz");
	assert_string_equal(path_str(o, "spec.template.spec.volumes.2.persistentVolumeClaim.claimName"),
			    "demo-checkpoints");
	json_decref(o);
	json_object_set_new(json_object_get(json_object_get(s.job, "spec"), "syncer"),
			    "checkpoints", json_pack("{s:s}", "claimName", "old-run-checkpoints"));
	o = child_syncer(&s.c);
	assert_string_equal(path_str(o, "spec.template.spec.volumes.2.persistentVolumeClaim.claimName"),
			    "old-run-checkpoints");
	json_decref(o);
	sample_close(&s);
}

/*
 * The Pod Security Standard "restricted" as it reads a pod spec (the API
 * server's PodSecurity admission is the real judge: tests/k8s/
 * test_security.sh); plus no service-account token.
 */
static void assert_restricted(json_t *podspec)
{
	json_t *psc = json_object_get(podspec, "securityContext"), *v;
	const char *lists[] = { "initContainers", "containers" };
	size_t i, n = 0;

	assert_true(json_is_true(json_object_get(psc, "runAsNonRoot")));
	assert_int_equal(json_integer_value(json_object_get(psc, "runAsUser")), 65532);
	assert_int_equal(json_integer_value(json_object_get(psc, "runAsGroup")), 65532);
	assert_string_equal(path_str(psc, "seccompProfile.type"), "RuntimeDefault");
	assert_true(json_is_false(json_object_get(podspec, "automountServiceAccountToken")));
	assert_null(json_object_get(podspec, "hostNetwork"));
	assert_null(json_object_get(podspec, "hostPID"));
	for (int l = 0; l < 2; l++) {
		json_array_foreach(json_object_get(podspec, lists[l]), i, v) {
			json_t *sc = json_object_get(v, "securityContext");
			json_t *drop = json_object_get(json_object_get(sc, "capabilities"), "drop");

			assert_true(json_is_false(json_object_get(sc, "allowPrivilegeEscalation")));
			assert_true(json_is_true(json_object_get(sc, "readOnlyRootFilesystem")));
			assert_int_equal(json_array_size(drop), 1);
			assert_string_equal(json_string_value(json_array_get(drop, 0)), "ALL");
			assert_null(json_object_get(json_object_get(sc, "capabilities"), "add"));
			assert_null(json_object_get(sc, "privileged"));
			assert_null(json_object_get(sc, "runAsUser"));
			n++;
		}
	}
	assert_true(n >= 1);
	/* only the volume types restricted allows */
	json_array_foreach(json_object_get(podspec, "volumes"), i, v) {
		int ok = json_object_get(v, "configMap") || json_object_get(v, "emptyDir") ||
			 json_object_get(v, "persistentVolumeClaim") ||
			 json_object_get(v, "secret") || json_object_get(v, "projected");

		assert_true(ok);
		assert_null(json_object_get(v, "hostPath"));
	}
}

static void test_pods_pass_restricted(void **state)
{
	struct sample s;
	json_t *obj, *spec;

	(void)state;
	sample_open(&s, "ddiloco-system");
	obj = child_learner(&s.c, 0);
	spec = json_object_get(obj, "spec");
	assert_restricted(spec);
	/* both the sidecar and the learner were checked */
	assert_int_equal(json_array_size(json_object_get(spec, "initContainers")), 1);
	assert_int_equal(json_array_size(json_object_get(spec, "containers")), 1);
	assert_true(json_is_false(json_object_get(spec, "enableServiceLinks")));
	json_decref(obj);
	obj = child_syncer(&s.c);
	spec = json_object_get(json_object_get(json_object_get(obj, "spec"), "template"),
			       "spec");
	assert_restricted(spec);
	/* fsGroup is kept beside the rest of the pod's context */
	assert_int_equal(json_integer_value(json_object_get(json_object_get(
		spec, "securityContext"), "fsGroup")), 65532);
	json_decref(obj);
	/* the checkpoints in an emptyDir: still restricted */
	json_object_set_new(json_object_get(json_object_get(s.job, "spec"), "syncer"),
			    "storage", json_string(""));
	obj = child_syncer(&s.c);
	assert_restricted(json_object_get(json_object_get(json_object_get(obj, "spec"),
							  "template"), "spec"));
	json_decref(obj);
	sample_close(&s);
}

/* The number of containers of podspec (no template) whose last env
 * entry is DDILOCO_LOG_FORMAT=json, out of *all. */
static int json_loggers(json_t *podspec, int *all)
{
	static const char *const lists[] = { "initContainers", "containers" };
	json_t *ctr, *env;
	size_t i;
	int n = 0;

	*all = 0;
	for (int k = 0; k < 2; k++)
		json_array_foreach(json_object_get(podspec, lists[k]), i, ctr) {
			env = json_object_get(ctr, "env");
			env = json_array_get(env, json_array_size(env) - 1);
			(*all)++;
			n += !strcmp(path_str(env, "name") ? path_str(env, "name") : "",
				     "DDILOCO_LOG_FORMAT") &&
			     !strcmp(path_str(env, "value") ? path_str(env, "value") : "",
				     "json");
		}
	return n;
}

/* Every container of the learner's, the syncer's and the evaluator's
 * pods logs json (docs/run.md, Logs). */
static void test_pods_log_json(void **state)
{
	struct sample s;
	json_t *obj, *spec = NULL;
	int all;

	(void)state;
	sample_open(&s, "ddiloco-system");
	obj = child_learner(&s.c, 0);
	assert_int_equal(json_loggers(json_object_get(obj, "spec"), &all), 2);
	assert_int_equal(all, 2);
	json_decref(obj);
	obj = child_syncer(&s.c);
	assert_int_equal(json_loggers(json_object_get(json_object_get(json_object_get(obj,
				      "spec"), "template"), "spec"), &all), 1);
	assert_int_equal(all, 1);
	json_decref(obj);
	json_object_set_new(json_object_get(s.job, "spec"), "evaluator",
			    json_pack("{s:[s]}", "command", "python3"));
	obj = child_evaluator(&s.c);
	if (obj)
		spec = json_object_get(obj, "spec");
	/* the sidecar, the runtime's copy and the evaluator */
	assert_int_equal(json_loggers(spec, &all), 3);
	assert_int_equal(all, 3);
	json_decref(obj);
	sample_close(&s);
}

/* 1 when container c's env has name = value */
static int env_is(json_t *c, const char *name, const char *value)
{
	json_t *v;
	size_t i;

	json_array_foreach(json_object_get(c, "env"), i, v)
		if (!strcmp(path_str(v, "name"), name))
			return !strcmp(path_str(v, "value"), value);
	return 0;
}

/* The runtime image (children.h): the syncer's and the sidecar's; the
 * learner's own image runs unchanged, and a command of the user's gets
 * the learner library copied in by an init container of the runtime
 * image, read-only, DDILOCO_LIB and PYTHONPATH naming it unless the
 * template sets them; no spec.learners.image: the runtime image. */
static void test_runtime_image(void **state)
{
	struct sample s;
	json_t *pod, *sts, *ps, *c, *l = NULL;

	(void)state;
	sample_open(&s, "ops");
	sts = child_syncer(&s.c);
	assert_string_equal(path_str(sts, "spec.template.spec.containers.0.image"),
			    "ddiloco-runtime:test");
	assert_string_equal(path_str(sts, "spec.template.spec.containers.0.imagePullPolicy"),
			    "Always");
	json_decref(sts);
	/* `ddiloco learner` in the user's image: nothing copied */
	pod = child_learner(&s.c, 0);
	ps = json_object_get(pod, "spec");
	assert_int_equal(json_array_size(json_object_get(ps, "initContainers")), 1);
	assert_string_equal(path_str(ps, "initContainers.0.image"), "ddiloco-runtime:test");
	assert_string_equal(path_str(ps, "containers.0.image"), "ddiloco:test");
	assert_false(env_is(json_array_get(json_object_get(ps, "containers"), 0),
			    "DDILOCO_LIB", RUNTIME_DIR "/lib/libddiloco.so"));
	json_decref(pod);

	/* a command of the user's: the copy, its volume, the env */
	l = json_object_get(json_object_get(s.job, "spec"), "learners");
	json_object_set_new(l, "command", json_pack("[s,s]", "python3", "train.py"));
	pod = child_learner(&s.c, 0);
	ps = json_object_get(pod, "spec");
	assert_int_equal(json_array_size(json_object_get(ps, "initContainers")), 2);
	c = json_array_get(json_object_get(ps, "initContainers"), 1);
	assert_string_equal(path_str(c, "name"), "runtime");
	assert_string_equal(path_str(c, "image"), "ddiloco-runtime:test");
	assert_string_equal(path_str(c, "command.1"), "copy-runtime");
	assert_string_equal(path_str(c, "command.3"), RUNTIME_DIR);
	assert_string_equal(path_str(c, "volumeMounts.0.name"), "ddiloco-runtime");
	assert_true(json_is_true(json_object_get(json_object_get(c, "securityContext"),
						 "readOnlyRootFilesystem")));
	c = json_array_get(json_object_get(ps, "containers"), 0);
	assert_string_equal(path_str(c, "image"), "ddiloco:test");
	assert_true(env_is(c, "DDILOCO_LIB", RUNTIME_DIR "/lib/libddiloco.so"));
	assert_true(env_is(c, "PYTHONPATH", RUNTIME_DIR "/python"));
	{
		json_t *m, *mounts = json_object_get(c, "volumeMounts");
		size_t i, found = 0;

		json_array_foreach(mounts, i, m)
			if (!strcmp(path_str(m, "name"), "ddiloco-runtime")) {
				found++;
				assert_string_equal(path_str(m, "mountPath"), RUNTIME_DIR);
				assert_true(json_is_true(json_object_get(m, "readOnly")));
			}
		assert_int_equal(found, 1);
	}
	json_decref(pod);

	/* the template's PYTHONPATH wins: the operator's is not added; no
	 * image: the runtime image */
	json_object_set_new(l, "template", json_pack(
		"{s:{s:[{s:s, s:[{s:s, s:s}]}]}}", "spec", "containers", "name",
		"learner", "env", "name", "PYTHONPATH", "value", "/app"));
	json_object_del(l, "image");
	pod = child_learner(&s.c, 0);
	c = json_array_get(json_object_get(json_object_get(pod, "spec"), "containers"), 0);
	assert_string_equal(path_str(c, "image"), "ddiloco-runtime:test");
	assert_true(env_is(c, "DDILOCO_LIB", RUNTIME_DIR "/lib/libddiloco.so"));
	assert_true(env_is(c, "PYTHONPATH", "/app"));
	json_decref(pod);
	sample_close(&s);
}

static void test_networkpolicy_manifest(void **state)
{
	struct sample s;
	json_t *np, *ing, *peer;

	(void)state;
	sample_open(&s, "ops");
	np = child_networkpolicy(&s.c);
	assert_non_null(np);
	assert_string_equal(path_str(np, "apiVersion"), "networking.k8s.io/v1");
	assert_string_equal(path_str(np, "kind"), "NetworkPolicy");
	assert_string_equal(path_str(np, "metadata.name"), "demo-syncer");
	assert_string_equal(path_str(np, "metadata.namespace"), "team");
	assert_string_equal(path_str(np, "metadata.ownerReferences.0.uid"), "u-1");
	assert_true(json_is_true(json_object_get(json_array_get(json_object_get(
		json_object_get(np, "metadata"), "ownerReferences"), 0), "controller")));
	assert_string_equal(json_string_value(json_object_get(json_object_get(
		json_object_get(np, "metadata"), "labels"), "app.kubernetes.io/managed-by")),
		"ddiloco-operator");
	/* the syncer's pod, and only it */
	assert_int_equal(json_object_size(json_object_get(json_object_get(json_object_get(
		np, "spec"), "podSelector"), "matchLabels")), 2);
	assert_string_equal(json_string_value(json_object_get(json_object_get(
		json_object_get(json_object_get(np, "spec"), "podSelector"), "matchLabels"),
		LABEL_JOB)), "demo");
	assert_string_equal(json_string_value(json_object_get(json_object_get(
		json_object_get(json_object_get(np, "spec"), "podSelector"), "matchLabels"),
		LABEL_ROLE)), "syncer");
	assert_string_equal(path_str(np, "spec.policyTypes.0"), "Ingress");
	assert_int_equal(json_array_size(json_object_get(json_object_get(np, "spec"),
							 "policyTypes")), 1);
	ing = json_object_get(json_object_get(np, "spec"), "ingress");
	assert_int_equal(json_array_size(ing), 2);
	/* gRPC: the job's learners and its evaluator, same namespace (no
	 * namespaceSelector) */
	peer = json_array_get(json_object_get(json_array_get(ing, 0), "from"), 1);
	assert_int_equal(json_array_size(json_object_get(json_array_get(ing, 0), "from")), 2);
	assert_null(json_object_get(peer, "namespaceSelector"));
	assert_int_equal(json_object_size(json_object_get(json_object_get(peer,
		"podSelector"), "matchLabels")), 2);
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(
		peer, "podSelector"), "matchLabels"), LABEL_JOB)), "demo");
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(
		peer, "podSelector"), "matchLabels"), LABEL_ROLE)), "evaluator");
	peer = json_array_get(json_object_get(json_array_get(ing, 0), "from"), 0);
	assert_null(json_object_get(peer, "namespaceSelector"));
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(
		peer, "podSelector"), "matchLabels"), LABEL_JOB)), "demo");
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(
		peer, "podSelector"), "matchLabels"), LABEL_ROLE)), "learner");
	assert_int_equal(json_array_size(json_object_get(json_array_get(ing, 0), "ports")), 1);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(json_object_get(
		json_array_get(ing, 0), "ports"), 0), "port")), 7070);
	assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(
		json_array_get(ing, 0), "ports"), 0), "protocol")), "TCP");
	/* HTTP: the operator's pods in its own namespace */
	peer = json_array_get(json_object_get(json_array_get(ing, 1), "from"), 0);
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(
		peer, "namespaceSelector"), "matchLabels"), "kubernetes.io/metadata.name")), "ops");
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(
		peer, "podSelector"), "matchLabels"), "app.kubernetes.io/name")), "ddiloco");
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(
		peer, "podSelector"), "matchLabels"), "app.kubernetes.io/component")), "operator");
	assert_int_equal(json_integer_value(json_object_get(json_array_get(json_object_get(
		json_array_get(ing, 1), "ports"), 0), "port")), 7071);
	json_decref(np);
	/* no operator namespace: no policy that would let nobody in */
	s.c.operator_ns = NULL;
	assert_null(child_networkpolicy(&s.c));
	s.c.operator_ns = "";
	assert_null(child_networkpolicy(&s.c));
	sample_close(&s);
}

/* The volume named "tls" of a pod spec, and whether container c mounts it. */
static json_t *volume_named(json_t *podspec, const char *name)
{
	size_t i;
	json_t *v;

	json_array_foreach(json_object_get(podspec, "volumes"), i, v)
		if (!strcmp(json_string_value(json_object_get(v, "name")), name))
			return v;
	return NULL;
}

static const char *mount_of(json_t *container, const char *name)
{
	size_t i;
	json_t *m;

	json_array_foreach(json_object_get(container, "volumeMounts"), i, m)
		if (!strcmp(json_string_value(json_object_get(m, "name")), name)) {
			assert_true(json_is_true(json_object_get(m, "readOnly")));
			return json_string_value(json_object_get(m, "mountPath"));
		}
	return NULL;
}

/* The last two words of a container's command, as "a b". */
static const char *last_args(json_t *container)
{
	static char buf[256];
	json_t *cmd = json_object_get(container, "command");
	size_t n = json_array_size(cmd);

	assert_true(n >= 2);
	snprintf(buf, sizeof(buf), "%s %s", json_string_value(json_array_get(cmd, n - 2)),
		 json_string_value(json_array_get(cmd, n - 1)));
	return buf;
}

/* items [{key, path}] of a secret volume, as "key>path key>path ..." */
static void items_text(json_t *vol, char *out, size_t n)
{
	size_t i, k = 0;
	json_t *it;

	out[0] = '\0';
	json_array_foreach(json_object_get(json_object_get(vol, "secret"), "items"), i, it)
		k += (size_t)snprintf(out + k, n - k, "%s%s>%s", i ? " " : "",
				      json_string_value(json_object_get(it, "key")),
				      json_string_value(json_object_get(it, "path")));
}

/*
 * A job of 2 syncer shards (docs/operator.md, Shards): the StatefulSet
 * runs 2 replicas with --shard auto, each mounting its own claim through
 * the template; the operator's claims are checkpoints-demo-syncer-<i>,
 * sized from the model's half; the sidecars dial both pods in shard
 * order; the syncer's certificate names both pods. An external model's
 * claim is the stated default unless spec.syncer.storage says.
 */
static void test_sharded_syncer(void **state)
{
	struct sample s;
	json_t *o, *spec, *ctr, *cmd, *vol, *sec, *v;
	struct pki_names names;
	struct err e;
	char size[32], *t;
	const char *want[] = { "demo-syncer-0.demo-syncer.team.svc",
			       "demo-syncer-1.demo-syncer.team.svc",
			       "demo-syncer-1.demo-syncer.team.svc.cluster.local",
			       "demo-syncer.team.svc" };
	int found = 0, shard_flag = 0;
	size_t i;

	(void)state;
	sample_open(&s, "ops");
	s.js.syncer.shards = 2;

	/* the claims: 101,099,520 parameters, half a shard: 5 x 1.5 x
	 * (404.4 MB + 1 MiB) = 2.83 GiB a shard, against 6Gi unsharded */
	json_object_del(json_object_get(json_object_get(s.job, "spec"), "syncer"), "storage");
	s.js.model.channels = 1024;
	s.js.model.layers = 8;
	checkpoint_claim_size(&s.c, size, sizeof(size));
	assert_string_equal(size, "3Gi");
	assert_true(fabs(checkpoint_shard_bytes(&s.js) -
			 7.5 * (8.0 * 101099520 / 2 + (1 << 20))) < 1);
	o = child_pvc(&s.c, 1);
	assert_string_equal(path_str(o, "metadata.name"), "checkpoints-demo-syncer-1");
	assert_string_equal(path_str(o, "spec.resources.requests.storage"), "3Gi");
	assert_string_equal(path_str(o, "metadata.ownerReferences.0.uid"), "u-1");
	json_decref(o);
	assert_null(child_pvc(&s.c, 2));
	assert_null(child_pvc(&s.c, -1));

	/* the StatefulSet */
	o = child_syncer(&s.c);
	spec = json_object_get(o, "spec");
	assert_int_equal(json_integer_value(json_object_get(spec, "replicas")), 2);
	assert_string_equal(path_str(spec, "volumeClaimTemplates.0.metadata.name"), "checkpoints");
	assert_string_equal(path_str(spec, "volumeClaimTemplates.0.spec.resources.requests.storage"),
			    "3Gi");
	assert_string_equal(path_str(spec, "persistentVolumeClaimRetentionPolicy.whenDeleted"),
			    "Retain");
	ctr = json_array_get(json_object_get(json_object_get(json_object_get(spec,
		"template"), "spec"), "containers"), 0);
	cmd = json_object_get(ctr, "command");
	json_array_foreach(cmd, i, v)
		if (!strcmp(json_string_value(v), "--shard"))
			shard_flag = !strcmp(json_string_value(json_array_get(cmd, i + 1)), "auto");
	assert_true(shard_flag);
	/* no claim volume of its own: the template's is mounted by name */
	json_array_foreach(json_object_get(json_object_get(json_object_get(spec,
		"template"), "spec"), "volumes"), i, vol)
		assert_string_not_equal(json_string_value(json_object_get(vol, "name")),
					"checkpoints");
	json_array_foreach(json_object_get(ctr, "volumeMounts"), i, vol)
		found += !strcmp(json_string_value(json_object_get(vol, "name")), "checkpoints");
	assert_int_equal(found, 1);
	/* the memory request: half the parameters' 72 B, over the base */
	assert_string_equal(path_str(ctr, "resources.requests.memory"),
			    "3535Mi");
	json_decref(o);

	/* the sidecars dial every shard, shard 0 first */
	t = syncer_targets("demo", "team", 7070, 2);
	assert_string_equal(t, "demo-syncer-0.demo-syncer.team.svc:7070,"
			       "demo-syncer-1.demo-syncer.team.svc:7070");
	free(t);
	o = child_learner(&s.c, 0);
	cmd = json_object_get(json_array_get(json_object_get(json_object_get(o, "spec"),
		"initContainers"), 0), "command");
	found = 0;
	json_array_foreach(cmd, i, v)
		if (!strcmp(json_string_value(v), "--syncer")) {
			assert_string_equal(json_string_value(json_array_get(cmd, i + 1)),
					    "demo-syncer-0.demo-syncer.team.svc:7070,"
					    "demo-syncer-1.demo-syncer.team.svc:7070");
			found = 1;
		}
	assert_true(found);
	json_decref(o);

	/* one certificate every shard serves, naming each pod */
	sec = child_tls_secret(&s.c, &e);
	assert_non_null(sec);
	assert_int_equal(pki_cert_names(json_string_value(json_object_get(json_object_get(
		sec, "stringData"), "syncer.crt")), &names, &e), 0);
	assert_int_equal(names.ndns, 9);
	found = 0;
	for (size_t k = 0; k < names.ndns; k++)
		for (size_t w = 0; w < 4; w++)
			found += !strcmp(names.dns[k], want[w]);
	assert_int_equal(found, 4);
	pki_names_release(&names);
	json_decref(sec);

	/* 64 shards: 257 names, still one certificate */
	s.js.syncer.shards = 64;
	sec = child_tls_secret(&s.c, &e);
	assert_non_null(sec);
	json_decref(sec);

	/* an external model: the stated default, or spec.syncer.storage */
	s.js.syncer.shards = 2;
	s.js.model.kind = MODEL_EXTERNAL;
	checkpoint_claim_size(&s.c, size, sizeof(size));
	assert_string_equal(size, CKPT_EXTERNAL_DEFAULT);
	assert_true(checkpoint_shard_bytes(&s.js) == 0);
	s.c.external_storage = "2Gi";   /* --external-checkpoint-storage */
	checkpoint_claim_size(&s.c, size, sizeof(size));
	assert_string_equal(size, "2Gi");
	/* a declared table (spec.model.tensors): 2^29 values in 2 shards,
	 * 5 × 1.5 × (8 × 2^28 + 1 MiB) = 15.007 GiB a shard */
	s.js.model.ntensors = 2;
	s.js.model.tensors[0] = s.js.model.tensors[1] = 1ull << 28;
	checkpoint_claim_size(&s.c, size, sizeof(size));
	assert_string_equal(size, "16Gi");
	s.js.model.ntensors = 0;
	s.c.external_storage = NULL;
	json_object_set_new(json_object_get(json_object_get(s.job, "spec"), "syncer"),
			    "storage", json_string("40Gi"));
	checkpoint_claim_size(&s.c, size, sizeof(size));
	assert_string_equal(size, "40Gi");
	sample_close(&s);
}

static void test_tls_secret_and_mounts(void **state)
{
	struct sample s;
	json_t *sec, *sd, *pod, *spec, *vol;
	struct err e;
	char items[256];
	struct pki_id id;
	struct pki_names names;
	const char *ca, *key;
	json_t *v;
	int keys = 0, found = 0;

	(void)state;
	sample_open(&s, "ops");
	sec = child_tls_secret(&s.c, &e);
	assert_non_null(sec);
	assert_string_equal(path_str(sec, "kind"), "Secret");
	assert_string_equal(path_str(sec, "metadata.name"), "demo-tls");
	assert_string_equal(path_str(sec, "metadata.ownerReferences.0.uid"), "u-1");
	assert_string_equal(path_str(sec, "type"), "Opaque");
	assert_true(json_is_true(json_object_get(sec, "immutable")));
	sd = json_object_get(sec, "stringData");
	/* the CA certificate, the syncer's pair, one pair per learner: no CA key */
	assert_int_equal(json_object_size(sd), 7);
	json_object_foreach(sd, key, v)
		keys += strstr(json_string_value(v), "PRIVATE KEY") != NULL;
	assert_int_equal(keys, 3);
	ca = json_string_value(json_object_get(sd, "ca.crt"));
	assert_non_null(ca);
	assert_int_equal(pki_verify(ca, json_string_value(json_object_get(sd, "syncer.crt")), &e), 0);
	assert_int_equal(pki_verify(ca, json_string_value(json_object_get(sd, "learner-1.crt")), &e), 0);
	assert_non_null(strstr(json_string_value(json_object_get(sd, "learner-1.key")), "PRIVATE KEY"));
	/* identities */
	assert_int_equal(pki_cert_id(json_string_value(json_object_get(sd, "learner-1.crt")),
				     &id, &e), 0);
	assert_string_equal(id.job, "demo");
	assert_int_equal(id.role, PKI_ROLE_LEARNER);
	assert_int_equal(id.learner, 1);
	assert_int_equal(pki_cert_id(json_string_value(json_object_get(sd, "syncer.crt")),
				     &id, &e), 0);
	assert_int_equal(id.role, PKI_ROLE_SYNCER);
	/* the syncer's certificate names the address the sidecars dial */
	assert_int_equal(pki_cert_names(json_string_value(json_object_get(sd, "syncer.crt")),
					&names, &e), 0);
	for (size_t i = 0; i < names.ndns; i++)
		found += !strcmp(names.dns[i], "demo-syncer-0.demo-syncer.team.svc") ||
			 !strcmp(names.dns[i], "demo-syncer-0.demo-syncer.team.svc.cluster.local");
	assert_int_equal(found, 2);
	pki_names_release(&names);
	/* a second Secret is another CA: fresh keys every time */
	{
		json_t *again = child_tls_secret(&s.c, &e);

		assert_non_null(json_string_value(json_object_get(json_object_get(
			again, "stringData"), "ca.crt")));
		assert_string_not_equal(ca, json_string_value(json_object_get(json_object_get(
			again, "stringData"), "ca.crt")));
		assert_int_equal(pki_verify(ca, json_string_value(json_object_get(json_object_get(
			again, "stringData"), "learner-1.crt")), &e), -1);
		json_decref(again);
	}
	json_decref(sec);

	/* the learner pod: the sidecar mounts only learner 1's pair */
	pod = child_learner(&s.c, 1);
	spec = json_object_get(pod, "spec");
	vol = volume_named(spec, "tls");
	assert_non_null(vol);
	assert_string_equal(path_str(vol, "secret.secretName"), "demo-tls");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(vol, "secret"),
							    "defaultMode")), 0440);
	items_text(vol, items, sizeof(items));
	assert_string_equal(items, "ca.crt>ca.crt learner-1.crt>tls.crt learner-1.key>tls.key");
	assert_string_equal(mount_of(json_array_get(json_object_get(spec, "initContainers"), 0),
				     "tls"), TLS_DIR);
	assert_null(mount_of(json_array_get(json_object_get(spec, "containers"), 0), "tls"));
	/* the sidecar is told where; the learner, which never dials, is not */
	assert_string_equal(last_args(json_array_get(json_object_get(spec, "initContainers"), 0)),
			    "--tls-dir " TLS_DIR);
	assert_string_equal(last_args(json_array_get(json_object_get(spec, "containers"), 0)),
			    "--exchange " EXCHANGE_DIR);
	/* the files' group is the image's, which the pod's user is in */
	assert_int_equal(json_integer_value(json_object_get(json_object_get(
		spec, "securityContext"), "fsGroup")), 65532);
	json_decref(pod);
	/* the syncer: its own pair */
	pod = child_syncer(&s.c);
	spec = json_object_get(json_object_get(json_object_get(pod, "spec"), "template"), "spec");
	vol = volume_named(spec, "tls");
	items_text(vol, items, sizeof(items));
	assert_string_equal(items, "ca.crt>ca.crt syncer.crt>tls.crt syncer.key>tls.key");
	assert_string_equal(mount_of(json_array_get(json_object_get(spec, "containers"), 0),
				     "tls"), TLS_DIR);
	assert_string_equal(last_args(json_array_get(json_object_get(spec, "containers"), 0)),
			    "--tls-dir " TLS_DIR);
	json_decref(pod);
	/* spec.syncer.insecure: no mount, no flag (and no Secret: reconcile) */
	s.js.syncer.insecure = 1;
	pod = child_learner(&s.c, 1);
	spec = json_object_get(pod, "spec");
	assert_null(volume_named(spec, "tls"));
	assert_null(mount_of(json_array_get(json_object_get(spec, "initContainers"), 0), "tls"));
	assert_string_equal(last_args(json_array_get(json_object_get(spec, "initContainers"), 0)),
			    "--http 0.0.0.0:9090");
	assert_restricted(spec);
	json_decref(pod);
	pod = child_syncer(&s.c);
	spec = json_object_get(json_object_get(json_object_get(pod, "spec"), "template"), "spec");
	assert_null(volume_named(spec, "tls"));
	assert_string_equal(last_args(json_array_get(json_object_get(spec, "containers"), 0)),
			    "--checkpoint-dir " CHECKPOINT_DIR);
	json_decref(pod);
	s.js.syncer.insecure = 0;

	/* a job name that is no DNS label cannot name a CA */
	s.c.name = "Demo_1";
	assert_null(child_tls_secret(&s.c, &e));
	assert_non_null(strstr(e.msg, "not a DNS label"));
	sample_close(&s);
}

/*
 * The evaluator's pod (spec.evaluator): the user's command in the main
 * container, a sidecar that says Hello as evaluator 0 with its own
 * certificate, the learners' image, resources, placement and template,
 * restricted like every pod; and its certificate in the Secret of an
 * external job.
 */
static void test_evaluator_pod_manifest(void **state)
{
	struct sample s;
	json_t *spec, *l, *pod, *ps, *init, *c, *sec, *sd;
	struct err e;
	struct pki_id id;
	char items[256];
	json_error_t je;

	(void)state;
	sample_open(&s, "ops");
	/* no spec.evaluator: no pod */
	assert_null(child_evaluator(&s.c));
	spec = json_object_get(s.job, "spec");
	l = json_object_get(spec, "learners");
	json_object_set_new(spec, "evaluator", json_pack("{s:[s], s:[s, s]}",
		"command", "python3", "args", "external.py", "--evaluate"));
	json_object_set_new(l, "template", json_loads(
		"{\"metadata\":{\"labels\":{\"team\":\"nlp\"}},"
		" \"spec\":{\"priorityClassName\":\"training\","
		"  \"containers\":[{\"name\":\"learner\","
		"   \"env\":[{\"name\":\"HF_HOME\",\"value\":\"/cache\"}],"
		"   \"resources\":{\"limits\":{\"google.com/tpu\":\"4\"}}}]}}", 0, &je));
	pod = child_evaluator(&s.c);
	assert_non_null(pod);
	assert_string_equal(path_str(pod, "kind"), "Pod");
	assert_string_equal(path_str(pod, "metadata.name"), "demo-evaluator-0");
	assert_string_equal(path_str(pod, "metadata.namespace"), "team");
	assert_string_equal(label_of(json_object_get(pod, "metadata"), LABEL_ROLE), "evaluator");
	assert_string_equal(label_of(json_object_get(pod, "metadata"), LABEL_JOB), "demo");
	assert_null(label_of(json_object_get(pod, "metadata"), LABEL_INDEX));
	assert_string_equal(label_of(json_object_get(pod, "metadata"), "team"), "nlp");
	assert_string_equal(path_str(pod, "metadata.ownerReferences.0.uid"), "u-1");
	assert_true(json_is_true(json_object_get(json_array_get(json_object_get(
		json_object_get(pod, "metadata"), "ownerReferences"), 0), "controller")));
	ps = json_object_get(pod, "spec");
	assert_string_equal(path_str(ps, "restartPolicy"), "Never");
	assert_string_equal(path_str(ps, "priorityClassName"), "training");
	assert_string_equal(path_str(ps, "nodeSelector.pool"), "a");
	assert_string_equal(path_str(ps, "tolerations.0.key"), "kwok");
	/* the sidecar: an evaluator's Hello, index 0, the syncer's address;
	 * then the runtime's copy (test_runtime_image) */
	assert_int_equal(json_array_size(json_object_get(ps, "initContainers")), 2);
	assert_string_equal(path_str(ps, "initContainers.1.name"), "runtime");
	init = json_array_get(json_object_get(ps, "initContainers"), 0);
	assert_string_equal(path_str(init, "name"), "sidecar");
	assert_string_equal(path_str(init, "restartPolicy"), "Always");
	assert_string_equal(path_str(init, "image"), "ddiloco-runtime:test");
	assert_string_equal(path_str(init, "imagePullPolicy"), "Always");
	{
		const char *want[] = { "ddiloco", "sidecar", "--job", "/etc/ddiloco/job.json",
				       "--evaluator", "--learner", "0", "--exchange",
				       EXCHANGE_DIR, "--syncer",
				       "demo-syncer-0.demo-syncer.team.svc:7070", "--http",
				       "0.0.0.0:9090", "--tls-dir", TLS_DIR };
		json_t *cmd = json_object_get(init, "command");

		assert_int_equal(json_array_size(cmd), 15);
		for (size_t i = 0; i < 15; i++)
			assert_string_equal(json_string_value(json_array_get(cmd, i)), want[i]);
	}
	/* the user's evaluator with the learners' image and resources */
	assert_int_equal(json_array_size(json_object_get(ps, "containers")), 1);
	c = json_array_get(json_object_get(ps, "containers"), 0);
	assert_string_equal(path_str(c, "name"), "evaluator");
	assert_string_equal(path_str(c, "image"), "ddiloco:test");
	assert_string_equal(path_str(c, "imagePullPolicy"), "Never");
	assert_int_equal(json_array_size(json_object_get(c, "command")), 1);
	assert_string_equal(path_str(c, "command.0"), "python3");
	assert_int_equal(json_array_size(json_object_get(c, "args")), 2);
	assert_string_equal(path_str(c, "args.0"), "external.py");
	assert_string_equal(path_str(c, "args.1"), "--evaluate");
	assert_string_equal(path_str(c, "env.0.name"), "DDILOCO_EVALUATOR_ID");
	assert_string_equal(path_str(c, "env.0.value"), "0");
	assert_string_equal(path_str(c, "env.1.name"), "DDILOCO_JOB_FILE");
	assert_string_equal(path_str(c, "env.1.value"), "/etc/ddiloco/job.json");
	assert_string_equal(path_str(c, "env.2.name"), "DDILOCO_EXCHANGE");
	assert_string_equal(path_str(c, "env.2.value"), EXCHANGE_DIR);
	/* the runtime's copy (test_runtime_image) */
	assert_string_equal(path_str(c, "env.3.name"), "DDILOCO_LIB");
	assert_string_equal(path_str(c, "env.4.name"), "PYTHONPATH");
	assert_string_equal(path_str(c, "env.5.name"), "DDILOCO_LOG_FORMAT");
	/* the template's "learner" container merged into it */
	assert_string_equal(path_str(c, "env.6.name"), "HF_HOME");
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(c,
		"resources"), "limits"), "google.com/tpu")), "4");
	assert_string_equal(path_str(c, "resources.requests.cpu"), "2");
	assert_string_equal(mount_of(c, "spec"), SPEC_DIR);
	assert_null(mount_of(c, "tls"));
	/* its own certificate, the sidecar's alone */
	items_text(volume_named(ps, "tls"), items, sizeof(items));
	assert_string_equal(items, "ca.crt>ca.crt evaluator-0.crt>tls.crt evaluator-0.key>tls.key");
	assert_string_equal(path_str(volume_named(ps, "tls"), "secret.secretName"), "demo-tls");
	assert_string_equal(mount_of(init, "tls"), TLS_DIR);
	assert_string_equal(path_str(volume_named(ps, "exchange"), "emptyDir.medium"), "Memory");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(
		ps, "securityContext"), "fsGroup")), 65532);
	assert_restricted(ps);
	assert_true(json_is_false(json_object_get(ps, "enableServiceLinks")));
	json_decref(pod);

	/* insecure: no certificate, no flag */
	s.js.syncer.insecure = 1;
	pod = child_evaluator(&s.c);
	ps = json_object_get(pod, "spec");
	assert_null(volume_named(ps, "tls"));
	assert_string_equal(last_args(json_array_get(json_object_get(ps, "initContainers"), 0)),
			    "--http 0.0.0.0:9090");
	assert_restricted(ps);
	json_decref(pod);
	s.js.syncer.insecure = 0;

	/* the Secret of an external job: evaluator 0's client certificate */
	s.js.model.kind = MODEL_EXTERNAL;
	sec = child_tls_secret(&s.c, &e);
	assert_non_null(sec);
	sd = json_object_get(sec, "stringData");
	assert_int_equal(json_object_size(sd), 9);
	assert_int_equal(pki_verify(json_string_value(json_object_get(sd, "ca.crt")),
				    json_string_value(json_object_get(sd, "evaluator-0.crt")),
				    &e), 0);
	assert_int_equal(pki_check_pair(json_string_value(json_object_get(sd, "evaluator-0.crt")),
					json_string_value(json_object_get(sd, "evaluator-0.key")),
					&e), 0);
	assert_int_equal(pki_cert_id(json_string_value(json_object_get(sd, "evaluator-0.crt")),
				     &id, &e), 0);
	assert_string_equal(id.job, "demo");
	assert_int_equal(id.role, PKI_ROLE_EVALUATOR);
	assert_int_equal(id.learner, 0);
	json_decref(sec);
	/* a GPT job's has none (test_tls_secret_and_mounts: 7 keys) */
	s.js.model.kind = MODEL_GPT;
	sec = child_tls_secret(&s.c, &e);
	assert_null(json_object_get(json_object_get(sec, "stringData"), "evaluator-0.crt"));
	json_decref(sec);
	sample_close(&s);
}

/* More learners than one Secret holds: refused, with the reason. */
static void test_tls_secret_too_big(void **state)
{
	struct job_spec js;
	struct child_ctx c = { "big", "team", "u-2", &js, NULL, "{}", "ops", 0, NULL, NULL, NULL };
	struct err e;

	(void)state;
	jobspec_defaults(&js);
	js.learners.replicas = 4096;
	assert_null(child_tls_secret(&c, &e));
	assert_non_null(strstr(e.msg, "do not fit in one Secret"));
	assert_non_null(strstr(e.msg, "'big'"));
}

static void test_learner_index(void **state)
{
	(void)state;
	assert_int_equal(learner_index("demo", "demo-learner-0"), 0);
	assert_int_equal(learner_index("demo", "demo-learner-17"), 17);
	assert_int_equal(learner_index("demo", "demo-learner-"), -1);
	assert_int_equal(learner_index("demo", "demo-learner-01"), -1);
	assert_int_equal(learner_index("demo", "demo-learner-1x"), -1);
	assert_int_equal(learner_index("demo", "demo-syncer-0"), -1);
	assert_int_equal(learner_index("demo", "demo2-learner-1"), -1);
	assert_int_equal(learner_index("de", "demo-learner-1"), -1);
}

static void test_child_names(void **state)
{
	char name[CHILD_NAME_MAX], small[12], addr[128];
	char long_job[CHILD_NAME_MAX];

	(void)state;
	assert_int_equal(child_name("demo", CHILD_SPEC, 0, name, sizeof(name)), 0);
	assert_string_equal(name, "demo-spec");
	assert_int_equal(child_name("demo", CHILD_SYNCER, 3, name, sizeof(name)), 0);
	assert_string_equal(name, "demo-syncer");   /* the index is a learner's only */
	assert_int_equal(child_name("demo", CHILD_CHECKPOINTS, 0, name, sizeof(name)), 0);
	assert_string_equal(name, "demo-checkpoints");
	assert_int_equal(child_name("demo", CHILD_LEARNER, 12, name, sizeof(name)), 0);
	assert_string_equal(name, "demo-learner-12");
	assert_int_equal(learner_index("demo", name), 12);
	assert_int_equal(child_name("demo", CHILD_SYNCER_POD, 0, name, sizeof(name)), 0);
	assert_string_equal(name, "demo-syncer-0");
	assert_int_equal(child_name("demo", CHILD_EVALUATOR, 0, name, sizeof(name)), 0);
	assert_string_equal(name, "demo-evaluator-0");
	assert_int_equal(learner_index("demo", name), -1);
	assert_int_equal(child_name("demo", CHILD_SYNCER_POD, 7, name, sizeof(name)), 0);
	assert_string_equal(name, "demo-syncer-7");
	assert_int_equal(syncer_shard_index("demo", name), 7);
	assert_int_equal(syncer_shard_index("demo", "demo-syncer-64"), -1);
	assert_int_equal(syncer_shard_index("demo", "demo-syncer-07"), -1);
	assert_int_equal(syncer_shard_index("demo", "demo-learner-0"), -1);
	/* the longest job name the CRD allows (docs/operator.md, Names): its
	 * evaluator's pod name is a label value and a hostname (<= 63) */
	memset(long_job, 'a', 45);
	long_job[45] = '\0';
	assert_int_equal(child_name(long_job, CHILD_EVALUATOR, 0, name, sizeof(name)), 0);
	assert_true(strlen(name) <= 63);
	assert_int_equal(strlen(name), 57);
	/* "demo-learner-1" needs 15 bytes: refused, and out is left empty */
	assert_int_equal(child_name("demo", CHILD_LEARNER, 1, small, sizeof(small)), -1);
	assert_string_equal(small, "");
	assert_int_equal(child_name("demo", CHILD_SPEC, 0, small, sizeof(small)), 0);
	assert_string_equal(small, "demo-spec");

	assert_int_equal(syncer_address("demo", "ns", 7070, 0, addr, sizeof(addr)), 0);
	assert_string_equal(addr, "demo-syncer-0.demo-syncer.ns.svc:7070");
	assert_int_equal(syncer_address("demo", "ns", 7070, 0, addr, 20), -1);

	/* a job name that leaves no room for a suffix: no child is built */
	memset(long_job, 'a', sizeof(long_job) - 8);
	long_job[sizeof(long_job) - 8] = '\0';
	assert_int_equal(child_name(long_job, CHILD_SPEC, 0, name, sizeof(name)), 0);
	assert_int_equal(child_name(long_job, CHILD_CHECKPOINTS, 0, name, sizeof(name)), -1);
	{
		struct job_spec js;
		struct child_ctx c = { long_job, "ns", "uid", &js, NULL, "{}", "ops", 0, NULL, NULL, NULL };

		jobspec_defaults(&js);
		assert_null(child_pvc(&c, -1));
		assert_null(child_learner(&c, 0));
		assert_null(child_evaluator(&c));
		assert_null(child_syncer(&c));
	}
}

/* Kubernetes quantities read as bytes (a claim's requested storage). */
static void test_quantities(void **state)
{
	static const struct {
		const char *q;
		double bytes;
	} ok[] = {
		{ "10Gi", 10 * 0x1p30 }, { "1Gi", 0x1p30 }, { "500Mi", 500 * 0x1p20 },
		{ "2048", 2048 }, { "1.5Gi", 1.5 * 0x1p30 }, { "3G", 3e9 },
		{ "1e9", 1e9 }, { "4k", 4000 }, { "1Ti", 0x1p40 }, { "0", 0 },
	};
	static const char *bad[] = { "", "Gi", "-1Gi", "10GiB", "10 Gi", "x",
				     "nan", "1e999" };
	double v;

	(void)state;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		assert_int_equal(quantity_bytes(ok[i].q, &v), 0);
		assert_float_equal(v, ok[i].bytes, 0);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(quantity_bytes(bad[i], &v), -1);
	assert_int_equal(quantity_bytes(NULL, &v), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_job_core_strips_operator_fields),
		cmocka_unit_test(test_learner_pod_manifest),
		cmocka_unit_test(test_syncer_placement_and_requests),
		cmocka_unit_test(test_resources_and_qos),
		cmocka_unit_test(test_sidecar_probes),
		cmocka_unit_test(test_templates_and_learner_command),
		cmocka_unit_test(test_checkpoint_claim),
		cmocka_unit_test(test_job_labels_and_managed_by),
		cmocka_unit_test(test_pods_pass_restricted),
		cmocka_unit_test(test_pods_log_json),
		cmocka_unit_test(test_runtime_image),
		cmocka_unit_test(test_networkpolicy_manifest),
		cmocka_unit_test(test_tls_secret_and_mounts),
		cmocka_unit_test(test_sharded_syncer),
		cmocka_unit_test(test_evaluator_pod_manifest),
		cmocka_unit_test(test_tls_secret_too_big),
		cmocka_unit_test(test_learner_index),
		cmocka_unit_test(test_child_names),
		cmocka_unit_test(test_quantities),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
