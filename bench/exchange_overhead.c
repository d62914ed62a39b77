/*
 * exchange_overhead: the share of a learner's step time spent in
 * exchange_poll (target ≤ 0.01).
 *
 * The default job's model trains here with a sidecar thread doing what a
 * sidecar does at the fastest cadence (H = P): every step it publishes an
 * update of one fragment and posts a pull of another, and takes answers.
 * So each poll serves one pull (Δ = base − θ of a fragment) and applies
 * one update. Prints exchange_overhead=<ratio>, step_ms, poll_ms.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/exchange.h"
#include "common/jobspec.h"
#include "common/util.h"
#include "trainer/model.h"
#include "trainer/trainer.h"

#define STEPS 80
#define WARMUP 10   /* steps not counted: first touches, caches */

struct side {
	struct exchange *x;
	volatile int stop;
	volatile uint64_t step;   /* the learner's step, to pace with it */
	float *buf;
};

static void *sidecar_thread(void *arg)
{
	struct side *sd = arg;
	uint64_t seen = 0, round = 0, version = 100;
	int P = exchange_nfrags(sd->x);

	while (!sd->stop) {
		uint64_t s = sd->step;
		struct exchange_answer a;

		if (s == seen) {
			exchange_wait(sd->x, 0.001);
			continue;
		}
		seen = s;
		for (int p = 0; p < P; p++)
			exchange_take_answer(sd->x, p, &a, sd->buf);
		{
			int p = (int)(round % (uint64_t)P);
			float *d = exchange_inbox_begin(sd->x, p);

			for (size_t i = 0; i < exchange_frag_numel(sd->x, p); i++)
				d[i] = 0.01f * (float)(i % 100);
			exchange_inbox_commit(sd->x, p, ++version);
			exchange_post_pull(sd->x, (p + 1) % P, ++round);
		}
	}
	return NULL;
}

int main(void)
{
	struct job_spec js;
	struct trainer *t;
	struct frag_table ft;
	struct exchange *lx, *sx;
	struct side sd = { 0 };
	struct err e;
	pthread_t th;
	char dir[] = "/dev/shm/ddx-bench-XXXXXX", cmd[64];
	double poll = 0, step = 0;
	size_t maxn = 0;

	jobspec_defaults(&js);
	snprintf(js.data.path, sizeof(js.data.path), "/usr/share/games/fortunes");
	js.budget.tokens = 100000000;
	if (jobspec_validate(&js, &e) || !(t = trainer_new(&js, 0, 1, &e)) ||
	    model_frag_table(trainer_config(t), js.syncer.fragments, &ft, &e)) {
		fprintf(stderr, "exchange_overhead: %s\n", e.msg);
		return 1;
	}
	if (!mkdtemp(dir) ||
	    exchange_open(dir, EXCHANGE_SIDECAR, &ft, &sx, &e) ||
	    exchange_open(dir, EXCHANGE_LEARNER, &ft, &lx, &e)) {
		fprintf(stderr, "exchange_overhead: %s\n", e.msg);
		return 1;
	}
	for (int p = 0; p < ft.nfrags; p++) {
		float *d = exchange_inbox_begin(sx, p);

		frag_gather(&ft, p, trainer_params(t), d);
		exchange_inbox_commit(sx, p, 1);
		if (ft.frags[p].numel > maxn)
			maxn = ft.frags[p].numel;
	}
	if (!exchange_learner_start(lx, trainer_params(t))) {
		fprintf(stderr, "exchange_overhead: learner did not start\n");
		return 1;
	}
	sd.x = sx;
	sd.buf = malloc(maxn * sizeof(float));
	pthread_create(&th, NULL, sidecar_thread, &sd);
	for (int i = 0; i < STEPS; i++) {
		struct trainer_stats ts;
		struct exchange_step st = { 0 };
		struct exchange_poll_result res;
		double a, b;

		a = clock_mono();
		if (trainer_step(t, &ts, &e)) {
			fprintf(stderr, "exchange_overhead: %s\n", e.msg);
			return 1;
		}
		b = clock_mono();
		st.step = ts.step;
		st.tokens = ts.tokens;
		st.tokens_total = ts.tokens_total;
		st.loss = ts.loss;
		st.step_time = ts.seconds;
		exchange_poll(lx, trainer_params(t), &st, &res);
		if (i >= WARMUP) {
			poll += clock_mono() - b;
			step += clock_mono() - a;
		}
		sd.step = ts.step;
		/* let the sidecar publish before the next step, as it would */
		while (sd.step && i + 1 < STEPS && !exchange_wait(lx, 0.0005) &&
		       clock_mono() - b < 0.002)
			;
	}
	sd.stop = 1;
	pthread_join(th, NULL);
	printf("params=%zu fragments=%d\n", model_num_params(trainer_config(t)),
	       ft.nfrags);
	printf("step_ms=%.3f\npoll_ms=%.4f\n", step / (STEPS - WARMUP) * 1e3,
	       poll / (STEPS - WARMUP) * 1e3);
	printf("exchange_overhead=%.5f\n", poll / step);
	exchange_close(lx);
	exchange_close(sx);
	frag_table_release(&ft);
	trainer_free(t);
	free(sd.buf);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) ? 1 : 0;
}
