/*
 * fuzz_kubeconfig: the operator's kubeconfig reader (operator/kube.c,
 * kube_config_load; `ddiloco operator --kubeconfig`). It takes a path,
 * so each input is written to one file in TMPDIR (else /dev/shm), made
 * at the first input and removed at exit, and read from there as the
 * operator would.
 *
 * A config it accepts must say what the file says, whole: the document
 * is read again here (operator/yamljson.c, the same YAML reader) and the
 * current context's cluster server (less its trailing '/'), token,
 * tokenFile, certificate-authority and namespace compared with what the
 * reader kept, so a value cut to fit is a find; the server is not empty,
 * there is a token or a token file, and the CA bytes fit what base64 of
 * that length can hold.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "operator/kube.h"
#include "operator/yamljson.h"
#include "tests/fuzz/fuzz_init.h"
#include "tests/fuzz/fuzz_model.h"

const char fuzz_name[] = "kubeconfig";

static char path[600];

static void bye(void)
{
	if (path[0])
		unlink(path);
}

/* The entry of list whose name is name, its field (kube.c, named). */
static json_t *named(json_t *list, const char *name, const char *field)
{
	size_t i;
	json_t *it;

	json_array_foreach(list, i, it) {
		const char *n = json_string_value(json_object_get(it, "name"));

		if (n && !strcmp(n, name))
			return json_object_get(it, field);
	}
	return NULL;
}

static const char *str(json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

/* want (or dflt when the file has none) is what the reader kept. */
static void same(const char *got, const char *want, const char *dflt)
{
	if (strcmp(got, want ? want : dflt))
		abort();
}

static void check(const uint8_t *data, size_t size, const struct kube_config *c)
{
	json_t *root, *ctx, *cluster, *user;
	struct err e;
	char server[4096];
	size_t n;
	const char *u;

	if (!(root = yaml_to_json((const char *)data, size, &e)))
		abort();   /* it read the first time */
	ctx = named(json_object_get(root, "contexts"),
		    str(root, "current-context"), "context");
	cluster = named(json_object_get(root, "clusters"), str(ctx, "cluster"),
			"cluster");
	u = str(ctx, "user");
	user = u ? named(json_object_get(root, "users"), u, "user") : NULL;
	if (!str(cluster, "server"))
		abort();
	snprintf(server, sizeof(server), "%s", str(cluster, "server"));
	for (n = strlen(server); n && server[n - 1] == '/'; )
		server[--n] = '\0';
	same(c->server, server, "");
	same(c->namespace_, str(ctx, "namespace"), "default");
	same(c->ca_file, str(cluster, "certificate-authority"), "");
	same(c->token, str(user, "token"), "");
	same(c->token_file, str(user, "tokenFile"), "");
	if (!c->server[0] || (!c->token[0] && !c->token_file[0]) ||
	    (c->ca_pem && c->ca_pem[c->ca_pem_len] != '\0') ||
	    c->ca_pem_len > size)
		abort();
	json_decref(root);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kube_config c;
	struct err e;

	if (size > (1 << 16))
		return 0;
	if (!path[0]) {
		snprintf(path, sizeof(path), "%s/ddfuzz-kubeconfig-%ld",
			 fuzz_tmpdir(), (long)getpid());
		atexit(bye);
	}
	if (file_write_atomic(path, data, size, &e))
		abort();
	if (kube_config_load(path, &c, &e))
		return 0;
	check(data, size, &c);
	kube_config_release(&c);
	return 0;
}
