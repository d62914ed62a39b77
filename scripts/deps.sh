#!/bin/sh
# Installs the Debian packages ddiloco needs to build, test and run the
# quickstart. Does nothing when all are present.
#   sh scripts/deps.sh        build, test, run
#   sh scripts/deps.sh fuzz   also clang and its libFuzzer/sanitizer runtimes
#                             (make fuzz only: make test never needs clang)
#   sh scripts/deps.sh torch  also Debian's PyTorch (CPU) for /usr/bin/python3
#                             (make test-pytorch only: make test needs no torch)
#   sh scripts/deps.sh image-pytorch  also debootstrap (make image-pytorch:
#                             the PyTorch learner's image)
#   sh scripts/deps.sh study  also the kernel's documentation, the quality
#                             study's corpus (examples/study.yaml)
set -e
PKGS="build-essential pkg-config libopenblas-dev libcmocka-dev libjansson-dev
libcurl4-openssl-dev libmicrohttpd-dev libgrpc-dev libssl-dev protobuf-c-compiler
libprotobuf-c-dev libyaml-dev fortunes openssl jq curl iproute2 procps python3
python3-yaml"
[ "${1:-}" = fuzz ] && PKGS="$PKGS clang libclang-rt-dev"
[ "${1:-}" = image-pytorch ] && PKGS="$PKGS debootstrap"
[ "${1:-}" = study ] && PKGS="$PKGS linux-doc-6.1"
[ "${1:-}" = torch ] && PKGS="$PKGS python3-torch python3-numpy python3-pip python3-setuptools python3-yaml"
missing=""
for p in $PKGS; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
		missing="$missing $p"
	fi
done
[ -z "$missing" ] && exit 0
echo "deps: installing:$missing"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
