/* `ddiloco syncer`: not built yet. */
#include <stdio.h>

#include "cmds.h"

int cmd_syncer(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "ddiloco syncer: not available in this build\n");
	return 2;
}
