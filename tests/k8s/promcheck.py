#!/usr/bin/env python3
"""A strict reader of the Prometheus text exposition format (0.0.4).

promcheck.py FILE [FAMILY ...]: reads FILE (a /metrics answer) and exits
1 with the line and the reason at the first of: a sample before its
family's HELP and TYPE, HELP without TYPE right after, a family twice, an
unknown TYPE, a bad metric or label name, a bad escape, a value that does
not parse, a sample outside its family (histograms: _bucket, _sum,
_count; summaries: _sum, _count), a histogram whose buckets are not
cumulative, lack le="+Inf", or whose +Inf bucket is not its _count. Each
FAMILY named must be there with at least one sample. Prints the families
and samples counted.
"""
import math
import re
import sys

NAME = re.compile(r'[a-zA-Z_:][a-zA-Z0-9_:]*')
LABEL = re.compile(r'[a-zA-Z_][a-zA-Z0-9_]*')
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


def die(n, why):
    sys.exit("promcheck: line %d: %s" % (n, why))


def value(s, n):
    if s in ("NaN", "+Inf", "-Inf"):
        return float(s.replace("Inf", "inf").replace("NaN", "nan"))
    if not re.fullmatch(r'[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?', s):
        die(n, "bad value %r" % s)
    return float(s)


def labels(s, n):
    """{a="x",b="y"} at the start of s: (dict, length)."""
    out, i = {}, 1
    while True:
        m = LABEL.match(s, i)
        if not m:
            die(n, "bad label name")
        name, i = m.group(0), m.end()
        if s[i:i + 2] != '="':
            die(n, "label %s: no =\"" % name)
        i += 2
        v = []
        while s[i] != '"':
            if s[i] == "\\":
                if s[i + 1] not in '\\"n':
                    die(n, "bad escape in a label value")
                v.append({"\\": "\\", '"': '"', "n": "\n"}[s[i + 1]])
                i += 2
            else:
                v.append(s[i])
                i += 1
        i += 1
        if name in out:
            die(n, "label %s twice" % name)
        out[name] = "".join(v)
        if s[i] == "}":
            return out, i + 1
        if s[i] != ",":
            die(n, "bad labels")
        i += 1


def main():
    text = open(sys.argv[1]).read()
    if not text.endswith("\n"):
        die(0, "no newline at the end")
    fams, order = {}, []
    fam = typ = None
    lines = text.split("\n")[:-1]
    expect_type = None
    for n, l in enumerate(lines, 1):
        if expect_type:
            want = "# TYPE %s " % expect_type
            if not l.startswith(want):
                die(n, "HELP of %s without its TYPE" % expect_type)
            typ = l[len(want):]
            if typ not in TYPES:
                die(n, "unknown TYPE %r" % typ)
            fams[fam]["type"] = typ
            expect_type = None
            continue
        if l.startswith("# HELP "):
            m = NAME.match(l, 7)
            if not m or l[m.end():m.end() + 1] != " ":
                die(n, "bad HELP")
            fam = m.group(0)
            if fam in fams:
                die(n, "family %s twice" % fam)
            if re.search(r'\\[^\\n]', l[m.end():]):
                die(n, "bad escape in HELP")
            fams[fam] = {"type": None, "samples": []}
            order.append(fam)
            expect_type = fam
            continue
        if l.startswith("#"):
            die(n, "a comment that is not HELP then TYPE")
        m = NAME.match(l)
        if not m:
            die(n, "bad sample name")
        name, i = m.group(0), m.end()
        if fam is None:
            die(n, "sample before any HELP and TYPE")
        suffix = name[len(fam):] if name.startswith(fam) else None
        ok = suffix == "" or (typ in ("histogram", "summary") and suffix in ("_sum", "_count")) \
            or (typ == "histogram" and suffix == "_bucket")
        if not ok:
            die(n, "sample %s outside its family %s (%s)" % (name, fam, typ))
        lab = {}
        if l[i:i + 1] == "{":
            lab, k = labels(l[i:], n)
            i += k
        if l[i:i + 1] != " ":
            die(n, "no space before the value")
        fams[fam]["samples"].append((name, lab, value(l[i + 1:], n), n))
    if expect_type:
        die(len(lines), "HELP without TYPE at the end")
    # histograms: per label set, cumulative buckets ending in +Inf == _count
    for f in order:
        if fams[f]["type"] != "histogram":
            continue
        series = {}
        for name, lab, v, n in fams[f]["samples"]:
            key = tuple(sorted((k, x) for k, x in lab.items() if k != "le"))
            s = series.setdefault(key, {"buckets": [], "count": None, "sum": None})
            if name.endswith("_bucket"):
                if "le" not in lab:
                    die(n, "bucket without le")
                s["buckets"].append((value(lab["le"], n), v, n))
            elif name.endswith("_count"):
                s["count"] = v
            elif name.endswith("_sum"):
                s["sum"] = v
        for key, s in series.items():
            b = s["buckets"]
            if not b or not math.isinf(b[-1][0]):
                sys.exit("promcheck: histogram %s%s: no le=\"+Inf\" bucket last" % (f, key))
            for (l0, c0, _), (l1, c1, n) in zip(b, b[1:]):
                if not (l1 > l0 and c1 >= c0):
                    die(n, "histogram %s: buckets not increasing and cumulative" % f)
            if s["count"] is None or s["sum"] is None or b[-1][1] != s["count"]:
                sys.exit("promcheck: histogram %s: +Inf bucket %s, _count %s" % (f, b[-1][1], s["count"]))
    for want in sys.argv[2:]:
        if want not in fams or not fams[want]["samples"]:
            sys.exit("promcheck: no family %s" % want)
    print("promcheck: %d families, %d samples, well formed" %
          (len(fams), sum(len(x["samples"]) for x in fams.values())))


if __name__ == "__main__":
    main()
