/*
 * The pod sandbox's process for the test cluster's real node (the image
 * the CRI's sandbox_image names; no registry exists to pull one from).
 * It holds the pod's namespaces open: it sleeps until SIGINT or SIGTERM
 * and reaps the zombies of a pod that shares its process namespace.
 * Built static, so the image is this one file FROM scratch.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig)
{
	(void)sig;
	_exit(0);
}

static void on_child(int sig)
{
	(void)sig;
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

int main(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop;
	if (sigaction(SIGINT, &sa, NULL) || sigaction(SIGTERM, &sa, NULL))
		return 1;
	sa.sa_handler = on_child;
	sa.sa_flags = SA_NOCLDSTOP;
	if (sigaction(SIGCHLD, &sa, NULL))
		return 1;
	for (;;)
		pause();
	return EXIT_FAILURE;
}
