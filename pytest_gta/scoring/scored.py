"""A scored benchmark's metrics from its cases (:mod:`pytest_gta.results.scored`).

Each named score's mean over the counted cases, in percent, and the pass rate. Counted are the
cases that ran: a skipped case is not counted; an errored case is, with no score, so it counts
0 in every mean (as an errored GTA-Atomic case counts as wrong), and an agent that crashes on
its hard cases cannot score better than one that tries them.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_gta.results.scored import PASS_RATE, ScoredCase


def scored_metrics(cases: Sequence[ScoredCase]) -> tuple[dict[str, float | None], int, int]:
    """``(metrics, counted, errors)`` of ``cases``; a metric over no counted case is ``None``."""
    counted = [c for c in cases if c.outcome != "skipped"]
    names = sorted({name for c in counted for name in c.scores})
    metrics: dict[str, float | None] = {}
    for name in names:
        measured = [c for c in counted if c.outcome == "error" or c.scores.get(name) is not None]
        total = sum(c.scores.get(name) or 0.0 for c in measured)
        metrics[name] = round(100.0 * total / len(measured), 4) if measured else None
    passed = sum(1 for c in counted if c.passed)
    metrics[PASS_RATE] = round(100.0 * passed / len(counted), 4) if counted else None
    return metrics, len(counted), sum(1 for c in counted if c.outcome == "error")
