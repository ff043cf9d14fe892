"""What a GTA-Workflow run produces: judged tasks, and the run's numbers and tables.

A Workflow case is not an atomic query (it has no reference chain, no mode, no answer check),
so it has its own classes beside :class:`~pytest_gta.results.case.CaseResult`, with the same
strictness (:class:`~pytest_gta.results.base.Doc`): one :class:`WorkflowCase` per task, built
where the case ran and sent to the controller as its JSON, and one :class:`WorkflowReport`
per run, read and written by :func:`dump_workflow_report` and :func:`load_workflow_report`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import Field

from pytest_gta import jsonsafe
from pytest_gta.results.base import Doc, Extensible, Scalar, omitted, validated
from pytest_gta.results.recorded import AgentRun, CaseUsage, Exchange, LoggedToolCall, Step
from pytest_gta.results.report import GatesVerdict, Identity
from pytest_gta.results.robustness import FaultEntry, RobustnessSection
from pytest_gta.results.workflow_board import WorkflowBoardRow, WorkflowColumns

KIND: Literal["gta-workflow-report"] = "gta-workflow-report"
#: The benchmark's name in reports (``RunReport.benchmark`` of an atomic run is ``gta-atomic``).
BENCHMARK: Literal["gta-workflow"] = "gta-workflow"
RUNS_KIND: Literal["gta-workflow-comparison"] = "gta-workflow-comparison"
SCHEMA_VERSION = 1
#: Said wherever the success rates are shown.
SR_NOTE = (
    "Tool SR, P/O/L/C-SR, Leaf SR and Root SR are pytest-gta's reading of the GTA-2 board's "
    "columns (docs/metrics.md), not the official code's, until checked against published numbers"
)
WorkflowOutcome = Literal["passed", "failed", "error", "skipped"]
#: Where the judge was reached: the OpenAI API, an endpoint by URL, or pytest's own process.
JudgeServed = Literal["openai", "endpoint", "process"]
#: Said wherever a task judged on nothing is shown.
EMPTY_DELIVERABLE = "judged on an empty deliverable (no file, empty final answer)"


class Checkpoint(Doc):
    """One node of the task's checkpoint tree as the judge scored it."""

    path: str
    """Its place: ``""`` for the root, ``"2.1"`` for the first child of the second child."""
    id: str
    """The node's ``id`` (``unknown`` where it has none)."""
    depth: int = Field(ge=0)
    leaf: bool
    """Leaves are judged; internal nodes are the weighted mean of their children."""
    requirement: str
    """The requirement as the prompt shows it (internal and root requirements are not judged)."""
    weight: float | None
    """Its weight in its parent's mean (``None`` where it is not a number)."""
    score: float | None
    """0-10; ``None`` where the walk failed before reaching it."""
    analysis: str | None = omitted()
    """The judge's analysis (leaves)."""
    parsed: str | None = omitted()
    """How the reply was read: ``json``, ``regex`` (the first number) or ``none`` (scored 0)."""
    succeeded: bool | None = omitted()
    """Whether its score reached the threshold (leaves)."""


class JudgeCall(Doc):
    """One call to the judge: what was asked, what was sent, what came back."""

    prompt: str
    files: list[dict[str, str]]
    """Each attached file's name and what became of it (``input_file``, ``input_image``,
    ``note`` for audio, ``frames:N`` for video, ``skipped``, ``not uploaded``)."""
    reply: str
    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    cached: bool
    duration: float = Field(ge=0)
    error: str | None = omitted()


class WorkflowCase(Doc):
    """One GTA-Workflow task: its deliverable and the judge's scores."""

    id: str
    """``workflow-<task id>`` (``@epochN`` when repeated): the end of its node id."""
    task_id: str
    nodeid: str
    epoch: int | None = Field(default=None, ge=0, lt=2**31)
    outcome: WorkflowOutcome
    root_score: float | None
    """The official score, 0-10 (``None`` when the judge failed: left out of the mean)."""
    passed: bool
    """The test's verdict: the root score reached the threshold, on a deliverable that is not
    empty."""
    empty_deliverable: bool = False
    """The task ended with no deliverable file and an empty final answer: whatever the judge
    gave, it judged nothing. Its test fails; its root score stays what the judge gave (the
    official number)."""
    message: str
    producer: str
    """Where the deliverable came from: ``evalpack``, ``model`` or ``agent``."""
    final_answer: str
    """The final answer the judge was shown (``(empty)`` when there was none)."""
    deliverables: list[str]
    """The deliverable files' names, in the order the judge got them."""
    checkpoints: list[Checkpoint]
    judge_calls: list[JudgeCall]
    judge_error: str | None = omitted()
    """The exception that failed the judging (the task is left out of the mean)."""
    production_error: str | None = omitted()
    """Why no deliverable was produced (the agent crashed or timed out, the model's endpoint
    broke): nothing was judged, and the task counts as a failure with root score 0 in every
    number of the table, as an errored atomic case counts in its denominators."""
    tool_calls: int = Field(ge=0)
    tool_call_errors: int = Field(ge=0)
    tools: list[str] = Field(default_factory=list)
    """The tools the run called, in first-call order."""
    categories: list[str]
    """Tool categories the task involves (reference calls, else the run's calls)."""
    steps: list[Step] = Field(default_factory=list)
    """The producer's trace as recorded: each tool call (name, arguments, its error), each
    tool's output, and the final answer; an eval pack's trace as the pack has it (absent in a
    report from before pytest-gta kept it)."""
    replies: list[str] = Field(default_factory=list, exclude_if=lambda v: not v)
    """The model's raw reply of each turn (the project's loop; absent otherwise)."""
    agent: AgentRun | None = omitted()
    """The agent under test's run (absent without an agent)."""
    tool_log: list[LoggedToolCall] | None = omitted()
    """Every tool call of the agent, as the MCP server logged it (absent without an agent)."""
    exchanges: list[Exchange] | None = omitted()
    """The agent's model requests through the recording proxy (absent without an agent)."""
    faults: list[FaultEntry] | None = omitted()
    """The tool faults the task's calls met (``--gta-tool-faults``; absent: none injected)."""
    duration: float | None = Field(ge=0)
    usage: CaseUsage | None = None
    """The model's calls (own loop or agent's proxy)."""
    judge_usage: CaseUsage | None = None
    properties: dict[str, Scalar] = Field(default_factory=dict)

    @classmethod
    def unproduced(
        cls,
        *,
        case_id: str,
        task_id: str,
        nodeid: str,
        epoch: int | None,
        outcome: WorkflowOutcome,
        message: str,
        producer: str,
        categories: list[str],
    ) -> WorkflowCase:
        """A task known only by its id: it errored or was skipped before it was judged."""
        return cls(
            id=case_id,
            task_id=task_id,
            nodeid=nodeid,
            epoch=epoch,
            outcome=outcome,
            root_score=None,
            passed=False,
            message=message,
            producer=producer,
            final_answer="",
            deliverables=[],
            checkpoints=[],
            judge_calls=[],
            production_error=message if outcome == "error" else None,
            tool_calls=0,
            tool_call_errors=0,
            categories=categories,
            duration=None,
        )


class WorkflowTable(WorkflowColumns):
    """The board's Workflow table for this run, with its denominators."""

    tasks: int = Field(ge=0)
    scored: int = Field(ge=0)
    """Tasks with a root score."""
    judge_errors: int = Field(ge=0)
    production_errors: int = Field(default=0, ge=0)
    """Tasks whose producer failed: no deliverable, counted with root score 0 (the mean's
    denominator is ``scored`` plus these)."""
    empty_deliverables: int = Field(default=0, ge=0)
    """Tasks judged on an empty deliverable (no file, empty final answer), scored or not."""
    leaves: int = Field(ge=0)
    tool_calls: int = Field(ge=0)
    category_tasks: dict[str, int]
    """Tasks per tool category (the P/O/L/C-SR denominators)."""


class JudgeInfo(Doc):
    """Who judged and how."""

    model: str
    api: str
    official: bool
    """Whether the official protocol was used (the Responses API with uploads)."""
    base_url: str | None
    """The endpoint the judge was reached at (credentials masked; ``None``: the OpenAI API, or
    pytest's own process)."""
    served: JudgeServed | None = omitted()
    """Where the judge was reached: ``openai`` (the OpenAI API), ``endpoint`` (``base_url``) or
    ``process`` (a model run in pytest's process, through a proxy); absent in older reports."""
    threshold: float


class WorkflowMetricDiff(Doc):
    """One column of the table against the baseline."""

    baseline: float | None
    this: float | None
    difference: float | None
    """This run minus the baseline (points; Root Score on its 0-10 scale)."""
    ci_low: float | None = omitted()
    ci_high: float | None = omitted()
    """The interval of the difference (paired) or of this run (a leaderboard row)."""
    p_value: float | None = omitted()
    p_drop: float | None = omitted()
    """One-sided p-value of "this run is worse" (what ``--gta-fail-on-regression`` reads)."""
    test: str | None = omitted()


class WorkflowFlip(Doc):
    """A task that passed in one run and failed in the other."""

    task_id: str
    baseline_score: float | None
    root_score: float | None


class WorkflowComparison(Doc):
    """The run against ``--gta-baseline``: a report (paired by task) or a published row."""

    kind: Literal["report", "leaderboard"]
    baseline: str
    """The baseline as given (a path, or ``leaderboard:NAME[@BOARD]``)."""
    baseline_model: str
    board: str | None = omitted()
    paired: bool
    level: float
    matched: int = Field(ge=0)
    """Tasks both runs scored (the paired differences' sample)."""
    only_this_run: int = Field(ge=0)
    only_baseline: int = Field(ge=0)
    mean_difference: float | None
    """The mean per-task root-score difference (paired), or this run's mean minus the row's."""
    metrics: dict[str, WorkflowMetricDiff]
    regressed: list[WorkflowFlip]
    """Tasks that passed in the baseline and fail now (task order)."""
    fixed: list[WorkflowFlip]
    notes: list[str]


class WorkflowReport(Extensible):
    """A GTA-Workflow run: settings, the table, every case."""

    kind: Literal["gta-workflow-report"] = KIND
    schema_version: int = SCHEMA_VERSION
    benchmark: Literal["gta-workflow"] = BENCHMARK
    """The task family (an atomic report says ``gta-atomic``); absent in earlier reports."""
    model: str
    label: str | None = omitted()
    identity: Identity | None = omitted()
    """What tells this run from others (label, commit, dates, the data's sha256 of its
    ``end.json``), as an atomic report's; absent in a report written before it had one."""
    dataset: str
    judge: JudgeInfo
    metrics: WorkflowTable
    sr_note: str = SR_NOTE
    notes: list[str] = Field(default_factory=list, exclude_if=lambda v: not v)
    """What a reader must know to read the numbers (an eval pack's deviation from the scorer)."""
    judge_usage: CaseUsage
    leaderboard: list[WorkflowBoardRow] = Field(default_factory=list, exclude_if=lambda v: not v)
    """Published rows ``--gta-leaderboard-rows`` set below the run's."""
    comparison: WorkflowComparison | None = omitted()
    gates: GatesVerdict | None = omitted()
    robustness: RobustnessSection | None = omitted()
    """The tool faults the run's tasks met (``--gta-tool-faults``; absent: none injected)."""
    tools_left_out: list[str] | None = omitted()
    """The tools ``--gta-tools-without`` or ``--gta-tools-none`` left out (absent: none)."""
    cases: list[WorkflowCase]


class WorkflowRun(Doc):
    """One run of ``--gta-compare`` on Workflow reports."""

    label: str
    source: str
    model: str
    judge: str
    official: bool
    threshold: float
    metrics: WorkflowTable


class WorkflowRuns(Doc):
    """``--gta-compare`` of Workflow reports: their tables side by side."""

    kind: Literal["gta-workflow-comparison"] = RUNS_KIND
    schema_version: int = SCHEMA_VERSION
    runs: list[WorkflowRun]
    leaderboard: list[WorkflowBoardRow]
    notes: list[str]
    sr_note: str = SR_NOTE


def dump_workflow_report(report: WorkflowReport) -> str:
    """The report's JSON text (strict JSON: no NaN)."""
    return json.dumps(report.to_json_value(), indent=2, ensure_ascii=False, allow_nan=False)


def load_workflow_report(path: Path) -> WorkflowReport:
    """Read a Workflow report written by :func:`dump_workflow_report`.

    Raises:
        GtaUsageError: missing, not JSON, or not a Workflow report of this version.
    """
    return parse_workflow_report(str(path), jsonsafe.read_json_or_usage_error(path, str(path)))


def parse_workflow_report(label: str, data: object) -> WorkflowReport:
    """A loaded Workflow report, checked (:func:`pytest_gta.results.io.parse_any_report`).

    Raises:
        GtaUsageError: naming ``label`` and the first field that is wrong.
    """
    return validated(WorkflowReport, data, label, "GTA-Workflow report")
