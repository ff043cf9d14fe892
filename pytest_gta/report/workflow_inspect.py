"""A GTA-Workflow run as an Inspect AI eval log (``--gta-inspect-log=DIR``).

One log (task ``gta_workflow``): a sample per task and epoch, its score the official root
score (0-10) with every checkpoint in the score's metadata, the run's Workflow table as the
results' metrics. Built with Inspect's own types and written by its ``write_eval_log``, as
:mod:`pytest_gta.report.inspect_log` writes an atomic run's logs (and with its file naming
and staging); ``inspect_ai`` is imported inside the functions only (a heavy optional
dependency).
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_gta.report.inspect_log import answer_output, error_record, save_logs
from pytest_gta.report.robustness import faults_json
from pytest_gta.report.workflow import COLUMNS
from pytest_gta.results.workflow import WorkflowCase, WorkflowReport

if TYPE_CHECKING:
    from inspect_ai.log import EvalLog, EvalSample

TASK = "gta_workflow"
SCORER = "gta_workflow_judge"


def _sample(case: WorkflowCase, epochs: dict[int, int], model: str) -> EvalSample:
    from inspect_ai.log import EvalSample  # a heavy optional dependency
    from inspect_ai.model import (
        ChatMessageAssistant,
        ChatMessageUser,
    )
    from inspect_ai.scorer import Score

    prompt = case.judge_calls[0].prompt if case.judge_calls else ""
    task = prompt.partition("Original task:\n")[2].partition("\n\nFinal answer:")[0]
    answer = case.final_answer
    score = Score(
        value=case.root_score if case.root_score is not None else 0.0,
        answer=answer,
        explanation=case.message,
        metadata={
            "passed": case.passed,
            "empty_deliverable": case.empty_deliverable,
            "checkpoints": [c.to_json_value() for c in case.checkpoints],
            "judge_error": case.judge_error,
        },
    )
    return EvalSample(
        id=case.task_id,
        epoch=epochs[case.epoch or 0],
        input=task,
        target="",
        messages=[
            ChatMessageUser(content=task, source="input"),
            ChatMessageAssistant(content=answer, model=model, source="generate"),
        ],
        output=answer_output(answer, model),
        scores={SCORER: score},
        metadata={
            "case_id": case.id,
            "nodeid": case.nodeid,
            "outcome": case.outcome,
            "empty_deliverable": case.empty_deliverable,
            "producer": case.producer,
            "deliverables": list(case.deliverables),
            "tools": list(case.tools),
            "categories": list(case.categories),
            **({} if case.faults is None else {"faults": faults_json(case.faults)}),
        },
        total_time=case.duration,
        error=error_record(case.message) if case.outcome == "error" else None,
    )


def workflow_log(report: WorkflowReport, created: str) -> EvalLog:
    """The Inspect log of a Workflow run."""
    from inspect_ai.log import (  # a heavy optional dependency
        EvalConfig,
        EvalDataset,
        EvalLog,
        EvalMetric,
        EvalResults,
        EvalScore,
        EvalSpec,
        EvalStats,
    )

    model = report.model or "unknown"
    cases = report.cases
    epochs = {e: n + 1 for n, e in enumerate(sorted({c.epoch or 0 for c in cases}))}
    metrics = {
        key: EvalMetric(name=key, value=value)
        for _, key in COLUMNS
        if (value := getattr(report.metrics, key)) is not None
    }
    scored = sum(1 for c in cases if c.root_score is not None)
    judge: dict[str, Any] = report.judge.to_json_value()
    return EvalLog(
        status="success",
        eval=EvalSpec(
            created=created,
            task=TASK,
            task_id=f"{TASK}-{created}",
            task_display_name="GTA-Workflow (GTA-2)",
            task_args={"judge": judge},
            dataset=EvalDataset(
                name="gta_workflow",
                location=report.dataset,
                samples=len({c.task_id for c in cases}),
                sample_ids=list(dict.fromkeys(c.task_id for c in cases)),
                shuffled=False,
            ),
            model=model,
            config=EvalConfig(epochs=max(len(epochs), 1)),
            metadata={"sr_note": report.sr_note, "judge": judge, "label": report.label},
        ),
        results=EvalResults(
            total_samples=len(cases),
            completed_samples=scored,
            scores=[
                EvalScore(
                    name=SCORER,
                    scorer=SCORER,
                    scored_samples=scored,
                    unscored_samples=len(cases) - scored,
                    metrics=metrics,
                    metadata={"table": report.metrics.to_json_value(), "sr_note": report.sr_note},
                )
            ],
        ),
        stats=EvalStats(started_at=created, completed_at=created),
        samples=[_sample(c, epochs, model) for c in cases],
    )


def write_workflow_inspect_log(
    report: WorkflowReport, directory: Path, now: datetime | None = None
) -> Path:
    """Write the run's log into ``directory`` (made if missing); the file written.

    Raises:
        OSError: ``directory`` or the file cannot be written.
    """
    moment = now or datetime.now(timezone.utc)
    created = moment.astimezone(timezone.utc).isoformat(timespec="seconds")
    return save_logs([(workflow_log(report, created), TASK)], directory)[0]
