/*
 * The versions where the learner side and the sidecar meet
 * (common/exchange_version.c; docs/exchange.md, Versions): matching
 * versions pass whichever side comes first, each kind of mismatch is
 * refused on both sides with the exact message, a region of another
 * layout is named by its versions, a build from before versions is
 * taken as before, and the other side's block is not trusted.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/exchange.h"
#include "common/exchange_layout.h"
#include "tests/unit/testlib.h"

struct fx {
	char dir[64], path[96];
	struct frag_table ft;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	const uint64_t sizes[2] = { 100, 60 };

	assert_int_equal(testlib_tmpdir(f->dir, sizeof(f->dir), "ddxver-test"), 0);
	snprintf(f->path, sizeof(f->path), "%s/%s", f->dir, EXCHANGE_FILE);
	assert_int_equal(frag_table_from_sizes(&f->ft, sizes, 2, 0x1234, NULL), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	assert_int_equal(testlib_rmtree(f->dir), 0);
	frag_table_release(&f->ft);
	free(f);
	return 0;
}

static struct exchange_version ver(uint32_t abi, uint32_t exchange,
				   const char *release)
{
	struct exchange_version v = { .abi = abi, .exchange = exchange };

	snprintf(v.release, sizeof(v.release), "%s", release);
	return v;
}

/* The message names both sides, the learner library first. */
static void the_message(void **state)
{
	struct exchange_version l = ver(2, 3, "0.3.0"), s = ver(3, 4, "0.4.0");
	char msg[256] = "";

	(void)state;
	assert_int_equal(exchange_versions_match(&l, &s, msg, sizeof(msg)), 0);
	assert_string_equal(msg, "learner library 0.3.0 (ABI 2, exchange 3) and "
			    "sidecar 0.4.0 (ABI 3, exchange 4) do not match");
	/* the releases alone may differ */
	s = ver(2, 3, "0.3.7");
	msg[0] = '\0';
	assert_int_equal(exchange_versions_match(&l, &s, msg, sizeof(msg)), 1);
	assert_string_equal(msg, "");
}

/* This build meets itself, either side first; each reads the other's. */
static void matching_versions_pass(void **state)
{
	struct fx *f = *state;
	struct exchange *lx, *sx;
	struct exchange_version self, v;
	struct err e = { "" };

	exchange_version_self(&self);
	assert_int_equal(self.abi, EXCHANGE_ABI_VERSION);
	assert_int_equal(self.exchange, EXCHANGE_VERSION);
	assert_string_equal(self.release, DDILOCO_VERSION);
	for (int first = 0; first < 2; first++) {
		struct exchange **a = first ? &sx : &lx, **b = first ? &lx : &sx;

		assert_int_equal(exchange_open(f->dir, first ? EXCHANGE_SIDECAR :
					       EXCHANGE_LEARNER, &f->ft, a, &e), 0);
		assert_int_equal(exchange_peer_version(*a, &v), 0);
		assert_int_equal(exchange_open(f->dir, first ? EXCHANGE_LEARNER :
					       EXCHANGE_SIDECAR, &f->ft, b, &e), 0);
		assert_int_equal(exchange_versions(lx, &e), 0);
		assert_int_equal(exchange_versions(sx, &e), 0);
		assert_int_equal(exchange_peer_version(lx, &v), 1);
		assert_int_equal(v.abi, EXCHANGE_ABI_VERSION);
		assert_int_equal(v.exchange, EXCHANGE_VERSION);
		assert_string_equal(v.release, DDILOCO_VERSION);
		assert_int_equal(exchange_peer_version(sx, &v), 1);
		assert_string_equal(v.release, DDILOCO_VERSION);
		exchange_close(lx);
		exchange_close(sx);
		assert_int_equal(unlink(f->path), 0);
	}
	/* another release of the same ABI and exchange works with this one */
	v = ver(EXCHANGE_ABI_VERSION, EXCHANGE_VERSION, "9.9.9");
	assert_int_equal(exchange_open_version(f->dir, EXCHANGE_SIDECAR, &f->ft,
					       &v, &sx, &e), 0);
	assert_int_equal(exchange_open(f->dir, EXCHANGE_LEARNER, &f->ft, &lx, &e), 0);
	assert_int_equal(exchange_versions(lx, &e), 0);
	assert_int_equal(exchange_versions(sx, &e), 0);
	exchange_close(lx);
	exchange_close(sx);
}

/*
 * One mismatch: `other` is the side that comes first (its role), this
 * build the second, refused at its open; the first then refuses at its
 * next look. Both say `want`.
 */
static void refused_both_ways(struct fx *f, enum exchange_role first,
			      struct exchange_version other, const char *want)
{
	struct exchange *ox, *x = NULL;
	struct err e = { "" }, e2 = { "" };

	assert_int_equal(exchange_open_version(f->dir, first, &f->ft, &other,
					       &ox, &e), 0);
	assert_int_equal(exchange_versions(ox, &e), 0);   /* alone yet */
	assert_int_equal(exchange_open(f->dir, !first, &f->ft, &x, &e),
			 EXCHANGE_VERSION_MISMATCH);
	assert_null(x);
	assert_string_equal(e.msg, want);
	assert_int_equal(exchange_versions(ox, &e2), EXCHANGE_VERSION_MISMATCH);
	assert_string_equal(e2.msg, want);
	exchange_close(ox);
	assert_int_equal(unlink(f->path), 0);
}

/* Each kind of mismatch, each side first, refused with the message. */
static void mismatches_refused(void **state)
{
	struct fx *f = *state;
	const char *r = DDILOCO_VERSION;
	char want[256];

	/* a sidecar of another ABI */
	snprintf(want, sizeof(want), "learner library %s (ABI %d, exchange %d) "
		 "and sidecar 0.4.0 (ABI 3, exchange %d) do not match", r,
		 EXCHANGE_ABI_VERSION, EXCHANGE_VERSION, EXCHANGE_VERSION);
	refused_both_ways(f, EXCHANGE_SIDECAR,
			  ver(3, EXCHANGE_VERSION, "0.4.0"), want);
	/* a sidecar of another exchange */
	snprintf(want, sizeof(want), "learner library %s (ABI %d, exchange %d) "
		 "and sidecar 0.4.0 (ABI %d, exchange 4) do not match", r,
		 EXCHANGE_ABI_VERSION, EXCHANGE_VERSION, EXCHANGE_ABI_VERSION);
	refused_both_ways(f, EXCHANGE_SIDECAR,
			  ver(EXCHANGE_ABI_VERSION, 4, "0.4.0"), want);
	/* a learner library of another ABI and exchange, first */
	snprintf(want, sizeof(want), "learner library 0.3.0 (ABI 2, exchange 3) "
		 "and sidecar %s (ABI %d, exchange %d) do not match", r,
		 EXCHANGE_ABI_VERSION, EXCHANGE_VERSION);
	refused_both_ways(f, EXCHANGE_LEARNER, ver(2, 3, "0.3.0"), want);
	/* a learner library of an older exchange only */
	snprintf(want, sizeof(want), "learner library 0.0.9 (ABI %d, exchange 0) "
		 "and sidecar %s (ABI %d, exchange %d) do not match",
		 EXCHANGE_ABI_VERSION, r, EXCHANGE_ABI_VERSION, EXCHANGE_VERSION);
	refused_both_ways(f, EXCHANGE_LEARNER,
			  ver(EXCHANGE_ABI_VERSION, 0, "0.0.9"), want);
}

/* A learner restarted from a matching release is taken again: its
 * block is rewritten at its attach. */
static void a_fixed_learner_is_taken(void **state)
{
	struct fx *f = *state;
	struct exchange_version old = ver(2, 3, "0.3.0");
	struct exchange *lx, *sx;
	struct err e = { "" };

	assert_int_equal(exchange_open(f->dir, EXCHANGE_SIDECAR, &f->ft, &sx, &e), 0);
	assert_int_equal(exchange_open_version(f->dir, EXCHANGE_LEARNER, &f->ft,
					       &old, &lx, &e),
			 EXCHANGE_VERSION_MISMATCH);
	assert_int_equal(exchange_versions(sx, &e), EXCHANGE_VERSION_MISMATCH);
	assert_int_equal(exchange_open(f->dir, EXCHANGE_LEARNER, &f->ft, &lx, &e), 0);
	assert_int_equal(exchange_versions(sx, &e), 0);
	assert_int_equal(exchange_versions(lx, &e), 0);
	exchange_close(lx);
	exchange_close(sx);
}

/* A region of another layout and size: the versions are named, not the
 * layout or the size. */
static void another_layout_is_named_by_versions(void **state)
{
	struct fx *f = *state;
	struct exchange_version other = ver(EXCHANGE_ABI_VERSION, 2, "0.5.0");
	struct exchange *lx, *sx = NULL;
	struct err e = { "" };
	uint32_t layout = 2;
	char want[256];
	int fd;

	assert_int_equal(exchange_open_version(f->dir, EXCHANGE_LEARNER, &f->ft,
					       &other, &lx, &e), 0);
	exchange_close(lx);
	fd = open(f->path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, &layout, 4, offsetof(struct xhdr, layout)), 4);
	assert_int_equal(ftruncate(fd, 3 * 4096), 0);
	close(fd);
	snprintf(want, sizeof(want), "learner library 0.5.0 (ABI %d, exchange 2) "
		 "and sidecar %s (ABI %d, exchange %d) do not match",
		 EXCHANGE_ABI_VERSION, DDILOCO_VERSION, EXCHANGE_ABI_VERSION,
		 EXCHANGE_VERSION);
	assert_int_equal(exchange_open(f->dir, EXCHANGE_SIDECAR, &f->ft, &sx, &e),
			 EXCHANGE_VERSION_MISMATCH);
	assert_string_equal(e.msg, want);
	/* the peek of an external model's sidecar says the same */
	{
		int P;
		uint64_t fp, *sizes = NULL;

		assert_int_equal(exchange_peek(f->dir, &P, &fp, &sizes, &e),
				 EXCHANGE_VERSION_MISMATCH);
		assert_string_equal(e.msg, want);
		assert_null(sizes);
	}
}

/* The peek leaves the sidecar's versions: the learner waiting for its
 * model refuses too. */
static void a_peek_leaves_the_sidecars_versions(void **state)
{
	struct fx *f = *state;
	struct exchange_version other = ver(4, 5, "0.6.0");
	struct exchange *lx;
	struct exchange_version v;
	struct err e = { "" };
	char want[256];
	int P;
	uint64_t fp, *sizes = NULL;

	assert_int_equal(exchange_open_version(f->dir, EXCHANGE_LEARNER, &f->ft,
					       &other, &lx, &e), 0);
	assert_int_equal(exchange_peer_version(lx, &v), 0);
	assert_int_equal(exchange_peek(f->dir, &P, &fp, &sizes, &e),
			 EXCHANGE_VERSION_MISMATCH);
	snprintf(want, sizeof(want), "learner library 0.6.0 (ABI 4, exchange 5) "
		 "and sidecar %s (ABI %d, exchange %d) do not match",
		 DDILOCO_VERSION, EXCHANGE_ABI_VERSION, EXCHANGE_VERSION);
	assert_string_equal(e.msg, want);
	assert_int_equal(exchange_peer_version(lx, &v), 1);
	assert_string_equal(v.release, DDILOCO_VERSION);
	assert_int_equal(exchange_versions(lx, &e), EXCHANGE_VERSION_MISMATCH);
	assert_string_equal(e.msg, want);
	exchange_close(lx);
}

/* A build from before versions writes no block: taken as before. */
static void a_build_before_versions_is_taken(void **state)
{
	struct fx *f = *state;
	struct exchange *lx, *sx;
	struct exchange_version v;
	struct err e = { "" };
	unsigned char zero[64] = { 0 };
	int fd;

	assert_int_equal(exchange_open(f->dir, EXCHANGE_LEARNER, &f->ft, &lx, &e), 0);
	fd = open(f->path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, zero, sizeof(zero), XVER_OFF), 64);
	close(fd);
	assert_int_equal(exchange_open(f->dir, EXCHANGE_SIDECAR, &f->ft, &sx, &e), 0);
	assert_int_equal(exchange_peer_version(sx, &v), 0);
	assert_int_equal(exchange_versions(sx, &e), 0);
	/* this build's learner writes its block again at its next look */
	assert_int_equal(exchange_versions(lx, &e), 0);
	assert_int_equal(exchange_peer_version(sx, &v), 1);
	exchange_close(lx);
	exchange_close(sx);
}

/* The other side's block is not trusted: a release of bytes that are
 * not text is shown as '?', and a block being written (odd counter) is
 * not read. */
static void the_peers_block_is_not_trusted(void **state)
{
	struct fx *f = *state;
	struct exchange *sx;
	struct exchange_version v;
	struct err e = { "" };
	struct xver b = { .seq = 2, .magic = XVER_MAGIC, .abi = 7, .exchange = 8 };
	const char raw[32] = "0.\n\x01\xff" "abcdefghijklmnopqrstuvwxyz0";
	int fd;

	memcpy(b.release, raw, sizeof(raw));
	assert_int_equal(exchange_open(f->dir, EXCHANGE_SIDECAR, &f->ft, &sx, &e), 0);
	fd = open(f->path, O_RDWR);
	assert_true(fd >= 0);
	b.seq = 3;
	assert_int_equal(pwrite(fd, &b, sizeof(b), XVER_OFF), 64);
	assert_int_equal(exchange_peer_version(sx, &v), 0);
	assert_int_equal(exchange_versions(sx, &e), 0);
	b.seq = 4;
	assert_int_equal(pwrite(fd, &b, sizeof(b), XVER_OFF), 64);
	close(fd);
	assert_int_equal(exchange_peer_version(sx, &v), 1);
	assert_int_equal(v.abi, 7);
	assert_int_equal(v.exchange, 8);
	assert_string_equal(v.release, "0.???abcdefghijklmnopqrstuvwxyz");
	assert_int_equal(exchange_versions(sx, &e), EXCHANGE_VERSION_MISMATCH);
	exchange_close(sx);
}

/* This side's own block, overwritten, is rewritten at its next look. */
static void the_own_block_is_rewritten(void **state)
{
	struct fx *f = *state;
	struct exchange *lx, *sx;
	struct exchange_version v;
	struct err e = { "" };
	struct xver b = { .seq = 2, .magic = XVER_MAGIC, .abi = 9, .exchange = 9,
			  .release = { 0x39 } };
	int fd;

	assert_int_equal(exchange_open(f->dir, EXCHANGE_LEARNER, &f->ft, &lx, &e), 0);
	assert_int_equal(exchange_open(f->dir, EXCHANGE_SIDECAR, &f->ft, &sx, &e), 0);
	fd = open(f->path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, &b, sizeof(b), XVER_OFF), 64);
	close(fd);
	assert_int_equal(exchange_peer_version(sx, &v), 1);
	assert_string_equal(v.release, "9");
	assert_int_equal(exchange_versions(lx, &e), 0);
	assert_int_equal(exchange_peer_version(sx, &v), 1);
	assert_string_equal(v.release, DDILOCO_VERSION);
	assert_int_equal(exchange_versions(sx, &e), 0);
	exchange_close(lx);
	exchange_close(sx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(the_message),
		cmocka_unit_test_setup_teardown(matching_versions_pass, setup, teardown),
		cmocka_unit_test_setup_teardown(mismatches_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(a_fixed_learner_is_taken, setup, teardown),
		cmocka_unit_test_setup_teardown(another_layout_is_named_by_versions,
						setup, teardown),
		cmocka_unit_test_setup_teardown(a_peek_leaves_the_sidecars_versions,
						setup, teardown),
		cmocka_unit_test_setup_teardown(a_build_before_versions_is_taken,
						setup, teardown),
		cmocka_unit_test_setup_teardown(the_peers_block_is_not_trusted,
						setup, teardown),
		cmocka_unit_test_setup_teardown(the_own_block_is_rewritten,
						setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
