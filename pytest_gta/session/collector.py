"""The controller-side collector: gathers per-case results from test reports.

Modelled on pytest's ``junitxml``: an object registered only on the controller (never on an
xdist worker) reads ``user_properties`` in ``pytest_runtest_logreport``, so the numbers are the
same with and without xdist and a crashed worker loses only the case it was running. It only
reads: other reporters (pytest-html, a project's own plugin) see the same properties, the
setup report's detail payload included.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pytest

from pytest_gta.case import Case
from pytest_gta.dataset import Dataset
from pytest_gta.errors import GtaUsageError
from pytest_gta.options import GtaSettings
from pytest_gta.provenance import GitProbe, utc_now
from pytest_gta.report.baseline import Baseline, regressed_nodeids
from pytest_gta.report.build import build_report
from pytest_gta.report.images import ImageStore
from pytest_gta.report.junit import suite_properties
from pytest_gta.report.table import render_text
from pytest_gta.results.base import Scalar
from pytest_gta.results.case import CaseResult
from pytest_gta.results.io import case_from_wire
from pytest_gta.results.migrate import default_label
from pytest_gta.results.report import (
    AgentSettings,
    Budget,
    GitInfo,
    Identity,
    LeaderboardRow,
    RunReport,
    RunSettings,
    SandboxSummary,
    ShardInfo,
)
from pytest_gta.session.finish import Finisher
from pytest_gta.session.keys import DETAIL_KEY, STOPPED_KEY
from pytest_gta.session.project_tests import notes_of, unique
from pytest_gta.signals import INTERRUPTS, cause_of
from pytest_gta.version import __version__


@dataclass(frozen=True)
class RunInfo:
    """What the report says about the run besides the cases."""

    model: str
    protocol: str
    warnings: list[str]
    #: The ``--gta-tools`` value when tool backends took part, else ``None``.
    tools: str | None
    #: Generation settings when the model generates (not for recorded predictions).
    generation: dict[str, Any] | None = None
    #: The official leaderboard row to print beside the run.
    leaderboard: dict[str, Any] | None = None
    #: USD per million input/output tokens, when known.
    prices: tuple[float, float] | None = None
    #: Which backend serves each tool (``a > b``: b gets what a has no recording of).
    tool_routes: dict[str, str] | None = None
    #: What tool backends say about themselves (``local``: which sandbox ran).
    tool_backends: dict[str, Any] | None = None
    #: The managed model server (``--gta-serve``): command, URL, log, start time.
    server: dict[str, Any] | None = None
    #: The agent under test: name (callable or command), kind, timeout, passed variables.
    agent: dict[str, Any] | None = None


class GtaCollector:
    """Collects case results, aggregates them at the end, prints and writes the report."""

    def __init__(
        self,
        config: pytest.Config,
        settings: GtaSettings,
        dataset: Callable[[], Dataset],
        run_info: Callable[[], RunInfo],
        baseline: Callable[[], tuple[Baseline | None, list[str]]] = lambda: (None, []),
        images: Callable[[], ImageStore | None] = lambda: None,
    ) -> None:
        self.config = config
        self.settings = settings
        self._dataset = dataset
        self._run_info = run_info
        #: ``--gta-baseline`` as read at start-up, and the differences let through.
        self._baseline = baseline
        #: The session's image store (``--gta-report-html``), made on first need.
        self._images = images
        #: The cases by node id, as their reports came in (:class:`CaseResult`).
        self.cases: dict[str, CaseResult] = {}
        #: Non-finite numbers the workers' cleaning replaced in the cases (the report's notes).
        self.nonfinite = 0
        self.report: RunReport | None = None
        self.stopped: str | None = None
        #: Set by Ctrl-C or SIGTERM: the report then covers only the cases that finished.
        self.interrupted = False
        #: What interrupted it (``Ctrl-C``, ``SIGTERM``; :func:`pytest_gta.signals.cause_of`).
        self.interrupted_by: str | None = None
        #: Seconds spent loading and generating ahead, per process (``main`` or the worker id).
        self.timings: dict[str, dict[str, float]] = {}
        #: Files that could not be written, with the reason (shown after the tables).
        self.write_errors: list[str] = []
        #: Why no report could be made (a hook broke it), shown instead of the tables.
        self.failure: str | None = None
        #: The paths in :attr:`write_errors`.
        self.unwritten: set[str] = set()
        #: When the session started (the report's ``duration_s``).
        self.started = time.monotonic()
        #: The same, as the report's ``identity.started_at`` says it.
        self.started_at = utc_now()
        #: The git state of the project under test (the repository around the rootdir), read
        #: while the session runs (:class:`~pytest_gta.provenance.GitProbe`).
        self._git = GitProbe(config.rootpath)
        #: ``--gta-shard``'s selection (:meth:`pytest_gta.shard.ShardSelection.to_json`), from
        #: this process's collection or, with xdist, from a worker's.
        self.shard: dict[str, Any] | None = None
        #: The report's notes from the session (what joined the run besides GTA cases).
        self.notes: list[str] = []

    def _identify(
        self, report: pytest.TestReport, props: dict[str, Any]
    ) -> tuple[str, str, int | None] | None:
        if "gta_query_id" in props and "gta_mode" in props:
            epoch = props.get("gta_epoch")
            return (
                str(props["gta_mode"]),
                str(props["gta_query_id"]),
                epoch if isinstance(epoch, int) else None,
            )
        # A crashed xdist worker's report carries no properties: recover the case from the id.
        found = Case.find_in_nodeid(report.nodeid)
        if found is not None and found[1] in self._dataset().queries:
            return found
        return None

    def _unscored(self, key: tuple[str, str, int | None], nodeid: str) -> CaseResult:
        """A case known only by its id so far (it errored or was skipped before it was scored)."""
        mode, qid, epoch = key
        query = self._dataset().queries.get(qid)
        return CaseResult.unscored(
            "step" if mode == "step" else "e2e",
            qid,
            epoch,
            query_type=query.type if query is not None else "",
            nodeid=nodeid,
        )

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Record the phase outcome and properties (the report itself is left as it is)."""
        wire: str | None = None
        props: dict[str, Any] = {}
        for name, value in report.user_properties:
            if name == DETAIL_KEY:
                # Written by case_to_wire in this session's own processes.
                wire = value if isinstance(value, str) else wire
            elif name == STOPPED_KEY:
                self.stopped = self.stopped or str(value)
            else:
                props[name] = value
        case = self.cases.get(report.nodeid)
        if wire is not None:
            try:
                arrived = case_from_wire(wire)
            except ValueError:
                arrived = None
            if arrived is not None:
                # Its outcome is pytest's to say, from this report on.
                scored = arrived.case
                scored.nodeid, scored.outcome, scored.message = report.nodeid, "passed", ""
                if case is not None:
                    scored.outcome, scored.message = case.outcome, case.message
                self.nonfinite += arrived.nonfinite
                case = self.cases[report.nodeid] = scored
        if case is None:
            key = self._identify(report, props)
            if key is None:
                return
            case = self.cases[report.nodeid] = self._unscored(key, report.nodeid)
        case.properties.update(_own_properties(props))
        if report.when == "call":
            if report.failed:
                case.outcome, case.message = "failed", _message(report)
            elif report.skipped:
                case.outcome, case.message = "skipped", _message(report)
        elif report.failed:  # setup, teardown, or an xdist crash ("???")
            case.outcome, case.message = "error", _message(report)
        elif report.skipped and report.when == "setup":
            case.outcome, case.message = "skipped", _message(report)

    def identity(self, info: RunInfo) -> Identity:
        """What identifies this run in the report: label, model, agent, commit, dates."""
        state = self._git.result()
        git = None
        if state is not None:
            git = GitInfo(
                commit=state.commit, short=state.short, dirty=state.dirty, branch=state.branch
            )
        agent = self.settings.agent.spec
        protocol = None if agent is not None else info.protocol
        label = self.settings.report.label
        return Identity(
            label=default_label(info.model, protocol, agent) if label is None else label,
            label_given=label is not None,
            model=info.model,
            protocol=protocol,
            agent=agent,
            git=git,
            started_at=self.started_at,
            finished_at=utc_now(),
            dataset_sha256=self._dataset().sha256,
            pytest_gta=__version__,
        )

    def run_settings(self, info: RunInfo) -> RunSettings:
        """The report's ``settings``: how the run ran and scored."""
        settings = self.settings
        sandbox = _sandbox(info.tool_backends)
        return RunSettings(
            modes=list(settings.cases.modes),
            tools=info.tools,
            tool_routes=info.tool_routes,
            tool_backends=info.tool_backends,
            sandbox=None if sandbox is None else SandboxSummary.model_validate(sandbox),
            sim_model=settings.scoring.sim_model,
            sim_threshold=settings.scoring.sim_threshold,
            limit=settings.cases.limit,
            ids=None if settings.cases.ids is None else list(settings.cases.ids),
            max_turns=settings.cases.max_turns,
            shard=None if settings.cases.shard is None else str(settings.cases.shard),
            generation=info.generation,
            server=info.server,
            agent=None if info.agent is None else AgentSettings.model_validate(info.agent),
            budget=Budget(
                max_tokens_total=settings.budget.max_tokens_total,
                max_cost=settings.budget.max_cost,
            ),
            pytest_gta=__version__,
        )

    def build(self) -> RunReport:
        """Aggregate everything collected so far into the report, concluded and cleaned."""
        info = self._run_info()
        settings = self.settings
        cases = list(self.cases.values())
        for case in cases:
            # A failure says what the verdict found wrong; pytest's own words say the rest.
            if case.outcome == "failed" and case.verdict is not None and case.verdict.message:
                case.message = case.verdict.message
        report = build_report(
            model=info.model,
            protocol=info.protocol,
            dataset=self._dataset(),
            data_source=settings.data.source,
            settings=self.run_settings(info),
            cases=cases,
            warnings=[*info.warnings, *self.notes],
            leaderboard=(
                None
                if info.leaderboard is None
                else LeaderboardRow.model_validate(info.leaderboard)
            ),
            prices=info.prices,
            stopped=self.stopped,
            interrupted=self.interrupted,
            interrupted_by=self.interrupted_by,
            timings=self.timings or None,
            shard=None if self.shard is None else ShardInfo.model_validate(self.shard),
            confidence=settings.stats.confidence,
            samples=settings.stats.bootstrap_samples,
            identity=self.identity(info),
        )
        baseline, differences = self._baseline()
        return self._finisher().conclude(
            report,
            cases,
            baseline=baseline,
            differences=differences,
            duration=time.monotonic() - self.started,
            nonfinite=self.nonfinite,
        )

    def _finisher(self) -> Finisher:
        return Finisher(self.config, self.settings, self._dataset(), self._images)

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """Ctrl-C or SIGTERM (:mod:`pytest_gta.signals`): the partial report says so."""
        self.interrupted = True
        self.interrupted_by = cause_of(excinfo, self.config.stash.get(INTERRUPTS, None))

    def add_notes(self, notes: object) -> None:
        """Notes for the report from this process or a worker (each said once; others ignored)."""
        self.notes = unique([*self.notes, *notes_of(notes)])

    def set_shard(self, shard: dict[str, Any], *, first: bool = False) -> None:
        """``--gta-shard``'s selection; ``first``: keep one already set (xdist workers agree)."""
        if not first or self.shard is None:
            self.shard = shard

    def add_timings(self, process: str, timings: dict[str, float]) -> None:
        """Loading and ahead-generation times of one process (``main`` or an xdist worker)."""
        if timings:
            self.timings[process] = dict(timings)

    def finish(self, session: pytest.Session) -> None:
        """Aggregate, judge the gates and write the files (the terminal prints the same report).

        Called by the plugin's first ``pytest_sessionfinish``, after every process's timings
        came in and before pytest's JUnit XML is written (it gets the suite-level properties).
        With gates configured, they and the harness errors decide the exit status. A file that
        cannot be written (a full disk, a missing permission) does not lose the run: the
        tables are still printed, then the error, and the exit status is not 0.

        An interrupted run writes its report even when no case finished (an interrupt during
        the first requests or the similarity model's load): a job that was stopped still
        leaves the file its pipeline looks for, saying so.
        """
        if not self.cases and not self.interrupted:
            return
        try:
            report = self.report = self.build()
        except GtaUsageError as exc:  # a pytest_gta_update_report hook broke the report
            self.failure = str(exc)
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
            return
        cache = getattr(self.config, "cache", None)
        if cache is not None and report.comparison is not None:
            cache.set(REGRESSIONS_CACHE_KEY, regressed_nodeids(report.comparison))
        add_junit_properties(self.config, report)
        finisher = self._finisher()
        written = finisher.write(report, int(session.exitstatus), finisher.outputs(report))
        session.exitstatus = written.status
        for output, error in written.results:
            if error is not None:
                self.unwritten.add(str(output.path))
                self.write_errors.append(f"{output.label}: {error}")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Print the paper's tables for the run."""
        if self.failure is not None:
            terminalreporter.write_sep("=", "GTA results")
            terminalreporter.write_line(f"pytest-gta: {self.failure}", red=True, bold=True)
        if self.report is None:
            return
        terminalreporter.write_sep("=", "GTA results")
        for line in render_text(self.report):
            terminalreporter.write_line(line)
        settings = self.settings
        for path in (
            settings.report.json,
            settings.report.md,
            settings.report.html,
            settings.report.inspect_log,
        ):
            if path is not None and str(path) not in self.unwritten:
                terminalreporter.write_line(f"report written to {path}")
        for error in self.write_errors:
            terminalreporter.write_line(
                f"pytest-gta: could not write {error}; the tables above are the run's results",
                red=True,
                bold=True,
            )


#: Where ``--gta-rerun-regressions`` finds the last comparison's regressed node ids.
REGRESSIONS_CACHE_KEY = "pytest-gta/regressions"


def add_junit_properties(config: pytest.Config, report: RunReport) -> None:
    """Suite-level JUnit properties: each metric, its interval, the gates' verdict."""
    add_suite_properties(config, suite_properties(report))


def add_suite_properties(config: pytest.Config, properties: Iterable[tuple[str, Any]]) -> None:
    """Add suite-level properties to ``--junitxml``'s file.

    Through pytest's own ``LogXML`` (what the ``record_testsuite_property`` fixture uses), found
    in the config's stash; without ``--junitxml`` there is nothing to add to.
    """
    try:
        from _pytest.junitxml import xml_key
    except ImportError:  # a pytest without it: the JSON report has the same numbers
        return
    xml = config.stash.get(xml_key, None)
    if xml is None:
        return
    for name, value in properties:
        xml.add_global_property(name, value)


def _message(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # skip: (path, line, reason)
        return str(longrepr[2]).removeprefix("Skipped: ")
    text = str(longrepr or "")
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        text = str(crash.message)
    return text.strip().splitlines()[-1][:500] if text.strip() else ""


def _own_properties(props: dict[str, Any]) -> dict[str, Scalar]:
    """The ``gta_*`` properties of a case that are scalars (what a report's properties hold)."""
    return {
        name: value
        for name, value in props.items()
        if name.startswith("gta_")
        and (value is None or isinstance(value, str | bool | int | float))
        and not (isinstance(value, float) and value != value)
    }


def _sandbox(backends: dict[str, Any] | None) -> dict[str, Any] | None:
    """Where model-written code ran (``mode``), and whether its results are ``isolated``.

    ``isolated`` is false where the sandbox could not keep the dataset's answers and the
    user's processes out of the code's reach (``not_isolated`` says what): such results may
    have been computed by code that read the answers. ``None`` when no backend ran code.
    """
    for details in (backends or {}).values():
        isolation = details.get("isolation") if isinstance(details, dict) else None
        if isinstance(isolation, dict):
            return {k: isolation.get(k) for k in ("mode", "isolated", "not_isolated", "summary")}
    return None
