"""The robustness axis in a report: the faults a case met, and a run's faults summed up.

``--gta-tool-faults`` (:mod:`pytest_gta.faults`) injects seeded faults into the calls of every
producer; a case records each faulted call (:class:`FaultEntry`) and the run sums them
(:class:`RobustnessSection`). Both are absent from a run that injects none, so its report is
the one it always was.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from pytest_gta.results.base import Doc


class FaultEntry(Doc):
    """One faulted call of a case."""

    call: int = Field(ge=0, lt=2**31)
    """The call's index among the case's calls that reached the tools (from 0)."""
    tool: str
    """The tool called."""
    fault: Literal["error", "timeout", "empty", "corrupt", "slow"]
    """What the call met: an error record, a timeout, an empty or a damaged output, a delay."""
    next: str | None
    """The tool the producer called next (the same one: it retried), ``<answer>`` (it answered),
    or ``null`` (it stopped without an answer)."""
    step: int | None = Field(default=None, ge=0, lt=2**31, exclude_if=lambda v: v is None)
    """The index in the case's ``steps`` of the faulted call's step (absent: not found)."""


class RobustnessSection(Doc):
    """A run's tool faults summed up (``--gta-tool-faults``)."""

    spec: str
    """The fault spec in its canonical form: part of the run's identity."""
    calls_faulted: int = Field(ge=0)
    """Calls that met a fault, in every case."""
    by_kind: dict[str, int]
    """Faulted calls by kind of fault."""
    by_tool: dict[str, int]
    """Faulted calls by tool."""
    faulted_cases: int = Field(ge=0)
    """Cases with at least one faulted call."""
    recovered_cases: int = Field(ge=0)
    """Faulted cases that still passed."""
    recovery: float | None = Field(ge=0, le=1)
    """``recovered_cases / faulted_cases`` (``null``: no case met a fault)."""
    retried_calls: int = Field(ge=0)
    """Faulted calls whose producer called the same tool next."""
