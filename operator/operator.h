/*
 * operator: the controller that runs DecoupledTrainingJobs. It wires the
 * informers (jobs and the six child kinds) to a work queue of job keys,
 * and its workers turn reconcile()'s decisions into API calls, Events and
 * a status written through the status subresource.
 */
#ifndef DDILOCO_OPERATOR_H
#define DDILOCO_OPERATOR_H

#include <signal.h>

#include "operator/children.h"
#include "operator/kube.h"
#include "operator/podtemplate.h"

struct operator_opts {
	struct kube_config cfg;
	char namespace_[64];          /* "" = every namespace */
	char http_addr[64];
	int http_port;                /* -1: no HTTP server */
	int chaos;                    /* run the chaos controller */
	int leader_elect;
	char lease_ns[64], lease_name[64], identity[128];
	char status_url[256];         /* {job} {namespace} {port} {shard} replaced */
	char operator_ns[64];         /* the operator's pods' namespace, for
					 the syncers' NetworkPolicies */
	int workers;
	double resync;                /* seconds between full resyncs */
	struct pod_policy policy;     /* what job templates may ask for */
	char external_storage[32];    /* an external model's claim before its
				       * size is known (children.h) */
	int manage_crd;               /* apply the job CRD at start (crd.h) */
	char runtime_image[256];      /* the syncer's and sidecars' image */
	char runtime_pull[16];        /* its imagePullPolicy */
	struct runtime_image runtime; /* the two above (children.h) */
};

#define OPERATOR_LOST_LEADERSHIP 3

/*
 * Runs until *stop becomes non-zero (returns 0), leadership is lost
 * (returns OPERATOR_LOST_LEADERSHIP, everything stopped and freed) or it
 * cannot start (returns 1).
 */
int operator_run(const struct operator_opts *o,
		 const volatile sig_atomic_t *stop);

#endif
