/*
 * proc: fork/exec with a process group per child, SIGKILL on parent death,
 * output to a log file; non-blocking reaping; stop with a grace period.
 * See proc.h.
 */
#include "runner/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"

int proc_init(struct proc *p, const char *name, const char *log,
	      char *const argv[], struct err *e)
{
	int n = 0;

	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "%s", name);
	snprintf(p->log, sizeof(p->log), "%s", log);
	for (; argv[n]; n++) {
		if (n == PROC_MAX_ARGS) {
			proc_release(p);
			return err_set(e, "%s: more than %d arguments", name,
				       PROC_MAX_ARGS);
		}
		p->argv[n] = strdup(argv[n]);
		if (!p->argv[n]) {
			proc_release(p);
			return err_set(e, "%s: out of memory", name);
		}
	}
	p->argv[n] = NULL;
	return 0;
}

void proc_release(struct proc *p)
{
	for (int i = 0; i < PROC_MAX_ARGS && p->argv[i]; i++) {
		free(p->argv[i]);
		p->argv[i] = NULL;
	}
	for (int i = 0; i < PROC_MAX_ENV && p->env[i]; i++) {
		free(p->env[i]);
		p->env[i] = NULL;
	}
}

int proc_setenv(struct proc *p, const char *name, const char *value,
		struct err *e)
{
	int n = 0;

	while (n < PROC_MAX_ENV && p->env[n])
		n++;
	if (n == PROC_MAX_ENV)
		return err_set(e, "%s: more than %d variables", p->name,
			       PROC_MAX_ENV);
	if (asprintf(&p->env[n], "%s=%s", name, value) < 0) {
		p->env[n] = NULL;
		return err_set(e, "%s: out of memory", p->name);
	}
	return 0;
}

/* 1 when the entry "NAME=..." of environ is one of p's own variables. */
static int overridden(const struct proc *p, const char *entry)
{
	size_t len = strcspn(entry, "=");

	for (int i = 0; i < PROC_MAX_ENV && p->env[i]; i++)
		if (!strncmp(p->env[i], entry, len) && p->env[i][len] == '=')
			return 1;
	return 0;
}

/* p's variables, then the runner's environment without those names. */
static char **child_env(const struct proc *p)
{
	extern char **environ;
	size_t n = 0, k = 0;
	char **env;

	while (environ[n])
		n++;
	env = calloc(n + PROC_MAX_ENV + 1, sizeof(*env));
	if (!env)
		return NULL;
	for (int i = 0; i < PROC_MAX_ENV && p->env[i]; i++)
		env[k++] = p->env[i];
	for (size_t i = 0; i < n; i++)
		if (!overridden(p, environ[i]))
			env[k++] = environ[i];
	return env;
}

/* In the child, between fork and exec: only async-signal-safe calls. */
static void child(struct proc *p, pid_t parent, int logfd, char **env)
{
	sigset_t none;
	int nullfd;

	setpgid(0, 0);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)   /* the parent died before prctl */
		_exit(127);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGPIPE, SIG_DFL);
	nullfd = open("/dev/null", O_RDONLY);
	if (nullfd >= 0) {
		dup2(nullfd, 0);
		close(nullfd);
	}
	dup2(logfd, 1);
	dup2(logfd, 2);
	close(logfd);
	execvpe(p->argv[0], p->argv, env);
	{
		const char *m = "proc: cannot execute ";
		(void)!write(2, m, strlen(m));
		(void)!write(2, p->argv[0], strlen(p->argv[0]));
		(void)!write(2, "\n", 1);
	}
	_exit(127);
}

int proc_start(struct proc *p, struct err *e)
{
	pid_t parent = getpid(), pid;
	int logfd;
	char **env;

	if (p->pid)
		return err_set(e, "%s: already running (pid %d)", p->name, (int)p->pid);
	logfd = open(p->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (logfd < 0)
		return err_set(e, "%s: cannot open log '%s': %s", p->name, p->log,
			       strerror(errno));
	env = child_env(p);   /* made here: the child only calls exec */
	if (!env) {
		close(logfd);
		return err_set(e, "%s: out of memory", p->name);
	}
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		close(logfd);
		free(env);
		return err_set(e, "%s: cannot fork: %s", p->name, strerror(errno));
	}
	if (pid == 0) {
		/* O_CLOEXEC is dropped by dup2 onto 1 and 2 */
		child(p, parent, logfd, env);
	}
	free(env);
	setpgid(pid, pid);   /* also in the parent: no window without a group */
	close(logfd);
	p->pid = pid;
	p->started = clock_mono();
	p->starts++;
	return 0;
}

int proc_signal(struct proc *p, int sig)
{
	if (!p->pid)
		return -1;
	if (kill(-p->pid, sig) && kill(p->pid, sig))
		return -1;
	return 0;
}

int proc_reap(struct proc *p)
{
	int status;
	pid_t r;

	if (!p->pid)
		return 0;
	r = waitpid(p->pid, &status, WNOHANG);
	if (r == 0)
		return 0;
	if (r < 0 && errno == EINTR)
		return 0;
	/* whatever the leader left in its group goes with it */
	kill(-p->pid, SIGKILL);
	p->status = r < 0 ? 0 : status;
	p->pid = 0;
	return 1;
}

void proc_stop_all(struct proc **ps, int n, double grace)
{
	double end = clock_mono() + grace;
	int left;

	for (int i = 0; i < n; i++)
		if (ps[i]->pid)
			proc_signal(ps[i], SIGTERM);
	for (;;) {
		left = 0;
		for (int i = 0; i < n; i++)
			if (ps[i]->pid && !proc_reap(ps[i]))
				left++;
		if (!left || clock_mono() >= end)
			break;
		sleep_seconds(0.02);
	}
	for (int i = 0; i < n; i++) {
		if (!ps[i]->pid)
			continue;
		proc_signal(ps[i], SIGKILL);
		/* SIGKILL cannot be refused: a blocking wait is safe */
		while (waitpid(ps[i]->pid, &ps[i]->status, 0) < 0 && errno == EINTR)
			;
		ps[i]->pid = 0;
	}
}

void proc_stop(struct proc *p, double grace)
{
	proc_stop_all(&p, 1, grace);
}

const char *proc_describe_status(int status, char *buf, int n)
{
	if (WIFEXITED(status))
		snprintf(buf, (size_t)n, "exit %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, (size_t)n, "killed by SIG%s",
			 sigabbrev_np(WTERMSIG(status)) ? sigabbrev_np(WTERMSIG(status)) : "?");
	else
		snprintf(buf, (size_t)n, "status %d", status);
	return buf;
}
