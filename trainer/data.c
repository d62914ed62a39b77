/*
 * data: reads text and llm.c token shards into one uint16 token array per
 * path, splits train/validation and hands out batch windows.
 *
 * Everything is held in memory (at most DATA_MAX_BYTES per path): the
 * reference learner trains on small corpora, and a plain array keeps the
 * batch logic a few lines of index arithmetic.
 */
#include "trainer/data.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/util.h"

int dataset_add(struct dataset *d, const char *path, const uint8_t *buf,
		size_t len, enum data_format fmt, int vocab, struct err *e)
{
	int32_t hdr[3];
	size_t ntok, expect;
	uint16_t *grown;

	if (fmt == DATA_AUTO) {
		int32_t magic = 0;

		if (len >= 4)
			memcpy(&magic, buf, 4);
		fmt = magic == DATA_SHARD_MAGIC ? DATA_TOKENS : DATA_TEXT;
	}
	if (d->format != DATA_AUTO && d->format != fmt)
		return err_set(e, "data: '%s' is %s but the files before it are %s",
			       path, fmt == DATA_TEXT ? "text" : "a token shard",
			       d->format == DATA_TEXT ? "text" : "token shards");
	d->format = fmt;
	if (fmt == DATA_TEXT) {
		if (vocab < 256)
			return err_set(e, "data: '%s' is text (bytes) but spec.model.vocabSize is %d, less than 256",
				       path, vocab);
		ntok = len;
	} else {
		memset(hdr, 0, sizeof(hdr));
		memcpy(hdr, buf, len < 4 ? len : 4);
		if (hdr[0] != DATA_SHARD_MAGIC)
			return err_set(e, "data: '%s': not a token shard (magic %d, expected %d)",
				       path, hdr[0], DATA_SHARD_MAGIC);
		if (len < DATA_SHARD_HEADER)
			return err_set(e, "data: '%s': truncated token shard header (%zu of %d bytes)",
				       path, len, DATA_SHARD_HEADER);
		memcpy(hdr, buf, sizeof(hdr));
		if (hdr[1] != DATA_SHARD_VERSION)
			return err_set(e, "data: '%s': unsupported token shard version %d (expected %d)",
				       path, hdr[1], DATA_SHARD_VERSION);
		if (hdr[2] < 0)
			return err_set(e, "data: '%s': corrupt token shard header (token count %d)",
				       path, hdr[2]);
		ntok = (size_t)hdr[2];
		expect = DATA_SHARD_HEADER + 2 * ntok;
		if (len < expect)
			return err_set(e, "data: '%s': truncated token shard: the header says %zu tokens, the file holds %zu",
				       path, ntok, (len - DATA_SHARD_HEADER) / 2);
		if (len > expect)
			return err_set(e, "data: '%s': corrupt token shard: %zu bytes after the %zu tokens the header announces",
				       path, len - expect, ntok);
	}
	grown = realloc(d->tok, (d->n + ntok + 1) * sizeof(uint16_t));
	if (!grown)
		return err_set(e, "data: out of memory reading '%s'", path);
	d->tok = grown;
	if (fmt == DATA_TEXT) {
		for (size_t i = 0; i < ntok; i++)
			d->tok[d->n + i] = buf[i];
	} else {
		const uint8_t *p = buf + DATA_SHARD_HEADER;

		for (size_t i = 0; i < ntok; i++) {
			uint16_t t = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);

			if (t >= vocab)
				return err_set(e, "data: '%s': token %u at index %zu is outside the vocabulary (%d)",
					       path, t, i, vocab);
			d->tok[d->n + i] = t;
		}
	}
	d->n += ntok;
	return 0;
}

static int load_one(struct dataset *d, const char *path, enum data_format fmt,
		    int vocab, size_t *budget, struct err *e)
{
	void *buf;
	size_t len;
	int rc;

	if (file_read_all(path, *budget, &buf, &len, e))
		return err_wrap(e, "data");
	*budget -= len;
	rc = dataset_add(d, path, buf, len, fmt, vocab, e);
	free(buf);
	return rc;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int wanted(const char *name)
{
	size_t n = strlen(name);

	if (name[0] == '.')
		return 0;
	return !(n >= 4 && !strcmp(name + n - 4, ".dat"));
}

/* The files of a folder tree (data.h): full paths, unsorted. */
struct listing {
	char **names;
	size_t n, cap;
};

static int list_tree(struct listing *l, const char *dir, int depth,
		     struct err *e)
{
	DIR *dh = opendir(dir);
	struct dirent *de;
	int rc = 0;

	if (!dh)
		return err_set(e, "data: cannot open folder '%s'", dir);
	while (!rc && (de = readdir(dh))) {
		char path[4096];
		struct stat st;
		int k;

		if (!wanted(de->d_name))
			continue;
		k = snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (k < 0 || (size_t)k >= sizeof(path) || lstat(path, &st))
			continue;
		if (S_ISDIR(st.st_mode)) {
			rc = depth >= DATA_MAX_DEPTH
			     ? err_set(e, "data: '%s' is more than %d folders deep",
				       path, DATA_MAX_DEPTH)
			     : list_tree(l, path, depth + 1, e);
			continue;
		}
		if (!S_ISREG(st.st_mode))
			continue;
		if (l->n >= DATA_MAX_FILES)
			rc = err_set(e, "data: more than %d files under '%s'",
				     DATA_MAX_FILES, dir);
		else if (l->n == l->cap) {
			size_t cap = l->cap ? 2 * l->cap : 64;
			char **g = realloc(l->names, cap * sizeof(*g));

			if (!g)
				rc = err_set(e, "data: out of memory listing '%s'", dir);
			else {
				l->names = g;
				l->cap = cap;
			}
		}
		if (!rc && !(l->names[l->n++] = strdup(path)))
			rc = err_set(e, "data: out of memory listing '%s'", dir);
	}
	closedir(dh);
	return rc;
}

double data_file_hash(const char *rel)
{
	uint64_t h = 0xcbf29ce484222325ULL;   /* FNV-1a, 64 bits */

	for (const unsigned char *c = (const unsigned char *)rel; *c; c++)
		h = (h ^ *c) * 0x100000001b3ULL;
	/* FNV's high bits hardly move over short paths: a finisher mixes
	 * every bit into them */
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return (double)(h >> 11) * 0x1p-53;
}

int data_file_in_val(const char *rel, double val_fraction)
{
	return data_file_hash(rel) < val_fraction;
}

/* Keeps every file, or those of one side of a split by files: a file's
 * hash h (data_file_hash) is training at or above valFraction (vf); the
 * held-out files are dealt between tuning and validation (deal). */
enum side { SIDE_ALL, SIDE_TRAIN, SIDE_VAL, SIDE_TUNE };
struct pick {
	enum side split;
	double val_fraction, tune_fraction;
	size_t root_len;
};

static const char *side_name[] = { "any", "training", "validation", "tuning" };

/* A held-out file, for deal. */
struct held {
	const char *rel;                /* its path below the folder */
	size_t top;                     /* length of its first folder's name, 0 at the root */
	double h;
	double size;                    /* bytes */
	size_t i;                       /* in the listing */
};

static int top_cmp(const struct held *x, const struct held *y)
{
	int c = strncmp(x->rel, y->rel, x->top < y->top ? x->top : y->top);

	return c ? c : (x->top > y->top) - (x->top < y->top);
}

static int by_top_then_hash(const void *a, const void *b)
{
	const struct held *x = a, *y = b;
	int c = top_cmp(x, y);

	return c ? c : (x->h > y->h) - (x->h < y->h);
}

/* The side of each file of a listing. The held-out files are dealt folder
 * by folder (the first name below the root), in hash order: each goes
 * to the side further below its share of the folder's held-out bytes
 * so far (tuning tuneFraction tf, validation the rest; a tie to tuning
 * when h < vf·tf), so that both sides read the same mix of folders. */
static int deal(enum side *of, char *const *names, size_t n,
		const struct pick *k, struct err *e)
{
	struct held *hv = calloc(n ? n : 1, sizeof(*hv));
	double tf = k->tune_fraction, tune = 0, val = 0;
	size_t m = 0;

	if (!hv)
		return err_set(e, "data: out of memory splitting %zu files", n);
	for (size_t i = 0; i < n; i++) {
		const char *rel = names[i] + k->root_len + 1, *slash = strchr(rel, '/');
		double h = data_file_hash(rel);
		struct stat st;

		of[i] = SIDE_TRAIN;
		if (h >= k->val_fraction)
			continue;
		hv[m] = (struct held){ rel, slash ? (size_t)(slash - rel) : 0, h,
				       stat(names[i], &st) ? 0 : (double)st.st_size, i };
		m++;
	}
	qsort(hv, m, sizeof(*hv), by_top_then_hash);
	for (size_t j = 0; j < m; j++) {
		double dt, dv;

		if (j && top_cmp(&hv[j], &hv[j - 1]))
			tune = val = 0;
		dt = tf * (tune + val + hv[j].size) - tune;
		dv = (1 - tf) * (tune + val + hv[j].size) - val;
		if (tf > 0 && (dt > dv || (dt == dv && hv[j].h < k->val_fraction * tf))) {
			of[hv[j].i] = SIDE_TUNE;
			tune += hv[j].size;
		} else {
			of[hv[j].i] = SIDE_VAL;
			val += hv[j].size;
		}
	}
	free(hv);
	return 0;
}

static int load_dir(struct dataset *d, const char *dir, enum data_format fmt,
		    int vocab, const struct pick *k, size_t *budget,
		    struct err *e)
{
	struct listing l = { 0 };
	enum side *of = NULL;
	size_t used = 0;
	int rc = list_tree(&l, dir, 0, e);

	if (!rc && l.n == 0)
		rc = err_set(e, "data: no data files in folder '%s'", dir);
	if (!rc)
		qsort(l.names, l.n, sizeof(*l.names), by_name);
	if (!rc && k->split != SIDE_ALL) {
		of = malloc(l.n * sizeof(*of));
		rc = of ? deal(of, l.names, l.n, k, e)
			: err_set(e, "data: out of memory splitting '%s'", dir);
	}
	for (size_t i = 0; i < l.n && !rc; i++)
		if (!of || of[i] == k->split) {
			rc = load_one(d, l.names[i], fmt, vocab, budget, e);
			used++;
		}
	if (!rc && !used)
		rc = err_set(e, "data: none of the %zu files under '%s' is in the "
			     "%s split (spec.data.split files, valFraction %g, "
			     "tuneFraction %g)", l.n, dir, side_name[k->split],
			     k->val_fraction, k->tune_fraction);
	free(of);
	for (size_t i = 0; i < l.n; i++)
		free(l.names[i]);
	free(l.names);
	return rc;
}

/* dataset_load of the files k picks. */
static int load_picked(struct dataset *d, const char *path,
		       enum data_format fmt, int vocab, const struct pick *k,
		       struct err *e)
{
	struct stat st;
	size_t budget = DATA_MAX_BYTES;
	int rc;

	memset(d, 0, sizeof(*d));
	if (!path[0])
		return err_set(e, "data: spec.data.path is empty");
	if (stat(path, &st))
		return err_set(e, "data: cannot open '%s': %s", path, strerror(errno));
	if (S_ISDIR(st.st_mode))
		rc = load_dir(d, path, fmt, vocab, k, &budget, e);
	else if (k->split)
		rc = err_set(e, "data: spec.data.split files needs a folder, and "
			     "'%s' is a file", path);
	else
		rc = load_one(d, path, fmt, vocab, &budget, e);
	if (rc)
		dataset_release(d);
	return rc;
}

int dataset_load(struct dataset *d, const char *path, enum data_format fmt,
		 int vocab, struct err *e)
{
	struct pick all = { SIDE_ALL, 0, 0, 0 };

	return load_picked(d, path, fmt, vocab, &all, e);
}

void dataset_release(struct dataset *d)
{
	free(d->tok);
	memset(d, 0, sizeof(*d));
}

int data_write_shard(const char *path, const uint16_t *tok, size_t n,
		     struct err *e)
{
	size_t len = DATA_SHARD_HEADER + 2 * n;
	uint8_t *buf;
	int32_t hdr[3] = { DATA_SHARD_MAGIC, DATA_SHARD_VERSION, (int32_t)n };
	int rc;

	if (n > INT32_MAX)
		return err_set(e, "data: %zu tokens do not fit one shard", n);
	buf = calloc(1, len);
	if (!buf)
		return err_set(e, "data: out of memory writing '%s'", path);
	memcpy(buf, hdr, sizeof(hdr));
	for (size_t i = 0; i < n; i++) {
		buf[DATA_SHARD_HEADER + 2 * i] = (uint8_t)(tok[i] & 0xff);
		buf[DATA_SHARD_HEADER + 2 * i + 1] = (uint8_t)(tok[i] >> 8);
	}
	rc = file_write_atomic(path, buf, len, e);
	free(buf);
	return rc;
}

/* pattern with every "{learner}" replaced by m. */
static int shard_path(char *out, size_t cap, const char *pattern, int m,
		      struct err *e)
{
	const char *key = "{learner}", *p = pattern;
	size_t used = 0;

	if (!strstr(pattern, key))
		return err_set(e, "data: spec.data.shardPattern '%s' has no {learner}",
			       pattern);
	while (*p) {
		int w;

		if (!strncmp(p, key, strlen(key))) {
			w = snprintf(out + used, cap - used, "%d", m);
			p += strlen(key);
		} else {
			w = snprintf(out + used, cap - used, "%c", *p);
			p++;
		}
		if (w < 0 || (size_t)w >= cap - used)
			return err_set(e, "data: shard path from '%s' is too long", pattern);
		used += (size_t)w;
	}
	return 0;
}

/* Sets train/val/tune from src (tail split) or from valsrc: the tune
 * share of what is held out comes first (a split by files has its own
 * tuning files, tunesrc). */
static void split(struct data *d, double val_fraction, double tune_fraction,
		  int have_valsrc)
{
	size_t held = have_valsrc ? d->valsrc.n
				  : (size_t)((double)d->src.n * val_fraction);
	const uint16_t *h = have_valsrc ? d->valsrc.tok
					: d->src.tok + (d->src.n - held);
	size_t ntune = d->tunesrc.n ? 0 : (size_t)((double)held * tune_fraction);

	d->train = d->src.tok;
	d->ntrain = have_valsrc ? d->src.n : d->src.n - held;
	d->tune = d->tunesrc.n ? d->tunesrc.tok : h;
	d->ntune = d->tunesrc.n ? d->tunesrc.n : ntune;
	d->val = h + ntune;
	d->nval = held - ntune;
}

/* spec.data.split files: each side its own files of jd->path (data.h);
 * with train 0 only the validation side. */
static int open_by_files(struct data *d, const struct job_data *jd, int vocab,
			 int train, struct err *e)
{
	struct pick k = { SIDE_TRAIN, jd->val_fraction, jd->tune_fraction,
			  strlen(jd->path) };

	snprintf(d->train_name, sizeof(d->train_name), "%s", jd->path);
	if (train && load_picked(&d->src, jd->path, jd->format, vocab, &k, e))
		return -1;
	k.split = SIDE_VAL;
	if (load_picked(&d->valsrc, jd->path, jd->format, vocab, &k, e))
		goto fail;
	k.split = SIDE_TUNE;
	if (jd->tune_fraction > 0 &&
	    load_picked(&d->tunesrc, jd->path, jd->format, vocab, &k, e))
		goto fail;
	split(d, 0, 0, 1);
	return 0;
fail:
	data_close(d);
	return -1;
}

int data_open(struct data *d, const struct job_data *jd, int vocab,
	      int learner, int learners, struct err *e)
{
	char path[JOB_PATH_MAX + 64];

	memset(d, 0, sizeof(*d));
	d->spread = jd->order == ORDER_SPREAD;
	if (jd->split == SPLIT_FILES) {
		d->offset = learner;
		d->stride = learners;
		return open_by_files(d, jd, vocab, 1, e);
	}
	d->offset = learner;
	d->stride = learners;
	if (jd->shard_pattern[0]) {
		if (shard_path(path, sizeof(path), jd->shard_pattern, learner, e))
			return -1;
		d->offset = 0;     /* the whole shard is this learner's */
		d->stride = 1;
	} else {
		snprintf(path, sizeof(path), "%s", jd->path);
	}
	snprintf(d->train_name, sizeof(d->train_name), "%s", path);
	if (dataset_load(&d->src, path, jd->format, vocab, e))
		return -1;
	if (jd->val_path[0] &&
	    dataset_load(&d->valsrc, jd->val_path, jd->format, vocab, e)) {
		data_close(d);
		return -1;
	}
	split(d, jd->val_fraction, jd->tune_fraction, jd->val_path[0] != 0);
	return 0;
}

int data_open_val(struct data *d, const struct job_data *jd, int vocab,
		  struct err *e)
{
	char path[JOB_PATH_MAX + 64];

	memset(d, 0, sizeof(*d));
	d->stride = 1;
	if (jd->split == SPLIT_FILES)
		return open_by_files(d, jd, vocab, 0, e);
	if (jd->val_path[0]) {
		if (dataset_load(&d->valsrc, jd->val_path, jd->format, vocab, e))
			return -1;
		split(d, 0, jd->tune_fraction, 1);
		return 0;
	}
	if (jd->path[0])
		snprintf(path, sizeof(path), "%s", jd->path);
	else if (jd->shard_pattern[0]) {
		if (shard_path(path, sizeof(path), jd->shard_pattern, 0, e))
			return -1;
	} else
		return err_set(e, "data: neither spec.data.valPath nor spec.data.path is set");
	snprintf(d->train_name, sizeof(d->train_name), "%s", path);
	if (dataset_load(&d->src, path, jd->format, vocab, e))
		return -1;
	split(d, jd->val_fraction, jd->tune_fraction, 0);
	return 0;
}

void data_close(struct data *d)
{
	dataset_release(&d->src);
	dataset_release(&d->valsrc);
	dataset_release(&d->tunesrc);
	memset(d, 0, sizeof(*d));
}

size_t data_windows(const struct data *d, int B, int T)
{
	size_t bt = (size_t)B * T;

	return d->ntrain > bt ? (d->ntrain - 1) / bt : 0;
}

static uint64_t gcd(uint64_t a, uint64_t b)
{
	while (b) {
		uint64_t t = a % b;

		a = b;
		b = t;
	}
	return a;
}

/* The spread order's multiplier for R rows: the integer nearest R/φ
 * made prime to R (data_spread_row). */
static uint64_t spread_mult(uint64_t R)
{
	uint64_t a = (uint64_t)((double)R * 0.6180339887498949 + 0.5);

	while (a < 1 || gcd(a, R) != 1)
		a++;
	return a % R;
}

static uint64_t spread_at(uint64_t a, uint64_t x, uint64_t R)
{
	return (uint64_t)((unsigned __int128)a * (x % R) % R);
}

uint64_t data_spread_row(uint64_t x, uint64_t R)
{
	return R < 2 ? 0 : spread_at(spread_mult(R), x, R);
}

/* n inputs from p, each one's target the token after it */
static void take(const uint16_t *p, size_t n, int *inputs, int *targets)
{
	for (size_t i = 0; i < n; i++) {
		inputs[i] = p[i];
		targets[i] = p[i + 1];
	}
}

void data_batch(const struct data *d, uint64_t step, int B, int T,
		int *inputs, int *targets)
{
	size_t bt = (size_t)B * T;
	uint64_t at = step * (uint64_t)d->stride + (uint64_t)d->offset;
	uint64_t R = (d->ntrain - 1) / (size_t)T, a;

	if (!d->spread) {
		take(d->train + at % data_windows(d, B, T) * bt, bt, inputs, targets);
		return;
	}
	a = R < 2 ? 0 : spread_mult(R);   /* once a batch, not a row */
	for (int r = 0; r < B; r++)
		take(d->train + spread_at(a, at * (uint64_t)B + (uint64_t)r, R) * (size_t)T,
		     (size_t)T, inputs + (size_t)r * T, targets + (size_t)r * T);
}

void data_tune_view(const struct data *d, struct data *view)
{
	*view = *d;
	memset(&view->src, 0, sizeof(view->src));
	memset(&view->valsrc, 0, sizeof(view->valsrc));
	memset(&view->tunesrc, 0, sizeof(view->tunesrc));
	view->val = d->tune;
	view->nval = d->ntune;
}

size_t data_val_rows(const struct data *d, int T)
{
	return d->nval > (size_t)T ? (d->nval - 1) / (size_t)T : 0;
}

void data_val_row(const struct data *d, size_t r, int T, int *inputs,
		  int *targets)
{
	const uint16_t *p = d->val + r * (size_t)T;

	for (int i = 0; i < T; i++) {
		inputs[i] = p[i];
		targets[i] = p[i + 1];
	}
}

size_t data_val_pick(size_t i, size_t n, size_t rows)
{
	if (n >= rows)
		return i < rows ? i : rows - 1;
	/* i < n < rows ≤ DATA_MAX_BYTES tokens (2^32): i · rows < 2^64 */
	return (size_t)((uint64_t)i * rows / n);
}
