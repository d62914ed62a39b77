/*
 * ckpt_size: a checkpoint of a model of real size, written by the
 * syncer's writer thread (syncer/ckptw.h) while a run loop goes on
 * merging, against the disk's own rate in the same run.
 *
 *   disk_write_mb_s      the same bytes written with write(2) and one
 *                        fsync, nothing else running: the limit
 *   size_ckpt_write_s    the writer's checkpoint (header, Θ, momentum,
 *                        CRC, fsync, rename, pruning) while the loop
 *                        changes a fragment every LOOP_MS
 *   size_ckpt_vs_disk    disk time over checkpoint time (1 = at the disk)
 *   size_loop_stall_ms_max / _p99  what ckptw_touch cost the loop meanwhile
 *                        (the copy of a fragment set aside, or the wait for
 *                        the writer's copy of one fragment)
 *   size_restore_s       loading it back (syncer_ckpt_load_newest, its
 *                        pages dropped from the cache first)
 *
 * BENCH_CKPT_PARAMS (default 268435456: 256M, 2 GiB of Θ + momentum) and
 * BENCH_CKPT_FRAGS (32) set the size; the folder is under TMPDIR.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "syncer/ckpt.h"
#include "syncer/ckptw.h"

#define LOOP_MS 5
#define MAX_TOUCH 100000

struct loop {
	struct ckpt_writer *w;
	float *theta, *mom;
	const size_t *off;
	uint32_t P;
	volatile int stop;
	double stall[MAX_TOUCH];
	int n;
};

/* A run loop: every LOOP_MS the next fragment is merged (touched, then
 * changed), until stop. */
static void *loop_main(void *arg)
{
	struct loop *l = arg;

	for (uint32_t r = 0; !l->stop && l->n < MAX_TOUCH; r++) {
		uint32_t p = r % l->P;
		double t = clock_mono();

		ckptw_touch(l->w, p);
		l->stall[l->n++] = clock_mono() - t;
		for (size_t i = l->off[p]; i < l->off[p + 1]; i += 4096) {
			l->theta[i] += 1.0f;
			l->mom[i] += 1.0f;
		}
		sleep_seconds(LOOP_MS / 1000.0);
	}
	return NULL;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Drops the pages of every file in dir from the cache. */
static void drop_cache(const char *path)
{
	int fd = open(path, O_RDONLY);

	if (fd >= 0) {
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		close(fd);
	}
}

int main(void)
{
	const char *env = getenv("BENCH_CKPT_PARAMS"), *tmp = getenv("TMPDIR");
	uint64_t N = env ? strtoull(env, NULL, 10) : 268435456ull;
	uint32_t P = getenv("BENCH_CKPT_FRAGS")
		     ? (uint32_t)atoi(getenv("BENCH_CKPT_FRAGS")) : 32;
	char dir[4096], raw[4200], path[4200];
	struct ckpt_writer w;
	struct syncer_ckpt c = { 0 }, got;
	struct loop *l = calloc(1, sizeof(*l));
	size_t *off = calloc(P + 1, sizeof(*off));
	float *theta = malloc(N * sizeof(float)), *mom = malloc(N * sizeof(float));
	uint64_t versions[4096] = { 0 };
	struct ckpt_learner learners[4] = { { 0, 0 } };
	struct ckpt_eval *evals = calloc(1, sizeof(*evals));
	struct err e;
	double t, disk, wr, rs;
	pthread_t th;
	int fd;

	if (!l || !off || !theta || !mom || !evals || P == 0 || P > 4096) {
		fprintf(stderr, "ckpt_size: out of memory or bad fragment count\n");
		return 1;
	}
	for (uint32_t p = 0; p <= P; p++)
		off[p] = (size_t)(N * p / P);
	for (uint64_t i = 0; i < N; i++) {
		theta[i] = (float)(i % 1000) * 1e-3f;
		mom[i] = -theta[i];
	}
	snprintf(dir, sizeof(dir), "%s/ddiloco-ckpt-bench-%d", tmp ? tmp : "/tmp",
		 (int)getpid());
	if (mkdir_p(dir, &e)) {
		fprintf(stderr, "ckpt_size: %s\n", e.msg);
		return 1;
	}

	/* the disk alone: the same bytes, one fsync */
	snprintf(raw, sizeof(raw), "%s/raw", dir);
	t = clock_mono();
	fd = open(raw, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || fd_write_all(fd, theta, N * sizeof(float)) ||
	    fd_write_all(fd, mom, N * sizeof(float)) || fsync(fd)) {
		fprintf(stderr, "ckpt_size: cannot write '%s'\n", raw);
		return 1;
	}
	close(fd);
	disk = clock_mono() - t;
	drop_cache(raw);
	unlink(raw);

	/* the writer, with the loop merging meanwhile */
	c.fingerprint = 0xbe9c4;
	c.nfrags = P;
	c.nparams = N;
	c.nlearners = 4;
	c.rounds_completed = 7;
	c.versions = versions;
	c.learners = learners;
	c.evals = evals;
	if (ckptw_start(&w, dir, 3, P, off, theta, mom, 4, &e)) {
		fprintf(stderr, "ckpt_size: %s\n", e.msg);
		return 1;
	}
	*l = (struct loop){ .w = &w, .theta = theta, .mom = mom, .off = off,
			    .P = P };
	pthread_create(&th, NULL, loop_main, l);
	t = clock_mono();
	ckptw_submit(&w, &c, 0, &e);
	ckptw_wait(&w);
	wr = clock_mono() - t;
	l->stop = 1;
	pthread_join(th, NULL);
	ckptw_stop(&w);
	if (w.out.written != 1) {
		fprintf(stderr, "ckpt_size: the checkpoint was not written: %s\n",
			w.out.error);
		return 1;
	}
	snprintf(path, sizeof(path), "%s/syncer-%016llx-%012d.ckpt", dir,
		 (unsigned long long)c.fingerprint, 7);
	drop_cache(path);

	t = clock_mono();
	if (syncer_ckpt_load_newest(dir, c.fingerprint, P, N, 4, &got, NULL, 0,
				    &e) != 1) {
		fprintf(stderr, "ckpt_size: the checkpoint does not load\n");
		return 1;
	}
	rs = clock_mono() - t;
	/* what was handed over, not what the loop made of it since */
	for (uint64_t i = 0; i < N; i += 4093)
		if (got.theta[i] != (float)(i % 1000) * 1e-3f ||
		    got.momentum[i] != -got.theta[i]) {
			fprintf(stderr, "ckpt_size: parameter %llu is not the "
				"checkpoint's\n", (unsigned long long)i);
			return 1;
		}
	syncer_ckpt_release(&got);
	unlink(path);
	rmdir(dir);

	qsort(l->stall, (size_t)l->n, sizeof(double), cmp_d);
	printf("size_ckpt_params=%llu\n", (unsigned long long)N);
	printf("size_ckpt_fragments=%u\n", P);
	printf("disk_write_mb_s=%.1f\n", 8.0 * (double)N / disk / 1e6);
	printf("size_ckpt_write_s=%.3f\n", wr);
	printf("size_ckpt_vs_disk=%.3f\n", disk / wr);
	printf("size_loop_merges_during_ckpt=%d\n", l->n);
	printf("size_loop_stall_ms_p99=%.3f\n",
	       l->n ? 1e3 * l->stall[(size_t)(0.99 * (l->n - 1))] : 0.0);
	printf("size_loop_stall_ms_max=%.3f\n",
	       l->n ? 1e3 * l->stall[l->n - 1] : 0.0);
	printf("size_restore_s=%.3f\n", rs);
	free(theta);
	free(mom);
	free(off);
	free(evals);
	free(l);
	return 0;
}
