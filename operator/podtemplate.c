/*
 * podtemplate: the overlay of podtemplate.h. The pod the operator built
 * comes first and the template goes over it field by field, each field by
 * one of three rules: objects merged key by key (with the winner the
 * header's table names), lists appended past the items whose name (or
 * mount path) the pod already has, plain fields set. Only the fields
 * listed here are read; everything else in the template is passed over,
 * so the operator's own fields cannot be replaced by a field it did not
 * expect.
 *
 * The policy check reads the template as written, not the merged pod:
 * what it refuses is what the template asks for (the operator's own pods
 * ask for none of it), and its path names the field the user wrote.
 */
#include "operator/podtemplate.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Fields of the pod spec the template sets as they are. */
static const char *const pod_set[] = {
	"affinity", "topologySpreadConstraints", "priorityClassName",
	"serviceAccountName", "automountServiceAccountToken", "schedulerName",
	"runtimeClassName", "dnsConfig", NULL,
};

/* Fields of the main container the template sets as they are. */
static const char *const container_set[] = {
	"workingDir", "lifecycle", "livenessProbe", "startupProbe", NULL,
};

/* Every key of src into *dst (made when missing); a key dst has is
 * replaced only when src_wins. */
static void merge_keys(json_t *parent, const char *field, json_t *src,
		       int src_wins)
{
	json_t *dst = json_object_get(parent, field);
	const char *k;
	json_t *v;

	if (!json_is_object(src))
		return;
	if (!json_is_object(dst)) {
		dst = json_object();
		json_object_set_new(parent, field, dst);
	}
	json_object_foreach(src, k, v)
		if (src_wins || !json_object_get(dst, k))
			json_object_set_new(dst, k, json_deep_copy(v));
}

/* Whether an item of arr has the string `key` equal to that of item. */
static int has_same(json_t *arr, json_t *item, const char *key)
{
	const char *want = json_string_value(json_object_get(item, key));
	size_t i;
	json_t *x;

	if (!want)
		return 0;
	json_array_foreach(arr, i, x) {
		const char *s = json_string_value(json_object_get(x, key));

		if (s && !strcmp(s, want))
			return 1;
	}
	return 0;
}

/*
 * The items of src appended to parent[field] (made when missing), past
 * those whose key1 or key2 (NULL: none) an item of the pod already has:
 * the pod's own volumes, env and mounts win. at_front puts them before
 * the pod's own (init containers run in order: the user's first).
 */
static void append_new(json_t *parent, const char *field, json_t *src,
		       const char *key1, const char *key2, int at_front)
{
	json_t *dst = json_object_get(parent, field), *own;
	size_t i, n = 0;
	json_t *x;

	if (!json_is_array(src) || !json_array_size(src))
		return;
	if (!json_is_array(dst)) {
		dst = json_array();
		json_object_set_new(parent, field, dst);
	}
	own = json_copy(dst);
	json_array_foreach(src, i, x) {
		if (!json_is_object(x) && (key1 || key2))
			continue;
		if ((key1 && has_same(own, x, key1)) || (key2 && has_same(own, x, key2)))
			continue;
		if (at_front)
			json_array_insert_new(dst, n++, json_deep_copy(x));
		else
			json_array_append_new(dst, json_deep_copy(x));
	}
	json_decref(own);
}

static void set_fields(json_t *dst, json_t *src, const char *const *names)
{
	for (int i = 0; names[i]; i++) {
		json_t *v = json_object_get(src, names[i]);

		if (v)
			json_object_set_new(dst, names[i], json_deep_copy(v));
	}
}

/* The template's container `name` over the pod's container of that name. */
static void merge_container(json_t *c, json_t *t)
{
	json_t *res = json_object_get(t, "resources");

	append_new(c, "env", json_object_get(t, "env"), "name", NULL, 0);
	append_new(c, "envFrom", json_object_get(t, "envFrom"), NULL, NULL, 0);
	append_new(c, "volumeMounts", json_object_get(t, "volumeMounts"),
		   "name", "mountPath", 0);
	append_new(c, "ports", json_object_get(t, "ports"), "name", NULL, 0);
	if (json_is_object(res)) {
		json_t *own = json_object_get(c, "resources");

		if (!json_is_object(own)) {
			own = json_object();
			json_object_set_new(c, "resources", own);
		}
		merge_keys(own, "requests", json_object_get(res, "requests"), 1);
		merge_keys(own, "limits", json_object_get(res, "limits"), 1);
	}
	merge_keys(c, "securityContext", json_object_get(t, "securityContext"), 1);
	set_fields(c, t, container_set);
	if (!json_object_get(c, "readinessProbe") && json_object_get(t, "readinessProbe"))
		json_object_set_new(c, "readinessProbe",
				    json_deep_copy(json_object_get(t, "readinessProbe")));
}

static json_t *named(json_t *arr, const char *name)
{
	size_t i;
	json_t *x;

	json_array_foreach(arr, i, x) {
		const char *s = json_string_value(json_object_get(x, "name"));

		if (s && !strcmp(s, name))
			return x;
	}
	return NULL;
}

void pod_template_apply(json_t *meta, json_t *podspec, json_t *tmpl,
			const char *main)
{
	json_t *tm = json_object_get(tmpl, "metadata");
	json_t *ts = json_object_get(tmpl, "spec");
	json_t *c, *t;

	if (!json_is_object(tmpl))
		return;
	merge_keys(meta, "labels", json_object_get(tm, "labels"), 0);
	if (json_object_size(json_object_get(tm, "annotations")))
		merge_keys(meta, "annotations", json_object_get(tm, "annotations"), 0);
	if (!json_is_object(ts))
		return;
	if (json_object_size(json_object_get(ts, "nodeSelector")))
		merge_keys(podspec, "nodeSelector", json_object_get(ts, "nodeSelector"), 1);
	append_new(podspec, "tolerations", json_object_get(ts, "tolerations"),
		   NULL, NULL, 0);
	append_new(podspec, "imagePullSecrets", json_object_get(ts, "imagePullSecrets"),
		   "name", NULL, 0);
	set_fields(podspec, ts, pod_set);
	merge_keys(podspec, "securityContext", json_object_get(ts, "securityContext"), 1);
	append_new(podspec, "volumes", json_object_get(ts, "volumes"), "name", NULL, 0);
	append_new(podspec, "initContainers", json_object_get(ts, "initContainers"),
		   "name", NULL, 1);
	c = named(json_object_get(podspec, "containers"), main);
	t = named(json_object_get(ts, "containers"), main);
	if (c && t)
		merge_container(c, t);
}

/* ---- the policy ------------------------------------------------------ */

/* A DNS-1123 subdomain: lower-case letters, digits, '-' and '.', a letter
 * or digit at each end, at most 253 bytes. */
static int dns_subdomain(const char *s, size_t n)
{
	if (!n || n > POD_POLICY_NAME_MAX - 1)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		int alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');

		if (!alnum && ((c != '-' && c != '.') || i == 0 || i == n - 1))
			return 0;
	}
	return 1;
}

int pod_policy_add_accounts(struct pod_policy *p, const char *csv,
			    struct err *e)
{
	const char *s = csv;

	for (;;) {
		const char *comma = strchr(s, ',');
		size_t n = comma ? (size_t)(comma - s) : strlen(s);

		if (!dns_subdomain(s, n))
			return err_set(e, "service account '%.*s' of '%s' is not a "
				       "DNS-1123 subdomain (lower-case letters, digits, "
				       "'-' and '.', at most 253)", (int)(n < 64 ? n : 64),
				       s, csv);
		if (p->naccounts == POD_POLICY_MAX_ACCOUNTS)
			return err_set(e, "more than %d service accounts in '%.64s'",
				       POD_POLICY_MAX_ACCOUNTS, csv);
		snprintf(p->accounts[p->naccounts++], POD_POLICY_NAME_MAX, "%.*s",
			 (int)n, s);
		if (!comma)
			return 0;
		s = comma + 1;
	}
}

static int account_allowed(const struct pod_policy *p, const char *sa)
{
	if (!sa[0] || !strcmp(sa, "default"))
		return 1;
	for (int i = 0; i < p->naccounts; i++)
		if (!strcmp(p->accounts[i], sa))
			return 1;
	return 0;
}

/* What a check found: the reason and the message, from the field's path. */
struct refusal {
	char *reason, *msg;
	size_t nreason, nmsg;
};

__attribute__((format(printf, 3, 4)))
static int refuse(struct refusal *r, const char *reason, const char *fmt, ...)
{
	va_list ap;

	snprintf(r->reason, r->nreason, "%s", reason);
	va_start(ap, fmt);
	vsnprintf(r->msg, r->nmsg, fmt, ap);
	va_end(ap);
	return 1;
}

#define ALLOW_HINT "ddiloco operator --allow-privileged-templates allows it"

/* One container's securityContext: privileged, escalation, added
 * capabilities. */
static int check_container(json_t *c, const char *where, const char *list,
			   size_t i, struct refusal *r)
{
	json_t *sc = json_object_get(c, "securityContext");
	json_t *add = json_object_get(json_object_get(sc, "capabilities"), "add");

	if (json_is_true(json_object_get(sc, "privileged")))
		return refuse(r, "PrivilegedContainer", "%s.spec.%s[%zu].securityContext."
			      "privileged is true: the operator refuses privileged "
			      "containers (" ALLOW_HINT ")", where, list, i);
	if (json_is_true(json_object_get(sc, "allowPrivilegeEscalation")))
		return refuse(r, "PrivilegeEscalation", "%s.spec.%s[%zu].securityContext."
			      "allowPrivilegeEscalation is true: the operator refuses "
			      "it (" ALLOW_HINT ")", where, list, i);
	if (json_array_size(add))
		return refuse(r, "AddedCapabilities", "%s.spec.%s[%zu].securityContext."
			      "capabilities.add is not empty: the operator refuses "
			      "added capabilities (" ALLOW_HINT ")", where, list, i);
	return 0;
}

/* What --allow-privileged-templates allows: host namespaces, hostPath
 * volumes, the containers' security contexts. */
static int check_privileged(json_t *ts, const char *where, struct refusal *r)
{
	static const char *const host[] = { "hostNetwork", "hostPID", "hostIPC" };
	static const char *const lists[] = { "initContainers", "containers" };
	size_t i;
	json_t *x;

	for (int k = 0; k < 3; k++)
		if (json_is_true(json_object_get(ts, host[k])))
			return refuse(r, "HostNamespace", "%s.spec.%s is true: the "
				      "operator refuses the host's namespaces (" ALLOW_HINT
				      ")", where, host[k]);
	json_array_foreach(json_object_get(ts, "volumes"), i, x)
		if (json_object_get(x, "hostPath"))
			return refuse(r, "HostPathVolume", "%s.spec.volumes[%zu].hostPath "
				      "is set: the operator refuses hostPath volumes ("
				      ALLOW_HINT ")", where, i);
	for (int k = 0; k < 2; k++)
		json_array_foreach(json_object_get(ts, lists[k]), i, x)
			if (check_container(x, where, lists[k], i, r))
				return 1;
	return 0;
}

int pod_template_check(const struct pod_policy *p, json_t *tmpl,
		       const char *where, char *reason, size_t nreason,
		       char *msg, size_t nmsg)
{
	struct refusal r = { reason, msg, nreason, nmsg };
	json_t *ts = json_object_get(tmpl, "spec");
	const char *sa = json_string_value(json_object_get(ts, "serviceAccountName"));

	if (!json_is_object(ts))
		return 0;
	if (!p->allow_privileged && check_privileged(ts, where, &r))
		return 1;
	if (sa && !account_allowed(p, sa))
		return refuse(&r, "ServiceAccountNotAllowed", "%s.spec.serviceAccountName "
			      "is '%.64s', not an account the operator allows (default; "
			      "ddiloco operator --template-service-accounts names more)",
			      where, sa);
	return 0;
}
