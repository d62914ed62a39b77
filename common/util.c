/*
 * util: clocks, checksums, the seeded generator and file helpers.
 * Nothing here keeps state except the CRC table, built on first use.
 */
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

unsigned long nofile_raise(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return 0;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl))
			getrlimit(RLIMIT_NOFILE, &rl);
	}
	return rl.rlim_cur == RLIM_INFINITY ? (unsigned long)-1
					    : (unsigned long)rl.rlim_cur;
}

double clock_mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double clock_wall(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct timespec clock_wall_after(double seconds)
{
	struct timespec ts;

	if (!(seconds > 0))
		seconds = 0;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)seconds;
	ts.tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

void sleep_seconds(double s)
{
	struct timespec ts;

	if (s <= 0)
		return;
	ts.tv_sec = (time_t)s;
	ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

uint32_t crc32_update(uint32_t crc, const void *data, size_t n)
{
	static uint32_t table[256];
	static int ready;
	const unsigned char *p = data;

	if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
		for (uint32_t i = 0; i < 256; i++) {
			uint32_t c = i;
			for (int k = 0; k < 8; k++)
				c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
			table[i] = c;
		}
		__atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
	}
	crc = ~crc;
	for (size_t i = 0; i < n; i++)
		crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
	return ~crc;
}

uint64_t fnv64_update(uint64_t h, const void *data, size_t n)
{
	const unsigned char *p = data;

	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

static uint64_t mix64(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	return h ^ (h >> 33);
}

uint64_t hash_floats(const float *x, size_t n)
{
	const uint64_t k = 0x9e3779b97f4a7c15ULL;
	uint64_t lane[4] = { 1, 2, 3, 4 }, w, h;
	size_t i = 0, words = n / 2;

	/* four independent lanes of two floats each */
	for (; i + 4 <= words; i += 4)
		for (int j = 0; j < 4; j++) {
			memcpy(&w, x + 2 * (i + (size_t)j), sizeof(w));
			lane[j] = (lane[j] ^ w) * k;
			lane[j] ^= lane[j] >> 29;
		}
	h = (uint64_t)n;
	for (int j = 0; j < 4; j++)
		h = mix64(h ^ lane[j]);
	for (i *= 2; i < n; i++) {
		uint32_t b;

		memcpy(&b, x + i, sizeof(b));
		h = mix64(h ^ b);
	}
	return h ? h : 1;
}

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

void rng_seed(struct rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

uint64_t rng_next(struct rng *r)
{
	uint64_t *s = r->s;
	uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return out;
}

double rng_uniform(struct rng *r)
{
	return (rng_next(r) >> 11) * 0x1.0p-53;
}

double rng_normal(struct rng *r)
{
	double u1 = rng_uniform(r), u2 = rng_uniform(r);

	if (u1 < 1e-300)
		u1 = 1e-300;
	return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

double rng_exponential(struct rng *r, double mean)
{
	return -mean * log(1.0 - rng_uniform(r));
}

static int fsync_dir_of(const char *path)
{
	char dir[PATH_MAX];
	char *slash;
	int fd, rc;

	snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (!slash)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == dir)
		dir[1] = 0;
	else
		*slash = 0;
	fd = open(dir, O_RDONLY | O_DIRECTORY);
	if (fd < 0)
		return -1;
	rc = fsync(fd);
	close(fd);
	return rc;
}

int fd_write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	size_t done = 0;

	while (done < n) {
		ssize_t w = write(fd, p + done, n - done);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		done += (size_t)w;
	}
	return 0;
}

int afile_open(struct afile *f, const char *path, struct err *e)
{
	snprintf(f->path, sizeof(f->path), "%s", path);
	snprintf(f->tmp, sizeof(f->tmp), "%s.tmp.%d", path, (int)getpid());
	f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (f->fd < 0)
		return err_set(e, "cannot create '%s': %s", f->tmp,
			       strerror(errno));
	return 0;
}

void afile_abort(struct afile *f)
{
	if (f->fd >= 0)
		close(f->fd);
	f->fd = -1;
	unlink(f->tmp);
}

int afile_commit(struct afile *f, struct err *e)
{
	if (fsync(f->fd)) {
		err_set(e, "cannot fsync '%s': %s", f->tmp, strerror(errno));
		afile_abort(f);
		return -1;
	}
	close(f->fd);
	f->fd = -1;
	if (rename(f->tmp, f->path)) {
		err_set(e, "cannot rename '%s' to '%s': %s", f->tmp, f->path,
			strerror(errno));
		unlink(f->tmp);
		return -1;
	}
	if (fsync_dir_of(f->path))
		return err_set(e, "cannot fsync the folder of '%s': %s",
			       f->path, strerror(errno));
	return 0;
}

int file_write_atomic(const char *path, const void *buf, size_t n,
		      struct err *e)
{
	struct afile f;

	if (afile_open(&f, path, e))
		return -1;
	if (fd_write_all(f.fd, buf, n)) {
		err_set(e, "cannot write '%s': %s", f.tmp, strerror(errno));
		afile_abort(&f);
		return -1;
	}
	return afile_commit(&f, e);
}

int file_read_all(const char *path, size_t max, void **out, size_t *outlen,
		  struct err *e)
{
	struct stat st;
	char *buf;
	size_t done = 0;
	int fd = open(path, O_RDONLY);

	if (fd < 0)
		return err_set(e, "cannot open '%s': %s", path, strerror(errno));
	if (fstat(fd, &st)) {
		close(fd);
		return err_set(e, "cannot stat '%s': %s", path, strerror(errno));
	}
	if ((size_t)st.st_size > max) {
		close(fd);
		return err_set(e, "'%s' is %lld bytes, more than the limit %zu",
			       path, (long long)st.st_size, max);
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		close(fd);
		return err_set(e, "out of memory reading '%s'", path);
	}
	while (done < (size_t)st.st_size) {
		ssize_t r = read(fd, buf + done, (size_t)st.st_size - done);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			free(buf);
			close(fd);
			return err_set(e, "cannot read '%s': %s", path,
				       r ? strerror(errno) : "short read");
		}
		done += (size_t)r;
	}
	close(fd);
	buf[done] = 0;
	*out = buf;
	*outlen = done;
	return 0;
}

int mkdir_p(const char *path, struct err *e)
{
	char buf[PATH_MAX];

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(buf, 0755) && errno != EEXIST)
			return err_set(e, "cannot create folder '%s': %s", buf,
				       strerror(errno));
		*p = '/';
	}
	if (mkdir(buf, 0755) && errno != EEXIST)
		return err_set(e, "cannot create folder '%s': %s", buf,
			       strerror(errno));
	return 0;
}
