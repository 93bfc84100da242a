#!/usr/bin/env python3
"""Fails when a crate's modules import each other in a cycle.

Reads every crate of the workspace (`<crate>/src/**/*.rs`, test code left
out), builds the graph of `use`/path references between sibling modules
(`crate::a::x` used in `crate::b` is an edge b -> a under the crate root;
`super::c` used in `a::b` is an edge b -> c under `a`), and reports every
strongly connected component of more than one module (Tarjan). Exit status 1
with the cycles and the references that close them, else 0.

Usage: scripts/check-module-cycles.py [CRATE_DIR ...]   (default: every
workspace member that has a src/ folder)
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip_code(text):
    """Comments, string and char literals, and a trailing
    `#[cfg(test)] mod tests { ... }` removed, so only code references
    remain."""
    cut = re.search(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+tests\s*\{", text)
    if cut:
        text = text[: cut.start()]
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not re.match(r"[A-Za-z0-9_]", text[i - 1])):
            hashes = re.match(r"r(#*)\"", text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            i = n if end < 0 else end + 1 + len(hashes)
            out.append('""')
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            out.append('""')
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]):
            i = text.find("'", i + 2) + 1
            out.append("' '")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand_use(tree):
    """`a::{b, c::{d, e}}` -> [a::b, a::c::d, a::c::e]."""
    tree = re.sub(r"\s+", "", tree)
    brace = tree.find("{")
    if brace < 0:
        return [re.sub(r"\bas\w+$", "", tree)]
    prefix, inner = tree[:brace], tree[brace + 1: tree.rfind("}")]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    paths = []
    for p in parts:
        if p:
            paths.extend(prefix + q for q in expand_use(p))
    return paths


def module_files(src):
    """(module path as a list, file) for every module file under src."""
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            full = os.path.join(dirpath, f)
            rel = os.path.relpath(full, src)[:-3].split(os.sep)
            if rel[0] == "bin" or rel[-1] == "tests" or "tests" in rel[:-1]:
                continue
            if rel[-1] in ("lib", "main") and len(rel) == 1:
                rel = []
            elif rel[-1] == "mod":
                rel = rel[:-1]
            yield rel, full


def references(mod, code):
    """Absolute module paths (lists) that `mod`'s code refers to."""
    paths = []
    for m in re.finditer(r"\buse\s+([^;]+);", code):
        paths.extend(expand_use(m.group(1)))
    paths.extend(m.group(0) for m in re.finditer(rf"\b(?:crate|super|self)(?:::{IDENT})+", code))
    out = []
    for p in paths:
        segs = [s for s in p.split("::") if s]
        if not segs:
            continue
        if segs[0] == "crate":
            out.append(segs[1:])
        elif segs[0] in ("super", "self"):
            base = list(mod)
            while segs and segs[0] in ("super", "self"):
                if segs[0] == "super":
                    base = base[:-1]
                segs = segs[1:]
            out.append(base + segs)
    return out


def check(crate_dir):
    src = os.path.join(crate_dir, "src")
    mods = {tuple(m): f for m, f in module_files(src)}
    edges = {}  # parent -> {child: {child2: [where]}}
    for mod, f in mods.items():
        with open(f, encoding="utf-8") as fh:
            code = strip_code(fh.read())
        for target in references(list(mod), code):
            # The longest module prefix of target that exists.
            t = list(target)
            while t and tuple(t) not in mods:
                t.pop()
            common = 0
            while common < min(len(mod), len(t)) and mod[common] == t[common]:
                common += 1
            if common >= len(mod) or common >= len(t):
                continue  # an ancestor or a descendant: not a sibling edge
            parent = tuple(mod[:common])
            a, b = mod[common], t[common]
            edges.setdefault(parent, {}).setdefault(a, {}).setdefault(b, []).append(
                "::".join(mod) + " -> " + "::".join(target)
            )
    cycles = []
    for parent, graph in sorted(edges.items()):
        for scc in tarjan(graph):
            if len(scc) > 1:
                closing = [
                    w
                    for a in sorted(scc)
                    for b in sorted(scc)
                    for w in graph.get(a, {}).get(b, [])[:1]
                ]
                cycles.append((parent, sorted(scc), closing))
    return cycles


def tarjan(graph):
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    nodes = set(graph) | {b for a in graph for b in graph[a]}

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            out.append(scc)

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def members():
    with open(os.path.join(ROOT, "Cargo.toml"), encoding="utf-8") as fh:
        text = fh.read()
    block = re.search(r"members\s*=\s*\[(.*?)\]", text, re.S).group(1)
    return [os.path.join(ROOT, m) for m in re.findall(r'"([^"]+)"', block)]


def main(argv):
    crates = argv[1:] or [m for m in members() if os.path.isdir(os.path.join(m, "src"))]
    failed = False
    for crate_dir in crates:
        for parent, scc, closing in check(crate_dir):
            failed = True
            where = "::".join(("crate",) + parent)
            print(f"{os.path.relpath(crate_dir, ROOT)}: import cycle under {where}: {' <-> '.join(scc)}")
            for w in closing:
                print(f"    {w}")
    if failed:
        print("module cycles found: each listed module reaches the others through its imports")
        return 1
    print(f"no module cycles in {len(crates)} crates")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
