/*
 * certs: the job's CA and certificates for a local run (docs/security.md),
 * made by common/pki.h and written by common/tls.h as each process would
 * find its Kubernetes Secret mounted:
 *
 *   DIR/syncer/{ca.crt,tls.crt,tls.key}       ddiloco://<job>/syncer,
 *                                              DNS localhost, IP 127.0.0.1
 *                                              and the caller's names
 *   DIR/learner-<i>/{ca.crt,tls.crt,tls.key}  ddiloco://<job>/learner/<i>
 *   DIR/evaluator-<i>/{...}                   ddiloco://<job>/evaluator/<i>
 *
 * Folders 0700, keys 0600. The CA's key is not written: nothing here
 * issues a certificate after the start, and a key not kept cannot leak.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/pki.h"
#include "common/tls.h"
#include "runner/run.h"

static int write_dir(const char *dir, const char *name, const char *ca,
		     const struct pki_pem *leaf, struct err *e)
{
	char sub[4200], path[4300];

	if (snprintf(sub, sizeof(sub), "%s/%s", dir, name) >= (int)sizeof(sub))
		return err_set(e, "run: certificate folder path too long: '%s/%s'",
			       dir, name);
	if (mkdir(sub, 0700) && errno != EEXIST)
		return err_set(e, "run: cannot create '%s': %s", sub, strerror(errno));
	if (chmod(sub, 0700))
		return err_set(e, "run: cannot set the mode of '%s': %s", sub,
			       strerror(errno));
	snprintf(path, sizeof(path), "%s/" TLS_CA_FILE, sub);
	if (tls_write_pem(path, ca, 0, e))
		return -1;
	snprintf(path, sizeof(path), "%s/" TLS_CERT_FILE, sub);
	if (tls_write_pem(path, leaf->cert, 0, e))
		return -1;
	snprintf(path, sizeof(path), "%s/" TLS_KEY_FILE, sub);
	return tls_write_pem(path, leaf->key, 1, e);
}

#define MAX_EXTRA 16

/* localhost or 127.0.0.1 first, then the caller's list, into out. */
static int names(const char *first, const char *const *more,
		 const char **out, const char *kind, struct err *e)
{
	int n = 0;

	out[n++] = first;
	for (; more && *more; more++) {
		if (n > MAX_EXTRA)
			return err_set(e, "run: more than %d %s names for the syncer",
				       MAX_EXTRA, kind);
		out[n++] = *more;
	}
	out[n] = NULL;
	return 0;
}

int run_certs_make(const char *dir, const char *job, int learners,
		   int evaluators, const char *const *more_dns, const char *const *more_ips,
		   struct err *e)
{
	struct pki_pem ca = { 0 }, leaf = { 0 };
	struct pki_id id = { .role = PKI_ROLE_SYNCER };
	char uri[PKI_JOB_MAX + 40], cn[PKI_JOB_MAX + 40], name[32];
	const char *uris[] = { uri, NULL };
	const char *dns[MAX_EXTRA + 2], *ips[MAX_EXTRA + 2];
	struct pki_leaf_req req = { .common_name = cn, .uris = uris };
	int rc = -1;

	snprintf(id.job, sizeof(id.job), "%s", job);
	if (names("localhost", more_dns, dns, "DNS", e) ||
	    names("127.0.0.1", more_ips, ips, "IP", e))
		return -1;
	if (mkdir(dir, 0700) && errno != EEXIST)
		return err_set(e, "run: cannot create '%s': %s", dir, strerror(errno));
	if (pki_ca_new(job, 0, &ca, e) || pki_id_uri(&id, uri, sizeof(uri), e))
		goto out;
	snprintf(cn, sizeof(cn), "%s syncer", job);
	req.dns = dns;
	req.ips = ips;
	req.server = 1;
	if (pki_issue(&ca, &req, &leaf, e) || write_dir(dir, "syncer", ca.cert, &leaf, e))
		goto out;
	pki_pem_release(&leaf);
	req.dns = req.ips = NULL;
	req.server = 0;
	req.client = 1;
	id.role = PKI_ROLE_LEARNER;
	for (int i = 0; i < learners; i++) {
		id.learner = (unsigned)i;
		snprintf(cn, sizeof(cn), "%s learner %d", job, i);
		snprintf(name, sizeof(name), "learner-%d", i);
		if (pki_id_uri(&id, uri, sizeof(uri), e) ||
		    pki_issue(&ca, &req, &leaf, e) ||
		    write_dir(dir, name, ca.cert, &leaf, e))
			goto out;
		pki_pem_release(&leaf);
	}
	id.role = PKI_ROLE_EVALUATOR;
	for (int i = 0; i < evaluators; i++) {
		id.learner = (unsigned)i;
		snprintf(cn, sizeof(cn), "%s evaluator %d", job, i);
		snprintf(name, sizeof(name), "evaluator-%d", i);
		if (pki_id_uri(&id, uri, sizeof(uri), e) ||
		    pki_issue(&ca, &req, &leaf, e) ||
		    write_dir(dir, name, ca.cert, &leaf, e))
			goto out;
		pki_pem_release(&leaf);
	}
	rc = 0;
out:
	pki_pem_release(&leaf);
	pki_pem_release(&ca);
	if (rc)
		err_wrap(e, "run: cannot make the job's certificates in '%s'", dir);
	return rc;
}
