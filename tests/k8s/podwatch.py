#!/usr/bin/env python3
"""Reads what `kubectl get pods --watch --output-watch-events -o json`
wrote (one JSON event after another) and prints, on one line:

podwatch.py fewest FILE N: the fewest pods Ready (and not being
    deleted) at once after any event past the first N (the first list of
    N pods), then the events read.
podwatch.py cpu FILE [NAME]: the events read, the most CPU (millicores)
    the pods not ended requested at once (their containers and native
    sidecars), and 1 when a pod NAME was ever seen, else 0.
"""
import json
import sys


def events(path):
    text, dec, at = open(path).read(), json.JSONDecoder(), 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at >= len(text):
            return
        ev, at = dec.raw_decode(text, at)
        yield ev["type"], ev["object"]


def ready(kind, pod):
    return kind != "DELETED" and not pod["metadata"].get("deletionTimestamp") and any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in pod.get("status", {}).get("conditions", []))


def milli(q):
    return float(q[:-1]) if q.endswith("m") else float(q) * 1000


def cpu(pod):
    s = pod["spec"]
    ctrs = s["containers"] + [c for c in s.get("initContainers", [])
                              if c.get("restartPolicy") == "Always"]
    return sum(milli(c.get("resources", {}).get("requests", {}).get("cpu", "0"))
               for c in ctrs)


def fewest(path, first):
    now, least, n = {}, first, 0
    for kind, pod in events(path):
        n += 1
        now[pod["metadata"]["name"]] = ready(kind, pod)
        if n > first:
            least = min(least, sum(now.values()))
    print(least, n)


def most_cpu(path, name):
    live, most, n, seen = {}, 0, 0, 0
    for kind, pod in events(path):
        n += 1
        pn = pod["metadata"]["name"]
        seen |= pn == name
        if kind == "DELETED" or pod["status"].get("phase") in ("Succeeded", "Failed"):
            live.pop(pn, None)
        else:
            live[pn] = cpu(pod)
        most = max(most, sum(live.values()))
    print(n, int(most), seen)


if __name__ == "__main__":
    if sys.argv[1] == "fewest":
        fewest(sys.argv[2], int(sys.argv[3]))
    else:
        most_cpu(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
