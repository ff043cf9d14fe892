"""Per-case results stay readable to every other reporter (pytest-html, a project's plugin).

The controller's collector only reads the reports; the detail payload rides on the setup
report's ``user_properties`` (where the case ran) and never on the item, so JUnit XML, which
writes the item's properties, stays flat.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from tests.helpers.gta_run import FAST_SIM

OTHER_REPORTERS = """
import json

import pytest

SEEN = []


def _record(who, report):
    if report.nodeid.startswith("gta::"):
        props = dict(report.user_properties)
        # The case's JSON under "case" (pytest_gta.results.CaseResult's), as the controller
        # reads it.
        detail = props.get("gta_detail")
        detail = json.loads(detail)["case"] if isinstance(detail, str) else None
        SEEN.append(
            {
                "who": who,
                "nodeid": report.nodeid,
                "when": report.when,
                "names": sorted(props),
                "verdict": detail["verdict"] if isinstance(detail, dict) else None,
            }
        )


class Early:
    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report):
        _record("early", report)


class Late:
    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report):
        _record("late", report)


def pytest_configure(config):
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(Early(), "early")
        config.pluginmanager.register(Late(), "late")


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    if hasattr(config, "workerinput"):
        return
    left = [n for n in ("gta-collector", "gta-xdist") if config.pluginmanager.get_plugin(n)]
    with open("seen.json", "w") as out:
        json.dump({"seen": SEEN, "left_registered": left}, out)
"""


def test_other_reporters_see_every_property_and_the_detail(pytester, dist_args):
    pytester.makeconftest(OTHER_REPORTERS)
    result = pytester.runpytest(
        "--gta-data=sample",
        "--gta-model=oracle",
        "--gta-mode=step,e2e",
        "--gta-ids=0,3",
        "--junitxml=gta.xml",
        "--gta-report=gta.json",
        FAST_SIM,
        *dist_args,
    )
    result.assert_outcomes(passed=4)
    seen = json.loads((pytester.path / "seen.json").read_text())
    assert seen["left_registered"] == []
    by_phase = {(s["who"], s["nodeid"], s["when"]): s for s in seen["seen"]}
    nodeids = {s["nodeid"] for s in seen["seen"]}
    assert nodeids == {f"gta::test_query[{m}-{q}]" for m in ("step", "e2e") for q in ("0", "3")}
    for nodeid in nodeids:
        for when in ("setup", "call", "teardown"):
            early, late = by_phase["early", nodeid, when], by_phase["late", nodeid, when]
            # Nothing rewrites the report between the first and the last reporter.
            assert early["names"] == late["names"]
            assert {"gta_query_id", "gta_mode", "gta_score", "gta_passed"} <= set(late["names"])
            has_detail = "gta_detail" in late["names"]
            assert has_detail == (when == "setup"), (nodeid, when)
        verdict = by_phase["late", nodeid, "setup"]["verdict"]
        assert verdict["passed"] is True
        assert verdict["score"] == 1.0
    # The collector read the same detail: the report has each case's steps.
    report = json.loads((pytester.path / "gta.json").read_text())
    assert all(case["steps"] for case in report["cases"])
    assert all("gta_detail" not in case["properties"] for case in report["cases"])
    names = {p.get("name") for p in ET.parse(pytester.path / "gta.xml").getroot().iter("property")}
    assert "gta_score" in names
    assert "gta_detail" not in names
