/*
 * The runner's supervision with stand-in parts: this same test binary,
 * started as `syncer`, `learner` or `sidecar`, plays a part without any
 * training (the real parts are tested end to end in tests/integration).
 *
 *   syncer   serves /status on --http: round and tokens grow with time,
 *            done after FAKE_SECONDS (or DDILOCO_FAKE_SECONDS) of run time (kept across restarts in
 *            --checkpoint-dir), then touches DDILOCO_FAKE_DONE and exits 0
 *   learner, sidecar
 *            append "start" to their log, wait for DDILOCO_FAKE_DONE and
 *            exit 0; with DDILOCO_FAKE_CRASH=learner the learner exits 1
 *            (the part named, with DDILOCO_FAKE_EXIT=N: says a version
 *            mismatch and exits N)
 *
 * What is asserted: the job ends done; chaos kills are executed and every
 * killed pair or syncer is restarted; a crash loop ends the run with the
 * part's name; an interrupt stops everything; no child and no exchange
 * folder is left behind; the report is written.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/httpd.h"
#include "common/util.h"
#include "runner/run.h"
#include "tests/unit/testlib.h"

#define FAKE_SECONDS 3.0

static char self[4096];
static char tmp[64];

/* ---- the stand-in parts ---- */

struct fake {
	double start;           /* wall clock of the first start */
	double seconds;         /* done after this long */
	int restarted;
};

static int fake_status(void *ctx, const char *path, struct buf *body,
		       const char **ct)
{
	struct fake *f = ctx;
	double el = clock_wall() - f->start;

	if (strcmp(path, "/status"))
		return 404;
	*ct = "application/json";
	buf_printf(body, "{\"job\":\"t\",\"round\":%d,\"done\":%s,\"tokens\":%d,"
		   "\"tokens_merged\":%d,\"eval_loss\":%g,\"eval_history\":"
		   "[{\"round\":1,\"tokens\":10,\"loss\":5.5,\"time\":0.1},"
		   "{\"round\":%d,\"tokens\":%d,\"loss\":%g,\"time\":%g}],"
		   "\"learners_connected\":2,\"learners_total\":2,"
		   "\"answers\":{\"merged\":7,\"late\":1,\"rejected\":0,\"empty\":2},"
		   "\"bytes_in\":1000,\"bytes_out\":3000,\"uptime\":0.995,"
		   "\"goodput\":0.9,\"elapsed\":%g}",
		   (int)(el * 10), el >= f->seconds ? "true" : "false",
		   (int)(el * 1000), (int)(el * 900), 5.0 - el / 4, (int)(el * 10),
		   (int)(el * 1000), 5.0 - el / 4, el, el);
	return 200;
}

static const char *arg(int argc, char **argv, const char *name)
{
	for (int i = 1; i + 1 < argc; i++)
		if (!strcmp(argv[i], name))
			return argv[i + 1];
	return NULL;
}

static int fake_syncer(int argc, char **argv)
{
	const char *http = arg(argc, argv, "--http"), *ck = arg(argc, argv, "--checkpoint-dir");
	const char *done = getenv("DDILOCO_FAKE_DONE");
	char path[4200], host[64];
	struct fake f = { clock_wall(), FAKE_SECONDS, 0 };
	struct httpd *h;
	FILE *fp;

	if (!http || !ck || !done || !strchr(http, ':'))
		return 2;
	if (getenv("DDILOCO_FAKE_SECONDS"))
		f.seconds = atof(getenv("DDILOCO_FAKE_SECONDS"));
	snprintf(path, sizeof(path), "%s/start", ck);
	fp = fopen(path, "r");
	if (fp) {
		f.restarted = fscanf(fp, "%lf", &f.start) == 1;
		fclose(fp);
	} else if ((fp = fopen(path, "w"))) {
		fprintf(fp, "%.6f\n", f.start);
		fclose(fp);
	}
	snprintf(host, sizeof(host), "%.*s", (int)(strchr(http, ':') - http), http);
	h = httpd_start(host, atoi(strchr(http, ':') + 1), fake_status, &f, NULL);
	if (!h)
		return 3;
	printf("start%s\n", f.restarted ? " (restarted)" : "");
	fflush(stdout);
	while (clock_wall() - f.start < f.seconds + 0.6)
		sleep_seconds(0.05);
	fp = fopen(done, "w");
	if (fp)
		fclose(fp);
	sleep_seconds(0.3);
	httpd_stop(h);
	return 0;
}

static int fake_part(const char *role, int argc, char **argv)
{
	const char *done = getenv("DDILOCO_FAKE_DONE"), *crash = getenv("DDILOCO_FAKE_CRASH");
	const char *x = arg(argc, argv, "--exchange");
	struct stat st;

	if (!done || !x || stat(x, &st) || !S_ISDIR(st.st_mode))
		return 2;   /* the runner must have made the exchange folder */
	printf("start\n");
	fflush(stdout);
	if (crash && !strcmp(crash, role) && getenv("DDILOCO_FAKE_EXIT")) {
		/* as `ddiloco sidecar` says a mismatch (docs/abi.md, Versions) */
		printf("learner library 0.3.0 (ABI 2, exchange 3) and sidecar "
		       "0.4.0 (ABI 3, exchange 4) do not match\n");
		fflush(stdout);
		return atoi(getenv("DDILOCO_FAKE_EXIT"));
	}
	if (crash && !strcmp(crash, role))
		return 1;
	while (access(done, F_OK))
		sleep_seconds(0.05);
	return 0;
}

/* ---- helpers ---- */

static void write_job(const char *path, const char *chaos)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fprintf(f, "apiVersion: ddiloco.io/v1alpha1\nkind: DecoupledTrainingJob\n"
		   "metadata: {name: fake}\nspec:\n  learners: {replicas: 2}\n"
		   "  data: {path: /dev/null}\n  syncer: {minQuorum: 1}\n%s", chaos);
	fclose(f);
}

/* Counts live processes whose command line mentions s (our job file). */
static int procs_with(const char *s)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	int n = 0;

	assert_non_null(d);
	while ((de = readdir(d))) {
		char path[300], buf[8192], st[600];
		size_t len;
		FILE *f;

		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		len = fread(st, 1, sizeof(st) - 1, f);
		fclose(f);
		st[len] = 0;
		if (strstr(st, ") Z "))
			continue;   /* a zombie is already dead */
		snprintf(path, sizeof(path), "/proc/%s/cmdline", de->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		len = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		for (size_t i = 0; i < len; i++)
			if (!buf[i])
				buf[i] = ' ';
		buf[len] = 0;
		n += strstr(buf, s) != NULL;
	}
	closedir(d);
	return n;
}

static int shm_leftovers(void)
{
	char prefix[64];
	DIR *d = opendir("/dev/shm");
	struct dirent *de;
	int n = 0;

	if (!d)
		d = opendir("/tmp");
	assert_non_null(d);
	snprintf(prefix, sizeof(prefix), "ddiloco-fake-%d", (int)getpid());
	while ((de = readdir(d)))
		n += !strcmp(de->d_name, prefix);
	closedir(d);
	return n;
}

static int count_in_file(const char *path, const char *needle)
{
	char *text;
	size_t len;
	int n = 0;

	if (file_read_all(path, 1 << 20, (void **)&text, &len, NULL))
		return -1;
	for (char *p = text; (p = strstr(p, needle)); p++)
		n++;
	free(text);
	return n;
}

struct result {
	int rc;
	struct run_record r;
	struct err e;
	char dir[4200], job[4200];
};

static const volatile sig_atomic_t never;   /* run_job's stop, never set */

static void run(const char *name, const char *chaos, struct result *res)
{
	struct job_spec js;
	struct run_opts o = { 0 };
	char done[4300];

	snprintf(res->dir, sizeof(res->dir), "%s/%s", tmp, name);
	snprintf(res->job, sizeof(res->job), "%s/%s.yaml", tmp, name);
	snprintf(done, sizeof(done), "%s/%s.done", tmp, name);
	write_job(res->job, chaos);
	assert_int_equal(jobspec_load(res->job, &js, &res->e), 0);
	setenv("DDILOCO_FAKE_DONE", done, 1);
	o.job_file = res->job;
	o.exe = self;
	o.quiet = 1;
	o.timeout = 60;
	res->rc = run_job(&js, &o, res->dir, &res->r, &never, &res->e);
	assert_int_equal(procs_with(res->job), 0);
	assert_int_equal(shm_leftovers(), 0);
}

static int sum(const int *a, int n)
{
	int s = 0;

	for (int i = 0; i < n; i++)
		s += a[i];
	return s;
}

/* ---- tests ---- */

static void runs_to_done_and_reports(void **state)
{
	struct result res;
	char path[4400];
	json_t *j;

	(void)state;
	run("plain", "", &res);
	assert_int_equal(res.rc, 0);
	assert_int_equal(res.r.success, 1);
	assert_string_equal(res.r.outcome, "done");
	assert_int_equal(res.r.final.done, 1);
	assert_at_least(res.r.final.round, 10 * FAKE_SECONDS);
	assert_int_equal(res.r.nkills, 0);
	assert_int_equal(sum(res.r.restarts, 2), 0);
	assert_int_equal(res.r.syncer_restarts, 0);
	assert_at_least(res.r.nsamples, 3);
	assert_int_equal(res.r.samples[res.r.nsamples / 2].up, 2);

	assert_int_equal(run_report_write(&res.r, &res.e), 0);
	snprintf(path, sizeof(path), "%s/report.json", res.dir);
	j = json_load_file(path, 0, NULL);
	assert_non_null(j);
	assert_true(json_is_true(json_object_get(j, "success")));
	assert_exactly(json_real_value(json_object_get(j, "uptime")), 0.995);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "bytes"),
							    "received")), 1000);
	assert_int_equal(json_array_size(json_object_get(j, "eval_history")), 2);
	assert_int_equal(json_array_size(json_object_get(j, "per_learner")), 2);
	json_decref(j);
	snprintf(path, sizeof(path), "%s/report.html", res.dir);
	assert_int_equal(count_in_file(path, "<svg"), 3);
	snprintf(path, sizeof(path), "%s/learner-1.log", res.dir);
	assert_int_equal(count_in_file(path, "start"), 1);
	run_record_release(&res.r);
}

static void chaos_kills_and_restarts_learners(void **state)
{
	struct result res;
	char path[4400];
	int starts = 0;

	(void)state;
	run("chaos", "  chaos: {enabled: true, schedule: interval, intervalSeconds: 0.7,"
	    " startAfterSeconds: 0, recoverySeconds: 0.2, maxDown: 1, seed: 3}\n", &res);
	assert_int_equal(res.rc, 0);
	assert_at_least(res.r.nkills, 3);
	for (size_t i = 0; i < res.r.nkills; i++)
		assert_int_equal(res.r.kills[i].k.kind, CHAOS_LEARNER);
	/* every kill but possibly the last (done stops restarts) was restarted */
	assert_at_least(sum(res.r.restarts, 2), (int)res.r.nkills - 1);
	assert_int_equal(sum(res.r.crashes, 2), 0);
	/*
	 * Each restart started both again; a start killed before it could
	 * print is the only way to miss a line in the logs.
	 */
	for (int i = 0; i < 2; i++) {
		int kills = 0;

		for (size_t k = 0; k < res.r.nkills; k++)
			kills += res.r.kills[k].k.index == i;
		snprintf(path, sizeof(path), "%s/learner-%d.log", res.dir, i);
		starts = count_in_file(path, "start");
		assert_at_most(starts, 1 + res.r.restarts[i]);
		assert_at_least(starts, 1 + res.r.restarts[i] - kills);
		snprintf(path, sizeof(path), "%s/sidecar-%d.log", res.dir, i);
		starts = count_in_file(path, "start");
		assert_at_most(starts, 1 + res.r.restarts[i]);
		assert_at_least(starts, 1 + res.r.restarts[i] - kills);
	}
	/* maxDown 1: until done (then the parts exit), never two slots down */
	assert_true(isfinite(res.r.done_at));
	for (size_t i = 0; i < res.r.nsamples; i++)
		if (res.r.samples[i].t < res.r.done_at)
			assert_at_least(res.r.samples[i].up, 1);
	run_record_release(&res.r);
}

static void syncer_killed_and_restarted(void **state)
{
	struct result res;
	char path[4400];

	(void)state;
	run("syncer", "  chaos: {enabled: true, schedule: interval, intervalSeconds: 1.5,"
	    " startAfterSeconds: 0, recoverySeconds: 0.2, targets: [syncer], seed: 3}\n", &res);
	assert_int_equal(res.rc, 0);
	assert_at_least(res.r.nkills, 1);
	assert_int_equal(res.r.kills[0].k.kind, CHAOS_SYNCER);
	assert_at_least(res.r.syncer_restarts, 1);
	assert_int_equal(res.r.syncer_crashes, 0);
	snprintf(path, sizeof(path), "%s/syncer.log", res.dir);
	/* the restarted syncer found its state (a restart killed early may not print) */
	assert_at_most(count_in_file(path, "start (restarted)"), res.r.syncer_restarts);
	assert_at_least(count_in_file(path, "start (restarted)"), 1);
	assert_int_equal(sum(res.r.restarts, 2), 0);
	run_record_release(&res.r);
}

static void crash_loop_ends_the_run(void **state)
{
	struct result res;

	(void)state;
	setenv("DDILOCO_FAKE_CRASH", "learner", 1);
	setenv("DDILOCO_FAKE_SECONDS", "30", 1);
	run("crash", "", &res);
	unsetenv("DDILOCO_FAKE_CRASH");
	unsetenv("DDILOCO_FAKE_SECONDS");
	assert_int_equal(res.rc, -1);
	assert_int_equal(res.r.success, 0);
	assert_non_null(strstr(res.e.msg, "keeps failing (exit 1): start ["));
	if (!strstr(res.e.msg, "learner-0") && !strstr(res.e.msg, "learner-1"))
		fail_msg("names neither learner: %s", res.e.msg);
	assert_at_least(sum(res.r.crashes, 2), 5);
	run_record_release(&res.r);
}

/* A sidecar that refused its learner's versions (exit 78) ends the run
 * at its first exit, with its message: no restart. */
static void a_version_mismatch_ends_the_run_at_once(void **state)
{
	struct result res;

	(void)state;
	setenv("DDILOCO_FAKE_CRASH", "sidecar", 1);
	setenv("DDILOCO_FAKE_EXIT", "78", 1);
	setenv("DDILOCO_FAKE_SECONDS", "30", 1);
	run("mismatch", "", &res);
	unsetenv("DDILOCO_FAKE_CRASH");
	unsetenv("DDILOCO_FAKE_EXIT");
	unsetenv("DDILOCO_FAKE_SECONDS");
	assert_int_equal(res.rc, -1);
	assert_int_equal(res.r.success, 0);
	assert_non_null(strstr(res.e.msg, "refused the other side's versions "
			       "(exit 78): learner library 0.3.0 (ABI 2, exchange "
			       "3) and sidecar 0.4.0 (ABI 3, exchange 4) do not "
			       "match ["));
	if (!strstr(res.e.msg, "sidecar-0") && !strstr(res.e.msg, "sidecar-1"))
		fail_msg("names neither sidecar: %s", res.e.msg);
	assert_int_equal(sum(res.r.crashes, 2), 1);
	run_record_release(&res.r);
}

static void *interrupt_later(void *arg)
{
	volatile sig_atomic_t *stop = arg;

	sleep_seconds(1.5);
	*stop = 2;
	return NULL;
}

static void interrupt_stops_everything(void **state)
{
	struct job_spec js;
	struct run_opts o = { 0 };
	struct run_record r;
	struct err e;
	char job[4200], dir[4200], done[4200];
	pthread_t th;
	double t0;
	volatile sig_atomic_t stop = 0;
	int rc;

	(void)state;
	snprintf(job, sizeof(job), "%s/int.yaml", tmp);
	snprintf(dir, sizeof(dir), "%s/int", tmp);
	snprintf(done, sizeof(done), "%s/int.done", tmp);
	write_job(job, "");
	assert_int_equal(jobspec_load(job, &js, &e), 0);
	setenv("DDILOCO_FAKE_DONE", done, 1);
	o.job_file = job;
	o.exe = self;
	o.quiet = 1;
	t0 = clock_mono();
	pthread_create(&th, NULL, interrupt_later, (void *)&stop);
	rc = run_job(&js, &o, dir, &r, &stop, &e);
	pthread_join(th, NULL);
	assert_int_equal(rc, -1);
	assert_string_equal(r.outcome, "interrupted");
	assert_less(clock_mono() - t0, FAKE_SECONDS);   /* it did not wait for done */
	assert_int_equal(r.final.done, 0);
	assert_int_equal(procs_with(job), 0);
	assert_int_equal(shm_leftovers(), 0);
	run_record_release(&r);
}

static int setup(void **state)
{
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	(void)state;
	if (n <= 0 || testlib_tmpdir(tmp, sizeof(tmp), "test_run"))
		return -1;
	self[n] = 0;
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	return testlib_rmtree(tmp);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(runs_to_done_and_reports),
		cmocka_unit_test(chaos_kills_and_restarts_learners),
		cmocka_unit_test(syncer_killed_and_restarted),
		cmocka_unit_test(crash_loop_ends_the_run),
		cmocka_unit_test(a_version_mismatch_ends_the_run_at_once),
		cmocka_unit_test(interrupt_stops_everything),
	};

	if (argc > 1 && !strcmp(argv[1], "syncer"))
		return fake_syncer(argc, argv);
	if (argc > 1 && (!strcmp(argv[1], "learner") || !strcmp(argv[1], "sidecar")))
		return fake_part(argv[1], argc, argv);
	return cmocka_run_group_tests(tests, setup, teardown);
}
