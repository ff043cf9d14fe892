"""Turning per-case records into the run's report (controller only).

The report is a plain dict, the contract of ``--gta-report`` (schema ``pytest-gta-report/1``).
Metrics are aggregated here, in dataset order, from the primitives each case carried, so the
numbers do not depend on which process ran which case. Cases that errored are counted as wrong
in ``metrics`` (as the official numbers would count a missing answer) and left out of
``metrics_excluding_errors``; skipped cases are in neither.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_gta.case import Case
from pytest_gta.datainfo import dataset_statistics
from pytest_gta.dataset import Dataset
from pytest_gta.install.manifest import read_install_record
from pytest_gta.scoring.metrics import (
    E2ECaseScore,
    StepCaseScore,
    aggregate_e2e,
    aggregate_step,
    unanswered_e2e_case,
    unanswered_step_case,
)
from pytest_gta.vocabulary import ERROR_KINDS, MODES, OUTCOMES

SCHEMA = "pytest-gta-report/1"
TABLE5_NOTE = (
    "Table 5 error types are our mapping (the official repository has no code for it): "
    "format = NoAction + InvalidAction, args = ARGS_ERROR, other (N/A) = other API errors."
)


@dataclass
class CaseRecord:
    """What the controller knows about one case after its reports came in."""

    mode: str
    qid: str
    nodeid: str
    outcome: str = "passed"
    properties: dict[str, Any] = field(default_factory=dict)
    detail: dict[str, Any] | None = None
    message: str = ""


CaseScore = StepCaseScore | E2ECaseScore


def case_score(record: CaseRecord, dataset: Dataset) -> CaseScore:
    """The case's metric primitives; an errored case without them scores as unanswered."""
    if record.mode == "step":
        if record.detail is not None:
            return StepCaseScore.from_json(record.detail["score"])
        query = dataset[record.qid]
        steps = [query.dialogs[i] for i in query.assistant_indices]
        return unanswered_step_case(steps, query.gt_answer)
    if record.detail is not None:
        return E2ECaseScore.from_json(record.detail["score"])
    query = dataset[record.qid]
    return unanswered_e2e_case(list(query.dialogs[1:]), query.gt_answer)


def _ordered(records: Iterable[CaseRecord], dataset: Dataset) -> list[CaseRecord]:
    known = [r for r in records if r.qid in dataset.queries]
    mode_order: dict[str, int] = {m: i for i, m in enumerate(MODES)}
    return sorted(known, key=lambda r: (mode_order.get(r.mode, 99), dataset[r.qid].position))


def mode_metrics(mode: str, scores: Sequence[CaseScore]) -> dict[str, Any]:
    """The mode's official metrics over case scores already in dataset order."""
    if mode == "step":
        return aggregate_step([s for s in scores if isinstance(s, StepCaseScore)])
    return aggregate_e2e([s for s in scores if isinstance(s, E2ECaseScore)])


def _errors(scores: Sequence[CaseScore]) -> dict[str, int]:
    totals: dict[str, int] = dict.fromkeys(ERROR_KINDS, 0)
    for score in scores:
        errors = score.errors() if isinstance(score, StepCaseScore) else score.errors
        for kind in ERROR_KINDS:
            totals[kind] += int(errors.get(kind, 0))
    return totals


USAGE_PROPERTIES = {
    "gta_tokens_in": "input_tokens",
    "gta_tokens_out": "output_tokens",
    "gta_model_calls": "calls",
    "gta_cached_calls": "cached_calls",
}


def usage_totals(
    records: Sequence[CaseRecord], prices: tuple[float, float] | None
) -> dict[str, Any]:
    """Token totals of the cases; ``cost_usd`` counts only calls not served from the cache.

    A case's cached calls are a share of its calls; its paid tokens are estimated by that share
    when the case mixes both (the exact paid total is in each worker's ledger, not per case).
    """
    totals: dict[str, Any] = dict.fromkeys(USAGE_PROPERTIES.values(), 0)
    paid_in = paid_out = 0.0
    for record in records:
        props = record.properties
        values = {key: int(props.get(prop, 0) or 0) for prop, key in USAGE_PROPERTIES.items()}
        for key, value in values.items():
            totals[key] += value
        made = values["calls"] + values["cached_calls"]
        share = values["calls"] / made if made else 0.0
        paid_in += values["input_tokens"] * share
        paid_out += values["output_tokens"] * share
    totals["cost_usd"] = (
        None if prices is None else (paid_in * prices[0] + paid_out * prices[1]) / 1_000_000
    )
    return totals


def _denominators(mode: str, records: Sequence[CaseRecord], dataset: Dataset) -> dict[str, int]:
    queries = [dataset[r.qid] for r in records]
    out = {
        "queries": len(queries),
        "answer_queries": sum(1 for q in queries if q.gt_answer),
        "reference_tool_calls": sum(len(q.calls) for q in queries),
    }
    if mode == "step":
        out["reference_steps"] = sum(len(q.assistant_indices) for q in queries)
    return out


def build_report(
    *,
    model: str,
    protocol: str,
    dataset: Dataset,
    data_source: str,
    settings: Mapping[str, Any],
    records: Sequence[CaseRecord],
    warnings: Sequence[str] = (),
    leaderboard: Mapping[str, Any] | None = None,
    prices: tuple[float, float] | None = None,
    stopped: str | None = None,
    interrupted: bool = False,
    timings: Mapping[str, Any] | None = None,
    shard: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The run's report dict (see module docstring)."""
    by_key: dict[tuple[str, str], CaseRecord] = {}
    duplicates = []
    for record in records:
        key = (record.mode, record.qid)
        if key in by_key:
            duplicates.append(Case.format_id(record.mode, record.qid))
        by_key[key] = record
    notes = list(warnings)
    if duplicates:
        notes.append(
            f"{len(duplicates)} case(s) ran more than once ({', '.join(duplicates[:5])}); the "
            "metrics use the last result of each"
        )
    ordered = _ordered(by_key.values(), dataset)
    modes = [m for m in MODES if any(r.mode == m for r in ordered)]
    metrics: dict[str, Any] = {}
    metrics_ok: dict[str, Any] = {}
    errors: dict[str, Any] = {}
    calls: dict[str, Any] = {}
    denominators: dict[str, Any] = {}
    for mode in modes:
        ran = [r for r in ordered if r.mode == mode and r.outcome != "skipped"]
        if not ran:
            continue
        scores = [case_score(r, dataset) for r in ran]
        clean = [score for r, score in zip(ran, scores, strict=True) if r.outcome != "error"]
        metrics[mode] = mode_metrics(mode, scores)
        metrics_ok[mode] = mode_metrics(mode, clean) if clean else {}
        errors[mode] = _errors(scores)
        total, failed = metrics[mode]["tool_call"], metrics[mode]["tool_call_error"]
        calls[mode] = {"successful": total - failed, "failed": failed}
        denominators[mode] = _denominators(mode, ran, dataset)
    outcomes: dict[str, int] = dict.fromkeys(OUTCOMES, 0)
    by_mode: dict[str, dict[str, int]] = {}
    cases = []
    for record in ordered:
        outcomes[record.outcome] = outcomes.get(record.outcome, 0) + 1
        by_mode.setdefault(record.mode, dict.fromkeys(OUTCOMES, 0))[record.outcome] += 1
        detail = record.detail or {}
        verdict = detail.get("verdict", {})
        cases.append(
            {
                "id": Case.format_id(record.mode, record.qid),
                "query_id": record.qid,
                "mode": record.mode,
                "type": dataset[record.qid].type,
                "outcome": record.outcome,
                "score": float(verdict.get("score", 0.0)),
                "message": (
                    verdict.get("message") or record.message
                    if record.outcome == "failed"
                    else record.message
                ),
                "nodeid": record.nodeid,
                "steps": detail.get("steps", []),
                "replies": detail.get("replies", []),
                "backends": detail.get("backends", {}),
                "duration": detail.get("duration"),
                "properties": {k: v for k, v in record.properties.items() if k.startswith("gta_")},
                # The metric primitives, so shard reports merge into the very same metrics.
                "primitives": detail.get("score"),
            }
        )
    if any(sum(counts.values()) for counts in errors.values()):
        notes.append(TABLE5_NOTE)
    by_type: dict[str, dict[str, dict[str, Any]]] = {}
    for case in cases:
        if case["outcome"] == "skipped":
            continue
        slot = by_type.setdefault(str(case["mode"]), {}).setdefault(
            str(case["type"]), {"cases": 0, "passed": 0, "score_sum": 0.0}
        )
        slot["cases"] += 1
        slot["passed"] += case["outcome"] == "passed"
        slot["score_sum"] += float(case["score"])
    for types in by_type.values():
        for slot in types.values():
            slot["mean_score"] = slot.pop("score_sum") / slot["cases"]
    if stopped:
        notes.append(f"the session stopped early: {stopped}; the metrics cover the cases that ran")
    if interrupted:
        notes.append(
            "the run was interrupted (Ctrl-C): the metrics cover only the cases that finished"
        )
    return {
        "schema": SCHEMA,
        "model": model,
        "protocol": protocol,
        "leaderboard": None if leaderboard is None else dict(leaderboard),
        "usage": usage_totals(ordered, prices),
        "stopped": stopped,
        "interrupted": interrupted,
        "timings": None if timings is None else dict(timings),
        "shard": None if shard is None else dict(shard),
        "dataset": {
            "path": dataset.root_str,
            "sha256": dataset.sha256,
            "queries": len(dataset),
            "selected": len({r.qid for r in ordered}),
            "source": data_source,
            "install": read_install_record(dataset.root),
            "statistics": dataset_statistics(dataset),
        },
        "settings": dict(settings),
        "metrics": metrics,
        "metrics_excluding_errors": metrics_ok,
        "errors": errors,
        "tool_calls": calls,
        "denominators": denominators,
        "outcomes": outcomes,
        "outcomes_by_mode": by_mode,
        "by_type": by_type,
        "notes": notes,
        "cases": cases,
    }
