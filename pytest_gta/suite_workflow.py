"""The GTA-Workflow cases: collected instead of :mod:`pytest_gta.suite` on a Workflow dataset.

Node ids read ``gta::test_workflow[workflow-3]``. The task is produced and judged in the
``gta_result`` fixture (setup), so a harness failure is pytest's *error*; the test fails when
the root score is below ``--gta-judge-threshold`` and errors when the judge failed.
"""

from __future__ import annotations

import pytest

from pytest_gta.results.workflow import WorkflowCase


def test_workflow(gta_result: WorkflowCase) -> None:
    """The deliverable reaches the threshold (the message lists the checkpoints that did not).

    A deliverable with no file and an empty answer fails whatever the judge gave (the message
    says so). Failed as the atomic cases fail: the message alone, without the case's repr.
    """
    case = gta_result
    if not case.passed:
        pytest.fail(f"{case.id}: {case.message}", pytrace=False)
