#!/bin/sh
# A partitioned learner (docs/wan.md): the low-bandwidth job without chaos
# (M = 4, K = 3) in the namespaces of scripts/wan-net.sh, each link at RATE
# Mbit/s (default 20); once the learners train, learner 1's link is cut for
# CUT seconds (default 30) and comes back. Passes when
#   - the run ends done, uptime >= 0.99 (K < M: the others keep the rounds);
#   - learner 1 kept training through the cut (its step moved by at least
#     3 steps per second of the cut) and was neither killed nor restarted;
#   - the syncer saw it leave (before the end) and join again;
#   - what it trained alone was not merged: no merged answer of learner 1
#     held more than half the steps it took during the cut (the syncer's
#     last lines: `learner 1: N steps merged, at most S in one answer`).
#     An answer from its old base that arrives after the rejoin holds
#     them and is emptied as stale (answers.stale); the Welcome's Θ
#     overwrites θ and starts the count again (docs/wan.md); and no step
#     was merged twice (invariants.double_merged_steps 0). What the report
#     books as overwritten or refused is printed, not asserted: the syncer
#     books the time a learner was away as not_training, so it varies.
# Needs root (ip netns, veth, tc): `make test-wan`, not `make test`.
# Argument 1: the folder (default a temporary one, removed on success).
set -eu
BIN=$(realpath "${BUILD:-build}/ddiloco")
ROOT=$(realpath "$(dirname "$0")/../..")
RATE=${RATE:-20}
CUT=${CUT:-30}
if [ "$(id -u)" -ne 0 ]; then
	echo "wan_cut: needs root (ip netns, veth, tc)" >&2
	exit 1
fi
keep=${1:-}
dir=${1:-$(mktemp -d /tmp/ddiloco-wan-cut-XXXXXX)}
mkdir -p "$dir"
dir=$(realpath "$dir")
runner=
cleanup() {
	[ -n "$runner" ] && kill -TERM "$runner" 2>/dev/null && wait "$runner" 2>/dev/null
	sh "$ROOT/scripts/wan-net.sh" down
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
fail() { echo "wan_cut: FAIL: $*"; exit 1; }

# 9 M tokens: the three learners left must not reach the budget before
# the link is back (at 6 M, on an idle machine, they did 0.6 s before)
sed -e '/^  chaos:/,$d' -e "s/^    tokens:.*/    tokens: ${TOKENS:-9000000}/" \
	"$ROOT/examples/lowbandwidth.yaml" > "$dir/job.yaml"
"$BIN" certs "$dir/job.yaml" --out "$dir/tls" --ip 10.77.0.1 >/dev/null
sh "$ROOT/scripts/wan-net.sh" up 4
sh "$ROOT/scripts/wan-net.sh" shape 4 "$RATE"
WAN_BIN=$BIN WAN_TLS=$dir/tls DDILOCO_EXE=$ROOT/scripts/wan-exec.sh \
	ip netns exec ddw-s "$BIN" run "$dir/job.yaml" --run-dir "$dir/run" \
	--timeout 600 > "$dir/run.out" 2>&1 &
runner=$!
run=$dir/run

# learner 1's last logged step (it logs one every 5 s)
step1() { awk '/ step [0-9]+ loss / { s = $5 } END { print s + 0 }' "$run/learner-1.log" 2>/dev/null; }
n=0
until grep -q 'got the global model' "$run/learner-1.log" 2>/dev/null; do
	n=$((n + 1))
	[ "$n" -lt 120 ] || fail "learner 1 did not start within 60 s"
	sleep 0.5
done
sleep 12
s0=$(step1)
echo "cutting learner 1's link for $CUT s at its step $s0"
sh "$ROOT/scripts/wan-net.sh" cut 1 down
sleep "$CUT"
s1=$(step1)
sh "$ROOT/scripts/wan-net.sh" cut 1 up
echo "link back at learner 1's step $s1"
kill -0 "$runner" 2>/dev/null ||
	fail "the job was done before the link came back: no rejoin to see (raise TOKENS)"
wait "$runner" || { runner=; tail -n 8 "$dir/run.out"; fail "the run did not end done"; }
runner=
tail -n 6 "$dir/run.out"

rep=$run/report.json
uptime=$(jq -r .uptime "$rep")
stale=$(jq -r .answers.stale "$rep")
lost=$(jq -r '.goodput_breakdown | (.overwritten + .refused) * .learner_seconds' "$rep")
double=$(jq -r .invariants.double_merged_steps "$rep")
restarts=$(jq -r '.per_learner[1].restarts' "$rep")
most=$(sed -n 's/.*learner 1: [0-9]* steps merged, at most \([0-9]*\) in one answer.*/\1/p' "$run/syncer.log")
left=$(grep 'learner 1 left' "$run/syncer.log" | grep -vc 'job done' || true)
joined=$(grep -c 'learner 1 joined' "$run/syncer.log" || true)
echo "uptime=$uptime stale_answers=$stale overwritten_or_refused_seconds=$lost double_merged_steps=$double"
echo "learner 1: steps $s0 -> $s1 during the cut, left $left, joined $joined, restarts $restarts, at most ${most:-?} steps in one merged answer"
awk -v u="$uptime" 'BEGIN { exit !(u >= 0.99) }' || fail "uptime $uptime < 0.99"
[ $((s1 - s0)) -ge $((3 * CUT)) ] || fail "learner 1 stepped $((s1 - s0)) times in the $CUT s cut"
[ "$restarts" -eq 0 ] || fail "learner 1 was restarted $restarts times"
[ "$left" -ge 1 ] && [ "$joined" -ge 2 ] || fail "learner 1 left $left times, joined $joined times"
[ -n "$most" ] || fail "no line of learner 1's merged steps in syncer.log"
[ "$most" -lt $(((s1 - s0) / 2)) ] ||
	fail "a merged answer of learner 1 held $most steps, of the $((s1 - s0)) it took in the cut"
[ "$double" = 0 ] || fail "double_merged_steps $double"
echo "wan_cut: pass"
[ -n "$keep" ] || rm -rf "$dir"
