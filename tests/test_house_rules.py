"""The house rules of docs/development.md as tests, so that they cannot drift after a feature lands.

Each rule reads the source (lines, or the AST), runs nothing and takes well under a second:

- no module of the plugin, the tool backends or the test helpers over 700 lines, except the
  short list :data:`LONG_MODULES`, each with its reason, stated at the top of the module too;
  a listed module that is no longer long fails as well, so the list cannot go stale;
- ``pytest_gta/plugin.py``, the entry module, at most 400 lines;
- no module imports a conftest: fixtures stay in conftest files, plain helpers live in
  ``tests/helpers/`` and are imported by that path; ``tests/`` itself holds only test modules;
- no assert on an elapsed time (a clock, or a name that holds seconds) unless the line says
  ``# bound: why``: a bound that catches a hang, or a floor that a busy machine only raises;
- nothing skips on a missing optional package but ``require`` (tests/helpers/optional.py),
  whose CI variables are exactly the ones ``.ci/run`` sets.
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from _pytest.pytester import SysModulesSnapshot

from tests.helpers import optional
from tests.helpers.module_snapshot import restore_sys_modules
from tests.helpers.optional import OPTIONAL, Optional, require
from tests.helpers.paths import HELPERS, ROOT, TESTS

#: The most lines a module may have, but for :data:`LONG_MODULES`.
LIMIT = 700
#: Where :data:`LIMIT` holds: the plugin, the tool backends and the tests' helpers.
CODE = (ROOT / "pytest_gta", ROOT / "tool_backends", HELPERS)
#: Modules allowed over :data:`LIMIT`, each with its reason, quoted from the module's docstring
#: (its paragraph "Why this module is long").
LONG_MODULES = {
    "tool_backends/sandbox_worker.py": (
        "it is one program, run from its own text, so it cannot import a sibling module"
    ),
}
#: The entry module loads in every pytest process: it stays thin.
PLUGIN = ROOT / "pytest_gta" / "plugin.py"
PLUGIN_LIMIT = 400
#: The marker of an assert on elapsed time that is allowed: ``# bound: why``.
BOUND = re.compile(r"#\s*bound:\s*\S")
#: Names (variables, attributes, report keys) that hold a time.
TIMED_NAME = re.compile(
    r"(^|_)(elapsed|durations?|took|seconds|secs|wall|latency|timings?)($|_)|_m?s$", re.IGNORECASE
)
#: Calls that read a clock.
CLOCKS = frozenset(
    {"monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "process_time", "now"}
    | {"utcnow", "total_seconds"}
)
#: Skips on a missing optional package allowed outside ``require``: ``{"path:line": why}``.
ALLOWED_SKIPS: dict[str, str] = {}


def lines_of(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def modules(*roots: Path) -> Iterator[Path]:
    for root in roots:
        yield from sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def where(path: Path, node: ast.AST | None = None) -> str:
    name = path.relative_to(ROOT).as_posix()
    line = getattr(node, "lineno", None)
    return f"{name}:{line}" if line is not None else name


# -- long modules ---------------------------------------------------------------------------------


def test_no_module_is_over_700_lines_but_the_listed_ones():
    over = {
        where(p): n
        for p in modules(*CODE)
        if (n := lines_of(p)) > LIMIT and where(p) not in LONG_MODULES
    }
    assert not over, (
        f"over {LIMIT} lines: {over}; split the module, or add it to LONG_MODULES with its reason "
        "(and say why at its top, in a paragraph 'Why this module is long')"
    )


@pytest.mark.parametrize("name", sorted(LONG_MODULES))
def test_a_long_module_says_why_at_its_top(name):
    docstring = ast.get_docstring(ast.parse((ROOT / name).read_text(encoding="utf-8"))) or ""
    text = " ".join(docstring.split())
    assert "Why this module is long" in text, f"{name}'s docstring does not say why it is long"
    assert LONG_MODULES[name] in text, f"{name}'s docstring does not give LONG_MODULES' reason"


@pytest.mark.parametrize("name", sorted(LONG_MODULES))
def test_a_listed_module_is_still_long(name):
    assert lines_of(ROOT / name) > LIMIT, (
        f"{name} is {LIMIT} lines or fewer now: remove it from LONG_MODULES (and its note)"
    )


def test_the_entry_module_is_at_most_400_lines():
    assert lines_of(PLUGIN) <= PLUGIN_LIMIT


# -- helpers in a package ------------------------------------------------------------------------


def imports_of(tree: ast.AST) -> Iterator[tuple[ast.stmt, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node, node.module


def test_no_module_imports_a_conftest():
    sources = [ROOT / "conftest.py", *modules(TESTS, ROOT / "benchmarks", ROOT / "examples")]
    found = [
        f"{where(p, node)}: {name}"
        for p in sources
        for node, name in imports_of(ast.parse(p.read_text(encoding="utf-8")))
        if name == "conftest" or name.endswith(".conftest")
    ]
    assert not found, f"import the helper from tests.helpers instead: {found}"


def test_tests_holds_test_modules_and_helpers_hold_the_rest():
    stray = [
        p.name
        for p in TESTS.glob("*.py")
        if not p.name.startswith("test_") and p.name not in ("conftest.py", "__init__.py")
    ]
    assert not stray, f"plain helpers belong in tests/helpers/: {stray}"
    assert not list(HELPERS.rglob("test_*.py")), "tests/helpers/ holds no test module"


# -- no timing asserts ---------------------------------------------------------------------------


def is_timed(expr: ast.expr) -> bool:
    """Whether ``expr`` is a time: a clock reading, a name holding seconds, or arithmetic on one."""
    if isinstance(expr, ast.BinOp):
        return is_timed(expr.left) or is_timed(expr.right)
    if isinstance(expr, ast.UnaryOp):
        return is_timed(expr.operand)
    if isinstance(expr, ast.Name):
        return bool(TIMED_NAME.search(expr.id))
    if isinstance(expr, ast.Attribute):
        return bool(TIMED_NAME.search(expr.attr))
    if isinstance(expr, ast.Subscript):
        key = expr.slice
        return isinstance(key, ast.Constant) and bool(TIMED_NAME.search(str(key.value)))
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
        return expr.func.attr in CLOCKS
    return False


def is_sign_check(left: ast.expr, op: ast.cmpop, right: ast.expr) -> bool:
    """``x >= 0``, ``x > 0``, ``0 <= x``: that a time was recorded, not how long it was."""
    zero = [isinstance(e, ast.Constant) and e.value == 0 for e in (left, right)]
    return (zero[1] and isinstance(op, ast.Gt | ast.GtE)) or (
        zero[0] and isinstance(op, ast.Lt | ast.LtE)
    )


def timing_comparisons(test: ast.expr) -> Iterator[ast.Compare]:
    for node in ast.walk(test):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        for left, op, right in zip(operands, node.ops, operands[1:], strict=False):
            ordering = isinstance(op, ast.Lt | ast.LtE | ast.Gt | ast.GtE)
            timed = is_timed(left) or is_timed(right)
            if ordering and timed and not is_sign_check(left, op, right):
                yield node
                break


def comments(source: str) -> dict[int, str]:
    found: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found[token.start[0]] = token.string
    return found


def timing_asserts(path: Path) -> Iterator[tuple[ast.Assert, bool]]:
    """Each assert of ``path`` that compares a time, and whether it is marked ``# bound:``."""
    source = path.read_text(encoding="utf-8")
    marks = comments(source)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assert) and any(timing_comparisons(node.test)):
            span = range(node.lineno, (node.end_lineno or node.lineno) + 1)
            yield node, any(BOUND.search(marks.get(n, "")) for n in span)


def test_no_assert_on_elapsed_time_unless_it_is_a_bound():
    unmarked = [
        f"{where(p, node)}: {ast.unparse(node.test)[:80]}"
        for p in modules(TESTS)
        for node, bound in timing_asserts(p)
        if not bound
    ]
    assert not unmarked, (
        "assert what happened (requests made, bytes read, events), not how long it took; a "
        f"bound that catches a hang says so on its line with '# bound: why': {unmarked}"
    )


def test_the_timing_rule_sees_what_it_should(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "elapsed = time.monotonic() - start\n"
        "assert elapsed < 5\n"
        "assert time.perf_counter() - start < 2  # bound: catches a hang\n"
        "assert report['usage']['model_s'] < 1\n"
        "assert case['duration'] >= 0\n"
        "assert {'gw0'} <= set(workers['timings'])\n"
        "assert len(sent) < 5\n",
        encoding="utf-8",
    )
    found = {node.lineno: bound for node, bound in timing_asserts(sample)}
    assert found == {2: False, 3: True, 4: False}


# -- optional packages ---------------------------------------------------------------------------


def calls_named(tree: ast.AST, *names: str) -> Iterator[ast.Call]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in names:
                yield node


def probes_a_package(node: ast.AST) -> bool:
    return any(calls_named(node, "find_spec", "which"))


def own_skips(path: Path) -> Iterator[tuple[ast.AST, str]]:
    """Where ``path`` skips on a missing optional package by itself, and how."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    for call in calls_named(tree, "importorskip"):
        yield call, "pytest.importorskip"
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and probes_a_package(node.test):
            if any(calls_named(ast.Module(node.body, []), "skip", "fail")):
                yield node, "a skip under find_spec or shutil.which"
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "skipif":
            if any(probes_a_package(arg) for arg in node.args):
                yield node, "a skipif on find_spec or shutil.which"
        if isinstance(node, ast.ExceptHandler) and "ImportError" in ast.unparse(node.type or node):
            if any(calls_named(ast.Module(node.body, []), "skip")):
                yield node, "a skip on ImportError"
        if isinstance(node, ast.Constant) and str(node.value).startswith("PYTEST_GTA_REQUIRE_"):
            yield node, f"its own {node.value}"


def test_optional_packages_are_asked_for_only_through_require():
    checker = Path(__file__).resolve()
    found = [
        f"{where(p, node)}: {how}"
        for p in modules(TESTS, ROOT / "conftest.py")
        if p.resolve() not in (checker, Path(optional.__file__).resolve())
        for node, how in own_skips(p)
        if where(p, node) not in ALLOWED_SKIPS
    ]
    assert not found, (
        "add the package to tests/helpers/optional.py's OPTIONAL and call require(name): it skips "
        f"with the install hint, and fails in CI: {found}"
    )


def ci_variables() -> set[str]:
    text = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    return set(re.findall(r"^export (PYTEST_GTA_REQUIRE_\w+)=1$", text, re.MULTILINE))


def test_the_optional_rule_sees_what_it_should(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "PIL = pytest.importorskip('PIL')\n"
        "if importlib.util.find_spec('torch') is None:\n"
        "    pytest.skip('no torch')\n"
        "@pytest.mark.skipif(not shutil.which('bwrap'), reason='no bwrap')\n"
        "def test_x(): pass\n"
        "try:\n"
        "    import vllm\n"
        "except ImportError:\n"
        "    pytest.skip('no vllm', allow_module_level=True)\n"
        "if os.environ.get('PYTEST_GTA_REQUIRE_X'): pass\n"
        "if os.geteuid() != 0:\n"
        "    pytest.skip('needs root')\n",
        encoding="utf-8",
    )
    found = sorted(getattr(node, "lineno", 0) for node, _ in own_skips(sample))
    assert found == [1, 2, 4, 8, 10]


def test_ci_sets_the_variable_of_everything_it_installs():
    exported = ci_variables()
    registered = {e.ci_env for e in OPTIONAL.values() if e.ci_env is not None}
    assert exported <= registered, f".ci/run sets variables no entry uses: {exported - registered}"
    for entry in OPTIONAL.values():
        required = entry.ci_env in exported
        assert required != bool(entry.not_in_ci), (
            f"{entry.name}: CI must require it, or the entry says why not (not_in_ci), not both"
        )


def test_require_skips_with_the_hint_outside_ci_and_fails_in_ci(monkeypatch):
    gone = Optional("house-rules-gone", "pip install nothing", "GTA_HOUSE_RULES_CI", lambda: "gone")
    monkeypatch.setitem(OPTIONAL, gone.name, gone)
    monkeypatch.delenv("GTA_HOUSE_RULES_CI", raising=False)
    try:
        with pytest.raises(pytest.skip.Exception, match=r"^gone: pip install nothing$"):
            require(gone.name)
        monkeypatch.setenv("GTA_HOUSE_RULES_CI", "1")
        with pytest.raises(pytest.fail.Exception, match=r"^GTA_HOUSE_RULES_CI is set but gone"):
            require(gone.name)
    finally:
        optional.missing.cache_clear()


def test_require_an_unknown_name_lists_the_known_ones():
    with pytest.raises(KeyError, match="similarity"):
        require("no-such-package")


def test_pytesters_module_snapshot_is_restored_in_one_read():
    """tests/conftest.py puts ``restore_sys_modules`` in place of pytester's: what the snapshot
    saved comes back, what ``preserve`` names is kept, anything else imported since is dropped."""
    assert SysModulesSnapshot.restore is restore_sys_modules
    snapshot = SysModulesSnapshot(preserve=lambda name: name == "gta_kept_module")
    kept, dropped = types.ModuleType("gta_kept_module"), types.ModuleType("gta_dropped_module")
    sys.modules["gta_kept_module"], sys.modules["gta_dropped_module"] = kept, dropped
    try:
        snapshot.restore()
        assert sys.modules["gta_kept_module"] is kept
        assert "gta_dropped_module" not in sys.modules
        assert "pytest" in sys.modules
    finally:
        sys.modules.pop("gta_kept_module", None)
