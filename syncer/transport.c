/*
 * transport: the stream counters' /status fields and Prometheus lines
 * (transport.h).
 */
#include "syncer/transport.h"

#include "common/prom.h"

void transport_json(const struct transport_stats *t, json_t *o)
{
	json_object_set_new(o, "streams_refused",
			    json_integer((json_int_t)t->streams_refused));
	json_object_set_new(o, "streams_no_hello",
			    json_integer((json_int_t)t->streams_no_hello));
	json_object_set_new(o, "calls_open", json_integer(t->calls_open));
	json_object_set_new(o, "streams_over_cap",
			    json_integer((json_int_t)t->streams_over_cap));
	json_object_set_new(o, "beat_streams",
			    json_integer((json_int_t)t->beat_streams));
	json_object_set_new(o, "beat_heartbeats",
			    json_integer((json_int_t)t->beat_heartbeats));
	json_object_set_new(o, "answer_parts",
			    json_integer((json_int_t)t->answer_parts));
	json_object_set_new(o, "update_parts",
			    json_integer((json_int_t)t->update_parts));
	json_object_set_new(o, "parts_refused",
			    json_integer((json_int_t)t->parts_refused));
	json_object_set_new(o, "updates_delta",
			    json_integer((json_int_t)t->updates_delta));
	json_object_set_new(o, "updates_whole",
			    json_integer((json_int_t)t->updates_whole));
	json_object_set_new(o, "update_bytes_delta",
			    json_integer((json_int_t)t->update_bytes_delta));
	json_object_set_new(o, "update_bytes_whole",
			    json_integer((json_int_t)t->update_bytes_whole));
}

void transport_metrics(const struct transport_stats *t, struct buf *b)
{
	prom_counter(b, "ddiloco_syncer_streams_refused_total",
		     "Streams refused for their client certificate "
		     "(docs/security.md).", t->streams_refused);
	prom_counter(b, "ddiloco_syncer_streams_no_hello_total",
		     "Streams closed for saying no Hello within helloTimeout.",
		     t->streams_no_hello);
	prom_counter(b, "ddiloco_syncer_streams_over_cap_total",
		     "Calls refused at once: as many were open as the syncer "
		     "takes (docs/security.md, Listeners).", t->streams_over_cap);
	prom_counter(b, "ddiloco_syncer_beat_streams_total",
		     "Beat calls taken: a learner's heartbeats on a connection "
		     "of their own (docs/sidecar.md).", t->beat_streams);
	prom_counter(b, "ddiloco_syncer_beat_heartbeats_total",
		     "Heartbeats that came on a Beat call.", t->beat_heartbeats);
	prom_counter(b, "ddiloco_syncer_answer_parts_total",
		     "Parts of answers taken: payloads larger than a message "
		     "(docs/protocol.md).", t->answer_parts);
	prom_counter(b, "ddiloco_syncer_update_parts_total",
		     "Parts of updates sent.", t->update_parts);
	prom_counter(b, "ddiloco_syncer_parts_refused_total",
		     "Parts out of order, duplicated, missing or oversize: "
		     "their streams closed.", t->parts_refused);
	prom_family(b, "ddiloco_syncer_updates_total", PROM_COUNTER,
		    "Merged fragments queued to a stream, as a delta or whole "
		    "(docs/protocol.md, Updates as deltas).");
	prom_u64(b, "ddiloco_syncer_updates_total", PROM_LABELS("as", "delta"),
		 t->updates_delta);
	prom_u64(b, "ddiloco_syncer_updates_total", PROM_LABELS("as", "whole"),
		 t->updates_whole);
	prom_family(b, "ddiloco_syncer_update_bytes_total", PROM_COUNTER,
		    "Payload bytes of those updates.");
	prom_u64(b, "ddiloco_syncer_update_bytes_total", PROM_LABELS("as", "delta"),
		 t->update_bytes_delta);
	prom_u64(b, "ddiloco_syncer_update_bytes_total", PROM_LABELS("as", "whole"),
		 t->update_bytes_whole);
}
