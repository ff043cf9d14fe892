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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, cast

from pytest_gta.case import Case
from pytest_gta.errors import GtaUsageError
from pytest_gta.flags import OPT_MERGE, OPT_REPORT
from pytest_gta.jsonsafe import JsonInputError, read_json
from pytest_gta.report.fields import kind_of, show_value
from pytest_gta.report.identity import GitInfo as GitInfo
from pytest_gta.report.identity import Identity as Identity
from pytest_gta.report.identity import IdentityReader
from pytest_gta.report.identity import default_label as default_label
from pytest_gta.report.identity import identity_of as identity_of
from pytest_gta.report.identity import make_identity as make_identity
from pytest_gta.scoring.metrics import E2ECaseScore, StepCaseScore, aggregate_e2e, aggregate_step
from pytest_gta.vocabulary import MODEL_S_PROPERTY, MODES, OUTCOMES

CaseDetail = dict[str, Any]  # TRANSITIONAL: goes once nothing reads the old report types

#: The version this code writes and reads; another is refused by :func:`parse_report`.
SCHEMA = "pytest-gta-report/1"
#: What every report's schema starts with (a file without it is not a report of ours).
SCHEMA_FAMILY = "pytest-gta-report/"
#: Larger than any real report (all 229 queries in both modes, replies included, are a few MB).
MAX_REPORT_BYTES = 256 * 1024 * 1024
#: How a reader's messages say where reports come from (``--gta-merge``'s; baselines say theirs).
MERGE_HOW = f"{OPT_MERGE} reads the {OPT_REPORT} files that the shard jobs wrote"
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
    """The report's ``comparison`` with ``--gta-baseline`` (:mod:`pytest_gta.report.baseline`)."""

    #: The leaderboard board of a ``leaderboard`` comparison.
    board: str | None


#: The report's ``gates``: the verdict over all gates, and each gate's.
Gates = dict[str, Any]


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
    #: ``(payload, parsed)``: the detail's metric primitives once parsed
    #: (:func:`pytest_gta.report.build.case_score`); ``--gta-compare`` reads the reference run's
    #: cases once for every other run.
    parsed_score: tuple[Any, Any] | None = field(default=None, compare=False, repr=False)

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


class _Reader(IdentityReader):
    """Checks one loaded report.

    Each message names the file, the field and where such reports come from (``how``).
    """

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
            raise self.fail(f"shard is {kind_of(shard)}, not an object or null{self.hint}")
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

    def record(self, index: int, raw: Any) -> CaseRecord:
        """The controller's record of one case entry, as the run's collector had it."""
        where = f"cases[{index}]"
        if not isinstance(raw, dict):
            raise self.fail(f"{where} is {kind_of(raw)}, not an object{self.hint}")
        where += "."
        mode = self.get(raw, "mode", where, str)
        outcome = self.get(raw, "outcome", where, str)
        for key, value, allowed in (("mode", mode, MODES), ("outcome", outcome, OUTCOMES)):
            if value not in allowed:
                raise self.fail(f"{where}{key} is {value!r}, not one of {', '.join(allowed)}")
        if "primitives" not in raw:
            raise self.fail(
                f"{where}primitives is missing: the report was written by a pytest-gta "
                f"without {OPT_MERGE} support; re-run that shard with this version"
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
                raise self.fail(f"timings.{process} is {kind_of(values)}, not an object")
            for key in values:
                self.number(values, key, f"timings.{process}.", int, float)
        self.shard(data.get("shard"))
        cases = self.get(data, "cases", "", list)
        records = [self.record(i, raw) for i, raw in enumerate(cases)]
        # Checked above: the fields the merge, the comparison and the renderers read.
        return ReportFile(self.label, cast(RunReport, data), records)


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
