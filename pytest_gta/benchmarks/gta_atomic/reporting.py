"""A GTA-Atomic run's report, for the controller's collector (:mod:`pytest_gta.session.collector`).

The collector gathers the cases and the run's facts; this builds the typed
:class:`~pytest_gta.results.report.RunReport` from them (the paper's tables, intervals,
identity, settings) and concludes it as ``--gta-merge`` concludes a merged run, through the one
finisher of every benchmark (:class:`~pytest_gta.session.kinds.KindFinisher`, with GTA-Atomic's
own ways: :class:`~pytest_gta.benchmarks.gta_atomic.kind.AtomicKind`): baseline, gates, the
update hook, the cleaner, the files.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from pytest_gta.benchmarks.gta_atomic.kind import AtomicKind
from pytest_gta.case import Case
from pytest_gta.dataset import Dataset
from pytest_gta.options import GtaSettings
from pytest_gta.report.baseline import Baseline
from pytest_gta.report.build import build_report
from pytest_gta.report.images import ImageStore
from pytest_gta.results.case import CaseResult
from pytest_gta.results.io import case_from_wire
from pytest_gta.results.report import (
    AgentSettings,
    Budget,
    Identity,
    LeaderboardRow,
    RunReport,
    RunSettings,
    SandboxSummary,
    ShardInfo,
)
from pytest_gta.session.collector import RunFacts, identity_of
from pytest_gta.session.kinds import KindFinisher
from pytest_gta.session.run_info import RunInfo
from pytest_gta.version import __version__


class AtomicReporting:
    """Builds, concludes and shows a GTA-Atomic run's report."""

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
        self._finisher: KindFinisher[RunReport] | None = None

    # -- the cases -----------------------------------------------------------------------------
    def case_from_detail(self, detail: str) -> tuple[CaseResult, int] | None:
        """The scored case its setup report carried; its outcome is pytest's from then on."""
        try:
            arrived = case_from_wire(detail)
        except ValueError:
            return None
        case = arrived.case
        case.outcome, case.message = "passed", ""
        return case, arrived.nonfinite

    def unscored(self, report: pytest.TestReport, props: dict[str, Any]) -> CaseResult | None:
        """A case known only by its id so far (it errored or was skipped before it was scored).

        Its properties name it; a crashed xdist worker's report carries none, and the case is
        recovered from its node id.
        """
        key: tuple[str, str, int | None] | None = None
        if "gta_query_id" in props and "gta_mode" in props:
            epoch = props.get("gta_epoch")
            key = (
                str(props["gta_mode"]),
                str(props["gta_query_id"]),
                epoch if isinstance(epoch, int) else None,
            )
        else:
            found = Case.find_in_nodeid(report.nodeid)
            if found is not None and found[1] in self._dataset().queries:
                key = found
        if key is None:
            return None
        mode, qid, epoch = key
        query = self._dataset().queries.get(qid)
        return CaseResult.unscored(
            "step" if mode == "step" else "e2e",
            qid,
            epoch,
            query_type=query.type if query is not None else "",
            nodeid=report.nodeid,
        )

    # -- the report ----------------------------------------------------------------------------
    def identity(self, info: RunInfo, facts: RunFacts) -> Identity:
        """What identifies this run in the report: label, model, agent, commit, dates."""
        agent = self.settings.agent.spec
        return identity_of(
            facts,
            label=self.settings.report.label,
            model=info.model,
            protocol=None if agent is not None else info.protocol,
            agent=agent,
            dataset_sha256=self._dataset().sha256,
        )

    def run_settings(self, info: RunInfo) -> RunSettings:
        """The report's ``settings``: how the run ran and scored."""
        settings = self.settings
        sandbox = _sandbox(info.tool_backends)
        faults = settings.tools.faults
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
            tool_faults=None if faults is None else faults.text(),
            tools_left_out=list(self._dataset().left_out) or None,
        )

    def build(self, cases: list[CaseResult], facts: RunFacts) -> RunReport:
        """Aggregate the cases into the report, concluded and cleaned.

        Raises:
            GtaUsageError: a ``pytest_gta_update_report`` hook broke the report.
        """
        info = self._run_info()
        settings = self.settings
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
            warnings=[*info.warnings, *facts.notes],
            leaderboard=(
                None
                if info.leaderboard is None
                else LeaderboardRow.model_validate(info.leaderboard)
            ),
            prices=info.prices,
            stopped=facts.stopped,
            interrupted=facts.interrupted,
            interrupted_by=facts.interrupted_by,
            timings=facts.timings or None,
            shard=None if facts.shard is None else ShardInfo.model_validate(facts.shard),
            confidence=settings.stats.confidence,
            samples=settings.stats.bootstrap_samples,
            identity=self.identity(info, facts),
        )
        report.duration_s = time.monotonic() - facts.started
        return self.finisher.conclude(report, facts.nonfinite)

    @property
    def finisher(self) -> KindFinisher[RunReport]:
        """Concludes and writes the report, with GTA-Atomic's own ways, on the run's dataset."""
        if self._finisher is None:
            kind = AtomicKind(self._dataset(), self._images)
            self._finisher = KindFinisher(self.config, self.settings, kind, self._baseline)
        return self._finisher


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
