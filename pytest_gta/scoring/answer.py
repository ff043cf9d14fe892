r"""Objective answer matching, exactly as the official evaluator's ``iscorrect``.

The ``\b`` word boundaries are kept on purpose even where they misfire: an alias that starts or
ends with a non-word character (``$5``) rarely matches, and ``3`` matches inside ``3.5``. The
leaderboard numbers were computed with these quirks, so parity requires them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any


def _pattern(aliases: Sequence[str]) -> str:
    return r"\b(?:" + "|".join(re.escape(alias) for alias in aliases) + r")\b"


def whitelist_hits(pred: str, ref: Mapping[str, Any]) -> list[bool]:
    """For each whitelist group, whether one of its aliases occurs in ``pred``."""
    return [bool(re.search(_pattern(group), pred, re.IGNORECASE)) for group in ref["whitelist"]]


def blacklist_hit(pred: str, ref: Mapping[str, Any]) -> str | None:
    """The blacklisted text found in ``pred`` (one pattern over all groups), if any."""
    blacklist = ref.get("blacklist")
    if not blacklist:
        return None
    match = re.search(
        _pattern([alias for group in blacklist for alias in group]), pred, re.IGNORECASE
    )
    return match.group(0) if match else None


def iscorrect(pred: str, ref: Mapping[str, Any]) -> bool:
    """Every whitelist group hits and, when a blacklist is given, none of its aliases does."""
    if not all(whitelist_hits(pred, ref)):
        return False
    return blacklist_hit(pred, ref) is None
