#!/usr/bin/python3
"""One run of examples/pytorch/external-chaos.yaml with settings changed,
against its one-process baseline (docs/abi.md, Parity with one process):

  /usr/bin/python3 bench/parity_sweep.py [--chaos] [--dir D] [SEC.KEY=V ...]

SEC.KEY=V sets spec.SEC.KEY (syncer, optimizer, ...: replaced where the
file has it, else added to the section), e.g. syncer.alpha=0.5
syncer.outerLr=0.5. Chaos is off unless --chaos. Runs the job with
`ddiloco run` in a folder under D (default a new one in /tmp, kept),
then external.py --baseline from the seeder's weights (the learner the
syncer's log names) with the job's lr, warmup and minLrRatio; the
baseline is deterministic for those and the seeder, so it is kept in
D/baseline-*.txt and read from there the next time. Prints one row:
settings | chaos | job final eval loss | baseline | ratio | uptime |
K-th learner's steps | rounds | kills of learners | wall | 1-minute load
at the start. From the repository, after make; with Debian's torch.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

JOB = "examples/pytorch/external-chaos.yaml"
SCRIPT = "examples/pytorch/external.py"


def setting(text, key, default):
    m = re.search(r"^\s+%s: ([0-9.e-]+)\s*$" % key, text, re.M)
    return m.group(1) if m else default


def variant(text, sets):
    lines = text.split("\n")
    for s in sets:
        k, v = s.split("=", 1)
        sec, key = k.split(".")
        insec, done, at = False, False, None
        for i, ln in enumerate(lines):
            if re.match(r"^  \w", ln):
                insec = ln.strip() == sec + ":"
                if insec:
                    at = i
            elif insec and re.match(r"^    %s: " % key, ln):
                lines[i] = "    %s: %s" % (key, v)
                done = True
        if not done:
            if at is None:
                sys.exit("parity_sweep: %s has no spec.%s" % (JOB, sec))
            lines.insert(at + 1, "    %s: %s" % (key, v))
    return "\n".join(lines)


def main():
    argv = sys.argv[1:]
    chaos = "--chaos" in argv
    base_dir = None
    if "--dir" in argv:
        base_dir = argv[argv.index("--dir") + 1]
    sets = [a for a in argv if "=" in a]
    base_dir = base_dir or tempfile.mkdtemp(prefix="ddparity-")
    os.makedirs(base_dir, exist_ok=True)
    with open(JOB) as f:
        text = variant(f.read(), sets)
    if not chaos:
        text = re.sub(r"(?m)^    enabled: true$", "    enabled: false", text)
    run = tempfile.mkdtemp(prefix="run-", dir=base_dir)
    job = os.path.join(run, "job-variant.yaml")
    with open(job, "w") as f:
        f.write(text)
    env = dict(os.environ)
    env.pop("DDILOCO_LIB", None)
    env["PYTHONPATH"] = os.path.abspath("python")
    load = os.getloadavg()[0]
    t0 = time.time()
    r = subprocess.run([os.path.join(os.environ.get("BUILD", "build"),
                                     "ddiloco"), "run", job, "--run-dir",
                        os.path.join(run, "run"), "--timeout", "600"],
                       env=env, capture_output=True, text=True)
    wall = time.time() - t0
    if r.returncode:
        sys.exit("parity_sweep: the job failed (%s):\n%s" % (run,
                                                             r.stderr[-2000:]))
    with open(os.path.join(run, "run", "report.json")) as f:
        rep = json.load(f)
    with open(os.path.join(run, "run", "syncer.log")) as f:
        seeder = re.search(r"learner (\d)'s weights are the job's initial "
                           r"model", f.read()).group(1)
    lr = setting(text, "lr", "0.02")
    wu = setting(text, "warmupSteps", "100")
    mlr = setting(text, "minLrRatio", "0.1")
    cache = os.path.join(base_dir, "baseline-lr%s-w%s-m%s-init%s.txt"
                         % (lr, wu, mlr, seeder))
    if not os.path.exists(cache):
        b = subprocess.run(["/usr/bin/python3", SCRIPT, "--task", "noisy",
                            "--baseline",
                            "--learners", setting(text, "replicas", "3"),
                            "--batch", setting(text, "batchSize", "64"),
                            "--tokens", setting(text, "tokens", "384000"),
                            "--lr", lr, "--warmup", wu, "--min-lr-ratio", mlr,
                            "--init", seeder], capture_output=True, text=True)
        if b.returncode:
            sys.exit("parity_sweep: the baseline failed:\n" + b.stderr[-2000:])
        with open(cache, "w") as f:
            f.write(b.stdout)
    with open(cache) as f:
        base = float(re.search(r"best lr \S+ loss (\S+)", f.read()).group(1))
    final = rep["final_eval_loss"]
    pace = re.search(r"K-th learner (\d+) steps", r.stdout)
    kills = len([k for k in rep["kills"]["log"]
                 if k["target"].startswith("learner")])
    print("| %s | %s | %.6f | %.6f | %.4f | %.4f | %s | %d | %d | %.0f s | "
          "%.1f |" % (" ".join(sets) or "as the file", "chaos" if chaos
                      else "no chaos", final, base, final / base,
                      rep["uptime"], pace.group(1) if pace else "?",
                      rep["rounds"], kills, wall, load))
    print("run folder", run, file=sys.stderr)


if __name__ == "__main__":
    main()
