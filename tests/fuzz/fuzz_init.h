/*
 * The LLVMFuzzerInitialize the harnesses share (docs/fuzzing.md): the
 * log quiet but for errors (DDILOCO_LOG=info to see more), and, in a
 * harness that defines FUZZ_MODEL_DIR (a folder name prefix) before it
 * includes this, the small job of tests/fuzz/fuzz_model.h as `fm`, its
 * checkpoint folder made fresh and removed at exit. A harness that needs
 * more at start (fuzz_exchange.c) writes its own and does not include
 * this. Included once, by the harness's .c: it defines the function.
 */
#ifndef DDILOCO_FUZZ_INIT_H
#define DDILOCO_FUZZ_INIT_H

#include <stdlib.h>

#include "common/log.h"
#include "tests/fuzz/fuzz.h"

#ifdef FUZZ_MODEL_DIR
#include <unistd.h>

#include "tests/fuzz/fuzz_model.h"

static struct fuzz_model fm;

static void fuzz_model_bye(void)
{
	fuzz_model_clean(&fm);
	rmdir(fm.dir);
}
#endif

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	setenv("DDILOCO_LOG", "error", 0);
	log_init("fuzz");
#ifdef FUZZ_MODEL_DIR
	if (fuzz_model_init(&fm, FUZZ_MODEL_DIR))
		abort();
	atexit(fuzz_model_bye);
#endif
	return 0;
}

#endif
