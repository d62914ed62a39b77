/*
 * `ddiloco operator`: runs the DecoupledTrainingJob controller (and the
 * chaos controller) against the API server of a kubeconfig, or of the
 * cluster it runs in. SIGINT/SIGTERM stop it cleanly (the Lease is given
 * up when held).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmds.h"
#include "common/log.h"
#include "operator/operator.h"

static volatile int stopping;

static void on_signal(int sig)
{
	(void)sig;
	stopping = 1;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ddiloco operator [--kubeconfig PATH] [--namespace NS] [--http HOST:PORT]\n"
		"                        [--no-chaos] [--leader-elect] [--lease-namespace NS]\n"
		"                        [--lease-name NAME] [--identity ID] [--workers N]\n"
		"                        [--status-url TEMPLATE] [--resync SECONDS]\n"
		"\n"
		"Reconciles DecoupledTrainingJob objects (ddiloco.io/v1alpha1): learner pods\n"
		"with their sidecar, the syncer StatefulSet, status and Events.\n"
		"\n"
		"  --kubeconfig PATH     API server and bearer token of PATH's current context;\n"
		"                        without it, the in-cluster service account\n"
		"  --namespace NS        watch only NS (default: every namespace)\n"
		"  --http HOST:PORT      /metrics, /healthz, /readyz (default 0.0.0.0:8080;\n"
		"                        port 0 picks one, 'off' disables)\n"
		"  --no-chaos            never run the chaos controller\n"
		"  --leader-elect        act only while holding the Lease\n"
		"  --lease-namespace NS  the Lease's namespace (default: the config's)\n"
		"  --lease-name NAME     the Lease's name (default ddiloco-operator)\n"
		"  --identity ID         this replica's name in the Lease (default: hostname-pid)\n"
		"  --workers N           reconcile workers (default 2)\n"
		"  --status-url T        the syncer's /status URL; {job} {namespace} {port}\n"
		"                        are replaced (default\n"
		"                        http://{job}-syncer-0.{job}-syncer.{namespace}.svc:{port}/status)\n"
		"  --resync SECONDS      full resync period (default 30)\n");
}

static int parse_http(const char *s, struct operator_opts *o)
{
	const char *colon = strrchr(s, ':');
	char *end;
	long port;

	if (!strcmp(s, "off")) {
		o->http_port = -1;
		return 0;
	}
	if (!colon || colon == s || (size_t)(colon - s) >= sizeof(o->http_addr))
		return -1;
	port = strtol(colon + 1, &end, 10);
	if (*end || port < 0 || port > 65535)
		return -1;
	snprintf(o->http_addr, sizeof(o->http_addr), "%.*s", (int)(colon - s), s);
	o->http_port = (int)port;
	return 0;
}

int cmd_operator(int argc, char **argv)
{
	struct operator_opts o;
	const char *kubeconfig = NULL, *lease_ns = NULL;
	struct sigaction sa;
	struct err e;
	char host[64] = "operator";
	int rc;

	memset(&o, 0, sizeof(o));
	snprintf(o.http_addr, sizeof(o.http_addr), "0.0.0.0");
	o.http_port = 8080;
	o.chaos = 1;
	o.workers = 2;
	o.resync = 30;
	snprintf(o.lease_name, sizeof(o.lease_name), "ddiloco-operator");
	snprintf(o.status_url, sizeof(o.status_url),
		 "http://{job}-syncer-0.{job}-syncer.{namespace}.svc:{port}/status");
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(a, "--no-chaos")) {
			o.chaos = 0;
		} else if (!strcmp(a, "--leader-elect")) {
			o.leader_elect = 1;
		} else if (!v) {
			fprintf(stderr, "ddiloco operator: '%s' needs a value or is unknown\n", a);
			usage(stderr);
			return 2;
		} else if (!strcmp(a, "--kubeconfig")) {
			kubeconfig = v, i++;
		} else if (!strcmp(a, "--namespace")) {
			snprintf(o.namespace_, sizeof(o.namespace_), "%s", v), i++;
		} else if (!strcmp(a, "--lease-namespace")) {
			lease_ns = v, i++;
		} else if (!strcmp(a, "--lease-name")) {
			snprintf(o.lease_name, sizeof(o.lease_name), "%s", v), i++;
		} else if (!strcmp(a, "--identity")) {
			snprintf(o.identity, sizeof(o.identity), "%s", v), i++;
		} else if (!strcmp(a, "--status-url")) {
			snprintf(o.status_url, sizeof(o.status_url), "%s", v), i++;
		} else if (!strcmp(a, "--http")) {
			if (parse_http(v, &o)) {
				fprintf(stderr, "ddiloco operator: --http '%s': expected HOST:PORT or off\n", v);
				return 2;
			}
			i++;
		} else if (!strcmp(a, "--workers")) {
			o.workers = atoi(v), i++;
			if (o.workers < 1 || o.workers > 64) {
				fprintf(stderr, "ddiloco operator: --workers '%s': expected 1..64\n", v);
				return 2;
			}
		} else if (!strcmp(a, "--resync")) {
			o.resync = atof(v), i++;
			if (!(o.resync >= 1)) {
				fprintf(stderr, "ddiloco operator: --resync '%s': expected >= 1\n", v);
				return 2;
			}
		} else {
			fprintf(stderr, "ddiloco operator: unknown option '%s'\n", a);
			usage(stderr);
			return 2;
		}
	}
	log_init("operator");
	if (kubeconfig ? kube_config_load(kubeconfig, &o.cfg, &e) :
			 kube_config_in_cluster(&o.cfg, &e)) {
		fprintf(stderr, "ddiloco operator: %s\n", e.msg);
		return 1;
	}
	snprintf(o.lease_ns, sizeof(o.lease_ns), "%s",
		 lease_ns ? lease_ns : o.cfg.namespace_);
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
	return rc;
}
