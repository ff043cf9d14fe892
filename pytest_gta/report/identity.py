"""What identifies a run: its label, model, protocol or agent, commit and dates.

A team keeps a report per run; ``--gta-compare`` sets them side by side and orders a directory
of them by date. The report's ``identity`` says which run it was (:class:`Identity`);
:func:`identity_of` reads it back, checked, and fills it in for reports written before
identities. The report reader (:mod:`.schema`) checks it as part of every report.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from pytest_gta.errors import GtaUsageError
from pytest_gta.provenance import label_problem, parse_utc
from pytest_gta.report.fields import ABSENT, FieldReader, kind_of, show_value


class GitInfo(TypedDict):
    """The report's ``identity.git``: the commit of the project under test."""

    #: 40 hex digits (64 in a SHA-256 repository).
    commit: str
    short: str
    #: Tracked files differed from the commit (``None``: ``git status`` did not answer in time).
    dirty: bool | None
    #: ``None``: a detached HEAD.
    branch: str | None


class Identity(TypedDict):
    """The report's ``identity``: what tells this run from the others a team keeps.

    ``started_at``/``finished_at`` are ISO 8601 UTC (``2026-02-01T03:04:05Z``); ``None`` only in
    the identity :func:`identity_of` fills in for a report written before identities, as is
    ``git`` outside a repository.
    """

    #: ``--gta-label``, else :func:`default_label`.
    label: str
    #: Whether the label was given (``--gta-label``) rather than made up.
    label_given: bool
    model: str
    #: The model's protocol (``react``, ``native``); ``None`` with an agent under test, which
    #: talks to its model its own way.
    protocol: str | None
    #: The agent under test (its callable or command), ``None``: the project's own loop.
    agent: str | None
    git: GitInfo | None
    started_at: str | None
    finished_at: str | None
    dataset_sha256: str
    #: The pytest-gta version that ran (``None``: an old report that did not say).
    pytest_gta: str | None


class IdentityReader(FieldReader):
    """Checks a report's ``label`` and ``identity``."""

    def run_label(self, value: Any, name: str) -> str:
        """A run's label: a text that names it on one visible line."""
        if not isinstance(value, str):
            raise self.fail(f"{name} is {kind_of(value)}, not a text{self.hint}")
        problem = label_problem(value)
        if problem is not None:
            raise self.fail(f"{name} is {show_value(repr(value))}: {problem}{self.hint}")
        return value

    def date(self, obj: Mapping[str, Any], key: str, where: str) -> str | None:
        """An ISO 8601 date with its time zone, or null."""
        value: str | None = self.text(obj, key, where, null=True)
        if value is not None and parse_utc(value) is None:
            raise self.fail(
                f"{where}{key} is {show_value(repr(value))}, not an ISO 8601 date with a time zone"
                f"{self.hint}"
            )
        return value

    def git(self, raw: dict[str, Any] | None) -> GitInfo | None:
        """``identity.git``: a commit, its abbreviation, the dirty flag, the branch; or null."""
        where = "identity.git."
        if raw is None:
            return None
        commit = self.text(raw, "commit", where)
        short = self.text(raw, "short", where)
        hexdigits = "0123456789abcdef"
        if len(commit) not in (40, 64) or not all(c in hexdigits for c in commit):
            raise self.fail(
                f"{where}commit is {show_value(repr(commit))}, not a git commit{self.hint}"
            )
        if not short or not commit.startswith(short):
            raise self.fail(
                f"{where}short is {show_value(repr(short))}, not an abbreviation of the commit"
                f"{self.hint}"
            )
        return {
            "commit": commit,
            "short": short,
            "dirty": self.get(raw, "dirty", where, bool, None),
            "branch": self.text(raw, "branch", where, null=True),
        }

    def identity(self, report: Mapping[str, Any]) -> Identity:
        """The report's ``identity``, checked; filled in from older reports' fields."""
        label = report.get("label", ABSENT)
        if label is not ABSENT:
            label = self.run_label(label, "label")
        raw = report.get("identity", ABSENT)
        if raw is ABSENT:
            return self.old_identity(report, None if label is ABSENT else label)
        if not isinstance(raw, dict):
            raise self.fail(f"identity is {kind_of(raw)}, not an object{self.hint}")
        where = "identity."
        own = self.run_label(self.get(raw, "label", where, str), "identity.label")
        return {
            # A hook may have renamed the run through the top-level label: that one is shown.
            "label": own if label is ABSENT else label,
            "label_given": self.get(raw, "label_given", where, bool),
            "model": self.text(raw, "model", where),
            "protocol": self.text(raw, "protocol", where, null=True),
            "agent": self.text(raw, "agent", where, null=True),
            "git": self.git(self.get(raw, "git", where, dict, None)),
            "started_at": self.date(raw, "started_at", where),
            "finished_at": self.date(raw, "finished_at", where),
            "dataset_sha256": self.text(raw, "dataset_sha256", where),
            "pytest_gta": self.text(raw, "pytest_gta", where, null=True),
        }

    def old_identity(self, report: Mapping[str, Any], label: str | None) -> Identity:
        """The identity of a report written before identities: no commit, no dates."""
        model = self.text(report, "model", "")
        settings = report.get("settings")
        settings = settings if isinstance(settings, dict) else {}
        agent_setting = settings.get("agent")
        name = agent_setting.get("name") if isinstance(agent_setting, dict) else None
        agent = name if isinstance(name, str) else None
        protocol = None if agent is not None else self.text(report, "protocol", "", null=True)
        dataset = self.get(report, "dataset", "", dict)
        version = settings.get("pytest_gta")
        return make_identity(
            model=model,
            protocol=protocol,
            agent=agent,
            dataset_sha256=self.text(dataset, "sha256", "dataset."),
            # A report labelled by a hook but without an identity: its label, as given.
            label=None if label == default_label(model, protocol, agent) else label,
            version=version if isinstance(version, str) else None,
        )


def default_label(model: str, protocol: str | None, agent: str | None = None) -> str:
    """A run's label when ``--gta-label`` gave none: ``model [protocol]``, ``model [agent X]``.

    The model and how it was asked are what tell most runs apart; a team that runs one model
    twice (two checkpoints behind one name, two prompts) names its runs with ``--gta-label``.
    """
    return f"{model} [agent {agent}]" if agent is not None else f"{model} [{protocol}]"


def make_identity(
    *,
    model: str,
    protocol: str | None,
    agent: str | None,
    dataset_sha256: str,
    label: str | None = None,
    git: GitInfo | None = None,
    started_at: str | None = None,
    finished_at: str | None = None,
    version: str | None = None,
) -> Identity:
    """A run's identity; ``label`` ``None``: :func:`default_label`'s (``label_given`` false).

    With an agent under test the protocol is ``None``: the agent talks to its model its own way.
    """
    protocol = None if agent is not None else protocol
    return {
        "label": default_label(model, protocol, agent) if label is None else label,
        "label_given": label is not None,
        "model": model,
        "protocol": protocol,
        "agent": agent,
        "git": git,
        "started_at": started_at,
        "finished_at": finished_at,
        "dataset_sha256": dataset_sha256,
        "pytest_gta": version,
    }


def identity_of(report: Mapping[str, Any]) -> Identity:
    """What identifies the run of ``report``: its ``identity``, checked, as a new dict.

    A report written before reports had identities gets one from its ``model``, ``protocol``,
    ``settings.agent`` and ``dataset.sha256``, with no commit and no dates (``None``); its label
    is :func:`default_label`'s. A top-level ``label`` (a hook may rename a run) wins over the
    identity's own.

    Raises:
        GtaUsageError: a field is missing or of the wrong kind, named by its path in the report
            (``identity.git.commit``), never by a file: callers that read files say which.
    """
    if not isinstance(report, Mapping):
        raise GtaUsageError(f"the report is {kind_of(report)}, not an object")
    return IdentityReader("", "").identity(report)
