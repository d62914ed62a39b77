# ddiloco — one binary, build/ddiloco, and its tests.
#
#   make          build build/ddiloco
#   make deps     install missing Debian packages (called by run and test)
#   make test     make lint, then every unit and integration test
#   make lint     the shape of the tree: function and file lengths, include
#                 cycles, the CRD's copies, the encodings, cited paths
#                 (scripts/lint.py; docs/design.md, section 9)
#   make crds     the CRD's copies in deploy/ and the chart, from crds/
#   make check    the unit tests, the fuzz replays and the integration tests
#                 of code no unit test reaches, under AddressSanitizer +
#                 UndefinedBehaviorSanitizer
#   make bench    benchmarks (print key=value lines)
#   make fuzz     every libFuzzer harness for FUZZ_SECONDS (30) seconds each
#                 (clang, installed by scripts/deps.sh fuzz; docs/fuzzing.md)
#   make run      the quickstart job, locally, with its data-parallel baseline
#   make demo-wan the low-bandwidth job behind tc-shaped links in network
#                 namespaces, against loopback (root; docs/wan.md)
#   make test-wan a learner's link cut for 30 s and back (root; docs/wan.md)
#   make test-pytorch the PyTorch package and its tests (installs Debian's
#                 python3-torch when missing; make test needs no torch)
#   make wheel        the Python package with its library, for pip
#   make clean
#   make image        the container image ddiloco:VERSION and :latest (Docker)
#   make test-image   the image's tests: the Kubernetes pod layout in Docker
#   make image-pytorch the PyTorch learner's image ddiloco-pytorch:VERSION:
#                     Debian's python3-torch in a root file system made by
#                     debootstrap (root; scripts/image-pytorch.sh)
#   make test-image-pytorch  that image run as a PyTorch job's pods, in Docker
#   make cluster-up     build (once, cached) and start the test control plane
#   make cluster-up E2E=1  the same with a real node (kubelet, containerd,
#                       CoreDNS) that runs the image's pods; make e2e-up too
#   make cluster-down   stop it
#   make test-k8s       cluster-up, every tests/k8s/test_*.sh, cluster-down
#   make test-e2e       helm install + a job with chaos trained through real
#                       pods on a real node, and PyTorch learners from the
#                       image ddiloco-pytorch (tests/k8s/e2e/test_e2e.sh)

BUILD   ?= build
SAN     ?=
# A build (make, make all, files under build/, as the test targets ask
# for them) takes every core unless the command line gives -j; other
# targets run their steps in order (two package installs at once would
# fight over dpkg's lock), and those that install packages first (deps)
# build from their recipe, after deps.
ifeq ($(filter -j%,$(MAKEFLAGS))$(filter-out all $(BUILD)/%,$(MAKECMDGOALS)),)
MAKEFLAGS += -j$(shell nproc)
endif
VERSION := 0.1.0
CC      ?= cc

MODULES := common trainer syncer sidecar runner sim operator abi
PKGS    := openblas jansson libcurl libmicrohttpd grpc libprotobuf-c yaml-0.1 \
           libcrypto

WARN    := -Wall -Wextra -Werror -Wmissing-prototypes -Wstrict-prototypes \
           -Wvla -Wwrite-strings -fno-common
OPT     := -O2 -g
ifneq ($(SAN),)
SANFLAGS := -fsanitize=address,undefined
OPT     := -O1 -g -fno-omit-frame-pointer $(SANFLAGS) \
           -fno-sanitize-recover=undefined
endif
# make fuzz builds the library again with clang, instrumented for
# libFuzzer, into build/fuzz (make test never needs clang)
ifneq ($(FUZZ),)
CC      := clang
SANFLAGS := -fsanitize=address,undefined
OPT     := -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link \
           $(SANFLAGS) -fno-sanitize-recover=undefined
endif
# pkg-config takes about a second (grpc's closure): asked once, at the
# first use, which is after `deps` installed the packages
PKG_CFLAGS = $(eval PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null))$(PKG_CFLAGS)
PKG_LIBS   = $(eval PKG_LIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null))$(PKG_LIBS)
CFLAGS  += -std=c11 -D_GNU_SOURCE -DDDILOCO_VERSION=\"$(VERSION)\" $(OPT) \
           -I. -I$(BUILD)/gen -MMD -MP $(PKG_CFLAGS)
LDLIBS  += $(PKG_LIBS) -lgpr -lm -lpthread
LDFLAGS += $(SANFLAGS)

PROTO    := proto/ddiloco/v1/syncer.proto
PROTO_C  := $(BUILD)/gen/ddiloco/v1/syncer.pb-c.c
PROTO_H  := $(PROTO_C:.c=.h)
PROTO_O  := $(BUILD)/obj/gen/syncer.pb-c.o

SRCS     := $(foreach m,$(MODULES),$(wildcard $(m)/*.c))
OBJS     := $(SRCS:%.c=$(BUILD)/obj/%.o)
LIB      := $(BUILD)/libddiloco.a
BIN      := $(BUILD)/ddiloco
# libddiloco.so: the learner ABI of include/ddiloco.h (docs/abi.md), from
# position-independent copies of the objects it needs; it exports only
# the ddiloco_* functions. Its DT_RPATH (not RUNPATH) $ORIGIN finds the
# libraries it needs, and theirs, beside it first: the runtime image keeps
# them there for a learner image without them (scripts/image.sh)
SO       := $(BUILD)/libddiloco.so
SO_SRCS  := abi/ddiloco.c common/exchange.c common/exchange_file.c \
            common/exchange_version.c \
            common/fragment.c common/err.c \
            common/util.c common/jobspec.c common/jobspec_parse.c \
            common/encoding.c trainer/model.c trainer/layers.c \
            trainer/kernels.c \
            trainer/pool.c trainer/optim.c
SO_OBJS  := $(SO_SRCS:%.c=$(BUILD)/pic/%.o)

UNIT_SRCS  := $(wildcard tests/unit/test_*.c)
UNIT_BINS  := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
# each fuzz harness also builds with the normal compiler as a replay of
# its seed corpus and regression inputs, run by make test
FUZZ_NAMES  := jobspec wire ckpt shard exchange watch status kubeconfig hwm eval seed \
               sidecar seedfile enc beat
FUZZ_SECONDS ?= 30
REPLAY_BINS := $(FUZZ_NAMES:%=$(BUILD)/tests/replay_%)
FUZZ_BINS   := $(FUZZ_NAMES:%=$(BUILD)/fuzz_%)
BENCH_SRCS := $(wildcard bench/*.c)
BENCH_BINS := $(BENCH_SRCS:bench/%.c=$(BUILD)/bench/%)

.PHONY: all deps test check bench run clean unit integration lint crds \
        demo-wan test-wan \
        test-pytorch fuzz fuzz-bins fuzz-seeds k8s-build cluster-up e2e-up cluster-down test-k8s test-e2e image test-image \
        image-pytorch test-image-pytorch wheel
all: $(BIN) $(SO)

deps:
	@sh scripts/deps.sh

$(PROTO_C) $(PROTO_H): $(PROTO)
	@mkdir -p $(BUILD)/gen
	protoc-c --proto_path=proto --c_out=$(BUILD)/gen $(PROTO)

# generated code is compiled without -Werror: its warnings are not ours
$(PROTO_O): $(PROTO_C)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -w -c $< -o $@

$(BUILD)/obj/%.o: %.c $(PROTO_H)
	@mkdir -p $(dir $@)
	@echo "  CC $<"
	@$(CC) $(CFLAGS) $(WARN) -c $< -o $@

# The trainer's elementwise loops, and the exchange's (a learner's Δ and
# update on every answer), must vectorise: the full cost model, and float
# math without errno or trap bookkeeping. Values are unchanged (no
# fast-math: no reassociation, no contraction).
VECFLAGS := -fvect-cost-model=dynamic -fno-math-errno -fno-trapping-math
ifeq ($(FUZZ),)
$(BUILD)/obj/trainer/%.o $(BUILD)/pic/trainer/%.o: CFLAGS += $(VECFLAGS)
$(BUILD)/obj/common/exchange.o $(BUILD)/pic/common/exchange.o: CFLAGS += $(VECFLAGS)
$(BUILD)/obj/common/encoding.o $(BUILD)/pic/common/encoding.o: CFLAGS += $(VECFLAGS)
$(BUILD)/obj/syncer/outer.o: CFLAGS += $(VECFLAGS)
endif

$(BUILD)/pic/%.o: %.c $(PROTO_H)
	@mkdir -p $(dir $@)
	@echo "  CC $< (pic)"
	@$(CC) $(CFLAGS) $(WARN) -fPIC -fvisibility=hidden -c $< -o $@

$(SO): $(SO_OBJS) abi/ddiloco.map
	@echo "  LD $@"
	@$(CC) $(LDFLAGS) -shared -Wl,--no-undefined -Wl,-soname,libddiloco.so \
		-Wl,--version-script,abi/ddiloco.map \
		-Wl,--disable-new-dtags -Wl,-rpath,'$$ORIGIN' \
		-o $@ $(SO_OBJS) $(LDLIBS)

# the CRD's text in the binary (operator/crd.h)
CRD_C := $(BUILD)/gen/crd_text.c
CRD_O := $(BUILD)/obj/gen/crd_text.o
$(CRD_C): crds/decoupledtrainingjobs.yaml scripts/lint.py
	@mkdir -p $(dir $@)
	@/usr/bin/python3 scripts/lint.py --crd-c $@
$(CRD_O): $(CRD_C)
	@mkdir -p $(dir $@)
	@echo "  CC $<"
	@$(CC) $(CFLAGS) $(WARN) -c $< -o $@

$(LIB): $(OBJS) $(PROTO_O) $(CRD_O)
	@rm -f $@
	@ar rcs $@ $^

$(BIN): $(BUILD)/obj/main.o $(LIB)
	@echo "  LD $@"
	@$(CC) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

$(BUILD)/tests/%: tests/unit/%.c $(LIB)
	@mkdir -p $(dir $@)
	@echo "  LD $@"
	@$(CC) $(CFLAGS) $(WARN) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS) -lcmocka

# disk faults for one folder, preloaded (tests/faults/faultfs.c)
FAULTFS := $(BUILD)/tests/libfaultfs.so
$(FAULTFS): tests/faults/faultfs.c
	@mkdir -p $(dir $@)
	@echo "  LD $@"
	@$(CC) -std=c11 -O2 -Wall -Wextra -Werror -shared -fPIC -o $@ $< -ldl

$(BUILD)/tests/replay_%: $(BUILD)/obj/tests/fuzz/fuzz_%.o \
                        $(BUILD)/obj/tests/fuzz/replay.o $(LIB)
	@mkdir -p $(dir $@)
	@echo "  LD $@"
	@$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/fuzz_%: $(BUILD)/obj/tests/fuzz/fuzz_%.o $(LIB)
	@echo "  LD $@"
	@$(CC) -fsanitize=fuzzer $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/bench/%: bench/%.c $(LIB)
	@mkdir -p $(dir $@)
	@echo "  LD $@"
	@$(CC) $(CFLAGS) $(WARN) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

# Unit binaries (JOBS at a time, default nproc), then
# tests/integration/test_*.sh one at a time; the last line counts them.
test: deps
	@$(MAKE) --no-print-directory lint
	@$(MAKE) --no-print-directory all $(UNIT_BINS) $(REPLAY_BINS) $(FAULTFS)
	@BUILD=$(BUILD) sh scripts/run-tests.sh $(UNIT_BINS) $(REPLAY_BINS)

# scripts/lint.py: the rules are in its header and docs/design.md
lint:
	@/usr/bin/python3 scripts/lint.py

# crds/decoupledtrainingjobs.yaml is the CRD's one source; deploy/ and
# the chart hold copies of it, written here and checked by make lint
crds:
	@/usr/bin/python3 scripts/lint.py --write-crds

# The unit tests and the fuzz replays under ASan + UBSan, and of the
# integration tests only those that run code no unit test reaches (each
# is a real run of minutes there; the others compose parts the unit tests
# already run under the sanitizers):
#   test_run       `ddiloco run` with the real parts (cmd_run.c, and
#                  run_job supervising real processes: chaos kills and
#                  restarts, Ctrl-C, the report); test_run.c stands in
#                  for the parts
#   test_learners  `ddiloco learner` and `ddiloco sidecar` as processes
#                  of their own (cmd_learner.c, cmd_sidecar.c), mutual TLS
#                  from `ddiloco certs` (cmd_certs.c), a learner and the
#                  syncer killed with -9, the sidecars reconnecting
#   test_baseline  the baseline sweep's runs and cache (runner/baseline.c)
#   test_train     `ddiloco train` (cmd_train.c), a resume included
#   test_sim       `ddiloco sim` (cmd_sim.c, calib.c), a few seconds
# Left out: test_command (its own code is the argv of a learner command
# of the job's own, in run.c's init_learner; jobspec_learner_command is
# test_jobspec's, and every learner test_run starts gets the DDILOCO_*
# environment; it took 303 s under the sanitizers on 2 loaded cores, past
# its 300 s timeout), test_bounds and test_poison (the bounds and the
# screens: test_bounds, test_merge, test_screen; the sidecar knobs they drive are test
# code), test_invariants and test_pace (the accounting and the pacing:
# test_core, test_merge, test_round, test_exchange for α), test_stale and
# test_partition (the stale scan and staleness: test_core, test_merge; a
# stream that
# ends: test_syncer_grpc), test_checkpoint_faults (failing and damaged
# checkpoint files, the high-water mark: test_syncer_ckpt, test_persist,
# test_core;
# test_disk_faults (disk faults through a preloaded shim, which ASan's
# runtime will not share LD_PRELOAD with: test_markw, test_persist,
# test_round);
# kill -9 and the state restored: test_syncer_grpc), test_parts (payloads
# in parts: test_wire, test_sidecar, test_syncer_grpc; a 17.6M-parameter
# model). `make test` runs
# them all, and so does make check CHECK_INTEGRATION=all
# (docs/design.md, 10. The tests).
CHECK_INTEGRATION ?= test_run test_learners test_baseline test_train \
                     test_sim
check: deps
	@$(MAKE) --no-print-directory BUILD=build/san SAN=1 \
		INTEGRATION="$(CHECK_INTEGRATION)" test

# every harness for FUZZ_SECONDS each, FUZZ_JOBS (the cores) at a time
# (scripts/run-fuzz.sh)
fuzz:
	@sh scripts/deps.sh fuzz
	@$(MAKE) --no-print-directory BUILD=build/fuzz FUZZ=1 fuzz-bins
	@FUZZ_SECONDS=$(FUZZ_SECONDS) BUILD=build/fuzz \
		sh scripts/run-fuzz.sh $(FUZZ_NAMES)
fuzz-bins: $(FUZZ_BINS)
.SECONDARY: $(FUZZ_NAMES:%=$(BUILD)/obj/tests/fuzz/fuzz_%.o) \
            $(BUILD)/obj/tests/fuzz/replay.o
# the binary seed corpora, written with the project's own encoders
fuzz-seeds: $(BUILD)/obj/tests/fuzz/make_seeds.o $(LIB)
	@$(CC) $(LDFLAGS) -o $(BUILD)/make_seeds $^ $(LDLIBS)
	@$(BUILD)/make_seeds

bench: deps
	@$(MAKE) --no-print-directory all $(BENCH_BINS)
	@BUILD=$(BUILD) sh scripts/run-bench.sh $(BENCH_BINS)

# The PyTorch package (python/ddiloco) with Debian's torch and
# /usr/bin/python3 (tests/pytorch/run.sh; docs/abi.md).
test-pytorch: deps
	@sh scripts/deps.sh torch
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) sh tests/pytorch/run.sh

# The Python package as a wheel that carries libddiloco.so and the
# libraries it needs (scripts/wheel.py; docs/abi.md): build/wheel/*.whl
wheel: deps
	@$(MAKE) --no-print-directory all
	@/usr/bin/python3 scripts/wheel.py $(BUILD) $(BUILD)/wheel

run: deps
	@$(MAKE) --no-print-directory all
	$(BIN) run examples/quickstart.yaml --baseline

# Network namespaces, veth and tc: root only (docs/wan.md).
demo-wan: deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) sh scripts/demo-wan.sh

test-wan: deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) sh tests/integration/wan_cut.sh

clean:
	rm -rf build

# The container image, from local files only (scripts/image.sh, Dockerfile).
image: deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) sh scripts/image.sh

# The PyTorch learner's image: Debian's python3-torch in a root file
# system debootstrap makes (cached in ~/.cache/ddiloco-image), our files
# on it (docs/k8s-testing.md).
image-pytorch: deps
	@sh scripts/deps.sh image-pytorch
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) sh scripts/image-pytorch.sh

# The PyTorch image run as job e2e-pytorch's pods would run it, with plain
# Docker (tests/image/test_image_pytorch.sh).
test-image-pytorch: image image-pytorch
	@sh tests/image/test_image_pytorch.sh

# The image run as the operator's pods would run it, with plain Docker.
test-image: image
	@BUILD=$(BUILD) sh tests/image/test_image.sh

# A real Kubernetes control plane for tests/k8s (docs/k8s-testing.md).
K8S_CLUSTER := tests/k8s/cluster
E2E ?= 0
k8s-build:
	@E2E=$(E2E) $(K8S_CLUSTER)/build.sh
cluster-up: k8s-build $(if $(filter-out 0,$(E2E)),image)
	@E2E=$(E2E) $(K8S_CLUSTER)/up.sh
e2e-up:
	@$(MAKE) --no-print-directory cluster-up E2E=1
cluster-down:
	@$(K8S_CLUSTER)/down.sh
test-k8s: deps
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) bash tests/k8s/run.sh
# the real node's binaries (kubelet, CoreDNS) are built too; a cluster up
# with its real node is used as it is, else one is brought up and down
test-e2e: deps
	@$(MAKE) --no-print-directory image image-pytorch
	@E2E=1 $(K8S_CLUSTER)/build.sh
	@BUILD=$(BUILD) bash tests/k8s/e2e/test_e2e.sh

-include $(OBJS:.o=.d) $(SO_OBJS:.o=.d) $(BUILD)/obj/main.d $(UNIT_BINS:=.d) $(BENCH_BINS:=.d) \
         $(wildcard $(BUILD)/obj/tests/fuzz/*.d)
