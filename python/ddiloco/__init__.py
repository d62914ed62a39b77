"""ddiloco: a learner of any Python trainer, through libddiloco.so.

The learner side of the exchange (docs/abi.md) over ctypes. The model's
parameters live in one flat float32 buffer laid out by the job's
parameter table; every parameter is a view into it, so a poll answers the
sidecar's pulls and applies the syncer's updates in place: no copies of
the model, no pause of training. A training loop changes by three lines:

    learner = ddiloco.Learner()              # the job and exchange from env
    learner.start(flat)                      # the global model, in place
    ...
        if learner.poll(flat, step, tokens, loss):   # after each step
            break                            # the job is done

An evaluator of a model of the job's own (spec.model.kind external)
pulls the global model through its own sidecar and reports its loss:

    ev, flat = ddiloco.Evaluator.external(dict(model.named_parameters()))
    ev.start(flat)
    while (r := ev.next(flat)) is not None:  # Θ of a newer round, in place
        ev.report(r, loss_of(model))

`ddiloco run` and the operator start a learner command with
DDILOCO_JOB_FILE, DDILOCO_EXCHANGE and DDILOCO_LEARNER_ID in its
environment, and `ddiloco run` DDILOCO_LIB too (docs/abi.md,
"Environment").
"""
import ctypes
import ctypes.util
import json
import os
import shutil
import time
from collections import namedtuple

__all__ = ["ABI_VERSION", "Learner", "Evaluator", "Tensor", "Error",
           "load_library", "library_path", "env_learner", "env_evaluator"]

# the include/ddiloco.h version this module was written for
ABI_VERSION = 1
MAX_DIMS = 4

Tensor = namedtuple("Tensor", "name shape offset numel decayed embedding")


class Error(RuntimeError):
    """A failure reported by libddiloco.so, with its message."""


_lib = None
_lib_path = None


def _candidates():
    env = os.environ.get("DDILOCO_LIB")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    # the wheel's own copy (make wheel), with the libraries it needs
    yield os.path.join(here, "_lib", "libddiloco.so")
    # a checkout: python/ddiloco/ -> build/
    yield os.path.join(here, "..", "..", "build", "libddiloco.so")
    binary = shutil.which("ddiloco")
    if binary:
        yield os.path.join(os.path.dirname(os.path.realpath(binary)),
                           "libddiloco.so")
    found = ctypes.util.find_library("ddiloco")
    if found:
        yield found


def load_library(path=None):
    """Loads libddiloco.so (path, $DDILOCO_LIB, the wheel's own copy, the
    checkout's build/, next to `ddiloco` on PATH, the system's library
    path) once, and checks its ABI version."""
    global _lib, _lib_path
    if _lib is not None and path is None:
        return _lib
    tried = []
    for p in [path] if path else _candidates():
        if os.sep in p and not os.path.exists(p):
            tried.append(p)
            continue
        lib = ctypes.CDLL(p)
        break
    else:
        raise Error("ddiloco: cannot find libddiloco.so (tried %s); set "
                    "DDILOCO_LIB or build it with make" % ", ".join(tried))
    _declare(lib)
    v = lib.ddiloco_abi_version()
    if v != ABI_VERSION:
        raise Error("ddiloco: '%s' has ABI version %d, this package needs %d"
                    % (p, v, ABI_VERSION))
    _lib = lib
    _lib_path = p
    return lib


def library_path():
    """The libddiloco.so load_library loaded, as it was found."""
    load_library()
    return _lib_path


def _declare(lib):
    c = ctypes
    h = c.c_void_p
    fp = c.c_void_p                      # float * (a buffer's address)
    sig = {
        "ddiloco_abi_version": (c.c_int, []),
        "ddiloco_version": (c.c_char_p, []),
        "ddiloco_error": (c.c_char_p, []),
        "ddiloco_open_job": (h, [c.c_char_p, c.c_char_p]),
        "ddiloco_open_model": (h, [c.c_char_p] + [c.c_int] * 7),
        "ddiloco_open_external": (h, [c.c_char_p, c.c_char_p, c.c_int,
                                      c.POINTER(c.c_char_p),
                                      c.POINTER(c.c_uint64)]),
        "ddiloco_close": (None, [h]),
        "ddiloco_num_params": (c.c_uint64, [h]),
        "ddiloco_num_tensors": (c.c_int, [h]),
        "ddiloco_tensor": (c.c_int, [h, c.c_int, c.POINTER(c.c_char_p),
                                     c.POINTER(c.c_int),
                                     c.POINTER(c.c_int64),
                                     c.POINTER(c.c_uint64),
                                     c.POINTER(c.c_uint64),
                                     c.POINTER(c.c_int),
                                     c.POINTER(c.c_int)]),
        "ddiloco_num_fragments": (c.c_int, [h]),
        "ddiloco_fingerprint": (c.c_uint64, [h]),
        "ddiloco_job_json": (c.c_char_p, [h]),
        "ddiloco_decay_steps": (c.c_uint64, [h, c.c_int]),
        "ddiloco_init_params": (None, [h, fp, c.c_uint64]),
        "ddiloco_start": (c.c_int, [h, fp, c.c_double]),
        "ddiloco_poll": (c.c_int, [h, fp, c.c_uint64, c.c_uint64,
                                   c.c_double]),
        "ddiloco_pending": (c.c_int, [h, c.POINTER(c.c_uint8),
                                      c.POINTER(c.c_uint8)]),
        "ddiloco_poll_fragments": (c.c_int, [h, fp, c.c_uint64, c.c_uint64,
                                             c.c_double] +
                                   [c.POINTER(c.c_uint8)] * 3),
        "ddiloco_fragment_pieces": (c.c_int, [h, c.c_int,
                                              c.POINTER(c.c_uint64),
                                              c.POINTER(c.c_uint64), c.c_int]),
        "ddiloco_last_poll": (c.c_int, [h, c.POINTER(c.c_int),
                                        c.POINTER(c.c_int),
                                        c.POINTER(c.c_int)]),
        "ddiloco_resume_step": (c.c_int, [h, c.POINTER(c.c_uint64)]),
        "ddiloco_done": (c.c_int, [h]),
        "ddiloco_times": (None, [h, c.POINTER(c.c_double),
                                 c.POINTER(c.c_double)]),
    }
    # evaluators and the job's tokens: added later within ABI version 1
    # (include/ddiloco.h); a library without the first has no Evaluator,
    # without the last its learners count their own steps
    sig_ev = {
        "ddiloco_set_evaluator": (c.c_int, [h]),
        "ddiloco_round": (c.c_uint64, [h]),
        "ddiloco_report_eval": (c.c_int, [h, c.c_uint64, c.c_double,
                                          c.c_uint64]),
        "ddiloco_job_tokens": (c.c_uint64, [h]),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    for name, (res, args) in sig_ev.items():
        f = getattr(lib, name, None)
        if f is not None:
            f.restype = res
            f.argtypes = args


def _error(lib):
    return Error(lib.ddiloco_error().decode("utf-8", "replace"))


def env_learner():
    """This learner's index, from DDILOCO_LEARNER_ID (0 when not set)."""
    return int(os.environ.get("DDILOCO_LEARNER_ID", "0"))


def env_evaluator():
    """This evaluator's index, from DDILOCO_EVALUATOR_ID (0 when not
    set)."""
    return int(os.environ.get("DDILOCO_EVALUATOR_ID", "0"))


class Learner:
    """One learner's side of the exchange for the job's model.

    job: the job file (default $DDILOCO_JOB_FILE); exchange: the folder shared
    with the sidecar (default $DDILOCO_EXCHANGE; None and no variable: no
    exchange, the handle only describes the model). model: a dict of
    spec.model dimensions (vocabSize, context, layers, heads, channels,
    tied) with fragments, instead of a job file.
    """

    def __init__(self, job=None, exchange=None, model=None, fragments=None,
                 lib=None, table=None):
        self._lib = load_library(lib)
        self._h = None
        self._shapes = {}
        if exchange is None:
            exchange = os.environ.get("DDILOCO_EXCHANGE")
        xd = exchange.encode() if exchange else None
        if table is not None:
            # spec.model.kind external: [(name, numel)] in flat order
            job = job or os.environ.get("DDILOCO_JOB_FILE")
            if not job:
                raise Error("ddiloco: no job file: pass job= or set "
                            "DDILOCO_JOB_FILE")
            n = len(table)
            names = (ctypes.c_char_p * n)(*[t[0].encode() for t in table])
            sizes = (ctypes.c_uint64 * n)(*[int(t[1]) for t in table])
            h = self._lib.ddiloco_open_external(job.encode(), xd, n, names,
                                                sizes)
            self._shapes = {t[0]: tuple(t[2]) if len(t) > 2 else None
                            for t in table}
        elif model is not None:
            m = model
            h = self._lib.ddiloco_open_model(
                xd, m["vocabSize"], m["context"], m["layers"], m["heads"],
                m["channels"], 1 if m.get("tied", True) else 0,
                fragments or 4)
        else:
            job = job or os.environ.get("DDILOCO_JOB_FILE")
            if not job:
                raise Error("ddiloco: no job file: pass job= or set "
                            "DDILOCO_JOB_FILE")
            h = self._lib.ddiloco_open_job(job.encode(), xd)
        if not h:
            raise _error(self._lib)
        self._h = h
        self.exchange = exchange
        self.job = json.loads(self._lib.ddiloco_job_json(h))
        self.num_params = int(self._lib.ddiloco_num_params(h))
        self.num_fragments = self._lib.ddiloco_num_fragments(h)
        self.fingerprint = int(self._lib.ddiloco_fingerprint(h))
        self.tensors = [self._tensor(i)
                        for i in range(self._lib.ddiloco_num_tensors(h))]
        self.last_poll = (0, 0, 0)
        self._pieces = {}
        self.device_copies = (0, 0)
        self._marks = None

    def _tensor(self, i):
        c = ctypes
        name = c.c_char_p()
        ndim, dec, emb = c.c_int(), c.c_int(), c.c_int()
        shape = (c.c_int64 * MAX_DIMS)()
        off, numel = c.c_uint64(), c.c_uint64()
        if self._lib.ddiloco_tensor(self._h, i, c.byref(name), c.byref(ndim),
                                    shape, c.byref(off), c.byref(numel),
                                    c.byref(dec), c.byref(emb)):
            raise _error(self._lib)
        nm = name.value.decode()
        shp = getattr(self, "_shapes", {}).get(nm)
        return Tensor(nm, shp or tuple(shape[:ndim.value]),
                      off.value, numel.value, bool(dec.value),
                      bool(emb.value))

    # ---- buffers ----

    def _ptr(self, flat):
        """The address of a flat float32 buffer of num_params values: a
        CPU torch tensor (contiguous) or a numpy array."""
        if hasattr(flat, "data_ptr"):            # torch
            if flat.device.type != "cpu":
                raise Error("ddiloco: the flat buffer is on %s: keep a "
                            "pinned CPU copy for the exchange (docs/abi.md, "
                            "GPUs)" % flat.device)
            if str(flat.dtype) != "torch.float32" or \
                    not flat.is_contiguous():
                raise Error("ddiloco: the flat buffer must be contiguous "
                            "float32, not %s" % flat.dtype)
            n, addr = flat.numel(), flat.data_ptr()
        else:                                    # numpy
            if str(flat.dtype) != "float32" or \
                    not flat.flags["C_CONTIGUOUS"]:
                raise Error("ddiloco: the flat buffer must be contiguous "
                            "float32, not %s" % flat.dtype)
            n, addr = flat.size, flat.ctypes.data
        if n != self.num_params:
            raise Error("ddiloco: the flat buffer has %d values, the model "
                        "%d" % (n, self.num_params))
        return ctypes.c_void_p(addr)

    def new_buffer(self):
        """A zeroed flat float32 torch tensor of num_params values."""
        import torch
        return torch.zeros(self.num_params, dtype=torch.float32)

    def views(self, flat):
        """{name: view of flat with the tensor's shape}, in model order."""
        return {t.name: flat[t.offset:t.offset + t.numel].view(*t.shape)
                for t in self.tensors}

    def bind(self, params):
        """Moves parameters into one new flat buffer, each becoming a view
        of it (values kept), and returns the buffer. params: {table name:
        torch parameter} with every tensor of the table, shapes equal.
        Make the optimizer after this (its state follows the views)."""
        flat = self.new_buffer()
        views = self.views(flat)
        missing = [n for n in views if n not in params]
        extra = [n for n in params if n not in views]
        if missing or extra:
            raise Error("ddiloco: bind: missing %s, not in the table %s"
                        % (missing, extra))
        for name, v in views.items():
            p = params[name]
            if tuple(p.shape) != tuple(v.shape):
                raise Error("ddiloco: bind: '%s' is %s, the table says %s"
                            % (name, tuple(p.shape), tuple(v.shape)))
            v.copy_(p.detach())
            p.data = v
        return flat

    @classmethod
    def external(cls, params, job=None, exchange=None, lib=None):
        """A learner of a model of its own (spec.model.kind external;
        docs/syncer.md): params {name: torch parameter} in the order of
        the flat buffer. Returns (learner, flat) with the parameters moved
        into flat (values kept); the first learner's become the job's
        initial model."""
        table = [(n, p.numel(), tuple(p.shape)) for n, p in params.items()]
        lr = cls(job=job, exchange=exchange, lib=lib, table=table)
        return lr, lr.bind(params)

    def init_params(self, flat, seed=None):
        """The reference model's initial weights (the C learner's and the
        syncer's for spec.model.seed) into flat."""
        if seed is None:
            seed = self.job.get("model", {}).get("seed", 1337)
        self._lib.ddiloco_init_params(self._h, self._ptr(flat), seed)

    def decay_steps(self, learners):
        """The C learner's LR decay horizon for a job of `learners`."""
        return int(self._lib.ddiloco_decay_steps(self._h, learners))

    # ---- the exchange ----

    def start(self, flat, timeout=300.0):
        """Waits for the global model and copies it into flat: True when
        started, False when the job is already done."""
        r = self._lib.ddiloco_start(self._h, self._ptr(flat), float(timeout))
        if r < 0:
            raise _error(self._lib)
        return r == 0

    def poll(self, flat, step, tokens, loss):
        """After each step: stats, pulls answered, updates applied to flat
        in place. True when the job is done. Never waits."""
        r = self._lib.ddiloco_poll(self._h, self._ptr(flat), int(step),
                                   int(tokens), float(loss))
        if r < 0:
            raise _error(self._lib)
        return r == 1

    def pieces(self, p):
        """Fragment p's pieces in the flat buffer: [(offset, length)]."""
        if p not in self._pieces:
            n = self._lib.ddiloco_fragment_pieces(self._h, p, None, None, 0)
            if n < 0:
                raise _error(self._lib)
            off, num = (ctypes.c_uint64 * n)(), (ctypes.c_uint64 * n)()
            self._lib.ddiloco_fragment_pieces(self._h, p, off, num, n)
            self._pieces[p] = [(off[i], num[i]) for i in range(n)]
        return self._pieces[p]

    def poll_device(self, dev, host, step, tokens, loss):
        """poll for a model whose flat buffer `dev` lives on another device
        (a GPU): `host` is its host copy, a CPU float32 buffer of
        num_params values (pinned, for a GPU) that start() filled and the
        caller copied to dev once. Only the fragments this poll reads
        (a pull, an update with alpha > 0) go to host first, and only
        those it wrote come back to dev (docs/abi.md, GPUs);
        device_copies holds how many values went each way. True when the
        job is done."""
        P = self.num_fragments
        if self._marks is None:              # made once, not every step
            self._marks = tuple((ctypes.c_uint8 * P)() for _ in range(3))
        reads, writes, wrote = self._marks
        if self._lib.ddiloco_pending(self._h, reads, writes) < 0:
            raise _error(self._lib)
        out = back = 0
        for p in range(P):
            if reads[p] or writes[p]:
                for off, n in self.pieces(p):
                    host[off:off + n].copy_(dev[off:off + n], non_blocking=True)
                    out += n
        if out and dev.device.type == "cuda":
            import torch
            torch.cuda.current_stream(dev.device).synchronize()
        r = self._lib.ddiloco_poll_fragments(
            self._h, self._ptr(host), int(step), int(tokens), float(loss),
            reads, writes, wrote)
        if r < 0:
            raise _error(self._lib)
        for p in range(P):
            if wrote[p]:
                for off, n in self.pieces(p):
                    dev[off:off + n].copy_(host[off:off + n], non_blocking=True)
                    back += n
        self.device_copies = (out, back)
        return r == 1

    def poll_stats(self):
        """(updates applied, pulls served, words repaired) of the last
        poll."""
        a, s, r = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        self._lib.ddiloco_last_poll(self._h, ctypes.byref(a),
                                    ctypes.byref(s), ctypes.byref(r))
        return a.value, s.value, r.value

    def resume_step(self):
        """The job's step to train on from when the sidecar left one for
        this process, else None."""
        s = ctypes.c_uint64()
        if self._lib.ddiloco_resume_step(self._h, ctypes.byref(s)):
            return s.value
        return None

    def job_tokens(self):
        """The tokens the whole job had trained when the syncer sent the
        newest update a poll read (0 before that, or from a library or
        syncer without them): what the lr schedule follows (docs/abi.md,
        The job's schedule)."""
        f = getattr(self._lib, "ddiloco_job_tokens", None)
        return int(f(self._h)) if f is not None else 0

    def schedule_step(self, step, tokens_per_step):
        """The step of the job's lr schedule: the job's tokens over what
        one step of every learner trains (replicas x tokens_per_step, the
        tokens this learner gives poll) once an update has told them,
        else `step`, this learner's own."""
        t = self.job_tokens()
        per = self.job["learners"]["replicas"] * tokens_per_step
        return t // per if t and per else step

    @property
    def done(self):
        return bool(self._lib.ddiloco_done(self._h))

    def times(self):
        """(seconds in poll, seconds between polls) so far."""
        p, s = ctypes.c_double(), ctypes.c_double()
        self._lib.ddiloco_times(self._h, ctypes.byref(p), ctypes.byref(s))
        return p.value, s.value

    def close(self):
        if self._h:
            self._lib.ddiloco_close(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()


class Evaluator(Learner):
    """An evaluator of a model of the job's own (spec.model.kind external;
    docs/abi.md, Evaluators): the same table as the learners', its own
    exchange and `ddiloco sidecar --evaluator`. It never trains: `next`
    applies Θ as the syncer sends it and says its round, `report` sends
    the loss on it to the syncer, whose /status and report show it as the
    eval loss."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not hasattr(self._lib, "ddiloco_set_evaluator"):
            raise Error("ddiloco: this libddiloco.so has no evaluators "
                        "(ddiloco_set_evaluator): an older release")
        if self._lib.ddiloco_set_evaluator(self._h):
            raise _error(self._lib)
        self._polls = 0
        self._last = None

    @classmethod
    def external(cls, params, job=None, exchange=None, lib=None):
        """(evaluator, flat) for params {name: torch parameter} in the
        learners' order, moved into flat as Learner.external does."""
        table = [(n, p.numel(), tuple(p.shape)) for n, p in params.items()]
        ev = cls(job=job, exchange=exchange, lib=lib, table=table)
        return ev, ev.bind(params)

    @property
    def round(self):
        """The round the Θ in flat is from (ddiloco_round)."""
        return int(self._lib.ddiloco_round(self._h))

    def next(self, flat, every=1, wait=0.05):
        """Polls until flat holds Θ of a round at least `every` rounds
        after the one last returned (the first call: whatever round it
        holds), and returns that round; None when the job is done. flat
        does not change until the next call."""
        while True:
            self._polls += 1
            r = self._lib.ddiloco_poll(self._h, self._ptr(flat),
                                       self._polls, 0, 0.0)
            if r < 0:
                raise _error(self._lib)
            if r == 1:
                return None
            rd = self.round
            if self._last is None or rd >= self._last + max(1, every):
                self._last = rd
                return rd
            time.sleep(wait)

    def report(self, round, loss, tokens=0):
        """The loss on Θ of `round` (what next returned), for the
        syncer; tokens: how many it was measured on."""
        if self._lib.ddiloco_report_eval(self._h, int(round), float(loss),
                                         int(tokens)) < 0:
            raise _error(self._lib)
