/*
 * fuzz_ckpt: the syncer's checkpoint loader (syncer/ckpt.c) and what the
 * syncer does with a checkpoint it loaded (syncer/core.c, core_init).
 *
 * Each input is decoded three ways: as it is against a small fixed model
 * (P = 2, N = 24, L = 3, the fingerprint of the seeds); with the CRC
 * recomputed, so mutations get past the checksum to the fields behind it;
 * and, CRC fixed, against the P, N, L and fingerprint its own header
 * claims, so the size checks meet any shape (what decodes must encode to
 * the same bytes). A checkpoint that decodes
 * for the fixed model is written to a folder and a syncer core started
 * from it, as a restarted syncer would.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "syncer/ckpt.h"
#include "syncer/syncer_int.h"
/* fm: the small job, made before the first input */
#define FUZZ_MODEL_DIR "ddfuzz-ckpt"
#include "tests/fuzz/fuzz_init.h"

const char fuzz_name[] = "ckpt";

static uint32_t u32_at(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

static uint64_t u64_at(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

/* What was decoded encodes to the same bytes (but the zero word at 44,
 * which is not kept, and so the CRC). */
static void roundtrip(const uint8_t *data, size_t size,
		      const struct syncer_ckpt *c)
{
	void *out;
	size_t len;
	struct err e;

	if (syncer_ckpt_encode(c, &out, &len, &e))
		return;   /* out of memory */
	if (len != size || memcmp(out, data, 44) ||
	    memcmp((uint8_t *)out + 48, data + 48, size - 52))
		abort();
	free(out);
}

/* Loaded as the syncer loads it at start; the folder is emptied after. */
static void start_from(const uint8_t *data, size_t size)
{
	char path[600];
	struct syncer *s = calloc(1, sizeof(*s));
	struct err e;

	snprintf(path, sizeof(path), "%s/syncer-000000000001.ckpt", fm.dir);
	if (s && !file_write_atomic(path, data, size, &e)) {
		if (!core_init(s, &fm.prm, 100.0, &e)) {
			(void)core_uptime(s, 101.0);
			(void)core_goodput(s, 101.0);
			(void)core_check_budget(s, 101.0);
		}
		core_release(s);
	}
	free(s);
	fuzz_model_clean(&fm);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct syncer_ckpt c;
	struct err e;
	uint8_t *fixed;

	if (size > (1 << 20))
		return 0;
	if (!syncer_ckpt_decode(data, size, "fuzz", fm.ft.fingerprint, FM_P,
				FM_N, FM_M, &c, &e))
		syncer_ckpt_release(&c);
	if (size < 48)
		return 0;
	fixed = malloc(size);
	if (!fixed)
		return 0;
	memcpy(fixed, data, size);
	{
		uint32_t crc = crc32_update(0, fixed, size - 4);

		memcpy(fixed + size - 4, &crc, 4);
	}
	if (!syncer_ckpt_decode(fixed, size, "fuzz", fm.ft.fingerprint, FM_P,
				FM_N, FM_M, &c, &e)) {
		syncer_ckpt_release(&c);
		start_from(fixed, size);
	}
	if (!syncer_ckpt_decode(fixed, size, "fuzz", u64_at(fixed + 24),
				u32_at(fixed + 12), u64_at(fixed + 16),
				u32_at(fixed + 32), &c, &e)) {
		roundtrip(fixed, size, &c);
		syncer_ckpt_release(&c);
	}
	free(fixed);
	return 0;
}
