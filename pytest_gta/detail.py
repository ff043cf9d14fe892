"""What a case sends to the controller: the ``user_properties`` keys and the detail's shape.

A case runs in :mod:`pytest_gta.run` (on an xdist worker or in the controller) and its result
travels on the test report; the session's collector reads it and :mod:`pytest_gta.report`
turns it into the report's case entries. The run and report packages do not import each other,
so their contract sits here, below both, as types mypy checks on either side.
"""

from __future__ import annotations

from typing import Any, TypedDict

#: user_properties key of the detailed per-case payload; kept out of the JUnit XML.
DETAIL_KEY = "gta_detail"
#: user_properties key saying why the session stopped early (budget); kept out of the XML.
STOPPED_KEY = "gta_stopped"


class _VerdictBase(TypedDict):
    #: The verdict's score within [0, 1] (what a dashboard shows).
    score: float


class VerdictDetail(_VerdictBase, total=False):
    """The case's verdict; a merged shard's case has only its ``score``."""

    passed: bool
    message: str


class _CaseDetailBase(TypedDict):
    #: The metric primitives (``StepCaseScore.to_json`` / ``E2ECaseScore.to_json``).
    score: dict[str, Any]
    verdict: VerdictDetail
    #: The predicted steps as recorded (an OpenCompass entry may hold any value).
    steps: list[Any]
    replies: list[str]
    #: Which backend served each tool.
    backends: dict[str, str]
    #: Seconds the case took (``None`` in an older shard report).
    duration: float | None


class CaseDetail(_CaseDetailBase, total=False):
    """A scored case's payload (:meth:`pytest_gta.run.runner.CaseResult.detail`).

    JSON-able builtins only: it crosses execnet from an xdist worker.
    """

    #: {path as a step wrote it: key} in the session's image store (``--gta-report-html``).
    images: dict[str, str]
    #: The image store's last problems, for the report's notes.
    image_problems: list[str]
    #: Non-finite numbers the payload's cleaning replaced (the report's notes count them).
    nonfinite: int
    #: With an agent under test: its name, answer, exit status and stderr's tail, duration
    #: (:meth:`pytest_gta.run.agent_under_test.AgentOutcome.to_json`).
    agent: dict[str, Any]
    #: With an agent under test: every tool call as the server logged it (name, arguments,
    #: output, error, duration).
    tool_log: list[dict[str, Any]]
    #: With an agent under test: its model requests through the recording proxy.
    exchanges: list[dict[str, Any]]
