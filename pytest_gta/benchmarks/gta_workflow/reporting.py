"""A GTA-Workflow run's report, for the session's collector (:mod:`pytest_gta.session.collector`).

The collector gathers the tasks as for any benchmark: each judged task's JSON arrives on its
setup report, from this process or an xdist worker alike, so ``-n 0`` and ``-n 8`` give the
same numbers. A task that errored before it was judged (its producer failed, its xdist worker
crashed) sent no JSON: it is known from its node id (:meth:`WorkflowReporting.unscored`) and
counts in every denominator (:func:`~pytest_gta.scoring.workflow.workflow_table`). The report
is concluded as ``--gta-merge`` concludes a merged one, by the one
:class:`~pytest_gta.session.kinds.KindFinisher` with GTA-Workflow's own ways
(:mod:`~pytest_gta.benchmarks.gta_workflow.kind`): baseline, gates,
``pytest_gta_update_report``, the secret cleaner.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from pytest_gta.benchmarks.gta_workflow.kind import CASE_PREFIX, WORKFLOW_KIND, case_order
from pytest_gta.evalpack import DEVIATION
from pytest_gta.evalpack import PREFIX as EVALPACK
from pytest_gta.files import sha256_file
from pytest_gta.options import GtaSettings
from pytest_gta.report.robustness import robustness_of
from pytest_gta.results.recorded import CaseUsage
from pytest_gta.results.workflow import (
    JudgeInfo,
    WorkflowCase,
    WorkflowReport,
)
from pytest_gta.scoring.workflow import workflow_table
from pytest_gta.session.collector import RunFacts, identity_of, message_of
from pytest_gta.session.kinds import KindFinisher
from pytest_gta.workflow_data import END_FILE

#: A Workflow case's id in its node id: ``workflow-3``, ``workflow-3@epoch1``.
_CASE_ID = re.compile(r"\[(" + re.escape(CASE_PREFIX) + r"([^\]@]+)(?:@epoch(\d+))?)\]$")


class WorkflowReporting:
    """Builds, concludes and shows a GTA-Workflow run's report."""

    def __init__(
        self,
        config: pytest.Config,
        settings: GtaSettings,
        dataset: str,
        judge: JudgeInfo,
        categories: Callable[[str], list[str]],
        producer: str,
        left_out: tuple[str, ...] = (),
    ) -> None:
        self.config = config
        self.settings = settings
        self.dataset = dataset
        self.judge = judge
        #: A task's tool categories by its id (for a task known only by its node id).
        self._categories = categories
        #: What produces the deliverables (``evalpack``, ``agent``, ``model``).
        self._producer = producer
        #: The tools the producers were not offered (``--gta-tools-without``, ``--gta-tools-none``).
        self._left_out = left_out
        #: Each judged task's own message (pytest's failure repeats it behind the case id).
        self._messages: dict[str, str] = {}
        #: Concludes and writes the report (``--gta-merge`` finishes a merged run with it too).
        self.finisher: KindFinisher[WorkflowReport] = KindFinisher.of(
            config, settings, WORKFLOW_KIND
        )

    def case_from_detail(self, detail: str) -> tuple[WorkflowCase, int] | None:
        """The judged task its setup report carried."""
        try:
            case = WorkflowCase.model_validate(json.loads(detail))
        except (ValueError, ValidationError):
            return None
        self._messages[case.id] = case.message
        return case, 0

    def unscored(self, report: pytest.TestReport, props: dict[str, Any]) -> WorkflowCase | None:
        """A task that sent no result (its producer failed, its worker crashed): unjudged.

        Known from its node id; counted as the model's failure when it errored.
        """
        found = _CASE_ID.search(report.nodeid)
        if found is None:
            return None
        case_id, task_id, epoch = found.group(1), found.group(2), found.group(3)
        skipped = report.skipped and report.when == "setup"
        return WorkflowCase.unproduced(
            case_id=case_id,
            task_id=task_id,
            nodeid=report.nodeid,
            epoch=int(epoch) if epoch is not None else None,
            outcome="skipped" if skipped else "error",
            message=message_of(report) or "the task errored before it was judged",
            producer=self._producer,
            categories=self._categories(task_id),
        )

    def build(self, cases: list[WorkflowCase], facts: RunFacts) -> WorkflowReport:
        """The run's report from the cases in, in node order, concluded and cleaned.

        Raises:
            GtaUsageError: a ``pytest_gta_update_report`` hook broke the report.
        """
        settings = self.settings
        ordered = sorted(cases, key=lambda c: case_order(c.nodeid))
        for case in ordered:
            case.message = self._messages.get(case.id, case.message)
            if case.outcome != "error":
                case.production_error = None
        model = settings.model.name or ""
        report = WorkflowReport(
            model=model,
            label=settings.report.label,
            identity=identity_of(
                facts,
                label=settings.report.label,
                model=model,
                protocol=None if self._producer == "agent" else "react",
                agent=settings.agent.spec,
                dataset_sha256=_sha256_of(Path(self.dataset) / END_FILE),
            ),
            dataset=self.dataset,
            judge=self.judge.model_copy(),
            metrics=workflow_table(ordered, settings.workflow.threshold),
            notes=[DEVIATION] if model.startswith(EVALPACK) else [],
            judge_usage=CaseUsage.total(c.judge_usage for c in ordered),
            robustness=(
                None
                if settings.tools.faults is None
                else robustness_of(
                    settings.tools.faults.text(), ((c.faults, c.passed) for c in ordered)
                )
            ),
            tools_left_out=list(self._left_out) or None,
            cases=ordered,
        )
        return self.finisher.conclude(report)


def _sha256_of(path: Path) -> str:
    """The data's version (its ``end.json``'s sha256), or ``""`` where it cannot be read."""
    try:
        return sha256_file(path)
    except OSError:
        return ""
