"""The official walk over a checkpoint tree: depth first, one judge call per leaf.

Kept to the official arithmetic on raw JSON values (``total_s += s * w``): a weight that is a
string or ``null`` fails the task at the node where the official code fails, after the calls it
had already made, and a weight-0 leaf is still judged. Internal requirements are never judged;
an empty tree makes the root a leaf, judged with the requirement ``(none)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_gta.errors import GtaBudgetExhausted
from pytest_gta.judge.protocol import leaf_prompt, normalize_tree, parse_score


@dataclass(frozen=True)
class LeafReply:
    """What one judge call returned: the reply's text and what it cost."""

    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    cached: bool = False


#: Scores one leaf: ``(prompt, the task's attached files) -> reply``. Raises on a failed call.
LeafJudge = Callable[[str, Any], LeafReply]


@dataclass
class NodeLog:
    """One checkpoint as the walk saw it: its place, requirement, weight and score."""

    path: str
    id: str
    depth: int
    leaf: bool
    requirement: str
    weight: float | None
    score: float | None = None
    analysis: str | None = None
    #: How the reply was read: ``json``, ``regex`` or ``none`` (leaves only).
    parsed: str | None = None
    reply: str | None = None


@dataclass
class Judgement:
    """A task's judgement: the root score (``None`` when the walk failed) and every node."""

    root_score: float | None
    nodes: list[NodeLog] = field(default_factory=list)
    #: ``Type: message`` of the exception that failed the task (the official record's form).
    error: str | None = None
    replies: list[LeafReply] = field(default_factory=list)


def _number(value: Any) -> float | None:
    """A weight or score as a finite float for the report (``None`` where it is not one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def judge(tree: Any, trace: Any, origin_prompt: Any, files: Any, call: LeafJudge) -> Judgement:
    """Score one task's tree with ``call`` per leaf; an exception fails the whole task."""
    result = Judgement(root_score=None)

    def dfs(node: Any, depth: int, path: str, weight: Any) -> Any:
        nid = node.get("id", "unknown")
        children = node.get("sub_tasks", [])
        log = NodeLog(
            path=path,
            id=str(nid),
            depth=depth,
            leaf=not children,
            requirement=f"{node.get('requirements', '(none)')}",
            weight=_number(weight),
        )
        result.nodes.append(log)
        if not children:
            prompt = leaf_prompt(node, trace, origin_prompt)
            reply = call(prompt, files)
            result.replies.append(reply)
            parsed = parse_score(reply.text)
            log.score, log.parsed, log.reply = _number(parsed.score), parsed.how, reply.text
            log.analysis = f"{parsed.analysis}"
            return parsed.score
        total_s: Any = 0
        total_w: Any = 0
        for index, child in enumerate(children):
            w = child.get("weight", 1)
            s = dfs(child, depth + 1, f"{path}.{index + 1}" if path else str(index + 1), w)
            total_s += s * w
            total_w += w
        agg = total_s / total_w if total_w else 0
        log.score = _number(agg)
        return agg

    try:
        root = normalize_tree(tree)
        score = dfs(root, 0, "", 1)
        value = float(score)
        if not math.isfinite(value):
            raise ValueError(f"the root score is {value} (a non-finite weight or score)")
        result.root_score = value
    except GtaBudgetExhausted:
        raise  # the session's budget, not the task: the case is skipped and the run stops
    except RecursionError:
        result.error = "RecursionError: the checkpoint tree is nested too deeply"
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    return result
