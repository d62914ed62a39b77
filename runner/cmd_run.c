/* `ddiloco run`: not built yet. */
#include <stdio.h>

#include "cmds.h"

int cmd_run(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "ddiloco run: not available in this build\n");
	return 2;
}
