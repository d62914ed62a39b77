#!/bin/sh
# ddiloco sim end to end: exit codes, the three formats, the table and its
# SVG, seeds. Short runs (1 simulated day, 2 repeats): a few seconds.
set -u
BIN=${BUILD:-build}/ddiloco
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_sim: $*"; exit 1; }
short="--days 1 --repeats 2"

"$BIN" sim --help >"$tmp/help" || fail "--help exit $?"
grep -q -- "--mode nonelastic|elastic|decoupled" "$tmp/help" || fail "--help lacks --mode"

"$BIN" sim --mode decoupled --learners 0 2>"$tmp/err"
[ $? -eq 2 ] || fail "bad --learners: want exit 2"
grep -q "ddiloco sim: --learners must be between 1 and 256, got 0" "$tmp/err" ||
	fail "bad --learners message: $(cat "$tmp/err")"
"$BIN" sim --format yaml 2>"$tmp/err"
[ $? -eq 2 ] || fail "bad --format: want exit 2"
grep -q -- "--format must be text, csv or json, got 'yaml'" "$tmp/err" || fail "bad --format message"

# JSON: goodput, uptime and their intervals, fractions in [0, 1]
"$BIN" sim --mode decoupled --learners 4 --chips 600k $short --format json >"$tmp/one.json" ||
	fail "json run"
for k in '"goodput":' '"goodput_ci":' '"uptime":' '"uptime_ci":' '"learners": 4' '"chips": 600000'; do
	grep -q "$k" "$tmp/one.json" || fail "json lacks $k"
done
awk '/"goodput":|"uptime":/ { v = $2 + 0; if (v <= 0 || v > 1) bad = 1 } END { exit bad }' \
	"$tmp/one.json" || fail "goodput or uptime outside (0, 1]"

# same seed, same output; another seed, another output
"$BIN" sim --mode elastic --chips 300k $short --format csv >"$tmp/a" || fail "csv run"
"$BIN" sim --mode elastic --chips 300k $short --format csv >"$tmp/b" || fail "csv run"
"$BIN" sim --mode elastic --chips 300k $short --format csv --seed 7 >"$tmp/c" || fail "csv run"
cmp -s "$tmp/a" "$tmp/b" || fail "same seed gave different output"
cmp -s "$tmp/a" "$tmp/c" && fail "another seed gave the same output"
head -1 "$tmp/a" | grep -q "^label,mode,learners,quorum,chips,goodput,goodput_lo,goodput_hi,uptime" ||
	fail "csv header"

# the table: 30 rows, published numbers on the data parallel rows, SVG
"$BIN" sim --table $short --format csv --svg "$tmp/g.svg" >"$tmp/t.csv" || fail "table"
[ "$(wc -l <"$tmp/t.csv")" -eq 31 ] || fail "table: want 31 csv lines"
grep -q "^nonelastic,nonelastic,1,1,2400000,.*,0.18$" "$tmp/t.csv" || fail "table: published 2.4M"
grep -q "^M=16,decoupled,16,1,150000," "$tmp/t.csv" || fail "table: M=16 row"
[ "$(grep -c "<polyline" "$tmp/g.svg")" -eq 8 ] || fail "svg: want 6 lines + 2 published"
grep -q "</svg>" "$tmp/g.svg" || fail "svg not closed"
exit 0
