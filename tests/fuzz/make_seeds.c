/*
 * make_seeds: writes the seed corpora of the harnesses whose inputs are
 * binary (tests/fuzz/corpus/{wire,ckpt,shard,exchange,eval,seed,beat,sidecar,
 * seedfile,enc}),
 * and the
 * high-water marks (tests/fuzz/corpus/hwm), made with the
 * project's own encoders: `make fuzz-seeds`. The job file and watch seeds
 * are text, kept by hand. Run again when a format changes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/encoding.h"
#include "common/exchange.h"
#include "common/util.h"
#include "common/wire.h"
#include "syncer/ckpt.h"
#include "tests/fuzz/fuzz_model.h"
#include "trainer/data.h"

static void put(const char *name, const char *file, const void *p, size_t n)
{
	char path[512];
	struct err e;

	mkdir("tests/fuzz/corpus", 0755);
	snprintf(path, sizeof(path), "tests/fuzz/corpus/%s", name);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "tests/fuzz/corpus/%s/%s", name, file);
	if (file_write_atomic(path, p, n, &e)) {
		fprintf(stderr, "make_seeds: %s\n", e.msg);
		exit(1);
	}
}

/* ---- wire: records of tests/fuzz/fuzz_wire.c ---- */

struct rec {
	uint8_t b[8192];
	size_t n;
};

static void rec_msg(struct rec *r, int conn, int tick, int flags,
		    const struct wire_learner_msg *m)
{
	size_t n = wire_learner_size(m);

	if (r->n + 3 + n > sizeof(r->b))
		abort();
	r->b[r->n++] = (uint8_t)(conn | tick << 2 | flags);
	r->b[r->n++] = (uint8_t)(n & 255);
	r->b[r->n++] = (uint8_t)(n >> 8);
	wire_learner_pack(m, r->b + r->n);
	r->n += n;
}

static void wire_seeds(struct fuzz_model *fm)
{
	uint64_t sizes[FM_P];
	static const enum payload_enc encs[] = { ENC_F32, ENC_BF16, ENC_INT8,
						 ENC_INT4 };

	for (int p = 0; p < FM_P; p++)
		sizes[p] = fm->ft.frags[p].numel;
	/* k = 4, 5: f32 and int8 again, each answer in two parts
	 * (docs/protocol.md, Messages in parts) */
	for (size_t k = 0; k < sizeof(encs) / sizeof(encs[0]) + 2; k++) {
		int split = k >= sizeof(encs) / sizeof(encs[0]);
		enum payload_enc enc = split ? encs[2 * (k - 4)] : encs[k];
		struct rec r = { .n = 0 };
		char file[64];

		for (int id = 0; id < FM_M; id++) {
			struct wire_learner_msg m = { .kind = WIRE_HELLO };

			m.hello = (struct wire_hello){
				.learner_id = (uint32_t)id,
				.fingerprint = fm->ft.fingerprint,
				.fragments = FM_P, .nsizes = FM_P,
				.fragment_sizes = sizes,
				.incarnation = 10 + (uint64_t)id, .job = "fuzz",
			};
			rec_msg(&r, id, 0, 0, &m);
		}
		for (uint64_t round = 1; round <= 4; round++) {
			int p = (int)(round % FM_P);   /* round r pulls r mod P */
			size_t n = fm->ft.frags[p].numel;
			float x[FM_N];
			uint8_t pl[FM_N * 4];

			for (int id = 0; id < FM_M; id++) {
				struct wire_learner_msg m = { .kind = WIRE_HEARTBEAT };

				m.heartbeat = (struct wire_heartbeat){
					.step = round, .tokens = 64 * round,
					.step_time = 0.1, .train_loss = 2.0,
					.incarnation = 10 + (uint64_t)id,
				};
				rec_msg(&r, id, 1, 0, &m);
			}
			for (int id = 0; id < FM_M; id++) {
				struct wire_learner_msg m = { .kind = WIRE_ANSWER };

				for (size_t i = 0; i < n; i++)
					x[i] = 0.01f * (float)(id + 1) * (float)(i % 5);
				if (enc_encode(enc, x, n, pl, NULL))
					abort();
				m.answer = (struct wire_answer){
					.fragment = (uint32_t)p, .round = round,
					.base_version = round > 2 ? 1 : 0,
					.steps = 1, .tokens = 64,
					.encoding = (int)enc, .payload = pl,
					.payload_len = enc_size(enc, n),
					.step = round,
				};
				if (split) {   /* the first half, then the rest */
					size_t all = m.answer.payload_len;

					m.answer.payload_total = all;
					m.answer.payload_len = all / 2;
					rec_msg(&r, id, 2, 0, &m);
					m.answer.part_offset = all / 2;
					m.answer.payload = pl + all / 2;
					m.answer.payload_len = all - all / 2;
				}
				rec_msg(&r, id, 2, id == 2 && round == 4 ? 0x40 : 0,
					&m);
			}
		}
		snprintf(file, sizeof(file), "rounds-%s%s", enc_name(enc),
			 split ? "-parts" : "");
		put("wire", file, r.b, r.n);
	}
	/* the syncer's side: a Welcome, a Pull and an Update, decoded only */
	{
		uint64_t versions[FM_P] = { 3, 4 };
		uint8_t pl[FM_N * 4] = { 0 };
		struct wire_syncer_msg ms[5] = {
			{ .kind = WIRE_WELCOME },
			{ .kind = WIRE_PULL },
			{ .kind = WIRE_UPDATE },
			{ .kind = WIRE_UPDATE },
			{ .kind = WIRE_UPDATE },
		};
		struct rec r = { .n = 0 };

		ms[0].welcome = (struct wire_welcome){
			.fragments = FM_P, .nversions = FM_P, .versions = versions,
			.round = 7, .alpha = 0.5, .answer_encoding = ENC_INT8,
			.resume_step = 12,
		};
		ms[1].pull = (struct wire_pull){ .fragment = 1, .round = 8 };
		ms[2].update = (struct wire_update){
			.fragment = 0, .version = 5, .encoding = ENC_F32,
			.payload = pl, .payload_len = 32, .round = 8,
		};
		/* the same in two parts */
		ms[3].update = ms[2].update;
		ms[3].update.payload_len = 16;
		ms[3].update.payload_total = 32;
		ms[4].update = ms[3].update;
		ms[4].update.part_offset = 16;
		for (int i = 0; i < 5; i++) {
			size_t n = wire_syncer_size(&ms[i]);

			r.b[r.n++] = 0x80;
			r.b[r.n++] = (uint8_t)n;
			r.b[r.n++] = (uint8_t)(n >> 8);
			wire_syncer_pack(&ms[i], r.b + r.n);
			r.n += n;
		}
		put("wire", "syncer-messages", r.b, r.n);
	}
}

/* ---- ckpt: checkpoints of the small model ---- */

static void ckpt_seeds(struct fuzz_model *fm)
{
	for (int k = 0; k < 2; k++) {
		struct syncer_ckpt c;
		struct err e;
		void *buf;
		size_t len;

		if (syncer_ckpt_init(&c, FM_P, FM_N, FM_M, &e))
			abort();
		c.fingerprint = fm->ft.fingerprint;
		c.rounds_started = 6 + (uint64_t)k;
		c.rounds_completed = 5;
		c.tokens_trained = 4096;
		c.merged = 12;
		c.elapsed = 30.0;
		c.wall_time = 1.7e9;
		c.last_round_elapsed = 29.0;
		c.uptime_start = k ? -1.0 : 2.0;
		c.done = (uint32_t)k;
		c.versions[0] = 3;
		c.versions[1] = 2;
		for (int i = 0; i < FM_M; i++)
			c.learners[i] = (struct ckpt_learner){ 10 + (uint64_t)i,
							      1000 };
		c.nevals = 1;
		c.evals = calloc(1, sizeof(*c.evals));
		c.evals[0] = (struct ckpt_eval){ 4, 4000, 2.5, 28.0 };
		for (int i = 0; i < FM_N; i++)
			c.theta[i] = 0.01f * (float)i;
		if (syncer_ckpt_encode(&c, &buf, &len, &e))
			abort();
		put("ckpt", k ? "done" : "resume", buf, len);
		free(buf);
		syncer_ckpt_release(&c);
	}
}

/* ---- shard: a token shard, a text file ---- */

static void shard_seeds(void)
{
	uint8_t b[DATA_SHARD_HEADER + 2 * 16] = { 0 };
	int32_t hdr[3] = { DATA_SHARD_MAGIC, DATA_SHARD_VERSION, 16 };
	static const char text[] = "the quick brown fox\n";

	memcpy(b, hdr, sizeof(hdr));
	for (int i = 0; i < 16; i++) {
		b[DATA_SHARD_HEADER + 2 * i] = (uint8_t)(i * 7);
		b[DATA_SHARD_HEADER + 2 * i + 1] = 0;
	}
	b[sizeof(b) - 1] = 1;   /* the last byte picks the vocabulary */
	put("shard", "tokens", b, sizeof(b));
	put("shard", "text", text, sizeof(text) - 1);
}

/* ---- exchange: region images of a conversation ---- */

static void exchange_seeds(void)
{
	static const struct frag_tensor tens[3] = {
		{ .offset = 0, .numel = 5, .is_embedding = 1 },
		{ .offset = 5, .numel = 6, .is_embedding = 0 },
		{ .offset = 11, .numel = 2, .is_embedding = 0 },
	};
	char dir[] = "/tmp/ddseeds-XXXXXX", path[64];
	struct frag_table ft;
	struct exchange *ln, *sc;
	struct exchange_step st = { .step = 1, .tokens = 64,
				    .tokens_total = 64, .loss = 2.0,
				    .step_time = 0.01 };
	struct exchange_poll_result res;
	float params[13] = { 0 };
	void *img;
	size_t len;
	struct err e;

	if (!mkdtemp(dir) || frag_table_init(&ft, tens, 3, 2, NULL) ||
	    exchange_open(dir, EXCHANGE_LEARNER, &ft, &ln, &e) ||
	    exchange_open(dir, EXCHANGE_SIDECAR, &ft, &sc, &e))
		abort();
	snprintf(path, sizeof(path), "%s/%s", dir, EXCHANGE_FILE);
	if (file_read_all(path, 1 << 20, &img, &len, &e))
		abort();
	put("exchange", "fresh", img, len);
	free(img);
	for (int p = 0; p < 2; p++) {
		float *d = exchange_inbox_begin(sc, p);

		for (size_t i = 0; i < exchange_frag_numel(sc, p); i++)
			d[i] = 1.0f + (float)i;
		exchange_inbox_commit(sc, p, 1);
	}
	exchange_set_alpha(sc, 0.25);
	exchange_learner_start(ln, params);
	exchange_post_pull(sc, 0, 3);
	exchange_set_resume(sc, 5, 0);
	exchange_poll(ln, params, &st, &res);
	if (file_read_all(path, 1 << 20, &img, &len, &e))
		abort();
	put("exchange", "answered", img, len);
	free(img);
	exchange_set_done(sc, 1);
	if (file_read_all(path, 1 << 20, &img, &len, &e))
		abort();
	put("exchange", "done", img, len);
	free(img);
	exchange_close(ln);
	exchange_close(sc);
	frag_table_release(&ft);
	snprintf(path, sizeof(path), "rm -rf %s", dir);
	if (system(path))
		abort();
}

/* ---- hwm: high-water marks, as syncer_hwm_write writes them ---- */

static void hwm_seeds(const char *dir)
{
	static uint64_t two[2] = { 41, 40 }, eight[8] = {
		0, 1, 9, 10, 99, 100, 4294967296ull, UINT64_MAX };
	static const struct { const char *file; struct syncer_hwm h; } m[] = {
		{ "two-fragments", { 82, 2, two } },
		{ "eight-fragments", { UINT64_MAX, 8, eight } },
		{ "no-fragments", { 0, 0, NULL } },
	};
	char path[600];

	for (size_t k = 0; k < sizeof(m) / sizeof(m[0]); k++) {
		void *b;
		size_t len;
		struct err e;

		snprintf(path, sizeof(path), "%s/syncer-%016llx-hwm", dir,
			 FM_HWM_FP);
		if (syncer_hwm_write(dir, FM_HWM_FP, &m[k].h, &e) ||
		    file_read_all(path, 1 << 20, &b, &len, &e))
			abort();
		put("hwm", m[k].file, b, len);
		free(b);
		unlink(path);
	}
}

/* ---- eval: merges and evaluators' reports, tests/fuzz/fuzz_eval.c ---- */

static void rec_eval(struct rec *r, int id, uint64_t round, double loss)
{
	struct wire_learner_msg m = { .kind = WIRE_EVALUATION };
	size_t n;

	m.evaluation = (struct wire_evaluation){ .round = round, .loss = loss,
						 .tokens = 4096 };
	n = wire_learner_size(&m);
	if (n > 255 || r->n + 2 + n > sizeof(r->b))
		abort();
	r->b[r->n++] = (uint8_t)(1 | id << 1);
	r->b[r->n++] = (uint8_t)n;
	wire_learner_pack(&m, r->b + r->n);
	r->n += n;
}

static void eval_seeds(void)
{
	struct rec r = { .n = 0 };

	/* start at round 10, 5000 tokens; rounds 11..16 merged, the last
	 * two out of order; reports taken, one not newer, one not merged,
	 * one not finite */
	r.b[r.n++] = 10;
	r.b[r.n++] = 5;
	r.b[r.n++] = 4 << 2;
	rec_eval(&r, 0, 11, 3.5);
	r.b[r.n++] = 8 << 2;
	rec_eval(&r, 1, 14, 3.25);
	rec_eval(&r, 0, 13, 3.0);
	r.b[r.n++] = 2 | 1 << 2;
	rec_eval(&r, 0, 16, 2.75);
	rec_eval(&r, 2, 40, 2.5);
	rec_eval(&r, 3, 17, NAN);
	put("eval", "reports", r.b, r.n);
	/* past the ring of merged rounds: 300 merges, then a report of a
	 * round it no longer holds and one it does */
	r.n = 0;
	r.b[r.n++] = 0;
	r.b[r.n++] = 0;
	rec_eval(&r, 0, 0, 4.0);
	for (int k = 0; k < 150; k++)
		r.b[r.n++] = (uint8_t)((k & 1) << 1 | 1 << 2);
	rec_eval(&r, 1, 20, 3.0);
	rec_eval(&r, 1, 290, 3.0);
	put("eval", "ring", r.b, r.n);
}

/* ---- seed: a table and the seeder's answers, tests/fuzz/fuzz_seed.c ---- */

static void rec_seed(struct rec *r, int flags, int p, enum payload_enc enc,
		     const float *x, size_t n)
{
	struct wire_learner_msg m = { .kind = WIRE_ANSWER };
	uint8_t pl[FM_N * 4];

	if (enc_encode(enc, x, n, pl, NULL))
		abort();
	m.answer = (struct wire_answer){
		.fragment = (uint32_t)p, .encoding = (int)enc, .payload = pl,
		.payload_len = enc_size(enc, n),
	};
	rec_msg(r, 0, 0, flags, &m);
}

static void seed_seeds(struct fuzz_model *fm)
{
	static const struct { const char *file; uint8_t shards;
			      enum payload_enc enc[FM_P]; int reseed; } k[] = {
		{ "whole-f32-bf16", 0, { ENC_F32, ENC_BF16 }, 0 },
		{ "shard-1-of-2-int8", 1 | 1 << 2, { ENC_INT8, ENC_INT8 }, 0 },
		{ "not-finite-then-reseed", 0, { ENC_F32, ENC_INT4 }, 1 },
	};
	uint64_t sizes[FM_P];
	float x[FM_N];

	for (int p = 0; p < FM_P; p++)
		sizes[p] = fm->ft.frags[p].numel;
	for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++) {
		struct rec r = { .n = 0 };
		struct wire_learner_msg m = { .kind = WIRE_HELLO };

		r.b[r.n++] = k[i].shards;
		m.hello = (struct wire_hello){
			.learner_id = 0, .fingerprint = fm->ft.fingerprint,
			.fragments = FM_P, .nsizes = FM_P,
			.fragment_sizes = sizes, .incarnation = 10, .job = "fuzz",
		};
		rec_msg(&r, 0, 0, 0, &m);
		for (int p = 0; p < FM_P; p++) {
			size_t n = fm->ft.frags[p].numel;

			for (size_t j = 0; j < n; j++)
				x[j] = 0.125f * (float)(p + 1) - 0.03f * (float)j;
			if (k[i].reseed && p == 1) {
				x[0] = NAN;
				rec_seed(&r, 0, p, ENC_F32, x, n);
				x[0] = 0.5f;
				rec_seed(&r, 1, 0, k[i].enc[0], x, fm->ft.frags[0].numel);
			}
			rec_seed(&r, 0, p, k[i].enc[p], x, n);
		}
		put("seed", k[i].file, r.b, r.n);
	}
}

/* ---- beat: Beat calls, tests/fuzz/fuzz_beat.c ---- */

/* learner id's Train stream live, of incarnation (< 128) */
static void rec_train(struct rec *r, int id, uint8_t incarnation)
{
	r->b[r->n++] = (uint8_t)(id << 1);
	r->b[r->n++] = 0x80 | incarnation;
}

static void rec_beat(struct rec *r, int cert_bad, uint32_t id, int evaluator,
		     uint64_t incarnation, int hello)
{
	struct wire_learner_msg m = { .kind = hello ? WIRE_HELLO : WIRE_HEARTBEAT };

	if (hello)
		m.hello = (struct wire_hello){ .learner_id = id, .job = "fuzz",
			.evaluator = evaluator, .incarnation = incarnation };
	else
		m.heartbeat = (struct wire_heartbeat){ .step = 10 * incarnation,
			.tokens = 640 * incarnation, .step_time = 0.05,
			.train_loss = 2.5, .incarnation = incarnation };
	rec_msg(r, 1 | cert_bad << 1, 0, 0, &m);
}

static void beat_seeds(void)
{
	struct rec r = { .n = 0 };

	/* 4 learners: learner 2's Beat taken, heartbeats, its Train stream
	 * restarted (the Beat closed), a new Beat of the new incarnation */
	r.b[r.n++] = 3;
	rec_train(&r, 2, 7);
	rec_beat(&r, 0, 2, 0, 7, 1);
	for (int i = 0; i < 3; i++)
		rec_beat(&r, 0, 2, 0, 7, 0);
	rec_train(&r, 2, 9);
	rec_beat(&r, 0, 2, 0, 7, 0);
	rec_beat(&r, 0, 2, 0, 9, 1);
	rec_beat(&r, 0, 2, 0, 9, 0);
	/* learner 1's sidecar said Hello before its learner attached */
	rec_train(&r, 1, 0);
	rec_beat(&r, 0, 1, 0, 0, 1);
	rec_beat(&r, 0, 1, 0, 0, 0);
	put("beat", "taken-restarted", r.b, r.n);
	/* 2 learners: every refusal once */
	r.n = 0;
	r.b[r.n++] = 1;
	rec_train(&r, 0, 4);
	rec_beat(&r, 0, 0, 0, 4, 0);     /* no hello first */
	rec_beat(&r, 0, 0, 1, 4, 1);     /* an evaluator */
	rec_beat(&r, 0, 5, 0, 4, 1);     /* out of range */
	rec_beat(&r, 1, 0, 0, 4, 1);     /* another's certificate */
	rec_beat(&r, 0, 1, 0, 4, 1);     /* no Train stream */
	rec_beat(&r, 0, 0, 0, 3, 1);     /* another incarnation */
	rec_beat(&r, 0, 0, 0, 4, 1);     /* taken, */
	rec_beat(&r, 0, 0, 0, 4, 1);     /* then a second hello */
	put("beat", "refusals", r.b, r.n);
}

/* ---- sidecar: SyncerMessages, tests/fuzz/fuzz_sidecar.c ---- */

static void rec_syncer(struct rec *r, const struct wire_syncer_msg *m)
{
	size_t n = wire_syncer_size(m);

	if (r->n + 3 + n > sizeof(r->b))
		abort();
	r->b[r->n++] = 1;
	r->b[r->n++] = (uint8_t)(n & 255);
	r->b[r->n++] = (uint8_t)(n >> 8);
	wire_syncer_pack(m, r->b + r->n);
	r->n += n;
}

/* An Update of fragment p (numel n) at version v, in enc, whole or (part
 * > 0) its first `part` bytes of the payload as a part. */
static void rec_update(struct rec *r, int p, size_t n, uint64_t v,
		       enum payload_enc enc, size_t part)
{
	struct wire_syncer_msg m = { .kind = WIRE_UPDATE };
	uint8_t pl[64];
	float x[8];

	for (size_t i = 0; i < n; i++)
		x[i] = 0.5f - 0.0625f * (float)i;
	if (enc_encode(enc, x, n, pl, NULL))
		abort();
	m.update = (struct wire_update){
		.fragment = (uint32_t)p, .version = v, .encoding = (int)enc,
		.payload = pl, .payload_len = part ? part : enc_size(enc, n),
		.round = v, .tokens = 100 * v,
		.payload_total = part ? enc_size(enc, n) : 0,
	};
	rec_syncer(r, &m);
}

static void sidecar_seeds(void)
{
	static const uint64_t versions[2] = { 3, 4 };
	struct wire_syncer_msg m = { .kind = WIRE_WELCOME };
	struct rec r = { .n = 0 };

	/* fragments of 6 and 7 values (fuzz_sidecar.c's table) */
	m.welcome = (struct wire_welcome){
		.fragments = 2, .nversions = 2, .versions = versions,
		.round = 4, .alpha = 0.5, .answer_encoding = ENC_INT8,
		.resume_step = 12,
	};
	rec_syncer(&r, &m);
	rec_update(&r, 0, 6, 3, ENC_F32, 0);
	rec_update(&r, 1, 7, 4, ENC_BF16, 0);
	m = (struct wire_syncer_msg){ .kind = WIRE_PULL };
	m.pull = (struct wire_pull){ .fragment = 1, .round = 5 };
	rec_syncer(&r, &m);
	m.pull = (struct wire_pull){ .fragment = 0, .round = 0 };
	rec_syncer(&r, &m);
	rec_update(&r, 0, 6, 5, ENC_INT8, 0);
	put("sidecar", "welcome-updates-pulls", r.b, r.n);
	/* an update in parts, cut off by a new stream, then whole */
	r.n = 0;
	m = (struct wire_syncer_msg){ .kind = WIRE_WELCOME };
	m.welcome = (struct wire_welcome){
		.fragments = 2, .nversions = 2, .versions = versions,
		.round = 4, .answer_encoding = ENC_F32,
	};
	rec_syncer(&r, &m);
	rec_update(&r, 1, 7, 6, ENC_F32, 12);
	r.b[r.n++] = 0;
	rec_update(&r, 1, 7, 6, ENC_F32, 0);
	put("sidecar", "parts-cut-off", r.b, r.n);
}

/* ---- seedfile: a learner's seed file, tests/fuzz/fuzz_seedfile.c ---- */

static void seedfile_seeds(const char *dir)
{
	static const struct frag_tensor tens[3] = {
		{ .offset = 0, .numel = 5, .is_embedding = 1 },
		{ .offset = 5, .numel = 6, .is_embedding = 0 },
		{ .offset = 11, .numel = 2, .is_embedding = 0 },
	};
	struct frag_table ft;
	char path[512];
	float x[13];
	void *b = NULL;
	size_t n;

	for (int i = 0; i < 13; i++)
		x[i] = 0.25f * (float)i - 1.0f;
	snprintf(path, sizeof(path), "%s/%s", dir, EXCHANGE_SEED_FILE);
	if (frag_table_init(&ft, tens, 3, 2, NULL) ||
	    exchange_write_seed(dir, &ft, x, NULL) ||
	    file_read_all(path, 1 << 20, &b, &n, NULL))
		abort();
	put("seedfile", "whole", b, n);
	put("seedfile", "short", b, n - 10);
	unlink(path);
	free(b);
	frag_table_release(&ft);
}

/* ---- enc: arrays for tests/fuzz/fuzz_enc.c ---- */

static void enc_seeds(void)
{
	static const struct { const char *file; unsigned count; int exp;
			      int nvals; } k[] = {
		{ "small-mixed", 16, 40, 37 },     /* 257 values */
		{ "fragment-size", 4096, 20, 300 },   /* 65537 values */
		{ "largest", 0xffff, 32, 64 },     /* 1048561 values */
	};
	uint8_t b[3 + 4 * 300];

	for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++) {
		b[0] = (uint8_t)(k[i].count & 255);
		b[1] = (uint8_t)(k[i].count >> 8);
		b[2] = (uint8_t)k[i].exp;
		for (int j = 0; j < k[i].nvals; j++) {
			float v = sinf(0.37f * (float)j) * (j % 7 ? 1.0f : 1e-3f);

			memcpy(b + 3 + 4 * j, &v, 4);
		}
		put("enc", k[i].file, b, 3 + 4 * (size_t)k[i].nvals);
	}
}

int main(void)
{
	struct fuzz_model fm;

	if (fuzz_model_init(&fm, "ddseeds"))
		return 1;
	wire_seeds(&fm);
	ckpt_seeds(&fm);
	shard_seeds();
	exchange_seeds();
	hwm_seeds(fm.dir);
	eval_seeds();
	seed_seeds(&fm);
	sidecar_seeds();
	seedfile_seeds(fm.dir);
	enc_seeds();
	beat_seeds();
	rmdir(fm.dir);
	printf("seeds written under tests/fuzz/corpus\n");
	return 0;
}
