/*
 * `ddiloco operator`: runs the DecoupledTrainingJob controller (and the
 * chaos controller) against the API server of a kubeconfig, or of the
 * cluster it runs in. SIGINT/SIGTERM stop it cleanly (the Lease is given
 * up when held).
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmds.h"
#include "common/cli.h"
#include "common/log.h"
#include "operator/operator.h"

static volatile sig_atomic_t stopping;

static void on_signal(int sig)
{
	(void)sig;
	stopping = 1;
}

/* --http HOST:PORT or off */
static int parse_http(const struct cli_option *opt, const char *arg,
		      struct err *e)
{
	struct operator_opts *o = opt->value;

	if (!strcmp(arg, "off")) {
		o->http_port = -1;
		return 0;
	}
	if (cli_split_hostport(arg, o->http_addr, sizeof(o->http_addr),
			       &o->http_port) || !o->http_addr[0])
		return err_set(e, "option '--http' needs HOST:PORT or off, got '%s'",
			       arg);
	return 0;
}

/* The strings that go to fixed buffers of struct operator_opts. */
static int copy_opt(char *dst, size_t n, const char *name, const char *v,
		    struct err *e)
{
	if (!v)
		return 0;
	if (strlen(v) >= n)
		return err_set(e, "option '--%s' is longer than %zu characters",
			       name, n - 1);
	memcpy(dst, v, strlen(v) + 1);
	return 0;
}

/* Long because the option table is declared here, beside the variables it
 * fills; after it, the steps of the command run in order. */
int cmd_operator(int argc, char **argv)
{
	struct operator_opts o;
	const char *kubeconfig = NULL, *lease_ns = NULL, *ns = NULL;
	const char *lease_name = NULL, *identity = NULL, *status_url = NULL;
	const char *operator_ns = NULL;
	int no_chaos = 0, n;
	const struct cli_option opts[] = {
		CLI_TEXT("usage: ddiloco operator [--kubeconfig PATH] [--namespace NS] [--http HOST:PORT]\n"
			 "                        [--no-chaos] [--leader-elect] [--lease-namespace NS]\n"
			 "                        [--lease-name NAME] [--identity ID] [--workers N]\n"
			 "                        [--status-url TEMPLATE] [--resync SECONDS]\n"
			 "                        [--operator-namespace NS]\n"
			 "\n"
			 "Reconciles DecoupledTrainingJob objects (ddiloco.io/v1alpha1): learner pods\n"
			 "with their sidecar, the syncer StatefulSet, status and Events.\n"),
		CLI_STRING("kubeconfig", 0, &kubeconfig, "PATH",
			   "API server and bearer token of PATH's current context;\n"
			   "without it, the in-cluster service account"),
		CLI_STRING("namespace", 0, &ns, "NS",
			   "watch only NS (default: every namespace)"),
		CLI_CALLBACK("http", 0, &o, "HOST:PORT", parse_http,
			     "/metrics, /healthz, /readyz (default 0.0.0.0:8080;\n"
			     "port 0 picks one, 'off' disables)"),
		CLI_FLAG("no-chaos", 0, &no_chaos, "never run the chaos controller"),
		CLI_FLAG("leader-elect", 0, &o.leader_elect,
			 "act only while holding the Lease"),
		CLI_STRING("lease-namespace", 0, &lease_ns, "NS",
			   "the Lease's namespace (default: the config's)"),
		CLI_STRING("lease-name", 0, &lease_name, "NAME",
			   "the Lease's name (default ddiloco-operator)"),
		CLI_STRING("identity", 0, &identity, "ID",
			   "this replica's name in the Lease (default: hostname-pid)"),
		CLI_INT("workers", 0, &o.workers, "N", 1, 64,
			"reconcile workers (default 2)"),
		CLI_STRING("status-url", 0, &status_url, "T",
			   "the syncer's /status URL; {job} {namespace} {port}\n"
			   "are replaced (default\n"
			   "http://{job}-syncer-0.{job}-syncer.{namespace}.svc:{port}/status)"),
		CLI_DOUBLE("resync", 0, &o.resync, "SECONDS", 1, INFINITY,
			   "full resync period (default 30)"),
		CLI_STRING("operator-namespace", 0, &operator_ns, "NS",
			   "where this operator's pods run: the syncers'\n"
			   "NetworkPolicies let pods there reach /status\n"
			   "(default: the config's namespace)"),
		CLI_END(),
	};
	struct sigaction sa;
	struct err e;
	char host[64] = "operator";
	struct kube_stats stats;
	int rc;

	memset(&o, 0, sizeof(o));
	snprintf(o.http_addr, sizeof(o.http_addr), "0.0.0.0");
	o.http_port = 8080;
	o.workers = 2;
	o.resync = 30;
	snprintf(o.lease_name, sizeof(o.lease_name), "ddiloco-operator");
	snprintf(o.status_url, sizeof(o.status_url),
		 "http://{job}-syncer-0.{job}-syncer.{namespace}.svc:{port}/status");
	n = cli_parse(opts, argc, argv, &e);
	if (n < 0)
		return cli_exit_code(opts, "ddiloco operator", n, &e);
	if (n > 0)
		err_set(&e, "unexpected argument '%s'", argv[0]);
	if (n > 0 ||
	    copy_opt(o.namespace_, sizeof(o.namespace_), "namespace", ns, &e) ||
	    copy_opt(o.lease_name, sizeof(o.lease_name), "lease-name", lease_name, &e) ||
	    copy_opt(o.identity, sizeof(o.identity), "identity", identity, &e) ||
	    copy_opt(o.status_url, sizeof(o.status_url), "status-url", status_url, &e) ||
	    copy_opt(o.operator_ns, sizeof(o.operator_ns), "operator-namespace",
		     operator_ns, &e))
		return cli_exit_code(opts, "ddiloco operator", -1, &e);
	o.chaos = !no_chaos;
	log_init("operator");
	if (kubeconfig ? kube_config_load(kubeconfig, &o.cfg, &e) :
			 kube_config_in_cluster(&o.cfg, &e)) {
		fprintf(stderr, "ddiloco operator: %s\n", e.msg);
		return 1;
	}
	/* every answer of the API server, for /metrics */
	kube_stats_init(&stats);
	o.cfg.stats = &stats;
	snprintf(o.lease_ns, sizeof(o.lease_ns), "%s",
		 lease_ns ? lease_ns : o.cfg.namespace_);
	if (!o.operator_ns[0])
		snprintf(o.operator_ns, sizeof(o.operator_ns), "%s", o.cfg.namespace_);
	if (!o.identity[0]) {
		gethostname(host, sizeof(host) - 1);
		snprintf(o.identity, sizeof(o.identity), "%s-%d", host, (int)getpid());
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	log_info("API server %s, %s, identity %s%s", o.cfg.server,
		 o.namespace_[0] ? o.namespace_ : "every namespace", o.identity,
		 o.chaos ? "" : ", chaos off");
	/*
	 * A leader that could not renew in time stops acting at once; then it
	 * starts over as a candidate, with fresh caches, as a restarted
	 * process would.
	 */
	while ((rc = operator_run(&o, &stopping)) == OPERATOR_LOST_LEADERSHIP &&
	       !stopping) {
		log_warn("leader: back to candidate");
		sleep(1);
	}
	kube_config_release(&o.cfg);
	kube_stats_release(&stats);
	return rc;
}
