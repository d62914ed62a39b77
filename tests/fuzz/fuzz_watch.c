/*
 * fuzz_watch: the operator's decoding of what the API server sends
 * (operator/kube.c, operator/informer.c): a watch stream cut into chunks
 * as curl hands them over, each complete line parsed and applied to an
 * informer's cache; and list pages (items, continue token,
 * resourceVersion) relisted into a fresh cache and swapped in. No
 * network: the informer is never started.
 *
 * The first byte chooses: even, the rest is a watch stream, fed in
 * chunks of 1 + (first byte / 2) bytes; odd, the rest is list pages
 * separated by NUL bytes, the continue token's buffer 8 + 8 · (first
 * byte / 2) bytes (relist's is 1024). Afterwards the cache is read as the operator
 * reads it (keys, select, get): the object under each key must be the
 * object of that namespace and name.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "operator/informer.h"
#include "operator/kube.h"
#include "tests/fuzz/fuzz_init.h"

const char fuzz_name[] = "watch";

static struct kube_config cfg;
static long events;

static void on_change(void *ctx, enum kube_event type, json_t *obj)
{
	(void)ctx;
	if (type > KUBE_ERROR || !json_is_object(obj))
		abort();
	events++;
}

static void read_back(struct informer *inf)
{
	json_t *keys = informer_keys(inf), *k;
	size_t i;

	if (json_array_size(keys) != (size_t)informer_size(inf))
		abort();
	json_array_foreach(keys, i, k) {
		const char *key = json_string_value(k), *slash;
		char ns[256];
		json_t *o;

		if (!key || !(slash = strchr(key, '/')))
			abort();
		if ((size_t)(slash - key) >= sizeof(ns))
			continue;
		memcpy(ns, key, (size_t)(slash - key));
		ns[slash - key] = '\0';
		o = informer_get(inf, ns, slash + 1);
		/* the object cached under ns/name is the object ns/name */
		{
			json_t *m = json_object_get(o, "metadata");
			const char *on = json_string_value(json_object_get(m, "name"));
			const char *ons = json_string_value(json_object_get(m,
									   "namespace"));

			if (!o || !on || strcmp(on, slash + 1) ||
			    strcmp(ons ? ons : "", ns))
				abort();
		}
		json_decref(o);
		json_decref(informer_select(inf, ns, "app", "ddiloco"));
	}
	json_decref(keys);
	(void)informer_deleted(inf, "u1");
}

static void watch(struct informer *inf, const uint8_t *data, size_t size,
		  size_t chunk)
{
	struct buf body;

	buf_init(&body, 1 << 16);   /* KUBE_MAX_LINE-like bound, smaller */
	for (size_t off = 0; off < size; off += chunk) {
		size_t n = size - off < chunk ? size - off : chunk;

		if (buf_append(&body, data + off, n))
			break;   /* one line past the bound: the watch ends */
		if (kube_watch_lines(&body, informer_event, inf))
			break;   /* an ERROR event: the watch ends */
	}
	buf_release(&body);
}

/* One page: the continue token to send next is the page's, escaped, or
 * none (-1 when it does not fit): never a part of it, nor of an older
 * one. */
static int page_in(struct informer *inf, json_t *page, json_t *fresh,
		   char *cont, size_t ncont, char *rv, size_t nrv)
{
	const char *tok = json_string_value(json_object_get(
		json_object_get(page, "metadata"), "continue"));
	char want[4096];
	int rc = informer_list_page(inf, page, fresh, cont, ncont, rv, nrv);

	if (strnlen(cont, ncont) >= ncont || strnlen(rv, nrv) >= nrv)
		abort();   /* not a string within its bound */
	if (cont[0] && (!tok || kube_escape(tok, want, sizeof(want)) ||
			strcmp(cont, want)))
		abort();
	return rc;
}

static void list(struct informer *inf, const uint8_t *data, size_t size,
		 size_t ncont)
{
	json_t *fresh = json_object();
	char cont[1024] = "", rv[64] = "";
	int rc = 0;

	while (size && !rc) {
		const uint8_t *end = memchr(data, 0, size);
		size_t n = end ? (size_t)(end - data) : size;
		json_error_t je;
		json_t *page = json_loadb((const char *)data, n, 0, &je);

		if (page) {
			rc = page_in(inf, page, fresh, cont, ncont, rv,
				     sizeof(rv));
			json_decref(page);
		}
		data += n + (end != NULL);
		size -= n + (end != NULL);
	}
	if (!rc)   /* a list that failed is retried, the old cache kept */
		informer_replace(inf, fresh, rv);
	json_decref(fresh);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct informer *inf;

	if (size < 1 || size > (1 << 16))
		return 0;
	inf = informer_new(&cfg, "fuzz", "/api/v1/pods", "app=ddiloco",
			   on_change, NULL);
	if (!inf)
		return 0;
	if (data[0] & 1)
		list(inf, data + 1, size - 1, 8 + 8 * (size_t)(data[0] >> 1));
	else
		watch(inf, data + 1, size - 1, 1 + data[0] / 2);
	read_back(inf);
	informer_free(inf);
	return 0;
}
