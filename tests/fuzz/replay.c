/*
 * replay: runs one fuzz harness on files, without libFuzzer — every
 * regular file under tests/fuzz/corpus/<name>/ and tests/fuzz/regress/
 * <name>/ (or the files and folders given as arguments). A crash, a
 * sanitizer report (make check) or a harness assertion fails it; the
 * last line counts the inputs. Part of `make test` (docs/fuzzing.md).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/err.h"
#include "common/util.h"
#include "tests/fuzz/fuzz.h"

static int run_file(const char *path, long *n)
{
	void *buf, *exact;
	size_t len;
	struct err e;

	if (file_read_all(path, (size_t)1 << 24, &buf, &len, &e)) {
		fprintf(stderr, "replay: %s\n", e.msg);
		return -1;
	}
	/* an exact copy: a read past the end is caught under make check */
	exact = malloc(len ? len : 1);

	if (!exact) {
		free(buf);
		return -1;
	}
	memcpy(exact, buf, len);
	free(buf);
	LLVMFuzzerTestOneInput(exact, len);
	free(exact);
	(*n)++;
	return 0;
}

static int run_path(const char *path, long *n, int must_exist)
{
	struct stat st;
	struct dirent **ents;
	int k, rc = 0;

	if (stat(path, &st)) {
		if (!must_exist)
			return 0;
		fprintf(stderr, "replay: cannot read '%s'\n", path);
		return -1;
	}
	if (!S_ISDIR(st.st_mode))
		return run_file(path, n);
	if ((k = scandir(path, &ents, NULL, alphasort)) < 0)
		return -1;
	for (int i = 0; i < k; i++) {
		char sub[4096];

		if (ents[i]->d_name[0] != '.') {
			snprintf(sub, sizeof(sub), "%s/%s", path, ents[i]->d_name);
			if (run_path(sub, n, 1))
				rc = -1;
		}
		free(ents[i]);
	}
	free(ents);
	return rc;
}

int main(int argc, char **argv)
{
	long n = 0;
	int rc = 0;

	LLVMFuzzerInitialize(&argc, &argv);
	if (argc > 1) {
		for (int i = 1; i < argc; i++)
			if (run_path(argv[i], &n, 1))
				rc = 1;
	} else {
		char dir[256];

		snprintf(dir, sizeof(dir), "tests/fuzz/corpus/%s", fuzz_name);
		if (run_path(dir, &n, 1))
			rc = 1;
		snprintf(dir, sizeof(dir), "tests/fuzz/regress/%s", fuzz_name);
		if (run_path(dir, &n, 0))
			rc = 1;
	}
	printf("fuzz_%s: %ld inputs replayed%s\n", fuzz_name, n,
	       rc ? ", some could not be read" : "");
	return rc || n == 0;
}
