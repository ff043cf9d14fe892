"""The robustness axis as tables: what the terminal, markdown and the HTML page show of it.

Written once for every benchmark's report: a run's ``robustness`` section
(:class:`~pytest_gta.results.robustness.RobustnessSection`) is the same for GTA-Atomic and
GTA-Workflow, and so are its tables.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pytest_gta.faults import ANSWERED, FAULT_KINDS
from pytest_gta.report.page import esc
from pytest_gta.results.comparison import Comparison
from pytest_gta.results.robustness import FaultEntry, RobustnessSection

#: (title, headers, rows), as :func:`pytest_gta.report.table.sections` has its tables.
Table = tuple[str, list[str], list[list[str]]]


def robustness_tables(section: RobustnessSection | None) -> list[Table]:
    """The faults the run's cases met, and how the producer recovered (none: no faults)."""
    if section is None:
        return []
    recovery = "-" if section.recovery is None else f"{section.recovery * 100:.2f}"
    tables: list[Table] = [
        (
            f"Robustness, tool faults {section.spec}",
            ["faulted calls", "faulted cases", "recovered cases", "recovery", "retried calls"],
            [
                [
                    str(section.calls_faulted),
                    str(section.faulted_cases),
                    str(section.recovered_cases),
                    recovery,
                    str(section.retried_calls),
                ]
            ],
        )
    ]
    if section.calls_faulted:
        rows = [[f"kind {kind}", str(n)] for kind, n in section.by_kind.items()]
        rows += [[f"tool {tool}", str(n)] for tool, n in section.by_tool.items()]
        tables.append(("Faulted calls by kind and tool", ["", "calls"], rows))
    return tables


def robustness_of(
    spec: str, cases: Iterable[tuple[list[FaultEntry] | None, bool]]
) -> RobustnessSection:
    """The run's ``robustness`` section from its cases, each as (its faults, whether it passed).

    Every benchmark's report sums its cases here, and a merge of shards sums them alike.
    """
    by_kind: dict[str, int] = {}
    by_tool: dict[str, int] = {}
    calls = faulted = recovered = retried = 0
    for faults, passed in cases:
        for entry in faults or ():
            by_kind[entry.fault] = by_kind.get(entry.fault, 0) + 1
            by_tool[entry.tool] = by_tool.get(entry.tool, 0) + 1
            retried += entry.next == entry.tool
        calls += len(faults or ())
        if faults:
            faulted += 1
            recovered += passed
    return RobustnessSection(
        spec=spec,
        calls_faulted=calls,
        by_kind={kind: by_kind[kind] for kind in FAULT_KINDS if kind in by_kind},
        by_tool=dict(sorted(by_tool.items())),
        faulted_cases=faulted,
        recovered_cases=recovered,
        recovery=round(recovered / faulted, 6) if faulted else None,
        retried_calls=retried,
    )


def robustness_value(section: RobustnessSection | None, metric: str) -> float | None:
    """A robustness metric as a gate reads it, in percent (``None``: not measured).

    ``recovery`` is unmeasured without faults, or when no case met one: its floor then fails,
    as a gate that cannot be checked must not pass.
    """
    if section is None or metric != "recovery" or section.recovery is None:
        return None
    return section.recovery * 100


def faults_html(faults: list[FaultEntry] | None) -> str:
    """A case's faulted calls for its drill-down: which call, which fault, what came next."""
    if not faults:
        return ""
    items = "".join(
        f"<li>call {f.call} to <b>{esc(f.tool)}</b>"
        + ("" if f.step is None else f" (step {f.step + 1})")
        + f": <b>{esc(f.fault)}</b>; then "
        f"{esc(_next_said(f))}</li>"
        for f in faults
    )
    return (
        '<section class="faults"><h4>Tool faults injected (the producer saw only the tool '
        f"fail)</h4><ul>{items}</ul></section>"
    )


def _next_said(fault: FaultEntry) -> str:
    if fault.next is None:
        return "it stopped without an answer"
    if fault.next == ANSWERED:
        return "it answered"
    if fault.next == fault.tool:
        return f"it retried {fault.tool}"
    return f"it called {fault.next}"


def faulted_steps(faults: list[FaultEntry] | None) -> dict[int, str]:
    """{step index: fault} of a case's faulted calls found in its steps, for its transcript."""
    return {f.step: f.fault for f in faults or () if f.step is not None}


def faults_json(faults: list[FaultEntry] | None) -> list[Any] | None:
    """A case's faulted calls as an Inspect sample's metadata keeps them."""
    return None if faults is None else [f.to_json_value() for f in faults]


def compared_robustness(comparison: Comparison) -> list[Table]:
    """Runs side by side by their tool faults and ablations: each metric's robustness curve.

    Shown when a run of the comparison injected faults or left tools out. Each end-to-end
    metric is given with its difference from the first run that did neither (the clean one),
    so a clean run and runs at rising fault rates read as one curve per metric.
    """
    runs = comparison.runs
    if not any(r.settings.tool_faults or r.settings.tools_left_out for r in runs):
        return []
    clean = next(
        (r for r in runs if not r.settings.tool_faults and not r.settings.tools_left_out), None
    )
    keys = [key for key, _ in _CURVE]
    rows = []
    for run in runs:
        metrics = run.metrics.get("e2e")
        base = clean.metrics.get("e2e") if clean is not None else None
        cells = []
        for key in keys:
            value = getattr(metrics, key, None) if metrics is not None else None
            drop = getattr(base, key, None) if base is not None and run is not clean else None
            said = "n/a" if value is None else f"{value:.2f}"
            if value is not None and drop is not None:
                said += f" ({value - drop:+.2f})"
            cells.append(said)
        section = run.robustness
        recovery = None if section is None else section.recovery
        rows.append(
            [
                run.label,
                run.settings.tool_faults or "none",
                ", ".join(run.settings.tools_left_out or []) or "none",
                *cells,
                "-" if section is None else str(section.calls_faulted),
                "-" if recovery is None else f"{recovery * 100:.2f}",
            ]
        )
    where = f"against {clean.label}" if clean is not None else "no clean run to compare with"
    return [
        (
            f"Robustness: tool faults and ablations (end-to-end percent; difference {where})",
            [
                "run",
                "tool faults",
                "tools left out",
                *(name for _, name in _CURVE),
                "faulted calls",
                "recovery",
            ],
            rows,
        )
    ]


#: The end-to-end metrics a robustness curve follows, with their column names.
_CURVE = (("ans_acc", "AnsAcc"), ("p_f1", "P F1"), ("o_f1", "O F1"), ("l_f1", "L F1"))
