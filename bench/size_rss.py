#!/usr/bin/python3
"""Memory of a job at size, by measurement (docs/run.md, Memory at size).

Runs `ddiloco run JOB` and samples every process of the run twice a
second from /proc/PID/status (VmRSS, RssAnon, RssFile, RssShmem) and the
run's exchange folders in /dev/shm (their pages in use: st_blocks), then
prints key=value lines: the peak of each process kind (the largest of its
processes), the peak of the whole run (the sum of every process's RssAnon
and RssFile at one sample plus the exchange folders' pages, each page of
shared memory counted once), the run's rounds and seconds from
report.json, and the time between rounds: each syncer's (shard's) /status
`round` sampled with the rest, its completions spread evenly over the
sample they fell in, and the median over all of them (round_s_p50; 0.5 s
samples, so a round time under that is the mean of a sample's rounds).

A guard for a shared machine: when MemAvailable falls under --floor-mb
every process of the run is killed (SIGKILL: a syncer stopped gently
would write a checkpoint first, which takes more memory) and
guard_stopped=1 printed.

Usage: python3 bench/size_rss.py JOB.yaml [--seconds S] [--floor-mb MB]
                                 [--run-dir DIR] [--prefix NAME]
  BUILD (environment) names the build folder, default build.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

FIELDS = ("VmRSS", "RssAnon", "RssFile", "RssShmem")


def status(pid):
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in FIELDS or k == "PPid":
                    out[k] = int(v.split()[0])
    except OSError:
        return None
    return out


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def descendants(root):
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            s = status(d)
            if s:
                kids.setdefault(s["PPid"], []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        for c in kids.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def kind(argv):
    words = [w.decode(errors="replace") for w in argv]
    for k in ("syncer", "sidecar", "learner"):
        if len(words) > 1 and words[1] == k:
            return k
    return None


def shm_kb(run_pid):
    total = 0
    for d in os.listdir("/dev/shm"):
        if not re.match(rf"ddiloco-.*-{run_pid}$", d):
            continue
        for base, _, files in os.walk(os.path.join("/dev/shm", d)):
            for f in files:
                try:
                    total += os.lstat(os.path.join(base, f)).st_blocks // 2
                except OSError:
                    pass
    return total


def syncer_http(run_dir):
    try:
        with open(os.path.join(run_dir, "events.log")) as f:
            return re.findall(r"started on \S+ \(http (\S+)\)", f.read())
    except OSError:
        return []


def status_round(addr):
    try:
        with urllib.request.urlopen(f"http://{addr}/status", timeout=0.3) as r:
            return json.load(r).get("round")
    except (OSError, ValueError):
        return None


def mem_available_kb():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("job")
    ap.add_argument("--seconds", type=float, default=180)
    ap.add_argument("--floor-mb", type=float, default=1536)
    ap.add_argument("--run-dir", default=None)
    ap.add_argument("--prefix", default="size")
    a = ap.parse_args()
    build = os.environ.get("BUILD", "build")
    run_dir = a.run_dir or f"/tmp/size-run-{os.getpid()}"
    cmd = [f"{build}/ddiloco", "run", a.job, "--run-dir", run_dir,
           "--timeout", str(int(a.seconds))]
    log = open(run_dir + ".out", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    peak = {}            # (kind, field) -> kB
    total_peak = shm_peak = 0
    guard = 0
    last_round = {}      # syncer address -> (time, round)
    round_times = []
    while proc.poll() is None:
        for addr in syncer_http(run_dir):
            r, now = status_round(addr), time.monotonic()
            if r is None:
                continue
            t0, r0 = last_round.get(addr, (now, r))
            if r > r0:
                round_times += [(now - t0) / (r - r0)] * (r - r0)
            if r != r0 or addr not in last_round:
                last_round[addr] = (now, r)
        total = 0
        for pid in descendants(proc.pid):
            k = kind(cmdline(pid))
            s = status(pid)
            if not k or not s:
                continue
            for f in FIELDS:
                key = (k, f)
                peak[key] = max(peak.get(key, 0), s.get(f, 0))
            total += s.get("RssAnon", 0) + s.get("RssFile", 0)
        shm = shm_kb(proc.pid)
        shm_peak = max(shm_peak, shm)
        total_peak = max(total_peak, total + shm)
        if not guard and mem_available_kb() < a.floor_mb * 1024:
            guard = 1
            for pid in descendants(proc.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            proc.kill()
        time.sleep(0.5)
    p = a.prefix
    for (k, f), v in sorted(peak.items()):
        print(f"{p}_{k}_{f.lower()}_mb_peak={v / 1024:.0f}")
    print(f"{p}_shm_mb_peak={shm_peak / 1024:.0f}")
    print(f"{p}_total_mb_peak={total_peak / 1024:.0f}")
    print(f"{p}_guard_stopped={guard}")
    if round_times:
        round_times.sort()
        print(f"{p}_round_s_p50={round_times[len(round_times) // 2]:.2f}")
    print(f"{p}_run_rc={proc.returncode}")
    try:
        with open(os.path.join(run_dir, "report.json")) as f:
            r = json.load(f)
        print(f"{p}_rounds={r.get('rounds')}")
        print(f"{p}_seconds={r.get('seconds'):.1f}")
        print(f"{p}_tokens={r.get('tokens')}")
        print(f"{p}_kills={r.get('kills', {}).get('total')}")
    except (OSError, ValueError) as e:
        print(f"size_rss: no report.json in {run_dir}: {e}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
