#!/bin/sh
# The PyTorch learner's image (make image-pytorch), which holds no
# ddiloco, run as the operator lays out job e2e-pytorch
# (examples/pytorch/e2e.yaml), with plain Docker on a private network,
# like tests/image/test_image.sh: a syncer container of the runtime image
# (ddiloco:latest, make image); two learner "pods", each a sidecar
# container of the runtime image, its init container's `ddiloco
# copy-runtime` into a volume, and a learner container of the PyTorch
# image (python3 examples/pytorch/external.py, the job's command) with
# that volume read-only and DDILOCO_LIB and PYTHONPATH naming it, sharing
# the sidecar's network namespace and one tmpfs volume at the exchange
# folder; the job file read-only at the spec folder; every container
# with the pods' security context (read-only root, every capability
# dropped, no privilege escalation, user 65532). gRPC is plaintext here
# (spec.syncer.insecure; test_image.sh covers mutual TLS). Asserted: the
# PyTorch image has no ddiloco package, binary or library and loads the
# copied one; both
# learners exit 0; the syncer took a learner's weights as the initial
# model and reached the budget after at least 10 rounds; each learner's
# loss at the end is below a tenth of the higher first-step loss of the two. Everything made
# here is removed at the end.
set -eu
cd "$(dirname "$0")/../.."
JOB_FILE=examples/pytorch/e2e.yaml
IMAGE=$(sed -n 's/^ *image: \(ddiloco-pytorch:.*\)$/\1/p' "$JOB_FILE")
RUNTIME=${RUNTIME:-ddiloco:latest}
RT=/opt/ddiloco-runtime          # operator/children.h RUNTIME_DIR
SEC="--read-only --cap-drop ALL --security-opt no-new-privileges --user 65532:65532"
u=ddiloco-ptimage-$$
dir=$(mktemp -d /tmp/ddiloco-ptimage-XXXXXX)
pass=0 failn=0

ok() { echo "PASS $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; failn=$((failn + 1)); }
check() {   # check NAME CONDITION
	if eval "$2"; then ok "$1"; else bad "$1"; fi
}
cleanup() {
	for c in syncer sidecar0 sidecar1 learner0 learner1; do
		docker rm -f "$u-$c" > /dev/null 2>&1 || true
	done
	docker volume rm -f "$u-ckpt" "$u-x0" "$u-x1" > /dev/null 2>&1 || true
	docker network rm "$u" > /dev/null 2>&1 || true
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for img in "$IMAGE" "$RUNTIME"; do
	docker image inspect "$img" > /dev/null 2>&1 || {
		echo "FAIL no image '$img' here: make image image-pytorch"
		echo "0 passed, 1 failed"
		exit 1
	}
done
# the runtime's learner side, copied as the pods' init container copies it
# (into a folder here: a tmpfs volume is empty again once no container has it)
mkdir -p "$dir/rt"
chmod 777 "$dir" "$dir/rt"
docker run --pull never --rm $SEC --mount "type=bind,src=$dir/rt,dst=$RT" \
	"$RUNTIME" copy-runtime --to "$RT" ||
	{ echo "FAIL ddiloco copy-runtime"; echo "0 passed, 1 failed"; exit 1; }
rtmount="type=bind,src=$dir/rt,dst=$RT,readonly"
rtenv="-e DDILOCO_LIB=$RT/lib/libddiloco.so -e PYTHONPATH=$RT/python"
bare=$(docker run --pull never --rm $SEC --network none --entrypoint /usr/bin/python3 "$IMAGE" -c '
import ctypes.util, importlib.util, shutil
print(" ".join(w for w, f in (("package", importlib.util.find_spec("ddiloco")),
      ("binary", shutil.which("ddiloco")), ("library", ctypes.util.find_library("ddiloco"))) if f))' 2>&1)
check "$IMAGE holds no ddiloco package, binary or library (found: ${bare:-none})" '[ -z "$bare" ]'
# shellcheck disable=SC2086
loaded=$(docker run --pull never --rm $SEC --network none --mount "$rtmount" $rtenv \
	--entrypoint /usr/bin/python3 "$IMAGE" -c '
import ddiloco
lib = ddiloco.load_library()
maps = open("/proc/self/maps").read().split()
own = sorted({m.rsplit("/", 1)[1] for m in maps if m.startswith("'"$RT"'/lib/")})
print("ABI %d, from the copy: %s" % (lib.ddiloco_abi_version(), " ".join(own)))' 2>&1)
echo "$IMAGE with the copy: $loaded"
check "$IMAGE loads the copied library" 'echo "$loaded" | grep -q "^ABI [0-9]*, from the copy: .*libddiloco.so"'
mkdir -p "$dir/spec"
python3 - "$JOB_FILE" "$dir/spec/job.json" <<'PYEOF'
import json, sys, yaml
j = yaml.safe_load(open(sys.argv[1]))
j["spec"]["syncer"]["insecure"] = True
# the operator's own fields, which it leaves out of job.json (job_core)
j["spec"]["syncer"].pop("storage", None)
json.dump(j, open(sys.argv[2], "w"))
PYEOF
chmod 755 "$dir" "$dir/spec"
chmod 644 "$dir/spec/job.json"
job=/etc/ddiloco/job.json
spec="type=bind,src=$dir/spec,dst=/etc/ddiloco,readonly"
cmd=$(python3 -c 'import sys, yaml; print(" ".join(yaml.safe_load(open(sys.argv[1]))["spec"]["learners"]["command"]))' "$JOB_FILE")

t0=$(date +%s)
docker network create "$u" > /dev/null
docker volume create "$u-ckpt" > /dev/null
docker run --pull never -d --name "$u-syncer" $SEC --network "$u" --mount "$spec" \
	--mount "type=volume,src=$u-ckpt,dst=/var/lib/ddiloco" --entrypoint ddiloco "$RUNTIME" \
	syncer --job "$job" --checkpoint-dir /var/lib/ddiloco > /dev/null
for i in 0 1; do
	docker volume create --driver local --opt type=tmpfs --opt device=tmpfs \
		--opt o=size=64m,mode=0777 "$u-x$i" > /dev/null
	docker run --pull never -d --name "$u-sidecar$i" $SEC --network "$u" --mount "$spec" \
		--mount "type=volume,src=$u-x$i,dst=/run/ddiloco,volume-nocopy" \
		--entrypoint ddiloco "$RUNTIME" sidecar --job "$job" --learner "$i" \
		--exchange /run/ddiloco --syncer "$u-syncer:7070" --http 0.0.0.0:9090 > /dev/null
	# the operator's learner container: the job's command, its env
	# shellcheck disable=SC2086
	docker run --pull never -d --name "$u-learner$i" $SEC --network "container:$u-sidecar$i" \
		--mount "$spec" --mount "type=volume,src=$u-x$i,dst=/run/ddiloco,volume-nocopy" \
		--mount "$rtmount" $rtenv -e "DDILOCO_LEARNER_ID=$i" -e "DDILOCO_JOB_FILE=$job" -e DDILOCO_EXCHANGE=/run/ddiloco \
		--entrypoint "${cmd%% *}" "$IMAGE" ${cmd#* } > /dev/null
done
rc0=$(timeout 600 docker wait "$u-learner0" || echo timeout)
rc1=$(timeout 600 docker wait "$u-learner1" || echo timeout)
t=$(($(date +%s) - t0))
sleep 1
docker logs "$u-syncer" > "$dir/syncer.log" 2>&1
docker logs "$u-learner0" > "$dir/learner0.log" 2>&1
docker logs "$u-learner1" > "$dir/learner1.log" 2>&1
grep -E "initial model|budget reached|job done" "$dir/syncer.log" | head -5
check "both PyTorch learners exited 0 ($rc0, $rc1) in $t s" '[ "$rc0" = 0 ] && [ "$rc1" = 0 ]'
check "the syncer took a learner's weights as the job's initial model" \
	'grep -q "weights are the job'"'"'s initial model" "$dir/syncer.log"'
rounds=$(sed -n 's/.*budget reached: round \([0-9]*\),.*/\1/p' "$dir/syncer.log" | head -n 1)
check "the syncer reached the budget after ${rounds:-no} rounds" '[ "${rounds:-0}" -ge 10 ]'
# a learner that joined late starts at the job's step, its loss already
# low: both are held to the higher of the two first losses
first=0
for i in 0 1; do
	l1=$(sed -n 's/.*: first step [0-9]*, loss \([0-9.]*\).*/\1/p' "$dir/learner$i.log" | head -n 1)
	first=$(awk -v a="${l1:-0}" -v b="$first" 'BEGIN { print (a > b ? a : b) }')
done
for i in 0 1; do
	le=$(sed -n 's/.*: job done at step [0-9]*, loss \([0-9.]*\).*/\1/p' "$dir/learner$i.log" | head -n 1)
	check "learner $i: loss ${le:-?} at the end, below a tenth of the higher first loss $first" \
		"awk -v a='$first' -v b='${le:-x}' 'BEGIN { exit !(a > 0 && b != \"x\" && b < a / 10) }'"
done
echo "$pass passed, $failn failed"
[ "$failn" -eq 0 ]
