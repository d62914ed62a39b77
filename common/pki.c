/*
 * pki: a per-job certificate authority on libcrypto (see pki.h).
 *
 * Everything goes through memory BIOs: PEM text is parsed into OpenSSL
 * objects, a certificate is built and signed, and written back as PEM
 * into a heap string the caller owns. Every OpenSSL object made here is
 * freed before return; on error the reason is the first entry of
 * OpenSSL's error queue, after our own words naming the step.
 */
#include "common/pki.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#define ID_SCHEME "ddiloco://"

/* "what failed: openssl's reason", the queue emptied. */
static int ssl_err(struct err *e, const char *what)
{
	unsigned long code = ERR_get_error();
	char reason[256] = "unknown error";

	if (code)
		ERR_error_string_n(code, reason, sizeof(reason));
	ERR_clear_error();
	return err_set(e, "pki: %s: %s", what, reason);
}

void pki_pem_release(struct pki_pem *p)
{
	if (!p)
		return;
	if (p->key)
		OPENSSL_cleanse(p->key, strlen(p->key));
	free(p->cert);
	free(p->key);
	p->cert = p->key = NULL;
}

/* ---- PEM in and out ---- */

static BIO *pem_bio(const char *pem, const char *what, struct err *e)
{
	BIO *b;
	size_t n;

	if (!pem) {
		err_set(e, "pki: no %s given", what);
		return NULL;
	}
	n = strnlen(pem, PKI_MAX_PEM + 1);
	if (n > PKI_MAX_PEM) {
		err_set(e, "pki: %s: longer than %d bytes", what, PKI_MAX_PEM);
		return NULL;
	}
	if (!(b = BIO_new_mem_buf(pem, (int)n)))
		ssl_err(e, "out of memory");
	return b;
}

static X509 *read_cert(const char *pem, const char *what, struct err *e)
{
	BIO *b = pem_bio(pem, what, e);
	X509 *x;

	if (!b)
		return NULL;
	x = PEM_read_bio_X509(b, NULL, NULL, NULL);
	BIO_free(b);
	if (!x) {
		char msg[128];

		snprintf(msg, sizeof(msg), "cannot read the %s as a PEM certificate", what);
		ssl_err(e, msg);
	}
	return x;
}

static EVP_PKEY *read_key(const char *pem, const char *what, struct err *e)
{
	BIO *b = pem_bio(pem, what, e);
	EVP_PKEY *k;

	if (!b)
		return NULL;
	k = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL);
	BIO_free(b);
	if (!k) {
		char msg[128];

		snprintf(msg, sizeof(msg), "cannot read the %s as a PEM private key", what);
		ssl_err(e, msg);
	}
	return k;
}

/* The BIO's bytes as a new NUL-terminated string. */
static char *bio_string(BIO *b, struct err *e)
{
	char *data, *s;
	long n = BIO_get_mem_data(b, &data);

	if (n <= 0 || !(s = malloc((size_t)n + 1))) {
		err_set(e, "pki: out of memory for PEM text");
		return NULL;
	}
	memcpy(s, data, (size_t)n);
	s[n] = 0;
	return s;
}

static int write_pem(X509 *x, EVP_PKEY *k, struct pki_pem *out, struct err *e)
{
	BIO *bc = BIO_new(BIO_s_mem()), *bk = BIO_new(BIO_s_mem());
	int rc = -1;

	out->cert = out->key = NULL;
	if (!bc || !bk) {
		ssl_err(e, "out of memory");
		goto out;
	}
	if (!PEM_write_bio_X509(bc, x) ||
	    !PEM_write_bio_PrivateKey(bk, k, NULL, NULL, 0, NULL, NULL)) {
		ssl_err(e, "cannot write PEM");
		goto out;
	}
	if (!(out->cert = bio_string(bc, e)) || !(out->key = bio_string(bk, e))) {
		pki_pem_release(out);
		goto out;
	}
	rc = 0;
out:
	BIO_free(bc);
	if (bk) {
		/* the key's text was in the BIO's buffer: wipe it */
		char *data;
		long n = BIO_get_mem_data(bk, &data);

		if (n > 0)
			OPENSSL_cleanse(data, (size_t)n);
		BIO_free(bk);
	}
	return rc;
}

/* ---- building certificates ---- */

static EVP_PKEY *new_key(struct err *e)
{
	EVP_PKEY *k = EVP_EC_gen("P-256");

	if (!k)
		ssl_err(e, "cannot make an EC P-256 key");
	return k;
}

/* Version 3, a random serial, validity, subject CN, public key. */
static X509 *new_cert(const char *cn, int days, EVP_PKEY *key, struct err *e)
{
	X509 *x = X509_new();
	BIGNUM *bn = BN_new();
	X509_NAME *name;

	if (!x || !bn)
		goto fail;
	/* 128 random bits, top bit clear so the DER integer stays positive
	 * in 16 bytes */
	if (!X509_set_version(x, X509_VERSION_3) ||
	    !BN_rand(bn, 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) ||
	    !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) ||
	    !X509_gmtime_adj(X509_getm_notBefore(x), -3600) ||
	    !X509_gmtime_adj(X509_getm_notAfter(x), (long)days * 86400) ||
	    !X509_set_pubkey(x, key))
		goto fail;
	name = X509_get_subject_name(x);
	if (!X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
					(const unsigned char *)cn, -1, -1, 0))
		goto fail;
	BN_free(bn);
	return x;
fail:
	ssl_err(e, "cannot build a certificate");
	BN_free(bn);
	X509_free(x);
	return NULL;
}

/* One extension in OpenSSL's config syntax (constant values only). */
static int add_ext(X509 *x, X509 *issuer, int nid, const char *value,
		   struct err *e)
{
	X509V3_CTX ctx;
	X509_EXTENSION *ext;
	int ok;

	X509V3_set_ctx(&ctx, issuer, x, NULL, NULL, 0);
	ext = X509V3_EXT_nconf_nid(NULL, &ctx, nid, value);
	ok = ext && X509_add_ext(x, ext, -1);
	X509_EXTENSION_free(ext);
	if (!ok) {
		char msg[128];

		snprintf(msg, sizeof(msg), "cannot add the extension '%s = %s'",
			 OBJ_nid2sn(nid), value);
		return ssl_err(e, msg);
	}
	return 0;
}

static int push_name(GENERAL_NAMES *gens, int type, const char *value,
		     struct err *e)
{
	GENERAL_NAME *g = GENERAL_NAME_new();

	if (!g)
		return ssl_err(e, "out of memory");
	if (type == GEN_IPADD) {
		ASN1_OCTET_STRING *ip = a2i_IPADDRESS(value);

		if (!ip) {
			GENERAL_NAME_free(g);
			ERR_clear_error();
			return err_set(e, "pki: '%s' is not an IP address", value);
		}
		GENERAL_NAME_set0_value(g, GEN_IPADD, ip);
	} else {
		ASN1_IA5STRING *s = ASN1_IA5STRING_new();

		if (!s || !ASN1_STRING_set(s, value, -1)) {
			ASN1_IA5STRING_free(s);
			GENERAL_NAME_free(g);
			return ssl_err(e, "out of memory");
		}
		GENERAL_NAME_set0_value(g, type, s);
	}
	if (!sk_GENERAL_NAME_push(gens, g)) {
		GENERAL_NAME_free(g);
		return ssl_err(e, "out of memory");
	}
	return 0;
}

/* A SAN is printable ASCII without spaces (IA5, and no surprises); a
 * common name may have spaces. */
static int check_name(const char *kind, const char *v, struct err *e)
{
	char lowest = strcmp(kind, "common") ? '!' : ' ';

	if (!*v)
		return err_set(e, "pki: an empty %s name", kind);
	for (const char *p = v; *p; p++)
		if (*p < lowest || *p >= 0x7f)
			return err_set(e, "pki: %s name '%s': byte 0x%02x at %td is not "
				       "printable ASCII", kind, v, (unsigned char)*p, p - v);
	return 0;
}

static int add_sans(X509 *x, const struct pki_leaf_req *req, struct err *e)
{
	static const struct { int type; const char *kind; } kinds[] = {
		{ GEN_DNS, "DNS" }, { GEN_IPADD, "IP" }, { GEN_URI, "URI" },
	};
	const char *const *lists[] = { req->dns, req->ips, req->uris };
	GENERAL_NAMES *gens = GENERAL_NAMES_new();
	int rc = -1, total = 0;

	if (!gens)
		return ssl_err(e, "out of memory");
	for (size_t k = 0; k < 3; k++) {
		int n = 0;

		for (const char *const *v = lists[k]; v && *v; v++, n++) {
			if (n == PKI_MAX_NAMES) {
				err_set(e, "pki: more than %d %s names", PKI_MAX_NAMES,
					kinds[k].kind);
				goto out;
			}
			if (check_name(kinds[k].kind, *v, e) ||
			    push_name(gens, kinds[k].type, *v, e))
				goto out;
		}
		total += n;
	}
	if (total == 0) {
		err_set(e, "pki: a leaf certificate needs at least one DNS, IP or URI name");
		goto out;
	}
	if (!X509_add1_ext_i2d(x, NID_subject_alt_name, gens, 0, X509V3_ADD_DEFAULT)) {
		ssl_err(e, "cannot add the subject alternative names");
		goto out;
	}
	rc = 0;
out:
	GENERAL_NAMES_free(gens);
	return rc;
}

static int sign(X509 *x, EVP_PKEY *key, struct err *e)
{
	if (!X509_sign(x, key, EVP_sha256()))
		return ssl_err(e, "cannot sign the certificate");
	return 0;
}

static int job_label_ok(const char *job)
{
	size_t n = strlen(job);

	if (n == 0 || n >= PKI_JOB_MAX || job[0] == '-' || job[n - 1] == '-')
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!(islower((unsigned char)job[i]) || isdigit((unsigned char)job[i]) ||
		      job[i] == '-'))
			return 0;
	return 1;
}

int pki_process_init(void)
{
	return OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL) ? 0 : -1;
}

int pki_ca_new(const char *job, int days, struct pki_pem *ca, struct err *e)
{
	EVP_PKEY *key = NULL;
	X509 *x = NULL;
	char cn[PKI_JOB_MAX + 16];
	int rc = -1;

	if (!job || !job_label_ok(job))
		return err_set(e, "pki: job name '%s' is not a DNS label "
			       "(a-z, 0-9, '-', at most %d bytes)",
			       job ? job : "", PKI_JOB_MAX - 1);
	if (days < 0)
		return err_set(e, "pki: CA validity %d days is negative", days);
	snprintf(cn, sizeof(cn), "ddiloco %s ca", job);
	if (!(key = new_key(e)) || !(x = new_cert(cn, days ? days : 3650, key, e)))
		goto out;
	/* self-signed: the issuer is the subject */
	if (!X509_set_issuer_name(x, X509_get_subject_name(x))) {
		ssl_err(e, "cannot build the CA certificate");
		goto out;
	}
	if (add_ext(x, x, NID_basic_constraints, "critical,CA:TRUE,pathlen:0", e) ||
	    add_ext(x, x, NID_key_usage, "critical,keyCertSign,cRLSign", e) ||
	    add_ext(x, x, NID_subject_key_identifier, "hash", e) ||
	    sign(x, key, e) || write_pem(x, key, ca, e))
		goto out;
	rc = 0;
out:
	X509_free(x);
	EVP_PKEY_free(key);
	return rc;
}

int pki_issue(const struct pki_pem *ca, const struct pki_leaf_req *req,
	      struct pki_pem *out, struct err *e)
{
	X509 *cax = NULL, *x = NULL;
	EVP_PKEY *cak = NULL, *key = NULL;
	char eku[64];
	int rc = -1;

	if (!ca || !req)
		return err_set(e, "pki: no CA or request given");
	if (!req->common_name || check_name("common", req->common_name, e))
		return req->common_name ? -1
					: err_set(e, "pki: a leaf certificate needs a common name");
	if (!req->server && !req->client)
		return err_set(e, "pki: certificate '%s' is neither for a server nor "
			       "for a client", req->common_name);
	if (req->days < 0)
		return err_set(e, "pki: certificate '%s': validity %d days is negative",
			       req->common_name, req->days);
	if (!(cax = read_cert(ca->cert, "CA certificate", e)) ||
	    !(cak = read_key(ca->key, "CA key", e)))
		goto out;
	if (X509_check_ca(cax) != 1) {
		err_set(e, "pki: the CA certificate is not a CA's (no CA:TRUE)");
		goto out;
	}
	if (X509_check_private_key(cax, cak) != 1) {
		ssl_err(e, "the CA key does not belong to the CA certificate");
		goto out;
	}
	if (!(key = new_key(e)) ||
	    !(x = new_cert(req->common_name, req->days ? req->days : 365, key, e)))
		goto out;
	if (!X509_set_issuer_name(x, X509_get_subject_name(cax))) {
		ssl_err(e, "cannot set the issuer");
		goto out;
	}
	snprintf(eku, sizeof(eku), "%s%s%s", req->server ? "serverAuth" : "",
		 req->server && req->client ? "," : "",
		 req->client ? "clientAuth" : "");
	if (add_ext(x, cax, NID_basic_constraints, "critical,CA:FALSE", e) ||
	    add_ext(x, cax, NID_key_usage, "critical,digitalSignature", e) ||
	    add_ext(x, cax, NID_ext_key_usage, eku, e) ||
	    add_ext(x, cax, NID_subject_key_identifier, "hash", e) ||
	    add_ext(x, cax, NID_authority_key_identifier, "keyid:always", e) ||
	    add_sans(x, req, e) || sign(x, cak, e) || write_pem(x, key, out, e))
		goto out;
	rc = 0;
out:
	X509_free(cax);
	X509_free(x);
	EVP_PKEY_free(cak);
	EVP_PKEY_free(key);
	return rc;
}

int pki_verify(const char *ca_cert_pem, const char *cert_pem, struct err *e)
{
	X509 *ca = NULL, *x = NULL;
	X509_STORE *store = NULL;
	X509_STORE_CTX *ctx = NULL;
	int rc = -1;

	if (!(ca = read_cert(ca_cert_pem, "CA certificate", e)) ||
	    !(x = read_cert(cert_pem, "certificate", e)))
		goto out;
	if (!(store = X509_STORE_new()) || !X509_STORE_add_cert(store, ca) ||
	    !(ctx = X509_STORE_CTX_new()) || !X509_STORE_CTX_init(ctx, store, x, NULL)) {
		ssl_err(e, "cannot set up verification");
		goto out;
	}
	if (X509_verify_cert(ctx) != 1) {
		err_set(e, "pki: certificate does not verify against the CA: %s",
			X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx)));
		ERR_clear_error();
		goto out;
	}
	rc = 0;
out:
	X509_STORE_CTX_free(ctx);
	X509_STORE_free(store);
	X509_free(ca);
	X509_free(x);
	return rc;
}

int pki_check_pair(const char *cert_pem, const char *key_pem, struct err *e)
{
	X509 *x = read_cert(cert_pem, "certificate", e);
	EVP_PKEY *k = x ? read_key(key_pem, "key", e) : NULL;
	int rc = -1;

	if (x && k) {
		if (X509_check_private_key(x, k) == 1)
			rc = 0;
		else
			err_set(e, "pki: the key does not belong to the certificate");
	}
	ERR_clear_error();
	X509_free(x);
	EVP_PKEY_free(k);
	return rc;
}

/* ---- reading SANs back ---- */

void pki_names_release(struct pki_names *n)
{
	char **lists[] = { n->dns, n->ips, n->uris };
	size_t counts[] = { n->ndns, n->nips, n->nuris };

	for (size_t k = 0; k < 3; k++) {
		for (size_t i = 0; i < counts[k]; i++)
			free(lists[k][i]);
		free(lists[k]);
	}
	memset(n, 0, sizeof(*n));
}

static int list_push(char ***list, size_t *n, char *s, struct err *e)
{
	char **nl;

	if (!s || !(nl = realloc(*list, (*n + 1) * sizeof(char *)))) {
		free(s);
		return err_set(e, "pki: out of memory for a name");
	}
	nl[(*n)++] = s;
	*list = nl;
	return 0;
}

static char *ia5_string(const ASN1_IA5STRING *s)
{
	int n = ASN1_STRING_length(s);
	char *out = malloc((size_t)n + 1);

	if (!out)
		return NULL;
	memcpy(out, ASN1_STRING_get0_data(s), (size_t)n);
	out[n] = 0;
	/* an embedded NUL would make the name read as a shorter one */
	if (strlen(out) != (size_t)n) {
		free(out);
		return strdup("");
	}
	return out;
}

/* 4 or 16 bytes as text; another length as "?" (a malformed name). */
static char *ip_string(const ASN1_OCTET_STRING *s)
{
	char text[INET6_ADDRSTRLEN];
	int n = ASN1_STRING_length(s);
	const unsigned char *b = ASN1_STRING_get0_data(s);

	if ((n == 4 && inet_ntop(AF_INET, b, text, sizeof(text))) ||
	    (n == 16 && inet_ntop(AF_INET6, b, text, sizeof(text))))
		return strdup(text);
	return strdup("?");
}

int pki_cert_names(const char *cert_pem, struct pki_names *out, struct err *e)
{
	X509 *x = read_cert(cert_pem, "certificate", e);
	GENERAL_NAMES *gens;
	struct pki_names n = { 0 };
	int rc = 0;

	if (!x)
		return -1;
	gens = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
	for (int i = 0; gens && i < sk_GENERAL_NAME_num(gens) && !rc; i++) {
		const GENERAL_NAME *g = sk_GENERAL_NAME_value(gens, i);
		int type;
		void *v = GENERAL_NAME_get0_value(g, &type);

		if (type == GEN_DNS)
			rc = list_push(&n.dns, &n.ndns, ia5_string(v), e);
		else if (type == GEN_URI)
			rc = list_push(&n.uris, &n.nuris, ia5_string(v), e);
		else if (type == GEN_IPADD)
			rc = list_push(&n.ips, &n.nips, ip_string(v), e);
	}
	GENERAL_NAMES_free(gens);
	X509_free(x);
	ERR_clear_error();
	if (rc) {
		pki_names_release(&n);
		return -1;
	}
	*out = n;
	return 0;
}

/* ---- the identity scheme ---- */

int pki_id_uri(const struct pki_id *id, char *out, size_t n, struct err *e)
{
	int len;

	if (!job_label_ok(id->job))
		return err_set(e, "pki: job name '%s' is not a DNS label", id->job);
	if (id->role == PKI_ROLE_SYNCER)
		len = snprintf(out, n, ID_SCHEME "%s/syncer", id->job);
	else if (id->role == PKI_ROLE_EVALUATOR)
		len = snprintf(out, n, ID_SCHEME "%s/evaluator/%u", id->job,
			       id->learner);
	else
		len = snprintf(out, n, ID_SCHEME "%s/learner/%u", id->job, id->learner);
	if (len < 0 || (size_t)len >= n)
		return err_set(e, "pki: the identity of job '%s' does not fit in %zu bytes",
			       id->job, n);
	return 0;
}

int pki_id_parse(const char *uri, struct pki_id *out, struct err *e)
{
	struct pki_id id;
	const char *p, *slash;
	size_t jn;

	memset(&id, 0, sizeof(id));
	if (strncmp(uri, ID_SCHEME, strlen(ID_SCHEME)))
		return err_set(e, "pki: identity '%s' does not start with '" ID_SCHEME "'",
			       uri);
	p = uri + strlen(ID_SCHEME);
	if (!(slash = strchr(p, '/')))
		return err_set(e, "pki: identity '%s' has no role after the job", uri);
	jn = (size_t)(slash - p);
	if (jn == 0 || jn >= sizeof(id.job))
		return err_set(e, "pki: identity '%s': the job name is empty or too long",
			       uri);
	memcpy(id.job, p, jn);
	if (!job_label_ok(id.job))
		return err_set(e, "pki: identity '%s': job '%s' is not a DNS label",
			       uri, id.job);
	p = slash + 1;
	if (!strcmp(p, "syncer")) {
		id.role = PKI_ROLE_SYNCER;
	} else if (!strncmp(p, "learner/", 8) || !strncmp(p, "evaluator/", 10)) {
		int ev = p[0] == 'e';
		const char *d = p + (ev ? 10 : 8);
		unsigned long v = 0;

		/* decimal, no sign, no leading zero, fits in 31 bits */
		if (!*d || (d[0] == '0' && d[1]) || strlen(d) > 10)
			return err_set(e, "pki: identity '%s': bad learner id", uri);
		for (const char *q = d; *q; q++) {
			if (!isdigit((unsigned char)*q))
				return err_set(e, "pki: identity '%s': bad learner id", uri);
			v = v * 10 + (unsigned long)(*q - '0');
		}
		if (v > 0x7fffffffUL)
			return err_set(e, "pki: identity '%s': learner id too large", uri);
		id.role = ev ? PKI_ROLE_EVALUATOR : PKI_ROLE_LEARNER;
		id.learner = (unsigned)v;
	} else {
		return err_set(e, "pki: identity '%s': unknown role '%s' "
			       "(syncer, learner/<id> or evaluator/<id>)", uri, p);
	}
	*out = id;
	return 0;
}

int pki_cert_id(const char *cert_pem, struct pki_id *out, struct err *e)
{
	struct pki_names n;
	struct pki_id id;
	int found = 0;

	if (pki_cert_names(cert_pem, &n, e))
		return -1;
	for (size_t i = 0; i < n.nuris; i++) {
		if (strncmp(n.uris[i], ID_SCHEME, strlen(ID_SCHEME)))
			continue;
		if (found++) {
			pki_names_release(&n);
			return err_set(e, "pki: certificate has more than one "
				       ID_SCHEME " identity");
		}
		if (pki_id_parse(n.uris[i], &id, e)) {
			pki_names_release(&n);
			return -1;
		}
	}
	pki_names_release(&n);
	if (!found)
		return err_set(e, "pki: certificate has no " ID_SCHEME " identity "
			       "(a URI subject alternative name)");
	*out = id;
	return 0;
}

int pki_cert_is(const char *cert_pem, const struct pki_id *want, struct err *e)
{
	char w[PKI_JOB_MAX + 40], g[PKI_JOB_MAX + 40];
	struct pki_id got;

	if (pki_id_uri(want, w, sizeof(w), e))
		return -1;
	if (pki_cert_id(cert_pem, &got, e))
		return err_wrap(e, "pki: the certificate should be %s", w);
	if (strcmp(got.job, want->job) || got.role != want->role ||
	    (got.role != PKI_ROLE_SYNCER && got.learner != want->learner)) {
		pki_id_uri(&got, g, sizeof(g), NULL);
		return err_set(e, "pki: the certificate is %s, not %s", g, w);
	}
	return 0;
}
