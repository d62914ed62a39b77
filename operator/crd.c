/*
 * crd: apply or check the job CRD at start (see crd.h).
 */
#include "operator/crd.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "operator/children.h"
#include "operator/kube.h"

const char *crd_state_name(enum crd_state s)
{
	static const char *const names[] = { "unknown", "applied", "current",
					     "other", "missing" };

	return s <= CRD_MISSING ? names[s] : "unknown";
}

static int apply(struct kube *k, struct crd_check *out)
{
	struct kube_status st;
	struct err e;

	if (!kube_request(k, "PATCH", CRD_OBJECT_PATH "?fieldManager=" FIELD_MANAGER
			  "&force=true", "application/apply-patch+yaml", crd_text,
			  NULL, &st, &e)) {
		out->state = CRD_APPLIED;
		snprintf(out->served, sizeof(out->served), "%s", crd_schema_hash);
		log_info("crd: applied %s (schema %s)", CRD_NAME, crd_schema_hash);
		return 0;
	}
	snprintf(out->why, sizeof(out->why), "%s", e.msg);
	log_warn("crd: cannot apply %s (%s): checking the served one instead",
		 CRD_NAME, e.msg);
	return -1;
}

static void say_other(struct kube *k, const char *ns, json_t *crd,
		      const struct crd_check *c)
{
	char msg[512];
	json_t *about = json_pack("{s:{s:s,s:s,s:O?}}", "metadata", "name",
				  CRD_NAME, "namespace", ns, "uid",
				  json_object_get(json_object_get(crd, "metadata"),
						  "uid"));

	snprintf(msg, sizeof(msg), "the served CRD %s has schema %s, this operator "
		 "was built with %s: apply crds/decoupledtrainingjobs.yaml of "
		 "this release (kubectl apply --server-side), or run the operator "
		 "with --manage-crd", CRD_NAME, c->served[0] ? c->served : "(none)",
		 crd_schema_hash);
	log_warn("crd: %s", msg);
	if (about)
		kube_post_event(k, &(struct kube_event_post){
			.component = FIELD_MANAGER,
			.api_version = "apiextensions.k8s.io/v1",
			.kind = "CustomResourceDefinition", .about = about,
			.warning = 1, .reason = "CRDSchemaDiffers", .message = msg });
	json_decref(about);
}

static void compare(struct kube *k, const char *ns, struct crd_check *out)
{
	struct kube_status st;
	struct err e;
	json_t *crd = NULL;
	const char *h;

	if (kube_request(k, "GET", CRD_OBJECT_PATH, NULL, NULL, &crd, &st, &e)) {
		out->state = st.code == 404 ? CRD_MISSING : CRD_UNKNOWN;
		log_warn("crd: cannot read %s: %s", CRD_NAME, e.msg);
		return;
	}
	h = json_string_value(json_object_get(json_object_get(json_object_get(
		crd, "metadata"), "annotations"), "ddiloco.io/schema-hash"));
	snprintf(out->served, sizeof(out->served), "%s", h ? h : "");
	out->state = h && !strcmp(h, crd_schema_hash) ? CRD_CURRENT : CRD_OTHER;
	if (out->state == CRD_OTHER)
		say_other(k, ns, crd, out);
	else
		log_info("crd: %s is this operator's (schema %s)", CRD_NAME, h);
	json_decref(crd);
}

void crd_reconcile(struct kube *k, int manage, const char *ns,
		   struct crd_check *out)
{
	memset(out, 0, sizeof(*out));
	if (manage && !apply(k, out))
		return;
	compare(k, ns, out);
}
