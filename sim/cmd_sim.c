/* `ddiloco sim`: not built yet. */
#include <stdio.h>

#include "cmds.h"

int cmd_sim(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "ddiloco sim: not available in this build\n");
	return 2;
}
