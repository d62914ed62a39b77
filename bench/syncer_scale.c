/*
 * syncer_scale: one real `ddiloco syncer` and M test learners on
 * loopback gRPC, at M = 16 and M = 1000 (or the first argument) with the
 * same fragments (the model's width CHANNELS: 64,512 floats each, 4
 * fragments), quorum M, to show what of a round grows with M
 * (docs/syncer.md, Merge: the streaming merge, and Figures). Answers are
 * f32; Updates int8 (spec.syncer.updateEncoding), a quarter of the
 * bytes to fan out.
 *
 *   syncer_scale_memcpy_gbps             memcpy of 64 MiB here, GB/s
 *   syncer_scale_fragment_params         floats per fragment (both runs)
 *   syncer_scale_clients_m<M>            client processes
 *   syncer_round_m<M>_latency_ms_p50/p90 the last answer of a round handed
 *                                        to gRPC → the first update of that
 *                                        round received
 *   syncer_round_m<M>_all_ms_p50         … → the update received by all M
 *                                        (the fan-out: M updates sent)
 *   syncer_round_m<M>_period_ms          wall time per round
 *   syncer_round_m<M>_mb                 payload bytes of a round: M f32
 *                                        answers in, M int8 updates out
 *   syncer_round_m<M>_memcpy_ms          … at syncer_scale_memcpy_gbps:
 *                                        one copy of every byte
 *   syncer_merge_m<M>_ms                 the syncer's own mean merge time
 *                                        (/metrics merge_seconds: merge,
 *                                        outer step, accounting)
 *   syncer_rss_mb_m<M>                   the syncer's peak RSS (VmHWM)
 *   syncer_rss_joined_mb_m<M>            its RSS when all M had joined
 *   syncer_round_latency_ratio_m1000_m16, syncer_rss_ratio_m1000_m16
 *
 * The learners are spread over client processes of at most
 * PER_PROCESS learners each (M = 16: one; M = 1000: eight; or the second
 * argument), forked before any of them starts gRPC: one process
 * answering the keepalive pings of 250 connections while it reads 1000
 * updates a round fell behind them on 2 cores, and the syncer closed its
 * connections (UNAVAILABLE) after round 1 in every run. In a process
 * they are state machines on one completion queue per thread (two
 * threads), four streams to a channel (the syncer allows no more on one
 * connection, syncer/stream.c), each channel on its own connection (a
 * local subchannel pool: channels with equal arguments would otherwise
 * share one), at most JOINING of them joining at a time in all. What
 * the parent reads (times, outcomes, the count welcomed) is in a shared
 * mapping.
 * A learner: Hello; then per step a Heartbeat, the answer to the oldest
 * Pull not answered (one step, a Δ of its own, from the version it last
 * received), and the Update of that round.
 */
#include <arpa/inet.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/benchlib.h"
#include "common/encoding.h"
#include "common/jobspec.h"
#include "common/util.h"
#include "ddiloco/v1/syncer.pb-c.h"
#include "trainer/model.h"

#define THREADS 2
#define PER_CHANNEL 4
#define MAXFRAG 16
#define JOINING 32      /* learners between Hello and Welcome, in all */
#define PER_PROCESS 128 /* learners a client process drives at most */
#define PULLQ 64

/* What a learner's client process tells the parent: in the shared
 * mapping. */
struct outcome {
	int done, failed, step, ended, code;
	char why[48], details[112];
};

struct lrn {
	int id, rounds, step;
	struct outcome *out;         /* in the shared mapping */
	grpc_call *call;
	grpc_byte_buffer *rbuf;
	grpc_metadata_array md;
	grpc_slice queued[4];        /* packed messages waiting to be sent */
	int have_queued, sending, done, failed, answered;
	int welcomed;                /* 1: Welcome read; 2: counted as joined */
	/* Pulls not answered yet, answered one a step (a learner answers at
	 * its step boundary) */
	uint64_t pull_round[PULLQ];
	uint32_t pull_frag[PULLQ];
	int npull;
	uint64_t version[MAXFRAG];
	double *t_ans, *t_upd;       /* per round, 1-based; shared mapping */
	char tag_recv, tag_send, tag_start, tag_status;   /* addresses: tags */
	grpc_metadata_array tr;
	grpc_status_code code;
	grpc_slice details;
	int ended;                   /* the status arrived */
	const char *why;             /* the first failure */
};

static void fail(struct lrn *l, const char *why)
{
	if (!l->failed)
		l->why = why;
	l->failed = 1;
}

struct run {
	int M, rounds, port;
	struct frag_table *ft;
	float *delta;                /* 7 rows of maxn: learner i's Δ is row i mod 7 */
	size_t maxn;
	struct lrn *l;
	int joining;                 /* JOINING shared by this process's threads */
	/* learners welcomed, in all processes (the shared mapping): when
	 * all are, the syncer's memory is taken */
	int *welcomed;
};

struct worker {
	struct run *r;
	int from, to;                /* learners [from, to) */
};

static gpr_timespec in(double s)
{
	return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
			    gpr_time_from_millis((int64_t)(s * 1000), GPR_TIMESPAN));
}

static void arm_recv(struct lrn *l, int first)
{
	grpc_op ops[2];
	int n = 0;

	memset(ops, 0, sizeof(ops));
	if (first) {
		ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
		ops[n++].data.recv_initial_metadata.recv_initial_metadata = &l->md;
	}
	ops[n].op = GRPC_OP_RECV_MESSAGE;
	ops[n++].data.recv_message.recv_message = &l->rbuf;
	if (grpc_call_start_batch(l->call, ops, (size_t)n, &l->tag_recv, NULL))
		fail(l, "recv batch refused");
}

/* Sends the queued message when no send is in flight. */
static void pump(struct lrn *l)
{
	grpc_byte_buffer *bb;
	grpc_op op;

	if (l->sending || !l->have_queued)
		return;
	bb = grpc_raw_byte_buffer_create(&l->queued[0], 1);
	grpc_slice_unref(l->queued[0]);
	memmove(l->queued, l->queued + 1, (size_t)--l->have_queued * sizeof(grpc_slice));
	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_SEND_MESSAGE;
	op.data.send_message.send_message = bb;
	l->sending = 1;
	if (grpc_call_start_batch(l->call, &op, 1, &l->tag_send, NULL))
		fail(l, "send batch refused");
	grpc_byte_buffer_destroy(bb);   /* the batch holds its own reference */
}

/* Queues m; at most four messages wait. */
static int queue(struct lrn *l, Ddiloco__V1__LearnerMessage *m)
{
	size_t len = ddiloco__v1__learner_message__get_packed_size(m);
	grpc_slice sl = grpc_slice_malloc(len);

	ddiloco__v1__learner_message__pack(m, GRPC_SLICE_START_PTR(sl));
	if (l->have_queued == 4) {
		grpc_slice_unref(sl);
		return -1;
	}
	l->queued[l->have_queued++] = sl;
	pump(l);
	return 0;
}

static void heartbeat(struct lrn *l)
{
	Ddiloco__V1__LearnerMessage lm = DDILOCO__V1__LEARNER_MESSAGE__INIT;
	Ddiloco__V1__Heartbeat hb = DDILOCO__V1__HEARTBEAT__INIT;

	hb.step = (uint64_t)l->step;
	hb.tokens = (uint64_t)l->step * 512;
	hb.step_time = 0.01;
	lm.kind_case = DDILOCO__V1__LEARNER_MESSAGE__KIND_HEARTBEAT;
	lm.heartbeat = &hb;
	if (queue(l, &lm))
		fail(l, "heartbeat while a message waits");
}

/* Answers the oldest Pull when this step has not answered one yet. */
static void answer(struct run *r, struct lrn *l)
{
	Ddiloco__V1__LearnerMessage lm = DDILOCO__V1__LEARNER_MESSAGE__INIT;
	Ddiloco__V1__Answer an = DDILOCO__V1__ANSWER__INIT;
	uint32_t frag = l->pull_frag[0];
	size_t n = r->ft->frags[frag].numel;

	if (!l->npull || l->step < 1 || l->answered >= l->step)
		return;
	an.fragment = frag;
	an.round = l->pull_round[0];
	l->npull--;
	memmove(l->pull_round, l->pull_round + 1, (size_t)l->npull * sizeof(uint64_t));
	memmove(l->pull_frag, l->pull_frag + 1, (size_t)l->npull * sizeof(uint32_t));
	an.steps = 1;
	an.tokens = 512;
	an.step = (uint64_t)l->step;
	an.base_version = l->version[frag];
	/* learner id's Δ: the shared one scaled within a factor 1.6, so the
	 * norm screens (docs/syncer.md, Merge) see honest answers */
	an.payload.data = (uint8_t *)(r->delta + (size_t)(l->id % 7) * r->maxn);
	an.payload.len = 4 * n;
	lm.kind_case = DDILOCO__V1__LEARNER_MESSAGE__KIND_ANSWER;
	lm.answer = &an;
	l->t_ans[l->step] = clock_mono();
	l->answered = l->step;
	if (queue(l, &lm))
		fail(l, "answer while a message waits");
}

static void on_message(struct run *r, struct lrn *l, Ddiloco__V1__SyncerMessage *m)
{
	switch (m->kind_case) {
	case DDILOCO__V1__SYNCER_MESSAGE__KIND_WELCOME:
		l->welcomed = 1;
		__atomic_add_fetch(r->welcomed, 1, __ATOMIC_RELAXED);
		l->step = 1;
		heartbeat(l);
		answer(r, l);
		break;
	case DDILOCO__V1__SYNCER_MESSAGE__KIND_PULL:
		if (m->pull->fragment >= (uint32_t)r->ft->nfrags || l->npull == PULLQ) {
			fail(l, "pull of an unknown fragment, or too many");
			break;
		}
		l->pull_round[l->npull] = m->pull->round;
		l->pull_frag[l->npull++] = m->pull->fragment;
		answer(r, l);
		break;
	case DDILOCO__V1__SYNCER_MESSAGE__KIND_UPDATE:
		if (m->update->fragment < MAXFRAG)
			l->version[m->update->fragment] = m->update->version;
		if (l->answered == l->step && l->step >= 1 &&
		    m->update->round > 0 && !l->t_upd[l->step]) {
			l->t_upd[l->step] = clock_mono();
			if (l->step == l->rounds) {
				l->done = 1;
				break;
			}
			l->step++;
			heartbeat(l);
			answer(r, l);
		}
		break;
	default:
		break;
	}
}

static void start(struct run *r, struct lrn *l, grpc_channel *ch,
		  grpc_completion_queue *cq)
{
	Ddiloco__V1__LearnerMessage lm = DDILOCO__V1__LEARNER_MESSAGE__INIT;
	Ddiloco__V1__Hello h = DDILOCO__V1__HELLO__INIT;
	uint64_t sizes[MAXFRAG];
	grpc_op op;

	l->call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
		grpc_slice_from_static_string("/ddiloco.v1.Syncer/Train"), NULL,
		gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
	grpc_metadata_array_init(&l->md);
	grpc_metadata_array_init(&l->tr);
	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
	op.data.recv_status_on_client.trailing_metadata = &l->tr;
	op.data.recv_status_on_client.status = &l->code;
	op.data.recv_status_on_client.status_details = &l->details;
	grpc_call_start_batch(l->call, &op, 1, &l->tag_status, NULL);
	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_SEND_INITIAL_METADATA;
	op.flags = GRPC_INITIAL_METADATA_WAIT_FOR_READY;   /* through connect backoff */
	grpc_call_start_batch(l->call, &op, 1, &l->tag_start, NULL);
	for (int p = 0; p < r->ft->nfrags; p++)
		sizes[p] = r->ft->frags[p].numel;
	h.learner_id = (uint32_t)l->id;
	h.fingerprint = r->ft->fingerprint;
	h.fragments = (uint32_t)r->ft->nfrags;
	h.n_fragment_sizes = (size_t)r->ft->nfrags;
	h.fragment_sizes = sizes;
	h.incarnation = 1;
	h.job = (char *)"benchscale";
	lm.kind_case = DDILOCO__V1__LEARNER_MESSAGE__KIND_HELLO;
	lm.hello = &h;
	queue(l, &lm);
	arm_recv(l, 1);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct run *r = w->r;
	grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
	int nch = (w->to - w->from + PER_CHANNEL - 1) / PER_CHANNEL, left;
	int next = w->from, joining = 0;
	grpc_channel **ch = calloc((size_t)nch, sizeof(*ch));
	grpc_arg a[] = {
		{ GRPC_ARG_INTEGER, (char *)GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL,
		  { .integer = 1 } },
		{ GRPC_ARG_INTEGER, (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
		  { .integer = 64 << 20 } },
	};
	grpc_channel_args ca = { 2, a };
	grpc_channel_credentials *cred = grpc_insecure_credentials_create();
	char target[64];
	double deadline = clock_mono() + 120 + 2.0 * r->rounds;

	snprintf(target, sizeof(target), "127.0.0.1:%d", r->port);
	for (int c = 0; c < nch; c++)
		ch[c] = grpc_channel_create(target, cred, &ca);
	grpc_channel_credentials_release(cred);
	left = w->to - w->from;
	while (left > 0 && clock_mono() < deadline) {
		/* at most JOINING learners between Hello and Welcome: a join
		 * costs the syncer every fragment sent, and a burst of a
		 * thousand connections overflows its accept queue */
		while (joining < r->joining && next < w->to) {
			start(r, &r->l[next], ch[(next - w->from) / PER_CHANNEL], cq);
			next++;
			joining++;
		}
		grpc_event ev = grpc_completion_queue_next(cq, in(0.05), NULL);
		struct lrn *l = NULL;
		char *tag = ev.tag;

		if (ev.type != GRPC_OP_COMPLETE)
			continue;
		/* the tags are fields of the learner's struct */
		if (tag >= (char *)(r->l + w->from) && tag < (char *)(r->l + w->to))
			l = r->l + (tag - (char *)r->l) / (ptrdiff_t)sizeof(*l);
		if (l && tag == &l->tag_status) {
			l->ended = 1;
			if (!l->done && !l->failed) {
				fail(l, "stream ended");
				left--;
			}
			continue;
		}
		if (!l || l->done || l->failed)
			continue;
		if (tag == &l->tag_send) {
			l->sending = 0;
			if (!ev.success)
				fail(l, "send failed");
			pump(l);
		} else if (tag == &l->tag_recv) {
			Ddiloco__V1__SyncerMessage *m = NULL;

			if (ev.success && l->rbuf) {
				grpc_byte_buffer_reader rd;
				grpc_slice sl;

				grpc_byte_buffer_reader_init(&rd, l->rbuf);
				sl = grpc_byte_buffer_reader_readall(&rd);
				grpc_byte_buffer_reader_destroy(&rd);
				grpc_byte_buffer_destroy(l->rbuf);
				l->rbuf = NULL;
				m = ddiloco__v1__syncer_message__unpack(NULL,
					GRPC_SLICE_LENGTH(sl), GRPC_SLICE_START_PTR(sl));
				grpc_slice_unref(sl);
			}
			if (!m) {
				fail(l, "stream ended");
			} else {
				on_message(r, l, m);
				ddiloco__v1__syncer_message__free_unpacked(m, NULL);
				if (!l->done)
					arm_recv(l, 0);
			}
		}
		if (l->welcomed == 1) {
			l->welcomed = 2;
			joining--;
		}
		if (l->done || l->failed)
			left--;
	}
	for (int i = w->from; i < w->to; i++) {   /* for the parent */
		struct lrn *l = &r->l[i];

		l->out->done = l->done;
		l->out->failed = l->failed;
		l->out->step = l->step;
		l->out->ended = l->ended;
		l->out->code = (int)l->code;
		snprintf(l->out->why, sizeof(l->out->why), "%s", l->why ? l->why : "");
		if (l->ended) {
			char *d = grpc_slice_to_c_string(l->details);

			snprintf(l->out->details, sizeof(l->out->details), "%s", d);
			gpr_free(d);
		}
	}
	for (int i = w->from; i < next; i++)
		grpc_call_cancel(r->l[i].call, NULL);
	/* drain what the cancels complete, then let go */
	while (grpc_completion_queue_next(cq, in(0.5), NULL).type == GRPC_OP_COMPLETE)
		;
	for (int i = w->from; i < next; i++) {
		struct lrn *l = &r->l[i];

		if (l->rbuf)
			grpc_byte_buffer_destroy(l->rbuf);
		for (int k = 0; k < l->have_queued; k++)
			grpc_slice_unref(l->queued[k]);
		grpc_metadata_array_destroy(&l->md);
		grpc_metadata_array_destroy(&l->tr);
		grpc_slice_unref(l->details);   /* empty unless the status came */
		grpc_call_unref(l->call);
	}
	for (int c = 0; c < nch; c++)
		grpc_channel_destroy(ch[c]);
	grpc_completion_queue_shutdown(cq);
	while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME),
					  NULL).type != GRPC_QUEUE_SHUTDOWN)
		;
	grpc_completion_queue_destroy(cq);
	free(ch);
	return NULL;
}

/* The value of metric `name` (a line "name value") in text; NAN: none. */
static double metric(const char *text, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = text; (p = strstr(p, name)); p += n)
		if ((p == text || p[-1] == '\n') && p[n] == ' ')
			return atof(p + n + 1);
	return NAN;
}

/* A memory figure of the syncer in MiB: field "VmHWM:" (the peak
 * resident set) or "VmRSS:" (now); -1: unknown. */
static double rss_mb(pid_t pid, const char *field)
{
	char path[64], line[256];
	double kb = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if (!(f = fopen(path, "r")))
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, field, strlen(field)))
			kb = atof(line + strlen(field));
	fclose(f);
	return kb < 0 ? -1 : kb / 1024;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

struct result {
	double p50, p90, all50, period, merge_ms, rss, rss_joined;
	int procs;                   /* client processes */
	size_t numel;                /* floats in a fragment (the largest) */
};

#define CHANNELS 96   /* the model width: fragments of 64,512 floats */

/* A client process: learners [from, to) on THREADS threads, with a
 * gRPC of its own (started after the fork). */
static void client_main(struct run *r, int from, int to)
{
	struct worker w[THREADS];
	pthread_t th[THREADS];

	grpc_init();
	for (int t = 0; t < THREADS; t++) {
		w[t] = (struct worker){ r, from + (to - from) * t / THREADS,
					from + (to - from) * (t + 1) / THREADS };
		pthread_create(&th[t], NULL, worker_main, &w[t]);
	}
	for (int t = 0; t < THREADS; t++)
		pthread_join(th[t], NULL);
	grpc_shutdown();
}

/* One run with M learners and `rounds` rounds on `procs` client
 * processes (0: one per PER_PROCESS learners); 0 when every learner did
 * all its rounds. */
static int run_scale(int M, int procs, int rounds, struct result *res)
{
	const char *build = getenv("BUILD") ? getenv("BUILD") : "build";
	char dir[] = "/tmp/ddiloco-scale-XXXXXX", job[128], bin[256], lis[64];
	char http[64], ck[128], logf[128], cmd[200], *text = malloc(1 << 20);
	struct run r = { .M = M, .rounds = rounds };
	struct job_spec js;
	struct model_config cfg;
	struct frag_table ft;
	double *lat = calloc((size_t)rounds, sizeof(double));
	double *all = calloc((size_t)rounds, sizeof(double)), period = 0;
	int hport = bench_free_port(), ok = 1, ready = 0;
	size_t maxn = 0, shared_len;
	pid_t pid, *kids;
	struct outcome *out;
	double *times;
	char *shared;
	FILE *f;

	if (procs <= 0)
		procs = (M + PER_PROCESS - 1) / PER_PROCESS;
	procs = procs > M ? M : procs;
	r.port = bench_free_port();
	r.l = calloc((size_t)M, sizeof(*r.l));
	kids = calloc((size_t)procs, sizeof(*kids));
	/* the shared mapping: the count welcomed, M outcomes, then the
	 * answer and update times of every learner and round */
	shared_len = 64 + (size_t)M * sizeof(*out) +
		     2 * (size_t)M * ((size_t)rounds + 1) * sizeof(double);
	shared = mmap(NULL, shared_len, PROT_READ | PROT_WRITE,
		      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (!mkdtemp(dir) || !r.l || !kids || !lat || !all || !text ||
	    shared == MAP_FAILED)
		return -1;
	r.welcomed = (int *)shared;
	out = (struct outcome *)(shared + 64);
	times = (double *)(out + M);
	/* JOINING in all: a join costs the syncer every fragment sent, and a
	 * burst of a thousand connections overflows its accept queue */
	r.joining = (JOINING + procs * THREADS - 1) / (procs * THREADS);
	snprintf(job, sizeof(job), "%s/job.yaml", dir);
	snprintf(ck, sizeof(ck), "%s/ckpt", dir);
	snprintf(logf, sizeof(logf), "%s/syncer.log", dir);
	if (!(f = fopen(job, "w")))
		return -1;
	fprintf(f, "apiVersion: ddiloco.io/v1alpha1\nkind: DecoupledTrainingJob\n"
		"metadata:\n  name: benchscale\nspec:\n  learners:\n    replicas: %d\n"
		"  model:\n    vocabSize: 256\n    context: 64\n    layers: 2\n"
		"    heads: 4\n    channels: %d\n"
		"  data:\n    path: %s/job.yaml\n"
		"  syncer:\n    minQuorum: %d\n    fragments: 4\n    evalEvery: 0\n"
		"    checkpointEvery: 0\n    helloTimeout: 60\n    insecure: true\n"
		"    updateEncoding: int8\n", M, CHANNELS, dir, M);
	fclose(f);
	if (jobspec_load(job, &js, NULL) || model_config_from_job(&js.model, &cfg, NULL) ||
	    model_frag_table(&cfg, 4, &ft, NULL))
		return -1;
	r.ft = &ft;
	for (int p = 0; p < ft.nfrags; p++)
		maxn = ft.frags[p].numel > maxn ? ft.frags[p].numel : maxn;
	r.maxn = maxn;
	r.delta = malloc(7 * maxn * sizeof(float));
	for (int k = 0; k < 7; k++)
		for (size_t i = 0; i < maxn; i++)
			r.delta[(size_t)k * maxn + i] = 1e-4f * (1.0f + 0.1f * (float)k) *
				(float)((int)(i % 5) - 2);
	for (int i = 0; i < M; i++) {
		r.l[i].id = i;
		r.l[i].rounds = rounds;
		r.l[i].out = &out[i];
		r.l[i].t_ans = times + (size_t)(2 * i) * ((size_t)rounds + 1);
		r.l[i].t_upd = times + (size_t)(2 * i + 1) * ((size_t)rounds + 1);
	}
	snprintf(bin, sizeof(bin), "%s/ddiloco", build);
	snprintf(lis, sizeof(lis), "127.0.0.1:%d", r.port);
	snprintf(http, sizeof(http), "127.0.0.1:%d", hport);
	pid = fork();
	if (pid == 0) {
		if (!freopen(logf, "w", stderr))
			_exit(127);
		execl(bin, "ddiloco", "syncer", "--job", job, "--listen", lis,
		      "--http", http, "--checkpoint-dir", ck, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 200 && !ready; i++) {
		sleep_seconds(0.05);
		ready = bench_http_get(hport, "/readyz", text, 1 << 20) == 0 &&
			!strncmp(text, "ok", 2);
	}
	double t0, t_go = clock_mono();

	for (int k = 0; k < procs; k++) {
		kids[k] = fork();
		if (kids[k] == 0) {
			client_main(&r, M * k / procs, M * (k + 1) / procs);
			_exit(0);
		}
	}
	for (int i = 0; i < 6000; i++) {   /* 5 min at most */
		if (__atomic_load_n(r.welcomed, __ATOMIC_RELAXED) == M)
			break;
		sleep_seconds(0.05);
	}
	res->rss_joined = rss_mb(pid, "VmRSS:");
	t_go = clock_mono();
	for (int k = 0; k < procs; k++) {
		int st = 0;

		if (kids[k] < 0 || waitpid(kids[k], &st, 0) != kids[k] ||
		    !WIFEXITED(st) || WEXITSTATUS(st)) {
			fprintf(stderr, "syncer_scale: M=%d: client process %d "
				"failed\n", M, k);
			ok = 0;
		}
	}
	t0 = clock_mono() - t_go;
	for (int i = 0; i < M; i++)
		ok &= out[i].done;
	res->rss = rss_mb(pid, "VmHWM:");
	res->merge_ms = NAN;
	if (bench_http_get(hport, "/metrics", text, 1 << 20) == 0)
		res->merge_ms = 1e3 * metric(text, "ddiloco_syncer_merge_seconds_sum") /
				metric(text, "ddiloco_syncer_merge_seconds_count");
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	if (!ok) {
		int nd = 0, nf = 0;

		for (int i = 0; i < M; i++) {
			nd += out[i].done;
			nf += out[i].failed;
		}
		fprintf(stderr, "syncer_scale: M=%d: %d learners done, %d failed; "
			"the syncer's log is in %s\n", M, nd, nf, logf);
		for (int i = 0; i < M; i++)
			if (out[i].failed) {
				fprintf(stderr, "syncer_scale: learner %d (step %d): %s "
					"(status %d %s)\n", i, out[i].step, out[i].why,
					out[i].ended ? out[i].code : -1, out[i].details);
				break;
			}
	} else {
		for (int s = 1; s <= rounds; s++) {
			double last_ans = 0, first_upd = 1e300, last_upd = 0;

			for (int i = 0; i < M; i++) {
				last_ans = fmax(last_ans, r.l[i].t_ans[s]);
				first_upd = fmin(first_upd, r.l[i].t_upd[s]);
				last_upd = fmax(last_upd, r.l[i].t_upd[s]);
			}
			lat[s - 1] = first_upd - last_ans;
			all[s - 1] = last_upd - last_ans;
		}
		qsort(lat, (size_t)rounds, sizeof(double), cmp_d);
		qsort(all, (size_t)rounds, sizeof(double), cmp_d);
		res->p50 = 1e3 * lat[rounds / 2];
		res->p90 = 1e3 * lat[rounds * 9 / 10];
		res->all50 = 1e3 * all[rounds / 2];
		period = t0 / rounds;
		res->period = 1e3 * period;
		res->procs = procs;
		res->numel = maxn;
		printf("syncer_scale_fragment_params=%zu\n", ft.frags[0].numel);
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd))
			fprintf(stderr, "syncer_scale: cannot remove %s\n", dir);
	}
	munmap(shared, shared_len);
	free(kids);
	free(r.l);
	free(r.delta);
	free(lat);
	free(all);
	free(text);
	frag_table_release(&ft);
	return ok ? 0 : -1;
}

/* memcpy's bandwidth here, GB/s: the best of five copies of 64 MiB */
static double memcpy_gbps(void)
{
	size_t n = (size_t)64 << 20;
	char *a = malloc(n), *b = malloc(n);
	double best = 1e300;

	if (!a || !b) {
		free(a);
		free(b);
		return NAN;
	}
	memset(a, 1, n);
	memset(b, 2, n);
	for (int k = 0; k < 5; k++) {
		double t = clock_mono();

		memcpy(b, a, n);
		t = clock_mono() - t;
		best = t < best ? t : best;
		a[k] = b[n - 1 - (size_t)k];   /* keep the copies */
	}
	free(a);
	free(b);
	return (double)n / best / 1e9;
}

/* The bytes of one round: M f32 answers in, M int8 updates out (their
 * payloads), in MB. */
static double round_mb(int M, size_t numel)
{
	return (double)M * ((double)enc_size(ENC_F32, numel) +
			    (double)enc_size(ENC_INT8, numel)) / 1e6;
}

static void print(int M, const struct result *x, double gbps)
{
	double mb = round_mb(M, x->numel);

	printf("syncer_scale_clients_m%d=%d\n", M, x->procs);
	printf("syncer_round_m%d_latency_ms_p50=%.2f\n", M, x->p50);
	printf("syncer_round_m%d_latency_ms_p90=%.2f\n", M, x->p90);
	printf("syncer_round_m%d_all_ms_p50=%.2f\n", M, x->all50);
	printf("syncer_round_m%d_period_ms=%.1f\n", M, x->period);
	printf("syncer_round_m%d_mb=%.1f\n", M, mb);
	printf("syncer_round_m%d_memcpy_ms=%.1f\n", M, mb / gbps);
	printf("syncer_merge_m%d_ms=%.3f\n", M, x->merge_ms);
	printf("syncer_rss_mb_m%d=%.1f\n", M, x->rss);
	printf("syncer_rss_joined_mb_m%d=%.1f\n", M, x->rss_joined);
}

int main(int argc, char **argv)
{
	int big = argc > 1 ? atoi(argv[1]) : 1000;
	int procs = argc > 2 ? atoi(argv[2]) : 0;
	struct result a, b;
	double gbps;

	if (big < 1 || procs < 0) {
		fprintf(stderr, "usage: syncer_scale [M [CLIENT_PROCESSES]]\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	gbps = memcpy_gbps();
	printf("syncer_scale_memcpy_gbps=%.2f\n", gbps);
	if (run_scale(16, 0, 30, &a)) {
		printf("syncer_round_m16=failed\n");
		return 0;
	}
	print(16, &a, gbps);
	if (run_scale(big, procs, 10, &b)) {
		printf("syncer_round_m%d=failed\n", big);
		return 0;
	}
	print(big, &b, gbps);
	printf("syncer_round_latency_ratio_m%d_m16=%.2f\n", big, b.p50 / a.p50);
	printf("syncer_rss_ratio_m%d_m16=%.2f\n", big, b.rss / a.rss);
	return 0;
}
