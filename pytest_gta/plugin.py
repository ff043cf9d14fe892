"""pytest-gta's entry module (``pytest11: gta``): its hooks and fixtures.

It must cost nothing in a project that does not use GTA: it registers options, markers, hooks
and fixtures, and every hook returns at once when no ``--gta-*`` option is in use. In a GTA run
each hook hands over to the run's :class:`~pytest_gta.session.gta_session.GtaSession` (the session
layer, see docs/development.md), which :func:`_session_layer` imports on first need: with
:func:`_data_commands` and :func:`_mcp_command`, the only first-party imports deferred into a
function in the package: the session layer brings NumPy, httpx and every model adapter (the
MCP server its SDK, Starlette and uvicorn), which an unrelated project must never load.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gta import hookspecs
from pytest_gta.case import MarkRegistry, mark_hint
from pytest_gta.options import GtaSettings, configure_settings
from pytest_gta.options import pytest_addoption as _addoption
from pytest_gta.outward import clean_report
from pytest_gta.session.keys import attach

if TYPE_CHECKING:
    from pytest_gta.case import Case
    from pytest_gta.dataset import Dataset
    from pytest_gta.models.base import (
        BaseModelAdapter,
        BaseRecordedSource,
        ModelAdapter,
        ModelContext,
        RecordedSource,
    )
    from pytest_gta.run.benchmark import Benchmark, BenchmarkContext
    from pytest_gta.run.runner import CaseRun, Scorer
    from pytest_gta.session.gta_session import GtaSession
    from pytest_gta.tools import ToolBackend, ToolBackendContext, ToolSet, ToolSpec

SUITE_NODEID = "gta"

#: The run's settings, resolved in ``pytest_configure``.
SETTINGS = pytest.StashKey[GtaSettings]()
#: The GTA markers declared in this session.
MARKS = pytest.StashKey[MarkRegistry]()
#: The run's session layer; set in ``pytest_configure`` when GTA is active, else on first need.
SESSION = pytest.StashKey["GtaSession"]()


def _session_layer() -> ModuleType:
    """:mod:`pytest_gta.session.gta_session`, imported when a GTA run or fixture needs it.

    Deferred on purpose (see the module's docstring): it keeps NumPy, httpx and the model
    adapters off the import path of every project that does not use GTA.
    """
    from pytest_gta.session import gta_session

    return gta_session


def _data_commands() -> ModuleType:
    """:mod:`pytest_gta.session.install_cli`, for ``--gta-download`` and ``--gta-data-info``.

    Deferred like :func:`_session_layer`, and apart from it: getting and checking the data
    needs neither NumPy nor httpx nor a model adapter, and must work before they are installed.
    """
    from pytest_gta.session import install_cli

    return install_cli


def _report_commands() -> ModuleType:
    """:mod:`pytest_gta.benchmarks.commands` (``--gta-merge``, ``--gta-compare``): no model."""
    from pytest_gta.benchmarks import commands

    return commands


def _mcp_command() -> ModuleType:
    """:mod:`pytest_gta.session.mcp_command`: ``--gta-mcp-serve`` (``python -m pytest_gta.mcp``).

    Deferred like :func:`_session_layer`: the MCP SDK, Starlette and uvicorn load only when
    the tools are served.
    """
    from pytest_gta.session import mcp_command

    return mcp_command


def _session(config: pytest.Config) -> GtaSession:
    """The run's :class:`GtaSession` (made here for a fixture used without ``--gta-model``)."""
    session = config.stash.get(SESSION, None)
    if session is None:
        settings, marks = config.stash[SETTINGS], config.stash[MARKS]
        session = _session_layer().make_session(config, settings, marks)
        config.stash[SESSION] = session
    return session


def _active(config: pytest.Config) -> GtaSession | None:
    """The run's :class:`GtaSession` when GTA is active, else ``None`` (the hook returns)."""
    session = config.stash.get(SESSION, None)
    if session is None or not session.state.settings.active:
        return None
    return session


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """Register ``pytest_gta_*`` hook specifications."""
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register ``--gta-*`` options and ini keys."""
    _addoption(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """Commands that run instead of a session: data, ``--gta-merge``, ``--gta-compare``, MCP."""
    if config.getoption("gta_mcp_serve"):
        return int(_mcp_command().run(config))
    if config.getoption("gta_merge") or config.getoption("gta_compare"):
        commands = _report_commands()
    elif any(
        config.getoption(name) for name in ("gta_download", "gta_data_info", "gta_record_manifest")
    ):
        commands = _data_commands()
    else:
        return None
    result: int | None = commands.run(config)
    return result


def pytest_configure(config: pytest.Config) -> None:
    """Resolve settings; when a model is given, validate everything and start the collector."""
    settings = configure_settings(config)
    config.stash[SETTINGS] = settings
    config.stash[MARKS] = MarkRegistry.with_static_marks(
        lambda line: config.addinivalue_line("markers", line)
    )
    if settings.active:
        _session(config).start()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """When a ``-m`` expression naming GTA marks selected nothing, say which marks exist."""
    markexpr = str(config.getoption("markexpr", "") or "")
    marks = config.stash.get(MARKS, None)
    if exitstatus != pytest.ExitCode.NO_TESTS_COLLECTED or "gta" not in markexpr or marks is None:
        return
    active = config.stash[SETTINGS].active
    for line in mark_hint(markexpr, marks.names, active):
        terminalreporter.write_line(line, yellow=True)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop running ahead; on the controller, build the report and let the gates judge.

    First among ``pytest_sessionfinish`` implementations, so pytest's JUnit XML (written in its
    own) gets the suite-level properties and every reporter sees the final status.
    """
    gta = _active(session.config)
    if gta is not None:
        gta.finish(session)


# A second implementation of the hook (see pytest_runtest_makereport_clean for ``specname``).
@pytest.hookimpl(wrapper=True, trylast=True, specname="pytest_sessionfinish")
def pytest_sessionfinish_writers(session: pytest.Session) -> Any:
    """A file another plugin cannot write (pytest's ``--junitxml`` on a full disk) is an error.

    pytest's JUnit XML writer raises its ``OSError`` out of ``pytest_sessionfinish``, past the
    terminal's summary: the run ended with a traceback and the GTA tables were never printed.
    The innermost wrapper, so the terminal's own wrapper then prints its summary as usual:
    the tables, this error after them, and a non-zero exit status.
    """
    try:
        return (yield)
    except OSError as exc:
        gta = _active(session.config)
        if gta is None or not gta.unwritable(session, exc):
            raise  # not a GTA run, or an xdist worker: pytest's behaviour stays
        return None


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """Keep the episodes queued for this process running ahead (:mod:`pytest_gta.run.pipeline`)."""
    gta = _active(item.config)
    if gta is None:
        return (yield)
    with gta.running_ahead(item, nextitem):
        return (yield)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Unregister the controller's plugins, stop the server and services, drop the ledger."""
    gta = config.stash.get(SESSION, None)
    if gta is not None:
        gta.unconfigure()


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    """One line saying what is evaluated, on what data, with which tools."""
    gta = _active(config)
    return None if gta is None else gta.header()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize every test that asks for ``gta_case`` with the selected cases."""
    if "gta_case" in metafunc.fixturenames:
        metafunc.parametrize("gta_case", _session(metafunc.config).params())


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """With ``--gta-model`` and no GTA test of the user's own, collect the bundled suite.

    Runs first so that ``-k``, ``-m``, ``--lf`` and xdist see the GTA items like any other.
    """
    if (gta := _active(config)) is None:
        return
    if any(gta.fixture in getattr(item, "fixturenames", ()) for item in items):
        return
    module = pytest.Module.from_parent(session, path=gta.suite, nodeid=SUITE_NODEID)
    items.extend(session.genitems(module))


# A second implementation of the hook (see pytest_runtest_makereport_clean for ``specname``).
@pytest.hookimpl(trylast=True, specname="pytest_collection_modifyitems")
def pytest_collection_modifyitems_narrow(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """``--gta-rerun-regressions``; ``--gta-only``, and a note on tests that are not GTA cases."""
    gta = _active(config)
    if gta is not None:
        gta.narrow(items)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """``--gta-shard=K/N``: keep this shard's share; a Workflow run checks its judge's access.

    Here rather than in a ``trylast`` ``pytest_collection_modifyitems``: ``--lf`` deselects in a
    hook wrapper, after every plain implementation of that hook, so the split would be made
    before it. ``tryfirst``, so the terminal's "collected ... deselected" line and xdist (which
    sends the worker's collection to the controller from this hook) see the shard's items.
    """
    gta = _active(session.config)
    if gta is not None:
        gta.collection_finish(session)


def pytest_report_collectionfinish(config: pytest.Config) -> str | None:
    """How many of the selected cases this shard runs (after the collection line)."""
    gta = config.stash.get(SESSION, None)
    return None if gta is None else gta.collection_notes()


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Put the phase's report-only properties on its report, in ``user_properties``.

    The innermost wrapper, so every other plugin's ``makereport`` and ``logreport`` (pytest-html,
    a project's own reporter) finds them there, as our collector does; nothing rewrites them.
    """
    report: pytest.TestReport = yield
    attach(item, report)
    return report


# A second implementation of the same hook: pytest registers only ``pytest_*`` names, and
# ``specname`` says which hook this one is.
@pytest.hookimpl(wrapper=True, tryfirst=True, specname="pytest_runtest_makereport")
def pytest_runtest_makereport_clean(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Clean every test report before it is shown, sent to the controller or written.

    The outermost wrapper, so it cleans whatever the others added.

    Whatever path a secret or an unwritable value took (a model's reply, a tool's output, a
    failure message, captured output), it is caught here, in the process that ran the test:
    before xdist's transport (which refuses lone surrogates), the terminal and JUnit XML.
    """
    report: pytest.TestReport = yield
    if _active(item.config) is not None:
        clean_report(report)
    return report


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> Any:
    """Load models and batch generation before the first case (:mod:`pytest_gta.run.ahead`)."""
    gta = _active(session.config)
    if gta is not None and not session.shouldstop:
        gta.state.ahead.run(session)
        gta.state.agent_setup()  # built and probed beside collection: said before any case
    return (yield)


@pytest.hookimpl(trylast=True)
def pytest_gta_make_model(
    config: pytest.Config, spec: str, context: ModelContext
) -> ModelAdapter | RecordedSource:
    """Built-in: look the provider up in the ``pytest_gta.models`` registry."""
    model: ModelAdapter | RecordedSource = _session_layer().make_model_builtin(spec, context)
    return model


@pytest.hookimpl(trylast=True)
def pytest_gta_make_tool(
    config: pytest.Config, spec: ToolSpec, context: ToolBackendContext
) -> ToolBackend:
    """Built-in: look the backend up in the ``pytest_gta.tools`` registry."""
    backend: ToolBackend = _session_layer().make_tool_builtin(spec, context)
    return backend


@pytest.hookimpl(trylast=True)
def pytest_gta_make_benchmark(config: pytest.Config, context: BenchmarkContext) -> Benchmark:
    """Built-in: the first benchmark of the ``pytest_gta.benchmarks`` registry taking the data."""
    benchmark: Benchmark = _session_layer().make_benchmark_builtin(context)
    return benchmark


# ------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="session")
def gta_settings(pytestconfig: pytest.Config) -> GtaSettings:
    """The resolved ``--gta-*`` settings."""
    return _session(pytestconfig).state.settings


@pytest.fixture(scope="session")
def gta_dataset(pytestconfig: pytest.Config) -> Dataset:
    """The loaded dataset (``--gta-data``)."""
    return _session(pytestconfig).state.dataset()


@pytest.fixture(scope="session")
def gta_model(pytestconfig: pytest.Config) -> BaseModelAdapter | BaseRecordedSource:
    """The model under evaluation (``--gta-model``); skips when none is given."""
    return _session(pytestconfig).state.model()


@pytest.fixture(scope="session")
def gta_tools(pytestconfig: pytest.Config) -> ToolSet:
    """The tool backends (``--gta-tools``), in priority order."""
    return _session(pytestconfig).state.toolset()


@pytest.fixture(scope="session")
def gta_scorer(pytestconfig: pytest.Config) -> Scorer:
    """Scores episodes with the official formulas."""
    return _session(pytestconfig).state.scorer()


@pytest.fixture(scope="session")
def gta_output_dir(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where tools write the files they produce during this session."""
    return _session(pytestconfig).state.output_dir(tmp_path_factory)


@pytest.fixture
def gta_case() -> Any:
    """One case (a query in a mode, a Workflow task); pytest-gta parametrizes its tests."""
    raise pytest.UsageError("gta_case is parametrized by pytest-gta; it cannot be used directly")


@pytest.fixture
def gta_run(
    request: pytest.FixtureRequest,
    pytestconfig: pytest.Config,
    gta_model: BaseModelAdapter | BaseRecordedSource,
) -> Callable[[Case], CaseRun]:
    """A function that runs and scores a GTA-Atomic case.

    Infrastructure failures fail the calling phase with a clean message; call it from a
    fixture (as ``gta_result`` does) to get pytest's *error* outcome for them.
    """
    return _session(pytestconfig).case_runner(request)


@pytest.fixture
def gta_result(request: pytest.FixtureRequest, gta_case: Any) -> Any:
    """The produced and judged result of this test's case, made during setup (the benchmark's).

    In setup, so infrastructure failures are pytest errors, not failures: a GTA-Atomic case's
    :class:`CaseRun` (from the ``gta_model``, ``gta_run`` and ``gta_dataset`` fixtures), a
    GTA-Workflow task's judged case. Its properties go to the item, its JSON to the setup report.
    """
    return _session(request.config).result(request, gta_case)
