#!/bin/sh
# Builds the container image ddiloco:VERSION and ddiloco:latest, the
# runtime image (the syncer's, the sidecars', the learner library's), from
# local files only (no registry, nothing pulled): a rootfs assembled under
# build/image/ from build/ddiloco and the libraries ldd lists, the learner
# side under /usr/local/lib/ddiloco, then
# `docker build` with the Dockerfile at the top of the tree (FROM scratch).
# VERSION is what `build/ddiloco --version` prints (the Makefile's
# VERSION); the manifests that name the image must agree with it.
set -eu
BUILD=${BUILD:-build}
BIN=$BUILD/ddiloco
SO=$BUILD/libddiloco.so
OUT=$BUILD/image
ROOT=$OUT/rootfs
CTX=$OUT/context
# the non-root user's folders: its home, the mount points a pod uses
OWNED="etc/ddiloco run/ddiloco var/lib/ddiloco home/ddiloco"
DATA=/usr/share/games/fortunes

die() {
	echo "image: $*" >&2
	exit 1
}

command -v docker > /dev/null 2>&1 ||
	die "docker not found: install Docker (the engine and its client)"
if ! err=$(docker version --format '{{.Server.Version}}' 2>&1); then
	die "docker is not reachable (is the daemon running, may $(id -un) use its socket?): $(echo "$err" | tail -n 1)"
fi
[ -x "$BIN" ] || die "'$BIN' is missing: run make first"
[ -f "$SO" ] || die "'$SO' is missing: run make first"
VERSION=$("$BIN" --version | awk '{ print $2 }')
[ -n "$VERSION" ] || die "'$BIN --version' printed no version"

# one version: the operator's manifest and the chart name this image
grep -q "image: ddiloco:$VERSION\$" deploy/04-operator.yaml ||
	die "deploy/04-operator.yaml does not run ddiloco:$VERSION"
grep -q -- "--runtime-image, \"ddiloco:$VERSION\"" deploy/04-operator.yaml ||
	die "deploy/04-operator.yaml does not name ddiloco:$VERSION as the runtime image"
grep -q "^appVersion: \"$VERSION\"\$" charts/ddiloco/Chart.yaml ||
	die "charts/ddiloco/Chart.yaml appVersion is not \"$VERSION\""
[ -d "$DATA" ] || die "'$DATA' is missing (the example jobs read it): apt-get install fortunes"

rm -rf "$OUT"
mkdir -p "$ROOT/usr/local/bin" "$ROOT/etc" "$ROOT/tmp" "$ROOT$DATA" "$CTX"
for d in $OWNED; do mkdir -p "$ROOT/$d"; done
chmod 1777 "$ROOT/tmp"

# the binary and the library without their debug sections (the build
# keeps them)
strip_to() {
	if command -v strip > /dev/null 2>&1; then
		strip --strip-debug -o "$2" "$1"
	else
		cp "$1" "$2"
	fi
}
strip_to "$BIN" "$ROOT/usr/local/bin/ddiloco"

# every library ldd lists, and the loader, at the path ldd gives, the
# symlinks followed (libopenblas.so.0 is an alternatives link)
ldd "$BIN" | awk '
	$2 == "=>" && $3 ~ /^\// { print $3 }
	$1 ~ /^\// { print $1 }' | sort -u > "$OUT/libs"
[ -s "$OUT/libs" ] || die "ldd listed no libraries for '$BIN'"
if ldd "$BIN" | grep -q "not found"; then
	die "ldd: libraries not found: $(ldd "$BIN" | grep "not found" | tr -s ' \t\n' ' ')"
fi
while read -r lib; do
	mkdir -p "$ROOT$(dirname "$lib")"
	cp -L "$lib" "$ROOT$lib"
done < "$OUT/libs"

# the learner side, for a learner image that holds none of it (`ddiloco
# copy-runtime` copies it out; docs/operator.md, Images): libddiloco.so
# and every library it needs but glibc's own, beside it (its RPATH
# $ORIGIN finds them there first), and the Python package
RT=$ROOT/usr/local/lib/ddiloco
mkdir -p "$RT/lib" "$RT/python/ddiloco"
strip_to "$SO" "$RT/lib/libddiloco.so"
ldd "$SO" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' |
	grep -v -E '/(libc|libm|libpthread|libdl|librt|libresolv)\.so' |
	while read -r lib; do cp -L "$lib" "$RT/lib/$(basename "$lib")"; done
cp python/ddiloco/*.py "$RT/python/ddiloco/"

# a non-root user; glibc 2.34+ has files and dns built in, nsswitch.conf
# says which order (files first: /etc/hosts as Docker and Kubernetes
# write it)
cat > "$ROOT/etc/passwd" <<PASSWD
root:x:0:0:root:/root:/sbin/nologin
ddiloco:x:65532:65532:ddiloco:/home/ddiloco:/sbin/nologin
PASSWD
cat > "$ROOT/etc/group" <<GROUP
root:x:0:
ddiloco:x:65532:
GROUP
cat > "$ROOT/etc/nsswitch.conf" <<NSS
passwd: files
group:  files
hosts:  files dns
NSS

# the data the example jobs name (spec.data.path): the fortune files,
# without the .dat indexes and .u8 links the loader skips anyway
find "$DATA" -maxdepth 1 -type f ! -name '*.dat' -exec cp {} "$ROOT$DATA/" \;

# one archive: everything root's, then the user's folders appended. The
# same files make the same archive (names sorted, times 0), so docker
# build takes every step from its cache and the image stays the one
# there: make test-image and make test-e2e in one CI run build it once
excl=""
for d in $OWNED; do excl="$excl --exclude=./$d"; done
# shellcheck disable=SC2086
tar --create --file "$CTX/rootfs.tar" --sort=name --numeric-owner \
	--owner=0 --group=0 --mtime=@0 $excl -C "$ROOT" .
# shellcheck disable=SC2086
tar --append --file "$CTX/rootfs.tar" --numeric-owner --owner=65532 \
	--group=65532 --mtime=@0 --no-recursion -C "$ROOT" $OWNED

old=$(docker image inspect --format '{{.Id}}' "ddiloco:$VERSION" 2>/dev/null || true)
start=$(date +%s)
docker build --build-arg "VERSION=$VERSION" -f Dockerfile \
	-t "ddiloco:$VERSION" -t ddiloco:latest "$CTX"
end=$(date +%s)
new=$(docker image inspect --format '{{.Id}}' "ddiloco:$VERSION")
# the image this one replaces, if nothing else uses it
if [ -n "$old" ] && [ "$old" != "$new" ]; then
	docker rmi "$old" > /dev/null 2>&1 || true
fi
[ "$old" = "$new" ] &&
	echo "image: ddiloco:$VERSION unchanged (the same files: every step from docker's cache)"
bytes=$(docker image inspect --format '{{.Size}}' "ddiloco:$VERSION")
echo "image: ddiloco:$VERSION and ddiloco:latest," \
	"$(awk -v b="$bytes" 'BEGIN { printf "%.1f MiB", b / 1048576 }')" \
	"($bytes bytes, $(wc -l < "$OUT/libs") libraries), docker build $((end - start)) s"
