/*
 * fuzz_eval: an evaluator's reports as the syncer takes them (docs/
 * syncer.md, Evaluators): a LearnerMessage decoded (common/wire.c) and,
 * when it is an Evaluation, judged by syncer/eval_remote.c against the
 * rounds merged so far and the newest evaluation taken, as
 * core_evaluation does; the history is kept here as core.c keeps it.
 *
 * Input: bytes 0 and 1 are the round the syncer starts at and its
 * tokens (÷ 1000); then records, each a byte b:
 *   b even   the next two rounds merged, in order or (b & 2) the
 *            second first (rounds finish out of order), the tokens
 *            trained going up by 100 · (b >> 2) before them;
 *   b odd    a message: a length byte, then that many bytes, from
 *            evaluator (b >> 1) & 3.
 * Checks: a report taken has a finite loss, a round merged already and
 * newer than the last taken, and the tokens of the newest round merged
 * at or before it among the last EVAL_REMOTE_RING merged (a list kept
 * here); every report is taken or refused, once.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire.h"
#include "syncer/eval_remote.h"
#include "tests/fuzz/fuzz_init.h"

const char fuzz_name[] = "eval";

#define MAXM 4096   /* merges followed; more end the input */

static struct { uint64_t round, tokens; } merged[MAXM];

/* The tokens of the newest round at or before `round` among the last
 * EVAL_REMOTE_RING merged of n; -1 when none is. */
static int reference(int n, uint64_t round, uint64_t *tokens)
{
	int best = -1;

	for (int i = n > EVAL_REMOTE_RING ? n - EVAL_REMOTE_RING : 0; i < n; i++)
		if (merged[i].round <= round &&
		    (best < 0 || merged[i].round > merged[best].round))
			best = i;
	if (best >= 0)
		*tokens = merged[best].tokens;
	return best < 0 ? -1 : 0;
}

struct run {
	struct eval_remote r;
	int n;                      /* merges, the start included */
	uint64_t next, tokens, max; /* next round, tokens trained, newest merged */
	int have_last;
	uint64_t last;              /* the newest evaluation taken */
	uint64_t reports;
};

static void merge(struct run *u, uint64_t round)
{
	merged[u->n].round = round;
	merged[u->n++].tokens = u->tokens;
	if (round > u->max)
		u->max = round;
	eval_remote_merged(&u->r, round, u->tokens);
}

static void report(struct run *u, int id, const struct wire_evaluation *ev)
{
	uint64_t tokens = 0, want = 0;
	int taken;

	u->reports++;
	taken = !eval_remote_report(&u->r, id, ev, u->have_last, u->last,
				    &tokens, NULL);
	if (u->r.evaluations + u->r.refused != u->reports)
		abort();
	if (!taken)
		return;
	if (!isfinite(ev->loss) || ev->round > u->max ||
	    (u->have_last && ev->round <= u->last) ||
	    reference(u->n, ev->round, &want) || tokens != want)
		abort();
	u->have_last = 1;
	u->last = ev->round;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct run u = { .n = 0 };
	size_t at = 2;

	if (size < 2 || size > (1 << 16))
		return 0;
	u.next = data[0];
	u.tokens = data[1] * 1000ull;
	eval_remote_init(&u.r, u.next, u.tokens);
	merged[u.n].round = u.max = u.next;
	merged[u.n++].tokens = u.tokens;
	u.next++;
	while (at < size && u.n < MAXM - 2) {
		uint8_t b = data[at++];

		if (!(b & 1)) {
			u.tokens += 100ull * (b >> 2);
			if (b & 2)
				merge(&u, u.next + 1);
			merge(&u, u.next);
			if (!(b & 2))
				merge(&u, u.next + 1);
			u.next += 2;
		} else if (at < size) {
			size_t len = data[at++];
			struct wire_learner_msg m;
			struct err e;

			if (len > size - at)
				len = size - at;
			if (!wire_learner_decode(data + at, len, &m, &e)) {
				if (m.kind == WIRE_EVALUATION)
					report(&u, (b >> 1) & 3, &m.evaluation);
				wire_learner_release(&m);
			}
			at += len;
		}
	}
	return 0;
}
