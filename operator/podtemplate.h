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
 */
#ifndef DDILOCO_PODTEMPLATE_H
#define DDILOCO_PODTEMPLATE_H

#include <jansson.h>

/*
 * Merges tmpl (a PodTemplateSpec-shaped object, or NULL: nothing) into a
 * pod's metadata and spec as the table above says; `main` names the
 * container the template's container of that name merges into
 * ("learner" or "syncer"). Fields of the wrong JSON type are passed over
 * (the CRD's schema refuses them first).
 */
void pod_template_apply(json_t *meta, json_t *podspec, json_t *tmpl,
			const char *main);

#endif
