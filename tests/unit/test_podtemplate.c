/*
 * podtemplate: a template merged into a pod as operator/podtemplate.h's
 * table says, field by field: what it adds, what it replaces, and where
 * the operator's own fields win (labels, volume names, mount paths, env
 * names, the container's name, image and command, other containers);
 * and the pod policy: each field it refuses, by default and with the
 * operator's flags.
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

/* The policy's answer on the template text t: its reason, or "" when
 * allowed; the message into msg. */
static const char *check(const struct pod_policy *p, const char *t,
			 char *msg, size_t nmsg)
{
	static char reason[64];
	json_t *tmpl = load(t);
	int r;

	msg[0] = '\0';
	reason[0] = '\0';
	r = pod_template_check(p, tmpl, "spec.learners.template", reason,
			       sizeof(reason), msg, nmsg);
	json_decref(tmpl);
	assert_int_equal(r, reason[0] != '\0');
	return reason;
}

/* Each thing a template may not ask for by default: the reason, and the
 * message naming the field's path as the user wrote it. */
static void test_policy_refuses_by_default(void **state)
{
	static const struct {
		const char *tmpl, *reason, *path;
	} cases[] = {
		{ "{\"spec\":{\"containers\":[{\"name\":\"learner\",\"securityContext\":"
		  "{\"privileged\":true}}]}}", "PrivilegedContainer",
		  "spec.learners.template.spec.containers[0].securityContext.privileged is true" },
		{ "{\"spec\":{\"initContainers\":[{\"name\":\"a\"},{\"name\":\"b\","
		  "\"securityContext\":{\"privileged\":true}}]}}", "PrivilegedContainer",
		  "spec.learners.template.spec.initContainers[1].securityContext.privileged is true" },
		{ "{\"spec\":{\"containers\":[{\"name\":\"learner\",\"securityContext\":"
		  "{\"allowPrivilegeEscalation\":true}}]}}", "PrivilegeEscalation",
		  "spec.learners.template.spec.containers[0].securityContext."
		  "allowPrivilegeEscalation is true" },
		{ "{\"spec\":{\"containers\":[{\"name\":\"learner\",\"securityContext\":"
		  "{\"capabilities\":{\"add\":[\"NET_ADMIN\"]}}}]}}", "AddedCapabilities",
		  "spec.learners.template.spec.containers[0].securityContext."
		  "capabilities.add is not empty" },
		{ "{\"spec\":{\"volumes\":[{\"name\":\"ok\",\"emptyDir\":{}},"
		  "{\"name\":\"h\",\"hostPath\":{\"path\":\"/\"}}]}}", "HostPathVolume",
		  "spec.learners.template.spec.volumes[1].hostPath is set" },
		{ "{\"spec\":{\"hostNetwork\":true}}", "HostNamespace",
		  "spec.learners.template.spec.hostNetwork is true" },
		{ "{\"spec\":{\"hostPID\":true}}", "HostNamespace",
		  "spec.learners.template.spec.hostPID is true" },
		{ "{\"spec\":{\"hostIPC\":true}}", "HostNamespace",
		  "spec.learners.template.spec.hostIPC is true" },
		{ "{\"spec\":{\"serviceAccountName\":\"builder\"}}",
		  "ServiceAccountNotAllowed",
		  "spec.learners.template.spec.serviceAccountName is 'builder'" },
	};
	struct pod_policy p;
	char msg[256];

	(void)state;
	memset(&p, 0, sizeof(p));
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_string_equal(check(&p, cases[i].tmpl, msg, sizeof(msg)),
				    cases[i].reason);
		if (strncmp(msg, cases[i].path, strlen(cases[i].path)))
			fail_msg("case %zu: message '%s' does not start with '%s'", i,
				 msg, cases[i].path);
	}
	/* the messages say how to allow it */
	check(&p, cases[0].tmpl, msg, sizeof(msg));
	assert_non_null(strstr(msg, "--allow-privileged-templates"));
	check(&p, cases[8].tmpl, msg, sizeof(msg));
	assert_non_null(strstr(msg, "--template-service-accounts"));
	/* a cut message is still the field's path first */
	check(&p, cases[0].tmpl, msg, 20);
	assert_string_equal(msg, "spec.learners.templ");
}

/* What the policy lets through: the restricted pod's own fields, false
 * values, dropped capabilities, "default" and no template at all. */
static void test_policy_allows_the_harmless(void **state)
{
	struct pod_policy p;
	char msg[256];

	(void)state;
	memset(&p, 0, sizeof(p));
	assert_string_equal(check(&p, "{\"spec\":{\"hostNetwork\":false,"
				  "\"serviceAccountName\":\"default\","
				  "\"volumes\":[{\"name\":\"v\",\"emptyDir\":{}}],"
				  "\"containers\":[{\"name\":\"learner\",\"securityContext\":"
				  "{\"privileged\":false,\"allowPrivilegeEscalation\":false,"
				  "\"capabilities\":{\"drop\":[\"ALL\"],\"add\":[]}}}]}}",
				  msg, sizeof(msg)), "");
	assert_string_equal(msg, "");
	assert_string_equal(check(&p, "{\"spec\":{\"serviceAccountName\":\"\"}}",
				  msg, sizeof(msg)), "");
	assert_string_equal(check(&p, "{\"metadata\":{\"labels\":{\"a\":\"b\"}}}",
				  msg, sizeof(msg)), "");
	assert_int_equal(pod_template_check(&p, NULL, "x", msg, 4, msg, 4), 0);
}

/* --allow-privileged-templates lets all of it through but the service
 * account; --template-service-accounts names the accounts allowed. */
static void test_policy_flags(void **state)
{
	const char *priv = "{\"spec\":{\"hostPID\":true,\"volumes\":[{\"name\":\"h\","
			   "\"hostPath\":{\"path\":\"/dev\"}}],\"initContainers\":[{\"name\":"
			   "\"i\",\"securityContext\":{\"privileged\":true,\"capabilities\":"
			   "{\"add\":[\"SYS_ADMIN\"]}}}]}}";
	struct pod_policy p;
	struct err e;
	char msg[256];

	(void)state;
	memset(&p, 0, sizeof(p));
	assert_string_equal(check(&p, priv, msg, sizeof(msg)), "HostNamespace");
	p.allow_privileged = 1;
	assert_string_equal(check(&p, priv, msg, sizeof(msg)), "");
	assert_string_equal(check(&p, "{\"spec\":{\"serviceAccountName\":\"gcs-reader\"}}",
				  msg, sizeof(msg)), "ServiceAccountNotAllowed");
	assert_int_equal(pod_policy_add_accounts(&p, "gcs-reader,team.a", &e), 0);
	assert_int_equal(p.naccounts, 2);
	assert_string_equal(p.accounts[1], "team.a");
	assert_string_equal(check(&p, "{\"spec\":{\"serviceAccountName\":\"gcs-reader\"}}",
				  msg, sizeof(msg)), "");
	assert_string_equal(check(&p, "{\"spec\":{\"serviceAccountName\":\"team.a\"}}",
				  msg, sizeof(msg)), "");
	assert_string_equal(check(&p, "{\"spec\":{\"serviceAccountName\":\"team\"}}",
				  msg, sizeof(msg)), "ServiceAccountNotAllowed");
	/* the accounts do not allow privileges */
	p.allow_privileged = 0;
	assert_string_equal(check(&p, priv, msg, sizeof(msg)), "HostNamespace");
}

/* Bad account lists are refused with the name that is wrong. */
static void test_policy_bad_accounts(void **state)
{
	static const char *const bad[] = { "", "a,,b", "a,", "Upper", "-a", "a-",
					   "a b", "a_b" };
	char many[POD_POLICY_MAX_ACCOUNTS * 4 + 8] = "";
	struct pod_policy p;
	struct err e;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memset(&p, 0, sizeof(p));
		if (!pod_policy_add_accounts(&p, bad[i], &e))
			fail_msg("'%s' was taken", bad[i]);
		assert_non_null(strstr(e.msg, "is not a DNS-1123 subdomain"));
	}
	memset(&p, 0, sizeof(p));
	assert_int_equal(pod_policy_add_accounts(&p, "ok,Bad", &e), -1);
	assert_string_equal(e.msg, "service account 'Bad' of 'ok,Bad' is not a DNS-1123 "
			    "subdomain (lower-case letters, digits, '-' and '.', at "
			    "most 253)");
	memset(&p, 0, sizeof(p));
	for (int i = 0; i <= POD_POLICY_MAX_ACCOUNTS; i++)
		snprintf(many + strlen(many), sizeof(many) - strlen(many), "%sa%d",
			 i ? "," : "", i);
	assert_int_equal(pod_policy_add_accounts(&p, many, &e), -1);
	assert_non_null(strstr(e.msg, "more than 32 service accounts"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_template_adds_and_replaces),
		cmocka_unit_test(test_no_template_changes_nothing),
		cmocka_unit_test(test_main_container_by_name),
		cmocka_unit_test(test_policy_refuses_by_default),
		cmocka_unit_test(test_policy_allows_the_harmless),
		cmocka_unit_test(test_policy_flags),
		cmocka_unit_test(test_policy_bad_accounts),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
