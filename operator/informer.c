/*
 * informer: the list/watch loop of informer.h.
 *
 *   start -> list (all pages) -> swap cache, report differences
 *         -> watch(rv) --event--> update cache, rv = object's rv, report
 *                      --BOOKMARK--> rv = bookmark's rv
 *                      --ERROR 410 / HTTP 410--> list
 *                      --end of stream--> watch(rv)
 *                      --cut / 5xx--> wait (1 s doubling to 30 s), watch(rv)
 *
 * The cache is a jansson object keyed "ns/name" under one mutex; readers
 * get deep copies, so nothing they hold changes under them.
 */
#include "operator/informer.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"

/* Kubernetes' own limits: a namespace is a DNS label, a name at most a
 * DNS subdomain; "ns/name" and its NUL fit in KEY_MAX. */
#define KUBE_NAMESPACE_MAX 63
#define KUBE_NAME_MAX      253
#define KEY_MAX            (KUBE_NAMESPACE_MAX + 1 + KUBE_NAME_MAX + 1)

struct informer {
	char name[32];
	char path[512];
	char selector[256];
	const struct kube_config *cfg;
	informer_fn fn;
	informer_trim_fn trim;
	void *ctx;
	pthread_t thread;
	int started;
	volatile int stop;
	pthread_mutex_t mu;
	json_t *cache;                /* "ns/name" -> object */
	int synced;
	char rv[64];                  /* last resourceVersion seen */
	int gone;                     /* an in-stream 410 arrived */
	char deleted[INFORMER_DELETED][64];   /* ring of deleted uids */
	int ndeleted;
	struct informer_stats st;
};

struct informer *informer_new(const struct kube_config *cfg, const char *name,
			      const char *path, const char *selector,
			      informer_fn fn, void *ctx)
{
	struct informer *inf = calloc(1, sizeof(*inf));

	if (!inf)
		return NULL;
	snprintf(inf->name, sizeof(inf->name), "%s", name);
	snprintf(inf->path, sizeof(inf->path), "%s", path);
	if (selector)
		kube_escape(selector, inf->selector, sizeof(inf->selector));
	inf->cfg = cfg;
	inf->fn = fn;
	inf->ctx = ctx;
	inf->cache = json_object();
	pthread_mutex_init(&inf->mu, NULL);
	return inf;
}

const char *informer_name(const struct informer *inf)
{
	return inf->name;
}

void informer_set_trim(struct informer *inf, informer_trim_fn trim)
{
	inf->trim = trim;
}

/* the informer's own trim (which still sees managedFields), then the
 * managedFields dropped */
static void trim(const struct informer *inf, json_t *obj)
{
	if (inf->trim)
		inf->trim(obj);
	json_object_del(json_object_get(obj, "metadata"), "managedFields");
}

/*
 * The cache key "ns/name"; -1 for a name or namespace that Kubernetes
 * never gives (none, too long, or holding '/'): such an object is not
 * cached, as its key would be cut or would name another object.
 */
static int make_key(const char *ns, const char *name, char *key)
{
	if (!name || !name[0] || strlen(name) > KUBE_NAME_MAX ||
	    strlen(ns) > KUBE_NAMESPACE_MAX || strchr(name, '/') ||
	    strchr(ns, '/'))
		return -1;
	snprintf(key, KEY_MAX, "%s/%s", ns, name);
	return 0;
}

static int key_of(json_t *obj, char *key)
{
	json_t *m = json_object_get(obj, "metadata");
	const char *ns = json_string_value(json_object_get(m, "namespace"));

	return make_key(ns ? ns : "",
			json_string_value(json_object_get(m, "name")), key);
}

static const char *uid_of(json_t *obj)
{
	return json_string_value(json_object_get(json_object_get(obj, "metadata"),
						 "uid"));
}

/* Under inf->mu. */
static void note_deleted(struct informer *inf, json_t *obj)
{
	const char *uid = uid_of(obj);

	if (uid && uid[0])
		snprintf(inf->deleted[inf->ndeleted++ % INFORMER_DELETED],
			 sizeof(inf->deleted[0]), "%s", uid);
}

static const char *rv_of(json_t *obj)
{
	return json_string_value(json_object_get(json_object_get(obj, "metadata"),
						 "resourceVersion"));
}

/* Sleeps up to s seconds, waking early on stop. */
static void nap(struct informer *inf, double s)
{
	double until = clock_mono() + s;

	while (!inf->stop && clock_mono() < until)
		sleep_seconds(0.05);
}

/* Lists every page into a new cache; reports the differences. */
static int relist(struct informer *inf, struct kube *k, struct err *e)
{
	json_t *fresh = json_object();
	char cont[1024] = "", path[2048], rv[64] = "";

	do {
		struct kube_status st;
		json_t *page;

		snprintf(path, sizeof(path), "%s?limit=%d%s%s%s%s", inf->path,
			 INFORMER_PAGE, inf->selector[0] ? "&labelSelector=" : "",
			 inf->selector, cont[0] ? "&continue=" : "", cont);
		if (kube_request(k, "GET", path, NULL, NULL, &page, &st, e)) {
			json_decref(fresh);
			return -1;
		}
		if (informer_list_page(inf, page, fresh, cont, sizeof(cont), rv,
				       sizeof(rv))) {
			err_set(e, "list %s: the continue token does not fit in "
				"%zu bytes", inf->path, sizeof(cont));
			json_decref(page);
			json_decref(fresh);
			return -1;
		}
		json_decref(page);
	} while (cont[0] && !inf->stop);
	informer_replace(inf, fresh, rv);
	json_decref(fresh);
	return 0;
}

int informer_list_page(struct informer *inf, json_t *page, json_t *fresh,
		       char *cont, size_t ncont, char *rv, size_t nrv)
{
	json_t *items = json_object_get(page, "items"), *it;
	const char *c;
	size_t i;

	json_array_foreach(items, i, it) {
		char kbuf[KEY_MAX];

		trim(inf, it);
		if (!key_of(it, kbuf))
			json_object_set(fresh, kbuf, it);
	}
	c = json_string_value(json_object_get(json_object_get(page, "metadata"),
					      "continue"));
	if (c && c[0])
		return kube_escape(c, cont, ncont);   /* "" when it does not fit */
	cont[0] = '\0';
	{
		const char *r = json_string_value(json_object_get(
			json_object_get(page, "metadata"), "resourceVersion"));
		snprintf(rv, nrv, "%s", r ? r : "");
	}
	return 0;
}

void informer_replace(struct informer *inf, json_t *fresh, const char *rv)
{
	const char *key;
	json_t *obj, *old;
	void *tmp;

	pthread_mutex_lock(&inf->mu);
	old = inf->cache;
	inf->cache = fresh;
	snprintf(inf->rv, sizeof(inf->rv), "%s", rv);
	inf->synced = 1;
	inf->st.lists++;
	json_incref(fresh);
	json_object_foreach(old, key, obj) {
		json_t *now = json_object_get(fresh, key);
		const char *u = uid_of(obj), *nu = now ? uid_of(now) : NULL;

		if (!now || (u && nu && strcmp(u, nu)))
			note_deleted(inf, obj);   /* gone, or replaced */
	}
	pthread_mutex_unlock(&inf->mu);

	json_object_foreach_safe(old, tmp, key, obj)
		if (!json_object_get(fresh, key))
			inf->fn(inf->ctx, KUBE_DELETED, obj);
	json_object_foreach(fresh, key, obj)
		inf->fn(inf->ctx, json_object_get(old, key) ? KUBE_MODIFIED : KUBE_ADDED, obj);
	json_decref(old);
}

int informer_event(void *arg, enum kube_event type, json_t *obj)
{
	struct informer *inf = arg;
	const char *rv = rv_of(obj);
	char key[KEY_MAX];

	if (type == KUBE_ERROR) {
		json_int_t code = json_integer_value(json_object_get(obj, "code"));

		log_info("%s: watch error %lld: %s", inf->name, (long long)code,
			 json_string_value(json_object_get(obj, "message")));
		if (code == 410) {
			inf->gone = 1;
			return 1;   /* stop this watch: relist */
		}
		return 2;
	}
	pthread_mutex_lock(&inf->mu);
	if (rv)
		snprintf(inf->rv, sizeof(inf->rv), "%s", rv);
	inf->st.events++;
	if (type == KUBE_BOOKMARK) {
		pthread_mutex_unlock(&inf->mu);
		return 0;
	}
	if (key_of(obj, key)) {
		pthread_mutex_unlock(&inf->mu);
		return 0;
	}
	trim(inf, obj);
	if (type == KUBE_DELETED) {
		const char *u = uid_of(obj);
		const char *cu = uid_of(json_object_get(inf->cache, key));

		note_deleted(inf, obj);
		if (!u || !cu || !strcmp(u, cu))
			json_object_del(inf->cache, key);
	} else
		json_object_set(inf->cache, key, obj);
	pthread_mutex_unlock(&inf->mu);
	inf->fn(inf->ctx, type, obj);
	return 0;
}

static void *run(void *arg)
{
	struct informer *inf = arg;
	struct kube *k;
	struct err e;
	int need_list = 1;
	double backoff = 1;

	if (!(k = kube_new(inf->cfg, &e))) {
		log_error("%s: %s", inf->name, e.msg);
		return NULL;
	}
	while (!inf->stop) {
		struct kube_status st;
		char path[1024], rv[64];
		double t0;
		int r;

		if (need_list) {
			if (relist(inf, k, &e)) {
				inf->st.errors++;
				log_warn("%s: list: %s (retry in %.0fs)", inf->name, e.msg, backoff);
				nap(inf, backoff);
				backoff = backoff * 2 > 30 ? 30 : backoff * 2;
				continue;
			}
			need_list = 0;
		}
		pthread_mutex_lock(&inf->mu);
		snprintf(rv, sizeof(rv), "%s", inf->rv);
		pthread_mutex_unlock(&inf->mu);
		snprintf(path, sizeof(path),
			 "%s?watch=1&allowWatchBookmarks=true&resourceVersion=%s"
			 "&timeoutSeconds=%d%s%s", inf->path, rv,
			 240 + (int)((long long)(clock_mono() * 1000) % 60),
			 inf->selector[0] ? "&labelSelector=" : "", inf->selector);
		inf->gone = 0;
		inf->st.watches++;
		t0 = clock_mono();
		r = kube_watch(k, path, informer_event, inf, &inf->stop, &st, &e);
		if (clock_mono() - t0 > 10)
			backoff = 1;   /* it ran well for a while: start over */
		if (inf->stop)
			break;
		if (inf->gone || (r < 0 && st.code == 410)) {
			inf->st.relists_410++;
			log_info("%s: resourceVersion %s is too old: relisting", inf->name, rv);
			need_list = 1;
			continue;
		}
		if (r == 0) {
			backoff = 1;
			continue;   /* the server ended the watch: go on from rv */
		}
		inf->st.errors++;
		log_warn("%s: watch: %s (again in %.0fs)", inf->name,
			 r < 0 ? e.msg : "error event", backoff);
		nap(inf, backoff);
		backoff = backoff * 2 > 30 ? 30 : backoff * 2;
		if (r > 0 || (st.code >= 400 && st.code != 429 && st.code < 500))
			need_list = 1;   /* an error we cannot resume from */
	}
	kube_free(k);
	return NULL;
}

int informer_start(struct informer *inf, struct err *e)
{
	if (pthread_create(&inf->thread, NULL, run, inf))
		return err_set(e, "informer %s: cannot start its thread", inf->name);
	inf->started = 1;
	return 0;
}

void informer_free(struct informer *inf)
{
	if (!inf)
		return;
	inf->stop = 1;
	if (inf->started)
		pthread_join(inf->thread, NULL);
	json_decref(inf->cache);
	pthread_mutex_destroy(&inf->mu);
	free(inf);
}

int informer_synced(struct informer *inf)
{
	int s;

	pthread_mutex_lock(&inf->mu);
	s = inf->synced;
	pthread_mutex_unlock(&inf->mu);
	return s;
}

json_t *informer_get(struct informer *inf, const char *ns, const char *name)
{
	char key[KEY_MAX];
	json_t *o;

	if (make_key(ns, name, key))
		return NULL;
	pthread_mutex_lock(&inf->mu);
	o = json_deep_copy(json_object_get(inf->cache, key));
	pthread_mutex_unlock(&inf->mu);
	return o;
}

json_t *informer_select(struct informer *inf, const char *ns,
			const char *key, const char *val)
{
	json_t *out = json_array(), *obj;
	const char *k;
	size_t nslen = strlen(ns);

	pthread_mutex_lock(&inf->mu);
	json_object_foreach(inf->cache, k, obj) {
		const char *v;

		if (strncmp(k, ns, nslen) || k[nslen] != '/')
			continue;
		v = json_string_value(json_object_get(json_object_get(
			json_object_get(obj, "metadata"), "labels"), key));
		if (v && !strcmp(v, val))
			json_array_append_new(out, json_deep_copy(obj));
	}
	pthread_mutex_unlock(&inf->mu);
	return out;
}

json_t *informer_keys(struct informer *inf)
{
	json_t *out = json_array(), *obj;
	const char *k;

	pthread_mutex_lock(&inf->mu);
	json_object_foreach(inf->cache, k, obj)
		json_array_append_new(out, json_string(k));
	pthread_mutex_unlock(&inf->mu);
	return out;
}

int informer_size(struct informer *inf)
{
	int n;

	pthread_mutex_lock(&inf->mu);
	n = (int)json_object_size(inf->cache);
	pthread_mutex_unlock(&inf->mu);
	return n;
}

int informer_deleted(struct informer *inf, const char *uid)
{
	int n, found = 0;

	if (!uid || !uid[0])
		return 0;
	pthread_mutex_lock(&inf->mu);
	n = inf->ndeleted < INFORMER_DELETED ? inf->ndeleted : INFORMER_DELETED;
	for (int i = 0; i < n && !found; i++)
		found = !strcmp(inf->deleted[i], uid);
	pthread_mutex_unlock(&inf->mu);
	return found;
}

void informer_get_stats(struct informer *inf, struct informer_stats *out)
{
	pthread_mutex_lock(&inf->mu);
	*out = inf->st;
	pthread_mutex_unlock(&inf->mu);
}
