"""The session's budget: tokens and cost after which it stops cleanly, and the prices it counts.

Its part of the settings is :class:`BudgetSettings`.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from pytest_gta.flags import OPT_MAX_COST, OPT_MAX_TOKENS_TOTAL, OPT_PRICE
from pytest_gta.options.core import (
    Feature,
    Given,
    OptionSpec,
    fields,
    int_at_least,
    int_range,
    number,
    shown,
)

RANGES: dict[str, tuple[float, float]] = {
    OPT_MAX_TOKENS_TOTAL: (1, 10**12),
    OPT_MAX_COST: (1e-9, 1e9),
    OPT_PRICE: (0.0, 1e6),
}


def parse_max_tokens_total(value: str) -> int:
    """A positive token budget for the session."""
    low, high = int_range(RANGES, OPT_MAX_TOKENS_TOTAL)
    hint = "give a positive number of tokens (input + output)"
    return int_at_least(value, OPT_MAX_TOKENS_TOTAL, hint, low, maximum=high)


def parse_max_cost(value: str) -> float:
    """A positive cost budget in USD."""
    low, high = RANGES[OPT_MAX_COST]
    hint = "give a positive amount in USD"
    return number(value, OPT_MAX_COST, hint, minimum=low, maximum=high)


def parse_price(value: str) -> tuple[float, float]:
    """``IN,OUT`` in USD per million tokens."""
    hint = "give input,output prices in USD per million tokens, e.g. 2.5,10"
    parts = value.split(",")
    if len(parts) != 2:
        raise pytest.UsageError(f"{OPT_PRICE}={shown(value)}: {hint}")
    low, high = RANGES[OPT_PRICE]
    prices = [number(p, OPT_PRICE, hint, minimum=low, maximum=high) for p in parts]
    return prices[0], prices[1]


@dataclass(frozen=True)
class BudgetSettings:
    """What the session may spend (``None``: no limit)."""

    max_tokens_total: int | None = None
    max_cost: float | None = None
    #: ``--gta-price``: USD per million input and output tokens (``None``: the catalog's).
    price: tuple[float, float] | None = None

    @property
    def limited(self) -> bool:
        """Whether a budget bounds the session."""
        return self.max_tokens_total is not None or self.max_cost is not None


ROWS: tuple[OptionSpec, ...] = (
    OptionSpec(
        OPT_MAX_TOKENS_TOTAL,
        "N",
        "stop the session cleanly once the model calls used N tokens (input + output)",
        parse=parse_max_tokens_total,
        setting="max_tokens_total",
        doc_default="none",
        doc="stop the session cleanly once paid calls used N tokens (input + output)",
        doc_range="{low} to {high}",
    ),
    OptionSpec(
        OPT_MAX_COST,
        "USD",
        f"stop the session cleanly once the model calls cost this much (catalog or {OPT_PRICE})",
        parse=parse_max_cost,
        setting="max_cost",
        doc_default="none",
        doc="stop the session cleanly once paid calls cost this much (catalog list prices or "
        f"`{OPT_PRICE}`)",
        doc_range="{low} to {high} USD",
    ),
    OptionSpec(
        OPT_PRICE,
        "IN,OUT",
        f"USD per million input and output tokens, for {OPT_MAX_COST}",
        parse=parse_price,
        setting="price",
        doc_default="catalog",
        doc="USD per million input and output tokens",
        doc_range="{low} to {high} USD per million tokens, each",
    ),
)
FEATURE = Feature("budget", ROWS, RANGES)


def settings(given: Given) -> BudgetSettings:
    """The budget's part of the settings, from the rows' resolved values."""
    return BudgetSettings(**fields(ROWS, given))
