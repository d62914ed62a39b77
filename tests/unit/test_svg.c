/* SVG plots: tick choice, coordinates, escaping, marks, bounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "common/svg.h"

static int count(const char *hay, const char *needle)
{
	int n = 0;

	for (const char *p = hay; (p = strstr(p, needle)); p++)
		n++;
	return n;
}

static void ticks_1_2_5(void **state)
{
	double t[32], lo = 0.3, hi = 9.2;
	int n;

	(void)state;
	n = svg_ticks(&lo, &hi, 5, t, 32);
	/* span 8.9 / 5 = 1.78 -> step 2 */
	assert_true(lo == 0 && hi == 10);
	assert_int_equal(n, 6);
	assert_true(t[1] == 2 && t[5] == 10);

	lo = 1.93;
	hi = 2.41;
	n = svg_ticks(&lo, &hi, 5, t, 32);   /* 0.096 -> 0.1 */
	assert_true(fabs(lo - 1.9) < 1e-12 && fabs(hi - 2.5) < 1e-12);
	assert_int_equal(n, 7);

	lo = hi = 3;                         /* flat data still gets a range */
	n = svg_ticks(&lo, &hi, 5, t, 32);
	assert_true(lo < 3 && hi > 3 && n >= 2);

	lo = 0;
	hi = 1e6;
	n = svg_ticks(&lo, &hi, 4, t, 3);    /* never more than max */
	assert_int_equal(n, 3);
}

static void plot_coordinates_and_parts(void **state)
{
	double x[] = { 0, 5, 10 }, y[] = { 0, NAN, 10 }, marks[] = { 2.5, 7.5 };
	struct svg_series s = { "loss <train>", NULL, x, y, 3, 0, 1 };
	struct svg_hline h = { "baseline & co", 4, NULL };
	struct svg_plot p = { "a \"title\"", "x", "y", 640, 300, marks, 2,
			      "kills", &h, 1, 0 };
	struct buf b;

	(void)state;
	buf_init(&b, 1 << 20);
	assert_int_equal(svg_plot(&b, &p, &s, 1), 0);
	/* plot area: x 64..624, y 28..256; (0,0) bottom left, (10,10) top right */
	assert_non_null(strstr(b.data, "points=\"64.0,256.0 624.0,28.0 \""));
	assert_int_equal(count(b.data, "<circle"), 2);   /* the NaN point is skipped */
	assert_int_equal(count(b.data, "class=\"mark\""), 2);
	assert_non_null(strstr(b.data, "x1=\"204.0\" y1=\"28.0\" x2=\"204.0\" y2=\"256.0\""));
	assert_int_equal(count(b.data, "class=\"hline\""), 1);
	assert_non_null(strstr(b.data, "a &quot;title&quot;"));
	assert_non_null(strstr(b.data, "loss &lt;train&gt;"));
	assert_non_null(strstr(b.data, "baseline &amp; co"));
	assert_null(strstr(b.data, "<train>"));
	assert_true(strncmp(b.data, "<svg xmlns=", 11) == 0);
	assert_non_null(strstr(b.data, "</svg>\n"));
	buf_release(&b);
}

static void steps_hold_values(void **state)
{
	double x[] = { 0, 10 }, y[] = { 0, 10 };
	struct svg_series s = { "up", "#000", x, y, 2, 1, 0 };
	struct svg_plot p = { "t", "x", "y", 640, 300, NULL, 0, NULL, NULL, 0, 0 };
	struct buf b;

	(void)state;
	buf_init(&b, 1 << 20);
	assert_int_equal(svg_plot(&b, &p, &s, 1), 0);
	assert_non_null(strstr(b.data, "points=\"64.0,256.0 624.0,256.0 624.0,28.0 \""));
	buf_release(&b);
}

static void bounded_output(void **state)
{
	double x[1000], y[1000];
	struct svg_series s = { "s", NULL, x, y, 1000, 0, 0 };
	struct svg_plot p = { "t", "x", "y", 0, 0, NULL, 0, NULL, NULL, 0, 1 };
	struct buf b, whole;

	(void)state;
	for (int i = 0; i < 1000; i++) {
		x[i] = i;
		y[i] = i % 7;
	}
	buf_init(&whole, 1 << 20);
	assert_int_equal(svg_plot(&whole, &p, &s, 1), 0);
	assert_true(whole.len > 4096);
	buf_init(&b, 4096);
	assert_int_equal(svg_plot(&b, &p, &s, 1), -1);
	assert_int_equal(buf_error(&b), BUF_TOO_LARGE);
	/* what was written before the limit is a clean start of the plot */
	assert_in_range(b.len, 1, 4096);
	assert_memory_equal(b.data, whole.data, b.len);
	buf_release(&b);
	buf_release(&whole);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(ticks_1_2_5),
		cmocka_unit_test(plot_coordinates_and_parts),
		cmocka_unit_test(steps_hold_values),
		cmocka_unit_test(bounded_output),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
