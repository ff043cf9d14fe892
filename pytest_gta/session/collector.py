"""The controller-side collector: gathers per-case results from test reports, for any benchmark.

Modelled on pytest's ``junitxml``: an object registered only on the controller (never on an
xdist worker) reads ``user_properties`` in ``pytest_runtest_logreport``, so the numbers are the
same with and without xdist and a crashed worker loses only the case it was running. It only
reads: other reporters (pytest-html, a project's own plugin) see the same properties, the
setup report's detail payload included.

What a case and a report are is the benchmark's (:class:`Reporting`: GTA-Atomic's typed
:class:`~pytest_gta.results.case.CaseResult`, GTA-Workflow's judged task, a third party's);
what a run does with them is here, once: which phase decides a case's outcome, the run's facts
(interrupted, stopped early, timings, shard, notes), the suite's JUnit properties, the files
through the one writer (:func:`~pytest_gta.session.finish.write_outputs`), the gated exit
status and the terminal's tables.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import pytest

from pytest_gta.errors import GtaUsageError
from pytest_gta.provenance import GitProbe, GitState, utc_now
from pytest_gta.results.base import Scalar
from pytest_gta.results.migrate import default_label
from pytest_gta.results.report import GitInfo, Identity
from pytest_gta.session.finish import Output, write_outputs
from pytest_gta.session.keys import DETAIL_KEY, STOPPED_KEY
from pytest_gta.session.kinds import KindFinisher
from pytest_gta.session.project_tests import notes_of, unique
from pytest_gta.signals import INTERRUPTS, cause_of
from pytest_gta.version import __version__

#: Where ``--gta-rerun-regressions`` finds the last comparison's regressed node ids.
REGRESSIONS_CACHE_KEY = "pytest-gta/regressions"


class CaseLike(Protocol):
    """What the collector reads and sets on a benchmark's case."""

    nodeid: str
    outcome: Any
    message: str
    properties: dict[str, Scalar]


@dataclass
class RunFacts:
    """What the session knows about the run besides its cases (the report's shared part)."""

    #: When the session started (the report's ``duration_s``).
    started: float = field(default_factory=time.monotonic)
    #: The same, as the report's ``identity.started_at`` says it.
    started_at: str = field(default_factory=utc_now)
    #: Why the session stopped early (a budget), if it did.
    stopped: str | None = None
    #: Set by Ctrl-C or SIGTERM: the report then covers only the cases that finished.
    interrupted: bool = False
    #: What interrupted it (``Ctrl-C``, ``SIGTERM``; :func:`pytest_gta.signals.cause_of`).
    interrupted_by: str | None = None
    #: Seconds spent loading and generating ahead, per process (``main`` or the worker id).
    timings: dict[str, dict[str, float]] = field(default_factory=dict)
    #: ``--gta-shard``'s selection (:meth:`pytest_gta.shard.ShardSelection.to_json`), from
    #: this process's collection or, with xdist, from a worker's.
    shard: dict[str, Any] | None = None
    #: The report's notes from the session (what joined the run besides GTA cases).
    notes: list[str] = field(default_factory=list)
    #: Non-finite numbers the workers' cleaning replaced in the cases (the report's notes).
    nonfinite: int = 0
    #: The git state of the project under test, read while the session ran.
    git: GitState | None = None


def identity_of(
    facts: RunFacts,
    *,
    label: str | None,
    model: str,
    protocol: str | None,
    agent: str | None,
    dataset_sha256: str,
) -> Identity:
    """What identifies a run in its report, for every benchmark: label, commit, dates.

    ``label`` is ``--gta-label``'s (``None``: made up from the model and how it was asked).
    """
    state = facts.git
    git = None
    if state is not None:
        git = GitInfo(
            commit=state.commit, short=state.short, dirty=state.dirty, branch=state.branch
        )
    return Identity(
        label=default_label(model, protocol, agent) if label is None else label,
        label_given=label is not None,
        model=model,
        protocol=protocol,
        agent=agent,
        git=git,
        started_at=facts.started_at,
        finished_at=utc_now(),
        dataset_sha256=dataset_sha256,
        pytest_gta=__version__,
    )


class Reporting(Protocol):
    """A benchmark's side of the controller's report: its cases, and the report they make.

    What is done with the report (compared, judged, printed, written) is its kind's, through
    the one finisher (:class:`~pytest_gta.session.kinds.KindFinisher`).
    """

    @property
    def finisher(self) -> KindFinisher[Any]:
        """Concludes and writes the run's report (also ``--gta-merge``'s, for a merged one)."""

    def case_from_detail(self, detail: str) -> tuple[CaseLike, int] | None:
        """The case its setup report carried (and the non-finite numbers cleaned from it)."""

    def unscored(self, report: pytest.TestReport, props: dict[str, Any]) -> CaseLike | None:
        """A case known only by its id (it errored or was skipped before it sent its result)."""

    def build(self, cases: list[Any], facts: RunFacts) -> Any:
        """The run's report: built, then concluded by :attr:`finisher`.

        Raises:
            GtaUsageError: a ``pytest_gta_update_report`` hook broke the report.
        """


class Collector:
    """Collects case results, aggregates them at the end, prints and writes the report."""

    def __init__(self, config: pytest.Config, reporting: Reporting) -> None:
        self.config = config
        self.reporting = reporting
        #: The cases by node id, as their reports came in.
        self.cases: dict[str, Any] = {}
        self.facts = RunFacts()
        #: The run's report, once built.
        self.report: Any = None
        #: Files that could not be written, with the reason (shown after the tables).
        self.write_errors: list[str] = []
        #: Why no report could be made (a hook broke it), shown instead of the tables.
        self.failure: str | None = None
        #: The outputs written (their paths, for the terminal's lines).
        self._written: list[Output] = []
        #: The git state of the project under test (the repository around the rootdir), read
        #: while the session runs (:class:`~pytest_gta.provenance.GitProbe`).
        self._git = GitProbe(config.rootpath)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Record the phase outcome and properties (the report itself is left as it is)."""
        detail: str | None = None
        props: dict[str, Any] = {}
        for name, value in report.user_properties:
            if name == DETAIL_KEY:
                # Written by the benchmark's case fixture in this session's own processes.
                detail = value if isinstance(value, str) else detail
            elif name == STOPPED_KEY:
                self.facts.stopped = self.facts.stopped or str(value)
            else:
                props[name] = value
        case = self.cases.get(report.nodeid)
        arrived = None if detail is None else self.reporting.case_from_detail(detail)
        if arrived is not None:
            scored, nonfinite = arrived
            scored.nodeid = report.nodeid
            if case is not None:  # its outcome is pytest's to say, from this report on
                scored.outcome, scored.message = case.outcome, case.message
            self.facts.nonfinite += nonfinite
            case = self.cases[report.nodeid] = scored
        if case is None:
            case = self.reporting.unscored(report, props)
            if case is None:
                return
            self.cases[report.nodeid] = case
        case.properties.update(own_properties(props))
        if report.when == "call":
            if report.failed:
                case.outcome, case.message = "failed", message_of(report)
            elif report.skipped:
                case.outcome, case.message = "skipped", message_of(report)
        elif report.failed:  # setup, teardown, or an xdist crash ("???")
            case.outcome, case.message = "error", message_of(report)
        elif report.skipped and report.when == "setup":
            case.outcome, case.message = "skipped", message_of(report)

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """Ctrl-C or SIGTERM (:mod:`pytest_gta.signals`): the partial report says so."""
        self.facts.interrupted = True
        self.facts.interrupted_by = cause_of(excinfo, self.config.stash.get(INTERRUPTS, None))

    def add_notes(self, notes: object) -> None:
        """Notes for the report from this process or a worker (each said once; others ignored)."""
        self.facts.notes = unique([*self.facts.notes, *notes_of(notes)])

    def set_shard(self, shard: dict[str, Any], *, first: bool = False) -> None:
        """``--gta-shard``'s selection; ``first``: keep one already set (xdist workers agree)."""
        if not first or self.facts.shard is None:
            self.facts.shard = shard

    def add_timings(self, process: str, timings: dict[str, float]) -> None:
        """Loading and ahead-generation times of one process (``main`` or an xdist worker)."""
        if timings:
            self.facts.timings[process] = dict(timings)

    def build(self) -> Any:
        """The report of everything collected so far (see :meth:`Reporting.build`)."""
        self.facts.git = self._git.result()
        report = self.reporting.build(list(self.cases.values()), self.facts)
        regressed = self.reporting.finisher.regressed(report)
        cache = getattr(self.config, "cache", None)
        if cache is not None and regressed is not None:
            cache.set(REGRESSIONS_CACHE_KEY, regressed)
        return report

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
        if not self.cases and not self.facts.interrupted:
            return
        try:
            report = self.report = self.build()
        except GtaUsageError as exc:  # a pytest_gta_update_report hook broke the report
            self.failure = str(exc)
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
            return
        finisher = self.reporting.finisher
        add_suite_properties(self.config, finisher.kind.suite_properties(report))
        results = write_outputs(finisher.outputs(report))
        for output, error in results:
            if error is None:
                self._written.append(output)
            else:
                self.write_errors.append(f"{output.label}: {error}")
        session.exitstatus = finisher.status(
            report, int(session.exitstatus), bool(self.write_errors)
        )

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Print the run's tables, where the files went, and what could not be written."""
        finisher = self.reporting.finisher
        title = f"{finisher.kind.title} results"
        if self.failure is not None:
            terminalreporter.write_sep("=", title)
            terminalreporter.write_line(f"pytest-gta: {self.failure}", red=True, bold=True)
        if self.report is None:
            return
        terminalreporter.write_sep("=", title)
        for line in finisher.text(self.report):
            terminalreporter.write_line(line)
        for output in self._written:
            if not output.append:  # the job summary is the job's, not a file of the run
                terminalreporter.write_line(f"report written to {output.path}")
        for line in finisher.written():
            terminalreporter.write_line(line)
        for error in self.write_errors:
            terminalreporter.write_line(
                f"pytest-gta: could not write {error}; the tables above are the run's results",
                red=True,
                bold=True,
            )


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


def message_of(report: pytest.TestReport) -> str:
    """What a phase's report says went wrong, on one line (a skip's reason, a crash's message)."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # skip: (path, line, reason)
        return str(longrepr[2]).removeprefix("Skipped: ")
    text = str(longrepr or "")
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        text = str(crash.message)
    return text.strip().splitlines()[-1][:500] if text.strip() else ""


def own_properties(props: dict[str, Any]) -> dict[str, Scalar]:
    """The ``gta_*`` properties of a case that are scalars (what a report's properties hold)."""
    return {
        name: value
        for name, value in props.items()
        if name.startswith("gta_")
        and (value is None or isinstance(value, str | bool | int | float))
        and not (isinstance(value, float) and value != value)
    }
