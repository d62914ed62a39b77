/*
 * crd: the job CRD this operator was built with (docs/operator.md, The
 * CRD). Its text is crds/decoupledtrainingjobs.yaml, in the binary
 * (written as C by scripts/lint.py --crd-c into the build folder); its
 * metadata.annotations ddiloco.io/schema-hash is FNV-1a 64 of that text
 * without the hash line (`make crds` writes it, `make lint` checks it).
 *
 * At start the operator applies it (server-side apply, field manager
 * ddiloco-operator, forced), so a chart or image upgrade brings its CRD
 * with it: Helm never upgrades a chart's crds/. With --manage-crd off,
 * or when the apply is refused, it reads the served CRD instead and
 * compares the hashes: a CRD of another schema (older, or newer) is
 * said in the log, in a Warning Event in the operator's namespace and
 * in /metrics (ddiloco_operator_crd_current 0).
 */
#ifndef DDILOCO_OPERATOR_CRD_H
#define DDILOCO_OPERATOR_CRD_H

#include "common/err.h"

#define CRD_NAME "decoupledtrainingjobs.ddiloco.io"
#define CRD_OBJECT_PATH "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/" CRD_NAME

extern const char crd_text[];
extern const char crd_schema_hash[];

enum crd_state {
	CRD_UNKNOWN = 0,   /* not looked at yet, or the server did not say */
	CRD_APPLIED,       /* this operator's, applied at start */
	CRD_CURRENT,       /* served with this operator's schema */
	CRD_OTHER,         /* served with another schema */
	CRD_MISSING,       /* not served at all */
};

struct crd_check {
	enum crd_state state;
	char served[32];         /* the served CRD's hash ("" without one) */
	char why[512];           /* the apply's refusal, when it was */
};

struct kube;
/* Applies the CRD (manage) or compares it; fills out, logs, and posts a
 * Warning Event in namespace ns when the served one is another's. */
void crd_reconcile(struct kube *k, int manage, const char *ns,
		   struct crd_check *out);
/* "applied", "current", "other", "missing" or "unknown" */
const char *crd_state_name(enum crd_state s);

#endif
