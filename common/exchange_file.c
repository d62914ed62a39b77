/*
 * exchange_file: the exchange's files read or written without attaching
 * (formats in exchange.h): the region's table as its learner made it
 * (exchange_peek, which also leaves the sidecar's versions: docs/exchange.md,
 * Versions), and the seed file beside the region, a learner's
 * initial weights for a syncer that adopts them (docs/syncer.md,
 * Model-agnostic jobs), written whole under a temporary name and
 * renamed, read one fragment at a time.
 */
#include "common/exchange.h"
#include "common/exchange_layout.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


int exchange_peek(const char *dir, int *nfrags, uint64_t *fingerprint,
		  uint64_t **sizes, struct err *e)
{
	char path[PATH_MAX_EXCH];
	struct xhdr h;
	struct xfrag f;
	struct exchange_version self;
	uint64_t *out;
	int fd, rc;

	if (snprintf(path, sizeof(path), "%s/%s", dir, EXCHANGE_FILE) >=
	    (int)sizeof(path))
		return err_set(e, "exchange: folder name too long: '%s'", dir);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		return 1;
	if (fd < 0)
		return err_set(e, "exchange: cannot open '%s': %s", path,
			       strerror(errno));
	/* the versions before the layout: a learner of another release
	 * is named as such (docs/exchange.md, Versions) */
	exchange_version_self(&self);
	if ((rc = xver_meet_fd(fd, EXCHANGE_SIDECAR, &self, e))) {
		close(fd);
		return rc;
	}
	if (pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    h.magic != XMAGIC || h.layout != XLAYOUT || h.nfrags < 1 ||
	    h.nfrags > EXCHANGE_MAX_FRAGS) {
		close(fd);
		return err_set(e, "exchange: '%s' is not an exchange region of "
			       "layout %u", path, XLAYOUT);
	}
	out = malloc(h.nfrags * sizeof(*out));
	if (!out) {
		close(fd);
		return err_set(e, "exchange: out of memory");
	}
	for (uint32_t p = 0; p < h.nfrags; p++) {
		if (pread(fd, &f, sizeof(f), XHDR_SIZE + p * sizeof(f)) !=
		    (ssize_t)sizeof(f) || f.numel < 1) {
			free(out);
			close(fd);
			return err_set(e, "exchange: '%s': fragment %u has no "
				       "size", path, p);
		}
		out[p] = f.numel;
	}
	close(fd);
	*nfrags = (int)h.nfrags;
	*fingerprint = h.fingerprint;
	*sizes = out;
	return 0;
}

#define SEED_MAGIC 0x3130444545534444ULL   /* "DDSEED01" little-endian */
#define SEED_HDR 24

int exchange_write_seed(const char *dir, const struct frag_table *ft,
			const float *params, struct err *e)
{
	char path[PATH_MAX_EXCH], tmp[PATH_MAX_EXCH + 32];
	uint64_t hdr[3] = { SEED_MAGIC, ft->fingerprint, (uint64_t)ft->nfrags };
	size_t maxn = 0;
	float *buf;
	FILE *f;
	int ok;

	if (snprintf(path, sizeof(path), "%s/%s", dir, EXCHANGE_SEED_FILE) >=
	    (int)sizeof(path))
		return err_set(e, "exchange: folder name too long: '%s'", dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
	for (int p = 0; p < ft->nfrags; p++)
		if (ft->frags[p].numel > maxn)
			maxn = ft->frags[p].numel;
	buf = malloc(maxn * sizeof(float));
	if (!buf)
		return err_set(e, "exchange: out of memory");
	f = fopen(tmp, "wb");
	if (!f) {
		free(buf);
		return err_set(e, "exchange: cannot create '%s': %s", tmp,
			       strerror(errno));
	}
	ok = fwrite(hdr, sizeof(hdr), 1, f) == 1;
	for (int p = 0; ok && p < ft->nfrags; p++) {
		frag_gather(ft, p, params, buf);
		ok = fwrite(buf, sizeof(float), ft->frags[p].numel, f) ==
		     ft->frags[p].numel;
	}
	free(buf);
	if (fclose(f) || !ok || rename(tmp, path)) {
		err_set(e, "exchange: cannot write '%s': %s", path,
			strerror(errno));
		unlink(tmp);
		return -1;
	}
	return 0;
}

int exchange_read_seed(const char *dir, const struct frag_table *ft, int p,
		       float *out, struct err *e)
{
	char path[PATH_MAX_EXCH];
	uint64_t hdr[3];
	size_t off = SEED_HDR, n = ft->frags[p].numel;
	int fd, rc = -1;

	if (snprintf(path, sizeof(path), "%s/%s", dir, EXCHANGE_SEED_FILE) >=
	    (int)sizeof(path))
		return err_set(e, "exchange: folder name too long: '%s'", dir);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return err_set(e, "exchange: no seed '%s': %s", path,
			       strerror(errno));
	for (int q = 0; q < p; q++)
		off += ft->frags[q].numel * sizeof(float);
	if (pread(fd, hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr) ||
	    hdr[0] != SEED_MAGIC)
		err_set(e, "exchange: '%s' is not a seed file", path);
	else if (hdr[1] != ft->fingerprint || hdr[2] != (uint64_t)ft->nfrags)
		err_set(e, "exchange: seed '%s' is for model fingerprint "
			"%016llx with %llu fragments, not %016llx with %d", path,
			(unsigned long long)hdr[1], (unsigned long long)hdr[2],
			(unsigned long long)ft->fingerprint, ft->nfrags);
	else if (pread(fd, out, n * sizeof(float), (off_t)off) !=
		 (ssize_t)(n * sizeof(float)))
		err_set(e, "exchange: seed '%s' is short", path);
	else
		rc = 0;
	close(fd);
	return rc;
}
