"""What a comparison computes that no single run's report has: the numbers across epochs and runs.

A run's own report holds its metrics, intervals and error counts, and the comparison copies
them (:mod:`pytest_gta.report.runs`). What needs every epoch of a run, or several runs at once,
is computed here, from the runs' cases: the cost and time per case, reliability over epochs
(tau-bench's pass^k, the unbiased pass@k, the flaky queries), the per-query matrix of which run
passes which query, and the Pareto fronts of end-to-end AnsAcc against cost and time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal, NamedTuple

from pytest_gta.dataset import Dataset
from pytest_gta.flags import OPT_PRICE
from pytest_gta.results.base import PerMode
from pytest_gta.results.case import CaseResult
from pytest_gta.results.comparison import (
    MIXED,
    Front,
    FrontKey,
    FrontPoint,
    Matrix,
    MatrixCell,
    MatrixGroup,
    MatrixQuery,
    Reliability,
    RunCost,
    Versus,
)
from pytest_gta.results.report import RunReport
from pytest_gta.vocabulary import CATEGORY_NAMES, MODES, QUERY_TYPES, Mode

# --------------------------------------------------------------------------------------------
# One run: its cost and its reliability over epochs


def cost_of(report: RunReport, cases: Sequence[CaseResult]) -> RunCost:
    """The run's tokens, cost and times, in total and per case that ran (skipped ones not).

    Tokens and cost are the report's ``usage``; the wall time its ``duration_s``. The wall time
    per case is that over the cases that ran: what the configuration (concurrency, workers
    included) costs in time, which is what the time front weighs. A merged report has no
    ``duration_s`` (its shards ran apart): there it is the mean of the scored cases' own
    durations (an episode played ahead counts its time in the pool). The model time is
    ``usage.model_s``, else the sum of the cases' ``model_s`` (``None`` where no case has one).
    """
    ran = [c for c in cases if c.outcome != "skipped"]
    count = len(ran)
    usage = report.usage
    tokens_in, tokens_out = usage.input_tokens, usage.output_tokens
    cost = usage.cost_usd
    wall = report.duration_s
    durations = [
        float(c.duration) for c in ran if c.primitives is not None and c.duration is not None
    ]
    model_s: float | None
    if isinstance(usage.model_s, int | float):
        model_s = float(usage.model_s)
    else:  # a report from before usage.model_s
        timed = [c.model_s for c in cases if c.model_s is not None]
        model_s = sum(timed) if timed else None

    def per_case(total: float | None) -> float | None:
        return None if total is None or not count else float(total) / count

    return RunCost(
        cases=count,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        tokens_per_case=(tokens_in + tokens_out) / count if count else 0.0,
        cost_usd=None if cost is None else float(cost),
        cost_per_case=per_case(cost),
        wall_s=None if wall is None else float(wall),
        wall_per_case_s=per_case(wall)
        if wall is not None
        else (sum(durations) / len(durations) if durations else None),
        model_s=model_s,
        model_per_case_s=per_case(model_s),
    )


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
    cases: Sequence[CaseResult],
    modes: Sequence[Mode],
    epochs: int,
    notes: list[str],
) -> PerMode[Reliability, Reliability]:
    """Per mode: pass^k and pass@k for k = 1..epochs, and the flaky queries in dataset order.

    ``epochs`` is the report's. An errored or skipped epoch counts as not passed. A query with
    fewer epochs than the run is counted with its own number of epochs (and a note says so).
    """
    out: dict[str, Reliability] = {}
    for mode in modes:
        counts: dict[str, list[int]] = {}
        for case in cases:
            if case.mode == mode:
                slot = counts.setdefault(case.query_id, [0, 0])
                slot[0] += 1
                slot[1] += case.outcome == "passed"
        pairs = [(n, c) for n, c in counts.values()]
        # The report's epochs count those in which some case ran; an epoch whose cases were
        # all skipped (a session stopped early) still counts here, as not passed.
        most = max([epochs, *(n for n, _c in pairs)])
        short = [qid for qid, (n, _c) in counts.items() if n < most]
        if short:
            notes.append(
                f"{label}: {len(short)} {mode} quer{'y' if len(short) == 1 else 'ies'} "
                f"({', '.join(short[:5])}{', ...' if len(short) > 5 else ''}) ran fewer than the "
                f"run's {most} epochs; pass^k and pass@k count each with its own epochs"
            )
        ks = list(range(1, most + 1))
        out[mode] = Reliability(
            epochs=most,
            k=ks,
            pass_hat_k={str(k): pass_hat_k(pairs, k) for k in ks},
            pass_at_k={str(k): pass_at_k(pairs, k) for k in ks},
            flaky=[qid for qid, (n, c) in counts.items() if 0 < c < n],
        )
    return PerMode[Reliability, Reliability](step=out.get("step"), e2e=out.get("e2e"))


# --------------------------------------------------------------------------------------------
# The per-query matrix


def _cell(cases: Sequence[CaseResult]) -> MatrixCell:
    outcomes = {c.outcome for c in cases}
    return MatrixCell(
        outcome=next(iter(outcomes)) if len(outcomes) == 1 else MIXED,
        passed=sum(c.outcome == "passed" for c in cases),
        epochs=len(cases),
    )


def query_matrix(
    labels: Sequence[str],
    in_order: Mapping[str, Sequence[CaseResult]],
    reference: str,
    dataset: Dataset,
) -> Matrix:
    """Which run passes which query (every epoch counted), grouped by query type and category.

    A query flips when the runs that have it do not all pass it at the same rate; against the
    reference a run ``regressed`` a query whose pass rate fell, ``fixed`` one whose rate rose.
    """
    by_case: dict[tuple[Mode, str], dict[str, list[CaseResult]]] = {}
    for label in labels:
        for case in in_order[label]:
            by_case.setdefault((case.mode, case.query_id), {}).setdefault(label, []).append(case)
    mode_order: dict[str, int] = {m: i for i, m in enumerate(MODES)}
    keys = sorted(by_case, key=lambda k: (mode_order[k[0]], dataset[k[1]].position))
    queries = []
    for mode, qid in keys:
        found = by_case[(mode, qid)]
        cells = {
            label: _cell(found[label])
            if label in found
            else MatrixCell(outcome=None, passed=0, epochs=0)
            for label in labels
        }
        rates = {label: cells[label].rate for label in found}
        versus: dict[str, Versus] = {}
        if reference in rates:
            for label, rate in rates.items():
                if label != reference:
                    before = rates[reference]
                    versus[label] = (
                        "same" if rate == before else "regressed" if rate < before else "fixed"
                    )
        query = dataset[qid]
        queries.append(
            MatrixQuery(
                mode=mode,
                query_id=qid,
                type=query.type,
                categories=[c for c in CATEGORY_NAMES if c in query.categories],
                cells=cells,
                flip=len(set(rates.values())) > 1,
                versus_reference=versus,
            )
        )
    return Matrix(runs=list(labels), queries=queries, groups=_groups(labels, queries))


def _groups(labels: Sequence[str], queries: Sequence[MatrixQuery]) -> list[MatrixGroup]:
    """Per mode, query type and tool category: the queries, and each run's passed cases."""
    groups: list[MatrixGroup] = []
    for mode in MODES:
        mine = [q for q in queries if q.mode == mode]
        if not mine:
            continue
        kinds: list[tuple[Literal["type", "category"], str, list[MatrixQuery]]] = [
            *(("type", name, [q for q in mine if q.type == name]) for name in QUERY_TYPES),
            *(
                ("category", name, [q for q in mine if name in q.categories])
                for name in CATEGORY_NAMES
            ),
        ]
        for by, name, members in kinds:
            if not members:
                continue
            groups.append(
                MatrixGroup(
                    mode=mode,
                    by=by,
                    name=name,
                    queries=len(members),
                    passed={label: sum(q.cells[label].passed for q in members) for label in labels},
                    cases={label: sum(q.cells[label].epochs for q in members) for label in labels},
                )
            )
    return groups


# --------------------------------------------------------------------------------------------
# The fronts


def pareto(points: Sequence[tuple[str, float, float]]) -> list[str]:
    """The labels of the points no other point beats: x as low and y as high, one strictly.

    Points that are equal on both are all on the front; the labels keep the order given.
    """
    return [
        label
        for label, x, y in points
        if not any((ox <= x and oy >= y) and (ox < x or oy > y) for _other, ox, oy in points)
    ]


class Candidate(NamedTuple):
    """A run as the fronts weigh it: its modes, its cost, its end-to-end AnsAcc."""

    label: str
    modes: Sequence[str]
    cost: RunCost | None
    ans_acc: float | None


def front(candidates: Sequence[Candidate], x_key: FrontKey) -> Front:
    """The runs' (``x_key``, e2e AnsAcc) points and the Pareto front among them."""
    points = []
    left_out: dict[str, str] = {}
    for run in candidates:
        x = None if run.cost is None else run.cost.x(x_key)
        if "e2e" not in run.modes:
            left_out[run.label] = "no end-to-end mode (AnsAcc is an e2e metric)"
        elif run.ans_acc is None:
            left_out[run.label] = "AnsAcc is undefined (no query with an answer)"
        elif x is None:
            left_out[run.label] = _MISSING_X[x_key]
        else:
            points.append(FrontPoint(label=run.label, x=float(x), ans_acc=float(run.ans_acc)))
    on_front = pareto([(p.label, p.x, p.ans_acc) for p in points])
    return Front(x=x_key, points=points, front=on_front, left_out=left_out)


_MISSING_X: dict[FrontKey, str] = {
    "cost_per_case": f"no cost known (no prices for the model: {OPT_PRICE} sets them)",
    "wall_per_case_s": "no case durations in the report",
}
