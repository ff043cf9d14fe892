"""``--gta-merge``'s pure part: one run's report rebuilt from the reports of its shards.

Each shard's ``--gta-report`` carries every case's metric primitives (``primitives``), so the
merge reads the cases back (:func:`~pytest_gta.results.io.load_report`) and hands
them to :func:`~pytest_gta.report.build.build_report` with the dataset: the same code, in the
same dataset order, over the same values, computes the metrics a single run of all the cases
would have, bit for bit. Reports that do not belong to one run (another dataset, model, protocol
or setting, the same case twice, shards of different splits) are refused with the difference
named. The command around it (options, the dataset's lookup, printing, the files, the exit
status) is :mod:`pytest_gta.session.finish`.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any, Protocol, TypeVar

from pytest_gta.case import Case
from pytest_gta.dataset import Dataset
from pytest_gta.errors import GtaUsageError
from pytest_gta.flags import OPT_MERGE, OPT_SHARD
from pytest_gta.provenance import parse_utc
from pytest_gta.report.build import TABLE5_NOTE, build_report, complete_verdicts
from pytest_gta.results.io import ReportFile, show_value
from pytest_gta.results.report import Identity, MergeInfo, RunReport, RunSettings

#: Settings that say which cases a job ran, not how it ran and scored them.
SELECTION_SETTINGS = frozenset({"shard", "ids", "limit"})
#: A key a settings object does not have (``first_difference`` names it ``absent``).
ABSENT = object()
#: Notes :func:`build_report` writes again from the merged records (kept once, not per shard).
REGENERATED_NOTES = (TABLE5_NOTE, "the session stopped early: ", "the run was interrupted")


def first_difference(a: Any, b: Any, field: str) -> tuple[str, Any, Any] | None:
    """(field, a's value, b's value) where ``a`` and ``b`` first differ, in key order."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            found = first_difference(a.get(key, ABSENT), b.get(key, ABSENT), f"{field}.{key}")
            if found is not None:
                return found
        return None
    # Compared as JSON texts: 1 and 1.0, or True and 1, are different settings in a report.
    if json.dumps(a, sort_keys=True, default=str) != json.dumps(b, sort_keys=True, default=str):
        return field, a, b
    return None


def run_difference(first: ReportFile, other: ReportFile) -> tuple[str, Any, Any] | None:
    """The first thing that says ``other`` is not from ``first``'s run: (field, first's, other's).

    Model, protocol and dataset, then every setting but the selection (:data:`SELECTION_SETTINGS`).
    """
    a, b = first.report, other.report
    for field, mine, theirs in (
        ("model", a.model, b.model),
        ("protocol", a.protocol, b.protocol),
        ("dataset.sha256", a.dataset.sha256, b.dataset.sha256),
    ):
        if mine != theirs:
            return field, mine, theirs
    return first_difference(
        _settings_json(a.settings),
        _settings_json(b.settings),
        "settings",
    )


def _settings_json(settings: RunSettings) -> dict[str, Any]:
    """The settings as JSON, without the selection (what a shard job chose to run)."""
    data: dict[str, Any] = settings.to_json_value()
    return {k: v for k, v in data.items() if k not in SELECTION_SETTINGS}


def _check_shard_of_split(
    report: ReportFile, reports: Sequence[ReportFile], seen: dict[int, str]
) -> None:
    shard = report.report.shard
    if shard is None:
        return
    first, first_shard = next((r, s) for r in reports if (s := r.report.shard) is not None)
    if shard.total != first_shard.total:
        raise GtaUsageError(
            f"{report.label}: shard {shard.spec} is not of the split {first.label} is a shard "
            f"of ({first_shard.spec}); merge the shards of one {OPT_SHARD}=K/N split"
        )
    if shard.index in seen:
        raise GtaUsageError(
            f"{report.label}: shard {shard.spec} is given twice (also {seen[shard.index]}); "
            "pass each shard's report once"
        )
    seen[shard.index] = report.label


def check_same_run(reports: Sequence[ReportFile]) -> None:
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
                f"{report.label}: {field} is {show_value(theirs)}, {first.label} has "
                f"{show_value(mine)}: these reports are not shards of one run"
            )
        _check_shard_of_split(report, reports, seen_shards)
        for case in report.cases:
            case_id = case.id
            if case_id in seen_cases:
                raise GtaUsageError(
                    f"{report.label}: case {case_id} is also in {seen_cases[case_id]}: each case "
                    f"must come from one report (did two jobs run the same {OPT_SHARD}?)"
                )
            seen_cases[case_id] = report.label


def coverage_warnings(reports: Sequence[ReportFile], command: str = OPT_MERGE) -> list[str]:
    """Shards missing from a split, and shards' cases without a result.

    ``command`` is the option the shards were given to (``--gta-compare`` merges them too).
    """
    warnings = []
    shards = [s for r in reports if (s := r.report.shard) is not None]
    if shards:
        total = shards[0].total
        given = {s.index for s in shards}
        # Never one entry per shard: a report may claim a split of 10**11 shards.
        missing = list(itertools.islice((i for i in range(1, total + 1) if i not in given), 20))
        if missing:
            names = ", ".join(f"{i}/{total}" for i in missing)
            if total - len(given) > len(missing):
                names += f" and {total - len(given) - len(missing):,} more"
            warnings.append(
                f"shard(s) {names} not given to {command}: the merged report covers only the "
                "cases of the shards given"
            )
    for report in reports:
        shard = report.report.shard
        if shard is None:
            continue
        have = {Case.format_id(c.mode, c.query_id) for c in report.cases}
        lost = [c for c in shard.cases if c not in have]
        if lost:
            warnings.append(
                f"{report.label} ({report.name}): {len(lost)} of its cases have no result "
                f"({', '.join(lost[:5])}{', ...' if len(lost) > 5 else ''})"
            )
    return warnings


def _merged_selection(reports: Sequence[ReportFile], dataset: Dataset) -> dict[str, Any]:
    """``ids`` and ``limit`` of the whole run: the shards' own when they agree."""
    settings = [r.report.settings for r in reports]
    out: dict[str, Any] = {"shard": None}
    limits = [s.limit for s in settings]
    if all(v == limits[0] for v in limits):
        out["limit"] = limits[0]
    else:
        out["limit"] = None if None in limits else max(v for v in limits if v is not None)
    ids = [s.ids for s in settings]
    if all(v == ids[0] for v in ids):
        out["ids"] = ids[0]
    elif None in ids:
        out["ids"] = None
    else:
        wanted = {str(i) for v in ids for i in v or []}
        out["ids"] = [q for q in dataset.queries if q in wanted]
    return out


def merged_identity(reports: Sequence[ReportFile]) -> tuple[Identity, list[str]]:
    """The run's identity: the first shard's, from the earliest start to the latest finish.

    Shards of one run share their label and commit; where they do not (a job re-run on a later
    commit), the first shard's are kept and a note says what differed. A top-level ``label``
    (a hook may rename a run) wins over the identity's own.
    """
    identities = [r.report.run_identity() for r in reports]
    starts = [t for i in identities if (t := i.started_at) and parse_utc(t) is not None]
    ends = [t for i in identities if (t := i.finished_at) and parse_utc(t) is not None]
    merged = identities[0].model_copy(
        update={
            "started_at": min(starts, key=_when, default=None),
            "finished_at": max(ends, key=_when, default=None),
        }
    )
    notes = []
    for what, values in (
        ("labels", [i.label for i in identities]),
        ("commits", [git.commit if (git := i.git) else None for i in identities]),
    ):
        distinct = list(dict.fromkeys(str(v) for v in values))
        if len(distinct) > 1:
            notes.append(
                f"the merged reports have different {what} ({', '.join(distinct[:5])}): the "
                f"merged report keeps {reports[0].label}'s"
            )
    return merged, notes


def _when(text: str) -> datetime:
    """A checked date's moment (the reader refused a report with an unreadable one)."""
    return parse_utc(text) or datetime.min.replace(tzinfo=timezone.utc)


def merge_reports(
    reports: Sequence[ReportFile],
    dataset: Dataset,
    warnings: Sequence[str] = (),
    *,
    confidence: float = 0.95,
    samples: int = 2000,
) -> RunReport:
    """The report of the run the shards are parts of (see module docstring)."""
    check_same_run(reports)
    known = set(dataset.queries)
    for report in reports:
        for case in report.cases:
            if case.query_id not in known:
                raise GtaUsageError(
                    f"{report.label}: case {Case.format_id(case.mode, case.query_id)} is not a "
                    f"query of {dataset.root}"
                )
    first = reports[0].report
    notes: list[str] = []
    for report in reports:
        for note in report.report.notes:
            if not note.startswith(REGENERATED_NOTES):
                notes.append(note)
    identity, identity_notes = merged_identity(reports)
    notes += identity_notes
    stopped = [f"{r.name}: {r.report.stopped}" for r in reports if r.report.stopped]
    timings = {
        f"{r.name}: {process}": values
        for r in reports
        for process, values in (r.report.timings or {}).items()
    }
    cases = [case for r in reports for case in r.cases]
    # Shards of an earlier version kept no verdict: judged again, as the case ran.
    complete_verdicts(cases, dataset, first.settings.sim_threshold)
    merged = build_report(
        model=first.model,
        protocol=first.protocol,
        dataset=dataset,
        data_source=first.dataset.source,
        settings=first.settings.model_copy(update=_merged_selection(reports, dataset)),
        cases=cases,
        warnings=[*notes, *warnings],
        leaderboard=first.leaderboard,
        stopped="; ".join(stopped) or None,
        interrupted=any(r.report.interrupted for r in reports),
        timings=timings or None,
        confidence=confidence,
        samples=samples,
        identity=identity,
    )
    merged.notes = list(dict.fromkeys(merged.notes))
    costs = [r.report.usage.cost_usd for r in reports]
    merged.usage.cost_usd = None if None in costs else sum(c for c in costs if c is not None)
    merged.merged = MergeInfo(
        reports=[r.label for r in reports],
        shards=sorted(
            (s.spec for r in reports if (s := r.report.shard) is not None),
            key=lambda spec: int(spec.partition("/")[0]),
        ),
    )
    return merged


class _Case(Protocol):
    @property
    def id(self) -> str: ...


C = TypeVar("C", bound=_Case)
R = TypeVar("R")


def shard_cases(
    reports: Sequence[tuple[str, R]],
    same: Sequence[tuple[str, Callable[[R], object]]],
    cases: Callable[[R], Sequence[C]],
    unit: str,
) -> list[C]:
    """Every case of one run's shard reports once, in their order.

    For any benchmark but GTA-Atomic, whose merge rebuilds its metrics from the dataset.
    ``same`` names what every shard of one run shares and how to read it; ``unit`` is what a
    case is called (``task``).

    Raises:
        GtaUsageError: a report of another run (the field and both files named), or a case in
            two reports.
    """
    first_label, first = reports[0]
    for label, other in reports[1:]:
        for name, read in same:
            if read(other) != read(first):
                raise GtaUsageError(
                    f"{OPT_MERGE}: {label} is not a shard of the run of {first_label}: its "
                    f"{name} is {read(other)!r}, not {read(first)!r}"
                )
    found: dict[str, C] = {}
    where: dict[str, str] = {}
    for label, report in reports:
        for case in cases(report):
            if case.id in found:
                raise GtaUsageError(
                    f"{OPT_MERGE}: the {unit} {case.id} is in {where[case.id]} and in {label}: "
                    "merge each shard's report once"
                )
            found[case.id], where[case.id] = case, label
    return list(found.values())
