#!/usr/bin/python3
"""A learner of a model ddiloco does not know (spec.model.kind external,
docs/syncer.md, Model-agnostic jobs): a small MLP that learns
y = sin(3 x0) + x1 x2 from random points, each learner on its own
stream of them. The first learner's weights become the job's initial
model; every learner must have the same table.

`--hidden N` (default 32) sets the hidden width: a learner started with
another width has another table and is refused by the syncer
(tests/pytorch/test_external.py); `--delay S` waits S seconds first.

`--task noisy` learns y = sin(4 x0 + 3 x1) cos(3 x2) + x0 x1 + e, e
normal with standard deviation 0.2, instead: no model can go below the
noise's variance (0.04), and this MLP is still learning after thousands
of steps, so losses compared there mean something
(examples/pytorch/external-chaos.yaml; docs/abi.md, Parity with one
process).

Learners follow the job's schedule (warmupSteps, then a cosine to
lr minLrRatio over T / (M B) steps, as ddiloco.gpt's) at the job's step:
the tokens all learners have trained over M B, as the syncer's newest
update says (Learner.schedule_step; docs/abi.md, The job's schedule),
so a learner that gets more of the cores does not run past the end of
the schedule. Before the first such update, and for its data, a learner
counts its own steps, and a restarted one goes on at the step its
sidecar kept.

`--evaluate` makes it the job's evaluator (spec.evaluator, docs/abi.md,
Evaluators): it gets the global model through its own sidecar every
`--every N` rounds (default 5) and reports its mean squared error on a
fixed held-out set of 4096 points, which the syncer's /status and the
run report show as the eval loss.

`--baseline` trains the same model alone, the data-parallel baseline of
a job of `--learners M` learners of `--batch B` rows each and a budget
of `--tokens T` rows: T / (M B) steps of one batch of M B rows, made
of the B rows each of learner 0 .. M-1 draws at that step (the same
points), once per learning rate of `--lrs` (default the job's `--lr`
times 0.5, 1 and 2, as `ddiloco run --baseline` tunes its own,
docs/run.md), on the learners' schedule (`--warmup S` steps of
warmup, then a cosine to `--min-lr-ratio` times the rate at the last
step), from the initial weights of learner `--init N` (default
0), and prints the held-out loss of each and the best one.

`--device auto` (the default) trains on a CUDA GPU when torch sees one,
else on the CPU. On a GPU the flat buffer lives on the device and a
pinned host copy meets the exchange: each poll copies to the host only
the fragments it reads and back only those it wrote
(Learner.poll_device; docs/abi.md, GPUs). `--device copy` takes that
path on the CPU, a second CPU buffer standing for the device, as the
tests do here (tests/pytorch/test_device.py); it prints the values
copied each way at the end.

Run from the repository:
  build/ddiloco run examples/pytorch/external.yaml
"""
import argparse
import os
import sys
import time

import torch

try:
    import ddiloco
except ImportError:          # run from a checkout: the package is in python/
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                    "python"))
    import ddiloco
from ddiloco.gpt import schedule_lr

ap = argparse.ArgumentParser()
ap.add_argument("--hidden", type=int, default=32)
ap.add_argument("--delay", type=float, default=0.0)
ap.add_argument("--evaluate", action="store_true")
ap.add_argument("--every", type=int, default=5)
ap.add_argument("--task", choices=["smooth", "noisy"], default="smooth")
ap.add_argument("--baseline", action="store_true")
ap.add_argument("--learners", type=int, default=3)
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--tokens", type=int, default=600000)
ap.add_argument("--lr", type=float, default=0.003)
ap.add_argument("--warmup", type=int, default=0)
ap.add_argument("--min-lr-ratio", type=float, default=1.0)
ap.add_argument("--lrs", type=str, default=None)
ap.add_argument("--init", type=int, default=0)
ap.add_argument("--device", choices=["auto", "cpu", "cuda", "copy"],
                default="auto")
args = ap.parse_args()
time.sleep(args.delay)
torch.set_num_threads(1)
NOISE = 0.2 if args.task == "noisy" else 0.0


def make_model(seed):
    torch.manual_seed(seed)
    h = args.hidden
    return torch.nn.Sequential(torch.nn.Linear(3, h), torch.nn.Tanh(),
                               torch.nn.Linear(h, h), torch.nn.Tanh(),
                               torch.nn.Linear(h, 1))


def target(x):
    if args.task == "noisy":
        return torch.sin(4 * x[:, :1] + 3 * x[:, 1:2]) \
            * torch.cos(3 * x[:, 2:3]) + x[:, :1] * x[:, 1:2]
    return torch.sin(3 * x[:, :1]) + x[:, 1:2] * x[:, 2:3]


def draw(gen, n):
    """n points in [-1, 1)^3 and their targets (with the task's noise)."""
    x = torch.rand(n, 3, generator=gen) * 2 - 1
    y = target(x)
    if NOISE:
        y = y + NOISE * torch.randn(n, 1, generator=gen)
    return x, y


# the held-out set: 4096 fixed points, the same for the evaluator and the
# baseline; with noise, the loss of the target itself on it is the floor
held, want = draw(torch.Generator().manual_seed(7), 4096)
floor = torch.nn.functional.mse_loss(target(held), want).item()


def held_out_loss(model):
    with torch.no_grad():
        return torch.nn.functional.mse_loss(model(held), want).item()


def rate(o, step, adam_t, decay):
    """The learning rate at the job's step `step` (warmup, then a cosine
    to lr minLrRatio at step `decay`: ddiloco.gpt.schedule_lr, the C
    learner's), scaled down while this process's AdamW has made fewer
    than warmupSteps updates: a learner restarted after a kill has no
    moments, its first steps would be of the full rate in every
    coordinate, and its first answer would move Θ as far as a whole
    round of the others' (docs/abi.md, Parity with one process)."""
    lr = schedule_lr(o, step, decay)
    if step > adam_t and adam_t < o["warmupSteps"]:
        lr *= (adam_t + 1) / o["warmupSteps"]
    return lr


if args.baseline:
    M, B = args.learners, args.batch
    steps = args.tokens // (M * B)
    lrs = [float(v) for v in args.lrs.split(",")] if args.lrs else \
        [args.lr * 0.5, args.lr, args.lr * 2]
    print("baseline: %s task, %d steps of %d x %d rows, held-out floor %.6f"
          % (args.task, steps, M, B, floor), flush=True)
    best = None
    for lr in lrs:
        # learner N's initial weights (--init: the job's are those of the
        # learner that said hello first) and the rows learners 0 .. M-1 draw
        model = make_model(100 + args.init)
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
        o = {"lr": lr, "warmupSteps": args.warmup,
             "minLrRatio": args.min_lr_ratio}
        gens = [torch.Generator().manual_seed(1000 + m) for m in range(M)]
        t0 = time.time()
        for step in range(steps):
            for group in opt.param_groups:
                group["lr"] = rate(o, step, step, steps)
            xs, ys = zip(*[draw(g, B) for g in gens])
            loss = torch.nn.functional.mse_loss(model(torch.cat(xs)),
                                                torch.cat(ys))
            opt.zero_grad()
            loss.backward()
            opt.step()
        final = held_out_loss(model)
        print("baseline: lr %g loss %.6f (%.1f s)" % (lr, final,
                                                       time.time() - t0),
              flush=True)
        if best is None or final < best[1]:
            best = (lr, final)
    print("baseline: best lr %g loss %.6f" % best, flush=True)
    sys.exit(0)

index = ddiloco.env_learner()
model = make_model(100 + index)

if args.evaluate:
    # the job's evaluator: the same table, Θ instead of its own weights
    ev, flat = ddiloco.Evaluator.external(dict(model.named_parameters()))
    if not ev.start(flat):
        sys.exit(0)
    print("evaluator: %d parameters, %d fragments, fingerprint %016x, "
          "held-out floor %.6f" % (ev.num_params, ev.num_fragments,
                                   ev.fingerprint, floor), flush=True)
    while True:
        rnd = ev.next(flat, every=args.every)
        if rnd is None:
            break
        loss = held_out_loss(model)
        ev.report(rnd, loss, tokens=held.shape[0])
        print("evaluator: round %d loss %.6f" % (rnd, loss), flush=True)
    print("evaluator: job done", flush=True)
    sys.exit(0)

learner, flat = ddiloco.Learner.external(dict(model.named_parameters()))
job = learner.job
opt = torch.optim.AdamW(model.parameters(), lr=job["optimizer"]["lr"],
                        weight_decay=0.0)
o = job["optimizer"]
B = o["batchSize"]
# the schedule's horizon: the job's steps, T / (M B) (ddiloco.gpt's)
decay = max(job["budget"]["tokens"] // (job["learners"]["replicas"] * B), 1) \
    if job.get("budget", {}).get("tokens", 0) else 0
# where the model trains: dev, the flat buffer there; host meets the
# exchange (the same buffer on the CPU)
want = args.device
if want == "auto":
    want = "cuda" if torch.cuda.is_available() else "cpu"
host = flat.pin_memory() if want == "cuda" else flat
mine = float(flat.double().sum())
if not learner.start(host):
    sys.exit(0)                                  # the job was already done
dev = host
if want in ("cuda", "copy"):
    dev = host.to("cuda") if want == "cuda" else host.clone()
    params = dict(model.named_parameters())
    for name, v in learner.views(dev).items():
        params[name].data = v
    opt = torch.optim.AdamW(model.parameters(), lr=job["optimizer"]["lr"],
                            weight_decay=0.0)
flat = dev
# the sums of its own initial weights and of the global model it got
# (tests/pytorch/test_external.py: the first learner's are everyone's)
print("learner-%d: weights sum %.9g own, %.9g global" % (
    index, mine, float(flat.double().sum())), flush=True)
print("learner-%d: external MLP, %d parameters, %d fragments, fingerprint "
      "%016x" % (index, learner.num_params, learner.num_fragments,
                 learner.fingerprint), flush=True)

gen = torch.Generator().manual_seed(1000 + index)
step, adam_t = 0, 0
moved = [0, 0, 0]          # values to the host, back, polls (poll_device)
# a learner started while the job runs (a restart) goes on at the job's
# step, which its sidecar leaves within milliseconds of the model
# (docs/sidecar.md, Resuming at the job's step): without it, it would
# train at the peak rate of the warmup while the others have decayed
t0 = time.monotonic()
while learner.resume_step() is None and time.monotonic() - t0 < 5:
    if learner.done:
        sys.exit(0)
    time.sleep(0.05)
while True:
    rs = learner.resume_step()
    if rs is not None and rs > step:
        print("learner-%d: resuming at step %d (was %d)" % (index, rs, step),
              flush=True)
        step = rs
    sched = learner.schedule_step(step, B)
    for group in opt.param_groups:
        group["lr"] = rate(o, sched, adam_t, decay)
    x, y = draw(gen, B)
    if dev.device.type != "cpu":
        x, y = x.to(dev.device), y.to(dev.device)
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    adam_t += 1
    if adam_t == 1:     # where its loss starts (tests/k8s/e2e/pytorch.sh)
        print("learner-%d: first step %d, loss %.4f" % (index, step,
                                                        loss.item()),
              flush=True)
    if dev is host:
        if learner.poll(flat, step, B, loss.item()):
            break
    else:
        done = learner.poll_device(dev, host, step, B, loss.item())
        moved[0] += learner.device_copies[0]
        moved[1] += learner.device_copies[1]
        moved[2] += 1
        if done:
            break
# the schedule's step at the end is the job's, whatever this learner's
# own count (tests/pytorch/test_external_parity.py)
print("learner-%d: job done at step %d, loss %.4f, schedule step %d of %d"
      % (index, step, loss.item(), learner.schedule_step(step, B), decay),
      flush=True)
if dev is not host:
    print("learner-%d: device %s: %d polls copied %d values to the host and "
          "%d back, %.1f per poll, the model %d" % (
              index, want, moved[2], moved[0], moved[1],
              (moved[0] + moved[1]) / max(moved[2], 1), learner.num_params),
          flush=True)
