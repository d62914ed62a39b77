/*
 * prom: Prometheus text lines on a buf; see prom.h. Appends are not
 * checked here: after a failed one the buf takes no more (its error is
 * sticky) and the caller, which checks buf_error once, drops the text.
 */
#include "common/prom.h"

#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static const char *type_name(enum prom_type t)
{
	switch (t) {
	case PROM_COUNTER: return "counter";
	case PROM_GAUGE: return "gauge";
	case PROM_SUMMARY: return "summary";
	case PROM_HISTOGRAM: return "histogram";
	case PROM_UNTYPED: break;
	}
	return "untyped";
}

/* s with \ and newline escaped, and " too when quote is set. */
static void escaped(struct buf *b, const char *s, int quote)
{
	for (; s && *s; s++) {
		if (*s == '\\')
			buf_append(b, "\\\\", 2);
		else if (*s == '\n')
			buf_append(b, "\\n", 2);
		else if (*s == '"' && quote)
			buf_append(b, "\\\"", 2);
		else
			buf_append(b, s, 1);
	}
}

void prom_family(struct buf *b, const char *name, enum prom_type type,
		 const char *help)
{
	buf_printf(b, "# HELP %s ", name);
	escaped(b, help, 0);
	buf_printf(b, "\n# TYPE %s %s\n", name, type_name(type));
}

static void sample_name(struct buf *b, const char *name,
			const char *const *labels)
{
	int open = 0;

	buf_printf(b, "%s", name);
	for (size_t i = 0; labels && labels[i] && labels[i + 1]; i += 2) {
		buf_printf(b, "%c%s=\"", open ? ',' : '{', labels[i]);
		escaped(b, labels[i + 1], 1);
		buf_append(b, "\"", 1);
		open = 1;
	}
	if (open)
		buf_append(b, "}", 1);
}

void prom_u64(struct buf *b, const char *name, const char *const *labels,
	      uint64_t v)
{
	sample_name(b, name, labels);
	buf_printf(b, " %" PRIu64 "\n", v);
}

void prom_double(struct buf *b, const char *name, const char *const *labels,
		 double v)
{
	char num[32];

	if (isnan(v))
		snprintf(num, sizeof(num), "NaN");
	else if (isinf(v))
		snprintf(num, sizeof(num), "%sInf", v > 0 ? "+" : "-");
	else {
		/* 15 digits print 0.1 as 0.1; 17 always read back exactly */
		snprintf(num, sizeof(num), "%.15g", v);
		if (strtod(num, NULL) != v)
			snprintf(num, sizeof(num), "%.17g", v);
	}
	sample_name(b, name, labels);
	buf_printf(b, " %s\n", num);
}

void prom_counter(struct buf *b, const char *name, const char *help,
		  uint64_t v)
{
	prom_family(b, name, PROM_COUNTER, help);
	prom_u64(b, name, NULL, v);
}

void prom_gauge(struct buf *b, const char *name, const char *help, double v)
{
	prom_family(b, name, PROM_GAUGE, help);
	prom_double(b, name, NULL, v);
}

int prom_hist_init(struct prom_hist *h, const double *bounds, int n)
{
	memset(h, 0, sizeof(*h));
	h->bounds = bounds;
	h->n = n;
	h->counts = calloc((size_t)(n > 0 ? n : 1), sizeof(*h->counts));
	return h->counts ? 0 : -1;
}

void prom_hist_release(struct prom_hist *h)
{
	free(h->counts);
	h->counts = NULL;
}

void prom_hist_observe(struct prom_hist *h, double v)
{
	if (!h->counts || isnan(v))
		return;
	for (int i = 0; i < h->n; i++)
		if (v <= h->bounds[i]) {
			h->counts[i]++;
			break;
		}
	h->count++;
	h->sum += v;
}

void prom_hist_write(struct buf *b, const char *name, const char *help,
		     const struct prom_hist *h)
{
	char sample[128], le[32];
	uint64_t cum = 0;

	prom_family(b, name, PROM_HISTOGRAM, help);
	snprintf(sample, sizeof(sample), "%s_bucket", name);
	for (int i = 0; h->counts && i < h->n; i++) {
		cum += h->counts[i];
		snprintf(le, sizeof(le), "%.15g", h->bounds[i]);
		prom_u64(b, sample, PROM_LABELS("le", le), cum);
	}
	prom_u64(b, sample, PROM_LABELS("le", "+Inf"), h->count);
	snprintf(sample, sizeof(sample), "%s_sum", name);
	prom_double(b, sample, NULL, h->sum);
	snprintf(sample, sizeof(sample), "%s_count", name);
	prom_u64(b, sample, NULL, h->count);
}

/* Field k (1-based, as proc(5) numbers them) of /proc/self/stat. */
static int stat_field(const char *stat, int k, unsigned long long *out)
{
	const char *p = strrchr(stat, ')');   /* the name may hold spaces */
	int field = 2;

	if (!p)
		return -1;
	for (p++; *p && field < k; field++) {
		while (*p == ' ')
			p++;
		if (field + 1 == k)
			return sscanf(p, "%llu", out) == 1 ? 0 : -1;
		while (*p && *p != ' ')
			p++;
	}
	return -1;
}

static double boot_time(void)
{
	FILE *f = fopen("/proc/stat", "r");
	char line[256];
	double bt = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "btime ", 6)) {
			bt = strtod(line + 6, NULL);
			break;
		}
	fclose(f);
	return bt;
}

void prom_process(struct buf *b)
{
	char stat[1024];
	FILE *f = fopen("/proc/self/stat", "r");
	size_t n = f ? fread(stat, 1, sizeof(stat) - 1, f) : 0;
	unsigned long long ut, st, start, vsize, rss;
	double tck = (double)sysconf(_SC_CLK_TCK), page = (double)sysconf(_SC_PAGESIZE);
	double bt = boot_time();
	struct rlimit rl;
	DIR *d;

	if (f)
		fclose(f);
	stat[n] = '\0';
	if (n && tck > 0 && !stat_field(stat, 14, &ut) && !stat_field(stat, 15, &st)) {
		prom_family(b, "process_cpu_seconds_total", PROM_COUNTER,
			    "Total user and system CPU time spent in seconds.");
		prom_double(b, "process_cpu_seconds_total", NULL, (double)(ut + st) / tck);
	}
	if (n && !stat_field(stat, 23, &vsize))
		prom_gauge(b, "process_virtual_memory_bytes",
			   "Virtual memory size in bytes.", (double)vsize);
	if (n && page > 0 && !stat_field(stat, 24, &rss))
		prom_gauge(b, "process_resident_memory_bytes",
			   "Resident memory size in bytes.", (double)rss * page);
	if (n && tck > 0 && bt > 0 && !stat_field(stat, 22, &start))
		prom_gauge(b, "process_start_time_seconds",
			   "Start time of the process since unix epoch in seconds.",
			   bt + (double)start / tck);
	if ((d = opendir("/proc/self/fd"))) {
		struct dirent *de;
		int fds = 0;

		while ((de = readdir(d)))
			fds += de->d_name[0] != '.';
		closedir(d);
		/* the folder's own descriptor is not the process's */
		prom_gauge(b, "process_open_fds", "Number of open file descriptors.",
			   fds > 0 ? fds - 1 : 0);
	}
	if (!getrlimit(RLIMIT_NOFILE, &rl))
		prom_gauge(b, "process_max_fds", "Maximum number of open file descriptors.",
			   rl.rlim_cur == RLIM_INFINITY ? INFINITY : (double)rl.rlim_cur);
}
