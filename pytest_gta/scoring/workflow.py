"""The GTA-2 board's Workflow table from judged tasks (docs/metrics.md, "GTA-Workflow").

Root Score is the official number: the mean root score over the tasks the judge scored (a
task whose judging failed is left out, as ``score_with_gpt52.py`` leaves it out). A task whose
producer failed (an agent that crashed, a model endpoint that broke: no deliverable at all) is
the model's failure, not the judge's: it counts with root score 0 in the mean and fails every
rate, as an errored atomic case counts in its denominators (else an agent that crashes on its
hard tasks would score better than one that tries them). The official
code computes none of the success rates; these are the project's reading of the columns,
with a checkpoint succeeding at a score at or above the threshold:

- Leaf SR: succeeded leaves over all judged leaves of the scored tasks;
- Root SR: tasks whose root score succeeded, over all tasks (an unscored task fails);
- P/O/L/C-SR: Root SR over the tasks that involve a tool of that category;
- Tool SR: tool calls that returned without an error, over all tool calls of the run.

A rate over tasks none of which the judge scored is no rate: Root SR and a category's SR are
``None`` (shown ``-``) when no task of theirs has a root score, rather than a ``0.00`` that
reads as a measured failure (a run without a judge key once showed ``P-SR 0.00``).
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_gta.results.workflow import WorkflowCase, WorkflowTable

CATEGORY_COLUMNS = {
    "perception": "p_sr",
    "operation": "o_sr",
    "logic": "l_sr",
    "creativity": "c_sr",
}


def _pct(hits: int, total: int) -> float | None:
    return round(100.0 * hits / total, 2) if total else None


def succeeded(score: float | None, threshold: float) -> bool:
    """Whether a checkpoint's score counts as a success."""
    return score is not None and score >= threshold


def workflow_table(cases: Sequence[WorkflowCase], threshold: float) -> WorkflowTable:
    """The table of ``cases`` (skipped cases are not counted)."""
    counted = [c for c in cases if c.outcome != "skipped"]
    scored = [c for c in counted if c.root_score is not None]
    unproduced = [c for c in counted if c.production_error is not None and c.root_score is None]
    leaves = [p for c in scored for p in c.checkpoints if p.leaf]
    roots = [c for c in counted if succeeded(c.root_score, threshold)]
    calls = sum(c.tool_calls for c in counted)
    errors = sum(c.tool_call_errors for c in counted)
    columns: dict[str, float | None] = {}
    per_category: dict[str, int] = {}
    for category, column in CATEGORY_COLUMNS.items():
        involved = [c for c in counted if category in c.categories]
        per_category[category] = len(involved)
        hits = sum(1 for c in involved if succeeded(c.root_score, threshold))
        judged = any(c.root_score is not None or c.production_error for c in involved)
        columns[column] = _pct(hits, len(involved)) if judged else None
    # A task that produced nothing scores 0 (its deliverable could only have failed).
    denominator = len(scored) + len(unproduced)
    mean = sum(c.root_score or 0.0 for c in scored) / denominator if denominator else None
    return WorkflowTable(
        tool_sr=_pct(calls - errors, calls),
        **columns,
        root_score=mean,
        leaf_sr=_pct(sum(1 for p in leaves if succeeded(p.score, threshold)), len(leaves)),
        root_sr=_pct(len(roots), len(counted)) if denominator else None,
        tasks=len(counted),
        scored=len(scored),
        judge_errors=len(counted) - len(scored) - len(unproduced),
        production_errors=len(unproduced),
        empty_deliverables=sum(1 for c in counted if c.empty_deliverable),
        leaves=len(leaves),
        tool_calls=calls,
        category_tasks=per_category,
    )
