/*
 * util: small things every part needs: clocks, checksums, a seeded
 * random generator, atomic file writes and whole-file reads.
 */
#ifndef DDILOCO_UTIL_H
#define DDILOCO_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "common/err.h"

/* Seconds on the monotonic clock (for durations) and the wall clock. */
double clock_mono(void);
double clock_wall(void);
/* The CLOCK_REALTIME moment `seconds` from now, for pthread_cond_timedwait
 * (a negative wait is now). */
struct timespec clock_wall_after(double seconds);
void sleep_seconds(double s);

/* CRC-32 (IEEE); pass the previous value to continue, 0 to start. */
uint32_t crc32_update(uint32_t crc, const void *data, size_t n);
/* FNV-1a 64; pass the previous value to continue, FNV64_INIT to start. */
#define FNV64_INIT 0xcbf29ce484222325ULL
uint64_t fnv64_update(uint64_t h, const void *data, size_t n);
/* A 64-bit hash of n floats' bits, four words at a time (a model's
 * fragment is hashed at several GB/s); never 0, which says "no hash". */
uint64_t hash_floats(const float *x, size_t n);

/* splitmix64-seeded xoshiro256** generator: same seed, same stream. */
struct rng {
	uint64_t s[4];
};
void rng_seed(struct rng *r, uint64_t seed);
uint64_t rng_next(struct rng *r);
double rng_uniform(struct rng *r);          /* in [0, 1) */
double rng_normal(struct rng *r);           /* mean 0, sd 1 */
double rng_exponential(struct rng *r, double mean);

/*
 * Writes buf to path atomically: a temporary file in the same folder,
 * fsync, rename over path, fsync of the folder. On error path is untouched.
 */
int file_write_atomic(const char *path, const void *buf, size_t n,
		      struct err *e);
/*
 * The same, written in parts: afile_open creates the temporary file
 * (fd open for writing), afile_commit fsyncs it, renames it over the
 * path and fsyncs the folder; afile_abort removes it. Every afile_open
 * is ended by exactly one of the two.
 */
struct afile {
	int fd;
	char path[4096], tmp[4096 + 32];
};
int afile_open(struct afile *f, const char *path, struct err *e);
int afile_commit(struct afile *f, struct err *e);
void afile_abort(struct afile *f);
/* Writes all n bytes of buf to fd, again after EINTR; 0, or -1 with
 * errno set. */
int fd_write_all(int fd, const void *buf, size_t n);
/* Reads a whole file of at most max bytes into a new buffer (caller frees). */
int file_read_all(const char *path, size_t max, void **out, size_t *outlen,
		  struct err *e);
/*
 * Raises this process's soft limit of open descriptors to the hard one
 * (docs/security.md, Listeners: the HTTP and gRPC servers hold one per
 * connection). Returns the soft limit now in force.
 */
unsigned long nofile_raise(void);
/* mkdir -p. */
int mkdir_p(const char *path, struct err *e);

#endif
