"""Exception taxonomy.

pytest has three ways to end a case badly and GTA needs all three to stay honest: the model was
wrong (a failed test), the infrastructure broke (an error in setup, never counted silently as a
wrong answer), or something is not available here (a skip with the reason). Code that talks to
models and tools raises these so the plugin can route them without guessing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_gta.flags import OPT_DATA


class GtaError(Exception):
    """Base class of every error pytest-gta raises on purpose."""


class GtaUsageError(GtaError):
    """A bad option, spec or file given by the user; shown as a pytest usage error."""


class GtaInfrastructureError(GtaError):
    """The model endpoint, a tool server or the harness itself broke.

    Raised during a case it turns the case into a pytest *error*: the answer was never produced,
    so it must not be scored as a wrong answer without the summary saying so.
    """


class GtaUnavailableError(GtaError):
    """Something a case needs is not available here (a tool backend, a credential, a record).

    The case is skipped with this message as the reason.
    """


class GtaToolError(GtaError):
    """A tool call failed in a way the model caused or the tool reports (bad path, bad input).

    The official harness shows these to the model as the observation and records them as
    ``API_ERROR``; they are part of the episode, not infrastructure failures.
    """


class GtaToolMiss(GtaToolError):
    """A recorded-output backend has no answer for this call.

    The next backend in ``--gta-tools`` that offers the tool gets the call; when none is left,
    the call fails like any tool error, with this message.
    """


class GtaBudgetExhausted(GtaUnavailableError):
    """The session's token or cost budget is spent; remaining cases are skipped."""


class RetryableError(GtaError):
    """A transient model-endpoint failure: try again after ``retry_after`` seconds (or backoff).

    Adapters raise it from ``send``; the shared retry policy catches it, and once the retries
    are spent it becomes a :class:`GtaInfrastructureError`.
    """

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class GtaDataError(GtaError):
    """Getting or checking a dataset failed; the message names the file, URL or option."""


@dataclass
class DatasetProblem:
    """One defect found while loading a dataset."""

    file: str
    query: str | None
    field: str | None
    message: str

    def __str__(self) -> str:
        parts = [self.file]
        if self.query is not None:
            parts.append(f"query {self.query!r}")
        if self.field:
            parts.append(self.field)
        return ": ".join(parts) + f": {self.message}"


class DatasetError(GtaUsageError):
    """The dataset directory is unusable; carries every problem found."""

    def __init__(self, root: Path, problems: Sequence[DatasetProblem]) -> None:
        self.root = root
        self.problems = list(problems)
        shown = "\n".join(f"  - {p}" for p in self.problems[:50])
        more = len(self.problems) - 50
        tail = f"\n  ... and {more} more" if more > 0 else ""
        super().__init__(
            f"GTA dataset {root} has {len(self.problems)} problem(s):\n{shown}{tail}\n"
            f"Fix the data, or point {OPT_DATA} at a directory in the official layout "
            "(dataset.json, toolmeta.json, image/)."
        )
