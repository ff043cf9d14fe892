"""The report's schema (``pytest-gta-report/1``): its types, its one writer and its one reader.

A report is the contract of ``--gta-report``: the session writes it, ``--gta-merge`` reads
shards' reports back, ``--gta-baseline`` reads an earlier run's, the renderers and the
``pytest_gta_update_report`` hook reads it. Its shape is written down once here, as ``TypedDict``
types that mypy checks wherever a field is written or read: a new field is one edit here and
one where it is computed.

* :func:`case_entry` is the one place a case's entry is made, from the case's
  :class:`~pytest_gta.detail.CaseDetail`; the reader reads entries back as records.
* :func:`dump_report` is the one writer of a report file.
* :func:`load_report` / :func:`parse_report` the one reader. Reports come from other machines
  and other versions: every field read is checked, and a bad one is a usage error naming the
  file and the field (a report of another schema version names both versions), never a
  traceback.
* :func:`identity_of` reads what identifies a run (its label, model, agent, commit, dates),
  also from reports written before the report carried an ``identity``.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, cast

from pytest_gta.case import Case
from pytest_gta.detail import CaseDetail
from pytest_gta.errors import GtaUsageError
from pytest_gta.gates import GatesVerdict
from pytest_gta.jsonsafe import JsonInputError, read_json
from pytest_gta.provenance import label_problem, parse_utc
from pytest_gta.scoring.metrics import E2ECaseScore, StepCaseScore, aggregate_e2e, aggregate_step
from pytest_gta.vocabulary import MODEL_S_PROPERTY, MODES, OUTCOMES

#: The version this code writes and reads; another is refused by :func:`parse_report`.
SCHEMA = "pytest-gta-report/1"
#: What every report's schema starts with (a file without it is not a report of ours).
SCHEMA_FAMILY = "pytest-gta-report/"
#: Larger than any real report (all 229 queries in both modes, replies included, are a few MB).
MAX_REPORT_BYTES = 256 * 1024 * 1024
#: How a reader's messages say where reports come from (``--gta-merge``'s; baselines say theirs).
MERGE_HOW = "--gta-merge reads the --gta-report files that the shard jobs wrote"
#: The per-case properties a report's ``usage`` totals, and the names it gives them.
USAGE_PROPERTIES = {
    "gta_tokens_in": "input_tokens",
    "gta_tokens_out": "output_tokens",
    "gta_model_calls": "calls",
    "gta_cached_calls": "cached_calls",
}


# --------------------------------------------------------------------------------------------
# The types


class _CaseEntryBase(TypedDict):
    id: str
    query_id: str
    mode: str
    epoch: int | None
    type: str
    outcome: str
    score: float
    message: str
    nodeid: str
    steps: list[Any]
    replies: list[str]
    backends: dict[str, str]
    duration: float | None
    #: The case's ``gta_*`` properties (scalars).
    properties: dict[str, Any]
    #: The metric primitives, so shard reports merge into the very same metrics.
    primitives: dict[str, Any] | None
    #: {path as a step wrote it: key} in the session's image store (HTML reports).
    images: dict[str, str]


class CaseEntry(_CaseEntryBase, total=False):
    """A case as the report's ``cases`` list has it (the HTML drill-downs read the same).

    The optional keys are there with an agent under test (``--gta-agent``,
    ``--gta-agent-command``) only, so reports of the project's own loop are unchanged.
    """

    #: The agent's run: name, answer, exit status, stderr's tail, duration.
    agent: dict[str, Any]
    #: Every tool call as the server logged it: name, arguments, output, error, duration.
    tool_log: list[dict[str, Any]]
    #: The agent's model requests through the recording proxy.
    exchanges: list[dict[str, Any]]


class DatasetInfo(TypedDict):
    """The report's ``dataset``: which data the run scored, and what it holds."""

    path: str
    sha256: str
    queries: int
    selected: int
    source: str
    install: dict[str, Any] | None
    statistics: dict[str, Any]
    #: The dataset's quirks that the queries run met (:func:`pytest_gta.quirks.summarize`).
    quirks: list[dict[str, Any]]


class Interval(TypedDict):
    """A bootstrap interval (``low``/``high`` are ``None`` where it cannot be computed)."""

    low: float | None
    high: float | None
    level: float
    method: str


class _ComparisonBase(TypedDict):
    #: ``report`` (paired, per query) or ``leaderboard`` (unpaired, against a published row).
    kind: str
    baseline: str
    baseline_model: str | None
    paired: bool
    level: float
    methods: dict[str, str]
    #: Per mode: ``matched``, ``only_this_run``, ``only_baseline``.
    cases: dict[str, dict[str, int]]
    differences: list[str]
    #: Per mode and metric: ``baseline``, ``this``, ``difference``, ``ci``, ``p_value``, ...
    metrics: dict[str, dict[str, dict[str, Any]]]
    #: ``regressed`` and ``fixed`` queries, with their node ids.
    flipped: dict[str, list[dict[str, Any]]]


class Comparison(_ComparisonBase, total=False):
    """The report's ``comparison`` with ``--gta-baseline`` (:mod:`pytest_gta.report.compare`)."""

    #: The leaderboard board of a ``leaderboard`` comparison.
    board: str | None


#: The report's ``gates``: the verdict over all gates, and each gate's.
Gates = GatesVerdict


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


class _RunReportBase(TypedDict):
    schema: str
    model: str
    protocol: str
    leaderboard: dict[str, Any] | None
    #: Token totals, ``calls``, ``cached_calls`` and ``cost_usd`` (``None``: no prices known).
    usage: dict[str, Any]
    stopped: str | None
    interrupted: bool
    interrupted_by: str | None
    timings: dict[str, dict[str, float]] | None
    #: ``--gta-shard``'s selection (:meth:`pytest_gta.shard.ShardSelection.to_json`).
    shard: dict[str, Any] | None
    dataset: DatasetInfo
    settings: dict[str, Any]
    metrics: dict[str, dict[str, Any]]
    metrics_ci: dict[str, dict[str, Interval]]
    metrics_excluding_errors: dict[str, dict[str, Any]]
    pass_rate: dict[str, float]
    epochs: int
    metrics_by_epoch: dict[str, dict[str, dict[str, Any]]]
    metrics_spread: dict[str, dict[str, Any]]
    query_pass_rates: dict[str, dict[str, float]]
    errors: dict[str, dict[str, int]]
    tool_calls: dict[str, dict[str, int]]
    denominators: dict[str, dict[str, int]]
    outcomes: dict[str, int]
    outcomes_by_mode: dict[str, dict[str, int]]
    by_type: dict[str, dict[str, dict[str, Any]]]
    notes: list[str]
    cases: list[CaseEntry]


class RunReport(_RunReportBase, total=False):
    """The run's report: what ``--gta-report`` writes and ``pytest_gta_update_report`` gets.

    The sections below are present only when they apply; a hook may add keys of its own.
    """

    comparison: Comparison
    gates: Gates
    #: Seconds the session took (a merged report has none).
    duration_s: float
    #: ``--gta-merge``: the reports merged and the shards they were.
    merged: dict[str, Any]
    #: The run's label (``identity.label``); absent in reports written before labels.
    label: str
    #: What identifies the run (:class:`Identity`); read it with :func:`identity_of`.
    identity: Identity


@dataclass
class CaseRecord:
    """What the controller knows about one case after its reports came in."""

    mode: str
    qid: str
    nodeid: str
    outcome: str = "passed"
    properties: dict[str, Any] = field(default_factory=dict)
    detail: CaseDetail | None = None
    message: str = ""
    #: The sampling epoch in a repeated run (``--gta-epochs``); ``None`` in a single run.
    epoch: int | None = None

    @property
    def case_id(self) -> str:
        """The case's id: ``e2e-17``, or ``e2e-17@epoch1`` in a repeated run."""
        return Case.format_id(self.mode, self.qid, self.epoch)

    def entry(self, query_type: str) -> CaseEntry:
        """The case's entry in the report (:func:`case_entry`)."""
        return case_entry(
            self.mode,
            self.qid,
            self.epoch,
            query_type=query_type,
            outcome=self.outcome,
            message=self.message,
            nodeid=self.nodeid,
            properties=self.properties,
            detail=self.detail,
        )


# --------------------------------------------------------------------------------------------
# The writers


def case_entry(
    mode: str,
    qid: str,
    epoch: int | None,
    *,
    query_type: str,
    outcome: str,
    message: str,
    nodeid: str,
    properties: Mapping[str, Any],
    detail: CaseDetail | None,
) -> CaseEntry:
    """A case's entry in the report's ``cases``, with its detail payload's fields.

    A failed case's message is its verdict's explanation (the test's own failure text when the
    verdict has none); an errored or skipped case's is pytest's. A case without a detail (it
    errored or was skipped before it was scored) has no steps and scores 0.
    """
    verdict = detail["verdict"] if detail is not None else None
    if outcome == "failed" and verdict is not None:
        message = verdict.get("message") or message
    entry: CaseEntry = {
        "id": Case.format_id(mode, qid, epoch),
        "query_id": qid,
        "mode": mode,
        "epoch": epoch,
        "type": query_type,
        "outcome": outcome,
        "score": float(verdict["score"]) if verdict is not None else 0.0,
        "message": message,
        "nodeid": nodeid,
        "steps": detail["steps"] if detail is not None else [],
        "replies": detail["replies"] if detail is not None else [],
        "backends": detail["backends"] if detail is not None else {},
        "duration": detail["duration"] if detail is not None else None,
        "properties": {k: v for k, v in properties.items() if k.startswith("gta_")},
        "primitives": detail["score"] if detail is not None else None,
        "images": detail.get("images", {}) if detail is not None else {},
    }
    if detail is not None:
        if "agent" in detail:
            entry["agent"] = detail["agent"]
        if "tool_log" in detail:
            entry["tool_log"] = detail["tool_log"]
        if "exchanges" in detail:
            entry["exchanges"] = detail["exchanges"]
    return entry


def dump_report(report: RunReport) -> str:
    """The text of a ``--gta-report`` file: strict JSON (a NaN is refused, not written)."""
    return json.dumps(report, indent=2, allow_nan=False) + "\n"


# --------------------------------------------------------------------------------------------
# The reader


@dataclass
class ReportFile:
    """A report read from a file, checked, with its cases as records (:func:`parse_report`)."""

    #: The path as the user wrote it (messages name it so).
    label: str
    data: RunReport
    records: list[CaseRecord]

    @property
    def shard(self) -> dict[str, Any] | None:
        """The report's ``shard`` entry (``None``: the job ran every selected case)."""
        return self.data.get("shard")

    @property
    def name(self) -> str:
        """``shard 2/3`` when the report is a shard's, else its file name."""
        return f"shard {self.shard['spec']}" if self.shard else self.label


#: A field that is not there (``None`` is JSON null); messages show it as ``absent``.
ABSENT = object()
_KIND_NAMES: dict[type | None, str] = {
    None: "null",
    dict: "an object",
    list: "a list",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "true/false",
}


def show_value(value: Any) -> str:
    """A value as a message shows it: JSON, cut to 200 characters (``absent`` for none)."""
    if value is ABSENT:
        return "absent"
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 200 else text[:197] + "..."


def _kind(value: Any) -> str:
    """How a message names the JSON kind of ``value``."""
    kind = None if value is None else type(value)
    return _KIND_NAMES.get(kind, type(value).__name__)


def _is_scalar(value: Any) -> bool:
    return (
        value is None
        or isinstance(value, str | bool | int)
        or (isinstance(value, float) and math.isfinite(value))
    )


#: The settings that the merge, the comparison and the renderers read, and their JSON kinds;
#: other settings are copied as they are. Absent ones are allowed (older reports lack some).
_SETTING_KINDS: dict[str, tuple[type | None, ...]] = {
    "modes": (list,),
    "tools": (str, None),
    "tool_routes": (dict, None),
    "tool_backends": (dict, None),
    "sim_model": (str, None),
    "sim_threshold": (int, float, None),
    "limit": (int, None),
    "ids": (list, None),
    "max_turns": (int, None),
    "generation": (dict, None),
    "pytest_gta": (str,),
}


class _Reader:
    """Checks one loaded report.

    Each message names the file, the field and where such reports come from (``how``).
    """

    def __init__(self, label: str, how: str) -> None:
        self.label = label
        self.how = how

    @property
    def hint(self) -> str:
        """What ends a message: where such reports come from (nothing where none is said)."""
        return f"; {self.how}" if self.how else ""

    def fail(self, text: str) -> GtaUsageError:
        return GtaUsageError(f"{self.label}: {text}" if self.label else text)

    def get(self, obj: Mapping[str, Any], key: str, where: str, *kinds: type | None) -> Any:
        """``obj[key]``, which must be one of ``kinds`` (``None``: null); else a usage error."""
        value = obj.get(key, ABSENT)
        name = f"{where}{key}"
        if value is ABSENT:
            raise self.fail(f"{name} is missing{self.hint}")
        for kind in kinds:
            if kind is None and value is None:
                return value
            if kind is not None and isinstance(value, kind):
                if isinstance(value, bool) and kind in (int, float):
                    continue
                return value
        wanted = " or ".join(dict.fromkeys(_KIND_NAMES[k] for k in kinds))
        raise self.fail(f"{name} is {_kind(value)}, not {wanted}{self.hint}")

    def number(self, obj: Mapping[str, Any], key: str, where: str, *kinds: type | None) -> Any:
        """:meth:`get` for a number that must also be finite (a report never holds NaN)."""
        value = self.get(obj, key, where, *kinds)
        if isinstance(value, float) and not math.isfinite(value):
            raise self.fail(f"{where}{key} is {value}, not a finite number{self.hint}")
        return value

    def count(self, obj: Mapping[str, Any], key: str, where: str) -> None:
        """A count (tokens, calls): a whole number from 0, or null."""
        value = self.get(obj, key, where, int, None)
        if value is not None and value < 0:
            raise self.fail(f"{where}{key} is {value}, not a count{self.hint}")

    def seconds(self, obj: Mapping[str, Any], key: str, where: str) -> None:
        """A duration: a finite number of seconds from 0."""
        value = self.number(obj, key, where, int, float)
        if value < 0:
            raise self.fail(f"{where}{key} is {value}, not a number of seconds{self.hint}")

    def each(self, values: Any, name: str, test: Callable[[Any], bool], what: str) -> None:
        """Every item of a list (or value of an object) passes ``test``; else a usage error."""
        items = values.values() if isinstance(values, dict) else values
        for item in items:
            if not test(item):
                shown = show_value(repr(item) if isinstance(item, str) else item)
                raise self.fail(f"{name} holds {_kind(item)} {shown}, not {what}{self.hint}")

    def settings(self, settings: dict[str, Any]) -> None:
        """The settings a merged run and its renderers read have the kinds a session writes."""
        where = "settings."
        for key, kinds in _SETTING_KINDS.items():
            if key in settings:
                if float in kinds:
                    self.number(settings, key, where, *kinds)
                else:
                    self.get(settings, key, where, *kinds)
        self.get(settings, "modes", where, list)
        self.each(settings["modes"], "settings.modes", lambda m: m in MODES, "a mode")
        self.each(
            settings.get("ids") or [],
            "settings.ids",
            lambda i: isinstance(i, str),
            "a query id",
        )
        limit = settings.get("limit")
        if limit is not None and limit < 0:
            raise self.fail(f"settings.limit is {limit}, not a number of queries")
        self.each(
            settings.get("tool_routes") or {},
            "settings.tool_routes",
            lambda v: isinstance(v, str),
            "a backend name",
        )
        self.each(
            settings.get("tool_backends") or {},
            "settings.tool_backends",
            lambda v: isinstance(v, dict),
            "an object",
        )

    def leaderboard(self, board: Any) -> None:
        """The official row: ``board`` and ``model`` texts, metrics as numbers."""
        if board is None:
            return
        self.get(board, "board", "leaderboard.", str)
        self.get(board, "model", "leaderboard.", str)
        for key in board:
            if key not in ("board", "model"):
                self.number(board, key, "leaderboard.", int, float, None)

    def shard(self, shard: Any) -> None:
        if shard is None:
            return
        if not isinstance(shard, dict):
            raise self.fail(f"shard is {_kind(shard)}, not an object or null{self.hint}")
        index = self.get(shard, "index", "shard.", int)
        total = self.get(shard, "total", "shard.", int)
        if not 1 <= index <= total:
            raise self.fail(f"shard.index {index} is not in 1..{total}")
        self.get(shard, "spec", "shard.", str)
        self.get(shard, "selected", "shard.", int)
        cases = self.get(shard, "cases", "shard.", list)
        if not all(isinstance(c, str) for c in cases):
            raise self.fail("shard.cases holds something other than case ids")

    def primitives(self, mode: str, primitives: dict[str, Any], where: str) -> None:
        """The metric primitives aggregate, alone, so a bad case is named here."""
        try:
            # A value NumPy can only overflow on (1e308 as a float32) is as bad as a wrong kind.
            with warnings.catch_warnings():
                warnings.simplefilter("error", RuntimeWarning)
                if mode == "step":
                    aggregate_step([StepCaseScore.from_json(primitives)])
                else:
                    aggregate_e2e([E2ECaseScore.from_json(primitives)])
        except (
            KeyError,
            TypeError,
            ValueError,
            AttributeError,
            OverflowError,
            RuntimeWarning,
        ) as exc:
            raise self.fail(
                f"{where}primitives are not {mode}-mode metric primitives "
                f"({type(exc).__name__}: {str(exc)[:200]})"
            ) from None

    def text(self, obj: Mapping[str, Any], key: str, where: str, *, null: bool = False) -> Any:
        """A text field (or null, if ``null``)."""
        return self.get(obj, key, where, str, None) if null else self.get(obj, key, where, str)

    def run_label(self, value: Any, name: str) -> str:
        """A run's label: a text that names it on one visible line."""
        if not isinstance(value, str):
            raise self.fail(f"{name} is {_kind(value)}, not a text{self.hint}")
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
            raise self.fail(f"identity is {_kind(raw)}, not an object{self.hint}")
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

    def record(self, index: int, raw: Any) -> CaseRecord:
        """The controller's record of one case entry, as the run's collector had it."""
        where = f"cases[{index}]"
        if not isinstance(raw, dict):
            raise self.fail(f"{where} is {_kind(raw)}, not an object{self.hint}")
        where += "."
        mode = self.get(raw, "mode", where, str)
        outcome = self.get(raw, "outcome", where, str)
        for key, value, allowed in (("mode", mode, MODES), ("outcome", outcome, OUTCOMES)):
            if value not in allowed:
                raise self.fail(f"{where}{key} is {value!r}, not one of {', '.join(allowed)}")
        if "primitives" not in raw:
            raise self.fail(
                f"{where}primitives is missing: the report was written by a pytest-gta "
                "without --gta-merge support; re-run that shard with this version"
            )
        primitives = self.get(raw, "primitives", where, dict, None)
        if primitives is not None:
            self.primitives(mode, primitives, where)
        properties = self.get(raw, "properties", where, dict)
        self.each(properties, f"{where}properties", _is_scalar, "a text, number or true/false")
        for name in USAGE_PROPERTIES:
            if name in properties:
                self.count(properties, name, f"{where}properties.")
        if MODEL_S_PROPERTY in properties:
            self.seconds(properties, MODEL_S_PROPERTY, f"{where}properties.")
        detail: CaseDetail | None = None
        if primitives is not None:
            # The detail payload the entry was written from (what case_entry reads). Steps are
            # kept as recorded: an OpenCompass entry may hold any value where the official
            # evaluator reads nothing (see scoring.metrics.check_steps), and the renderers
            # show whatever a step holds.
            replies = self.get(raw, "replies", where, list)
            self.each(replies, f"{where}replies", lambda r: isinstance(r, str), "a model reply")
            backends = self.get(raw, "backends", where, dict)
            self.each(backends, f"{where}backends", lambda b: isinstance(b, str), "a backend name")
            duration = self.number(raw, "duration", where, int, float, None)
            if duration is not None and duration < 0:
                raise self.fail(f"{where}duration is {duration}, not a duration")
            detail = {
                "score": primitives,
                "verdict": {"score": self.number(raw, "score", where, int, float)},
                "steps": self.get(raw, "steps", where, list),
                "replies": replies,
                "backends": backends,
                "duration": duration,
            }
            # An agent's run, tool log and model traffic (absent without an agent).
            if "agent" in raw:
                detail["agent"] = self.get(raw, "agent", where, dict)
            if "tool_log" in raw:
                detail["tool_log"] = self.get(raw, "tool_log", where, list)
            if "exchanges" in raw:
                detail["exchanges"] = self.get(raw, "exchanges", where, list)
        epoch = raw.get("epoch")  # absent: a report of a run without --gta-epochs
        if epoch is not None:
            epoch = self.get(raw, "epoch", where, int)
            if not 0 <= epoch < 2**31:
                raise self.fail(f"{where}epoch is {epoch}, not a sampling epoch")
        return CaseRecord(
            mode=mode,
            qid=self.get(raw, "query_id", where, str),
            nodeid=self.get(raw, "nodeid", where, str),
            outcome=outcome,
            properties=dict(properties),
            detail=detail,
            message=self.get(raw, "message", where, str),
            epoch=epoch,
        )

    def schema(self, data: Any) -> None:
        """The report is ours and of this schema version; else say which version it is."""
        found = data.get("schema") if isinstance(data, dict) else None
        if found == SCHEMA:
            return
        if isinstance(found, str) and found.startswith(SCHEMA_FAMILY):
            raise self.fail(
                f"schema is {show_value(found)}: the report was written by a pytest-gta of "
                f"another report schema than this one ({SCHEMA}); read it with the version "
                f"that wrote it, or re-run with this one{self.hint}"
            )
        raise self.fail(
            f"not a pytest-gta report (schema {found!r}, expected {SCHEMA!r}){self.hint}"
        )

    def report(self, data: Any) -> ReportFile:
        self.schema(data)
        self.get(data, "model", "", str)
        self.get(data, "protocol", "", str)
        dataset = self.get(data, "dataset", "", dict)
        self.get(dataset, "sha256", "dataset.", str)
        self.get(dataset, "path", "dataset.", str)
        self.get(dataset, "source", "dataset.", str)
        self.settings(self.get(data, "settings", "", dict))
        self.leaderboard(self.get(data, "leaderboard", "", dict, None))
        self.get(data, "stopped", "", str, None)
        self.get(data, "interrupted", "", bool)
        timings = self.get(data, "timings", "", dict, None)
        usage = self.get(data, "usage", "", dict)
        cost = self.number(usage, "cost_usd", "usage.", int, float, None)
        if cost is not None and cost < 0:
            raise self.fail(f"usage.cost_usd is {cost}, not a cost{self.hint}")
        if "model_s" in usage:  # absent from reports written before it
            self.seconds(usage, "model_s", "usage.")
        self.identity(data)
        notes = self.get(data, "notes", "", list)
        if not all(isinstance(n, str) for n in notes):
            raise self.fail(f"notes holds something other than text{self.hint}")
        for process, values in (timings or {}).items():
            if not isinstance(values, dict):
                raise self.fail(f"timings.{process} is {_kind(values)}, not an object")
            for key in values:
                self.number(values, key, f"timings.{process}.", int, float)
        self.shard(data.get("shard"))
        cases = self.get(data, "cases", "", list)
        records = [self.record(i, raw) for i, raw in enumerate(cases)]
        # Checked above: the fields the merge, the comparison and the renderers read.
        return ReportFile(self.label, cast(RunReport, data), records)


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
        raise GtaUsageError(f"the report is {_kind(report)}, not an object")
    return _Reader("", "").identity(report)


def parse_report(label: str, data: Any, how: str = MERGE_HOW) -> ReportFile:
    """Check a loaded report's fields and read its cases back as records.

    ``how`` ends each message, saying where such reports come from.

    Raises:
        GtaUsageError: naming ``label`` and the first field that is missing or wrong; a report
            of another schema version names it and this one.
    """
    return _Reader(label, how).report(data)


def load_report(path: Path, label: str, how: str = MERGE_HOW) -> ReportFile:
    """Read and check one report file (see :func:`parse_report`).

    Raises:
        GtaUsageError: the file is missing, unreadable, too large, not JSON, or not a report.
    """
    try:
        size = path.stat().st_size
        if size > MAX_REPORT_BYTES:
            raise GtaUsageError(
                f"{label}: {size} bytes is larger than any report ({MAX_REPORT_BYTES} at most); "
                f"{how}"
            )
        data = read_json(path)
    except FileNotFoundError:
        raise GtaUsageError(f"{label}: no such file; {how}") from None
    except (OSError, JsonInputError) as exc:
        text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise GtaUsageError(f"{label}: {text}; {how}") from None
    return parse_report(label, data, how)
