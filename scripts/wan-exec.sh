#!/bin/sh
# DDILOCO_EXE of `ddiloco run` inside the network of scripts/wan-net.sh
# (docs/wan.md). `ddiloco run` itself runs in the syncer's namespace
# ddw-s and starts every part through this script, which
#   - syncer:  listens on every address of ddw-s (the bridge, and loopback
#              for the runner's /status polls) instead of 127.0.0.1;
#   - learner: runs in ddw-lI;
#   - sidecar: runs in ddw-lI and dials the syncer at the bridge address;
#   - all:     take their certificates from $WAN_TLS (made by `ddiloco
#              certs --ip 10.77.0.1`, mutual TLS as in every run) instead
#              of the runner's, whose syncer certificate names only 127.0.0.1.
# `ip netns exec` execs the part, so the runner's process id, process group
# and parent-death signal are the part's own.
set -eu
: "${WAN_BIN:?the ddiloco binary}" "${WAN_TLS:?the certificate folder}"
SYNCER=10.77.0.1
role=${1:-}
learner=
prev=
for a do
	shift
	case $prev in
	--listen) a=0.0.0.0:${a##*:} ;;
	--syncer) a=$SYNCER:${a##*:} ;;
	--tls-dir) a=$WAN_TLS/${a##*/} ;;
	--learner) learner=$a ;;
	esac
	set -- "$@" "$a"
	prev=$a
done
case $role in
learner | sidecar) exec ip netns exec "ddw-l$learner" "$WAN_BIN" "$@" ;;
*) exec "$WAN_BIN" "$@" ;;
esac
