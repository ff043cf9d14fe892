"""GTA-Atomic: the 229 queries of the GTA release, each in step and end-to-end mode.

The benchmark the plugin was built for, as one implementation of
:class:`~pytest_gta.run.benchmark.Benchmark`: its cases are (query, mode) pairs from the
session's dataset, run ahead by :mod:`pytest_gta.run.ahead`, scored with the official formulas
(:mod:`pytest_gta.run.runner`) and gathered on the controller by the session's
:class:`~pytest_gta.session.collector.Collector` with this benchmark's
:class:`~pytest_gta.benchmarks.gta_atomic.reporting.AtomicReporting`. It takes any data the
GTA-Workflow benchmark does not (the last of the built-ins asked).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_gta.benchmarks.gta_atomic.reporting import AtomicReporting
from pytest_gta.case import Case
from pytest_gta.erratum import shipped_erratum
from pytest_gta.flags import OPT_DOWNLOAD
from pytest_gta.options.data import SAMPLE_FALLBACK
from pytest_gta.progress import say
from pytest_gta.report.images import store_case_images
from pytest_gta.results.case import identity_properties, result_properties
from pytest_gta.results.io import CaseWire, case_to_wire
from pytest_gta.run.benchmark import Benchmark, BenchmarkContext, QueryView
from pytest_gta.run.runner import CaseRun
from pytest_gta.session import model_server, xdist
from pytest_gta.session.html_hooks import case_extras
from pytest_gta.session.keys import DETAIL_KEY, report_extras, report_only
from pytest_gta.session.run_info import run_info_of
from pytest_gta.session.state import GtaState
from pytest_gta.shard import shard_items

#: Names of the controller-only plugin objects, unregistered when the session ends.
COLLECTOR = "gta-collector"
XDIST_BRIDGE = "gta-xdist"
SUITE = Path(__file__).resolve().parents[2] / "suite.py"


def make(context: BenchmarkContext) -> Benchmark:
    """The ``gta-atomic`` entry point: takes any data (asked last among the built-ins)."""
    return AtomicBenchmark(context.config, context.services)


class AtomicBenchmark:
    """GTA's queries as cases: ``gta::test_query[e2e-17]``."""

    name = "gta-atomic"
    suite = SUITE

    def __init__(self, config: pytest.Config, state: GtaState) -> None:
        self.config = config
        self.state = state

    # -- start and stop ------------------------------------------------------------------------
    def start(self) -> None:
        """Validate everything; start the model server (``--gta-serve``) before any case."""
        config, state = self.config, self.state
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

    def reporting(self) -> AtomicReporting:
        """The report's side: the paper's tables from the scored cases."""
        state = self.state
        return AtomicReporting(
            self.config,
            state.settings,
            state.dataset,
            lambda: run_info_of(state),
            lambda: (state.baseline(), state.baseline_differences),
            state.image_store,
        )

    def queries(self) -> QueryView | None:
        """``None``: the session's services load no GTA dataset for it but the one given."""
        return None

    def runs_ahead(self) -> bool:
        """Whether the xdist workers run their episodes ahead (a pool)."""
        return self.state.runs_ahead()

    def for_workers(self) -> dict[str, Any]:
        """The similarity service every worker scores with (loaded once, here)."""
        state = self.state
        shared = state.shared_similarity()
        if shared is not None and state.needs_similarity():
            return {xdist.SIMILARITY_INPUT: list(shared)}
        if not state.needs_similarity() or self.config.option.collectonly:
            return {}
        # Loads once, in this process, while the workers start (pytest_gta.scoring.service).
        if state.built_similarity_service() is None:
            say(
                self.config,
                f"loading the similarity model {state.settings.scoring.sim_model} once, in "
                "this process, for every worker ...",
            )
        service = state.similarity_service()
        return {xdist.SIMILARITY_INPUT: [service.url, service.token]}

    def halt(self, cause: str) -> None:
        """Interrupted: the session's pool stops (:class:`~pytest_gta.run.ahead.AheadWork`)."""

    def close(self) -> None:
        """Nothing of its own to stop: the session stops the model, the server, the services."""

    # -- the terminal --------------------------------------------------------------------------
    def header(self) -> list[str]:
        """What is evaluated, on what data, with which tools."""
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
            # The sandbox's lines, or that they follow: it is built beside collection.
            lines += [f"gta: {line}" for line in state.agent_header()]
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
        return lines

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

    # -- collection ----------------------------------------------------------------------------
    def params(self) -> list[Any]:
        """``gta_case``'s parameters: the selected cases with their marks."""
        return [
            pytest.param(case, id=case.id, marks=[getattr(pytest.mark, m) for m in case.marks()])
            for case in self.state.cases()
        ]

    def keep_shard(self, session: pytest.Session) -> None:
        """``--gta-shard=K/N``: keep this shard's share, balanced by reference steps."""
        shard = self.state.settings.cases.shard
        if shard is None:
            return
        kept, dropped, self.state.shard = shard_items(session.items, shard)
        if dropped:
            session.items[:] = kept
            session.config.hook.pytest_deselected(items=dropped)

    def check_selection(self, nodeids: list[str]) -> None:
        """Any selection of queries is runnable (validated at start-up)."""

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

    def result(self, request: pytest.FixtureRequest, case: Case) -> CaseRun:
        """``gta_result``: the case's run; its properties on the item, its result on the report.

        The properties that identify the case go on the item before it runs (an errored case
        has them too); the rest once it is scored. The result itself travels on the setup
        report (:data:`DETAIL_KEY`) as its JSON, for the controller's report. The model, the
        runner and the dataset are the fixtures of the same names, so a project's own
        ``gta_run`` or ``gta_model`` fixture takes part as it always did.
        """
        state = self.state
        model = request.getfixturevalue("gta_model")
        run = request.getfixturevalue("gta_run")
        dataset = request.getfixturevalue("gta_dataset")
        epoch = case.epoch if case.repeated else None
        # The erratum's faults of the query: JUnit has them before the case runs (an errored
        # case too), the case's failure message names them.
        notes = shipped_erratum().notes_for(case.query)
        identity = identity_properties(
            case.query.qid,
            case.mode,
            case.query.type,
            epoch,
            model=model.name,
            agent=state.settings.agent.spec,
            erratum=[note.kind for note in notes],
        )
        request.node.user_properties.extend(identity)
        done: CaseRun = run(case)
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
    def finish(self, session: pytest.Session) -> dict[str, float]:
        """Stop running ahead; this process's loading and generation times for the report."""
        state = self.state
        state.ahead.close()
        timings = dict(state.ahead.timings)
        service = state.built_similarity_service()
        if service is not None and service.load_seconds is not None:
            timings["similarity_load_s"] = service.load_seconds
        return timings
