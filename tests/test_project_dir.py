"""A GTA run started inside a project: its tests and configuration never join silently (issue 38).

A project directory as a CI job has it: a ``pytest.ini``, a ``conftest.py`` whose hook marks
every item it sees, and a test of its own. Run from there, a GTA run names what joined it (the
header: the ini and conftest files; the collection line and the report's notes: the project's
tests), ``--gta-only`` (ini ``gta_only``) deselects the project's tests through pytest's own
deselection, and ``--noconftest`` keeps the project's hooks off the GTA cases.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_gta.session.project_tests import SHOWN_NODES, listed, project_note
from tests.helpers.gta_run import FAST_SIM, ORACLE, SAMPLE_DATA, XDIST, gta

RUN = (ORACLE, SAMPLE_DATA, FAST_SIM, "--gta-ids=0,1")
GTA_CASES = ["gta::test_query[e2e-0]", "gta::test_query[e2e-1]"]
MARKING_CONFTEST = """
import pytest

def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.project)
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\nmarkers =\n    project: the project's own mark\n")
    pytester.makeconftest(MARKING_CONFTEST)
    pytester.makepyfile(test_app="def test_app():\n    assert 1 + 1 == 2\n")
    return pytester


def junit_cases(path: Path) -> list[str]:
    return [
        f"{case.get('classname')}::{case.get('name')}" for case in ET.parse(path).iter("testcase")
    ]


@pytest.mark.parametrize("dist", [(), XDIST], ids=["no-xdist", "xdist"])
def test_a_projects_test_is_named_in_the_header_the_collection_and_the_report(project, dist):
    run = gta(project, *RUN, *dist, "--junitxml=gta.xml")
    assert run.ret == 0, run.output[-3000:]
    run.result.stdout.fnmatch_lines(
        [
            f"gta: the pytest configuration of this directory applies to the GTA run: ini file "
            f"{project.path}/tox.ini; conftest files {project.path}/conftest.py (their options, "
            "hooks and fixtures act on the GTA cases; --noconftest and -c /dev/null leave them "
            "out)",
        ]
    )
    note = (
        "this GTA run also collected 1 test(s) that are not GTA cases, from the directory pytest "
        "runs in: test_app.py::test_app; they run beside the GTA cases and appear in its JUnit "
        "XML; --gta-only deselects them"
    )
    assert run.report["notes"].count(note) == 1
    run.result.stdout.fnmatch_lines([f"note: {note}"])
    if not dist:  # xdist's controller collects nothing: its workers say it in the report
        run.result.stdout.fnmatch_lines([f"gta: WARNING: {note}"])
    assert sorted(junit_cases(project.path / "gta.xml")) == sorted(
        [*GTA_CASES, "test_app::test_app"]
    )
    assert run.report["outcomes"]["passed"] == 2  # the GTA cases; the project's is not one


@pytest.mark.parametrize("how", [("--gta-only",), ("-o", "gta_only=true")], ids=["flag", "ini"])
def test_gta_only_deselects_the_projects_tests(project, how):
    run = gta(project, *RUN, *how, "--junitxml=gta.xml")
    assert run.ret == 0, run.output[-3000:]
    run.result.stdout.fnmatch_lines(
        [
            "collected 3 items / 1 deselected / 2 selected",
            "gta: --gta-only deselected 1 test(s) that are not GTA cases: test_app.py::test_app",
        ]
    )
    run.result.assert_outcomes(passed=2, deselected=1)
    assert sorted(junit_cases(project.path / "gta.xml")) == GTA_CASES
    assert run.report["notes"] == [
        "--gta-only deselected 1 test(s) that are not GTA cases: test_app.py::test_app"
    ]


def test_gta_only_with_xdist_runs_the_gta_cases_alone(project):
    run = gta(project, *RUN, *XDIST, "--gta-only", "--junitxml=gta.xml")
    assert run.ret == 0, run.output[-3000:]
    assert sorted(junit_cases(project.path / "gta.xml")) == GTA_CASES
    assert run.report["notes"] == [
        "--gta-only deselected 1 test(s) that are not GTA cases: test_app.py::test_app"
    ]


def test_the_projects_hook_marks_the_gta_cases_unless_noconftest(project):
    """What the header warns of: the project's hook acts on GTA cases; --noconftest stops it."""
    marked = gta(project, *RUN, "--gta-only", "-m", "not project")
    assert marked.ret == pytest.ExitCode.NO_TESTS_COLLECTED, marked.output[-3000:]
    clean = gta(project, *RUN, "--gta-only", "--noconftest", "-m", "not project")
    assert clean.ret == 0, clean.output[-3000:]
    clean.result.assert_outcomes(passed=2, deselected=1)
    assert "conftest files" not in clean.output
    clean.result.stdout.fnmatch_lines(["gta: the pytest configuration * ini file */tox.ini *"])


def test_an_empty_configuration_leaves_the_header_quiet(project):
    """``-c /dev/null --noconftest``: nothing of the project's configuration applies."""
    run = gta(project, *RUN, "--gta-only", "--noconftest", "-c", "/dev/null")
    assert run.ret == 0, run.output[-3000:]
    assert "pytest configuration of this directory" not in run.output
    run.result.assert_outcomes(passed=2, deselected=1)


def test_a_gta_run_outside_any_project_says_nothing_of_one(pytester):
    run = gta(pytester, *RUN)
    assert run.ret == 0, run.output[-3000:]
    assert "pytest configuration of this directory" not in run.output
    assert "not GTA cases" not in run.output
    assert run.report["notes"] == []


def test_a_project_run_without_gta_options_is_left_alone(project):
    result = project.runpytest()
    result.assert_outcomes(passed=1)
    assert "gta:" not in result.stdout.str()


def test_long_lists_of_nodes_are_cut():
    nodes = [f"tests/test_{n}.py::test_it" for n in range(SHOWN_NODES + 3)]
    assert listed(nodes).endswith(f"tests/test_{SHOWN_NODES - 1}.py::test_it and 3 more")
    assert project_note(nodes, deselected=True).startswith(
        f"--gta-only deselected {SHOWN_NODES + 3} test(s) that are not GTA cases: "
    )
