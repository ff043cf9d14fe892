"""Token and cost accounting shared by all processes of a session, and the budget it enforces.

Every paid model call appends one line to a ledger file under an exclusive ``flock``; the
budget check sums the ledger, so ``-n 8`` workers stop together when the session's total
crosses ``--gta-max-tokens-total`` or ``--gta-max-cost``. Cached answers cost nothing and are
not written to the ledger.

Threads and processes alike: every :meth:`UsageLedger.add` and :meth:`UsageLedger.totals`
opens the file anew, so the ``flock`` of one thread excludes the others of its own process too
(``flock`` locks belong to an open file, not to a process), and the totals are exact however
many threads and xdist workers book calls at once.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

from pytest_gta.errors import GtaBudgetExhausted
from pytest_gta.flags import OPT_MAX_COST, OPT_MAX_TOKENS_TOTAL
from pytest_gta.types import Usage


@dataclass(frozen=True)
class Prices:
    """USD per million input and output tokens."""

    input: float
    output: float

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """The cost of a number of tokens."""
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000


class UsageLedger:
    """Append-only ``input output`` lines, one per paid call, safe across processes."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _locked(self, write: str | None) -> tuple[int, int]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if write:
                os.write(fd, write.encode("ascii"))
            os.lseek(fd, 0, os.SEEK_SET)
            chunks = []
            while chunk := os.read(fd, 1 << 16):
                chunks.append(chunk)
        finally:
            os.close(fd)
        total_in = total_out = 0
        for line in b"".join(chunks).decode("ascii").splitlines():
            parts = line.split()
            if len(parts) == 2:
                total_in += int(parts[0])
                total_out += int(parts[1])
        return total_in, total_out

    def add(self, usage: Usage) -> tuple[int, int]:
        """Record a call; returns the session totals (input, output) including it."""
        return self._locked(f"{usage.input_tokens} {usage.output_tokens}\n")

    def totals(self) -> tuple[int, int]:
        """The session totals (input, output) so far."""
        return self._locked(None)


@dataclass
class Budget:
    """Stops paying once the session has used ``max_tokens`` tokens or ``max_cost`` USD.

    What is guaranteed under concurrency: a call checks the budget when it is about to be sent
    (:class:`~pytest_gta.models.chat.ChatAdapter` checks again once it holds its endpoint's
    concurrency slot, so calls queued behind the limit do not carry a stale check), and a call's
    tokens are booked when its answer arrives. So once the ledger shows the budget spent, no
    call of any thread or process starts; the overshoot is at most what the calls already sent
    at that moment cost (at most ``--gta-max-concurrency`` per endpoint and process). A call's
    cost is unknown before its answer, so no check can do better without refusing calls the
    budget could still pay for.
    """

    ledger: UsageLedger
    max_tokens: int | None = None
    max_cost: float | None = None
    prices: Prices | None = None

    def _exceeded(self, totals: tuple[int, int]) -> str | None:
        used = totals[0] + totals[1]
        if self.max_tokens is not None and used >= self.max_tokens:
            return f"token budget exhausted: {used} of {OPT_MAX_TOKENS_TOTAL}={self.max_tokens}"
        if self.max_cost is not None and self.prices is not None:
            cost = self.prices.cost(*totals)
            if cost >= self.max_cost:
                return f"cost budget exhausted: ${cost:.4f} of {OPT_MAX_COST}={self.max_cost}"
        return None

    def check(self) -> None:
        """Raise :class:`GtaBudgetExhausted` if the budget is already spent."""
        if self.max_tokens is None and self.max_cost is None:
            return
        reason = self._exceeded(self.ledger.totals())
        if reason is not None:
            raise GtaBudgetExhausted(reason)

    def add(self, usage: Usage) -> None:
        """Book a paid call."""
        self.ledger.add(usage)
