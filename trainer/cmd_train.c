/* `ddiloco train`: not built yet. */
#include <stdio.h>

#include "cmds.h"

int cmd_train(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "ddiloco train: not available in this build\n");
	return 2;
}
