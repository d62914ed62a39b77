"""The reference GPT of trainer/ in PyTorch: same model, same learner.

Reproduces, for the C learner of the same job (trainer/model.c,
layers.c, optim.c, data.c, trainer.c):

- the tensor table: order, names, shapes (tensor_table; checked against
  libddiloco.so's in tests/pytorch), all parameters views of one flat
  float32 buffer, the gradients views of another;
- the model: token + position embedding; per layer pre-LN attention
  (qkv packed q | k | v, heads of C/NH, causal softmax scaled by 1/sqrt(hs))
  and MLP (4C, GELU tanh approximation), both residual; final layernorm
  (eps 1e-5); the output projection wte when tied, else lm_head; mean
  cross-entropy over B x T;
- the inner optimizer: global-norm clipping (norm in double), AdamW with
  decoupled weight decay on 2-D weights only, bias corrections in double,
  linear warmup then cosine decay to minLrRatio*lr over the job's horizon
  (computed as trainer/optim.c does), warmup again after a resume with
  fresh moments;
- the data: text as bytes or llm.c token shards, a folder in name order,
  the tail split for validation, and learner m of M training at step s on
  window (s*M + m) mod W of B*T+1 tokens (or its own shard).

So with the same initial weights a PyTorch learner and a C learner see
the same batches and their losses agree to float32 rounding
(tests/pytorch/test_gpt.py prints both curves).

`python3 -m ddiloco.gpt` is a learner command for `ddiloco run`
(spec.learners.command): it reads DDILOCO_JOB_FILE, DDILOCO_EXCHANGE
and DDILOCO_LEARNER_ID.
"""
import ctypes
import math
import os
import stat
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

SHARD_MAGIC = 20240520
SHARD_VERSION = 1
SHARD_HEADER = 1024
LAYER_TENSORS = ("ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                 "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb")


class Config:
    """spec.model: V, maxT, L, NH, C, tied."""

    def __init__(self, V, maxT, L, NH, C, tied=True):
        if C % NH:
            raise ValueError("gpt: channels %d is not a multiple of heads %d"
                             % (C, NH))
        self.V, self.maxT, self.L, self.NH, self.C = V, maxT, L, NH, C
        self.tied = bool(tied)

    @classmethod
    def from_job(cls, job):
        m = job["model"]
        return cls(m["vocabSize"], m["context"], m["layers"], m["heads"],
                   m["channels"], m.get("tied", True))


def tensor_table(cfg):
    """[(name, shape, decayed, embedding)] in model order (trainer/model.h)."""
    C, V = cfg.C, cfg.V
    shapes = {"ln1w": (C,), "ln1b": (C,), "qkvw": (3 * C, C),
              "qkvb": (3 * C,), "attprojw": (C, C), "attprojb": (C,),
              "ln2w": (C,), "ln2b": (C,), "fcw": (4 * C, C),
              "fcb": (4 * C,), "fcprojw": (C, 4 * C), "fcprojb": (C,)}
    t = [("wte", (V, C), True, True), ("wpe", (cfg.maxT, C), True, False)]
    for layer in range(cfg.L):
        for k in LAYER_TENSORS:
            s = shapes[k]
            t.append(("h%d.%s" % (layer, k), s, len(s) == 2, False))
    t += [("lnfw", (C,), False, False), ("lnfb", (C,), False, False)]
    if not cfg.tied:
        t.append(("lm_head", (V, C), True, False))
    return t


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


class GPT(torch.nn.Module):
    """The decoder; parameters are views of self.flat, their gradients
    views of self.grad_flat (zeroed by zero_grad, summed into by
    backward)."""

    def __init__(self, cfg, flat=None):
        super().__init__()
        self.cfg = cfg
        self.table = tensor_table(cfg)
        n = sum(_numel(s) for _, s, _, _ in self.table)
        if flat is None:
            flat = torch.zeros(n, dtype=torch.float32)
        if flat.numel() != n or flat.dtype != torch.float32:
            raise ValueError("gpt: the flat buffer has %d values of %s, the "
                             "model needs %d float32" % (flat.numel(),
                                                         flat.dtype, n))
        self.flat = flat
        self.grad_flat = torch.zeros(n, dtype=torch.float32)
        self.p = {}
        off = 0
        for name, shape, _, _ in self.table:
            k = _numel(shape)
            p = torch.nn.Parameter(flat[off:off + k].view(*shape))
            p.grad = self.grad_flat[off:off + k].view(*shape)
            self.register_parameter(name.replace(".", "_"), p)
            self.p[name] = p
            off += k
        self.num_params = n

    def zero_grad(self, set_to_none=False):
        self.grad_flat.zero_()

    def forward(self, idx, targets=None):
        cfg, p = self.cfg, self.p
        B, T = idx.shape
        C, NH = cfg.C, cfg.NH
        hs = C // NH
        x = p["wte"][idx] + p["wpe"][:T]
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        for layer in range(cfg.L):
            w = {k: p["h%d.%s" % (layer, k)] for k in LAYER_TENSORS}
            h = F.layer_norm(x, (C,), w["ln1w"], w["ln1b"], 1e-5)
            qkv = F.linear(h, w["qkvw"], w["qkvb"])
            q, k, v = qkv.split(C, dim=2)
            q = q.view(B, T, NH, hs).transpose(1, 2)
            k = k.view(B, T, NH, hs).transpose(1, 2)
            v = v.view(B, T, NH, hs).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(B, T, C)
            x = x + F.linear(y, w["attprojw"], w["attprojb"])
            h = F.layer_norm(x, (C,), w["ln2w"], w["ln2b"], 1e-5)
            h = F.gelu(F.linear(h, w["fcw"], w["fcb"]), approximate="tanh")
            x = x + F.linear(h, w["fcprojw"], w["fcprojb"])
        x = F.layer_norm(x, (C,), p["lnfw"], p["lnfb"], 1e-5)
        logits = F.linear(x, p["wte"] if cfg.tied else p["lm_head"])
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, cfg.V), targets.view(-1))


# ---- data (trainer/data.c) ----

def _wanted(name):
    return not name.startswith(".") and not name.endswith(".dat")


def _tokens_of(path, buf, fmt, vocab):
    if fmt == "auto":
        magic = int.from_bytes(buf[:4], "little", signed=True) \
            if len(buf) >= 4 else 0
        fmt = "tokens" if magic == SHARD_MAGIC else "text"
    if fmt == "text":
        if vocab < 256:
            raise ValueError("data: '%s' is text (bytes) but "
                             "spec.model.vocabSize is %d, less than 256"
                             % (path, vocab))
        return fmt, np.frombuffer(buf, dtype=np.uint8).astype(np.uint16)
    hdr = np.frombuffer(buf[:12].ljust(12, b"\0"), dtype="<i4")
    if hdr[0] != SHARD_MAGIC or len(buf) < SHARD_HEADER or \
            hdr[1] != SHARD_VERSION or hdr[2] < 0 or \
            len(buf) != SHARD_HEADER + 2 * int(hdr[2]):
        raise ValueError("data: '%s': not a valid token shard" % path)
    tok = np.frombuffer(buf, dtype="<u2", offset=SHARD_HEADER,
                        count=int(hdr[2])).astype(np.uint16)
    if tok.size and int(tok.max()) >= vocab:
        raise ValueError("data: '%s': a token is outside the vocabulary (%d)"
                         % (path, vocab))
    return fmt, tok


def load_tokens(path, fmt, vocab):
    """A file or a folder (regular files in name order) as uint16 tokens."""
    if os.path.isdir(path):
        files = []
        for name in sorted(os.listdir(path)):
            full = os.path.join(path, name)
            if _wanted(name) and stat.S_ISREG(os.lstat(full).st_mode):
                files.append(full)
        if not files:
            raise ValueError("data: no data files in folder '%s'" % path)
    else:
        files = [path]
    parts, seen = [], None
    for f in files:
        with open(f, "rb") as fh:
            got, tok = _tokens_of(f, fh.read(), fmt, vocab)
        if seen and got != seen:
            raise ValueError("data: '%s' is %s but the files before it are "
                             "%s" % (f, got, seen))
        seen = got
        parts.append(tok)
    return np.concatenate(parts)


class Data:
    """Learner `learner` of `learners`: its training windows."""

    def __init__(self, jd, vocab, learner, learners):
        if jd.get("order", "stream") != "stream":
            raise ValueError("data: spec.data.order %s: this learner reads "
                             "the stream in order only (the C learner reads "
                             "spread too: docs/trainer.md)" % jd["order"])
        self.offset, self.stride = learner, learners
        path = jd["path"]
        if jd.get("shardPattern"):
            path = jd["shardPattern"].replace("{learner}", str(learner))
            self.offset, self.stride = 0, 1
        src = load_tokens(path, jd.get("format", "auto"), vocab)
        if jd.get("valPath"):
            self.train = src
        else:
            nval = int(float(len(src)) * jd.get("valFraction", 0.1))
            self.train = src[:len(src) - nval]
        self.name = path

    def windows(self, B, T):
        bt = B * T
        return (len(self.train) - 1) // bt if len(self.train) > bt else 0

    def batch(self, step, B, T):
        """(inputs, targets) as (B, T) int64 tensors for this step."""
        bt, W = B * T, self.windows(B, T)
        w = (step * self.stride + self.offset) % W
        p = torch.from_numpy(self.train[w * bt:w * bt + bt + 1]
                             .astype(np.int64))
        return p[:-1].view(B, T), p[1:].view(B, T)


# ---- optimizer (trainer/optim.c) ----

def decay_steps(job, learners):
    o, B = job["optimizer"], job["optimizer"]["batchSize"]
    per_step = learners * B * o["seqLen"]
    if o.get("cosineSteps", 0) > 0:
        return o["cosineSteps"]
    tokens = job.get("budget", {}).get("tokens", 0)
    if tokens > 0:
        return max(tokens // per_step, 1)
    return job.get("budget", {}).get("outerSteps", 0)


def schedule_lr(o, step, decay):
    W = o["warmupSteps"]
    lr, lo = o["lr"], o["lr"] * o["minLrRatio"]
    if step < W:
        return lr * (step + 1) / W
    if decay == 0:
        return lr
    if step >= decay:
        return lo
    progress = (step - W) / (decay - W)
    return lo + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - lo)


def set_threads(n):
    """n threads for torch's own loops and for the BLAS it calls: Debian's
    torch calls the system BLAS (OpenBLAS), whose threads default to every
    core and spin when the cores are shared (at 4 processes on 2 cores a
    step took 3.6 times as long as with one BLAS thread)."""
    torch.set_num_threads(n)
    for name in ("libblas.so.3", "libopenblas.so.0"):
        try:
            f = getattr(ctypes.CDLL(name), "openblas_set_num_threads", None)
        except OSError:
            continue
        if f:
            f(n)


def _f32(x):
    return float(np.float32(x))


class Trainer:
    """One learner's inner loop on the reference GPT (trainer/trainer.c).

    flat: the parameter buffer (e.g. a Learner's new_buffer()); its values
    are left as they are (the global model is put there by start, or call
    init_from). step() trains one batch and returns its loss.
    """

    def __init__(self, job, learner=0, learners=1, flat=None, threads=None):
        self.job = job
        self.cfg = Config.from_job(job)
        o = job["optimizer"]
        self.o = o
        self.B, self.T = o["batchSize"], o["seqLen"]
        set_threads(threads or job.get("learners", {}).get("threads", 1)
                    or 1)
        self.data = Data(job["data"], self.cfg.V, learner, learners)
        if self.data.windows(self.B, self.T) == 0:
            raise ValueError("data: '%s' holds %d training tokens, fewer "
                             "than one batch (%d x %d + 1)"
                             % (self.data.name, len(self.data.train),
                                self.B, self.T))
        self.model = GPT(self.cfg, flat)
        self.flat = self.model.flat
        n = self.model.num_params
        self.m = torch.zeros(n)
        self.v = torch.zeros(n)
        self.wd = torch.zeros(n)
        off = 0
        for _, shape, decayed, _ in self.model.table:
            k = _numel(shape)
            if decayed:
                self.wd[off:off + k] = _f32(o["weightDecay"])
            off += k
        self.decay = decay_steps(job, learners)
        self.step_count = 0
        self.adam_t = 0
        self.tokens_total = 0
        # the lr schedule's step when it is not this learner's own: the
        # job's (ddiloco.Learner.schedule_step; the C trainer's
        # trainer_set_schedule_step)
        self.sched = None

    def resume_at(self, step):
        """Moves the schedule and data to step when it is larger (AdamW's
        t stays: it counts updates since the moments were zero)."""
        if step <= self.step_count:
            return False
        self.step_count = step
        return True

    def lr(self):
        o = self.o
        s = self.step_count if self.sched is None else self.sched
        lr = schedule_lr(o, s, self.decay)
        if s > self.adam_t and self.adam_t < o["warmupSteps"]:
            lr *= (self.adam_t + 1) / o["warmupSteps"]
        return lr

    def step(self):
        o = self.o
        x, y = self.data.batch(self.step_count, self.B, self.T)
        self.model.zero_grad()
        loss = self.model(x, y)
        if not torch.isfinite(loss):
            raise FloatingPointError("trainer: loss is not finite at step %d"
                                     % self.step_count)
        loss.backward()
        g = self.model.grad_flat
        norm = math.sqrt(float(g.double().pow(2).sum()))
        if not math.isfinite(norm):
            raise FloatingPointError("trainer: gradient is not finite at "
                                     "step %d" % self.step_count)
        clip = o["gradClip"]
        gs = 1.0 if clip <= 0 or norm <= clip else clip / norm
        self._adamw(g, self.lr(), _f32(gs))
        self.step_count += 1
        self.adam_t += 1
        self.tokens_total += self.B * self.T
        return float(loss)

    @torch.no_grad()
    def _adamw(self, g, lr, gs):
        o, t = self.o, self.adam_t + 1
        b1, b2 = _f32(o["beta1"]), _f32(o["beta2"])
        bc1 = _f32(1.0 - math.pow(b1, t))
        bc2 = _f32(1.0 - math.pow(b2, t))
        gi = g * gs
        self.m.mul_(b1).add_(gi * _f32(1.0 - b1))
        self.v.mul_(b2).add_(gi * gi * _f32(1.0 - b2))
        upd = (self.m / bc1) / ((self.v / bc2).sqrt_() + _f32(o["eps"]))
        upd.add_(self.wd * self.flat)
        self.flat.sub_(upd * _f32(lr))


def main(argv=None):
    """A learner of `ddiloco run` (spec.learners.command) on the reference
    GPT: the job and exchange from the environment."""
    import ddiloco

    index = ddiloco.env_learner()
    learner = ddiloco.Learner()                              # open
    count = learner.job["learners"]["replicas"]
    t = Trainer(learner.job, index, count, learner.new_buffer())
    if not learner.start(t.flat, timeout=float(
            os.environ.get("DDILOCO_INIT_TIMEOUT", "300"))):  # start
        print("learner-%d: the job is already done" % index, flush=True)
        return 0
    print("learner-%d: got the global model (%d fragments); training "
          "(PyTorch %s)" % (index, learner.num_fragments, torch.__version__),
          flush=True)
    t0 = time.monotonic()
    while learner.resume_step() is None and time.monotonic() - t0 < 5:
        if learner.done:
            return 0
        time.sleep(0.05)
    next_log = time.monotonic() + 5
    while True:
        rs = learner.resume_step()
        if rs is not None and t.resume_at(rs):
            print("learner-%d: resuming at step %d" % (index, rs), flush=True)
        t.sched = learner.schedule_step(t.step_count, t.B * t.T)
        loss = t.step()
        if learner.poll(t.flat, t.step_count, t.B * t.T, loss):   # poll
            break
        if time.monotonic() > next_log:
            p, s = learner.times()
            print("learner-%d: step %d loss %.4f poll share %.4f"
                  % (index, t.step_count, loss, p / s if s else 0),
                  flush=True)
            next_log += 5
    p, s = learner.times()
    print("learner-%d: job done at step %d, schedule step %d of %d; "
          "exchange poll took %.4f of step time"
          % (index, t.step_count, learner.schedule_step(t.step_count,
                                                        t.B * t.T),
             t.decay, p / s if s else 0), flush=True)
    learner.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
