/*
 * pki: a small certificate authority on OpenSSL's libcrypto — one CA per
 * job, and the leaf certificates it signs — with PEM text in and out and
 * no file I/O, so a caller can put the result in a file, a Kubernetes
 * Secret or a test's memory alike (docs/security.md, identity and
 * encryption).
 *
 * Keys are EC P-256, signatures ECDSA with SHA-256, certificates X.509 v3
 * with a random 128-bit serial and a notBefore one hour in the past (clock
 * skew between machines).
 *
 *   certificate  basicConstraints  keyUsage                 extKeyUsage  SANs
 *   CA           critical, CA:TRUE keyCertSign, cRLSign     -            -
 *   leaf         critical, CA:FALSE digitalSignature        server and/  DNS, IP,
 *                                                           or client    URI (req)
 *
 * The identity of a job's parts is a URI SAN (pki_id_*):
 *
 *   ddiloco://<job>/syncer
 *   ddiloco://<job>/learner/<id>      id in decimal, no sign or leading 0
 *
 * <job> is the job's name (a DNS label: a-z, 0-9, '-'). The module knows
 * the scheme's syntax only; what a part does with an identity is its own.
 */
#ifndef DDILOCO_PKI_H
#define DDILOCO_PKI_H

#include <stddef.h>

#include "common/err.h"

#define PKI_MAX_PEM   (64 << 10)   /* a certificate or key we accept */
/* SANs of one kind in a request: the syncer's certificate names four
 * names of each of up to 64 shards' pods and the Service (docs/operator.md,
 * Shards) */
#define PKI_MAX_NAMES 272
#define PKI_JOB_MAX   64           /* a job name's bytes, its NUL included */

/*
 * Call first in main (before gRPC or anything else uses OpenSSL): keeps
 * OpenSSL from freeing its tables in an exit handler. gRPC's threads can
 * still be building a channel's TLS context while the process exits (a
 * reconnect that was in flight when the channel was destroyed); with the
 * tables freed under them that was a use after free at exit, seen under
 * ASan as a leak or a crash. The process's memory goes back at exit
 * anyway. After any other use of OpenSSL it does nothing (the exit
 * handler is set by the first). -1 when OpenSSL cannot start.
 */
int pki_process_init(void);

/* A certificate and its private key, NUL-terminated PEM, heap-owned. */
struct pki_pem {
	char *cert;
	char *key;
};

void pki_pem_release(struct pki_pem *p);

/* A CA for job: subject CN "ddiloco <job> ca", valid days (0 = 3650). */
int pki_ca_new(const char *job, int days, struct pki_pem *ca, struct err *e);

struct pki_leaf_req {
	const char *common_name;
	const char *const *dns;    /* NULL-terminated lists, or NULL */
	const char *const *ips;    /* "127.0.0.1", "::1" */
	const char *const *uris;
	int server, client;        /* extended key usages: serverAuth, clientAuth */
	int days;                  /* 0 = 365 */
};

/* Signs a new key's certificate for req with ca (cert and key). */
int pki_issue(const struct pki_pem *ca, const struct pki_leaf_req *req,
	      struct pki_pem *out, struct err *e);

/* 0 when cert_pem chains to ca_cert_pem and is valid now (client or
 * server purpose not checked). */
int pki_verify(const char *ca_cert_pem, const char *cert_pem, struct err *e);

/* 0 when key_pem is the private key of cert_pem's public key. */
int pki_check_pair(const char *cert_pem, const char *key_pem, struct err *e);

/* The SANs of a certificate, each kind a list of new strings. */
struct pki_names {
	char **dns, **ips, **uris;
	size_t ndns, nips, nuris;
};

int pki_cert_names(const char *cert_pem, struct pki_names *out, struct err *e);
void pki_names_release(struct pki_names *n);

/* ---- the identity scheme ---- */

/* an evaluator (docs/syncer.md, Evaluators): ddiloco://<job>/evaluator/<id> */
enum pki_role { PKI_ROLE_SYNCER, PKI_ROLE_LEARNER, PKI_ROLE_EVALUATOR };

struct pki_id {
	char job[PKI_JOB_MAX];
	enum pki_role role;
	unsigned learner;          /* PKI_ROLE_LEARNER and _EVALUATOR: the id */
};

/* The URI of an identity into out (n bytes); -1 when it does not fit or
 * the job name is not a DNS label. */
int pki_id_uri(const struct pki_id *id, char *out, size_t n, struct err *e);
/* Parses one URI of the scheme; -1 with e naming what is wrong. */
int pki_id_parse(const char *uri, struct pki_id *out, struct err *e);
/* The one identity a certificate carries: exactly one URI SAN of the
 * scheme (others are ignored); -1 for none, two or a malformed one. */
int pki_cert_id(const char *cert_pem, struct pki_id *out, struct err *e);
/* 0 when the certificate's identity is want; else -1 with e naming both. */
int pki_cert_is(const char *cert_pem, const struct pki_id *want, struct err *e);

#endif
