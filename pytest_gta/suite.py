"""The GTA cases, for users with no test file of their own.

pytest-gta collects this module automatically when ``--gta-model`` is given and no collected
test requests ``gta_case``; its node ids read ``gta::test_query[e2e-17]``.
"""

from __future__ import annotations

from pytest_gta.run.runner import CaseRun


def test_query(gta_result: CaseRun) -> None:
    """The query is solved (see the failure message for what diverged)."""
    gta_result.check()
