"""One GTA-Workflow case: produce the deliverable, judge it, and build its result.

The deliverable comes from one of three producers: an official eval pack (``evalpack:``,
nothing runs), the project's own ReAct loop (:mod:`pytest_gta.run.workflow_loop`), or the
agent under test (:mod:`pytest_gta.run.workflow_agent`). Each returns a :class:`Deliverable`:
the trace and files the judge is shown, with the tree and task it is judged against, and
what the producer did on the way (its turns and every tool call), which the report keeps.

A deliverable with no file and an empty final answer gives the judge nothing to judge, yet a
judge may score it high (a small chat judge's "Your answer is 100% correct" reads 10 under the
official number fallback). Its root score stays the official number, but the case is flagged
(:attr:`~pytest_gta.results.workflow.WorkflowCase.empty_deliverable`) and its test fails.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any

from pytest_gta.judge.client import BaseJudge, CallLog
from pytest_gta.judge.protocol import attached, final_answer
from pytest_gta.judge.walk import Judgement, LeafJudge, LeafReply, NodeLog, judge
from pytest_gta.models.base import default_concurrency
from pytest_gta.models.chat import ChatAdapter
from pytest_gta.outward import Cleaner
from pytest_gta.results.recorded import CaseUsage
from pytest_gta.results.workflow import (
    EMPTY_DELIVERABLE,
    Checkpoint,
    JudgeCall,
    WorkflowCase,
    WorkflowOutcome,
)
from pytest_gta.scoring.workflow import succeeded
from pytest_gta.types import Usage
from pytest_gta.workflow_data import TOOL_CATEGORIES, WorkflowTask

#: The official run's turn limit (``max_turn=10`` in eval_gta_bench_v2.py).
MAX_TURNS = 10


def tasks_at_once(chosen: int | None, *, producer: object | None, judge_here: bool) -> int:
    """Tasks a process produces and judges at once: ``--gta-concurrency``, else what fits.

    As an atomic run chooses (:func:`pytest_gta.models.base.default_concurrency`): the least
    of what the producer's model runs at once (``producer``; ``None``: an eval pack, nothing
    runs) and what the judge takes: an HTTP judge (an endpoint, the OpenAI API) what an HTTP
    model adapter takes, a judge served in this process (``judge_here``) one at a time.
    """
    if chosen is not None:
        return chosen
    fits = [1 if judge_here else ChatAdapter.concurrency]
    if producer is not None:
        fits.append(default_concurrency(producer))
    return min(fits)


def produces_alone(model: object | None, *, agent: bool) -> bool:
    """Whether tasks are produced one at a time, however many are judged at once.

    The project's loop on a model that is not written for threads (its concurrency is 1: the
    in-process engines, which batch whatever arrives together, so threads would make its
    replies depend on timing) runs one task at a time. An agent's requests reach such a model
    one at a time through the proxy (:class:`pytest_gta.proxy.upstream.LocalModel`), and an
    eval pack (``model`` ``None``) runs nothing.
    """
    return model is not None and not agent and default_concurrency(model) == 1


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
    #: The model's raw reply of each turn (the project's loop).
    replies: list[str] = field(default_factory=list)
    #: An agent under test's run, tool log and model exchanges, as the atomic case keeps them
    #: (:class:`pytest_gta.results.case.AgentRun`, ``LoggedToolCall``, ``Exchange`` JSON).
    agent: dict[str, Any] | None = None
    tool_log: list[dict[str, Any]] | None = None
    exchanges: list[dict[str, Any]] | None = None
    #: The tool faults its calls met (``--gta-tool-faults``; ``None``: none injected).
    faults: list[dict[str, Any]] | None = None

    def steps(self) -> list[Any]:
        """The trace as a list of recorded steps (a trace that is not a list is one step)."""
        if self.trace is None:
            return []
        return list(self.trace) if isinstance(self.trace, list) else [self.trace]


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


def is_empty(deliverable: Deliverable) -> bool:
    """No file the judge could be shown exists, and the final answer is empty.

    A named file that does not exist is no deliverable; one the judge leaves out (a CSV) is.
    """
    if final_answer(deliverable.trace):
        return False
    try:
        files = attached(deliverable.files)
    except TypeError:
        files = []
    return not any(os.path.isfile(f.path) for f in files)


def _recorded(deliverable: Deliverable) -> dict[str, Any]:
    """What the producer did, cleaned for writing (NaN, lone surrogates, secrets, depth)."""
    found: dict[str, Any] = {"steps": deliverable.steps(), "replies": deliverable.replies}
    if deliverable.agent is not None:
        found["agent"] = deliverable.agent
        found["tool_log"] = deliverable.tool_log or []
        found["exchanges"] = deliverable.exchanges or []
    if deliverable.faults is not None:
        found["faults"] = deliverable.faults
    cleaned: dict[str, Any] = Cleaner().value(found)
    return cleaned


def _checked(call: LeafJudge, check: Callable[[], None]) -> LeafJudge:
    def checked(prompt: str, files: Any) -> LeafReply:
        check()
        return call(prompt, files)

    return checked


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
    check: Callable[[], None] | None = None,
) -> WorkflowCase:
    """Judge ``deliverable`` and build the case's result (its outcome from the root score).

    ``check`` is called before each checkpoint's call: a task judged ahead of its test
    (:mod:`pytest_gta.run.ahead_pool`) then ends at its next call once the run stops; what it
    raises fails the walk as a failed call does (a spent budget stops the session).
    """
    client = make_judge()
    call: LeafJudge = client if check is None else _checked(client, check)
    try:
        verdict: Judgement = judge(
            deliverable.tree, deliverable.trace, deliverable.origin_prompt, deliverable.files, call
        )
    finally:
        client.close()
    root = verdict.root_score
    reached = succeeded(root, threshold)
    empty = is_empty(deliverable)
    passed = reached and not empty
    outcome: WorkflowOutcome
    if verdict.error is not None:
        outcome, message = "error", f"the judge failed: {verdict.error} (left out of the mean)"
        if empty:
            message += f"; the task was {EMPTY_DELIVERABLE}"
    else:
        outcome = "passed" if passed else "failed"
        leaves = [n for n in verdict.nodes if n.leaf]
        low = [n for n in leaves if not succeeded(n.score, threshold)]
        message = (
            f"root score {root:g}/10 ({'at or above' if reached else 'below'} the threshold "
            f"{threshold:g}); {len(leaves) - len(low)} of {len(leaves)} checkpoints reached it"
        )
        if empty:
            message = (
                "the judge scored an empty deliverable (no file, an empty final answer: nothing "
                f"to judge), so the task fails; its root score {root:g}/10 is kept as the judge "
                f"gave it (the official number); {len(leaves) - len(low)} of {len(leaves)} "
                f"checkpoints reached the threshold {threshold:g}"
            )
        message += "".join(
            f"\n  checkpoint {n.path or 'root'} ({n.id}): {n.score:g} - {n.requirement[:120]}"
            for n in low
            if n.score is not None
        )
    return WorkflowCase.model_validate(
        {
            "id": case_id,
            "task_id": task_id,
            "nodeid": nodeid,
            "epoch": epoch,
            "outcome": outcome,
            "root_score": root,
            "passed": passed,
            "empty_deliverable": empty,
            "message": message,
            "producer": deliverable.producer,
            "final_answer": final_answer(deliverable.trace) or "(empty)",
            "deliverables": _deliverable_names(deliverable.files),
            "checkpoints": [_checkpoint(n, threshold) for n in verdict.nodes],
            "judge_calls": [_call(log) for log in client.logs],
            "judge_error": verdict.error,
            "tool_calls": deliverable.tool_calls,
            "tool_call_errors": deliverable.tool_call_errors,
            "tools": list(deliverable.tools),
            "categories": categories(task, deliverable.tools),
            **_recorded(deliverable),
            "duration": round(time.perf_counter() - started, 3),
            "usage": _usage(deliverable.usage),
            "judge_usage": _usage(client.usage),
        }
    )
