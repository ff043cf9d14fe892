"""A benchmark of scored cases: what a third party writes to run its task family under pytest-gta.

Subclass :class:`ScoredBenchmark`, say which cases there are (:meth:`~ScoredBenchmark.cases`)
and how one is produced and scored (:meth:`~ScoredBenchmark.run`), and register a factory
under the ``pytest_gta.benchmarks`` entry-point group that returns it when ``--gta-data`` is
its data (``None`` otherwise). The session gives it everything else, as it gives GTA-Atomic and
GTA-Workflow: one pytest case per case (``gta::test_case[ID]``; ``-k``, ``-m``, ``--gta-ids``,
``--gta-limit``, ``--gta-epochs``, ``--gta-shard``, xdist), JUnit properties, the JSON report
(:class:`~pytest_gta.results.scored.ScoredReport`), markdown, HTML, the Inspect log, the job
summary, ``--gta-baseline``, gates (``--gta-fail-under=scored.pass_rate=80``), ``--gta-merge``
and ``--gta-compare``. docs/development.md ("Adding a benchmark") has an example.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic import JsonValue, ValidationError

from pytest_gta.benchmarks.scored_kind import ScoredKind
from pytest_gta.case import EPOCH_TAG, mark_name
from pytest_gta.options import GtaSettings
from pytest_gta.results.base import Scalar
from pytest_gta.results.scored import ScoredCase, ScoredReport
from pytest_gta.run.benchmark import BenchmarkContext, QueryView, nothing_ahead
from pytest_gta.scoring.scored import scored_metrics
from pytest_gta.session.collector import RunFacts, identity_of, message_of
from pytest_gta.session.gta_session import guarded
from pytest_gta.session.keys import DETAIL_KEY, report_only
from pytest_gta.session.kinds import KindFinisher
from pytest_gta.session.state import GtaState

SUITE = Path(__file__).resolve().parent.parent / "suite_scored.py"


@dataclass(frozen=True)
class Scored:
    """What running one case gives: its scores (0-1 each), whether it passed, what to keep."""

    scores: dict[str, float | None]
    passed: bool
    message: str = ""
    #: Anything JSON the report keeps of the case (the drill-down shows it).
    detail: JsonValue = None


@dataclass(frozen=True)
class ScoredParam:
    """One pytest case of a scored benchmark: a case of the data, in one epoch."""

    case_id: str
    payload: Any = field(compare=False)
    marks: tuple[str, ...] = ()
    epoch: int = 0
    repeated: bool = False

    @property
    def id(self) -> str:
        """The case's id, with ``@epochN`` when the run repeats cases."""
        return f"{self.case_id}{EPOCH_TAG}{self.epoch}" if self.repeated else self.case_id


class ScoredBenchmark:
    """A third party's task family; subclass it and override :meth:`cases` and :meth:`run`."""

    #: The benchmark's name (its entry point's; reports and messages say it).
    name = "scored"
    suite = SUITE

    def __init__(self, context: BenchmarkContext) -> None:
        self.config = context.config
        self.state: GtaState = context.services
        self.data = context.data

    # -- what a subclass says ------------------------------------------------------------------
    def cases(self) -> Sequence[tuple[str, Any]]:
        """The cases, in order: ``(id, payload)``; the payload is what :meth:`run` gets."""
        raise NotImplementedError

    def run(self, payload: Any, model: str) -> Scored:
        """Produce and score one case for ``model`` (``--gta-model``)."""
        raise NotImplementedError

    def marks(self, case_id: str, payload: Any) -> tuple[str, ...]:
        """Extra ``gta_*`` marks of a case (``-m`` selects by them)."""
        return ()

    # -- the seam ------------------------------------------------------------------------------
    @property
    def settings(self) -> GtaSettings:
        """The run's settings."""
        return self.state.settings

    def start(self) -> None:
        """Nothing to check: the gates and the baseline are the reporting's (:meth:`reporting`)."""

    def header(self) -> list[str]:
        """What runs on what."""
        return [
            f"gta: {self.name}: model {self.settings.model.name}, data {self.data} "
            f"({len(self.cases())} cases)"
        ]

    def params(self) -> list[Any]:
        """``gta_case``'s parameters: ``--gta-ids``, ``--gta-limit`` and epochs applied."""
        cases = self.settings.cases
        chosen = list(self.cases())
        if cases.ids is not None:
            wanted = set(cases.ids)
            chosen = [c for c in chosen if c[0] in wanted]
        if cases.limit is not None:
            chosen = chosen[: cases.limit]
        params = []
        for case_id, payload in chosen:
            marks = ["gta", mark_name("gta", self.name), *self.marks(case_id, payload)]
            for mark in marks:
                self.state.register_mark(mark)
            for epoch in range(cases.epochs):
                param = ScoredParam(case_id, payload, tuple(marks), epoch, cases.epochs > 1)
                params.append(
                    pytest.param(param, id=param.id, marks=[getattr(pytest.mark, m) for m in marks])
                )
        return params

    def keep_shard(self, session: pytest.Session) -> None:
        """``--gta-shard=K/N``: every N-th case, from the K-th (epochs stay together)."""
        shard = self.settings.cases.shard
        if shard is None:
            return
        ids = list(dict.fromkeys(_case_of(i) for i in session.items if _case_of(i) is not None))
        mine = {cid for n, cid in enumerate(ids) if n % shard.total == shard.index - 1}
        kept = [i for i in session.items if _case_of(i) in mine or _case_of(i) is None]
        dropped = [i for i in session.items if i not in kept]
        if dropped:
            session.items[:] = kept
            session.config.hook.pytest_deselected(items=dropped)

    def check_selection(self, nodeids: list[str]) -> None:
        """Any selection runs."""

    def running_ahead(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> contextlib.AbstractContextManager[None]:
        """Each case runs in its own test."""
        return nothing_ahead()

    def queries(self) -> QueryView | None:
        """``None``: the session's services load no GTA dataset for it but the one given."""
        return None

    def runs_ahead(self) -> bool:
        """Nothing runs ahead."""
        return False

    def for_workers(self) -> dict[str, Any]:
        """Nothing of its own for the xdist workers."""
        return {}

    def result(self, request: pytest.FixtureRequest, param: ScoredParam) -> ScoredCase:
        """``gta_result``: the case run and scored; its properties and JSON on its reports."""
        model = self.settings.model.name or ""
        identity: list[tuple[str, Scalar]] = [("gta_case_id", param.case_id), ("gta_model", model)]
        if param.repeated:
            identity.append(("gta_epoch", param.epoch))
        request.node.user_properties.extend(identity)
        started = time.perf_counter()
        scored = guarded(request, param.id, lambda: self.run(param.payload, model))
        case = ScoredCase(
            id=param.id,
            nodeid=request.node.nodeid,
            epoch=param.epoch if param.repeated else None,
            outcome="passed" if scored.passed else "failed",
            message=scored.message,
            passed=scored.passed,
            scores=dict(scored.scores),
            # What JSON cannot say is said as text (a set, a path); secrets are cleaned later.
            detail=json.loads(json.dumps(scored.detail, default=str)),
            duration=time.perf_counter() - started,
        )
        props: list[tuple[str, Scalar]] = [("gta_passed", case.passed)]
        props += [(f"gta_score_{k}", v) for k, v in case.scores.items() if v is not None]
        request.node.user_properties.extend(props)
        case.properties = dict([*identity, *props])
        report_only(request.node).append((DETAIL_KEY, case.model_dump_json()))
        return case

    def reporting(self) -> ScoredReporting:
        """The report's side: :class:`~pytest_gta.results.scored.ScoredReport`."""
        order = [case_id for case_id, _ in self.cases()]
        return ScoredReporting(self.config, self.settings, self.name, str(self.data), order)

    def finish(self, session: pytest.Session) -> dict[str, float]:
        """Nothing runs ahead: no timings of its own."""
        return {}

    def halt(self, cause: str) -> None:
        """Nothing runs ahead to stop."""

    def close(self) -> None:
        """Nothing started to stop."""


def _case_of(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    param = callspec.params.get("gta_case") if callspec is not None else None
    return param.case_id if isinstance(param, ScoredParam) else None


class ScoredReporting:
    """Builds, concludes and shows a scored run's report."""

    def __init__(
        self,
        config: pytest.Config,
        settings: GtaSettings,
        benchmark: str,
        dataset: str,
        order: Sequence[str] = (),
    ) -> None:
        self.config = config
        #: The cases' ids in the data's order: the report's order, whatever order they ran in.
        self._order = {case_id: n for n, case_id in enumerate(order)}
        self.settings = settings
        self.benchmark = benchmark
        self.dataset = dataset
        #: Each case's own message (pytest's failure repeats it behind the case id).
        self._messages: dict[str, str] = {}
        #: Concludes and writes the report (``--gta-merge`` finishes a merged run with it too).
        self.finisher: KindFinisher[ScoredReport] = KindFinisher.of(
            config, settings, ScoredKind(benchmark)
        )

    def case_from_detail(self, detail: str) -> tuple[ScoredCase, int] | None:
        """The scored case its setup report carried."""
        try:
            case = ScoredCase.model_validate(json.loads(detail))
        except (ValueError, ValidationError):
            return None
        self._messages[case.id] = case.message
        return case, 0

    def unscored(self, report: pytest.TestReport, props: dict[str, Any]) -> ScoredCase | None:
        """A case that sent no result (it errored or was skipped first): no score."""
        case_id = props.get("gta_case_id")
        if not isinstance(case_id, str):
            bracket = report.nodeid.rpartition("[")[2]
            if not report.nodeid.endswith("]") or not bracket:
                return None
            case_id = bracket[:-1]
        epoch = props.get("gta_epoch")
        case_id = f"{case_id}{EPOCH_TAG}{epoch}" if isinstance(epoch, int) else case_id
        skipped = report.skipped and report.when == "setup"
        return ScoredCase(
            id=case_id,
            nodeid=report.nodeid,
            epoch=epoch if isinstance(epoch, int) else None,
            outcome="skipped" if skipped else "error",
            message=message_of(report),
            passed=False,
            scores={},
        )

    def build(self, cases: list[ScoredCase], facts: RunFacts) -> ScoredReport:
        """The run's report, compared, judged, given to the update hook and cleaned.

        Raises:
            GtaUsageError: a ``pytest_gta_update_report`` hook broke the report.
        """
        for case in cases:
            case.message = self._messages.get(case.id, case.message)
        cases = sorted(cases, key=self._place)
        metrics, counted, errors = scored_metrics(cases)
        settings = self.settings
        model = settings.model.name or ""
        report = ScoredReport(
            benchmark=self.benchmark,
            model=model,
            label=settings.report.label or model,
            identity=identity_of(
                facts,
                label=settings.report.label or model,
                model=model,
                protocol=None,
                agent=None,
                dataset_sha256="",
            ),
            dataset=self.dataset,
            metrics=metrics,
            counted=counted,
            errors=errors,
            notes=list(facts.notes),
            cases=cases,
        )
        return self.finisher.conclude(report)

    def _place(self, case: ScoredCase) -> tuple[int, int, str]:
        base = case.id.partition(EPOCH_TAG)[0]
        return (self._order.get(base, len(self._order)), case.epoch or 0, case.id)
