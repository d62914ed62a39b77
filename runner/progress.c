/*
 * progress: the live view of a run on stdout. On a terminal, a two-line
 * table redrawn in place (cursor up, clear to the end of the screen) with
 * event lines scrolling above it; otherwise one line per interval and the
 * events as they come, so logs and CI output stay readable.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include "runner/run.h"

static void human(char *b, size_t n, double v)
{
	if (!isfinite(v))
		snprintf(b, n, "-");
	else if (v >= 1e9)
		snprintf(b, n, "%.2fG", v / 1e9);
	else if (v >= 1e6)
		snprintf(b, n, "%.2fM", v / 1e6);
	else if (v >= 1e4)
		snprintf(b, n, "%.1fk", v / 1e3);
	else
		snprintf(b, n, "%.0f", v);
}

static void opt(char *b, size_t n, const char *fmt, double v)
{
	if (isfinite(v))
		snprintf(b, n, fmt, v);
	else
		snprintf(b, n, "-");
}

static void clock_text(char *b, size_t n, double s)
{
	int m = (int)(s / 60);

	snprintf(b, n, "%d:%02d", m, (int)s - m * 60);
}

struct cells {
	char round[24], tokens[24], loss[24], tps[24], up[24], gp[24], upt[24],
	     kills[24], el[24];
};

static void fill(struct cells *c, const struct run_record *r)
{
	const struct run_sample *s = r->nsamples ? &r->samples[r->nsamples - 1] : NULL;

	snprintf(c->round, sizeof(c->round), "%llu", (unsigned long long)r->final.round);
	human(c->tokens, sizeof(c->tokens), (double)r->final.tokens);
	opt(c->loss, sizeof(c->loss), "%.4f", r->final.eval_loss);
	human(c->tps, sizeof(c->tps), s ? s->tokens_per_s : NAN);
	snprintf(c->up, sizeof(c->up), "%d/%d", s ? s->up : 0, r->learners);
	opt(c->gp, sizeof(c->gp), "%.3f", r->final.goodput);
	opt(c->upt, sizeof(c->upt), "%.3f", r->final.uptime);
	snprintf(c->kills, sizeof(c->kills), "%zu", r->nkills);
	clock_text(c->el, sizeof(c->el), s ? s->t : 0);
}

void run_view_update(struct run_view *v, const struct run_record *r,
		     double now, double every)
{
	struct cells c;

	if (v->tty && v->lines && now - v->last < 0.5)
		return;
	fill(&c, r);
	if (v->tty) {
		if (v->lines)
			printf("\033[%dA\r\033[J", v->lines);
		printf("%7s %9s %9s %8s %8s %7s %7s %5s %7s\n",
		       "round", "tokens", "eval loss", "tok/s", "learners", "goodput",
		       "uptime", "kills", "elapsed");
		printf("%7s %9s %9s %8s %8s %7s %7s %5s %7s\n", c.round, c.tokens,
		       c.loss, c.tps, c.up, c.gp, c.upt, c.kills, c.el);
		v->lines = 2;
		v->last = now;
		fflush(stdout);
		return;
	}
	if (v->last > 0 && now - v->last < every)
		return;
	v->last = now;
	printf("[%6s] round %s  tokens %s  eval loss %s  tok/s %s  learners %s  "
	       "goodput %s  uptime %s  kills %s\n", c.el, c.round, c.tokens, c.loss,
	       c.tps, c.up, c.gp, c.upt, c.kills);
	fflush(stdout);
}

void run_view_event(struct run_view *v, double t, const char *fmt, ...)
{
	char el[24];
	va_list ap;

	if (v->tty && v->lines) {
		printf("\033[%dA\r\033[J", v->lines);
		v->lines = 0;
	}
	clock_text(el, sizeof(el), t);
	printf("[%6s] ", el);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

void run_view_end(struct run_view *v)
{
	v->lines = 0;
	fflush(stdout);
}
