/* Process supervision with stand-in children (sleep, sh): start, kill,
 * reap, process groups, stop with grace, logs, parent death. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"
#include "runner/proc.h"
#include "tests/unit/testlib.h"

static char dir[64];

static void path_in(char *out, size_t n, const char *name)
{
	snprintf(out, n, "%s/%s", dir, name);
}

static void make_proc(struct proc *p, const char *name, const char *script)
{
	char log[256];
	char *argv[] = { (char *)"/bin/sh", (char *)"-c", (char *)script, NULL };

	path_in(log, sizeof(log), "log");
	assert_int_equal(proc_init(p, name, log, argv, NULL), 0);
}

/* Reaps within timeout seconds; 1 if reaped. */
static int reap_within(struct proc *p, double timeout)
{
	double end = clock_mono() + timeout;

	while (clock_mono() < end) {
		if (proc_reap(p))
			return 1;
		sleep_seconds(0.01);
	}
	return 0;
}

/* A pid is gone when it no longer exists or is a zombie awaiting init. */
static int gone_within(pid_t pid, double timeout)
{
	double end = clock_mono() + timeout;
	char path[64], buf[512];

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	while (clock_mono() < end) {
		FILE *f = fopen(path, "r");
		if (!f)
			return 1;
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[n] = 0;
		char *rp = strrchr(buf, ')');
		if (rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X'))
			return 1;
		sleep_seconds(0.02);
	}
	return 0;
}

static pid_t read_pid(const char *name)
{
	char path[256];
	double end = clock_mono() + 10;
	int pid = 0;

	path_in(path, sizeof(path), name);
	while (clock_mono() < end) {
		FILE *f = fopen(path, "r");
		if (f) {
			int ok = fscanf(f, "%d", &pid) == 1;
			fclose(f);
			if (ok && pid > 0)
				return pid;
		}
		sleep_seconds(0.02);
	}
	return 0;
}

static int setup(void **state)
{
	(void)state;
	return testlib_tmpdir(dir, sizeof(dir), "test_proc");
}

static int teardown(void **state)
{
	(void)state;
	return testlib_rmtree(dir);
}

static void kill_and_restart(void **state)
{
	struct proc p;
	char buf[64];
	pid_t first;

	(void)state;
	make_proc(&p, "sleeper", "exec sleep 30");
	assert_int_equal(proc_start(&p, NULL), 0);
	first = p.pid;
	assert_greater(first, 0);
	assert_int_equal(getpgid(first), first);   /* its own group */
	assert_int_equal(proc_start(&p, NULL), -1); /* already running */
	assert_int_equal(proc_reap(&p), 0);
	assert_int_equal(proc_signal(&p, SIGKILL), 0);
	assert_true(reap_within(&p, 10));
	assert_int_equal(p.pid, 0);
	assert_string_equal(proc_describe_status(p.status, buf, sizeof(buf)),
			    "killed by SIGKILL");
	assert_int_equal(proc_signal(&p, SIGKILL), -1);   /* nothing running */

	assert_int_equal(proc_start(&p, NULL), 0);
	assert_greater(p.pid, 0);
	assert_int_not_equal(p.pid, first);
	assert_int_equal(p.starts, 2);
	proc_stop(&p, 5);
	assert_int_equal(p.pid, 0);
	assert_string_equal(proc_describe_status(p.status, buf, sizeof(buf)),
			    "killed by SIGTERM");
	proc_release(&p);
}

static void group_goes_with_the_leader(void **state)
{
	struct proc p;
	char script[512];
	pid_t grandchild;

	(void)state;
	/* killed: the background sleep is in the group and dies too */
	snprintf(script, sizeof(script), "sleep 30 & echo $! > %s/gc1; wait", dir);
	make_proc(&p, "group", script);
	assert_int_equal(proc_start(&p, NULL), 0);
	grandchild = read_pid("gc1");
	assert_greater(grandchild, 0);
	assert_int_equal(getpgid(grandchild), p.pid);
	proc_signal(&p, SIGKILL);
	assert_true(reap_within(&p, 10));
	assert_true(gone_within(grandchild, 10));
	proc_release(&p);

	/* the leader exits on its own: reaping clears what it left behind */
	snprintf(script, sizeof(script), "sleep 30 & echo $! > %s/gc2; exit 3", dir);
	make_proc(&p, "leaver", script);
	assert_int_equal(proc_start(&p, NULL), 0);
	grandchild = read_pid("gc2");
	assert_greater(grandchild, 0);
	assert_true(reap_within(&p, 10));
	assert_true(WIFEXITED(p.status));
	assert_int_equal(WEXITSTATUS(p.status), 3);
	assert_true(gone_within(grandchild, 10));
	proc_release(&p);
}

static void stop_with_grace(void **state)
{
	struct proc a, b, *both[2] = { &a, &b };
	char buf[64], trapped[256], script[512];
	double t0;

	(void)state;
	/* the stubborn one says when its trap is set: waited for */
	path_in(trapped, sizeof(trapped), "trapped");
	unlink(trapped);
	snprintf(script, sizeof(script),
		 "trap '' TERM; : > '%s'; while :; do sleep 0.1; done", trapped);
	make_proc(&a, "stubborn", script);
	make_proc(&b, "polite", "exec sleep 30");
	assert_int_equal(proc_start(&a, NULL), 0);
	assert_int_equal(proc_start(&b, NULL), 0);
	assert_eventually(access(trapped, F_OK) == 0, 10);
	t0 = clock_mono();
	proc_stop_all(both, 2, 1.0);
	assert_less(clock_mono() - t0, 8);
	assert_int_equal(a.pid, 0);
	assert_int_equal(b.pid, 0);
	assert_string_equal(proc_describe_status(a.status, buf, sizeof(buf)),
			    "killed by SIGKILL");
	assert_string_equal(proc_describe_status(b.status, buf, sizeof(buf)),
			    "killed by SIGTERM");
	proc_release(&a);
	proc_release(&b);
}

static void output_to_log(void **state)
{
	struct proc p;
	char log[256], *text;
	char *bad[] = { (char *)"/nonexistent/ddiloco", NULL };
	size_t n;

	(void)state;
	path_in(log, sizeof(log), "log");
	unlink(log);
	make_proc(&p, "talker", "echo to-stdout; echo to-stderr >&2; read x; echo read=$x");
	assert_int_equal(proc_start(&p, NULL), 0);
	assert_true(reap_within(&p, 10));
	assert_true(WIFEXITED(p.status));
	assert_int_equal(WEXITSTATUS(p.status), 0);
	proc_release(&p);

	assert_int_equal(proc_init(&p, "missing", log, bad, NULL), 0);
	assert_int_equal(proc_start(&p, NULL), 0);
	assert_true(reap_within(&p, 10));
	assert_true(WIFEXITED(p.status));
	assert_int_equal(WEXITSTATUS(p.status), 127);
	proc_release(&p);

	assert_int_equal(file_read_all(log, 1 << 16, (void **)&text, &n, NULL), 0);
	assert_string_equal(text, "to-stdout\nto-stderr\nread=\n"
			    "proc: cannot execute /nonexistent/ddiloco\n");
	free(text);
}

static void too_many_arguments(void **state)
{
	char *argv[PROC_MAX_ARGS + 2];
	struct proc p;
	struct err e;

	(void)state;
	for (int i = 0; i < PROC_MAX_ARGS + 1; i++)
		argv[i] = (char *)"x";
	argv[PROC_MAX_ARGS + 1] = NULL;
	assert_int_equal(proc_init(&p, "long", "/dev/null", argv, &e), -1);
	assert_string_equal(e.msg, "long: more than 80 arguments");
}

/*
 * proc_setenv adds to the runner's environment and wins over a variable
 * of the same name there; a command without '/' is found in PATH.
 */
static void environment_and_path(void **state)
{
	struct proc p;
	struct err e;
	char log[256], *text;
	char *argv[] = { (char *)"sh", (char *)"-c",
			 (char *)"echo \"$DDX_A|$DDX_B|$DDX_KEEP\"", NULL };
	size_t n;

	(void)state;
	path_in(log, sizeof(log), "envlog");
	unlink(log);
	setenv("DDX_B", "runner", 1);
	setenv("DDX_KEEP", "kept", 1);
	assert_int_equal(proc_init(&p, "env", log, argv, NULL), 0);
	assert_int_equal(proc_setenv(&p, "DDX_A", "one=1", NULL), 0);
	assert_int_equal(proc_setenv(&p, "DDX_B", "child", NULL), 0);
	assert_int_equal(proc_start(&p, NULL), 0);
	assert_true(reap_within(&p, 10));
	assert_int_equal(WEXITSTATUS(p.status), 0);
	assert_int_equal(file_read_all(log, 1 << 16, (void **)&text, &n, NULL), 0);
	assert_string_equal(text, "one=1|child|kept\n");
	free(text);
	for (int i = 2; i < PROC_MAX_ENV; i++)
		assert_int_equal(proc_setenv(&p, "X", "y", NULL), 0);
	assert_int_equal(proc_setenv(&p, "X", "y", &e), -1);
	assert_string_equal(e.msg, "env: more than 8 variables");
	proc_release(&p);
	unsetenv("DDX_B");
	unsetenv("DDX_KEEP");
}

/* A runner that dies without cleaning up takes its children with it. */
static void children_die_with_the_parent(void **state)
{
	char script[256];
	pid_t runner, orphan;
	int status;

	(void)state;
	snprintf(script, sizeof(script), "echo $$ > %s/orphan; exec sleep 30", dir);
	runner = fork();
	assert_at_least(runner, 0);
	if (runner == 0) {
		struct proc p;

		make_proc(&p, "left", script);
		if (proc_start(&p, NULL))
			_exit(1);
		while (!read_pid("orphan"))
			;
		_exit(0);   /* no stop, no reap */
	}
	assert_int_equal(waitpid(runner, &status, 0), runner);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	orphan = read_pid("orphan");
	assert_greater(orphan, 0);
	assert_true(gone_within(orphan, 10));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(kill_and_restart),
		cmocka_unit_test(group_goes_with_the_leader),
		cmocka_unit_test(stop_with_grace),
		cmocka_unit_test(output_to_log),
		cmocka_unit_test(too_many_arguments),
		cmocka_unit_test(environment_and_path),
		cmocka_unit_test(children_die_with_the_parent),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
