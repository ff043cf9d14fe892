"""pytest-gta's entry module (``pytest11: gta``): its hooks and fixtures.

It must cost nothing in a project that does not use GTA: it imports only pytest and small
stdlib-only modules, registers options, markers and fixtures, and returns early from every hook
when no ``--gta-*`` option is in use. Datasets, models, NumPy and the similarity model are
loaded only when a GTA case needs them, by the session's
:class:`~pytest_gta.session.state.GtaState`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gta.case import static_marks
from pytest_gta.options import SAMPLE_FALLBACK, GtaSettings, resolve_settings
from pytest_gta.options import pytest_addoption as _addoption
from pytest_gta.session.state import IMAGES_INPUT, SIMILARITY_INPUT, STATE, GtaState, state_of

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
    from pytest_gta.run.runner import CaseResult, Scorer
    from pytest_gta.tools import ToolBackend, ToolBackendContext, ToolSet, ToolSpec

SUITE = Path(__file__).with_name("suite.py")
SUITE_NODEID = "gta"


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """Register ``pytest_gta_*`` hook specifications."""
    from pytest_gta import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register ``--gta-*`` options and ini keys."""
    _addoption(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """``--gta-download``, ``--gta-data-info`` and ``--gta-merge`` run instead of a session."""
    if config.getoption("gta_merge"):
        from pytest_gta.session.finish import merge_command

        return merge_command(config)
    if not (
        config.getoption("gta_download")
        or config.getoption("gta_data_info")
        or config.getoption("gta_record_manifest")
    ):
        return None
    from pytest_gta.install.cli import run

    return run(config)


#: Names of the controller-only plugin objects, unregistered in ``pytest_unconfigure``.
COLLECTOR = "gta-collector"
XDIST_BRIDGE = "gta-xdist"


def pytest_configure(config: pytest.Config) -> None:
    """Resolve settings; when a model is given, validate everything and start the collector."""
    from pytest_gta.outward import register_run_secrets

    # Before anything can print or write one: credentials in URLs of any argument or variable.
    register_run_secrets(config.invocation_params.args)
    settings = resolve_settings(config)
    generation = settings.generation
    register_run_secrets([generation.base_url or ""], generation.model_args)
    state = GtaState(config, settings)
    config.stash[STATE] = state
    for name in static_marks():
        state.register_mark(name)
    if not settings.active:
        return
    from pytest_gta.outward import install_log_filter

    install_log_filter()
    from pytest_gta import signals

    signals.install(config, lambda cause: _halt(config, cause))
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and workerinput.get("gta_ledger"):
        state.ledger_path = Path(workerinput["gta_ledger"])
    from pytest_gta.session import serve

    server = None
    if workerinput is not None:
        state.settings = serve.for_worker(state.settings, workerinput)
    else:
        server = serve.plan(config, state.settings)
        if server is not None:
            state.settings = server.served.settings(state.settings)
    settings = state.settings
    state.validate()
    if server is not None and not config.option.collectonly:
        # After validation (a typo never waits for weights to load), before any case runs.
        serve.start(config, settings, server)
    if workerinput is None:
        from pytest_gta.session.collector import GtaCollector

        config.pluginmanager.register(
            GtaCollector(
                config,
                settings,
                state.dataset,
                state.run_info,
                lambda: (state.baseline(), state.baseline_differences),
                state.image_store,
            ),
            COLLECTOR,
        )
        if config.pluginmanager.hasplugin("xdist"):
            config.pluginmanager.register(_XdistBridge(state), XDIST_BRIDGE)
        if config.pluginmanager.hasplugin("html"):
            from pytest_gta.session.html_hooks import PLUGIN_NAME, GtaHtmlHooks

            config.pluginmanager.register(GtaHtmlHooks(config), PLUGIN_NAME)


def _halt(config: pytest.Config, cause: str) -> None:
    """The run was interrupted: no new model request here, and none from the xdist workers.

    Called from a signal handler (:mod:`pytest_gta.signals`): flags and signals only.
    """
    state = config.stash.get(STATE, None)
    if state is not None:
        state.ahead.halt(cause)
    bridge = config.pluginmanager.get_plugin(XDIST_BRIDGE)
    if bridge is not None:
        bridge.terminate_workers()


class _XdistBridge:
    """Hands the controller's usage ledger to each xdist worker (one budget per session)."""

    def __init__(self, state: GtaState) -> None:
        self.state = state
        #: The local workers' processes still running, by gateway id (SIGTERM reaches them).
        self.workers: dict[str, Any] = {}

    def pytest_xdist_newgateway(self, gateway: Any) -> None:
        """Remember a local worker's process, so that an interrupt can be passed on to it."""
        popen = getattr(getattr(gateway, "_io", None), "popen", None)  # execnet's Popen2IOMaster
        if isinstance(popen, subprocess.Popen):
            self.workers[str(gateway.id)] = popen

    def terminate_workers(self) -> None:
        """SIGTERM each worker still running: it stops as on Ctrl-C and reports what finished.

        A SIGTERM or SIGINT sent to the controller's pid alone never reaches the workers, which
        would keep calling the model until execnet gives up on them (5 s, then SIGINT). In a
        signal handler: ``send_signal`` does nothing for a process already reaped.
        """
        for popen in list(self.workers.values()):
            with contextlib.suppress(OSError):
                popen.send_signal(signal.SIGTERM)

    def pytest_configure_node(self, node: Any) -> None:
        """Tell a starting worker where the session's ledger, model server and similarity are."""
        state = self.state
        if state.ledger_path is not None:
            node.workerinput["gta_ledger"] = str(state.ledger_path)
        store = state.image_store()
        if store is not None:
            node.workerinput[IMAGES_INPUT] = str(store.root)
        from pytest_gta.session.serve import SERVER, WORKER_KEY

        server = state.config.stash.get(SERVER, None)
        if server is not None:
            node.workerinput[WORKER_KEY] = dataclasses.asdict(server.plan.served)
        if state.needs_similarity() and not state.config.option.collectonly:
            # Loads once, in this process, while the workers start (pytest_gta.scoring.service).
            if state.built("similarity_service") is None:
                from pytest_gta.progress import say

                say(
                    state.config,
                    f"loading the similarity model {state.settings.sim_model} once, in this "
                    "process, for every worker ...",
                )
            service = state.similarity_service()
            node.workerinput[SIMILARITY_INPUT] = [service.url, service.token]

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        """With ``--dist load`` and episodes running ahead, keep every worker's queue full."""
        if config.getvalue("dist") != "load" or not self.state.runs_ahead():
            return None
        from pytest_gta.run.pipeline import ahead_scheduling

        return ahead_scheduling(config, log)

    def pytest_testnodedown(self, node: Any, error: object) -> None:
        """Collect a finished worker's loading and generation times for the report."""
        self.workers.pop(str(getattr(node.gateway, "id", "")), None)
        collector = self.state.config.pluginmanager.get_plugin(COLLECTOR)
        workeroutput = getattr(node, "workeroutput", {})
        timings = workeroutput.get("gta_timings")
        if collector is not None and isinstance(timings, dict):
            collector.add_timings(str(node.workerinput.get("workerid", "worker")), timings)
        # Every worker computed the same split; the first one to finish tells the controller.
        shard = workeroutput.get("gta_shard")
        if collector is not None and collector.shard is None and isinstance(shard, dict):
            collector.shard = shard


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """When a ``-m`` expression naming GTA marks selected nothing, say which marks exist."""
    markexpr = str(config.getoption("markexpr", "") or "")
    state = config.stash.get(STATE, None)
    if exitstatus != pytest.ExitCode.NO_TESTS_COLLECTED or "gta" not in markexpr or state is None:
        return
    for line in mark_hint(markexpr, state.marks, state.settings.active):
        terminalreporter.write_line(line, yellow=True)


def mark_hint(markexpr: str, marks: list[str], active: bool) -> list[str]:
    """Why ``-m markexpr`` selected no GTA case: no model, or marks that do not exist."""
    import difflib
    import re

    if not active:
        return [
            f"pytest-gta: -m {markexpr!r} selected nothing: GTA cases (and their gta_* marks) are "
            "collected only with --gta-model, e.g. --gta-model=oracle --gta-data=sample"
        ]
    lines = []
    lowered = {m.lower(): m for m in marks}
    for word in dict.fromkeys(re.findall(r"\bgta\w*", markexpr)):
        if word in marks:
            continue
        close = difflib.get_close_matches(word.lower(), list(lowered), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(lowered[c] for c in close)}?" if close else ""
        lines.append(
            f"pytest-gta: no GTA case has the mark {word!r} (marks are case-sensitive){hint}"
        )
    shown = ", ".join(marks)
    lines.append(
        f"pytest-gta: the GTA marks of this run: {shown} (pytest --markers describes each)"
    )
    return lines


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop running ahead; hand this process's times and peak memory to the report.

    On the controller, then build the report and let the gates set the exit status: first
    among ``pytest_sessionfinish`` implementations, so pytest's JUnit XML (written in its own)
    gets the suite-level properties and every reporter sees the final status.
    """
    config = session.config
    state = config.stash.get(STATE, None)
    if state is None or not state.settings.active:
        return
    state.ahead.close()
    timings = dict(state.ahead.timings)
    service = state.built("similarity_service")
    if service is not None and service.load_seconds is not None:
        timings["similarity_load_s"] = service.load_seconds
    if timings or runs_here(config):
        timings.update(process_usage())
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is not None:
        if state.shard is not None:
            workeroutput["gta_shard"] = state.shard.to_json()
        if timings:
            workeroutput["gta_timings"] = timings
        return
    collector = config.pluginmanager.get_plugin(COLLECTOR)
    if collector is not None:
        if timings:
            collector.add_timings("main", timings)
        collector.finish(session)


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
        collector = session.config.pluginmanager.get_plugin(COLLECTOR)
        if collector is None:  # not a GTA run, or an xdist worker: pytest's behaviour stays
            raise
        where = exc.filename
        if where is None:
            xml = getattr(session.config.option, "xmlpath", None)
            where = "a file written at the session's end" + (
                f" (--junitxml={xml} or another plugin's)" if xml else ""
            )
        collector.write_errors.append(f"{where}: {exc.strerror or exc} (pytest_sessionfinish)")
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        return None


def runs_here(config: pytest.Config) -> bool:
    """Whether this process ran GTA cases or served the workers (its usage is worth a line)."""
    from pytest_gta.run.ahead import runs_cases

    return runs_cases(config) or config.pluginmanager.has_plugin("dsession")


def process_usage() -> dict[str, float]:
    """This process's peak resident memory (MB) and CPU seconds so far, for ``timings``."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),  # KiB on Linux
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
    }


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """Keep the episodes queued for this process running ahead (:mod:`pytest_gta.run.pipeline`)."""
    state = item.config.stash.get(STATE, None)
    if state is None or state.ahead.pipeline is None:
        return (yield)
    state.ahead.feed(item.session, item, nextitem)
    try:
        return (yield)
    finally:
        state.ahead.after(item.session)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Unregister the controller's plugins (as junitxml does); stop the server; drop the ledger.

    With Ctrl-C and SIGTERM held back (:meth:`pytest_gta.signals.Interrupts.deferred`): one
    arriving now would leave a traceback and a half-stopped service, not a faster exit.
    """
    from pytest_gta.signals import INTERRUPTS, INTERRUPTS_PLUGIN

    for name in (COLLECTOR, XDIST_BRIDGE, INTERRUPTS_PLUGIN):
        plugin = config.pluginmanager.get_plugin(name)
        if plugin is not None:
            config.pluginmanager.unregister(plugin)
    interrupts = config.stash.get(INTERRUPTS, None)
    if interrupts is None:
        _teardown(config)
        return
    with interrupts.deferred():
        _teardown(config)
    interrupts.restore()


def _teardown(config: pytest.Config) -> None:
    from pytest_gta.session.serve import stop

    stop(config)
    state = config.stash.get(STATE, None)
    service = None if state is None else state.built("similarity_service")
    if service is not None:
        service.close()
    if state is None or state.ledger_path is None or hasattr(config, "workerinput"):
        return
    import shutil

    shutil.rmtree(state.ledger_path.parent, ignore_errors=True)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    """One line saying what is evaluated, on what data, with which tools."""
    state = config.stash.get(STATE, None)
    if state is None or not state.settings.active:
        return None
    settings = state.settings
    dataset = state.dataset()
    line = (
        f"gta: model {settings.model}, modes {','.join(settings.modes)}, dataset {dataset.root} "
        f"({len(dataset)} queries, {settings.data_source})"
    )
    lines = [line]
    if settings.shard is not None:
        lines.append(
            f"gta: shard {settings.shard}: the selected cases split {settings.shard.total} ways, "
            "balanced by reference steps"
        )
    from pytest_gta.session.serve import describe

    server = describe(config)
    if server is not None:
        lines.append(
            f"gta: model server {' '.join(server['command'])} at {server['url']} (ready in "
            f"{server['start_s']} s; log: {server['log']})"
        )
    if settings.data_source.startswith(SAMPLE_FALLBACK):
        lines.append(
            f"gta: {settings.model} runs on the bundled sample because no dataset is installed; "
            "get the real one with pytest --gta-download"
        )
    if state.uses_tools():
        lines.append("gta: tool backends " + ", ".join(b.name for b in state.toolset().backends))
        routes = state.tool_routes()
        lines.append("gta: tools " + ", ".join(f"{t}: {b}" for t, b in routes.items()))
        for name, details in state.tool_backend_details().items():
            isolation = details.get("isolation") if isinstance(details, dict) else None
            if isinstance(isolation, dict) and isolation.get("summary"):
                lines.append(f"gta: model-written code ({name}) runs in {isolation['summary']}")
                if isolation.get("isolated") is False:
                    lines.append(
                        f"gta: WARNING: model-written code ({name}) is NOT isolated: it can read "
                        "the dataset's answers; results are marked not isolated in the report"
                    )
    from pytest_gta.outward import clean_text, mask_url

    # Tool specs and server commands can carry a URL with a password (agentlego=http://u:p@h).
    return [clean_text(mask_url(line)) for line in lines]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize every test that asks for ``gta_case`` with the selected cases."""
    if "gta_case" not in metafunc.fixturenames:
        return
    state = state_of(metafunc.config)
    params = [
        pytest.param(case, id=case.id, marks=[getattr(pytest.mark, m) for m in case.marks()])
        for case in state.cases()
    ]
    metafunc.parametrize("gta_case", params)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """With ``--gta-model`` and no GTA test of the user's own, collect the bundled suite.

    Runs first so that ``-k``, ``-m``, ``--lf`` and xdist see the GTA items like any other.
    """
    state = config.stash.get(STATE, None)
    if state is None or not state.settings.active:
        return
    if any("gta_case" in getattr(item, "fixturenames", ()) for item in items):
        return
    module = pytest.Module.from_parent(session, path=SUITE, nodeid=SUITE_NODEID)
    items.extend(session.genitems(module))


# A second implementation of the hook (see pytest_runtest_makereport_clean for ``specname``).
@pytest.hookimpl(trylast=True, specname="pytest_collection_modifyitems")
def pytest_collection_modifyitems_regressions(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """``--gta-rerun-regressions``: keep the cases the last comparison found regressed.

    Like ``--lf`` with its default ``--lfnf=all``: when no regression was recorded, every
    selected case runs, and the collection line says why.
    """
    state = config.stash.get(STATE, None)
    if state is None or not state.settings.active or not state.settings.rerun_regressions:
        return
    from pytest_gta.session.collector import REGRESSIONS_CACHE_KEY

    cache = getattr(config, "cache", None)
    recorded = cache.get(REGRESSIONS_CACHE_KEY, None) if cache is not None else None
    wanted = {n for n in recorded if isinstance(n, str)} if isinstance(recorded, list) else set()
    if not wanted:
        state.selection_notes.append(
            "gta: no regressed case recorded by a previous run with --gta-baseline; running "
            "every selected case (--gta-rerun-regressions)"
        )
        return
    kept = [
        item
        for item in items
        if item.nodeid in wanted or "gta_case" not in getattr(item, "fixturenames", ())
    ]
    dropped = [item for item in items if item not in kept]
    state.selection_notes.append(
        f"gta: rerunning the {len(items) - len(dropped)} case(s) that regressed against the "
        "baseline in the last run (--gta-rerun-regressions)"
    )
    if dropped:
        items[:] = kept
        config.hook.pytest_deselected(items=dropped)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """``--gta-shard=K/N``: keep this shard's share of the selected cases.

    Here rather than in a ``trylast`` ``pytest_collection_modifyitems``: ``--lf`` deselects in a
    hook wrapper, after every plain implementation of that hook, so the split would be made
    before it. ``tryfirst``, so the terminal's "collected ... deselected" line and xdist (which
    sends the worker's collection to the controller from this hook) see the shard's items.
    """
    state = session.config.stash.get(STATE, None)
    if state is None or not state.settings.active or state.settings.shard is None:
        return
    from pytest_gta.shard import shard_items

    kept, dropped, state.shard = shard_items(session.items, state.settings.shard)
    collector = session.config.pluginmanager.get_plugin(COLLECTOR)
    if collector is not None:
        collector.shard = state.shard.to_json()
    if dropped:
        session.items[:] = kept
        session.config.hook.pytest_deselected(items=dropped)


def pytest_report_collectionfinish(config: pytest.Config) -> str | None:
    """How many of the selected cases this shard runs (after the collection line)."""
    state = config.stash.get(STATE, None)
    if state is None:
        return None
    lines = list(state.selection_notes)
    shard = state.shard
    if shard is not None:
        lines.append(f"gta: shard {shard.shard}: {len(shard.cases)} of {shard.selected} cases")
    return "\n".join(lines) or None


#: Properties for the report of the phase that produced them, not for the item: the case's
#: detail payload (too big for JUnit XML, which writes the item's ``user_properties``) and a
#: budget stop (not a property of the case).
REPORT_ONLY = pytest.StashKey[list[tuple[str, Any]]]()


def report_only(item: pytest.Item) -> list[tuple[str, Any]]:
    """Where a fixture puts properties for the report of the phase it runs in."""
    return item.stash.setdefault(REPORT_ONLY, [])


#: pytest-html extras (``report.extras``) for the report of the phase that made them.
REPORT_EXTRAS = pytest.StashKey[list[dict[str, Any]]]()


def report_extras(item: pytest.Item) -> list[dict[str, Any]]:
    """Where a fixture puts pytest-html extras for the report of the phase it runs in."""
    return item.stash.setdefault(REPORT_EXTRAS, [])


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Put the phase's report-only properties on its report, in ``user_properties``.

    The innermost wrapper, so every other plugin's ``makereport`` and ``logreport`` (pytest-html,
    a project's own reporter) finds them there, as our collector does; nothing rewrites them.
    """
    report: pytest.TestReport = yield
    extra = item.stash.get(REPORT_ONLY, None)
    if extra:
        report.user_properties.extend(extra)
        extra.clear()
    extras = item.stash.get(REPORT_EXTRAS, None)
    if extras:
        # pytest-html's documented attribute; its own makereport keeps what is already there.
        report.extras = [*getattr(report, "extras", []), *extras]  # type: ignore[attr-defined]
        extras.clear()
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
    state = item.config.stash.get(STATE, None)
    if state is not None and state.settings.active:
        from pytest_gta.outward import clean_report

        clean_report(report)
    return report


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> Any:
    """Load models and batch generation before the first case (:mod:`pytest_gta.run.ahead`)."""
    state = session.config.stash.get(STATE, None)
    if state is not None and state.settings.active and not session.shouldstop:
        state.ahead.run(session)
    return (yield)


@pytest.hookimpl(trylast=True)
def pytest_gta_make_model(
    config: pytest.Config, spec: str, context: ModelContext
) -> ModelAdapter | RecordedSource:
    """Built-in: look the provider up in the ``pytest_gta.models`` registry."""
    from pytest_gta.models.base import make_model

    return make_model(spec, context)


@pytest.hookimpl(trylast=True)
def pytest_gta_make_tool(
    config: pytest.Config, spec: ToolSpec, context: ToolBackendContext
) -> ToolBackend:
    """Built-in: look the backend up in the ``pytest_gta.tools`` registry."""
    from pytest_gta.tools import make_backend

    return make_backend(spec, context)


# ------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="session")
def gta_settings(pytestconfig: pytest.Config) -> GtaSettings:
    """The resolved ``--gta-*`` settings."""
    return state_of(pytestconfig).settings


@pytest.fixture(scope="session")
def gta_dataset(pytestconfig: pytest.Config) -> Dataset:
    """The loaded dataset (``--gta-data``)."""
    return state_of(pytestconfig).dataset()


@pytest.fixture(scope="session")
def gta_model(pytestconfig: pytest.Config) -> BaseModelAdapter | BaseRecordedSource:
    """The model under evaluation (``--gta-model``); skips when none is given."""
    return state_of(pytestconfig).model()


@pytest.fixture(scope="session")
def gta_tools(pytestconfig: pytest.Config) -> ToolSet:
    """The tool backends (``--gta-tools``), in priority order."""
    return state_of(pytestconfig).toolset()


@pytest.fixture(scope="session")
def gta_scorer(pytestconfig: pytest.Config) -> Scorer:
    """Scores episodes with the official formulas."""
    return state_of(pytestconfig).scorer()


@pytest.fixture(scope="session")
def gta_output_dir(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where tools write the files they produce during this session."""
    return state_of(pytestconfig).output_dir(tmp_path_factory)


@pytest.fixture
def gta_case() -> Case:
    """One (query, mode) case; pytest-gta parametrizes every test that requests it."""
    raise pytest.UsageError("gta_case is parametrized by pytest-gta; it cannot be used directly")


@pytest.fixture
def gta_run(
    request: pytest.FixtureRequest,
    pytestconfig: pytest.Config,
    gta_dataset: Dataset,
    gta_model: BaseModelAdapter | BaseRecordedSource,
    gta_scorer: Scorer,
    gta_output_dir: Path,
) -> Callable[[Case], CaseResult]:
    """A function that runs and scores a case.

    Model or tool infrastructure failures fail the calling phase with a clean message; call it
    from a fixture (as ``gta_result`` does) to get pytest's *error* outcome for them.
    """
    from pytest_gta.detail import STOPPED_KEY
    from pytest_gta.errors import GtaBudgetExhausted, GtaInfrastructureError, GtaUnavailableError
    from pytest_gta.models.base import BaseModelAdapter
    from pytest_gta.run.runner import run_case

    state = state_of(pytestconfig)

    def run(case: Case) -> CaseResult:
        tools = None
        model = gta_model
        if case.mode == "e2e" and isinstance(gta_model, BaseModelAdapter):
            tools = state.toolset()
        elif case.mode == "step" and isinstance(gta_model, BaseModelAdapter):
            model = state.ahead.step_model or gta_model
        try:
            return run_case(
                case,
                gta_dataset,
                model,
                tools,
                gta_scorer,
                gta_output_dir,
                max_turns=state.settings.max_turns,
                ahead=state.ahead.take(case) if case.mode == "e2e" else None,
            )
        except GtaBudgetExhausted as exc:
            # Stop handing out cases; with xdist the controller stops once workers report it.
            request.session.shouldstop = f"pytest-gta: {exc}"
            report_only(request.node).append((STOPPED_KEY, str(exc)))
            skip, message = True, f"{case.id}: {exc}"
        except GtaUnavailableError as exc:
            skip, message = True, str(exc)
        except GtaInfrastructureError as exc:
            skip, message = False, f"{case.id}: infrastructure error: {exc}"
        # Outside the except blocks, so the report shows the message, not a chained traceback.
        if skip:
            pytest.skip(message)
        pytest.fail(message, pytrace=False)

    return run


@pytest.fixture
def gta_result(
    request: pytest.FixtureRequest,
    gta_case: Case,
    gta_model: BaseModelAdapter | BaseRecordedSource,
    gta_run: Callable[[Case], CaseResult],
    gta_dataset: Dataset,
) -> CaseResult:
    """The scored result of this test's case, produced during setup.

    Running in setup is what turns infrastructure failures into pytest errors rather than
    failures. The flat per-case properties go to the item (every phase's report, JUnit XML);
    the detail payload (steps, replies, score) to the setup report's ``user_properties`` only.
    """
    from pytest_gta.detail import DETAIL_KEY
    from pytest_gta.run.runner import identity_properties

    request.node.user_properties.extend(identity_properties(gta_case, gta_model.name))
    result = gta_run(gta_case)
    request.node.user_properties.extend(result.properties())
    detail = result.detail()
    state = state_of(request.config)
    store = state.image_store()
    if store is not None:
        from pytest_gta.report.images import store_case_images

        detail["images"] = store_case_images(
            store,
            [f.path for f in gta_case.query.files],
            [*detail["steps"], *result.gold],
            [gta_dataset.root, state.output_dir()],
        )
        if store.problems:
            detail["image_problems"] = store.problems[-5:]
            store.problems.clear()
    report_only(request.node).append((DETAIL_KEY, detail))
    if request.config.getoption("htmlpath", None):
        from pytest_gta.session.html_hooks import case_extras

        report_extras(request.node).extend(
            case_extras(gta_case, result, detail, store, state.settings)
        )
    return result
