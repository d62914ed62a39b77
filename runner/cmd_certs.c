/*
 * `ddiloco certs JOB.yaml --out DIR [--dns NAME,...] [--ip ADDR,...]`: the
 * job's CA and every process's certificate (runner/certs.c), for syncers
 * and sidecars started by hand or by a script; `ddiloco run` makes its
 * own. Exit 0, 1 on failure, 2 on bad usage or a bad job file.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "common/cli.h"
#include "common/jobspec.h"
#include "common/log.h"
#include "runner/run.h"

#define MAX_NAMES 16

/* "a,b,c" into list (pointers into text, which is cut), NULL-terminated. */
static int split(char *text, const char **list, const char *flag,
		 struct err *e)
{
	int n = 0;

	for (char *save = NULL, *t = strtok_r(text, ",", &save); t;
	     t = strtok_r(NULL, ",", &save)) {
		if (n == MAX_NAMES)
			return err_set(e, "--%s: more than %d names", flag, MAX_NAMES);
		list[n++] = t;
	}
	list[n] = NULL;
	return 0;
}

int cmd_certs(int argc, char **argv)
{
	const char *out = NULL, *dns_arg = NULL, *ip_arg = NULL;
	const struct cli_option opts[] = {
		CLI_TEXT("usage: ddiloco certs JOB.yaml --out DIR [--dns NAME,...] [--ip ADDR,...]\n\n"
			 "Makes the job's CA and the certificates of its syncer and learners:\n"
			 "DIR/syncer and DIR/learner-<i>, each with ca.crt, tls.crt and tls.key,\n"
			 "for `--tls-dir` (docs/security.md). The CA's key is not kept.\n"),
		CLI_STRING("out", 0, &out, "DIR", "where to write (created, mode 0700)"),
		CLI_STRING("dns", 0, &dns_arg, "NAME,...",
			   "the syncer's DNS names besides localhost"),
		CLI_STRING("ip", 0, &ip_arg, "ADDR,...",
			   "the syncer's addresses besides 127.0.0.1"),
		LOG_CLI_OPTION(),
		CLI_END(),
	};
	const char *dns[MAX_NAMES + 1] = { NULL }, *ips[MAX_NAMES + 1] = { NULL };
	char *dns_text = NULL, *ip_text = NULL;
	struct job_spec js;
	struct err e;
	int n, rc = 2;

	log_init("certs");
	n = cli_parse(opts, argc, argv, &e);
	if (n < 0)
		return cli_exit_code(opts, "ddiloco certs", n, &e);
	if (n != 1 || !out) {
		cli_usage(opts, stderr);
		return 2;
	}
	if (jobspec_load(argv[0], &js, &e)) {
		fprintf(stderr, "ddiloco certs: %s\n", e.msg);
		return 2;
	}
	if ((dns_arg && (!(dns_text = strdup(dns_arg)) ||
			 split(dns_text, dns, "dns", &e))) ||
	    (ip_arg && (!(ip_text = strdup(ip_arg)) || split(ip_text, ips, "ip", &e)))) {
		fprintf(stderr, "ddiloco certs: %s\n", e.msg);
		goto out;
	}
	rc = 1;
	if (run_certs_make(out, js.name, js.learners.replicas,
			   js.evaluator.command.n > 0, dns, ips, &e)) {
		fprintf(stderr, "ddiloco certs: %s\n", e.msg);
		goto out;
	}
	printf("%s: the CA and certificates of job '%s' (syncer, %d learners%s)\n",
	       out, js.name, js.learners.replicas,
	       js.evaluator.command.n ? ", evaluator 0" : "");
	rc = 0;
out:
	free(dns_text);
	free(ip_text);
	return rc;
}
