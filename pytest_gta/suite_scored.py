"""A scored benchmark's cases: collected on the data of a third party's task family.

Node ids read ``gta::test_case[ID]``. The case is produced and scored in the ``gta_result``
fixture (setup), so a harness failure is pytest's *error*; the test fails when the benchmark
says the case did not pass.
"""

from __future__ import annotations

import pytest

from pytest_gta.results.scored import ScoredCase


def test_case(gta_result: ScoredCase) -> None:
    """The case passed (the message is the benchmark's)."""
    if not gta_result.passed:
        pytest.fail(f"{gta_result.id}: {gta_result.message or 'not passed'}", pytrace=False)
