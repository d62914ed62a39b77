#!/bin/sh
# The image run as the operator lays out a job (operator/children.c), with
# plain Docker on a private network: a syncer container; two learner
# "pods", each a sidecar container and a learner container that shares
# its network namespace and one tmpfs volume at the exchange folder (an
# emptyDir of medium Memory); the job file mounted read-only at the spec
# folder (the ConfigMap); the commands the operator writes, run as
# `ddiloco` found on the image's PATH; the sidecars reach the syncer by its
# container name. Every container runs with the pods' security context
# (operator/children.c): a read-only root file system, every capability
# dropped, no privilege escalation, as the image's user: only the volumes
# are written. gRPC is mutual TLS as in the pods: the syncer and each
# sidecar read their part of the job's Secret <job>-tls (ca.crt, tls.crt,
# tls.key; made here with openssl as the operator makes them) from a
# read-only folder whose files are mode 0440, group 65532, as a secret
# volume with the pod's fsGroup. Rounds and tokens grow; a learner container killed and
# started again in its place rejoins and rounds go on. Every wait has a
# timeout; everything made here is removed at the end, on failure too.
set -eu
cd "$(dirname "$0")/../.."
IMAGE=${IMAGE:-ddiloco:latest}
EXCHANGE_DIR=/run/ddiloco       # operator/children.h
SPEC_DIR=/etc/ddiloco
CHECKPOINT_DIR=/var/lib/ddiloco
TLS_DIR=/etc/ddiloco-tls
# the pods' securityContext: readOnlyRootFilesystem, capabilities drop
# ALL, allowPrivilegeEscalation false, runAsUser/runAsGroup 65532
SEC="--read-only --cap-drop ALL --security-opt no-new-privileges --user 65532:65532"
u=ddiloco-image-$$
net=$u
dir=$(mktemp -d /tmp/ddiloco-image-XXXXXX)
failed=""

D() { timeout 120 docker "$@"; }
containers() { docker ps -a --filter "name=^$u-" --format '{{.Names}}' 2>/dev/null | sort; }
report() {
	echo "FAIL: $*"
	for c in $(containers); do
		echo "--- $c ($(docker inspect --format '{{.State.Status}} exit {{.State.ExitCode}}' "$c" 2>/dev/null))"
		docker logs --tail 12 "$c" 2>&1
	done
}
fail() {
	failed=1
	report "$@"
	exit 1
}
cleanup() {
	rc=$?
	[ "$rc" -eq 0 ] || [ -n "$failed" ] || report "a step failed (exit $rc)"
	for c in $(containers); do docker rm -f "$c" > /dev/null 2>&1 || true; done
	for v in $u-x0 $u-x1 $u-ckpt; do docker volume rm -f "$v" > /dev/null 2>&1 || true; done
	docker network rm "$net" > /dev/null 2>&1 || true
	rm -rf "$dir"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_for SECONDS 'shell condition' what
wait_for() {
	t=0
	while ! eval "$2" 2> /dev/null; do
		t=$((t + 1))
		[ "$t" -le $(($1 * 2)) ] || fail "timed out after $1 s waiting for $3"
		sleep 0.5
	done
}

docker image inspect "$IMAGE" > /dev/null 2>&1 || fail "no image '$IMAGE' here: make image"

# 1. the image (never pulled: there is no registry): its version is the Makefile's, both tags are one image,
# it runs as the non-root user
want=$(sed -n 's/^VERSION *:= *//p' Makefile)
got=$(D run --pull never --rm "$IMAGE" --version)
echo "$IMAGE --version: $got"
[ "$got" = "ddiloco $want" ] || fail "$IMAGE --version printed '$got', not 'ddiloco $want'"
a=$(D image inspect --format '{{.Id}}' "ddiloco:$want")
b=$(D image inspect --format '{{.Id}}' "$IMAGE")
[ "$a" = "$b" ] || fail "ddiloco:$want is $a, $IMAGE is $b"
user=$(D image inspect --format '{{.Config.User}}' "$IMAGE")
[ "$user" = "65532:65532" ] || fail "the image runs as '$user', not 65532:65532"
# the pods' commands start with `ddiloco`: the image's own PATH finds it
path=$(D image inspect --format '{{range .Config.Env}}{{println .}}{{end}}' "$IMAGE" |
	sed -n 's/^PATH=//p')
case ":$path:" in *:/usr/local/bin:*) ;; *) fail "the image's PATH is '$path'" ;; esac

# 1b. the learner side for a learner image of the user's: `ddiloco
# copy-runtime`, as the pods' init container runs it, into a folder the
# image's user may write; the library, what it needs and the package
mkdir -p "$dir/rt"
chmod 777 "$dir/rt"
out=$(D run --pull never --rm $SEC --mount "type=bind,src=$dir/rt,dst=/opt/ddiloco-runtime" \
	"$IMAGE" copy-runtime --to /opt/ddiloco-runtime) || fail "copy-runtime: $out"
echo "$out"
for f in lib/libddiloco.so lib/libopenblas.so.0 lib/libjansson.so.4 lib/libyaml-0.so.2 \
	python/ddiloco/__init__.py; do
	[ -s "$dir/rt/$f" ] || fail "copy-runtime wrote no $f"
done
[ ! -e "$dir/rt/lib/libc.so.6" ] || fail "copy-runtime copied glibc's libc.so.6"
readelf -d "$dir/rt/lib/libddiloco.so" | grep -q 'RPATH.*\[\$ORIGIN\]' ||
	fail "the copied libddiloco.so has no RPATH \$ORIGIN"
rm -rf "$dir/rt"

# 2. the job's pods: the ConfigMap is the job file in a read-only folder
mkdir -p "$dir/spec"
cp tests/image/job.json "$dir/spec/job.json"
chmod 755 "$dir" "$dir/spec"
chmod 644 "$dir/spec/job.json"
job=$SPEC_DIR/job.json
grpc=$(jq -r .spec.syncer.port tests/image/job.json)
http=$(jq -r .spec.syncer.httpPort tests/image/job.json)
jobname=$(jq -r .metadata.name tests/image/job.json)
[ "$(jq -r '.spec.syncer.insecure // false' tests/image/job.json)" = false ] ||
	fail "tests/image/job.json asks for plaintext: the pods run mutual TLS"
D network create "$net" > /dev/null
spec="type=bind,src=$dir/spec,dst=$SPEC_DIR,readonly"

# the job's certificates as operator/children.c lays them out: the CA
# (EC P-256), the syncer's server certificate (the name the sidecars dial,
# here its container's; ddiloco://<job>/syncer), one client certificate
# per learner (ddiloco://<job>/learner/<i>); each pod's part in a folder
tls="$dir/tls"
mkdir -p "$tls"
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$tls/ca.key" 2> /dev/null
openssl req -x509 -new -key "$tls/ca.key" -subj "/CN=ddiloco $jobname ca" -days 1 \
	-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
	-out "$tls/ca.crt" 2> /dev/null || fail "openssl: no CA"
leaf() {   # leaf NAME CN EXTENDED-KEY-USAGE SUBJECT-ALT-NAMES
	mkdir -p "$tls/$1"
	openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$tls/$1/tls.key" 2> /dev/null
	openssl req -new -key "$tls/$1/tls.key" -subj "/CN=$2" -out "$tls/$1.csr" 2> /dev/null
	printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" \
		"extendedKeyUsage=$3" "subjectAltName=$4" > "$tls/$1.ext"
	openssl x509 -req -in "$tls/$1.csr" -CA "$tls/ca.crt" -CAkey "$tls/ca.key" -CAcreateserial \
		-days 1 -extfile "$tls/$1.ext" -out "$tls/$1/tls.crt" 2> /dev/null || fail "openssl: no $1 certificate"
	cp "$tls/ca.crt" "$tls/$1/ca.crt"
	# a secret volume with defaultMode 0440 and the pod's fsGroup 65532
	chown -R 0:65532 "$tls/$1"
	chmod 0750 "$tls/$1"
	chmod 0440 "$tls/$1"/*
}
leaf syncer syncer serverAuth "DNS:$u-syncer,URI:ddiloco://$jobname/syncer"
leaf learner-0 learner-0 clientAuth "URI:ddiloco://$jobname/learner/0"
leaf learner-1 learner-1 clientAuth "URI:ddiloco://$jobname/learner/1"
rm -f "$tls/ca.key"
certs() { echo "type=bind,src=$tls/$1,dst=$TLS_DIR,readonly"; }

# the syncer (the StatefulSet's pod): checkpoints on a volume of its own
# (the claim; Docker fills an empty volume with the image's folder and
# its owner, the non-root user), its HTTP port published on loopback
D volume create "$u-ckpt" > /dev/null
D run --pull never -d --name "$u-syncer" $SEC --network "$net" --mount "$spec" \
	--mount "type=volume,src=$u-ckpt,dst=$CHECKPOINT_DIR" --mount "$(certs syncer)" \
	-p "127.0.0.1::$http" --entrypoint ddiloco "$IMAGE" \
	syncer --job "$job" --checkpoint-dir "$CHECKPOINT_DIR" --tls-dir "$TLS_DIR" > /dev/null
# (published again, on another port, when the container restarts)
port=""
syncer_port() {
	port=$(D port "$u-syncer" "$http/tcp" | sed -n 's/^127\.0\.0\.1:\([0-9]*\)$/\1/p' | head -n 1)
	[ -n "$port" ] || fail "no published port for the syncer's $http"
}
syncer_port
status() { curl -sf --max-time 5 "http://127.0.0.1:$port/status"; }
st() { status | jq -r "$1"; }

# a learner pod: the sidecar first (a native sidecar starts before the
# learner), then the learner in its network namespace; one tmpfs volume,
# mounted in both, is the pod's emptyDir (medium Memory, mode 0777). A
# named volume of the local driver is mounted once on the host and shared
# by the containers that use it (a --mount type=tmpfs is each
# container's own); nocopy: nothing of the image is copied in, whose
# owner would be set on the tmpfs by a mount that ends with the copy
start_sidecar() {
	D run --pull never -d --name "$u-sidecar$1" $SEC --network "$net" --mount "$spec" \
		--mount "type=volume,src=$u-x$1,dst=$EXCHANGE_DIR,volume-nocopy" \
		--mount "$(certs "learner-$1")" --entrypoint ddiloco "$IMAGE" \
		sidecar --job "$job" --learner "$1" --exchange "$EXCHANGE_DIR" \
		--syncer "$u-syncer:$grpc" --http 0.0.0.0:9090 --tls-dir "$TLS_DIR" > /dev/null
}
start_learner() {
	D run --pull never -d --name "$u-learner$1" $SEC --network "container:$u-sidecar$1" \
		--mount "$spec" \
		--mount "type=volume,src=$u-x$1,dst=$EXCHANGE_DIR,volume-nocopy" \
		-e "DDILOCO_LEARNER_ID=$1" --entrypoint ddiloco "$IMAGE" \
		learner --job "$job" --learner "$1" --exchange "$EXCHANGE_DIR" > /dev/null
}
for i in 0 1; do
	D volume create --driver local --opt type=tmpfs --opt device=tmpfs \
		--opt o=size=64m,mode=0777 "$u-x$i" > /dev/null
	start_sidecar $i
	start_learner $i
done

# 3. training progresses: both learners connected, rounds and tokens grow,
# the global model is evaluated
wait_for 90 '[ "$(st .learners_connected)" -eq 2 ]' "two learners connected"
[ "$(st .insecure)" = false ] || fail "the syncer says it runs in plaintext"
wait_for 60 '[ "$(st .round)" -ge 10 ]' "ten rounds"
r0=$(st .round)
k0=$(st .tokens)
s0=$(st '.learners[0].step')
s1=$(st '.learners[1].step')
wait_for 60 '[ "$(st .round)" -ge $((r0 + 40)) ]' "40 more rounds"
# (tokens come with heartbeats, one a second; rounds run at one a step,
# so 40 rounds can pass before the next heartbeat: the first round is
# pulled as soon as K learners are joined)
wait_for 30 '[ "$(st .tokens)" -gt "$k0" ]' "tokens to grow past $k0"
k1=$(st .tokens)
[ "$(st '.learners[0].step')" -gt "$s0" ] || fail "learner 0 did not step past $s0"
[ "$(st '.learners[1].step')" -gt "$s1" ] || fail "learner 1 did not step past $s1"
wait_for 60 '[ "$(st ".eval_history | length")" -ge 1 ]' "an evaluation"
echo "rounds $r0 -> $(st .round), tokens $k0 -> $k1, eval loss $(st '.eval_history[-1].loss')"

# 4. learner 1's container killed: rounds go on with learner 0; a new
# learner container in its place (same pod: same volume, same sidecar)
# rejoins with a new incarnation and trains
joins() { docker logs "$u-syncer" 2>&1 | grep -c "learner 1 joined" || true; }
inc() { docker logs "$u-syncer" 2>&1 | sed -n 's/.*learner 1 joined.*incarnation \([0-9]*\).*/\1/p' | tail -n 1; }
j0=$(joins)
i0=$(inc)
[ "$j0" -ge 1 ] && [ -n "$i0" ] || fail "the syncer never logged learner 1 joining"
D kill "$u-learner1" > /dev/null
D rm "$u-learner1" > /dev/null
r1=$(st .round)
wait_for 60 '[ "$(st .round)" -ge $((r1 + 20)) ]' "20 rounds without learner 1"
start_learner 1
wait_for 90 '[ "$(joins)" -gt "$j0" ]' "learner 1 to rejoin"
# the new container resumes at the job's step, not at step 0
wait_for 30 'docker logs "$u-learner1" 2>&1 | grep -q "resuming at step"' "learner 1 to resume"
rs=$(docker logs "$u-learner1" 2>&1 | sed -n 's/.*resuming at step \([0-9]*\).*/\1/p' | head -n 1)
[ "$rs" -gt 0 ] || fail "learner 1 resumed at step '$rs'"
i1=$(inc)
[ "$i1" != "$i0" ] || fail "learner 1 rejoined with the old incarnation $i0"
s1=$(st '.learners[1].step')
r2=$(st .round)
wait_for 60 '[ "$(st .round)" -ge $((r2 + 40)) ]' "40 rounds with learner 1 back"
wait_for 30 '[ "$(st ".learners[1].step")" -gt "$s1" ]' "learner 1 stepping again"
[ "$(st '.learners[1].connected')" = true ] || fail "learner 1 is not connected"
[ "$(st .learners_connected)" -eq 2 ] || fail "$(st .learners_connected) learners connected, not 2"
echo "learner 1 rejoined (incarnation $i0 -> $i1) at step $rs; rounds $r2 -> $(st .round)"
# two honest learners, one joining late and one restarted: neither is
# excluded by the bounds on its claims (docs/syncer.md, Cuts and exclusion)
[ "$(st '.claims.excluded | length')" -eq 0 ] ||
	fail "learners excluded for their claims: $(status | jq -c .claims)"
echo "claims cut by the syncer's clock: $(st .claims.cut), no learner excluded"

# 5. the syncer wrote checkpoints to its volume as the non-root user;
# killed and started again (the StatefulSet's pod on its claim), it resumes
# from the newest, and both sidecars reconnect
if docker logs "$u-syncer" 2>&1 | grep "cannot save checkpoint" | tail -n 3 | grep .; then
	fail "the syncer could not save checkpoints"
fi
n=$(D cp "$u-syncer:$CHECKPOINT_DIR/." - | tar -t | grep -c '\.ckpt$' || true)
[ "$n" -ge 1 ] || fail "no checkpoint in the syncer's volume"
rk=$(st .round)
D kill "$u-syncer" > /dev/null
D start "$u-syncer" > /dev/null
syncer_port
wait_for 60 'status > /dev/null' "the restarted syncer"
wait_for 30 'docker logs "$u-syncer" 2>&1 | grep -q "resumed from"' "the syncer to resume"
rr=$(docker logs "$u-syncer" 2>&1 | sed -n "s/.*resumed from '[^']*': round \([0-9]*\).*/\1/p" | tail -n 1)
# (rounds go on between reading the round and the kill: at least the
# round read, less the checkpoint interval)
[ -n "$rr" ] && [ "$rr" -ge $((rk - 10)) ] ||
	fail "the syncer resumed at round '$rr'; it was at $rk or later, a checkpoint every 10"
wait_for 60 '[ "$(st .learners_connected)" -eq 2 ]' "both learners to reconnect"
wait_for 60 '[ "$(st .round)" -ge $((rr + 20)) ]' "20 rounds after the restart"
echo "syncer restarted: $n checkpoint(s), resumed at round $rr (was $rk), now $(st .round)"

# nothing went wrong in containers that kept running
for c in syncer sidecar0 sidecar1 learner0 learner1; do
	s=$(docker inspect --format '{{.State.Status}}' "$u-$c")
	[ "$s" = running ] || fail "$c is $s"
done
echo ok
