"""Import each named first-party module alone, in a fork of one prepared interpreter.

``python import_alone.py ROOT MODULE...`` prints a JSON list of ``"module: last error line"``
for each module whose import fails when nothing else of the project has been imported.

A fresh interpreter per module (the plain way) paid each time for Python's start and for the
third-party packages (pydantic, openai, numpy, ...), about 200 of them in all on two cores. Here
one interpreter imports those packages once, without any module of the project, then forks a
child per module: each child starts from the same state, with none of the project imported, so
an import that works only after another module of the project was imported still fails. Only
third-party state is shared, which is not what the check is about (issue 39).
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import sys
import traceback
from pathlib import Path

PACKAGES = ("pytest_gta", "tool_backends")
#: Children importing at once (the machine has two cores).
AT_ONCE = 2


def module_level(tree: ast.Module) -> list[ast.AST]:
    """The nodes of ``tree`` that run on import: not those inside a function."""
    found: list[ast.AST] = []
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        found.append(node)
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                todo.append(child)
    return found


def third_party(root: Path) -> list[str]:
    """What the project's modules import on import (dotted, submodules too), neither ours nor
    stdlib.

    Submodules as written (``from openai.types import x``): a package that loads its
    submodules lazily would otherwise load them again in every child. Not what functions
    import (torch, on first use): a bigger parent only makes every fork slower.
    """
    names: set[str] = set()
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            for node in module_level(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names.update(alias.name for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module)
                    names.update(f"{node.module}.{alias.name}" for alias in node.names)
    ours = set(PACKAGES) | set(sys.stdlib_module_names)
    return sorted(n for n in names if n.split(".")[0] not in ours)


def child(name: str, write: int) -> None:
    """Import ``name``; on failure write its last error line to ``write``. Never returns."""
    status = 0
    try:
        importlib.import_module(name)
    except BaseException:  # whatever the import raised is the finding
        last = traceback.format_exc().strip().splitlines()[-1]
        os.write(write, f"{name}: {last}".encode())
        status = 1
    finally:
        os._exit(status)


def main(root: Path, wanted: list[str]) -> list[str]:
    """Failures of ``wanted``, each imported alone (see the module docstring)."""
    sys.path.insert(0, str(root))
    for name in third_party(root):
        try:
            importlib.import_module(name)
        except Exception:  # not a module (a name imported from one), or an optional package
            continue
    leaked = sorted(m for m in sys.modules if m.split(".")[0] in PACKAGES)
    assert not leaked, f"a third-party import imported the project: {leaked}"
    failures: list[str] = []
    running: dict[int, tuple[str, int]] = {}

    def reap() -> None:
        pid, status = os.wait()
        name, read = running.pop(pid)
        said = os.read(read, 65536).decode(errors="replace")
        os.close(read)
        if status != 0:
            failures.append(said or f"{name}: exit status {status}")

    for name in wanted:
        while len(running) >= AT_ONCE:
            reap()
        read, write = os.pipe()
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            child(name, write)
        os.close(write)
        running[pid] = (name, read)
    while running:
        reap()
    return sorted(failures)


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), sys.argv[2:])))
