"""The GTA-Workflow cases: collected instead of :mod:`pytest_gta.suite` on a Workflow dataset.

Node ids read ``gta::test_workflow[workflow-3]``. The task is produced and judged in the
fixture (setup), so a harness failure is pytest's *error*; the test fails when the root score
is below ``--gta-judge-threshold`` and errors when the judge failed.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_gta.results.workflow import WorkflowCase
from pytest_gta.session.workflow_session import WorkflowSession, current


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize ``gta_task`` with the selected tasks."""
    if "gta_task" in metafunc.fixturenames:
        metafunc.parametrize("gta_task", current(metafunc.config).workflow_params())


@pytest.fixture
def gta_workflow_result(request: pytest.FixtureRequest, gta_task: Any) -> WorkflowCase:
    """The judged task (produced and judged during setup)."""
    session: WorkflowSession = current(request.config)
    case = session.run_task(request, gta_task)
    if case.judge_error is not None:
        pytest.fail(f"{case.id}: {case.message}", pytrace=False)
    return case


def test_workflow(gta_workflow_result: WorkflowCase) -> None:
    """The deliverable reaches the threshold (the message lists the checkpoints that did not).

    A deliverable with no file and an empty answer fails whatever the judge gave (the message
    says so). Failed as the atomic cases fail: the message alone, without the case's repr.
    """
    case = gta_workflow_result
    if not case.passed:
        pytest.fail(f"{case.id}: {case.message}", pytrace=False)
