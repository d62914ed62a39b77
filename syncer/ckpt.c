/*
 * ckpt: encode/decode of the checkpoint layout drawn in ckpt.h, and the
 * folder of checkpoint files (newest first, corrupt ones skipped).
 */
#include "syncer/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

#define MAGIC "DDLSYNC1"
#define FORMAT 1
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

int syncer_ckpt_encode(const struct syncer_ckpt *c, void **out, size_t *len,
		       struct err *e)
{
	size_t n = file_size(c->nfrags, c->nparams, c->nlearners, c->nevals);
	uint8_t *buf = malloc(n), *p = buf;
	uint32_t u32, zero = 0, crc;
	uint64_t u64[9] = {
		c->rounds_started, c->rounds_completed, c->tokens_trained,
		c->merged, c->late, c->rejected, c->empty, c->bytes_in,
		c->bytes_out,
	};
	double f64[7] = {
		c->tokens_merged, c->elapsed, c->down, c->compute_merged,
		c->wall_time, c->last_round_elapsed, c->uptime_start,
	};

	if (!buf)
		return err_set(e, "checkpoint: out of memory (%zu bytes)", n);
	p = put(p, MAGIC, 8);
	u32 = FORMAT;
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

int syncer_ckpt_decode(const void *data, size_t len, const char *name,
		       uint64_t fingerprint, uint32_t nfrags, uint64_t nparams,
		       uint32_t nlearners, struct syncer_ckpt *c, struct err *e)
{
	const uint8_t *buf = data, *p = buf;
	uint32_t format, P, L, E, done, pad, crc;
	uint64_t N, fp;

	memset(c, 0, sizeof(*c));
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
	p = get(p, &pad, 4);
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
	memcpy(&crc, buf + len - 4, 4);
	if (crc32_update(0, buf, len - 4) != crc)
		return err_set(e, "cannot load checkpoint '%s': checksum mismatch",
			       name);
	if (fp != fingerprint || P != nfrags || N != nparams)
		return err_set(e, "cannot load checkpoint '%s': it is for another model "
			       "(fingerprint %016" PRIx64 ", %u fragments, %" PRIu64
			       " parameters; this job: %016" PRIx64 ", %u, %" PRIu64 ")",
			       name, fp, P, N, fingerprint, nfrags, nparams);
	if (L != nlearners)
		return err_set(e, "cannot load checkpoint '%s': %u learners, the job has %u",
			       name, L, nlearners);
	if (syncer_ckpt_init(c, P, N, L, e))
		return err_wrap(e, "cannot load checkpoint '%s'", name);
	c->fingerprint = fp;
	c->done = done;
	c->nevals = E;
	read_body(p, c);
	return 0;
}

/* Parses "syncer-<digits>.ckpt"; returns 0 and the number, else -1. */
static int parse_name(const char *name, uint64_t *num)
{
	const char *d = name + 7;
	char *end;

	if (strncmp(name, "syncer-", 7) || *d < '0' || *d > '9')
		return -1;
	errno = 0;
	*num = strtoull(d, &end, 10);
	if (errno || strcmp(end, ".ckpt"))
		return -1;
	return 0;
}

static int cmp_desc_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x < y) - (x > y);
}

/* The checkpoint numbers in dir, newest first (caller frees). */
static int list_ckpts(const char *dir, uint64_t **out, size_t *n,
		      struct err *e)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	uint64_t *v = NULL, num;
	size_t cnt = 0, cap = 0;

	*out = NULL;
	*n = 0;
	if (!d) {
		if (errno == ENOENT)
			return 0;
		return err_set(e, "cannot read checkpoint folder '%s': %s", dir,
			       strerror(errno));
	}
	while ((de = readdir(d))) {
		if (parse_name(de->d_name, &num))
			continue;
		if (cnt == cap) {
			uint64_t *nv;

			cap = cap ? 2 * cap : 16;
			if (!(nv = realloc(v, cap * sizeof(*v)))) {
				free(v);
				closedir(d);
				return err_set(e, "checkpoint: out of memory");
			}
			v = nv;
		}
		v[cnt++] = num;
	}
	closedir(d);
	if (cnt)
		qsort(v, cnt, sizeof(*v), cmp_desc_u64);
	*out = v;
	*n = cnt;
	return 0;
}

static void ckpt_path(char *buf, size_t len, const char *dir, uint64_t num)
{
	snprintf(buf, len, "%s/syncer-%012" PRIu64 ".ckpt", dir, num);
}

int syncer_ckpt_save(const char *dir, const struct syncer_ckpt *c, int keep,
		     char *path_out, size_t path_len, struct err *e)
{
	char path[4096];
	uint64_t *nums;
	size_t n, len;
	void *buf;
	int rc;

	if (mkdir_p(dir, e))
		return err_wrap(e, "cannot save checkpoint");
	ckpt_path(path, sizeof(path), dir, c->rounds_completed);
	if (syncer_ckpt_encode(c, &buf, &len, e))
		return -1;
	rc = file_write_atomic(path, buf, len, e);
	free(buf);
	if (rc)
		return err_wrap(e, "cannot save checkpoint");
	if (path_out)
		snprintf(path_out, path_len, "%s", path);
	if (list_ckpts(dir, &nums, &n, NULL) == 0) {
		for (size_t i = (size_t)(keep > 0 ? keep : 1); i < n; i++) {
			char old[4096];

			ckpt_path(old, sizeof(old), dir, nums[i]);
			unlink(old);
		}
		free(nums);
	}
	return 0;
}

int syncer_ckpt_load_newest(const char *dir, uint64_t fingerprint,
			    uint32_t nfrags, uint64_t nparams,
			    uint32_t nlearners, struct syncer_ckpt *c,
			    char *path_out, size_t path_len, struct err *e)
{
	size_t max = file_size(nfrags, nparams, nlearners, CKPT_MAX_EVALS);
	uint64_t *nums;
	size_t n;

	if (list_ckpts(dir, &nums, &n, e))
		return -1;
	for (size_t i = 0; i < n; i++) {
		char path[4096];
		struct err le;
		void *buf;
		size_t len;
		int rc;

		ckpt_path(path, sizeof(path), dir, nums[i]);
		if (file_read_all(path, max, &buf, &len, &le)) {
			log_error("cannot load checkpoint '%s': %s", path,
				  le.msg);
			continue;
		}
		rc = syncer_ckpt_decode(buf, len, path, fingerprint, nfrags,
					nparams, nlearners, c, &le);
		free(buf);
		if (rc) {
			log_error("%s; skipped", le.msg);
			continue;
		}
		if (path_out)
			snprintf(path_out, path_len, "%s", path);
		free(nums);
		return 1;
	}
	free(nums);
	return 0;
}
