"""Seeded tool faults: what ``--gta-tool-faults`` injects, and the log of what a case met.

Real tools fail: a service times out, a search returns nothing, a number comes back damaged.
GTA's own runs meet perfectly behaved tools; this module lets a run meet misbehaving ones,
reproducibly, so that how a model copes can be measured and gated on (docs/robustness.md).

A spec is ``KIND=RATE`` items, optionally for one tool (``OCR:error=0.3``), with a ``seed`` and
the ``delay`` of a slow call: ``error=0.1,timeout=0.05,empty=0.05,seed=7``. Whether a call is
faulted, and how, is drawn from a hash of (seed, query, epoch, call index, tool), never from
a shared random state: the same calls meet the same faults at ``-n 0`` and ``-n 8``, at any
``--gta-concurrency``, on a rerun, and whether the project's loop or an agent over MCP makes
them. The producer sees only what a failing tool would show (an error record, an empty or a
damaged output, a late one); nothing says the fault was injected. Only the report does.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pytest_gta.errors import GtaToolError, GtaUsageError
from pytest_gta.flags import OPT_TOOL_FAULTS
from pytest_gta.types import ResultItem, ToolResult

#: The kinds of fault, in the order a draw walks their rates.
FaultKind = Literal["error", "timeout", "empty", "corrupt", "slow"]
FAULT_KINDS: tuple[FaultKind, ...] = ("error", "timeout", "empty", "corrupt", "slow")
#: Seconds a ``slow`` call is held back unless the spec says ``delay=``.
DEFAULT_DELAY = 1.0
#: The longest ``delay`` a spec may ask (a typo of minutes would stall a whole run).
MAX_DELAY = 60.0
#: The largest seed (a 63-bit integer, as ``--gta-seed`` takes).
MAX_SEED = 2**63 - 1
#: What ``next`` says when the producer's next move after a fault was its final answer.
ANSWERED = "<answer>"
#: Seconds the ``timeout`` fault's message says the call waited.
TIMEOUT_SAID = 30

_TOOL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,99}$")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_ALLOWED = ", ".join(FAULT_KINDS) + ", seed, delay"
_DELAY_SAID = f"the delay is seconds from 0 to {MAX_DELAY:g}"


def _refuse(item: str, why: str) -> GtaUsageError:
    shown = item if len(item) <= 60 else item[:60] + "..."
    return GtaUsageError(
        f"{OPT_TOOL_FAULTS}: {shown!r}: {why}; write KIND=RATE items ({_ALLOWED}), optionally "
        f"for one tool (OCR:error=0.3), e.g. {OPT_TOOL_FAULTS}=error=0.1,timeout=0.05,seed=7"
    )


def _bounded(item: str, value: str, high: float, said: str) -> float:
    """``value`` as a number from 0 to ``high``, else the usage error saying ``said``."""
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not 0.0 <= number <= high:  # NaN fails both
        raise _refuse(item, said)
    return number


def _rate(item: str, value: str) -> float:
    return _bounded(item, value, 1.0, "a rate is a number from 0 to 1")


@dataclass(frozen=True)
class FaultSpec:
    """A parsed ``--gta-tool-faults``: the rates (for every tool, and per tool), seed, delay."""

    #: ``{kind: rate}`` for every tool.
    rates: Mapping[str, float]
    #: ``{tool: {kind: rate}}``: a tool's own rates, each replacing the general one of its kind.
    per_tool: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    seed: int = 0
    #: Seconds a ``slow`` call is held back.
    delay: float = DEFAULT_DELAY

    def rates_for(self, tool: str) -> dict[str, float]:
        """The rates a call of ``tool`` meets."""
        return {**self.rates, **self.per_tool.get(tool, {})}

    @property
    def active(self) -> bool:
        """Whether any call can be faulted (a spec of rates 0 changes nothing)."""
        every = [self.rates, *self.per_tool.values()]
        return any(rate > 0 for rates in every for rate in rates.values())

    @property
    def tools(self) -> tuple[str, ...]:
        """The tools the spec names (checked against the dataset's tools when a run starts)."""
        return tuple(self.per_tool)

    def text(self) -> str:
        """The spec in one canonical form: the run's identity, equal for equal specs."""
        parts = [f"{kind}={self.rates[kind]:g}" for kind in FAULT_KINDS if kind in self.rates]
        for tool in sorted(self.per_tool):
            rates = self.per_tool[tool]
            parts += [f"{tool}:{kind}={rates[kind]:g}" for kind in FAULT_KINDS if kind in rates]
        if self.delay != DEFAULT_DELAY:
            parts.append(f"delay={self.delay:g}")
        parts.append(f"seed={self.seed}")
        return ",".join(parts)

    def draw(self, query: str, epoch: int, index: int, tool: str) -> FaultKind | None:
        """The fault the ``index``-th call (from 0) of a case meets, or ``None``."""
        rates = self.rates_for(tool)
        point = _uniform(self.seed, query, epoch, index, tool, "draw")
        edge = 0.0
        for kind in FAULT_KINDS:
            edge += rates.get(kind, 0.0)
            if point < edge:
                return kind
        return None


def parse_fault_spec(text: str) -> FaultSpec:
    """Parse ``--gta-tool-faults`` (see the module docstring).

    Raises:
        GtaUsageError: naming the item that is wrong and what is allowed.
    """
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise _refuse(text, "the spec is empty")
    rates: dict[str, float] = {}
    per_tool: dict[str, dict[str, float]] = {}
    seed = 0
    delay = DEFAULT_DELAY
    seen: set[str] = set()
    for item in items:
        key, equals, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not equals or not key or not value:
            raise _refuse(item, "each item is KEY=VALUE")
        if key in seen:
            raise _refuse(item, f"{key} is given twice")
        seen.add(key)
        tool, colon, kind = key.rpartition(":")
        if colon:
            if not _TOOL_NAME.match(tool):
                raise _refuse(item, "a tool's rate is TOOL:KIND=RATE with the tool's name")
            if kind not in FAULT_KINDS:
                raise _refuse(item, f"{kind!r} is not a kind of fault")
            per_tool.setdefault(tool, {})[kind] = _rate(item, value)
        elif key == "seed":
            if not value.isdigit() or len(value) > 19 or int(value) > MAX_SEED:
                raise _refuse(item, f"the seed is an integer from 0 to {MAX_SEED}")
            seed = int(value)
        elif key == "delay":
            delay = _bounded(
                item, value, MAX_DELAY, f"the delay is seconds from 0 to {MAX_DELAY:g}"
            )
        elif key in FAULT_KINDS:
            rates[key] = _rate(item, value)
        else:
            raise _refuse(item, f"{key!r} is not a kind of fault")
    spec = FaultSpec(rates, per_tool, seed, delay)
    for tool in ("", *per_tool):
        total = sum(spec.rates_for(tool).values()) if tool else sum(rates.values())
        if total > 1.0 + 1e-9:
            where = f"for {tool}" if tool else "in all"
            raise _refuse(text, f"the rates {where} add up to {total:g}, over 1")
    return spec


def _uniform(seed: int, query: str, epoch: int, index: int, tool: str, salt: str) -> float:
    """A number in [0, 1) that only its arguments decide (no shared random state)."""
    key = "\x1f".join((str(seed), query, str(epoch), str(index), tool, salt))
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def point(spec: FaultSpec, query: str, epoch: int, index: int, tool: str) -> float:
    """The number in [0, 1) that picks how a ``corrupt`` fault damages this call's answer."""
    return _uniform(spec.seed, query, epoch, index, tool, "damage")


def failure(kind: FaultKind, tool: str) -> GtaToolError:
    """The error a failing ``tool`` raises: what a real failure of it reads in the record."""
    if kind == "timeout":
        return GtaToolError(
            f"{tool} failed: ReadTimeout: the tool service did not answer within {TIMEOUT_SAID} s"
        )
    return GtaToolError(f"{tool} failed: HTTPError: 503 Server Error: Service Unavailable")


def corrupted(result: ToolResult, point: float) -> ToolResult:
    """``result`` damaged: a number in its text made wrong, or the text cut short.

    ``point`` (in [0, 1)) picks the damage, so a rerun damages alike. A text with a number gets
    that number changed (still a well-formed number); one without is cut to its first part; a
    result with no text loses its files (what a damaged download leaves).
    """
    items: list[ResultItem] = []
    damaged = False
    for item in result.items:
        if item.type != "text" or damaged:
            if item.type == "text":
                items.append(item)
            continue
        text = str(item.content)
        numbers = list(_NUMBER.finditer(text))
        if numbers:
            match = numbers[int(point * len(numbers))]
            text = text[: match.start()] + _wrong(match.group()) + text[match.end() :]
        else:
            text = text[: len(text) // 2]
        items.append(ResultItem("text", text))
        damaged = True
    return ToolResult(tuple(items))


def _wrong(number: str) -> str:
    """Another well-formed number of the same shape: the last digit moved by one."""
    last = number[-1]
    return number[:-1] + ("0" if last == "9" else str(int(last) + 1))


@dataclass
class FaultHit:
    """One faulted call of a case: which call, which fault, what the producer did next."""

    #: The call's index among the case's calls that reached the tools (from 0).
    call: int
    tool: str
    fault: FaultKind
    #: The tool the producer called next (the same one: it retried), :data:`ANSWERED`, or
    #: ``None`` (it stopped without an answer).
    next: str | None = None
    #: The call's arguments, to find its step in the record (never written).
    arguments: Any = field(default=None, repr=False, compare=False)
    #: The index of the call's step in the recorded steps (``None``: not found there).
    step: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The case's ``faults`` entry."""
        found = {"call": self.call, "tool": self.tool, "fault": self.fault, "next": self.next}
        if self.step is not None:
            found["step"] = self.step
        return found


class FaultLog:
    """A case's calls as the fault layer counted them, and the faults they met.

    Calls may arrive from several threads (an agent calling tools in parallel): the index is
    taken under a lock, in the order the calls arrive.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls = 0
        self._hits: list[FaultHit] = []
        self._waiting: list[FaultHit] = []

    def start(self, tool: str) -> int:
        """A call of ``tool`` arrives: its index; the faults before it learn what came next."""
        with self._lock:
            index = self._calls
            self._calls += 1
            for hit in self._waiting:
                hit.next = tool
            self._waiting = []
            return index

    def hit(self, index: int, tool: str, fault: FaultKind, arguments: Any = None) -> None:
        """Call ``index`` (with ``arguments``) met ``fault``."""
        with self._lock:
            hit = FaultHit(index, tool, fault, arguments=arguments)
            self._hits.append(hit)
            self._waiting.append(hit)

    def finish(self, steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The hits as the case records them, from the episode's recorded ``steps``.

        The last hits learn how the episode ended (an answer, or none); each hit is matched,
        in call order, to the step that recorded its call (the same tool and arguments).
        """
        ended = ANSWERED if answered(steps) else None
        with self._lock:
            for hit in self._waiting:
                hit.next = ended
            self._waiting = []
            hits = sorted(self._hits, key=lambda h: h.call)
            after = 0
            for hit in hits:
                hit.step = _step_of(steps, hit, after)
                after = after if hit.step is None else hit.step + 1
            return [hit.to_json() for hit in hits]


def _step_of(steps: list[dict[str, Any]], hit: FaultHit, after: int) -> int | None:
    """The first step from ``after`` that calls ``hit``'s tool with its arguments."""
    for index in range(after, len(steps)):
        calls = steps[index].get("tool_calls")
        if not isinstance(calls, list) or not calls or not isinstance(calls[0], dict):
            continue
        function = calls[0].get("function")
        if not isinstance(function, dict):
            continue
        if function.get("name") == hit.tool and function.get("arguments") == hit.arguments:
            return index
    return None


def answered(steps: list[dict[str, Any]]) -> bool:
    """Whether recorded end-to-end steps end with the producer's final answer."""
    if not steps:
        return False
    last = steps[-1]
    return last.get("role") == "assistant" and not last.get("tool_calls")
