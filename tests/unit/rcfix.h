/*
 * rcfix: the reconcile tests' fixture (test_reconcile.c,
 * test_reconcile_eval.c): a job of M learners at NOW, its pods in the
 * cache and the operator's memory of them, and finders over the actions
 * that come out. Header only; include it after <cmocka.h>.
 */
#ifndef DDILOCO_RCFIX_H
#define DDILOCO_RCFIX_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/pki.h"
#include "operator/children.h"
#include "operator/podcheck.h"
#include "operator/reconcile.h"

#define NOW 1800000000.0

struct fx {
	struct job_spec js;
	struct rc_input in;
	struct learner_mem mem[8];
	struct obs_pod pods[8];
	struct learner_mem ev_mem;
	struct obs_pod ev;
	struct rc_output out;
};

static inline void setup_fx(struct fx *f, int M)
{
	memset(f, 0, sizeof(*f));
	jobspec_defaults(&f->js);
	f->js.learners.replicas = M;
	f->in.spec = &f->js;
	f->in.now = NOW;
	f->in.backoff_limit = -1;
	f->in.backoff_reset = 600;
	f->in.retain = -1;
	f->in.active_deadline = -1;
	f->in.syncer_restart_limit = -1;
	f->in.syncer_restart_window = 600;
	f->in.pending_timeout = 300;
	f->in.pods = f->pods;
	f->in.want_pvc = 1;
	f->in.want_tls = 1;
}

/* Everything exists, Created is True, every learner Running and ready. */
static inline void running(struct fx *f)
{
	int M = f->js.learners.replicas;

	f->in.configmap = f->in.service = f->in.pvc = f->in.statefulset = 1;
	f->in.netpol = f->in.tls = 1;
	f->in.pvc_owned = 1;
	f->in.syncer_ready = 1;
	f->in.phase = PHASE_RUNNING;
	f->in.start_time = NOW - 100;
	cond_set(&f->in.conds[COND_CREATED], 1, "ChildrenCreated", "", "t0");
	for (int i = 0; i < M; i++) {
		f->pods[i].index = i;
		snprintf(f->pods[i].uid, sizeof(f->pods[i].uid), "uid-%d", i);
		f->pods[i].state = POD_RUNNING;
		f->pods[i].ready = 1;
		f->pods[i].ready_since = NOW - 100;
	}
	f->in.npods = M;
}

static inline int count(const struct rc_output *o, enum rc_kind k)
{
	int n = 0;

	for (int i = 0; i < o->nacts; i++)
		n += o->acts[i].kind == k;
	return n;
}

static inline const struct rc_action *find(const struct rc_output *o, enum rc_kind k)
{
	for (int i = 0; i < o->nacts; i++)
		if (o->acts[i].kind == k)
			return &o->acts[i];
	return NULL;
}

static inline const struct rc_action *find_event(const struct rc_output *o,
					  const char *reason)
{
	for (int i = 0; i < o->nacts; i++)
		if (o->acts[i].kind == ACT_EVENT && !strcmp(o->acts[i].reason, reason))
			return &o->acts[i];
	return NULL;
}

#endif
