#!/bin/sh
# Build the control-plane binaries from the pinned Go modules beside this
# script into the cache folder, one at a time, and print their versions.
# A binary already in the cache is reused: delete it to rebuild.
#
#   build.sh            build whatever is missing, then print versions
#   build.sh NAME...    only those (kube-apiserver, etcd, kwok, helm, ...)
#   E2E=1 build.sh      also the real node's kubelet, coredns and its
#                       NetworkPolicy engine (kube-network-policies)
#
# Environment: DDILOCO_K8S_CACHE (default $HOME/.cache/ddiloco-k8s).
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/versions.sh"
CACHE=${DDILOCO_K8S_CACHE:-$HOME/.cache/ddiloco-k8s}
BIN=$CACHE/bin
mkdir -p "$BIN" "$CACHE/logs"

# Go from the machine's /usr/local/go when it is not on PATH (CI shells)
command -v go >/dev/null 2>&1 || PATH=/usr/local/go/bin:$PATH
if ! command -v go >/dev/null 2>&1; then
	echo "build: no Go toolchain (go on PATH or /usr/local/go); the control plane is built from Go modules" >&2
	exit 1
fi

export CGO_ENABLED=0
# The build is long; use both cores but no more (the machine is shared).
GOFLAGS_BUILD="-p 2 -trimpath"

KV_LDFLAGS="-s -w \
 -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION \
 -X k8s.io/component-base/version.gitMajor=$KUBE_MAJOR \
 -X k8s.io/component-base/version.gitMinor=$KUBE_MINOR \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/component-base/version.buildDate=$KUBE_BUILD_DATE \
 -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION \
 -X k8s.io/client-go/pkg/version.gitMajor=$KUBE_MAJOR \
 -X k8s.io/client-go/pkg/version.gitMinor=$KUBE_MINOR \
 -X k8s.io/client-go/pkg/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.buildDate=$KUBE_BUILD_DATE"

now() { date +%s; }

# build NAME MODULE_DIR PACKAGE LDFLAGS
build() {
	name=$1 dir=$2 pkg=$3 ldflags=$4
	if [ -x "$BIN/$name" ]; then
		return 0
	fi
	log=$CACHE/logs/build-$name.log
	echo "build: $name from $pkg (log: $log)"
	t0=$(now)
	try=1
	# a module download that failed is tried again, twice at most
	net='timeout|connection reset|unexpected EOF|dial tcp'
	while ! (cd "$HERE/$dir" && go build $GOFLAGS_BUILD -ldflags "$ldflags" \
		-o "$BIN/$name.tmp.$$" "$pkg") >"$log" 2>&1; do
		rm -f "$BIN/$name.tmp.$$"
		if [ "$try" -lt 3 ] && grep -Eq "$net" "$log"; then
			echo "build: $name: a download failed ($(grep -Em1 "$net" "$log")); trying again"
			try=$((try + 1))
			continue
		fi
		tail -30 "$log" >&2
		echo "build: $name FAILED after $(($(now) - t0)) s (see $log)" >&2
		exit 1
	done
	mv "$BIN/$name.tmp.$$" "$BIN/$name"
	t=$(($(now) - t0))
	echo "build: $name took $t s"
	echo "$name $t" >>"$CACHE/build-times.txt"
}

build_one() {
	case $1 in
	kube-apiserver|kube-controller-manager|kube-scheduler|kubectl|kubelet)
		build "$1" kube "k8s.io/kubernetes/cmd/$1" "$KV_LDFLAGS" ;;
	coredns)
		build coredns coredns . \
			"-s -w -X github.com/coredns/coredns/coremain.GitCommit=$COREDNS_VERSION" ;;
	etcd)
		build etcd etcd go.etcd.io/etcd/server/v3 \
			"-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$ETCD_VERSION" ;;
	kwok)
		build kwok kwok sigs.k8s.io/kwok/cmd/kwok "-s -w" ;;
	kueue)
		# Kueue's own controller (tests/k8s/test_kueue.sh)
		build kueue kueue sigs.k8s.io/kueue/cmd/kueue \
			"-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" ;;
	kube-network-policies)
		# the NetworkPolicy engine of the real node (node.sh netpol)
		build kube-network-policies netpol sigs.k8s.io/kube-network-policies/cmd "-s -w" ;;
	helm)
		build helm helm helm.sh/helm/v3/cmd/helm \
			"-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean" ;;
	*)
		echo "build: unknown binary '$1'" >&2
		exit 2 ;;
	esac
}

ALL="etcd kube-apiserver kube-controller-manager kube-scheduler kwok kubectl helm kueue"
# the real node's binaries (make cluster-up E2E=1, docs/k8s-testing.md)
[ "${E2E:-0}" != 0 ] && ALL="$ALL kubelet coredns kube-network-policies"
[ $# -gt 0 ] && ALL=$*

# Kueue's CRDs and webhook manifests, from the module the binary was
# built from, beside it (tests/k8s/test_kueue.sh applies them)
kueue_files() {
	local dir
	[ -s "$CACHE/kueue/webhooks.yaml" ] && return 0
	dir=$(cd "$HERE/kueue" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue) || return 1
	mkdir -p "$CACHE/kueue/crds"
	cp "$dir"/config/components/crd/bases/*.yaml "$CACHE/kueue/crds/"
	cp "$dir/config/components/webhook/manifests.yaml" "$CACHE/kueue/webhooks.yaml"
}

t_all=$(now)
missing=0
for b in $ALL; do
	[ -x "$BIN/$b" ] || missing=$((missing + 1))
done
for b in $ALL; do
	build_one "$b"
	if [ "$b" = kueue ]; then
		kueue_files || { echo "build: Kueue's CRDs not found in its module" >&2; exit 1; }
	fi
done
if [ "$missing" -gt 0 ]; then
	echo "build: $missing binaries built in $(($(now) - t_all)) s on $(nproc) cores"
fi

# Versions, as each binary reports itself.
for b in $ALL; do
	case $b in
	etcd) v=$("$BIN/etcd" --version 2>&1 | head -1) ;;
	kubectl) v=$("$BIN/kubectl" version --client 2>&1 | head -1) ;;
	helm) v=$("$BIN/helm" version --short 2>&1 | head -1) ;;
	coredns) v=$("$BIN/coredns" -version 2>&1 | head -1) ;;
	kwok) v=$("$BIN/kwok" --version 2>&1 | head -1) ;;
	kueue) v=$KUEUE_VERSION ;;
	kube-network-policies) v=$NETPOL_VERSION ;;
	*) v=$("$BIN/$b" --version 2>&1 | head -1) ;;
	esac
	echo "version: $b: $v"
done
