"""What pytest's hooks and fixtures do in a GTA run: the session layer's side of the plugin.

:mod:`pytest_gta.plugin` is the entry module every pytest process loads, GTA or not; each of
its hooks hands over to the :class:`GtaSession` of the run, which owns the session's objects
(the :class:`~pytest_gta.session.state.GtaState`, the collector, the xdist bridge, pytest-html's
hooks) and passes each what it needs through its constructor. Nothing here is looked up by a
plugin name or set on another object from outside.
"""

from __future__ import annotations

import contextlib
import dataclasses
import resource
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from pytest_gta import signals
from pytest_gta.case import Case, MarkRegistry
from pytest_gta.dataset import Dataset
from pytest_gta.erratum import shipped_erratum
from pytest_gta.errors import GtaBudgetExhausted, GtaInfrastructureError, GtaUnavailableError
from pytest_gta.flags import OPT_BASELINE, OPT_DOWNLOAD, OPT_RERUN_REGRESSIONS
from pytest_gta.models.base import (
    BaseModelAdapter,
    BaseRecordedSource,
    ModelAdapter,
    ModelContext,
    RecordedSource,
    make_model,
)
from pytest_gta.options import GtaSettings
from pytest_gta.options.data import SAMPLE_FALLBACK
from pytest_gta.outward import clean_text, install_log_filter, mask_url
from pytest_gta.progress import say
from pytest_gta.report.images import store_case_images
from pytest_gta.results.case import identity_properties, result_properties
from pytest_gta.results.io import CaseWire, case_to_wire
from pytest_gta.run.agent_under_test import AgentFailed
from pytest_gta.run.ahead import runs_cases
from pytest_gta.run.runner import CaseRun, run_case
from pytest_gta.session import model_server, project_tests, xdist
from pytest_gta.session.collector import REGRESSIONS_CACHE_KEY, GtaCollector
from pytest_gta.session.html_hooks import PLUGIN_NAME as HTML_PLUGIN
from pytest_gta.session.html_hooks import GtaHtmlHooks, case_extras
from pytest_gta.session.keys import DETAIL_KEY, STOPPED_KEY, report_extras, report_only
from pytest_gta.session.state import GtaState
from pytest_gta.shard import shard_items
from pytest_gta.tools import ToolBackend, ToolBackendContext, ToolSpec, make_backend

T = TypeVar("T")

#: Names of the controller-only plugin objects, unregistered in ``pytest_unconfigure``.
COLLECTOR = "gta-collector"
XDIST_BRIDGE = "gta-xdist"


def make_model_builtin(spec: str, context: ModelContext) -> ModelAdapter | RecordedSource:
    """The built-in ``pytest_gta_make_model``: the ``pytest_gta.models`` registry."""
    return make_model(spec, context)


def make_tool_builtin(spec: ToolSpec, context: ToolBackendContext) -> ToolBackend:
    """The built-in ``pytest_gta_make_tool``: the ``pytest_gta.tools`` registry."""
    return make_backend(spec, context)


class GtaSession:
    """A pytest session's GTA side: built in ``pytest_configure``, asked by every hook."""

    #: The bundled test module collected when no test of the user's asks for :attr:`fixture`.
    suite = Path(__file__).resolve().parent.parent / "suite.py"
    fixture = "gta_case"

    def __init__(self, config: pytest.Config, settings: GtaSettings, marks: MarkRegistry) -> None:
        self.config = config
        self.state = GtaState(config, settings, marks)
        self.collector: GtaCollector | None = None
        self.bridge: xdist.XdistBridge | None = None

    # -- start and stop ------------------------------------------------------------------------
    def start(self) -> None:
        """An active run: validate everything, start the server, register the controller's parts."""
        config, state = self.config, self.state
        install_log_filter()
        xdist.announce_worker(config)
        signals.install(config, self.halt, worker=xdist.is_worker(config))
        state.ledger_path = xdist.ledger_from_controller(config)
        server = None
        workerinput = xdist.worker_input(config)
        if workerinput is not None:
            state.settings = model_server.for_worker(
                state.settings, workerinput.get(xdist.SERVED_INPUT)
            )
        else:
            server = model_server.plan(config, state.settings)
            if server is not None:
                state.settings = server.served.settings(state.settings)
        settings = state.settings
        state.validate()
        if server is not None and not config.option.collectonly:
            # After validation (a typo never waits for weights to load), before any case runs.
            model_server.start(config, settings, server)
        if workerinput is not None:
            return
        self.collector = GtaCollector(
            config,
            settings,
            state.dataset,
            state.run_info,
            lambda: (state.baseline(), state.baseline_differences),
            state.image_store,
        )
        config.pluginmanager.register(self.collector, COLLECTOR)
        if config.pluginmanager.hasplugin("xdist"):
            self.bridge = xdist.XdistBridge(self.collector, self._for_workers, state.runs_ahead)
            config.pluginmanager.register(self.bridge, XDIST_BRIDGE)
        if config.pluginmanager.hasplugin("html"):
            config.pluginmanager.register(GtaHtmlHooks(config, self.collector), HTML_PLUGIN)

    def _for_workers(self) -> dict[str, Any]:
        """What a starting xdist worker gets: the ledger, images, model server, similarity."""
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
        shared = state.shared_similarity()
        if shared is not None and state.needs_similarity():
            sent[xdist.SIMILARITY_INPUT] = list(shared)
        elif state.needs_similarity() and not self.config.option.collectonly:
            # Loads once, in this process, while the workers start (pytest_gta.scoring.service).
            if state.built("similarity_service") is None:
                say(
                    self.config,
                    f"loading the similarity model {state.settings.scoring.sim_model} once, in "
                    "this process, for every worker ...",
                )
            service = state.similarity_service()
            sent[xdist.SIMILARITY_INPUT] = [service.url, service.token]
        return sent

    def halt(self, cause: str) -> None:
        """The run was interrupted: no new model request here, and none from the xdist workers.

        Called from a signal handler (:mod:`pytest_gta.signals`): flags and signals only.
        """
        self.state.ahead.halt(cause)
        if self.bridge is not None:
            self.bridge.terminate_workers()

    def unconfigure(self) -> None:
        """Unregister the controller's plugins (as junitxml does); stop the server and services.

        With Ctrl-C and SIGTERM held back (:meth:`pytest_gta.signals.Interrupts.deferred`): one
        arriving now would leave a traceback and a half-stopped service, not a faster exit.
        """
        config = self.config
        for plugin in (self.collector, self.bridge, config.stash.get(signals.INTERRUPTS, None)):
            if plugin is not None and config.pluginmanager.is_registered(plugin):
                config.pluginmanager.unregister(plugin)
        interrupts = config.stash.get(signals.INTERRUPTS, None)
        if interrupts is None:
            self._teardown()
            return
        with interrupts.deferred():
            self._teardown()
        interrupts.restore()

    def _teardown(self) -> None:
        model_server.stop(self.config)
        state = self.state
        # Also where the session never finished (a usage error after the agent's sandbox began
        # to start): nothing of it outlives pytest.
        state.close_agent_services()
        service = state.built("similarity_service")
        if service is not None:
            service.close()
        model = state.built("model")
        if model is not None:
            model.close()
        if state.ledger_path is None or xdist.is_worker(self.config):
            return
        shutil.rmtree(state.ledger_path.parent, ignore_errors=True)

    # -- the terminal --------------------------------------------------------------------------
    def header(self) -> list[str]:
        """What is evaluated, on what data, with which tools (credentials in URLs masked)."""
        state, config = self.state, self.config
        settings = state.settings
        dataset = state.dataset()
        lines = [
            f"gta: model {settings.model.name}, modes {','.join(settings.cases.modes)}, dataset "
            f"{dataset.root} ({len(dataset)} queries, {settings.data.source})"
        ]
        agent = settings.agent
        if agent.spec is not None:
            kind = "callable" if agent.callable is not None else "command"
            lines.append(
                f"gta: agent under test ({kind}): {agent.spec}, beside the model "
                f"{settings.model.name} (timeout {agent.timeout:g} s per case)"
            )
            ran = agent.callable or agent.command
            if ran != agent.spec:
                lines.append(f"gta: agent runs as: {ran}")
            lines += self._agent_isolation_lines()
        shard = settings.cases.shard
        if shard is not None:
            lines.append(
                f"gta: shard {shard}: the selected cases split {shard.total} "
                "ways, balanced by reference steps"
            )
        server = model_server.describe(config)
        if server is not None:
            lines.append(
                f"gta: model server {' '.join(server['command'])} at {server['url']} (ready in "
                f"{server['start_s']} s; log: {server['log']})"
            )
        if settings.data.source.startswith(SAMPLE_FALLBACK):
            lines.append(
                f"gta: {settings.model.name} runs on the bundled sample because no dataset is "
                f"installed; get the real one with pytest {OPT_DOWNLOAD}"
            )
        if state.uses_tools():
            lines += self._tool_lines()
        configuration = project_tests.configuration_note(config)
        if configuration is not None:
            lines.append(configuration)
        # Tool specs and server commands can carry a URL with a password (agentlego=http://u:p@h).
        return [clean_text(mask_url(line)) for line in lines]

    def _agent_isolation_lines(self) -> list[str]:
        """The sandbox's lines, or that they follow: it is built beside collection."""
        return [f"gta: {line}" for line in self.state.agent_header()]

    def _tool_lines(self) -> list[str]:
        state = self.state
        lines = ["gta: tool backends " + ", ".join(b.name for b in state.toolset().backends)]
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
        return lines

    def collection_notes(self) -> str | None:
        """How many of the selected cases this shard runs (after the collection line)."""
        lines = list(self.state.selection_notes)
        shard = self.state.shard
        if shard is not None:
            lines.append(f"gta: shard {shard.shard}: {len(shard.cases)} of {shard.selected} cases")
        return "\n".join(lines) or None

    # -- collection ----------------------------------------------------------------------------
    def params(self) -> list[Any]:
        """``gta_case``'s parameters: the selected cases with their marks."""
        return [
            pytest.param(case, id=case.id, marks=[getattr(pytest.mark, m) for m in case.marks()])
            for case in self.state.cases()
        ]

    def narrow(self, items: list[pytest.Item]) -> None:
        """After every other selection: ``--gta-rerun-regressions``, then the project's tests.

        Tests that are not GTA cases (a project's own, collected from the directory pytest runs
        in) are deselected under ``--gta-only``, and named either way: on the collection line
        and in the report's notes (sent from an xdist worker to the controller), by the shard
        that runs them (the first) only.
        """
        settings = self.state.settings
        if settings.baseline.rerun_regressions:
            self.rerun_regressions(items)
        only = settings.cases.only
        foreign = project_tests.split_items(items, self.fixture, only, self.config)
        shard = settings.cases.shard
        if not foreign or (not only and shard is not None and shard.index != 1):
            return  # a later shard drops them (they run in shard 1 only)
        note = project_tests.project_note(foreign, deselected=only)
        self.state.selection_notes.append(f"gta: {'' if only else 'WARNING: '}{note}")
        if not xdist.send_to_controller(self.config, xdist.PROJECT_OUTPUT, [note]):
            self.add_project_notes([note])

    def add_project_notes(self, notes: list[str]) -> None:
        """Notes on the project's tests, for the report (the atomic collector's notes)."""
        if self.collector is not None:
            self.collector.add_notes(notes)

    def rerun_regressions(self, items: list[pytest.Item]) -> None:
        """``--gta-rerun-regressions``: keep the cases the last comparison found regressed.

        Like ``--lf`` with its default ``--lfnf=all``: when no regression was recorded, every
        selected case runs, and the collection line says why.
        """
        state, config = self.state, self.config
        cache = getattr(config, "cache", None)
        recorded = cache.get(REGRESSIONS_CACHE_KEY, None) if cache is not None else None
        wanted = (
            {n for n in recorded if isinstance(n, str)} if isinstance(recorded, list) else set()
        )
        if not wanted:
            state.selection_notes.append(
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
        state.selection_notes.append(
            f"gta: rerunning the {len(items) - len(dropped)} case(s) that regressed against the "
            f"baseline in the last run ({OPT_RERUN_REGRESSIONS})"
        )
        if dropped:
            items[:] = kept
            config.hook.pytest_deselected(items=dropped)

    def collection_finish(self, session: pytest.Session) -> None:
        """The selection is final (``-k``, ``-m``, ``--lf`` applied): keep this shard's share."""
        self.keep_shard(session)

    def keep_shard(self, session: pytest.Session) -> None:
        """``--gta-shard=K/N``: keep this shard's share of the selected cases."""
        shard = self.state.settings.cases.shard
        if shard is None:
            return
        kept, dropped, self.state.shard = shard_items(session.items, shard)
        if self.collector is not None:
            self.collector.set_shard(self.state.shard.to_json())
        if dropped:
            session.items[:] = kept
            session.config.hook.pytest_deselected(items=dropped)

    # -- running -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def running_ahead(self, item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
        """Keep the episodes queued for this process running ahead."""
        ahead = self.state.ahead
        if ahead.pipeline is None:
            yield
            return
        ahead.feed(item.session, item, nextitem)
        try:
            yield
        finally:
            ahead.after(item.session)

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

    def result(
        self,
        request: pytest.FixtureRequest,
        case: Case,
        run: Callable[[Case], CaseRun],
        model: BaseModelAdapter | BaseRecordedSource,
        dataset: Dataset,
    ) -> CaseRun:
        """``gta_result``: the case's run; its properties on the item, its result on the report.

        The properties that identify the case go on the item before it runs (an errored case
        has them too); the rest once it is scored. The result itself travels on the setup
        report (:data:`DETAIL_KEY`) as its JSON, for the controller's report.
        """
        state = self.state
        epoch = case.epoch if case.repeated else None
        agent = state.settings.agent.spec
        # The erratum's faults of the query: JUnit has them before the case runs (an errored
        # case too), the case's failure message names them.
        notes = shipped_erratum().notes_for(case.query)
        identity = identity_properties(
            case.query.qid,
            case.mode,
            case.query.type,
            epoch,
            model=model.name,
            agent=agent,
            erratum=[note.kind for note in notes],
        )
        request.node.user_properties.extend(identity)
        done = run(case)
        result = done.result
        result.erratum = notes
        scored = result_properties(result)
        request.node.user_properties.extend(scored)
        result.properties = dict([*identity, *scored])
        store = state.image_store()
        if store is not None:
            result.images = store_case_images(
                store,
                [f.path for f in case.query.files],
                [*(step.root for step in result.steps), *done.gold],
                [dataset.root, state.output_dir()],
            )
            store.problems.clear()
        wire = case_to_wire(CaseWire(result, done.nonfinite))
        report_only(request.node).append((DETAIL_KEY, wire))
        if request.config.getoption("htmlpath", None):
            report_extras(request.node).extend(case_extras(case, result, store, state.settings))
        return done

    # -- the end -------------------------------------------------------------------------------
    def finish(self, session: pytest.Session) -> None:
        """Stop running ahead; hand this process's times and peak memory to the report.

        On the controller, then build the report and let the gates set the exit status.
        """
        state, config = self.state, self.config
        state.ahead.close()
        state.close_agent_services()
        timings = dict(state.ahead.timings)
        service = state.built("similarity_service")
        if service is not None and service.load_seconds is not None:
            timings["similarity_load_s"] = service.load_seconds
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
