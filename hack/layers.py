#!/usr/bin/env python3
"""Checks the crate's layers and prints its file-level import cycles.

The layers, lowest first (LAYERS below): a module may use its own layer and
those under it, never one above. `api` (the types and the names of derived
objects) is at the bottom, `cli` at the top; reconcile drives the capabilities
under it (render, vllm, ops, helm, gate, platform). Two modules of one layer
must not use each other.

Cycles: every strongly connected component of the graph of files that use
each other (`use crate::x::...`, `use super::...`, paths in code such as
`crate::x::f` or `super::x::f`). A module's edges to its own submodules count
only for the modules in WIRING (unless --no-parents): their `mod.rs` wires the
stages, so a stage that reaches back into it (for a type every stage needs)
closes a loop; shared parts belong in a file of their own.

A name a module re-exports (`pub use a::B;`) is followed to where it is
defined. Test code (`#[cfg(test)]` items and `tests.rs` files) is left
out unless --tests: tests may compose layers.

Long functions: a function of more than MAX_FUNCTION_LINES lines (test code
aside) is reported unless a `// long-function: <why>` comment stands just
above it (or its attributes).

Usage: hack/layers.py [--tests] [--no-parents] [--root DIR]
Exit status: 1 when a module uses a layer above its own, files form a cycle
(each printed with the names that make it) or a function is long without a
reason, else 0. `make lint` runs it.
"""

import argparse
import os
import re
import sys

CRATE_MODULE = ()

# Lowest first. Each entry is one layer: the top-level modules in it.
LAYERS = [
    {"api", "watch_scope"},
    {"platform"},
    {"settings"},
    {"render"},
    {"vllm"},
    {"ops"},
    {"activity"},
    {"signin"},
    {"helm", "gate"},
    {"modelkeys", "egress"},
    {"reconcile"},
    {"cli"},
]
RANK = {m: k for k, layer in enumerate(LAYERS) for m in layer}

MAX_FUNCTION_LINES = 80

# Modules whose mod.rs only wires its submodules: a submodule using it closes
# a loop. Elsewhere a mod.rs may define what its submodules build on (a type
# they implement, patterns they share), and those edges are not counted.
WIRING = {("reconcile",)}


def strip_comments_and_strings(src):
    """The source without comments, and with string and char literals emptied."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if src.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif src.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', src[i:]) and not (i and (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'r(#*)"', src[i:])
            end = src.find('"' + m.group(1), i + len(m.group(0)))
            out.append('""')
            i = n if end < 0 else end + 1 + len(m.group(1))
        elif c == '"':
            i += 1
            while i < n and src[i] != '"':
                i += 2 if src[i] == "\\" else 1
            out.append('""')
            i += 1
        elif c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", src[i:])
            if m:
                out.append("' '")
                i += len(m.group(0))
            else:  # a lifetime
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def skip_item(src, i):
    """The index just after the item starting at or after `i` (to `;` or a balanced block)."""
    depth = 0
    n = len(src)
    while i < n:
        c = src[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        elif c == ";" and depth == 0:
            return i + 1
        i += 1
    return n


def drop_test_items(src):
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]", src):
        if m.start() < i:
            continue
        out.append(src[i : m.start()])
        i = skip_item(src, m.end())
    out.append(src[i:])
    return "".join(out)


def expand_use_tree(tree):
    """`a::{b, c::{d, e}}` -> [[a, b], [a, c, d], [a, c, e]] (aliases and globs cut)."""
    tree = re.sub(r"\s+as\s+\w+", "", tree)
    tree = re.sub(r"\s+", "", tree)

    def parse(s):
        # split s at top-level commas
        parts, depth, start = [], 0, 0
        for k, ch in enumerate(s):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append(s[start:k])
                start = k + 1
        parts.append(s[start:])
        paths = []
        for p in parts:
            if not p:
                continue
            brace = p.find("{")
            if brace < 0:
                paths.append([seg for seg in p.split("::") if seg])
            else:
                prefix = [seg for seg in p[:brace].split("::") if seg]
                for rest in parse(p[brace + 1 : p.rfind("}")]):
                    paths.append(prefix + rest)
        return paths

    return parse(tree)


class Crate:
    def __init__(self, root, tests):
        self.files = {}  # module path tuple -> source (cleaned)
        self.raw = {}  # module path tuple -> (path, source as written)
        base = os.path.join(root, "src", *CRATE_MODULE)
        for dirpath, _, names in os.walk(base):
            for name in names:
                if not name.endswith(".rs"):
                    continue
                if not tests and name == "tests.rs":
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), base)
                if rel == "main.rs":  # the binary: a crate of its own
                    continue
                parts = rel[:-3].split(os.sep)
                if parts[-1] in ("mod", "lib") and len(parts) == 1 or parts[-1] == "mod":
                    parts = parts[:-1]
                module = CRATE_MODULE + tuple(parts)
                with open(os.path.join(dirpath, name), encoding="utf-8") as f:
                    raw = f.read()
                src = strip_comments_and_strings(raw)
                self.files[module] = src if tests else drop_test_items(src)
                self.raw[module] = (os.path.relpath(os.path.join(dirpath, name), root), raw)
        self.reexports = {m: self._reexports(m, s) for m, s in self.files.items()}

    def _reexports(self, module, src):
        out = {}
        for m in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);", src):
            for path in expand_use_tree(m.group(1)):
                absolute = self.absolute(module, path, bare_is_child=True)
                if absolute and path[-1] not in ("*", "self"):
                    out[path[-1]] = absolute
        return out

    def children(self, module):
        return {m[len(module)] for m in self.files if len(m) == len(module) + 1 and m[: len(module)] == module}

    def absolute(self, module, path, bare_is_child):
        """The crate path a `path` written in `module` names, or None if outside the crate."""
        if not path:
            return None
        if path[0] == "crate":
            return tuple(path[1:])
        here = list(module)
        k = 0
        if path[0] == "self":
            k = 1
        while k < len(path) and path[k] == "super":
            here.pop()
            k += 1
        if k:
            return tuple(here) + tuple(path[k:])
        if bare_is_child and path[0] in self.children(module):
            return tuple(module) + tuple(path)
        return None

    def resolve(self, path, seen=0):
        """The file (module) that defines what an absolute path names, or None."""
        if tuple(path[: len(CRATE_MODULE)]) != CRATE_MODULE or seen > 8:
            return None
        k = len(path)
        while k and tuple(path[:k]) not in self.files:
            k -= 1
        if not k:
            return None
        module = tuple(path[:k])
        if k < len(path) and path[k] in self.reexports.get(module, {}):
            target = list(self.reexports[module][path[k]]) + list(path[k + 1 :])
            return self.resolve(target, seen + 1) or module
        return module

    def references(self, module):
        """(file it uses, name used) for every reference `module` makes."""
        src = self.files[module]
        refs = []
        for m in re.finditer(r"\buse\s+([^;]+);", src):
            for path in expand_use_tree(m.group(1)):
                absolute = self.absolute(module, path, bare_is_child=True)
                if absolute:
                    refs.append((absolute, path[-1]))
        code = re.sub(r"\buse\s+[^;]+;", "", src)
        children = self.children(module)
        for m in re.finditer(r"(?<![\w:])((?:crate|self|super)(?:::\w+)+|\w+(?:::\w+)+)", code):
            path = m.group(1).split("::")
            if path[0] not in ("crate", "self", "super") and path[0] not in children:
                continue
            absolute = self.absolute(module, path, bare_is_child=True)
            if absolute:
                refs.append((absolute, path[-1]))
        out = []
        for absolute, name in refs:
            target = self.resolve(list(absolute))
            if target and target != module:
                out.append((target, name))
        return out


def long_functions(crate):
    """(path, line, name, lines) of every long function without a written reason."""
    out = []
    for module, src in crate.files.items():
        path, raw = crate.raw[module]
        raw_lines = raw.split("\n")
        for m in re.finditer(r"\bfn\s+(\w+)[^;{]*\{", src):
            depth, i = 0, m.end() - 1
            while i < len(src):
                depth += {"{": 1, "}": -1}.get(src[i], 0)
                if depth == 0:
                    break
                i += 1
            lines = src.count("\n", m.start(), i) + 1
            if lines <= MAX_FUNCTION_LINES:
                continue
            # Test items were cut from `src`; find the fn in the file as written.
            name = m.group(1)
            for k, text in enumerate(raw_lines):
                if re.search(rf"\bfn\s+{name}\b", text):
                    above = k - 1
                    while above >= 0 and re.match(r"\s*(#\[|///|\)\]|\w+\s*=)", raw_lines[above]):
                        above -= 1
                    if above < 0 or "// long-function:" not in raw_lines[above]:
                        out.append((path, k + 1, name, lines))
                    break
    return sorted(out)


def label(module):
    rest = module[len(CRATE_MODULE) :]
    return "/".join(rest) if rest else "lib"


def components(nodes, edges):
    """Tarjan's strongly connected components."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tests", action="store_true", help="count test code too")
    parser.add_argument("--no-parents", action="store_true", help="leave out edges between a module and its submodules")
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    args = parser.parse_args()

    crate = Crate(args.root, args.tests)
    unknown = sorted({m[0] for m in crate.files if m and m[0] not in RANK})
    if unknown:
        print(f"modules in no layer (add them to LAYERS in {__file__}): {', '.join(unknown)}")
        return 1
    edges, names, upward = {}, {}, []
    for module in crate.files:
        for target, name in crate.references(module):
            if module and target and module[0] != target[0] and RANK[target[0]] >= RANK[module[0]]:
                upward.append((module, target, name))
            parent = target if module[: len(target)] == target else module if target[: len(module)] == module else None
            if parent is not None and (args.no_parents or parent not in WIRING):
                continue
            edges.setdefault(module, set()).add(target)
            names.setdefault((module, target), set()).add(name)

    print(f"{len(upward)} use(s) of a layer above or beside the user's")
    for module, target, name in sorted(set(upward)):
        print(f"    {label(module)} (layer {RANK[module[0]]}) -> {label(target)} (layer {RANK[target[0]]}): {name}")
    cycles = [c for c in components(crate.files, edges) if len(c) > 1]
    cycles.sort(key=lambda c: (-len(c), [label(m) for m in c]))
    print(f"{len(cycles)} import cycle(s) among {len(crate.files)} files of src")
    for comp in cycles:
        members = set(comp)
        print(" <-> ".join(label(m) for m in comp))
        for a in comp:
            for b in sorted(edges.get(a, ()), key=label):
                if b in members:
                    print(f"    {label(a)} -> {label(b)}: {', '.join(sorted(names[(a, b)]))}")
    long = long_functions(crate)
    print(f"{len(long)} function(s) over {MAX_FUNCTION_LINES} lines without a `// long-function:` reason")
    for path, line, name, lines in long:
        print(f"    {path}:{line}: {name} ({lines} lines): split it, or say why above it")
    return 1 if upward or cycles or long else 0


if __name__ == "__main__":
    sys.exit(main())
