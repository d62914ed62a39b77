/*
 * The libFuzzer entry points every harness in tests/fuzz defines
 * (docs/fuzzing.md). Built with clang -fsanitize=fuzzer by `make fuzz`;
 * built with the normal compiler and tests/fuzz/replay.c by `make test`,
 * which feeds each harness its seed corpus and its regression inputs.
 */
#ifndef DDILOCO_FUZZ_H
#define DDILOCO_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The folder name of the harness under tests/fuzz/{corpus,regress}. */
extern const char fuzz_name[];

#endif
