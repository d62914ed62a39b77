/*
 * bench_syncer: how fast the syncer merges, and how long a round takes.
 *
 *   syncer_memcpy_gbps              memcpy bandwidth in this run, 64 MiB buffers
 *   syncer_merge_vs_memcpy_m<M>     merge throughput over memcpy bandwidth for
 *                                   M answers of one 1M-parameter fragment:
 *                                   screening norms + RDA merge + Nesterov step,
 *                                   counted as M·4 MB of answers per merge
 *   syncer_merge_vs_memcpy          the smaller of the two (target ≥ 0.5)
 *   syncer_round_m16_latency_ms_p50/p90
 *                                   16 test learners on loopback, quorum 16:
 *                                   from the last answer sent to the update
 *                                   received by all 16 (115k-parameter
 *                                   fragments)
 *   syncer_round_m16_period_ms      wall time per round, heartbeat to update
 *   syncer_round_m200_*             the same with 200 learners and a small
 *                                   model (hundreds of learners, one syncer)
 */
#include <arpa/inet.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/jobspec.h"
#include "common/util.h"
#include "ddiloco/v1/syncer.pb-c.h"
#include "syncer/outer.h"
#include "trainer/model.h"

/* ---- merge against memcpy ------------------------------------------------ */

/*
 * Both sides work on data that does not fit in cache: memcpy copies a
 * 64 MiB buffer; a merge reads M answers of 4 MiB. The machine is shared,
 * so the two are measured in turns and the best of several turns counts.
 */
#define N (1u << 20)
#define NSEG 9
#define MC_BYTES (64u << 20)

struct merge_set {
	int M;
	struct outer_seg seg[NSEG];
	float **x, *theta, *mom, *out;
	double *w, *sq, *norm;
	int *verdict;
};

static void merge_set_init(struct merge_set *m, int M, struct rng *r)
{
	size_t off = 0;

	m->M = M;
	/* an embedding and eight equal tensors, like a model's fragment */
	for (int s = 0; s < NSEG; s++) {
		m->seg[s].offset = off;
		m->seg[s].numel = s == NSEG - 1 ? N - off : N / NSEG;
		m->seg[s].is_embedding = s == 0;
		off += m->seg[s].numel;
	}
	m->x = malloc((size_t)M * sizeof(*m->x));
	m->theta = malloc(N * 4);
	m->mom = malloc(N * 4);
	m->out = malloc(N * 4);
	m->w = malloc((size_t)M * sizeof(double));
	m->sq = malloc((size_t)M * NSEG * sizeof(double));
	m->norm = malloc((size_t)M * sizeof(double));
	m->verdict = malloc((size_t)M * sizeof(int));
	for (int i = 0; i < M; i++) {
		m->x[i] = malloc(N * 4);
		for (size_t j = 0; j < N; j++)
			m->x[i][j] = (float)rng_normal(r) * 1e-3f;
		m->w[i] = 1000.0 + i;
	}
	for (size_t j = 0; j < N; j++) {
		m->theta[j] = (float)rng_normal(r);
		m->mom[j] = 0;
		m->out[j] = 0;
	}
}

static void merge_set_release(struct merge_set *m)
{
	for (int i = 0; i < m->M; i++)
		free(m->x[i]);
	free(m->x);
	free(m->theta);
	free(m->mom);
	free(m->out);
	free(m->w);
	free(m->sq);
	free(m->norm);
	free(m->verdict);
}

/* One merge as the syncer does it; returns answer bytes per second. */
static double merge_once(struct merge_set *m)
{
	double t = clock_mono();

	for (int i = 0; i < m->M; i++) {
		double ss = 0;

		outer_seg_sqnorms(m->x[i], m->seg, NSEG, m->sq + (size_t)i * NSEG);
		for (int s = 0; s < NSEG; s++)
			ss += m->sq[(size_t)i * NSEG + s];
		m->norm[i] = sqrt(ss);
	}
	outer_screen(m->norm, m->M, 10.0, m->verdict);
	outer_merge(OUTER_RDA, (const float *const *)m->x, m->w, m->sq, m->M,
		    m->seg, NSEG, m->out);
	outer_step(m->theta, m->mom, m->out, N, 0.7, 0.9, 1);
	t = clock_mono() - t;
	return (double)m->M * N * 4 / t;
}

static double memcpy_once(char *dst, const char *src)
{
	double t = clock_mono();

	memcpy(dst, src, MC_BYTES);
	__asm__ volatile("" ::: "memory");
	return MC_BYTES / (clock_mono() - t);
}

/* ---- round latency with 16 learners ------------------------------------- */

#define ROUNDS 30   /* at most */

struct learner_arg {
	int id, port, rounds;
	struct frag_table *ft;
	double t_ans[ROUNDS + 1], t_upd[ROUNDS + 1], t_hb[ROUNDS + 1];
	int ok;
};

static gpr_timespec in(double s)
{
	return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
			    gpr_time_from_millis((int64_t)(s * 1000), GPR_TIMESPAN));
}

struct cli {
	grpc_channel *ch;
	grpc_completion_queue *cq;
	grpc_call *call;
	grpc_metadata_array md, tr;
	grpc_status_code code;
	grpc_slice details;
	int got_md, tag;
};

static int cli_send(struct cli *c, Ddiloco__V1__LearnerMessage *m)
{
	size_t len = ddiloco__v1__learner_message__get_packed_size(m);
	grpc_slice sl = grpc_slice_malloc(len);
	grpc_byte_buffer *bb;
	grpc_op op;
	grpc_event ev;

	ddiloco__v1__learner_message__pack(m, GRPC_SLICE_START_PTR(sl));
	bb = grpc_raw_byte_buffer_create(&sl, 1);
	grpc_slice_unref(sl);
	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_SEND_MESSAGE;
	op.data.send_message.send_message = bb;
	grpc_call_start_batch(c->call, &op, 1, &c->tag, NULL);
	ev = grpc_completion_queue_pluck(c->cq, &c->tag, in(30), NULL);
	grpc_byte_buffer_destroy(bb);
	return ev.type == GRPC_OP_COMPLETE && ev.success ? 0 : -1;
}

static Ddiloco__V1__SyncerMessage *cli_recv(struct cli *c)
{
	grpc_byte_buffer *bb = NULL;
	grpc_byte_buffer_reader r;
	grpc_op ops[2];
	grpc_event ev;
	grpc_slice sl;
	int n = 0;
	Ddiloco__V1__SyncerMessage *m;

	memset(ops, 0, sizeof(ops));
	if (!c->got_md) {
		ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
		ops[n++].data.recv_initial_metadata.recv_initial_metadata = &c->md;
		c->got_md = 1;
	}
	ops[n].op = GRPC_OP_RECV_MESSAGE;
	ops[n++].data.recv_message.recv_message = &bb;
	grpc_call_start_batch(c->call, ops, (size_t)n, &c->tag, NULL);
	ev = grpc_completion_queue_pluck(c->cq, &c->tag, in(60), NULL);
	if (ev.type != GRPC_OP_COMPLETE || !ev.success || !bb)
		return NULL;
	grpc_byte_buffer_reader_init(&r, bb);
	sl = grpc_byte_buffer_reader_readall(&r);
	grpc_byte_buffer_reader_destroy(&r);
	grpc_byte_buffer_destroy(bb);
	m = ddiloco__v1__syncer_message__unpack(NULL, GRPC_SLICE_LENGTH(sl),
						GRPC_SLICE_START_PTR(sl));
	grpc_slice_unref(sl);
	return m;
}

static void *learner_main(void *arg)
{
	struct learner_arg *a = arg;
	struct cli c;
	char target[64];
	grpc_channel_credentials *cred = grpc_insecure_credentials_create();
	grpc_op op;
	int P = a->ft->nfrags, tag_st;
	uint64_t sizes[64];
	float *delta;
	size_t maxn = 0;
	Ddiloco__V1__LearnerMessage lm = DDILOCO__V1__LEARNER_MESSAGE__INIT;
	Ddiloco__V1__Hello h = DDILOCO__V1__HELLO__INIT;
	Ddiloco__V1__SyncerMessage *m;

	memset(&c, 0, sizeof(c));
	snprintf(target, sizeof(target), "127.0.0.1:%d", a->port);
	c.ch = grpc_channel_create(target, cred, NULL);
	grpc_channel_credentials_release(cred);
	c.cq = grpc_completion_queue_create_for_pluck(NULL);
	c.call = grpc_channel_create_call(c.ch, NULL, GRPC_PROPAGATE_DEFAULTS, c.cq,
					  grpc_slice_from_static_string("/ddiloco.v1.Syncer/Train"),
					  NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
	grpc_metadata_array_init(&c.md);
	grpc_metadata_array_init(&c.tr);
	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_SEND_INITIAL_METADATA;
	grpc_call_start_batch(c.call, &op, 1, &c.tag, NULL);
	grpc_completion_queue_pluck(c.cq, &c.tag, in(30), NULL);
	for (int p = 0; p < P; p++) {
		sizes[p] = a->ft->frags[p].numel;
		if (sizes[p] > maxn)
			maxn = sizes[p];
	}
	delta = malloc(maxn * 4);
	for (size_t i = 0; i < maxn; i++)
		delta[i] = 1e-4f * (float)((int)(i % 5) - 2) * (float)(a->id + 1);
	h.learner_id = (uint32_t)a->id;
	h.fingerprint = a->ft->fingerprint;
	h.fragments = (uint32_t)P;
	h.n_fragment_sizes = (size_t)P;
	h.fragment_sizes = sizes;
	h.job = (char *)"benchsync";
	lm.kind_case = DDILOCO__V1__LEARNER_MESSAGE__KIND_HELLO;
	lm.hello = &h;
	if (cli_send(&c, &lm))
		goto out;
	for (int k = 0; k < 1 + P; k++) {   /* welcome + join updates */
		if (!(m = cli_recv(&c)))
			goto out;
		ddiloco__v1__syncer_message__free_unpacked(m, NULL);
	}
	for (int s = 1; s <= a->rounds; s++) {
		Ddiloco__V1__Heartbeat hb = DDILOCO__V1__HEARTBEAT__INIT;
		Ddiloco__V1__Answer an = DDILOCO__V1__ANSWER__INIT;
		uint64_t round = 0;
		int frag = 0;

		hb.step = (uint64_t)s;
		hb.tokens = (uint64_t)s * 512;
		hb.step_time = 0.01;
		lm.kind_case = DDILOCO__V1__LEARNER_MESSAGE__KIND_HEARTBEAT;
		lm.heartbeat = &hb;
		a->t_hb[s] = clock_mono();
		if (cli_send(&c, &lm))
			goto out;
		for (;;) {
			if (!(m = cli_recv(&c)))
				goto out;
			if (m->kind_case == DDILOCO__V1__SYNCER_MESSAGE__KIND_PULL) {
				round = m->pull->round;
				frag = (int)m->pull->fragment;
				ddiloco__v1__syncer_message__free_unpacked(m, NULL);
				break;
			}
			ddiloco__v1__syncer_message__free_unpacked(m, NULL);
		}
		an.fragment = (uint32_t)frag;
		an.round = round;
		an.steps = 1;
		an.tokens = 512;
		an.step = (uint64_t)s;
		an.payload.data = (uint8_t *)delta;
		an.payload.len = 4 * sizes[frag];
		lm.kind_case = DDILOCO__V1__LEARNER_MESSAGE__KIND_ANSWER;
		lm.answer = &an;
		a->t_ans[s] = clock_mono();
		if (cli_send(&c, &lm))
			goto out;
		for (;;) {
			if (!(m = cli_recv(&c)))
				goto out;
			if (m->kind_case == DDILOCO__V1__SYNCER_MESSAGE__KIND_UPDATE &&
			    m->update->round == round) {
				ddiloco__v1__syncer_message__free_unpacked(m, NULL);
				break;
			}
			ddiloco__v1__syncer_message__free_unpacked(m, NULL);
		}
		a->t_upd[s] = clock_mono();
	}
	a->ok = 1;
out:
	grpc_call_cancel(c.call, NULL);
	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
	op.data.recv_status_on_client.trailing_metadata = &c.tr;
	op.data.recv_status_on_client.status = &c.code;
	op.data.recv_status_on_client.status_details = &c.details;
	grpc_call_start_batch(c.call, &op, 1, &tag_st, NULL);
	grpc_completion_queue_pluck(c.cq, &tag_st, in(10), NULL);
	grpc_slice_unref(c.details);
	grpc_metadata_array_destroy(&c.md);
	grpc_metadata_array_destroy(&c.tr);
	grpc_call_unref(c.call);
	grpc_channel_destroy(c.ch);
	grpc_completion_queue_shutdown(c.cq);
	while (grpc_completion_queue_pluck(c.cq, NULL, in(1), NULL).type ==
	       GRPC_OP_COMPLETE)
		;
	grpc_completion_queue_destroy(c.cq);
	free(delta);
	return NULL;
}

static int free_port(void)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    getsockname(fd, (struct sockaddr *)&sa, &len))
		port = -1;
	else
		port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static int round_latency(int L, int channels, int rounds)
{
	const char *build = getenv("BUILD") ? getenv("BUILD") : "build";
	char dir[] = "/tmp/ddiloco-bench-XXXXXX", job[128], bin[256], lis[64];
	char http[64], ck[128], cmd[160];
	struct learner_arg *args = calloc((size_t)L, sizeof(*args));
	pthread_t *th = calloc((size_t)L, sizeof(*th));
	struct job_spec js;
	struct model_config cfg;
	struct frag_table ft;
	double lat[ROUNDS], t0;
	int port = free_port(), hport = free_port(), ok = 1;
	pid_t pid;
	FILE *f;

	if (!mkdtemp(dir) || !args || !th)
		return -1;
	snprintf(job, sizeof(job), "%s/job.yaml", dir);
	snprintf(ck, sizeof(ck), "%s/ckpt", dir);
	f = fopen(job, "w");
	fprintf(f, "apiVersion: ddiloco.io/v1alpha1\nkind: DecoupledTrainingJob\n"
		"metadata:\n  name: benchsync\nspec:\n  learners:\n    replicas: %d\n"
		"  model:\n    vocabSize: 256\n    context: 64\n    layers: 2\n"
		"    heads: 4\n    channels: %d\n"
		"  data:\n    path: %s/job.yaml\n"
		"  syncer:\n    minQuorum: %d\n    fragments: 4\n    evalEvery: 0\n"
		"    checkpointEvery: 0\n", L, channels, dir, L);
	fclose(f);
	jobspec_load(job, &js, NULL);
	model_config_from_job(&js.model, &cfg, NULL);
	model_frag_table(&cfg, 4, &ft, NULL);
	snprintf(bin, sizeof(bin), "%s/ddiloco", build);
	snprintf(lis, sizeof(lis), "127.0.0.1:%d", port);
	snprintf(http, sizeof(http), "127.0.0.1:%d", hport);
	pid = fork();
	if (pid == 0) {
		if (!freopen("/dev/null", "w", stderr))
			_exit(127);
		execl(bin, "ddiloco", "syncer", "--job", job, "--listen", lis,
		      "--http", http, "--checkpoint-dir", ck, (char *)NULL);
		_exit(127);
	}
	sleep_seconds(1.0);
	t0 = clock_mono();
	for (int i = 0; i < L; i++) {
		args[i].id = i;
		args[i].port = port;
		args[i].ft = &ft;
		args[i].rounds = rounds;
		pthread_create(&th[i], NULL, learner_main, &args[i]);
	}
	for (int i = 0; i < L; i++) {
		pthread_join(th[i], NULL);
		ok &= args[i].ok;
	}
	t0 = clock_mono() - t0;
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd))
		fprintf(stderr, "bench_syncer: cannot remove %s\n", dir);
	if (!ok) {
		fprintf(stderr, "bench_syncer: a test learner failed\n");
		free(args);
		free(th);
		frag_table_release(&ft);
		return -1;
	}
	double period = 0;
	for (int s = 1; s <= rounds; s++) {
		double last_ans = 0, last_upd = 0, first_hb = 1e300;

		for (int i = 0; i < L; i++) {
			if (args[i].t_ans[s] > last_ans)
				last_ans = args[i].t_ans[s];
			if (args[i].t_upd[s] > last_upd)
				last_upd = args[i].t_upd[s];
			if (args[i].t_hb[s] < first_hb)
				first_hb = args[i].t_hb[s];
		}
		lat[s - 1] = last_upd - last_ans;
		period += last_upd - first_hb;
	}
	qsort(lat, (size_t)rounds, sizeof(double), cmp_d);
	printf("syncer_round_m%d_fragment_params=%zu\n", L, ft.frags[0].numel);
	printf("syncer_round_m%d_latency_ms_p50=%.2f\n", L, 1e3 * lat[rounds / 2]);
	printf("syncer_round_m%d_latency_ms_p90=%.2f\n", L, 1e3 * lat[rounds * 9 / 10]);
	printf("syncer_round_m%d_period_ms=%.2f\n", L, 1e3 * period / rounds);
	free(args);
	free(th);
	frag_table_release(&ft);
	return 0;
}

int main(void)
{
	char *src = malloc(MC_BYTES), *dst = malloc(MC_BYTES);
	struct merge_set m4, m16;
	double mc = 0, b4 = 0, b16 = 0, r4, r16;
	struct rng r;

	memset(src, 1, MC_BYTES);
	memset(dst, 2, MC_BYTES);
	rng_seed(&r, 7);
	merge_set_init(&m4, 4, &r);
	merge_set_init(&m16, 16, &r);
	for (int rep = 0; rep < 9; rep++) {
		mc = fmax(mc, memcpy_once(dst, src));
		b4 = fmax(b4, merge_once(&m4));
		b16 = fmax(b16, merge_once(&m16));
	}
	r4 = b4 / mc;
	r16 = b16 / mc;
	printf("syncer_memcpy_gbps=%.2f\n", mc / 1e9);
	printf("syncer_merge_gbps_m4=%.2f\n", b4 / 1e9);
	printf("syncer_merge_gbps_m16=%.2f\n", b16 / 1e9);
	printf("syncer_merge_vs_memcpy_m4=%.3f\n", r4);
	printf("syncer_merge_vs_memcpy_m16=%.3f\n", r16);
	printf("syncer_merge_vs_memcpy=%.3f\n", r4 < r16 ? r4 : r16);
	merge_set_release(&m4);
	merge_set_release(&m16);
	free(src);
	free(dst);
	grpc_init();
	signal(SIGPIPE, SIG_IGN);
	if (round_latency(16, 128, 30))
		printf("syncer_round_m16=failed\n");
	/* hundreds of learners on one syncer, with a small model */
	if (round_latency(200, 32, 10))
		printf("syncer_round_m200=failed\n");
	grpc_shutdown();
	return 0;
}
