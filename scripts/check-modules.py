#!/usr/bin/env python3
"""Module import graph of each crate in the workspace; fails on any import loop.

Usage: scripts/check-modules.sh [--exclude DIR]... [--edges] [--layers] [--parent-edges]
       scripts/check-modules.sh --self-test

How the graph is built (from the source, no compiler needed; a few seconds):
- Nodes are the file modules of each crate (src/a.rs, src/a/mod.rs, ...), found by
  following `mod x;` from each crate root (lib.rs, main.rs). An inline module
  (`mod tests { ... }`) is part of its file: its references count as its file's.
- An edge A -> B means code in A names an item of B: through a `use` line (`crate::`,
  `self::`, `super::`, a child module's name) or a path written out in code
  (`crate::b::f()`, `super::X`, `child::Y`, `$crate::...`, or a path through a module
  brought in by `use`). Comments and strings do not count; test code does.
- A path to an item that a module only re-exports (`pub use other::X;`, named or glob)
  counts as an edge to where the item is defined, not to the re-exporting module.
- Parent and child: a module and the modules under it form one room, whose door is the
  parent (mod.rs, lib.rs). The parent declaring (`mod child;`), re-exporting
  (`pub use child::X;`) or otherwise using its descendants' items (a mod.rs dispatching
  to its children) is containment, not an edge. A child using its parent's own items
  (`super::X`, or `crate::X` defined in lib.rs) IS an edge child -> parent, so a loop
  through the parent and a module outside the room (child -> parent -> elsewhere ->
  child) is found, as is any loop between siblings. `--parent-edges` also counts a
  parent's non-re-export uses of its descendants, for a stricter look.
- Paths into other crates (llmsurge_proto::..., std::...) are not edges: Cargo already
  forbids loops between crates.

Output: per crate, its module count, edge count, and either `no cycles` or every
elementary cycle (A -> B -> A, and longer ones) with the file:line that makes each edge.
Exit status 1 when any crate has a cycle, 0 otherwise.

--exclude DIR leaves the files under DIR (relative to the repository root) out of the
graph, and edges into them. --edges prints every edge. --layers prints each crate's
modules by layer (0: imports no other module of the crate; n: imports only layers below
n), the drawing docs/architecture.md keeps. --self-test builds small fixture
crates in a temporary directory and checks that a loop is found and that a facade is not.
"""

import os
import re
import sys
import tempfile

PARENT_EDGES = False  # --parent-edges
ITEM_KW = ("fn", "struct", "enum", "trait", "type", "const", "static", "union", "mod")


# ---------------------------------------------------------------- tokenizer


def tokenize(text):
    """Tokens (kind, value, line) with comments and literals removed."""
    toks = []
    i, n, line = 0, len(text), 1
    ident = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif text.startswith("//", i):
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
                    line += text[i] == "\n"
                    i += 1
        elif (m := re.compile(r'b?r(#*)"').match(text, i)) and (
            i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")
        ):
            end = '"' + m.group(1)
            j = text.find(end, m.end())
            j = n if j < 0 else j + len(end)
            line += text.count("\n", i, j)
            i = j
        elif c == '"' or (c == "b" and text.startswith('b"', i)):
            i += 1 if c == '"' else 2
            while i < n and text[i] != '"':
                if text[i] == "\\":
                    i += 1
                line += text[i] == "\n" if i < n else 0
                i += 1
            i += 1
        elif c == "'" or (c == "b" and text.startswith("b'", i)):
            # A char literal ('a', '\n', '\u{1F600}') or a lifetime ('a).
            k = i + (1 if c == "'" else 2)
            m = re.compile(r"(\\(u\{[0-9a-fA-F]+\}|x..|.)|[^\\'])'").match(text, k)
            if m:
                i = m.end()
            else:
                m = ident.match(text, k)
                i = m.end() if m else k
        elif c == "$" and text.startswith("$crate", i):
            toks.append(("id", "$crate", line))
            i += 6
        elif (m := ident.match(text, i)) :
            # raw identifiers r#type
            toks.append(("id", m.group(0), line))
            i = m.end()
        elif text.startswith("::", i):
            toks.append(("p", "::", line))
            i += 2
        else:
            toks.append(("p", c, line))
            i += 1
    return toks


# ---------------------------------------------------------------- parsing


class Module:
    def __init__(self, path, file, node):
        self.path = path  # tuple of segments under the crate root
        self.file = file
        self.node = node  # the file module it belongs to (itself for a file module)
        self.children = set()  # names of child modules (file or inline)
        self.items = set()  # names of items defined here
        self.reexports = {}  # name -> absolute path it re-exports
        self.globs = []  # absolute module paths re-exported with `*`
        self.aliases = {}  # name -> absolute path brought in by `use` (any visibility)
        self.refs = []  # (absolute path, line, text, is_reexport)


def parse_use_tree(toks, i):
    """Parses a use tree from toks[i]; returns (list of (segments, alias), next index)."""
    out = []

    def tree(i, prefix):
        segs = list(prefix)
        while True:
            kind, val, _ = toks[i]
            if val == "{":
                i += 1
                while toks[i][1] != "}":
                    i = tree(i, segs)
                    if toks[i][1] == ",":
                        i += 1
                return i + 1
            if val == "*":
                out.append((segs + ["*"], None))
                return i + 1
            if kind == "id":
                segs.append(val)
                i += 1
                if toks[i][1] == "::":
                    i += 1
                    continue
                alias = None
                if toks[i][1] == "as":
                    alias = toks[i + 1][1]
                    i += 2
                out.append((segs, alias))
                return i
            if val == "::":  # leading `::`: an extern crate path
                segs = ["::"]
                i += 1
                continue
            return i + 1

    i = tree(i, [])
    return out, i


def parse_file(crate, file, path, node, modules, file_of):
    """Reads one file module, registers its inline modules, queues its child files."""
    text = open(file, encoding="utf-8").read()
    toks = tokenize(text)
    toks.append(("p", "<eof>", 0))
    top = Module(path, file, node)
    modules[path] = top
    scopes = [(top, 0)]  # (module, brace depth at which it closes)
    depth = 0
    child_files = []
    i = 0
    while i < len(toks):
        kind, val, line = toks[i]
        cur = scopes[-1][0]
        if val == "{":
            depth += 1
            i += 1
            continue
        if val == "}":
            if len(scopes) > 1 and depth == scopes[-1][1]:
                scopes.pop()
            depth -= 1
            i += 1
            continue
        if kind == "id" and val == "mod" and toks[i + 1][0] == "id":
            name = toks[i + 1][1]
            cur.children.add(name)
            if toks[i + 2][1] == ";":
                child_files.append((cur, name))
                i += 3
                continue
            if toks[i + 2][1] == "{":
                sub = Module(cur.path + (name,), file, node)
                modules[sub.path] = sub
                depth += 1
                scopes.append((sub, depth))
                i += 3
                continue
        if kind == "id" and val in ITEM_KW and toks[i + 1][0] == "id":
            if toks[i - 1][1] not in ("::",) and val != "mod":
                cur.items.add(toks[i + 1][1])
        if kind == "id" and val == "macro_rules" and toks[i + 1][1] == "!":
            cur.items.add(toks[i + 2][1])
        if kind == "id" and val == "use" and (i == 0 or toks[i - 1][1] != "::"):
            # visibility: `pub use`, `pub(crate) use`, `pub(super) use`, ...
            j = i - 1
            if toks[j][1] == ")":
                while toks[j][1] != "(":
                    j -= 1
                j -= 1
            is_pub = toks[j][1] == "pub"
            uses, i = parse_use_tree(toks, i + 1)
            for segs, alias in uses:
                if segs and segs[0] == "::":
                    continue
                if segs[-1] == "*":
                    cur.refs.append((segs[:-1], line, "use " + "::".join(segs), is_pub, "glob"))
                    continue
                name = alias or segs[-1]
                if name == "self":
                    name = segs[-2]
                    segs = segs[:-1]
                cur.refs.append((segs, line, "use " + "::".join(segs), is_pub, name))
            continue
        if kind == "id" and toks[i + 1][1] == "::" and (i == 0 or toks[i - 1][1] != "::"):
            segs = [val]
            j = i + 1
            while toks[j][1] == "::" and toks[j + 1][0] == "id":
                segs.append(toks[j + 1][1])
                j += 2
            if len(segs) > 1:
                cur.refs.append((segs, line, "::".join(segs), False, None))
            i = j
            continue
        i += 1
    base = os.path.dirname(file)
    if os.path.basename(file) not in ("mod.rs", "lib.rs", "main.rs"):
        base = file[:-3]
    for owner, name in child_files:
        sub = os.path.join(base, *owner.path[len(path):], name)
        for cand in (sub + ".rs", os.path.join(sub, "mod.rs")):
            if os.path.exists(cand):
                file_of.append((owner.path + (name,), cand))
                break


def load_crate(root_file, excluded):
    modules = {}
    queue = [((), root_file)]
    while queue:
        path, file = queue.pop()
        if any(os.path.abspath(file).startswith(e) for e in excluded):
            continue
        found = []
        parse_file(None, file, path, path, modules, found)
        queue.extend(found)
    return modules


def resolve_start(modules, mod, segs):
    """The absolute path a path written in `mod` names, or None when outside the crate."""
    first = segs[0]
    if first in ("crate", "$crate"):
        return tuple(segs[1:])
    if first in ("self", "super"):
        base = list(mod.path)
        k = 0
        while k < len(segs) and segs[k] in ("self", "super"):
            if segs[k] == "super":
                if not base:
                    return None
                base.pop()
            k += 1
        return tuple(base) + tuple(segs[k:])
    if first in mod.children:
        return mod.path + tuple(segs)
    if first in mod.aliases:
        return mod.aliases[first] + tuple(segs[1:])
    return None


def locate(modules, absolute, seen=None):
    """The module that defines what `absolute` names, following re-exports."""
    seen = seen or set()
    k = len(absolute)
    while k > 0 and tuple(absolute[:k]) not in modules:
        k -= 1
    m = modules.get(tuple(absolute[:k]))
    if m is None:
        return None
    if k == len(absolute):
        return m
    name = absolute[k]
    key = (m.path, name)
    if key in seen:
        return m
    seen.add(key)
    if name in m.items:
        return m
    if name in m.reexports and m.reexports[name] is not None:
        return locate(modules, m.reexports[name], seen) or m
    for g in m.globs:
        gm = modules.get(g)
        if gm is not None and (name in gm.items or name in gm.reexports or gm.globs):
            found = locate(modules, g + (name,), seen)
            if found is not None and (name in found.items or found.path != g):
                return found
    return m


def build_graph(modules):
    # First pass: aliases and re-exports (a `use` binds a name in its module).
    for m in modules.values():
        for segs, line, text, is_pub, name in m.refs:
            if name is None:
                continue
            absolute = resolve_start(modules, m, segs)
            if absolute is None:
                continue
            if name == "glob":
                if is_pub:
                    m.globs.append(absolute)
                continue
            m.aliases[name] = absolute
            if is_pub:
                m.reexports[name] = absolute
    edges = {}
    for m in modules.values():
        for segs, line, text, is_pub, name in m.refs:
            absolute = resolve_start(modules, m, segs)
            if absolute is None:
                continue
            target = locate(modules, absolute)
            if target is None:
                continue
            src, dst = m.node, target.node
            if src == dst:
                continue
            if dst[: len(src)] == src and (is_pub or not PARENT_EDGES):
                continue  # a room's door declaring, re-exporting or using what is inside
            if name is not None and absolute in modules and name != "glob":
                continue  # `use crate::a::b;` brings in a module: its uses count
            edges.setdefault((src, dst), (m.file, line, text))
    return edges


def cycles(nodes, succ, limit=500):
    """Every elementary cycle (Johnson's algorithm), at most `limit`."""
    out = []
    order = sorted(nodes)
    index = {v: i for i, v in enumerate(order)}
    for s in order:
        # cycles whose smallest node is s
        blocked, bmap, stack = set(), {}, [s]

        def unblock(v):
            work = [v]
            while work:
                u = work.pop()
                if u in blocked:
                    blocked.discard(u)
                    work.extend(bmap.pop(u, ()))

        def circuit(v):
            found = False
            blocked.add(v)
            for w in sorted(succ.get(v, ())):
                if index[w] < index[s]:
                    continue
                if w == s:
                    out.append(list(stack) + [s])
                    found = True
                    if len(out) >= limit:
                        return True
                elif w not in blocked:
                    stack.append(w)
                    if circuit(w):
                        found = True
                    stack.pop()
                    if len(out) >= limit:
                        return True
            if found:
                unblock(v)
            else:
                for w in succ.get(v, ()):
                    bmap.setdefault(w, set()).add(v)
            return found

        circuit(s)
        if len(out) >= limit:
            break
    return out


def name_of(crate, path):
    return "::".join((crate,) + path) if path else crate


def check(root, crates, excluded, show_edges, out=sys.stdout, show_layers=False):
    failed = False
    excluded = [os.path.abspath(os.path.join(root, e)) + os.sep for e in excluded]
    for crate, rel in crates:
        modules = load_crate(os.path.join(root, rel), excluded)
        edges = build_graph(modules)
        nodes = {m.node for m in modules.values()}
        succ = {}
        for a, b in edges:
            succ.setdefault(a, set()).add(b)
        found = cycles(nodes, succ)
        status = "no cycles" if not found else f"{len(found)} cycle(s)"
        print(f"{crate} ({rel}): {len(nodes)} modules, {len(edges)} edges, {status}", file=out)
        if show_edges:
            for (a, b), (file, line, text) in sorted(edges.items()):
                where = os.path.relpath(file, root)
                print(f"  {name_of(crate, a)} -> {name_of(crate, b)}  ({where}:{line} {text})", file=out)
        if show_layers and not found:
            level = {}

            def depth(v):
                if v not in level:
                    level[v] = 1 + max((depth(w) for w in succ.get(v, ())), default=-1)
                return level[v]

            for v in nodes:
                depth(v)
            for k in range(max(level.values(), default=-1), -1, -1):
                names = sorted(name_of(crate, v)[len(crate) + 2 :] or "(root)" for v in nodes if level[v] == k)
                print(f"  layer {k}: " + "  ".join(names), file=out)
        for cyc in found:
            failed = True
            print("  cycle: " + " -> ".join(name_of(crate, p) for p in cyc), file=out)
            for a, b in zip(cyc, cyc[1:]):
                file, line, text = edges[(a, b)]
                where = os.path.relpath(file, root)
                print(f"    {name_of(crate, a)} -> {name_of(crate, b)}: {where}:{line} {text}", file=out)
    return failed


def workspace_crates(root):
    """(crate name, root file) for every crate root in the workspace."""
    crates = []
    dirs = ["."]
    cargo = open(os.path.join(root, "Cargo.toml"), encoding="utf-8").read()
    m = re.search(r"members\s*=\s*\[([^\]]*)\]", cargo)
    if m:
        dirs += re.findall(r'"([^"]+)"', m.group(1))
    for d in dirs:
        toml = open(os.path.join(root, d, "Cargo.toml"), encoding="utf-8").read()
        pkg = re.search(r'\[package\][^\[]*?name\s*=\s*"([^"]+)"', toml, re.S)
        name = pkg.group(1).replace("-", "_") if pkg else d
        for f, suffix in (("src/lib.rs", ""), ("src/main.rs", " (bin)")):
            if os.path.exists(os.path.join(root, d, f)):
                crates.append((name + suffix, os.path.normpath(os.path.join(d, f))))
    return crates


# ---------------------------------------------------------------- self-test

FIXTURE = {
    "Cargo.toml": '[package]\nname = "fixture"\n',
    "src/lib.rs": "//! root\nmod a;\nmod b;\npub mod facade;\npub use facade::Thing;\n"
    "pub(crate) fn helper() {}\n",
    # a -> b through a use line
    "src/a.rs": "use crate::b::Bee;\npub struct Ay;\nfn f(_: Bee) {}\n",
    # b -> a only through a path in code; the string and the comment must not count
    "src/b.rs": 'pub struct Bee;\n// crate::facade::inner::Inner\nconst S: &str = "crate::facade::inner::X";\n'
    "fn g() { let _ = super::a::Ay; }\n",
    # a facade: declares and re-exports its child, the child uses the parent's own item
    "src/facade/mod.rs": "mod inner;\npub use inner::*;\npub struct Config;\n"
    "fn new() -> Thing { inner::make() }\n",
    "src/facade/inner.rs": "use super::Config;\npub struct Thing(Config);\n"
    "pub(super) fn make() -> Thing { Thing(Config) }\n"
    "fn h() { crate::helper(); }\n",
}


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        for rel, text in FIXTURE.items():
            p = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w", encoding="utf-8") as f:
                f.write(text)
        import io

        buf = io.StringIO()
        failed = check(tmp, workspace_crates(tmp), [], True, buf)
        report = buf.getvalue()
        expect = [
            "fixture::a -> fixture::b",
            "fixture::b -> fixture::a",
            "cycle: fixture::a -> fixture::b -> fixture::a",
            "fixture::facade::inner -> fixture::facade ",
            "fixture::facade::inner -> fixture  ",
        ]
        ok = failed
        for e in expect:
            if e not in report:
                print(f"self-test: missing `{e}`", file=sys.stderr)
                ok = False
        for bad in ("fixture::facade -> fixture::facade::inner", "fixture -> fixture::facade",
                    "-> fixture::facade::inner "):
            if bad in report:
                print(f"self-test: unexpected `{bad}`", file=sys.stderr)
                ok = False
        # Without the loop (b no longer names a), the same fixture passes.
        with open(os.path.join(tmp, "src/b.rs"), "w", encoding="utf-8") as f:
            f.write(FIXTURE["src/b.rs"].replace("super::a::Ay", "Bee"))
        buf2 = io.StringIO()
        if check(tmp, workspace_crates(tmp), [], False, buf2) or "no cycles" not in buf2.getvalue():
            print("self-test: the fixture without its loop still fails", file=sys.stderr)
            ok = False
        print(report + buf2.getvalue(), end="")
        print("self-test: " + ("ok" if ok else "FAILED"))
        return 0 if ok else 1


def main(argv):
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    excluded, show_edges, show_layers = [], False, False
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--self-test":
            return self_test()
        if a == "--exclude" and args:
            excluded.append(args.pop(0))
        elif a == "--edges":
            show_edges = True
        elif a == "--layers":
            show_layers = True
        elif a == "--parent-edges":
            global PARENT_EDGES
            PARENT_EDGES = True
        else:
            print(f"check-modules: unknown argument `{a}` (see the header of {__file__})", file=sys.stderr)
            return 2
    if excluded:
        print("excluded: " + ", ".join(excluded))
    return 1 if check(root, workspace_crates(root), excluded, show_edges, show_layers=show_layers) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
