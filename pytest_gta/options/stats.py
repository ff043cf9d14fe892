"""The statistics of every run and comparison: the intervals' level and the resamples.

Its part of the settings is :class:`StatsSettings`. The resamples size the bootstrap's arrays
(samples x cases), so their range is bounded.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_gta.flags import OPT_BOOTSTRAP_SAMPLES, OPT_CONFIDENCE
from pytest_gta.options.core import (
    Feature,
    Given,
    OptionSpec,
    fields,
    int_at_least,
    int_range,
    number,
)

DEFAULT_CONFIDENCE = 0.95
DEFAULT_BOOTSTRAP_SAMPLES = 2000
RANGES: dict[str, tuple[float, float]] = {
    OPT_CONFIDENCE: (0.5, 0.999),
    OPT_BOOTSTRAP_SAMPLES: (100, 20_000),
}


def parse_confidence(value: str) -> float:
    """The confidence level of the intervals, e.g. 0.95."""
    low, high = RANGES[OPT_CONFIDENCE]
    hint = "give a level between 0.5 and 0.999, e.g. 0.95"
    return number(value, OPT_CONFIDENCE, hint, minimum=low, maximum=high)


def parse_bootstrap_samples(value: str) -> int:
    """Resamples of the bootstrap and permutation tests: at least 100."""
    low, high = int_range(RANGES, OPT_BOOTSTRAP_SAMPLES)
    hint = f"give at least 100 resamples (default: {DEFAULT_BOOTSTRAP_SAMPLES})"
    return int_at_least(value, OPT_BOOTSTRAP_SAMPLES, hint, low, maximum=high)


@dataclass(frozen=True)
class StatsSettings:
    """The level of every interval and the resamples behind intervals and tests."""

    confidence: float = DEFAULT_CONFIDENCE
    bootstrap_samples: int = DEFAULT_BOOTSTRAP_SAMPLES


ROWS: tuple[OptionSpec, ...] = (
    OptionSpec(
        OPT_CONFIDENCE,
        "LEVEL",
        f"confidence level of the metrics' intervals (default: {DEFAULT_CONFIDENCE:g})",
        parse=parse_confidence,
        default=DEFAULT_CONFIDENCE,
        setting="confidence",
        doc_default="`0.95`",
        doc="confidence level of every interval: the metrics' (`metrics_ci`) and the "
        "comparison's differences",
        doc_range="{low} to {high}",
    ),
    OptionSpec(
        OPT_BOOTSTRAP_SAMPLES,
        "N",
        f"resamples of the bootstrap intervals and permutation tests (default: "
        f"{DEFAULT_BOOTSTRAP_SAMPLES})",
        parse=parse_bootstrap_samples,
        default=DEFAULT_BOOTSTRAP_SAMPLES,
        setting="bootstrap_samples",
        doc_default="`2000`",
        doc="resamples of the bootstrap intervals and the permutation tests (at least 100; "
        "seeded, so a run gives the same numbers every time)",
        doc_range="{low} to {high}",
    ),
)
FEATURE = Feature("stats", ROWS, RANGES)


def settings(given: Given) -> StatsSettings:
    """The statistics' part of the settings, from the rows' resolved values."""
    return StatsSettings(**fields(ROWS, given))
