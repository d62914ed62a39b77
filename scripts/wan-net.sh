#!/bin/sh
# The network of `make demo-wan` and tests/integration/test_wan_cut.sh
# (docs/wan.md): the syncer's namespace ddw-s with a bridge ddw-br
# (10.77.0.1/24), and per learner I a namespace ddw-lI joined to the bridge
# by a veth pair (ddw-hI on the bridge, ddw-xI = 10.77.0.(10+I) in the
# learner's namespace). Nothing is made in the root namespace: deleting
# the namespaces deletes every link.
#
#   wan-net.sh up M          remove a stale network, make a new one for M learners
#   wan-net.sh shape M MBIT  tbf on both ends of every learner's link (0: none)
#   wan-net.sh cut I down|up the link of learner I down or up again
#   wan-net.sh down          stop what runs in the namespaces, delete them
#   wan-net.sh sample M      every 0.5 s until killed, one line: seconds, then
#                            per learner link the bytes the syncer's end sent
#                            and received, then per learner its sidecar's RSS
#                            in KiB (0: not running)
#
# Needs root (ip netns, veth, tc). The prefix ddw- is the demo's alone.
set -eu
PFX=ddw
NET=10.77.0

spaces() { ip netns list 2>/dev/null | awk -v p="^$PFX-" '$1 ~ p { print $1 }'; }

down() {
	for ns in $(spaces); do
		# processes a previous run left in a namespace of ours, by id
		for pid in $(ip netns pids "$ns" 2>/dev/null); do
			kill -9 "$pid" 2>/dev/null || true
		done
		ip netns del "$ns" 2>/dev/null || true
	done
}

up() {
	m=$1
	down
	ip netns add $PFX-s
	ip -n $PFX-s link set lo up
	ip -n $PFX-s link add $PFX-br type bridge
	ip -n $PFX-s addr add $NET.1/24 dev $PFX-br
	ip -n $PFX-s link set $PFX-br up
	i=0
	while [ "$i" -lt "$m" ]; do
		ip netns add $PFX-l$i
		ip -n $PFX-l$i link set lo up
		ip -n $PFX-s link add $PFX-h$i type veth peer name $PFX-x$i netns $PFX-l$i
		ip -n $PFX-s link set $PFX-h$i master $PFX-br up
		ip -n $PFX-l$i addr add $NET.$((10 + i))/24 dev $PFX-x$i
		ip -n $PFX-l$i link set $PFX-x$i up
		i=$((i + 1))
	done
	# the bridge forwards as soon as its ports are up (no STP, no delay)
	ip -n $PFX-s link set $PFX-br type bridge forward_delay 0 stp_state 0
}

# tbf on the egress of both ends: ddw-hI shapes what the syncer sends to
# learner I, ddw-xI what learner I sends. The bucket holds 5 ms of the rate
# and at least 64 KiB, so one 64 KiB GSO packet of the veth always fits.
shape() {
	m=$1 mbit=$2
	burst=$((mbit * 1000000 / 8 / 200))
	[ "$burst" -lt 65536 ] && burst=65536
	i=0
	while [ "$i" -lt "$m" ]; do
		for end in "s $PFX-h$i" "l$i $PFX-x$i"; do
			set -- $end
			tc -n $PFX-$1 qdisc del dev "$2" root 2>/dev/null || true
			[ "$mbit" -eq 0 ] || tc -n $PFX-$1 qdisc add dev "$2" root tbf \
				rate "${mbit}mbit" burst "$burst" latency 100ms
		done
		i=$((i + 1))
	done
}

# The sampler runs in ddw-s, where /sys/class/net shows the links, and
# reads with shell builtins only, so that it costs the learners little.
sample() {
	m=$1
	set +e
	read t0 _ < /proc/uptime
	t0=${t0%.*}${t0#*.}
	pids=
	while :; do
		read t _ < /proc/uptime
		t=$((${t%.*}${t#*.} - t0))     # centiseconds
		line=$((t / 100)).$(printf %02d $((t % 100)))
		i=0
		while [ "$i" -lt "$m" ]; do
			read tx < /sys/class/net/$PFX-h$i/statistics/tx_bytes
			read rx < /sys/class/net/$PFX-h$i/statistics/rx_bytes
			line="$line $tx $rx"
			i=$((i + 1))
		done
		# the sidecars' process ids, found again when one is gone
		i=0
		for pid in $pids; do [ -e /proc/$pid ] || pids=; done
		if [ -z "$pids" ]; then
			while [ "$i" -lt "$m" ]; do
				s=0
				for pid in $(ip netns pids $PFX-l$i 2>/dev/null); do
					case $(tr '\0' ' ' < /proc/$pid/cmdline 2>/dev/null) in
					*" sidecar "*) s=$pid ;;
					esac
				done
				pids="$pids $s"
				i=$((i + 1))
			done
			case " $pids " in *" 0 "*) found=$pids; pids= ;; *) found=$pids ;; esac
		else
			found=$pids
		fi
		for pid in $found; do
			r=0
			[ "$pid" -ne 0 ] && [ -r /proc/$pid/status ] && while read k v _; do
				[ "$k" = VmRSS: ] && r=$v && break
			done < /proc/$pid/status
			line="$line $r"
		done
		echo "$line"
		sleep 0.5
	done
}

case ${1:-} in
sample) exec ip netns exec $PFX-s sh "$0" sample-here "${2:?learners}" ;;
sample-here) sample "$2" ;;
up) up "${2:?learners}" ;;
shape) shape "${2:?learners}" "${3:?Mbit/s}" ;;
cut) ip -n $PFX-s link set "$PFX-h${2:?learner}" "${3:?down or up}" ;;
down) down ;;
*) echo "usage: wan-net.sh up M | shape M MBIT | cut I down|up | down | sample M" >&2; exit 2 ;;
esac
