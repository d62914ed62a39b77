/*
 * fuzz_hwm: the syncer's high-water mark file (syncer/ckpt.c,
 * syncer_hwm_read; docs/syncer.md, Checkpoints), which a restarted
 * syncer reads from its volume before it hands out a round.
 *
 * Each input is written as `DIR/syncer-<fingerprint>-hwm` for the
 * fingerprint of the seeds, in a folder of TMPDIR (else /dev/shm) made
 * at the first input and removed at exit, and read twice: for as many
 * fragments as its versions line has numbers (at most HWM_MAX_FRAGS),
 * and for 2. A mark that reads is written back (syncer_hwm_write) and
 * must be the input's bytes but for leading zeros of its numbers, and
 * must read back to the same rounds and versions: what decodes is what
 * was written.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "syncer/ckpt.h"
#include "tests/fuzz/fuzz_init.h"
#include "tests/fuzz/fuzz_model.h"

const char fuzz_name[] = "hwm";

#define FP FM_HWM_FP

static char dir[512], path[600];
static uint64_t v1[HWM_MAX_FRAGS], v2[HWM_MAX_FRAGS];

static void bye(void)
{
	unlink(path);
	rmdir(dir);
}

/* The input with each number after the fingerprint line less its
 * leading zeros (hdr: the bytes of the magic and fingerprint lines). */
static char *canonical(const uint8_t *data, size_t size, size_t hdr,
		       size_t *n)
{
	char *o = malloc(size + 1);
	size_t k = 0;

	if (!o)
		abort();
	memcpy(o, data, hdr);
	k = hdr;
	for (size_t i = hdr; i < size; i++) {
		int digit_next = i + 1 < size && data[i + 1] >= '0' &&
				 data[i + 1] <= '9';
		int starts = k == 0 || o[k - 1] < '0' || o[k - 1] > '9';

		if (data[i] == '0' && digit_next && starts)
			continue;
		o[k++] = (char)data[i];
	}
	*n = k;
	return o;
}

static void roundtrip(const uint8_t *data, size_t size, const struct syncer_hwm *h)
{
	struct syncer_hwm back = { .versions = v2 };
	char head[128], *want;
	void *got;
	size_t glen, wlen, hdr;
	struct err e;

	if (syncer_hwm_write(dir, FP, h, &e) ||
	    file_read_all(path, (size_t)1 << 24, &got, &glen, &e))
		abort();
	hdr = (size_t)snprintf(head, sizeof(head), "%s\nfingerprint %016llx\n",
			       HWM_MAGIC, FP);
	want = canonical(data, size, hdr, &wlen);
	if (glen != wlen || memcmp(got, want, wlen))
		abort();
	if (syncer_hwm_read(dir, FP, h->nfrags, &back, &e) != 1 ||
	    back.rounds != h->rounds || back.nfrags != h->nfrags ||
	    memcmp(back.versions, h->versions, h->nfrags * sizeof(uint64_t)))
		abort();
	free(want);
	free(got);
}

/* Numbers on the versions line: the fragment count the input claims. */
static uint32_t claimed(const uint8_t *data, size_t size)
{
	const uint8_t *v = memmem(data, size, "\nversions", 9);
	uint32_t n = 0;

	for (const uint8_t *p = v; p && p < data + size && *p != '\0'; p++)
		n += *p == ' ';
	return n > HWM_MAX_FRAGS ? HWM_MAX_FRAGS : n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint32_t tries[2] = { claimed(data, size), 2 };
	struct err e;

	if (size > (1 << 20))
		return 0;
	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "%s/ddfuzz-hwm-XXXXXX", fuzz_tmpdir());
		if (!mkdtemp(dir))
			abort();
		snprintf(path, sizeof(path), "%s/syncer-%016llx-hwm", dir, FP);
		atexit(bye);
	}
	for (int t = 0; t < 2; t++) {
		struct syncer_hwm h = { .versions = v1 };
		int rc;

		if (file_write_atomic(path, data, size, &e))
			abort();
		rc = syncer_hwm_read(dir, FP, tries[t], &h, &e);
		if (rc != -1 && rc != 1)
			abort();   /* the file is there: 0 would be "none" */
		if (rc == 1 && h.nfrags != tries[t])
			abort();
		if (rc == 1)
			roundtrip(data, size, &h);
	}
	return 0;
}
