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
#include "operator/children.h"
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

/* The options given as text, before they go into struct operator_opts. */
struct args {
	const char *kubeconfig, *lease_ns, *ns, *lease_name, *identity;
	const char *status_url, *operator_ns, *accounts, *external_storage;
	const char *runtime_image, *runtime_pull;
	int no_chaos, allow_privileged;
};

static void defaults(struct operator_opts *o)
{
	memset(o, 0, sizeof(*o));
	snprintf(o->http_addr, sizeof(o->http_addr), "0.0.0.0");
	o->http_port = 8080;
	o->workers = 2;
	o->resync = 30;
	snprintf(o->lease_name, sizeof(o->lease_name), "ddiloco-operator");
	snprintf(o->status_url, sizeof(o->status_url),
		 "http://{job}-syncer-{shard}.{job}-syncer.{namespace}.svc:{port}/status");
	snprintf(o->external_storage, sizeof(o->external_storage), "%s",
		 CKPT_EXTERNAL_DEFAULT);
	snprintf(o->runtime_image, sizeof(o->runtime_image), "%s",
		 RUNTIME_IMAGE_DEFAULT);
	snprintf(o->runtime_pull, sizeof(o->runtime_pull), "IfNotPresent");
}

/* The strings given into o's fixed buffers. */
static int take_strings(struct operator_opts *o, const struct args *a,
			struct err *e)
{
	double bytes;

	if (copy_opt(o->namespace_, sizeof(o->namespace_), "namespace", a->ns, e) ||
	    copy_opt(o->lease_name, sizeof(o->lease_name), "lease-name",
		     a->lease_name, e) ||
	    copy_opt(o->identity, sizeof(o->identity), "identity", a->identity, e) ||
	    copy_opt(o->status_url, sizeof(o->status_url), "status-url",
		     a->status_url, e) ||
	    copy_opt(o->operator_ns, sizeof(o->operator_ns), "operator-namespace",
		     a->operator_ns, e) ||
	    copy_opt(o->external_storage, sizeof(o->external_storage),
		     "external-checkpoint-storage", a->external_storage, e) ||
	    copy_opt(o->runtime_image, sizeof(o->runtime_image),
		     "runtime-image", a->runtime_image, e) ||
	    copy_opt(o->runtime_pull, sizeof(o->runtime_pull),
		     "runtime-image-pull-policy", a->runtime_pull, e))
		return -1;
	if (!o->runtime_image[0] || strpbrk(o->runtime_image, " \t\n"))
		return err_set(e, "option '--runtime-image': '%s' is not an "
			       "image reference", o->runtime_image);
	if (strcmp(o->runtime_pull, "Always") && strcmp(o->runtime_pull, "IfNotPresent") &&
	    strcmp(o->runtime_pull, "Never"))
		return err_set(e, "option '--runtime-image-pull-policy': '%s' is "
			       "not Always, IfNotPresent or Never", o->runtime_pull);
	o->runtime = (struct runtime_image){ o->runtime_image, o->runtime_pull };
	if (quantity_bytes(o->external_storage, &bytes) || bytes < 0x1p20)
		return err_set(e, "option '--external-checkpoint-storage': '%s' is "
			       "not a storage quantity of at least 1Mi (e.g. 10Gi)",
			       o->external_storage);
	o->chaos = !a->no_chaos;
	o->policy.allow_privileged = a->allow_privileged;
	if (a->accounts && pod_policy_add_accounts(&o->policy, a->accounts, e))
		return err_wrap(e, "option '--template-service-accounts'");
	return 0;
}

/*
 * The API server (the kubeconfig's current context, or the cluster's
 * service account), its answers counted into stats for /metrics, and
 * what defaults to the config's: the Lease's namespace, the operator's
 * namespace; the identity defaults to hostname-pid. -1 when the config
 * cannot be read (stats untouched).
 */
static int configure(struct operator_opts *o, const struct args *a,
		     struct kube_stats *stats, struct err *e)
{
	char host[64] = "operator";

	if (a->kubeconfig ? kube_config_load(a->kubeconfig, &o->cfg, e) :
			    kube_config_in_cluster(&o->cfg, e))
		return -1;
	kube_stats_init(stats);
	o->cfg.stats = stats;
	snprintf(o->lease_ns, sizeof(o->lease_ns), "%s",
		 a->lease_ns ? a->lease_ns : o->cfg.namespace_);
	if (!o->operator_ns[0])
		snprintf(o->operator_ns, sizeof(o->operator_ns), "%s", o->cfg.namespace_);
	if (!o->identity[0]) {
		gethostname(host, sizeof(host) - 1);
		snprintf(o->identity, sizeof(o->identity), "%s-%d", host, (int)getpid());
	}
	return 0;
}

static void catch_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

/*
 * Runs until a signal. A leader that could not renew in time stops
 * acting at once; then it starts over as a candidate, with fresh caches,
 * as a restarted process would.
 */
static int run(const struct operator_opts *o)
{
	int rc;

	log_info("API server %s, %s, identity %s%s", o->cfg.server,
		 o->namespace_[0] ? o->namespace_ : "every namespace", o->identity,
		 o->chaos ? "" : ", chaos off");
	while ((rc = operator_run(o, &stopping)) == OPERATOR_LOST_LEADERSHIP &&
	       !stopping) {
		log_warn("leader: back to candidate");
		sleep(1);
	}
	return rc;
}

/* The option table, beside the variables it fills, then the steps.
 * Long because the table has one entry per flag. */
int cmd_operator(int argc, char **argv)
{
	struct operator_opts o;
	struct args a = { 0 };
	const struct cli_option opts[] = {
		CLI_TEXT("usage: ddiloco operator [--kubeconfig PATH] [--namespace NS] [--http HOST:PORT]\n"
			 "                        [--no-chaos] [--leader-elect] [--lease-namespace NS]\n"
			 "                        [--lease-name NAME] [--identity ID] [--workers N]\n"
			 "                        [--status-url TEMPLATE] [--resync SECONDS]\n"
			 "                        [--operator-namespace NS] [--allow-privileged-templates]\n"
			 "                        [--template-service-accounts NAME,...]\n"
			 "                        [--external-checkpoint-storage QUANTITY] [--manage-crd]\n"
			 "                        [--runtime-image IMAGE] [--runtime-image-pull-policy P]\n"
			 "\n"
			 "Reconciles DecoupledTrainingJob objects (ddiloco.io/v1alpha1): learner pods\n"
			 "with their sidecar, the syncer StatefulSet, status and Events.\n"),
		CLI_STRING("kubeconfig", 0, &a.kubeconfig, "PATH",
			   "API server and bearer token of PATH's current context;\n"
			   "without it, the in-cluster service account"),
		CLI_STRING("namespace", 0, &a.ns, "NS",
			   "watch only NS (default: every namespace)"),
		CLI_CALLBACK("http", 0, &o, "HOST:PORT", parse_http,
			     "/metrics, /healthz, /readyz (default 0.0.0.0:8080;\n"
			     "port 0 picks one, 'off' disables)"),
		CLI_FLAG("no-chaos", 0, &a.no_chaos, "never run the chaos controller"),
		CLI_FLAG("leader-elect", 0, &o.leader_elect,
			 "act only while holding the Lease"),
		CLI_STRING("lease-namespace", 0, &a.lease_ns, "NS",
			   "the Lease's namespace (default: the config's)"),
		CLI_STRING("lease-name", 0, &a.lease_name, "NAME",
			   "the Lease's name (default ddiloco-operator)"),
		CLI_STRING("identity", 0, &a.identity, "ID",
			   "this replica's name in the Lease (default: hostname-pid)"),
		CLI_INT("workers", 0, &o.workers, "N", 1, 64,
			"reconcile workers (default 2)"),
		CLI_STRING("status-url", 0, &a.status_url, "T",
			   "the syncer's /status URL; {job} {namespace} {port} {shard}\n"
			   "are replaced (default\n"
			   "http://{job}-syncer-{shard}.{job}-syncer.{namespace}.svc:{port}/status)"),
		CLI_DOUBLE("resync", 0, &o.resync, "SECONDS", 1, INFINITY,
			   "full resync period (default 30)"),
		CLI_STRING("operator-namespace", 0, &a.operator_ns, "NS",
			   "where this operator's pods run: the syncers'\n"
			   "NetworkPolicies let pods there reach /status\n"
			   "(default: the config's namespace)"),
		LOG_CLI_OPTION(),
		CLI_FLAG("allow-privileged-templates", 0, &a.allow_privileged,
			 "let job templates ask for privileged or\n"
			 "escalating containers, added capabilities,\n"
			 "hostPath volumes, the host's namespaces\n"
			 "(refused by default)"),
		CLI_STRING("template-service-accounts", 0, &a.accounts, "NAME,...",
			   "service accounts job templates may name besides\n"
			   "'default' (default: none)"),
		CLI_FLAG("manage-crd", 0, &o.manage_crd,
			 "apply the job CRD this operator was built with\n"
			 "at start (server-side apply; needs patch on\n"
			 "customresourcedefinitions); without it, say when\n"
			 "the served one differs"),
		CLI_STRING("external-checkpoint-storage", 0, &a.external_storage,
			   "Q", "the checkpoint claim of an external model\n"
			   "without spec.syncer.storage, before its size\n"
			   "is known (default " CKPT_EXTERNAL_DEFAULT "; resized once\n"
			   "its syncer says it is too small)"),
		CLI_STRING("runtime-image", 0, &a.runtime_image, "IMAGE",
			   "the image of every job's syncer and sidecars, of\n"
			   "the learner library copied into a learner of a\n"
			   "command of its own, and of learners without\n"
			   "spec.learners.image (default " RUNTIME_IMAGE_DEFAULT ")"),
		CLI_STRING("runtime-image-pull-policy", 0, &a.runtime_pull, "P",
			   "its imagePullPolicy: Always, IfNotPresent\n"
			   "(default) or Never"),
		CLI_END(),
	};
	struct err e;
	struct kube_stats stats;
	int n, rc;

	defaults(&o);
	n = cli_parse(opts, argc, argv, &e);
	if (n < 0)
		return cli_exit_code(opts, "ddiloco operator", n, &e);
	if (n > 0)
		err_set(&e, "unexpected argument '%s'", argv[0]);
	if (n > 0 || take_strings(&o, &a, &e))
		return cli_exit_code(opts, "ddiloco operator", -1, &e);
	log_init("operator");
	if (configure(&o, &a, &stats, &e)) {
		fprintf(stderr, "ddiloco operator: %s\n", e.msg);
		return 1;
	}
	catch_signals();
	rc = run(&o);
	kube_config_release(&o.cfg);
	kube_stats_release(&stats);
	return rc;
}
