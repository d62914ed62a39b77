/*
 * chaos_ctl: the chaos controller against a fake API server (fakeapi.h).
 * A Running job with spec.chaos on an interval schedule and its pods in
 * the caches; the test ticks the controller and checks the DELETEs it
 * sends (grace period CHAOS_GRACE_SECONDS, the victim's uid as
 * precondition), the ChaosKill Events, status.chaos and the counters.
 * The server also refuses deletes with 409 and 500, and answers 404 for
 * a pod already gone.
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "fakeapi.h"
#include "operator/chaos_ctl.h"

#define JOBS "/apis/ddiloco.io/v1alpha1/namespaces/ns/decoupledtrainingjobs"
#define PODS "/api/v1/namespaces/ns/pods"
#define EVENTS "/api/v1/namespaces/ns/events"

struct server {
	int deletes;                  /* DELETEs answered */
	int delete_codes[4];          /* their codes, in order (0: 200) */
	int event_code;               /* POST events (0: 201) */
	int sharded;                  /* a job of 2 syncer shards, syncer
				       * kills only: of syncerShard when >= 0 */
	int syncer_shard;
};

struct touches {
	pthread_mutex_t mu;
	int n;
	char last[160];
};

static void on_touched(void *ctx, const char *key)
{
	struct touches *t = ctx;

	pthread_mutex_lock(&t->mu);
	t->n++;
	snprintf(t->last, sizeof(t->last), "%s", key);
	pthread_mutex_unlock(&t->mu);
}

static json_t *job(const struct server *s)
{
	char start[48];
	json_t *j;

	kube_time_format(clock_wall() - 100, start, sizeof(start));
	j = json_pack(
		"{s:s, s:s, s:{s:s, s:s, s:s, s:s, s:i},"
		" s:{s:{s:i}, s:{s:s}, s:{s:b, s:s, s:f, s:f, s:[s], s:i, s:i}},"
		" s:{s:s, s:s}}",
		"apiVersion", "ddiloco.io/v1alpha1", "kind", "DecoupledTrainingJob",
		"metadata", "namespace", "ns", "name", "j1", "uid", "job-uid",
		"resourceVersion", "3", "generation", 1,
		"spec", "learners", "replicas", 3, "data", "path", "/data/train.txt",
		"chaos", "enabled", 1, "schedule", "interval", "intervalSeconds", 0.4,
		"startAfterSeconds", 0.0, "targets", "learners", "maxDown", 2, "seed", 7,
		"status", "phase", "Running", "startTime", start);
	if (s->sharded) {
		json_t *spec = json_object_get(j, "spec");
		json_t *chaos = json_object_get(spec, "chaos");

		json_object_set_new(spec, "syncer", json_pack("{s:i, s:i}",
				    "shards", 2, "fragments", 2));
		json_object_set_new(chaos, "targets", json_pack("[s]", "syncer"));
		if (s->syncer_shard >= 0)
			json_object_set_new(chaos, "syncerShard",
					    json_integer(s->syncer_shard));
	}
	return j;
}

static json_t *pod(const char *name, const char *uid, const char *phase, int ready)
{
	return json_pack("{s:{s:s, s:s, s:s, s:s, s:{s:s}}, s:{s:s, s:[{s:s, s:s}]}}",
			 "metadata", "namespace", "ns", "name", name, "uid", uid,
			 "resourceVersion", "4", "labels", "ddiloco.io/job", "j1",
			 "status", "phase", phase, "conditions", "type", "Ready",
			 "status", ready ? "True" : "False");
}

static void serve(void *ctx, const struct fake_req *rq, struct fake_reply *rp)
{
	struct server *s = ctx;

	if (!strcmp(rq->method, "GET") && strstr(rq->url, "watch=1")) {
		fake_watch(rp, "", 30);   /* nothing changes */
	} else if (!strcmp(rq->method, "GET") && !strncmp(rq->url, JOBS, strlen(JOBS))) {
		fake_list(rp, json_pack("[o]", job(s)), "5", NULL);
	} else if (!strcmp(rq->method, "GET") && !strncmp(rq->url, PODS, strlen(PODS)) &&
		   !s->sharded) {
		/* learner-1 is not ready: down already, never a victim */
		fake_list(rp, json_pack("[o, o, o, o]",
					pod("j1-learner-0", "uid-l0", "Running", 1),
					pod("j1-learner-1", "uid-l1", "Running", 0),
					pod("j1-learner-2", "uid-l2", "Running", 1),
					pod("j1-syncer-0", "uid-s0", "Running", 1)), "5", NULL);
	} else if (!strcmp(rq->method, "GET") && !strncmp(rq->url, PODS, strlen(PODS)) &&
		   s->sharded) {
		fake_list(rp, json_pack("[o, o, o, o, o]",
					pod("j1-learner-0", "uid-l0", "Running", 1),
					pod("j1-learner-1", "uid-l1", "Running", 1),
					pod("j1-learner-2", "uid-l2", "Running", 1),
					pod("j1-syncer-0", "uid-s0", "Running", 1),
					pod("j1-syncer-1", "uid-s1", "Running", 1)), "5", NULL);
	} else if (!strcmp(rq->method, "DELETE")) {
		int code = s->deletes < 4 ? s->delete_codes[s->deletes] : 0;

		s->deletes++;
		if (code)
			fake_status(rp, code, code == 409 ? "Conflict" : code == 404 ?
				    "NotFound" : "InternalError", "refused");
		else
			fake_json(rp, 200, json_pack("{s:s}", "kind", "Pod"));
	} else if (!strcmp(rq->method, "POST") && !strcmp(rq->url, EVENTS)) {
		if (s->event_code)
			fake_status(rp, s->event_code, "InternalError", "no events today");
		else
			fake_json(rp, 201, json_pack("{s:s}", "kind", "Event"));
	} else {
		fake_status(rp, 404, "NotFound", rq->url);
	}
}

struct fixture {
	struct server srv;
	struct fakeapi f;
	struct informer *jobs, *pods;
	struct kube *k;
	struct touches t;
	struct chaos_ctl *c;
};

static void ignore(void *ctx, enum kube_event type, json_t *obj)
{
	(void)ctx, (void)type, (void)obj;
}

static void start(struct fixture *x)
{
	struct err e;

	assert_int_equal(fakeapi_start(&x->f, serve, &x->srv), 0);
	x->jobs = informer_new(&x->f.cfg, "jobs", JOBS, NULL, ignore, NULL);
	x->pods = informer_new(&x->f.cfg, "pods", PODS, NULL, ignore, NULL);
	assert_non_null(x->jobs);
	assert_non_null(x->pods);
	assert_int_equal(informer_start(x->jobs, &e), 0);
	assert_int_equal(informer_start(x->pods, &e), 0);
	for (int i = 0; i < 500 && !(informer_synced(x->jobs) && informer_synced(x->pods)); i++)
		sleep_seconds(0.01);
	assert_int_equal(informer_synced(x->jobs), 1);
	assert_int_equal(informer_synced(x->pods), 1);
	assert_non_null(x->k = kube_new(&x->f.cfg, &e));
	pthread_mutex_init(&x->t.mu, NULL);
	x->c = chaos_ctl_new(x->jobs, x->pods, on_touched, &x->t);
	assert_non_null(x->c);
}

static void stop(struct fixture *x)
{
	chaos_ctl_free(x->c);
	kube_free(x->k);
	informer_free(x->jobs);
	informer_free(x->pods);
	fakeapi_stop(&x->f);
	pthread_mutex_destroy(&x->t.mu);
}

/* Ticks every 20 ms for `seconds`, or until `deletes` DELETEs were sent. */
static void tick_for(struct fixture *x, double seconds, int deletes)
{
	double until = clock_mono() + seconds;

	while (clock_mono() < until &&
	       (deletes <= 0 || fakeapi_count(&x->f, "DELETE", PODS) < deletes)) {
		chaos_ctl_tick(x->c, x->k);
		sleep_seconds(0.02);
	}
}

static const char *str(json_t *o, const char *a, const char *b)
{
	json_t *v = json_object_get(o, a);

	return json_string_value(b ? json_object_get(v, b) : v);
}

static void test_kill_deletes_the_pod_and_posts_an_event(void **state)
{
	struct fixture x;
	json_t *del, *ev, *st;
	int victim;
	char pod[32], uid[16], msg[64];

	(void)state;
	memset(&x, 0, sizeof(x));
	start(&x);
	tick_for(&x, 5, 1);
	assert_int_equal(fakeapi_count(&x.f, "DELETE", PODS), 1);
	/* a learner that is up: 0 or 2 (learner-1 is not ready), by the seed */
	victim = fakeapi_count(&x.f, "DELETE", PODS "/j1-learner-0") ? 0 : 2;
	snprintf(pod, sizeof(pod), "j1-learner-%d", victim);
	snprintf(uid, sizeof(uid), "uid-l%d", victim);
	snprintf(msg, sizeof(msg), "chaos kill 1: pod %s deleted", pod);
	assert_int_equal(fakeapi_count(&x.f, "DELETE", pod), 1);
	assert_int_equal(fakeapi_count(&x.f, "DELETE", "j1-syncer-0"), 0);
	del = fakeapi_body(&x.f, "DELETE", PODS, 0);
	assert_non_null(del);
	assert_int_equal(json_integer_value(json_object_get(del, "gracePeriodSeconds")),
			 CHAOS_GRACE_SECONDS);
	assert_string_equal(str(del, "preconditions", "uid"), uid);
	json_decref(del);

	assert_int_equal(fakeapi_wait(&x.f, "POST", EVENTS, 1, 2), 1);
	ev = fakeapi_body(&x.f, "POST", EVENTS, 0);
	assert_non_null(ev);
	assert_string_equal(str(ev, "reason", NULL), "ChaosKill");
	assert_string_equal(str(ev, "type", NULL), "Warning");
	assert_string_equal(str(ev, "involvedObject", "kind"), "DecoupledTrainingJob");
	assert_string_equal(str(ev, "involvedObject", "apiVersion"), "ddiloco.io/v1alpha1");
	assert_string_equal(str(ev, "involvedObject", "name"), "j1");
	assert_string_equal(str(ev, "involvedObject", "uid"), "job-uid");
	assert_string_equal(str(ev, "source", "component"), "ddiloco-operator");
	assert_non_null(strstr(str(ev, "message", NULL), msg));
	json_decref(ev);

	assert_int_equal(chaos_ctl_kills(x.c), 1);
	st = chaos_ctl_status(x.c, "ns/j1", "job-uid");
	assert_non_null(st);
	assert_int_equal(json_integer_value(json_object_get(st, "kills")), 1);
	assert_true(json_is_true(json_object_get(st, "active")));
	assert_string_equal(str(st, "lastKillPod", NULL), pod);
	assert_true(kube_time_parse(str(st, "lastKill", NULL)) > 0);
	assert_true(kube_time_parse(str(st, "nextKill", NULL)) > 0);
	json_decref(st);
	/* another job under that name has no chaos status of ours */
	assert_null(chaos_ctl_status(x.c, "ns/j1", "other-uid"));
	assert_null(chaos_ctl_status(x.c, "ns/j2", "job-uid"));
	/* armed, then killed: the worker is told twice */
	assert_int_equal(x.t.n, 2);
	assert_string_equal(x.t.last, "ns/j1");

	/*
	 * The cache still shows the victim (no watch event came): it counts
	 * as down, and with learner-1 not ready maxDown 2 is reached, so the
	 * next planned kills are skipped.
	 */
	tick_for(&x, 1.0, 0);
	assert_int_equal(fakeapi_count(&x.f, "DELETE", PODS), 1);
	assert_int_equal(chaos_ctl_kills(x.c), 1);
	stop(&x);
}

/*
 * A job of 2 syncer shards (docs/operator.md, Chaos): a syncer kill
 * deletes one shard's pod, spec.chaos.syncerShard's when set, else the
 * shards in turn from shard 0; the victim's pod still in the cache
 * counts as down, so no second syncer kill overlaps it.
 */
static void test_kill_targets_one_shard(void **state)
{
	struct fixture x;
	json_t *del;

	(void)state;
	for (int want = 1; want >= -1; want -= 2) {
		memset(&x, 0, sizeof(x));
		x.srv.sharded = 1;
		x.srv.syncer_shard = want;
		start(&x);
		tick_for(&x, 5, 1);
		assert_int_equal(fakeapi_count(&x.f, "DELETE", PODS), 1);
		assert_int_equal(fakeapi_count(&x.f, "DELETE", "j1-learner"), 0);
		assert_int_equal(fakeapi_count(&x.f, "DELETE", want == 1 ? "j1-syncer-1" :
					       "j1-syncer-0"), 1);
		del = fakeapi_body(&x.f, "DELETE", PODS, 0);
		assert_string_equal(str(del, "preconditions", "uid"),
				    want == 1 ? "uid-s1" : "uid-s0");
		json_decref(del);
		tick_for(&x, 1.0, 0);
		assert_int_equal(fakeapi_count(&x.f, "DELETE", PODS), 1);
		stop(&x);
	}
}

static void test_refused_deletes_are_not_kills(void **state)
{
	struct fixture x;
	json_t *st;

	(void)state;
	memset(&x, 0, sizeof(x));
	/* a newer pod under that name (409), a server error (500), then the
	 * pod is already gone (404): that one counts, as a crash would */
	x.srv.delete_codes[0] = 409;
	x.srv.delete_codes[1] = 500;
	x.srv.delete_codes[2] = 404;
	x.srv.event_code = 500;   /* and the Event is refused too */
	start(&x);
	tick_for(&x, 2, 2);
	assert_int_equal(fakeapi_count(&x.f, "DELETE", PODS), 2);
	assert_int_equal(chaos_ctl_kills(x.c), 0);
	assert_int_equal(fakeapi_count(&x.f, "POST", EVENTS), 0);
	tick_for(&x, 2, 3);
	assert_int_equal(fakeapi_count(&x.f, "DELETE", PODS), 3);
	assert_int_equal(chaos_ctl_kills(x.c), 1);
	/* the Event was tried once; its failure does not undo the kill */
	assert_int_equal(fakeapi_wait(&x.f, "POST", EVENTS, 1, 2), 1);
	st = chaos_ctl_status(x.c, "ns/j1", "job-uid");
	assert_non_null(st);
	assert_int_equal(json_integer_value(json_object_get(st, "kills")), 1);
	json_decref(st);
	stop(&x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kill_deletes_the_pod_and_posts_an_event),
		cmocka_unit_test(test_kill_targets_one_shard),
		cmocka_unit_test(test_refused_deletes_are_not_kills),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
