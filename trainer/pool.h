/*
 * pool: a fixed set of threads that run one loop at a time, split into
 * contiguous equal chunks — the trainer's O(B·T·C) loops next to the
 * OpenBLAS threads. The split depends only on the loop length and the
 * thread count, so a run is deterministic for a given thread count.
 *
 * A NULL pool (or one thread) runs the loop in the caller.
 */
#ifndef DDILOCO_POOL_H
#define DDILOCO_POOL_H

#include <stddef.h>

#define POOL_MAX_THREADS 256

struct pool;

/* fn handles items [lo, hi) of the loop; chunk is 0 .. nthreads−1. */
typedef void (*pool_fn)(void *arg, size_t lo, size_t hi, int chunk);

struct pool *pool_new(int nthreads);
void pool_free(struct pool *p);
int pool_threads(const struct pool *p);
/* Runs fn over [0, n) on every thread of the pool; returns when all did. */
void pool_run(struct pool *p, pool_fn fn, void *arg, size_t n);

#endif
