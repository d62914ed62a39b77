/*
 * exchange_layout: the words of the exchange region as structs, for the
 * exchange's own files only (common/exchange.c, common/exchange_file.c);
 * the region is drawn in common/exchange.h and docs/exchange.md.
 */
#ifndef DDILOCO_EXCHANGE_LAYOUT_H
#define DDILOCO_EXCHANGE_LAYOUT_H

#include <stdint.h>

#include "common/err.h"

#define XMAGIC   0x3130474843584444ULL   /* "DDXCHG01" little-endian */
#define XLAYOUT  1
#define XHDR_SIZE 4096
#define XSLOT_HDR 64
#define PATH_MAX_EXCH 4096
#define XSLOT_RELEASED 1u       /* slot flags: its pages were given back */
/* The version blocks (docs/exchange.md, Versions): the learner's at
 * XVER_OFF, the sidecar's after it. Their place is fixed for every
 * layout, so two builds of different layouts still read each other's. */
#define XVER_OFF   3840
#define XVER_MAGIC 0x3130524556584444ULL   /* "DDXVER01" little-endian */

struct xhdr {
	uint64_t magic;
	uint32_t layout, nfrags;
	uint64_t size, fingerprint, data_off;
	uint64_t done;                  /* sidecar */
	uint64_t alpha_bits;            /* sidecar, a double */
	uint64_t sidecar_pid;           /* sidecar */
	uint64_t st_seq;                /* learner stats, seqlock */
	uint64_t st_incarnation, st_pid, st_step, st_tokens;
	uint64_t st_loss, st_step_time, st_wall;   /* doubles */
	uint64_t rs_seq;                /* resume step, seqlock (sidecar) */
	uint64_t rs_step, rs_incarnation;
	uint64_t ev_seq;                /* an evaluator's report, seqlock
					 * (learner side; docs/syncer.md,
					 * Evaluators) */
	uint64_t ev_count, ev_round, ev_loss, ev_tokens;   /* ev_loss: a double */
	uint64_t hold_incarnation;      /* learner: the incarnation that keeps
					 * off a held outbox slot (0: an older
					 * build, which does not) */
};

struct xfrag {
	uint64_t numel;
	uint64_t in_gen;        /* sidecar: newest inbox generation */
	uint64_t in_applied;    /* learner: generation applied */
	uint64_t pull_round;    /* sidecar: round asked for (0 = none) */
	uint64_t pull_served;   /* learner: round answered */
	uint64_t out_gen;       /* learner: newest outbox generation */
	uint64_t out_hold[2];   /* sidecar: per outbox slot, the generation
				 * it is sending from there (0: none) */
	uint64_t out_taken;     /* sidecar: newest outbox generation it is
				 * done with (copied, or sent and released;
				 * docs/exchange.md, Pages given back) */
	uint64_t pad[7];
};

struct xslot {
	uint64_t seq;           /* odd while being written */
	uint64_t gen;
	uint64_t version;       /* inbox: fragment version; outbox: round */
	uint64_t base_version, steps, tokens;
	uint64_t step;          /* outbox: the learner's step; inbox: the
				 * round the update came from */
	uint64_t flags;
};

/* One side's versions, under its own sequence counter (odd while being
 * written); magic 0: that side has not written them (not attached yet,
 * or a build from before versions were exchanged). */
struct xver {
	uint64_t seq;
	uint64_t magic;
	uint32_t abi, exchange;
	uint64_t release[4];    /* NUL-padded text, e.g. "0.4.0" */
	uint64_t pad;
};

struct exchange_version;
/* common/exchange_version.c: this side's block written when it is not
 * what it must be, the other side's compared; 0 when that side has not
 * written one or they match, EXCHANGE_VERSION_MISMATCH with e filled. */
int xver_meet(void *hdr, int role, const struct exchange_version *self,
	      struct err *e);
/* The other side's block: 1 with *v written, 0 when not written. */
int xver_peer(void *hdr, int role, struct exchange_version *v);
/* The same on the header of an open region file of any layout (one
 * too short to hold a header: 0, nothing to meet). */
int xver_meet_fd(int fd, int role, const struct exchange_version *self,
		 struct err *e);

_Static_assert(sizeof(struct xhdr) <= XVER_OFF, "header too large");
_Static_assert(sizeof(struct xver) == 64, "version block is 64 bytes");
_Static_assert(XVER_OFF + 2 * sizeof(struct xver) <= XHDR_SIZE,
	       "version blocks inside the header");
_Static_assert(sizeof(struct xfrag) == 128, "fragment entry is 128 bytes");
_Static_assert(sizeof(struct xslot) == XSLOT_HDR, "slot header is 64 bytes");

#endif
