/*
 * kube: the client pieces that need no server: Status decoding, watch
 * line parsing (410 in-stream ERROR included), kubeconfig reading,
 * YAML to JSON, query escaping, RFC 3339 times. Against a fake API
 * server (fakeapi.h): requests that answer JSON, 409 and 500, and the
 * Event kube_post_event sends.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/util.h"
#include "fakeapi.h"
#include "operator/kube.h"
#include "operator/yamljson.h"

static void test_status_decode(void **state)
{
	struct kube_status st;
	const char *conflict =
		"{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\","
		"\"message\":\"Operation cannot be fulfilled on pods \\\"a\\\": the object has been modified\","
		"\"reason\":\"Conflict\",\"code\":409}";
	const char *invalid =
		"{\"kind\":\"Status\",\"status\":\"Failure\",\"reason\":\"Invalid\",\"code\":422,"
		"\"message\":\"DecoupledTrainingJob.ddiloco.io \\\"bad\\\" is invalid: spec: Invalid value: "
		"\\\"object\\\": spec.syncer.minQuorum is more than spec.learners.replicas\"}";

	(void)state;
	kube_status_decode(conflict, strlen(conflict), 409, &st);
	assert_int_equal(st.code, 409);
	assert_string_equal(st.reason, "Conflict");
	assert_non_null(strstr(st.message, "the object has been modified"));

	kube_status_decode(invalid, strlen(invalid), 422, &st);
	assert_int_equal(st.code, 422);
	assert_string_equal(st.reason, "Invalid");
	assert_non_null(strstr(st.message, "minQuorum is more than"));

	/* not a Status: the body's first line is the message */
	kube_status_decode("upstream connect error\nmore", 27, 502, &st);
	assert_int_equal(st.code, 502);
	assert_string_equal(st.reason, "");
	assert_string_equal(st.message, "upstream connect error");

	/* truncated JSON is not a Status either */
	kube_status_decode("{\"kind\":\"Status\",\"co", 20, 500, &st);
	assert_int_equal(st.code, 500);
	assert_string_equal(st.message, "{\"kind\":\"Status\",\"co");

	kube_status_decode(NULL, 0, 503, &st);
	assert_int_equal(st.code, 503);
	assert_string_equal(st.message, "");
}

static void test_watch_parse(void **state)
{
	enum kube_event t;
	json_t *o;
	struct kube_status st;
	struct err e;
	const char *added = "{\"type\":\"ADDED\",\"object\":{\"kind\":\"Pod\","
			    "\"metadata\":{\"name\":\"p\",\"resourceVersion\":\"17\"}}}";
	const char *bookmark = "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Pod\","
			       "\"metadata\":{\"resourceVersion\":\"99\"}}}";
	const char *gone = "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\","
			   "\"apiVersion\":\"v1\",\"status\":\"Failure\","
			   "\"message\":\"too old resource version: 5 (120)\","
			   "\"reason\":\"Expired\",\"code\":410}}";

	(void)state;
	assert_int_equal(kube_watch_parse(added, strlen(added), &t, &o, &st, &e), 0);
	assert_int_equal(t, KUBE_ADDED);
	assert_string_equal(json_string_value(json_object_get(json_object_get(o, "metadata"),
							      "resourceVersion")), "17");
	json_decref(o);

	assert_int_equal(kube_watch_parse(bookmark, strlen(bookmark), &t, &o, &st, &e), 0);
	assert_int_equal(t, KUBE_BOOKMARK);
	json_decref(o);

	assert_int_equal(kube_watch_parse(gone, strlen(gone), &t, &o, &st, &e), 0);
	assert_int_equal(t, KUBE_ERROR);
	assert_int_equal(st.code, 410);
	assert_string_equal(st.reason, "Expired");
	assert_string_equal(st.message, "too old resource version: 5 (120)");
	json_decref(o);

	/* cut mid-line, unknown type, no object */
	assert_int_equal(kube_watch_parse(added, 30, &t, &o, &st, &e), -1);
	assert_non_null(strstr(e.msg, "not JSON"));
	assert_int_equal(kube_watch_parse("{\"type\":\"RENAMED\",\"object\":{}}", 30,
					  &t, &o, &st, &e), -1);
	assert_non_null(strstr(e.msg, "RENAMED"));
	assert_int_equal(kube_watch_parse("{\"type\":\"ADDED\"}", 16, &t, &o, &st, &e), -1);
}

static void test_escape_and_time(void **state)
{
	char out[64], small[6], now[48];
	double t;

	(void)state;
	assert_int_equal(kube_escape("app.kubernetes.io/managed-by=x", out, sizeof(out)), 0);
	assert_string_equal(out, "app.kubernetes.io%2Fmanaged-by%3Dx");
	assert_int_equal(kube_escape("a b&c", out, sizeof(out)), 0);
	assert_string_equal(out, "a%20b%26c");
	assert_int_equal(kube_escape("abc/def", small, sizeof(small)), -1);

	t = kube_time_parse("2026-11-29T09:15:24Z");
	assert_true(t == 1795943724.0);
	t = kube_time_parse("2026-11-29T09:15:24.250000Z");
	assert_true(fabs(t - 1795943724.25) < 1e-6);
	assert_true(kube_time_parse("2026-11-29T09:15:24+01:00") < 0);
	assert_true(kube_time_parse("yesterday") < 0);
	assert_true(kube_time_parse(NULL) < 0);
	kube_time_now(now, sizeof(now), 1);
	assert_int_equal(strlen(now), 27);
	assert_true(fabs(kube_time_parse(now) - clock_wall()) < 5);
}

static void test_yaml_to_json(void **state)
{
	struct err e;
	const char *y = "a: 1\nb: [x, 'y', true, null, 2.5]\nc: {d: \"7\"}\n";
	json_t *j = yaml_to_json(y, strlen(y), &e);

	(void)state;
	assert_non_null(j);
	assert_int_equal(json_integer_value(json_object_get(j, "a")), 1);
	assert_string_equal(json_string_value(json_array_get(json_object_get(j, "b"), 1)), "y");
	assert_true(json_is_true(json_array_get(json_object_get(j, "b"), 2)));
	assert_true(json_is_null(json_array_get(json_object_get(j, "b"), 3)));
	assert_true(json_real_value(json_array_get(json_object_get(j, "b"), 4)) == 2.5);
	assert_string_equal(json_string_value(json_object_get(json_object_get(j, "c"), "d")), "7");
	json_decref(j);
	assert_null(yaml_to_json("a: [1, 2\n", 9, &e));
	assert_non_null(strstr(e.msg, "yaml: line"));
	/* aliases expanded into a huge tree are refused */
	{
		const char *bomb =
			"a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
			"c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
			"e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n";
		assert_null(yaml_to_json(bomb, strlen(bomb), &e));
		assert_non_null(strstr(e.msg, "more than"));
	}
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void test_kubeconfig(void **state)
{
	char dir[] = "/tmp/test_kube_XXXXXX", path[128];
	struct kube_config c;
	struct err e;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/config", dir);
	/* "LS0tLS1CRUdJTg==" is base64 of "-----BEGIN" */
	write_file(path,
		   "apiVersion: v1\nkind: Config\ncurrent-context: test\n"
		   "clusters:\n- name: other\n  cluster: {server: https://wrong:1}\n"
		   "- name: local\n  cluster:\n    server: https://127.0.0.1:6443/\n"
		   "    certificate-authority-data: LS0tLS1CRUdJTg==\n"
		   "users:\n- name: admin\n  user:\n    token: secret-token\n"
		   "contexts:\n- name: test\n  context: {cluster: local, user: admin, namespace: team}\n");
	assert_int_equal(kube_config_load(path, &c, &e), 0);
	assert_string_equal(c.server, "https://127.0.0.1:6443");
	assert_string_equal(c.token, "secret-token");
	assert_string_equal(c.namespace_, "team");
	assert_int_equal(c.ca_pem_len, 10);
	assert_memory_equal(c.ca_pem, "-----BEGIN", 10);
	kube_config_release(&c);

	write_file(path, "current-context: nope\ncontexts: []\n");
	assert_int_equal(kube_config_load(path, &c, &e), -1);
	assert_non_null(strstr(e.msg, "context 'nope' not found"));

	write_file(path,
		   "current-context: t\nclusters:\n- name: c\n  cluster: {server: https://x:1}\n"
		   "users:\n- name: u\n  user: {client-certificate: /x}\n"
		   "contexts:\n- name: t\n  context: {cluster: c, user: u}\n");
	assert_int_equal(kube_config_load(path, &c, &e), -1);
	assert_non_null(strstr(e.msg, "no token"));

	write_file(path,
		   "current-context: t\nclusters:\n- name: c\n  cluster: {server: https://x:1, "
		   "certificate-authority-data: \"@@@\"}\n"
		   "users:\n- name: u\n  user: {token: t}\n"
		   "contexts:\n- name: t\n  context: {cluster: c, user: u}\n");
	assert_int_equal(kube_config_load(path, &c, &e), -1);
	assert_non_null(strstr(e.msg, "not base64"));
	unlink(path);
	rmdir(dir);
}

/* A value longer than the config keeps is an error naming it, not a
 * value cut short; an empty server too (regress/kubeconfig/). */
static void kubeconfig_values_are_whole(void **state)
{
	char dir[] = "/tmp/test_kube_XXXXXX", path[128], text[8192];
	char long_token[5001], long_server[301];
	const char *fmt = "current-context: t\nclusters:\n- name: c\n  cluster: "
			  "{server: \"%s\"}\nusers:\n- name: u\n  user: {token: %s}\n"
			  "contexts:\n- name: t\n  context: {cluster: c, user: u%s}\n";
	struct kube_config c;
	struct err e;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/config", dir);
	memset(long_token, 't', 5000);
	long_token[5000] = '\0';
	memcpy(long_server, "https://", 8);
	memset(long_server + 8, 'a', 292);
	long_server[300] = '\0';

	snprintf(text, sizeof(text), fmt, "https://x:1", long_token, "");
	write_file(path, text);
	assert_int_equal(kube_config_load(path, &c, &e), -1);
	assert_non_null(strstr(e.msg, "token is 5000 bytes (at most 4095)"));

	snprintf(text, sizeof(text), fmt, long_server, "t", "");
	write_file(path, text);
	assert_int_equal(kube_config_load(path, &c, &e), -1);
	assert_non_null(strstr(e.msg, "cluster server is 300 bytes (at most 255)"));

	snprintf(text, sizeof(text), fmt, "https://x:1", "t",
		 ", namespace: nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn");
	write_file(path, text);
	assert_int_equal(kube_config_load(path, &c, &e), -1);
	assert_non_null(strstr(e.msg, "namespace is 64 bytes (at most 63)"));

	snprintf(text, sizeof(text), fmt, "//", "t", "");
	write_file(path, text);
	assert_int_equal(kube_config_load(path, &c, &e), -1);
	assert_non_null(strstr(e.msg, "empty cluster server"));

	/* at the limits, whole */
	long_server[255] = '\0';
	snprintf(text, sizeof(text), fmt, long_server, "t",
		 ", namespace: nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn");
	write_file(path, text);
	assert_int_equal(kube_config_load(path, &c, &e), 0);
	assert_string_equal(c.server, long_server);
	assert_int_equal(strlen(c.namespace_), 63);
	kube_config_release(&c);
	unlink(path);
	rmdir(dir);
}

static void serve(void *ctx, const struct fake_req *rq, struct fake_reply *rp)
{
	int *refuse = ctx;

	if (!strcmp(rq->method, "PUT"))
		fake_status(rp, 409, "Conflict", "the object has been modified");
	else if (!strcmp(rq->method, "POST") && *refuse)
		fake_status(rp, 500, "InternalError", "etcd is down");
	else if (!strcmp(rq->method, "POST"))
		fake_json(rp, 201, json_pack("{s:s}", "kind", "Event"));
	else
		fake_json(rp, 200, json_pack("{s:s, s:{s:s}}", "kind", "Pod",
					     "metadata", "name", "p"));
}

static void test_requests_and_events(void **state)
{
	struct fakeapi f;
	struct kube *k;
	struct kube_status st;
	struct err e;
	json_t *out = NULL, *about = fake_obj("ns", "j1", "uid-1", "7"), *ev;
	struct kube_event_post post = { "tester", "ddiloco.io/v1alpha1",
					"DecoupledTrainingJob", about, 1, "Broken",
					"it broke" };
	int refuse = 0;

	(void)state;
	assert_int_equal(fakeapi_start(&f, serve, &refuse), 0);
	assert_non_null(k = kube_new(&f.cfg, &e));

	assert_int_equal(kube_request(k, "GET", "/api/v1/namespaces/ns/pods/p", NULL,
				      NULL, &out, &st, &e), 0);
	assert_string_equal(json_string_value(json_object_get(json_object_get(out, "metadata"),
							      "name")), "p");
	json_decref(out);
	assert_int_equal(kube_request(k, "PUT", "/api/v1/namespaces/ns/pods/p", NULL,
				      "{}", NULL, &st, &e), -1);
	assert_int_equal(st.code, 409);
	assert_string_equal(st.reason, "Conflict");
	assert_non_null(strstr(e.msg, "409 Conflict: the object has been modified"));

	assert_int_equal(kube_post_event(k, &post), 0);
	ev = fakeapi_body(&f, "POST", "/api/v1/namespaces/ns/events", 0);
	assert_non_null(ev);
	assert_string_equal(json_string_value(json_object_get(json_object_get(ev, "metadata"),
							      "generateName")), "j1.");
	assert_string_equal(json_string_value(json_object_get(json_object_get(ev, "involvedObject"),
							      "kind")), "DecoupledTrainingJob");
	assert_string_equal(json_string_value(json_object_get(json_object_get(ev, "involvedObject"),
							      "uid")), "uid-1");
	assert_string_equal(json_string_value(json_object_get(ev, "type")), "Warning");
	assert_string_equal(json_string_value(json_object_get(ev, "reason")), "Broken");
	assert_string_equal(json_string_value(json_object_get(ev, "message")), "it broke");
	assert_string_equal(json_string_value(json_object_get(ev, "reportingComponent")), "tester");
	assert_int_equal(json_integer_value(json_object_get(ev, "count")), 1);
	json_decref(ev);

	refuse = 1;
	post.warning = 0;
	assert_int_equal(kube_post_event(k, &post), -1);
	assert_int_equal(fakeapi_count(&f, "POST", "/events"), 2);
	ev = fakeapi_body(&f, "POST", "/events", 1);
	assert_string_equal(json_string_value(json_object_get(ev, "type")), "Normal");
	json_decref(ev);

	json_decref(about);
	kube_free(k);
	fakeapi_stop(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_status_decode),
		cmocka_unit_test(test_watch_parse),
		cmocka_unit_test(test_escape_and_time),
		cmocka_unit_test(test_yaml_to_json),
		cmocka_unit_test(test_kubeconfig),
		cmocka_unit_test(kubeconfig_values_are_whole),
		cmocka_unit_test(test_requests_and_events),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
