/*
 * `ddiloco sidecar`: the command line around sidecar/ — reads the job,
 * builds the same fragment table as the learner, attaches the exchange,
 * serves /healthz /readyz /metrics, and runs the client until the syncer
 * says the job is done.
 */
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "common/httpd.h"
#include "common/jobspec.h"
#include "common/log.h"
#include "sidecar/sidecar.h"
#include "trainer/model.h"

static struct sidecar *running;   /* for the signal handler only */

static void on_signal(int sig)
{
	(void)sig;
	if (running)
		sidecar_stop(running);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ddiloco sidecar --job JOB.yaml --learner I --exchange DIR\n"
		"                       --syncer HOST:PORT [--http HOST:PORT]\n\n"
		"Moves fragments between learner I (through the exchange folder DIR,\n"
		"shared with `ddiloco learner`) and the syncer (gRPC; HOST is a DNS\n"
		"name or an address). Reconnects with backoff when the syncer goes\n"
		"away; exits 0 when the syncer says the job is done.\n\n"
		"  --http HOST:PORT   serve /healthz, /readyz and /metrics\n");
}

static int http_handler(void *ctx, const char *path, struct buf *body,
			const char **content_type)
{
	struct sidecar *s = ctx;
	struct sidecar_metrics m;

	*content_type = "text/plain; charset=utf-8";
	if (!strcmp(path, "/healthz")) {
		buf_printf(body, "ok\n");
		return 200;
	}
	if (!strcmp(path, "/readyz")) {
		sidecar_get_metrics(s, &m);
		buf_printf(body, "%s\n", m.connected && m.welcomed ? "ready"
								 : "not connected");
		return m.connected && m.welcomed ? 200 : 503;
	}
	if (!strcmp(path, "/metrics")) {
		*content_type = "text/plain; version=0.0.4";
		sidecar_metrics_text(s, body);
		return 200;
	}
	buf_printf(body, "not found\n");
	return 404;
}

static int split_hostport(const char *hp, char *host, size_t hostlen,
			  int *port)
{
	const char *colon = strrchr(hp, ':');
	char *end;
	long v;

	if (!colon || (size_t)(colon - hp) >= hostlen)
		return -1;
	v = strtol(colon + 1, &end, 10);
	if (*end || v < 0 || v > 65535 || end == colon + 1)
		return -1;
	memcpy(host, hp, (size_t)(colon - hp));
	host[colon - hp] = 0;
	*port = (int)v;
	return 0;
}

int cmd_sidecar(int argc, char **argv)
{
	const char *job = NULL, *dir = NULL, *target = NULL, *http = NULL;
	int learner = -1, rc = 1, ft_ok = 0;
	struct job_spec js;
	struct model_config mc;
	struct frag_table ft;
	struct exchange *x = NULL;
	struct sidecar *s = NULL;
	struct httpd *h = NULL;
	struct sidecar_opts o = { 0 };
	struct err e;
	char comp[32], host[256];
	int port = 0;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 0;
		}
		if (!v) {
			fprintf(stderr, "ddiloco sidecar: '%s' needs a value\n", a);
			usage(stderr);
			return 2;
		}
		if (!strcmp(a, "--job")) {
			job = v;
		} else if (!strcmp(a, "--learner")) {
			char *end;

			learner = (int)strtol(v, &end, 10);
			if (*end || end == v || learner < 0) {
				fprintf(stderr, "ddiloco sidecar: --learner: '%s' is "
					"not a learner index\n", v);
				return 2;
			}
		} else if (!strcmp(a, "--exchange")) {
			dir = v;
		} else if (!strcmp(a, "--syncer")) {
			target = v;
		} else if (!strcmp(a, "--http")) {
			http = v;
		} else {
			fprintf(stderr, "ddiloco sidecar: unknown option '%s'\n", a);
			usage(stderr);
			return 2;
		}
		i++;
	}
	if (!job || learner < 0 || !dir || !target) {
		fprintf(stderr, "ddiloco sidecar: --job, --learner, --exchange and "
			"--syncer are required\n");
		usage(stderr);
		return 2;
	}
	snprintf(comp, sizeof(comp), "sidecar-%d", learner);
	log_init(comp);
	if (http && split_hostport(http, host, sizeof(host), &port)) {
		fprintf(stderr, "ddiloco sidecar: --http: '%s' is not HOST:PORT\n",
			http);
		return 2;
	}
	if (jobspec_load(job, &js, &e)) {
		log_error("%s", e.msg);
		return 1;
	}
	if (learner >= js.learners.replicas) {
		log_error("learner %d: the job has %d learners (0 to %d)", learner,
			  js.learners.replicas, js.learners.replicas - 1);
		return 1;
	}
	if (model_config_from_job(&js.model, &mc, &e) ||
	    model_frag_table(&mc, js.syncer.fragments, &ft, &e)) {
		log_error("%s", e.msg);
		return 1;
	}
	ft_ok = 1;
	/* reuse big buffers instead of fresh mmaps (docs/design.md §7) */
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 1 << 30);
	mallopt(M_TOP_PAD, 64 << 20);
	if (exchange_open(dir, EXCHANGE_SIDECAR, &ft, &x, &e))
		goto out;
	o.target = target;
	o.learner_id = (unsigned)learner;
	o.job = js.name;
	s = sidecar_new(&o, x, &ft, &e);
	if (!s)
		goto out;
	if (http) {
		h = httpd_start(host, port, http_handler, s, &e);
		if (!h)
			goto out;
		log_info("http on %s:%d", host, httpd_port(h));
	}
	running = s;
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	signal(SIGPIPE, SIG_IGN);
	rc = sidecar_run(s, &e);
	running = NULL;
	if (rc == 0)
		log_info("job done: exchange marked done");
	else if (rc == 1)
		log_info("stopped");
	rc = rc < 0 ? 1 : 0;
out:
	if (rc)
		log_error("%s", e.msg);
	httpd_stop(h);
	sidecar_free(s);
	exchange_close(x);
	if (ft_ok)
		frag_table_release(&ft);
	return rc;
}
