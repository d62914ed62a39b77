/*
 * informer: list + watch against a fake API server (fakeapi.h) that
 * answers in pages, streams watch events, ends watches, and refuses with
 * 410 (as the watch's HTTP status and as an in-stream ERROR) and 500.
 * Checked: what the handler is told and in what order, the cache after
 * each relist, the resourceVersion each watch starts from, the counters.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fakeapi.h"
#include "operator/informer.h"

#define PODS "/api/v1/namespaces/ns/pods"

struct script {
	int lists, watches;           /* requests answered so far */
	int watch_500;                /* test_watch_500: first watch fails */
	pthread_mutex_t mu;           /* seen: written on the informer's thread */
	char seen[64][32];            /* "ADDED a", ... */
	int nseen;
};

static void on_event(void *ctx, enum kube_event type, json_t *obj)
{
	static const char *names[] = { "ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR" };
	struct script *s = ctx;
	const char *name = json_string_value(json_object_get(json_object_get(obj, "metadata"),
							     "name"));

	pthread_mutex_lock(&s->mu);
	if (s->nseen < 64)
		snprintf(s->seen[s->nseen++], sizeof(s->seen[0]), "%s %s", names[type],
			 name ? name : "?");
	pthread_mutex_unlock(&s->mu);
}

static json_t *pod(const char *name, const char *rv)
{
	json_t *o = fake_obj("ns", name, name, rv);

	/* dropped before caching: managedFields always, spec by the trim */
	json_object_set_new(json_object_get(o, "metadata"), "managedFields",
			    json_pack("[{s:s}]", "manager", "kubectl"));
	json_object_set_new(o, "spec", json_pack("{s:s}", "nodeName", "n1"));
	return o;
}

static char *lines(const char *a, const char *b, const char *c)
{
	static char out[4096];

	snprintf(out, sizeof(out), "%s\n%s%s%s%s", a, b ? b : "", b ? "\n" : "",
		 c ? c : "", c ? "\n" : "");
	return out;
}

/*
 *   list 1   two pages (continue=tok1): a, b at rv 10
 *   watch 1  rv=10: MODIFIED a, ADDED c, BOOKMARK 13, then the server ends it
 *   watch 2  rv=13: in-stream ERROR 410
 *   list 2   a, c at rv 20 (b vanished in the gap)
 *   watch 3  rv=20: HTTP 410
 *   list 3   500
 *   list 4   a, c, d at rv 30
 *   watch 4  rv=30: DELETED c, then held open
 */
static void serve_relists(void *ctx, const struct fake_req *rq, struct fake_reply *rp)
{
	struct script *s = ctx;

	if (strncmp(rq->url, PODS, strlen(PODS))) {
		fake_status(rp, 404, "NotFound", "not here");
		return;
	}
	if (!strstr(rq->url, "watch=1")) {
		if (strstr(rq->url, "continue=tok1")) {
			fake_list(rp, json_pack("[o]", pod("b", "6")), "10", NULL);
			return;
		}
		switch (++s->lists) {
		case 1:
			fake_list(rp, json_pack("[o]", pod("a", "5")), "9", "tok1");
			return;
		case 2:
			fake_list(rp, json_pack("[o, o]", pod("a", "11"), pod("c", "12")),
				  "20", NULL);
			return;
		case 3:
			fake_status(rp, 500, "InternalError", "etcd is down");
			return;
		default:
			fake_list(rp, json_pack("[o, o, o]", pod("a", "11"), pod("c", "12"),
						pod("d", "25")), "30", NULL);
			return;
		}
	}
	switch (++s->watches) {
	case 1: {
		char *m = fake_event("MODIFIED", pod("a", "11"));
		char *a = fake_event("ADDED", pod("c", "12"));
		char *b = fake_event("BOOKMARK", json_pack("{s:{s:s}}", "metadata",
							    "resourceVersion", "13"));

		fake_watch(rp, lines(m, a, b), 0.05);
		free(m), free(a), free(b);
		return;
	}
	case 2: {
		char *g = fake_event("ERROR", json_pack(
			"{s:s, s:s, s:s, s:s, s:i}", "kind", "Status",
			"status", "Failure", "reason", "Expired",
			"message", "too old resource version: 13 (19)", "code", 410));

		fake_watch(rp, lines(g, NULL, NULL), 5);
		free(g);
		return;
	}
	case 3:
		fake_status(rp, 410, "Expired", "too old resource version: 20 (29)");
		return;
	default: {
		char *d = fake_event("DELETED", pod("c", "31"));

		fake_watch(rp, lines(d, NULL, NULL), 30);
		free(d);
		return;
	}
	}
}

static void drop_spec(json_t *obj)
{
	json_object_del(obj, "spec");
}

static void test_relist_on_410_and_retry_on_500(void **state)
{
	static const char *want[] = {
		"ADDED a", "ADDED b",                          /* list 1 */
		"MODIFIED a", "ADDED c",                       /* watch 1 */
		"DELETED b", "MODIFIED a", "MODIFIED c",       /* list 2 */
		"MODIFIED a", "MODIFIED c", "ADDED d",         /* list 4 */
		"DELETED c",                                   /* watch 4 */
	};
	struct script s;
	struct fakeapi f;
	struct informer *inf;
	struct informer_stats st;
	struct err e;
	json_t *a;

	(void)state;
	memset(&s, 0, sizeof(s));
	pthread_mutex_init(&s.mu, NULL);
	assert_int_equal(fakeapi_start(&f, serve_relists, &s), 0);
	inf = informer_new(&f.cfg, "pods", PODS, "app=x", on_event, &s);
	assert_non_null(inf);
	informer_set_trim(inf, drop_spec);
	assert_int_equal(informer_start(inf, &e), 0);

	/* list 3's 500 costs one backoff of 1 s */
	assert_int_equal(fakeapi_wait(&f, "GET", "resourceVersion=30", 1, 10), 1);
	for (int i = 0; i < 200; i++) {
		pthread_mutex_lock(&s.mu);
		int n = s.nseen;
		pthread_mutex_unlock(&s.mu);
		if (n >= 11)
			break;
		sleep_seconds(0.01);
	}
	assert_int_equal(s.nseen, 11);
	for (int i = 0; i < 11; i++)
		assert_string_equal(s.seen[i], want[i]);

	/* paging, the selector, bookmarks asked for, each watch's start */
	assert_int_equal(fakeapi_count(&f, "GET", "limit=500&labelSelector=app=x&continue=tok1"), 1);
	assert_int_equal(fakeapi_count(&f, "GET", "allowWatchBookmarks=true"), 4);
	assert_int_equal(fakeapi_count(&f, "GET", "watch=1&allowWatchBookmarks=true&resourceVersion=10&"), 1);
	assert_int_equal(fakeapi_count(&f, "GET", "resourceVersion=13&"), 1);
	assert_int_equal(fakeapi_count(&f, "GET", "resourceVersion=20&"), 1);
	assert_int_equal(fakeapi_count(&f, "GET", "resourceVersion=30&"), 1);

	assert_int_equal(informer_synced(inf), 1);
	assert_int_equal(informer_size(inf), 2);
	assert_null(informer_get(inf, "ns", "b"));
	assert_null(informer_get(inf, "ns", "c"));
	a = informer_get(inf, "ns", "a");
	assert_non_null(a);
	assert_string_equal(json_string_value(json_object_get(json_object_get(a, "metadata"),
							      "resourceVersion")), "11");
	assert_null(json_object_get(json_object_get(a, "metadata"), "managedFields"));
	assert_null(json_object_get(a, "spec"));
	json_decref(a);

	informer_get_stats(inf, &st);
	assert_int_equal(st.lists, 3);        /* 1, 2 and 4; 3 failed */
	assert_int_equal(st.relists_410, 2);
	assert_int_equal(st.errors, 1);
	assert_int_equal(st.watches, 4);
	assert_int_equal(s.lists, 4);

	informer_free(inf);
	fakeapi_stop(&f);
	pthread_mutex_destroy(&s.mu);
}

/* A watch that fails with 500 is resumed from the same version: no relist. */
static void serve_watch_500(void *ctx, const struct fake_req *rq, struct fake_reply *rp)
{
	struct script *s = ctx;

	if (!strstr(rq->url, "watch=1")) {
		s->lists++;
		fake_list(rp, json_pack("[o]", pod("a", "5")), "10", NULL);
	} else if (++s->watches == 1) {
		fake_status(rp, 500, "InternalError", "try again");
	} else {
		fake_watch(rp, "", 30);
	}
}

static void test_watch_500_resumes_without_relist(void **state)
{
	struct script s;
	struct fakeapi f;
	struct informer *inf;
	struct informer_stats st;
	struct err e;

	(void)state;
	memset(&s, 0, sizeof(s));
	pthread_mutex_init(&s.mu, NULL);
	assert_int_equal(fakeapi_start(&f, serve_watch_500, &s), 0);
	inf = informer_new(&f.cfg, "pods", PODS, NULL, on_event, &s);
	assert_int_equal(informer_start(inf, &e), 0);
	assert_int_equal(fakeapi_wait(&f, "GET", "resourceVersion=10&", 2, 10), 2);
	informer_get_stats(inf, &st);
	assert_int_equal(st.lists, 1);
	assert_int_equal(st.errors, 1);
	assert_int_equal(st.relists_410, 0);
	assert_int_equal(s.lists, 1);
	assert_int_equal(s.nseen, 1);
	assert_string_equal(s.seen[0], "ADDED a");
	/* no selector: none asked for */
	assert_int_equal(fakeapi_count(&f, "GET", "labelSelector"), 0);
	informer_free(inf);
	fakeapi_stop(&f);
	pthread_mutex_destroy(&s.mu);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_relist_on_410_and_retry_on_500),
		cmocka_unit_test(test_watch_500_resumes_without_relist),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
