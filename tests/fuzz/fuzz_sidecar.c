/*
 * fuzz_sidecar: the sidecar's handling of what the syncer sends
 * (sidecar/bridge.c, sidecar_handle): each input is a fresh sidecar of a
 * small table on a fresh exchange (the learner attached), fed a run of
 * SyncerMessages as a stream would deliver them — Welcomes, Pulls (seed
 * requests of round 0 included), Updates whole or in parts — with the
 * learner polling the exchange after each.
 *
 * Input: records, each a byte b and then:
 *   b & 1    a message: two length bytes (little end first), then that
 *            many bytes;
 *   else     a new stream begins (sidecar_stream_begin): parts cut off
 *            are dropped.
 *
 * What must hold: no access outside the buffers (the sanitizers);
 * sidecar_handle says 0, -1 or -2 and nothing else; a whole Update that
 * it takes sets the fragment's inbox to its version, one it refuses
 * leaves the inbox as it was; the learner's parameters stay finite when
 * every Update taken carried finite values; the exchange passes its own
 * check after each message.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/encoding.h"
#include "common/exchange.h"
#include "common/log.h"
#include "common/wire.h"
#include "sidecar/sidecar.h"
#include "tests/fuzz/fuzz.h"
#include "tests/fuzz/fuzz_model.h"

const char fuzz_name[] = "sidecar";

/* three tensors in two fragments (tests/unit/test_sidecar.c, smaller) */
static const struct frag_tensor tens[3] = {
	{ .offset = 0, .numel = 5, .is_embedding = 1 },
	{ .offset = 5, .numel = 6, .is_embedding = 0 },
	{ .offset = 11, .numel = 2, .is_embedding = 0 },
};
#define NPARAM 13

static char dir[256];
static struct frag_table ft;

/* the exchange's files removed: every input starts from a new one */
static void bye(void)
{
	char p[300];

	snprintf(p, sizeof(p), "%s/%s", dir, EXCHANGE_FILE);
	unlink(p);
	snprintf(p, sizeof(p), "%s/%s", dir, EXCHANGE_SIDECAR_SOCK);
	unlink(p);
}

static void bye_dir(void)
{
	bye();
	rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	setenv("DDILOCO_LOG", "error", 0);   /* DDILOCO_LOG=info to see */
	log_init("fuzz");
	snprintf(dir, sizeof(dir), "%s/ddfuzz-sc-XXXXXX", fuzz_tmpdir());
	if (!mkdtemp(dir) || frag_table_init(&ft, tens, 3, 2, NULL))
		abort();
	atexit(bye_dir);
	return 0;
}

/* Whether an Update's payload, decoded as the sidecar would, is finite. */
static int finite_update(const struct wire_update *u)
{
	float v[8];
	size_t n = (size_t)ft.frags[u->fragment].numel;

	if (n > 8 || enc_decode((enum payload_enc)u->encoding, u->payload,
				u->payload_len, v, n, NULL))
		return 1;   /* not taken whole: judged by the sidecar */
	for (size_t i = 0; i < n; i++)
		if (!isfinite(v[i]))
			return 0;
	return 1;
}

/* One message through the sidecar, and the checks of its outcome. */
static void one(struct sidecar *s, struct exchange *sx, const uint8_t *msg,
		size_t len, int *all_finite)
{
	struct wire_syncer_msg m;
	uint64_t before[2];
	int rc, whole;

	for (int p = 0; p < ft.nfrags; p++)
		before[p] = exchange_inbox_version(sx, p);
	whole = !wire_syncer_decode(msg, len, &m, NULL) &&
		m.kind == WIRE_UPDATE && m.update.payload_total == 0 &&
		m.update.fragment < (uint32_t)ft.nfrags;
	rc = sidecar_handle(s, 0, msg, len, NULL);
	if (rc != 0 && rc != -1 && rc != -2)
		abort();
	if (whole && rc == 0) {
		if (exchange_inbox_version(sx, (int)m.update.fragment) !=
		    m.update.version)
			abort();
		if (!finite_update(&m.update))
			*all_finite = 0;
	}
	if (whole && rc != 0)
		for (int p = 0; p < ft.nfrags; p++)
			if (exchange_inbox_version(sx, p) != before[p])
				abort();
	if (!whole && rc == 0 && m.kind == WIRE_UPDATE)
		*all_finite = 0;   /* a last part: its values are not judged */
	wire_syncer_release(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static float params[NPARAM];
	struct sidecar_opts o = { .target = "127.0.0.1:1", .learner_id = 1,
				  .job = "f", .seed_dir = dir };
	struct exchange_step stp = { .step = 3, .tokens = 64,
				     .tokens_total = 192, .loss = 1.0,
				     .step_time = 0.01 };
	struct exchange_poll_result res;
	struct exchange *sx = NULL, *lx = NULL;
	struct sidecar *s;
	int all_finite = 1;
	size_t i = 0;

	if (size > 1 << 16)
		return 0;
	bye();
	if (exchange_open(dir, EXCHANGE_SIDECAR, &ft, &sx, NULL) ||
	    exchange_open(dir, EXCHANGE_LEARNER, &ft, &lx, NULL))
		abort();
	if (!(s = sidecar_new(&o, sx, &ft, NULL)))
		abort();
	for (int k = 0; k < NPARAM; k++)
		params[k] = 0.25f;
	exchange_learner_start(lx, params);
	while (i < size) {
		uint8_t b = data[i++];
		size_t n;

		if (!(b & 1)) {
			sidecar_stream_begin(s, 0);
			continue;
		}
		if (size - i < 2)
			break;
		n = (size_t)data[i] | (size_t)data[i + 1] << 8;
		i += 2;
		if (n > size - i)
			n = size - i;
		one(s, sx, data + i, n, &all_finite);
		i += n;
		exchange_poll(lx, params, &stp, &res);
		if (exchange_check(sx))
			abort();
		for (int k = 0; all_finite && k < NPARAM; k++)
			if (!isfinite(params[k]))
				abort();
	}
	sidecar_free(s);
	exchange_close(lx);
	exchange_close(sx);
	return 0;
}
