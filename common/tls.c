/*
 * tls: reading and writing a process's certificate files (see tls.h).
 * The checks are pki.h's; this file only finds, reads and writes files,
 * so a wrong file is named in the error before gRPC sees it.
 */
#include "common/tls.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/pki.h"
#include "common/util.h"

int tls_paths_given(const struct tls_paths *p)
{
	return p->dir || p->cert || p->key || p->ca;
}

void tls_files_release(struct tls_files *f)
{
	struct pki_pem k = { NULL, f->key };

	pki_pem_release(&k);   /* wipes the key's text */
	free(f->cert);
	free(f->ca);
	memset(f, 0, sizeof(*f));
}

/* The path of one file: its own, or the folder's name for it. */
static int pick(const char *own, const char *dir, const char *name,
		const char *flag, char *out, size_t n, struct err *e)
{
	if (own) {
		if (snprintf(out, n, "%s", own) >= (int)n)
			return err_set(e, "tls: path too long: '%s'", own);
		return 0;
	}
	if (!dir)
		return err_set(e, "tls: no %s: give --%s or --tls-dir", name, flag);
	if (snprintf(out, n, "%s/%s", dir, name) >= (int)n)
		return err_set(e, "tls: path too long: '%s/%s'", dir, name);
	return 0;
}

static int read_pem(const char *path, char **out, struct err *e)
{
	void *data;
	size_t n;

	if (file_read_all(path, PKI_MAX_PEM, &data, &n, e))
		return err_wrap(e, "tls");
	/* file_read_all ends the buffer with a NUL; a NUL inside would cut
	 * the text short */
	if (strlen(data) != n) {
		free(data);
		return err_set(e, "tls: '%s' holds a NUL byte: not PEM text", path);
	}
	*out = data;
	return 0;
}

int tls_files_load(const struct tls_paths *p, struct tls_files *out,
		   struct err *e)
{
	char cert[4096], key[4096], ca[4096];
	struct tls_files f = { 0 };

	if (pick(p->cert, p->dir, TLS_CERT_FILE, "tls-cert", cert, sizeof(cert), e) ||
	    pick(p->key, p->dir, TLS_KEY_FILE, "tls-key", key, sizeof(key), e) ||
	    pick(p->ca, p->dir, TLS_CA_FILE, "tls-ca", ca, sizeof(ca), e))
		return -1;
	if (read_pem(cert, &f.cert, e) || read_pem(key, &f.key, e) ||
	    read_pem(ca, &f.ca, e))
		goto fail;
	if (pki_check_pair(f.cert, f.key, e)) {
		err_wrap(e, "tls: '%s' and '%s'", cert, key);
		goto fail;
	}
	if (pki_verify(f.ca, f.cert, e)) {
		err_wrap(e, "tls: '%s' against '%s'", cert, ca);
		goto fail;
	}
	*out = f;
	return 0;
fail:
	tls_files_release(&f);
	return -1;
}

int tls_files_for_job(const struct tls_paths *p, int insecure,
		      struct tls_files *out, struct err *e)
{
	if (insecure) {
		if (tls_paths_given(p))
			log_warn("spec.syncer.insecure is true: the certificate "
				 "files given are not used");
		return 0;
	}
	if (!tls_paths_given(p))
		return err_set(e, "tls: no certificate: give --tls-dir DIR (with "
			       TLS_CA_FILE ", " TLS_CERT_FILE ", " TLS_KEY_FILE
			       ") or --tls-cert, --tls-key and --tls-ca; or set "
			       "spec.syncer.insecure: true for plaintext gRPC");
	return tls_files_load(p, out, e) ? -1 : 1;
}

int tls_write_pem(const char *path, const char *pem, int secret, struct err *e)
{
	mode_t mode = secret ? 0600 : 0644;
	size_t n = strlen(pem);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);

	if (fd < 0)
		return err_set(e, "tls: cannot create '%s': %s", path, strerror(errno));
	/* an older file keeps its mode through O_TRUNC: set ours */
	if (fchmod(fd, mode)) {
		err_set(e, "tls: cannot set the mode of '%s': %s", path, strerror(errno));
		goto fail;
	}
	if (fd_write_all(fd, pem, n)) {
		err_set(e, "tls: cannot write '%s': %s", path, strerror(errno));
		goto fail;
	}
	if (close(fd))
		return err_set(e, "tls: cannot write '%s': %s", path, strerror(errno));
	return 0;
fail:
	close(fd);
	unlink(path);
	return -1;
}
