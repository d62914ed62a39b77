#!/bin/sh
# Builds the container image ddiloco-pytorch:VERSION, the PyTorch
# learner's: a user's image as a platform team would have one, with no
# ddiloco in it. From local files and Debian's packages only (no
# container registry, nothing pulled):
#
#   1. the base: a Debian root file system made by debootstrap
#      (--variant=minbase) from the suite and mirror this machine's apt
#      uses, then, with apt inside it (chroot), python3-torch and
#      python3-numpy, and the image's user 65532. Documentation, locales
#      and apt's lists are removed. It is kept as an archive in
#      ~/.cache/ddiloco-image (DDILOCO_IMAGE_CACHE) and imported as the
#      local image ddiloco-pytorch-base:KEY, KEY a hash of the suites,
#      mirror, architecture and package list: a later build with the same
#      KEY reuses it and downloads nothing.
#   2. our layer on it (Dockerfile.pytorch): examples/pytorch (the
#      learner script), the fortunes the example jobs name, and the
#      folders a pod mounts, owned by the image's user. No ddiloco
#      binary, no libddiloco.so, no Python package: the operator copies
#      the learner side in from its runtime image (docs/operator.md,
#      Images), and the syncer and sidecars run that image.
#
# Then the image is run once as the operator runs its pods (read-only
# root, user 65532, no network): python3 imports torch and finds no
# ddiloco, neither a package nor a binary. VERSION is the project's
# (build/ddiloco --version). docs/k8s-testing.md has the build's times.
set -eu
BUILD=${BUILD:-build}
BIN=$BUILD/ddiloco
OUT=$BUILD/image-pytorch
ROOT=$OUT/rootfs
CTX=$OUT/context
CACHE=${DDILOCO_IMAGE_CACHE:-$HOME/.cache/ddiloco-image}
NAME=ddiloco-pytorch
# the image's Debian packages (with what apt makes them depend on)
PY_PKGS="python3-torch python3-numpy"
OWNED="etc/ddiloco run/ddiloco var/lib/ddiloco home/ddiloco"
DATA=/usr/share/games/fortunes

die() {
	echo "image-pytorch: $*" >&2
	exit 1
}
say() {
	echo "image-pytorch: $*"
}

[ "$(id -u)" -eq 0 ] || die "debootstrap and chroot need root"
command -v docker > /dev/null 2>&1 ||
	die "docker not found: install Docker (the engine and its client)"
command -v debootstrap > /dev/null 2>&1 ||
	die "debootstrap not found: sh scripts/deps.sh image-pytorch"
if ! err=$(docker version --format '{{.Server.Version}}' 2>&1); then
	die "docker is not reachable: $(echo "$err" | tail -n 1)"
fi
[ -x "$BIN" ] || die "'$BIN' is missing (its --version tags the image): run make first"
[ -d "$DATA" ] || die "'$DATA' is missing: apt-get install fortunes"
VERSION=$("$BIN" --version | awk '{ print $2 }')
[ -n "$VERSION" ] || die "'$BIN --version' printed no version"
grep -q "image: $NAME:$VERSION\$" examples/pytorch/e2e.yaml ||
	die "examples/pytorch/e2e.yaml does not run $NAME:$VERSION"

t_start=$(date +%s)

# --- what apt on this machine uses: suite, mirror, components -------------
# (read, not sourced: it sets NAME and VERSION)
SUITE=$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release | tr -d '"')
[ -n "$SUITE" ] || die "/etc/os-release names no VERSION_CODENAME"
ARCH=$(dpkg --print-architecture)
# the first "deb" source of the suite: deb822 stanzas (sources.list.d/
# *.sources), then one-line entries (sources.list, *.list); prints
# "URI<TAB>suites<TAB>components"
apt_source() {
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		awk -v want="$SUITE" '
			function flush() {
				if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " want " ")) {
					split(uris, u, " ")
					printf "%s\t%s\t%s\n", u[1], suites, comps
					found = 1
					exit
				}
				types = uris = suites = comps = ""
			}
			/^[ \t]*$/ { flush(); next }
			/^#/ { next }
			{
				k = $1; sub(/:$/, "", k); $1 = ""
				sub(/^ +/, "")
				if (k == "Types") types = $0
				else if (k == "URIs") uris = $0
				else if (k == "Suites") suites = $0
				else if (k == "Components") comps = $0
			}
			END { if (!found) flush() }' "$f"
	done
	cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
		awk -v want="$SUITE" '
			$1 == "deb" {
				i = 2
				if ($i ~ /^\[/) {      # [options]: up to the token ending in ]
					while (i < NF && $i !~ /\]$/) i++
					i++
				}
				if ($(i + 1) != want) next
				c = ""
				for (j = i + 2; j <= NF; j++) c = c " " $j
				printf "%s\t%s\t%s\n", $i, want, substr(c, 2)
			}'
}
src=$(apt_source | head -n 1)
[ -n "$src" ] || die "no deb source for '$SUITE' in /etc/apt/sources.list*"
MIRROR=$(echo "$src" | cut -f 1)
SUITES=$(echo "$src" | cut -f 2)
COMPS=$(echo "$src" | cut -f 3)
[ -n "$COMPS" ] || COMPS=main
say "Debian $SUITE ($ARCH) from $MIRROR, suites: $SUITES"

mkdir -p "$OUT"
PKGS=$(echo "$PY_PKGS" | tr ' ' '\n' | sed '/^$/d' | sort -u | tr '\n' ' ')
PKGS=${PKGS% }
KEY=$(printf '%s\n' "$SUITE" "$SUITES" "$COMPS" "$MIRROR" "$ARCH" "$PKGS" |
	sha256sum | cut -c 1-12)
BASE=$NAME-base:$KEY
BASE_TAR=$CACHE/base-$SUITE-$ARCH-$KEY.tar
say "base $BASE: $(echo "$PKGS" | wc -w) packages: $PKGS"

# --- 1. the base image -----------------------------------------------------
# a command inside the chroot, with an environment of its own
in_root() {
	env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C HOME=/root \
		DEBIAN_FRONTEND=noninteractive chroot "$stage" "$@"
}

make_base() {
	stage=$(cd "$OUT" && pwd)/base
	mkdir -p "$CACHE"
	rm -rf "$stage"
	mkdir -p "$stage"
	t0=$(date +%s)
	debootstrap --variant=minbase --arch="$ARCH" "$SUITE" "$stage" "$MIRROR" \
		> "$OUT/debootstrap.log" 2>&1 ||
		{ tail -n 20 "$OUT/debootstrap.log"; die "debootstrap failed (build/image-pytorch/debootstrap.log)"; }
	say "debootstrap --variant=minbase $SUITE: $(($(date +%s) - t0)) s"

	# apt inside: the same suites (e.g. the suite's updates) as here
	: > "$stage/etc/apt/sources.list"
	for s in $SUITES; do
		echo "deb $MIRROR $s $COMPS" >> "$stage/etc/apt/sources.list"
	done
	# no documentation, man pages or locales from any package
	cat > "$stage/etc/dpkg/dpkg.cfg.d/01-ddiloco-nodoc" <<'NODOC'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
NODOC
	cp /etc/resolv.conf "$stage/etc/resolv.conf"
	# no service starts inside the chroot
	printf '#!/bin/sh\nexit 101\n' > "$stage/usr/sbin/policy-rc.d"
	chmod 755 "$stage/usr/sbin/policy-rc.d"
	mount -t proc proc "$stage/proc"
	trap 'umount "$stage/proc" 2>/dev/null' EXIT
	trap 'exit 1' INT TERM
	t0=$(date +%s)
	# shellcheck disable=SC2086
	if ! { in_root apt-get update -qq &&
		in_root apt-get install -y -qq --no-install-recommends $PKGS; } \
		> "$OUT/apt.log" 2>&1; then
		tail -n 20 "$OUT/apt.log"
		die "apt-get install in the chroot failed (build/image-pytorch/apt.log)"
	fi
	say "apt-get install in the chroot: $(($(date +%s) - t0)) s," \
		"$(grep -c '^Setting up' "$OUT/apt.log") packages set up"
	in_root groupadd --gid 65532 ddiloco
	in_root useradd --uid 65532 --gid 65532 --no-create-home \
		--home-dir /home/ddiloco --shell /usr/sbin/nologin ddiloco
	in_root apt-get clean
	# a process the install started in the chroot can hold its /proc a
	# moment after apt-get returns ("target is busy"): try again, then
	# detach it lazily
	n=0
	until umount "$stage/proc" 2>/dev/null; do
		n=$((n + 1))
		if [ "$n" -ge 10 ]; then
			umount -l "$stage/proc"
			break
		fi
		sleep 1
	done
	trap - EXIT
	rm -rf "$stage"/var/lib/apt/lists/* "$stage"/var/cache/apt/* \
		"$stage"/var/cache/debconf/*-old "$stage"/var/log/* \
		"$stage/usr/sbin/policy-rc.d" "$stage"/tmp/* "$stage"/root/.cache
	: > "$stage/etc/resolv.conf"
	# the torch tests' binaries (libtorch-test, a dependency of
	# python3-torch) are never run in a learner
	find "$stage/usr" -maxdepth 4 -type d -name 'libtorch-test*' -prune \
		-exec rm -rf {} +
	tar --create --file "$BASE_TAR.part" --sort=name --numeric-owner \
		--one-file-system -C "$stage" .
	mv "$BASE_TAR.part" "$BASE_TAR"
	rm -rf "$stage"
	say "base archive $BASE_TAR: $(du -m "$BASE_TAR" | cut -f 1) MiB"
}

if docker image inspect "$BASE" > /dev/null 2>&1; then
	say "base $BASE: present"
else
	[ -s "$BASE_TAR" ] || make_base
	t0=$(date +%s)
	docker import --message "debootstrap $SUITE minbase + $PY_PKGS" \
		"$BASE_TAR" "$BASE" > /dev/null || die "docker import '$BASE_TAR'"
	say "docker import of the base: $(($(date +%s) - t0)) s"
fi

# --- 2. our layer ----------------------------------------------------------
rm -rf "$ROOT" "$CTX"
mkdir -p "$ROOT/opt/ddiloco/examples" "$ROOT$DATA" "$CTX"
for d in $OWNED; do mkdir -p "$ROOT/$d"; done
# the learner script, without caches
tar --create --exclude=__pycache__ -C examples pytorch | tar --extract -C "$ROOT/opt/ddiloco/examples"
find "$DATA" -maxdepth 1 -type f ! -name '*.dat' -exec cp {} "$ROOT$DATA/" \;
excl=""
for d in $OWNED; do excl="$excl --exclude=./$d"; done
# shellcheck disable=SC2086
tar --create --file "$CTX/ddiloco.tar" --sort=name --numeric-owner \
	--owner=0 --group=0 --mode=go-w --mtime=@0 $excl -C "$ROOT" .
# shellcheck disable=SC2086
tar --append --file "$CTX/ddiloco.tar" --numeric-owner --owner=65532 \
	--group=65532 --mtime=@0 --no-recursion -C "$ROOT" $OWNED

old=$(docker image inspect --format '{{.Id}}' "$NAME:$VERSION" 2>/dev/null || true)
t0=$(date +%s)
docker build --build-arg "BASE=$BASE" --build-arg "VERSION=$VERSION" \
	-f Dockerfile.pytorch -t "$NAME:$VERSION" "$CTX" > "$OUT/build.log" 2>&1 ||
	{ cat "$OUT/build.log"; die "docker build failed"; }
t_build=$(($(date +%s) - t0))
new=$(docker image inspect --format '{{.Id}}' "$NAME:$VERSION")
if [ -n "$old" ] && [ "$old" != "$new" ]; then
	docker rmi "$old" > /dev/null 2>&1 || true
fi
# older bases no build names any more
docker images --format '{{.Repository}}:{{.Tag}}' "$NAME-base" | while read -r b; do
	[ "$b" = "$BASE" ] || docker rmi "$b" > /dev/null 2>&1 || true
done

# --- run once as a pod would (a new image only) ---------------------------
PY_CHECK='
import ctypes.util, importlib.util, shutil, torch
found = [w for w, f in (("the package", importlib.util.find_spec("ddiloco")),
                        ("the binary", shutil.which("ddiloco")),
                        ("libddiloco.so", ctypes.util.find_library("ddiloco"))) if f]
assert not found, "ddiloco in the image: " + ", ".join(found)
print("torch %s, no ddiloco" % torch.__version__)
'
if [ "$old" = "$new" ]; then
	say "$NAME:$VERSION unchanged (the same files: every step from docker's cache)"
else
	t0=$(date +%s)
	check=$(docker run --rm --read-only --network none --user 65532:65532 \
		--cap-drop ALL --security-opt no-new-privileges \
		--entrypoint /usr/bin/python3 "$NAME:$VERSION" -c "$PY_CHECK" 2>&1) ||
		die "the image does not run as a pod would: $check"
	say "run as a pod would (read-only root, user 65532): $check ($(($(date +%s) - t0)) s)"
fi

bytes=$(docker image inspect --format '{{.Size}}' "$NAME:$VERSION")
say "$NAME:$VERSION on $BASE," \
	"$(awk -v b="$bytes" 'BEGIN { printf "%.1f MiB", b / 1048576 }') ($bytes bytes)," \
	"docker build $t_build s, all $(($(date +%s) - t_start)) s"
