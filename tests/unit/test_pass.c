/*
 * pass, reconcile and apply together (operator.c's sync_job, one pass)
 * against tests/unit/fakeapi.h: the caches are informers filled by hand,
 * the job's Secret and every write go through the real client to the fake
 * server. What <job>-tls is decides what the pass writes:
 *   - another job's, or no one's: the condition SecretNotOwned and its
 *     Event, and no child at all;
 *   - created between the read and the create (409): no pod that pass,
 *     and the next one reads whose it is;
 *   - deleted under a running job: made again with a new CA, then every
 *     learner pod (by uid) and the syncer's StatefulSet deleted;
 *   - and a template the pod policy refuses: TemplateRefused, no child.
 * The Secret is only ever read as metadata (the Accept header).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "operator/apply.h"
#include "operator/jobmem.h"
#include "operator/pass.h"
#include "tests/unit/fakeapi.h"

#define JOB_UID "job-uid-2"
#define SECRET "/api/v1/namespaces/ns/secrets/demo-tls"

/* The fake server's <job>-tls: missing, or owned by owner ("": none). */
struct server {
	int exists;
	char owner[64];
	int post_conflict;            /* the next POST answers 409 (and plants
				       * one of no owner) */
};

static void answer(void *ctx, const struct fake_req *rq, struct fake_reply *rp)
{
	struct server *s = ctx;

	if (!strcmp(rq->method, "GET") && !strcmp(rq->url, SECRET)) {
		json_t *meta;

		if (!s->exists) {
			fake_status(rp, 404, "NotFound", "secrets \"demo-tls\" not found");
			return;
		}
		meta = json_pack("{s:s, s:s, s:s, s:s, s:{s:s, s:s}}", "kind",
				 "PartialObjectMetadata", "apiVersion", "meta.k8s.io/v1",
				 "name", "demo-tls", "namespace", "ns", "metadata",
				 "name", "demo-tls", "uid", "secret-uid");
		if (s->owner[0])
			json_object_set_new(json_object_get(meta, "metadata"),
					    "ownerReferences", json_pack(
					    "[{s:s, s:s, s:s, s:b}]", "kind",
					    "DecoupledTrainingJob", "name", "demo", "uid",
					    s->owner, "controller", 1));
		fake_json(rp, 200, meta);
		return;
	}
	if (!strcmp(rq->method, "POST") && strstr(rq->url, "/secrets")) {
		if (s->post_conflict) {
			s->post_conflict = 0;
			s->exists = 1;
			s->owner[0] = '\0';
			fake_status(rp, 409, "AlreadyExists", "secrets \"demo-tls\" already exists");
			return;
		}
		s->exists = 1;
		snprintf(s->owner, sizeof(s->owner), JOB_UID);
		fake_text(rp, 201, "{}");
		return;
	}
	if (!strcmp(rq->method, "PATCH")) {   /* an apply: the object back */
		fake_json(rp, 200, json_pack("{s:{s:s}}", "metadata", "uid", "new-uid"));
		return;
	}
	fake_text(rp, !strcmp(rq->method, "POST") ? 201 : 200, "{}");
}

static void ignore(void *ctx, enum kube_event type, json_t *obj)
{
	(void)ctx, (void)type, (void)obj;
}

/* What a pass runs on: the fake server, hand-filled caches, the memory. */
struct rig {
	struct server srv;
	struct fakeapi f;
	struct caches c;
	struct jobmem_table mems;
	struct op_metrics metrics;
	struct pod_policy policy;
	struct pass_env env;
};

static void add(struct informer *inf, json_t *obj)
{
	informer_event(inf, KUBE_ADDED, obj);
	json_decref(obj);
}

/* Job demo (uid JOB_UID, two learners, checkpoints in an emptyDir), with
 * the learners' template given (NULL: none). */
static void rig_start(struct rig *r, const char *learner_template)
{
	struct informer **all[] = { &r->c.jobs, &r->c.pods, &r->c.sts, &r->c.svcs,
				    &r->c.cms, &r->c.pvcs, &r->c.netpols };
	json_t *job;
	struct err e;

	memset(r, 0, sizeof(*r));
	assert_int_equal(fakeapi_start(&r->f, answer, &r->srv), 0);
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		assert_non_null(*all[i] = informer_new(&r->f.cfg, "test", "/x", NULL,
						       ignore, NULL));
	jobmem_table_init(&r->mems);
	assert_int_equal(op_metrics_init(&r->metrics), 0);
	r->env = (struct pass_env){ &r->c, &r->mems, &r->metrics,
		"http://127.0.0.1:9/{job}", "ddiloco-system", &r->policy, NULL,
		NULL, NULL, NULL, NULL };
	assert_non_null(r->env.k = kube_new(&r->f.cfg, &e));
	job = json_pack("{s:s, s:s, s:{s:s, s:s, s:s, s:s, s:i}, s:{s:{s:i}, "
			"s:{s:s}, s:{s:s}}}", "apiVersion", "ddiloco.io/v1alpha1",
			"kind", "DecoupledTrainingJob", "metadata", "name", "demo",
			"namespace", "ns", "uid", JOB_UID, "resourceVersion", "5",
			"generation", 1, "spec", "learners", "replicas", 2, "data",
			"path", "/data/x", "syncer", "storage", "");
	if (learner_template)
		json_object_set_new(json_object_get(json_object_get(job, "spec"),
						    "learners"), "template",
				    json_loads(learner_template, 0, NULL));
	add(r->c.jobs, job);
}

static void rig_stop(struct rig *r)
{
	struct informer *all[CACHES_N];

	caches_list(&r->c, all);
	for (int i = 0; i < CACHES_N; i++)
		informer_free(all[i]);
	kube_free(r->env.k);
	jobmem_table_release(&r->mems);
	op_metrics_release(&r->metrics);
	fakeapi_stop(&r->f);
}

/* One pass, as sync_job runs it: what apply_actions returned. The status
 * written comes back into the job's cache, as its watch would bring it. */
static int one_pass(struct rig *r)
{
	int n = fakeapi_count(&r->f, "PUT", "/status");
	json_t *job, *put;
	struct pass p;
	int rc;

	assert_int_equal(pass_observe(&r->env, "ns/demo", &p), 0);
	assert_int_equal(reconcile(&p.in, p.m->learners, &p.out), 0);
	rc = apply_actions(&r->env, &p);
	apply_status(&r->env, &p);
	pass_release(&p);
	if (fakeapi_count(&r->f, "PUT", "/status") > n &&
	    (put = fakeapi_body(&r->f, "PUT", "/status", n))) {
		job = informer_get(r->c.jobs, "ns", "demo");
		json_object_set(job, "status", json_object_get(put, "status"));
		add(r->c.jobs, job);
		json_decref(put);
	}
	return rc;
}

/* The condition `type` of the last status PUT, or NULL (new). */
static json_t *last_condition(struct rig *r, const char *type)
{
	int n = fakeapi_count(&r->f, "PUT", "/status");
	json_t *st, *c, *out = NULL;
	size_t i;

	if (!n || !(st = fakeapi_body(&r->f, "PUT", "/status", n - 1)))
		return NULL;
	json_array_foreach(json_object_get(json_object_get(st, "status"), "conditions"), i, c)
		if (!strcmp(json_string_value(json_object_get(c, "type")), type))
			out = json_incref(c);
	json_decref(st);
	return out;
}

/* The reason of the i-th Event posted. */
static const char *event_reason(struct rig *r, int i, char *out, size_t n)
{
	json_t *ev = fakeapi_body(&r->f, "POST", "/events", i);

	snprintf(out, n, "%s", ev ? json_string_value(json_object_get(ev, "reason")) : "");
	json_decref(ev);
	return out;
}

/* Every GET of the Secret asked for its metadata only. */
static void assert_metadata_only(struct rig *r)
{
	int n = 0;

	pthread_mutex_lock(&r->f.mu);
	for (int i = 0; i < r->f.nlog; i++)
		if (strstr(r->f.log[i].url, "/secrets/")) {
			assert_string_equal(r->f.log[i].method, "GET");
			assert_string_equal(r->f.log[i].accept, KUBE_ACCEPT_METADATA);
			n++;
		}
	pthread_mutex_unlock(&r->f.mu);
	assert_true(n > 0);
}

/* A Secret planted, or a deleted job's of the name: refused, nothing made. */
static void test_planted_secret_refused(void **state)
{
	struct rig r;
	json_t *c;
	char why[64];

	(void)state;
	rig_start(&r, NULL);
	r.srv.exists = 1;
	snprintf(r.srv.owner, sizeof(r.srv.owner), "job-uid-1");
	assert_int_equal(one_pass(&r), 0);
	assert_int_equal(fakeapi_count(&r.f, "PATCH", ""), 0);
	assert_int_equal(fakeapi_count(&r.f, "POST", "/secrets"), 0);
	assert_int_equal(fakeapi_count(&r.f, "DELETE", ""), 0);
	assert_non_null(c = last_condition(&r, "SecretNotOwned"));
	assert_string_equal(json_string_value(json_object_get(c, "status")), "True");
	assert_string_equal(json_string_value(json_object_get(c, "reason")), "OwnedByAnother");
	assert_string_equal(json_string_value(json_object_get(c, "message")),
			    "Secret 'demo-tls' is not this job's: it belongs to "
			    "DecoupledTrainingJob 'demo' uid job-uid-1, not uid "
			    "job-uid-2; no pod is made with it (delete it: the "
			    "operator makes a new one)");
	json_decref(c);
	assert_int_equal(fakeapi_count(&r.f, "POST", "/events"), 1);
	assert_string_equal(event_reason(&r, 0, why, sizeof(why)), "SecretNotOwned");
	assert_metadata_only(&r);

	/* no owner at all: refused as well, read again at every pass */
	r.srv.owner[0] = '\0';
	assert_int_equal(one_pass(&r), 0);
	assert_int_equal(fakeapi_count(&r.f, "GET", SECRET), 2);
	assert_int_equal(fakeapi_count(&r.f, "PATCH", ""), 0);
	assert_non_null(c = last_condition(&r, "SecretNotOwned"));
	assert_string_equal(json_string_value(json_object_get(c, "reason")), "NoOwner");
	json_decref(c);

	/* gone (collected, or deleted by hand): made, and the job goes on */
	r.srv.exists = 0;
	assert_int_equal(one_pass(&r), 0);
	assert_int_equal(fakeapi_count(&r.f, "POST", "/secrets"), 1);
	assert_int_equal(fakeapi_count(&r.f, "PATCH", "/pods/demo-learner-"), 2);
	assert_int_equal(fakeapi_count(&r.f, "PATCH", "/statefulsets/demo-syncer"), 1);
	assert_non_null(c = last_condition(&r, "SecretNotOwned"));
	assert_string_equal(json_string_value(json_object_get(c, "status")), "False");
	json_decref(c);
	rig_stop(&r);
}

/* One created between the read and the create: no pod that pass. */
static void test_secret_appearing_before_create(void **state)
{
	struct rig r;
	json_t *c;

	(void)state;
	rig_start(&r, NULL);
	r.srv.post_conflict = 1;
	assert_int_equal(one_pass(&r), -1);   /* stopped: retried soon */
	assert_int_equal(fakeapi_count(&r.f, "POST", "/secrets"), 1);
	assert_int_equal(fakeapi_count(&r.f, "PATCH", "/pods"), 0);
	assert_int_equal(fakeapi_count(&r.f, "PATCH", "/statefulsets"), 0);
	/* not a failed create */
	assert_null(last_condition(&r, "SecretNotOwned"));
	assert_int_equal(one_pass(&r), 0);
	assert_int_equal(fakeapi_count(&r.f, "GET", SECRET), 2);
	assert_int_equal(fakeapi_count(&r.f, "PATCH", "/pods"), 0);
	assert_non_null(c = last_condition(&r, "SecretNotOwned"));
	assert_string_equal(json_string_value(json_object_get(c, "reason")), "NoOwner");
	json_decref(c);
	rig_stop(&r);
}

/* The POSTed Secret's CA certificate (i-th POST), as a new string. */
static char *posted_ca(struct rig *r, int i)
{
	json_t *s = fakeapi_body(&r->f, "POST", "/secrets", i);
	const char *ca = json_string_value(json_object_get(json_object_get(s,
						"stringData"), "ca.crt"));
	char *out = ca ? strdup(ca) : NULL;

	json_decref(s);
	assert_non_null(out);
	return out;
}

/* A pod of the job in the cache: learner i, Running and ready. */
static json_t *learner_pod(int i)
{
	char name[32], uid[32];

	snprintf(name, sizeof(name), "demo-learner-%d", i);
	snprintf(uid, sizeof(uid), "pod-uid-%d", i);
	return json_pack("{s:{s:s, s:s, s:s, s:{s:s, s:s}, s:[{s:s, s:b}]}, "
			 "s:{s:s, s:[{s:s, s:s}]}}", "metadata", "name", name,
			 "namespace", "ns", "uid", uid, "labels", "ddiloco.io/job",
			 "demo", "ddiloco.io/role", "learner", "ownerReferences",
			 "uid", JOB_UID, "controller", 1, "status", "phase", "Running",
			 "conditions", "type", "Ready", "status", "True");
}

/*
 * Deleted under a running job: made again with a new CA, before every
 * learner pod is deleted (with its uid) and the StatefulSet; the Event
 * SecretRecreated says so.
 */
static void test_deleted_secret_made_again_pods_rolled(void **state)
{
	struct rig r;
	char *ca1, *ca2, why[64];
	int post = -1, first_delete = -1, nev;

	(void)state;
	rig_start(&r, NULL);
	assert_int_equal(one_pass(&r), 0);   /* a new job: Secret, pods */
	assert_int_equal(fakeapi_count(&r.f, "POST", "/secrets"), 1);
	ca1 = posted_ca(&r, 0);
	/* its children in the cache, as the informers would show them */
	add(r.c.pods, learner_pod(0));
	add(r.c.pods, learner_pod(1));
	add(r.c.sts, json_pack("{s:{s:s, s:s, s:s}}", "metadata", "name",
			       "demo-syncer", "namespace", "ns", "uid", "sts-uid"));
	/* while every pod is there, the owner is read at most every
	 * PASS_TLS_EVERY s */
	assert_int_equal(one_pass(&r), 0);
	assert_int_equal(fakeapi_count(&r.f, "GET", SECRET), 1);
	r.srv.exists = 0;   /* kubectl delete secret demo-tls */
	jobmem_get(&r.mems, "ns/demo", JOB_UID, 2)->tls_at -= PASS_TLS_EVERY;
	nev = fakeapi_count(&r.f, "POST", "/events");
	assert_int_equal(one_pass(&r), 0);
	assert_int_equal(fakeapi_count(&r.f, "GET", SECRET), 2);
	assert_int_equal(fakeapi_count(&r.f, "POST", "/secrets"), 2);
	ca2 = posted_ca(&r, 1);
	assert_string_not_equal(ca1, ca2);
	assert_int_equal(fakeapi_count(&r.f, "DELETE", "/pods/demo-learner-"), 2);
	assert_int_equal(fakeapi_count(&r.f, "DELETE", "/statefulsets/demo-syncer"), 1);
	pthread_mutex_lock(&r.f.mu);
	for (int i = 0; i < r.f.nlog; i++) {
		if (!strcmp(r.f.log[i].method, "POST") && strstr(r.f.log[i].url, "/secrets"))
			post = i;
		if (!strcmp(r.f.log[i].method, "DELETE") && first_delete < 0)
			first_delete = i;
		if (!strcmp(r.f.log[i].method, "DELETE") &&
		    strstr(r.f.log[i].url, "/pods/demo-learner-1"))
			assert_non_null(strstr(r.f.log[i].body,
					       "\"preconditions\":{\"uid\":\"pod-uid-1\"}"));
	}
	pthread_mutex_unlock(&r.f.mu);
	assert_true(post >= 0 && post < first_delete);
	assert_int_equal(fakeapi_count(&r.f, "POST", "/events"), nev + 1);
	assert_string_equal(event_reason(&r, nev, why, sizeof(why)), "SecretRecreated");
	assert_metadata_only(&r);
	free(ca1);
	free(ca2);
	rig_stop(&r);
}

/* A privileged template: TemplateRefused, and not one child, not even the
 * Secret; the operator's flag lets it through. */
static void test_template_refused_makes_nothing(void **state)
{
	const char *t = "{\"spec\":{\"containers\":[{\"name\":\"learner\","
			"\"securityContext\":{\"privileged\":true}}]}}";
	struct rig r;
	json_t *c;
	char why[64];

	(void)state;
	rig_start(&r, t);
	assert_int_equal(one_pass(&r), 0);
	assert_int_equal(fakeapi_count(&r.f, "PATCH", ""), 0);
	assert_int_equal(fakeapi_count(&r.f, "POST", "/secrets"), 0);
	/* a refused job makes no pod: its Secret is not even read */
	assert_int_equal(fakeapi_count(&r.f, "GET", SECRET), 0);
	assert_non_null(c = last_condition(&r, "TemplateRefused"));
	assert_string_equal(json_string_value(json_object_get(c, "status")), "True");
	assert_string_equal(json_string_value(json_object_get(c, "reason")),
			    "PrivilegedContainer");
	assert_non_null(strstr(json_string_value(json_object_get(c, "message")),
			       "spec.learners.template.spec.containers[0]."
			       "securityContext.privileged is true"));
	json_decref(c);
	assert_int_equal(fakeapi_count(&r.f, "POST", "/events"), 1);
	assert_string_equal(event_reason(&r, 0, why, sizeof(why)), "TemplateRefused");
	/* an operator started with --allow-privileged-templates */
	r.policy.allow_privileged = 1;
	assert_int_equal(one_pass(&r), 0);
	assert_int_equal(fakeapi_count(&r.f, "PATCH", "/pods/demo-learner-"), 2);
	assert_non_null(c = last_condition(&r, "TemplateRefused"));
	assert_string_equal(json_string_value(json_object_get(c, "status")), "False");
	json_decref(c);
	rig_stop(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_planted_secret_refused),
		cmocka_unit_test(test_secret_appearing_before_create),
		cmocka_unit_test(test_deleted_secret_made_again_pods_rolled),
		cmocka_unit_test(test_template_refused_makes_nothing),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
