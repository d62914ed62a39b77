"""docs/quality.md and its plots from the study's cell files
(bench/quality.py). Every figure it writes is read from those files; the
page names the command that made them."""
import glob
import hashlib
import json
import math
import os
import statistics

import yaml

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def job_hash(text):
    """What names a job's text in its cells' files (bench/quality.py)."""
    return hashlib.sha256(text).hexdigest()


def load(out, text_hash):
    """The cells run on the job's text as it is now, and how many files
    are of an earlier text (their losses are not comparable: not shown)."""
    cells, stale = {}, 0
    for path in sorted(glob.glob(os.path.join(out, "*.json"))):
        c = json.load(open(path))
        if c.get("job_sha256") == text_hash:
            cells[c["cell"]] = c
        else:
            stale += 1
    return cells, stale


def baseline_of(cells, M):
    for c in cells.values():
        if c["learners"] == M and c.get("baseline"):
            return c["baseline"]
    return None


def alone_of(cells, M):
    """One learner alone on 1/M of the tokens (bench/quality.py)."""
    for c in cells.values():
        if c["learners"] == M and c.get("alone"):
            return c["alone"]
    return None


def kept(loss, alone, b):
    """The share of data parallel's gain over one learner alone that the
    M learners kept: 1 at the baseline's loss, 0 at the lone learner's."""
    return (alone["final_eval_loss"] - loss) / (
        alone["final_eval_loss"] - b["final_eval_loss"])


def best_of(b):
    """The sweep's run with the lowest loss on the validation split: the
    baseline at its most favourable, the lr chosen on the reported
    split itself."""
    sweep = [r for r in (b or {}).get("sweep") or [] if r.get("final_eval_loss")]
    return min(sweep, key=lambda r: r["final_eval_loss"]) if sweep else None


def outer_steps(c):
    """Outer steps per fragment: rounds / fragments, or None."""
    return c["rounds"] / c["syncer"]["fragments"] if c.get("rounds") else None


def dp_ratio(c, bits):
    """Bytes over data parallel's ring all-reduce of the gradient in
    `bits`-bit values (report.json's model is f32)."""
    return c["bytes"]["ratio"] * 32.0 / bits


def fmt_range(xs, f="%.4f"):
    if not xs:
        return "–"
    if len(xs) == 1:
        return f % xs[0]
    return (f + " (" + f + "–" + f + ")") % (statistics.mean(xs), min(xs), max(xs))


def svg(title, xlabel, ylabel, series, logx=False):
    """A line plot: series is [(label, [(x, y), ...])]."""
    W, H, L, R, T, B = 640, 400, 70, 150, 30, 50
    pts = [p for _, s in series for p in s if p[1] is not None]
    if not pts:
        return None
    tx = (lambda x: math.log10(x)) if logx else (lambda x: x)
    xs = [tx(p[0]) for p in pts]
    ys = [p[1] for p in pts]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    pad = (y1 - y0) * 0.05 or 0.01
    y0, y1 = y0 - pad, y1 + pad

    def X(x):
        return L + (tx(x) - x0) / (x1 - x0) * (W - L - R)

    def Y(y):
        return H - B - (y - y0) / (y1 - y0) * (H - T - B)

    o = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
         'font-family="sans-serif" font-size="12">' % (W, H),
         '<rect width="100%" height="100%" fill="white"/>',
         '<text x="%d" y="18" font-size="14">%s</text>' % (L, title),
         '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>'
         % (L, H - B, W - R, H - B),
         '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>'
         % (L, T, L, H - B)]
    for k in range(5):
        yv = y0 + (y1 - y0) * k / 4
        o.append('<text x="%d" y="%.1f" text-anchor="end">%.3g</text>'
                 % (L - 5, Y(yv) + 4, yv))
        xv = x0 + (x1 - x0) * k / 4
        lab = 10 ** xv if logx else xv
        o.append('<text x="%.1f" y="%d" text-anchor="middle">%.3g</text>'
                 % (L + (xv - x0) / (x1 - x0) * (W - L - R), H - B + 16, lab))
    o.append('<text x="%d" y="%d" text-anchor="middle">%s</text>'
             % ((L + W - R) // 2, H - 10, xlabel))
    o.append('<text x="14" y="%d" transform="rotate(-90 14 %d)" '
             'text-anchor="middle">%s</text>' % (H // 2, H // 2, ylabel))
    for i, (label, s) in enumerate(series):
        col = COLORS[i % len(COLORS)]
        s = [p for p in s if p[1] is not None]
        if len(s) > 1:
            o.append('<polyline fill="none" stroke="%s" stroke-width="1.5" '
                     'points="%s"/>' % (col, " ".join("%.1f,%.1f" % (X(x), Y(y))
                                                     for x, y in s)))
        for x, y in s:
            o.append('<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>'
                     % (X(x), Y(y), col))
        o.append('<text x="%d" y="%d" fill="%s">%s</text>'
                 % (W - R + 8, T + 16 * (i + 1), col, label))
    o.append("</svg>")
    return "\n".join(o) + "\n"


def write(out, doc, plots, job):
    text = open(job, "rb").read()
    cells, stale = load(out, job_hash(text))
    # a cell file written before cells kept their inner rate ran the
    # job's, or an l cell's own (its name's)
    job_lr = yaml.safe_load(text)["spec"]["optimizer"]["lr"]
    for c in cells.values():
        c.setdefault("inner_lr", float(c["cell"].split("-")[1])
                     if c["cell"].startswith("l") else job_lr)
    os.makedirs(plots, exist_ok=True)
    for old in glob.glob(os.path.join(plots, "*.svg")):
        os.remove(old)   # a plot of cells no longer shown
    grid = sorted({(c["learners"], c["slow"]) for c in cells.values()
                   if c["cell"].startswith("m")})
    rows = []
    for M, slow in grid:
        cs = [c for c in cells.values() if c["cell"].startswith("m") and
              c["learners"] == M and c["slow"] == slow]
        b = baseline_of(cells, M)
        losses = [c["final_eval_loss"] for c in cs]
        ratios = [l / b["final_eval_loss"] for l in losses] if b else []
        sl = [c["slow_learner"] for c in cs if slow and c.get("slow_learner")]
        best = best_of(b)
        bratios = [l / best["final_eval_loss"] for l in losses] if best else []
        lost = [s["restarts"] for s in sl if "restarts" in s]
        a = alone_of(cells, M)
        rows.append("| %d | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            M, "one 2× slower" if slow else "–", len(cs), fmt_range(losses),
            "%.4f (lr %g)" % (b["final_eval_loss"], b["lr"]) if b else "–",
            fmt_range(ratios), fmt_range(bratios),
            "%.4f" % a["final_eval_loss"] if a else "–",
            fmt_range([kept(l, a, b) for l in losses], "%.2f") if a and b else "–",
            fmt_range([1 / dp_ratio(c, 16) for c in cs], "%.0f"),
            fmt_range([c["goodput"] for c in cs], "%.3f"),
            fmt_range([c["uptime"] for c in cs], "%.3f"),
            fmt_range([s["merged"] for s in sl], "%.3f") if sl else "–",
            fmt_range([s["late"] for s in sl], "%.3f") if sl else "–",
            fmt_range(lost, "%.3f") if lost else "–"))
    ms = sorted({M for M, _ in grid})
    srows = []
    for M in ms:
        b = baseline_of(cells, M)
        for r in (b or {}).get("sweep") or []:
            srows.append("| %d | %g | %.4f | %s | %s |" % (
                M, r["lr"], r["final_eval_loss"],
                "%.4f" % r["tune_loss"] if r.get("tune_loss") else "–",
                "chosen" if r.get("chosen") else ""))
    hrows = []
    for c in sorted((c for c in cells.values() if c["cell"].startswith("h")),
                    key=lambda c: (c["learners"], c["syncer"]["syncEvery"], c["cell"])):
        b = baseline_of(cells, c["learners"])
        sy = c["syncer"]
        hrows.append("| %d | %d | %s | %s | %.4f | %s | %.0f | %.0f |" % (
            c["learners"], sy["syncEvery"], sy["encoding"] +
            (" (%s's run)" % c["same_as"] if c.get("same_as") else ""),
            "%.1f" % outer_steps(c) if c.get("rounds") else "–",
            c["final_eval_loss"],
            "%.4f" % (c["final_eval_loss"] / b["final_eval_loss"]) if b else "–",
            1 / dp_ratio(c, 16), 1 / dp_ratio(c, 32)))
    orows = []
    for c in sorted((c for c in cells.values() if c["cell"].startswith("o")),
                    key=lambda c: (c["learners"], c["syncer"]["outerLr"] /
                                   (1 - c["syncer"]["outerMomentum"]))):
        b = baseline_of(cells, c["learners"])
        sy = c["syncer"]
        orows.append("| %d | %s | %g | %g | %.2f | %.4f | %s |" % (
            c["learners"], "%.1f" % outer_steps(c)
            if c.get("rounds") else "–", sy["outerLr"], sy["outerMomentum"],
            sy["outerLr"] / (1 - sy["outerMomentum"]), c["final_eval_loss"],
            "%.4f" % (c["final_eval_loss"] / b["final_eval_loss"]) if b else "–"))
    # the learners' inner rate: the l cells, beside the m<M>-fast-s1
    # cell they vary (the job's own rate)
    lcells = [c for c in cells.values() if c["cell"].startswith("l")]
    lms = {c["learners"] for c in lcells}
    lrows = []
    for c in sorted((c for c in cells.values() if c["cell"].startswith("l") or
                     (c["learners"] in lms and c["cell"] == "m%d-fast-s1" % c["learners"])),
                    key=lambda c: (c["learners"], c["inner_lr"])):
        b = baseline_of(cells, c["learners"])
        lrows.append("| %d | %g | %s | %.4f | %s | %.3f |" % (
            c["learners"], c["inner_lr"], "%.1f" % outer_steps(c)
            if c.get("rounds") else "–", c["final_eval_loss"],
            "%.4f" % (c["final_eval_loss"] / b["final_eval_loss"]) if b else "–",
            c["goodput"]))
    # plots
    for M in ms:
        series = []
        for c in sorted(cells.values(), key=lambda c: c["cell"]):
            if c["cell"].startswith("m%d-" % M):
                series.append((c["cell"], [(t, l) for t, l in c["eval_history"] if t > 0]))
        b = baseline_of(cells, M)
        if b:
            series.append(("data parallel", [(c["tokens"], b["final_eval_loss"])
                                             for c in cells.values()
                                             if c["cell"] == "m%d-fast-s1" % M]))
        s = svg("Loss against tokens, M = %d" % M, "tokens", "eval loss", series)
        if s:
            open(os.path.join(plots, "loss-m%d.svg" % M), "w").write(s)
    series = []
    for slow in (False, True):
        pts = []
        for M in ms:
            b = baseline_of(cells, M)
            ls = [c["final_eval_loss"] for c in cells.values()
                  if c["cell"].startswith("m") and c["learners"] == M and c["slow"] == slow]
            if b and ls:
                pts.append((M, statistics.mean(ls) / b["final_eval_loss"]))
        series.append(("one slow" if slow else "equal speed", pts))
    s = svg("Loss over the tuned data-parallel baseline's, against M",
            "learners M", "loss ratio", series)
    if s:
        open(os.path.join(plots, "ratio-m.svg"), "w").write(s)
    series = []
    hcells = [c for c in cells.values() if c["cell"].startswith("h")]
    for M, enc in sorted({(c["learners"], c["syncer"]["encoding"]) for c in hcells}):
        series.append(("M = %d, %s" % (M, enc), sorted(
            (c["bytes"]["exchanged"], c["final_eval_loss"]) for c in hcells
            if c["learners"] == M and c["syncer"]["encoding"] == enc)))
    hs = sorted({c["syncer"]["syncEvery"] for c in hcells})
    s = svg("Loss against bytes, H = %s (one slow)" % ", ".join(map(str, hs)),
            "bytes exchanged", "eval loss", series, logx=True)
    if s:
        open(os.path.join(plots, "loss-bytes.svg"), "w").write(s)
    # the limit the outer loop meets: the loss over the baseline's against
    # the outer steps a fragment took, for the cells alike but for H
    # (one slow learner, chaos as the job, int8), a line per M
    series = []
    for M in ms:
        b = baseline_of(cells, M)
        pts = sorted((outer_steps(c),
                      c["final_eval_loss"] / b["final_eval_loss"])
                     for c in cells.values()
                     if b and c["learners"] == M and c["slow"] and c.get("rounds")
                     and c["cell"][0] in "mh" and not c.get("same_as")
                     and c["syncer"].get("encoding", "f32") == "int8")
        if pts:
            series.append(("M = %d" % M, pts))
    s = svg("Loss over the tuned data-parallel baseline's, against outer steps",
            "outer steps per fragment", "loss ratio", series, logx=True)
    if s:
        open(os.path.join(plots, "ratio-steps.svg"), "w").write(s)
    total = sum(c["seconds"] for c in cells.values())
    grid_all = len(cells)
    with open(doc, "w") as f:
        f.write(PAGE.format(
            job=os.path.relpath(job, os.path.dirname(os.path.dirname(doc))),
            n=grid_all, hours=total / 3600,
            stale=" %d cell file%s of an earlier text of the job %s not shown."
            % (stale, "s" if stale > 1 else "", "are" if stale > 1 else "is")
            if stale else "",
            rows="\n".join(rows) or "| – |",
            srows="\n".join(srows) or "| – |", hrows="\n".join(hrows) or "| – |",
            orows="\n".join(orows) or "| – |", lrows="\n".join(lrows) or "| – |",
            plots="\n".join("![%s](quality/%s)" % (p[:-4], p)
                            for p in sorted(os.listdir(plots)))))


PAGE = """# Quality

Written by `sh bench/quality.sh` (bench/quality.py, bench/quality_report.py)
from the cells it has run, each kept in bench/quality/runs/<cell>.json;
do not edit by hand. The job: {job}. {n} cells, {hours:.1f} hours of runs
in all (each cell's own time, its baseline's sweep included, is in its
file, with the machine's cores and the date).{stale}

Loss is the final eval loss on the validation split; the data-parallel
baseline is `ddiloco train` at M times the batch on the same tokens, its
learning rate chosen on the √2 grid around the job's lr: lr × 1/√2,
1, √2, then, while the best is at an edge, up to three rates more past
it, so the best is one with a worse rate on each side. It is tuned on
the tuning split, which no reported loss uses (docs/run.md, The data-parallel
baseline). The held-out files are dealt between the tuning and the
validation split folder by folder, so both read the same mix
(docs/trainer.md, Tuning). Bytes are what the syncer received and sent,
against data parallel's ring all-reduce of the gradient for the same
tokens: each of M workers sends and receives 2(M−1)/M of N values a
step, in bf16 (2 bytes) or f32 (4); the columns give 1/x (so 100 means
a hundredth). Slow: learner M−1 steps at half speed
(spec.learners.slowdown); its merged and late shares are of the steps
it trained, and so is what it lost to kills: the steps a killed
learner had trained since its last answer, which chaos throws away
whatever the outer loop does. `alone` is one learner trained by itself
on 1/M of the tokens at the job's batch and rate (`ddiloco train`):
where the M learners would end if merging their work gained nothing;
`gain kept` is the share of data parallel's gain over it that the job
kept, (alone − loss) / (alone − baseline), 1 at the baseline's loss.
Mean (min–max) over seeds. `loss / best` is the loss over
the sweep's lowest validation loss instead: the learning rate chosen on
the reported split itself, the baseline at its most favourable; the
sweep's runs are below, with both splits' losses. Each of the sweep's
runs is kept in bench/quality/baseline/ as it ends (`ddiloco run`'s
cache, docs/run.md): a cell stopped in its sweep trains only the rates
it had not finished when it runs again, on any machine.

| M | slow | seeds | loss | baseline | loss / baseline | loss / best | alone | gain kept | 1/(bytes / bf16 DP) | goodput | uptime | slow merged | slow late | slow lost to kills |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
{rows}

The baseline's sweeps (final loss on the validation split, and on the
tuning split that chose the learning rate):

| M | lr | validation | tuning | |
|---|---|---|---|---|
{srows}

Bytes against loss by H (M = 8 unless a cell says `-m<M>`, the slow
learner, seed 1): f32 answers and whole f32 updates, or int8 answers
and int8 deltas (docs/protocol.md, Updates as deltas). The shorter H,
the more outer steps each fragment takes, at more bytes; ratio-steps.svg
draws the loss over the baseline's against those steps (the int8 cells
and the m cells with the slow learner, a line per M). The study's job
runs H = 64, the regime of the bytes goal (a hundredth of data
parallel's); a job that sets no syncEvery runs H = 4P, 16 here, the
best of these rows (docs/syncer.md, Defaults).

| M | H | encoding | outer steps per fragment | loss | loss / baseline | 1/(bytes / bf16 DP) | 1/(bytes / f32 DP) |
|---|---|---|---|---|---|---|---|
{hrows}

The outer step by horizon (docs/syncer.md, The outer step at long H):
M learners of equal speed, seed 1, chaos off, H as the job; the fewer
learners, the more outer steps each fragment takes on the same tokens
(outer steps = rounds / fragments). η/(1−μ) is the outer step's
effective size.

| M | outer steps per fragment | η | μ | η/(1−μ) | loss | loss / baseline |
|---|---|---|---|---|---|---|
{orows}

The learners' inner learning rate (spec.optimizer.lr): M learners of
equal speed, seed 1, chaos as the job says, the job's other fields
unchanged; the row at the job's own rate is the m<M>-fast-s1 cell. The
baseline is the same tuned data-parallel run as above.

| M | inner lr | outer steps per fragment | loss | loss / baseline | goodput |
|---|---|---|---|---|---|
{lrows}

{plots}
"""
