/*
 * podtemplate: a template merged into a pod as operator/podtemplate.h's
 * table says, field by field: what it adds, what it replaces, and where
 * the operator's own fields win (labels, volume names, mount paths, env
 * names, the container's name, image and command, other containers).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "operator/podtemplate.h"

/* A pod as the operator builds one, reduced to what the merge reads. */
static const char *POD_META =
	"{\"name\":\"demo-learner-0\",\"labels\":{\"ddiloco.io/job\":\"demo\","
	"\"ddiloco.io/role\":\"learner\"}}";
static const char *POD_SPEC =
	"{\"restartPolicy\":\"Never\","
	" \"nodeSelector\":{\"pool\":\"a\",\"zone\":\"z1\"},"
	" \"tolerations\":[{\"key\":\"kwok\",\"operator\":\"Exists\"}],"
	" \"automountServiceAccountToken\":false,"
	" \"securityContext\":{\"runAsNonRoot\":true,\"runAsUser\":65532},"
	" \"volumes\":[{\"name\":\"exchange\",\"emptyDir\":{\"medium\":\"Memory\"}},"
	"              {\"name\":\"spec\",\"configMap\":{\"name\":\"demo-spec\"}}],"
	" \"initContainers\":[{\"name\":\"sidecar\",\"image\":\"ddiloco:1\","
	"                      \"restartPolicy\":\"Always\"}],"
	" \"containers\":[{\"name\":\"learner\",\"image\":\"ddiloco:1\","
	"   \"command\":[\"ddiloco\",\"learner\"],"
	"   \"env\":[{\"name\":\"DDILOCO_LEARNER_ID\",\"value\":\"0\"}],"
	"   \"resources\":{\"requests\":{\"cpu\":\"2\"},\"limits\":{\"memory\":\"1Gi\"}},"
	"   \"volumeMounts\":[{\"name\":\"exchange\",\"mountPath\":\"/run/ddiloco\"}],"
	"   \"securityContext\":{\"readOnlyRootFilesystem\":true,"
	"                        \"allowPrivilegeEscalation\":false}}]}";

static json_t *load(const char *txt)
{
	json_error_t je;
	json_t *j = json_loads(txt, JSON_DECODE_ANY, &je);

	if (!j)
		fail_msg("bad test JSON at %d: %s", je.position, je.text);
	return j;
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

static size_t size_at(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	return json_is_array(v) ? json_array_size(v) : json_object_size(v);
}

/* A TPU pool's template: everything it may set. */
static void test_template_adds_and_replaces(void **state)
{
	json_t *meta = load(POD_META), *spec = load(POD_SPEC), *c;
	json_t *t = load(
		"{\"metadata\":{\"labels\":{\"team\":\"nlp\",\"ddiloco.io/job\":\"other\"},"
		"              \"annotations\":{\"a\":\"1\"}},"
		" \"spec\":{\"nodeSelector\":{\"zone\":\"z2\","
		"          \"cloud.google.com/gke-tpu-topology\":\"2x2\"},"
		"  \"tolerations\":[{\"key\":\"google.com/tpu\",\"operator\":\"Exists\"}],"
		"  \"affinity\":{\"nodeAffinity\":{\"x\":1}},"
		"  \"topologySpreadConstraints\":[{\"maxSkew\":1}],"
		"  \"priorityClassName\":\"training\","
		"  \"imagePullSecrets\":[{\"name\":\"regcred\"}],"
		"  \"serviceAccountName\":\"trainer\","
		"  \"automountServiceAccountToken\":true,"
		"  \"securityContext\":{\"supplementalGroups\":[5000],\"runAsUser\":1000},"
		"  \"volumes\":[{\"name\":\"cache\",\"emptyDir\":{}},"
		"              {\"name\":\"exchange\",\"hostPath\":{\"path\":\"/x\"}}],"
		"  \"initContainers\":[{\"name\":\"fetch\",\"image\":\"busybox\"},"
		"                      {\"name\":\"sidecar\",\"image\":\"evil\"}],"
		"  \"containers\":[{\"name\":\"learner\",\"image\":\"evil\","
		"    \"command\":[\"sh\"],"
		"    \"env\":[{\"name\":\"HF_HOME\",\"value\":\"/cache\"},"
		"           {\"name\":\"DDILOCO_LEARNER_ID\",\"value\":\"9\"}],"
		"    \"volumeMounts\":[{\"name\":\"cache\",\"mountPath\":\"/cache\"},"
		"                    {\"name\":\"cache\",\"mountPath\":\"/run/ddiloco\"}],"
		"    \"resources\":{\"requests\":{\"cpu\":\"8\"},"
		"                 \"limits\":{\"google.com/tpu\":\"4\"}},"
		"    \"securityContext\":{\"readOnlyRootFilesystem\":false},"
		"    \"livenessProbe\":{\"exec\":{\"command\":[\"true\"]}}},"
		"   {\"name\":\"logger\",\"image\":\"fluent\"}]}}");

	(void)state;
	pod_template_apply(meta, spec, t, "learner");
	/* labels added, the operator's kept */
	assert_string_equal(path_str(meta, "labels.team"), "nlp");
	assert_string_equal(json_string_value(json_object_get(json_object_get(meta,
		"labels"), "ddiloco.io/job")), "demo");
	assert_string_equal(path_str(meta, "annotations.a"), "1");
	assert_string_equal(path_str(meta, "name"), "demo-learner-0");
	/* nodeSelector merged, the template's value wins */
	assert_string_equal(path_str(spec, "nodeSelector.pool"), "a");
	assert_string_equal(path_str(spec, "nodeSelector.zone"), "z2");
	/* a key with dots: read directly */
	assert_string_equal(json_string_value(json_object_get(json_object_get(spec,
		"nodeSelector"), "cloud.google.com/gke-tpu-topology")), "2x2");
	/* tolerations appended */
	assert_int_equal(size_at(spec, "tolerations"), 2);
	assert_string_equal(path_str(spec, "tolerations.1.key"), "google.com/tpu");
	/* plain fields set */
	assert_non_null(json_object_get(json_object_get(spec, "affinity"), "nodeAffinity"));
	assert_int_equal(size_at(spec, "topologySpreadConstraints"), 1);
	assert_string_equal(path_str(spec, "priorityClassName"), "training");
	assert_string_equal(path_str(spec, "imagePullSecrets.0.name"), "regcred");
	assert_string_equal(path_str(spec, "serviceAccountName"), "trainer");
	assert_true(json_is_true(json_object_get(spec, "automountServiceAccountToken")));
	/* securityContext key by key, the template wins */
	assert_true(json_is_true(json_object_get(json_object_get(spec, "securityContext"),
						 "runAsNonRoot")));
	assert_int_equal(json_integer_value(json_object_get(json_object_get(spec,
		"securityContext"), "runAsUser")), 1000);
	assert_int_equal(size_at(json_object_get(spec, "securityContext"),
				 "supplementalGroups"), 1);
	/* volumes: the new one appended, "exchange" stays the operator's */
	assert_int_equal(size_at(spec, "volumes"), 3);
	assert_string_equal(path_str(spec, "volumes.0.emptyDir.medium"), "Memory");
	assert_string_equal(path_str(spec, "volumes.2.name"), "cache");
	/* init containers: the user's first, "sidecar" stays ours */
	assert_int_equal(size_at(spec, "initContainers"), 2);
	assert_string_equal(path_str(spec, "initContainers.0.name"), "fetch");
	assert_string_equal(path_str(spec, "initContainers.1.image"), "ddiloco:1");
	/* the learner container: name, image, command ours */
	assert_int_equal(size_at(spec, "containers"), 1);
	c = json_array_get(json_object_get(spec, "containers"), 0);
	assert_string_equal(path_str(c, "image"), "ddiloco:1");
	assert_string_equal(path_str(c, "command.0"), "ddiloco");
	/* env appended, DDILOCO_LEARNER_ID ours */
	assert_int_equal(size_at(c, "env"), 2);
	assert_string_equal(path_str(c, "env.0.value"), "0");
	assert_string_equal(path_str(c, "env.1.name"), "HF_HOME");
	/* a mount at the exchange's path is not taken */
	assert_int_equal(size_at(c, "volumeMounts"), 2);
	assert_string_equal(path_str(c, "volumeMounts.1.mountPath"), "/cache");
	/* resources key by key: cpu replaced, memory kept, the TPU added */
	assert_string_equal(path_str(c, "resources.requests.cpu"), "8");
	assert_string_equal(path_str(c, "resources.limits.memory"), "1Gi");
	assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(c,
		"resources"), "limits"), "google.com/tpu")), "4");
	assert_true(json_is_false(json_object_get(json_object_get(c, "securityContext"),
						  "readOnlyRootFilesystem")));
	assert_true(json_is_false(json_object_get(json_object_get(c, "securityContext"),
						  "allowPrivilegeEscalation")));
	assert_non_null(json_object_get(c, "livenessProbe"));
	json_decref(t);
	json_decref(spec);
	json_decref(meta);
}

/* No template, an empty one, or one of the wrong shape: the pod as built. */
static void test_no_template_changes_nothing(void **state)
{
	const char *bad[] = {
		"null", "{}", "{\"spec\":{}}", "{\"metadata\":{}}", "[1]",
		"{\"spec\":[]}", "{\"spec\":{\"volumes\":{},\"tolerations\":\"x\","
		"\"containers\":7,\"nodeSelector\":[]}}",
		"{\"metadata\":{\"labels\":[]},\"spec\":{\"containers\":[{\"name\":\"learner\","
		"\"env\":\"x\",\"resources\":[]}]}}",
	};

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		json_t *meta = load(POD_META), *spec = load(POD_SPEC);
		json_t *m0 = json_deep_copy(meta), *s0 = json_deep_copy(spec);
		json_t *t = load(bad[i]);

		pod_template_apply(meta, spec, json_is_null(t) ? NULL : t, "learner");
		if (!json_equal(meta, m0) || !json_equal(spec, s0))
			fail_msg("template %s changed the pod", bad[i]);
		json_decref(t);
		json_decref(m0);
		json_decref(s0);
		json_decref(meta);
		json_decref(spec);
	}
}

/* The syncer's template merges into the container named syncer only. */
static void test_main_container_by_name(void **state)
{
	json_t *meta = load("{\"name\":\"x\"}");
	json_t *spec = load("{\"containers\":[{\"name\":\"syncer\","
			    "\"readinessProbe\":{\"httpGet\":{\"path\":\"/readyz\"}}}]}");
	json_t *t = load("{\"spec\":{\"containers\":[{\"name\":\"learner\","
			 "\"env\":[{\"name\":\"A\",\"value\":\"1\"}]},"
			 "{\"name\":\"syncer\",\"env\":[{\"name\":\"B\",\"value\":\"2\"}],"
			 "\"readinessProbe\":{\"exec\":{}}}]}}");

	(void)state;
	pod_template_apply(meta, spec, t, "syncer");
	assert_string_equal(path_str(spec, "containers.0.env.0.name"), "B");
	assert_int_equal(size_at(json_array_get(json_object_get(spec, "containers"), 0),
				 "env"), 1);
	/* the pod's readiness probe stays */
	assert_string_equal(path_str(spec, "containers.0.readinessProbe.httpGet.path"),
			    "/readyz");
	/* labels made when the pod had none */
	json_decref(t);
	t = load("{\"metadata\":{\"labels\":{\"k\":\"v\"}}}");
	pod_template_apply(meta, spec, t, "syncer");
	assert_string_equal(path_str(meta, "labels.k"), "v");
	json_decref(t);
	json_decref(spec);
	json_decref(meta);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_template_adds_and_replaces),
		cmocka_unit_test(test_no_template_changes_nothing),
		cmocka_unit_test(test_main_container_by_name),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
