"""A run layer's context on a dataset for the tests of ``pytest_gta.run``: real replay tools."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_gta.case import Case
from pytest_gta.results.case import CaseResult, Verdict
from pytest_gta.run import loops
from pytest_gta.run.context import RunContext
from pytest_gta.run.runner import Scorer, case_result
from pytest_gta.tools import ToolBackendContext, ToolSet, ToolSpec, make_backend
from pytest_gta.types import Usage


def run_context(dataset: Any, tmp_path: Path, model: Any, **settings: Any) -> RunContext:
    """The context a session would build: ``replay`` tools, files written under ``tmp_path``.

    The scorer has no similarity model: enough for objective queries.
    """
    replay = make_backend(ToolSpec("replay", "replay"), ToolBackendContext(dataset, tmp_path))
    return RunContext(
        dataset=dataset,
        model=model,
        scorer=Scorer(lambda: None, 0.5),
        tools=ToolSet([replay]),
        output_dir=tmp_path,
        **settings,
    )


def play_e2e(dataset: Any, query: Any, model: Any, run_tool: Any, **options: Any) -> loops.Episode:
    """One end-to-end episode of ``model``, one request at a time, as the serial path plays it."""
    steps = loops.e2e_episode(dataset, query, model.protocol, run_tool, **options)
    return loops.drive(steps, model)


def result_of(
    case: Case,
    predictions: list[dict[str, Any]],
    score: Any,
    verdict: Verdict,
    replies: list[str] | None = None,
) -> CaseResult:
    """The result a worker makes of a scored case (no usage, no agent, no model time)."""
    result, _ = case_result(
        case,
        predictions=predictions,
        score=score,
        verdict=verdict,
        replies=replies or [],
        usage=Usage(),
        duration=0.0,
        backends={},
        agent=None,
        model_s=None,
    )
    return result
