/*
 * beat_thin_link: how long a heartbeat takes to reach the syncer while a
 * large answer is on its way on a thin link, on the Train stream (behind
 * the answer) and on a Beat call (a TCP connection of its own;
 * docs/sidecar.md, Heartbeats on their own connection).
 *
 * One real `ddiloco syncer` (a small model, plaintext); a test learner's
 * Train stream and its Beat each through a loopback proxy that forwards
 * RATE bytes a second toward the syncer (per connection, the other way
 * at once: tests/unit/slowlink.h). Per run: an answer of ANSWER bytes (fragment 99: none of the
 * job's, refused after its bytes are counted) starts on Train; HOLD
 * seconds later a heartbeat is due. On Train it goes out when the answer
 * has been handed to gRPC (one send at a time, as the sidecar does); on
 * the Beat at once. The time is from due to the learner's step in
 * /status, polled every 5 ms.
 *
 *   beat_thin_link_rate_mb_s        the proxy's rate, MB/s
 *   beat_thin_link_answer_mb        the answer's payload, MB
 *   beat_thin_link_train_s          heartbeat on Train: due → seen
 *   beat_thin_link_beat_s           heartbeat on the Beat: due → seen
 */
#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/benchlib.h"
#include "common/fragment.h"
#include "common/jobspec.h"
#include "common/util.h"
#include "common/wire.h"
#include "tests/unit/slowlink.h"
#include "trainer/model.h"

#define RATE 1e6
#define ANSWER ((size_t)6500000)
#define HOLD 0.5

/* ---- the test learner ----------------------------------------------------- */

struct call {
	grpc_channel *ch;
	grpc_completion_queue *cq;
	grpc_call *call;
	int md_sent, tag;
};

static gpr_timespec in(double s)
{
	return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
			    gpr_time_from_millis((int64_t)(s * 1000), GPR_TIMESPAN));
}

static void call_open(struct call *c, int port, const char *method)
{
	grpc_arg own = { GRPC_ARG_INTEGER,
			 (char *)GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, { .integer = 1 } };
	grpc_channel_args ca = { 1, &own };
	grpc_channel_credentials *cred = grpc_insecure_credentials_create();
	char target[64];

	memset(c, 0, sizeof(*c));
	snprintf(target, sizeof(target), "127.0.0.1:%d", port);
	c->ch = grpc_channel_create(target, cred, &ca);
	grpc_channel_credentials_release(cred);
	c->cq = grpc_completion_queue_create_for_pluck(NULL);
	c->call = grpc_channel_create_call(c->ch, NULL, GRPC_PROPAGATE_DEFAULTS,
					   c->cq, grpc_slice_from_static_string(method),
					   NULL, gpr_inf_future(GPR_CLOCK_REALTIME),
					   NULL);
}

/* Starts sending m; 0 when gRPC took the batch (send_wait ends it). */
static int send_start(struct call *c, const struct wire_learner_msg *m,
		      grpc_byte_buffer **bb)
{
	size_t n = wire_learner_size(m);
	grpc_slice sl = grpc_slice_malloc(n);
	grpc_op ops[2];
	int k = 0;

	wire_learner_pack(m, GRPC_SLICE_START_PTR(sl));
	*bb = grpc_raw_byte_buffer_create(&sl, 1);
	grpc_slice_unref(sl);
	memset(ops, 0, sizeof(ops));
	if (!c->md_sent) {
		ops[k++].op = GRPC_OP_SEND_INITIAL_METADATA;
		c->md_sent = 1;
	}
	ops[k].op = GRPC_OP_SEND_MESSAGE;
	ops[k++].data.send_message.send_message = *bb;
	return grpc_call_start_batch(c->call, ops, (size_t)k, &c->tag, NULL) ==
	       GRPC_CALL_OK ? 0 : -1;
}

static int send_wait(struct call *c, grpc_byte_buffer *bb)
{
	grpc_event ev = grpc_completion_queue_pluck(c->cq, &c->tag, in(60), NULL);

	grpc_byte_buffer_destroy(bb);
	return ev.type == GRPC_OP_COMPLETE && ev.success ? 0 : -1;
}

static int send_msg(struct call *c, const struct wire_learner_msg *m)
{
	grpc_byte_buffer *bb;

	return send_start(c, m, &bb) ? -1 : send_wait(c, bb);
}

static int heartbeat(struct call *c, uint64_t step)
{
	struct wire_learner_msg m = { .kind = WIRE_HEARTBEAT };

	m.heartbeat = (struct wire_heartbeat){ .step = step, .tokens = step * 32,
		.step_time = 0.05, .train_loss = 5, .incarnation = 1000 };
	return send_msg(c, &m);
}

/* Learner 0's step and the answer bytes counted; -1 when unreadable. */
static int learner_step(int port, long long *step, long long *bytes_in)
{
	static char buf[1 << 16];
	json_t *j;
	int rc = -1;

	if (bench_http_get(port, "/status", buf, sizeof(buf)) ||
	    !(j = json_loads(buf, 0, NULL)))
		return -1;
	json_t *l = json_array_get(json_object_get(j, "learners"), 0);

	if (l) {
		*step = json_integer_value(json_object_get(l, "step"));
		*bytes_in = json_integer_value(json_object_get(j, "bytes_in"));
		rc = 0;
	}
	json_decref(j);
	return rc;
}

/* Seconds from now until learner 0 is at step; NAN: not within 60 s. */
static double until_step(int port, long long want, double t0)
{
	long long step = -1, in_b;

	while (clock_mono() - t0 < 60) {
		if (!learner_step(port, &step, &in_b) && step == want)
			return clock_mono() - t0;
		sleep_seconds(0.005);
	}
	return NAN;
}

/* One run: the answer on Train, a heartbeat at step due HOLD s later on
 * `via` (Train or the Beat); seconds from due to seen. */
static double run(struct call *train, struct call *via, int http, uint64_t step,
		  uint8_t *payload)
{
	struct wire_learner_msg m = { .kind = WIRE_ANSWER };
	grpc_byte_buffer *bb;
	double t0, dt;
	long long s, in_b = 0, in0 = 0;

	learner_step(http, &s, &in0);
	m.answer = (struct wire_answer){ .fragment = 99, .round = 1,
		.encoding = ENC_F32, .payload = payload, .payload_len = ANSWER };
	if (send_start(train, &m, &bb))
		return NAN;
	sleep_seconds(HOLD);
	t0 = clock_mono();
	if (via == train) {
		if (send_wait(train, bb) || heartbeat(train, step))
			return NAN;
		dt = until_step(http, (long long)step, t0);
	} else {
		if (heartbeat(via, step))
			return NAN;
		dt = until_step(http, (long long)step, t0);
		if (send_wait(train, bb))
			return NAN;
	}
	/* the whole answer in before the next run */
	while (clock_mono() - t0 < 60 && !learner_step(http, &s, &in_b) &&
	       in_b < in0 + (long long)ANSWER)
		sleep_seconds(0.02);
	return dt;
}

int main(void)
{
	const char *build = getenv("BUILD") ? getenv("BUILD") : "build";
	char dir[] = "/tmp/ddiloco-beat-XXXXXX", job[128], ck[128], logf[128];
	char bin[256], lis[64], hp[64], text[4096];
	struct job_spec js;
	struct model_config cfg;
	struct frag_table ft;
	struct slowlink px;
	struct call train, beat;
	uint64_t sizes[8];
	uint8_t *payload = calloc(ANSWER, 1);
	int gport = bench_free_port(), hport = bench_free_port(), ready = 0, rc = 1;
	double t_train = NAN, t_beat = NAN;
	pid_t pid;
	FILE *f;

	signal(SIGPIPE, SIG_IGN);
	if (!payload || !mkdtemp(dir))
		return 1;
	snprintf(job, sizeof(job), "%s/job.yaml", dir);
	snprintf(ck, sizeof(ck), "%s/ckpt", dir);
	snprintf(logf, sizeof(logf), "%s/syncer.log", dir);
	if (!(f = fopen(job, "w")))
		return 1;
	fprintf(f, "apiVersion: ddiloco.io/v1alpha1\nkind: DecoupledTrainingJob\n"
		"metadata:\n  name: beatbench\nspec:\n  learners:\n    replicas: 2\n"
		"  model:\n    vocabSize: 256\n    context: 16\n    layers: 1\n"
		"    heads: 2\n    channels: 16\n"
		"  data:\n    path: %s/job.yaml\n"
		"  syncer:\n    minQuorum: 2\n    fragments: 4\n    evalEvery: 0\n"
		"    checkpointEvery: 0\n    insecure: true\n", dir);
	fclose(f);
	if (jobspec_load(job, &js, NULL) || model_config_from_job(&js.model, &cfg, NULL) ||
	    model_frag_table(&cfg, 4, &ft, NULL))
		return 1;
	snprintf(bin, sizeof(bin), "%s/ddiloco", build);
	snprintf(lis, sizeof(lis), "127.0.0.1:%d", gport);
	snprintf(hp, sizeof(hp), "127.0.0.1:%d", hport);
	pid = fork();
	if (pid == 0) {
		if (!freopen(logf, "w", stderr))
			_exit(127);
		execl(bin, "ddiloco", "syncer", "--job", job, "--listen", lis,
		      "--http", hp, "--checkpoint-dir", ck, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 200 && !ready; i++) {
		sleep_seconds(0.05);
		ready = bench_http_get(hport, "/readyz", text, sizeof(text)) == 0 &&
			!strncmp(text, "ready", 5);
	}
	if (!ready || slowlink_start(&px, gport, 0, RATE))
		goto out;
	grpc_init();
	call_open(&train, px.port, "/ddiloco.v1.Syncer/Train");
	call_open(&beat, px.port, "/ddiloco.v1.Syncer/Beat");
	{
		struct wire_learner_msg m = { .kind = WIRE_HELLO };
		long long s = -1, b;

		for (int p = 0; p < ft.nfrags; p++)
			sizes[p] = ft.frags[p].numel;
		m.hello = (struct wire_hello){ .learner_id = 0,
			.fingerprint = ft.fingerprint, .fragments = (uint32_t)ft.nfrags,
			.nsizes = (size_t)ft.nfrags, .fragment_sizes = sizes,
			.incarnation = 1000, .job = "beatbench" };
		if (send_msg(&train, &m) || heartbeat(&train, 1) ||
		    !(until_step(hport, 1, clock_mono()) >= 0) ||
		    send_msg(&beat, &m) || heartbeat(&beat, 2) ||
		    !(until_step(hport, 2, clock_mono()) >= 0) ||
		    learner_step(hport, &s, &b))
			goto stop;
	}
	t_train = run(&train, &train, hport, 3, payload);
	t_beat = run(&train, &beat, hport, 4, payload);
	printf("beat_thin_link_rate_mb_s=%.1f\n", RATE / 1e6);
	printf("beat_thin_link_answer_mb=%.1f\n", (double)ANSWER / 1e6);
	printf("beat_thin_link_train_s=%.3f\n", t_train);
	printf("beat_thin_link_beat_s=%.3f\n", t_beat);
	rc = isfinite(t_train) && isfinite(t_beat) ? 0 : 1;
stop:
	grpc_call_cancel(train.call, NULL);
	grpc_call_cancel(beat.call, NULL);
	grpc_call_unref(train.call);
	grpc_call_unref(beat.call);
	grpc_channel_destroy(train.ch);
	grpc_channel_destroy(beat.ch);
	slowlink_stop(&px);
out:
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	if (rc)
		fprintf(stderr, "beat_thin_link: failed; the syncer's log is in %s\n",
			logf);
	free(payload);
	return rc;
}
