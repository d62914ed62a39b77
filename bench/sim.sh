#!/bin/sh
# Times `ddiloco sim --table` (5 sizes × 6 modes × 5 repeats × 30 simulated
# days) and one 2.4M-chip elastic configuration; prints key=value lines.
BUILD=${BUILD:-build}
BIN=$BUILD/ddiloco
out=$(mktemp)
trap 'rm -f "$out"' EXIT

now() { date +%s.%N; }

t0=$(now)
"$BIN" sim --table >"$out" || exit 1
t1=$(now)
awk -v t0="$t0" -v t1="$t1" '/events simulated/ {
	printf "sim_table_wall_s=%.2f\n", t1 - t0
	printf "sim_table_cpu_s=%s\n", $5
	printf "sim_table_events=%s\n", $1
	printf "sim_table_events_per_cpu_s=%.0f\n", $1 / $5
}' "$out"

t0=$(now)
"$BIN" sim --mode elastic --chips 2400000 --format csv >"$out" || exit 1
t1=$(now)
awk -F, -v t0="$t0" -v t1="$t1" 'NR == 2 {
	printf "sim_elastic_2400k_wall_s=%.2f\n", t1 - t0
	printf "sim_elastic_2400k_goodput=%s\n", $6
}' "$out"
