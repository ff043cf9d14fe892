"""The controller-side collector: gathers per-case results from test reports.

Modelled on pytest's ``junitxml``: an object registered only on the controller (never on an
xdist worker) reads ``user_properties`` in ``pytest_runtest_logreport``, so the numbers are the
same with and without xdist and a crashed worker loses only the case it was running. It only
reads: other reporters (pytest-html, a project's own plugin) see the same properties, the
setup report's detail payload included.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import pytest

from pytest_gta.case import Case
from pytest_gta.dataset import Dataset
from pytest_gta.detail import DETAIL_KEY, STOPPED_KEY, CaseDetail
from pytest_gta.options import GtaSettings
from pytest_gta.provenance import GitProbe, utc_now
from pytest_gta.report.baseline import Baseline, regressed_nodeids
from pytest_gta.report.build import build_report, typed_report
from pytest_gta.report.images import ImageStore
from pytest_gta.report.junit import suite_properties
from pytest_gta.report.schema import CaseRecord, GitInfo, Identity, RunReport, make_identity
from pytest_gta.report.table import render_text
from pytest_gta.results.report import RunReport as TypedReport
from pytest_gta.session.finish import Finisher
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
        self.records: dict[str, CaseRecord] = {}
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

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Record the phase outcome and properties (the report itself is left as it is)."""
        detail: CaseDetail | None = None
        props: dict[str, Any] = {}
        for name, value in report.user_properties:
            if name == DETAIL_KEY:
                # Written by CaseResult.detail() in this session's own processes.
                detail = cast(CaseDetail, value) if isinstance(value, dict) else detail
            elif name == STOPPED_KEY:
                self.stopped = self.stopped or str(value)
            else:
                props[name] = value
        record = self.records.get(report.nodeid)
        if record is None:
            key = self._identify(report, props)
            if key is None:
                return
            record = CaseRecord(mode=key[0], qid=key[1], nodeid=report.nodeid, epoch=key[2])
            self.records[report.nodeid] = record
        record.properties.update(props)
        if detail is not None:
            record.detail = detail
        if report.when == "call":
            if report.failed:
                record.outcome = "failed"
                record.message = _message(report)
            elif report.skipped:
                record.outcome = "skipped"
                record.message = _message(report)
        elif report.failed:  # setup, teardown, or an xdist crash ("???")
            record.outcome = "error"
            record.message = _message(report)
        elif report.skipped and report.when == "setup":
            record.outcome = "skipped"
            record.message = _message(report)

    def identity(self, info: RunInfo) -> Identity:
        """What identifies this run in the report: label, model, agent, commit, dates."""
        state = self._git.result()
        git: GitInfo | None = None
        if state is not None:
            git = {
                "commit": state.commit,
                "short": state.short,
                "dirty": state.dirty,
                "branch": state.branch,
            }
        return make_identity(
            model=info.model,
            protocol=info.protocol,
            agent=self.settings.agent_spec,
            dataset_sha256=self._dataset().sha256,
            label=self.settings.label,
            git=git,
            started_at=self.started_at,
            finished_at=utc_now(),
            version=__version__,
        )

    def build(self) -> RunReport:
        """Aggregate everything collected so far into the report, concluded and cleaned."""
        info = self._run_info()
        settings = self.settings
        report = build_report(
            model=info.model,
            protocol=info.protocol,
            dataset=self._dataset(),
            data_source=settings.data_source,
            settings={
                "modes": list(settings.modes),
                "tools": info.tools,
                "tool_routes": info.tool_routes,
                "tool_backends": info.tool_backends,
                "sandbox": _sandbox(info.tool_backends),
                "sim_model": settings.sim_model,
                "sim_threshold": settings.sim_threshold,
                "limit": settings.limit,
                "ids": None if settings.ids is None else list(settings.ids),
                "max_turns": settings.max_turns,
                "shard": None if settings.shard is None else str(settings.shard),
                "generation": info.generation,
                "server": info.server,
                "agent": info.agent,
                "budget": {
                    "max_tokens_total": settings.max_tokens_total,
                    "max_cost": settings.max_cost,
                },
                "pytest_gta": __version__,
            },
            records=list(self.records.values()),
            warnings=info.warnings,
            leaderboard=info.leaderboard,
            prices=info.prices,
            stopped=self.stopped,
            interrupted=self.interrupted,
            interrupted_by=self.interrupted_by,
            timings=self.timings or None,
            shard=self.shard,
            confidence=settings.confidence,
            samples=settings.bootstrap_samples,
            identity=self.identity(info),
        )
        baseline, differences = self._baseline()
        return self._finisher().conclude(
            report,
            list(self.records.values()),
            baseline=baseline,
            differences=differences,
            duration=time.monotonic() - self.started,
        )

    def _finisher(self) -> Finisher:
        return Finisher(self.config, self.settings, self._dataset(), self._images)

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """Ctrl-C or SIGTERM (:mod:`pytest_gta.signals`): the partial report says so."""
        self.interrupted = True
        self.interrupted_by = cause_of(excinfo, self.config.stash.get(INTERRUPTS, None))

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
        if not self.records and not self.interrupted:
            return
        report = self.report = self.build()
        cache = getattr(self.config, "cache", None)
        if cache is not None and "comparison" in report:
            cache.set(REGRESSIONS_CACHE_KEY, regressed_nodeids(report["comparison"]))
        add_junit_properties(self.config, typed_report(report, None))  # TRANSITIONAL
        finisher = self._finisher()
        written = finisher.write(report, int(session.exitstatus), finisher.outputs(report))
        session.exitstatus = written.status
        for output, error in written.results:
            if error is not None:
                self.unwritten.add(str(output.path))
                self.write_errors.append(f"{output.label}: {error}")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Print the paper's tables for the run."""
        if self.report is None:
            return
        terminalreporter.write_sep("=", "GTA results")
        for line in render_text(typed_report(self.report, None)):  # TRANSITIONAL
            terminalreporter.write_line(line)
        settings = self.settings
        for path in (
            settings.report,
            settings.report_md,
            settings.report_html,
            settings.inspect_log,
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


def add_junit_properties(config: pytest.Config, report: TypedReport) -> None:
    """Suite-level JUnit properties: each metric, its interval, the gates' verdict.

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
    for name, value in suite_properties(report):
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
