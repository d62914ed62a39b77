/*
 * informer: a cache of one resource kind kept current by list + watch.
 *
 * One thread per informer, with its own connection: list (pages of
 * INFORMER_PAGE, `continue` tokens) into a fresh cache, then watch from
 * the list's resourceVersion with bookmarks, re-watching from the last
 * resourceVersion seen when the stream ends or is cut. A 410 Gone — as
 * the watch's HTTP status or as an in-stream ERROR event — means that
 * version is too old: list again. After a relist, objects that vanished
 * are reported DELETED and every other one MODIFIED, so no change is
 * lost across the gap.
 *
 * The handler is called on the informer's thread after the cache is
 * updated; it must be quick (the operator only queues a key).
 * A DELETED event removes the cached object only when the uids agree:
 * the object of a name is never dropped for an older one of that name.
 * Cached objects lose metadata.managedFields, and whatever a trim
 * function set before the start removes (memory: at 100 jobs x 16
 * learners the pods are most of the operator's resident set).
 */
#ifndef DDILOCO_INFORMER_H
#define DDILOCO_INFORMER_H

#include <jansson.h>

#include "operator/kube.h"

#define INFORMER_PAGE 500
#define INFORMER_DELETED 256     /* uids of recent deletions kept */

typedef void (*informer_fn)(void *ctx, enum kube_event type, json_t *obj);
/* Removes from obj, in place, the fields nobody reads. */
typedef void (*informer_trim_fn)(json_t *obj);

struct informer_stats {
	long lists, watches, events, relists_410, errors;
};

struct informer;

/*
 * path: the collection, e.g. "/api/v1/namespaces/ns/pods";
 * selector: a label selector or NULL.
 */
struct informer *informer_new(const struct kube_config *cfg, const char *name,
			      const char *path, const char *selector,
			      informer_fn fn, void *ctx);
/* Before informer_start: every object is trimmed before it is cached. */
void informer_set_trim(struct informer *inf, informer_trim_fn trim);
int informer_start(struct informer *inf, struct err *e);
/* Stops the thread (a running watch ends within a second) and frees. */
void informer_free(struct informer *inf);

/* 1 once the first list has filled the cache. */
int informer_synced(struct informer *inf);
/* A deep copy of ns/name, or NULL. */
json_t *informer_get(struct informer *inf, const char *ns, const char *name);
/* Deep copies of the objects in ns whose label key has value val. */
json_t *informer_select(struct informer *inf, const char *ns,
			const char *key, const char *val);
/* The keys "ns/name" of every cached object. */
json_t *informer_keys(struct informer *inf);
int informer_size(struct informer *inf);
/*
 * 1 when the object with this uid was reported DELETED (by the watch or
 * as vanished at a relist) among the last INFORMER_DELETED deletions.
 * The operator's expectation that a pod it just created shows up in the
 * cache ends there: the pod came and went before a pass saw it.
 */
int informer_deleted(struct informer *inf, const char *uid);
void informer_get_stats(struct informer *inf, struct informer_stats *out);
const char *informer_name(const struct informer *inf);

/*
 * The steps of the informer's thread, without the network (its unit test
 * and tests/fuzz/fuzz_watch.c drive them): one list page's items into
 * fresh (keyed "ns/name") with its continue token (escaped, "" on the
 * last page; -1 and "" when it does not fit) and resourceVersion; a relisted cache swapped in, the
 * differences reported; one watch event applied (a kube_watch_fn: 0 to
 * go on, 1 after a 410 ERROR event, 2 after another ERROR).
 */
int informer_list_page(struct informer *inf, json_t *page, json_t *fresh,
		       char *cont, size_t ncont, char *rv, size_t nrv);
void informer_replace(struct informer *inf, json_t *fresh, const char *rv);
int informer_event(void *inf, enum kube_event type, json_t *obj);

#endif
