/*
 * slowdisk: a disk that takes a checkpoint's bytes only when the test
 * lets it, for the checkpoint writer's `write` (syncer/ckpt.h, struct
 * ckpt_out). Header only; include it after <cmocka.h>.
 */
#ifndef DDILOCO_SLOWDISK_H
#define DDILOCO_SLOWDISK_H

#include <pthread.h>
#include <time.h>

#include "common/util.h"

struct slowdisk {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int open;        /* writes go through */
	int waiting;     /* writes that came to the closed disk so far */
};

#define SLOWDISK_INIT { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0 }

static inline int slowdisk_write(void *ctx, int fd, const void *buf, size_t n)
{
	struct slowdisk *d = ctx;

	pthread_mutex_lock(&d->mu);
	d->waiting++;
	pthread_cond_broadcast(&d->cv);
	while (!d->open)
		pthread_cond_wait(&d->cv, &d->mu);
	pthread_mutex_unlock(&d->mu);
	return fd_write_all(fd, buf, n);
}

/* Waits until *flag (under d->mu) or, without flag, until k writes came
 * to the disk; 10 s at most. Returns whether it happened. */
static inline int slowdisk_wait(struct slowdisk *d, int k, const int *flag)
{
	double until = clock_mono() + 10;
	struct timespec ts;
	int ok;

	pthread_mutex_lock(&d->mu);
	while (!(ok = flag ? *flag : d->waiting >= k) && clock_mono() < until) {
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 10000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&d->cv, &d->mu, &ts);
	}
	pthread_mutex_unlock(&d->mu);
	return ok;
}

static inline void slowdisk_open(struct slowdisk *d)
{
	pthread_mutex_lock(&d->mu);
	d->open = 1;
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->mu);
}

#endif
