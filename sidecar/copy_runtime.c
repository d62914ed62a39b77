/*
 * `ddiloco copy-runtime --to DIR`: the learner side of ddiloco, copied
 * out of the runtime image for a learner image that holds none of it
 * (docs/operator.md, Images). The image keeps it under lib/ddiloco beside
 * the binary's folder (/usr/local/lib/ddiloco): lib/ with libddiloco.so
 * and the libraries it needs, each found beside it ($ORIGIN), and
 * python/ with the package. The operator runs this as an init container
 * into an emptyDir that the learner container mounts read-only, with
 * DDILOCO_LIB and PYTHONPATH set to lib/libddiloco.so and python/.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmds.h"
#include "common/cli.h"
#include "common/err.h"

struct tally {
	long files;
	long long bytes;
};

/* One regular file, its permission bits kept but for write by others. */
static int copy_file(const char *from, const char *to, mode_t mode,
		     struct tally *t, struct err *e)
{
	char buf[1 << 16];
	int in, out;
	ssize_t n = 0;

	if ((in = open(from, O_RDONLY | O_CLOEXEC)) < 0)
		return err_set(e, "cannot read '%s': %s", from, strerror(errno));
	out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode & 0755);
	if (out < 0) {
		close(in);
		return err_set(e, "cannot write '%s': %s", to, strerror(errno));
	}
	while ((n = read(in, buf, sizeof(buf))) > 0) {
		for (ssize_t off = 0; off < n;) {
			ssize_t w = write(out, buf + off, (size_t)(n - off));

			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0) {
				n = -1;
				break;
			}
			off += w;
		}
		if (n < 0)
			break;
		t->bytes += n;
	}
	if (n < 0 || fchmod(out, mode & 0755) || close(out)) {
		err_set(e, "cannot write '%s': %s", to, strerror(errno));
		close(in);
		return -1;
	}
	close(in);
	t->files++;
	return 0;
}

/* The tree under `from` into `to` (made): folders and regular files, a
 * symbolic link as the file it names. */
static int copy_tree(const char *from, const char *to, struct tally *t,
		     struct err *e)
{
	char a[PATH_MAX], b[PATH_MAX];
	struct dirent *d;
	struct stat st;
	DIR *dir;
	int rc = 0;

	if (mkdir(to, 0755) && errno != EEXIST)
		return err_set(e, "cannot make '%s': %s", to, strerror(errno));
	if (!(dir = opendir(from)))
		return err_set(e, "cannot read '%s': %s", from, strerror(errno));
	while (!rc && (d = readdir(dir))) {
		if (!strcmp(d->d_name, ".") || !strcmp(d->d_name, ".."))
			continue;
		if ((size_t)snprintf(a, sizeof(a), "%s/%s", from, d->d_name) >= sizeof(a) ||
		    (size_t)snprintf(b, sizeof(b), "%s/%s", to, d->d_name) >= sizeof(b))
			rc = err_set(e, "a path under '%s' is too long", from);
		else if (stat(a, &st))
			rc = err_set(e, "cannot read '%s': %s", a, strerror(errno));
		else if (S_ISDIR(st.st_mode))
			rc = copy_tree(a, b, t, e);
		else if (S_ISREG(st.st_mode))
			rc = copy_file(a, b, st.st_mode, t, e);
	}
	closedir(dir);
	return rc;
}

/* lib/ddiloco beside the folder of the running binary */
static int default_from(char *out, size_t n, struct err *e)
{
	char exe[PATH_MAX];
	ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	char *slash;

	if (len <= 0)
		return err_set(e, "cannot find the running binary: %s",
			       strerror(errno));
	exe[len] = 0;
	if (!(slash = strrchr(exe, '/')))
		return err_set(e, "the running binary '%s' has no folder", exe);
	*slash = 0;
	if ((size_t)snprintf(out, n, "%s/../lib/ddiloco", exe) >= n)
		return err_set(e, "the path '%s' is too long", exe);
	return 0;
}

int cmd_copy_runtime(int argc, char **argv)
{
	const char *to = NULL, *from_opt = NULL;
	const struct cli_option opts[] = {
		CLI_TEXT("usage: ddiloco copy-runtime --to DIR [--from DIR]\n"
			 "\n"
			 "Copies the learner side of ddiloco (lib/libddiloco.so with the\n"
			 "libraries it needs, python/ddiloco) into DIR, for a learner image\n"
			 "that holds none of it: DDILOCO_LIB=DIR/lib/libddiloco.so,\n"
			 "PYTHONPATH=DIR/python (docs/operator.md, Images).\n"),
		CLI_STRING("to", 0, &to, "DIR", "where the files go (made if missing)"),
		CLI_STRING("from", 0, &from_opt, "DIR",
			   "where they are (default: lib/ddiloco beside the\n"
			   "binary's folder, as the runtime image has them)"),
		CLI_END(),
	};
	char from[PATH_MAX], lib[PATH_MAX + 32];
	struct tally t = { 0 };
	struct stat st;
	struct err e;
	int n;

	n = cli_parse(opts, argc, argv, &e);
	if (n < 0)
		return cli_exit_code(opts, "ddiloco copy-runtime", n, &e);
	if (n > 0 || !to) {
		err_set(&e, n > 0 ? "unexpected argument" : "--to DIR is required");
		return cli_exit_code(opts, "ddiloco copy-runtime", -1, &e);
	}
	if (from_opt)
		snprintf(from, sizeof(from), "%s", from_opt);
	else if (default_from(from, sizeof(from), &e))
		goto fail;
	snprintf(lib, sizeof(lib), "%s/lib/libddiloco.so", from);
	if (stat(lib, &st) || !S_ISREG(st.st_mode)) {
		err_set(&e, "'%s' is missing: '%s' is not a ddiloco runtime's "
			"files (is this the runtime image?)", lib, from);
		goto fail;
	}
	if (copy_tree(from, to, &t, &e))
		goto fail;
	printf("copy-runtime: %ld files, %lld bytes from '%s' to '%s'\n",
	       t.files, t.bytes, from, to);
	return 0;
fail:
	fprintf(stderr, "ddiloco copy-runtime: %s\n", e.msg);
	return 1;
}
