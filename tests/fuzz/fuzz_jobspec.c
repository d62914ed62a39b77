/*
 * fuzz_jobspec: the job file parser (common/jobspec_parse.c) on any text,
 * YAML or JSON by content as `ddiloco run` and the operator read it. A
 * spec it accepts must also pass jobspec_validate on its own (what the
 * parser accepted is a valid job), and its derived values must be sane.
 */
#include <stdlib.h>

#include "common/jobspec.h"
#include "tests/fuzz/fuzz_init.h"

const char fuzz_name[] = "jobspec";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct job_spec js;
	struct err e;

	if (size > (1 << 16))
		return 0;
	if (jobspec_parse((const char *)data, size, "fuzz.yaml", &js, &e))
		return 0;
	if (jobspec_validate(&js, &e) || jobspec_seq_len(&js) < 1 ||
	    jobspec_sync_every(&js) < 1)
		abort();   /* accepted, yet not a valid job */
	return 0;
}
