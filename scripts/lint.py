#!/usr/bin/python3
"""Checks the shape of the tree (make lint; docs/design.md, section 9).

    /usr/bin/python3 scripts/lint.py [ROOT]   lint ROOT (default: the tree
                                              this script is in)
    /usr/bin/python3 scripts/lint.py --write-crds [ROOT]
                                              write the CRD's copies from
                                              its source (make crds)

Each problem is one line, "path:line: rule: what is wrong", and any
problem makes the exit status 1. The rules:

  long-function  a function of production C (every .c outside tests/,
                 bench/ and build/) has at most 80 body lines, the lines
                 between its column-0 '{' and '}', unless a comment says
                 why: "Long because <reason>" (or "Long: <reason>", or
                 "Long on purpose: <reason>") in the comment right above
                 the function (no blank line between) or in a comment
                 that opens on the body's first line
  long-file      a .c or .h file has at most 1500 lines
  include-cycle  the #include "..." edges between the tree's files (each
                 resolved against the including file's folder, then the
                 root, as -I. does) have no cycle; nor have the edges
                 between modules (a top folder, the top-level files one
                 more), but for those from tests/ and bench/
  crd-copy       the CRD's copies (CRD_COPIES) equal its source byte for
                 byte: make crds writes them
  encoding-enum  common/encoding.h's enum payload_enc, the proto's enum
                 Encoding and the CRD's encoding enums name the same
                 encodings (the numbers are tied by _Static_assert in
                 common/wire.c)
  doc-path       a repo path cited in a .md file or in a comment of a
                 .c, .h or .proto file exists

Python 3 standard library only. Files are those git lists (tracked, or
new and not ignored) when ROOT is a git work tree, else every file under
ROOT; build/ and hidden folders are never read.
"""
import fnmatch
import os
import re
import subprocess
import sys

MAX_BODY = 80
MAX_FILE = 1500
# "Long because <reason>", the tree's form; "Long: <reason>" and "Long on
# purpose: <reason>" are the same marker
LONG_MARK = re.compile(r"\bLong(?: because| on purpose:|:)\s*\S")
CRD_SOURCE = "crds/decoupledtrainingjobs.yaml"
CRD_COPIES = ["deploy/01-crd.yaml",
              "charts/ddiloco/crds/decoupledtrainingjobs.yaml"]
ENCODING_H = "common/encoding.h"
PROTO = "proto/ddiloco/v1/syncer.proto"
# the CRD fields whose enum lists the encodings
CRD_ENCODING_FIELDS = ["encoding", "updateEncoding"]
# a cited path starts with one of these folders, or is one of the
# top-level files named below
TOP_DIRS = ["abi", "bench", "charts", "common", "crds", "deploy", "docs",
            "examples", "include", "operator", "proto", "python", "runner",
            "scripts", "sidecar", "sim", "syncer", "tests", "trainer"]
TOP_FILES = re.compile(r"^(?:[A-Z][A-Z0-9_-]*\.md|Makefile|Dockerfile(?:\.\w+)?)$")
NOT_PRODUCTION = ("tests/", "bench/")


class Lint:
    def __init__(self, root):
        self.root = root
        self.problems = []
        self.files = list_files(root)

    def report(self, path, line, rule, msg):
        self.problems.append("%s:%d: %s: %s" % (path, line, rule, msg))

    def read(self, rel):
        with open(os.path.join(self.root, rel), encoding="utf-8",
                  errors="replace") as f:
            return f.read()

    def exists(self, rel):
        return os.path.exists(os.path.join(self.root, rel))


def list_files(root):
    try:
        out = subprocess.run(
            ["git", "-C", root, "ls-files", "--cached", "--others",
             "--exclude-standard", "-z"],
            check=True, capture_output=True).stdout.decode()
        top = subprocess.run(
            ["git", "-C", root, "rev-parse", "--show-toplevel"],
            check=True, capture_output=True).stdout.decode().strip()
        if os.path.realpath(top) != os.path.realpath(root):
            raise OSError("not the top of a work tree")
        files = [f for f in out.split("\0") if f]
        files = [f for f in files if os.path.isfile(os.path.join(root, f))]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, names in os.walk(root):
            rel = os.path.relpath(d, root)
            dirs[:] = [x for x in dirs if not x.startswith(".")
                       and not (rel == "." and x == "build")]
            for n in names:
                files.append(os.path.normpath(os.path.join(rel, n)))
    return sorted(f for f in files
                  if not f.startswith("build/") and "/." not in "/" + f)


# ---- C text ------------------------------------------------------------

def comments(text):
    """Yields (line, comment text) for every /* */ and // comment,
    skipping string and character literals."""
    i, n, line = 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            line += text.count("\n", i, j)
            i = j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            yield line, text[i:j]
            line += text.count("\n", i, j)
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            yield line, text[i:j]
            i = j
        else:
            i += 1


def functions(lines):
    """Yields (name, open line index, close line index, first signature
    line index) for each column-0 '{' ... '}' block that follows a
    signature with a '(' (a function definition)."""
    i = 0
    while i < len(lines):
        if not lines[i].startswith("{"):
            i += 1
            continue
        start = i
        while start > 0:
            prev = lines[start - 1].rstrip()
            if (not prev.strip() or prev.endswith((";", "}", "*/"))
                    or prev.startswith("#") or prev.lstrip().startswith("//")):
                break
            start -= 1
        sig = " ".join(lines[start:i])
        close = i + 1
        while close < len(lines) and not lines[close].startswith("}"):
            close += 1
        m = re.search(r"(\w+)\s*\(", sig)
        if m and not re.search(r"=\s*$", sig):
            yield m.group(1), i, close, start
        i = close + 1


def comment_above(lines, start):
    """The comment that ends on the line right above lines[start], or ''."""
    j = start - 1
    if j < 0:
        return ""
    if lines[j].lstrip().startswith("//"):
        k = j
        while k > 0 and lines[k - 1].lstrip().startswith("//"):
            k -= 1
        return "\n".join(lines[k:j + 1])
    if lines[j].rstrip().endswith("*/"):
        k = j
        while k > 0 and "/*" not in lines[k]:
            k -= 1
        return "\n".join(lines[k:j + 1])
    return ""


def comment_first(lines, open_, close):
    """The comment that starts on the body's first line, or ''."""
    j = open_ + 1
    if j >= close:
        return ""
    s = lines[j].lstrip()
    if s.startswith("//"):
        return s
    if s.startswith("/*"):
        k = j
        while k < close and "*/" not in lines[k]:
            k += 1
        return "\n".join(lines[j:k + 1])
    return ""


# ---- the rules ---------------------------------------------------------

def long_functions(lint):
    for f in lint.files:
        if not f.endswith(".c") or f.startswith(NOT_PRODUCTION):
            continue
        lines = lint.read(f).split("\n")
        for name, open_, close, start in functions(lines):
            body = close - open_ - 1
            if body <= MAX_BODY:
                continue
            why = comment_above(lines, start) + comment_first(lines, open_, close)
            if LONG_MARK.search(why):
                continue
            lint.report(f, start + 1, "long-function",
                        "%s has %d body lines (at most %d without a "
                        "'Long because <reason>' comment)" % (name, body, MAX_BODY))


def long_files(lint):
    for f in lint.files:
        if not f.endswith((".c", ".h")):
            continue
        n = lint.read(f).count("\n")
        if n > MAX_FILE:
            lint.report(f, MAX_FILE + 1, "long-file",
                        "%d lines (at most %d)" % (n, MAX_FILE))


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def include_cycles(lint):
    known = set(f for f in lint.files if f.endswith((".c", ".h")))
    edges = {}
    for f in sorted(known):
        text = lint.read(f)
        out = []
        for m in INCLUDE.finditer(text):
            name = m.group(1)
            line = text.count("\n", 0, m.start()) + 1
            for cand in (os.path.join(os.path.dirname(f), name), name):
                cand = os.path.normpath(cand)
                if cand in known:
                    out.append((cand, line))
                    break
        edges[f] = out
    for node, line, cyc in cycles(edges):
        lint.report(node, line, "include-cycle", " -> ".join(cyc))
    # the same between modules (a top folder; the top-level files are
    # one), but for tests/ and bench/, which include everything: one
    # edge stands for all, the first include that makes it
    medges, why = {}, {}
    for f in sorted(edges):
        a = module(f)
        for g, line in edges[f]:
            b = module(g)
            if a == b or a in NOT_PRODUCTION_MODULES:
                continue
            if (a, b) not in why:
                why[(a, b)] = (f, line, g)
                medges.setdefault(a, []).append((b, line))
    for node, _, cyc in cycles(medges):
        f, line, g = why[(cyc[0], cyc[1])]
        lint.report(f, line, "include-cycle",
                    "module cycle %s (%s includes %s)"
                    % (" -> ".join(cyc), f, g))


NOT_PRODUCTION_MODULES = ("tests", "bench")


def module(f):
    return f.split("/", 1)[0] if "/" in f else "(top)"


def cycles(edges):
    """Yields (node, line, cycle) for each cycle a depth-first search
    closes (a node on the stack reached again), each set of nodes once."""
    state, stack, seen, found = {}, [], set(), []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt, line in edges.get(node, []):
            if state.get(nxt) == 1:
                cyc = stack[stack.index(nxt):] + [nxt]
                key = frozenset(cyc)
                if key not in seen:
                    seen.add(key)
                    found.append((node, line, cyc))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    sys.setrecursionlimit(10000)
    for f in sorted(edges):
        if f not in state:
            visit(f)
    return found


# The CRD's schema hash (docs/operator.md, The CRD): FNV-1a 64 of the
# source without its hash line, which `make crds` writes; the operator
# compares it with the served CRD's.
HASH_LINE = re.compile(r'^    ddiloco\.io/schema-hash: "([0-9a-f]*)"\n', re.M)


def crd_hash(text):
    h = 0xcbf29ce484222325
    for b in HASH_LINE.sub("", text).encode():
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return "%016x" % h


def crd_copies(lint):
    if not lint.exists(CRD_SOURCE):
        lint.report(CRD_SOURCE, 1, "crd-copy", "the CRD's source is missing")
        return
    text = lint.read(CRD_SOURCE)
    m = HASH_LINE.search(text)
    if not m or m.group(1) != crd_hash(text):
        lint.report(CRD_SOURCE, text[:m.start()].count("\n") + 1 if m else 1,
                    "crd-copy", "its ddiloco.io/schema-hash is %s: run make crds"
                    % ("stale" if m else "missing"))
    src = text.split("\n")
    for c in CRD_COPIES:
        if not lint.exists(c):
            lint.report(c, 1, "crd-copy",
                        "missing: a copy of %s (make crds)" % CRD_SOURCE)
            continue
        got = lint.read(c).split("\n")
        if got == src:
            continue
        line = next((i for i, (a, b) in enumerate(zip(src, got)) if a != b),
                    min(len(src), len(got)))
        lint.report(c, line + 1, "crd-copy",
                    "differs from %s: edit the source and run make crds"
                    % CRD_SOURCE)


def encoding_enums(lint):
    for f in (ENCODING_H, PROTO, CRD_SOURCE):
        if not lint.exists(f):
            lint.report(f, 1, "encoding-enum", "missing")
            return
    h = lint.read(ENCODING_H)
    m = re.search(r"enum\s+payload_enc\s*\{([^}]*)\}", h)
    if not m:
        lint.report(ENCODING_H, 1, "encoding-enum", "no enum payload_enc")
        return
    hline = h.count("\n", 0, m.start()) + 1
    ours = {k.lower(): int(v) for k, v in
            re.findall(r"ENC_(\w+)\s*=\s*(\d+)", m.group(1))}
    p = lint.read(PROTO)
    m = re.search(r"enum\s+Encoding\s*\{([^}]*)\}", p)
    if not m:
        lint.report(PROTO, 1, "encoding-enum", "no enum Encoding")
        return
    pline = p.count("\n", 0, m.start()) + 1
    proto = {k.lower(): int(v) for k, v in
             re.findall(r"ENCODING_(\w+)\s*=\s*(\d+)", m.group(1))}
    if ours != proto:
        lint.report(ENCODING_H, hline, "encoding-enum",
                    "enum payload_enc %s is not %s:%d's enum Encoding %s"
                    % (fmt(ours), PROTO, pline, fmt(proto)))
    crd = lint.read(CRD_SOURCE).split("\n")
    for field in CRD_ENCODING_FIELDS:
        pat = re.compile(r"^\s*%s:\s*\{.*\benum:\s*\[([^\]]*)\]" % field)
        hits = [(i, pat.match(s)) for i, s in enumerate(crd) if pat.match(s)]
        if not hits:
            lint.report(CRD_SOURCE, 1, "encoding-enum",
                        "no enum for the field %s" % field)
        for i, hm in hits:
            names = set(x.strip() for x in hm.group(1).split(",") if x.strip())
            if names != set(ours):
                lint.report(CRD_SOURCE, i + 1, "encoding-enum",
                            "%s's enum [%s] is not %s's encodings [%s]"
                            % (field, ", ".join(sorted(names)), ENCODING_H,
                               ", ".join(sorted(ours))))


def fmt(d):
    return "{%s}" % ", ".join("%s=%d" % kv for kv in sorted(d.items(),
                                                           key=lambda x: x[1]))


# a token of path characters; one with a placeholder (<module>, {a,b},
# $VAR, %d, NAME) or an ellipsis is not a path and is skipped
TOKEN = re.compile(r"[\w.<>{}$%*/+-]+")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def cited(text):
    """Yields (offset, path) for each token that looks like a repo path:
    a known top folder first, then a file with an extension or a folder
    ending in '/'; or a top-level file such as README.md."""
    for m in TOKEN.finditer(text):
        tok = m.group(0)
        before = text[m.start() - 1] if m.start() > 0 else " "
        if before in "/\\:@~" or "//" in tok:
            continue   # an absolute path, a URL, a path under another one
        tok = tok.rstrip(".,;:+-")
        if re.search(r"[<>{}$%]|\.\.\.|\bNAME\b|\bXXX", tok):
            continue
        if "/" not in tok:
            if TOP_FILES.match(tok):
                yield m.start(), tok
            continue
        top = tok.split("/", 1)[0]
        if top not in TOP_DIRS:
            continue
        last = tok.rsplit("/", 1)[1]
        if last == "" or re.search(r"\.[A-Za-z]\w*$", last):
            yield m.start(), tok


def doc_paths(lint):
    fileset = set(lint.files)
    dirs = set()
    for f in lint.files:
        parts = f.split("/")
        for i in range(1, len(parts)):
            dirs.add("/".join(parts[:i]))

    def present(p):
        p = p.rstrip("/")
        if "*" in p:
            return any(fnmatch.fnmatch(f, p) for f in fileset)
        return p in fileset or p in dirs or lint.exists(p)

    for f in lint.files:
        if f.endswith(".md"):
            text = lint.read(f)
            spans = [(0, text)]
        elif f.endswith((".c", ".h", ".proto")):
            text = lint.read(f)
            spans = [(off, c) for off, c in comment_offsets(text)]
        else:
            continue
        for base, s in spans:
            for off, p in cited(s):
                if not present(p):
                    line = text.count("\n", 0, base + off) + 1
                    lint.report(f, line, "doc-path",
                                "'%s' does not exist" % p)
            if not f.endswith(".md"):
                continue
            for m in LINK.finditer(s):
                target = m.group(1).split("#", 1)[0]
                if not target or re.match(r"^[a-z][a-z+.-]*:", target):
                    continue
                rel = os.path.normpath(os.path.join(os.path.dirname(f),
                                                    target))
                if rel.startswith(("..", "build/")) or present(rel):
                    continue
                line = text.count("\n", 0, base + m.start()) + 1
                lint.report(f, line, "doc-path",
                            "link '%s' does not exist" % target)


def comment_offsets(text):
    """(offset, text) of each comment, from comments()' line numbers."""
    starts = [0]
    for i, c in enumerate(text):
        if c == "\n":
            starts.append(i + 1)
    for line, c in comments(text):
        off = text.find(c, starts[line - 1])
        yield (off if off >= 0 else starts[line - 1]), c


RULES = [long_functions, long_files, include_cycles, crd_copies,
         encoding_enums, doc_paths]


def write_crds(root):
    path = os.path.join(root, CRD_SOURCE)
    with open(path) as f:
        text = f.read()
    if not HASH_LINE.search(text):
        sys.stderr.write("crds: %s has no ddiloco.io/schema-hash line\n" % CRD_SOURCE)
        sys.exit(1)
    new = HASH_LINE.sub('    ddiloco.io/schema-hash: "%s"\n' % crd_hash(text), text)
    if new != text:
        with open(path, "w") as f:
            f.write(new)
        print("crds: the schema hash of %s is %s" % (CRD_SOURCE, crd_hash(text)))
    src = new.encode()
    for c in CRD_COPIES:
        path = os.path.join(root, c)
        try:
            with open(path, "rb") as f:
                if f.read() == src:
                    continue
        except FileNotFoundError:
            pass
        with open(path, "wb") as f:
            f.write(src)
        print("crds: wrote %s from %s" % (c, CRD_SOURCE))


def write_crd_c(root, out):
    """The CRD's text as C (operator/crd.h): the operator applies it."""
    with open(os.path.join(root, CRD_SOURCE)) as f:
        text = f.read()
    lines = ["/* written by scripts/lint.py --crd-c from %s */" % CRD_SOURCE,
             '#include "operator/crd.h"',
             "const char crd_text[] ="]
    for line in text.splitlines(True):
        lines.append('\t"%s"' % line.replace("\\", "\\\\").replace('"', '\\"')
                     .replace("\n", "\\n"))
    lines.append(";")
    lines.append('const char crd_schema_hash[] = "%s";' % crd_hash(text))
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, out)


def main(argv):
    args = argv[1:]
    if len(args) == 2 and args[0] == "--crd-c":
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        write_crd_c(here, args[1])
        return 0
    write = "--write-crds" in args
    args = [a for a in args if a != "--write-crds"]
    if len(args) > 1 or any(a.startswith("-") for a in args):
        sys.stderr.write("usage: lint.py [--write-crds] [ROOT]\n")
        return 2
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    root = os.path.abspath(args[0]) if args else here
    if write:
        write_crds(root)
        return 0
    lint = Lint(root)
    for rule in RULES:
        rule(lint)
    for p in lint.problems:
        print(p)
    if lint.problems:
        sys.stderr.write("lint: %d problems\n" % len(lint.problems))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
