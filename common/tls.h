/*
 * tls: the certificate files of one process — its certificate, its key
 * and the job's CA — read into PEM text for gRPC, and written by whoever
 * makes them (docs/security.md, identity and encryption).
 *
 * A folder holds the three under the names of a Kubernetes TLS Secret:
 *
 *   file      what
 *   ca.crt    the job's CA certificate (trust anchor)
 *   tls.crt   this process's certificate, signed by the CA
 *   tls.key   its private key (mode 0600 when written here)
 *
 * A file given by its own path replaces the folder's one.
 */
#ifndef DDILOCO_TLS_H
#define DDILOCO_TLS_H

#include "common/err.h"

#define TLS_CA_FILE   "ca.crt"
#define TLS_CERT_FILE "tls.crt"
#define TLS_KEY_FILE  "tls.key"

/* Where to read from; NULL fields are not given. */
struct tls_paths {
	const char *dir, *cert, *key, *ca;
};

/*
 * The command-line options that fill a struct tls_paths, as entries of a
 * command's option table (common/cli.h): --tls-dir, --tls-cert, --tls-key
 * and --tls-ca, the names tls_files_load's errors use. whose is a string
 * literal, the process's ("learner's", "syncer's").
 */
#define TLS_CLI_OPTIONS(tp, whose) \
	CLI_STRING("tls-dir", 0, &(tp).dir, "DIR", \
		   "ca.crt, tls.crt and tls.key: the job's CA, this " whose "\n" \
		   "certificate and key (docs/security.md)"), \
	CLI_STRING("tls-cert", 0, &(tp).cert, "FILE", "the certificate (instead of DIR's)"), \
	CLI_STRING("tls-key", 0, &(tp).key, "FILE", "its key (instead of DIR's)"), \
	CLI_STRING("tls-ca", 0, &(tp).ca, "FILE", "the job's CA (instead of DIR's)")

/* PEM text, heap-owned. */
struct tls_files {
	char *cert, *key, *ca;
};

/* 1 when any path is given. */
int tls_paths_given(const struct tls_paths *p);
/*
 * Reads the three files and checks them: the key belongs to the
 * certificate, and the certificate chains to the CA. Every file must be
 * named by the folder or its own path.
 */
int tls_files_load(const struct tls_paths *p, struct tls_files *out,
		   struct err *e);
void tls_files_release(struct tls_files *f);

/*
 * What a job's process uses: with insecure (spec.syncer.insecure) nothing
 * (0; files given are ignored with a warning); else the files, loaded
 * into out (1), and no files given is an error that says what to give.
 */
int tls_files_for_job(const struct tls_paths *p, int insecure,
		      struct tls_files *out, struct err *e);

/* Writes PEM text to path (replacing it): mode 0600 when secret, else
 * 0644. */
int tls_write_pem(const char *path, const char *pem, int secret,
		  struct err *e);

#endif
