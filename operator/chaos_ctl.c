/*
 * chaos_ctl: one `struct chaos` per job with chaos, kept in a list with
 * the job's uid and generation (the spec is parsed again only when the
 * generation moves). The tick runs on the operator's main thread; the
 * list is under a mutex because workers read status.chaos from it.
 */
#include "operator/chaos_ctl.h"

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/chaos.h"
#include "common/jobspec.h"
#include "common/log.h"
#include "common/util.h"
#include "operator/children.h"

struct cjob {
	char key[160], uid[64];
	long long generation;
	struct job_chaos cfg;
	int learners;
	int shards;                   /* spec.syncer.shards */
	long syncer_kills;            /* shards killed in turn: the next's */
	int parsed, active;
	double start;                 /* wall time of status.startTime */
	struct chaos sched;
	long kills;
	double last_kill;             /* wall */
	char last_pod[CHILD_NAME_MAX];
	char gone[8][64];             /* uids of recent victims: down until gone */
	int ngone;
	int seen;                     /* in this tick's job list */
	struct cjob *next;
};

struct chaos_ctl {
	struct informer *jobs, *pods;
	chaos_touched_fn touched;
	void *ctx;
	pthread_mutex_t mu;
	struct cjob *list;
	long kills;
};

struct chaos_ctl *chaos_ctl_new(struct informer *jobs, struct informer *pods,
				chaos_touched_fn touched, void *ctx)
{
	struct chaos_ctl *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->jobs = jobs;
	c->pods = pods;
	c->touched = touched;
	c->ctx = ctx;
	pthread_mutex_init(&c->mu, NULL);
	return c;
}

void chaos_ctl_free(struct chaos_ctl *c)
{
	if (!c)
		return;
	while (c->list) {
		struct cjob *n = c->list->next;
		free(c->list);
		c->list = n;
	}
	pthread_mutex_destroy(&c->mu);
	free(c);
}

static const char *jget(json_t *o, const char *a, const char *b)
{
	return json_string_value(json_object_get(json_object_get(o, a), b));
}

/* Under c->mu. */
static struct cjob *find(struct chaos_ctl *c, const char *key)
{
	for (struct cjob *j = c->list; j; j = j->next)
		if (!strcmp(j->key, key))
			return j;
	return NULL;
}

/* Parses the job's chaos settings; 0 when it has none enabled. */
static int parse(json_t *job, struct job_chaos *out, int *learners, int *shards)
{
	json_t *core = job_core(job);
	char *txt = json_dumps(core, JSON_COMPACT);
	struct job_spec js;
	struct err e;
	int rc = 0;

	if (txt && !job_managed_elsewhere(job) &&
	    !jobspec_parse(txt, strlen(txt), "chaos", &js, &e)) {
		*out = js.chaos;
		*learners = js.learners.replicas;
		*shards = js.syncer.shards > 1 ? js.syncer.shards : 1;
		rc = js.chaos.enabled;
	}
	free(txt);
	json_decref(core);
	return rc;
}

struct kill_ctx {
	struct chaos_ctl *c;
	struct kube *k;
	json_t *job;
	struct cjob *cj;
	char pod[CHILD_NAME_MAX];
	const char *uids;
	int shard;                    /* the syncer's pod a syncer kill hits */
};

static int kill_pod(void *arg, const struct chaos_kill *kill, struct err *e)
{
	struct kill_ctx *x = arg;
	const char *ns = jget(x->job, "metadata", "namespace");
	const char *name = jget(x->job, "metadata", "name");
	char path[512], body[256];
	struct kube_status st;
	const char *uid = x->uids + 64 * (kill->kind == CHAOS_SYNCER ?
					  x->cj->learners : kill->index);

	if (child_name(name, kill->kind == CHAOS_SYNCER ? CHILD_SYNCER_POD : CHILD_LEARNER,
		       kill->kind == CHAOS_SYNCER ? x->shard : kill->index,
		       x->pod, sizeof(x->pod)))
		return err_set(e, "pod name of job '%s' too long", name);
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, x->pod);
	/*
	 * Not a force delete (grace 0): that drops the object while its
	 * containers still run, so a replacement could run beside them.
	 * With a grace period the kubelet stops the containers and removes
	 * the object itself; the replacement comes after its DELETED event.
	 * (kwok deletes by name, at times twice, and can still hit the
	 * replacement: the operator sees that uid deleted and recreates.)
	 */
	snprintf(body, sizeof(body),
		 "{\"apiVersion\":\"v1\",\"kind\":\"DeleteOptions\",\"gracePeriodSeconds\":%d,"
		 "\"preconditions\":{\"uid\":\"%s\"}}", CHAOS_GRACE_SECONDS, uid);
	if (kube_request(x->k, "DELETE", path, NULL, body, NULL, &st, e) &&
	    st.code != 404)
		return -1;
	snprintf(x->cj->gone[x->cj->ngone++ % 8], 64, "%s", uid);
	if (kill->kind == CHAOS_SYNCER)
		x->cj->syncer_kills++;
	return 0;
}

/* The shard the next syncer kill hits (docs/operator.md, Chaos):
 * spec.chaos.syncerShard, else the shards in turn. */
static int victim_shard(const struct cjob *cj)
{
	if (cj->cfg.syncer_shard >= 0 && cj->cfg.syncer_shard < cj->shards)
		return cj->cfg.syncer_shard;
	return (int)(cj->syncer_kills % (cj->shards > 0 ? cj->shards : 1));
}

/* The view of what is down: learner slots and the syncer, from the cache. */
static int recently_killed(const struct cjob *cj, const char *uid)
{
	for (int i = 0; uid && i < 8; i++)
		if (!strcmp(cj->gone[i], uid))
			return 1;
	return 0;
}

/*
 * uids (learners + 1 entries of 64 bytes, the syncer last) receives the
 * uid of each pod that is up. A victim's pod counts as down while the
 * cache still shows it, so two kills never overlap because of a late
 * watch event. The syncer is shard's pod (the next syncer kill's), and
 * counts as down while any shard's pod is: one syncer kill at a time.
 */
static void view(struct chaos_ctl *c, const struct cjob *cj, json_t *job,
		 int learners, int shard, unsigned char *down, int *syncer_down,
		 char *uids)
{
	const char *ns = jget(job, "metadata", "namespace");
	const char *name = jget(job, "metadata", "name");
	const char *uid;
	json_t *pods = informer_select(c->pods, ns, LABEL_JOB, name), *p;
	char syncer[CHILD_NAME_MAX], other[CHILD_NAME_MAX];
	size_t i;
	int shards_up = 0;

	memset(down, 1, (size_t)learners);
	*syncer_down = 1;
	/* a name too long is "": no pod matches, the syncer counts as down */
	child_name(name, CHILD_SYNCER_POD, shard, syncer, sizeof(syncer));
	json_array_foreach(pods, i, p) {
		const char *pn = jget(p, "metadata", "name");
		const char *phase = jget(p, "status", "phase");
		json_t *conds = json_object_get(json_object_get(p, "status"), "conditions"), *cd;
		int ready = 0, idx;
		size_t k;

		if (json_object_get(json_object_get(p, "metadata"), "deletionTimestamp") ||
		    !phase || strcmp(phase, "Running"))
			continue;
		json_array_foreach(conds, k, cd)
			if (!strcmp(json_string_value(json_object_get(cd, "type")) ?: "", "Ready"))
				ready = !strcmp(json_string_value(json_object_get(cd, "status")) ?: "",
						"True");
		uid = jget(p, "metadata", "uid");
		if (!ready || !uid || recently_killed(cj, uid))
			continue;
		if (pn && !strcmp(pn, syncer)) {
			*syncer_down = 0;
			shards_up++;
			snprintf(uids + 64 * learners, 64, "%s", uid);
			continue;
		}
		for (int s = 0; s < cj->shards; s++)
			if (s != shard && pn &&
			    !child_name(name, CHILD_SYNCER_POD, s, other, sizeof(other)) &&
			    !strcmp(pn, other))
				shards_up++;
		idx = pn ? learner_index(name, pn) : -1;
		if (idx >= 0 && idx < learners) {
			down[idx] = 0;
			snprintf(uids + 64 * idx, 64, "%s", uid);
		}
	}
	json_decref(pods);
	if (shards_up < cj->shards)
		*syncer_down = 1;
}

/*
 * Under c->mu: the job's entry, made when new, cleared when the name now
 * belongs to another job, its settings parsed again when the generation
 * moved. *touched when a running schedule was disarmed by new settings.
 */
static struct cjob *entry(struct chaos_ctl *c, const char *key, json_t *job,
			  int *touched)
{
	const char *uid = jget(job, "metadata", "uid");
	long long gen = json_integer_value(json_object_get(json_object_get(job, "metadata"),
							   "generation"));
	struct cjob *cj = find(c, key);

	if (cj && strcmp(cj->uid, uid ? uid : "")) {
		/* another job under the same name */
		memset((char *)cj + offsetof(struct cjob, uid), 0,
		       offsetof(struct cjob, next) - offsetof(struct cjob, uid));
	}
	if (!cj) {
		if (!(cj = calloc(1, sizeof(*cj))))
			return NULL;
		snprintf(cj->key, sizeof(cj->key), "%s", key);
		cj->next = c->list;
		c->list = cj;
	}
	cj->seen = 1;
	if (!cj->uid[0]) {
		snprintf(cj->uid, sizeof(cj->uid), "%s", uid ? uid : "");
		cj->kills = (long)json_integer_value(json_object_get(
			json_object_get(json_object_get(job, "status"), "chaos"), "kills"));
	}
	if (!cj->parsed || cj->generation != gen) {
		struct job_chaos cfg;
		int learners = 0, shards = 1, on;

		memset(&cfg, 0, sizeof(cfg));
		on = parse(job, &cfg, &learners, &shards);
		if (!cj->parsed || memcmp(&cfg, &cj->cfg, sizeof(cfg)) ||
		    learners != cj->learners || shards != cj->shards) {
			cj->cfg = cfg;
			cj->learners = learners;
			cj->shards = shards;
			if (cj->active)
				*touched = 1;
			cj->active = 0;   /* re-armed with the new settings */
		}
		cj->cfg.enabled = on;
		cj->parsed = 1;
		cj->generation = gen;
	}
	return cj;
}

/* Chaos runs for an enabled job that has started and is not done,
 * suspended or being deleted. */
static int wanted(const struct cjob *cj, json_t *job)
{
	json_t *status = json_object_get(job, "status");
	const char *phase = json_string_value(json_object_get(status, "phase"));

	return cj->cfg.enabled && cj->learners > 0 && phase &&
	       (!strcmp(phase, "Running") || !strcmp(phase, "Restarting")) &&
	       !json_object_get(json_object_get(job, "metadata"), "deletionTimestamp") &&
	       !json_is_true(json_object_get(json_object_get(job, "spec"), "suspend")) &&
	       kube_time_parse(json_string_value(json_object_get(status, "startTime"))) > 0;
}

/* Starts the schedule on the clock of status.startTime; 0 when armed. */
static int arm(struct cjob *cj, json_t *job, const char *key)
{
	unsigned char *all = malloc((size_t)cj->learners);
	struct chaos_view v = { cj->learners, all, 1 };
	struct chaos_kill kk;
	double now;

	if (!all)
		return -1;
	memset(all, 1, (size_t)cj->learners);
	cj->start = kube_time_parse(json_string_value(json_object_get(
		json_object_get(job, "status"), "startTime")));
	chaos_init(&cj->sched, &cj->cfg, cj->learners);
	/* kills planned before now are skipped, not executed in a burst */
	now = clock_wall() - cj->start;
	while (chaos_due(&cj->sched, now, &v, &kk))
		;
	free(all);
	cj->active = 1;
	log_info("%s: chaos armed (%s, next kill in %.1fs)", key,
		 cj->cfg.schedule == CHAOS_INTERVAL ? "interval" : "poisson",
		 chaos_next_time(&cj->sched) - now);
	return 0;
}

/*
 * The kill that is due, if one is: the pods that are up from the cache,
 * then chaos_run_due. 1 with the Event's text in msg after a kill.
 */
static int kill_due(struct chaos_ctl *c, struct kube *k, struct cjob *cj,
		    json_t *job, const char *key, char *msg, size_t n)
{
	unsigned char *down = malloc((size_t)cj->learners);
	char *uids = calloc((size_t)cj->learners + 1, 64);
	struct chaos_view v = { cj->learners, down, 0 };
	struct kill_ctx x = { c, k, job, cj, "", uids, victim_shard(cj) };
	struct chaos_executor ex = { kill_pod, &x };
	double due = chaos_next_time(&cj->sched);
	struct err e;
	int r = -1;

	if (!down || !uids)
		goto out;
	view(c, cj, job, cj->learners, x.shard, down, &v.syncer_down, uids);
	r = chaos_run_due(&cj->sched, clock_wall() - cj->start, &v, &ex, &e);
	if (r < 0)
		log_warn("%s: chaos: %s", key, e.msg);
	if (r != 1)
		goto out;
	cj->kills++;
	c->kills++;
	cj->last_kill = clock_wall();
	snprintf(cj->last_pod, sizeof(cj->last_pod), "%s", x.pod);
	snprintf(msg, n, "chaos kill %ld: pod %s deleted (planned at %.1fs after start, "
		 "next in %.1fs)", cj->kills, x.pod, due,
		 chaos_next_time(&cj->sched) - (clock_wall() - cj->start));
out:
	free(down);
	free(uids);
	return r;
}

static void tick_job(struct chaos_ctl *c, struct kube *k, const char *key)
{
	const char *slash = strchr(key, '/');
	char ns[64], name[64], msg[512];
	json_t *job;
	struct cjob *cj;
	int touched = 0, killed = 0;

	if (!slash || slash - key >= (long)sizeof(ns))
		return;
	snprintf(ns, sizeof(ns), "%.*s", (int)(slash - key), key);
	snprintf(name, sizeof(name), "%s", slash + 1);
	if (!(job = informer_get(c->jobs, ns, name)))
		return;
	pthread_mutex_lock(&c->mu);
	if (!(cj = entry(c, key, job, &touched))) {
		pthread_mutex_unlock(&c->mu);
		json_decref(job);
		return;
	}
	if (!wanted(cj, job)) {
		if (cj->active) {
			cj->active = 0;
			touched = 1;
			log_info("%s: chaos stopped", key);
		}
		goto out;
	}
	if (!cj->active) {
		if (arm(cj, job, key))
			goto out;
		touched = 1;
	}
	if (clock_wall() - cj->start >= chaos_next_time(&cj->sched) &&
	    kill_due(c, k, cj, job, key, msg, sizeof(msg)) == 1)
		killed = touched = 1;
out:
	pthread_mutex_unlock(&c->mu);
	if (killed)
		kube_post_event(k, &(struct kube_event_post){
			FIELD_MANAGER, JOB_API_VERSION, JOB_KIND, job, 1,
			"ChaosKill", msg });
	if (touched && c->touched)
		c->touched(c->ctx, key);
	json_decref(job);
}

void chaos_ctl_tick(struct chaos_ctl *c, struct kube *k)
{
	json_t *keys = informer_keys(c->jobs), *key;
	struct cjob **pp, *j;
	size_t i;

	pthread_mutex_lock(&c->mu);
	for (j = c->list; j; j = j->next)
		j->seen = 0;
	pthread_mutex_unlock(&c->mu);
	json_array_foreach(keys, i, key)
		tick_job(c, k, json_string_value(key));
	json_decref(keys);
	pthread_mutex_lock(&c->mu);
	for (pp = &c->list; (j = *pp);) {
		if (!j->seen) {   /* the job is gone */
			*pp = j->next;
			free(j);
		} else {
			pp = &j->next;
		}
	}
	pthread_mutex_unlock(&c->mu);
}

json_t *chaos_ctl_status(struct chaos_ctl *c, const char *key, const char *uid)
{
	json_t *out = NULL;
	struct cjob *j;
	char buf[48];

	pthread_mutex_lock(&c->mu);
	j = find(c, key);
	if (j && uid && !strcmp(j->uid, uid) && j->parsed &&
	    (j->cfg.enabled || j->kills)) {
		out = json_pack("{s:I, s:b}", "kills", (json_int_t)j->kills,
				"active", j->active);
		if (j->kills && j->last_kill > 0) {
			kube_time_format(j->last_kill, buf, sizeof(buf));
			json_object_set_new(out, "lastKill", json_string(buf));
			json_object_set_new(out, "lastKillPod", json_string(j->last_pod));
		}
		if (j->active && isfinite(chaos_next_time(&j->sched))) {
			kube_time_format(j->start + chaos_next_time(&j->sched), buf, sizeof(buf));
			json_object_set_new(out, "nextKill", json_string(buf));
		}
	}
	pthread_mutex_unlock(&c->mu);
	return out;
}

long chaos_ctl_kills(struct chaos_ctl *c)
{
	long n;

	pthread_mutex_lock(&c->mu);
	n = c->kills;
	pthread_mutex_unlock(&c->mu);
	return n;
}
