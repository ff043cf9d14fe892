"""Which cases run, how often, how long and how many at once: modes, selection, epochs, shards.

Its part of the settings is :class:`CaseSettings`. Several of its numbers size what is built
(``--gta-epochs`` cases, ``--gta-concurrency`` threads), so their ranges are narrow enough that
no value can exhaust the machine.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from pytest_gta.flags import (
    OPT_CONCURRENCY,
    OPT_EPOCH,
    OPT_EPOCHS,
    OPT_IDS,
    OPT_LIMIT,
    OPT_MAX_TURNS,
    OPT_MERGE,
    OPT_MODE,
    OPT_ONLY,
    OPT_SEED,
    OPT_SHARD,
)
from pytest_gta.options.core import (
    Feature,
    Given,
    OptionSpec,
    fields,
    int_at_least,
    int_range,
    out_of_range,
    shown,
)
from pytest_gta.shard import Shard
from pytest_gta.vocabulary import MODES, Mode

DEFAULT_MODES: tuple[Mode, ...] = ("e2e",)
DEFAULT_MAX_TURNS = 10
RANGES: dict[str, tuple[float, float]] = {
    OPT_LIMIT: (1, 1_000_000),
    OPT_MAX_TURNS: (1, 1000),
    OPT_CONCURRENCY: (1, 1024),
    OPT_EPOCHS: (1, 1000),
    OPT_SHARD: (1, 100_000),
}


def parse_modes(value: str) -> tuple[Mode, ...]:
    """``step``, ``e2e`` or ``step,e2e`` (any order, no repeats)."""
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items or any(v not in MODES for v in items) or len(set(items)) != len(items):
        raise pytest.UsageError(
            f"{OPT_MODE}={value}: choose step, e2e or step,e2e "
            "(step = step-by-step on the reference chain, e2e = the model drives the tools)"
        )
    return tuple(m for m in MODES if m in items)


def parse_limit(value: str) -> int:
    """A positive number of queries."""
    low, high = int_range(RANGES, OPT_LIMIT)
    hint = f"give a positive number of queries, e.g. {OPT_LIMIT}=20"
    return int_at_least(value, OPT_LIMIT, hint, low, maximum=high)


def parse_ids(value: str) -> tuple[str, ...]:
    """Comma-separated query ids (the keys of ``dataset.json``)."""
    ids = tuple(v.strip() for v in value.split(",") if v.strip())
    if not ids:
        raise pytest.UsageError(f"{OPT_IDS}={value!r}: give query ids like {OPT_IDS}=3,17,42")
    return ids


def parse_max_turns(value: str) -> int:
    """A positive number of model turns per end-to-end episode."""
    low, high = int_range(RANGES, OPT_MAX_TURNS)
    hint = f"give a positive number of turns (official: {DEFAULT_MAX_TURNS})"
    return int_at_least(value, OPT_MAX_TURNS, hint, low, maximum=high)


def parse_concurrency(value: str) -> int:
    """Episodes a process runs at once."""
    low, high = int_range(RANGES, OPT_CONCURRENCY)
    hint = f"give a positive number of episodes, e.g. {OPT_CONCURRENCY}=16"
    return int_at_least(value, OPT_CONCURRENCY, hint, low, maximum=high)


def parse_epochs(value: str) -> int:
    """How many times each case runs: 1 or more."""
    low, high = int_range(RANGES, OPT_EPOCHS)
    hint = "give how many times each case runs, e.g. 5 (default: 1)"
    return int_at_least(value, OPT_EPOCHS, hint, low, maximum=high)


def parse_shard(value: str) -> Shard:
    """``K/N``: shard K (from 1) of N."""
    low, high = int_range(RANGES, OPT_SHARD)
    index, sep, total = value.strip().partition("/")
    try:
        shard = Shard(int(index), int(total)) if sep else None
    except ValueError:
        shard = None
    hint = f"give K/N with 1 <= K <= N, e.g. {OPT_SHARD}=2/3 runs the second of three shards"
    if shard is None or not 1 <= shard.index <= shard.total:
        raise pytest.UsageError(f"{OPT_SHARD}={shown(value)}: {hint}")
    if shard.total > high:
        raise out_of_range(OPT_SHARD, value, f"{hint}; N", low, high)
    return shard


@dataclass(frozen=True)
class CaseSettings:
    """Which cases a run collects and how each runs."""

    modes: tuple[Mode, ...] = DEFAULT_MODES
    #: ``--gta-limit`` and ``--gta-ids``: ``None``, every query.
    limit: int | None = None
    ids: tuple[str, ...] | None = None
    #: ``--gta-max-turns``: model turns per end-to-end episode.
    max_turns: int = DEFAULT_MAX_TURNS
    #: ``--gta-concurrency``; ``None``: the model's own default (see pytest_gta.run.pipeline).
    concurrency: int | None = None
    #: ``--gta-epochs``: how many times each case runs.
    epochs: int = 1
    #: ``--gta-shard``: which part of the selected cases this job runs (``None``: all).
    shard: Shard | None = None
    #: ``--gta-only``: tests that are not GTA cases (a project's own) are deselected.
    only: bool = False


ROWS: tuple[OptionSpec, ...] = (
    OptionSpec(
        OPT_MODE,
        "MODES",
        "step, e2e or step,e2e (default: e2e)",
        parse=parse_modes,
        default=DEFAULT_MODES,
        setting="modes",
        doc_default="`e2e`",
        doc="`step`, `e2e` or `step,e2e`",
    ),
    OptionSpec(
        OPT_LIMIT,
        "N",
        "run only the first N queries",
        parse=parse_limit,
        setting="limit",
        doc_default="all",
        doc="only the first N queries",
        doc_range="{low} to {high}",
    ),
    OptionSpec(
        OPT_IDS,
        "IDS",
        "run only these query ids, e.g. 3,17,42",
        parse=parse_ids,
        setting="ids",
        doc_default="all",
        doc="only these query ids (`3,17,42`)",
    ),
    OptionSpec(
        OPT_ONLY,
        None,
        "deselect every collected test that is not a GTA case (a project's own tests, when "
        "pytest runs in its directory); without it they run beside the GTA cases, and the "
        "run says which",
        kind="bool",
        default=False,
        setting="only",
        doc_default="off",
        doc="deselect (pytest's deselection) every collected test that is not a GTA case: a "
        "project's own tests, collected because pytest runs in its directory. Without it they run "
        "beside the GTA cases (in the JUnit file too) and the header, the collection line and the "
        "report's notes name them (see [Running from a project's directory]"
        "(running.md#running-from-a-projects-directory))",
    ),
    OptionSpec(
        OPT_MAX_TURNS,
        "N",
        f"model turns per end-to-end episode (default: {DEFAULT_MAX_TURNS}, as official)",
        parse=parse_max_turns,
        default=DEFAULT_MAX_TURNS,
        setting="max_turns",
        doc_default="`10`",
        doc="model turns per end-to-end episode (10 is official)",
        doc_range="{low} to {high}",
    ),
    OptionSpec(
        OPT_CONCURRENCY,
        "N",
        "episodes (step prompts, end-to-end episodes; GTA-Workflow tasks) a process runs at "
        "once (default: what fits the model and judge: 16 over HTTP, 1 for a single-threaded "
        "engine or a judge served in-process)",
        parse=parse_concurrency,
        setting="concurrency",
        doc_default="fits the model",
        doc="episodes (step prompts, end-to-end episodes; GTA-Workflow tasks) a process runs at "
        "once: 16 over HTTP, 1 for a single-threaded engine or a judge served in pytest's process",
        doc_range="{low} to {high}",
    ),
    OptionSpec(
        OPT_EPOCHS,
        "K",
        f"run every case K times (sampling epochs from {OPT_EPOCH} on): metrics are the mean "
        "over epochs with their spread, each query gets a pass rate (default: 1)",
        parse=parse_epochs,
        default=1,
        setting="epochs",
        doc_default="`1`",
        doc=f"run every case K times (sampling epochs `{OPT_EPOCH}` to `{OPT_EPOCH}`+K-1; a "
        f"`{OPT_SEED}` goes up by one per epoch); node ids end in `@epochN`; metrics are the "
        "mean over epochs with their spread, each query gets a pass rate (see "
        "[Gates](gates.md#epochs))",
        doc_range="{low} to {high}",
    ),
    OptionSpec(
        OPT_SHARD,
        "K/N",
        "run shard K of N: the selected cases split deterministically, balanced by reference "
        f"steps; merge the shards' reports with {OPT_MERGE}",
        parse=parse_shard,
        setting="shard",
        doc_default="all",
        doc="run shard K of N: the selected cases (after `-k`, `-m`, `--lf`, `--deselect`) split "
        "deterministically, balanced by reference steps; tests that are not GTA cases run in "
        "shard 1 only (see [Running GTA in CI](ci.md#splitting-a-run-across-jobs))",
        doc_range="K/N with 1 <= K <= N <= {high} (shards past the number of cases are empty)",
    ),
)
FEATURE = Feature("cases", ROWS, RANGES)


def settings(given: Given) -> CaseSettings:
    """The cases' part of the settings, from the rows' resolved values."""
    return CaseSettings(**fields(ROWS, given))
