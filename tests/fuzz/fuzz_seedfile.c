/*
 * fuzz_seedfile: the learner's seed file (common/exchange_file.c,
 * exchange_read_seed), which the sidecar reads and sends to an adopting
 * syncer as the job's initial weights (docs/syncer.md, Model-agnostic
 * jobs). The input is the file, written as DIR/seed (TMPDIR, else
 * /dev/shm), read for every fragment of a small table.
 *
 * What must hold: a fragment reads exactly when the file starts with the
 * magic, the table's fingerprint and fragment count, and holds the whole
 * fragment at its offset; what reads is those bytes, unchanged.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/exchange.h"
#include "common/log.h"
#include "common/util.h"
#include "tests/fuzz/fuzz.h"
#include "tests/fuzz/fuzz_model.h"

const char fuzz_name[] = "seedfile";

static const struct frag_tensor tens[3] = {
	{ .offset = 0, .numel = 5, .is_embedding = 1 },
	{ .offset = 5, .numel = 6, .is_embedding = 0 },
	{ .offset = 11, .numel = 2, .is_embedding = 0 },
};

static char dir[256], path[300];
static struct frag_table ft;

static void bye(void)
{
	unlink(path);
	rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	setenv("DDILOCO_LOG", "error", 0);
	log_init("fuzz");
	snprintf(dir, sizeof(dir), "%s/ddfuzz-sf-XXXXXX", fuzz_tmpdir());
	if (!mkdtemp(dir) || frag_table_init(&ft, tens, 3, 2, NULL))
		abort();
	snprintf(path, sizeof(path), "%s/%s", dir, EXCHANGE_SEED_FILE);
	atexit(bye);
	return 0;
}

/* The little-endian u64 at data + at. */
static uint64_t u64_at(const uint8_t *data, size_t at)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | data[at + (size_t)i];
	return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	float out[8];
	size_t off = 24;
	int head_ok;

	if (size > 4096 || file_write_atomic(path, data, size, NULL))
		return 0;
	head_ok = size >= 24 && !memcmp(data, "DDSEED01", 8) &&
		  u64_at(data, 8) == ft.fingerprint &&
		  u64_at(data, 16) == (uint64_t)ft.nfrags;
	for (int p = 0; p < ft.nfrags; p++) {
		size_t n = ft.frags[p].numel;
		int whole = head_ok && size >= off + 4 * n;
		int rc = exchange_read_seed(dir, &ft, p, out, NULL);

		if ((rc == 0) != whole)
			abort();
		if (rc == 0 && memcmp(out, data + off, 4 * n))
			abort();
		off += 4 * n;
	}
	return 0;
}
