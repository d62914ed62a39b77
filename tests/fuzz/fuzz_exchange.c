/*
 * fuzz_exchange: the exchange region (common/exchange.c) as an image
 * written by someone else. A learner and a sidecar are attached to one
 * region of a small fragment table; each input is written over the whole
 * file (cut or padded with zeros to its size) while both are attached,
 * and both sides then do everything they do each step: the learner
 * starts or polls (check, stats, pulls served, updates applied) and reads
 * its resume step, the sidecar checks, looks at and takes every answer
 * (as a copy, or every other input held in place and read),
 * reads the stats, publishes an update and posts a pull. Every fourth
 * input a third side also attaches to the image (exchange_open's checks).
 *
 * What must hold: no access outside the buffers (the sanitizers), the
 * learner's parameters stay finite when the inbox held finite values
 * (the fuzzer's floats are kept finite by the harness), and after both
 * sides checked, the header and the table are what the table says (a
 * second check finds nothing to repair).
 */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/exchange.h"
#include "common/log.h"
#include "tests/fuzz/fuzz.h"
#include "tests/fuzz/fuzz_model.h"

const char fuzz_name[] = "exchange";

/* three tensors in two fragments (tests/unit/test_exchange.c) */
static const struct frag_tensor tens[3] = {
	{ .offset = 0, .numel = 5, .is_embedding = 1 },
	{ .offset = 5, .numel = 6, .is_embedding = 0 },
	{ .offset = 11, .numel = 2, .is_embedding = 0 },
};
#define NPARAM 13

static char dir[256], path[300];
static struct frag_table ft;
static struct exchange *ln, *sc;
static int fd = -1;
static size_t region_size;
static unsigned long inputs;

static void bye(void)
{
	char p[400];

	exchange_close(ln);
	exchange_close(sc);
	if (fd >= 0)
		close(fd);
	unlink(path);
	snprintf(p, sizeof(p), "%s/%s", dir, EXCHANGE_LEARNER_SOCK);
	unlink(p);
	snprintf(p, sizeof(p), "%s/%s", dir, EXCHANGE_SIDECAR_SOCK);
	unlink(p);
	snprintf(p, sizeof(p), "%s/third", dir);
	rmdir(p);
	rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *tmp = fuzz_tmpdir();
	struct stat st;
	struct err e;

	(void)argc;
	(void)argv;
	setenv("DDILOCO_LOG", "error", 0);   /* DDILOCO_LOG=info to see */
	log_init("fuzz");
	snprintf(dir, sizeof(dir), "%s/ddfuzz-x-XXXXXX", tmp);
	if (!mkdtemp(dir) || frag_table_init(&ft, tens, 3, 2, NULL))
		abort();
	snprintf(path, sizeof(path), "%s/%s", dir, EXCHANGE_FILE);
	if (exchange_open(dir, EXCHANGE_LEARNER, &ft, &ln, &e) ||
	    exchange_open(dir, EXCHANGE_SIDECAR, &ft, &sc, &e)) {
		fprintf(stderr, "fuzz_exchange: %s\n", e.msg);
		abort();
	}
	fd = open(path, O_RDWR);
	if (fd < 0 || fstat(fd, &st))
		abort();
	region_size = (size_t)st.st_size;
	atexit(bye);
	return 0;
}

/* Writes the image over the region; float payloads made finite. */
static void write_image(const uint8_t *data, size_t size)
{
	uint8_t *img = calloc(1, region_size);

	if (!img)
		abort();
	memcpy(img, data, size < region_size ? size : region_size);
	/* the slots' floats (each fragment's four slots follow the header
	 * and the table's page; a slot is 64 bytes of header, then numel
	 * floats, 64-aligned) */
	for (size_t off = 8192, p = 0; p < (size_t)ft.nfrags; p++) {
		size_t n = ft.frags[p].numel, slot = (64 + 4 * n + 63) & ~63ul;

		for (int k = 0; k < 4; k++, off += slot)
			for (size_t i = 0; i < n; i++) {
				size_t at = off + 64 + 4 * i;
				float f;

				if (at + 4 > region_size)
					abort();
				memcpy(&f, img + at, 4);
				if (!isfinite(f) || fabsf(f) > 1e6f) {
					f = 0.5f;
					memcpy(img + at, &f, 4);
				}
			}
	}
	if (pwrite(fd, img, region_size, 0) != (ssize_t)region_size)
		abort();
	free(img);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static float params[NPARAM];
	struct exchange_step stp = { .step = 3, .tokens = 64,
				     .tokens_total = 192, .loss = 1.0,
				     .step_time = 0.01 };
	struct exchange_poll_result res;
	struct exchange_stats stats;
	struct exchange_counters c;
	struct exchange_answer a;
	float buf[8];
	uint64_t step;

	if (size > region_size + 4096)
		return 0;
	for (int i = 0; i < NPARAM; i++)
		params[i] = 1.0f;
	write_image(data, size);
	if (inputs++ % 4 == 0) {
		struct exchange *x3;
		struct err e;
		char d3[300];

		/* a fresh side attaching to the image, in a folder of its own
		 * so that its socket does not replace the learner's */
		snprintf(d3, sizeof(d3), "%s/third", dir);
		mkdir(d3, 0700);
		{
			char p3[400], s3[400];

			snprintf(p3, sizeof(p3), "%s/%s", d3, EXCHANGE_FILE);
			unlink(p3);
			if (link(path, p3) == 0 &&
			    !exchange_open(d3, EXCHANGE_LEARNER, &ft, &x3, &e))
				exchange_close(x3);
			unlink(p3);
			snprintf(s3, sizeof(s3), "%s/%s", d3,
				 EXCHANGE_LEARNER_SOCK);
			unlink(s3);
		}
	}
	/* the sidecar's loop */
	exchange_check(sc);
	for (int p = 0; p < 2; p++) {
		const float *v;
		struct exchange_hold *h;
		float sum = 0.0f;

		memset(buf, 0, sizeof(buf));
		if (!exchange_answer_ready(sc, p))
			continue;
		/* every other input: held in place, its values all read */
		if ((inputs & 1) &&
		    exchange_hold_answer(sc, p, &a, &v, &h) >= 0) {
			for (size_t i = 0; h && i < exchange_frag_numel(sc, p); i++)
				sum += v[i];
			if (h)
				exchange_release(h);
			if (!isfinite(sum))   /* the harness keeps slots finite */
				abort();
		} else {
			exchange_take_answer(sc, p, &a, buf);
		}
	}
	exchange_read_stats(sc, &stats);
	(void)exchange_inbox_version(sc, 0);
	/* the learner's step */
	exchange_put_stats(ln, &stp);
	if (exchange_learner_start(ln, params))
		exchange_poll(ln, params, &stp, &res);
	exchange_poll(ln, params, &stp, &res);
	(void)exchange_resume(ln, &step);
	(void)exchange_is_done(ln);
	for (int i = 0; i < NPARAM; i++)
		if (!isfinite(params[i]))
			abort();   /* finite inbox, finite α mix: must stay finite */
	/* the sidecar again: an update and a pull */
	{
		float *slot = exchange_inbox_begin(sc, 1);

		for (size_t i = 0; i < exchange_frag_numel(sc, 1); i++)
			slot[i] = 2.0f;
		exchange_inbox_commit(sc, 1, 9);
		exchange_post_pull(sc, 0, 4);
	}
	exchange_check(sc);
	exchange_check(ln);
	if (exchange_check(ln) || exchange_check(sc))
		abort();   /* repaired, yet still not right */
	exchange_counters(sc, &c);
	exchange_counters(ln, &c);
	return 0;
}
