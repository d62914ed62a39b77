/*
 * exchange: the shared region and sockets between a learner and its
 * sidecar; the format is drawn in exchange.h.
 *
 * Shared words are read and written with __atomic builtins; slot payloads
 * are plain memcpy inside a sequence-counter critical section (writer:
 * seq odd, release fence, data, seq even with release, then the box
 * generation with release; reader: generation and seq with acquire, copy,
 * acquire fence, seq again). Each box has one writer: the sidecar writes
 * inboxes and pull rounds, the learner writes outboxes, served rounds,
 * applied generations and stats.
 *
 * The region is not trusted (docs/exchange.md, Trust): copy lengths and
 * slot places come from this process's fragment table, each side keeps
 * a private copy of the words it writes, and exchange_check rewrites and
 * counts any header, table or own word that is not what it must be.
 *
 * The learner keeps its private per-fragment state here too: the base
 * (fragment right after the last applied update), steps and tokens since
 * then, the base version, and the version of the oldest progress not
 * answered yet, which the next answer reports. A restarted learner starts over from the
 * inbox, so none of it needs to be shared.
 */
#include "common/exchange.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "common/exchange_layout.h"
#include "common/util.h"

#define READ_TRIES 8
#define MAX_GEN_JUMP ((uint64_t)1 << 40)   /* more answers lost: corrupt */

/* An outbox slot the sidecar sends from (exchange_hold_answer). */
struct exchange_hold {
	struct exchange *x;
	int p, k;               /* fragment, slot */
	uint64_t gen;           /* held generation, 0: none (under x->mu) */
};

struct exchange {
	enum exchange_role role;
	int refs;               /* 1 + holds not released */
	const struct frag_table *ft;
	int nfrags;
	int fd, sock;
	unsigned char *map;
	size_t size;
	struct xhdr *h;
	struct xfrag *f;
	size_t *slot_off;       /* per fragment: offset of inbox[0] */
	size_t *slot_size;      /* per fragment: bytes per slot */
	struct sockaddr_un own, peer;
	/* sidecar */
	uint64_t *taken;        /* outbox generation taken, per fragment */
	uint64_t *in_gen;       /* inbox generation we published, per fragment */
	uint64_t *in_version;   /* its version, per fragment */
	uint64_t *posted;       /* pull round we asked for, per fragment */
	uint64_t *taken_pub;    /* out_taken as we wrote it, per fragment */
	uint64_t *in_released;  /* inbox generation given back once applied */
	unsigned char *writing; /* an inbox slot begun, not committed (mu) */
	int give_back;          /* slots give their pages back (large model,
				 * or exchange_set_give_back) */
	struct exchange_hold *holds;   /* 2 per fragment: the region's
					* out_hold words, as we wrote them */
	pthread_mutex_t mu;     /* our own words and their copies: the
				 * sidecar writes from more than one thread */
	uint64_t done;          /* what we last wrote as done */
	uint64_t alpha_bits;    /* what we last wrote as α */
	/* learner: our own words of the region, kept here too */
	uint64_t *applied;      /* inbox generation applied, per fragment */
	uint64_t bad_alpha;     /* the out-of-range α last counted */
	uint64_t *served;       /* pull round answered, per fragment */
	uint64_t *out_gen;      /* outbox generation published, per fragment */
	uint64_t *released;     /* per outbox slot (2 per fragment): the
				 * generation whose pages we gave back */
	int no_punch;           /* the file system cannot give pages back */
	int started;
	float *base, *scratch;
	size_t *base_off;       /* per fragment: offset into base, in floats */
	uint64_t *steps, *tokens, *base_version;
	uint64_t *from_version; /* per fragment: the base version of the
				 * oldest progress not answered yet, the
				 * version its answer reports (α > 0 keeps
				 * a share across updates) */
	unsigned char *answered;   /* per fragment: answered since the update */
	uint64_t incarnation;
	uint64_t theta_round;   /* newest round of an update applied */
	uint64_t job_tokens;    /* newest job tokens of an update read */
	uint64_t ev_count;      /* evaluations reported */
	struct exchange_counters c;
	struct exchange_version self;   /* what this side speaks */
	char path[PATH_MAX_EXCH];
	char last_error[PATH_MAX_EXCH + 256];
};

#define LOAD(p)      __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define LOADR(p)     __atomic_load_n((p), __ATOMIC_RELAXED)
#define STORE(p, v)  __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define STORER(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define COUNT(x, field) __atomic_add_fetch(&(x)->c.field, 1, __ATOMIC_RELAXED)

/* Says what corruption was found last (exchange_last_error). */
static void __attribute__((format(printf, 2, 3)))
note(struct exchange *x, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(x->last_error, sizeof(x->last_error), fmt, ap);
	va_end(ap);
}

static uint64_t dbits(double d)
{
	uint64_t u;

	memcpy(&u, &d, sizeof(u));
	return u;
}

static double bitsd(uint64_t u)
{
	double d;

	memcpy(&d, &u, sizeof(d));
	return d;
}

static size_t align64(size_t n)
{
	return (n + 63) & ~(size_t)63;
}

static struct xslot *slot_at(struct exchange *x, int p, int box, uint64_t gen)
{
	/* box 0 = inbox, 1 = outbox; generation g lives in slot g mod 2 */
	size_t k = (size_t)box * 2 + (gen & 1);

	return (struct xslot *)(x->map + x->slot_off[p] + k * x->slot_size[p]);
}

static float *slot_data(struct xslot *s)
{
	return (float *)((unsigned char *)s + XSLOT_HDR);
}

static void slot_begin(struct xslot *s)
{
	uint64_t q = LOADR(&s->seq);

	STORER(&s->seq, (q + 1) | 1);
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

static void slot_end(struct xslot *s)
{
	STORE(&s->seq, LOADR(&s->seq) + 1);
}

/*
 * Gives back the pages of slot k (0, 1: inbox; 2, 3: outbox) of fragment
 * p, by its box's writer only (docs/exchange.md, Pages given back): under
 * the slot's sequence counter, with its generation word cleared, so a
 * reader that raced the release sees the counter move or a generation
 * that is not the one it looked for, and retries. Only whole pages of
 * the values go (the slot header and pages shared with a neighbour
 * stay); the region reads 0 there until the slot is written again.
 */
static void slot_release(struct exchange *x, int p, int k)
{
	size_t off = x->slot_off[p] + (size_t)k * x->slot_size[p];
	size_t lo = (off + XSLOT_HDR + 4095) & ~(size_t)4095;
	size_t hi = (off + x->slot_size[p]) & ~(size_t)4095;
	struct xslot *s = (struct xslot *)(x->map + off);

	if (!x->give_back || x->no_punch || hi <= lo)
		return;
	slot_begin(s);
	STORER(&s->gen, 0);
	STORER(&s->flags, XSLOT_RELEASED);
	if (fallocate(x->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		      (off_t)lo, (off_t)(hi - lo)))
		x->no_punch = 1;   /* the slot is whole: nothing was given */
	else
		COUNT(x, slots_released);
	slot_end(s);
}

/* A slot's header words into m (inside the reader's sequence check). */
static void slot_meta(const struct xslot *s, struct xslot *m)
{
	m->gen = LOADR(&s->gen);
	m->version = LOADR(&s->version);
	m->base_version = LOADR(&s->base_version);
	m->steps = LOADR(&s->steps);
	m->tokens = LOADR(&s->tokens);
	m->step = LOADR(&s->step);
	m->flags = LOADR(&s->flags);
}

/*
 * Copies generation *gen of a box (meta into m, data into buf when
 * want_data). 1 = copied, 0 = nothing newer than seen, -1 = kept racing
 * or the box is corrupt. The region is not trusted: the number of values
 * copied is this side's own (the fragment table), never the region's.
 */
static int box_read(struct exchange *x, int p, int box, uint64_t seen,
		    uint64_t *gen, struct xslot *m, float *buf, int want_data)
{
	uint64_t *genp = box ? &x->f[p].out_gen : &x->f[p].in_gen;
	size_t numel = x->ft->frags[p].numel;
	int mismatch = 0;

	for (int tries = 0; tries < READ_TRIES; tries++) {
		uint64_t g = LOAD(genp);
		struct xslot *s;
		uint64_t s1, s2;

		if (g == seen || g == 0)
			return 0;
		s = slot_at(x, p, box, g);
		s1 = LOAD(&s->seq);
		if (s1 & 1) {
			COUNT(x, torn_reads);
			mismatch = 0;
			continue;
		}
		slot_meta(s, m);
		if (want_data && (box == 0 || m->steps > 0))
			memcpy(buf, slot_data(s), numel * sizeof(float));
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		s2 = LOADR(&s->seq);
		if (s1 != s2) {
			COUNT(x, torn_reads);
			mismatch = 0;
			continue;
		}
		if (m->gen == 0 && (m->flags & XSLOT_RELEASED) &&
		    LOAD(genp) == g)
			return 0;   /* given back once applied: nothing to
				     * read until the next generation */
		if (m->gen != g) {
			/* a writer lapping us, or a generation that no slot
			 * holds (a corrupted word): look again */
			COUNT(x, torn_reads);
			mismatch = 1;
			continue;
		}
		*gen = g;
		return 1;
	}
	if (mismatch) {
		COUNT(x, corrupt_boxes);
		note(x, "exchange: '%s': %s of fragment %d has generation "
			 "%llu, which no slot holds; ignored", x->path,
			 box ? "outbox" : "inbox", p,
			 (unsigned long long)LOAD(genp));
	}
	return -1;
}

/* Builds the whole region in a temporary file and links it into place;
 * 0 when it is in place (made by us or by the other side). */
static int create_region(const char *path, const struct frag_table *ft,
			 size_t size, size_t data_off, struct err *e)
{
	char tmp[PATH_MAX_EXCH];
	struct xhdr *h;
	struct xfrag *f;
	void *m;
	int fd, rc = -1;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >=
	    (int)sizeof(tmp))
		return err_set(e, "exchange: path too long: '%s'", path);
	fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC, 0660);
	if (fd < 0)
		return err_set(e, "exchange: cannot create '%s': %s", tmp,
			       strerror(errno));
	if (ftruncate(fd, (off_t)size)) {
		err_set(e, "exchange: cannot size '%s' to %zu bytes: %s", tmp,
			size, strerror(errno));
		goto out;
	}
	m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		err_set(e, "exchange: cannot map '%s': %s", tmp, strerror(errno));
		goto out;
	}
	h = m;
	h->magic = XMAGIC;
	h->layout = XLAYOUT;
	h->nfrags = (uint32_t)ft->nfrags;
	h->size = size;
	h->fingerprint = ft->fingerprint;
	h->data_off = data_off;
	f = (struct xfrag *)((unsigned char *)m + XHDR_SIZE);
	for (int p = 0; p < ft->nfrags; p++)
		f[p].numel = ft->frags[p].numel;
	munmap(m, size);
	if (link(tmp, path) && errno != EEXIST) {
		err_set(e, "exchange: cannot link '%s': %s", path,
			strerror(errno));
		goto out;
	}
	rc = 0;
out:
	close(fd);
	unlink(tmp);
	return rc;
}

/*
 * Rewrites one word of the region that is not what it must be, unless it
 * changed meanwhile (compare-and-swap: a word of the other side is only
 * replaced while it still holds the bad value). Counts it and says which.
 */
static int fix_word(struct exchange *x, uint64_t *w, uint64_t bad,
		    uint64_t want, const char *what, int p)
{
	char where[32] = "";
	uint64_t expect = bad;

	if (p >= 0)
		snprintf(where, sizeof(where), " of fragment %d", p);
	__atomic_compare_exchange_n(w, &expect, want, 0, __ATOMIC_ACQ_REL,
				    __ATOMIC_RELAXED);
	COUNT(x, corrupt_headers);
	note(x, "exchange: '%s': %s%s is %llu (0x%llx), expected %llu; "
		 "rewritten", x->path, what, where, (unsigned long long)bad,
		 (unsigned long long)bad, (unsigned long long)want);
	return 1;
}

/* Layout and P share one word (two uint32); both are constants. */
static uint64_t layout_word(uint32_t layout, uint32_t nfrags)
{
	struct xhdr h = { .layout = layout, .nfrags = nfrags };
	uint64_t w;

	memcpy(&w, &h.layout, sizeof(w));
	return w;
}

static int check_words(struct exchange *x);

int exchange_check(struct exchange *x)
{
	int n;

	pthread_mutex_lock(&x->mu);
	n = check_words(x);
	pthread_mutex_unlock(&x->mu);
	return n;
}

static int check_words(struct exchange *x)
{
	struct xhdr *h = x->h;
	uint64_t *lw = &h->size - 1;    /* the layout and P word */
	uint64_t v, want;
	int n = 0;

	_Static_assert(offsetof(struct xhdr, size) ==
		       offsetof(struct xhdr, layout) + 8, "layout word");
	/* the constants: this side's table says what they are */
	if ((v = LOAD(&h->magic)) != XMAGIC)
		n += fix_word(x, &h->magic, v, XMAGIC, "magic", -1);
	want = layout_word(XLAYOUT, (uint32_t)x->nfrags);
	if ((v = LOAD(lw)) != want)
		n += fix_word(x, lw, v, want, "layout and fragment count", -1);
	if ((v = LOAD(&h->size)) != x->size)
		n += fix_word(x, &h->size, v, x->size, "region size", -1);
	if ((v = LOAD(&h->fingerprint)) != x->ft->fingerprint)
		n += fix_word(x, &h->fingerprint, v, x->ft->fingerprint,
			      "fingerprint", -1);
	if ((v = LOAD(&h->data_off)) != x->slot_off[0])
		n += fix_word(x, &h->data_off, v, x->slot_off[0], "data offset",
			      -1);
	for (int p = 0; p < x->nfrags; p++)
		if ((v = LOAD(&x->f[p].numel)) != x->ft->frags[p].numel)
			n += fix_word(x, &x->f[p].numel, v,
				      x->ft->frags[p].numel, "number of values",
				      p);
	/* the state words: our own ones from our copy; done must be 0 or 1 */
	if (x->role == EXCHANGE_SIDECAR) {
		if ((v = LOAD(&h->done)) != x->done)
			n += fix_word(x, &h->done, v, x->done, "done flag", -1);
		if ((v = LOAD(&h->alpha_bits)) != x->alpha_bits)
			n += fix_word(x, &h->alpha_bits, v, x->alpha_bits,
				      "alpha", -1);
		for (int p = 0; p < x->nfrags; p++) {
			if ((v = LOAD(&x->f[p].in_gen)) != x->in_gen[p])
				n += fix_word(x, &x->f[p].in_gen, v,
					      x->in_gen[p], "inbox generation",
					      p);
			if ((v = LOAD(&x->f[p].pull_round)) != x->posted[p])
				n += fix_word(x, &x->f[p].pull_round, v,
					      x->posted[p], "pull round", p);
			if ((v = LOAD(&x->f[p].out_taken)) != x->taken_pub[p])
				n += fix_word(x, &x->f[p].out_taken, v,
					      x->taken_pub[p],
					      "taken outbox generation", p);
			for (int k = 0; k < 2; k++)
				if ((v = LOAD(&x->f[p].out_hold[k])) !=
				    x->holds[2 * p + k].gen)
					n += fix_word(x, &x->f[p].out_hold[k], v,
						      x->holds[2 * p + k].gen,
						      "held outbox slot", p);
		}
	} else {
		if ((v = LOAD(&h->done)) > 1)
			n += fix_word(x, &h->done, v, 0, "done flag", -1);
		if ((v = LOAD(&h->hold_incarnation)) != x->incarnation)
			n += fix_word(x, &h->hold_incarnation, v, x->incarnation,
				      "hold incarnation", -1);
		for (int p = 0; p < x->nfrags; p++) {
			if ((v = LOAD(&x->f[p].in_applied)) != x->applied[p])
				n += fix_word(x, &x->f[p].in_applied, v,
					      x->applied[p],
					      "applied generation", p);
			if ((v = LOAD(&x->f[p].pull_served)) != x->served[p])
				n += fix_word(x, &x->f[p].pull_served, v,
					      x->served[p], "served round", p);
			if ((v = LOAD(&x->f[p].out_gen)) != x->out_gen[p])
				n += fix_word(x, &x->f[p].out_gen, v,
					      x->out_gen[p],
					      "outbox generation", p);
		}
	}
	return n;
}

const char *exchange_last_error(const struct exchange *x)
{
	return x->last_error;
}

/*
 * At attach: a region made for another model or layout is refused; one
 * whose other constants are wrong (a corrupted header) is repaired.
 */
static int check_region(struct exchange *x, const char *path, struct err *e)
{
	const struct frag_table *ft = x->ft;
	struct xhdr *h = x->h;

	if (h->magic == XMAGIC && h->layout != XLAYOUT)
		return err_set(e, "exchange: '%s' has layout %u, this build "
			       "reads %u", path, h->layout, XLAYOUT);
	if (h->magic == XMAGIC &&
	    (h->fingerprint != ft->fingerprint ||
	     h->nfrags != (uint32_t)ft->nfrags))
		return err_set(e, "exchange: '%s' was made for model fingerprint "
			       "%016llx with %u fragments, this one is %016llx "
			       "with %d", path, (unsigned long long)h->fingerprint,
			       h->nfrags, (unsigned long long)ft->fingerprint,
			       ft->nfrags);
	return 0;
}

static int open_socket(struct exchange *x, const char *dir, struct err *e)
{
	const char *own = x->role == EXCHANGE_LEARNER ? EXCHANGE_LEARNER_SOCK
						      : EXCHANGE_SIDECAR_SOCK;
	const char *peer = x->role == EXCHANGE_LEARNER ? EXCHANGE_SIDECAR_SOCK
						       : EXCHANGE_LEARNER_SOCK;
	int n1, n2;

	x->own.sun_family = AF_UNIX;
	x->peer.sun_family = AF_UNIX;
	n1 = snprintf(x->own.sun_path, sizeof(x->own.sun_path), "%s/%s", dir, own);
	n2 = snprintf(x->peer.sun_path, sizeof(x->peer.sun_path), "%s/%s", dir,
		      peer);
	if (n1 < 0 || n2 < 0 || (size_t)n1 >= sizeof(x->own.sun_path) ||
	    (size_t)n2 >= sizeof(x->peer.sun_path))
		return err_set(e, "exchange: folder '%s' is too long for a Unix "
			       "socket path (at most %zu bytes)", dir,
			       sizeof(x->own.sun_path) - 14);
	x->sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (x->sock < 0)
		return err_set(e, "exchange: socket: %s", strerror(errno));
	unlink(x->own.sun_path);   /* left by an earlier incarnation */
	if (bind(x->sock, (struct sockaddr *)&x->own, sizeof(x->own)))
		return err_set(e, "exchange: cannot bind '%s': %s",
			       x->own.sun_path, strerror(errno));
	return 0;
}

static int learner_alloc(struct exchange *x)
{
	size_t total = 0, maxn = 0;
	int P = x->nfrags;

	x->base_off = calloc((size_t)P, sizeof(size_t));
	x->steps = calloc((size_t)P, sizeof(uint64_t));
	x->tokens = calloc((size_t)P, sizeof(uint64_t));
	x->base_version = calloc((size_t)P, sizeof(uint64_t));
	x->from_version = calloc((size_t)P, sizeof(uint64_t));
	x->answered = calloc((size_t)P, 1);
	if (!x->base_off || !x->steps || !x->tokens || !x->base_version ||
	    !x->from_version || !x->answered)
		return -1;
	for (int p = 0; p < P; p++) {
		x->base_off[p] = total;
		total += x->ft->frags[p].numel;
		if (x->ft->frags[p].numel > maxn)
			maxn = x->ft->frags[p].numel;
	}
	x->base = malloc((total ? total : 1) * sizeof(float));
	x->scratch = malloc((maxn ? maxn : 1) * sizeof(float));
	return x->base && x->scratch ? 0 : -1;
}

/* Where each fragment's four slots start, after the header and the table
 * rounded up to a page, and the region's size. */
static int lay_out(struct exchange *x, const struct frag_table *ft,
		   struct err *e)
{
	size_t off = XHDR_SIZE + align64((size_t)ft->nfrags * sizeof(struct xfrag));

	off = (off + 4095) & ~(size_t)4095;
	for (int p = 0; p < ft->nfrags; p++) {
		size_t numel = ft->frags[p].numel;

		if (numel > ((size_t)1 << 34))
			return err_set(e, "exchange: fragment %d has %zu values (too many)",
				       p, numel);
		x->slot_off[p] = off;
		x->slot_size[p] = align64(XSLOT_HDR + numel * sizeof(float));
		off += 4 * x->slot_size[p];
	}
	x->size = off;
	return 0;
}

int exchange_open(const char *dir, enum exchange_role role,
		  const struct frag_table *ft, struct exchange **out,
		  struct err *e)
{
	struct exchange_version v;

	exchange_version_self(&v);
	return exchange_open_version(dir, role, ft, &v, out, e);
}

/* Long because opening is one sequence that unwinds at one label: the
 * per-fragment words, the layout, the file made or opened, the versions
 * met, mapped and checked, then this role's words taken up from the
 * region. */
int exchange_open_version(const char *dir, enum exchange_role role,
			  const struct frag_table *ft,
			  const struct exchange_version *self,
			  struct exchange **out, struct err *e)
{
	char path[PATH_MAX_EXCH];
	struct exchange *x;
	struct stat st;
	size_t model = 0;   /* float32 bytes */
	int n, rc = -1;

	if (ft->nfrags < 1 || ft->nfrags > EXCHANGE_MAX_FRAGS)
		return err_set(e, "exchange: %d fragments (1 to %d allowed)",
			       ft->nfrags, EXCHANGE_MAX_FRAGS);
	n = snprintf(path, sizeof(path), "%s/%s", dir, EXCHANGE_FILE);
	if (n < 0 || (size_t)n >= sizeof(path) - 32)
		return err_set(e, "exchange: folder name too long: '%s'", dir);
	x = calloc(1, sizeof(*x));
	if (!x)
		return err_set(e, "exchange: out of memory");
	x->role = role;
	x->self = *self;
	x->refs = 1;
	pthread_mutex_init(&x->mu, NULL);
	x->ft = ft;
	x->nfrags = ft->nfrags;
	x->fd = -1;
	x->sock = -1;
	x->slot_off = calloc((size_t)ft->nfrags, sizeof(size_t));
	x->slot_size = calloc((size_t)ft->nfrags, sizeof(size_t));
	x->taken = calloc((size_t)ft->nfrags, sizeof(uint64_t));
	x->in_gen = calloc((size_t)ft->nfrags, sizeof(uint64_t));
	x->in_version = calloc((size_t)ft->nfrags, sizeof(uint64_t));
	x->posted = calloc((size_t)ft->nfrags, sizeof(uint64_t));
	x->taken_pub = calloc((size_t)ft->nfrags, sizeof(uint64_t));
	x->released = calloc((size_t)ft->nfrags * 2, sizeof(uint64_t));
	x->in_released = calloc((size_t)ft->nfrags, sizeof(uint64_t));
	x->writing = calloc((size_t)ft->nfrags, 1);
	x->applied = calloc((size_t)ft->nfrags, sizeof(uint64_t));
	x->served = calloc((size_t)ft->nfrags, sizeof(uint64_t));
	x->out_gen = calloc((size_t)ft->nfrags, sizeof(uint64_t));
	x->holds = calloc((size_t)ft->nfrags * 2, sizeof(*x->holds));
	snprintf(x->path, sizeof(x->path), "%s", path);
	if (!x->slot_off || !x->slot_size || !x->taken || !x->in_gen ||
	    !x->in_version || !x->posted || !x->applied || !x->served ||
	    !x->out_gen || !x->holds || !x->taken_pub || !x->released ||
	    !x->in_released || !x->writing ||
	    (role == EXCHANGE_LEARNER && learner_alloc(x))) {
		err_set(e, "exchange: out of memory");
		goto fail;
	}
	if (lay_out(x, ft, e) || mkdir_p(dir, e))
		goto fail;
	if (access(path, F_OK) &&
	    create_region(path, ft, x->size,
			  x->slot_off[0], e))
		goto fail;
	x->fd = open(path, O_RDWR | O_CLOEXEC);
	if (x->fd < 0) {
		err_set(e, "exchange: cannot open '%s': %s", path, strerror(errno));
		goto fail;
	}
	/* the versions first: a region of another release may have another
	 * size and layout (docs/exchange.md, Versions) */
	if ((rc = xver_meet_fd(x->fd, role, self, e)))
		goto fail;
	rc = -1;
	if (fstat(x->fd, &st) || (size_t)st.st_size != x->size) {
		err_set(e, "exchange: '%s' has %lld bytes, this model needs %zu "
			"(made for another job?)", path, (long long)st.st_size,
			x->size);
		goto fail;
	}
	/* a small model's region is populated up front (no page faults in
	 * the middle of a step); a large model's is not: a slot's pages are
	 * taken when it is written and given back when no one needs them
	 * (docs/exchange.md, Pages given back) */
	for (int p = 0; p < ft->nfrags; p++)
		model += ft->frags[p].numel * sizeof(float);
	x->give_back = model >= EXCHANGE_GIVE_BACK_BYTES;
	x->map = mmap(NULL, x->size, PROT_READ | PROT_WRITE,
		      MAP_SHARED | (x->give_back ? 0 : MAP_POPULATE), x->fd, 0);
	if (x->map == MAP_FAILED) {
		x->map = NULL;
		err_set(e, "exchange: cannot map '%s': %s", path, strerror(errno));
		goto fail;
	}
	x->h = (struct xhdr *)x->map;
	x->f = (struct xfrag *)(x->map + XHDR_SIZE);
	if (check_region(x, path, e))
		goto fail;
	if (open_socket(x, dir, e))
		goto fail;
	/* our own words go on from where the region has them */
	for (int p = 0; p < x->nfrags; p++) {
		x->in_gen[p] = LOAD(&x->f[p].in_gen);
		x->posted[p] = LOAD(&x->f[p].pull_round);
		x->applied[p] = LOAD(&x->f[p].in_applied);
		x->served[p] = LOAD(&x->f[p].pull_served);
		x->out_gen[p] = LOAD(&x->f[p].out_gen);
	}
	if (role == EXCHANGE_SIDECAR) {
		double a = bitsd(LOAD(&x->h->alpha_bits));

		x->alpha_bits = a >= 0.0 && a < 1.0 ? dbits(a) : 0;
		for (int p = 0; p < x->nfrags; p++) {
			uint64_t g = x->in_gen[p];
			struct xslot *s = slot_at(x, p, 0, g);

			if (g && LOAD(&s->gen) == g)
				x->in_version[p] = LOAD(&s->version);
			/* answers left from an earlier sidecar belong to
			 * its stream, and so do the slots it held */
			x->taken[p] = x->out_gen[p];
			x->taken_pub[p] = x->out_gen[p];
			__atomic_store_n(&x->f[p].out_taken, x->out_gen[p],
					 __ATOMIC_SEQ_CST);
			for (int k = 0; k < 2; k++) {
				x->holds[2 * p + k] = (struct exchange_hold){
					.x = x, .p = p, .k = k };
				__atomic_store_n(&x->f[p].out_hold[k], 0,
						 __ATOMIC_SEQ_CST);
			}
		}
		STORE(&x->h->sidecar_pid, (uint64_t)getpid());
		STORE(&x->h->done, 0);
	} else {
		x->incarnation = ((uint64_t)(clock_wall() * 1e6) << 16) ^
				 (uint64_t)getpid();
		if (!x->incarnation)
			x->incarnation = 1;
		/* this build keeps off a held outbox slot (serve_pull) */
		STORE(&x->h->hold_incarnation, x->incarnation);
	}
	exchange_check(x);   /* a corrupted header is counted and repaired */
	*out = x;
	return 0;
fail:
	exchange_close(x);
	return rc;
}

int exchange_versions(struct exchange *x, struct err *e)
{
	return xver_meet(x->h, x->role, &x->self, e);
}

int exchange_peer_version(struct exchange *x, struct exchange_version *v)
{
	return xver_peer(x->h, x->role, v);
}

static void exchange_free(struct exchange *x)
{
	if (x->map)
		munmap(x->map, x->size);
	if (x->fd >= 0)
		close(x->fd);
	free(x->slot_off);
	free(x->slot_size);
	free(x->taken);
	free(x->in_gen);
	free(x->in_version);
	free(x->posted);
	free(x->taken_pub);
	free(x->released);
	free(x->in_released);
	free(x->writing);
	free(x->applied);
	free(x->served);
	free(x->out_gen);
	free(x->holds);
	free(x->base);
	free(x->scratch);
	free(x->base_off);
	free(x->steps);
	free(x->tokens);
	free(x->base_version);
	free(x->from_version);
	free(x->answered);
	pthread_mutex_destroy(&x->mu);
	free(x);
}

/* The region stays mapped until the last held slot is released: gRPC may
 * let go of a slice after the sidecar is done. */
static void exchange_unref(struct exchange *x)
{
	if (__atomic_sub_fetch(&x->refs, 1, __ATOMIC_ACQ_REL) == 0)
		exchange_free(x);
}

void exchange_close(struct exchange *x)
{
	if (!x)
		return;
	if (x->sock >= 0) {
		close(x->sock);
		unlink(x->own.sun_path);
		x->sock = -1;
	}
	exchange_unref(x);
}

static void notify(struct exchange *x)
{
	char b = 1;

	/* the other side may be away: a lost wake-up is harmless */
	(void)sendto(x->sock, &b, 1, MSG_DONTWAIT, (struct sockaddr *)&x->peer,
		     sizeof(x->peer));
}

int exchange_wait(struct exchange *x, double timeout)
{
	struct pollfd pfd = { .fd = x->sock, .events = POLLIN };
	char b[64];
	int got = 0, ms = timeout > 0 ? (int)(timeout * 1000 + 0.5) : 0;

	if (poll(&pfd, 1, ms) > 0)
		while (recv(x->sock, b, sizeof(b), MSG_DONTWAIT) > 0)
			got = 1;
	return got;
}

/* ---- learner side ---- */

void exchange_put_stats(struct exchange *x, const struct exchange_step *st)
{
	struct xhdr *h = x->h;
	uint64_t q = LOADR(&h->st_seq);

	STORER(&h->st_seq, (q + 1) | 1);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	STORER(&h->st_incarnation, x->incarnation);
	STORER(&h->st_pid, (uint64_t)getpid());
	STORER(&h->st_step, st->step);
	STORER(&h->st_tokens, st->tokens_total);
	STORER(&h->st_loss, dbits(st->loss));
	STORER(&h->st_step_time, dbits(st->step_time));
	STORER(&h->st_wall, dbits(clock_wall()));
	STORE(&h->st_seq, LOADR(&h->st_seq) + 1);
}

/*
 * Applies Θ (in scratch) to fragment p of params with mixing alpha, and
 * the same mix to its base (docs/design.md §3, Learner):
 *   θ ← α·θ + (1−α)·Θ,  base ← α·base + (1−α)·Θ
 * so θ − base, the progress not yet answered, becomes α·(θ − base): the α
 * share of it that θ keeps is still reported by the next answer. With
 * α = 0 both are Θ.
 */
static void apply_update(struct exchange *x, int p, float *params,
			 const float *theta, double alpha)
{
	const struct frag_table *ft = x->ft;
	const struct fragment *fr = &ft->frags[p];
	float *base = x->base + x->base_off[p];
	float a = (float)alpha, b = (float)(1.0 - alpha);
	size_t k = 0;

	for (int j = 0; j < fr->ntensors; j++) {
		const struct frag_tensor *t = &ft->tensors[fr->tensors[j]];
		float *w = params + t->offset, *bs = base + k;
		const float *g = theta + k;

		if (alpha == 0.0) {
			memcpy(w, g, t->numel * sizeof(float));
			memcpy(bs, g, t->numel * sizeof(float));
		} else {
			for (size_t i = 0; i < t->numel; i++) {
				w[i] = a * w[i] + b * g[i];
				bs[i] = a * bs[i] + b * g[i];
			}
		}
		k += t->numel;
	}
}

int exchange_learner_start(struct exchange *x, float *params)
{
	uint64_t gen;
	struct xslot m;

	exchange_check(x);
	for (int p = 0; p < x->nfrags; p++)
		if (LOAD(&x->f[p].in_gen) == 0)
			return 0;
	for (int p = 0; p < x->nfrags; p++) {
		if (box_read(x, p, 0, 0, &gen, &m, x->scratch, 1) != 1)
			return 0;   /* being rewritten: try again */
		apply_update(x, p, params, x->scratch, 0.0);
		x->base_version[p] = x->from_version[p] = m.version;
		if (p == 0 || m.step > x->theta_round)
			x->theta_round = m.step;
		if (p == 0 || m.tokens > x->job_tokens)
			x->job_tokens = m.tokens;
		x->steps[p] = x->tokens[p] = 0;
		x->answered[p] = 0;
		x->applied[p] = gen;
		STORE(&x->f[p].in_applied, gen);
	}
	x->started = 1;
	return 1;
}

/* d = b − w, then b = w: the answered progress leaves the base;
 * separate arrays, so the loop vectorises. d (the outbox slot) is
 * written with streaming stores where the CPU has them: nothing reads
 * it back here, and a plain store would first read each line of it. */
static void delta_plain(float *restrict d, float *restrict b,
			const float *restrict w, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		d[i] = b[i] - w[i];
		b[i] = w[i];
	}
}

static void delta(float *restrict d, float *restrict b,
		  const float *restrict w, size_t n)
{
	size_t i = 0;

#ifdef __SSE2__
	/* up to d's first 16-byte boundary, then 4 at a time */
	i = (16 - ((uintptr_t)d & 15)) / sizeof(float) % 4;
	if (i > n)
		i = n;
	delta_plain(d, b, w, i);
	for (; i + 4 <= n; i += 4) {
		__m128 bv = _mm_loadu_ps(b + i), wv = _mm_loadu_ps(w + i);

		_mm_stream_ps(d + i, _mm_sub_ps(bv, wv));
		_mm_storeu_ps(b + i, wv);
	}
	/* streaming stores are weakly ordered: done before the slot's
	 * sequence counter says so */
	_mm_sfence();
#endif
	delta_plain(d + i, b + i, w + i, n - i);
}

/*
 * Answers round on fragment p with Δ = base − θ and the counters since
 * the base, then moves the base to θ and zeroes the counters: no step is
 * in two answers (docs/design.md §3, Learner). The outbox slot is written
 * before the base moves, under its sequence counter. 0 = not now: the
 * sidecar is still sending the generation in that slot (docs/exchange.md,
 * Answers sent from the region); the pull stays pending, the steps count
 * on, and a later poll answers it.
 */
static int serve_pull(struct exchange *x, int p, uint64_t round,
		      const float *params, uint64_t step)
{
	const struct frag_table *ft = x->ft;
	const struct fragment *fr = &ft->frags[p];
	uint64_t gen = x->out_gen[p] + 1;
	struct xslot *s = slot_at(x, p, 1, gen);
	float *base = x->base + x->base_off[p];
	float *d = slot_data(s);
	size_t k = 0;

	/* after our publication of gen − 1 (sequentially consistent, as
	 * the sidecar's hold and its look at out_gen) */
	if (gen > 2 && __atomic_load_n(&x->f[p].out_hold[gen & 1],
				       __ATOMIC_SEQ_CST) == gen - 2) {
		COUNT(x, pulls_held);
		return 0;
	}
	slot_begin(s);
	STORER(&s->gen, gen);
	STORER(&s->version, round);
	STORER(&s->base_version, x->from_version[p]);
	STORER(&s->steps, x->steps[p]);
	STORER(&s->tokens, x->tokens[p]);
	STORER(&s->step, step);
	STORER(&s->flags, 0);
	if (x->steps[p] > 0) {
		for (int j = 0; j < fr->ntensors; j++) {
			const struct frag_tensor *t = &ft->tensors[fr->tensors[j]];

			delta(d + k, base + k, params + t->offset, t->numel);
			k += t->numel;
		}
	}
	slot_end(s);
	x->out_gen[p] = gen;
	x->served[p] = round;
	__atomic_store_n(&x->f[p].out_gen, gen, __ATOMIC_SEQ_CST);
	STORE(&x->f[p].pull_served, round);
	if (x->answered[p])
		COUNT(x, pulls_before_update);
	x->answered[p] = 1;
	x->steps[p] = x->tokens[p] = 0;
	x->from_version[p] = x->base_version[p];
	COUNT(x, pulls_served);
	return 1;
}

/*
 * Gives back the pages of outbox slots whose answers the sidecar is done
 * with (out_taken) and does not hold. The word is the sidecar's and not
 * trusted further than this: a value past what we published is taken as
 * what we published (a corrupted word loses at most the answers it
 * names, never a copy out of bounds).
 */
static void release_answers(struct exchange *x, int p)
{
	uint64_t g = x->out_gen[p], t = LOAD(&x->f[p].out_taken);

	if (t > g)
		t = g;
	for (uint64_t sg = g > 1 ? g - 1 : 1; sg && sg <= t; sg++) {
		int k = (int)(sg & 1);

		if (x->released[2 * p + k] == sg ||
		    __atomic_load_n(&x->f[p].out_hold[k], __ATOMIC_SEQ_CST) == sg)
			continue;
		slot_release(x, p, 2 + k);
		x->released[2 * p + k] = sg;
	}
}

void exchange_pending(struct exchange *x, uint8_t *reads, uint8_t *writes)
{
	for (int p = 0; p < x->nfrags; p++) {
		uint64_t r = LOAD(&x->f[p].pull_round), g = LOAD(&x->f[p].in_gen);

		if (reads)
			reads[p] = r && r != x->served[p];
		if (writes)
			writes[p] = g && g != x->applied[p];
	}
}

void exchange_poll(struct exchange *x, float *params,
		   const struct exchange_step *st,
		   struct exchange_poll_result *res)
{
	exchange_poll_only(x, params, st, res, NULL, NULL, NULL);
}

void exchange_poll_only(struct exchange *x, float *params,
			const struct exchange_step *st,
			struct exchange_poll_result *res, const uint8_t *reads,
			const uint8_t *writes, uint8_t *wrote)
{
	double alpha;
	int applied = 0, served = 0, repaired;

	repaired = exchange_check(x);
	alpha = bitsd(LOAD(&x->h->alpha_bits));
	exchange_put_stats(x, st);
	for (int p = 0; p < x->nfrags; p++) {
		x->steps[p] += 1;
		x->tokens[p] += st->tokens;
	}
	for (int p = 0; p < x->nfrags; p++) {
		uint64_t r = LOAD(&x->f[p].pull_round);

		if (r && r != x->served[p] && (!reads || reads[p]))
			served += serve_pull(x, p, r, params, st->step);
	}
	if (wrote)
		memset(wrote, 0, (size_t)x->nfrags);
	if (!(alpha >= 0.0 && alpha < 1.0)) {
		/* the sidecar's word: it repairs it, we count what we saw */
		uint64_t bits = dbits(alpha);

		if (bits != x->bad_alpha) {
			x->bad_alpha = bits;
			COUNT(x, corrupt_headers);
			note(x, "exchange: '%s': alpha is %g (0 <= alpha < 1); "
				 "0 used", x->path, alpha);
			repaired++;
		}
		alpha = 0.0;
	}
	for (int p = 0; p < x->nfrags; p++) {
		uint64_t seen = x->applied[p], gen;
		struct xslot m;

		if ((writes && !writes[p]) ||
		    box_read(x, p, 0, seen, &gen, &m, x->scratch, 1) != 1)
			continue;
		if (m.tokens > x->job_tokens)
			x->job_tokens = m.tokens;
		if (m.version == x->base_version[p]) {
			COUNT(x, updates_skipped);
		} else {
			apply_update(x, p, params, x->scratch, alpha);
			if (wrote)
				wrote[p] = 1;
			x->base_version[p] = m.version;
			if (m.step > x->theta_round)
				x->theta_round = m.step;
			x->answered[p] = 0;
			/* α > 0 keeps α·(θ − base) of these steps to answer,
			 * and the next answer reports the version they were
			 * trained from, the oldest it holds: after a lone
			 * stretch the syncer's staleVersions rule must see
			 * it (docs/exchange.md, The learner side) */
			if (alpha == 0.0)
				x->steps[p] = x->tokens[p] = 0;
			if (alpha == 0.0 || x->steps[p] == 0)
				x->from_version[p] = m.version;
			COUNT(x, updates_applied);
			applied++;
		}
		x->applied[p] = gen;
		STORE(&x->f[p].in_applied, gen);
	}
	for (int p = 0; p < x->nfrags; p++)
		release_answers(x, p);
	if (served)
		notify(x);
	if (res) {
		res->applied = applied;
		res->served = served;
		res->done = LOAD(&x->h->done) == 1;
		res->repaired = repaired;
	}
}

/* ---- sidecar side ---- */

int exchange_nfrags(const struct exchange *x)
{
	return x->nfrags;
}

size_t exchange_frag_numel(const struct exchange *x, int p)
{
	return x->ft->frags[p].numel;
}

float *exchange_inbox_begin(struct exchange *x, int p)
{
	struct xslot *s = slot_at(x, p, 0, x->in_gen[p] + 1);

	pthread_mutex_lock(&x->mu);
	x->writing[p] = 1;   /* exchange_release_applied keeps off */
	pthread_mutex_unlock(&x->mu);
	slot_begin(s);
	return slot_data(s);
}

void exchange_inbox_commit(struct exchange *x, int p, uint64_t version)
{
	exchange_inbox_commit_round(x, p, version, 0, 0);
}

void exchange_inbox_commit_round(struct exchange *x, int p, uint64_t version,
				 uint64_t round, uint64_t tokens)
{
	uint64_t gen = x->in_gen[p] + 1;
	struct xslot *s = slot_at(x, p, 0, gen);

	STORER(&s->gen, gen);
	STORER(&s->version, version);
	STORER(&s->tokens, tokens);
	STORER(&s->step, round);
	STORER(&s->flags, 0);
	slot_end(s);
	if (LOAD(&x->f[p].in_applied) != gen - 1)
		COUNT(x, updates_superseded);
	pthread_mutex_lock(&x->mu);
	x->in_gen[p] = gen;
	x->in_version[p] = version;
	x->writing[p] = 0;
	STORE(&x->f[p].in_gen, gen);
	pthread_mutex_unlock(&x->mu);
	COUNT(x, updates_published);
	notify(x);
	/* gen − 1 is superseded: a learner reads gen, and a restarted one
	 * starts from gen too */
	if (gen > 1)
		slot_release(x, p, (int)((gen - 1) & 1));
}

void exchange_set_give_back(struct exchange *x, int on)
{
	x->give_back = on;
}

int exchange_gives_back(const struct exchange *x)
{
	return x->give_back;
}

int exchange_release_applied(struct exchange *x)
{
	int n = 0;

	if (!x->give_back)
		return 0;
	for (int p = 0; p < x->nfrags; p++) {
		uint64_t g;

		/* under mu: no update of p is being written meanwhile (the
		 * slot of g + 1 is the other one, but a commit would move
		 * g, and g + 2 goes where g is) */
		pthread_mutex_lock(&x->mu);
		g = x->in_gen[p];
		if (g && !x->writing[p] && x->in_released[p] != g &&
		    LOAD(&x->f[p].in_applied) == g) {
			slot_release(x, p, (int)(g & 1));
			x->in_released[p] = g;
			n++;
		}
		pthread_mutex_unlock(&x->mu);
	}
	return n;
}

uint64_t exchange_inbox_version(struct exchange *x, int p)
{
	return x->in_version[p];
}

void exchange_post_pull(struct exchange *x, int p, uint64_t round)
{
	uint64_t old = x->posted[p];

	if (old && old != LOAD(&x->f[p].pull_served))
		COUNT(x, pulls_superseded);
	pthread_mutex_lock(&x->mu);
	x->posted[p] = round;
	STORE(&x->f[p].pull_round, round);
	pthread_mutex_unlock(&x->mu);
	COUNT(x, pulls_posted);
	notify(x);   /* a learner that waits answers at once */
}

/* Takes outbox generation gen of p, read into m, as the answer a; 0 when
 * it is impossible (counted, passed over). */
static int take(struct exchange *x, int p, uint64_t gen,
		const struct xslot *m, struct exchange_answer *a)
{
	/* generations only grow, and no answer has more steps since its
	 * base than the learner made in all: else the box is corrupt, and
	 * it is passed over (the learner's next answer is taken) */
	if (gen < x->taken[p] || gen - x->taken[p] > MAX_GEN_JUMP ||
	    m->steps > m->step) {
		COUNT(x, corrupt_boxes);
		note(x, "exchange: '%s': outbox of fragment %d has generation "
			 "%llu after %llu, steps %llu at step %llu; ignored",
			 x->path, p, (unsigned long long)gen,
			 (unsigned long long)x->taken[p],
			 (unsigned long long)m->steps,
			 (unsigned long long)m->step);
		x->taken[p] = gen;
		return 0;
	}
	if (gen > x->taken[p] + 1)
		__atomic_add_fetch(&x->c.answers_lost, gen - x->taken[p] - 1,
				   __ATOMIC_RELAXED);
	x->taken[p] = gen;
	a->round = m->version;
	a->base_version = m->base_version;
	a->steps = m->steps;
	a->tokens = m->tokens;
	a->step = m->step;
	COUNT(x, answers_taken);
	return 1;
}

/* Tells the learner that outbox generations up to gen are done with:
 * their slots' pages may go (docs/exchange.md, Pages given back). */
static void done_with(struct exchange *x, int p, uint64_t gen)
{
	pthread_mutex_lock(&x->mu);
	if (gen > x->taken_pub[p]) {
		x->taken_pub[p] = gen;
		__atomic_store_n(&x->f[p].out_taken, gen, __ATOMIC_SEQ_CST);
	}
	pthread_mutex_unlock(&x->mu);
}

int exchange_take_answer(struct exchange *x, int p, struct exchange_answer *a,
			 float *buf)
{
	struct xslot m;
	uint64_t gen;
	int rc;

	if (box_read(x, p, 1, x->taken[p], &gen, &m, buf, 1) != 1)
		return 0;
	rc = take(x, p, gen, &m, a);
	done_with(x, p, x->taken[p]);
	return rc;
}

static void hold_set(struct exchange_hold *h, uint64_t gen)
{
	struct exchange *x = h->x;

	pthread_mutex_lock(&x->mu);
	__atomic_store_n(&h->gen, gen, __ATOMIC_RELAXED);
	__atomic_store_n(&x->f[h->p].out_hold[h->k], gen, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&x->mu);
}

void exchange_release(struct exchange_hold *h)
{
	struct exchange *x = h->x;

	done_with(x, h->p, __atomic_load_n(&h->gen, __ATOMIC_RELAXED));
	hold_set(h, 0);
	exchange_unref(x);
}

int exchange_hold_answer(struct exchange *x, int p, struct exchange_answer *a,
			 const float **vals, struct exchange_hold **hold)
{
	struct exchange_stats st;

	*vals = NULL;
	*hold = NULL;
	/* a learner of an older build writes over a slot being sent */
	if (exchange_read_stats(x, &st) || !st.incarnation ||
	    LOAD(&x->h->hold_incarnation) != st.incarnation)
		return -1;
	for (int tries = 0; tries < READ_TRIES; tries++) {
		uint64_t g = LOAD(&x->f[p].out_gen), s1;
		struct exchange_hold *h;
		struct xslot *s, m;

		if (g == x->taken[p] || g == 0)
			return 0;
		h = &x->holds[2 * p + (g & 1)];
		if (__atomic_load_n(&h->gen, __ATOMIC_RELAXED))
			return 0;   /* held still: the learner cannot have
				     * written g there (a corrupt word) */
		hold_set(h, g);
		/* the learner had not published g + 1 when the hold was
		 * set: it sees the hold before it writes g + 2 here */
		if (__atomic_load_n(&x->f[p].out_gen, __ATOMIC_SEQ_CST) != g) {
			hold_set(h, 0);
			COUNT(x, torn_reads);
			continue;
		}
		s = slot_at(x, p, 1, g);
		s1 = LOAD(&s->seq);
		slot_meta(s, &m);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if ((s1 & 1) || LOADR(&s->seq) != s1 || m.gen != g) {
			hold_set(h, 0);
			COUNT(x, torn_reads);
			continue;
		}
		if (!take(x, p, g, &m, a)) {
			hold_set(h, 0);
			done_with(x, p, g);
			return 0;
		}
		if (!m.steps) {
			hold_set(h, 0);   /* nothing to send from it */
			done_with(x, p, g);
			return 1;
		}
		__atomic_add_fetch(&x->refs, 1, __ATOMIC_ACQ_REL);
		COUNT(x, answers_held);
		*vals = slot_data(s);
		*hold = h;
		return 1;
	}
	return 0;
}

int exchange_answer_ready(struct exchange *x, int p)
{
	return LOAD(&x->f[p].out_gen) != x->taken[p];
}

int exchange_read_stats(struct exchange *x, struct exchange_stats *out)
{
	struct xhdr *h = x->h;

	for (int tries = 0; tries < 64; tries++) {
		uint64_t s1 = LOAD(&h->st_seq), s2;
		struct exchange_stats st;

		if (s1 & 1)
			continue;
		st.incarnation = LOADR(&h->st_incarnation);
		st.pid = LOADR(&h->st_pid);
		st.step = LOADR(&h->st_step);
		st.tokens_total = LOADR(&h->st_tokens);
		st.loss = bitsd(LOADR(&h->st_loss));
		st.step_time = bitsd(LOADR(&h->st_step_time));
		st.wall = bitsd(LOADR(&h->st_wall));
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		s2 = LOADR(&h->st_seq);
		if (s1 == s2) {
			*out = st;
			return 0;
		}
	}
	return -1;
}

void exchange_set_resume(struct exchange *x, uint64_t step,
			 uint64_t incarnation)
{
	struct xhdr *h = x->h;
	uint64_t q = LOADR(&h->rs_seq);

	STORER(&h->rs_seq, (q + 1) | 1);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	STORER(&h->rs_step, step);
	STORER(&h->rs_incarnation, incarnation);
	STORE(&h->rs_seq, LOADR(&h->rs_seq) + 1);
	notify(x);
}

int exchange_resume(struct exchange *x, uint64_t *step)
{
	struct xhdr *h = x->h;

	for (int tries = 0; tries < READ_TRIES; tries++) {
		uint64_t s1 = LOAD(&h->rs_seq), s2, st, inc;

		if (s1 & 1)
			continue;
		st = LOADR(&h->rs_step);
		inc = LOADR(&h->rs_incarnation);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		s2 = LOADR(&h->rs_seq);
		if (s1 != s2)
			continue;
		if (!inc || inc != x->incarnation)
			return 0;
		*step = st;
		return 1;
	}
	COUNT(x, torn_reads);
	return 0;
}

uint64_t exchange_theta_round(const struct exchange *x)
{
	return x->theta_round;
}

uint64_t exchange_job_tokens(const struct exchange *x)
{
	return x->job_tokens;
}

void exchange_put_eval(struct exchange *x, uint64_t round, double loss,
		       uint64_t tokens)
{
	struct xhdr *h = x->h;
	uint64_t q = LOADR(&h->ev_seq);

	/* counted on from the region's word: a restarted evaluator's first
	 * report is new to the sidecar too */
	x->ev_count = LOADR(&h->ev_count) + 1;
	STORER(&h->ev_seq, (q + 1) | 1);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	STORER(&h->ev_count, x->ev_count);
	STORER(&h->ev_round, round);
	STORER(&h->ev_loss, dbits(loss));
	STORER(&h->ev_tokens, tokens);
	STORE(&h->ev_seq, LOADR(&h->ev_seq) + 1);
	notify(x);
}

int exchange_read_eval(struct exchange *x, struct exchange_eval *out)
{
	struct xhdr *h = x->h;

	for (int tries = 0; tries < READ_TRIES; tries++) {
		uint64_t s1 = LOAD(&h->ev_seq), s2;
		struct exchange_eval ev;

		if (s1 & 1)
			continue;
		ev.count = LOADR(&h->ev_count);
		ev.round = LOADR(&h->ev_round);
		ev.loss = bitsd(LOADR(&h->ev_loss));
		ev.tokens = LOADR(&h->ev_tokens);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		s2 = LOADR(&h->ev_seq);
		if (s1 == s2) {
			*out = ev;
			return 0;
		}
	}
	COUNT(x, torn_reads);
	return -1;
}

void exchange_set_done(struct exchange *x, int done)
{
	pthread_mutex_lock(&x->mu);
	x->done = (uint64_t)(done != 0);
	STORE(&x->h->done, x->done);
	pthread_mutex_unlock(&x->mu);
	notify(x);
}

int exchange_is_done(struct exchange *x)
{
	return LOAD(&x->h->done) == 1;
}

void exchange_set_alpha(struct exchange *x, double alpha)
{
	pthread_mutex_lock(&x->mu);
	x->alpha_bits = dbits(alpha);
	STORE(&x->h->alpha_bits, x->alpha_bits);
	pthread_mutex_unlock(&x->mu);
}

void exchange_counters(struct exchange *x, struct exchange_counters *out)
{
	uint64_t ip = 0, pp = 0;

	for (int p = 0; p < x->nfrags; p++) {
		uint64_t r = LOAD(&x->f[p].pull_round);

		if (LOAD(&x->f[p].in_gen) != LOAD(&x->f[p].in_applied))
			ip++;
		if (r && r != LOAD(&x->f[p].pull_served))
			pp++;
	}
	*out = x->c;
	out->inbox_pending = ip;
	out->pulls_pending = pp;
}
