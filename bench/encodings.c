/*
 * encodings: bytes and error of each payload encoding (common/encoding.h)
 * on the quickstart model (examples/quickstart.yaml, its P fragments).
 *
 * One learner trains the model; after WARMUP steps, every H = syncEvery
 * (= P) steps each fragment's progress Δ = θ_before − θ_after is taken, as
 * an answer would carry it, ROUNDS times. For each encoding it prints the
 * bytes of an answer and of an update (payload and whole gRPC message,
 * averaged over the fragments) and their ratio to f32, the mean relative
 * L2 error of one answer, of one update (the fragment of θ), and the drift
 * ‖Σ decoded − Σ Δ‖ / ‖Σ Δ‖ over all rounds with the error feedback of the
 * sidecar and without it.
 *
 * Then the cost in loss: one learner trained TRAIN_ROUNDS rounds of H
 * steps from the model's initial values, DiLoCo with one learner and
 * outer learning rate 1: each round every fragment's Δ = base − θ goes
 * through the answer encoding (with or without error feedback), the
 * global Θ ← Θ − decoded Δ in float32, and the learner takes Θ back
 * through the update encoding as its θ and base. It prints the eval loss
 * of Θ for each pair; with f32 both ways this is plain training.
 *
 * Everything printed is deterministic: it does not depend on the machine
 * or its load. Run from the repository's root (docs/figures.md).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/encoding.h"
#include "common/fragment.h"
#include "common/jobspec.h"
#include "common/wire.h"
#include "trainer/model.h"
#include "trainer/trainer.h"

#define JOB "examples/quickstart.yaml"
#define WARMUP 40
#define ROUNDS 25
#define TRAIN_ROUNDS 100
#define EVAL_TOKENS 32768

struct stat_enc {
	double ans_payload, ans_msg, upd_payload, upd_msg;
	double ans_err, upd_err;
	double *sum_fb, *sum_plain;   /* Σ decoded over rounds, all params */
	float *resid;                 /* all params */
};

static double sq(double x)
{
	return x * x;
}

static double rel(const float *x, const float *y, size_t n)
{
	double d = 0, t = 0;

	for (size_t i = 0; i < n; i++) {
		d += sq((double)x[i] - y[i]);
		t += sq(x[i]);
	}
	return t > 0 ? sqrt(d / t) : 0;
}

static size_t answer_msg(size_t plen)
{
	uint8_t hdr[WIRE_ANSWER_HDR_MAX];

	/* a round, version, steps, tokens and step of a long run */
	return wire_answer_header(hdr, &(struct wire_answer){
		.fragment = 3, .round = 100000, .base_version = 25000,
		.steps = 4, .tokens = 2048, .encoding = 3,
		.payload_len = plen, .step = 400000,
	}) + plen;
}

static size_t update_msg(size_t plen)
{
	struct wire_syncer_msg m = { .kind = WIRE_UPDATE };

	m.update = (struct wire_update){
		.fragment = 3, .version = 25000, .encoding = 3,
		.payload = (const uint8_t *)"", .payload_len = plen,
		.round = 100000,
	};
	return wire_syncer_size(&m);
}

/* One fragment's Δ (and θ, for the update) through encoding k. */
static int measure(struct stat_enc *st, enum payload_enc k,
		   const struct frag_table *ft, int p, size_t off,
		   const float *delta, const float *theta, uint8_t *buf,
		   float *x, float *dec, struct err *e)
{
	size_t n = ft->frags[p].numel, plen = enc_size(k, n);

	st->ans_payload += (double)plen;
	st->ans_msg += (double)answer_msg(plen);
	st->upd_payload += (double)plen;
	st->upd_msg += (double)update_msg(plen);
	if (enc_encode(k, delta, n, buf, e) ||
	    enc_decode(k, buf, plen, dec, n, e))
		return -1;
	st->ans_err += rel(delta, dec, n);
	for (size_t i = 0; i < n; i++)
		st->sum_plain[off + i] += dec[i];
	memcpy(x, delta, n * sizeof(float));
	if (enc_encode_feedback(k, x, st->resid + off, n, buf, dec, e))
		return -1;
	for (size_t i = 0; i < n; i++)
		st->sum_fb[off + i] += dec[i];
	if (enc_encode(k, theta, n, buf, e) ||
	    enc_decode(k, buf, plen, dec, n, e))
		return -1;
	st->upd_err += rel(theta, dec, n);
	return 0;
}

static double drift(const double *sum, const double *truth, size_t n)
{
	double d = 0, t = 0;

	for (size_t i = 0; i < n; i++) {
		d += sq(sum[i] - truth[i]);
		t += sq(truth[i]);
	}
	return t > 0 ? sqrt(d / t) : 0;
}

/* Fragment p of Θ through enc into θ and base (the learner's update). */
static int take_update(const struct frag_table *ft, int p,
		       enum payload_enc upd, float *Theta, float *theta,
		       float *base, float *x, float *dec, uint8_t *buf,
		       struct err *e)
{
	size_t n = ft->frags[p].numel;

	frag_gather(ft, p, Theta, x);
	if (enc_encode(upd, x, n, buf, e) ||
	    enc_decode(upd, buf, enc_size(upd, n), dec, n, e))
		return -1;
	frag_scatter(ft, p, dec, theta);
	frag_scatter(ft, p, dec, base);
	return 0;
}

/* One learner through answer encoding ans and update encoding upd: the
 * eval loss of Θ after TRAIN_ROUNDS rounds (see the head comment). */
static int train_through(const struct job_spec *js, struct evaluator *ev,
			 enum payload_enc ans, enum payload_enc upd,
			 int feedback, double *loss, struct err *e)
{
	struct trainer *t = trainer_new(js, 0, 1, e);
	struct frag_table ft;
	struct trainer_stats ts;
	size_t np, maxn = 0;
	float *Theta, *base, *resid, *x, *dec, *theta;
	uint8_t *buf;
	int H = jobspec_sync_every(js), rc = -1;

	if (!t)
		return -1;
	if (model_frag_table(trainer_config(t), js->syncer.fragments, &ft, e)) {
		trainer_free(t);
		return -1;
	}
	np = model_num_params(trainer_config(t));
	for (int p = 0; p < ft.nfrags; p++)
		if (ft.frags[p].numel > maxn)
			maxn = ft.frags[p].numel;
	theta = trainer_params(t);
	Theta = malloc(np * sizeof(float));
	base = malloc(np * sizeof(float));
	resid = calloc(maxn * (size_t)ft.nfrags, sizeof(float));
	x = malloc(maxn * sizeof(float));
	dec = malloc(maxn * sizeof(float));
	buf = malloc(4 * maxn);
	memcpy(Theta, theta, np * sizeof(float));
	for (int p = 0; p < ft.nfrags; p++)
		if (take_update(&ft, p, upd, Theta, theta, base, x, dec, buf, e))
			goto out;
	for (int r = 0; r < TRAIN_ROUNDS; r++) {
		for (int i = 0; i < H; i++)
			if (trainer_step(t, &ts, e))
				goto out;
		for (int p = 0; p < ft.nfrags; p++) {
			size_t n = ft.frags[p].numel;
			float *rp = resid + (size_t)p * maxn;

			frag_gather(&ft, p, base, x);
			frag_gather(&ft, p, theta, dec);
			for (size_t i = 0; i < n; i++)
				x[i] -= dec[i];            /* Δ = base − θ */
			if (feedback ? enc_encode_feedback(ans, x, rp, n, buf, dec, e)
				     : enc_encode(ans, x, n, buf, e) ||
				       enc_decode(ans, buf, enc_size(ans, n), dec,
						  n, e))
				goto out;
			frag_gather(&ft, p, Theta, x);
			for (size_t i = 0; i < n; i++)
				x[i] -= dec[i];            /* Θ ← Θ − Δ */
			frag_scatter(&ft, p, x, Theta);
			if (take_update(&ft, p, upd, Theta, theta, base, x, dec,
					buf, e))
				goto out;
		}
	}
	rc = evaluator_loss(ev, Theta, EVAL_TOKENS, loss, e);
out:
	free(Theta);
	free(base);
	free(resid);
	free(x);
	free(dec);
	free(buf);
	frag_table_release(&ft);
	trainer_free(t);
	return rc;
}

static int loss_table(const struct job_spec *js, struct err *e)
{
	static const struct { enum payload_enc ans, upd; int fb; } runs[] = {
		{ ENC_F32, ENC_F32, 1 }, { ENC_BF16, ENC_F32, 1 },
		{ ENC_INT8, ENC_F32, 1 }, { ENC_INT8, ENC_F32, 0 },
		{ ENC_INT4, ENC_F32, 1 }, { ENC_INT4, ENC_F32, 0 },
		{ ENC_INT8, ENC_INT8, 1 }, { ENC_INT4, ENC_BF16, 1 },
		{ ENC_INT4, ENC_INT4, 1 },
	};
	struct evaluator *ev = evaluator_new(js, e);

	if (!ev)
		return -1;
	for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
		double loss;

		if (train_through(js, ev, runs[i].ans, runs[i].upd, runs[i].fb,
				  &loss, e)) {
			evaluator_free(ev);
			return -1;
		}
		printf("loss_%s_%s_%s=%.4f\n", enc_name(runs[i].ans),
		       enc_name(runs[i].upd),
		       runs[i].fb ? "feedback" : "plain", loss);
		fflush(stdout);
	}
	evaluator_free(ev);
	return 0;
}

int main(void)
{
	struct job_spec js;
	struct trainer *t;
	struct frag_table ft;
	struct stat_enc st[ENC_COUNT] = { 0 };
	struct trainer_stats ts;
	struct err e;
	size_t np, maxn = 0, *off;
	float *before, *delta, *theta, *x, *dec;
	double *truth;
	uint8_t *buf;
	int H;

	if (jobspec_load(JOB, &js, &e) || !(t = trainer_new(&js, 0, 1, &e)) ||
	    model_frag_table(trainer_config(t), js.syncer.fragments, &ft, &e))
		goto fail;
	np = model_num_params(trainer_config(t));
	H = jobspec_sync_every(&js);
	off = calloc((size_t)ft.nfrags, sizeof(*off));
	for (int p = 0; p < ft.nfrags; p++) {
		if (ft.frags[p].numel > maxn)
			maxn = ft.frags[p].numel;
		off[p] = p ? off[p - 1] + ft.frags[p - 1].numel : 0;
	}
	before = malloc(np * sizeof(float));
	delta = malloc(maxn * sizeof(float));
	theta = malloc(maxn * sizeof(float));
	x = malloc(maxn * sizeof(float));
	dec = malloc(maxn * sizeof(float));
	buf = malloc(4 * maxn);
	truth = calloc(np, sizeof(double));
	for (int k = 0; k < ENC_COUNT; k++) {
		st[k].sum_fb = calloc(np, sizeof(double));
		st[k].sum_plain = calloc(np, sizeof(double));
		st[k].resid = calloc(np, sizeof(float));
	}
	for (int i = 0; i < WARMUP; i++)
		if (trainer_step(t, &ts, &e))
			goto fail;
	for (int r = 0; r < ROUNDS; r++) {
		memcpy(before, trainer_params(t), np * sizeof(float));
		for (int i = 0; i < H; i++)
			if (trainer_step(t, &ts, &e))
				goto fail;
		for (int p = 0; p < ft.nfrags; p++) {
			size_t n = ft.frags[p].numel;

			frag_gather(&ft, p, before, x);
			frag_gather(&ft, p, trainer_params(t), theta);
			for (size_t i = 0; i < n; i++) {
				delta[i] = x[i] - theta[i];
				truth[off[p] + i] += delta[i];
			}
			for (int k = 0; k < ENC_COUNT; k++)
				if (measure(&st[k], (enum payload_enc)k, &ft, p,
					    off[p], delta, theta, buf, x, dec, &e))
					goto fail;
		}
	}
	printf("job=%s params=%zu fragments=%d steps_per_round=%d rounds=%d "
	       "train_loss=%.4f\n", JOB, np, ft.nfrags, H, ROUNDS, ts.loss);
	for (int k = 0; k < ENC_COUNT; k++) {
		double a = ROUNDS * ft.nfrags;   /* answers measured */
		const char *nm = enc_name((enum payload_enc)k);

		printf("%s_answer_payload_bytes=%.0f\n", nm, st[k].ans_payload / a);
		printf("%s_answer_message_bytes=%.0f\n", nm, st[k].ans_msg / a);
		printf("%s_update_message_bytes=%.0f\n", nm, st[k].upd_msg / a);
		printf("%s_bytes_over_f32=%.4f\n", nm,
		       st[k].ans_msg / st[0].ans_msg);
		printf("%s_answer_rel_err=%.3g\n", nm, st[k].ans_err / a);
		printf("%s_update_rel_err=%.3g\n", nm, st[k].upd_err / a);
		printf("%s_drift_feedback=%.3g\n", nm,
		       drift(st[k].sum_fb, truth, np));
		printf("%s_drift_plain=%.3g\n", nm,
		       drift(st[k].sum_plain, truth, np));
	}
	printf("train_rounds=%d eval_tokens=%d\n", TRAIN_ROUNDS, EVAL_TOKENS);
	fflush(stdout);
	if (loss_table(&js, &e))
		goto fail;
	return 0;
fail:
	fprintf(stderr, "encodings: %s\n", e.msg);
	return 1;
}
