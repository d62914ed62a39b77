/*
 * leader: leader election on a coordination.k8s.io/v1 Lease, the way
 * client-go does it: the holder renews renewTime every retry period; a
 * candidate takes the Lease over when it has not seen renewTime change
 * for leaseDurationSeconds by its own clock. Every write is a PUT with
 * the resourceVersion just read, so two candidates never both win (the
 * loser gets 409). A leader that cannot renew within the renew deadline
 * must stop acting.
 */
#ifndef DDILOCO_LEADER_H
#define DDILOCO_LEADER_H

#include "operator/kube.h"

#define LEASE_DURATION 15.0
#define LEASE_RENEW_DEADLINE 10.0
#define LEASE_RETRY 2.0

struct leader {
	struct kube *k;
	char ns[64], name[64], identity[128];
	int is_leader;
	double last_renew;            /* monotonic, last successful renew */
	char seen_renew[48];          /* renewTime last observed */
	double seen_at;               /* when it was observed (monotonic) */
	long transitions;
};

void leader_init(struct leader *l, struct kube *k, const char *ns,
		 const char *name, const char *identity);
/*
 * One attempt to acquire or renew; returns 1 when this process holds the
 * Lease now, 0 when another does, -1 on an API error (then a leader
 * keeps acting until the renew deadline has passed).
 */
int leader_try(struct leader *l, struct err *e);
/* Gives the Lease up when held: deletes it if it is still ours. */
void leader_release(struct leader *l);

#endif
