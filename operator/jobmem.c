/*
 * jobmem: a singly linked list of entries, newest first, under one lock
 * (jobs are tens to hundreds; a pass looks its job up once). The lock is
 * held to find, make, reset or unlink an entry, never while an entry is
 * used: a worker owns its job's entry for the pass (jobmem.h).
 *
 * The syncer's restarts are a ring of the times each was first seen,
 * oldest dropped past JOBMEM_RESTARTS_KEPT; the Events sent, a ring of
 * JOBMEM_EVENTS_KEPT texts with when they went.
 */
#include "operator/jobmem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void forget_shards(struct jobmem *m)
{
	for (int i = 0; i < m->shard_last_n; i++)
		syncer_status_release(&m->shard_last[i]);
	free(m->shard_last);
	m->shard_last = NULL;
	m->shard_last_n = 0;
}

struct syncer_status *jobmem_shards(struct jobmem *m, int S)
{
	if (m->shard_last_n == S)
		return m->shard_last;
	forget_shards(m);
	if (!(m->shard_last = calloc((size_t)S, sizeof(*m->shard_last))))
		return NULL;
	for (int i = 0; i < S; i++)
		syncer_status_init(&m->shard_last[i]);
	m->shard_last_n = S;
	return m->shard_last;
}

void jobmem_table_init(struct jobmem_table *t)
{
	pthread_mutex_init(&t->mu, NULL);
	t->head = NULL;
}

void jobmem_table_release(struct jobmem_table *t)
{
	while (t->head)
		jobmem_drop(t, t->head->key);
	pthread_mutex_destroy(&t->mu);
}

struct jobmem *jobmem_get(struct jobmem_table *t, const char *key,
			  const char *uid, int n)
{
	struct jobmem *m;

	pthread_mutex_lock(&t->mu);
	for (m = t->head; m; m = m->next)
		if (!strcmp(m->key, key))
			break;
	if (m && (strcmp(m->uid, uid) || m->n != n)) {
		/* a new job under an old name, or another size: start over */
		free(m->learners);
		m->learners = calloc((size_t)n, sizeof(*m->learners));
		m->n = n;
		snprintf(m->uid, sizeof(m->uid), "%s", uid);
		memset(&m->progress, 0, sizeof(m->progress));
		memset(&m->evaluator, 0, sizeof(m->evaluator));
		forget_shards(m);
		m->resize_refused[0] = '\0';
		m->tls = m->tls_known = 0;
	}
	if (!m && (m = calloc(1, sizeof(*m)))) {
		snprintf(m->key, sizeof(m->key), "%s", key);
		snprintf(m->uid, sizeof(m->uid), "%s", uid);
		m->n = n;
		m->learners = calloc((size_t)n, sizeof(*m->learners));
		m->next = t->head;
		t->head = m;
	}
	pthread_mutex_unlock(&t->mu);
	return m && m->learners ? m : NULL;
}

void jobmem_drop(struct jobmem_table *t, const char *key)
{
	struct jobmem **pp, *m;

	pthread_mutex_lock(&t->mu);
	for (pp = &t->head; (m = *pp); pp = &m->next)
		if (!strcmp(m->key, key)) {
			*pp = m->next;
			forget_shards(m);
			free(m->learners);
			free(m);
			break;
		}
	pthread_mutex_unlock(&t->mu);
}

void jobmem_syncer_seen(struct jobmem *m, int shard, const char *uid,
			long restarts, const char *why, double now)
{
	long *count;

	if (shard < 0 || shard >= JOB_MAX_SHARDS)
		return;
	count = &m->syncer_restart_count[shard];
	if (strcmp(m->syncer_uid[shard], uid)) {
		snprintf(m->syncer_uid[shard], sizeof(m->syncer_uid[shard]), "%s", uid);
		*count = restarts;
		return;
	}
	for (; *count < restarts; (*count)++) {
		if (m->restart_n == JOBMEM_RESTARTS_KEPT) {
			memmove(m->restart_at, m->restart_at + 1,
				(JOBMEM_RESTARTS_KEPT - 1) * sizeof(double));
			m->restart_n--;
		}
		m->restart_at[m->restart_n++] = now;
	}
	if (why[0])
		snprintf(m->syncer_last_exit, sizeof(m->syncer_last_exit), "%s", why);
}

int jobmem_syncer_restarts(const struct jobmem *m, double now, int window)
{
	int k = 0;

	for (int i = 0; i < m->restart_n; i++)
		k += now - m->restart_at[i] <= window;
	return k;
}

int jobmem_event_repeated(struct jobmem *m, const char *reason,
			  const char *msg, double now)
{
	char text[JOBMEM_EVENT_TEXT];

	snprintf(text, sizeof(text), "%s: %s", reason, msg);
	for (int i = 0; i < JOBMEM_EVENTS_KEPT; i++)
		if (m->sent[i].at > 0 && now - m->sent[i].at < JOBMEM_EVENT_DEDUPE &&
		    !strcmp(m->sent[i].text, text))
			return 1;
	snprintf(m->sent[m->nsent % JOBMEM_EVENTS_KEPT].text, sizeof(m->sent[0].text),
		 "%s", text);
	m->sent[m->nsent++ % JOBMEM_EVENTS_KEPT].at = now;
	return 0;
}
