"""``pytest --gta-merge REPORT...``: one run's report rebuilt from the reports of its shards.

Each shard's ``--gta-report`` carries every case's metric primitives (``primitives``), so the
merge rebuilds the cases' records and hands them to :func:`~pytest_gta.report.build.build_report`
with the dataset: the same code, in the same dataset order, over the same values, computes the
metrics a single run of all the cases would have, bit for bit. Reports that do not belong to one
run (another dataset, model, protocol or setting, the same case twice, shards of different
splits) are refused with the difference named: exit status 4, like any usage error. Merged, the
command prints the run's tables, writes ``--gta-report``, ``--gta-report-md`` and ``--junitxml``
and exits 0, whatever the cases' outcomes: the shard jobs already reported those. With gates
(``--gta-fail-under``, ``--gta-fail-on-regression``) the merged run is judged as a session is.

Shard reports come from other machines: every field read is checked, and a bad one is a usage
error naming the file and the field, never a traceback.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_gta.case import Case
from pytest_gta.dataset import Dataset
from pytest_gta.errors import DatasetError, GtaUsageError
from pytest_gta.jsonsafe import JsonInputError, read_json
from pytest_gta.options import GtaSettings
from pytest_gta.report.build import (
    SCHEMA,
    TABLE5_NOTE,
    USAGE_PROPERTIES,
    CaseRecord,
    CaseScore,
    mode_metrics,
)
from pytest_gta.scoring.metrics import E2ECaseScore, StepCaseScore
from pytest_gta.vocabulary import MODES, OUTCOMES

#: Larger than any real report (all 229 queries in both modes, replies included, are a few MB).
MAX_REPORT_BYTES = 256 * 1024 * 1024
#: Settings that say which cases a job ran, not how it ran and scored them.
SELECTION_SETTINGS = frozenset({"shard", "ids", "limit"})
#: Notes :func:`build_report` writes again from the merged records (kept once, not per shard).
REGENERATED_NOTES = (TABLE5_NOTE, "the session stopped early: ", "the run was interrupted")
_ABSENT = object()
HOW = "--gta-merge reads the --gta-report files that the shard jobs wrote"


@dataclass
class ShardReport:
    """One report given to ``--gta-merge``, checked, with its cases as records."""

    #: The path as the user wrote it (messages name it so).
    label: str
    data: dict[str, Any]
    records: list[CaseRecord]

    @property
    def shard(self) -> dict[str, Any] | None:
        """The report's ``shard`` entry (``None``: the job ran every selected case)."""
        shard: dict[str, Any] | None = self.data.get("shard")
        return shard

    @property
    def name(self) -> str:
        """``shard 2/3`` when the report is a shard's, else its file name."""
        return f"shard {self.shard['spec']}" if self.shard else self.label


_KIND_NAMES: dict[type | None, str] = {
    None: "null",
    dict: "an object",
    list: "a list",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "true/false",
}


def _kind(value: Any) -> str:
    """How a message names the JSON kind of ``value``."""
    kind = None if value is None else type(value)
    return _KIND_NAMES.get(kind, type(value).__name__)


def _get(label: str, obj: Mapping[str, Any], key: str, where: str, *kinds: type | None) -> Any:
    """``obj[key]``, which must be one of ``kinds`` (``None``: null); else a usage error."""
    value = obj.get(key, _ABSENT)
    field = f"{where}{key}"
    if value is _ABSENT:
        raise GtaUsageError(f"{label}: {field} is missing; {HOW}")
    for kind in kinds:
        if kind is None and value is None:
            return value
        if kind is not None and isinstance(value, kind):
            if isinstance(value, bool) and kind in (int, float):
                continue
            return value
    wanted = " or ".join(dict.fromkeys(_KIND_NAMES[k] for k in kinds))
    raise GtaUsageError(f"{label}: {field} is {_kind(value)}, not {wanted}; {HOW}")


def _number(label: str, obj: Mapping[str, Any], key: str, where: str, *kinds: type | None) -> Any:
    """:func:`_get` for a number that must also be finite (a report never holds NaN or inf)."""
    value = _get(label, obj, key, where, *kinds)
    if isinstance(value, float) and not math.isfinite(value):
        raise GtaUsageError(f"{label}: {where}{key} is {value}, not a finite number; {HOW}")
    return value


def _count(label: str, obj: Mapping[str, Any], key: str, where: str) -> None:
    """A count (tokens, calls): a whole number from 0, or null."""
    value = _get(label, obj, key, where, int, None)
    if value is not None and value < 0:
        raise GtaUsageError(f"{label}: {where}{key} is {value}, not a count; {HOW}")


def _all(label: str, values: Any, field: str, test: Callable[[Any], bool], what: str) -> None:
    """Every item of a list (or value of an object) passes ``test``; else a usage error."""
    items = values.values() if isinstance(values, dict) else values
    for item in items:
        if not test(item):
            shown = _show(repr(item) if isinstance(item, str) else item)
            raise GtaUsageError(f"{label}: {field} holds {_kind(item)} {shown}, not {what}; {HOW}")


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


def _check_settings(label: str, settings: dict[str, Any]) -> None:
    """The settings a merged run and its renderers read have the kinds a session writes."""
    where = "settings."
    for key, kinds in _SETTING_KINDS.items():
        if key in settings:
            if float in kinds:
                _number(label, settings, key, where, *kinds)
            else:
                _get(label, settings, key, where, *kinds)
    _get(label, settings, "modes", where, list)
    _all(label, settings["modes"], "settings.modes", lambda m: m in MODES, "a mode")
    _all(
        label, settings.get("ids") or [], "settings.ids", lambda i: isinstance(i, str), "a query id"
    )
    limit = settings.get("limit")
    if limit is not None and limit < 0:
        raise GtaUsageError(f"{label}: settings.limit is {limit}, not a number of queries")
    _all(
        label,
        settings.get("tool_routes") or {},
        "settings.tool_routes",
        lambda v: isinstance(v, str),
        "a backend name",
    )
    _all(
        label,
        settings.get("tool_backends") or {},
        "settings.tool_backends",
        lambda v: isinstance(v, dict),
        "an object",
    )


def _check_leaderboard(label: str, board: Any) -> None:
    """The official row a report carries: ``board`` and ``model`` texts, metrics as numbers."""
    if board is None:
        return
    _get(label, board, "board", "leaderboard.", str)
    _get(label, board, "model", "leaderboard.", str)
    for key in board:
        if key not in ("board", "model"):
            _number(label, board, key, "leaderboard.", int, float, None)


def _record(label: str, index: int, raw: Any) -> CaseRecord:
    """The controller's record of one case entry, as the shard's collector had it."""
    where = f"cases[{index}]"
    if not isinstance(raw, dict):
        raise GtaUsageError(f"{label}: {where} is {_kind(raw)}, not an object; {HOW}")
    where += "."
    mode = _get(label, raw, "mode", where, str)
    outcome = _get(label, raw, "outcome", where, str)
    for key, value, allowed in (("mode", mode, MODES), ("outcome", outcome, OUTCOMES)):
        if value not in allowed:
            raise GtaUsageError(
                f"{label}: {where}{key} is {value!r}, not one of {', '.join(allowed)}"
            )
    if "primitives" not in raw:
        raise GtaUsageError(
            f"{label}: {where}primitives is missing: the report was written by a pytest-gta "
            "without --gta-merge support; re-run that shard with this version"
        )
    primitives = _get(label, raw, "primitives", where, dict, None)
    if primitives is not None:
        parse: Callable[[Any], CaseScore] = (
            StepCaseScore.from_json if mode == "step" else E2ECaseScore.from_json
        )
        try:
            # Aggregated alone, so a bad case is named here, not found inside the whole run's;
            # a value NumPy can only overflow on (1e308 as a float32) is as bad as a wrong kind.
            with warnings.catch_warnings():
                warnings.simplefilter("error", RuntimeWarning)
                mode_metrics(mode, [parse(primitives)])
        except (
            KeyError,
            TypeError,
            ValueError,
            AttributeError,
            OverflowError,
            RuntimeWarning,
        ) as exc:
            raise GtaUsageError(
                f"{label}: {where}primitives are not {mode}-mode metric primitives "
                f"({type(exc).__name__}: {str(exc)[:200]})"
            ) from None
    properties = _get(label, raw, "properties", where, dict)
    _all(label, properties, f"{where}properties", _is_scalar, "a text, number or true/false")
    for name in USAGE_PROPERTIES:
        if name in properties:
            _count(label, properties, name, f"{where}properties.")
    detail = None
    if primitives is not None:
        # What build_report reads back from a case's detail payload to write the case entry.
        # Steps are kept as recorded: an OpenCompass entry may hold any value where the
        # official evaluator reads nothing (see scoring.metrics.check_steps), and the
        # renderers show whatever a step holds.
        replies = _get(label, raw, "replies", where, list)
        _all(label, replies, f"{where}replies", lambda r: isinstance(r, str), "a model reply")
        backends = _get(label, raw, "backends", where, dict)
        _all(label, backends, f"{where}backends", lambda b: isinstance(b, str), "a backend name")
        duration = _number(label, raw, "duration", where, int, float, None)
        if duration is not None and duration < 0:
            raise GtaUsageError(f"{label}: {where}duration is {duration}, not a duration")
        detail = {
            "score": primitives,
            "verdict": {"score": _number(label, raw, "score", where, int, float)},
            "steps": _get(label, raw, "steps", where, list),
            "replies": replies,
            "backends": backends,
            "duration": duration,
        }
    epoch = raw.get("epoch")  # absent: a report of a run without --gta-epochs
    if epoch is not None:
        epoch = _get(label, raw, "epoch", where, int)
        if not 0 <= epoch < 2**31:
            raise GtaUsageError(f"{label}: {where}epoch is {epoch}, not a sampling epoch")
    return CaseRecord(
        mode=mode,
        qid=_get(label, raw, "query_id", where, str),
        nodeid=_get(label, raw, "nodeid", where, str),
        outcome=outcome,
        properties=dict(properties),
        detail=detail,
        message=_get(label, raw, "message", where, str),
        epoch=epoch,
    )


def _check_shard(label: str, shard: Any) -> None:
    if shard is None:
        return
    if not isinstance(shard, dict):
        raise GtaUsageError(f"{label}: shard is {_kind(shard)}, not an object or null; {HOW}")
    index = _get(label, shard, "index", "shard.", int)
    total = _get(label, shard, "total", "shard.", int)
    if not 1 <= index <= total:
        raise GtaUsageError(f"{label}: shard.index {index} is not in 1..{total}")
    _get(label, shard, "spec", "shard.", str)
    _get(label, shard, "selected", "shard.", int)
    cases = _get(label, shard, "cases", "shard.", list)
    if not all(isinstance(c, str) for c in cases):
        raise GtaUsageError(f"{label}: shard.cases holds something other than case ids")


def parse_report(label: str, data: Any) -> ShardReport:
    """Check a loaded report's fields and rebuild its case records.

    Raises:
        GtaUsageError: naming ``label`` and the first field that is missing or wrong.
    """
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else None
        raise GtaUsageError(
            f"{label}: not a pytest-gta report (schema {found!r}, expected {SCHEMA!r}); {HOW}"
        )
    _get(label, data, "model", "", str)
    _get(label, data, "protocol", "", str)
    dataset = _get(label, data, "dataset", "", dict)
    _get(label, dataset, "sha256", "dataset.", str)
    _get(label, dataset, "path", "dataset.", str)
    _get(label, dataset, "source", "dataset.", str)
    _check_settings(label, _get(label, data, "settings", "", dict))
    _check_leaderboard(label, _get(label, data, "leaderboard", "", dict, None))
    _get(label, data, "stopped", "", str, None)
    _get(label, data, "interrupted", "", bool)
    timings = _get(label, data, "timings", "", dict, None)
    usage = _get(label, data, "usage", "", dict)
    cost = _number(label, usage, "cost_usd", "usage.", int, float, None)
    if cost is not None and cost < 0:
        raise GtaUsageError(f"{label}: usage.cost_usd is {cost}, not a cost; {HOW}")
    notes = _get(label, data, "notes", "", list)
    if not all(isinstance(n, str) for n in notes):
        raise GtaUsageError(f"{label}: notes holds something other than text; {HOW}")
    for process, values in (timings or {}).items():
        if not isinstance(values, dict):
            raise GtaUsageError(f"{label}: timings.{process} is {_kind(values)}, not an object")
        for key in values:
            _number(label, values, key, f"timings.{process}.", int, float)
    _check_shard(label, data.get("shard"))
    cases = _get(label, data, "cases", "", list)
    records = [_record(label, i, raw) for i, raw in enumerate(cases)]
    return ShardReport(label, data, records)


def load_report(path: Path, label: str) -> ShardReport:
    """Read and check one shard report (see :func:`parse_report`)."""
    try:
        size = path.stat().st_size
        if size > MAX_REPORT_BYTES:
            raise GtaUsageError(
                f"{label}: {size} bytes is larger than any report ({MAX_REPORT_BYTES} at most); "
                f"{HOW}"
            )
        data = read_json(path)
    except FileNotFoundError:
        raise GtaUsageError(f"{label}: no such file; {HOW}") from None
    except (OSError, JsonInputError) as exc:
        text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise GtaUsageError(f"{label}: {text}; {HOW}") from None
    return parse_report(label, data)


def _show(value: Any) -> str:
    if value is _ABSENT:
        return "absent"
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 200 else text[:197] + "..."


def first_difference(a: Any, b: Any, field: str) -> tuple[str, Any, Any] | None:
    """(field, a's value, b's value) where ``a`` and ``b`` first differ, in key order."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            found = first_difference(a.get(key, _ABSENT), b.get(key, _ABSENT), f"{field}.{key}")
            if found is not None:
                return found
        return None
    # Compared as JSON texts: 1 and 1.0, or True and 1, are different settings in a report.
    if json.dumps(a, sort_keys=True, default=str) != json.dumps(b, sort_keys=True, default=str):
        return field, a, b
    return None


def run_difference(first: ShardReport, other: ShardReport) -> tuple[str, Any, Any] | None:
    """The first thing that says ``other`` is not from ``first``'s run: (field, first's, other's).

    Model, protocol and dataset, then every setting but the selection (:data:`SELECTION_SETTINGS`).
    """
    a, b = first.data, other.data
    for field, mine, theirs in (
        ("model", a["model"], b["model"]),
        ("protocol", a["protocol"], b["protocol"]),
        ("dataset.sha256", a["dataset"]["sha256"], b["dataset"]["sha256"]),
    ):
        if mine != theirs:
            return field, mine, theirs
    mine = {k: v for k, v in a["settings"].items() if k not in SELECTION_SETTINGS}
    theirs = {k: v for k, v in b["settings"].items() if k not in SELECTION_SETTINGS}
    return first_difference(mine, theirs, "settings")


def _check_shard_of_split(
    report: ShardReport, reports: Sequence[ShardReport], seen: dict[int, str]
) -> None:
    shard = report.shard
    if shard is None:
        return
    first = next(r for r in reports if r.shard is not None)
    if shard["total"] != first.data["shard"]["total"]:
        raise GtaUsageError(
            f"{report.label}: shard {shard['spec']} is not of the split {first.label} is a shard "
            f"of ({first.data['shard']['spec']}); merge the shards of one --gta-shard=K/N split"
        )
    if shard["index"] in seen:
        raise GtaUsageError(
            f"{report.label}: shard {shard['spec']} is given twice (also {seen[shard['index']]}); "
            "pass each shard's report once"
        )
    seen[shard["index"]] = report.label


def check_same_run(reports: Sequence[ShardReport]) -> None:
    """Refuse reports that are not parts of one run.

    Raises:
        GtaUsageError: naming the first difference, the two files and both values.
    """
    first = reports[0]
    seen_cases: dict[str, str] = {}
    seen_shards: dict[int, str] = {}
    for report in reports:
        found = None if report is first else run_difference(first, report)
        if found is not None:
            field, mine, theirs = found
            raise GtaUsageError(
                f"{report.label}: {field} is {_show(theirs)}, {first.label} has {_show(mine)}: "
                "these reports are not shards of one run"
            )
        _check_shard_of_split(report, reports, seen_shards)
        for record in report.records:
            case_id = Case.format_id(record.mode, record.qid, record.epoch)
            if case_id in seen_cases:
                raise GtaUsageError(
                    f"{report.label}: case {case_id} is also in {seen_cases[case_id]}: each case "
                    "must come from one report (did two jobs run the same --gta-shard?)"
                )
            seen_cases[case_id] = report.label


def coverage_warnings(reports: Sequence[ShardReport]) -> list[str]:
    """Shards missing from a split, and shards' cases without a result."""
    warnings = []
    shards = [s for r in reports if (s := r.shard) is not None]
    if shards:
        total = shards[0]["total"]
        given = {s["index"] for s in shards}
        # Never one entry per shard: a report may claim a split of 10**11 shards.
        missing = list(itertools.islice((i for i in range(1, total + 1) if i not in given), 20))
        if missing:
            names = ", ".join(f"{i}/{total}" for i in missing)
            if total - len(given) > len(missing):
                names += f" and {total - len(given) - len(missing):,} more"
            warnings.append(
                f"shard(s) {names} not given to --gta-merge: the merged report covers only the "
                "cases of the shards given"
            )
    for report in reports:
        if report.shard is None:
            continue
        have = {Case.format_id(r.mode, r.qid) for r in report.records}
        lost = [c for c in report.shard["cases"] if c not in have]
        if lost:
            warnings.append(
                f"{report.label} ({report.name}): {len(lost)} of its cases have no result "
                f"({', '.join(lost[:5])}{', ...' if len(lost) > 5 else ''})"
            )
    return warnings


def find_dataset(config: pytest.Config, reports: Sequence[ShardReport]) -> Dataset:
    """The dataset the shards ran on: ``--gta-data``, else where the report says, else installed.

    Raises:
        GtaUsageError: it is not here (saying how to point at it), or it is another version.
    """
    from pytest_gta.dataset import bundled_sample_path
    from pytest_gta.options import (
        DATASET_NAME,
        SAMPLE_KEYWORD,
        resolve_data_dir,
        resolve_option,
        resolve_path,
    )
    from pytest_gta.validation import dataset_sha256, load_dataset

    recorded = reports[0].data["dataset"]
    sha = recorded["sha256"]
    named = resolve_option(config, "gta_data")
    if named.value is not None:
        path = (
            bundled_sample_path()
            if named.value == SAMPLE_KEYWORD
            else resolve_path(config, named.value, named.source)
        )
        candidates = [(path, named.origin)]
    else:
        candidates = [
            (Path(recorded["path"]), f"the path in {reports[0].label}"),
            (resolve_data_dir(config)[0] / DATASET_NAME, "the installed dataset"),
            (bundled_sample_path(), "the bundled sample"),
        ]
    for path, origin in candidates:
        try:
            found = dataset_sha256(path)
        except OSError:
            if named.value is not None:
                raise GtaUsageError(
                    f"{named.origin}={named.value}: no dataset.json in {path}; point it at the "
                    "dataset the shards ran on"
                ) from None
            continue
        if found != sha:
            if named.value is not None:
                raise GtaUsageError(
                    f"{named.origin}={named.value}: its dataset.json has sha256 {found[:16]}, the "
                    f"shards ran on {sha[:16]}; point it at the dataset the shards ran on"
                )
            continue
        try:
            return load_dataset(path)
        except DatasetError as exc:
            raise GtaUsageError(f"{exc}\n(dataset from {origin})") from None
    raise GtaUsageError(
        f"the shards ran on the dataset at {recorded['path']} (dataset.json sha256 {sha[:16]}), "
        "which is not on this machine: the merge needs it for the cases' order and "
        "denominators; pass --gta-merge ... --gta-data=DIR with a copy of it"
    )


def _merged_selection(reports: Sequence[ShardReport], dataset: Dataset) -> dict[str, Any]:
    """``ids`` and ``limit`` of the whole run: the shards' own when they agree."""
    settings = [r.data["settings"] for r in reports]
    out: dict[str, Any] = {"shard": None}
    for key in ("ids", "limit"):
        values = [s.get(key) for s in settings]
        if all(v == values[0] for v in values):
            out[key] = values[0]
        elif key == "limit":
            out[key] = None if None in values else max(values)
        elif None in values:
            out[key] = None
        else:
            wanted = {str(i) for v in values for i in v}
            out[key] = [q for q in dataset.queries if q in wanted]
    return out


def merge_reports(
    reports: Sequence[ShardReport],
    dataset: Dataset,
    warnings: Sequence[str] = (),
    *,
    confidence: float = 0.95,
    samples: int = 2000,
) -> dict[str, Any]:
    """The report of the run the shards are parts of (see module docstring)."""
    from pytest_gta.report.build import build_report

    check_same_run(reports)
    known = set(dataset.queries)
    for report in reports:
        for record in report.records:
            if record.qid not in known:
                raise GtaUsageError(
                    f"{report.label}: case {Case.format_id(record.mode, record.qid)} is not a "
                    f"query of {dataset.root}"
                )
    first = reports[0].data
    notes: list[str] = []
    for report in reports:
        for note in report.data["notes"]:
            if not note.startswith(REGENERATED_NOTES):
                notes.append(note)
    stopped = [f"{r.name}: {r.data['stopped']}" for r in reports if r.data["stopped"]]
    timings = {
        f"{r.name}: {process}": values
        for r in reports
        for process, values in (r.data["timings"] or {}).items()
    }
    merged = build_report(
        model=first["model"],
        protocol=first["protocol"],
        dataset=dataset,
        data_source=first["dataset"]["source"],
        settings={**first["settings"], **_merged_selection(reports, dataset)},
        records=[record for r in reports for record in r.records],
        warnings=[*notes, *warnings],
        leaderboard=first["leaderboard"],
        stopped="; ".join(stopped) or None,
        interrupted=any(r.data["interrupted"] for r in reports),
        timings=timings or None,
        confidence=confidence,
        samples=samples,
    )
    merged["notes"] = list(dict.fromkeys(merged["notes"]))
    costs = [r.data["usage"]["cost_usd"] for r in reports]
    merged["usage"]["cost_usd"] = None if None in costs else sum(costs)
    merged["merged"] = {
        "reports": [r.label for r in reports],
        "shards": sorted(
            (s["spec"] for r in reports if (s := r.shard) is not None),
            key=lambda spec: int(spec.partition("/")[0]),
        ),
    }
    return merged


def _say(line: str) -> None:
    print(f"pytest-gta: {line}", flush=True)


def run(config: pytest.Config) -> int:
    """The ``--gta-merge`` command: merge, print the tables, write the files; 0 when merged.

    Raises:
        pytest.UsageError: a report is unreadable or not part of the same run (exit status 4).
    """
    from pytest_gta.gates import gated_exit_status
    from pytest_gta.options import resolve_option, resolve_settings
    from pytest_gta.outward import Cleaner
    from pytest_gta.report.junit import junit_xml
    from pytest_gta.report.table import render_text
    from pytest_gta.session.collector import Output, html_output, report_outputs, write_outputs

    given: list[str] = config.getoption("gta_merge")
    paths: list[Path] = resolve_option(config, "gta_merge").value
    settings = resolve_settings(config)
    try:
        reports = [load_report(path, label) for path, label in zip(paths, given, strict=True)]
        warnings = coverage_warnings(reports)
        check_same_run(reports)
        dataset = find_dataset(config, reports)
        report = merge_reports(
            reports,
            dataset,
            warnings,
            confidence=settings.confidence,
            samples=settings.bootstrap_samples,
        )
        records = [record for r in reports for record in r.records]
        _conclude(config, settings, report, records, dataset)
    except GtaUsageError as exc:
        raise pytest.UsageError(f"pytest-gta: {exc}") from None
    config.hook.pytest_gta_update_report(config=config, report=report)
    cleaner = Cleaner()
    report = cleaner.value(report)
    report["notes"] = list(dict.fromkeys([*report.get("notes", []), *cleaner.notes()]))
    cases = len(report["cases"])
    _say(f"merged {len(reports)} reports: {cases} cases of {dataset.root}")
    for warning in warnings:
        _say(f"warning: {warning}")
    print(" GTA results ".center(80, "="), flush=True)
    for line in render_text(report):
        print(line, flush=True)
    # The shard jobs reported the cases; here only the gates and harness errors count.
    code = gated_exit_status(report, int(pytest.ExitCode.OK))
    outputs = report_outputs(
        report,
        resolve_option(config, "gta_report").value,
        resolve_option(config, "gta_report_md").value,
    )
    html_path = resolve_option(config, "gta_report_html").value
    if html_path is not None:
        # The shards' image stores stay on their machines: the page has no images and says so.
        max_mb = resolve_option(config, "gta_report_html_max_mb").value
        outputs.append(html_output(html_path, report, dataset, None, max_mb))
    xmlpath = config.getoption("xmlpath", None)
    if xmlpath:
        suite = str(config.getini("junit_suite_name") or "pytest")
        # Resolved as pytest's junitxml resolves it.
        outputs.append(
            Output(
                Path(os.path.abspath(os.path.expanduser(os.path.expandvars(xmlpath)))),
                lambda: junit_xml(report, suite),
                option="--junitxml",
            )
        )
    for output, error in write_outputs(outputs):
        if error is None:
            _say(f"written to {output.path}")
        else:
            _say(f"could not write {output.label}: {error}")
            code = int(pytest.ExitCode.TESTS_FAILED)
    return code


def _conclude(
    config: pytest.Config,
    settings: GtaSettings,
    report: dict[str, Any],
    records: list[CaseRecord],
    dataset: Dataset,
) -> None:
    """The merged run's comparison with ``--gta-baseline`` and its gates, as a session's."""
    from pytest_gta.report.compare import SCORING_SETTINGS, Baseline, conclude, read_baseline

    modes = [m for m in MODES if m in report["settings"].get("modes", [])]
    settings.gates.check_modes(modes, settings.baseline is not None)
    baseline: Baseline | None = None
    found: list[str] = []
    if settings.baseline is not None:
        run = {
            "sha256": dataset.sha256,
            "modes": modes,
            "protocol": report["protocol"],
            **{k: report["settings"].get(k) for k in SCORING_SETTINGS},
        }
        given = config.getoption("gta_baseline") or settings.baseline
        baseline, found = read_baseline(settings.baseline, given, run, settings.baseline_lenient)
    conclude(
        report,
        records,
        dataset,
        baseline=baseline,
        differences=found,
        gates=settings.gates,
        level=settings.confidence,
        samples=settings.bootstrap_samples,
    )
