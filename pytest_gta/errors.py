"""Exception taxonomy.

pytest has three ways to end a case badly and GTA needs all three to stay honest: the model was
wrong (a failed test), the infrastructure broke (an error in setup, never counted silently as a
wrong answer), or something is not available here (a skip with the reason). Code that talks to
models and tools raises these so the plugin can route them without guessing.
"""

from __future__ import annotations


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
