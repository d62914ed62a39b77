#!/usr/bin/env python3
"""The jobs' dashboard (charts/ddiloco/dashboards/ddiloco-jobs.json)
drawn from scrapes of the operator's /metrics taken during a run: each
panel's queries evaluated over the scrapes, as Prometheus would over the
same samples, and drawn as one SVG page laid out on the dashboard's grid.

    dashrender.py DASHBOARD.json SCRAPES.txt NAMESPACE JOB OUT.svg

SCRAPES.txt is the operator's /metrics pages one after another, each
after a line "# at SECONDS" (the e2e's scrape loop writes it). The
queries are the subset of PromQL the dashboard uses: selectors with =,
=~ and the dashboard's variables, rate(x[W]), a number times a query,
max by and sum by, histogram_quantile and "== 1". Exits 1 when a panel
has no series with two points or more (nothing to draw); prints each
panel's series and points.
"""
import json
import re
import sys

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def scrapes(path):
    """[(t, {(name, labels-tuple): value})] in the file's order."""
    out, cur = [], None
    for line in open(path):
        if line.startswith("# at "):
            cur = {}
            out.append((float(line[5:]), cur))
            continue
        m = SAMPLE.match(line)
        if cur is None or line.startswith("#") or not m:
            continue
        labels = tuple(sorted(LABEL.findall(m.group(3) or "")))
        try:
            cur[(m.group(1), labels)] = float(m.group(4))
        except ValueError:
            pass
    return out


class Query:
    """A parsed query, evaluated at one scrape: {labels: value}."""

    def __init__(self, text):
        self.s, self.i = text, 0
        self.node = self.expr()
        self.ws()
        if self.i != len(self.s):
            raise SyntaxError("dashrender: cannot read %r at %d" % (text, self.i))

    def ws(self):
        while self.i < len(self.s) and self.s[self.i].isspace():
            self.i += 1

    def take(self, tok):
        self.ws()
        if self.s.startswith(tok, self.i):
            self.i += len(tok)
            return True
        return False

    def want(self, tok):
        if not self.take(tok):
            raise SyntaxError("dashrender: %r expected at %d of %r" % (tok, self.i, self.s))

    def word(self):
        self.ws()
        m = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*|[0-9.]+").match(self.s, self.i)
        if not m:
            raise SyntaxError("dashrender: a name expected at %d of %r" % (self.i, self.s))
        self.i = m.end()
        return m.group(0)

    def expr(self):
        left = self.term()
        if self.take("=="):
            return ("eq", left, float(self.word()))
        return left

    def term(self):
        w = self.word()
        if re.match(r"[0-9.]+$", w):
            self.want("*")
            return ("mul", float(w), self.term())
        if w in ("max", "sum"):
            self.want("by")
            self.want("(")
            by = []
            while not self.take(")"):
                by.append(self.word())
                self.take(",")
            self.want("(")
            inner = self.expr()
            self.want(")")
            return (w, tuple(by), inner)
        if w == "rate":
            self.want("(")
            sel = self.selector(self.word())
            self.want("[")
            win = self.word()
            unit = self.s[self.i]
            self.i += 1
            self.want("]")
            self.want(")")
            return ("rate", sel, float(win) * {"s": 1, "m": 60, "h": 3600}[unit])
        if w == "histogram_quantile":
            self.want("(")
            q = float(self.word())
            self.want(",")
            inner = self.expr()
            self.want(")")
            return ("hq", q, inner)
        return ("sel",) + self.selector(w)[1:]

    def selector(self, name):
        ms = []
        if self.take("{"):
            while not self.take("}"):
                k = self.word()
                op = "=~" if self.take("=~") else (self.want("=") or "=")
                self.want('"')
                j = self.s.index('"', self.i)
                ms.append((k, op, self.s[self.i:j]))
                self.i = j + 1
                self.take(",")
        return ("sel", name, tuple(ms))

    @staticmethod
    def match(labels, ms):
        d = dict(labels)
        return all((d.get(k, "") == v) if op == "=" else
                   re.fullmatch(v, d.get(k, "")) is not None for k, op, v in ms)

    def at(self, data, k, node=None):
        """The value of node at scrape k of data."""
        n = node or self.node
        kind = n[0]
        if kind == "sel":
            return {lab: v for (name, lab), v in data[k][1].items()
                    if name == n[1] and self.match(lab, n[2])}
        if kind == "rate":
            _, (_, name, ms), win = n
            t = data[k][0]
            series = {}
            for tj, page in data[:k + 1]:
                if tj <= t - win:
                    continue
                for (nm, lab), v in page.items():
                    if nm == name and self.match(lab, ms):
                        series.setdefault(lab, []).append((tj, v))
            out = {}
            for lab, pts in series.items():
                if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
                    continue
                inc = sum(max(b - a, 0) if b >= a else b
                          for (_, a), (_, b) in zip(pts, pts[1:]))
                out[lab] = inc / (pts[-1][0] - pts[0][0])
            return out
        if kind == "mul":
            return {lab: n[1] * v for lab, v in self.at(data, k, n[2]).items()}
        if kind == "eq":
            return {lab: v for lab, v in self.at(data, k, n[1]).items() if v == n[2]}
        if kind in ("max", "sum"):
            groups = {}
            for lab, v in self.at(data, k, n[2]).items():
                key = tuple((a, b) for a, b in lab if a in n[1])
                groups.setdefault(key, []).append(v)
            f = max if kind == "max" else sum
            return {key: f(vs) for key, vs in groups.items()}
        if kind == "hq":
            buckets = sorted((float(dict(lab)["le"]), v)
                             for lab, v in self.at(data, k, n[2]).items())
            if not buckets or buckets[-1][1] <= 0:
                return {}
            want, prev_le, prev_c = n[1] * buckets[-1][1], 0.0, 0.0
            for le, c in buckets:
                if c >= want:
                    if le == float("inf"):
                        return {(): prev_le}
                    f = (want - prev_c) / (c - prev_c) if c > prev_c else 1
                    return {(): prev_le + (le - prev_le) * f}
                prev_le, prev_c = le, c
            return {}
        raise ValueError(kind)


def esc(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def fmt(v, unit):
    if unit == "percentunit":
        return "%.0f%%" % (100 * v)
    if unit == "Bps":
        for u, d in (("MB/s", 1e6), ("kB/s", 1e3)):
            if abs(v) >= d:
                return "%.1f %s" % (v / d, u)
        return "%.0f B/s" % v
    if unit == "s":
        return "%.0f s" % v
    if abs(v) >= 1e6:
        return "%.1fM" % (v / 1e6)
    if abs(v) >= 1e3:
        return "%.1fk" % (v / 1e3)
    return "%.3g" % v


COLORS = ["#3274d9", "#e0752d", "#37872d", "#c4162a", "#8f3bb8", "#b8860b"]
UX, UY = 44, 32   # pixels a grid unit


def legend(lab, target):
    """The series' name as Grafana writes it: the target's legendFormat
    with {{label}} replaced."""
    d = dict(lab)
    fmt_ = target.get("legendFormat") or target.get("refId", "")
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: d.get(m.group(1), ""), fmt_)


def draw_series(out, x, y, w, h, panel, lines, t0, t1):
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
    vals = [v for _, pts in lines for _, v in pts]
    lo, hi = min(vals + [0]), max(vals)
    if unit == "percentunit":
        lo, hi = min(lo, 0), max(hi, 1)
    hi = hi if hi > lo else lo + 1
    px, py, pw, ph = x + 56, y + 28, w - 70, h - 62
    for f in (0, 0.5, 1):
        yy = py + ph - f * ph
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>' % (px, yy, px + pw, yy))
        out.append('<text x="%d" y="%.1f" font-size="10" text-anchor="end" fill="#555">%s</text>'
                   % (px - 4, yy + 3, esc(fmt(lo + f * (hi - lo), unit))))
    for s in (0, 0.5, 1):
        out.append('<text x="%.1f" y="%d" font-size="10" text-anchor="middle" fill="#555">%.0f s</text>'
                   % (px + s * pw, py + ph + 13, s * (t1 - t0)))
    lx = px
    for c, (name, pts) in enumerate(lines):
        col = COLORS[c % len(COLORS)]
        d = " ".join("%.1f,%.1f" % (px + (t - t0) / (t1 - t0) * pw,
                                    py + ph - (v - lo) / (hi - lo) * ph) for t, v in pts)
        out.append('<polyline fill="none" stroke="%s" stroke-width="1.6" points="%s"/>' % (col, d))
        out.append('<rect x="%d" y="%d" width="10" height="3" fill="%s"/>' % (lx, y + h - 12, col))
        out.append('<text x="%d" y="%d" font-size="10" fill="#333">%s</text>'
                   % (lx + 13, y + h - 8, esc(name[:40])))
        lx += 13 + 6 * len(name[:40]) + 16


def main():
    dash = json.load(open(sys.argv[1]))
    data = scrapes(sys.argv[2])
    ns, job, path = sys.argv[3], sys.argv[4], sys.argv[5]
    if len(data) < 3:
        sys.exit("dashrender: %d scrapes, fewer than 3" % len(data))
    t0, t1 = data[0][0], data[-1][0]
    W = 24 * UX
    H = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dash["panels"]) * UY + 40
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif">' % (W, H),
           '<rect width="100%%" height="100%%" fill="#f4f5f5"/>',
           '<text x="8" y="24" font-size="16" fill="#222">%s: namespace %s, job %s, '
           '%.0f s, %d scrapes of the operator\'s /metrics</text>'
           % (esc(dash["title"]), esc(ns), esc(job), t1 - t0, len(data))]
    bad = []
    for p in dash["panels"]:
        g = p["gridPos"]
        x, y, w, h = g["x"] * UX + 4, g["y"] * UY + 40, g["w"] * UX - 8, g["h"] * UY - 8
        out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="#fff" stroke="#ccc"/>' % (x, y, w, h))
        out.append('<text x="%d" y="%d" font-size="13" fill="#222">%s</text>'
                   % (x + 8, y + 17, esc(p["title"])))
        lines = []
        for t in p.get("targets", []):
            q = Query(t["expr"].replace("$namespace", re.escape(ns)).replace("$job", re.escape(job)))
            series = {}
            for k in range(len(data)):
                for lab, v in q.at(data, k).items():
                    series.setdefault(lab, []).append((data[k][0], v))
            for lab, pts in sorted(series.items()):
                lines.append((legend(lab, t), pts, lab))
        if p["type"] == "table":
            last = {}
            for name, pts, lab in lines:
                if pts[-1][0] == t1:
                    last[lab] = pts[-1][1]
            rows = [dict(lab) for lab in sorted(last)]
            for r, row in enumerate(rows[:5]):
                out.append('<text x="%d" y="%d" font-size="12" fill="#333">%s</text>'
                           % (x + 12, y + 44 + 18 * r, esc(legend(tuple(row.items()),
                                                                 p["targets"][0]))))
            print("dashrender: %s: %s" % (p["title"], ", ".join(
                "%s %s" % (r.get("job"), r.get("phase")) for r in rows) or "nothing"))
            if not rows:
                bad.append(p["title"])
            continue
        drawn = [(n, pts) for n, pts, _ in lines if len(pts) >= 2]
        print("dashrender: %s: %s" % (p["title"], ", ".join(
            "%s %d points" % (n, len(pts)) for n, pts in drawn) or "nothing"))
        if not drawn:
            bad.append(p["title"])
            continue
        draw_series(out, x, y, w, h, p, drawn, t0, t1)
    out.append("</svg>")
    open(path, "w").write("\n".join(out) + "\n")
    if bad:
        sys.exit("dashrender: nothing to draw in: " + "; ".join(bad))
    print("dashrender: %d panels drawn into %s" % (len(dash["panels"]), path))


if __name__ == "__main__":
    main()
