#!/bin/sh
# Times `ddiloco sim --table` (5 sizes × 6 modes × 5 repeats × 30 days) and
# one 2.4M-chip elastic configuration; prints key=value lines.
BUILD=${BUILD:-build}
BIN=$BUILD/ddiloco
out=$(mktemp)
trap 'rm -f "$out"' EXIT

t0=$(date +%s.%N)
"$BIN" sim --table >"$out" || exit 1
t1=$(date +%s.%N)
events=$(awk '/events simulated/ { print $1 }' "$out")
echo "sim_table_wall_s=$(echo "$t1 - $t0" | bc -l | awk '{ printf "%.2f", $1 }')"
echo "sim_table_events=$events"
echo "sim_table_events_per_s=$(echo "$events / ($t1 - $t0)" | bc -l | awk '{ printf "%.0f", $1 }')"

t0=$(date +%s.%N)
"$BIN" sim --mode elastic --chips 2400000 --format csv >"$out" || exit 1
t1=$(date +%s.%N)
echo "sim_elastic_2400k_wall_s=$(echo "$t1 - $t0" | bc -l | awk '{ printf "%.2f", $1 }')"
echo "sim_elastic_2400k_goodput=$(awk -F, 'NR == 2 { print $6 }' "$out")"
