/*
 * exchange_layout: the words of the exchange region as structs, for the
 * exchange's own files only (common/exchange.c, common/exchange_file.c);
 * the region is drawn in common/exchange.h and docs/exchange.md.
 */
#ifndef DDILOCO_EXCHANGE_LAYOUT_H
#define DDILOCO_EXCHANGE_LAYOUT_H

#include <stdint.h>

#define XMAGIC   0x3130474843584444ULL   /* "DDXCHG01" little-endian */
#define XLAYOUT  1
#define XHDR_SIZE 4096
#define XSLOT_HDR 64
#define PATH_MAX_EXCH 4096
#define XSLOT_RELEASED 1u       /* slot flags: its pages were given back */

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

_Static_assert(sizeof(struct xhdr) <= XHDR_SIZE, "header too large");
_Static_assert(sizeof(struct xfrag) == 128, "fragment entry is 128 bytes");
_Static_assert(sizeof(struct xslot) == XSLOT_HDR, "slot header is 64 bytes");

#endif
