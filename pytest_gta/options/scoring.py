"""How answers are scored: the similarity model and the threshold a subjective answer needs.

Its part of the settings is :class:`ScoringSettings`.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_gta.flags import OPT_SIM_MODEL, OPT_SIM_THRESHOLD
from pytest_gta.options.core import Feature, Given, OptionSpec, fields, number

DEFAULT_SIM_MODEL = "all-mpnet-base-v2"
DEFAULT_SIM_THRESHOLD = 0.5
RANGES: dict[str, tuple[float, float]] = {OPT_SIM_THRESHOLD: (0.0, 1.0)}


def parse_threshold(value: str) -> float:
    """A similarity in [0, 1]."""
    low, high = RANGES[OPT_SIM_THRESHOLD]
    hint = f"give a similarity between 0 and 1 (default {DEFAULT_SIM_THRESHOLD})"
    return number(value, OPT_SIM_THRESHOLD, hint, minimum=low, maximum=high)


@dataclass(frozen=True)
class ScoringSettings:
    """The similarity model and threshold of the official scoring."""

    #: ``--gta-sim-model``: a sentence-transformers name or path.
    sim_model: str = DEFAULT_SIM_MODEL
    #: ``--gta-sim-threshold``: the similarity at which a subjective answer passes.
    sim_threshold: float = DEFAULT_SIM_THRESHOLD


ROWS: tuple[OptionSpec, ...] = (
    OptionSpec(
        OPT_SIM_MODEL,
        "NAME_OR_PATH",
        f"sentence-transformers model for similarity scores (default: {DEFAULT_SIM_MODEL}, "
        "as the official evaluator)",
        default=DEFAULT_SIM_MODEL,
        setting="sim_model",
        doc_default="`all-mpnet-base-v2`",
        doc="sentence-transformers model for similarities",
    ),
    OptionSpec(
        OPT_SIM_THRESHOLD,
        "SIM",
        f"similarity at which a subjective answer passes (default: {DEFAULT_SIM_THRESHOLD}; "
        "the metric itself stays continuous)",
        parse=parse_threshold,
        default=DEFAULT_SIM_THRESHOLD,
        setting="sim_threshold",
        doc_default="`0.5`",
        doc="similarity at which a subjective answer passes (the metric stays continuous)",
        doc_range="{low} to {high}",
    ),
)
FEATURE = Feature("scoring", ROWS, RANGES)


def settings(given: Given) -> ScoringSettings:
    """The scoring part of the settings, from the rows' resolved values."""
    return ScoringSettings(**fields(ROWS, given))
