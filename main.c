/*
 * ddiloco: one binary, one subcommand per part (docs/design.md §2).
 */
#include <stdio.h>
#include <string.h>

#include "cmds.h"
#include "common/cli.h"
#include "common/pki.h"
#include "common/util.h"

static const struct {
	const char *name;
	int (*fn)(int, char **);
	const char *help;
} cmds[] = {
	{ "run", cmd_run, "run a job on this machine: syncer, learners, sidecars, chaos" },
	{ "train", cmd_train, "train one learner alone (the data-parallel baseline)" },
	{ "learner", cmd_learner, "train through the exchange with a sidecar" },
	{ "sidecar", cmd_sidecar, "move fragments between a learner and the syncer" },
	{ "syncer", cmd_syncer, "the outer loop: quorum rounds, merges, checkpoints" },
	{ "operator", cmd_operator, "reconcile DecoupledTrainingJobs on Kubernetes" },
	{ "sim", cmd_sim, "simulate goodput at cluster scale" },
	{ "certs", cmd_certs, "make a job's CA and certificates (docs/security.md)" },
	{ "copy-runtime", cmd_copy_runtime, "copy the learner library out of the runtime image" },
};

static int version;

/* The options before the command: only argv[1] is looked at. */
static const struct cli_option opts[] = {
	CLI_TEXT(""),
	CLI_FLAG("version", 0, &version, "print the version"),
	CLI_END(),
};

static void usage(FILE *f)
{
	fprintf(f, "usage: ddiloco <command> [options]   (ddiloco <command> --help)\n\n");
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		fprintf(f, "  %-12s %s\n", cmds[i].name, cmds[i].help);
	cli_usage(opts, f);
}

int main(int argc, char **argv)
{
	struct err e;
	int n;

	pki_process_init();
	nofile_raise();   /* one descriptor a connection (docs/security.md) */
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (argv[1][0] == '-') {
		n = cli_parse(opts, 2, argv, &e);
		if (n == CLI_HELP) {
			usage(stdout);
			return 0;
		}
		if (n < 0) {
			fprintf(stderr, "ddiloco: %s\n\n", e.msg);
			usage(stderr);
			return 2;
		}
	}
	if (version || !strcmp(argv[1], "version")) {
		printf("ddiloco %s\n", DDILOCO_VERSION);
		return 0;
	}
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (!strcmp(argv[1], cmds[i].name))
			return cmds[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "ddiloco: unknown command '%s'\n\n", argv[1]);
	usage(stderr);
	return 2;
}
