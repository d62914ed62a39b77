/*
 * updelta: Θ̂ and the deltas that move it (see updelta.h).
 */
#include "syncer/updelta.h"

#include <stdlib.h>
#include <string.h>

#include "common/prom.h"
#include "common/util.h"

int updelta_init(struct updelta *u, int P, const size_t *numel,
		 enum payload_enc enc, struct err *e)
{
	size_t total = 0, big = 1;

	memset(u, 0, sizeof(*u));
	u->P = P;
	u->enc = enc;
	u->numel = calloc((size_t)P, sizeof(*u->numel));
	u->off = calloc((size_t)P, sizeof(*u->off));
	u->ver1 = calloc((size_t)P, sizeof(*u->ver1));
	u->sum = calloc((size_t)P, sizeof(*u->sum));
	u->pay = calloc((size_t)P, sizeof(*u->pay));
	u->len = calloc((size_t)P, sizeof(*u->len));
	if (!u->numel || !u->off || !u->ver1 || !u->sum || !u->pay || !u->len)
		goto oom;
	for (int p = 0; p < P; p++) {
		u->numel[p] = numel[p];
		u->off[p] = total;
		total += numel[p];
		big = numel[p] > big ? numel[p] : big;
	}
	u->hat = malloc((total ? total : 1) * sizeof(float));
	u->scratch = malloc(big * sizeof(float));
	if (u->hat && u->scratch)
		return 0;
oom:
	updelta_release(u);
	return err_set(e, "syncer: no memory for the model as the learners "
		       "hold it (updateDelta): %zu values", total);
}

void updelta_release(struct updelta *u)
{
	for (int p = 0; u->pay && p < u->P; p++)
		free(u->pay[p]);
	free(u->numel);
	free(u->off);
	free(u->hat);
	free(u->scratch);
	free(u->ver1);
	free(u->sum);
	free(u->pay);
	free(u->len);
	memset(u, 0, sizeof(*u));
}

static void drop_delta(struct updelta *u, int p)
{
	u->len[p] = 0;   /* its buffer is kept for the next */
}

/* Θ̂_p := Θ_p at version: learners that held an older Θ̂_p get a keyframe */
static void remake(struct updelta *u, int p, const float *theta,
		   uint64_t version)
{
	float *hat = u->hat + u->off[p];

	memcpy(hat, theta, u->numel[p] * sizeof(float));
	u->ver1[p] = version + 1;
	u->sum[p] = hash_floats(hat, u->numel[p]);
	u->remade++;
	drop_delta(u, p);
}

const float *updelta_keyframe(struct updelta *u, int p, const float *theta,
			      uint64_t version, uint64_t *sum)
{
	if (u->ver1[p] != version + 1)
		remake(u, p, theta, version);
	*sum = u->sum[p];
	return u->hat + u->off[p];
}

int updelta_step(struct updelta *u, int p, const float *theta,
		 uint64_t version, struct err *e)
{
	size_t n = u->numel[p];
	float *hat = u->hat + u->off[p], *d = u->scratch;
	uint8_t *pay;

	if (!version || u->ver1[p] != version) {   /* not at version − 1 */
		remake(u, p, theta, version);
		return 0;
	}
	/* one buffer a fragment, made at its first delta, written again */
	if (!u->pay[p] && !(u->pay[p] = malloc(enc_size(u->enc, n) + 1))) {
		u->ver1[p] = 0;
		drop_delta(u, p);
		return err_set(e, "syncer: no memory for fragment %d's delta", p);
	}
	pay = u->pay[p];
	for (size_t i = 0; i < n; i++)
		d[i] = theta[i] - hat[i];
	/* what the encoding carries is what the learners add: decode it
	 * back (a non-finite change cannot be sent as int8: remade) */
	if (enc_encode(u->enc, d, n, pay, NULL) ||
	    enc_decode(u->enc, pay, enc_size(u->enc, n), d, n, NULL)) {
		remake(u, p, theta, version);
		return 0;
	}
	for (size_t i = 0; i < n; i++)
		hat[i] = hat[i] + d[i];
	u->len[p] = enc_size(u->enc, n);
	u->ver1[p] = version + 1;
	u->sum[p] = hash_floats(hat, n);
	u->deltas++;
	return 0;
}

int updelta_get(const struct updelta *u, int p, uint64_t version,
		const uint8_t **pay, size_t *len, uint64_t *sum)
{
	if (!u->len || !u->len[p] || u->ver1[p] != version + 1)
		return 0;
	*pay = u->pay[p];
	*len = u->len[p];
	*sum = u->sum[p];
	return 1;
}

void updelta_metrics(const struct updelta *u, struct buf *b)
{
	prom_counter(b, "ddiloco_syncer_update_deltas_total",
		     "Deltas made of merged fragments (updateDelta).", u->deltas);
	prom_counter(b, "ddiloco_syncer_update_delta_remade_total",
		     "Times the model as the learners hold it was made again "
		     "from the global model (keyframes follow).", u->remade);
}
