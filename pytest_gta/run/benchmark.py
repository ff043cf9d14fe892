"""The seam a benchmark implements: GTA-Atomic, GTA-Workflow, or a third party's task family.

One session (:class:`pytest_gta.session.gta_session.GtaSession`) drives whichever benchmark the
data asks for: the hooks, the bundled suite's collection, ``-k``/``-m``/``--gta-shard`` on the
items, signals, xdist's workers and the run's end are written once there. What differs between
task families is what this protocol asks: which cases there are (their parameters, marks and
ids), how one is produced and judged (in the case's own fixture, so a harness failure is
pytest's *error*), what the header says, and how the controller gathers and reports the run.

A benchmark is chosen from the data by the first-result hook ``pytest_gta_make_benchmark``. Its
built-in implementation (:func:`from_registry`) asks the factories registered under the
``pytest_gta.benchmarks`` entry-point group in turn: a third party's first, then GTA-Workflow
(a directory with ``end.json``), and GTA-Atomic last, which takes any data. A factory that
does not recognise the data returns ``None``.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import pytest

from pytest_gta.dataset import Dataset
from pytest_gta.tools import ToolSet

#: The entry-point group of benchmark factories (``name = "module:factory"``).
GROUP = "pytest_gta.benchmarks"
#: The built-in benchmarks, asked after every third party's, in this order (the last takes any).
BUILTIN_ORDER = ("gta-workflow", "gta-atomic")


@dataclass(frozen=True)
class BenchmarkContext:
    """What a benchmark factory gets: the run's configuration, its data and its services."""

    config: pytest.Config
    #: ``--gta-data`` resolved (``None``: nothing installed and no sample fallback yet).
    data: Path | None
    #: The session's services (the dataset, model, tools, cache, budget, agent, similarity:
    #: :class:`pytest_gta.session.state.GtaState`), built on first use.
    services: Any


@dataclass(frozen=True)
class QueryView:
    """A benchmark's tasks shown as GTA-Atomic queries, to the session's loop, tools and agent.

    The tool backends are built on :attr:`every` (the queries with every tool the data names);
    the model and the agent are shown :attr:`offered`'s queries (``None``: no backend takes
    part), with only the tools a backend offers.
    """

    every: Dataset
    offered: Callable[[ToolSet | None], Dataset]


@runtime_checkable
class Benchmark(Protocol):
    """A task family, as the session drives it."""

    #: Its name in reports and messages (``gta-atomic``, ``gta-workflow``).
    name: str
    #: The bundled test module collected when no test of the user's asks for ``gta_case``.
    suite: Path

    def start(self) -> None:
        """Validate what the run needs (a usage error before any case); register reporters."""

    def header(self) -> list[str]:
        """The run's ``gta:`` header lines (what is evaluated, on what, judged how)."""

    def queries(self) -> QueryView | None:
        """The tasks as queries for the session's services (``None``: the GTA dataset's)."""

    def params(self) -> list[Any]:
        """``gta_case``'s parameters (``pytest.param`` with its id and marks), in order."""

    def keep_shard(self, session: pytest.Session) -> None:
        """``--gta-shard=K/N``: keep this shard's share of ``session.items``."""

    def check_selection(self, nodeids: list[str]) -> None:
        """The final selection (every worker's, under xdist) is runnable, else a usage error."""

    def running_ahead(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> contextlib.AbstractContextManager[None]:
        """Around each test: keep this process's next cases running ahead."""

    def result(self, request: pytest.FixtureRequest, param: Any) -> Any:
        """``gta_result``: the case produced and judged, its properties on the item."""

    def runs_ahead(self) -> bool:
        """Whether this run's cases run ahead in the xdist workers (hand them all out at once)."""

    def for_workers(self) -> dict[str, Any]:
        """What a starting xdist worker needs of this benchmark (the session sends the rest)."""

    def reporting(self) -> Any:
        """The report's side of the run (a :class:`pytest_gta.session.collector.Reporting`)."""

    def finish(self, session: pytest.Session) -> dict[str, float]:
        """The session ends: stop what runs ahead; this process's timings for the report."""

    def halt(self, cause: str) -> None:
        """Interrupted (called in a signal handler: flags and signals only)."""

    def close(self) -> None:
        """Stop what the benchmark started (servers, proxies); called once, at unconfigure."""


@contextlib.contextmanager
def nothing_ahead() -> Iterator[None]:
    """:meth:`Benchmark.running_ahead` of a benchmark whose cases run in their own test."""
    yield


def from_registry(
    context: BenchmarkContext, load: Callable[[], list[importlib.metadata.EntryPoint]] | None = None
) -> Benchmark:
    """The first registered benchmark that takes the data (third parties' first).

    Raises:
        pytest.UsageError: no benchmark takes the data (an install without the built-ins).
    """
    entries = (load or _entries)()
    rank = {name: i for i, name in enumerate(BUILTIN_ORDER)}
    for entry in sorted(entries, key=lambda e: (rank.get(e.name, -1), e.name)):
        made = entry.load()(context)
        if made is not None:
            return made  # type: ignore[no-any-return]
    raise pytest.UsageError(
        f"pytest-gta: no benchmark registered under the {GROUP!r} entry-point group takes "
        f"the data at {context.data} (reinstall pytest-gta)"
    )


def _entries() -> list[importlib.metadata.EntryPoint]:
    return list(importlib.metadata.entry_points(group=GROUP))
