#!/usr/bin/python3
"""A learner of a model ddiloco does not know (spec.model.kind external,
docs/syncer.md, Model-agnostic jobs): a small MLP that learns
y = sin(3 x0) + x1 x2 from random points, each learner on its own
stream of them. The first learner's weights become the job's initial
model; every learner must have the same table.

`--hidden N` (default 32) sets the hidden width: a learner started with
another width has another table and is refused by the syncer
(tests/pytorch/test_external.py); `--delay S` waits S seconds first.
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

ap = argparse.ArgumentParser()
ap.add_argument("--hidden", type=int, default=32)
ap.add_argument("--delay", type=float, default=0.0)
args = ap.parse_args()
time.sleep(args.delay)
index = ddiloco.env_learner()
hidden = args.hidden
torch.manual_seed(100 + index)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(3, hidden), torch.nn.Tanh(),
                            torch.nn.Linear(hidden, hidden), torch.nn.Tanh(),
                            torch.nn.Linear(hidden, 1))
learner, flat = ddiloco.Learner.external(dict(model.named_parameters()))
job = learner.job
opt = torch.optim.AdamW(model.parameters(), lr=job["optimizer"]["lr"],
                        weight_decay=0.0)
mine = float(flat.double().sum())
if not learner.start(flat):
    sys.exit(0)                                  # the job was already done
# the sums of its own initial weights and of the global model it got
# (tests/pytorch/test_external.py: the first learner's are everyone's)
print("learner-%d: weights sum %.9g own, %.9g global" % (
    index, mine, float(flat.double().sum())), flush=True)
print("learner-%d: external MLP, %d parameters, %d fragments, fingerprint "
      "%016x" % (index, learner.num_params, learner.num_fragments,
                 learner.fingerprint), flush=True)

gen = torch.Generator().manual_seed(1000 + index)
B = job["optimizer"]["batchSize"]
step = 0
while True:
    x = torch.rand(B, 3, generator=gen) * 2 - 1
    y = torch.sin(3 * x[:, :1]) + x[:, 1:2] * x[:, 2:3]
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    if step == 1:       # where the loss starts (tests/k8s/e2e/pytorch.sh)
        print("learner-%d: step 1, loss %.4f" % (index, loss.item()),
              flush=True)
    if learner.poll(flat, step, B, loss.item()):
        break
print("learner-%d: job done at step %d, loss %.4f" % (index, step,
                                                      loss.item()),
      flush=True)
