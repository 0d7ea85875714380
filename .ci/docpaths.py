#!/usr/bin/env python3
"""Doc path check run by .ci/run (and by hand: `python3 .ci/docpaths.py`).

The docs name source files in backticks so a reader can go to the code; when code
moves, those names rot silently (the crate split left dozens pointing nowhere). Every
backticked token in README.md, ARCHITECTURE.md and docs/*.md that looks like a source
path (has a `/`, ends in .rs, .proto, .py, .json, .toml, or in `/` for a folder) must
exist: a file from the repository root, so the name is unambiguous; a folder may be
the tail of any folder of the repository (prose names `engine/` or `run/`). Tokens
with `<`, `>`, `*`, `{`, `::` or whitespace, and those starting with `/` or `http`,
are not paths; nor are a user's paths: those starting with `~` or `./`, or with a
dot-folder the repository has not (`.cursor/mcp.json`). Fenced code blocks are left
out.

Exits 1 and names each missing path as `file:line: path`; prints a summary otherwise.
"""
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKEN = re.compile(r"`([^`]+)`")
SUFFIXES = (".rs", ".proto", ".py", ".json", ".toml")
SKIP = ("<", ">", "*", "{", "::")


def users_path(root, tok):
    """A path in the user's home or project, not in this repository."""
    first = tok.split("/")[0]
    return tok.startswith(("~", "./")) or (
        first.startswith(".") and not os.path.isdir(os.path.join(root, first)))


def path_tokens(root, text):
    """(line number, token) for each backticked path outside fenced code blocks. A
    code span may wrap onto the next line, so spans are found in the whole text."""
    lines, fenced = text.splitlines(), False
    for n, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            lines[n] = ""
        elif fenced:
            lines[n] = ""
    prose = "\n".join(lines)
    for m in TOKEN.finditer(prose):
        tok = m.group(1)
        if ("/" not in tok or any(s in tok for s in SKIP) or re.search(r"\s", tok)
                or tok.startswith(("/", "http")) or users_path(root, tok)):
            continue
        if tok.endswith(SUFFIXES) or tok.endswith("/"):
            yield prose.count("\n", 0, m.start()) + 1, tok


def folders(root):
    """Every folder of the tree, relative to root, with a trailing `/`."""
    out = set()
    for dirpath, dirs, _ in os.walk(root):
        dirs[:] = [d for d in dirs if d not in (".git", "target")]
        rel = os.path.relpath(dirpath, root)
        if rel != ".":
            out.add(rel.replace(os.sep, "/") + "/")
    return out


def missing(root, docs):
    dirs = folders(root)
    found, checked = [], 0
    for doc in docs:
        with open(os.path.join(root, doc), encoding="utf-8") as f:
            text = f.read()
        for n, tok in path_tokens(root, text):
            checked += 1
            if tok.endswith("/"):
                ok = any(d == tok or d.endswith("/" + tok) for d in dirs)
            else:
                ok = os.path.isfile(os.path.join(root, tok))
            if not ok:
                found.append(f"{doc}:{n}: {tok}")
    return found, checked


def docs_of(root):
    names = [d for d in ("README.md", "ARCHITECTURE.md") if os.path.isfile(os.path.join(root, d))]
    pages = glob.glob(os.path.join(root, "docs", "*.md"))
    return names + sorted(os.path.relpath(p, root) for p in pages)


def self_test():
    """The check names a stale file path and passes exact ones and folder tails."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "server/src/engine"))
        os.makedirs(os.path.join(d, "docs"))
        open(os.path.join(d, "server/src/engine/mod.rs"), "w").close()
        with open(os.path.join(d, "docs/a.md"), "w") as f:
            f.write("See `server/src/engine/mod.rs` and `engine/`, `crate::x/y.rs`,\n"
                    "`<name>/mod.rs`, `https://x/y.rs`, `~/.x/y.json`, `.x/y.json`.\n"
                    "```\n`gone/in_fence.rs`\n```\n"
                    "Stale: `engine/mod.rs`, `server/src/old/`, a `span\n"
                    "over lines`, `gone/after_it.rs`.\n")
        found, checked = missing(d, docs_of(d))
        assert found == ["docs/a.md:6: engine/mod.rs", "docs/a.md:6: server/src/old/",
                         "docs/a.md:7: gone/after_it.rs"], found
        assert checked == 5, checked
    print("docpaths: self-test passed")


def main():
    if "--self-test" in sys.argv:
        self_test()
        return
    docs = docs_of(ROOT)
    found, checked = missing(ROOT, docs)
    if found:
        print("doc paths that name nothing in the repository:")
        for line in found:
            print(line)
        sys.exit(1)
    print(f"docpaths: {checked} source paths in {len(docs)} docs all exist")


if __name__ == "__main__":
    main()
