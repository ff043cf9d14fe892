"""The robustness axis as tables: what the terminal, markdown and the HTML page show of it.

Written once for every benchmark's report: a run's ``robustness`` section
(:class:`~pytest_gta.results.robustness.RobustnessSection`) is the same for GTA-Atomic and
GTA-Workflow, and so are its tables.
"""

from __future__ import annotations

from collections.abc import Iterable

from pytest_gta.faults import summarize
from pytest_gta.results.case import CaseResult
from pytest_gta.results.robustness import RobustnessSection

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


def robustness_of(spec: str, cases: Iterable[CaseResult]) -> RobustnessSection:
    """The run's ``robustness`` section from its cases (a merge of shards sums them alike)."""
    entries = [
        ([entry.to_json_value() for entry in case.faults], case.outcome == "passed")
        for case in cases
        if case.faults is not None
    ]
    return RobustnessSection.model_validate(summarize(spec, entries).to_json())
