#!/usr/bin/python3
"""/healthz of a running syncer timed while its checkpoints are written.

Every 100 ms one GET /healthz (timed) and one GET /status (not timed;
its checkpoint.writing says whether a write was under way around the
probe: under way before or after it counts). Prints key=value lines:
the probes in all and during writes, the p50, p99 and max latency in ms
of both sets, the probes that did not answer 200 within 5 s, and the
writes seen (distinct writing_round values).

Usage: python3 bench/healthz_during_ckpt.py HOST:PORT [--seconds S]
                                            [--prefix NAME]
  or   python3 bench/healthz_during_ckpt.py --run-dir DIR ...  (the
       first syncer `ddiloco run` started there, from its events.log,
       waited for up to 120 s)
"""
import argparse
import json
import os
import re
import sys
import time
import urllib.request


def get(addr, path, timeout=5.0):
    t = time.monotonic()
    try:
        with urllib.request.urlopen(f"http://{addr}{path}", timeout=timeout) as r:
            body = r.read()
            return r.status, body, time.monotonic() - t
    except OSError:
        return None, b"", time.monotonic() - t


def writing(addr):
    code, body, _ = get(addr, "/status")
    if code != 200:
        return None, None
    try:
        c = json.loads(body).get("checkpoint") or {}
    except ValueError:
        return None, None
    return bool(c.get("writing")), c.get("writing_round")


def from_run_dir(run_dir, wait):
    until = time.monotonic() + wait
    while time.monotonic() < until:
        try:
            with open(os.path.join(run_dir, "events.log")) as f:
                m = re.findall(r"started on \S+ \(http (\S+)\)", f.read())
            if m:
                return m[0]
        except OSError:
            pass
        time.sleep(0.2)
    return None


def pct(v, q):
    return v[min(len(v) - 1, int(q * (len(v) - 1)))] if v else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("addr", nargs="?")
    ap.add_argument("--run-dir")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--prefix", default="size")
    a = ap.parse_args()
    addr = a.addr or (a.run_dir and from_run_dir(a.run_dir, 120))
    if not addr:
        print("healthz_during_ckpt: no syncer address", file=sys.stderr)
        return 2
    every, during, failed, rounds = [], [], 0, set()
    end = time.monotonic() + a.seconds
    while time.monotonic() < end:
        t0 = time.monotonic()
        w0, r0 = writing(addr)
        code, _, dt = get(addr, "/healthz")
        w1, r1 = writing(addr)
        if code is None and w0 is None and w1 is None:
            time.sleep(0.1)          # the syncer is down (chaos, restart)
            continue
        if code != 200:
            failed += 1
        ms = 1e3 * dt
        every.append(ms)
        if w0 or w1:
            during.append(ms)
            rounds.update(r for r in (r0, r1) if r is not None)
        time.sleep(max(0.0, 0.1 - (time.monotonic() - t0)))
    every.sort()
    during.sort()
    p = a.prefix
    print(f"{p}_healthz_probes={len(every)}")
    print(f"{p}_healthz_probes_during_ckpt={len(during)}")
    print(f"{p}_ckpt_writes_seen={len(rounds)}")
    print(f"{p}_healthz_failed={failed}")
    for name, v in (("", every), ("_during_ckpt", during)):
        print(f"{p}_healthz_ms_p50{name}={pct(v, 0.5):.1f}")
        print(f"{p}_healthz_ms_p99{name}={pct(v, 0.99):.1f}")
        print(f"{p}_healthz_ms_max{name}={v[-1] if v else 0.0:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
