#!/usr/bin/env python3
"""check-layers.py: the layer rules of docs/ARCHITECTURE.md, checked.

Run from the repository root with no arguments (python3, standard library only). Prints one
line per violation, `path:line: rule: message`, and exits 1 when there is any, else 0.

Layers, bottom-up (a file may use its own layer and the ones below it, never one above):
    core < dtype < quant < formats < view < analysis < job < cli
src/<layer>/ holds each library layer; cli/ (with cli/serve/) is the cli layer.

Rules:
  include-up    a src/ file includes a header of a higher layer: a src/<layer>/ header by any
                path, a cli/ header, or a public tensormorph/X.h whose layer (PUBLIC_LAYER
                below) is higher; a public header includes a higher public header.
  cli-src       a cli/ file includes anything under src/ (the CLI is on the public API).
  cli-internal  a cli/ file uses an internal (tm__) function or global of the library.
  fuzz-src      a fuzz/ file includes anything under src/ (fuzzers use the public API).
  public-layer  a public header is missing from PUBLIC_LAYER (every public header has a layer).
  call-up       a src/ or cli/ .c file uses (calls, or takes the address of) a function or global
                defined in a file of a higher layer.
  cycle         .c files that use each other's functions or globals, directly or round a loop
                (a file cycle) that is not in KNOWN_CYCLES: the layers do not order them. Break it with a table of function
                pointers filled by the file that owns the entries, or by moving the shared helper
                down (docs/ARCHITECTURE.md "Breaking a cycle").

tensormorph.h is the umbrella: its own body is the base vocabulary every layer shares (status
and errors, dtypes, granularity, tm_tensor/tm_file, the view and quant entry points it
declares) and it may be included from anywhere; what a file may *use* from it is checked by
call-up, since it also pulls in every sub-header.
"""
import bisect
import os
import re
import sys

LAYERS = ["core", "dtype", "quant", "formats", "view", "analysis", "job", "cli"]
RANK = {name: i for i, name in enumerate(LAYERS)}

# Each public sub-header belongs to the layer that implements what it declares.
PUBLIC_LAYER = {
    "hash.h": "core", "host.h": "core",
    "quant.h": "quant", "ggml.h": "quant", "ggml_quant.h": "quant",
    "safetensors.h": "formats", "gguf_write.h": "formats", "graph.h": "formats", "imatrix.h": "formats",
    "onnx_opset.h": "formats",
    "qview.h": "view",
    "errstats.h": "analysis", "qdiff.h": "analysis", "diff.h": "analysis", "names.h": "analysis",
    "calib.h": "analysis", "explore.h": "analysis", "compat.h": "analysis",
    "qjob.h": "job", "gguf_job.h": "job", "convert.h": "job", "onnx_quant.h": "job", "demo.h": "job", "merge.h": "job",
    "evidence.h": "job", "evidence_llm.h": "job", "sensitivity.h": "job", "gate.h": "job", "job.h": "job",
    # test-only entry points of several layers, declared beside the layer they come from; the
    # files defining them include it (any layer may); nothing in the library calls them
    "experimental.h": "core",
}

# File cycles that exist and are being removed elsewhere; any other cycle (or one of these
# growing) fails. (quantize.c <-> quant_avx2.c/quant_avx512.c went with the one kernel table,
# src/quant/kernels.c, issue 11 item 6: the reference kernels live in kernels_ref.c.)
KNOWN_CYCLES = []

INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*(?:"([^"]+)"|<([^>]+)>)', re.M)
COND_RE = re.compile(r'^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|else|endif)\b(.*)$')
TOKEN_RE = re.compile(r'[A-Za-z_]\w*|[{}();=\[,]')
NOT_NAMES = {"__attribute__", "__declspec", "_Alignas", "alignas", "sizeof", "_Static_assert",
             "static_assert", "if", "while", "for", "switch", "return"}


def rel(path):
    return os.path.relpath(path, ".").replace(os.sep, "/")


def layer_of(path):
    """The layer of a repository-relative path, or None (tests, tools, generated code)."""
    parts = path.split("/")
    if parts[0] == "src" and len(parts) > 2 and parts[1] in RANK:
        return parts[1]
    if parts[0] == "cli":
        return "cli"
    if parts[0] == "include" and len(parts) == 3 and parts[1] == "tensormorph":
        return PUBLIC_LAYER.get(parts[2])
    return None


def source_files():
    out = []
    for top in ("src", "cli", "include", "fuzz"):
        for d, _, names in os.walk(top):
            for n in sorted(names):
                if n.endswith((".c", ".h")):
                    out.append(rel(os.path.join(d, n)))
    return sorted(out)


def strip_c(text):
    """Comments, string and char literals and preprocessor lines blanked, newlines kept."""
    out, i, n = [], 0, len(text)
    bol = True  # at the beginning of a line (only blanks so far)
    while i < n:
        c = text[i]
        if c == "\n":
            out.append(c); i += 1; bol = True; continue
        if bol and c == "#":  # a directive, with its continuation lines
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append("\n"); i += 2; continue
                i += 1
            continue
        if c in " \t":
            out.append(c); i += 1; continue
        bol = False
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j; continue
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * max(0, min(j, n) - i - 1) + c); i = j + 1; continue
        out.append(c); i += 1
    return "".join(out)


def scan(text):
    """(definitions, uses): non-static functions and globals defined at file scope, as
    {name: line}, and every other identifier, as [(name, line)]."""
    defs, uses = {}, []
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    toks = [(m.group(0), bisect.bisect_right(starts, m.start())) for m in TOKEN_RE.finditer(text)]
    depth = paren = 0
    in_func = False
    decl = []  # tokens of the file-scope declaration being read
    for t, line in toks:
        if depth > 0:
            if t == "{":
                depth += 1
            elif t == "}":
                depth -= 1
                if depth == 0 and in_func:
                    in_func, decl = False, []
            elif is_ident(t):
                uses.append((t, line))
            continue
        if t == "{":
            words = [w for w, _ in decl]
            if paren == 0 and decl and decl[-1][0] == ")" and "=" not in words:
                name = first_called(decl)
                if name and "static" not in words and "typedef" not in words:
                    defs[name] = decl_line(decl, name)
                uses.extend(u for u in decl if u[0] != name and is_ident(u[0]))
                in_func, decl = True, []
            depth += 1  # a function body, or a struct/enum body or initializer at file scope
            continue
        if t == "(":
            paren += 1
        elif t == ")":
            paren = max(0, paren - 1)
        if paren == 0 and t == ";":
            global_def(decl, defs, uses)
            decl = []
            continue
        decl.append((t, line))
    return defs, uses


def is_ident(t):
    return t[0].isalpha() or t[0] == "_"


def first_called(decl):
    """The declarator name of a function definition: the identifier before the first
    parenthesis that is not an attribute or an all-caps macro."""
    for j in range(1, len(decl)):
        if decl[j][0] == "(":
            w = decl[j - 1][0]
            if is_ident(w) and w not in NOT_NAMES and not w.isupper():
                return w
    return None


def decl_line(decl, name):
    for w, line in decl:
        if w == name:
            return line
    return decl[0][1]


def global_def(decl, defs, uses):
    words = [w for w, _ in decl]
    if not words:
        return
    for w, line in decl:
        if is_ident(w):
            uses.append((w, line))
    if {"static", "extern", "typedef"} & set(words) or "=" not in words:
        return
    cut = words.index("=")
    if "[" in words[:cut]:
        cut = words.index("[")
    if "(" in words[:cut]:  # function pointer or a prototype-like form: skip
        return
    if cut > 0 and is_ident(words[cut - 1]):
        name = words[cut - 1]
        defs[name] = decl[cut - 1][1]
        uses[:] = [u for u in uses if not (u[0] == name and u[1] == decl[cut - 1][1])]


def dead_lines(text):
    """Line numbers (1-based) inside a branch the preprocessor always drops: the body of
    `#if 0` up to its #elif/#else/#endif, and the #elif/#else part of `#if 1`. Conditionals
    nested in a dead branch are dead too; any other condition counts as live."""
    dead = set()
    # per open #if: [dead now, branches after this one are dead]
    stack = []
    for no, line in enumerate(text.split("\n"), 1):
        m = COND_RE.match(line)
        if not m:
            if any(d for d, _ in stack):
                dead.add(no)
            continue
        kind = m.group(1)
        cond = re.sub(r"/\*.*?\*/|//.*", "", m.group(2)).strip()
        if kind in ("if", "ifdef", "ifndef"):
            if any(d for d, _ in stack):
                dead.add(no)
            stack.append([kind == "if" and cond == "0", kind == "if" and cond == "1"])
        elif stack:
            if any(d for d, _ in stack[:-1]):
                dead.add(no)
            top = stack[-1]
            if kind == "endif":
                stack.pop()
            elif top[1]:  # after a taken #if 1 every other branch is dead
                top[0] = True
            elif kind == "else":
                top[0] = False
            else:  # #elif after #if 0 or an unknown condition: unknown, so live
                top[0] = False
    return dead


def resolve_include(src, inc, angle=False):
    here = os.path.dirname(src)
    for base in ((() if angle else (here,)) + ("src", "include")):
        p = os.path.normpath(os.path.join(base, inc)).replace(os.sep, "/")
        if os.path.isfile(p):
            return p
    return None


def check_includes(files, texts, problems):
    for f in files:
        if f.startswith("include/tensormorph/") and f.count("/") == 2:
            if os.path.basename(f) not in PUBLIC_LAYER:
                problems.append((f, 1, "public-layer",
                                 "public header has no layer: add it to PUBLIC_LAYER in "
                                 "scripts/check-layers.py and to docs/ARCHITECTURE.md"))
        text = texts[f]
        me = layer_of(f)
        dead = dead_lines(text)
        for m in INCLUDE_RE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            if line in dead:
                continue
            inc = m.group(1) or m.group(2)
            target = resolve_include(f, inc, angle=m.group(2) is not None)
            if target is None:
                continue
            if f.startswith("cli/") and target.startswith("src/"):
                problems.append((f, line, "cli-src",
                                 '"%s" is %s: the CLI uses the public headers (include/) only'
                                 % (inc, target)))
                continue
            if f.startswith("fuzz/") and target.startswith("src/"):
                problems.append((f, line, "fuzz-src",
                                 '"%s" is %s: fuzzers use the public headers (include/) only'
                                 % (inc, target)))
                continue
            them = layer_of(target)
            if me is None or them is None:
                continue
            if RANK[them] > RANK[me]:
                problems.append((f, line, "include-up",
                                 '"%s" (%s, layer %s) is above this file\'s layer %s'
                                 % (inc, target, them, me)))


def check_calls(files, texts, problems):
    cfiles = [f for f in files if f.endswith(".c") and layer_of(f) is not None]
    defs = {}  # name -> [(file, line)]
    uses = {}
    for f in cfiles:
        d, u = scan(strip_c(texts[f]))
        uses[f] = u
        for name, line in d.items():
            defs.setdefault(name, []).append((f, line))
    edges = {f: {} for f in cfiles}  # f -> {g: (line, name)}: f uses something g defines
    for f in cfiles:
        for name, line in uses[f]:
            for g, _ in defs.get(name, ()):
                if g != f and g not in edges[f]:
                    edges[f][g] = (line, name)
    for f in cfiles:
        for g, (line, name) in sorted(edges[f].items()):
            lf, lg = layer_of(f), layer_of(g)
            if lf == "cli" and lg != "cli" and name.startswith("tm__"):
                problems.append((f, line, "cli-internal",
                                 "uses %s, an internal (tm__) symbol of %s: the CLI uses the "
                                 "public API only" % (name, g)))
            if RANK[lg] > RANK[lf]:
                problems.append((f, line, "call-up", "uses %s, defined in %s (layer %s above %s)"
                                 % (name, g, lg, lf)))
    for comp in sccs(cfiles, edges):
        if len(comp) < 2 or set(comp) in KNOWN_CYCLES:
            continue
        loop = find_loop(comp, edges)
        steps = []
        for a, b in zip(loop, loop[1:] + loop[:1]):
            line, name = edges[a][b]
            steps.append("%s:%d uses %s of %s" % (a, line, name, b))
        a = loop[0]
        problems.append((a, edges[a][loop[1 % len(loop)]][0], "cycle",
                         "file cycle %s: %s" % (" -> ".join(loop + loop[:1]), "; ".join(steps))))


def sccs(nodes, edges):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]; counter[0] += 1
        stack.append(v); on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def find_loop(comp, edges):
    """A shortest loop through the first file of a strongly connected set."""
    inside = set(comp)
    start = comp[0]
    prev, queue = {start: None}, [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(edges[v]):
            if w not in inside:
                continue
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return list(reversed(path))
            if w not in prev:
                prev[w] = v; queue.append(w)
    return comp


def main():
    if len(sys.argv) > 1:
        print(__doc__.strip().splitlines()[2])
        return 2
    if not (os.path.isdir("src") and os.path.isdir("include")):
        print("check-layers: run from the repository root (src/ and include/ not found)",
              file=sys.stderr)
        return 2
    files = source_files()
    texts = {}
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as fh:
            texts[f] = fh.read()
    problems = []
    check_includes(files, texts, problems)
    check_calls(files, texts, problems)
    for f, line, rule, msg in sorted(problems):
        print("%s:%d: %s: %s" % (f, line, rule, msg))
    if problems:
        print("check-layers: %d violation(s) of the layer rules (docs/ARCHITECTURE.md)"
              % len(problems), file=sys.stderr)
        return 1
    print("check-layers: ok (%d files; layers %s)" % (len(files), " < ".join(LAYERS)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
