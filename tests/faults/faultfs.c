/*
 * faultfs: disk faults for one folder, for a process started with
 * LD_PRELOAD=build/tests/libfaultfs.so (tests/integration/test_disk_faults.sh;
 * docs/syncer.md, Disk faults). No kernel module, no FUSE: the calls a
 * process makes on files under FAULTFS_DIR are answered by the fault
 * that the file FAULTFS_CTL names at the moment of the call, one word:
 *
 *   eio          write, pwrite, fsync and fdatasync fail with EIO
 *   enospc       write and pwrite fail with ENOSPC
 *   erofs        opening for writing, rename and unlink fail with EROFS
 *   fsync-slow N fsync and fdatasync take N seconds more, then succeed
 *   room N       statvfs says N bytes are free (a volume too small)
 *   (anything else, or no file) no fault
 *
 * The files are the ones opened under FAULTFS_DIR (the folder itself
 * too: its fsync is part of an atomic write); every other file and the
 * sockets pass through untouched.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_FD 65536

enum fault { F_NONE, F_EIO, F_ENOSPC, F_EROFS, F_SLOW, F_ROOM };

static unsigned char watched[MAX_FD];

static const char *dir_of_faults(void)
{
	return getenv("FAULTFS_DIR");
}

static int under(const char *path)
{
	const char *d = dir_of_faults();
	size_t n;

	if (!d || !*d || !path)
		return 0;
	n = strlen(d);
	return !strncmp(path, d, n) && (path[n] == '\0' || path[n] == '/');
}

/* the fault in force: FAULTFS_CTL read with raw system calls (no
 * recursion into the calls below) */
static enum fault fault_now(long long *arg)
{
	const char *ctl = getenv("FAULTFS_CTL");
	char buf[64];
	long fd, n;

	*arg = 0;
	if (!ctl)
		return F_NONE;
	fd = syscall(SYS_openat, AT_FDCWD, ctl, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return F_NONE;
	n = syscall(SYS_read, fd, buf, sizeof(buf) - 1);
	syscall(SYS_close, fd);
	if (n <= 0)
		return F_NONE;
	buf[n] = '\0';
	if (!strncmp(buf, "eio", 3))
		return F_EIO;
	if (!strncmp(buf, "enospc", 6))
		return F_ENOSPC;
	if (!strncmp(buf, "erofs", 5))
		return F_EROFS;
	if (!strncmp(buf, "fsync-slow ", 11)) {
		*arg = atoll(buf + 11);
		return F_SLOW;
	}
	if (!strncmp(buf, "room ", 5)) {
		*arg = atoll(buf + 5);
		return F_ROOM;
	}
	return F_NONE;
}

static int is_watched(int fd)
{
	return fd >= 0 && fd < MAX_FD && watched[fd];
}

static void watch(int fd, const char *path)
{
	if (fd >= 0 && fd < MAX_FD)
		watched[fd] = (unsigned char)under(path);
}

#define REAL(name) \
	static __typeof__(name) *real_; \
	if (!real_) \
		real_ = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)

static int open_common(int dirfd, const char *path, int flags, mode_t mode,
		       int at)
{
	static int (*real_open)(const char *, int, ...);
	static int (*real_openat)(int, const char *, int, ...);
	int fd;
	long long secs;

	if (under(path) && (flags & (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC)) &&
	    fault_now(&secs) == F_EROFS) {
		errno = EROFS;
		return -1;
	}
	if (at) {
		if (!real_openat)
			real_openat = (int (*)(int, const char *, int, ...))
				dlsym(RTLD_NEXT, "openat");
		fd = real_openat(dirfd, path, flags, mode);
	} else {
		if (!real_open)
			real_open = (int (*)(const char *, int, ...))
				dlsym(RTLD_NEXT, "open");
		fd = real_open(path, flags, mode);
	}
	watch(fd, path);
	return fd;
}

static mode_t mode_of(int flags, va_list ap)
{
	return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char *path, int flags, ...)
{
	va_list ap;
	mode_t m;

	va_start(ap, flags);
	m = mode_of(flags, ap);
	va_end(ap);
	return open_common(AT_FDCWD, path, flags, m, 0);
}

int open64(const char *path, int flags, ...)
{
	va_list ap;
	mode_t m;

	va_start(ap, flags);
	m = mode_of(flags, ap);
	va_end(ap);
	return open_common(AT_FDCWD, path, flags, m, 0);
}

int openat(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	mode_t m;

	va_start(ap, flags);
	m = mode_of(flags, ap);
	va_end(ap);
	return open_common(dirfd, path, flags, m, 1);
}

int close(int fd)
{
	REAL(close);
	if (fd >= 0 && fd < MAX_FD)
		watched[fd] = 0;
	return real_(fd);
}

static int write_fault(int fd)
{
	long long secs;

	if (!is_watched(fd))
		return 0;
	switch (fault_now(&secs)) {
	case F_EIO:
		return EIO;
	case F_ENOSPC:
		return ENOSPC;
	default:
		return 0;
	}
}

ssize_t write(int fd, const void *buf, size_t n)
{
	int err = write_fault(fd);

	REAL(write);
	if (err) {
		errno = err;
		return -1;
	}
	return real_(fd, buf, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
	int err = write_fault(fd);

	REAL(pwrite);
	if (err) {
		errno = err;
		return -1;
	}
	return real_(fd, buf, n, off);
}

/* EIO, or the slow disk's wait; 0 to go on */
static int sync_fault(int fd)
{
	struct timespec ts = { 0, 0 };
	long long secs;

	if (!is_watched(fd))
		return 0;
	switch (fault_now(&secs)) {
	case F_EIO:
		return EIO;
	case F_SLOW:
		ts.tv_sec = (time_t)secs;
		while (nanosleep(&ts, &ts) && errno == EINTR)
			;
		return 0;
	default:
		return 0;
	}
}

int fsync(int fd)
{
	int err = sync_fault(fd);

	REAL(fsync);
	if (err) {
		errno = err;
		return -1;
	}
	return real_(fd);
}

int fdatasync(int fd)
{
	int err = sync_fault(fd);

	REAL(fdatasync);
	if (err) {
		errno = err;
		return -1;
	}
	return real_(fd);
}

int rename(const char *from, const char *to)
{
	long long secs;

	REAL(rename);
	if ((under(from) || under(to)) && fault_now(&secs) == F_EROFS) {
		errno = EROFS;
		return -1;
	}
	return real_(from, to);
}

int unlink(const char *path)
{
	long long secs;

	REAL(unlink);
	if (under(path) && fault_now(&secs) == F_EROFS) {
		errno = EROFS;
		return -1;
	}
	return real_(path);
}

/* room N: the free blocks said are N bytes' worth */
static void room_fault(const char *path, struct statvfs *v)
{
	long long bytes;

	if (under(path) && fault_now(&bytes) == F_ROOM && v->f_frsize > 0)
		v->f_bavail = v->f_bfree = (fsblkcnt_t)bytes / v->f_frsize;
}

int statvfs(const char *path, struct statvfs *v)
{
	int rc;

	REAL(statvfs);
	rc = real_(path, v);
	if (!rc)
		room_fault(path, v);
	return rc;
}

int statvfs64(const char *path, struct statvfs64 *v)
{
	int rc;

	REAL(statvfs64);
	rc = real_(path, v);
	if (!rc)
		room_fault(path, (struct statvfs *)v);
	return rc;
}
