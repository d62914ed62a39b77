"""The quality study (bench/quality.sh; docs/quality.md).

Runs examples/study.yaml (or $JOB) over a grid of cells, each one
`ddiloco run` of the job with a few fields changed, and keeps what each
finished cell measured as one JSON file in bench/quality/runs/ (tracked
by git): a second call, in this session or a later one, on this machine
or another, runs only the cells that have no file yet. A cell's file
names the job's text it ran (its hash): when the job file changes, its
cells run again. A cell that trains the baseline runs the job first and
keeps its file, then the baseline's sweep alone (`ddiloco run
--baseline-only`), whose trials are cached in bench/quality/baseline/
(tracked too; DDILOCO_CACHE_DIR, docs/run.md): a cell stopped in its
sweep trains only the rates it had not finished when it runs again,
here or on another machine, and not its job.

Cells:
  m<M>-<fast|slow>-s<SEED>  M learners, learner M-1 at half speed or not,
                            chaos as the job says, model and chaos seed
                            SEED; the cell of seed 1 without a slow
                            learner also trains the data-parallel
                            baseline at M, tuned on the tuning split
                            (spec.data.tuneFraction; docs/run.md) over
                            the job's lr times 1/sqrt2, 1, sqrt2 and, while
                            the best is at an edge, up to three rates
                            more past it, each sqrt2 further: a bracket
                            search of the sqrt2 grid; and one learner
                            alone on 1/M of the tokens at the job's
                            rate, where merging gaining nothing would
                            leave the M learners
  h<H>-<enc>[-m<M>]         M (8 unless given) with the slow learner,
                            seed 1, the fragments merged every H learner
                            steps, with enc f32 (f32 answers, whole f32
                            updates) or int8 (int8 answers, int8 deltas)
  o<M>-<eta>-<mu>           the outer step by horizon: M learners of equal
                            speed, seed 1, chaos off, outer learning rate
                            eta and momentum mu (Nesterov); M sets how
                            many outer steps each fragment takes
  l<M>-<lr>                 the learners' inner learning rate: M learners
                            of equal speed, seed 1, chaos as the job says,
                            spec.optimizer.lr set to lr (the m<M>-fast-s1
                            cell at another inner rate)

A cell whose job is that of a grid cell before it but for its name
(h64-int8 is m8-slow-s1 while the job runs H = 64 with int8 answers and
deltas) is not run again: its file is that cell's result, marked
same_as. Then writes docs/quality.md and its plots (docs/quality/*.svg) from every
cell file there is. Usage:
  sh bench/quality.sh [run|report] [CELL ...]
run (the default) runs the cells given, else every cell of the grid,
then writes the report; report only writes it. Environment: JOB, MS
("4 8 16"), SEEDS ("1 2"), HS ("16 64 256"), OUTER ("1/0 0.7/0.5 1/0.5
0.7/0.8": eta/mu), HMS (the h cells' M: "8"), BUILD (build), QUALITY_DIR
(where the cells, runs and page go instead of the repository).

A cell with chaos depends on the CPU it gets (kills come by the clock):
run it alone. A baseline's trials do not, and may share the machine at
a low priority; where the kernel groups scheduling by session
(/proc/sys/kernel/sched_autogroup_enabled is 1), nice ranks processes
only within their session, and `echo 19 > /proc/<pid>/autogroup` lowers
a whole session against the others.
"""
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time

import yaml

import quality_report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# QUALITY_DIR: another place for the cell files, the page and its plots
# (a test's); by default the repository's
HOME = os.environ.get("QUALITY_DIR")
OUT = os.path.join(HOME or ROOT, "bench", "quality", "runs")
DOC = os.path.join(HOME or ROOT, "docs", "quality.md")
PLOTS = os.path.join(HOME or ROOT, "docs", "quality")
CACHE = os.path.join(HOME or ROOT, "bench", "quality", "baseline")
JOB = os.environ.get("JOB") or os.path.join(ROOT, "examples", "study.yaml")
BIN = os.path.join(ROOT, os.environ.get("BUILD", "build"), "ddiloco")


def words(name, default):
    return [int(w) for w in os.environ.get(name, default).split()]


def grid():
    cells = []
    for m in words("MS", "4 8 16"):
        for slow in ("fast", "slow"):
            for seed in words("SEEDS", "1 2"):
                cells.append("m%d-%s-s%d" % (m, slow, seed))
    for m in words("HMS", "8"):
        for h in words("HS", "16 64 256"):
            for enc in ("f32", "int8"):
                cells.append("h%d-%s%s" % (h, enc, "" if m == 8 else "-m%d" % m))
    for m in words("MS", "4 8 16"):
        for em in os.environ.get("OUTER", "1/0 0.7/0.5 1/0.5 0.7/0.8").split():
            eta, mu = em.split("/")
            cells.append("o%d-%s-%s" % (m, eta, mu))
    return cells


def cell_job(base, cell):
    """The job of a cell, and whether it trains the baseline."""
    job = json.loads(json.dumps(base))
    spec = job["spec"]
    sy = spec.setdefault("syncer", {})
    m = re.fullmatch(r"m(\d+)-(fast|slow)-s(\d+)", cell)
    h = re.fullmatch(r"h(\d+)-(f32|int8)(?:-m(\d+))?", cell)
    o = re.fullmatch(r"o(\d+)-([0-9.]+)-([0-9.]+)", cell)
    lr = re.fullmatch(r"l(\d+)-([0-9.]+)", cell)
    if m:
        M, slow, seed = int(m.group(1)), m.group(2) == "slow", int(m.group(3))
    elif o:
        M, slow, seed = int(o.group(1)), False, 1
        sy["outerLr"] = float(o.group(2))
        sy["outerMomentum"] = float(o.group(3))
        sy["nesterov"] = True
        spec.setdefault("chaos", {})["enabled"] = False
    elif lr:
        M, slow, seed = int(lr.group(1)), False, 1
        spec["optimizer"]["lr"] = float(lr.group(2))
    elif h:
        M, slow, seed = int(h.group(3) or 8), True, 1
        sy["syncEvery"] = int(h.group(1))
        enc = h.group(2)
        sy["encoding"] = enc
        sy["updateEncoding"] = enc
        sy["updateDelta"] = enc != "f32"
    else:
        raise SystemExit("quality: no such cell '%s' (m<M>-<fast|slow>-s<SEED>, "
                         "h<H>-<f32|int8>[-m<M>], o<M>-<eta>-<mu> or l<M>-<lr>)" % cell)
    # (a job's name has no dots: o16-0.7-0.5 runs as study-o16-0p7-0p5)
    job["metadata"]["name"] = "study-" + cell.replace(".", "p")
    spec["learners"]["replicas"] = M
    spec["learners"].pop("slowdown", None)
    if slow:
        spec["learners"]["slowdown"] = {str(M - 1): 2.0}
    # a quorum of three quarters of the learners, as the job's 6 of 8
    sy["minQuorum"] = max(1, (3 * M) // 4)
    spec["model"]["seed"] = 1336 + seed
    spec.setdefault("chaos", {})["seed"] = seed
    return job, bool(m) and not slow and seed == 1


def fates(log, learner):
    """The syncer's last words on a learner: its steps' shares."""
    pat = re.compile(r"learner %d: .* steps trained: merged ([0-9.]+), "
                     r"late ([0-9.]+), refused ([0-9.]+), overwritten ([0-9.]+)"
                     r"(?:, lost to restarts ([0-9.]+))?" % learner)
    last = None
    with open(log) as f:
        for line in f:
            hit = pat.search(line)
            if hit:
                last = [float(x) for x in hit.groups() if x is not None]
    if not last:
        return None
    return dict(zip(("merged", "late", "refused", "overwritten", "restarts"), last))


def write_job(job, rundir):
    """The cell's job file in its run folder, made here: its path."""
    os.makedirs(rundir, exist_ok=True)
    path = os.path.join(rundir, "job.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(job, f, sort_keys=False)
    return path


def ddiloco_run(cell, job, rundir, run, extra):
    """`ddiloco run` of a cell's job into rundir/run; its report."""
    path = write_job(job, rundir)
    cmd = [BIN, "run", path, "--run-dir", os.path.join(rundir, run)] + extra
    print("quality: %s: %s" % (cell, " ".join(cmd)), flush=True)
    with open(os.path.join(rundir, run + ".log"), "w") as out:
        rc = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT,
                             env=dict(os.environ, DDILOCO_CACHE_DIR=CACHE))
    if rc:
        raise SystemExit("quality: %s: ddiloco run exited %d; see %s/%s.log"
                         % (cell, rc, rundir, run))
    return json.load(open(os.path.join(rundir, run, "report.json")))


def run_job(job, text_hash, cell, rundir):
    """The cell's job, without its baseline: the cell's record."""
    t0 = time.time()
    # from the start: a run folder left by a stopped run holds its
    # checkpoints, from which `ddiloco run` would resume
    shutil.rmtree(os.path.join(rundir, "run"), ignore_errors=True)
    rep = ddiloco_run(cell, job, rundir, "run", [])
    M = job["spec"]["learners"]["replicas"]
    return {
        "cell": cell, "job_sha256": text_hash, "learners": M,
        "slow": "slowdown" in job["spec"]["learners"],
        "syncer": job["spec"]["syncer"], "seconds": time.time() - t0,
        "inner_lr": job["spec"]["optimizer"]["lr"],
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpus": os.cpu_count(), "final_eval_loss": rep["final_eval_loss"],
        "tokens": rep["tokens"], "rounds": rep.get("rounds"),
        "uptime": rep["uptime"],
        "goodput": rep["goodput"], "kills": rep["kills"],
        "bytes": rep["bytes"], "pace": rep["pace"],
        "goodput_breakdown": rep["goodput_breakdown"],
        "invariants": rep["invariants"],
        "eval_history": [(e["tokens"], e["loss"]) for e in rep["eval_history"]],
        "slow_learner": fates(os.path.join(rundir, "run", "syncer.log"), M - 1),
    }


def run_baseline(job, cell, rundir):
    """The data-parallel baseline's sweep at the cell's M, alone
    (--baseline-only): its choice and the seconds it took."""
    lr = job["spec"]["optimizer"]["lr"]
    s = math.sqrt(2)
    rep = ddiloco_run(cell, job, rundir, "baseline", [
        "--baseline-only", "--baseline-lr",
        ",".join("%g" % (lr * k) for k in (1 / s, 1, s)),
        "--baseline-widen", "3"])
    b = rep["baseline"]
    return {"lr": b.get("lr"), "final_eval_loss": b["final_eval_loss"],
            "sweep": b.get("sweep"), "seconds": b["seconds"]}


def run_alone(job, cell, rundir):
    """One learner alone on 1/M of the tokens at the job's rate (`ddiloco
    train`, the baseline's trainer at the job's batch): where the M
    learners would be if merging gained nothing."""
    t0 = time.time()
    path = write_job(job, rundir)
    spec = job["spec"]
    tokens = spec["budget"]["tokens"] // spec["learners"]["replicas"]
    cmd = [BIN, "train", path, "--tokens", str(tokens),
           "--lr", repr(spec["optimizer"]["lr"])]
    print("quality: %s: %s" % (cell, " ".join(cmd)), flush=True)
    log = os.path.join(rundir, "alone.log")
    with open(log, "w") as out:
        rc = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT)
    last = open(log).read().strip().splitlines()[-1:] or [""]
    hit = re.match(r"final eval_loss=([0-9.eE+-]+) tokens=(\d+)", last[0])
    if rc or not hit:
        raise SystemExit("quality: %s: ddiloco train exited %d; see %s"
                         % (cell, rc, log))
    return {"final_eval_loss": float(hit.group(1)), "tokens": int(hit.group(2)),
            "lr": spec["optimizer"]["lr"], "seconds": time.time() - t0}


def save(out, res):
    with open(out + ".tmp", "w") as f:
        json.dump(res, f, indent=1)
    os.replace(out + ".tmp", out)


def twin_of(base, cell, text_hash):
    """A grid cell run before whose job is this cell's but for its name
    (h64-int8 is m8-slow-s1 when the job runs H = 64 in int8): its name
    and file, or None."""
    spec = cell_job(base, cell)[0]["spec"]
    for other in grid():
        if other == cell:
            return None
        path = os.path.join(OUT, other + ".json")
        if cell_job(base, other)[0]["spec"] == spec and os.path.exists(path):
            res = json.load(open(path))
            if res.get("job_sha256") == text_hash:
                return other, res
    return None


def run(cells):
    """Each cell's job, then (for the cells that train one) its
    baseline: the cell's file is written after each, so a sweep stopped
    halfway leaves the job's result kept, and the next call trains only
    the baseline's missing rates."""
    text = open(JOB, "rb").read()
    text_hash = quality_report.job_hash(text)
    base = yaml.safe_load(text)
    os.makedirs(OUT, exist_ok=True)
    for cell in cells or grid():
        out = os.path.join(OUT, cell + ".json")
        job, with_baseline = cell_job(base, cell)
        rundir = os.path.join(HOME or ROOT, "runs", "study", cell)
        res = json.load(open(out)) if os.path.exists(out) else {}
        twin = None if res.get("job_sha256") == text_hash or with_baseline \
            else twin_of(base, cell, text_hash)
        if twin:
            # the same run: its result under this name too, at no time
            res = dict(twin[1], cell=cell, same_as=twin[0], seconds=0.0)
            res.pop("baseline", None)
            res.pop("alone", None)
            save(out, res)
            print("quality: %s: the job of %s, which ran: its result" % (
                cell, twin[0]), flush=True)
            continue
        if res.get("job_sha256") != text_hash:
            res = run_job(job, text_hash, cell, rundir)
            save(out, res)
            print("quality: %s: loss %.4f in %.0f s" % (
                cell, res["final_eval_loss"], res["seconds"]), flush=True)
        elif not with_baseline or (res.get("baseline") and res.get("alone")):
            print("quality: %s: done before (%s)" % (cell, out), flush=True)
            continue
        if with_baseline and not res.get("baseline"):
            res["baseline"] = run_baseline(job, cell, rundir)
            res["seconds"] += res["baseline"]["seconds"]
            save(out, res)
            print("quality: %s: baseline %.4f at lr %g" % (
                cell, res["baseline"]["final_eval_loss"],
                res["baseline"]["lr"]), flush=True)
        if with_baseline and not res.get("alone"):
            res["alone"] = run_alone(job, cell, rundir)
            res["seconds"] += res["alone"]["seconds"]
            save(out, res)
            print("quality: %s: one learner alone %.4f on %d tokens" % (
                cell, res["alone"]["final_eval_loss"], res["alone"]["tokens"]),
                flush=True)


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "run"
    if what == "run":
        run(sys.argv[2:])
    elif what != "report":
        raise SystemExit("usage: sh bench/quality.sh [run|report] [CELL ...]")
    quality_report.write(OUT, DOC, PLOTS, JOB)
