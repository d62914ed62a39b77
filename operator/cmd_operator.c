/* `ddiloco operator`: not built yet. */
#include <stdio.h>

#include "cmds.h"

int cmd_operator(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "ddiloco operator: not available in this build\n");
	return 2;
}
