#!/usr/bin/env python3
"""Layering checks run by .ci/run (and by hand: `python3 .ci/layers.py`).

1. Forbidden dependencies, from `cargo metadata` (normal dependencies, transitively):
   the model crate takes no runtime, transport or storage engine; the store crate no
   transport; the worker, the MCP gateway, the web console and the SDK nothing of the server. Some
   crates may be depended on only by the ones named (the bench only by the binary).
2. No cycles between sibling modules of any crate: for every folder module, the
   graph of its children (an edge a -> b when code under a names b by a `crate::` or
   `super::` path) has no cycle. Test code (`tests.rs`, `*_tests.rs`, `proptests*`,
   `test_*.rs`, and anything after `#[cfg(test)]`) is left out.

Exits 1 and names each violation; prints a one-line summary otherwise.
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# crate -> packages it must not depend on (normal dependencies, transitively).
FORBIDDEN = {
    "railyard-model": ["tokio", "tonic", "redb", "axum", "hyper", "reqwest", "prost",
                       "railyard-proto", "railyard-store", "railyard-server"],
    "railyard-store": ["tonic", "axum", "hyper", "reqwest", "tokio", "railyard-proto",
                       "railyard-server"],
    "railyard-store-postgres": ["tonic", "axum", "hyper", "reqwest", "railyard-proto",
                                "railyard-server", "railyard-worker"],
    # The engine knows no transport and no wire types; it reaches storage only
    # through the store crate's trait. reqwest (outbound calls) brings hyper and tower:
    # those, and redb, it must not name itself (FORBIDDEN_DIRECT).
    "railyard-engine": ["tonic", "axum", "prost", "railyard-proto", "railyard-sdk",
                        "railyard-server", "railyard-worker", "railyard-console",
                        "railyard-store-postgres"],
    "railyard-server": ["railyard-worker", "railyard-console"],
    # The web console reaches the server only over gRPC, through the SDK.
    "railyard-console": ["railyard-server", "railyard-store", "railyard-worker", "redb"],
    "railyard-worker": ["railyard-server", "railyard-store", "redb"],
    # The MCP gateway reaches the server only over gRPC, through the SDK.
    "railyard-gateway": ["railyard-server", "railyard-store", "redb"],
    "railyard-sdk": ["figment", "railyard-config", "railyard-server", "railyard-model"],
    "railyard-proto": ["figment", "railyard-server", "railyard-model"],
    "railyard-wire": ["tonic", "prost", "tokio", "railyard-proto", "railyard-model"],
    # The text-cutting helper is below everything: it depends on nothing.
    "railyard-text": ["railyard-proto", "railyard-model", "tokio", "serde", "chrono"],
    # The shared formatters read wire types only.
    "railyard-view": ["figment", "railyard-sdk", "railyard-model", "railyard-server",
                      "railyard-store", "redb"],
}


# crate -> packages it must not name as a direct dependency (it may reach them through
# another crate: the Postgres backend reaches redb only through railyard-store).
FORBIDDEN_DIRECT = {
    "railyard-store-postgres": ["redb"],
    "railyard-engine": ["redb", "hyper", "hyper-util", "http-body", "tower"],
    "railyard-server": ["redb"],
}


# crate -> the only packages that may depend on it (any kind of dependency).
ONLY_DEPENDED_ON_BY = {
    # The benchmark harness is the binary's `railyard bench`, errors as `anyhow` and
    # all: no library may build on it.
    "railyard-bench": ["railyard"],
}


def dependency_violations():
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked", "--offline"],
        cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        out = subprocess.run(["cargo", "metadata", "--format-version", "1", "--locked"],
                             cwd=ROOT, capture_output=True, text=True, check=True)
    meta = json.loads(out.stdout)
    names = {p["id"]: p["name"] for p in meta["packages"]}
    normal = {}
    for node in meta["resolve"]["nodes"]:
        normal[node["id"]] = [
            d["pkg"] for d in node["deps"]
            if any(k["kind"] is None for k in d["dep_kinds"])
        ]
    by_name = {names[i]: i for i in normal if names[i] in FORBIDDEN}
    problems = []
    for node in meta["resolve"]["nodes"]:
        for d in node["deps"]:
            allowed = ONLY_DEPENDED_ON_BY.get(names[d["pkg"]])
            if allowed is not None and names[node["id"]] not in allowed:
                problems.append(f"{names[node['id']]} depends on {names[d['pkg']]}, "
                                f"which only {', '.join(allowed)} may")
    for crate, banned in FORBIDDEN_DIRECT.items():
        for i in normal:
            if names[i] == crate:
                for d in normal[i]:
                    if names[d] in banned:
                        problems.append(f"{crate} names {names[d]} as a dependency of its own")
    for crate, banned in FORBIDDEN.items():
        if crate not in by_name:
            continue
        seen, stack, parent = set(), [by_name[crate]], {}
        while stack:
            cur = stack.pop()
            for d in normal.get(cur, []):
                if d not in seen:
                    seen.add(d)
                    parent[d] = cur
                    stack.append(d)
        for d in seen:
            if names[d] in banned:
                chain, cur = [names[d]], d
                while cur in parent and parent[cur] != by_name[crate]:
                    cur = parent[cur]
                    chain.append(names[cur])
                chain.append(crate)
                problems.append(f"{crate} depends on {names[d]}: " + " -> ".join(reversed(chain)))
    return problems, len(by_name)


TEST_FILE = re.compile(r"(^tests\.rs$|_tests\.rs$|^proptests.*\.rs$|^test_.*\.rs$)")
PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
GROUP = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{")


def module_of(src_root, path):
    rel = os.path.relpath(path, src_root)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return rel


def strip_tests(text):
    """The text before a file's inline test module (`#[cfg(test)] mod x {`)."""
    m = re.search(r"#\[cfg\(test\)\]\s*(pub(\([a-z]+\))?\s+)?mod\s+\w+\s*\{", text)
    return text if m is None else text[:m.start()]


def expand_groups(text):
    """`use crate::a::{b, c::d}` -> the paths `crate::a::b`, `crate::a::c::d`."""
    paths = []
    for m in GROUP.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        inner = text[m.end():i - 1]
        for part in re.split(r"[,{}]", inner):
            part = part.strip().split(" as ")[0].strip()
            if part and part != "self" and part != "*":
                paths.append((m.group(1), m.group(2) + "::" + part))
    return paths


def modules_under(src_root):
    """Every module path of a crate (lists of names), from its files."""
    mods = set()
    for dirpath, _, files in os.walk(src_root):
        for f in files:
            if f.endswith(".rs"):
                mods.add(tuple(module_of(src_root, os.path.join(dirpath, f))))
    return mods


def cycles_in(src_root):
    mods = modules_under(src_root)
    edges = {}
    for dirpath, _, files in os.walk(src_root):
        for f in files:
            if not f.endswith(".rs") or TEST_FILE.search(f):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, src_root)
            if any(part in ("tests", "proptests") for part in rel.split(os.sep)[:-1]):
                continue
            me = module_of(src_root, path)
            text = strip_tests(open(path, encoding="utf-8").read())
            text = re.sub(r"//[^\n]*", "", text)
            refs = [(m.group(1), m.group(2)) for m in PATH.finditer(text)] + expand_groups(text)
            for base, tail in refs:
                segs = [s for s in tail.split("::") if s]
                if base == "crate":
                    target = segs
                else:
                    here = list(me)
                    ups = 1 if base == "super" else 0
                    while segs and segs[0] == "super":
                        ups += 1
                        segs = segs[1:]
                    target = here[:len(here) - ups] + segs if ups <= len(here) else None
                    if target is None:
                        continue
                common = 0
                while common < min(len(me), len(target)) and me[common] == target[common]:
                    common += 1
                if common >= len(me) or common >= len(target):
                    continue  # a module naming its own descendants or ancestors
                a, b = me[common], target[common]
                parent = tuple(me[:common])
                if parent + (b,) not in mods:
                    continue  # an item of the parent, not a sibling module
                edges.setdefault(parent, {}).setdefault(a, set()).add(b)
    found = []
    for parent, graph in edges.items():
        for scc in strongly_connected(graph):
            if len(scc) > 1:
                where = "::".join(parent) or "<crate root>"
                found.append((where, sorted(scc), graph))
    return found, sum(len(v) for g in edges.values() for v in g.values())


def strongly_connected(graph):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    nodes = set(graph) | {b for vs in graph.values() for b in vs}

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def crate_sources():
    for top in sorted(os.listdir(ROOT)):
        src = os.path.join(ROOT, top, "src")
        if os.path.isfile(os.path.join(ROOT, top, "Cargo.toml")) and os.path.isdir(src):
            yield top, src


def self_test():
    """The check finds a planted cycle and passes a tree without one."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "src")
        os.makedirs(os.path.join(src, "engine"))
        files = {
            "lib.rs": "mod engine;\nmod service;\n",
            "service.rs": "use crate::engine::writer::Writer;\n",
            "engine/mod.rs": "mod matching;\nmod writer;\n",
            "engine/matching.rs": "use super::writer::Grant;\n",
            "engine/writer.rs": "use crate::engine::{matching::Matching, self};\n"
                                "#[cfg(test)]\nmod tests { use crate::service::X; }\n",
        }
        for name, text in files.items():
            with open(os.path.join(src, name), "w") as f:
                f.write(text)
        found, _ = cycles_in(src)
        assert [(w, c) for w, c, _ in found] == [("engine", ["matching", "writer"])], found
        with open(os.path.join(src, "engine/matching.rs"), "w") as f:
            f.write("pub struct Matching;\n")
        found, _ = cycles_in(src)
        assert found == [], found
    print("layers: self-test passed")


def main():
    if "--self-test" in sys.argv:
        self_test()
        return
    problems, checked = dependency_violations()
    edge_count = 0
    for name, src in crate_sources():
        found, n = cycles_in(src)
        edge_count += n
        for where, scc, graph in found:
            detail = "; ".join(f"{a} -> {', '.join(sorted(graph[a] & set(scc)))}" for a in scc if a in graph)
            problems.append(f"{name}/src: module cycle under {where}: {' <-> '.join(scc)} ({detail})")
    if problems:
        print("layering check failed:")
        for p in problems:
            print("  -", p)
        sys.exit(1)
    print(f"layers: {checked} crates' dependencies allowed; no module cycles ({edge_count} sibling edges)")


if __name__ == "__main__":
    main()
