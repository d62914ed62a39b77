/*
 * The data-parallel baseline of `ddiloco run --baseline` (docs/run.md).
 *
 * Data parallel with M learners of B rows is one learner of M·B rows:
 * `ddiloco train JOB --batch-mult M` on the job's tokens, as many steps as
 * each learner of the job takes. A larger batch wants its own learning
 * rate, so the baseline is a sweep: one full run per learning rate
 * (default the job's lr times 0.5, 1 and 2), and the baseline is the run
 * with the lowest final eval loss. Choosing on the final loss favours the
 * baseline, which is the side a comparison should err on.
 *
 * Every trial's log is kept in the run folder (baseline-lr<LR>.log) and in
 * a cache (cache_dir below: <dir>/<key>.log), the key a hash of everything the trial's loss depends on: the binary's
 * version, the model, data (path, size, mtime; of a folder, its files'
 * count, bytes and newest mtime: the same wherever one package installed
 * it, as a folder's own mtime is not), optimizer and eval
 * settings, the tokens, the batch multiple and the learning rate. A later
 * run of the same settings reads the cached log instead of training again;
 * --baseline-fresh trains anyway.
 */
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "common/log.h"
#include "common/util.h"
#include "runner/proc.h"
#include "runner/run.h"

/* The default sweep: the job's learning rate times these. */
static const double default_mults[] = { 0.5, 1, 2 };

/* The tune_loss= of a log's final line (trainer/data.h, tuning): NAN
 * when there is none. */
static double read_tune_loss(const char *path)
{
	FILE *f = fopen(path, "r");
	char line[1024];
	double tune = NAN;

	if (!f)
		return NAN;
	while (fgets(line, sizeof(line), f)) {
		char *t = strstr(line, " tune_loss=");

		if (!strncmp(line, "final ", 6))
			tune = t ? strtod(t + 11, NULL) : NAN;
	}
	fclose(f);
	return tune;
}

/*
 * Reads a `ddiloco train` log: every line with eval_loss= is a point of
 * the curve, at tokens= when present, else at step= times the tokens of
 * one step; the last is the final loss. With c NULL only the final loss
 * is returned (NAN when there is none or the run did not finish).
 */
static double read_train_log(const char *path, struct run_compare *c,
			     uint64_t tokens_per_step)
{
	FILE *f = fopen(path, "r");
	char line[1024];
	size_t cap = 0;
	double last = NAN;
	int final = 0;

	if (!f)
		return NAN;
	while (fgets(line, sizeof(line), f)) {
		char *l = strstr(line, "eval_loss=");
		char *tk = strstr(line, " tokens="), *st = strstr(line, "step=");
		double loss;

		if (!l)
			continue;
		loss = strtod(l + 10, NULL);
		if (!isfinite(loss))
			continue;
		last = loss;
		final = !strncmp(line, "final ", 6);
		if (!c)
			continue;
		if (c->nevals == cap) {
			size_t want = cap ? cap * 2 : 64;
			struct syncer_eval *p;
			if (want > RUN_MAX_EVALS)
				continue;
			p = realloc(c->evals, want * sizeof(*p));
			if (!p)
				continue;
			c->evals = p;
			cap = want;
		}
		memset(&c->evals[c->nevals], 0, sizeof(c->evals[0]));
		c->evals[c->nevals].loss = loss;
		c->evals[c->nevals].tokens = tk ? strtoull(tk + 8, NULL, 10)
					    : st ? strtoull(st + 5, NULL, 10) * tokens_per_step : 0;
		c->evals[c->nevals].time = NAN;
		c->nevals++;
	}
	fclose(f);
	return final ? last : NAN;
}

int run_baseline_lrs(const struct job_spec *js, const char *list, double *lr,
		     size_t *n, struct err *e)
{
	*n = 0;
	if (!list) {
		for (size_t i = 0; i < sizeof(default_mults) / sizeof(default_mults[0]); i++)
			lr[(*n)++] = js->optimizer.lr * default_mults[i];
		return 0;
	}
	for (const char *p = list; *p;) {
		char *end;
		double v;

		errno = 0;
		v = strtod(p, &end);
		if (end == p || errno || !(v > 0 && v <= 1) || (*end && *end != ','))
			return err_set(e, "--baseline-lr: '%s' is not a list of learning rates in (0, 1]",
				       list);
		if (*n == RUN_SWEEP_MAX)
			return err_set(e, "--baseline-lr: at most %d learning rates",
				       RUN_SWEEP_MAX);
		lr[(*n)++] = v;
		p = *end ? end + 1 : end;
	}
	if (!*n)
		return err_set(e, "--baseline-lr: no learning rate given");
	return 0;
}

static uint64_t fnv1a(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

/* What the key reads of the data: a file's size and mtime; a folder's
 * regular files (nftw's walk), their count, bytes and newest mtime. */
static struct tree { long long files, bytes, newest; } tree;

static int tree_add(const char *path, const struct stat *st, int type,
		    struct FTW *at)
{
	(void)path;
	(void)at;
	if (type == FTW_F && S_ISREG(st->st_mode)) {
		tree.files++;
		tree.bytes += st->st_size;
		if (st->st_mtime > tree.newest)
			tree.newest = st->st_mtime;
	}
	return 0;
}

/* The cache key of one trial: everything its loss depends on. */
static uint64_t trial_key(const struct job_spec *js, const char *const *args)
{
	const struct job_model *m = &js->model;
	const struct job_optimizer *op = &js->optimizer;
	struct stat st;
	char s[8192];
	int n;

	if (stat(js->data.path, &st))
		memset(&st, 0, sizeof(st));
	memset(&tree, 0, sizeof(tree));
	if (S_ISDIR(st.st_mode))
		nftw(js->data.path, tree_add, 16, FTW_PHYS);
	else
		tree = (struct tree){ 0, st.st_size, st.st_mtime };
	n = snprintf(s, sizeof(s),
		     "%s|m %d %d %d %d %d %d %llu|d %s %s %d %g %g %d %d %s %lld %lld %lld|"
		     "o %g %g %g %g %g %d %d %g %g %d %d|eval %d|",
		     DDILOCO_VERSION, m->vocab_size, m->context, m->layers, m->heads,
		     m->channels, m->tied, (unsigned long long)m->seed,
		     js->data.path, js->data.val_path, (int)js->data.format,
		     js->data.val_fraction, js->data.tune_fraction,
		     (int)js->data.split, (int)js->data.order, js->data.shard_pattern,
		     tree.files, tree.bytes, tree.newest,
		     op->lr, op->beta1, op->beta2, op->eps, op->weight_decay,
		     op->warmup_steps, op->cosine_steps, op->min_lr_ratio,
		     op->grad_clip, op->batch_size, op->seq_len, js->syncer.eval_tokens);
	for (; *args && n > 0 && n < (int)sizeof(s); args++)
		n += snprintf(s + n, sizeof(s) - (size_t)n, "%s ", *args);
	return fnv1a(s);
}

static int copy_file(const char *from, const char *to)
{
	void *text;
	size_t len;
	int rc;

	if (file_read_all(from, 64 << 20, &text, &len, NULL))
		return -1;
	rc = file_write_atomic(to, text, len, NULL);
	free(text);
	return rc;
}

/* One `ddiloco train` to its end; 0 when it printed its final loss. */
static int train_once(char *const *argv, const char *log,
		      const volatile sig_atomic_t *stop, struct err *e)
{
	struct proc p;
	double t0 = clock_mono(), last = t0;
	int ok;

	if (proc_init(&p, "baseline", log, argv, e))
		return -1;
	if (proc_start(&p, e)) {
		proc_release(&p);
		return -1;
	}
	while (!proc_reap(&p)) {
		if (*stop) {
			proc_stop(&p, 5);
			proc_release(&p);
			return err_set(e, "interrupted");
		}
		if (clock_mono() - last >= 15) {
			last = clock_mono();
			printf("baseline: %.0f s\n", last - t0);
			fflush(stdout);
		}
		sleep_seconds(0.1);
	}
	ok = WIFEXITED(p.status) && WEXITSTATUS(p.status) == 0;
	if (!ok) {
		char st[64];
		err_set(e, "baseline: ddiloco train ended with %s; see %s",
			proc_describe_status(p.status, st, sizeof(st)), log);
	}
	proc_release(&p);
	return ok ? 0 : -1;
}

/*
 * The cache folder: $DDILOCO_CACHE_DIR, else $XDG_CACHE_HOME/ddiloco/baseline,
 * else $HOME/.cache/ddiloco/baseline; one folder for every run folder.
 */
static int cache_dir(char *out, size_t n)
{
	const char *d = getenv("DDILOCO_CACHE_DIR"), *x = getenv("XDG_CACHE_HOME");
	const char *h = getenv("HOME");

	if (d && *d)
		return snprintf(out, n, "%s", d) >= (int)n ? -1 : 0;
	if (x && *x)
		return snprintf(out, n, "%s/ddiloco/baseline", x) >= (int)n ? -1 : 0;
	if (h && *h)
		return snprintf(out, n, "%s/.cache/ddiloco/baseline", h) >= (int)n ? -1 : 0;
	return -1;
}

/* One trial of the sweep: from the cache, else trained and then cached. */
static int run_trial(const struct job_spec *js, const struct run_opts *o,
		     const char *dir, struct run_trial *t, uint64_t tok,
		     uint64_t per_step, const volatile sig_atomic_t *stop,
		     struct err *e)
{
	char mult[16], tokens[32], every[32], threads[16], lr[32], cache[4200];
	char cdir[4096];
	int have_cache;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	double t0 = clock_mono();
	uint64_t key;
	struct stat st;

	snprintf(mult, sizeof(mult), "%d", js->learners.replicas);
	snprintf(tokens, sizeof(tokens), "%llu", (unsigned long long)tok);
	snprintf(lr, sizeof(lr), "%g", t->lr);
	t->lr = strtod(lr, NULL);   /* the rate trained is the one printed */
	/* it runs alone after the job: all the cores (the loss does not depend on it) */
	snprintf(threads, sizeof(threads), "%ld", ncpu > 0 ? (ncpu < 8 ? ncpu : 8) : 1);
	/* about 15 points on its loss curve */
	snprintf(every, sizeof(every), "%llu",
		 (unsigned long long)(tok / per_step / 15 > 0 ? tok / per_step / 15 : 1));
	if (snprintf(t->log, sizeof(t->log), "%s/baseline-lr%s.log", dir, lr) >=
	    (int)sizeof(t->log))
		return err_set(e, "run: log path too long: '%s/baseline-lr%s.log'", dir, lr);
	{
		const char *const kargs[] = { "train", mult, tokens, every, lr, NULL };
		key = trial_key(js, kargs);
	}
	have_cache = !cache_dir(cdir, sizeof(cdir));
	snprintf(cache, sizeof(cache), "%s/%016llx.log", have_cache ? cdir : ".",
		 (unsigned long long)key);

	printf("baseline: lr %s: ddiloco train %s --batch-mult %s --tokens %s --lr %s",
	       lr, o->job_file, mult, tokens, lr);
	if (have_cache && !o->baseline_fresh && !stat(cache, &st) &&
	    isfinite(read_train_log(cache, NULL, per_step)) &&
	    !copy_file(cache, t->log)) {
		printf(" (cached: %s)\n", cache);
	} else {
		char *argv[] = { (char *)o->exe, (char *)"train", (char *)o->job_file,
				 (char *)"--batch-mult", mult, (char *)"--tokens", tokens,
				 (char *)"--lr", lr, (char *)"--eval-every", every,
				 (char *)"--threads", threads, NULL };
		printf(" (log %s)\n", t->log);
		fflush(stdout);
		if (train_once(argv, t->log, stop, e))
			return -1;
		if (have_cache && (mkdir_p(cdir, NULL) || copy_file(t->log, cache)))
			log_warn("baseline: cannot cache %s in %s", t->log, cache);
	}
	t->seconds = clock_mono() - t0;
	t->loss = read_train_log(t->log, NULL, per_step);
	t->tune = read_tune_loss(t->log);
	t->ok = isfinite(t->loss);
	if (isfinite(t->tune))
		printf("baseline: lr %s: final eval loss %.4f, on the tuning "
		       "split %.4f\n", lr, t->loss, t->tune);
	else
		printf("baseline: lr %s: final eval loss %.4f\n", lr, t->loss);
	fflush(stdout);
	if (!t->ok)
		return err_set(e, "baseline: no final eval_loss in %s", t->log);
	return 0;
}

/* The sweep's choice: the lower loss on the tuning split when both
 * have one (spec.data.tuneFraction), so the loss reported is not the
 * one the learning rate was chosen on; else on validation. */
static int trial_better(const struct run_trial *t, const struct run_trial *best)
{
	if (!best->ok)
		return 1;
	if (isfinite(t->tune) && isfinite(best->tune))
		return t->tune < best->tune;
	return t->loss < best->loss;
}

/* One more trial of the sweep, at lr; c->best follows. */
static int sweep_trial(const struct job_spec *js, const struct run_opts *o,
		       const char *dir, struct run_compare *c, double lr,
		       uint64_t tok, uint64_t per_step,
		       const volatile sig_atomic_t *stop, struct err *e)
{
	struct run_trial *t = &c->sweep[c->nsweep++];

	memset(t, 0, sizeof(*t));
	t->lr = lr;
	t->warmup = js->optimizer.warmup_steps;
	t->loss = t->tune = NAN;
	if (run_trial(js, o, dir, t, tok, per_step, stop, e))
		return -1;
	if (trial_better(t, &c->sweep[c->best]))
		c->best = c->nsweep - 1;
	return 0;
}

/*
 * Past the sweep's edge, when its best rate is there: the next rate
 * beyond it, by the ratio of that edge to its neighbour, or 0 when the
 * best is inside.
 */
static double past_edge(const struct run_compare *c)
{
	double best = c->sweep[c->best].lr;
	double below = 0, above = INFINITY;   /* best's neighbours */

	for (size_t i = 0; i < c->nsweep; i++) {
		double lr = c->sweep[i].lr;

		if (lr < best)
			below = fmax(below, lr);
		if (lr > best)
			above = fmin(above, lr);
	}
	if (below > 0 && above == INFINITY)
		return best * best / below;
	if (below == 0 && above < INFINITY)
		return best * best / above;
	return 0;
}

int run_baseline(const struct job_spec *js, const struct run_opts *o,
		 const char *dir, struct run_record *r,
		 const volatile sig_atomic_t *stop, struct err *e)
{
	struct run_compare *c = &r->baseline;
	uint64_t per_step = (uint64_t)js->optimizer.batch_size *
			    (uint64_t)jobspec_seq_len(js) * (uint64_t)js->learners.replicas;
	uint64_t tok = js->budget.tokens ? js->budget.tokens : r->final.tokens;
	double lrs[RUN_SWEEP_MAX], t0 = clock_mono(), next;
	size_t n;

	c->ran = 1;
	c->tokens = tok;
	if (run_baseline_lrs(js, o->baseline_lrs, lrs, &n, e))
		return -1;
	for (size_t i = 0; i < n; i++)
		if (sweep_trial(js, o, dir, c, lrs[i], tok, per_step, stop, e))
			return -1;
	/* --baseline-widen: a best rate at the edge is not yet a tuned one */
	for (int w = 0; w < o->baseline_widen && c->nsweep < RUN_SWEEP_MAX &&
			(next = past_edge(c)) > 0 && next <= 1; w++) {
		printf("baseline: lr %g, the best so far, is at the edge of the sweep: "
		       "trying %g\n", c->sweep[c->best].lr, next);
		if (sweep_trial(js, o, dir, c, next, tok, per_step, stop, e))
			return -1;
	}
	c->seconds = clock_mono() - t0;
	snprintf(c->log, sizeof(c->log), "%s", c->sweep[c->best].log);
	c->loss = read_train_log(c->log, c, per_step);
	c->ok = isfinite(c->loss);
	if (past_edge(c) > 0)
		printf("baseline: the best learning rate (%g) is at the edge of the sweep; "
		       "--baseline-lr or --baseline-widen widens it\n", c->sweep[c->best].lr);
	return c->ok ? 0 : err_set(e, "baseline: no final eval_loss in %s", c->log);
}
