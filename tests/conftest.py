"""Fixtures shared by the tool backend tests and the browser tests; the ``slow`` rule.

Every test that starts pytest in another process or xdist's workers is ``slow``, so that
``python -m pytest -m "not slow" -n 2`` is a loop of a minute or two. A test is marked by
:func:`pytest_collection_modifyitems` when what it runs shows it (see :func:`starts_pytest`), or by
an explicit ``pytest.mark.slow`` where it cannot; and a test that is not marked but starts pytest
or xdist anyway fails, naming what it started (:func:`_audit`), so that a new test cannot slip
into the fast loop unnoticed.
"""

from __future__ import annotations

import ast
import functools
import inspect
import json
import os
import re
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FunctionType
from typing import Any

import pytest
from _pytest.pytester import Pytester, SysModulesSnapshot
from execnet.gateway_io import popen_bootstrapline

from pytest_gta.dataset import Dataset, bundled_sample_path
from pytest_gta.tools import ToolContext
from pytest_gta.validation import load_dataset
from tests.helpers.browser import BINARY_ENV, Chromium, find_chromium
from tests.helpers.gta_run import without_hypothesis
from tests.helpers.hf_server import PointAt
from tests.helpers.module_snapshot import restore_sys_modules
from tests.helpers.optional import require
from tests.helpers.paths import ROOT, TESTS
from tests.helpers.references import VARIABLE, sample_references

# -- the slow rule --------------------------------------------------------------------------------

#: Source text that starts pytest elsewhere: pytester's subprocess run, the shared helpers'
#: subprocess forms (tests/helpers/gta_run.py), ``python -m pytest`` spelled out, and xdist's
#: ``-n``.
SUBPROCESS_SIGNS = re.compile(
    r"runpytest_subprocess|fresh_process=True|gta_process\(|\"-m\",\s*\"pytest\"|\"-n\"|"
    r"\bXDIST\b|--numprocesses"
)


def _is_ours(func: object) -> bool:
    """Whether ``func`` is a function defined in the self-tests (not pytest's or a library's).

    The test modules, the conftest files and the helpers of ``tests/helpers/``, so that a test
    that starts pytest through a helper (:func:`~tests.helpers.gta_run.gta_process`) is seen.
    """
    code = getattr(func, "__code__", None)
    if not isinstance(func, FunctionType) or code is None:
        return False
    where = Path(code.co_filename).resolve()
    return where.is_relative_to(TESTS) or where == ROOT / "conftest.py"


@functools.cache
def _starts_pytest_source(func: FunctionType) -> bool:
    """Whether ``func``, or a test helper it calls by name (followed through), starts pytest."""
    seen: set[FunctionType] = set()
    todo = [func]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            source = textwrap.dedent(inspect.getsource(current))
        except (OSError, TypeError):
            continue
        if SUBPROCESS_SIGNS.search(source):
            return True
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                called = current.__globals__.get(node.func.id)
                if _is_ours(called):
                    todo.append(called)  # type: ignore[arg-type]
    return False


def _dist_param(value: object) -> bool:
    """Whether a parameter value carries xdist's ``-n`` (``dist_args``'s ``["-n", "2"]``)."""
    if isinstance(value, str):
        return value == "-n" or value.startswith(("-n=", "--numprocesses"))
    if isinstance(value, list | tuple):
        return any(isinstance(v, str) and _dist_param(v) for v in value)
    return False


def starts_pytest(item: pytest.Item) -> bool:
    """Whether ``item`` visibly starts pytest in a subprocess or xdist's workers.

    It does when a parameter holds ``-n``, or when the source of the test, of one of its
    fixtures or of a test helper they call by name shows :data:`SUBPROCESS_SIGNS`.
    """
    callspec = getattr(item, "callspec", None)
    if callspec is not None and any(_dist_param(v) for v in callspec.params.values()):
        return True
    functions: list[Callable[..., Any]] = [getattr(item, "function", None)]  # type: ignore[list-item]
    info = getattr(item, "_fixtureinfo", None)
    for defs in info.name2fixturedefs.values() if info is not None else ():
        functions.extend(d.func for d in defs)
    return any(_is_ours(f) and _starts_pytest_source(f) for f in functions)  # type: ignore[arg-type]


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # The private names it reads: a pytest that renames them fails here, not in a flaky run.
    assert hasattr(SysModulesSnapshot(), "_SysModulesSnapshot__saved")
    SysModulesSnapshot.restore = restore_sys_modules  # type: ignore[assignment]
    if not getattr(Pytester, "_gta_without_hypothesis", False):
        Pytester._getpytestargs = without_hypothesis(Pytester._getpytestargs)  # type: ignore[method-assign]
        Pytester._gta_without_hypothesis = True  # type: ignore[attr-defined]
    # xdist's default "load" hands out fixed chunks; "worksteal" lets an idle worker take tests
    # still queued on the other, so the long modules (:func:`longest_first`) end together.
    # Set here, not in addopts: ``-p no:xdist`` (tox -e nodist) knows no ``--dist``.
    if getattr(config.option, "dist", "no") == "load" and not config.getoption("distload", False):
        config.option.dist = "worksteal"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slow") is None and starts_pytest(item):
            item.add_marker(pytest.mark.slow)
    longest_first(items)


#: The similarity models the test session serves, where installed (:func:`shared_similarity`).
SHARED_MODELS = ("all-MiniLM-L6-v2", "all-mpnet-base-v2")


def longest_first(items: list[pytest.Item]) -> None:
    """Modules that start the most pytest runs first, each module's tests in their own order.

    With ``--dist worksteal`` (``pyproject.toml``) the two workers then start on the long
    modules and steal short tests at the end, so that no long test starts in the last minute
    (issue 39). A module's tests stay together: its module-scoped fixtures are built once.
    """
    cost: dict[str, int] = {}
    for item in items:
        module = item.nodeid.split("::")[0]
        cost[module] = cost.get(module, 0) + (1 if item.get_closest_marker("slow") else 0)
    order = {module: index for index, module in enumerate(cost)}
    items.sort(key=lambda i: (-cost[i.nodeid.split("::")[0]], order[i.nodeid.split("::")[0]]))


#: The unmarked test now running, and what it started that only a ``slow`` test may start.
_unmarked: dict[str, Any] = {"item": None, "started": []}


def _launches_pytest(argv: object) -> bool:
    """Whether a process's arguments run pytest or an xdist worker (execnet's bootstrap)."""
    args = [argv] if isinstance(argv, str | bytes) else list(argv or ())
    words = [os.fsdecode(a) if isinstance(a, bytes) else str(a) for a in args]
    for i, word in enumerate(words):
        if word in ("-mpytest", popen_bootstrapline) or Path(word).name in ("pytest", "py.test"):
            return True
        if word == "-m" and words[i + 1 : i + 2] == ["pytest"]:
            return True
    return False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    # Every process start goes through this audit event, pytester's and execnet's included.
    if event == "subprocess.Popen" and _unmarked["item"] is not None and _launches_pytest(args[1]):
        _unmarked["started"].append(args[1])


if not getattr(sys, "_gta_slow_audit", False):  # audit hooks cannot be removed: install once
    sys.addaudithook(_audit)
    sys._gta_slow_audit = True  # type: ignore[attr-defined]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    _unmarked["item"] = item if item.get_closest_marker("slow") is None else None
    _unmarked["started"] = []
    try:
        return (yield)
    finally:
        _unmarked["item"] = None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    started = _unmarked["started"]
    if started and _unmarked["item"] is item and report.passed:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} started pytest or an xdist worker ({started[0]!r}) but is not "
            "marked slow: add @pytest.mark.slow, or let tests/conftest.py's rule see it "
            "(SUBPROCESS_SIGNS)"
        )
        _unmarked["started"] = []
    return report


# -- fixtures -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dataset() -> Dataset:
    """The bundled sample, loaded once per module."""
    return load_dataset(bundled_sample_path())


@pytest.fixture
def context(dataset: Dataset, tmp_path: Path) -> ToolContext:
    """A tool call's context on the sample's first query, writing into a fresh directory."""
    return ToolContext(dataset, next(iter(dataset)), tmp_path / "out")


@pytest.fixture
def hub_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PointAt]:
    """``point_at(url, offline=False)`` aims huggingface_hub at ``url``; returns the hub cache.

    huggingface_hub reads its environment once, at import, so in-process tests patch its
    ``constants`` as well as the environment (why each: tests/test_hf_server_selfcheck.py).
    """
    import huggingface_hub
    from huggingface_hub import constants

    home = tmp_path / "hf_home"
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    for name in ("HF_TOKEN_PATH", "HF_OIDC_RESOURCE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    for name, value in {
        "HF_HOME": str(home),
        "HF_HUB_CACHE": str(home / "hub"),
        "HF_ASSETS_CACHE": str(home / "assets"),
        "HF_XET_CACHE": str(home / "xet"),
        "HF_TOKEN_PATH": str(home / "token"),
        "HF_STORED_TOKENS_PATH": str(home / "stored_tokens"),
        "AGENT_HARNESSES_PATH": str(home / ".agent_harnesses.json"),
        "HF_HUB_DISABLE_TELEMETRY": True,
        "HF_HUB_DISABLE_IMPLICIT_TOKEN": False,
    }.items():
        monkeypatch.setattr(constants, name, value)

    def point_at(url: str, *, offline: bool = False) -> Path:
        monkeypatch.setenv("HF_ENDPOINT", url)
        monkeypatch.setenv("HF_HUB_OFFLINE", "1" if offline else "0")
        monkeypatch.setattr(constants, "ENDPOINT", url)
        monkeypatch.setattr(
            constants,
            "HUGGINGFACE_CO_URL_TEMPLATE",
            url + "/{repo_id}/resolve/{revision}/{filename}",
        )
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
        return home / "hub"

    yield point_at
    # Drop the shared client's kept-alive connections to servers that are gone by now.
    huggingface_hub.close_session()


@pytest.fixture(scope="session")
def chromium() -> Chromium:
    """The installed Chromium, headless (tests/helpers/browser.py).

    Skipped with the install hint where there is none, except under
    ``PYTEST_GTA_REQUIRE_CHROMIUM=1`` (set by ``.ci/run``), where a missing browser would
    otherwise turn the report's browser checks into a silent skip.
    """
    chosen = os.environ.get(BINARY_ENV)
    if chosen and find_chromium() is None:
        pytest.fail(f"{BINARY_ENV}={chosen} names no executable; point it at a Chromium")
    require("chromium")
    binary = find_chromium()
    assert binary is not None
    return Chromium(binary)


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    """Where tests keep files for a human to look at (screenshots); CI uploads it.

    ``$PYTEST_GTA_ARTIFACTS`` if set, else ``artifacts/`` at the repository root (ignored by
    git). Files there outlive the run, unlike ``tmp_path``; name them after the test.
    """
    chosen = os.environ.get("PYTEST_GTA_ARTIFACTS")
    path = Path(chosen) if chosen else ROOT / "artifacts"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def no_release_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The packaged manifest without the release's entry, as before the release was pinned.

    What a project meets when its installed plugin has no ``gta_dataset`` entry: the installer
    falls back to the paper's counts. In-process runs only (pytester's ``runpytest``).
    """
    from pytest_gta.install import manifest

    packaged = json.loads(manifest.packaged_manifest_path().read_text(encoding="utf-8"))
    packaged["datasets"].pop(manifest.RELEASE_ENTRY)
    path = tmp_path / "packaged-manifest.json"
    path.write_text(json.dumps(packaged), encoding="utf-8")
    monkeypatch.setattr(manifest, "packaged_manifest_path", lambda: path)


@pytest.fixture(autouse=True, scope="session")
def test_references() -> Iterator[None]:
    """``$GTA_TEST_REFERENCES`` for the test agents that replay the sample.

    A run passes it on only with ``--gta-agent-env=GTA_TEST_REFERENCES``
    (tests/helpers/references.py). Session-wide, so that module-scoped fixtures' runs have it too.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(VARIABLE, sample_references())
        yield


@pytest.fixture(autouse=True, scope="session")
def shared_similarity() -> Iterator[None]:
    """One service per similarity model for every pytest the tests start (issue 39).

    A run started by a test (pytester's, a subprocess's, a wheel's) asks this process's
    services (``$PYTEST_GTA_TEST_SIMILARITY``, read by
    :func:`pytest_gta.scoring.service.shared_service`) instead of importing torch and loading
    its model again: the same library calls in one process, so the same numbers. Each model
    loads in the background as the session starts. The tests of the real path (a run that
    loads its own model) unset the variable (:func:`own_similarity`); the demo, which CI runs
    as the README writes it, loads its own.
    """
    from pytest_gta.errors import GtaUsageError
    from pytest_gta.scoring.service import SHARED_SERVICE_VARIABLE, SimilarityService
    from pytest_gta.scoring.similarity import SentenceSimilarity, resolve_sim_model

    services = []
    for model in SHARED_MODELS:
        try:
            path = resolve_sim_model(model)
        except GtaUsageError:  # not installed: a run asking for it says so itself
            continue
        factory = functools.partial(SentenceSimilarity, path)
        services.append((model, SimilarityService(factory)))
    value = [{"model": m, "url": s.url, "token": s.token} for m, s in services]
    try:
        with pytest.MonkeyPatch.context() as patch:
            if value:
                patch.setenv(SHARED_SERVICE_VARIABLE, json.dumps(value))
            yield
    finally:
        for _, service in services:
            service.close()


@pytest.fixture
def own_similarity(monkeypatch: pytest.MonkeyPatch) -> None:
    """The run under test loads its own similarity model (the real path), not the shared one."""
    from pytest_gta.scoring.service import SHARED_SERVICE_VARIABLE

    monkeypatch.delenv(SHARED_SERVICE_VARIABLE, raising=False)
