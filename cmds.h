/*
 * The subcommands of the ddiloco binary. Each takes the arguments after
 * its own name (argv[0] is the subcommand) and returns the exit code.
 */
#ifndef DDILOCO_CMDS_H
#define DDILOCO_CMDS_H

int cmd_train(int argc, char **argv);
int cmd_learner(int argc, char **argv);
int cmd_sidecar(int argc, char **argv);
int cmd_syncer(int argc, char **argv);
int cmd_operator(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_certs(int argc, char **argv);
int cmd_sim(int argc, char **argv);
int cmd_copy_runtime(int argc, char **argv);

#endif
