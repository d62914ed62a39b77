/*
 * ckpt: encode/decode of the checkpoint layout drawn in ckpt.h, and the
 * folder of checkpoint files (newest first, corrupt ones skipped).
 */
#include "syncer/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

#define MAGIC "DDLSYNC1"
#define FORMAT 1
#define HEAD 48     /* magic .. zero: the fields check() reads */
#define FIXED 176

int syncer_ckpt_init(struct syncer_ckpt *c, uint32_t nfrags, uint64_t nparams,
		     uint32_t nlearners, struct err *e)
{
	memset(c, 0, sizeof(*c));
	c->nfrags = nfrags;
	c->nparams = nparams;
	c->nlearners = nlearners;
	c->versions = calloc(nfrags ? nfrags : 1, sizeof(*c->versions));
	c->learners = calloc(nlearners ? nlearners : 1, sizeof(*c->learners));
	c->evals = calloc(CKPT_MAX_EVALS, sizeof(*c->evals));
	c->theta = calloc(nparams ? nparams : 1, sizeof(float));
	c->momentum = calloc(nparams ? nparams : 1, sizeof(float));
	if (!c->versions || !c->learners || !c->evals || !c->theta ||
	    !c->momentum) {
		syncer_ckpt_release(c);
		return err_set(e, "checkpoint: out of memory");
	}
	return 0;
}

void syncer_ckpt_release(struct syncer_ckpt *c)
{
	free(c->versions);
	free(c->learners);
	free(c->evals);
	free(c->theta);
	free(c->momentum);
	memset(c, 0, sizeof(*c));
}

static size_t file_size(uint32_t P, uint64_t N, uint32_t L, uint32_t E)
{
	return FIXED + 8 * (size_t)P + 16 * (size_t)L + 32 * (size_t)E +
	       8 * (size_t)N + 4;
}

size_t syncer_ckpt_file_size(uint32_t P, uint64_t N, uint32_t L)
{
	return file_size(P, N, L, CKPT_MAX_EVALS);
}

uint64_t syncer_ckpt_model_bytes(const char *dir, uint64_t fingerprint)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char prefix[32], path[4096];
	uint64_t sum = 0;
	struct stat st;

	if (!d)
		return 0;
	snprintf(prefix, sizeof(prefix), "syncer-%016" PRIx64 "-", fingerprint);
	while ((de = readdir(d))) {
		size_t n = strlen(de->d_name);

		if (strncmp(de->d_name, prefix, strlen(prefix)) || n < 5 ||
		    strcmp(de->d_name + n - 5, ".ckpt"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (!stat(path, &st))
			sum += (uint64_t)st.st_size;
	}
	closedir(d);
	return sum;
}

static uint8_t *put(uint8_t *p, const void *v, size_t n)
{
	memcpy(p, v, n);
	return p + n;
}

static const uint8_t *get(const uint8_t *p, void *v, size_t n)
{
	memcpy(v, p, n);
	return p + n;
}

size_t syncer_ckpt_head_size(const struct syncer_ckpt *c)
{
	return file_size(c->nfrags, 0, c->nlearners, c->nevals) - 4;
}

/* The bytes before Θ (syncer_ckpt_head_size of them) into buf. */
static void encode_head(const struct syncer_ckpt *c, uint8_t *buf)
{
	uint8_t *p = buf;
	uint32_t u32 = FORMAT, zero = 0;
	uint64_t u64[9] = {
		c->rounds_started, c->rounds_completed, c->tokens_trained,
		c->merged, c->late, c->rejected, c->empty, c->bytes_in,
		c->bytes_out,
	};
	double f64[7] = {
		c->tokens_merged, c->elapsed, c->down, c->compute_merged,
		c->wall_time, c->last_round_elapsed, c->uptime_start,
	};

	p = put(p, MAGIC, 8);
	p = put(p, &u32, 4);
	p = put(p, &c->nfrags, 4);
	p = put(p, &c->nparams, 8);
	p = put(p, &c->fingerprint, 8);
	p = put(p, &c->nlearners, 4);
	p = put(p, &c->nevals, 4);
	p = put(p, &c->done, 4);
	p = put(p, &zero, 4);
	p = put(p, u64, sizeof(u64));
	p = put(p, f64, sizeof(f64));
	p = put(p, c->versions, 8 * (size_t)c->nfrags);
	for (uint32_t i = 0; i < c->nlearners; i++) {
		p = put(p, &c->learners[i].incarnation, 8);
		p = put(p, &c->learners[i].tokens, 8);
	}
	for (uint32_t i = 0; i < c->nevals; i++) {
		p = put(p, &c->evals[i].round, 8);
		p = put(p, &c->evals[i].tokens, 8);
		p = put(p, &c->evals[i].loss, 8);
		p = put(p, &c->evals[i].time, 8);
	}
}

int syncer_ckpt_encode(const struct syncer_ckpt *c, void **out, size_t *len,
		       struct err *e)
{
	size_t n = file_size(c->nfrags, c->nparams, c->nlearners, c->nevals);
	uint8_t *buf = malloc(n), *p;
	uint32_t crc;

	if (!buf)
		return err_set(e, "checkpoint: out of memory (%zu bytes)", n);
	encode_head(c, buf);
	p = buf + syncer_ckpt_head_size(c);
	p = put(p, c->theta, 4 * (size_t)c->nparams);
	p = put(p, c->momentum, 4 * (size_t)c->nparams);
	crc = crc32_update(0, buf, (size_t)(p - buf));
	p = put(p, &crc, 4);
	*out = buf;
	*len = (size_t)(p - buf);
	return 0;
}

/* Everything after the fixed header, into c (sized by syncer_ckpt_init). */
static void read_body(const uint8_t *p, struct syncer_ckpt *c)
{
	uint64_t u64[9];
	double f64[7];

	p = get(p, u64, sizeof(u64));
	p = get(p, f64, sizeof(f64));
	c->rounds_started = u64[0];
	c->rounds_completed = u64[1];
	c->tokens_trained = u64[2];
	c->merged = u64[3];
	c->late = u64[4];
	c->rejected = u64[5];
	c->empty = u64[6];
	c->bytes_in = u64[7];
	c->bytes_out = u64[8];
	c->tokens_merged = f64[0];
	c->elapsed = f64[1];
	c->down = f64[2];
	c->compute_merged = f64[3];
	c->wall_time = f64[4];
	c->last_round_elapsed = f64[5];
	c->uptime_start = f64[6];
	p = get(p, c->versions, 8 * (size_t)c->nfrags);
	for (uint32_t i = 0; i < c->nlearners; i++) {
		p = get(p, &c->learners[i].incarnation, 8);
		p = get(p, &c->learners[i].tokens, 8);
	}
	for (uint32_t i = 0; i < c->nevals; i++) {
		p = get(p, &c->evals[i].round, 8);
		p = get(p, &c->evals[i].tokens, 8);
		p = get(p, &c->evals[i].loss, 8);
		p = get(p, &c->evals[i].time, 8);
	}
	p = get(p, c->theta, 4 * (size_t)c->nparams);
	get(p, c->momentum, 4 * (size_t)c->nparams);
}

/*
 * Checks the header of a file of len bytes (the first HEAD of them in
 * buf) against the expected model and learner count, and that len is the
 * size the header says; *E and *done from the header.
 */
static int check_head(const uint8_t *buf, size_t len, const char *name,
		      uint64_t fingerprint, uint32_t nfrags, uint64_t nparams,
		      uint32_t nlearners, uint32_t *E_out, uint32_t *done_out,
		      struct err *e)
{
	const uint8_t *p = buf;
	uint32_t format, P, L, E, done, pad;
	uint64_t N, fp;

	if (len < FIXED + 4)
		return err_set(e, "cannot load checkpoint '%s': truncated (%zu bytes)",
			       name, len);
	if (memcmp(p, MAGIC, 8))
		return err_set(e, "cannot load checkpoint '%s': not a syncer checkpoint",
			       name);
	p += 8;
	p = get(p, &format, 4);
	p = get(p, &P, 4);
	p = get(p, &N, 8);
	p = get(p, &fp, 8);
	p = get(p, &L, 4);
	p = get(p, &E, 4);
	p = get(p, &done, 4);
	get(p, &pad, 4);
	if (format != FORMAT)
		return err_set(e, "cannot load checkpoint '%s': format %u, expected %u",
			       name, format, FORMAT);
	if (E > CKPT_MAX_EVALS || P > (1u << 20) || N > (1ull << 40) ||
	    L > (1u << 20) || len != file_size(P, N, L, E))
		return err_set(e, "cannot load checkpoint '%s': %zu bytes, its header "
			       "says %zu (truncated or damaged)", name, len,
			       E > CKPT_MAX_EVALS || P > (1u << 20) ||
			       N > (1ull << 40) || L > (1u << 20)
			       ? (size_t)0 : file_size(P, N, L, E));
	if (fp != fingerprint || P != nfrags || N != nparams)
		return err_set(e, "cannot load checkpoint '%s': it is for another model "
			       "(fingerprint %016" PRIx64 ", %u fragments, %" PRIu64
			       " parameters; this job: %016" PRIx64 ", %u, %" PRIu64 ")",
			       name, fp, P, N, fingerprint, nfrags, nparams);
	if (L != nlearners)
		return err_set(e, "cannot load checkpoint '%s': %u learners, the job has %u",
			       name, L, nlearners);
	*E_out = E;
	*done_out = done;
	return 0;
}

/* check_head, and the CRC of the whole file in buf. */
static int check(const uint8_t *buf, size_t len, const char *name,
		 uint64_t fingerprint, uint32_t nfrags, uint64_t nparams,
		 uint32_t nlearners, uint32_t *E_out, uint32_t *done_out,
		 struct err *e)
{
	uint32_t crc;

	if (check_head(buf, len, name, fingerprint, nfrags, nparams,
		       nlearners, E_out, done_out, e))
		return -1;
	memcpy(&crc, buf + len - 4, 4);
	if (crc32_update(0, buf, len - 4) != crc)
		return err_set(e, "cannot load checkpoint '%s': checksum mismatch",
			       name);
	return 0;
}

int syncer_ckpt_decode(const void *data, size_t len, const char *name,
		       uint64_t fingerprint, uint32_t nfrags, uint64_t nparams,
		       uint32_t nlearners, struct syncer_ckpt *c, struct err *e)
{
	uint32_t E, done;

	memset(c, 0, sizeof(*c));
	if (check(data, len, name, fingerprint, nfrags, nparams, nlearners,
		  &E, &done, e))
		return -1;
	if (syncer_ckpt_init(c, nfrags, nparams, nlearners, e))
		return err_wrap(e, "cannot load checkpoint '%s'", name);
	c->fingerprint = fingerprint;
	c->done = done;
	c->nevals = E;
	read_body((const uint8_t *)data + HEAD, c);
	return 0;
}

/* One file of the folder that may hold a checkpoint of this model. */
struct entry {
	uint64_t num;        /* rounds completed, from the name */
	int old;             /* the name without a fingerprint (ckpt.h) */
};

/*
 * Parses "syncer-<16 hex>-<digits>.ckpt" (fingerprint and round) or the
 * older "syncer-<digits>.ckpt"; returns 0 with the round, whether the name
 * is the older one, and the fingerprint in it, else -1.
 */
static int parse_name(const char *name, uint64_t *num, int *old,
		      uint64_t *fp)
{
	const char *d = name + 7;
	char *end;

	if (strncmp(name, "syncer-", 7))
		return -1;
	*old = strspn(d, "0123456789abcdef") != 16 || d[16] != '-';
	*fp = 0;
	if (!*old) {
		*fp = strtoull(d, NULL, 16);
		d += 17;
	}
	if (*d < '0' || *d > '9')
		return -1;
	errno = 0;
	*num = strtoull(d, &end, 10);
	if (errno || strcmp(end, ".ckpt"))
		return -1;
	return 0;
}

/* Newest first; of two names for one round, the one with a fingerprint. */
static int cmp_newest(const void *a, const void *b)
{
	const struct entry *x = a, *y = b;

	if (x->num != y->num)
		return (x->num < y->num) - (x->num > y->num);
	return x->old - y->old;
}

/*
 * The files in dir that may be checkpoints of the model `fingerprint`,
 * newest first (caller frees): those named with it, and those of the
 * older names, which say no model. Files named for another model are
 * not listed: they are never read nor removed here.
 */
static int list_ckpts(const char *dir, uint64_t fingerprint,
		      struct entry **out, size_t *n, struct err *e)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	struct entry *v = NULL, x;
	size_t cnt = 0, cap = 0;
	uint64_t fp;

	*out = NULL;
	*n = 0;
	if (!d) {
		if (errno == ENOENT)
			return 0;
		return err_set(e, "cannot read checkpoint folder '%s': %s", dir,
			       strerror(errno));
	}
	while ((de = readdir(d))) {
		if (parse_name(de->d_name, &x.num, &x.old, &fp) ||
		    (!x.old && fp != fingerprint))
			continue;
		if (cnt == cap) {
			struct entry *nv;

			cap = cap ? 2 * cap : 16;
			if (!(nv = realloc(v, cap * sizeof(*v)))) {
				free(v);
				closedir(d);
				return err_set(e, "checkpoint: out of memory");
			}
			v = nv;
		}
		v[cnt++] = x;
	}
	closedir(d);
	if (cnt)
		qsort(v, cnt, sizeof(*v), cmp_newest);
	*out = v;
	*n = cnt;
	return 0;
}

static void ckpt_path(char *buf, size_t len, const char *dir,
		      uint64_t fingerprint, const struct entry *x)
{
	if (x->old)
		snprintf(buf, len, "%s/syncer-%012" PRIu64 ".ckpt", dir, x->num);
	else
		snprintf(buf, len, "%s/syncer-%016" PRIx64 "-%012" PRIu64 ".ckpt",
			 dir, fingerprint, x->num);
}

/* Whether the file's last 4 bytes are the CRC of the others, read in
 * pieces (a checkpoint may be larger than the memory to spare). */
static int crc_ok(int fd, size_t len)
{
	static const size_t piece = 1 << 20;
	uint8_t *buf = malloc(piece);
	uint32_t crc = 0, want;
	size_t at = 0;
	int ok = buf && len >= 4;

	while (ok && at < len - 4) {
		size_t n = len - 4 - at < piece ? len - 4 - at : piece;

		ok = pread(fd, buf, n, (off_t)at) == (ssize_t)n;
		if (ok)
			crc = crc32_update(crc, buf, n);
		at += n;
	}
	ok = ok && pread(fd, &want, 4, (off_t)(len - 4)) == 4 && want == crc;
	free(buf);
	return ok;
}

/* What a writer learnt of a file: the file of `num` loads or not. */
static int known_find(const struct ckpt_known *k, const struct entry *x)
{
	for (size_t i = 0; k && i < k->n; i++)
		if (k->v[i].num == x->num && k->v[i].old == x->old)
			return (int)i;
	return -1;
}

static void known_add(struct ckpt_known *k, const struct entry *x, int ok)
{
	int i = known_find(k, x);

	if (!k)
		return;
	if (i < 0 && k->n == k->cap) {
		size_t cap = k->cap ? 2 * k->cap : 8;
		void *nv = realloc(k->v, cap * sizeof(*k->v));

		if (!nv)
			return;   /* read again next time */
		k->v = nv;
		k->cap = cap;
	}
	if (i < 0)
		i = (int)k->n++;
	k->v[i].num = x->num;
	k->v[i].old = x->old;
	k->v[i].ok = ok;
}

void ckpt_known_release(struct ckpt_known *k)
{
	free(k->v);
	memset(k, 0, sizeof(*k));
}

/*
 * Whether path (the file x) is a checkpoint that c's model and learners
 * would load: its header and size, and its CRC read once in a writer's
 * life (known remembers it, and the files it wrote itself; docs/syncer.md,
 * Checkpoints) — a save does not read every other checkpoint whole.
 */
static int loadable(const char *path, const struct entry *x,
		    const struct syncer_ckpt *c, struct ckpt_known *known)
{
	uint8_t head[HEAD];
	struct stat st;
	uint32_t E, done;
	int fd = open(path, O_RDONLY), ok, i;

	if (fd < 0)
		return 0;
	ok = !fstat(fd, &st) && pread(fd, head, sizeof(head), 0) ==
			(ssize_t)sizeof(head) &&
	     !check_head(head, (size_t)st.st_size, path, c->fingerprint,
			 c->nfrags, c->nparams, c->nlearners, &E, &done, NULL);
	if (ok && (i = known_find(known, x)) >= 0)
		ok = known->v[i].ok;
	else if (ok) {
		ok = crc_ok(fd, (size_t)st.st_size);
		known_add(known, x, ok);
	}
	close(fd);
	return ok;
}

/*
 * Keeps `keep` checkpoints of this model: the one just written (`just`)
 * and the newest keep − 1 others that load; removes the other loadable
 * ones. A file that does not load (damaged, another learner count, a
 * name of the older form for another model) is left alone and counts for
 * nothing, so it can neither push out the file just written nor a good
 * older one.
 */
static void prune(const char *dir, const struct syncer_ckpt *c, int keep,
		  const char *just, struct ckpt_known *known)
{
	struct entry *v;
	size_t n;
	int kept = 1;

	if (list_ckpts(dir, c->fingerprint, &v, &n, NULL))
		return;
	for (size_t i = 0; i < n; i++) {
		char path[4096];

		ckpt_path(path, sizeof(path), dir, c->fingerprint, &v[i]);
		if (!strcmp(path, just) || !loadable(path, &v[i], c, known))
			continue;
		if (kept < keep)
			kept++;
		else if (unlink(path))
			log_error("cannot remove old checkpoint '%s': %s", path,
				  strerror(errno));
	}
	free(v);
}

static int write_fd(void *ctx, int fd, const void *buf, size_t n)
{
	(void)ctx;
	return fd_write_all(fd, buf, n);
}

int ckpt_out_open(struct ckpt_out *o, const char *dir,
		  const struct syncer_ckpt *c, struct err *e)
{
	struct entry self = { c->rounds_completed, 0 };
	size_t n = syncer_ckpt_head_size(c);
	char path[4096];
	uint8_t *head;

	if (!o->write)
		o->write = write_fd;
	o->crc = 0;
	o->f.fd = -1;
	if (mkdir_p(dir, e))
		return err_wrap(e, "cannot save checkpoint");
	ckpt_path(path, sizeof(path), dir, c->fingerprint, &self);
	if (!(head = malloc(n)))
		return err_set(e, "cannot save checkpoint: out of memory");
	encode_head(c, head);
	if (afile_open(&o->f, path, e)) {
		free(head);
		return err_wrap(e, "cannot save checkpoint");
	}
	if (ckpt_out_write(o, head, n, e)) {
		free(head);
		return -1;
	}
	free(head);
	return 0;
}

int ckpt_out_write(struct ckpt_out *o, const void *buf, size_t n,
		   struct err *e)
{
	o->crc = crc32_update(o->crc, buf, n);
	if (o->write(o->write_ctx, o->f.fd, buf, n)) {
		err_set(e, "cannot save checkpoint: cannot write '%s': %s",
			o->f.tmp, strerror(errno));
		afile_abort(&o->f);
		return -1;
	}
	return 0;
}

int ckpt_out_commit(struct ckpt_out *o, const char *dir,
		    const struct syncer_ckpt *c, int keep, struct err *e)
{
	uint32_t crc = o->crc;

	if (ckpt_out_write(o, &crc, 4, e))
		return -1;
	if (afile_commit(&o->f, e))
		return err_wrap(e, "cannot save checkpoint");
	known_add(o->known, &(struct entry){ c->rounds_completed, 0 }, 1);
	prune(dir, c, keep > 0 ? keep : 1, o->f.path, o->known);
	return 0;
}

void ckpt_out_abort(struct ckpt_out *o)
{
	if (o->f.fd >= 0)
		afile_abort(&o->f);
}

int syncer_ckpt_save(const char *dir, const struct syncer_ckpt *c, int keep,
		     char *path_out, size_t path_len, struct err *e)
{
	struct ckpt_out o = { 0 };

	if (ckpt_out_open(&o, dir, c, e) ||
	    ckpt_out_write(&o, c->theta, 4 * (size_t)c->nparams, e) ||
	    ckpt_out_write(&o, c->momentum, 4 * (size_t)c->nparams, e) ||
	    ckpt_out_commit(&o, dir, c, keep, e))
		return -1;
	if (path_out)
		snprintf(path_out, path_len, "%s", o.f.path);
	return 0;
}

/* Loads path into c: 0, or -1 with an error line on the log. */
static int load_one(const char *path, size_t max, uint64_t fingerprint,
		    uint32_t nfrags, uint64_t nparams, uint32_t nlearners,
		    struct syncer_ckpt *c)
{
	struct err le;
	void *buf;
	size_t len;
	int rc;

	if (file_read_all(path, max, &buf, &len, &le)) {
		log_error("cannot load checkpoint '%s': %s", path, le.msg);
		return -1;
	}
	rc = syncer_ckpt_decode(buf, len, path, fingerprint, nfrags, nparams,
				nlearners, c, &le);
	free(buf);
	if (rc)
		log_error("%s; skipped", le.msg);
	return rc;
}

int syncer_ckpt_load_newest(const char *dir, uint64_t fingerprint,
			    uint32_t nfrags, uint64_t nparams,
			    uint32_t nlearners, struct syncer_ckpt *c,
			    char *path_out, size_t path_len, struct err *e)
{
	size_t max = file_size(nfrags, nparams, nlearners, CKPT_MAX_EVALS);
	struct entry *v;
	size_t n;

	if (list_ckpts(dir, fingerprint, &v, &n, e))
		return -1;
	for (size_t i = 0; i < n; i++) {
		char path[4096];

		ckpt_path(path, sizeof(path), dir, fingerprint, &v[i]);
		if (load_one(path, max, fingerprint, nfrags, nparams, nlearners,
			     c))
			continue;
		if (path_out)
			snprintf(path_out, path_len, "%s", path);
		free(v);
		return 1;
	}
	free(v);
	return 0;
}

int syncer_ckpt_remove_tmp(const char *dir, uint64_t fingerprint)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char prefix[32], path[4096];
	int n = 0;

	if (!d)
		return 0;
	snprintf(prefix, sizeof(prefix), "syncer-%016" PRIx64 "-", fingerprint);
	while ((de = readdir(d))) {
		const char *t = strstr(de->d_name, ".tmp");

		if (strncmp(de->d_name, prefix, strlen(prefix)) || !t ||
		    (t[4] && t[4] != '.'))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (unlink(path)) {
			log_error("cannot remove '%s', left by a write that did "
				  "not finish: %s", path, strerror(errno));
			continue;
		}
		log_info("removed '%s', left by a write that did not finish",
			 path);
		n++;
	}
	closedir(d);
	return n;
}

int syncer_ckpt_newest_name(const char *dir, uint64_t fingerprint,
			    uint64_t *round)
{
	struct entry *v;
	size_t n;

	if (list_ckpts(dir, fingerprint, &v, &n, NULL) || !n) {
		free(v);
		return 0;
	}
	*round = v[0].num;
	free(v);
	return 1;
}

static void good_path(char *buf, size_t len, const char *dir,
		      uint64_t fingerprint)
{
	snprintf(buf, len, "%s/syncer-%016" PRIx64 "-last-good.ckpt", dir,
		 fingerprint);
}

int syncer_ckpt_mark_good(const char *dir, uint64_t fingerprint,
			  uint64_t round, struct err *e)
{
	struct entry self = { round, 0 };
	char src[4096], dst[4096], tmp[4200];
	size_t len;
	void *buf;
	int rc;

	ckpt_path(src, sizeof(src), dir, fingerprint, &self);
	good_path(dst, sizeof(dst), dir, fingerprint);
	snprintf(tmp, sizeof(tmp), "%s.tmp", dst);
	if (access(src, F_OK))
		return 0;
	/* checkpoint files are only ever renamed into place, never written
	 * in place, so a second name for one is a frozen copy of it */
	unlink(tmp);
	if (link(src, tmp) == 0) {
		if (rename(tmp, dst) == 0)
			return 1;
		rc = errno;
		unlink(tmp);
		return err_set(e, "cannot keep '%s' as '%s': %s", src, dst,
			       strerror(rc));
	}
	if (errno == ENOENT)
		return 0;
	/* a file system without hard links: a copy */
	if (file_read_all(src, SIZE_MAX, &buf, &len, e))
		return err_wrap(e, "cannot keep '%s' as the last good checkpoint",
				src);
	rc = file_write_atomic(dst, buf, len, e);
	free(buf);
	if (rc)
		return err_wrap(e, "cannot keep '%s' as the last good checkpoint",
				src);
	return 1;
}

int syncer_ckpt_load_good(const char *dir, uint64_t fingerprint,
			  uint32_t nfrags, uint64_t nparams, uint32_t nlearners,
			  struct syncer_ckpt *c, char *path_out, size_t path_len)
{
	char path[4096];

	good_path(path, sizeof(path), dir, fingerprint);
	if (access(path, F_OK))
		return 0;
	if (load_one(path, file_size(nfrags, nparams, nlearners, CKPT_MAX_EVALS),
		     fingerprint, nfrags, nparams, nlearners, c))
		return 0;
	if (path_out)
		snprintf(path_out, path_len, "%s", path);
	return 1;
}

/* ---- high-water mark ------------------------------------------------- */

static void hwm_path(char *buf, size_t len, const char *dir,
		     uint64_t fingerprint)
{
	snprintf(buf, len, "%s/syncer-%016" PRIx64 "-hwm", dir, fingerprint);
}

int syncer_hwm_write(const char *dir, uint64_t fingerprint,
		     const struct syncer_hwm *h, struct err *e)
{
	char path[4096], *txt;
	size_t len = 128 + (size_t)h->nfrags * 24, n;
	int rc;

	if (h->nfrags > HWM_MAX_FRAGS)
		return err_set(e, "cannot write high-water mark: %u fragments "
			       "(at most %d)", h->nfrags, HWM_MAX_FRAGS);
	if (!(txt = malloc(len)))
		return err_set(e, "cannot write high-water mark: out of memory");
	n = (size_t)snprintf(txt, len, "%s\nfingerprint %016" PRIx64
			     "\nrounds %" PRIu64 "\nversions", HWM_MAGIC,
			     fingerprint, h->rounds);
	for (uint32_t p = 0; p < h->nfrags; p++)
		n += (size_t)snprintf(txt + n, len - n, " %" PRIu64,
				      h->versions[p]);
	n += (size_t)snprintf(txt + n, len - n, "\n");
	if (mkdir_p(dir, e)) {
		free(txt);
		return err_wrap(e, "cannot write high-water mark");
	}
	hwm_path(path, sizeof(path), dir, fingerprint);
	rc = file_write_atomic(path, txt, n, e);
	free(txt);
	return rc ? err_wrap(e, "cannot write high-water mark") : 0;
}

/* Reads the unsigned decimal at *p and moves past it; -1 when none. */
static int read_u64(const char **p, uint64_t *v)
{
	char *end;

	if (**p < '0' || **p > '9')
		return -1;
	errno = 0;
	*v = strtoull(*p, &end, 10);
	if (errno)
		return -1;
	*p = end;
	return 0;
}

int syncer_hwm_read(const char *dir, uint64_t fingerprint, uint32_t nfrags,
		    struct syncer_hwm *h, struct err *e)
{
	char path[4096], head[128];
	const char *p;
	void *buf;
	size_t len;
	int rc = -1;

	hwm_path(path, sizeof(path), dir, fingerprint);
	if (access(path, F_OK))
		return 0;
	if (file_read_all(path, 128 + (size_t)HWM_MAX_FRAGS * 24, &buf, &len, e))
		return err_wrap(e, "cannot read high-water mark '%s'", path);
	snprintf(head, sizeof(head), "%s\nfingerprint %016" PRIx64 "\nrounds ",
		 HWM_MAGIC, fingerprint);
	p = buf;
	if (len == 0 || ((char *)buf)[len - 1] != '\n' ||
	    memchr(buf, 0, len) || strncmp(p, head, strlen(head))) {
		err_set(e, "cannot read high-water mark '%s': not one of this "
			"model", path);
		goto out;
	}
	((char *)buf)[len - 1] = 0;
	p += strlen(head);
	if (read_u64(&p, &h->rounds) || strncmp(p, "\nversions", 9)) {
		err_set(e, "cannot read high-water mark '%s': bad rounds line", path);
		goto out;
	}
	p += 9;
	h->nfrags = nfrags;
	for (uint32_t q = 0; q < nfrags; q++) {
		if (*p++ != ' ' || read_u64(&p, &h->versions[q])) {
			err_set(e, "cannot read high-water mark '%s': %u versions "
				"expected", path, nfrags);
			goto out;
		}
	}
	if (*p) {
		err_set(e, "cannot read high-water mark '%s': %u versions "
			"expected", path, nfrags);
		goto out;
	}
	rc = 1;
out:
	free(buf);
	return rc;
}
