#!/usr/bin/env python3
"""The dashboard's queries against a scrape: every metric a panel or a
variable of charts/ddiloco/dashboards/ddiloco-jobs.json reads must have
samples in the operator's /metrics page (a file), and each per-job one
(ddiloco_job_*) a sample of the job given, so that every panel of that
job shows something.

    dashcheck.py DASHBOARD.json METRICS.txt NAMESPACE JOB

Prints the metrics checked; exits 1 naming the first one missing.
"""
import json
import re
import sys

NAME = re.compile(r"\b(ddiloco_[a-z0-9_]+)")


def queries(dash):
    for p in dash.get("panels", []):
        for t in p.get("targets", []):
            yield t["expr"]
    for v in dash.get("templating", {}).get("list", []):
        q = v.get("query")
        if v.get("type") == "query" and isinstance(q, str):
            yield q


def main():
    dash = json.load(open(sys.argv[1]))
    page = open(sys.argv[2]).read().splitlines()
    ns, job = sys.argv[3], sys.argv[4]
    names = sorted({n for q in queries(dash) for n in NAME.findall(q)})
    if not names:
        sys.exit("dashcheck: no metric in the dashboard's queries")
    for n in names:
        lines = [l for l in page if l.startswith(n + "{") or l.startswith(n + " ")]
        if not lines:
            sys.exit("dashcheck: %s: no sample in the scrape" % n)
        if n.startswith("ddiloco_job_"):
            mine = 'namespace="%s",job="%s"' % (ns, job)
            if not any(mine in l for l in lines):
                sys.exit("dashcheck: %s: no sample of %s/%s" % (n, ns, job))
    print("dashcheck: %d metrics answered: %s" % (len(names), " ".join(names)))


if __name__ == "__main__":
    main()
