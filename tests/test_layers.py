"""The architecture of docs/development.md holds: layers, no cycles, modules that stand alone."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pytest_gta", "tool_backends")
IMPORT_ALONE = ROOT / "tests" / "helpers" / "import_alone.py"
#: The first-party imports deferred into a function (see plugin.py's docstring).
ALLOWED_DEFERRED = {
    ("pytest_gta/plugin.py", "_session_layer", "pytest_gta.session"),
    ("pytest_gta/plugin.py", "_data_commands", "pytest_gta.session"),
    ("pytest_gta/plugin.py", "_mcp_command", "pytest_gta.session"),
    ("pytest_gta/plugin.py", "_report_commands", "pytest_gta.benchmarks"),
}


def modules() -> list[str]:
    """Every module of the two packages, by dotted name."""
    names = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def deferred_imports(path: Path) -> list[tuple[str, str, int]]:
    """(function, module, line) of each first-party import inside a function of ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.ImportFrom) and sub.level == 0 and sub.module:
                names = [sub.module]
            elif isinstance(sub, ast.Import):
                names = [alias.name for alias in sub.names]
            else:
                continue
            found += [(node.name, n, sub.lineno) for n in names if n.split(".")[0] in PACKAGES]
    return found


def test_no_first_party_import_is_deferred_into_a_function():
    offenders = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            where = str(path.relative_to(ROOT))
            for function, module, line in deferred_imports(path):
                if (where, function, module) not in ALLOWED_DEFERRED:
                    offenders.append(f"{where}:{line}: {function}() imports {module}")
    assert offenders == []


def test_the_checker_sees_a_deferred_import(tmp_path):
    sample = tmp_path / "m.py"
    sample.write_text(
        "import os\n\ndef f():\n    from pytest_gta.case import Case\n    import json\n"
        "    return Case, json\n"
    )
    assert deferred_imports(sample) == [("f", "pytest_gta.case", 4)]


@pytest.mark.slow
def test_every_module_imports_on_its_own():
    """Each module imported with nothing else of the project imported before it: an import that
    works only after another one fails here (one prepared interpreter forked per module, see
    tests/helpers/import_alone.py)."""
    done = subprocess.run(
        [sys.executable, str(IMPORT_ALONE), str(ROOT), *modules()],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(modules()) > 80
    assert json.loads(done.stdout) == []


def test_an_import_that_needs_another_module_first_fails_alone(tmp_path):
    """The check sees an order dependence: ``b`` uses ``a``'s submodule that only ``c`` imports."""
    package = tmp_path / "pytest_gta"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("")
    (package / "c.py").write_text("import pytest_gta.a\n")
    (package / "b.py").write_text("import pytest_gta\nVALUE = pytest_gta.a\n")
    (tmp_path / "tool_backends").mkdir()
    names = ["pytest_gta.a", "pytest_gta.b", "pytest_gta.c"]
    done = subprocess.run(
        [sys.executable, str(IMPORT_ALONE), str(tmp_path), *names],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert json.loads(done.stdout) == [
        "pytest_gta.b: AttributeError: module 'pytest_gta' has no attribute 'a'"
    ], done.stderr


@pytest.mark.slow
def test_import_linter_contracts_hold():
    """The layers and the no-cycle contract of pyproject.toml (as ``.ci/run`` checks them)."""
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert exe is not None, 'lint-imports is missing: pip install -e ".[dev]"'
    done = subprocess.run(
        [exe, "--no-cache"], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert ", 0 broken." in done.stdout


def xdist_accesses(path: Path) -> list[int]:
    """Lines of ``path`` touching xdist's ``workerinput``/``workeroutput`` (attribute or name)."""
    wire = {"workerinput", "workeroutput"}
    return sorted(
        node.lineno
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if (isinstance(node, ast.Attribute) and node.attr in wire)
        or (isinstance(node, ast.Constant) and node.value in wire)
    )


def test_xdist_wire_protocol_lives_in_one_module():
    """``workerinput``/``workeroutput`` are read and written only in ``session/xdist.py``."""
    home = ROOT / "pytest_gta" / "session" / "xdist.py"
    outside = [
        f"{path.relative_to(ROOT)}:{line}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != home
        for line in xdist_accesses(path)
    ]
    assert xdist_accesses(home)
    assert outside == []
