"""Generates the gRPC stubs in railyard/v1/ from the repository's proto/ directory.

    python scripts/generate.py          # writes railyard/v1/*_pb2*.py(i)
    python scripts/generate.py --check  # fails, naming the files, if they would change

Run it with the pinned grpcio-tools and mypy-protobuf of requirements-dev.txt: the
generated code records the versions that made it.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

SDK = Path(__file__).resolve().parent.parent
PROTO = SDK.parent / "proto"
PACKAGE = Path("railyard") / "v1"
SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")


def plugin(name: str) -> str:
    """The path of a protoc plugin installed beside this Python (mypy-protobuf's)."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if not found:
        sys.exit(f"{name} not found: install mypy-protobuf (requirements-dev.txt)")
    return found


def generate(out: Path) -> None:
    import grpc_tools
    from grpc_tools import protoc

    protos = sorted(str(p.relative_to(PROTO)) for p in (PROTO / PACKAGE).glob("*.proto"))
    if not protos:
        sys.exit(f"no .proto files under {PROTO / PACKAGE}")
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO}",
        f"-I{well_known}",
        f"--plugin=protoc-gen-mypy={plugin('protoc-gen-mypy')}",
        f"--plugin=protoc-gen-mypy_grpc={plugin('protoc-gen-mypy_grpc')}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        f"--mypy_out=quiet:{out}",
        f"--mypy_grpc_out=quiet:{out}",
        *protos,
    ]
    if protoc.main(args) != 0:
        sys.exit("protoc failed")


def generated(root: Path) -> set[str]:
    return {p.name for p in (root / PACKAGE).glob("*") if p.name.endswith(SUFFIXES)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    check = parser.parse_args().check
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        generate(out)
        fresh, committed = generated(out), generated(SDK)
        if check:
            changed = sorted(
                name
                for name in fresh | committed
                if name not in fresh
                or name not in committed
                or not filecmp.cmp(out / PACKAGE / name, SDK / PACKAGE / name, shallow=False)
            )
            if changed:
                print("generated stubs differ from proto/: " + ", ".join(changed), file=sys.stderr)
                print("run: python sdk-python/scripts/generate.py", file=sys.stderr)
                return 1
            print(f"generated stubs match proto/ ({len(fresh)} files)")
            return 0
        for name in committed - fresh:
            (SDK / PACKAGE / name).unlink()
        for name in sorted(fresh):
            shutil.copyfile(out / PACKAGE / name, SDK / PACKAGE / name)
        print(f"wrote {len(fresh)} files to {SDK / PACKAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
