/*
 * podtemplate: spec.learners.template and spec.syncer.template, a
 * PodTemplateSpec-shaped overlay the platform team writes, merged into a
 * pod the operator built (docs/operator.md, "Pod templates"). Pure JSON
 * in, JSON out; no I/O.
 *
 * What the template may add, and who wins where both set a field:
 *
 *   template field                      merged as              winner
 *   metadata.labels, .annotations       added key by key       the operator's keys
 *   spec.nodeSelector                   added key by key       the template
 *   spec.tolerations, .imagePullSecrets appended               -
 *   spec.affinity, .topologySpreadConstraints, .priorityClassName,
 *     .serviceAccountName, .automountServiceAccountToken, .schedulerName,
 *     .runtimeClassName, .dnsConfig     set                    the template
 *   spec.securityContext                key by key             the template
 *   spec.volumes                        appended               the operator's names
 *   spec.initContainers                 before the operator's  the operator's names
 *   spec.containers[<main>]: env, envFrom, volumeMounts, ports appended
 *                                                              the operator's names and paths
 *     resources.requests, .limits       key by key             the template
 *     securityContext                   key by key             the template
 *     workingDir, lifecycle, livenessProbe, startupProbe  set  the template
 *     readinessProbe                    set when the pod has none
 *
 * Never from the template: the pod's and containers' names, the image,
 * the command and arguments (spec.learners.command/args), restartPolicy,
 * the learner's sidecar, and a container other than <main>.
 *
 * The policy (docs/operator.md, "Pod templates", Policy): before a job's
 * pods are made, pod_template_check refuses a template that asks for
 *
 *   field                                          reason
 *   spec.hostNetwork, .hostPID, .hostIPC true      HostNamespace
 *   spec.volumes[i].hostPath                       HostPathVolume
 *   <container>.securityContext.privileged true    PrivilegedContainer
 *   <container>.securityContext
 *     .allowPrivilegeEscalation true               PrivilegeEscalation
 *   <container>.securityContext.capabilities.add
 *     not empty                                    AddedCapabilities
 *   spec.serviceAccountName not allowed            ServiceAccountNotAllowed
 *
 * (<container>: spec.initContainers[i] and spec.containers[i]) unless
 * the operator runs with --allow-privileged-templates (all but the last)
 * or names the account in --template-service-accounts ("" and "default"
 * are always allowed: the account the operator's pods run as).
 */
#ifndef DDILOCO_PODTEMPLATE_H
#define DDILOCO_PODTEMPLATE_H

#include <jansson.h>
#include <stddef.h>

#include "common/err.h"

/*
 * Merges tmpl (a PodTemplateSpec-shaped object, or NULL: nothing) into a
 * pod's metadata and spec as the table above says; `main` names the
 * container the template's container of that name merges into
 * ("learner" or "syncer"). Fields of the wrong JSON type are passed over
 * (the CRD's schema refuses them first).
 */
void pod_template_apply(json_t *meta, json_t *podspec, json_t *tmpl,
			const char *main);

#define POD_POLICY_MAX_ACCOUNTS 32
#define POD_POLICY_NAME_MAX 254       /* a DNS-1123 subdomain and its NUL */

/* What templates may ask for (the table above); all zero: the default. */
struct pod_policy {
	int allow_privileged;         /* --allow-privileged-templates */
	int naccounts;                /* --template-service-accounts */
	char accounts[POD_POLICY_MAX_ACCOUNTS][POD_POLICY_NAME_MAX];
};

/*
 * Adds the comma-separated service account names of csv to p: each a
 * DNS-1123 subdomain, at most POD_POLICY_MAX_ACCOUNTS in all; an empty
 * item is an error.
 */
int pod_policy_add_accounts(struct pod_policy *p, const char *csv,
			    struct err *e);

/*
 * 0 when p allows tmpl (NULL: nothing to check); 1 when it refuses it,
 * with reason (the table's) and a message naming the field's path from
 * `where` (e.g. "spec.learners.template"): "spec.learners.template.spec.
 * containers[0].securityContext.privileged is true: ...". reason and
 * msg are written only then, cut to nreason and nmsg.
 */
int pod_template_check(const struct pod_policy *p, json_t *tmpl,
		       const char *where, char *reason, size_t nreason,
		       char *msg, size_t nmsg);

#endif
