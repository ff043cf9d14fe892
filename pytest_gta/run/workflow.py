"""One GTA-Workflow case: produce the deliverable, judge it, and build its result.

The deliverable comes from one of three producers: an official eval pack (``evalpack:``,
nothing runs), the project's own ReAct loop (:mod:`pytest_gta.run.workflow_loop`), or the
agent under test (:mod:`pytest_gta.run.workflow_agent`). Each returns a :class:`Deliverable`:
the trace and files the judge is shown, with the tree and task it is judged against.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any

from pytest_gta.judge.client import BaseJudge, CallLog
from pytest_gta.judge.protocol import attached, final_answer
from pytest_gta.judge.walk import Judgement, NodeLog, judge
from pytest_gta.results.case import CaseUsage
from pytest_gta.results.workflow import Checkpoint, JudgeCall, WorkflowCase, WorkflowOutcome
from pytest_gta.scoring.workflow import succeeded
from pytest_gta.types import Usage
from pytest_gta.workflow_data import TOOL_CATEGORIES, WorkflowTask

#: The official run's turn limit (``max_turn=10`` in eval_gta_bench_v2.py).
MAX_TURNS = 10


@dataclass
class Deliverable:
    """What the judge is shown for a task, and what producing it cost."""

    origin_prompt: Any
    trace: Any
    files: Any
    tree: Any
    producer: str
    tool_calls: int = 0
    tool_call_errors: int = 0
    tools: list[str] = field(default_factory=list)
    usage: Usage | None = None


def output_files(directory: Path) -> list[str]:
    """Every regular file under ``directory``, sorted by path (the official pack builder's order).

    Links are left out: a deliverable is what the agent wrote, not what it points at.
    """
    if not directory.is_dir():
        return []
    return [str(p) for p in sorted(directory.rglob("*")) if p.is_file() and not p.is_symlink()]


def _usage(usage: Usage | None) -> CaseUsage | None:
    if usage is None:
        return None
    return CaseUsage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        calls=usage.calls,
        cached_calls=usage.cached_calls,
    )


def _checkpoint(node: NodeLog, threshold: float) -> Checkpoint:
    return Checkpoint(
        path=node.path,
        id=node.id,
        depth=node.depth,
        leaf=node.leaf,
        requirement=node.requirement,
        weight=node.weight,
        score=node.score,
        analysis=node.analysis,
        parsed=node.parsed,
        succeeded=succeeded(node.score, threshold) if node.leaf else None,
    )


def _call(log: CallLog) -> JudgeCall:
    return JudgeCall(
        prompt=log.prompt,
        files=log.files,
        reply=log.reply,
        input_tokens=log.input_tokens,
        output_tokens=log.output_tokens,
        cached=log.cached,
        duration=log.duration,
        error=log.error,
    )


def categories(task: WorkflowTask | None, tools: list[str]) -> list[str]:
    """The task's tool categories: its reference calls', else those of the tools the run called."""
    if task is not None and task.categories:
        return list(task.categories)
    return sorted({TOOL_CATEGORIES[t] for t in tools if t in TOOL_CATEGORIES})


def _deliverable_names(files: Any) -> list[str]:
    try:
        return [PurePath(f.path).name for f in attached(files)]
    except TypeError:
        return []


def judged_case(
    *,
    case_id: str,
    task_id: str,
    nodeid: str,
    epoch: int | None,
    task: WorkflowTask | None,
    deliverable: Deliverable,
    make_judge: Callable[[], BaseJudge],
    threshold: float,
    started: float,
) -> WorkflowCase:
    """Judge ``deliverable`` and build the case's result (its outcome from the root score)."""
    client = make_judge()
    verdict: Judgement = judge(
        deliverable.tree, deliverable.trace, deliverable.origin_prompt, deliverable.files, client
    )
    root = verdict.root_score
    passed = succeeded(root, threshold)
    outcome: WorkflowOutcome
    if verdict.error is not None:
        outcome, message = "error", f"the judge failed: {verdict.error} (left out of the mean)"
    else:
        outcome = "passed" if passed else "failed"
        leaves = [n for n in verdict.nodes if n.leaf]
        low = [n for n in leaves if not succeeded(n.score, threshold)]
        message = (
            f"root score {root:g}/10 ({'at or above' if passed else 'below'} the threshold "
            f"{threshold:g}); {len(leaves) - len(low)} of {len(leaves)} checkpoints reached it"
        )
        message += "".join(
            f"\n  checkpoint {n.path or 'root'} ({n.id}): {n.score:g} - {n.requirement[:120]}"
            for n in low
            if n.score is not None
        )
    return WorkflowCase(
        id=case_id,
        task_id=task_id,
        nodeid=nodeid,
        epoch=epoch,
        outcome=outcome,
        root_score=root,
        passed=passed,
        message=message,
        producer=deliverable.producer,
        final_answer=final_answer(deliverable.trace) or "(empty)",
        deliverables=_deliverable_names(deliverable.files),
        checkpoints=[_checkpoint(n, threshold) for n in verdict.nodes],
        judge_calls=[_call(log) for log in client.logs],
        judge_error=verdict.error,
        tool_calls=deliverable.tool_calls,
        tool_call_errors=deliverable.tool_call_errors,
        tools=list(deliverable.tools),
        categories=categories(task, deliverable.tools),
        duration=round(time.perf_counter() - started, 3),
        usage=_usage(deliverable.usage),
        judge_usage=_usage(client.usage),
    )
