"""What pytest's hooks and fixtures do in a GTA run: the session layer's side of the plugin.

:mod:`pytest_gta.plugin` is the entry module every pytest process loads, GTA or not; each of
its hooks hands over to the :class:`GtaSession` of the run, which owns the session's objects
(the :class:`~pytest_gta.session.state.GtaState` and the run's benchmark, which builds its
collector, the xdist bridge and pytest-html's hooks) and passes each what it needs through its
constructor. Nothing here is looked up by a plugin name or set on another object from outside.
"""

from __future__ import annotations

import contextlib
import dataclasses
import resource
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from pytest_gta import signals
from pytest_gta.case import Case, MarkRegistry
from pytest_gta.errors import GtaBudgetExhausted, GtaInfrastructureError, GtaUnavailableError
from pytest_gta.flags import OPT_BASELINE, OPT_RERUN_REGRESSIONS
from pytest_gta.models.base import (
    ModelAdapter,
    ModelContext,
    RecordedSource,
    make_model,
)
from pytest_gta.options import GtaSettings
from pytest_gta.outward import clean_text, install_log_filter, mask_url
from pytest_gta.run.agent_under_test import AgentFailed
from pytest_gta.run.ahead import runs_cases
from pytest_gta.run.benchmark import Benchmark, BenchmarkContext, from_registry
from pytest_gta.run.runner import CaseRun, run_case
from pytest_gta.session import model_server, project_tests, xdist
from pytest_gta.session.collector import REGRESSIONS_CACHE_KEY, Collector
from pytest_gta.session.html_hooks import PLUGIN_NAME as HTML_PLUGIN
from pytest_gta.session.html_hooks import GtaHtmlHooks
from pytest_gta.session.keys import STOPPED_KEY, report_only
from pytest_gta.session.state import GtaState
from pytest_gta.tools import ToolBackend, ToolBackendContext, ToolSpec, make_backend

T = TypeVar("T")

#: Names of the controller-only plugin objects, unregistered in ``pytest_unconfigure``.
COLLECTOR = "gta-collector"
XDIST_BRIDGE = "gta-xdist"
CHECK = "gta-collection-check"


def make_model_builtin(spec: str, context: ModelContext) -> ModelAdapter | RecordedSource:
    """The built-in ``pytest_gta_make_model``: the ``pytest_gta.models`` registry."""
    return make_model(spec, context)


def make_tool_builtin(spec: ToolSpec, context: ToolBackendContext) -> ToolBackend:
    """The built-in ``pytest_gta_make_tool``: the ``pytest_gta.tools`` registry."""
    return make_backend(spec, context)


def make_benchmark_builtin(context: BenchmarkContext) -> Benchmark:
    """The built-in ``pytest_gta_make_benchmark``: the ``pytest_gta.benchmarks`` registry."""
    return from_registry(context)


def make_session(config: pytest.Config, settings: GtaSettings, marks: MarkRegistry) -> GtaSession:
    """The run's session, whatever its benchmark."""
    return GtaSession(config, settings, marks)


class GtaSession:
    """A pytest session's GTA side: built in ``pytest_configure``, asked by every hook.

    What a task family does (its cases, how one runs, how the run is reported) is its
    :class:`~pytest_gta.run.benchmark.Benchmark`'s, chosen from the data by the
    ``pytest_gta_make_benchmark`` hook; everything else of the run is here, once.
    """

    #: The parameter every GTA test asks for (the bundled suites' and a project's own).
    fixture = "gta_case"

    def __init__(self, config: pytest.Config, settings: GtaSettings, marks: MarkRegistry) -> None:
        self.config = config
        # The benchmark, chosen below, shows its tasks to the services as queries (if it does).
        self.state = GtaState(config, settings, marks, view=lambda: self.benchmark.queries())
        context = BenchmarkContext(config=config, data=settings.data.path, services=self.state)
        self.benchmark: Benchmark = config.hook.pytest_gta_make_benchmark(
            config=config, context=context
        )
        #: The controller's collector, the xdist bridge and the selection check (none on a
        #: worker): the same for every benchmark, which gives only its report's side.
        self.collector: Collector | None = None
        self.bridge: xdist.XdistBridge | None = None
        self._check: xdist.CollectionCheck | None = None

    @property
    def suite(self) -> Path:
        """The bundled test module of the run's benchmark."""
        return self.benchmark.suite

    # -- start and stop ------------------------------------------------------------------------
    def start(self) -> None:
        """An active run: signals and the ledger, then what the benchmark checks and starts."""
        config, state = self.config, self.state
        install_log_filter()
        xdist.announce_worker(config)
        signals.install(config, self.halt, worker=xdist.is_worker(config))
        state.ledger_path = xdist.ledger_from_controller(config)
        self.benchmark.start()
        if xdist.is_worker(config):
            return
        self.collector = Collector(config, self.benchmark.reporting())
        manager = config.pluginmanager
        manager.register(self.collector, COLLECTOR)
        if manager.hasplugin("xdist"):
            self.bridge = xdist.XdistBridge(
                self.collector, self._for_workers, self.benchmark.runs_ahead
            )
            manager.register(self.bridge, XDIST_BRIDGE)
            # Only workers collect under xdist: the controller checks their selections.
            self._check = xdist.CollectionCheck(self.benchmark.check_selection)
            manager.register(self._check, CHECK)
        if manager.hasplugin("html"):
            manager.register(GtaHtmlHooks(config, self.collector), HTML_PLUGIN)

    def _for_workers(self) -> dict[str, Any]:
        """What a starting xdist worker gets: the ledger, images, model server, the benchmark's."""
        state = self.state
        sent: dict[str, Any] = {}
        if state.ledger_path is not None:
            sent[xdist.LEDGER_INPUT] = str(state.ledger_path)
        store = state.image_store()
        if store is not None:
            sent[xdist.IMAGES_INPUT] = str(store.root)
        server = self.config.stash.get(model_server.SERVER, None)
        if server is not None:
            sent[xdist.SERVED_INPUT] = dataclasses.asdict(server.plan.served)
        sent.update(self.benchmark.for_workers())
        return sent

    def halt(self, cause: str) -> None:
        """The run was interrupted: no new model request here, and none from the xdist workers.

        Called from a signal handler (:mod:`pytest_gta.signals`): flags and signals only.
        """
        self.state.ahead.halt(cause)
        self.benchmark.halt(cause)
        if self.bridge is not None:
            self.bridge.terminate_workers()

    def unconfigure(self) -> None:
        """Unregister the controller's plugins (as junitxml does); stop the server and services.

        With Ctrl-C and SIGTERM held back (:meth:`pytest_gta.signals.Interrupts.deferred`): one
        arriving now would leave a traceback and a half-stopped service, not a faster exit.
        """
        config = self.config
        interrupts = config.stash.get(signals.INTERRUPTS, None)
        for plugin in (self.collector, self.bridge, self._check, interrupts):
            if plugin is not None and config.pluginmanager.is_registered(plugin):
                config.pluginmanager.unregister(plugin)
        if interrupts is None:
            self._teardown()
            return
        with interrupts.deferred():
            self._teardown()
        interrupts.restore()

    def _teardown(self) -> None:
        self.benchmark.close()
        model_server.stop(self.config)
        state = self.state
        # Also where the session never finished (a usage error after the agent's sandbox began
        # to start): nothing of it outlives pytest.
        state.close_agent_services()
        service = state.built_similarity_service()
        if service is not None:
            service.close()
        model = state.built_model()
        if model is not None:
            model.close()
        if state.ledger_path is None or xdist.is_worker(self.config):
            return
        shutil.rmtree(state.ledger_path.parent, ignore_errors=True)

    # -- the terminal --------------------------------------------------------------------------
    def header(self) -> list[str]:
        """The benchmark's lines and the project's configuration (credentials masked)."""
        lines = self.benchmark.header()
        configuration = project_tests.configuration_note(self.config)
        if configuration is not None:
            lines.append(configuration)
        # Tool specs and server commands can carry a URL with a password (agentlego=http://u:p@h).
        return [clean_text(mask_url(line)) for line in lines]

    def collection_notes(self) -> str | None:
        """How many of the selected cases this shard runs (after the collection line)."""
        lines = list(self.state.selection_notes)
        shard = self.state.shard
        if shard is not None:
            lines.append(f"gta: shard {shard.shard}: {len(shard.cases)} of {shard.selected} cases")
        return "\n".join(lines) or None

    # -- collection ----------------------------------------------------------------------------
    def params(self) -> list[Any]:
        """``gta_case``'s parameters: the benchmark's selected cases with their marks."""
        return self.benchmark.params()

    def _keep_regressed(self, items: list[pytest.Item]) -> None:
        """``--gta-rerun-regressions``: keep the cases the last comparison found regressed.

        Whatever the benchmark: the collector recorded their node ids
        (:data:`~pytest_gta.session.collector.REGRESSIONS_CACHE_KEY`). Like ``--lf`` with its
        default ``--lfnf=all``: when no regression was recorded, every selected case runs,
        and the collection line says why.
        """
        notes, config = self.state.selection_notes, self.config
        cache = getattr(config, "cache", None)
        recorded = cache.get(REGRESSIONS_CACHE_KEY, None) if cache is not None else None
        wanted = (
            {n for n in recorded if isinstance(n, str)} if isinstance(recorded, list) else set()
        )
        if not wanted:
            notes.append(
                f"gta: no regressed case recorded by a previous run with {OPT_BASELINE}; running "
                f"every selected case ({OPT_RERUN_REGRESSIONS})"
            )
            return
        kept = [
            item
            for item in items
            if item.nodeid in wanted or "gta_case" not in getattr(item, "fixturenames", ())
        ]
        dropped = [item for item in items if item not in kept]
        notes.append(
            f"gta: rerunning the {len(items) - len(dropped)} case(s) that regressed against the "
            f"baseline in the last run ({OPT_RERUN_REGRESSIONS})"
        )
        if dropped:
            items[:] = kept
            config.hook.pytest_deselected(items=dropped)

    def narrow(self, items: list[pytest.Item]) -> None:
        """After every other selection: the regressed cases, then the project's tests.

        Tests that are not GTA cases (a project's own, collected from the directory pytest runs
        in) are deselected under ``--gta-only``, and named either way: on the collection line
        and in the report's notes (sent from an xdist worker to the controller), by the shard
        that runs them (the first) only.
        """
        settings = self.state.settings
        if settings.baseline.rerun_regressions:
            self._keep_regressed(items)
        only = settings.cases.only
        foreign = project_tests.split_items(items, self.fixture, only, self.config)
        shard = settings.cases.shard
        if not foreign or (not only and shard is not None and shard.index != 1):
            return  # a later shard drops them (they run in shard 1 only)
        note = project_tests.project_note(foreign, deselected=only)
        self.state.selection_notes.append(f"gta: {'' if only else 'WARNING: '}{note}")
        if not xdist.send_to_controller(self.config, xdist.PROJECT_OUTPUT, [note]):
            if self.collector is not None:
                self.collector.add_notes([note])

    def collection_finish(self, session: pytest.Session) -> None:
        """The selection is final (``-k``, ``-m``, ``--lf`` applied): keep this shard's share.

        Then the benchmark checks that what is left can run. Under xdist the controller checks
        each worker's collection instead (:class:`~pytest_gta.session.xdist.CollectionCheck`):
        a worker may not refuse a run.
        """
        self.benchmark.keep_shard(session)
        if self.collector is not None and self.state.shard is not None:
            self.collector.set_shard(self.state.shard.to_json())
        if not xdist.is_worker(self.config):
            self.benchmark.check_selection([item.nodeid for item in session.items])

    # -- running -------------------------------------------------------------------------------
    def running_ahead(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> contextlib.AbstractContextManager[None]:
        """Keep the cases queued for this process running ahead."""
        return self.benchmark.running_ahead(item, nextitem)

    def case_runner(self, request: pytest.FixtureRequest) -> Callable[[Case], CaseRun]:
        """``gta_run``: runs and scores a case; infrastructure failures end the calling phase.

        A budget stop or an unavailable service skips; anything else that broke the harness
        fails with a clean message (called from a fixture, that is pytest's *error* outcome).
        """
        ctx = self.state.run_context()
        ahead = self.state.ahead

        def run(case: Case) -> CaseRun:
            return guarded(request, case.id, lambda: run_case(case, ctx, ahead))

        return run

    def result(self, request: pytest.FixtureRequest, param: Any) -> Any:
        """``gta_result``: the benchmark produces and judges the case of ``param``."""
        return self.benchmark.result(request, param)

    # -- the end -------------------------------------------------------------------------------
    def finish(self, session: pytest.Session) -> None:
        """Stop the benchmark's work; hand this process's times and peak memory to the report.

        On the controller, then build the report and let the gates set the exit status.
        """
        state, config = self.state, self.config
        timings = self.benchmark.finish(session)  # what runs ahead stops before its services
        state.close_agent_services()
        if timings or runs_cases(config) or config.pluginmanager.has_plugin("dsession"):
            timings.update(process_usage())
        if xdist.is_worker(config):
            if state.shard is not None:
                xdist.send_to_controller(config, xdist.SHARD_OUTPUT, state.shard.to_json())
            if timings:
                xdist.send_to_controller(config, xdist.TIMINGS_OUTPUT, timings)
            return
        if self.collector is not None:
            if timings:
                self.collector.add_timings("main", timings)
            self.collector.finish(session)

    def unwritable(self, session: pytest.Session, exc: OSError) -> bool:
        """A file another plugin could not write at the end: an error shown after the tables.

        ``False`` where the error is not ours to report (an xdist worker): pytest's stays.
        """
        if self.collector is None:
            return False
        where = exc.filename
        if where is None:
            xml = getattr(session.config.option, "xmlpath", None)
            where = "a file written at the session's end" + (
                f" (--junitxml={xml} or another plugin's)" if xml else ""
            )
        self.collector.write_errors.append(f"{where}: {exc.strerror or exc} (pytest_sessionfinish)")
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        return True


def guarded(request: pytest.FixtureRequest, case_id: str, work: Callable[[], T]) -> T:
    """``work()``; a harness failure ends the calling phase with a clean message.

    A budget stop or an unavailable service skips; anything else that broke the harness or
    the agent under test fails (called from a fixture, that is pytest's *error* outcome).
    """
    try:
        return work()
    except GtaBudgetExhausted as exc:
        # Stop handing out cases; with xdist the controller stops once workers report it.
        request.session.shouldstop = f"pytest-gta: {exc}"
        report_only(request.node).append((STOPPED_KEY, str(exc)))
        skip, message = True, f"{case_id}: {exc}"
    except GtaUnavailableError as exc:
        skip, message = True, str(exc)
    except AgentFailed as exc:  # the agent under test raised, crashed or timed out
        said = f"{exc.detail}\n" if exc.detail else ""
        skip, message = False, f"{said}{case_id}: agent error: {exc}"
    except GtaInfrastructureError as exc:
        skip, message = False, f"{case_id}: infrastructure error: {exc}"
    # Outside the except blocks, so the report shows the message, not a chained traceback.
    if skip:
        pytest.skip(message)
    pytest.fail(message, pytrace=False)


def process_usage() -> dict[str, float]:
    """This process's peak resident memory (MB) and CPU seconds so far, for ``timings``."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),  # KiB on Linux
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
    }
