"""The one writer and the one reader of reports, and the case's trip from a worker.

* :func:`dump_report` writes a :class:`~pytest_gta.results.report.RunReport` as the
  ``--gta-report`` file's text (strict JSON: a NaN is refused, not written), the cases'
  ``properties`` flattened again from their fields.
* :func:`load_report` / :func:`parse_report` read one back: reports come from other machines and
  other versions, so an unknown or newer schema, a malformed file or a field of the wrong kind is
  a :class:`~pytest_gta.errors.GtaUsageError` naming the file and the field, never a traceback;
  a report of an earlier version is migrated on the way (:mod:`pytest_gta.results.migrate`).
* :func:`dump_comparison` / :func:`load_comparison` / :func:`parse_comparison` do the same for
  a comparison of runs (``--gta-compare``'s ``--gta-report``,
  :class:`~pytest_gta.results.comparison.Comparison`).
* :func:`case_to_wire` / :func:`case_from_wire` carry a finished case from an xdist worker to
  the controller as the model's JSON, read back by the same class.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pytest_gta.errors import GtaUsageError
from pytest_gta.flags import OPT_COMPARE, OPT_MERGE, OPT_REPORT
from pytest_gta.jsonsafe import JsonInputError, collection_paused, loads, read_json
from pytest_gta.results.case import CaseResult, case_properties
from pytest_gta.results.comparison import COMPARISON_FAMILY, COMPARISON_SCHEMA, Comparison
from pytest_gta.results.migrate import migrate_report
from pytest_gta.results.report import SCHEMA, SCHEMA_FAMILY, RunReport
from pytest_gta.results.scored import KIND as SCORED_KIND
from pytest_gta.results.scored import ScoredReport, parse_scored
from pytest_gta.results.workflow import BENCHMARK as WORKFLOW
from pytest_gta.results.workflow import KIND as WORKFLOW_KIND
from pytest_gta.results.workflow import WorkflowReport, parse_workflow_report

__all__ = [
    "COMPARISON_HOW",
    "MAX_REPORT_BYTES",
    "MERGE_HOW",
    "CaseWire",
    "ReportFile",
    "case_from_wire",
    "case_to_wire",
    "dump_comparison",
    "dump_json",
    "dump_report",
    "field_problem",
    "load_comparison",
    "load_report",
    "parse_comparison",
    "parse_report",
    "refresh_properties",
]

#: Larger than any real report (all 229 queries in both modes, replies included, are a few MB).
MAX_REPORT_BYTES = 256 * 1024 * 1024
#: How a reader's messages say where reports come from (``--gta-merge``'s; baselines say theirs).
MERGE_HOW = f"{OPT_MERGE} reads the {OPT_REPORT} files that the shard jobs wrote"
#: How the comparison reader's messages say where comparisons come from.
COMPARISON_HOW = f"a comparison is the {OPT_REPORT} file that pytest {OPT_COMPARE} wrote"
#: A value shown in a message is cut to this many characters.
_SHOWN = 200


# --------------------------------------------------------------------------------------------
# Writing


def dump_json(value: Any) -> str:
    """The text of a JSON file the project writes: indented, strict (a NaN is refused)."""
    return json.dumps(value, indent=2, allow_nan=False) + "\n"


def refresh_properties(report: RunReport) -> None:
    """Flatten every case's ``properties`` again from its fields (:func:`case_properties`)."""
    for case in report.cases:
        case.properties = dict(
            case_properties(case, model=report.model, agent=report.identity.agent)
        )


def dump_report(report: RunReport) -> str:
    """The text of a ``--gta-report`` file (see the module docstring)."""
    refresh_properties(report)
    return dump_json(report.to_json_value())


def dump_comparison(comparison: Comparison) -> str:
    """The text of a comparison's ``--gta-report`` file (strict JSON)."""
    return dump_json(comparison.to_json_value())


# --------------------------------------------------------------------------------------------
# Reading


@dataclass
class ReportFile:
    """A report read from a file, checked and migrated (:func:`load_report`)."""

    #: The path as the user wrote it (messages name it so).
    label: str
    report: RunReport

    @property
    def cases(self) -> list[CaseResult]:
        """The report's cases."""
        return self.report.cases

    @property
    def name(self) -> str:
        """``shard 2/3`` when the report is a shard's, else its file name."""
        shard = self.report.shard
        return f"shard {shard.spec}" if shard is not None else self.label


def show_value(value: Any) -> str:
    """A value as a message shows it: JSON, cut to 200 characters."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


#: What a pydantic error location names that is not a field: the member of a union it tried.
_TYPE_TAGS = frozenset(
    {"int", "float", "str", "bool", "none", "list", "dict", "tuple", "tagged-union", "json"}
)


def _path(loc: Sequence[int | str], classes: frozenset[str]) -> str:
    """``cases[3].primitives.steps[0].answer`` from a pydantic error's location.

    A location also names the union member or constraint it tried (``StepPrimitives``,
    ``function-after[...]``, ``list[...]``, ``int``); those are not fields and are left out.
    Dictionary keys (a tool's name) are kept.
    """
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not (part in classes or part in _TYPE_TAGS or "[" in part or part.startswith("json-")):
            out += f".{part}" if out else part
    return out


@functools.cache
def _class_names(root: type = RunReport) -> frozenset[str]:
    """The names of the model's classes (a union member's tag in an error's location)."""
    names: set[str] = set()
    todo: list[Any] = [root]
    seen: set[Any] = set()
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        if hasattr(cls, "model_fields"):
            names.add(cls.__name__)
            for info in cls.model_fields.values():
                todo.extend(_classes_in(info.annotation))
    return frozenset(names)


def _classes_in(annotation: Any) -> list[Any]:
    found = []
    if hasattr(annotation, "model_fields"):
        found.append(annotation)
    for arg in getattr(annotation, "__args__", ()) or ():
        found.extend(_classes_in(arg))
    for extra in getattr(annotation, "__metadata__", ()) or ():
        found.extend(_classes_in(extra))
    origin = getattr(annotation, "__origin__", None)
    if origin is not None and hasattr(origin, "model_fields"):
        found.append(origin)
    return found


def field_problem(exc: ValidationError, root: type = RunReport, what: str = "report") -> str:
    """The first problem of a validation error, as ``field is VALUE: why``.

    ``root`` is the class that was validated, ``what`` how messages call a document of it. A
    value that fits no member of a union (a number field given ``true``) fails once per member;
    the message says every kind that was wanted.
    """
    errors = exc.errors(include_url=False)
    if not errors:
        return str(exc)
    known = _class_names(root)
    first = min(errors, key=lambda e: len(e["loc"]))
    where = _path(first["loc"], known)
    same = [e for e in errors if _path(e["loc"], known) == where]
    if first["type"] == "missing":
        return f"{where or 'the ' + what} is missing"
    if first["type"] == "extra_forbidden":
        return f"{where} is not a field of this {what} version"
    wanted = list(dict.fromkeys(_wanted(e["msg"]) for e in same))
    why = (
        "Input should be " + ", ".join(wanted[:-1]) + " or " + wanted[-1]
        if len(wanted) > 1 and all(wanted)
        else first["msg"].removeprefix("Value error, ")
    )
    value = first["input"]
    shown = show_value(repr(value) if isinstance(value, str) else value)
    return f"{where or 'the ' + what} is {shown}: {why}"


def _wanted(message: str) -> str:
    """``a valid integer`` of pydantic's ``Input should be a valid integer`` ("" otherwise)."""
    prefix = "Input should be "
    return message.removeprefix(prefix) if message.startswith(prefix) else ""


def _check_schema(data: Any, label: str, hint: str) -> None:
    found = data.get("schema") if isinstance(data, dict) else None
    if found == SCHEMA:
        return
    if isinstance(found, str) and found.startswith(SCHEMA_FAMILY):
        raise GtaUsageError(
            f"{label}: schema is {show_value(found)}: the report was written by a pytest-gta of "
            f"another report schema than this one ({SCHEMA}); read it with the version "
            f"that wrote it, or re-run with this one{hint}"
        )
    raise GtaUsageError(
        f"{label}: not a pytest-gta report (schema {found!r}, expected {SCHEMA!r}){hint}"
    )


def _check_primitives(data: Mapping[str, Any], label: str) -> None:
    cases = data.get("cases")
    for index, case in enumerate(cases if isinstance(cases, list) else []):
        if isinstance(case, dict) and "primitives" not in case:
            raise GtaUsageError(
                f"{label}: cases[{index}].primitives is missing: the report was written by a "
                f"pytest-gta without {OPT_MERGE} support; re-run that shard with this version"
            )


def parse_report(label: str, data: Any, how: str = MERGE_HOW) -> ReportFile:
    """Check a loaded report, migrate it, and read it into the typed report.

    ``how`` ends each message, saying where such reports come from.

    Raises:
        GtaUsageError: naming ``label`` and the first field that is missing or wrong; a report
            of another schema version names it and this one.
    """
    hint = f"; {how}" if how else ""
    prefix = f"{label}: " if label else ""
    _check_schema(data, label, hint)
    _check_primitives(data, label)
    try:
        with collection_paused():
            report = RunReport.model_validate(migrate_report(data))
    except ValidationError as exc:
        raise GtaUsageError(f"{prefix}{field_problem(exc)}{hint}") from None
    return ReportFile(label, report)


def _read(path: Path, label: str, how: str, what: str) -> Any:
    """A file's JSON; a usage error naming ``label`` when it is not JSON of a sane size."""
    try:
        size = path.stat().st_size
        if size > MAX_REPORT_BYTES:
            raise GtaUsageError(
                f"{label}: {size} bytes is larger than any {what} ({MAX_REPORT_BYTES} at most); "
                f"{how}"
            )
        return read_json(path)
    except FileNotFoundError:
        raise GtaUsageError(f"{label}: no such file; {how}") from None
    except (OSError, JsonInputError) as exc:
        text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise GtaUsageError(f"{label}: {text}; {how}") from None


#: An atomic report's ``benchmark``.
ATOMIC = "gta-atomic"


@dataclass(frozen=True)
class WorkflowFile:
    """A GTA-Workflow report read from a file (:func:`parse_any_report`)."""

    label: str
    report: WorkflowReport


@dataclass(frozen=True)
class ScoredFile:
    """A scored benchmark's report read from a file (a third party's task family)."""

    label: str
    report: ScoredReport


AnyReportFile = ReportFile | WorkflowFile | ScoredFile


def benchmark_of(data: Any) -> str | None:
    """Which benchmark's report ``data`` is; ``None``: not a pytest-gta report.

    Its ``benchmark`` field; a report written before it had one says so by the field each
    kind always wrote first (an atomic report's ``schema``, a Workflow report's ``kind``).
    """
    if not isinstance(data, dict):
        return None
    named = data.get("benchmark")
    if isinstance(named, str):
        return named
    if data.get("kind") == WORKFLOW_KIND:
        return WORKFLOW
    schema = data.get("schema")
    return ATOMIC if isinstance(schema, str) and schema.startswith(SCHEMA_FAMILY) else None


def parse_any_report(label: str, data: Any, how: str = MERGE_HOW) -> AnyReportFile:
    """A loaded report of any benchmark, read by its own model (the one reader of reports).

    Raises:
        GtaUsageError: naming ``label`` and what is wrong (an atomic report's messages for
            anything that is not a Workflow report; another benchmark's report names it).
    """
    kind = benchmark_of(data)
    if kind == WORKFLOW:
        return WorkflowFile(label, parse_workflow_report(label, data))
    if isinstance(data, dict) and data.get("kind") == SCORED_KIND:
        return ScoredFile(label, parse_scored(label, data))
    if kind not in (None, ATOMIC):
        raise GtaUsageError(
            f"{label}: a report of the benchmark {show_value(kind)} that is not in a shape "
            f"this pytest-gta reads (GTA-Atomic, GTA-Workflow, scored){'; ' + how if how else ''}"
        )
    return parse_report(label, data, how)


def load_any_report(path: Path, label: str, how: str = MERGE_HOW) -> AnyReportFile:
    """Read one report file of any benchmark (see :func:`parse_any_report`).

    Raises:
        GtaUsageError: the file is missing, unreadable, too large, not JSON, or not a report.
    """
    return parse_any_report(label, _read(path, label, how, "report"), how)


def read_report_data(path: Path, label: str, how: str = MERGE_HOW) -> Any:
    """A report file's JSON, unchecked (for :func:`one_benchmark` before each is parsed).

    Raises:
        GtaUsageError: the file is missing, unreadable, too large or not JSON.
    """
    return _read(path, label, how, "report")


def one_benchmark(loaded: Sequence[tuple[str, Any]], command: str) -> str:
    """The benchmark every loaded report (``(label, data)``) is of, before any is parsed.

    A file that is no report counts as an atomic one here (its parsing then says what it is).

    Raises:
        GtaUsageError: reports of two benchmarks, naming one file of each (their tables have
            no column in common).
    """
    kinds: dict[str, str] = {}
    for label, data in loaded:
        kinds.setdefault(benchmark_of(data) or ATOMIC, label)
    if len(kinds) > 1:
        (one, first), (two, second) = list(kinds.items())[:2]
        raise GtaUsageError(
            f"{command}: {first} is a {_NAMES.get(one, one)} report and {second} a "
            f"{_NAMES.get(two, two)} report; their tables have no column in common: give the "
            "runs of one benchmark at a time"
        )
    return next(iter(kinds), ATOMIC)


def expect_benchmark(data: Any, label: str, wanted: str, what: str) -> None:
    """Refuse a report of another benchmark than ``wanted`` (``what`` says who reads it).

    Raises:
        GtaUsageError: naming the file, its benchmark and the run's.
    """
    found = benchmark_of(data)
    if found is not None and found != wanted:
        raise GtaUsageError(
            f"{label} is a {_NAMES.get(found, found)} report and {what} is "
            f"{_NAMES.get(wanted, wanted)}: compare runs of one benchmark"
        )


#: How messages name the built-in benchmarks.
_NAMES = {ATOMIC: "GTA-Atomic", WORKFLOW: "GTA-Workflow"}


def load_report(path: Path, label: str, how: str = MERGE_HOW) -> ReportFile:
    """Read and check one report file (see :func:`parse_report`).

    Raises:
        GtaUsageError: the file is missing, unreadable, too large, not JSON, or not a report.
    """
    return parse_report(label, _read(path, label, how, "report"), how)


def parse_comparison(label: str, data: Any, how: str = COMPARISON_HOW) -> Comparison:
    """Check a loaded comparison (``pytest-gta-comparison/1``) and read it into the model.

    Raises:
        GtaUsageError: naming ``label`` and the first field that is missing or wrong; a
            comparison of another schema version names it and this one.
    """
    hint = f"; {how}" if how else ""
    prefix = f"{label}: " if label else ""
    found = data.get("schema") if isinstance(data, dict) else None
    if found != COMPARISON_SCHEMA:
        if isinstance(found, str) and found.startswith(COMPARISON_FAMILY):
            raise GtaUsageError(
                f"{prefix}schema is {show_value(found)}: the comparison was written by a "
                f"pytest-gta of another comparison schema than this one ({COMPARISON_SCHEMA}); "
                f"read it with the version that wrote it{hint}"
            )
        raise GtaUsageError(
            f"{prefix}not a pytest-gta comparison (schema {found!r}, expected "
            f"{COMPARISON_SCHEMA!r}){hint}"
        )
    try:
        return Comparison.model_validate(data)
    except ValidationError as exc:
        problem = field_problem(exc, Comparison, "comparison")
        raise GtaUsageError(f"{prefix}{problem}{hint}") from None


def load_comparison(path: Path, label: str, how: str = COMPARISON_HOW) -> Comparison:
    """Read and check one comparison file (see :func:`parse_comparison`).

    Raises:
        GtaUsageError: the file is missing, unreadable, too large, not JSON, or not a comparison.
    """
    return parse_comparison(label, _read(path, label, how, "comparison"), how)


# --------------------------------------------------------------------------------------------
# A case's trip from a worker


@dataclass(frozen=True)
class CaseWire:
    """A case as it arrives on the controller, with what only the controller's notes need."""

    case: CaseResult
    #: Non-finite numbers the worker's cleaning replaced (the report's notes count them).
    nonfinite: int = 0


def case_to_wire(wire: CaseWire) -> str:
    """The JSON text a case travels in (``user_properties`` of its setup report)."""
    return json.dumps(
        {
            "case": wire.case.to_json_value(),
            "nonfinite": wire.nonfinite,
        },
        allow_nan=False,
    )


def case_from_wire(text: str) -> CaseWire:
    """Read a case sent by :func:`case_to_wire` (in this session, by the same code).

    Raises:
        ValueError: the text is not such a case (a plugin put something else under the key).
    """
    try:
        data = loads(text)
        case = CaseResult.model_validate(data["case"])
        return CaseWire(case, int(data.get("nonfinite", 0)))
    except (JsonInputError, ValidationError, KeyError, TypeError) as exc:
        raise ValueError(f"not a GTA case: {exc}") from None
