"""Several runs side by side: the paper's tables with one row per run (``--gta-compare``).

A model team runs GTA many times (checkpoints, ReAct against native calling, its own agent) and
sets the runs beside the published leaderboard, as the paper's Table 4 sets one row per model.
:func:`build_comparison` turns the runs' reports into the ``pytest-gta-comparison/1`` dict
(docs/compare.md documents it field by field); :mod:`.runs_text` renders it for the terminal
and as markdown, :mod:`.runs_html` as a page.

Nothing a run's report already says is computed again: its metrics, intervals, pass rates and
error counts are copied from the report, so every number of a run here equals the one its own
report shows. The paired tests against the reference run are :func:`.compare.compare`'s, the
gates' own statistics. What is new is only what needs several runs or every epoch at once:
the per-query matrix, reliability over epochs (pass^k, pass@k), and the cost and time fronts.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from pytest_gta.dataset import Dataset
from pytest_gta.errors import GtaUsageError
from pytest_gta.flags import OPT_COMPARE, OPT_COMPARE_REF, OPT_LEADERBOARD_ROWS, OPT_PRICE
from pytest_gta.models.catalog import leaderboard_boards, leaderboard_numbers, leaderboard_rows
from pytest_gta.report.baseline import Baseline, compare
from pytest_gta.report.build import ordered
from pytest_gta.report.schema import CaseRecord, RunReport, identity_of
from pytest_gta.report.table import MODE_COLUMNS
from pytest_gta.version import __version__
from pytest_gta.vocabulary import CATEGORY_NAMES, ERROR_KINDS, MODES, QUERY_TYPES

COMPARISON_SCHEMA = "pytest-gta-comparison/1"
#: Table 4's columns per mode: the paper's percentages, every one higher-is-better (the
#: call counts of a single run's table are not the paper's and would not rank runs).
TABLE4_COLUMNS: dict[str, tuple[str, ...]] = {
    mode: tuple(c.key for c in columns if c.percent) for mode, columns in MODE_COLUMNS.items()
}
#: Table 5's columns: the errored calls, then each error kind's share of them in percent.
TABLE5_COLUMNS = ("errored_calls", *ERROR_KINDS)
#: Values are compared for "best" at the precision the tables show (two decimals), so two
#: rows that read the same are both marked, as the paper marks ties.
BEST_DIGITS = 2
#: The fronts: (name, the run's ``cost`` key on the x axis, lower is better); y is e2e AnsAcc.
FRONTS = (("cost", "cost_per_case"), ("time", "wall_per_case_s"))
#: How a matrix cell says that a query's epochs ended differently.
MIXED = "mixed"


@dataclass(frozen=True)
class RunInput:
    """One run to compare: its (merged) report, and where it came from."""

    #: How every table names the run; unique in a comparison (the command de-duplicates).
    label: str
    #: The report file(s) as given (a run's shards are merged into one report first).
    sources: tuple[str, ...]
    report: RunReport
    records: tuple[CaseRecord, ...]
    #: The run's own HTML report beside it (a path, for links), if there is one.
    html: str | None = None


def build_comparison(
    runs: Sequence[RunInput],
    dataset: Dataset,
    *,
    reference: str | None = None,
    leaderboard: Sequence[str] = (),
    level: float = 0.95,
    samples: int = 2000,
    notes: Sequence[str] = (),
) -> dict[str, Any]:
    """The ``pytest-gta-comparison/1`` dict of ``runs`` (docs/compare.md).

    Args:
        runs: the runs in the order the tables list them; each report is on ``dataset``.
        dataset: the dataset every run scored (query types, tool categories, order).
        reference: the label of the run the paired tests compare with (``None``: the first).
        leaderboard: board names (every row of the board) and model names (the model's
            newest row), as ``--gta-leaderboard-rows`` lists them.
        level: the confidence level of the paired tests' intervals.
        samples: bootstrap and permutation resamples of the paired tests.
        notes: what the caller found (settings that differ, merged shards), kept first.

    Raises:
        GtaUsageError: no run, a label given twice, an unknown reference label, or a
            leaderboard name that is neither a board nor a model on one.
    """
    if not runs:
        raise GtaUsageError(f"{OPT_COMPARE}: no run to compare")
    labels = [run.label for run in runs]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        raise GtaUsageError(f"{OPT_COMPARE}: the label(s) {', '.join(twice)} name several runs")
    ref = _reference(labels, reference)
    published = leaderboard_selection(leaderboard)
    out_notes = list(notes)
    in_order = {run.label: ordered(run.records, dataset) for run in runs}
    entries = [_run_entry(run, in_order[run.label], out_notes) for run in runs]
    out_notes += _selection_notes(runs, in_order, published, dataset)
    return {
        "schema": COMPARISON_SCHEMA,
        "pytest_gta": __version__,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "dataset": {"sha256": dataset.sha256, "path": dataset.root_str, "queries": len(dataset)},
        "level": level,
        "samples": samples,
        "reference": ref,
        "notes": out_notes,
        "runs": entries,
        "tables": {"table4": table4(entries, published), "table5": table5(entries)},
        "leaderboard": published,
        "paired": _paired(runs, in_order, ref, dataset, level=level, samples=samples),
        "matrix": query_matrix(labels, in_order, ref, dataset),
        "front": {name: front(entries, x) for name, x in FRONTS},
    }


# --------------------------------------------------------------------------------------------
# Names: the reference run and the leaderboard rows


def _reference(labels: Sequence[str], reference: str | None) -> str:
    if reference is None:
        return labels[0]
    if reference in labels:
        return reference
    close = difflib.get_close_matches(reference, labels, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise GtaUsageError(
        f"{OPT_COMPARE_REF}={reference}: no run has that label{hint} "
        f"(the runs: {', '.join(labels)})"
    )


def leaderboard_selection(names: Sequence[str]) -> list[dict[str, Any]]:
    """The published rows ``names`` choose, as ``{"model", "board", "values"}``, in that order.

    A board name (``2026-02``) takes every row of that board; a model name (case-insensitive)
    its newest row. A row named twice is listed once.

    Raises:
        GtaUsageError: a name that is neither, listing the boards and the close model names.
    """
    boards = leaderboard_boards()
    newest = leaderboard_rows()
    by_lower = {model.lower(): model for model in newest}
    chosen: dict[tuple[str, str], dict[str, Any]] = {}
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        if name in boards:
            rows = list(boards[name].values())
        elif name.lower() in by_lower:
            rows = [newest[by_lower[name.lower()]]]
        else:
            close = difflib.get_close_matches(name.lower(), list(by_lower), n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(by_lower[c] for c in close)}?" if close else ""
            raise GtaUsageError(
                f"{OPT_LEADERBOARD_ROWS}={name}: neither a leaderboard board nor a model on one"
                f"{hint} (the boards: {', '.join(boards)}; a model name takes its newest row)"
            )
        for row in rows:
            numbers = leaderboard_numbers(row)
            values = {k: float(v) for k, v in numbers.items() if isinstance(v, int | float)}
            chosen.setdefault(
                (row["board"], row["model"]),
                {"model": row["model"], "board": row["board"], "values": values},
            )
    return list(chosen.values())


def leaderboard_label(row: Mapping[str, Any]) -> str:
    """How the tables name a published row: ``MODEL@BOARD`` (a model may be on two boards)."""
    return f"{row['model']}@{row['board']}"


# --------------------------------------------------------------------------------------------
# One run


def _run_entry(run: RunInput, records: Sequence[CaseRecord], notes: list[str]) -> dict[str, Any]:
    """The run's entry: its report's own numbers, its cost, its reliability over epochs."""
    report = run.report
    identity = dict(identity_of(report))
    modes = [m for m in MODES if m in report["metrics"]]
    return {
        "label": run.label,
        "model": report["model"],
        "protocol": identity["protocol"],
        "agent": identity["agent"],
        "identity": identity,
        "sources": list(run.sources),
        "html": run.html,
        "modes": modes,
        "epochs": int(report.get("epochs", 1)),
        "cases": len(report["cases"]),
        "settings": dict(report["settings"]),
        "metrics": {m: dict(report["metrics"][m]) for m in modes},
        "metrics_ci": {m: dict(report["metrics_ci"].get(m, {})) for m in modes},
        "pass_rate": {m: report["pass_rate"][m] for m in modes if m in report["pass_rate"]},
        "errors": {m: dict(report["errors"][m]) for m in modes if m in report["errors"]},
        "tool_calls": {m: dict(v) for m, v in report["tool_calls"].items() if m in modes},
        "outcomes": dict(report["outcomes"]),
        "cost": cost_of(report, records),
        "reliability": reliability_of(run.label, records, modes, report, notes),
    }


def cost_of(report: Mapping[str, Any], records: Sequence[CaseRecord]) -> dict[str, Any]:
    """The run's tokens, cost and times, in total and per case that ran (skipped ones not).

    Tokens and cost are the report's ``usage``; the wall time its ``duration_s``. The wall time
    per case is that over the cases that ran: what the configuration (concurrency, workers
    included) costs in time, which is what the time front weighs. A merged report has no
    ``duration_s`` (its shards ran apart): there it is the mean of the cases' own durations
    (an episode played ahead counts its time in the pool). The model time is ``usage.model_s``,
    else the sum of the cases' ``gta_model_s`` properties (``None`` where no case has one).
    """
    ran = [r for r in records if r.outcome != "skipped"]
    cases = len(ran)
    usage = report.get("usage") or {}
    tokens_in = int(usage.get("input_tokens") or 0)
    tokens_out = int(usage.get("output_tokens") or 0)
    cost = usage.get("cost_usd")
    wall = report.get("duration_s")
    durations = [
        float(duration)
        for r in ran
        if r.detail is not None and (duration := r.detail.get("duration")) is not None
    ]
    model_s = usage.get("model_s")
    if not isinstance(model_s, int | float):
        timed = [
            float(r.properties["gta_model_s"])
            for r in records
            if isinstance(r.properties.get("gta_model_s"), int | float)
        ]
        model_s = sum(timed) if timed else None

    def per_case(total: Any) -> float | None:
        return None if total is None or not cases else float(total) / cases

    return {
        "cases": cases,
        "input_tokens": tokens_in,
        "output_tokens": tokens_out,
        "tokens_per_case": (tokens_in + tokens_out) / cases if cases else 0.0,
        "cost_usd": None if cost is None else float(cost),
        "cost_per_case": per_case(cost),
        "wall_s": None if wall is None else float(wall),
        "wall_per_case_s": per_case(wall)
        if wall is not None
        else (sum(durations) / len(durations) if durations else None),
        "model_s": None if model_s is None else float(model_s),
        "model_per_case_s": per_case(model_s),
    }


def pass_hat_k(outcomes: Sequence[tuple[int, int]], k: int) -> float | None:
    """tau-bench's pass^k: the mean over queries of C(c, k) / C(n, k), in percent.

    ``outcomes`` holds each query's (n epochs, c passed); queries with fewer than ``k`` epochs
    are left out (``None``: no query has ``k``).
    """
    terms = [math.comb(c, k) / math.comb(n, k) for n, c in outcomes if n >= k]
    return sum(terms) / len(terms) * 100 if terms else None


def pass_at_k(outcomes: Sequence[tuple[int, int]], k: int) -> float | None:
    """The unbiased pass@k (Codex, MCPMark): the mean of 1 - C(n - c, k) / C(n, k), in percent."""
    terms = [1 - math.comb(n - c, k) / math.comb(n, k) for n, c in outcomes if n >= k]
    return sum(terms) / len(terms) * 100 if terms else None


def reliability_of(
    label: str,
    records: Sequence[CaseRecord],
    modes: Sequence[str],
    report: Mapping[str, Any],
    notes: list[str],
) -> dict[str, Any]:
    """Per mode: pass^k and pass@k for k = 1..epochs, and the flaky queries in dataset order.

    An errored or skipped epoch counts as not passed. A query with fewer epochs than the run
    is counted with its own number of epochs (and a note says so).
    """
    out: dict[str, Any] = {}
    for mode in modes:
        counts: dict[str, list[int]] = {}
        for record in records:
            if record.mode == mode:
                slot = counts.setdefault(record.qid, [0, 0])
                slot[0] += 1
                slot[1] += record.outcome == "passed"
        pairs = [(n, c) for n, c in counts.values()]
        # The report's epochs count those in which some case ran; an epoch whose cases were
        # all skipped (a session stopped early) still counts here, as not passed.
        epochs = max([int(report.get("epochs", 1)), *(n for n, _c in pairs)])
        short = [qid for qid, (n, _c) in counts.items() if n < epochs]
        if short:
            notes.append(
                f"{label}: {len(short)} {mode} quer{'y' if len(short) == 1 else 'ies'} "
                f"({', '.join(short[:5])}{', ...' if len(short) > 5 else ''}) ran fewer than the "
                f"run's {epochs} epochs; pass^k and pass@k count each with its own epochs"
            )
        ks = list(range(1, epochs + 1))
        out[mode] = {
            "epochs": epochs,
            "k": ks,
            "pass_hat_k": {str(k): pass_hat_k(pairs, k) for k in ks},
            "pass_at_k": {str(k): pass_at_k(pairs, k) for k in ks},
            "flaky": [qid for qid, (n, c) in counts.items() if 0 < c < n],
        }
    return out


# --------------------------------------------------------------------------------------------
# Tables


def _rounded(value: Any) -> float | None:
    return None if value is None else round(float(value), BEST_DIGITS)


def table4(
    entries: Sequence[Mapping[str, Any]], published: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """Per mode, a row per run that has the mode, then the published rows; the best marked."""
    out: dict[str, Any] = {}
    for mode, columns in TABLE4_COLUMNS.items():
        rows: list[dict[str, Any]] = []
        for entry in entries:
            if mode not in entry["modes"]:
                continue
            metrics, cis = entry["metrics"][mode], entry["metrics_ci"].get(mode, {})
            rows.append(
                {
                    "label": entry["label"],
                    "kind": "run",
                    "board": None,
                    "model": entry["model"],
                    "values": {c: _float(metrics.get(c)) for c in columns},
                    "ci": {
                        c: [float(cis[c]["low"]), float(cis[c]["high"])]
                        for c in columns
                        if isinstance(cis.get(c), Mapping) and cis[c].get("low") is not None
                    },
                }
            )
        if not rows:
            continue
        for row in published:
            rows.append(
                {
                    "label": leaderboard_label(row),
                    "kind": "leaderboard",
                    "board": row["board"],
                    "model": row["model"],
                    "values": {c: _float(row["values"].get(c)) for c in columns},
                    "ci": {},
                }
            )
        out[mode] = {"columns": list(columns), "rows": rows, "best": best_of(rows, columns)}
    return out


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def best_of(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> dict[str, list[str]]:
    """Per column, the labels of the rows with the highest value at display precision."""
    best: dict[str, list[str]] = {}
    for column in columns:
        values = {row["label"]: _rounded(row["values"].get(column)) for row in rows}
        known = [v for v in values.values() if v is not None]
        top = max(known) if known else None
        best[column] = [label for label, v in values.items() if top is not None and v == top]
    return best


def table5(entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A row per run and mode: the errored calls, and each error kind's share in percent."""
    rows = []
    for entry in entries:
        for mode, counts in entry["errors"].items():
            total = sum(int(counts.get(k, 0)) for k in ERROR_KINDS)
            row: dict[str, Any] = {"label": entry["label"], "mode": mode, "errored_calls": total}
            for kind in ERROR_KINDS:
                row[kind] = int(counts.get(kind, 0)) / total * 100 if total else None
            rows.append(row)
    return {"columns": list(TABLE5_COLUMNS), "rows": rows}


# --------------------------------------------------------------------------------------------
# Paired tests, the per-query matrix and the fronts


def _paired(
    runs: Sequence[RunInput],
    in_order: Mapping[str, Sequence[CaseRecord]],
    reference: str,
    dataset: Dataset,
    *,
    level: float,
    samples: int,
) -> dict[str, Any]:
    """Each run against the reference, by :func:`.compare.compare` (the gates' statistics)."""
    ref = next(run for run in runs if run.label == reference)
    baseline = Baseline(reference, ref.records, ref.report)
    return {
        "reference": reference,
        "runs": {
            run.label: dict(
                compare(in_order[run.label], baseline, dataset, level=level, samples=samples)
            )
            for run in runs
            if run.label != reference
        },
    }


def _cell(records: Sequence[CaseRecord]) -> dict[str, Any]:
    outcomes = {r.outcome for r in records}
    return {
        "outcome": next(iter(outcomes)) if len(outcomes) == 1 else MIXED,
        "passed": sum(r.outcome == "passed" for r in records),
        "epochs": len(records),
    }


def _rate(cell: Mapping[str, Any]) -> float:
    return float(cell["passed"]) / float(cell["epochs"])


def query_matrix(
    labels: Sequence[str],
    in_order: Mapping[str, Sequence[CaseRecord]],
    reference: str,
    dataset: Dataset,
) -> dict[str, Any]:
    """Which run passes which query (every epoch counted), grouped by query type and category.

    A query flips when the runs that have it do not all pass it at the same rate; against the
    reference a run ``regressed`` a query whose pass rate fell, ``fixed`` one whose rate rose.
    """
    by_case: dict[tuple[str, str], dict[str, list[CaseRecord]]] = {}
    for label in labels:
        for record in in_order[label]:
            by_case.setdefault((record.mode, record.qid), {}).setdefault(label, []).append(record)
    mode_order: dict[str, int] = {m: i for i, m in enumerate(MODES)}
    keys = sorted(by_case, key=lambda k: (mode_order[k[0]], dataset[k[1]].position))
    queries = []
    for mode, qid in keys:
        found = by_case[(mode, qid)]
        cells: dict[str, Any] = {
            label: _cell(found[label])
            if label in found
            else {"outcome": None, "passed": 0, "epochs": 0}
            for label in labels
        }
        rates = {label: _rate(cells[label]) for label in found}
        versus: dict[str, str] = {}
        if reference in rates:
            for label, rate in rates.items():
                if label != reference:
                    before = rates[reference]
                    versus[label] = (
                        "same" if rate == before else "regressed" if rate < before else "fixed"
                    )
        query = dataset[qid]
        queries.append(
            {
                "mode": mode,
                "query_id": qid,
                "type": query.type,
                "categories": [c for c in CATEGORY_NAMES if c in query.categories],
                "cells": cells,
                "flip": len(set(rates.values())) > 1,
                "versus_reference": versus,
            }
        )
    return {"runs": list(labels), "queries": queries, "groups": _groups(labels, queries)}


def _groups(labels: Sequence[str], queries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per mode, query type and tool category: the queries, and each run's passed cases."""
    groups: list[dict[str, Any]] = []
    for mode in MODES:
        mine = [q for q in queries if q["mode"] == mode]
        if not mine:
            continue
        for by, names, member in (
            ("type", QUERY_TYPES, lambda q, n: q["type"] == n),
            ("category", CATEGORY_NAMES, lambda q, n: n in q["categories"]),
        ):
            for name in names:
                members = [q for q in mine if member(q, name)]
                if not members:
                    continue
                groups.append(
                    {
                        "mode": mode,
                        "by": by,
                        "name": name,
                        "queries": len(members),
                        "passed": {
                            label: sum(int(q["cells"][label]["passed"]) for q in members)
                            for label in labels
                        },
                        "cases": {
                            label: sum(int(q["cells"][label]["epochs"]) for q in members)
                            for label in labels
                        },
                    }
                )
    return groups


def pareto(points: Sequence[tuple[str, float, float]]) -> list[str]:
    """The labels of the points no other point beats: x as low and y as high, one strictly.

    Points that are equal on both are all on the front; the labels keep the order given.
    """
    return [
        label
        for label, x, y in points
        if not any((ox <= x and oy >= y) and (ox < x or oy > y) for _other, ox, oy in points)
    ]


def front(entries: Sequence[Mapping[str, Any]], x_key: str) -> dict[str, Any]:
    """The runs' (``x_key``, e2e AnsAcc) points and the Pareto front among them."""
    points = []
    left_out: dict[str, str] = {}
    for entry in entries:
        x = entry["cost"].get(x_key)
        ans = entry["metrics"].get("e2e", {}).get("ans_acc")
        if "e2e" not in entry["modes"]:
            left_out[entry["label"]] = "no end-to-end mode (AnsAcc is an e2e metric)"
        elif ans is None:
            left_out[entry["label"]] = "AnsAcc is undefined (no query with an answer)"
        elif x is None:
            left_out[entry["label"]] = _MISSING_X[x_key]
        else:
            points.append({"label": entry["label"], "x": float(x), "ans_acc": float(ans)})
    on_front = pareto([(p["label"], p["x"], p["ans_acc"]) for p in points])
    return {"x": x_key, "points": points, "front": on_front, "left_out": left_out}


_MISSING_X = {
    "cost_per_case": f"no cost known (no prices for the model: {OPT_PRICE} sets them)",
    "wall_per_case_s": "no case durations in the report",
}


# --------------------------------------------------------------------------------------------
# Notes


def _selection_notes(
    runs: Sequence[RunInput],
    in_order: Mapping[str, Sequence[CaseRecord]],
    published: Sequence[Mapping[str, Any]],
    dataset: Dataset,
) -> list[str]:
    """What makes the tables' rows not strictly comparable: modes, query selections."""
    notes = []
    for mode in MODES:
        having = {run.label: {r.qid for r in in_order[run.label] if r.mode == mode} for run in runs}
        having = {label: qids for label, qids in having.items() if qids}
        if not having:
            continue
        missing = [run.label for run in runs if run.label not in having]
        if missing:
            notes.append(
                f"{', '.join(missing)} did not run the {mode} mode: the {mode} tables leave "
                f"{'it' if len(missing) == 1 else 'them'} out"
            )
        selections = {frozenset(q) for q in having.values()}
        if len(selections) > 1:
            sizes = ", ".join(f"{label} {len(q)}" for label, q in having.items())
            notes.append(
                f"the runs scored different {mode} queries ({sizes}): each run's metrics are "
                "over its own queries; the paired tests use the queries both runs have"
            )
    if published:
        scored = max(len({r.qid for r in records}) for records in in_order.values())
        if scored != 229 or len(dataset) != 229:
            notes.append(
                f"the runs scored at most {scored} of the dataset's {len(dataset)} queries; the "
                "published rows are over all 229 GTA queries, so they are not directly comparable"
            )
    return notes
