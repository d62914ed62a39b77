/* `ddiloco learner`: not built yet. */
#include <stdio.h>

#include "cmds.h"

int cmd_learner(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "ddiloco learner: not available in this build\n");
	return 2;
}
