#!/usr/bin/env bash
# Stop exactly the processes up.sh started (by the pids it recorded, and
# only while each still runs the binary it started), clean up after the
# real node (node.sh clean), then remove /tmp/ddiloco-k8s. Harmless when
# nothing runs, and after a kill -9 of everything.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/common.sh"
take_lock

stopped=0
for c in $(echo "$COMPONENTS" | tr ' ' '\n' | tac); do
	pid=$(pid_of "$c") || continue
	kill -TERM "$pid" 2>/dev/null || continue
	for _ in $(seq 1 40); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.25
	done
	if kill -0 "$pid" 2>/dev/null; then
		echo "cluster-down: $c ($pid) did not stop on TERM; killing it"
		kill -KILL "$pid" 2>/dev/null
	fi
	stopped=$((stopped + 1))
done
# what the real node left: containers, shims, mounts, bridge, rules
"$HERE/node.sh" clean
# never across a mount a container's volume left behind
rm -rf --one-file-system "$RUN"
echo "cluster-down: stopped $stopped processes"
