/*
 * gaplog: down gaps between rounds and what the learners did meanwhile
 * (see gaplog.h).
 */
#include "syncer/gaplog.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"

void gaplog_open(struct gap_log *g, double at, int joined)
{
	memset(&g->cur, 0, sizeof(g->cur));
	g->cur.at = at;
	g->cur.joined_start = joined;
	g->cur.joined_min = joined;
	g->open = 1;
}

void gaplog_start(struct gap_log *g, double at, int joined)
{
	gaplog_open(g, at, joined);
	g->cur.starting = 1;
}

void gaplog_learner(struct gap_log *g, int change, int joined)
{
	if (!g->open)
		return;
	if (change < 0)
		g->cur.left++;
	else
		g->cur.joins++;
	if (joined < g->cur.joined_min)
		g->cur.joined_min = joined;
}

static void log_gap(const struct gap *c, int M)
{
	char q[48] = "no quorum";

	if (c->quorum > -1e9)
		snprintf(q, sizeof(q), "quorum %.2f s", c->quorum);
	log_info("round gap: %.2f s from %.2f s elapsed (%.2f s down), ended by "
		 "round %" PRIu64 " (pulled %.2f s, %s into it); learners joined "
		 "%d of %d at its start, %d at fewest; %d left, %d joined",
		 c->length, c->at, c->down, c->round, c->pulled, q,
		 c->joined_start, M, c->joined_min, c->left, c->joins);
}

int gaplog_close(struct gap_log *g, double E, double B, uint64_t round,
		 double pulled, double quorum, int joined, int M)
{
	struct gap *c = &g->cur;
	int down = 0;

	if (g->open) {
		c->length = E - c->at;
		c->round = round;
		c->pulled = pulled - c->at;
		c->quorum = quorum >= 0 ? quorum - c->at : -1e300;
		if (((c->joined_min < M && !c->starting) || c->left > 0) &&
		    c->length > g->longest_absent) {
			g->longest_absent = c->length;
			g->longest_absent_round = round;
		}
		if (c->length > B) {
			c->down = c->length - B;
			g->last[g->n % GAPLOG_KEEP] = *c;
			g->n++;
			g->down += c->down;
			log_gap(c, M);
			down = 1;
		}
	}
	gaplog_open(g, E, joined);
	return down;
}

const struct gap *gaplog_get(const struct gap_log *g, uint64_t i)
{
	if (i >= g->n || i >= GAPLOG_KEEP)
		return NULL;
	return &g->last[(g->n - 1 - i) % GAPLOG_KEEP];
}
