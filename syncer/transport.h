/*
 * transport: the counters of the syncer's streams (stream.c) that are
 * not the core's — identities refused, streams silent past helloTimeout,
 * Beat calls and their heartbeats, payloads in parts — and their /status
 * and /metrics
 * lines. Counted on the run loop under `mu`, read by status.c under it.
 */
#ifndef DDILOCO_SYNCER_TRANSPORT_H
#define DDILOCO_SYNCER_TRANSPORT_H

#include <jansson.h>
#include <stdint.h>

struct buf;

struct transport_stats {
	uint64_t streams_refused;    /* for their client certificate */
	uint64_t streams_no_hello;   /* closed: no Hello within helloTimeout */
	uint64_t streams_over_cap;   /* refused: SYNCER_CALLS_MAX open */
	int calls_open;              /* gRPC calls open now, closing ones too */
	uint64_t beat_streams;       /* Beat calls taken */
	uint64_t beat_heartbeats;    /* heartbeats that came on a Beat */
	/* docs/protocol.md, Messages in parts */
	uint64_t answer_parts;       /* parts of answers taken */
	uint64_t update_parts;       /* parts of updates sent */
	uint64_t parts_refused;      /* wrong parts: their streams closed */
	/* docs/protocol.md, Updates as deltas: merged fragments queued as
	 * a delta or whole, and their payload bytes */
	uint64_t updates_delta, updates_whole;
	uint64_t update_bytes_delta, update_bytes_whole;
};

/* Its /status fields, set in o. */
void transport_json(const struct transport_stats *t, json_t *o);
void transport_metrics(const struct transport_stats *t, struct buf *b);

#endif
