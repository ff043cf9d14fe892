"""JUnit XML of a report's cases, as pytest's ``junitxml`` writes a run's.

``pytest --gta-merge`` runs no test, so pytest's own writer has nothing to write; this one
writes, from the merged report, what the run of all cases would have: one ``testcase`` per case
named after its node id, its flat ``gta_*`` properties, and a ``failure``, ``error`` or
``skipped`` element carrying the case's message. Dashboards that read the shards' XML read this.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from pytest_gta.report.table import interval_of, metric_value, sound_counts
from pytest_gta.results.base import Scalar
from pytest_gta.results.report import E2EMetrics, RunReport, StepMetrics

#: Characters XML 1.0 cannot hold; written as ``#xNN``, as pytest's ``bin_xml_escape`` does.
_ILLEGAL = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(value: object) -> str:
    """``str(value)`` with the characters XML cannot hold escaped (ESC becomes ``#x1B``)."""
    return _ILLEGAL.sub(lambda m: f"#x{ord(m.group()):02X}", str(value))


#: The element pytest's junitxml writes for each outcome that is not a pass.
OUTCOME_ELEMENTS = {"failed": "failure", "error": "error", "skipped": "skipped"}


def junit_names(nodeid: str) -> tuple[str, str]:
    """(classname, name) of a node id, as ``junitxml``'s ``mangle_test_address`` makes them."""
    path, _, rest = nodeid.partition("::")
    names = [path.replace("/", ".").removesuffix(".py"), *(rest.split("::") if rest else [])]
    # junitxml also strips the parametrization from all but the last part; ours has none.
    return ".".join(names[:-1]), names[-1]


def suite_properties(report: RunReport) -> list[tuple[str, Scalar]]:
    """``gta_<mode>_<metric>`` with ``_ci_low``/``_ci_high``, ``_sound``, ``gta_gates_passed``.

    First what identifies the run: ``gta_label`` and, inside a git repository, ``gta_commit``
    (with ``gta_commit_dirty``), so a dashboard that keeps the XML of every nightly run can
    tell them apart; the cases' own properties stay as pytest writes them.
    """
    out: list[tuple[str, Scalar]] = [("gta_label", report.label)]
    git = report.identity.git
    if git is not None:
        out.append(("gta_commit", git.commit))
        if git.dirty is not None:
            out.append(("gta_commit_dirty", str(git.dirty).lower()))
    for mode, metrics in report.metrics.items():
        intervals = report.metrics_ci.get(mode)
        # In the report's order of the metrics (its JSON's), not the tables' order of columns.
        for metric in type(metrics).model_fields:
            value = metric_value(metrics, metric)
            if value is None:
                continue
            out.append((f"gta_{mode}_{metric}", value))
            interval = interval_of(intervals, metric)
            if interval is not None and interval.low is not None:
                out.append((f"gta_{mode}_{metric}_ci_low", interval.low))
                out.append((f"gta_{mode}_{metric}_ci_high", interval.high))
    for mode, rate in report.pass_rate.items():
        out.append((f"gta_{mode}_pass_rate", rate))
    for mode, sound in report.metrics_sound.items() if report.metrics_sound else []:
        # Only where the erratum left a query out (else they are the official numbers).
        if sound_counts(report, mode) is None or not isinstance(sound, StepMetrics | E2EMetrics):
            continue
        for metric in type(sound).model_fields:
            value = metric_value(sound, metric)
            if value is not None:
                out.append((f"gta_{mode}_{metric}_sound", value))
    if report.gates is not None:
        out.append(("gta_gates_passed", str(report.gates.passed).lower()))
    return out


def junit_xml(report: RunReport, suite_name: str = "pytest") -> str:
    """The XML text for ``report``'s cases (see module docstring)."""
    cases = report.cases
    counts = dict.fromkeys(OUTCOME_ELEMENTS, 0)
    total_time = 0.0
    root = ET.Element("testsuites", name="pytest tests")
    suite = ET.SubElement(root, "testsuite", name=suite_name)
    shared = suite_properties(report)
    if shared:
        holder = ET.SubElement(suite, "properties")
        for key, value in shared:
            ET.SubElement(holder, "property", name=key, value=xml_text(value))
    for case in cases:
        classname, name = junit_names(xml_text(case.nodeid or case.id))
        seconds = case.duration if case.duration is not None else 0.0
        total_time += seconds
        testcase = ET.SubElement(
            suite, "testcase", classname=classname, name=name, time=f"{seconds:.3f}"
        )
        if case.properties:
            holder = ET.SubElement(testcase, "properties")
            for key, value in case.properties.items():
                if value is not None:
                    ET.SubElement(holder, "property", name=xml_text(key), value=xml_text(value))
        element = OUTCOME_ELEMENTS.get(case.outcome)
        if element is None:
            continue
        counts[case.outcome] += 1
        message = xml_text(case.message)
        attributes = {"message": message}
        if element == "skipped":
            attributes["type"] = "pytest.skip"
        ET.SubElement(testcase, element, attributes).text = message
    suite.set("errors", str(counts["error"]))
    suite.set("failures", str(counts["failed"]))
    suite.set("skipped", str(counts["skipped"]))
    suite.set("tests", str(len(cases)))
    suite.set("time", f"{total_time:.3f}")
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
