/*
 * exchange_version: the versions each side of the exchange speaks, and
 * the check where they first meet (docs/exchange.md, Versions).
 *
 * The last 256 bytes of the region's 4096-byte header are kept for
 * them whatever the layout (exchange_layout.h):
 *
 *   | offset | size | what                                          |
 *   |--------|------|-----------------------------------------------|
 *   | 3840   | 64   | the learner side's block (struct xver)        |
 *   | 3904   | 64   | the sidecar's block                           |
 *   | 3968   | 128  | 0, kept                                       |
 *
 *   block:   sequence counter (odd while being written), magic
 *            "DDXVER01" (0: not written), ABI version, exchange
 *            version (uint32 each), the release as NUL-padded text
 *            (32 bytes), 0.
 *
 * Each side writes only its own block, under the block's sequence
 * counter, and reads the other's with the usual retry. A build from
 * before versions were exchanged leaves its block 0; it is taken as
 * not there (its layout, 1, is checked as before). The other side's
 * block is not trusted: its release is cut to printable characters.
 */
#include "common/exchange.h"
#include "common/exchange_layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#define VER_TRIES 8

_Static_assert(XLAYOUT == EXCHANGE_VERSION,
	       "the exchange version is the region's layout");

/* The test knob DDILOCO_TEST_ABI_VERSION=N: this process speaks ABI N
 * where the sides meet, as a library of another release would (make
 * test-e2e's job e2e-abi; docs/abi.md, Versions). */
void exchange_version_self(struct exchange_version *v)
{
	const char *t = getenv("DDILOCO_TEST_ABI_VERSION");

	memset(v, 0, sizeof(*v));
	v->abi = t && atoi(t) > 0 ? atoi(t) : EXCHANGE_ABI_VERSION;
	v->exchange = EXCHANGE_VERSION;
	snprintf(v->release, sizeof(v->release), "%s", DDILOCO_VERSION);
}

int exchange_versions_match(const struct exchange_version *l,
			    const struct exchange_version *s, char *msg,
			    size_t n)
{
	if (l->abi == s->abi && l->exchange == s->exchange)
		return 1;
	snprintf(msg, n, "learner library %s (ABI %u, exchange %u) and sidecar "
		 "%s (ABI %u, exchange %u) do not match", l->release, l->abi,
		 l->exchange, s->release, s->abi, s->exchange);
	return 0;
}

static struct xver *block(void *hdr, int role)
{
	return (struct xver *)((unsigned char *)hdr + XVER_OFF) +
	       (role == EXCHANGE_SIDECAR);
}

static void put(struct xver *b, const struct exchange_version *v)
{
	uint64_t words[4] = { 0 }, seq = __atomic_load_n(&b->seq, __ATOMIC_RELAXED);

	memcpy(words, v->release, strnlen(v->release, sizeof(words) - 1));
	__atomic_store_n(&b->seq, seq | 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	__atomic_store_n(&b->abi, v->abi, __ATOMIC_RELAXED);
	__atomic_store_n(&b->exchange, v->exchange, __ATOMIC_RELAXED);
	for (int i = 0; i < 4; i++)
		__atomic_store_n(&b->release[i], words[i], __ATOMIC_RELAXED);
	__atomic_store_n(&b->magic, XVER_MAGIC, __ATOMIC_RELAXED);
	__atomic_store_n(&b->seq, (seq | 1) + 1, __ATOMIC_RELEASE);
}

/* 1 with *v a consistent copy of the block, 0 when it is not written
 * (or kept changing under us: the next check reads it). */
static int get(struct xver *b, struct exchange_version *v)
{
	for (int t = 0; t < VER_TRIES; t++) {
		uint64_t s1 = __atomic_load_n(&b->seq, __ATOMIC_ACQUIRE), words[4];
		uint64_t magic = __atomic_load_n(&b->magic, __ATOMIC_RELAXED);

		if (s1 & 1)
			continue;
		v->abi = __atomic_load_n(&b->abi, __ATOMIC_RELAXED);
		v->exchange = __atomic_load_n(&b->exchange, __ATOMIC_RELAXED);
		for (int i = 0; i < 4; i++)
			words[i] = __atomic_load_n(&b->release[i], __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&b->seq, __ATOMIC_RELAXED) != s1)
			continue;
		if (magic != XVER_MAGIC)
			return 0;
		memcpy(v->release, words, sizeof(v->release) - 1);
		v->release[sizeof(v->release) - 1] = '\0';
		for (char *c = v->release; *c; c++)
			if (*c < 0x21 || *c > 0x7e)
				*c = '?';
		if (!v->release[0])
			snprintf(v->release, sizeof(v->release), "?");
		return 1;
	}
	return 0;
}

int xver_meet(void *hdr, int role, const struct exchange_version *self,
	      struct err *e)
{
	struct exchange_version own, peer;
	char msg[256];

	if (!get(block(hdr, role), &own) || own.abi != self->abi ||
	    own.exchange != self->exchange ||
	    strncmp(own.release, self->release, sizeof(own.release)))
		put(block(hdr, role), self);
	if (!get(block(hdr, !role), &peer))
		return 0;
	if (role == EXCHANGE_LEARNER ? exchange_versions_match(self, &peer, msg,
							       sizeof(msg))
				     : exchange_versions_match(&peer, self, msg,
							       sizeof(msg)))
		return 0;
	err_set(e, "%s", msg);
	return EXCHANGE_VERSION_MISMATCH;
}

int xver_peer(void *hdr, int role, struct exchange_version *v)
{
	return get(block(hdr, !role), v);
}

int xver_meet_fd(int fd, int role, const struct exchange_version *self,
		 struct err *e)
{
	struct stat st;
	void *m;
	int rc;

	if (fstat(fd, &st) || st.st_size < XHDR_SIZE)
		return 0;
	m = mmap(NULL, XHDR_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		return 0;   /* the region's own map says why */
	rc = xver_meet(m, role, self, e);
	munmap(m, XHDR_SIZE);
	return rc;
}
