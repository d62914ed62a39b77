/*
 * fuzz_shard: the data reader (trainer/data.c) on one file's bytes, as a
 * token shard (header, count, tokens), as text, and found by its magic.
 * What it accepts must hold every token inside the vocabulary.
 */
#include <stdlib.h>

#include "tests/fuzz/fuzz_init.h"
#include "trainer/data.h"

const char fuzz_name[] = "shard";

static void one(const uint8_t *data, size_t size, enum data_format fmt,
		int vocab)
{
	struct dataset d = { 0 };
	struct err e;

	if (!dataset_add(&d, "fuzz.bin", data, size, fmt, vocab, &e)) {
		for (size_t i = 0; i < d.n; i++)
			if (d.tok[i] >= vocab)
				abort();
		/* a second file appended to the first */
		if (!dataset_add(&d, "fuzz2.bin", data, size, fmt, vocab, &e) &&
		    d.n % 2)
			abort();
	}
	dataset_release(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* the vocabulary from the last byte: small ones reject most tokens */
	int vocab = size ? 2 + data[size - 1] * 257 : 256;

	one(data, size, DATA_AUTO, vocab);
	one(data, size, DATA_TOKENS, vocab);
	one(data, size, DATA_TEXT, 256);
	return 0;
}
