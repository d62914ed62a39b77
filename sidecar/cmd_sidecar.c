/* `ddiloco sidecar`: not built yet. */
#include <stdio.h>

#include "cmds.h"

int cmd_sidecar(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "ddiloco sidecar: not available in this build\n");
	return 2;
}
