/* pki: a CA and its leaves, their names read back, verification against
 * the right and a wrong CA, the identity URIs, and bad input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "common/pki.h"

static void ca_and_server_leaf(void **state)
{
	struct pki_pem ca, leaf;
	struct pki_names n;
	struct err e;
	const char *dns[] = { "tiny-syncer-0.tiny-syncer.ml.svc", "localhost", NULL };
	const char *ips[] = { "127.0.0.1", "::1", NULL };
	const char *uris[] = { "ddiloco://tiny/syncer", NULL };
	struct pki_leaf_req req = { .common_name = "tiny syncer", .dns = dns,
				    .ips = ips, .uris = uris, .server = 1 };

	(void)state;
	assert_int_equal(pki_ca_new("tiny", 0, &ca, &e), 0);
	assert_non_null(strstr(ca.cert, "-----BEGIN CERTIFICATE-----"));
	assert_non_null(strstr(ca.key, "-----BEGIN PRIVATE KEY-----"));
	assert_int_equal(pki_issue(&ca, &req, &leaf, &e), 0);
	assert_int_equal(pki_verify(ca.cert, leaf.cert, &e), 0);
	/* the CA verifies itself; a leaf is no CA for another leaf */
	assert_int_equal(pki_verify(ca.cert, ca.cert, &e), 0);

	assert_int_equal(pki_cert_names(leaf.cert, &n, &e), 0);
	assert_int_equal(n.ndns, 2);
	assert_string_equal(n.dns[0], "tiny-syncer-0.tiny-syncer.ml.svc");
	assert_string_equal(n.dns[1], "localhost");
	assert_int_equal(n.nips, 2);
	assert_string_equal(n.ips[0], "127.0.0.1");
	assert_string_equal(n.ips[1], "::1");
	assert_int_equal(n.nuris, 1);
	assert_string_equal(n.uris[0], "ddiloco://tiny/syncer");
	pki_names_release(&n);
	assert_int_equal(n.ndns + n.nips + n.nuris, 0);

	/* the CA has no SANs */
	assert_int_equal(pki_cert_names(ca.cert, &n, &e), 0);
	assert_int_equal(n.ndns + n.nips + n.nuris, 0);
	pki_names_release(&n);
	pki_pem_release(&leaf);
	pki_pem_release(&ca);
	assert_null(ca.cert);
	assert_null(ca.key);
}

static void learner_identity_round_trip(void **state)
{
	struct pki_pem ca, leaf;
	struct pki_id id = { .job = "tiny", .role = PKI_ROLE_LEARNER, .learner = 17 };
	struct pki_id got;
	char uri[128];
	const char *uris[] = { "spiffe://example.org/other", uri, NULL };
	struct pki_leaf_req req = { .common_name = "tiny learner 17", .uris = uris,
				    .client = 1 };
	struct err e;

	(void)state;
	assert_int_equal(pki_id_uri(&id, uri, sizeof(uri), &e), 0);
	assert_string_equal(uri, "ddiloco://tiny/learner/17");
	assert_int_equal(pki_ca_new("tiny", 30, &ca, &e), 0);
	assert_int_equal(pki_issue(&ca, &req, &leaf, &e), 0);
	memset(&got, 0xff, sizeof(got));
	/* the other URI is ignored: one identity of our scheme */
	assert_int_equal(pki_cert_id(leaf.cert, &got, &e), 0);
	assert_string_equal(got.job, "tiny");
	assert_int_equal(got.role, PKI_ROLE_LEARNER);
	assert_int_equal(got.learner, 17);
	pki_pem_release(&leaf);

	/* an evaluator's (docs/syncer.md, Evaluators): not learner 2's */
	id.role = PKI_ROLE_EVALUATOR;
	id.learner = 2;
	assert_int_equal(pki_id_uri(&id, uri, sizeof(uri), &e), 0);
	assert_string_equal(uri, "ddiloco://tiny/evaluator/2");
	assert_int_equal(pki_id_parse(uri, &got, &e), 0);
	assert_int_equal(got.role, PKI_ROLE_EVALUATOR);
	assert_int_equal(got.learner, 2);
	assert_int_equal(pki_issue(&ca, &req, &leaf, &e), 0);
	assert_int_equal(pki_cert_is(leaf.cert, &id, &e), 0);
	id.role = PKI_ROLE_LEARNER;
	assert_int_equal(pki_cert_is(leaf.cert, &id, &e), -1);
	assert_string_equal(e.msg, "pki: the certificate is "
			    "ddiloco://tiny/evaluator/2, not ddiloco://tiny/learner/2");
	pki_pem_release(&leaf);
	assert_int_equal(pki_id_parse("ddiloco://tiny/evaluator/", &got, &e), -1);

	/* no identity, and two identities, are errors */
	uris[1] = NULL;
	assert_int_equal(pki_issue(&ca, &req, &leaf, &e), 0);
	assert_int_equal(pki_cert_id(leaf.cert, &got, &e), -1);
	assert_non_null(strstr(e.msg, "no ddiloco:// identity"));
	pki_pem_release(&leaf);
	uris[0] = "ddiloco://tiny/learner/1";
	uris[1] = "ddiloco://tiny/learner/2";
	assert_int_equal(pki_issue(&ca, &req, &leaf, &e), 0);
	assert_int_equal(pki_cert_id(leaf.cert, &got, &e), -1);
	assert_non_null(strstr(e.msg, "more than one"));
	pki_pem_release(&leaf);
	pki_pem_release(&ca);
}

static void another_ca_does_not_verify(void **state)
{
	struct pki_pem ca1, ca2, leaf;
	const char *uris[] = { "ddiloco://tiny/learner/0", NULL };
	struct pki_leaf_req req = { .common_name = "tiny learner 0", .uris = uris,
				    .client = 1 };
	struct err e;

	(void)state;
	/* same job name, same subject: only the keys differ */
	assert_int_equal(pki_ca_new("tiny", 0, &ca1, &e), 0);
	assert_int_equal(pki_ca_new("tiny", 0, &ca2, &e), 0);
	assert_string_not_equal(ca1.cert, ca2.cert);
	assert_int_equal(pki_issue(&ca2, &req, &leaf, &e), 0);
	assert_int_equal(pki_verify(ca2.cert, leaf.cert, &e), 0);
	assert_int_equal(pki_verify(ca1.cert, leaf.cert, &e), -1);
	assert_non_null(strstr(e.msg, "does not verify against the CA"));
	assert_non_null(strstr(e.msg, "unable to get local issuer certificate"));
	/* a leaf cannot sign: it is no CA */
	{
		struct pki_pem leaf2;

		assert_int_equal(pki_issue(&leaf, &req, &leaf2, &e), -1);
		assert_non_null(strstr(e.msg, "not a CA's"));
	}
	/* a CA key that is not the CA certificate's */
	{
		struct pki_pem mixed = { ca1.cert, ca2.key }, out;

		assert_int_equal(pki_issue(&mixed, &req, &out, &e), -1);
		assert_non_null(strstr(e.msg, "does not belong"));
		assert_int_equal(pki_check_pair(ca1.cert, ca1.key, &e), 0);
		assert_int_equal(pki_check_pair(leaf.cert, leaf.key, &e), 0);
		assert_int_equal(pki_check_pair(ca1.cert, ca2.key, &e), -1);
		assert_string_equal(e.msg, "pki: the key does not belong to the certificate");
	}
	pki_pem_release(&leaf);
	pki_pem_release(&ca1);
	pki_pem_release(&ca2);
}

static void id_parse(void **state)
{
	static const char *const bad[] = {
		"https://tiny/learner/1", "ddiloco://tiny", "ddiloco:///learner/1",
		"ddiloco://Tiny/learner/1", "ddiloco://tiny/learner/",
		"ddiloco://tiny/learner/01", "ddiloco://tiny/learner/-1",
		"ddiloco://tiny/learner/1x", "ddiloco://tiny/learner/99999999999",
		"ddiloco://tiny/learner/2147483648", "ddiloco://tiny/trainer/1",
		"ddiloco://tiny/syncer/0", "ddiloco://-tiny/syncer",
	};
	struct pki_id id;
	struct err e;
	char uri[32];

	(void)state;
	assert_int_equal(pki_id_parse("ddiloco://a-1/syncer", &id, &e), 0);
	assert_string_equal(id.job, "a-1");
	assert_int_equal(id.role, PKI_ROLE_SYNCER);
	assert_int_equal(pki_id_parse("ddiloco://tiny/learner/0", &id, &e), 0);
	assert_int_equal(id.learner, 0);
	assert_int_equal(pki_id_parse("ddiloco://tiny/learner/2147483647", &id, &e), 0);
	assert_int_equal(id.learner, 2147483647u);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		e.msg[0] = 0;
		if (pki_id_parse(bad[i], &id, &e) != -1)
			fail_msg("'%s' parsed", bad[i]);
		assert_non_null(strstr(e.msg, bad[i]));
	}
	id = (struct pki_id){ .job = "tiny", .role = PKI_ROLE_SYNCER };
	assert_int_equal(pki_id_uri(&id, uri, sizeof(uri), &e), 0);
	assert_string_equal(uri, "ddiloco://tiny/syncer");
	assert_int_equal(pki_id_uri(&id, uri, 10, &e), -1);
	assert_non_null(strstr(e.msg, "does not fit"));
}

static void bad_input(void **state)
{
	struct pki_pem ca, out;
	const char *dns[] = { "has space", NULL };
	const char *ips[] = { "300.1.1.1", NULL };
	struct pki_leaf_req req = { .common_name = "x", .dns = dns, .server = 1 };
	struct err e;

	(void)state;
	assert_int_equal(pki_ca_new("Bad_Name", 0, &ca, &e), -1);
	assert_non_null(strstr(e.msg, "'Bad_Name' is not a DNS label"));
	assert_int_equal(pki_ca_new("", 0, &ca, &e), -1);
	assert_int_equal(pki_ca_new("tiny", 0, &ca, &e), 0);

	assert_int_equal(pki_issue(&ca, &req, &out, &e), -1);
	assert_non_null(strstr(e.msg, "'has space'"));
	req.dns = NULL;
	req.ips = ips;
	assert_int_equal(pki_issue(&ca, &req, &out, &e), -1);
	assert_non_null(strstr(e.msg, "'300.1.1.1' is not an IP address"));
	req.ips = NULL;
	assert_int_equal(pki_issue(&ca, &req, &out, &e), -1);
	assert_non_null(strstr(e.msg, "at least one"));
	req.dns = (const char *[]){ "ok", NULL };
	req.server = 0;
	assert_int_equal(pki_issue(&ca, &req, &out, &e), -1);
	assert_non_null(strstr(e.msg, "neither for a server nor for a client"));

	/* garbage and truncated PEM */
	assert_int_equal(pki_verify(ca.cert, "not a certificate", &e), -1);
	assert_non_null(strstr(e.msg, "cannot read the certificate"));
	{
		char *cut = strdup(ca.cert);

		cut[strlen(cut) / 2] = 0;
		assert_int_equal(pki_verify(cut, ca.cert, &e), -1);
		assert_non_null(strstr(e.msg, "cannot read the CA certificate"));
		free(cut);
	}
	{
		struct pki_pem nokey = { ca.cert, (char *)"-----BEGIN PRIVATE KEY-----\n" };

		req.server = 1;
		assert_int_equal(pki_issue(&nokey, &req, &out, &e), -1);
		assert_non_null(strstr(e.msg, "cannot read the CA key"));
	}
	{
		struct pki_names n;

		assert_int_equal(pki_cert_names("", &n, &e), -1);
		assert_int_equal(pki_cert_id(NULL, &(struct pki_id){ 0 }, &e), -1);
		assert_non_null(strstr(e.msg, "no certificate given"));
	}
	pki_pem_release(&ca);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(ca_and_server_leaf),
		cmocka_unit_test(learner_identity_round_trip),
		cmocka_unit_test(another_ca_does_not_verify),
		cmocka_unit_test(id_parse),
		cmocka_unit_test(bad_input),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
