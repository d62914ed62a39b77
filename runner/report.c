/*
 * report: a run_record as report.json (figures, for scripts) and
 * report.html (the same figures and three SVG plots, for people).
 *
 * Where the figures come from:
 *   uptime, goodput, rounds, tokens, final eval loss, answers, bytes,
 *   invariants —
 *     the syncer's last /status (docs/status.md);
 *   kills, restarts, crashes, learners up over time — the runner itself;
 *   bytes data parallel would have moved — run_dp_bytes (run.h).
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/svg.h"
#include "common/util.h"
#include "runner/run.h"

#define REPORT_MAX (64u << 20)
/*
 * A comparison passes when this run's loss is at most (1 + tolerance)
 * times the other's: one-sided, since ending below the baseline is not a
 * failure (it is reported as better).
 */
#define BASELINE_TOLERANCE 0.05
#define TWIN_TOLERANCE 0.03

static json_t *num_or_null(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

static void iso_time(double epoch, char *out, size_t n)
{
	time_t t = (time_t)epoch;
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static int kills_of(const struct run_record *r, enum chaos_kind kind, int index)
{
	int n = 0;

	for (size_t i = 0; i < r->nkills; i++)
		if (r->kills[i].k.kind == kind && (index < 0 || r->kills[i].k.index == index))
			n++;
	return n;
}

/* Final loss of this run divided by the other's; NAN if either is unknown. */
static double loss_ratio(const struct run_record *r, const struct run_compare *c)
{
	if (!isfinite(r->final.eval_loss) || !isfinite(c->loss) || c->loss <= 0)
		return NAN;
	return r->final.eval_loss / c->loss;
}

/* The syncer's "pace" (syncer/round.h): H configured and as run. */
static json_t *pace_json(const struct syncer_status *f)
{
	json_t *o = json_object();

	json_object_set_new(o, "h", num_or_null(f->pace.h));
	json_object_set_new(o, "h_effective", num_or_null(f->pace.h_effective));
	json_object_set_new(o, "steps_per_round", num_or_null(f->pace.steps_per_round));
	json_object_set_new(o, "steps_per_round_effective",
			    num_or_null(f->pace.steps_per_round_effective));
	json_object_set_new(o, "kth_steps", num_or_null(f->pace.kth_steps));
	json_object_set_new(o, "rounds", json_integer((json_int_t)f->pace.rounds));
	json_object_set_new(o, "steps_skipped", num_or_null(f->pace.steps_skipped));
	return o;
}

/* The syncer's "goodput_breakdown" (syncer/goodput.h): shares of M × time. */
static json_t *breakdown_json(const struct syncer_status *f)
{
	json_t *o = json_object();

	json_object_set_new(o, "learner_seconds", num_or_null(f->gpb.learner_seconds));
	json_object_set_new(o, "merged", num_or_null(f->gpb.merged));
	json_object_set_new(o, "late", num_or_null(f->gpb.late));
	json_object_set_new(o, "refused", num_or_null(f->gpb.refused));
	json_object_set_new(o, "overwritten", num_or_null(f->gpb.overwritten));
	json_object_set_new(o, "restarts", num_or_null(f->gpb.restarts));
	json_object_set_new(o, "in_flight", num_or_null(f->gpb.in_flight));
	json_object_set_new(o, "not_training", num_or_null(f->gpb.not_training));
	json_object_set_new(o, "merged_again", num_or_null(f->gpb.merged_again));
	return o;
}

static json_t *evals_json(const struct syncer_eval *ev, size_t n)
{
	json_t *a = json_array();

	for (size_t i = 0; a && i < n; i++)
		json_array_append_new(a, json_pack("{s:I,s:I,s:o,s:o}",
			"round", (json_int_t)ev[i].round, "tokens", (json_int_t)ev[i].tokens,
			"loss", num_or_null(ev[i].loss), "time", num_or_null(ev[i].time)));
	return a;
}

static int within(double ratio, double tolerance)
{
	return isfinite(ratio) && ratio <= 1 + tolerance;
}

/* The baseline's sweep: one object per learning rate tried. */
static json_t *sweep_json(const struct run_compare *c)
{
	json_t *a = json_array();

	for (size_t i = 0; a && i < c->nsweep; i++) {
		const struct run_trial *t = &c->sweep[i];
		/* tune_loss: on the tuning split, what the choice was by
		 * (runner/baseline.c); null without one */
		json_array_append_new(a, json_pack("{s:f,s:i,s:o,s:o,s:f,s:b,s:s}",
			"lr", t->lr, "warmup_steps", t->warmup,
			"final_eval_loss", num_or_null(t->loss),
			"tune_loss", num_or_null(t->tune),
			"seconds", t->seconds, "chosen", i == c->best, "log", t->log));
	}
	return a;
}

static json_t *compare_json(const struct run_record *r, const struct run_compare *c,
			    double tolerance, const char *what)
{
	double ratio = loss_ratio(r, c);
	json_t *o;

	if (!c->ran)
		return json_null();
	o = json_pack("{s:s,s:b,s:o,s:I,s:f,s:o,s:f,s:o,s:s}",
		"what", what, "ok", c->ok,
		"final_eval_loss", num_or_null(c->loss),
		"tokens", (json_int_t)c->tokens, "seconds", c->seconds,
		"loss_ratio", num_or_null(ratio),
		"tolerance", tolerance,
		"within_tolerance", isfinite(ratio) ? json_boolean(within(ratio, tolerance))
						    : json_null(),
		"log", c->log);
	if (o && c->nsweep) {
		json_object_set_new(o, "lr", json_real(c->sweep[c->best].lr));
		json_object_set_new(o, "sweep", sweep_json(c));
	}
	return o;
}

/* Long because report.json is built top to bottom, one field after the
 * other in the order the file shows them. */
int run_report_json(const struct run_record *r, struct buf *out, struct err *e)
{
	const struct syncer_status *f = &r->final;
	double dp = run_dp_bytes(r->params, r->learners, f->tokens, r->tokens_per_step);
	double exchanged = (double)f->bytes_in + (double)f->bytes_out;
	char started[32];
	json_t *root, *kills, *log, *per;
	char *text;

	iso_time(r->started_wall, started, sizeof(started));
	log = json_array();
	for (size_t i = 0; i < r->nkills; i++) {
		char name[32];
		json_array_append_new(log, json_pack("{s:f,s:s}", "time", r->kills[i].t,
			"target", chaos_kill_name(&r->kills[i].k, name, sizeof(name))));
	}
	kills = json_pack("{s:I,s:i,s:i,s:i,s:I,s:o}",
		"total", (json_int_t)r->nkills,
		"learners", kills_of(r, CHAOS_LEARNER, -1),
		"sidecars", kills_of(r, CHAOS_SIDECAR, -1),
		"syncer", kills_of(r, CHAOS_SYNCER, -1),
		"skipped", (json_int_t)r->kills_skipped, "log", log);
	per = json_array();
	for (int i = 0; i < r->learners; i++)
		json_array_append_new(per, json_pack("{s:i,s:i,s:i,s:i}", "learner", i,
			"restarts", r->restarts[i], "crashes", r->crashes[i],
			"kills", kills_of(r, CHAOS_LEARNER, i) + kills_of(r, CHAOS_SIDECAR, i)));
	root = json_pack("{s:s,s:s,s:s,s:s,s:f,s:b,s:s,s:i,s:i,s:b}",
		"job", r->job, "job_file", r->job_file, "run_dir", r->dir,
		"started", started, "seconds", r->seconds, "success", r->success,
		"outcome", r->outcome, "learners", r->learners,
		"min_quorum", r->quorum, "chaos", r->chaos);
	if (!root || !kills || !per) {
		json_decref(root);
		json_decref(kills);
		json_decref(per);
		return err_set(e, "report: out of memory");
	}
	json_object_set_new(root, "done_at", num_or_null(r->done_at));
	json_object_set_new(root, "uptime", num_or_null(f->uptime));
	json_object_set_new(root, "goodput", num_or_null(f->goodput));
	json_object_set_new(root, "rounds", json_integer((json_int_t)f->round));
	json_object_set_new(root, "tokens", json_integer((json_int_t)f->tokens));
	json_object_set_new(root, "tokens_merged", json_integer((json_int_t)f->tokens_merged));
	json_object_set_new(root, "final_eval_loss", num_or_null(f->eval_loss));
	json_object_set_new(root, "kills", kills);
	json_object_set_new(root, "per_learner", per);
	json_object_set_new(root, "syncer", json_pack("{s:i,s:i,s:i,s:I,s:f}",
		"restarts", r->syncer_restarts, "crashes", r->syncer_crashes,
		"shards", r->shards ? r->shards : 1,
		"rounds_while_shard_down", (json_int_t)r->rounds_while_shard_down,
		"shard_down_seconds", r->shard_down_seconds));
	json_object_set_new(root, "answers", json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}",
		"merged", (json_int_t)f->merged, "late", (json_int_t)f->late,
		"rejected", (json_int_t)f->rejected, "empty", (json_int_t)f->empty,
		"stale", (json_int_t)f->stale, "clipped", (json_int_t)f->clipped,
		"refused_bounds", (json_int_t)f->refused_bounds,
		"capped", (json_int_t)f->capped,
		"refused_history", (json_int_t)f->refused_history,
		"refused_size", (json_int_t)f->refused_size));
	json_object_set_new(root, "steps_undone", json_integer((json_int_t)f->steps_undone));
	json_object_set_new(root, "heartbeats", json_pack("{s:I,s:I}",
		"received", (json_int_t)f->heartbeats,
		"refused", (json_int_t)f->heartbeats_refused));
	json_object_set_new(root, "invariants", !f->have_invariants ? json_null() :
		json_pack("{s:I,s:I,s:I,s:I,s:I}",
			  "merged_steps", (json_int_t)f->merged_steps,
			  "double_merged_steps", (json_int_t)f->double_merged_steps,
			  "repeat_base", (json_int_t)f->repeat_base,
			  "stale_held", (json_int_t)f->stale_held,
			  "stale_merged", (json_int_t)f->stale_merged));
	json_object_set_new(root, "bytes", json_pack("{s:I,s:I,s:f,s:I,s:f,s:o,s:s}",
		"received", (json_int_t)f->bytes_in, "sent", (json_int_t)f->bytes_out,
		"exchanged", exchanged, "params", (json_int_t)r->params,
		"data_parallel", dp,
		"ratio", dp > 0 ? json_real(exchanged / dp) : json_null(),
		"how", "exchanged = payload bytes the syncer received + sent; "
		       "data_parallel = steps x 8 N (M-1): a ring all-reduce of the f32 "
		       "gradient (N parameters) in which each of M workers sends and "
		       "receives 2 (M-1)/M of it every step, over steps = tokens / (M B T)"));
	json_object_set_new(root, "baseline", compare_json(r, &r->baseline, BASELINE_TOLERANCE,
		"ddiloco train with an M times larger batch (data parallel as one learner), same tokens"));
	json_object_set_new(root, "twin", compare_json(r, &r->twin, TWIN_TOLERANCE,
		"the same job without chaos"));
	json_object_set_new(root, "pace", pace_json(f));
	json_object_set_new(root, "goodput_breakdown", breakdown_json(f));
	json_object_set_new(root, "eval_history", evals_json(f->evals, f->nevals));

	text = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(8));
	json_decref(root);
	if (!text)
		return err_set(e, "report: cannot encode JSON");
	buf_append(out, text, strlen(text));
	buf_append(out, "\n", 1);
	free(text);
	if (buf_error(out))
		return err_set(e, "report: JSON %s", buf_strerror(buf_error(out)));
	return 0;
}

static void fmt_opt(char *b, size_t n, const char *fmt, double v)
{
	if (isfinite(v))
		snprintf(b, n, fmt, v);
	else
		snprintf(b, n, "–");
}

/* Loss and tolerance of a comparison, as one row of the figures table. */
static void html_compare_row(struct buf *out, const struct run_record *r,
			     const struct run_compare *c, const char *name,
			     double tolerance)
{
	double q = loss_ratio(r, c);
	char loss[64], ratio[64];

	if (!c->ran)
		return;
	fmt_opt(loss, sizeof(loss), "%.4f", c->loss);
	fmt_opt(ratio, sizeof(ratio), "%.4f", q);
	buf_printf(out, "<tr><th>%s</th><td class=\"n\">%s</td><td>loss ratio %s (%s %.0f%%), %llu tokens</td></tr>\n",
		   name, loss, ratio, within(q, tolerance) ? "within" : "worse by more than",
		   tolerance * 100, (unsigned long long)c->tokens);
	for (size_t i = 0; i < c->nsweep; i++)
		buf_printf(out, "<tr><th></th><td class=\"n\">%.4f</td><td>lr %g, warmup %d steps%s</td></tr>\n",
			   c->sweep[i].loss, c->sweep[i].lr, c->sweep[i].warmup,
			   i == c->best ? " (chosen)" : "");
}

static void html_head(struct buf *out, const struct run_record *r)
{
	char started[32];

	iso_time(r->started_wall, started, sizeof(started));
	buf_printf(out, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>ddiloco run ");
	svg_escape(out, r->job);
	buf_printf(out, "</title>\n<style>body{font-family:sans-serif;max-width:720px;margin:1em auto}"
		   "td,th{padding:2px 10px;text-align:left}td.n{text-align:right}"
		   ".ok{color:#2ca02c}.bad{color:#d62728}</style></head><body>\n<h1>");
	svg_escape(out, r->job);
	buf_printf(out, "</h1>\n<p><span class=\"%s\">", r->success ? "ok" : "bad");
	svg_escape(out, r->outcome);
	buf_printf(out, "</span>, started %s, %.0f s, %d learners, quorum %d, chaos %s.</p>\n",
		   started, r->seconds, r->learners, r->quorum, r->chaos ? "on" : "off");
}

static void html_figures(struct buf *out, const struct run_record *r)
{
	const struct syncer_status *f = &r->final;
	double dp = run_dp_bytes(r->params, r->learners, f->tokens, r->tokens_per_step);
	double exchanged = (double)f->bytes_in + (double)f->bytes_out;
	char a[64];

	buf_printf(out, "<table>\n");
	fmt_opt(a, sizeof(a), "%.4f", f->uptime);
	buf_printf(out, "<tr><th>uptime</th><td class=\"n\">%s</td><td>share of wall time the syncer kept completing rounds at its cadence</td></tr>\n", a);
	fmt_opt(a, sizeof(a), "%.4f", f->goodput);
	buf_printf(out, "<tr><th>goodput</th><td class=\"n\">%s</td><td>share of learner time whose training reached the global model</td></tr>\n", a);
	if (isfinite(f->gpb.merged))
		buf_printf(out, "<tr><th>learner time</th><td class=\"n\"></td><td>%.1f%% merged, %.1f%% late, %.1f%% refused, %.1f%% overwritten, %.1f%% lost to restarts, %.1f%% in flight, %.1f%% not training</td></tr>\n",
			   100 * f->gpb.merged, 100 * f->gpb.late, 100 * f->gpb.refused,
			   100 * f->gpb.overwritten, 100 * f->gpb.restarts,
			   100 * f->gpb.in_flight, 100 * f->gpb.not_training);
	if (isfinite(f->pace.h)) {
		fmt_opt(a, sizeof(a), "%.4g", f->pace.h_effective);
		buf_printf(out, "<tr><th>H as run</th><td class=\"n\">%s</td><td>H %.4g configured; the K-th learner's steps per round started, times P</td></tr>\n",
			   a, f->pace.h);
	}
	buf_printf(out, "<tr><th>rounds</th><td class=\"n\">%llu</td><td></td></tr>\n",
		   (unsigned long long)f->round);
	buf_printf(out, "<tr><th>tokens</th><td class=\"n\">%llu</td><td>%llu in merged contributions</td></tr>\n",
		   (unsigned long long)f->tokens, (unsigned long long)f->tokens_merged);
	fmt_opt(a, sizeof(a), "%.4f", f->eval_loss);
	buf_printf(out, "<tr><th>final eval loss</th><td class=\"n\">%s</td><td>global model, validation split</td></tr>\n", a);
	buf_printf(out, "<tr><th>kills</th><td class=\"n\">%zu</td><td>%d learners, %d sidecars, %d syncer; %llu skipped (maxDown)</td></tr>\n",
		   r->nkills, kills_of(r, CHAOS_LEARNER, -1), kills_of(r, CHAOS_SIDECAR, -1),
		   kills_of(r, CHAOS_SYNCER, -1), (unsigned long long)r->kills_skipped);
	buf_printf(out, "<tr><th>restarts</th><td class=\"n\">");
	for (int i = 0; i < r->learners; i++)
		buf_printf(out, "%s%d", i ? " " : "", r->restarts[i]);
	buf_printf(out, "</td><td>per learner; syncer %d</td></tr>\n", r->syncer_restarts);
	buf_printf(out, "<tr><th>bytes exchanged</th><td class=\"n\">%.3g</td><td>data parallel would have moved %.3g (ratio %.3g): ring all-reduce of the f32 gradient every step, 8·N·(M−1) bytes per step, N = %llu</td></tr>\n",
		   exchanged, dp, dp > 0 ? exchanged / dp : NAN,
		   (unsigned long long)r->params);
	html_compare_row(out, r, &r->baseline, "data-parallel baseline",
			 BASELINE_TOLERANCE);
	html_compare_row(out, r, &r->twin, "no-chaos twin", TWIN_TOLERANCE);
	buf_printf(out, "</table>\n");
}

/* The tokens and losses of a loss curve as two new arrays (n + 1 long). */
static int curve_xy(const struct syncer_eval *ev, size_t n, double **x,
		    double **y)
{
	*x = calloc(n + 1, sizeof(double));
	*y = calloc(n + 1, sizeof(double));
	if (!*x || !*y)
		return -1;
	for (size_t i = 0; i < n; i++) {
		(*x)[i] = (double)ev[i].tokens;
		(*y)[i] = ev[i].loss;
	}
	return 0;
}

/* The three plots; -1 when memory is out. */
static int html_plots(struct buf *out, const struct run_record *r)
{
	const struct syncer_status *f = &r->final;
	size_t ns = r->nsamples, nk = r->nkills, nh = 0, nss = 0;
	double *t = calloc(ns + 1, sizeof(double)), *up = calloc(ns + 1, sizeof(double));
	double *rounds = calloc(ns + 1, sizeof(double)), *kt = calloc(nk + 1, sizeof(double));
	double *etok = NULL, *eloss = NULL, *ttok = NULL, *tloss = NULL;
	double *btok = NULL, *bloss = NULL;
	struct svg_hline hl[2];
	struct svg_series ss[3];
	int rc = -1;

	if (!t || !up || !rounds || !kt ||
	    curve_xy(f->evals, f->nevals, &etok, &eloss) ||
	    curve_xy(r->twin.evals, r->twin.nevals, &ttok, &tloss) ||
	    curve_xy(r->baseline.evals, r->baseline.nevals, &btok, &bloss))
		goto out;
	for (size_t i = 0; i < ns; i++) {
		t[i] = r->samples[i].t;
		up[i] = r->samples[i].up;
		rounds[i] = (double)r->samples[i].round;
	}
	for (size_t i = 0; i < nk; i++)
		kt[i] = r->kills[i].t;

	ss[nss++] = (struct svg_series){ "this run", NULL, etok, eloss, f->nevals, 0, 1 };
	if (r->twin.nevals)
		ss[nss++] = (struct svg_series){ "no-chaos twin", NULL, ttok, tloss,
						 r->twin.nevals, 0, 0 };
	if (r->baseline.nevals)
		ss[nss++] = (struct svg_series){ "data-parallel baseline", NULL, btok, bloss,
						 r->baseline.nevals, 0, 0 };
	if (r->baseline.ran && isfinite(r->baseline.loss))
		hl[nh++] = (struct svg_hline){ "baseline final", r->baseline.loss, "#ff7f0e" };
	if (r->twin.ran && isfinite(r->twin.loss))
		hl[nh++] = (struct svg_hline){ "twin final", r->twin.loss, "#2ca02c" };
	buf_printf(out, "<h2>Eval loss of the global model</h2>\n");
	svg_plot(out, &(struct svg_plot){ "eval loss vs tokens", "tokens (all learners)",
			"loss (nats/token)", 0, 0, NULL, 0, NULL, hl, nh, 0 }, ss, nss);
	buf_printf(out, "<h2>Learners up</h2>\n");
	ss[0] = (struct svg_series){ "learners up", "#1f77b4", t, up, ns, 1, 0 };
	svg_plot(out, &(struct svg_plot){ "learners up over time", "seconds",
			"learners", 0, 0, kt, nk, "kill", NULL, 0, 1 }, ss, 1);
	buf_printf(out, "<h2>Rounds</h2>\n");
	ss[0] = (struct svg_series){ "rounds completed", "#2ca02c", t, rounds, ns, 0, 0 };
	svg_plot(out, &(struct svg_plot){ "rounds over time", "seconds",
			"rounds", 0, 0, kt, nk, "kill", NULL, 0, 1 }, ss, 1);
	rc = 0;
out:
	free(t);
	free(up);
	free(rounds);
	free(kt);
	free(etok);
	free(eloss);
	free(ttok);
	free(tloss);
	free(btok);
	free(bloss);
	return rc;
}

static void html_kills(struct buf *out, const struct run_record *r)
{
	if (!r->nkills)
		return;
	buf_printf(out, "<h2>Kills</h2>\n<table><tr><th>time (s)</th><th>target</th></tr>\n");
	for (size_t i = 0; i < r->nkills; i++) {
		char name[32];
		buf_printf(out, "<tr><td class=\"n\">%.1f</td><td>%s</td></tr>\n", r->kills[i].t,
			   chaos_kill_name(&r->kills[i].k, name, sizeof(name)));
	}
	buf_printf(out, "</table>\n");
}

int run_report_html(const struct run_record *r, struct buf *out, struct err *e)
{
	html_head(out, r);
	html_figures(out, r);
	if (html_plots(out, r))
		return err_set(e, "report: out of memory");
	html_kills(out, r);
	buf_printf(out, "</body></html>\n");
	/* every append above is checked here, once: out keeps its first error */
	if (buf_error(out))
		return err_set(e, "report: HTML %s", buf_strerror(buf_error(out)));
	return 0;
}

int run_report_write(const struct run_record *r, struct err *e)
{
	struct buf b;
	char path[4200];
	int rc = -1;

	buf_init(&b, REPORT_MAX);
	if (run_report_json(r, &b, e))
		goto out;
	snprintf(path, sizeof(path), "%s/report.json", r->dir);
	if (file_write_atomic(path, b.data, b.len, e))
		goto out;
	buf_reset(&b);
	if (run_report_html(r, &b, e))
		goto out;
	snprintf(path, sizeof(path), "%s/report.html", r->dir);
	if (file_write_atomic(path, b.data, b.len, e))
		goto out;
	rc = 0;
out:
	buf_release(&b);
	return rc;
}

/* The pace line: H configured and as run. */
static void summary_pace(struct buf *out, const struct syncer_status *f)
{
	char h[32], he[32], ks[32], sk[32];

	if (!isfinite(f->pace.h))
		return;
	fmt_opt(h, sizeof(h), "%.4g", f->pace.h);
	fmt_opt(he, sizeof(he), "%.4g", f->pace.h_effective);
	fmt_opt(ks, sizeof(ks), "%.0f", f->pace.kth_steps);
	fmt_opt(sk, sizeof(sk), "%.0f", f->pace.steps_skipped);
	buf_printf(out, "pace: H %s configured, %s as run (K-th learner %s steps "
		   "over %llu rounds, %s skipped)\n", h, he, ks,
		   (unsigned long long)f->pace.rounds, sk);
}

/* The learner-time line: where M × elapsed went (syncer/goodput.h). */
static void summary_time(struct buf *out, const struct syncer_status *f)
{
	const double *v[] = { &f->gpb.merged, &f->gpb.late, &f->gpb.refused,
			      &f->gpb.overwritten, &f->gpb.restarts,
			      &f->gpb.in_flight, &f->gpb.not_training,
			      &f->gpb.merged_again };
	static const char *const name[] = { "merged", "late", "refused",
		"overwritten", "lost to restarts", "in flight", "not training",
		"merged again" };

	if (!isfinite(f->gpb.merged))
		return;
	buf_printf(out, "learner time:");
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		buf_printf(out, "%s %.1f%% %s", i ? "," : "", 100 * *v[i], name[i]);
	buf_printf(out, "\n");
}

/* " (within 5%)", " (NOT within 5%)", or "" for an unknown ratio. */
static const char *verdict(double q, double tolerance, char *b, size_t n)
{
	if (!isfinite(q))
		return "";
	if (!within(q, tolerance))
		snprintf(b, n, " (NOT within %.0f%%: worse by %.1f%%)", tolerance * 100,
			 (q - 1) * 100);
	else if (q < 1)
		snprintf(b, n, " (better by %.1f%%)", (1 - q) * 100);
	else
		snprintf(b, n, " (within %.0f%%)", tolerance * 100);
	return b;
}

int run_summary(const struct run_record *r, struct buf *out)
{
	const struct syncer_status *f = &r->final;
	char loss[32], upt[32], gp[32], v[64];
	int restarts = r->syncer_restarts;

	for (int i = 0; i < r->learners; i++)
		restarts += r->restarts[i];
	fmt_opt(loss, sizeof(loss), "%.4f", f->eval_loss);
	fmt_opt(upt, sizeof(upt), "%.4f", f->uptime);
	fmt_opt(gp, sizeof(gp), "%.4f", f->goodput);
	if (!r->have_final) {           /* no /status read: nothing to count */
		buf_printf(out, "%s: %s\n", r->job, r->outcome);
	} else {
		buf_printf(out, "%s: %s in %.0f s: %llu rounds, %llu tokens, eval loss %s, "
			   "uptime %s, goodput %s, %zu kills, %d restarts\n",
			   r->job, r->outcome, r->seconds, (unsigned long long)f->round,
			   (unsigned long long)f->tokens, loss, upt, gp, r->nkills,
			   restarts);
		summary_pace(out, f);
		summary_time(out, f);
	}
	if (r->twin.ran) {
		double q = loss_ratio(r, &r->twin);
		fmt_opt(loss, sizeof(loss), "%.4f", r->twin.loss);
		fmt_opt(gp, sizeof(gp), "%.4f", q);
		buf_printf(out, "no-chaos twin: eval loss %s, ratio %s%s\n", loss, gp,
			   verdict(q, TWIN_TOLERANCE, v, sizeof(v)));
	}
	if (r->baseline.ran) {
		double q = loss_ratio(r, &r->baseline);
		fmt_opt(loss, sizeof(loss), "%.4f", r->baseline.loss);
		fmt_opt(gp, sizeof(gp), "%.4f", q);
		for (size_t i = 0; i < r->baseline.nsweep; i++)
			buf_printf(out, "data-parallel baseline: lr %g: eval loss %.4f%s\n",
				   r->baseline.sweep[i].lr, r->baseline.sweep[i].loss,
				   i == r->baseline.best ? " (chosen)" : "");
		buf_printf(out, "data-parallel baseline: eval loss %s at %llu tokens, ratio %s%s\n",
			   loss, (unsigned long long)r->baseline.tokens, gp,
			   verdict(q, BASELINE_TOLERANCE, v, sizeof(v)));
	}
	{
		double dp = run_dp_bytes(r->params, r->learners, f->tokens, r->tokens_per_step);
		double ex = (double)f->bytes_in + (double)f->bytes_out;
		if (dp > 0 && ex > 0)
			buf_printf(out, "bytes: %.3g exchanged, %.4f of the %.3g data parallel "
				   "would move for these tokens (1/%.0f)\n", ex, ex / dp, dp, dp / ex);
	}
	buf_printf(out, "report: %s/report.json\nreport: %s/report.html\n", r->dir, r->dir);
	return buf_error(out) ? -1 : 0;
}
