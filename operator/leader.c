/*
 * leader: GET the Lease; create it when missing; renew it when ours;
 * take it over when its renewTime has not moved for a lease duration as
 * measured by our monotonic clock (clocks of two machines are never
 * compared). Release deletes the Lease when it is still ours.
 */
#include "operator/leader.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"

void leader_init(struct leader *l, struct kube *k, const char *ns,
		 const char *name, const char *identity)
{
	memset(l, 0, sizeof(*l));
	l->k = k;
	snprintf(l->ns, sizeof(l->ns), "%s", ns);
	snprintf(l->name, sizeof(l->name), "%s", name);
	snprintf(l->identity, sizeof(l->identity), "%s", identity);
}

static int write_lease(struct leader *l, json_t *lease, int create,
		       int acquire, struct err *e)
{
	char path[512], now[48];
	struct kube_status st;
	json_t *spec;
	char *body;
	int rc;

	kube_time_now(now, sizeof(now), 1);
	spec = json_object_get(lease, "spec");
	if (!spec) {
		spec = json_object();
		json_object_set_new(lease, "spec", spec);
	}
	json_object_set_new(spec, "holderIdentity", json_string(l->identity));
	json_object_set_new(spec, "leaseDurationSeconds",
			    json_integer((json_int_t)LEASE_DURATION));
	json_object_set_new(spec, "renewTime", json_string(now));
	if (acquire) {
		json_object_set_new(spec, "acquireTime", json_string(now));
		json_object_set_new(spec, "leaseTransitions", json_integer(
			json_integer_value(json_object_get(spec, "leaseTransitions")) +
			(create ? 0 : 1)));
	}
	if (create)
		snprintf(path, sizeof(path),
			 "/apis/coordination.k8s.io/v1/namespaces/%s/leases", l->ns);
	else
		snprintf(path, sizeof(path),
			 "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s",
			 l->ns, l->name);
	body = json_dumps(lease, JSON_COMPACT);
	rc = kube_request(l->k, create ? "POST" : "PUT", path, NULL, body, NULL,
			  &st, e);
	free(body);
	if (rc && st.code == 409)
		return 0;   /* someone else wrote first: not ours this round */
	if (rc)
		return -1;
	l->last_renew = clock_mono();
	if (acquire)
		log_info("leader: acquired lease %s/%s as '%s'", l->ns, l->name,
			 l->identity);
	return 1;
}

int leader_try(struct leader *l, struct err *e)
{
	char path[512];
	struct kube_status st;
	json_t *lease = NULL, *spec;
	const char *holder, *renew;
	double now = clock_mono(), dur;
	int r;

	snprintf(path, sizeof(path),
		 "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s", l->ns, l->name);
	if (kube_request(l->k, "GET", path, NULL, NULL, &lease, &st, e)) {
		if (st.code != 404) {
			r = -1;
			goto out;
		}
		lease = json_pack("{s:s, s:s, s:{s:s, s:s}}",
				  "apiVersion", "coordination.k8s.io/v1", "kind", "Lease",
				  "metadata", "name", l->name, "namespace", l->ns);
		r = write_lease(l, lease, 1, 1, e);
		goto out;
	}
	spec = json_object_get(lease, "spec");
	holder = json_string_value(json_object_get(spec, "holderIdentity"));
	renew = json_string_value(json_object_get(spec, "renewTime"));
	dur = (double)json_integer_value(json_object_get(spec, "leaseDurationSeconds"));
	if (dur <= 0)
		dur = LEASE_DURATION;
	if (holder && !strcmp(holder, l->identity)) {
		r = write_lease(l, lease, 0, 0, e);
		goto out;
	}
	if (!renew || strcmp(renew, l->seen_renew)) {
		snprintf(l->seen_renew, sizeof(l->seen_renew), "%s", renew ? renew : "");
		l->seen_at = now;
	}
	if (holder && holder[0] && now - l->seen_at < dur) {
		r = 0;   /* held and alive */
		goto out;
	}
	r = write_lease(l, lease, 0, 1, e);
out:
	json_decref(lease);
	if (r == 1) {
		l->is_leader = 1;
	} else if (r == 0) {
		if (l->is_leader)
			log_warn("leader: lease %s/%s is held by another", l->ns, l->name);
		l->is_leader = 0;
	} else if (l->is_leader && now - l->last_renew > LEASE_RENEW_DEADLINE) {
		log_warn("leader: could not renew within %.0fs", LEASE_RENEW_DEADLINE);
		l->is_leader = 0;
	}
	return r;
}

void leader_release(struct leader *l)
{
	char path[512], body[256];
	struct kube_status st;
	json_t *lease = NULL, *meta;
	const char *holder, *rv, *uid;

	if (!l->is_leader)
		return;
	l->is_leader = 0;
	snprintf(path, sizeof(path),
		 "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s", l->ns, l->name);
	if (kube_request(l->k, "GET", path, NULL, NULL, &lease, &st, NULL))
		return;
	meta = json_object_get(lease, "metadata");
	holder = json_string_value(json_object_get(json_object_get(lease, "spec"),
						   "holderIdentity"));
	rv = json_string_value(json_object_get(meta, "resourceVersion"));
	uid = json_string_value(json_object_get(meta, "uid"));
	/*
	 * Deleted, not left with an empty holder: an uninstalled operator
	 * leaves no Lease behind, and a standby creates it afresh. The
	 * preconditions make sure it is still the one we held as read.
	 */
	if (holder && !strcmp(holder, l->identity) && rv && uid) {
		snprintf(body, sizeof(body),
			 "{\"apiVersion\":\"v1\",\"kind\":\"DeleteOptions\","
			 "\"preconditions\":{\"uid\":\"%s\",\"resourceVersion\":\"%s\"}}",
			 uid, rv);
		kube_request(l->k, "DELETE", path, NULL, body, NULL, &st, NULL);
	}
	json_decref(lease);
}
