#!/bin/sh
# make demo-wan (docs/wan.md): the low-bandwidth job (examples/lowbandwidth.yaml
# without chaos, TOKENS tokens) on loopback, then with the syncer and each
# learner + sidecar in network namespaces of their own (scripts/wan-net.sh),
# each learner's link shaped by tbf to RATES Mbit/s in turn, all of it
# REPEAT times (default 1). Per run it prints the learners' step rate,
# rounds per second, bytes per second on each link, the sidecars' largest
# RSS and the final eval loss (all runs end at the same token budget);
# then one run with answers queued behind the thinnest link (f32 both ways,
# P = H = 1) and its sidecars' RSS; then, over the runs' means,
#   wan_step_rate_ratio=     step rate at the thinnest link / on loopback
#   wan_loss_ratio=          final eval loss at the thinnest link / on loopback
#   wan_dp_bandwidth_ratio=  what data parallel would need at that step rate
#                            (ring all-reduce, 8·N·(M−1)/M bytes per worker
#                            per step) / the thinnest link's rate
# and writes DIR/wan-links.svg and DIR/wan-links-queue.svg, the link use
# of the thinnest runs over time.
# Then tests/integration/wan_cut.sh: one learner's link cut for 30 s.
# Needs root. Argument 1: the folder (default runs/wan-<UTC time>).
set -eu
BIN=$(realpath "${BUILD:-build}/ddiloco")
HERE=$(realpath "$(dirname "$0")")
JOB=${JOB:-examples/lowbandwidth.yaml}
RATES=${RATES:-1000 100 20}
TOKENS=${TOKENS:-2000000}
REPEAT=${REPEAT:-1}
dir=${1:-runs/wan-$(date -u +%Y%m%dT%H%M%SZ)}
[ "$(id -u)" -eq 0 ] || { echo "demo-wan: needs root (ip netns, veth, tc)" >&2; exit 2; }
for t in ip tc jq awk; do
	command -v $t >/dev/null || { echo "demo-wan: '$t' not found (make deps)" >&2; exit 2; }
done
mkdir -p "$dir"
dir=$(realpath "$dir")
runner=
sampler=
cleanup() {
	[ -n "$sampler" ] && kill "$sampler" 2>/dev/null
	[ -n "$runner" ] && kill -TERM "$runner" 2>/dev/null && wait "$runner" 2>/dev/null
	sh "$HERE/wan-net.sh" down
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

sed -e '/^  chaos:/,$d' -e "s/^    tokens:.*/    tokens: $TOKENS/" "$JOB" > "$dir/job.yaml"
M=$(awk '/^    replicas:/ { print $2 }' "$dir/job.yaml")
"$BIN" certs "$dir/job.yaml" --out "$dir/tls" --ip 10.77.0.1 >/dev/null

# step rate: each learner's steps over the time from its first step to
# "job done", averaged over the learners (their log lines are HH:MM:SS.mmm)
step_rate() {
	for f in "$1"/learner-*.log; do
		awk '
		function t(s) { split(s, a, ":"); return a[1] * 3600 + a[2] * 60 + a[3] }
		/got the global model/ { t0 = t($1) }
		/ steps; exchange_poll/ { n = $4; t1 = t($1) }
		END { if (t1 > t0) printf "%.3f %.3f\n", n / (t1 - t0), t1 - t0 }' "$f"
	done | awk '{ r += $1; s += $2; n++ } END { printf "%.3f %.3f\n", r / n, s / n }'
}

# name, run folder: one summary line, and name rate span loss to $dir/runs
summary() {
	rep=$2/report.json
	set -- "$1" "$2" $(step_rate "$2")
	rounds=$(jq -r .rounds "$rep")
	loss=$(jq -r .final_eval_loss "$rep")
	printf '%-9s step rate %6.2f/s per learner, %5.2f rounds/s, eval loss %.4f at %s tokens, uptime %s\n' \
		"$1" "$3" "$(echo "$rounds $4" | awk '{ print $1 / $2 }')" "$loss" \
		"$(jq -r .tokens "$rep")" "$(jq -r .uptime "$rep")"
	echo "$1 $3 $4 $loss" >> "$dir/runs"
}

# per link of a sample file: mean and peak (over 0.5 s) Mbit/s each way, largest RSS
links() {
	awk -v m="$M" -v span="$2" '
	NR > 1 && NF == 1 + 3 * m { dt = $1 - t
		for (i = 0; i < m; i++) {
			d = ($(2 + 2 * i) - dn[i]) * 8 / dt / 1e6; u = ($(3 + 2 * i) - up[i]) * 8 / dt / 1e6
			if (d > pd[i]) pd[i] = d; if (u > pu[i]) pu[i] = u } }
	NF == 1 + 3 * m { t = $1
		for (i = 0; i < m; i++) {
			if (!seen) { d0[i] = $(2 + 2 * i); u0[i] = $(3 + 2 * i) }
			dn[i] = $(2 + 2 * i); up[i] = $(3 + 2 * i)
			if ($(2 + 2 * m + i) > rss[i]) rss[i] = $(2 + 2 * m + i) }
		seen = 1 }
	END { for (i = 0; i < m; i++)
		printf "  link %d: down %.3f Mbit/s (peak %.2f), up %.3f Mbit/s (peak %.2f), %.0f kB/s both ways; sidecar RSS max %.1f MiB\n",
			i, (dn[i] - d0[i]) * 8 / span / 1e6, pd[i], (up[i] - u0[i]) * 8 / span / 1e6, pu[i],
			(dn[i] - d0[i] + up[i] - u0[i]) / span / 1e3, rss[i] / 1024 }' "$1"
}

# link use over time (Mbit/s per sample (0.5 s), each way) as SVG: sample file, rate, title
plot() {
	awk -v m="$M" -v rate="$2" -v title="$3" '
	NF == 1 + 3 * m { n++; t[n] = $1; for (i = 0; i < 2 * m; i++) b[n, i] = $(2 + i) }
	END {
		W = 720; H = 420; L = 64; R = 704; T = 28; B = 376
		tmax = t[n]; ymax = rate * 1.1
		for (k = 2; k <= n; k++) for (i = 0; i < 2 * m; i++) {
			v[k, i] = (b[k, i] - b[k - 1, i]) * 8 / (t[k] - t[k - 1]) / 1e6
			if (v[k, i] > ymax) ymax = v[k, i] }
		printf "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"11\">\n", W, H, W, H
		printf "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H
		printf "<text x=\"%d\" y=\"16\" font-size=\"13\" font-weight=\"bold\">%s</text>\n", L, title
		for (g = 0; g <= 5; g++) {
			x = L + (R - L) * g / 5; y = B - (B - T) * g / 5
			printf "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/><text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%.0f</text>\n", x, T, x, B, x, B + 14, tmax * g / 5
			printf "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.3g</text>\n", L, y, R, y, L - 4, y + 4, ymax * g / 5 }
		printf "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">seconds</text>\n", (L + R) / 2, B + 30
		printf "<text x=\"14\" y=\"%d\" transform=\"rotate(-90 14 %d)\" text-anchor=\"middle\">Mbit/s per sample (0.5 s)</text>\n", (T + B) / 2, (T + B) / 2
		y = B - (B - T) * rate / ymax
		printf "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"black\" stroke-dasharray=\"6 3\"/><text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">link rate %s Mbit/s</text>\n", L, y, R, y, R, y - 4, rate
		split("#1f77b4 #d62728 #2ca02c #9467bd #ff7f0e #8c564b #e377c2 #7f7f7f", col, " ")
		for (i = 0; i < 2 * m; i++) {
			printf "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.2\"%s points=\"", col[int(i / 2) % 8 + 1], i % 2 ? " stroke-dasharray=\"3 2\"" : ""
			for (k = 2; k <= n; k++) printf "%.1f,%.1f ", L + (R - L) * t[k] / tmax, B - (B - T) * v[k, i] / ymax
			printf "\"/>\n" }
		for (i = 0; i < m; i++)
			printf "<text x=\"%d\" y=\"%d\" fill=\"%s\">learner %d: down solid, up dashed</text>\n", L + 8, T + 14 + 14 * i, col[i % 8 + 1], i
		print "</svg>" }' "$1" > "$4"
}

: > "$dir/runs"
# one run in the namespaces, links at MBIT: job, name, MBIT
wan_run() {
	sh "$HERE/wan-net.sh" up "$M"
	sh "$HERE/wan-net.sh" shape "$M" "$3"
	sh "$HERE/wan-net.sh" sample "$M" > "$dir/links-$2.txt" &
	sampler=$!
	WAN_BIN=$BIN WAN_TLS=$dir/tls DDILOCO_EXE=$HERE/wan-exec.sh \
		ip netns exec ddw-s "$BIN" run "$1" --run-dir "$dir/$2" > "$dir/$2.out" 2>&1 &
	runner=$!
	wait "$runner" || { runner=; tail -n 5 "$dir/$2.out"; exit 1; }
	runner=
	kill "$sampler"
	sampler=
	summary "$2" "$dir/$2"
	links "$dir/links-$2.txt" "$(awk -v r="$2" '$1 == r { print $3 }' "$dir/runs")"
}

echo "demo-wan: $M learners, $TOKENS tokens per run, links of $RATES Mbit/s, $REPEAT time(s) each; folder $dir"
thin=
for rate in $RATES; do
	if [ -z "$thin" ] || [ "$rate" -lt "$thin" ]; then thin=$rate; fi
done
k=1
while [ "$k" -le "$REPEAT" ]; do
	"$BIN" run "$dir/job.yaml" --run-dir "$dir/loopback-$k" > "$dir/loopback-$k.out" 2>&1 ||
		{ tail -n 5 "$dir/loopback-$k.out"; exit 1; }
	summary "loopback-$k" "$dir/loopback-$k"
	for rate in $RATES; do
		wan_run "$dir/job.yaml" "link$rate-$k" "$rate"
	done
	k=$((k + 1))
done

# Answers queued behind the thinnest link: the whole model in one
# fragment, f32 both ways, pulled every step (P = H = 1), a quarter of the
# tokens. The learners answer faster than the link carries: the syncer
# keeps at most τ rounds in flight and the sidecar one answer per fragment
# (docs/sidecar.md, bounded memory), so its RSS must stay flat.
sed -e 's/^    encoding:.*/    encoding: f32/' -e 's/^    updateEncoding:.*/    updateEncoding: f32/' \
    -e 's/^    fragments:.*/    fragments: 1/' -e 's/^    syncEvery:.*/    syncEvery: 1/' \
    -e "s/^    tokens:.*/    tokens: $((TOKENS / 4))/" "$dir/job.yaml" > "$dir/job-queue.yaml"
echo "answers queued: one fragment, f32 answers and updates, P = H = 1, at $thin Mbit/s"
wan_run "$dir/job-queue.yaml" "queue$thin" "$thin"
awk -v m="$M" 'NF == 1 + 3 * m { n++; for (i = 0; i < m; i++) r[n, i] = $(2 + 2 * m + i) }
	END { for (i = 0; i < m; i++) { a = 0; b = 0
		for (k = 1; k <= n; k++) { if (k <= n / 2 && r[k, i] > a) a = r[k, i]; if (k > n / 2 && r[k, i] > b) b = r[k, i] }
		printf "  sidecar %d RSS: max %.1f MiB in the first half of the run, %.1f MiB in the second\n", i, a / 1024, b / 1024 } }' \
	"$dir/links-queue$thin.txt"
sh "$HERE/wan-net.sh" down

# N from the syncer's first line: "job '...': N parameters in P fragments"
N=$(awk '/ parameters in / { for (i = 1; i < NF; i++) if ($(i + 1) == "parameters") { print $i; exit } }' \
	"$dir/loopback-1/syncer.log")
plot "$dir/links-link$thin-1.txt" "$thin" "link use, $M learners at $thin Mbit/s each (make demo-wan)" "$dir/wan-links.svg"
plot "$dir/links-queue$thin.txt" "$thin" "link use, f32 answers and updates every step at $thin Mbit/s (make demo-wan)" "$dir/wan-links-queue.svg"
awk -v thin="link$thin" -v n="$N" -v m="$M" -v mbit="$thin" '
	function grp(name) { sub(/-[0-9]+$/, "", name); return name }
	{ g = grp($1); if (g != "loopback" && g != thin) next
	  r[g] += $2; l[g] += $4; c[g]++
	  if (!(g in lmin) || $4 < lmin[g]) lmin[g] = $4; if ($4 > lmax[g]) lmax[g] = $4 }
	END {
		r0 = r["loopback"] / c["loopback"]; l0 = l["loopback"] / c["loopback"]
		r1 = r[thin] / c[thin]; l1 = l[thin] / c[thin]
		printf "loopback: %d run(s), eval loss %.4f to %.4f; at %s Mbit/s: %d run(s), %.4f to %.4f\n",
			c["loopback"], lmin["loopback"], lmax["loopback"], mbit, c[thin], lmin[thin], lmax[thin]
		dp = 8 * n * (m - 1) / m * r1 * 8 / 1e6
		printf "data parallel at %.2f steps/s: %d parameters, %.1f Mbit/s per worker\n", r1, n, dp
		printf "wan_step_rate_ratio=%.4f\nwan_loss_ratio=%.4f\nwan_dp_bandwidth_ratio=%.1f\n", r1 / r0, l1 / l0, dp / mbit }' "$dir/runs"
echo "plots: $dir/wan-links.svg $dir/wan-links-queue.svg"
sh "$(dirname "$HERE")/tests/integration/wan_cut.sh" "$dir/cut"
