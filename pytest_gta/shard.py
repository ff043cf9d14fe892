"""Splitting the selected GTA cases across CI jobs (``--gta-shard=K/N``).

The split depends only on the case ids and their weights (the reference chain's length), never
on the collection order, the machine or the process: every CI job, and every xdist worker of a
job (xdist requires identical collections), computes the same shards. Weights balance the
work, not the case count: a case costs one model call per reference step in step mode, and
about as many turns end to end (one per reference call, plus the answer).

The split itself (:func:`split`) is pure; :func:`shard_items` applies it to pytest items.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pytest

    from pytest_gta.case import Case


@dataclass(frozen=True, order=True)
class Shard:
    """Shard ``index`` of ``total`` (both from 1, as ``--gta-shard=K/N`` writes them)."""

    index: int
    total: int

    def __str__(self) -> str:
        return f"{self.index}/{self.total}"


def split(weights: Mapping[str, int], total: int) -> list[list[str]]:
    """The keys of ``weights`` in ``total`` shards, each sorted, balanced by weight.

    Greedy longest-processing-time: the heaviest key first (ties by key, so the input order
    never matters) goes to the currently lightest shard (ties to the lowest index). Afterwards
    no shard is heavier than the lightest by more than the largest weight.
    """
    return _split(weights, total) + [[] for _ in range(total - len(weights))]


def _split(weights: Mapping[str, int], total: int) -> list[list[str]]:
    """The non-empty prefix of :func:`split`: at most one shard per key, however many asked.

    With more shards than keys every key lands in an empty shard, the lowest-numbered first, so
    the shards past ``len(weights)`` stay empty: building them would cost memory per shard
    (``--gta-shard=1/99999999999`` once did), not per case.
    """
    total = min(total, len(weights))
    shards: list[list[str]] = [[] for _ in range(total)]
    loads = [(0, index) for index in range(total)]
    for key in sorted(weights, key=lambda k: (-weights[k], k)):
        load, index = heapq.heappop(loads)
        shards[index].append(key)
        heapq.heappush(loads, (load + weights[key], index))
    return [sorted(keys) for keys in shards]


def case_weight(case: Case) -> int:
    """Expected work of a case: its reference assistant messages (at least 1).

    Step mode makes one model call per reference assistant message; an end-to-end episode
    takes about one turn per reference call plus the answer, the same count.
    """
    return max(1, len(case.query.assistant_indices))


@dataclass(frozen=True)
class ShardSelection:
    """What ``--gta-shard`` kept: the report records it, the merge checks against it."""

    shard: Shard
    #: The shard's case ids (``e2e-3``), sorted.
    cases: tuple[str, ...]
    #: GTA cases selected before the split (after ``-k``, ``-m``, ``--lf``, ``--deselect``).
    selected: int

    def to_json(self) -> dict[str, Any]:
        """The report's ``shard`` entry (builtins: it also travels from xdist workers)."""
        return {
            "spec": str(self.shard),
            "index": self.shard.index,
            "total": self.shard.total,
            "selected": self.selected,
            "cases": list(self.cases),
        }


def gta_case_of(item: pytest.Item) -> Case | None:
    """The GTA-Atomic case an item runs, if it is a GTA-Atomic item."""
    case = getattr(getattr(item, "callspec", None), "params", {}).get("gta_case")
    # A query case (not another benchmark's parameter); pytest_gta.case is this layer's sibling.
    return case if hasattr(case, "query") else None


def shard_items(
    items: Sequence[pytest.Item], shard: Shard
) -> tuple[list[pytest.Item], list[pytest.Item], ShardSelection]:
    """(kept, deselected, selection) of ``items`` for ``shard``, in the items' order.

    Items of one case stay together (a project may run a case in several tests). Items that
    are not GTA cases run in shard 1 only, so a project's own tests run once per split, not N
    times.
    """
    weights: dict[str, int] = {}
    for item in items:
        case = gta_case_of(item)
        if case is not None:
            weights[case.id] = case_weight(case)
    shards = _split(weights, shard.total)
    mine = set(shards[shard.index - 1]) if shard.index <= len(shards) else set()
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        case = gta_case_of(item)
        keep = shard.index == 1 if case is None else case.id in mine
        (kept if keep else dropped).append(item)
    return kept, dropped, ShardSelection(shard, tuple(sorted(mine)), len(weights))
